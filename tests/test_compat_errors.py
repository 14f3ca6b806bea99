"""Under compat, a bad file raises our error that is also the builtin gguf-py raises for it, file by file.

The corpus is generated: every malformed case of :mod:`gguf_schema.testing.malformed` (one defect
each, ggml's edge cases included), the demo model cut at every integer slot of its layout (and one
byte into it), and each of its lengths, dims and header counts set past the end of the file and to their largest
value (not array counts: gguf-py loops over as many elements as they say), in both byte
orders and versions 2 and 3; arrays nested around the depth limit. gguf-py reads each file (every
field's parts and contents, every tensor's data) and so does ``compat.GGUFReader``; where both
raise, ours is a :class:`~gguf_schema.errors.GGUFError` and an instance of gguf-py's class. Where
only one of them raises, the case must be one ``docs/compat.md`` decides (:data:`DECIDED`).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from gguf_schema import compat
from gguf_schema.errors import GGUFError, GGUFFormatError
from gguf_schema.testing.fuzz import layout, nested_array_file
from gguf_schema.testing.malformed import malformed_cases, zero_elements_huge_dims_file

from .conftest import demo_bytes

gguf = pytest.importorskip("gguf")

#: what docs/compat.md decides where one reader raises and the other reads: case name -> who refuses
DECIDED = {
    "header_version_1": "gguf",  # v1 files: gguf-py refuses, we read
    "kv_invalid_utf8": "gguf",  # invalid UTF-8 in a string: gguf-py's contents() raises, ours keeps surrogate escapes
    "tensor_name_invalid_utf8": "gguf",
    "tensor_offset_max": "compat",  # gguf-py wraps 2^64-1 + data_offset modulo 2^64 and reads before the data section
    "tensor_n_dims_0_bf16": "gguf",  # gguf-py cannot index a BF16 tensor of no dimension; we read its two bytes
    "nested_33": "compat",  # deeper than our depth limit (32), within gguf-py's recursion
    "zero_bytes_short": "compat",  # an empty tensor whose offset lies past the end (ggml refuses)
}


def _touch(reader: Any) -> None:
    """Everything gguf-py's users read: each field's parts and contents, each tensor's data and info."""
    for f in reader.fields.values():
        f.parts, f.contents()
    for t in reader.tensors:
        t.data, t.field.parts


def _outcome(cls: Any, path: Path) -> BaseException | None:
    try:
        _touch(cls(str(path)))
    except (Exception, RecursionError) as e:  # gguf-py's: whatever it raises
        return e
    return None


def _cuts_and_lengths(data: bytes, tag: str) -> list[tuple[str, bytes]]:
    """The file cut at every integer slot (and one byte into it); each length, count and dim past the end."""
    out: list[tuple[str, bytes]] = []
    order = "<" if data[4:8] != b"\0\0\0\3" and data[4:8] != b"\0\0\0\2" else ">"
    for s in layout(data):
        out.append((f"{tag}_cut_{s.kind}_{s.offset}", data[: s.offset]))
        out.append((f"{tag}_cut_in_{s.kind}_{s.offset}", data[: s.offset + 1]))
        # (not the counts of arrays: counted past the end, an array of scalars has gguf-py append empty views for
        # as many elements as the count says, never raising; nested, its garbage inner counts do the same)
        if s.kind in ("length", "dim") or (s.kind == "count" and s.offset < 24):
            code = {4: "I", 8: "Q"}[s.size]
            for v in (len(data), (1 << (8 * s.size)) - 1):
                big = struct.pack(order + code, v)
                out.append((f"{tag}_{s.kind}_{s.offset}_{v}", data[: s.offset] + big + data[s.offset + s.size :]))
    return out


def corpus() -> list[tuple[str, bytes]]:
    files = [(c.name, c.data) for c in malformed_cases()]
    for order in ("little", "big"):
        for version in (2, 3):
            files += _cuts_and_lengths(demo_bytes(order, version), f"demo_{order}_v{version}")
    files += [("nested_33", nested_array_file(33)), ("nested_32", nested_array_file(32))]
    files += [("zero_elements_2^62x0", zero_elements_huge_dims_file((1 << 62, 0)))]
    return files


CORPUS = corpus()


def test_the_corpus_is_large_and_every_class_of_gguf_py_is_in_it(tmp_path):
    seen = set()
    for _name, data in CORPUS[:: max(1, len(CORPUS) // 150)]:
        path = tmp_path / "x.gguf"
        path.write_bytes(data)
        e = _outcome(gguf.GGUFReader, path)
        seen.add(type(e).__name__ if e is not None else None)
    assert len(CORPUS) > 600
    assert {"IndexError", "ValueError", None} <= seen


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # gguf-py adding 2^64-1 to an offset
@pytest.mark.parametrize("chunk", range(8))
def test_a_bad_file_raises_our_error_that_is_also_what_gguf_raises(tmp_path, chunk):
    mismatched = []
    for name, data in CORPUS[chunk::8]:
        path = tmp_path / "x.gguf"
        path.write_bytes(data)
        theirs = _outcome(gguf.GGUFReader, path)
        ours = _outcome(compat.GGUFReader, path)
        if ours is not None:
            assert isinstance(ours, GGUFError), (name, ours)
        decided = next((who for case, who in DECIDED.items() if name.startswith(case)), None)
        if theirs is not None and ours is not None:
            if not isinstance(ours, type(theirs)):
                mismatched.append((name, type(theirs).__name__, type(ours).__name__, str(ours)[:80]))
        elif theirs is not None:
            assert decided == "gguf" or isinstance(theirs, UnicodeDecodeError), (name, theirs)
        elif ours is not None:
            assert decided == "compat", (name, ours)
    assert not mismatched


def test_the_table_of_classes():
    from gguf_schema.compat import errors as E

    assert issubclass(E.CompatTruncatedError, IndexError) and issubclass(E.CompatTruncatedError, EOFError)
    assert issubclass(E.CompatDepthError, RecursionError) and issubclass(E.CompatDepthError, GGUFFormatError)
    assert issubclass(E.CompatDuplicateKeyError, KeyError) and issubclass(E.CompatShapeError, IndexError)
    assert all(issubclass(getattr(E, n), (ValueError, GGUFError)) for n in E.__all__ if n.startswith("Compat"))


def test_a_zero_element_tensor_numpy_cannot_shape_is_refused_at_open(tmp_path):
    for dims in ((1 << 62, 0), (1 << 32, 1 << 32, 0)):
        path = tmp_path / "z.gguf"
        path.write_bytes(zero_elements_huge_dims_file(dims))
        with pytest.raises(ValueError):  # gguf-py: numpy's, at open
            gguf.GGUFReader(str(path))
        with pytest.raises(GGUFFormatError, match="numpy cannot represent"):
            compat.GGUFReader(path)
    path.write_bytes(zero_elements_huge_dims_file((1 << 20, 0)))
    assert compat.GGUFReader(path).tensors[0].data.shape == gguf.GGUFReader(str(path)).tensors[0].data.shape


def test_deep_nesting_is_a_recursion_error_under_compat(tmp_path):
    # gguf-py recurses once per level of nesting and raises RecursionError past the interpreter's limit
    # (not run here: that deep, it can also overflow the C stack); ours stops at the depth limit
    path = tmp_path / "deep.gguf"
    path.write_bytes(nested_array_file(40))
    with pytest.raises(RecursionError) as e:
        compat.GGUFReader(path)
    assert isinstance(e.value, GGUFError) and e.value.offset is not None
