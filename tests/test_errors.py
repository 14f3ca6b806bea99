"""Bad input: a GGUFError naming offset, schema path and value; nothing else, no huge allocation."""

from __future__ import annotations

import io
import struct
import tracemalloc

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFError, GGUFFormatError, GGUFLimitError, GGUFTruncatedError, Limits, ValueType

from .helpers import open_variant


def _file(metadata, tensors=None, **kw) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, metadata, tensors or {}, **kw)
    return buf.getvalue()


def test_truncated_string_names_offset_path_and_value():
    data = _file({"general.name": "hello world"})
    string_at = 24 + 8 + 12 + 4
    with pytest.raises(GGUFTruncatedError) as info:
        gguf_schema.open(data[: string_at + 8 + 8])
    e = info.value
    assert (e.offset, e.path, e.value) == (string_at, "header -> metadata_kv[0] 'general.name' -> value -> string", 11)
    assert (
        str(e)
        == "string length 11 needs 11 bytes, 8 left (at offset 48, in header -> metadata_kv[0] 'general.name' -> value -> string)"
    )
    assert isinstance(e, EOFError) and isinstance(e, ValueError)


def test_error_inside_a_string_array_names_the_element():
    data = bytearray(_file({"tokenizer.ggml.tokens": ["a", "bb", "ccc"]}))
    # element [1]'s length: header 24, key 8+21, type 4, elem type 4, count 8, element [0] 8+1
    at = 24 + 8 + 21 + 4 + 4 + 8 + 9
    assert struct.unpack_from("<Q", data, at)[0] == 2
    struct.pack_into("<Q", data, at, 1000)
    with pytest.raises(GGUFTruncatedError) as info:
        gguf_schema.open(bytes(data))
    assert info.value.offset == at and info.value.value == 1000
    assert info.value.path == "header -> metadata_kv[0] 'tokenizer.ggml.tokens' -> value -> array[1]"


def test_unknown_value_type_is_a_format_error_with_the_value():
    data = bytearray(_file({"a.b": 5}))
    struct.pack_into("<I", data, 24 + 8 + 3, 13)
    with pytest.raises(GGUFFormatError) as info:
        gguf_schema.open(bytes(data))
    assert info.value.value == 13 and "unknown metadata value type 13 (valid: 0..12)" in str(info.value)
    assert info.value.path == "header -> metadata_kv[0] 'a.b' -> value_type"


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("what", ["kv_count", "tensor_count", "array_len", "string_len", "n_dims"])
def test_huge_counts_fail_before_allocating(what, fast):
    data = bytearray(_file({"x": [1, 2, 3], "s": "abc"}, {"t": np.ones(4, np.float32)}))
    with gguf_schema.open(bytes(data)) as f:
        info_at = f.tensors["t"].info_offset
    offsets = {
        "tensor_count": 8,
        "kv_count": 16,
        "array_len": 24 + 8 + 1 + 4 + 4,
        "string_len": 24 + 8 + 1 + 4 + 4 + 8 + 12 + 8 + 1 + 4,
        "n_dims": info_at + 8 + 1,
    }
    at = offsets[what]
    if what == "n_dims":
        struct.pack_into("<I", data, at, 2**32 - 1)
    else:
        struct.pack_into("<Q", data, at, 2**62)
    tracemalloc.start()
    with pytest.raises(GGUFError) as info:
        open_variant(bytes(data), fast=fast)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2**20, peak
    e = info.value
    expected = {  # (class, offset, path): the claim is refused where it is read
        "tensor_count": (GGUFTruncatedError, 85, "tensor_infos"),
        "kv_count": (GGUFTruncatedError, 24, "header -> metadata_kv"),
        "array_len": (GGUFTruncatedError, at + 8, "header -> metadata_kv[0] 'x' -> value -> array"),
        "string_len": (GGUFLimitError, at, "header -> metadata_kv[1] 's' -> value -> string"),  # over max_string_length
        "n_dims": (GGUFTruncatedError, at + 4, "tensor_infos[0] 't' -> dimensions"),
    }[what]
    assert (type(e), e.offset, e.path) == expected, e
    assert e.value == (2**32 - 1 if what == "n_dims" else 2**62)


def test_limits_are_configurable_and_named_in_the_error():
    data = _file({"tokenizer.ggml.tokens": ["x" * 30] * 100})
    with pytest.raises(GGUFLimitError) as info:
        gguf_schema.open(data, limits=Limits(max_array_length=10))
    assert str(info.value) == (
        "array of 100 elements exceeds max_array_length = 10 "
        "(at offset 69, in header -> metadata_kv[0] 'tokenizer.ggml.tokens' -> value -> array)"
    )
    with pytest.raises(GGUFLimitError) as info:
        gguf_schema.open(data, limits=Limits(max_string_length=25))
    assert str(info.value) == (
        "string of 30 bytes exceeds max_string_length = 25 "
        "(at offset 69, in header -> metadata_kv[0] 'tokenizer.ggml.tokens' -> value -> array[0])"
    )
    with gguf_schema.open(data, limits=Limits(max_string_length=30, max_array_length=100)) as f:
        assert len(f.metadata["tokenizer.ggml.tokens"]) == 100


def test_deep_nesting_is_bounded_in_both_variants():
    inner = gguf_schema.GGUFArray(ValueType.UINT8, np.array([1], np.uint8))
    for _ in range(200):
        inner = gguf_schema.GGUFArray(ValueType.ARRAY, [inner])
    data = _file({"deep": inner})
    with pytest.raises(GGUFLimitError, match="nested 33 deep exceed max_depth = 32"):
        gguf_schema.open(data)
    with pytest.raises(GGUFLimitError):
        open_variant(data, fast=False)
    with gguf_schema.open(data, limits=Limits(max_depth=500)) as f:
        assert f.fields["deep"].type == ValueType.ARRAY


def test_not_a_gguf_file():
    with pytest.raises(GGUFFormatError, match=r"not a GGUF file: magic b'PK\\x03\\x04'"):
        gguf_schema.open(b"PK\x03\x04" + bytes(60))
    with pytest.raises(GGUFTruncatedError):
        gguf_schema.open(b"")
    with pytest.raises(TypeError):
        gguf_schema.open(12345)  # type: ignore[arg-type]


def test_missing_path_is_an_os_error():
    with pytest.raises(FileNotFoundError):
        gguf_schema.open("/nonexistent/file.gguf")
