"""Writing: value types, tensor layout, atomic replacement, clear errors for what cannot be written."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGMLType, GGUFArray, GGUFBuildError, GGUFError, RawTensor, ValueType
from gguf_schema.format.values import infer_type

from .conftest import demo_bytes, write


def _roundtrip_fields(metadata):
    buf = io.BytesIO()
    gguf_schema.save(buf, metadata)
    with gguf_schema.open(buf.getvalue()) as f:
        return {k: (fld.type, fld.element_type, fld.plain()) for k, fld in f.fields.items()}


def test_default_types_for_python_values():
    got = _roundtrip_fields(
        {
            "u": 5,
            "neg": -5,
            "big": 2**40,
            "bigneg": -(2**40),
            "f": 0.5,
            "b": False,
            "s": "x",
            "strs": ["a"],
            "ints": [1, 2],
            "negs": [-1, 2],
            "floats": [1, 2.5],
            "bools": [True],
            "np64": np.float64(0.1),
            "npu8": np.uint8(3),
            "arr": np.array([1, 2], np.int16),
        }
    )
    assert {k: (v[0].name, v[1].name if v[1] else None) for k, v in got.items()} == {
        "u": ("UINT32", None),
        "neg": ("INT32", None),
        "big": ("UINT64", None),
        "bigneg": ("INT64", None),
        "f": ("FLOAT32", None),
        "b": ("BOOL", None),
        "s": ("STRING", None),
        "strs": ("ARRAY", "STRING"),
        "ints": ("ARRAY", "UINT32"),
        "negs": ("ARRAY", "INT32"),
        "floats": ("ARRAY", "FLOAT32"),
        "bools": ("ARRAY", "BOOL"),
        "np64": ("FLOAT64", None),
        "npu8": ("UINT8", None),
        "arr": ("ARRAY", "INT16"),
    }
    assert got["np64"][2] == 0.1 and got["floats"][2].tolist() == [1.0, 2.5]


@pytest.mark.parametrize(
    "value,vtype,message",
    [
        (256, ValueType.UINT8, "256 does not fit in UINT8 (range 0..255) (in key 'k')"),
        (-1, ValueType.UINT64, "-1 does not fit in UINT64 (range 0..18446744073709551615) (in key 'k')"),
        ("x", ValueType.INT32, "INT32 needs an integer, got str 'x' (in key 'k')"),
        (2, ValueType.BOOL, "BOOL needs True or False, got 2 (in key 'k')"),
        (1e39, ValueType.FLOAT32, "1e+39 overflows FLOAT32 (in key 'k')"),
        (5, ValueType.STRING, "STRING needs a str, got int (in key 'k')"),
        (
            [],
            None,
            "the element type of an empty list is ambiguous: pass GGUFArray(ValueType.<type>, []) or an explicit element type (in key 'k')",
        ),
        ([1, "a"], None, "a GGUF array holds one element type; this list mixes STRING, UINT32 (in key 'k')"),
        (np.array([300]), ValueType.ARRAY, "values 300..300 do not fit in UINT8 (in key 'k')"),
        (object(), None, "no GGUF value type for a object (in key 'k')"),
    ],
)
def test_values_that_cannot_be_stored_raise_build_errors(value, vtype, message):
    element = ValueType.UINT8 if isinstance(value, np.ndarray) else None
    with pytest.raises(GGUFBuildError) as info:
        gguf_schema.make_field("k", value, vtype, element)
    assert str(info.value) == message


def test_explicit_empty_arrays_and_nested_arrays_are_written():
    got = _roundtrip_fields(
        {
            "empty": GGUFArray(ValueType.STRING, []),
            "nested": GGUFArray(ValueType.ARRAY, [GGUFArray(ValueType.INT8, [-1]), GGUFArray(ValueType.FLOAT64, [])]),
        }
    )
    assert got["empty"] == (ValueType.ARRAY, ValueType.STRING, [])
    assert got["nested"][2][0].tolist() == [-1] and got["nested"][2][1].dtype == np.float64


def test_tensors_are_aligned_padded_and_typed_by_dtype():
    buf = io.BytesIO()
    tensors = {
        "a": np.ones(3, np.float32),
        "b": np.ones((2, 2), np.float16),
        "c": np.arange(5, dtype=np.int64),
        "d": np.ones(1, np.float64),
        "e": np.array([1, 2], np.int8),
        "f": np.array([1], np.int16),
        "g": np.array([7], np.int32),
    }
    gguf_schema.save(buf, {}, tensors, alignment=16)
    data = buf.getvalue()
    with gguf_schema.open(data) as f:
        assert [t.type.name for t in f.tensors.values()] == ["F32", "F16", "I64", "F64", "I8", "I16", "I32"]
        assert [t.stored_offset for t in f.tensors.values()] == [0, 16, 32, 80, 96, 112, 128]
        assert f.data_offset % 16 == 0 and len(data) == f.data_offset + 144
        assert f.fields["general.alignment"].type == ValueType.UINT32
        for name, arr in tensors.items():
            assert np.array_equal(f.tensors[name].data, arr)


@pytest.mark.parametrize(
    "tensor,message",
    [
        (
            np.ones(2, np.uint8),
            "no ggml type for numpy dtype uint8: convert it, or pass RawTensor(type, shape, data) (in tensor 't')",
        ),
        (
            RawTensor(GGMLType.Q4_0, (2, 33), b""),
            "Q4_0 rows must be a multiple of 32 elements, shape (2, 33) has 33 (in tensor 't')",
        ),
        (
            RawTensor(GGMLType.Q4_0, (1, 32), b"\0" * 17),
            "Q4_0 tensor of shape (1, 32) takes 18 bytes, 17 given (in tensor 't')",
        ),
        (RawTensor(GGMLType.Q4_2, (1, 32), b""), "ggml type Q4_2 has been removed (in tensor 't')"),
        ([1.0], "a tensor must be a numpy array, RawTensor or Tensor, got list (in tensor 't')"),
    ],
)
def test_tensors_that_cannot_be_written(tensor, message):
    with pytest.raises(GGUFBuildError) as info:
        gguf_schema.save(io.BytesIO(), {}, {"t": tensor})
    assert str(info.value) == message


def test_tensors_can_be_copied_from_an_open_file_into_a_new_one(tmp_path):
    src = write(tmp_path, demo_bytes("big"), "big.gguf")
    with gguf_schema.open(src) as f:
        gguf_schema.save(tmp_path / "little.gguf", f.fields.records, dict(f.tensors))
    with gguf_schema.open(tmp_path / "little.gguf") as g, gguf_schema.open(demo_bytes()) as want:
        assert g.byte_order == "little"
        for t in want.tensors.values():
            assert g.tensors[t.name].data.tobytes() == t.data.tobytes()


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    target = write(tmp_path, demo_bytes(), "model.gguf")
    before = target.read_bytes()
    donor = gguf_schema.open(demo_bytes())
    gone = donor.tensors["demo.positions"]
    donor.close()  # its bytes can no longer be read: the write fails in the middle of the data section
    with pytest.raises(GGUFError, match="the file is closed"):
        gguf_schema.save(target, {"general.architecture": "llama"}, {"ok": np.ones(4, np.float32), "gone": gone})
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.gguf"]


def test_raw_blocks_are_little_endian_unless_said_and_swapped_for_big_endian_files():
    d = np.float16(0.5).tobytes()  # Q4_0 block: f16 scale then 16 bytes of nibbles
    block = d + bytes(range(16))
    big = io.BytesIO()
    gguf_schema.save(big, {}, {"q": RawTensor(GGMLType.Q4_0, (1, 32), block)}, byte_order="big")
    with gguf_schema.open(big.getvalue()) as f:
        assert f.tensors["q"].data.tobytes() == d[::-1] + bytes(range(16))
    same = io.BytesIO()
    gguf_schema.save(
        same, {}, {"q": RawTensor(GGMLType.Q4_0, (1, 32), d[::-1] + bytes(range(16)), "big")}, byte_order="big"
    )
    assert same.getvalue() == big.getvalue()


def test_saving_over_the_file_being_read_is_safe(tmp_path):
    target = write(tmp_path, demo_bytes(), "model.gguf")
    with gguf_schema.open(target) as f:
        view = f.tensors["demo.positions"].data
        f.metadata["general.name"] = "renamed in place"
        f.save(target)
        assert view[2, 2] == 10  # the old mapping still reads the old bytes
    with gguf_schema.open(target) as g:
        assert g.metadata["general.name"] == "renamed in place"
        assert g.tensors["demo.positions"].data[2, 2] == 10


def test_written_file_keeps_the_permission_bits(tmp_path):
    target = write(tmp_path, demo_bytes(), "model.gguf")
    os.chmod(target, 0o640)
    with gguf_schema.open(target) as f:
        f.save(target)
    assert os.stat(target).st_mode & 0o777 == 0o640


def test_infer_type_docs():
    assert infer_type(np.int8(1)) == ValueType.INT8
    assert infer_type([1]) == ValueType.ARRAY


def test_a_new_file_gets_the_umask_mode_and_a_replaced_file_keeps_its_mode(tmp_path):
    import os

    mask = os.umask(0o027)
    try:
        p = tmp_path / "new.gguf"
        gguf_schema.save(p, {"a": 1})
        assert p.stat().st_mode & 0o777 == 0o640  # 0o666 & ~umask, applied by the kernel
        assert os.umask(0o027) == 0o027  # the process umask was never changed meanwhile
        p.chmod(0o604)
        gguf_schema.save(p, {"a": 2})
        assert p.stat().st_mode & 0o777 == 0o604
    finally:
        os.umask(mask)
    assert [q.name for q in tmp_path.iterdir()] == ["new.gguf"]  # no temporary file left
