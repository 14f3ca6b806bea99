"""Byte-exact builds: open(p) then save(q) gives the same bytes, for every kind of file we know."""

from __future__ import annotations

import hashlib
import io
import struct

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGMLType, GGUFArray, RawTensor, ValueType

from .conftest import demo_bytes, write
from .helpers import open_variant


def resave(data_or_path, fast: bool = True) -> bytes:
    out = io.BytesIO()
    with open_variant(data_or_path, fast) as f:
        f.save(out)
    return out.getvalue()


def test_real_vocab_files_rebuild_byte_for_byte(vocab_file, tmp_path):
    out = tmp_path / "copy.gguf"
    with gguf_schema.open(vocab_file) as f:
        f.save(out)
    assert out.read_bytes() == vocab_file.read_bytes()


def test_gemma_rebuilds_byte_for_byte(gemma, tmp_path):
    out = tmp_path / "gemma.gguf"
    with gguf_schema.open(gemma) as f:
        assert (len(f.fields), len(f.tensors), f.data_offset) == (33, 236, 6_525_120)
        f.save(out)
    assert _sha(out) == _sha(gemma)


def _sha(p) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def test_generated_files_in_every_variant_rebuild(demo_variant):
    order, version, data = demo_variant
    assert resave(data) == data
    assert resave(data, fast=False) == data
    with gguf_schema.open(data) as f:
        assert (f.byte_order, f.version) == (order, version)


@pytest.mark.parametrize("order", ["little", "big"])
def test_files_written_by_the_gguf_package_rebuild(order, tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / f"gguf-{order}.gguf"
    endian = gguf.GGUFEndian.LITTLE if order == "little" else gguf.GGUFEndian.BIG
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    w.add_uint32("llama.context_length", 2048)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "ç"])
    w.add_array("demo.ints", [1, -2, 3])
    w.add_bool("demo.flag", True)
    w.add_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("h", np.ones((2, 32), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = path.read_bytes()
    assert resave(data) == data
    with gguf_schema.open(path) as f:
        assert f.byte_order == order
        assert f.tensors["w"].data.tolist() == np.arange(12, dtype=np.float32).reshape(3, 4).tolist()
        assert f.metadata["tokenizer.ggml.tokens"] == ["a", "b", "ç"]


def test_custom_alignment_unusual_n_dims_and_zero_tensors_rebuild():
    cases = [
        demo_bytes(alignment=1),
        demo_bytes(alignment=64),
        _bytes({"general.alignment": np.uint32(256)}, {}),
        _bytes({}, {}),
        _bytes({"a": 1}, {"scalar": np.array(3.0, np.float32), "row": np.ones((1, 1, 1, 32), np.float32)}),
    ]
    for data in cases:
        assert resave(data) == data


def _bytes(metadata, tensors, **kw) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, metadata, tensors, **kw)
    return buf.getvalue()


def test_ggml_style_trailing_ones_dropped_from_n_dims_survive():
    # ggml writes a [32, 1] tensor with n_dims 1; patch our n_dims 2 file to that and keep it exactly
    data = _bytes({}, {"t": np.ones((1, 32), np.float32)})
    with gguf_schema.open(data) as f:
        at, infos_end, data_start = f.tensors["t"].info_offset, f.metadata_end, f.data_offset
    name_end = at + 8 + 1
    n_dims, d0, d1 = struct.unpack_from("<IQQ", data, name_end)
    assert (n_dims, d0, d1) == (2, 32, 1)
    # drop the trailing dimension (8 bytes), then pad to the alignment again before the data section
    head = data[:name_end] + struct.pack("<IQ", 1, 32) + data[name_end + 20 : infos_end]
    patched = head + bytes(-len(head) % 32) + data[data_start:]
    assert resave(patched) == patched
    with gguf_schema.open(patched) as f:
        assert f.tensors["t"].dims == (32,)
        out = io.BytesIO()
        f.save(out)
    with gguf_schema.open(out.getvalue()) as g:
        assert g.tensors["t"].dims == (32,) and g.tensors["t"].data.tolist() == [1.0] * 32


def test_non_zero_padding_and_trailing_bytes_are_kept_as_read():
    data = bytearray(demo_bytes())
    with gguf_schema.open(bytes(data)) as f:
        pad_start, pad_len = f.metadata_end, len(f.padding)
    assert pad_len > 0
    data[pad_start : pad_start + pad_len] = b"\xaa" * pad_len
    data += b"trailing junk"
    with gguf_schema.open(bytes(data)) as f:
        assert f.padding == b"\xaa" * pad_len
        out = io.BytesIO()
        f.save(out)
    assert out.getvalue() == bytes(data)


def test_odd_values_survive_exactly():
    snan = np.array([0x7F800001], np.uint32).view(np.float32)[0]
    data = _bytes(
        {
            "nan": snan,
            "negzero": np.float64(-0.0),
            "bool2": gguf_schema.BoolByte(2),
            "bad_utf8": b"\xff\xfe".decode("utf-8", "surrogateescape"),
            "bools": GGUFArray(ValueType.BOOL, np.frombuffer(b"\x00\x01\x05", np.bool_)),
            "empty": GGUFArray(ValueType.STRING, []),
            "deep": GGUFArray(
                ValueType.ARRAY, [GGUFArray(ValueType.ARRAY, [GGUFArray(ValueType.INT8, np.array([-1], np.int8))])]
            ),
        },
        {},
    )
    with gguf_schema.open(data) as f:
        assert np.asarray(f.fields["nan"].value).view(np.uint32) == 0x7F800001
        assert f.fields["bool2"].value == 2 and type(f.fields["bool2"].value) is gguf_schema.BoolByte
        assert f.fields["bad_utf8"].value.encode("utf-8", "surrogateescape") == b"\xff\xfe"
        assert f.fields["bools"].value.items.view(np.uint8).tolist() == [0, 1, 5]
        assert f.metadata["deep"][0][0].tolist() == [-1]
    assert resave(data) == data


def test_edited_metadata_keeps_tensor_bytes_and_offsets(tmp_path):
    src = write(tmp_path, demo_bytes(), "src.gguf")
    with gguf_schema.open(src) as f:
        before = {t.name: t.data.tobytes() for t in f.tensors.values()}
        f.metadata["general.name"] = "a much longer name that moves the data section"
        f.set("new.key", 5, ValueType.UINT64)
        f.delete("demo.nested")
        f.rename("demo.int8", "demo.renamed")
        f.save(tmp_path / "edited.gguf")
    with gguf_schema.open(tmp_path / "edited.gguf") as g:
        assert {t.name: t.data.tobytes() for t in g.tensors.values()} == before
        assert g.metadata["general.name"] == "a much longer name that moves the data section"
        assert g.fields["new.key"].type == ValueType.UINT64
        assert "demo.nested" not in g.metadata and g.metadata["demo.renamed"] == -128
        assert list(g.metadata).index("demo.renamed") == 13
        assert g.data_offset % 32 == 0


def test_changing_the_alignment_lays_tensors_out_again(tmp_path):
    with gguf_schema.open(demo_bytes()) as f:
        before = {t.name: t.data.tobytes() for t in f.tensors.values()}
        f.set("general.alignment", 128)
        out = io.BytesIO()
        f.save(out)
    with gguf_schema.open(out.getvalue()) as g:
        assert g.alignment == 128 and g.data_offset % 128 == 0
        assert all(t.stored_offset % 128 == 0 for t in g.tensors.values())
        assert {t.name: t.data.tobytes() for t in g.tensors.values()} == before


def test_saving_in_the_other_byte_order_and_back_is_identical():
    data = demo_bytes()
    with gguf_schema.open(data) as f:
        big = io.BytesIO()
        f.save(big, byte_order="big")
    with gguf_schema.open(big.getvalue()) as b:
        assert b.byte_order == "big"
        assert b.tensors["token_embd.weight"].data.dtype.str == ">f4"
        back = io.BytesIO()
        b.save(back, byte_order="little")
    assert back.getvalue() == data


def test_version_conversion_changes_only_the_length_fields():
    v3 = demo_bytes(version=3)
    with gguf_schema.open(v3) as f:
        out = io.BytesIO()
        f.save(out, version=1)
    with gguf_schema.open(out.getvalue()) as g:
        assert g.version == 1
        back = io.BytesIO()
        g.save(back, version=3)
    assert back.getvalue() == v3


def test_quantized_raw_blocks_and_bf16_round_trip():
    blocks = np.random.default_rng(1).integers(0, 256, size=(2, 144), dtype=np.uint8)
    bf16 = np.array([[0x3F80, 0xC000]], np.uint16)
    data = _bytes({}, {"q": RawTensor(GGMLType.Q4_K, (2, 256), blocks), "b": RawTensor(GGMLType.BF16, (1, 2), bf16)})
    with gguf_schema.open(data) as f:
        assert f.tensors["q"].data.shape == (2, 144) and np.array_equal(f.tensors["q"].data, blocks)
        assert f.tensors["b"].data.dtype == np.dtype("<u2") and f.tensors["b"].data.tolist() == [[0x3F80, 0xC000]]
    assert resave(data) == data
