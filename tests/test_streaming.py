"""Writing and reading big tensors as streams (issue 28): a tensor given as pieces (an iterator, a callable, a
memmap, an array that is not contiguous) is written a piece at a time, to the same bytes as given whole; a
tensor of an open file is read a piece at a time, and the pages of a mapped file are released behind."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGMLType, GGUFBuildError, RawTensor
from gguf_schema.format.values import make_field
from gguf_schema.tensors import quantize
from gguf_schema.writer import PlannedTensor, plan_tensor, write_file


def _saved(tensors: dict, byte_order: str = "little") -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, {"general.architecture": "llama"}, tensors, byte_order=byte_order)
    return buf.getvalue()


def _pieces(raw: bytes, sizes: list[int]):
    """``raw`` cut at irregular places (pieces that end inside a block included)."""
    a = 0
    for n in sizes:
        yield raw[a : a + n]
        a += n
    yield raw[a:]


@pytest.mark.parametrize("byte_order", ["little", "big"])
def test_a_tensor_given_as_pieces_writes_the_bytes_of_the_whole(byte_order: str) -> None:
    w = np.sin(np.arange(4 * 512, dtype=np.float32)).reshape(4, 512)
    blocks = quantize(w, "Q4_K")  # 144-byte blocks: pieces of 7, 100, 500 ... bytes cut blocks
    f16 = w.astype(np.float16)
    whole = _saved({"q": RawTensor("Q4_K", (4, 512), blocks), "h": f16}, byte_order)
    as_iterator = _saved(
        {
            "q": RawTensor("Q4_K", (4, 512), _pieces(blocks.tobytes(), [7, 100, 500, 1])),
            "h": RawTensor("F16", (4, 512), iter(np.array_split(f16, 3))),
        },
        byte_order,
    )
    as_callable = _saved(
        {
            "q": RawTensor("Q4_K", (4, 512), lambda: _pieces(blocks.tobytes(), [1000])),
            "h": RawTensor("F16", (4, 512), lambda: (row for row in f16)),
        },
        byte_order,
    )
    assert as_iterator == whole and as_callable == whole
    with gguf_schema.open(whole) as f:
        assert np.array_equal(f.tensors["h"].data.astype(np.float16), f16)


def test_arrays_that_are_not_contiguous_and_memmaps_write_as_themselves(tmp_path: Path) -> None:
    a = np.arange(3 * 40 * 50, dtype=np.float32).reshape(3, 40, 50)
    strided = a[:, ::2, 1::3]  # neither C- nor F-contiguous
    src = tmp_path / "src.bin"
    a.tofile(src)
    mapped = np.memmap(src, np.float32, "r", shape=(3, 40, 50))
    out = _saved({"s": strided, "m": mapped, "t": a.T, "z": np.array(7.0, np.float32)})
    with gguf_schema.open(out) as f:
        assert np.array_equal(f.tensors["s"].data, strided) and np.array_equal(f.tensors["m"].data, a)
        assert np.array_equal(f.tensors["t"].data, a.T) and f.tensors["z"].data.tolist() == 7.0


def test_stream_errors_name_the_tensor_and_leave_no_file(tmp_path: Path) -> None:
    target = tmp_path / "m.gguf"
    cases = [
        (RawTensor("F32", (4,), [b"\0" * 8, b"\0" * 9]), "tensor data gave more than the 16 bytes it takes"),
        (RawTensor("F32", (4,), lambda: [b"\0" * 12]), "tensor data gave 12 bytes, 16 expected"),
        (
            RawTensor("F32", (4,), [b"\0" * 8, "text"]),
            "a piece of tensor data must be bytes-like or a numpy array, got str",
        ),
        (RawTensor("F32", (4,), 5), "RawTensor data must be bytes-like, a numpy array, an iterable of pieces"),
    ]
    for tensor, words in cases:
        with pytest.raises(GGUFBuildError, match=words) as e:
            gguf_schema.save(target, {"general.architecture": "llama"}, {"w": tensor})
        assert "tensor 'w'" in str(e.value)
        assert os.listdir(tmp_path) == []


def test_an_iterator_writes_once_and_a_callable_again() -> None:
    once = RawTensor("F32", (2,), iter([np.ones(2, np.float32)]))
    again = RawTensor("F32", (2,), lambda: [np.ones(2, np.float32)])
    first = _saved({"w": once, "v": again})
    assert _saved({"v": again, "w": np.ones(2, np.float32)}) == _saved(
        {"v": np.ones(2, np.float32), "w": np.ones(2, np.float32)}
    )
    with pytest.raises(
        GGUFBuildError,
        match="tensor data gave 0 bytes, 8 expected .an iterator gives its pieces once: if an earlier write consumed it, give a callable",
    ):
        _saved({"w": once})
    with gguf_schema.open(first) as f:
        assert f.tensors["w"].data.tolist() == [1.0, 1.0]


def test_the_one_assembler_takes_planned_tensors_from_any_source() -> None:
    # the low-level route: write_file with PlannedTensor records, each producing its bytes when written
    rows = [np.full(256, i, np.float16) for i in range(8)]
    planned = [
        PlannedTensor("blk.0.w", int(GGMLType.F16), (256, 8), 8 * 256 * 2, lambda: iter(rows)),
        plan_tensor("norm", np.ones(256, np.float32), "little"),
    ]
    buf = io.BytesIO()
    write_file(buf, [make_field("general.architecture", "llama")], planned, version=3, byte_order="little")
    with gguf_schema.open(buf.getvalue()) as f:
        assert f.tensors["blk.0.w"].data[7].tolist() == [7.0] * 256 and f.tensors["norm"].offset == f.data_offset + 4096


def _resident_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not line.startswith(("Rss", "Size")):
                inside = len(head) >= 6 and head[-1] == str(path)
            elif inside and line.startswith("Rss:"):
                total += int(head[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_reading_a_tensor_as_a_stream_releases_the_mapped_pages_behind(tmp_path: Path) -> None:
    path = tmp_path / "big.gguf"
    gguf_schema.save(path, {}, {"w": np.ones(12 * 2**20 // 4 * 4, np.float32)})  # 48 MiB
    with gguf_schema.open(path) as f:
        t = f.tensors["w"]
        seen = 0
        for piece in t.chunks(4 * 2**20):
            seen += memoryview(piece).nbytes
            assert _resident_kib(path) <= 2 * 4 * 1024 + 64  # about the piece in hand, never the file so far
        assert seen == t.nbytes
        whole = np.asarray(t.data)  # a view taken after: still valid, read again from the page cache
        assert whole.sum() == t.n_elements
        assert _resident_kib(path) >= 40 * 1024
        t.release_pages()
        assert _resident_kib(path) <= 64
        assert whole[-1] == 1.0  # touching it again maps it again
