"""Lazy opening: string arrays stay undecoded until used, and everything else behaves the same."""

from __future__ import annotations

import gc
import io
import struct
import tracemalloc

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFTruncatedError
from gguf_schema.format.values import STRIDE, LazyStrings

from .conftest import VOCAB_FILES, demo_bytes


def test_lazy_and_eager_open_give_equal_fields(vocab_file):
    with gguf_schema.open(vocab_file, lazy=True) as lazy, gguf_schema.open(vocab_file) as eager:
        assert lazy.fields.records == eager.fields.records
        tokens = lazy.metadata["tokenizer.ggml.tokens"]
        assert isinstance(tokens, LazyStrings)
        assert tokens[len(tokens) // 2] == eager.metadata["tokenizer.ggml.tokens"][len(tokens) // 2]
        assert tokens[-1] == eager.metadata["tokenizer.ggml.tokens"][-1]


def test_lazy_file_rebuilds_byte_for_byte(vocab_file):
    out = io.BytesIO()
    with gguf_schema.open(vocab_file, lazy=True) as f:
        f.save(out)
    assert out.getvalue() == vocab_file.read_bytes()


def test_lazy_strings_rebuild_in_another_version_and_byte_order():
    with gguf_schema.open(demo_bytes(), lazy=True) as f:
        out = io.BytesIO()
        f.save(out, byte_order="big", version=1)
    with gguf_schema.open(out.getvalue()) as g, gguf_schema.open(demo_bytes()) as want:
        assert g.metadata["tokenizer.ggml.tokens"] == want.metadata["tokenizer.ggml.tokens"]


def test_indexing_decodes_one_string_from_the_nearest_mark():
    raw = b"".join(struct.pack("<Q", 2) + b"\xff\xfe" for _ in range(3)) + struct.pack("<Q", 1) + b"z"
    items = LazyStrings(raw, 4, "<Q")
    assert len(items) == 4 and list(items._marks) == [0, 39]  # string 0, and the end
    assert items[3] == "z" and items[-4].encode("utf-8", "surrogateescape") == b"\xff\xfe"
    with pytest.raises(IndexError):
        items[4]
    many = [f"t{i}" for i in range(STRIDE * 3 + 5)]
    raw = b"".join(struct.pack("<Q", len(t)) + t.encode() for t in many)
    items = LazyStrings(raw, len(many), "<Q")
    assert len(items._marks) == 5 and items[STRIDE * 2 + 7] == many[STRIDE * 2 + 7] and list(items) == many


def test_lazy_values_are_views_of_the_map_not_copies(tmp_path):
    p = tmp_path / "v.gguf"
    p.write_bytes(demo_bytes())
    with gguf_schema.open(p, lazy=True) as f:
        tokens = f.fields["tokenizer.ggml.tokens"].value.items
        scores = f.fields["tokenizer.ggml.scores"].value.items
        assert isinstance(tokens.raw, memoryview) and tokens.raw.readonly
        assert scores.base is not None and not scores.flags.writeable and not scores.flags.owndata
        want = list(tokens)
    assert list(tokens) == want  # still valid after the file is closed, as tensor views are


def test_truncated_string_array_fails_in_lazy_mode_too():
    data = demo_bytes()
    with gguf_schema.open(data) as f:
        at = f.fields["tokenizer.ggml.tokens"].offset
    with pytest.raises(GGUFTruncatedError) as info:
        gguf_schema.open(data[: at + 120], lazy=True)
    assert info.value.path.startswith("header -> metadata_kv[24] 'tokenizer.ggml.tokens' -> value -> array[")


def test_lazy_gemma_vocabulary(gemma):
    with gguf_schema.open(gemma, lazy=True) as f:
        tokens = f.metadata["tokenizer.ggml.tokens"]
        assert len(tokens) == 262144 and tokens[:3] == ["<pad>", "<eos>", "<bos>"]


def _garbage_after(action) -> list:
    """The objects only the cyclic GC would free after ``action()`` (run with the GC off)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        action()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_a_dropped_file_is_freed_without_the_cyclic_gc(tmp_path, lazy):
    p = tmp_path / "v.gguf"
    p.write_bytes(demo_bytes())

    def use_and_drop() -> None:
        f = gguf_schema.open(p, lazy=lazy)
        assert f.metadata["tokenizer.ggml.tokens"][1] and f.tensors and f.fields
        f.close()

    use_and_drop()  # first use: imports, caches
    garbage = _garbage_after(use_and_drop)
    # what is left for the GC is construct's parameter container of the parse, which refers to itself
    # (limits and flags, nothing parsed): no file, field, tensor, string list or view of the map
    assert {type(o).__name__ for o in garbage} <= {"Container"} and len(garbage) <= 2


def test_views_stay_valid_after_the_file_is_dropped(tmp_path):
    p = tmp_path / "v.gguf"
    p.write_bytes(demo_bytes())
    with gguf_schema.open(p) as eager:
        want_tokens, name = list(eager.metadata["tokenizer.ggml.tokens"]), next(iter(eager.tensors))
        want_data = eager.tensors[name].data.copy()
    gc.disable()
    try:
        f = gguf_schema.open(p, lazy=True)
        tokens, data = f.metadata["tokenizer.ggml.tokens"], f.tensors[name].data
        f.close()
        del f
        assert list(tokens) == want_tokens and tokens[-1] == want_tokens[-1]
        assert np.array_equal(data, want_data)
    finally:
        gc.enable()


def test_opens_in_a_loop_without_the_gc_peak_no_higher_than_one():
    """Eager opens of the largest vocabulary with the GC off: each file's strings are freed when it is dropped."""
    path = max(VOCAB_FILES, key=lambda p: p.stat().st_size)
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        gguf_schema.open(path).close()
        one = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            f = gguf_schema.open(path)
            f.close()
            del f
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    assert one > 5e6  # 102,400 decoded tokens and as many merges
    assert peak < one * 1.1 and current - base < 100_000
