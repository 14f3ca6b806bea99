"""Reading: the GGUFFile API, lazy zero-copy tensor views, every kind of source."""

from __future__ import annotations

import io
import os
import tracemalloc

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGMLType, GGUFError, GGUFTruncatedError, ValueType

from .conftest import demo_bytes, write


def test_header_facts_of_the_demo_file():
    with gguf_schema.open(demo_bytes()) as f:
        assert (f.version, f.byte_order, f.alignment, f.data_offset) == (3, "little", 32, 1600)
        assert len(f.fields) == 29 and len(f.tensors) == 5
        assert f.metadata_end + len(f.padding) == f.data_offset


def test_fields_keep_stored_types_and_metadata_gives_plain_values():
    with gguf_schema.open(demo_bytes()) as f:
        tokens = f.fields["tokenizer.ggml.tokens"]
        assert (tokens.type, tokens.element_type) == (ValueType.ARRAY, ValueType.STRING)
        assert f.metadata["tokenizer.ggml.tokens"][:3] == ["<unk>", "<s>", "</s>"]
        scores = f.metadata["tokenizer.ggml.scores"]
        assert isinstance(scores, np.ndarray) and scores.dtype == np.float32 and not scores.flags.writeable
        assert scores.tolist() == [0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]
        eps = f.metadata["llama.attention.layer_norm_rms_epsilon"]
        assert type(eps) is float and eps == float(np.float32(1e-5))
        assert f.fields["demo.uint64"].value == 2**64 - 1
        assert f.metadata["demo.bool"] is True
        nested = f.fields["demo.nested"].value
        assert [a.type for a in nested.items] == [ValueType.UINT8, ValueType.STRING]
        assert f.metadata["demo.nested"][1] == ["a", "b"]


def test_tensor_views_are_zero_copy_read_only_and_in_numpy_order():
    with gguf_schema.open(demo_bytes()) as f:
        t = f.tensors["demo.positions"]
        assert (t.type, t.shape, t.dims, t.n_elements, t.nbytes) == (GGMLType.I32, (4, 4), (4, 4), 16, 64)
        assert t.data.tolist() == np.arange(16).reshape(4, 4).tolist()
        assert not t.data.flags.writeable and not t.data.flags.owndata
        q = f.tensors["blk.0.ffn_up.weight"]
        assert q.type == GGMLType.Q8_0 and q.shape == (8, 64) and q.data.shape == (8, 68) and q.data.dtype == np.uint8
        assert q.offset == f.data_offset + q.stored_offset


def test_big_endian_views_have_big_endian_dtypes_and_the_same_values():
    with gguf_schema.open(demo_bytes()) as le, gguf_schema.open(demo_bytes("big")) as be:
        a, b = le.tensors["token_embd.weight"].data, be.tensors["token_embd.weight"].data
        assert b.dtype.str == ">f4" and np.array_equal(a, b)
        assert le.metadata["tokenizer.ggml.token_type"].tolist() == be.metadata["tokenizer.ggml.token_type"].tolist()


def test_opening_reads_no_tensor_data(gemma):
    tracemalloc.start()
    with gguf_schema.open(gemma) as f:
        _, peak = tracemalloc.get_traced_memory()
        assert len(f.tensors) == 236
    tracemalloc.stop()
    # 6.5 MB of metadata decoded; the 246 MB data section is never read
    assert peak < 60 * 2**20


def test_gemma_tensor_types_and_views(gemma):
    with gguf_schema.open(gemma) as f:
        counts: dict[str, int] = {}
        for t in f.tensors.values():
            counts[t.type.name] = counts.get(t.type.name, 0) + 1
        assert counts == {"F32": 109, "Q5_0": 81, "Q4_K": 27, "Q8_0": 10, "Q6_K": 9}
        emb = f.tensors["token_embd.weight"]
        assert emb.shape == (262144, 640) and emb.data.shape == (262144, 680)
        end = max(t.offset + t.nbytes for t in f.tensors.values())
        assert end <= f.file_size
        assert len(f.metadata["tokenizer.ggml.tokens"]) == 262144


@pytest.mark.parametrize("kind", ["path", "str", "bytes", "bytearray", "memoryview", "file", "bytesio"])
def test_every_kind_of_source(kind, tmp_path):
    data = demo_bytes()
    p = write(tmp_path, data)
    src = {
        "path": lambda: p,
        "str": lambda: str(p),
        "bytes": lambda: data,
        "bytearray": lambda: bytearray(data),
        "memoryview": lambda: memoryview(data),
        "file": lambda: open(p, "rb"),  # noqa: SIM115 - the reader owns (and closes) the file object
        "bytesio": lambda: io.BytesIO(data),
    }[kind]()
    with gguf_schema.open(src) as f:
        assert f.metadata["general.name"] == "gguf-schema demo"
        assert f.tensors["demo.positions"].data[3, 3] == 15
    if kind == "file":
        src.close()


def test_views_outlive_close_and_data_after_close_is_an_error(tmp_path):
    p = write(tmp_path, demo_bytes())
    f = gguf_schema.open(p)
    view = f.tensors["demo.positions"].data
    f.close()
    assert view[1, 1] == 5  # the map is freed only when the view is
    with pytest.raises(GGUFError, match="the file is closed"):
        f.tensors["demo.positions"].data


def test_tensor_past_the_end_of_the_file_opens_but_its_data_raises():
    data = demo_bytes()
    cut = data[:4330]  # ends inside demo.positions [4320, 4384)
    with gguf_schema.open(cut) as f:
        assert f.tensors["blk.0.ffn_up.weight"].data.shape == (8, 68)
        with pytest.raises(GGUFTruncatedError) as info:
            f.tensors["demo.positions"].data
    assert str(info.value) == (
        "tensor data [4320, 4384) runs past the end of the file (4,330 bytes) "
        "(at offset 4320, in tensor 'demo.positions')"
    )


def test_duplicate_keys_and_tensor_names_are_kept_in_records():
    fields = [gguf_schema.make_field("a", 1), gguf_schema.make_field("a", 2)]
    buf = io.BytesIO()
    gguf_schema.save(buf, fields, {})
    with gguf_schema.open(buf.getvalue()) as f:
        assert f.metadata["a"] == 1 and [r.value for r in f.fields.records] == [1, 2]
        assert len(f.fields) == 1 and len(f.fields.records) == 2


def test_with_duplicate_keys_the_first_wins_and_keys_keep_the_order_they_first_appear_in():
    fields = [gguf_schema.make_field(k, v) for k, v in [("b", 1), ("a", 2), ("b", 3), ("c", 4), ("a", 5)]]
    buf = io.BytesIO()
    gguf_schema.save(buf, fields, {})
    with gguf_schema.open(buf.getvalue()) as f:
        assert list(f.metadata.items()) == [("b", 1), ("a", 2), ("c", 4)]
        assert [f.fields.position(k) for k in "abc"] == [1, 0, 3]


def test_metadata_assignment_keeps_the_stored_type_and_refuses_what_does_not_fit():
    with gguf_schema.open(demo_bytes()) as f:
        f.metadata["demo.uint16"] = 7
        assert f.fields["demo.uint16"].type == ValueType.UINT16
        with pytest.raises(gguf_schema.GGUFBuildError) as info:
            f.metadata["demo.uint16"] = 70000
        assert str(info.value) == "70000 does not fit in UINT16 (range 0..65535) (in key 'demo.uint16')"
        with pytest.raises(KeyError):
            del f.metadata["no.such.key"]


def test_unknown_tensor_type_is_reported_on_access():
    data = bytearray(demo_bytes())
    with gguf_schema.open(bytes(data)) as f:
        t = f.tensors["demo.positions"]
        type_at = t.info_offset + 8 + len(t.name) + 4 + 8 * len(t.dims)
    data[type_at : type_at + 4] = (99).to_bytes(4, "little")
    with gguf_schema.open(bytes(data)) as f:
        t = f.tensors["demo.positions"]
        assert t.type == 99
        with pytest.raises(gguf_schema.GGUFFormatError) as info:
            t.data
    assert str(info.value) == f"unknown ggml type 99 (at offset {t.info_offset}, in tensor 'demo.positions')"


def test_strict_open_raises_the_first_finding_of_the_profile():
    from gguf_schema.errors import GGUFValidationError

    data = demo_bytes()  # has a nested array: the spec allows it, ggml does not
    with gguf_schema.open(data, strict="spec") as f:
        assert f.fields["demo.nested"].element_type == ValueType.ARRAY
    with pytest.raises(GGUFValidationError) as info:
        gguf_schema.open(data, strict="ggml")
    assert str(info.value).startswith("GGUF-E024: array of arrays: ggml rejects nested arrays")
    assert isinstance(info.value, gguf_schema.GGUFFormatError)


@pytest.mark.parametrize("order", ["little", "big"])
def test_tensor_dequantize_gives_float32_in_numpy_shape(order):
    with gguf_schema.open(demo_bytes(order)) as f:
        q = f.tensors["blk.0.ffn_up.weight"]
        blocks = q.data.reshape(8, 2, 34)
        scales = blocks[:, :, :2].copy().view(np.dtype("<f2" if order == "little" else ">f2")).astype(np.float32)
        quants = blocks[:, :, 2:].view(np.int8).astype(np.float32)
        assert np.array_equal(q.dequantize(), (scales * quants).reshape(8, 64))
        assert q.dequantize(rows=slice(2, 4)).shape == (2, 64)
        pos = f.tensors["demo.positions"].dequantize()
        assert pos.dtype == np.float32 and pos.tolist() == np.arange(16, dtype=np.float32).reshape(4, 4).tolist()


def test_scalar_tensor_dequantizes_to_a_0d_array():
    buf = io.BytesIO()
    gguf_schema.save(buf, {}, {"s": np.array(2.5, np.float32)})
    with gguf_schema.open(buf.getvalue()) as f:
        t = f.tensors["s"]
        assert t.dims == () and t.shape == () and t.dequantize().shape == () and float(t.dequantize()) == 2.5


def test_positioned_reads_give_the_same_file_as_the_map(tmp_path):
    p = write(tmp_path, demo_bytes())
    with gguf_schema.open(p) as mapped, gguf_schema.open(p, mmap=False) as read:
        assert read.fields.records == mapped.fields.records
        for a, b in zip(mapped.tensor_list, read.tensor_list, strict=True):
            assert a.data.tobytes() == b.data.tobytes() and a.data.dtype == b.data.dtype
            assert np.array_equal(a.dequantize(), b.dequantize(), equal_nan=True)


@pytest.mark.parametrize("mmap", [True, False])
def test_a_file_truncated_under_an_open_reader_is_a_clean_error(tmp_path, mmap):
    p = write(tmp_path, demo_bytes())
    with gguf_schema.open(p, mmap=mmap) as f:
        last = f.tensor_list[-1]
        os.truncate(p, last.offset + 1)  # another process cuts the file
        with pytest.raises(GGUFTruncatedError, match="truncated meanwhile") as info:
            last.data
        assert info.value.offset == last.offset and info.value.path == f"tensor {last.name!r}"
        assert f.tensor_list[0].data.nbytes == f.tensor_list[0].nbytes  # what is still there reads fine


def test_a_file_object_without_a_descriptor_is_read_in_growing_ranges():
    tokens = [f"token-{i:07d}" for i in range(300_000)]  # a 6 MB header: more than the first read
    buf = io.BytesIO()
    gguf_schema.save(buf, {"tokenizer.ggml.tokens": tokens}, {"w": np.arange(8, dtype=np.float32)})
    stream = io.BytesIO(buf.getvalue())
    with gguf_schema.open(stream) as f:
        assert f.metadata["tokenizer.ggml.tokens"][-1] == tokens[-1]
        assert f.tensors["w"].data.tolist() == list(range(8))
        src = f.storage
        assert 2 <= src.requests <= 6 and src.bytes_fetched < len(buf.getvalue()) + 2**20
