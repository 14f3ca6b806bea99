"""Byte-order and version conversion: exact both ways for every tensor type; the gguf package reads our big-endian files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGMLType, RawTensor
from gguf_schema.errors import GGUFBuildError, GGUFFormatError
from gguf_schema.tensors import byteswap, dequantize
from gguf_schema.tools.convert import convert

from .conftest import demo_bytes

LIVE_TYPES = [t for t in GGMLType if not t.removed]


def all_types_file(path: Path, types=LIVE_TYPES, seed: int = 1) -> None:
    """One tensor of every type, two rows of random bytes each (NaN bit patterns included)."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for t in types:
        cols = t.block_size * 2
        nbytes = 2 * t.row_nbytes(cols)
        tensors[f"t.{t.name.lower()}"] = RawTensor(t, (2, cols), rng.integers(0, 256, nbytes, dtype=np.uint8))
    gguf_schema.save(
        path, {"general.architecture": "test", "x.f32": np.float32(0.1), "x.u64": np.uint64(2**63 + 5)}, tensors
    )


def test_every_tensor_type_survives_le_be_le_bit_for_bit(tmp_path: Path) -> None:
    le, be, back = tmp_path / "le.gguf", tmp_path / "be.gguf", tmp_path / "back.gguf"
    all_types_file(le)
    convert(le, be, byte_order="big")
    convert(be, back, byte_order="little")
    assert back.read_bytes() == le.read_bytes()
    with gguf_schema.open(le) as a, gguf_schema.open(be) as b:
        assert b.byte_order == "big" and len(b.tensor_list) == len(LIVE_TYPES) == 35
        for ta in a.tensor_list:
            tb = b.tensors[ta.name]
            assert bytes(tb.raw()) == byteswap(ta.raw(), ta.type, "little", "big").tobytes(), ta.name


def test_quantized_fields_swap_and_byte_arrays_stay(tmp_path: Path) -> None:
    le, be = tmp_path / "le.gguf", tmp_path / "be.gguf"
    all_types_file(le, [GGMLType.Q4_K, GGMLType.Q8_K, GGMLType.Q5_0])
    convert(le, be, byte_order="big")
    with gguf_schema.open(le) as a, gguf_schema.open(be) as b:
        qa, qb = a.tensors["t.q4_k"].data[0], b.tensors["t.q4_k"].data[0]
        assert qb[0:2].tobytes() == qa[1::-1][:2].tobytes()  # d (ggml_half) swapped
        assert qb[2:4].tobytes() == qa[3:1:-1].tobytes()  # dmin swapped
        assert qb[4:144].tobytes() == qa[4:144].tobytes()  # scales and qs: byte arrays
        ka, kb = a.tensors["t.q8_k"].data[0], b.tensors["t.q8_k"].data[0]
        assert kb[0:4].tobytes() == ka[3::-1][:4].tobytes()  # float d
        assert kb[4:260].tobytes() == ka[4:260].tobytes()  # int8 qs
        assert kb[260:262].tobytes() == ka[261:259:-1].tobytes()  # first int16 of bsums
        q5a, q5b = a.tensors["t.q5_0"].data[0], b.tensors["t.q5_0"].data[0]
        assert q5b[2:22].tobytes() == q5a[2:22].tobytes()  # qh stays little-endian bytes, qs bytes


def test_dequantized_values_agree_across_byte_orders(tmp_path: Path) -> None:
    le, be = tmp_path / "le.gguf", tmp_path / "be.gguf"
    gguf_schema.save(le, {}, gguf_schema.testing.demo.example_tensors())
    convert(le, be, byte_order="big")
    with gguf_schema.open(le) as a, gguf_schema.open(be) as b:
        ta, tb = a.tensors["blk.0.ffn_up.weight"], b.tensors["blk.0.ffn_up.weight"]
        va = dequantize(ta.raw(), ta.type, ta.shape)
        vb = dequantize(tb.raw(), tb.type, tb.shape, byte_order="big")
        assert va.shape == (8, 64) and np.array_equal(va, vb)
        assert np.array_equal(a.tensors["token_embd.weight"].data, b.tensors["token_embd.weight"].data)


def test_nan_payloads_in_float_tensors_survive(tmp_path: Path) -> None:
    bits = np.array([0x7F800001, 0xFFC00123, 0x00000001, 0x80000000], np.uint32)
    le, be, back = tmp_path / "le.gguf", tmp_path / "be.gguf", tmp_path / "back.gguf"
    gguf_schema.save(le, {"nan": np.uint32(0x7F800001).view(np.float32)}, {"w": bits.view(np.float32)})
    convert(le, be, byte_order="big")
    convert(be, back, byte_order="little")
    assert back.read_bytes() == le.read_bytes()
    with gguf_schema.open(be) as f:
        assert f.tensors["w"].data.view(">u4").tolist() == bits.tolist()


def test_gguf_package_reads_our_big_endian_output_with_identical_values(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    le, be = tmp_path / "le.gguf", tmp_path / "be.gguf"
    le.write_bytes(demo_bytes())
    convert(le, be, byte_order="big")
    reader = gguf.GGUFReader(str(be))
    assert reader.endianess == gguf.GGUFEndian.BIG
    with gguf_schema.open(le) as ours:
        for key, field in ours.fields.items():
            if key == "demo.nested":  # the gguf package flattens nested arrays
                continue
            theirs = reader.fields[key].contents()
            mine = field.plain()
            if isinstance(mine, np.ndarray):
                assert np.array_equal(np.asarray(theirs, dtype=mine.dtype), mine), key
            elif isinstance(mine, float):
                assert np.asarray(theirs, field.value.dtype).tobytes() == np.asarray(field.value).tobytes(), key
            else:
                assert theirs == mine, key
        for t in reader.tensors:
            mine = ours.tensors[t.name]
            if mine.type.quantized:
                assert np.asarray(t.data).tobytes() == byteswap(mine.raw(), mine.type, "little", "big").tobytes()
            else:
                assert np.array_equal(np.asarray(t.data).reshape(mine.shape), mine.data), t.name


def test_version_change_keeps_data_offsets(tmp_path: Path) -> None:
    src, v2 = tmp_path / "v3.gguf", tmp_path / "v2.gguf"
    src.write_bytes(demo_bytes())
    convert(src, v2, version=2)
    assert v2.read_bytes() == src.read_bytes()[:4] + b"\x02\x00\x00\x00" + src.read_bytes()[8:]


def test_refuses_bad_arguments_and_unknown_tensor_types(tmp_path: Path) -> None:
    src = tmp_path / "a.gguf"
    src.write_bytes(demo_bytes())
    with pytest.raises(ValueError, match="byte order must be 'little' or 'big', got 'middle'") as info:
        convert(src, tmp_path / "b.gguf", byte_order="middle")
    assert not isinstance(info.value, gguf_schema.GGUFError)  # the caller's mistake, not a bad file
    with pytest.raises(ValueError, match="version must be 1, 2 or 3, got 4"):
        convert(src, tmp_path / "b.gguf", version=4)
    with pytest.raises(GGUFBuildError, match="the output must not be the input"):
        convert(src, src, byte_order="big")
    # a tensor whose type id ggml does not know: patch the type of the first tensor info to 99
    data = bytearray(src.read_bytes())
    with gguf_schema.open(src) as f:
        t = f.tensor_list[0]
        at = t.info_offset + 8 + len(t.name) + 4 + 8 * len(t.dims)
    data[at : at + 4] = (99).to_bytes(4, "little")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(GGUFFormatError, match="unknown ggml type 99"):
        convert(bad, tmp_path / "c.gguf", byte_order="big")
    assert not (tmp_path / "c.gguf").exists()


def test_vocab_files_survive_le_be_le_byte_for_byte(vocab_file: Path, tmp_path: Path) -> None:
    # llama.cpp's vocab-only files end right after the tensor infos, before the padding is complete
    be, back = tmp_path / "be.gguf", tmp_path / "back.gguf"
    convert(vocab_file, be, byte_order="big")
    convert(be, back, byte_order="little")
    assert back.read_bytes() == vocab_file.read_bytes()
    assert be.stat().st_size == vocab_file.stat().st_size
