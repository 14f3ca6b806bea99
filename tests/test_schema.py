"""Every node of the schema: parse gives the value, build gives the bytes, in every byte order and version."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from construct import Container

from gguf_schema.errors import GGUFFormatError
from gguf_schema.format import boundary
from gguf_schema.format.fast import fast_schema
from gguf_schema.format.schema import align_offset, gguf_schema, sniff
from gguf_schema.format.types import ValueType
from gguf_schema.format.values import BoolByte, Field, GGUFArray
from gguf_schema.io.source import ByteReader

from .conftest import VOCAB_FILES, demo_bytes
from .helpers import schema_variant

VARIANTS = [(o, v, fast) for o in ("little", "big") for v in (1, 2, 3) for fast in (True, False)]


def roundtrip(node, data: bytes, obj, **ctx):
    """The construct idiom: parse(data) == obj and build(obj) == data."""
    parsed = node._parsereport(ByteReader(data), _ctx(**ctx), "test")
    assert _equal(parsed, obj), (parsed, obj)
    assert node.build(obj) == data


def _ctx(**kw):
    from construct import Container

    c = Container(limits=None, _depth=1, _parsing=True, _building=False, _sizing=False, **kw)
    c._params = c
    return c


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.asarray(a).dtype == np.asarray(b).dtype and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    return a == b


def fmt(order: str) -> str:
    return "<" if order == "little" else ">"


@pytest.mark.parametrize("order,version,fast", VARIANTS)
def test_gguf_string_t(order, version, fast):
    s = schema_variant(order, version, fast)
    n = "I" if version == 1 else "Q"
    roundtrip(s.gguf_string_t, struct.pack(fmt(order) + n, 6) + "日本".encode(), "日本")
    roundtrip(s.gguf_string_t, struct.pack(fmt(order) + n, 0), "")


@pytest.mark.parametrize("order,version,fast", VARIANTS)
def test_every_scalar_value_type(order, version, fast):
    s = schema_variant(order, version, fast)
    e = fmt(order)
    cases = [
        (ValueType.UINT8, struct.pack("B", 255), 255),
        (ValueType.INT8, struct.pack("b", -128), -128),
        (ValueType.UINT16, struct.pack(e + "H", 65535), 65535),
        (ValueType.INT16, struct.pack(e + "h", -2), -2),
        (ValueType.UINT32, struct.pack(e + "I", 2**32 - 1), 2**32 - 1),
        (ValueType.INT32, struct.pack(e + "i", -(2**31)), -(2**31)),
        (ValueType.FLOAT32, struct.pack(e + "f", 1.5), np.float32(1.5)),
        (ValueType.BOOL, b"\x01", True),
        (ValueType.BOOL, b"\x00", False),
        (ValueType.UINT64, struct.pack(e + "Q", 2**64 - 1), 2**64 - 1),
        (ValueType.INT64, struct.pack(e + "q", -(2**63)), -(2**63)),
        (ValueType.FLOAT64, struct.pack(e + "d", -0.0), np.float64(-0.0)),
    ]
    for vt, data, value in cases:
        node = s.gguf_metadata_value_t(lambda ctx, vt=vt: vt)
        roundtrip(node, data, value)


@pytest.mark.parametrize("order", ["little", "big"])
def test_signalling_nan_keeps_its_bits(order):
    s = fast_schema(order, 3)
    bits = (0x7F800001).to_bytes(4, order)
    node = s.gguf_metadata_value_t(lambda ctx: ValueType.FLOAT32)
    value = node.parse(bits)
    assert np.asarray(value).view(np.uint32) == 0x7F800001
    assert node.build(value) == bits


def test_bool_byte_other_than_0_1_is_kept():
    s = fast_schema("little", 3)
    node = s.gguf_metadata_value_t(lambda ctx: ValueType.BOOL)
    value = node.parse(b"\x02")
    assert value == BoolByte(2) and isinstance(value, BoolByte) and bool(value)
    assert node.build(value) == b"\x02"


@pytest.mark.parametrize("order,version,fast", VARIANTS)
def test_arrays_of_every_element_type(order, version, fast):
    s = schema_variant(order, version, fast)
    e = fmt(order)
    n = "I" if version == 1 else "Q"
    head = lambda vt, count: struct.pack(e + "I" + n, vt, count)  # noqa: E731
    roundtrip(
        s.gguf_array_t,
        head(ValueType.INT16, 3) + struct.pack(e + "3h", -1, 0, 7),
        GGUFArray(ValueType.INT16, np.array([-1, 0, 7], np.int16)),
    )
    roundtrip(
        s.gguf_array_t,
        head(ValueType.FLOAT32, 2) + struct.pack(e + "2f", 0.5, -2.0),
        GGUFArray(ValueType.FLOAT32, np.array([0.5, -2.0], np.float32)),
    )
    roundtrip(
        s.gguf_array_t,
        head(ValueType.BOOL, 3) + b"\x01\x00\x01",
        GGUFArray(ValueType.BOOL, np.array([True, False, True])),
    )
    strings = ["a", "", "é"]
    body = b"".join(struct.pack(e + n, len(x.encode())) + x.encode() for x in strings)
    roundtrip(s.gguf_array_t, head(ValueType.STRING, 3) + body, GGUFArray(ValueType.STRING, strings))
    roundtrip(s.gguf_array_t, head(ValueType.UINT64, 0), GGUFArray(ValueType.UINT64, np.zeros(0, np.uint64)))
    inner = head(ValueType.UINT8, 2) + b"\x05\x06"
    roundtrip(
        s.gguf_array_t,
        head(ValueType.ARRAY, 2) + inner + head(ValueType.STRING, 0),
        GGUFArray(
            ValueType.ARRAY, [GGUFArray(ValueType.UINT8, np.array([5, 6], np.uint8)), GGUFArray(ValueType.STRING, [])]
        ),
    )


@pytest.mark.parametrize("order,version,fast", VARIANTS)
def test_metadata_kv_and_tensor_info(order, version, fast):
    s = schema_variant(order, version, fast)
    e = fmt(order)
    n = "I" if version == 1 else "Q"
    kv = struct.pack(e + n, 3) + b"a.b" + struct.pack(e + "I", ValueType.UINT32) + struct.pack(e + "I", 7)
    parsed = s.gguf_metadata_kv_t.parse(kv)
    assert (parsed.key, parsed.value_type, parsed.value) == ("a.b", ValueType.UINT32, 7)
    assert s.gguf_metadata_kv_t.build(dict(key="a.b", value_type=ValueType.UINT32, value=7)) == kv
    ti = (
        struct.pack(e + n, 1)
        + b"w"
        + struct.pack(e + "I", 2)
        + struct.pack(e + n + n, 32, 4)
        + struct.pack(e + "IQ", 8, 64)
    )
    roundtrip(s.gguf_tensor_info_t, ti, dict(name="w", n_dimensions=2, dimensions=[32, 4], type=8, offset=64))


def test_spec_field_names_in_spec_order():
    s = fast_schema("little", 3)
    names = lambda node: [sc.name for sc in getattr(node, "subcon", node).subcons]  # noqa: E731
    assert names(s.gguf_metadata_kv_t) == ["key", "value_type", "value"]
    assert names(s.gguf_header_t) == ["magic", "version", "tensor_count", "metadata_kv_count", "metadata_kv"]
    assert names(s.gguf_tensor_info_t) == ["name", "n_dimensions", "dimensions", "type", "offset"]
    assert names(s.gguf_file_t) == ["header", "tensor_infos", "alignment", "_padding", "tensor_data"]
    assert names(s.gguf_string_t) == ["len", "string"]
    assert names(s.gguf_array_t) == ["type", "len", "array"]


def test_one_schema_per_variant_is_built_once():
    assert fast_schema("big", 2) is fast_schema("big", 2)
    assert gguf_schema("big", 2) is not fast_schema("big", 2)


@pytest.mark.parametrize(
    "head,expected",
    [
        (b"GGUF\x03\x00\x00\x00", ("little", 3)),
        (b"GGUF\x00\x00\x00\x03", ("big", 3)),
        (b"GGUF\x02\x00\x00\x00", ("little", 2)),
        (b"GGUF\x00\x00\x00\x01", ("big", 1)),
    ],
)
def test_sniff_detects_byte_order_by_the_version(head, expected):
    assert sniff(head) == expected


@pytest.mark.parametrize(
    "head,message",
    [
        (b"GGML\x03\x00\x00\x00", "not a GGUF file: magic b'GGML', expected b'GGUF' (at offset 0, in header.magic)"),
        (
            b"GGUF\x04\x00\x00\x00",
            "unsupported GGUF version 4 (this library reads 1, 2 and 3) (at offset 4, in header.version)",
        ),
        (
            b"GGUF\x00\x00\x00\x00",
            "unsupported GGUF version 0 (this library reads 1, 2 and 3) (at offset 4, in header.version)",
        ),
    ],
)
def test_sniff_rejects_with_offset_and_value(head, message):
    with pytest.raises(GGUFFormatError) as info:
        sniff(head)
    assert str(info.value) == message


def test_align_offset_is_the_spec_formula():
    assert [align_offset(x, 32) for x in (0, 1, 31, 32, 33)] == [0, 32, 32, 32, 64]
    assert [align_offset(x, 1) for x in (0, 7)] == [0, 7]


def _parse_values(data: bytes, fast: bool):
    order, version = sniff(data[:8])
    return boundary.parse(schema_variant(order, version, fast), data)


@pytest.mark.parametrize("path", VOCAB_FILES, ids=lambda p: p.name)
def test_fast_and_reference_variants_agree_on_real_files(path):
    data = path.read_bytes()
    a, b = _parse_values(data, True), _parse_values(data, False)
    assert len(a.header.metadata_kv) == len(b.header.metadata_kv)
    for x, y in zip(map(_kv, a.header.metadata_kv), map(_kv, b.header.metadata_kv), strict=True):
        assert x[:2] == y[:2]
        assert _same_value(x[2], y[2]), x[0]
    s_fast, s_ref = fast_schema("little", 3), gguf_schema("little", 3)
    assert _build(s_fast, a, data) == _build(s_ref, b, data) == data


@pytest.mark.parametrize("order,version", [("little", 3), ("big", 3), ("little", 1), ("big", 2)])
def test_fast_and_reference_variants_agree_on_generated_files(order, version):
    data = demo_bytes(order, version)
    a, b = _parse_values(data, True), _parse_values(data, False)
    for x, y in zip(map(_kv, a.header.metadata_kv), map(_kv, b.header.metadata_kv), strict=True):
        assert x[:2] == y[:2] and _same_value(x[2], y[2]), x[0]
    strip = lambda t: {k: v for k, v in t.items() if k != "_io"}  # noqa: E731
    assert [strip(t) for t in a.tensor_infos] == [strip(t) for t in b.tensor_infos]
    s_fast, s_ref = fast_schema(order, version), gguf_schema(order, version)
    assert _build(s_fast, a, data) == _build(s_ref, b, data) == data


def _kv(record) -> tuple:
    """(key, value type, value) of a parsed pair: a Field (the fast loop) or a container (the declared struct)."""
    return (
        (record.key, record.type, record.value)
        if isinstance(record, Field)
        else (record.key, record.value_type, record.value)
    )


def _same_value(a, b) -> bool:
    if isinstance(a, GGUFArray):
        return a == b  # element type, dtype and every bit
    return _equal(a, b) if isinstance(a, np.generic) else a == b and type(a) is type(b)


def _build(schema, parsed, data: bytes) -> bytes:
    obj = Container(
        header=parsed.header,
        tensor_infos=parsed.tensor_infos,
        _padding=parsed._padding,
        tensor_data=data[parsed.tensor_data.offset :],
    )
    out = io.BytesIO()
    boundary.build(schema.gguf_file_t, obj, out)
    return out.getvalue()


class CountingStream(io.BytesIO):
    """A file object that is not the reader's own buffer, counting the bytes read from it."""

    bytes_read = 0

    def read(self, n=-1):
        data = super().read(n)
        self.bytes_read += len(data)
        return data


def test_constructs_own_entry_points_read_a_foreign_stream_once():
    # parse_stream on an ordinary file object: the array nodes slice one buffer of it, not a copy per array
    data = VOCAB_FILES[0].read_bytes()
    stream = CountingStream(data)
    s = fast_schema("little", 3)
    parsed = s.gguf_file_t.parse_stream(stream)
    assert stream.bytes_read <= len(data) + 1024  # (an in-memory stream is sliced, not read)
    ours = boundary.parse(s, data)
    assert [kv.key for kv in parsed.header.metadata_kv] == [kv.key for kv in ours.header.metadata_kv]
    tokens = next(kv.value for kv in parsed.header.metadata_kv if kv.key == "tokenizer.ggml.tokens")
    assert tokens.items == next(kv.value for kv in ours.header.metadata_kv if kv.key == "tokenizer.ggml.tokens").items
    with open(VOCAB_FILES[0], "rb") as fh:  # a real file: mapped once
        assert len(s.gguf_file_t.parse_stream(fh).header.metadata_kv) == len(ours.header.metadata_kv)


def test_parsing_never_lowers_or_restores_the_recursion_limit():
    import sys
    import threading

    before = sys.getrecursionlimit()
    data = demo_bytes()
    errors = []

    def work():
        try:
            for _ in range(20):
                boundary.parse(fast_schema("little", 3), data)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sys.getrecursionlimit() == before  # the default limits fit the default recursion limit
