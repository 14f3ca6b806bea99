"""The offsets the model hands out (GGUFFile.pair_offsets / info_offsets) point at the stored bytes."""

from __future__ import annotations

import pytest

import gguf_schema
from gguf_schema.format.types import ValueType

from .conftest import VOCAB_FILES, demo_bytes


def _check(data: bytes, f: gguf_schema.GGUFFile) -> None:
    v = f.variant
    size, u32, u64 = v.struct("N"), v.struct("L"), v.struct("Q")
    for fld in f.fields.records:
        at = f.pair_offsets(fld)
        assert at is not None and at.start == fld.offset
        key = fld.key.encode("utf-8", "surrogateescape")
        assert size.unpack_from(data, at.start)[0] == len(key)
        assert data[at.key : at.key + len(key)] == key
        assert u32.unpack_from(data, at.value_type)[0] == fld.type
        if fld.type == ValueType.ARRAY:
            assert u32.unpack_from(data, at.value)[0] == fld.value.type
            n = len(fld.value.items)
            assert size.unpack_from(data, at.value + 4)[0] == n
            if n and fld.value.type == ValueType.STRING:
                last = fld.value.items[-1].encode("utf-8", "surrogateescape")
                i = at.item(fld.value, n - 1)
                assert (
                    size.unpack_from(data, i)[0] == len(last) and data[i + v.size_t : i + v.size_t + len(last)] == last
                )
            elif n and fld.value.type != ValueType.ARRAY:
                i = at.item(fld.value, n - 1)
                item = fld.value.type.numpy_dtype(v.byte_order)
                assert data[i : i + item.itemsize] == fld.value.items[-1:].astype(item).tobytes()
        elif fld.type == ValueType.UINT32:
            assert u32.unpack_from(data, at.value)[0] == fld.value
    for t in f.tensor_list:
        at = f.info_offsets(t)
        assert at.start == t.info_offset and data[at.name : at.name + len(t.name.encode())] == t.name.encode()
        assert u32.unpack_from(data, at.n_dimensions)[0] == len(t.dims)
        assert tuple(size.unpack_from(data, at.dimension(j))[0] for j in range(len(t.dims))) == t.dims
        assert u32.unpack_from(data, at.type)[0] == t.type
        assert u64.unpack_from(data, at.offset)[0] == t.stored_offset


@pytest.mark.parametrize("order,version", [("little", 3), ("big", 3), ("little", 1), ("big", 2)])
def test_offsets_point_at_the_stored_parts_of_generated_files(order, version):
    data = demo_bytes(order, version)
    with gguf_schema.open(data) as f:
        _check(data, f)


@pytest.mark.parametrize("path", VOCAB_FILES[:3], ids=lambda p: p.name)
def test_offsets_point_at_the_stored_parts_of_real_files(path):
    data = path.read_bytes()
    with gguf_schema.open(data) as f:
        _check(data, f)


def test_a_pair_made_in_memory_has_no_offsets():
    with gguf_schema.open(demo_bytes()) as f:
        assert f.pair_offsets(gguf_schema.make_field("x", 1)) is None
