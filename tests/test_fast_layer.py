"""The fast layer (format/fast/) is swapped into the plain schema by one function, and a disagreement
between the two is our bug (GGUFInternalError), never the file's (GGUFFormatError)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFError, GGUFFormatError, GGUFInternalError
from gguf_schema.format import boundary
from gguf_schema.format.fast import accelerate, arrays, fast_schema, records, walk
from gguf_schema.format.nodes import IndexedArray, ValueArray
from gguf_schema.format.schema import gguf_schema as plain_schema
from gguf_schema.format.variant import Variant
from gguf_schema.shards import SplitModel
from gguf_schema.tools.split import split

from .conftest import demo_bytes


def _nodes(schema):
    """The three nodes the fast layer replaces: the array body, the pairs, the tensor infos."""
    return (
        type(schema.gguf_array_t.subcon.subcons[2].subcon),
        type(schema.gguf_header_t.subcons[4].subcon),
        type(schema.gguf_file_t.subcons[1].subcon),
    )


@pytest.mark.parametrize("order,version", [("little", 3), ("big", 2), ("little", 1)])
def test_accelerate_swaps_exactly_the_three_nodes(order, version):
    plain = plain_schema(order, version)
    fast = accelerate(plain)
    assert _nodes(plain) == (ValueArray, IndexedArray, IndexedArray)
    assert _nodes(fast) == (arrays.ArrayItems, records.KeyValueArray, records.TensorInfoArray)
    assert (plain.accelerated, fast.accelerated) == (False, True)
    assert fast is fast_schema(order, version) is accelerate(fast)
    assert plain.variant is fast.variant is Variant.of(order, version)
    # every other struct is the same declaration
    assert fast.gguf_string_t.build("abc") == plain.gguf_string_t.build("abc")


def test_the_plain_schema_reads_a_file_to_the_same_values():
    data = demo_bytes("big", 3)
    a = boundary.parse(fast_schema("big", 3), data)
    b = boundary.parse(plain_schema("big", 3), data)
    assert [kv.key for kv in a.header.metadata_kv] == [kv.key for kv in b.header.metadata_kv]
    assert list(a.header.metadata_kv.offsets) == list(b.header.metadata_kv.offsets)
    assert [t.name for t in a.tensor_infos] == [t.name for t in b.tensor_infos]


def test_internal_error_is_under_the_root_but_not_a_bad_file_error():
    assert issubclass(GGUFInternalError, GGUFError) and issubclass(GGUFInternalError, RuntimeError)
    assert not issubclass(GGUFInternalError, GGUFFormatError)
    assert not issubclass(GGUFInternalError, ValueError)


def _refuse_every_record(self, context):
    def read(r):
        raise records._Slow

    return read


def test_a_pair_the_fast_loop_refuses_but_the_struct_reads_is_an_internal_error(monkeypatch):
    data = demo_bytes()
    monkeypatch.setattr(walk, "compiled_scan", None)  # every pair through the Python loop
    monkeypatch.setattr(records.KeyValueArray, "_reader", _refuse_every_record)
    with pytest.raises(GGUFInternalError) as info:
        gguf_schema.open(data)
    assert not isinstance(info.value, GGUFFormatError)
    assert info.value.offset == 24  # the first pair, right after the header's counts
    assert info.value.path == "header -> metadata_kv[0]"
    assert str(info.value).startswith("a record the declared struct reads but the fast loop does not")


def test_a_tensor_info_the_fast_loop_refuses_but_the_struct_reads_is_an_internal_error(monkeypatch):
    data = demo_bytes()
    with gguf_schema.open(data) as f:
        first_info = f.tensor_list[0].info_offset
    monkeypatch.setattr(records.TensorInfoArray, "_reader", _refuse_every_record)
    with pytest.raises(GGUFInternalError) as info:
        boundary.parse(fast_schema("little", 3), data)
    assert info.value.offset == first_info
    assert info.value.path == "tensor_infos[0]"


def test_a_record_the_struct_also_refuses_stays_a_format_error(monkeypatch):
    """Where both agree that the bytes are bad, the declared struct's error is the one raised."""
    data = demo_bytes()
    monkeypatch.setattr(walk, "compiled_scan", None)
    monkeypatch.setattr(records.KeyValueArray, "_reader", _refuse_every_record)
    bad = data[:24] + (2**40).to_bytes(8, "little") + data[32:]  # the first key claims 1 TiB
    with pytest.raises(GGUFFormatError) as info:
        gguf_schema.open(bad)
    assert not isinstance(info.value, GGUFInternalError)
    assert (info.value.offset, info.value.value) == (24, 2**40)
    assert info.value.path.startswith("header -> metadata_kv[0]")


def test_open_split_true_opens_the_shards_as_one(tmp_path):
    src = tmp_path / "m.gguf"
    gguf_schema.save(src, {"general.name": "m"}, {f"t{i}": np.full(4, i, np.float32) for i in range(3)})
    paths = split(src, os.fspath(tmp_path / "m"), max_tensors=2)
    with gguf_schema.open(paths[0], split=True, strict="lenient") as model:
        assert isinstance(model, SplitModel)
        assert model.paths == paths
        assert [t.name for t in model.tensor_list] == ["t0", "t1", "t2"]
        assert model.tensors["t2"].data.tolist() == [2.0] * 4
    with gguf_schema.open(src, split=True) as f:  # a file that is not split opens as itself
        assert isinstance(f, gguf_schema.GGUFFile) and len(f.tensors) == 3
    with gguf_schema.open(paths[1], split=True) as f:  # a later shard alone is a file of its own
        assert isinstance(f, gguf_schema.GGUFFile) and [t.name for t in f.tensor_list] == ["t2"]


def test_open_split_true_takes_a_path_or_url_only():
    with pytest.raises(TypeError, match="split=True opens a path or URL, got bytes"):
        gguf_schema.open(demo_bytes(), split=True)


@pytest.mark.parametrize(
    "order,version,endian,size_t,length",
    [("little", 1, "<", 4, "<I"), ("big", 1, ">", 4, ">I"), ("little", 2, "<", 8, "<Q"), ("big", 3, ">", 8, ">Q")],
)
def test_variant_derives_the_layout_once(order, version, endian, size_t, length):
    v = Variant.of(order, version)
    assert (v.endian, v.size_t, v.length_format, v.big) == (endian, size_t, length, order == "big")
    assert v.struct("LN").size == 4 + size_t
    assert v.dtype("f4") == np.dtype(endian + "f4")
    with gguf_schema.open(demo_bytes(order, version)) as f:
        assert f.variant is v


@pytest.mark.parametrize("bad", [("middle", 3), ("little", 4), ("big", 0)])
def test_variant_refuses_what_does_not_exist(bad):
    with pytest.raises(ValueError):
        Variant.of(*bad)


def test_the_library_never_changes_the_recursion_limit():
    """Writing and reading the deepest nesting the reader follows (MAX_SAFE_DEPTH) fits the default limit;
    the plain schema, past what the limit lets it follow, ends in a GGUFLimitError."""
    import io
    import sys

    from gguf_schema.format.limits import MAX_SAFE_DEPTH
    from gguf_schema.testing.fuzz import nested_array_file

    from .helpers import read_reference

    before = sys.getrecursionlimit()
    inner = gguf_schema.GGUFArray(gguf_schema.ValueType.UINT8, np.array([7], np.uint8))
    for _ in range(MAX_SAFE_DEPTH - 1):
        inner = gguf_schema.GGUFArray(gguf_schema.ValueType.ARRAY, [inner])
    buf = io.BytesIO()
    gguf_schema.save(buf, {"deep": inner})
    deepest = gguf_schema.Limits(max_depth=MAX_SAFE_DEPTH)
    with gguf_schema.open(buf.getvalue(), limits=deepest) as f:
        value = f.fields["deep"].value
        for _ in range(MAX_SAFE_DEPTH - 1):
            value = value.items[0]
        assert value.items.tolist() == [7]
    with pytest.raises(gguf_schema.GGUFLimitError):
        read_reference(nested_array_file(MAX_SAFE_DEPTH), limits=deepest)
    assert sys.getrecursionlimit() == before
