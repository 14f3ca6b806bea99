"""Hostile and damaged files cannot hurt the reader; interrupted writes lose nothing.

- A file cut at any byte gives a GGUFTruncatedError (or opens, when the cut is past the tensor infos).
- A count or length larger than the bytes left fails before anything is allocated.
- Resource limits are configurable and their defaults accept every real file.
- A write interrupted at any point leaves the original file and no temporary file.
- Saving over a file that is open for reading is safe: old views keep the old bytes.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFError, GGUFLimitError, GGUFTruncatedError, Limits
from gguf_schema.durable import atomic_replace
from gguf_schema.format.types import ValueType
from gguf_schema.testing.fuzz import layout, nested_array_file, trimmed_copy

from .conftest import VOCAB_FILES, demo_bytes, gemma_path
from .helpers import open_variant, read_reference


def _bounds(data: bytes) -> tuple[int, int]:
    with gguf_schema.open(data) as f:
        return f.metadata_end, f.data_offset


def _assert_cut_behaves(data: bytes, cut: int, metadata_end: int, fast: bool) -> None:
    piece = data[:cut]
    if cut < metadata_end:
        with pytest.raises(GGUFTruncatedError) as e:
            open_variant(piece, fast=fast)
        assert e.value.offset is not None and e.value.offset <= cut
        return
    with open_variant(piece, fast=fast) as f:  # the cut is in padding or tensor data: metadata is whole
        assert f.file_size == cut
        for t in f.tensor_list:
            if t.offset + t.nbytes <= cut:
                assert t.data.nbytes == t.nbytes
            else:
                with pytest.raises(GGUFTruncatedError):
                    t.data


def _boundaries(data: bytes) -> set[int]:
    """Offsets around every tensor's start and end."""
    with gguf_schema.open(data) as f:
        return {c for t in f.tensor_list for edge in (t.offset, t.offset + t.nbytes) for c in range(edge - 2, edge + 3)}


@pytest.mark.parametrize("order,version", [("little", 3), ("big", 3), ("little", 2), ("little", 1), ("big", 1)])
def test_demo_file_cut_at_every_offset(order, version):
    """Every byte with the schema as shipped; with the reference variant at every byte of the header,
    metadata and tensor infos and around every tensor (past the infos both variants run the same code).
    A cut before the end of the tensor infos is a GGUFTruncatedError naming an offset at or before the
    cut; a later cut opens, and exactly the tensors that run past it fail on ``.data``."""
    data = demo_bytes(order, version)
    metadata_end, data_offset = _bounds(data)
    for cut in range(len(data)):
        _assert_cut_behaves(data, cut, metadata_end, fast=True)
    for cut in sorted(set(range(data_offset + 1)) | _boundaries(data)):
        if cut < len(data):
            _assert_cut_behaves(data, cut, metadata_end, fast=False)


VOCAB_SAMPLE = [
    p
    for p in VOCAB_FILES
    if p.name in ("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf")
]


@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("path", VOCAB_SAMPLE, ids=[p.name for p in VOCAB_SAMPLE])
def test_vocab_file_cut_at_every_offset(path, order):
    """A real vocabulary of each tokenizer model (arrays cut to 16 items: the same keys, types and kinds of
    strings), in both byte orders, cut at every byte, with both variants."""
    data = trimmed_copy(path, max_items=16)
    if order == "big":
        with gguf_schema.open(data) as f:
            out = io.BytesIO()
            f.save(out, byte_order="big")
        data = out.getvalue()
    metadata_end, _ = _bounds(data)
    for fast in (True, False):
        for cut in range(len(data)):
            _assert_cut_behaves(data, cut, metadata_end, fast)


def test_full_vocab_file_cut_at_every_field_boundary():
    """The whole real file: every byte of its first 2 KB and every byte around each length, count and type field."""
    data = VOCAB_FILES[0].read_bytes()
    metadata_end, _ = _bounds(data)
    cuts = set(range(2048))
    for s in layout(data):
        cuts.update(range(max(0, s.offset - 1), s.offset + s.size + 1))
    cuts.update(range(metadata_end - 16, len(data)))
    for cut in sorted(c for c in cuts if c < len(data)):
        _assert_cut_behaves(data, cut, metadata_end, fast=True)


# ----------------------------------------------------------------------- claimed sizes never allocate


def _traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _patched(data: bytes, kind: str, value: int, nth: int = 0) -> bytes:
    slot = [s for s in layout(data) if s.kind == kind][nth]
    buf = bytearray(data)
    order = "big" if data[4:6] == b"\x00\x00" else "little"
    buf[slot.offset : slot.offset + slot.size] = value.to_bytes(slot.size, order)
    return bytes(buf)


def _small_file(order: str = "little", version: int = 3) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(
        buf,
        {
            "general.architecture": "llama",
            "t.tokens": ["a", "bb", "ccc"],
            "t.scores": np.ones(3, np.float32),
            "t.nested": [[1, 2], [3]],
        },
        {"w": np.ones((2, 4), np.float32)},
        byte_order=order,
        version=version,
    )
    return buf.getvalue()


CLAIMS = [
    ("tensor count", "count", 0),
    ("metadata count", "count", 1),
    ("key length", "length", 0),
    ("string value length", "length", 1),
    ("array length (strings)", "count", 2),
    ("array length (float32)", "count", 3),
    ("array length (arrays)", "count", 4),
    ("n_dims", "ndims", 0),
    ("dimension", "dim", 0),
    ("tensor offset", "toffset", 0),
]


@pytest.mark.parametrize("order,version", [("little", 3), ("big", 3), ("little", 1)])
@pytest.mark.parametrize("what,kind,nth", CLAIMS, ids=[c[0] for c in CLAIMS])
def test_huge_claims_fail_before_allocating(what, kind, nth, order, version):
    data = _small_file(order, version)
    value = 2**60 if version > 1 or kind in ("toffset",) else 2**32 - 1
    if kind == "ndims":
        value = 2**32 - 1
    hostile = _patched(data, kind, value, nth)

    def run():
        for fast in (True, False):
            try:
                with open_variant(hostile, fast=fast) as f:
                    for t in f.tensor_list:
                        with contextlib.suppress(GGUFError):
                            t.data
            except GGUFError:
                pass

    peak = _traced_peak(run)
    assert peak < 2**20, f"{what} = {value} made the reader allocate {peak:,} bytes"


def test_a_file_claiming_2_to_the_60_elements_is_refused_cheaply():
    data = _patched(_small_file(), "count", 2**60, 3)  # the float32 array

    def refuse() -> None:
        with pytest.raises(GGUFTruncatedError):
            gguf_schema.open(data)

    peak = _traced_peak(refuse)
    assert peak < 2**20
    with pytest.raises(GGUFTruncatedError) as e:
        gguf_schema.open(data)
    assert e.value.value == 2**60 and "t.scores" in str(e.value)


# ----------------------------------------------------------------------- limits


def test_default_limits_are_the_documented_ones():
    assert Limits() == Limits(
        max_string_length=2**30,
        max_key_length=2**16,
        max_tensor_name_length=2**16,
        max_array_length=2**30,
        max_depth=32,
        max_keys=2**24,
        max_tensors=2**24,
        max_dims=16,
    )


def test_default_limits_accept_every_real_file(vocab_file):
    # (the reference variant reads every real file too: test_schema.py compares the two on each)
    for fast in (True,):
        with open_variant(vocab_file, limits=Limits(), fast=fast) as f:
            assert len(f.metadata["tokenizer.ggml.tokens"]) > 30_000


def test_default_limits_accept_the_real_model():
    path = gemma_path()
    if path is None:
        pytest.skip("gemma-3-270m is not installed")
    with gguf_schema.open(path, limits=Limits()) as f:
        assert len(f.tensors) == 236 and len(f.metadata["tokenizer.ggml.tokens"]) == 262_144


def _file_with(**metadata) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, metadata)
    return buf.getvalue()


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_max_string_length_is_enforced(fast):
    data = _file_with(s="x" * 100, tokens=["y" * 50])
    with open_variant(data, limits=Limits(max_string_length=100), fast=fast) as f:
        assert f.metadata["s"] == "x" * 100
    with pytest.raises(GGUFLimitError) as e:
        open_variant(data, limits=Limits(max_string_length=99), fast=fast)
    assert e.value.value == 100
    with pytest.raises(GGUFLimitError):
        open_variant(data, limits=Limits(max_string_length=49, max_array_length=10), fast=fast)


def test_max_array_length_is_enforced():
    data = _file_with(a=[1, 2, 3])
    with gguf_schema.open(data, limits=Limits(max_array_length=3)) as f:
        assert f.metadata["a"].tolist() == [1, 2, 3]
    with pytest.raises(GGUFLimitError) as e:
        gguf_schema.open(data, limits=Limits(max_array_length=2))
    assert e.value.value == 3


def test_reference_variant_enforces_max_array_length():
    with pytest.raises(GGUFLimitError):
        read_reference(_file_with(a=[1, 2, 3]), limits=Limits(max_array_length=2))


def test_max_depth_is_enforced():
    with gguf_schema.open(nested_array_file(32)) as f:  # the default: 32 arrays nested in each other
        depth, v = 0, f.fields["deep"].value
        while True:
            depth += 1
            if v.type != ValueType.ARRAY:
                break
            v = v.items[0]
        assert depth == 32
    with pytest.raises(GGUFLimitError) as e:
        gguf_schema.open(nested_array_file(33))
    assert e.value.value == 33
    with gguf_schema.open(nested_array_file(4), limits=Limits(max_depth=4)):
        pass
    with pytest.raises(GGUFLimitError):
        gguf_schema.open(nested_array_file(5), limits=Limits(max_depth=4))


def test_reference_variant_enforces_max_depth():
    with pytest.raises(GGUFLimitError):
        open_variant(nested_array_file(65), fast=False)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("order", ["little", "big"])
def test_absurd_nesting_is_a_limit_error_not_a_recursion_error(fast, order):
    for depth in (1000, 100_000):
        with pytest.raises(GGUFLimitError):
            open_variant(nested_array_file(depth, byte_order=order), fast=fast, limits=Limits(max_depth=10**6))


# ----------------------------------------------------------------------- interrupted writes


def _original(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "model.gguf"
    data = demo_bytes()
    path.write_bytes(data)
    return path, data


class _Boom(Exception):
    pass


def test_atomic_replace_interrupted_at_every_point_keeps_the_original(tmp_path):
    path, original = _original(tmp_path)
    new = demo_bytes("big")
    for n in list(range(0, 64)) + list(range(64, len(new), 97)) + [len(new)]:

        def write(stream, n=n):
            stream.write(new[:n])
            raise _Boom(n)

        with pytest.raises(_Boom):
            atomic_replace(path, write)
        assert path.read_bytes() == original
        assert sorted(os.listdir(tmp_path)) == ["model.gguf"]


def _truncated_source(tmp_path: Path) -> gguf_schema.GGUFFile:
    """An open file whose tensors run past its end: reading their data raises mid-write."""
    data = demo_bytes()
    _metadata_end, data_offset = _bounds(data)
    src = tmp_path / "src" / "cut.gguf"
    src.parent.mkdir()
    src.write_bytes(data[: data_offset + 600])
    return gguf_schema.open(src)


@pytest.mark.parametrize("position", ["first", "middle", "last"])
def test_save_failing_mid_stream_keeps_the_original(tmp_path, position):
    path, original = _original(tmp_path)
    with _truncated_source(tmp_path) as broken:
        bad = [t for t in broken.tensor_list if t.offset + t.nbytes > broken.file_size]
        assert bad
        good = {"a": np.arange(1000, dtype=np.float32), "b": np.ones(77, np.float16)}
        tensors = {
            "first": {"x": bad[0], **good},
            "middle": {"a": good["a"], "x": bad[0], "b": good["b"]},
            "last": {**good, "x": bad[-1]},
        }[position]
        with pytest.raises(GGUFTruncatedError):
            gguf_schema.save(path, {"general.architecture": "llama"}, tensors)
    assert path.read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["model.gguf", "src"]


def test_in_place_save_of_a_damaged_file_with_a_new_byte_order_keeps_it(tmp_path):
    with _truncated_source(tmp_path) as f:
        before = Path(f.name).read_bytes()
        f.set("general.name", "edited")
        with pytest.raises(GGUFTruncatedError):
            f.save(f.name, byte_order="big")  # re-lays tensors out: the missing bytes are found mid-write
    assert Path(f.name).read_bytes() == before
    assert os.listdir(Path(f.name).parent) == ["cut.gguf"]


class _FailingTarget(io.RawIOBase):
    """A writable target that accepts ``limit`` bytes and then raises OSError (a full disk)."""

    def __init__(self, limit: int):
        self.limit, self.written = limit, 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        n = memoryview(b).nbytes
        if self.written + n > self.limit:
            raise OSError(28, "No space left on device")
        self.written += n
        return n


def test_a_failing_file_object_target_surfaces_its_error():
    """A target that fails at any point makes save() raise its own OSError (never a silent partial file)."""
    data = demo_bytes()
    with gguf_schema.open(data) as f:
        for limit in (0, 10, 500, len(data) - 1):
            target = _FailingTarget(limit)
            with pytest.raises(OSError) as e:
                f.save(target)
            assert e.value.errno == 28
            assert target.written <= limit
        complete = _FailingTarget(len(data))
        f.save(complete)
        assert complete.written == len(data)


# ----------------------------------------------------------------------- editing a file that is open


def test_saving_over_an_open_file_keeps_old_views_valid(tmp_path):
    path, _ = _original(tmp_path)
    with gguf_schema.open(path) as f:
        weights = f.tensors["token_embd.weight"].data
        before = weights.copy()
        raw_before = bytes(f.tensors["blk.0.ffn_up.weight"].raw())
        f.set("general.name", "renamed in place")
        f.save(path)  # replaces the inode: the map this file reads from still holds the old bytes
        assert np.array_equal(weights, before)
        assert bytes(f.tensors["blk.0.ffn_up.weight"].raw()) == raw_before
        assert f.metadata["general.name"] == "renamed in place"
    with gguf_schema.open(path) as g:
        assert g.metadata["general.name"] == "renamed in place"
        assert np.array_equal(g.tensors["token_embd.weight"].data, before)
        assert bytes(g.tensors["blk.0.ffn_up.weight"].raw()) == raw_before
    assert sorted(os.listdir(tmp_path)) == ["model.gguf"]


def test_saving_an_unedited_open_file_over_itself_is_byte_identical(tmp_path):
    path, original = _original(tmp_path)
    with gguf_schema.open(path) as f:
        f.save(path)
        f.save(path, byte_order="big")
    with gguf_schema.open(path) as g:
        assert g.byte_order == "big"
        g.save(path, byte_order="little")
    assert path.read_bytes() == original


def test_struct_error_cannot_escape_a_string_array_cut_inside_a_length():
    data = (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", 1)
        + b"k"
        + struct.pack("<IIQ", 9, 8, 2)
        + struct.pack("<Q", 10)
        + b"0123456789"
        + b"\x05\x00\x00\x00\x00\x00"
    )
    for fast in (True, False):
        with pytest.raises(GGUFTruncatedError):
            open_variant(data, fast=fast)


def test_lazy_open_enforces_max_string_length_in_string_arrays():
    tokens = ["a" * 10, "b" * 10, "c" * 40, "d" * 10]
    data = _file_with(tokens=tokens)
    # the strings together (70 bytes) fit: no second pass, nothing refused
    with gguf_schema.open(data, lazy=True, limits=Limits(max_string_length=70)) as f:
        assert list(f.metadata["tokens"]) == tokens
    # together they exceed 40 but none is longer than 40: accepted after the length pass
    with gguf_schema.open(data, lazy=True, limits=Limits(max_string_length=40)) as f:
        assert f.metadata["tokens"][2] == "c" * 40
    with pytest.raises(GGUFLimitError) as e:
        gguf_schema.open(data, lazy=True, limits=Limits(max_string_length=39))
    assert e.value.value == 40 and e.value.path.endswith("'tokens' -> value -> array[2]")
    assert "string of 40 bytes exceeds max_string_length = 39" in str(e.value)


@pytest.mark.parametrize("value, expected", [(0, 32), (64, 64)])
def test_alignment_stored_as_uint8(value, expected):
    # UINT8 is value type 0: a falsy type once sent alignment_of to the wrong attribute (fuzz find)
    from gguf_schema.format.values import make_field

    buf = io.BytesIO()
    gguf_schema.save(
        buf,
        {"general.alignment": make_field("general.alignment", value, ValueType.UINT8)},
        {"t": np.ones(4, np.float32)},
    )
    for fast in (True, False):
        with open_variant(buf.getvalue(), fast=fast) as f:
            assert f.alignment == expected
            assert f.tensors["t"].offset % expected == 0
            assert f.tensors["t"].data.tolist() == [1.0] * 4
