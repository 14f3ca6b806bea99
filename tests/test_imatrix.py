"""Importance matrix files (gguf_schema.tools.imatrix): both forms llama.cpp writes, read into the
weights llama-quantize passes to ggml, and every way such a file can be malformed. The files
are written here, with our own writer (GGUF) or byte by byte (the legacy .dat)."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

import gguf_schema
from gguf_schema.errors import GGUFError, GGUFFormatError, GGUFTruncatedError
from gguf_schema.tensors import quantize
from gguf_schema.tools.imatrix import load_imatrix, tensor_weights

from .test_golden import golden

META = {
    "general.type": "imatrix",
    "imatrix.datasets": ["calibration.txt"],
    "imatrix.chunk_count": np.uint32(10),
    "imatrix.chunk_size": np.uint32(512),
}


def imatrix_gguf(
    entries: dict[str, tuple[np.ndarray, np.ndarray]], metadata: dict | None = None, extra: dict | None = None
) -> bytes:
    """A GGUF imatrix as llama-imatrix lays it out: NAME.in_sum2 of ggml shape (ne0, n_mat) and
    NAME.counts of (1, n_mat), float32 (numpy shapes reversed)."""
    tensors = {}
    for name, (sums, counts) in entries.items():
        tensors[f"{name}.in_sum2"] = np.asarray(sums, np.float32)
        tensors[f"{name}.counts"] = np.asarray(counts, np.float32).reshape(-1, 1)
    tensors.update(extra or {})
    buf = io.BytesIO()
    gguf_schema.save(buf, META if metadata is None else metadata, tensors)
    return buf.getvalue()


def legacy_dat(entries: list[tuple[bytes, int, np.ndarray]], trailer: bool = True) -> bytes:
    """A legacy imatrix .dat: count, then name length, name, ncall, value count, float32 values."""
    out = [struct.pack("<i", len(entries))]
    for name, ncall, values in entries:
        v = np.asarray(values, "<f4")
        out += [struct.pack("<i", len(name)), name, struct.pack("<ii", ncall, v.size), v.tobytes()]
    if trailer:  # chunk count and dataset name
        out += [struct.pack("<ii", 7, 8), b"wiki.txt"]
    return b"".join(out)


# ---------------------------------------------------------------------------------- GGUF form


def test_gguf_weights_are_sums_over_counts_per_matrix():
    dense = np.arange(1, 9, dtype=np.float32).reshape(1, 8) * 3
    experts = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    data = imatrix_gguf(
        {
            "blk.0.attn_q.weight": (dense, [3.0]),
            "blk.0.ffn_up_exps.weight": (experts, [2.0, 0.0, 4.0]),  # expert 1 never saw input
            "blk.1.ffn_down.weight": (np.full((2, 3), 6.0), [4.0]),  # one count for two matrices
        },
        extra={"blk.0.attn_q.weight.in_sum": np.ones((1, 8), np.float32)},
    )  # activation sums: ignored
    w = load_imatrix(data)
    assert list(w) == ["blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight", "blk.1.ffn_down.weight"]
    assert all(v.dtype == np.float32 and v.ndim == 1 for v in w.values())
    assert w["blk.0.attn_q.weight"].tolist() == list(range(1, 9))
    assert w["blk.0.ffn_up_exps.weight"].tolist() == [0.5, 1.0, 1.5, 2.0, 1, 1, 1, 1, 2.25, 2.5, 2.75, 3.0]
    assert w["blk.1.ffn_down.weight"].tolist() == [1.5] * 6
    sums = np.float32([1.0, 10.0, 1e-3])
    assert np.array_equal(load_imatrix(imatrix_gguf({"t": (sums[None], [3.0])}))["t"], sums / np.float32(3))


def test_gguf_imatrix_from_a_path_gives_the_same(tmp_path):
    data = imatrix_gguf({"w": (np.full((1, 4), 2.0), [2.0])})
    path = tmp_path / "imatrix.gguf"
    path.write_bytes(data)
    for source in (path, str(path), data, bytearray(data), memoryview(data)):
        assert load_imatrix(source)["w"].tolist() == [1.0] * 4


def test_loaded_weights_reproduce_ggmls_importance_quantization():
    # an imatrix file whose weights are the golden vectors' imatrix (sums 64 times larger,
    # exactly): quantizing with what load_imatrix returns gives ggml's q_imatrix bytes, also
    # when the rows are two "experts" of a 3-D tensor with their own counts
    g = golden("Q4_K")
    w, x = g["imatrix"], g["x"]
    data = imatrix_gguf({"w": (w[None] * 64, [64.0]), "experts": (np.stack([w * 64, w * 32]), [64.0, 32.0])})
    loaded = load_imatrix(data)
    assert np.array_equal(loaded["w"], w)
    for name in ("Q4_K", "Q5_K", "IQ4_XS", "Q4_0"):
        g = golden(name)
        assert np.array_equal(quantize(x, name, imatrix=loaded["w"]), g["q_imatrix"]), name
        per_expert = tensor_weights(loaded["experts"], (2, 24, 512))
        got = [quantize(x[24 * e : 24 * (e + 1)], name, imatrix=per_expert[e]) for e in (0, 1)]
        assert np.array_equal(np.concatenate(got), g["q_imatrix"]), name


def gguf_error(data: bytes) -> GGUFFormatError:
    with pytest.raises(GGUFFormatError) as info:
        load_imatrix(data)
    return info.value


def test_malformed_gguf_imatrix_files_are_format_errors():
    ok = {"w": (np.ones((1, 4)), [1.0])}
    e = gguf_error(imatrix_gguf(ok, metadata={"general.type": "imatrix"}))
    assert "not an imatrix file: metadata imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size missing" in str(e)
    e = gguf_error(imatrix_gguf({}, extra={"w.in_sum2": np.ones((1, 4), np.float32)}))
    assert "w.in_sum2 has no w.counts" in str(e) and e.offset is not None
    e = gguf_error(imatrix_gguf({}, extra={"w.counts": np.ones((1, 1), np.float32)}))
    assert "w.counts has no w.in_sum2" in str(e)
    e = gguf_error(imatrix_gguf({"w": (np.ones((1, 5)), [1.0, 2.0])}))
    assert "w: 5 sums do not split into 2 counts" in str(e) and e.value == 2
    e = gguf_error(
        imatrix_gguf({}, extra={"w.in_sum2": np.ones((1, 4), np.float16), "w.counts": np.ones((1, 1), np.float32)})
    )
    assert "w.in_sum2 is F16: imatrix tensors are F32" in str(e)
    e = gguf_error(imatrix_gguf({}))
    assert "imatrix file holds no tensors" in str(e)
    e = gguf_error(imatrix_gguf({}, extra={"output.weight": np.ones((2, 4), np.float32)}))
    assert "no .in_sum2 / .counts tensors" in str(e)
    with pytest.raises(GGUFError):  # a GGUF file that ends early: the reader's own error
        load_imatrix(imatrix_gguf(ok)[:40])


# ---------------------------------------------------------------------------------- legacy form


def test_legacy_dat_weights_are_values_over_ncall(tmp_path):
    data = legacy_dat(
        [
            (b"blk.0.attn_k.weight", 4, [4.0, 8.0, 2.0]),
            (b"blk.0.ffn_up_exps.weight", 0, [5.0, 6.0]),  # ncall 0: the values as they are
            (b"blk.0.attn_k.weight", 2, [1.0, 3.0]),  # a later entry of the same name replaces it
        ]
    )
    path = tmp_path / "imatrix.dat"
    path.write_bytes(data)
    for source in (data, path):
        w = load_imatrix(source)
        assert list(w) == ["blk.0.attn_k.weight", "blk.0.ffn_up_exps.weight"]
        assert w["blk.0.attn_k.weight"].tolist() == [0.5, 1.5]
        assert w["blk.0.ffn_up_exps.weight"].tolist() == [5.0, 6.0]
    v = np.float32([1.0, 0.1, 3e-7])
    got = load_imatrix(legacy_dat([(b"t", 3, v)], trailer=False))["t"]
    assert got.dtype == np.float32 and np.array_equal(got, v / np.float32(3))


def test_malformed_legacy_files_are_format_errors_with_offsets():
    good = legacy_dat([(b"abc", 1, [1.0, 2.0])])
    with pytest.raises(GGUFTruncatedError) as info:
        load_imatrix(good[:20])  # 4 + 4 + 3 + 4 + 4 = 19: the values start at 19
    assert info.value.offset == 19 and "entry 0 'abc' values needs 8 bytes, 1 left" in str(info.value)
    with pytest.raises(GGUFTruncatedError) as info:
        load_imatrix(b"\x01\x00")
    assert info.value.offset == 0
    cases = [
        (struct.pack("<i", 0), "holds no entries (count 0)", 0),
        (struct.pack("<i", -3), "holds no entries (count -3)", 0),
        (struct.pack("<ii", 1, -1), "entry 0: negative name length -1", 4),
        (struct.pack("<ii", 1, 2) + b"\xff\xfe" + struct.pack("<ii", 1, 1) + bytes(4), "name is not UTF-8", 8),
        (
            struct.pack("<ii", 1, 1) + b"a" + struct.pack("<ii", 1, 0),
            "entry 0 'a': value count 0, at least 1 expected",
            13,
        ),
    ]
    for data, message, offset in cases:
        e = gguf_error(data)
        assert message in str(e) and e.offset == offset, (message, str(e))


def test_wrong_kind_of_source():
    with pytest.raises(TypeError, match="load_imatrix takes a path or the file's bytes, got int"):
        load_imatrix(3)


# ---------------------------------------------------------------------------------- per tensor


def test_tensor_weights_split_experts_and_check_sizes():
    w = np.arange(8, dtype=np.float32)
    assert tensor_weights(w, (5, 8)) is w
    assert tensor_weights(w, (8,)) is w
    assert tensor_weights(w, (2, 3, 4)).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(
        ValueError, match=r"imatrix of 8 weights does not fit a tensor of shape \(3, 5, 4\): it needs 12"
    ):
        tensor_weights(w, (3, 5, 4))
    with pytest.raises(ValueError, match="go with 1-D to 3-D tensors"):
        tensor_weights(w, (1, 2, 2, 2))
