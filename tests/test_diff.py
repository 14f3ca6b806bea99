"""Differences between files: header, metadata by key and type, tensors by content."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np

import gguf_schema
from gguf_schema import Field, ValueType
from gguf_schema.shards import open_split
from gguf_schema.tools.convert import convert
from gguf_schema.tools.diff import Difference, describe_value, diff, tensor_sha256
from gguf_schema.tools.split import split

from .conftest import demo_bytes


def opened(metadata, tensors=None, **kw) -> gguf_schema.GGUFFile:
    buf = io.BytesIO()
    gguf_schema.save(buf, metadata, tensors or {}, **kw)
    return gguf_schema.open(buf.getvalue())


def test_identical_files_have_no_differences() -> None:
    assert diff(gguf_schema.open(demo_bytes()), gguf_schema.open(demo_bytes())) == []


def test_header_differences() -> None:
    a = opened({"k": 1}, version=3)
    b = opened({"k": 1, "general.alignment": np.uint32(64)}, version=2)
    assert [str(d) for d in diff(a, b)] == [
        "header ~ version: 3 -> 2",
        "header ~ alignment: 32 -> 64",
        "header ~ metadata keys: 1 -> 2",
        "metadata + general.alignment: UINT32 64",
    ]


def test_float_values_compare_bit_for_bit() -> None:
    nan1 = np.uint32(0x7FC00001).view(np.float32)
    nan2 = np.uint32(0x7FC00002).view(np.float32)
    assert diff(opened({"x": nan1}), opened({"x": nan1})) == []
    d = diff(opened({"x": nan1}), opened({"x": nan2}))
    assert d == [Difference("metadata", "~", "x", 'FLOAT32 "0x7fc00001" -> FLOAT32 "0x7fc00002"')]  # the NaNs' bits
    assert (
        diff(opened({"z": np.float32(0.0)}), opened({"z": np.float32(-0.0)}))[0].detail == "FLOAT32 0.0 -> FLOAT32 -0.0"
    )


def test_type_change_same_value_is_a_difference() -> None:
    d = diff(opened({"n": np.uint32(5)}), opened({"n": np.int64(5)}))
    assert [str(x) for x in d] == ["metadata ~ n: type UINT32 -> INT64: UINT32 5 -> INT64 5"]
    d = diff(opened({"a": np.array([1, 2], np.int32)}), opened({"a": np.array([1, 2], np.int64)}))
    assert d[0].detail.startswith("type ARRAY[INT32] -> ARRAY[INT64]")


def test_duplicates_and_order() -> None:
    a = opened([Field("a", ValueType.UINT8, 1), Field("b", ValueType.UINT8, 2)])
    b = opened([Field("b", ValueType.UINT8, 2), Field("a", ValueType.UINT8, 1), Field("a", ValueType.UINT8, 9)])
    assert [str(x) for x in diff(a, b)] == [
        "header ~ metadata keys: 2 -> 3",
        "metadata ~ a: stored 2 times in B",
        "metadata ~ (order): keys in another order from 'a' on",
    ]


def test_tensor_changes_by_hash_shape_and_type() -> None:
    base = {
        "same": np.ones(4, np.float32),
        "data": np.zeros(4, np.float32),
        "shape": np.zeros(4, np.float32),
        "gone": np.zeros(1, np.float32),
    }
    other = {
        "same": np.ones(4, np.float32),
        "data": np.full(4, 2, np.float32),
        "shape": np.zeros((2, 2), np.float32),
        "new": np.zeros(1, np.int8),
    }
    d = diff(opened({}, base), opened({}, other))
    sha = hashlib.sha256
    assert [str(x) for x in d] == [
        "tensor ~ data: data differs (sha256 "
        + sha(np.zeros(4, np.float32).tobytes()).hexdigest()[:16]
        + "... -> "
        + sha(np.full(4, 2, np.float32).tobytes()).hexdigest()[:16]
        + "...)",
        "tensor ~ shape: F32 [4] -> F32 [2, 2]",
        "tensor - gone: F32 [1]",
        "tensor + new: I8 [1]",
    ]
    assert (
        next(str(x) for x in diff(opened({}, base), opened({}, other), data=False))
        == "tensor ~ shape: F32 [4] -> F32 [2, 2]"
    )


def test_big_endian_copy_differs_only_in_byte_order(tmp_path: Path) -> None:
    le, be = tmp_path / "le.gguf", tmp_path / "be.gguf"
    le.write_bytes(demo_bytes())
    convert(le, be, byte_order="big")
    with gguf_schema.open(le) as a, gguf_schema.open(be) as b:
        assert [str(x) for x in diff(a, b)] == ["header ~ byte_order: little -> big"]
        assert tensor_sha256(a.tensors["blk.0.ffn_up.weight"]) == tensor_sha256(b.tensors["blk.0.ffn_up.weight"])


def test_a_split_model_compares_with_its_source(tmp_path: Path) -> None:
    src = tmp_path / "d.gguf"
    src.write_bytes(demo_bytes())
    paths = split(src, str(tmp_path / "d"), max_tensors=2)
    with open_split(paths[0]) as m, gguf_schema.open(src) as f:
        assert [str(x) for x in diff(f, m)] == [
            "header ~ metadata keys: 29 -> 33",
            "metadata + split.no: UINT16 0",
            "metadata + split.count: UINT16 3",
            "metadata + split.tensors.count: INT32 5",
            f"metadata + split.id: STRING {m.metadata['split.id']!r}",
        ]


def test_describe_value_abbreviates() -> None:
    f = gguf_schema.make_field("s", "x" * 100)
    assert describe_value(f) == "STRING '" + "x" * 56 + "...' (100 chars)"
    f = gguf_schema.make_field("t", ["a"] * 20)
    assert (
        describe_value(f) == 'ARRAY[STRING] (20 items) ["a", "a", "a", "a", "a", "a", "a", "a", ...]'
    )  # as dump shows it
