"""gguf_schema.compat against the `gguf` package itself (gguf-py 0.19): reader, quants, writer, patch, scripts.

Every check compares with what gguf-py does for the same input: parts (values, dtypes, shapes),
data indices, types, contents, tensor attributes and bytes; file bytes after edits and writes;
quantized bytes and dequantized floats; gguf-py's own scripts' output and files, run with and
without ``patch()``. gguf-py takes seconds on a large vocabulary, so it is run here on the
smaller real files and on generated ones; for every real file, a digest of gguf-py's reading,
computed once by ``python -m tests.test_compat`` and kept in ``tests/data/compat_digests.json``,
is compared with ours (the digest covers every part's bytes, dtype and shape).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st

import gguf_schema
import gguf_schema.tensors
from gguf_schema import compat
from gguf_schema.errors import GGUFError, GGUFFormatError, GGUFLimitError, GGUFTruncatedError
from gguf_schema.format.limits import Limits
from gguf_schema.format.types import GGMLType, ValueType
from gguf_schema.format.values import GGUFArray, make_field
from gguf_schema.testing.demo import example_metadata
from gguf_schema.testing.fixtures import random_blocks, random_tensor
from gguf_schema.testing.strategies import gguf_files

from .conftest import VOCAB_DIR, VOCAB_FILES, demo_bytes, write

gguf = pytest.importorskip("gguf")

DIGESTS = Path(__file__).parent / "data" / "compat_digests.json"
#: the real files small enough to read with gguf-py in every run (about a second each)
LIVE = ("ggml-vocab-bert-bge.gguf",)


# ---------------------------------------------------------------------- comparing readers


def _part_record(p: np.ndarray) -> tuple:
    return (p.dtype.str, p.shape, p.tobytes())


def _parts_record(parts: list[np.ndarray]) -> tuple:
    """Every part's dtype (with its byte order), shape and bytes, in few passes (gemma has a million parts)."""
    dtypes = [p.dtype for p in parts]
    return (
        dtypes,
        sorted(d.str for d in set(dtypes)),  # the byte order as written ('<', '>' or '|'), not only as compared
        [p.shape for p in parts],
        b"".join(map(np.ndarray.tobytes, parts)),
    )


def _same(a: Any, b: Any) -> bool:
    """Equal values; floats compared as their repr where they differ (NaN equals itself, -0.0 differs from 0.0)."""
    if isinstance(a, float):  # (NaN != NaN: equal here when both are NaN, as the docstring says)
        return (a == b or (a != a and b != b)) and repr(a) == repr(b)
    return a == b or repr(a) == repr(b)


def assert_same_reading(theirs: Any, ours: compat.GGUFReader) -> None:
    """Every field and tensor of ``ours`` equal to gguf-py's reading ``theirs``."""
    assert list(ours.fields) == list(theirs.fields)
    assert (ours.byte_order, int(ours.endianess)) == (theirs.byte_order, int(theirs.endianess))
    assert (int(ours.alignment), int(ours.data_offset)) == (int(theirs.alignment), int(theirs.data_offset))
    for key, a in theirs.fields.items():
        b = ours.fields[key]
        assert (b.offset, b.name, b.data) == (a.offset, a.name, a.data), key
        assert [int(t) for t in b.types] == [int(t) for t in a.types], key
        assert [t.name for t in b.types] == [t.name for t in a.types], key
        expected = a.contents()
        assert _same(b.contents(), expected), key  # read from the map, before the parts exist
        assert _parts_record(b.parts) == _parts_record(a.parts), key
        assert _same(b.contents(), expected), key  # and from the parts
        if len(a.data) > 2 and a.types[0] == gguf.GGUFValueType.ARRAY:
            assert _same(b.contents(1), a.contents(1)) and _same(b.contents(-1), a.contents(-1)), key
            assert _same(b.contents(slice(1, None, 2)), a.contents(slice(1, None, 2))), key
    assert len(ours.tensors) == len(theirs.tensors)
    for a, b in zip(theirs.tensors, ours.tensors, strict=True):
        assert (b.name, int(b.tensor_type), b.n_elements, b.n_bytes, b.data_offset) == (
            a.name,
            int(a.tensor_type),
            a.n_elements,
            a.n_bytes,
            a.data_offset,
        )
        assert b.tensor_type.name == a.tensor_type.name
        assert _part_record(b.shape) == _part_record(a.shape), a.name
        assert _part_record(b.data) == _part_record(a.data), a.name
        assert b.shape is b.field.parts[3]
        assert (b.field.offset, b.field.name, b.field.data, b.field.types) == (
            a.field.offset,
            a.field.name,
            a.field.data,
            a.field.types,
        )
        assert _parts_record(b.field.parts) == _parts_record(a.field.parts), a.name


def reading_digest(reader: Any) -> str:
    """A digest of everything a reader gives (gguf-py's or ours): fields, parts, contents, tensors."""
    h = hashlib.sha256()

    def add(*items: Any) -> None:
        h.update(repr(items).encode("utf-8", "surrogateescape"))

    add(reader.byte_order, int(reader.endianess), int(reader.alignment), int(reader.data_offset))
    for key, f in reader.fields.items():
        add(key, f.offset, f.data, [int(t) for t in f.types], f.contents())
        add([p.dtype.str for p in f.parts], [p.shape for p in f.parts])
        h.update(b"".join(map(np.ndarray.tobytes, f.parts)))
    for t in reader.tensors:
        add(t.name, int(t.tensor_type), t.n_elements, t.n_bytes, t.data_offset, t.shape.tolist(), t.data.dtype.str)
        add(t.data.shape, hashlib.sha256(t.data.tobytes()).hexdigest())
        add([p.dtype.str for p in t.field.parts], [p.shape for p in t.field.parts])
        h.update(b"".join(map(np.ndarray.tobytes, t.field.parts)))
    return h.hexdigest()


@pytest.mark.parametrize("name", LIVE)
def test_real_files_read_as_gguf_reads_them(name):
    path = VOCAB_DIR / name
    assert_same_reading(gguf.GGUFReader(str(path)), compat.GGUFReader(path))


def test_every_real_file_matches_the_digest_of_gguf_reading_it(vocab_file):
    expected = json.loads(DIGESTS.read_text())
    assert vocab_file.name in expected, "run python -m tests.test_compat to record gguf-py's digest"
    assert reading_digest(compat.GGUFReader(vocab_file)) == expected[vocab_file.name]


def test_gemma_reads_as_gguf_reads_it(gemma, gemma_reader):
    ours = compat.GGUFReader(gemma)
    assert_same_reading(gemma_reader, ours)


@pytest.fixture(params=[("little", 3), ("big", 3), ("little", 2), ("big", 2)], ids=lambda p: f"{p[0]}-v{p[1]}")
def variant(request, tmp_path) -> Path:
    """The demo model (every value type, nested arrays, four tensor types) in each byte order and version."""
    order, version = request.param
    return write(tmp_path, demo_bytes(order, version))


def test_generated_files_read_as_gguf_reads_them(variant):
    assert_same_reading(gguf.GGUFReader(str(variant)), compat.GGUFReader(variant))


@pytest.mark.parametrize("order", ["little", "big"])
def test_every_tensor_type_reads_as_gguf_reads_it(tmp_path, order):
    rng = np.random.default_rng(7)
    tensors = {
        f"t.{t.name}": random_tensor(t, (3, max(t.block_size, 1) * 2), rng, order)
        for t in GGMLType
        if not t.removed and t.name in gguf.GGMLQuantizationType.__members__ and t != GGMLType.Q8_1
    }
    tensors["scalar"] = np.array(3.5, np.float32)  # n_dims 0
    path = tmp_path / "types.gguf"
    gguf_schema.save(path, {"general.alignment": np.uint32(64)}, tensors, byte_order=order)
    assert_same_reading(gguf.GGUFReader(str(path)), compat.GGUFReader(path))


@settings(max_examples=25, deadline=None)
@given(spec=gguf_files(versions=(2, 3)))
def test_random_files_read_as_gguf_reads_them(tmp_path_factory, spec):
    gguf_types = {int(t) for t in gguf.GGMLQuantizationType} - {
        int(GGMLType.Q8_1)
    }  # Q8_1: gguf-py's size is not ggml's
    assume(all(int(GGMLType.of(t.type)) in gguf_types for t in spec.tensors.values()))
    path = tmp_path_factory.mktemp("random") / "f.gguf"
    spec.save(path)
    try:
        theirs = gguf.GGUFReader(str(path))
        for f in theirs.fields.values():
            f.contents()
    except UnicodeDecodeError:  # gguf-py cannot read strings that are not UTF-8 (we keep them: see docs/compat.md)
        reject()
    except IndexError:  # gguf-py fails on a tensor of no dimension stored as bytes: we read BF16, refuse the others
        try:
            ours = compat.GGUFReader(path)
        except GGUFFormatError as e:
            assert "needs a dimension" in str(e)
        else:
            assert all(t.data.nbytes == t.n_bytes for t in ours.tensors)
        return
    assert_same_reading(theirs, compat.GGUFReader(path))


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_parts_built_by_blocks_and_by_numpy_are_gguf_pys(tmp_path_factory, data):
    """The paths that build many parts at once (a block of scalar pairs of mixed types and byte phases, an
    array of arrays of numbers of mixed types and lengths) give gguf-py's parts, data and contents, in
    both byte orders, whichever field is asked for first."""
    numeric = [t for t in ValueType if t.itemsize]
    kinds = data.draw(st.lists(st.sampled_from(numeric), min_size=1, max_size=40), label="scalar types")
    one = {t: True if t == ValueType.BOOL else 1 for t in numeric}
    fields = [make_field("general.architecture", "llama")]
    for i, t in enumerate(kinds):  # keys of several lengths: the pairs start at every byte phase
        fields.append(make_field("k" * data.draw(st.integers(1, 9)) + f".{i}", one[t], t))
    inner = data.draw(
        st.lists(st.tuples(st.sampled_from(numeric), st.integers(0, 5)), max_size=30), label="inner arrays"
    )
    arrays = [GGUFArray(t, [one[t]] * n) for t, n in inner]
    fields.append(make_field("nested", GGUFArray(ValueType.ARRAY, arrays), ValueType.ARRAY))
    fields.append(
        make_field("empties", GGUFArray(ValueType.ARRAY, [GGUFArray(t, []) for t, _ in inner]), ValueType.ARRAY)
    )
    fields.append(make_field("tail", "x"))
    order = data.draw(st.sampled_from(["little", "big"]), label="byte order")
    path = tmp_path_factory.mktemp("blocks") / "f.gguf"
    gguf_schema.save(path, fields, {}, byte_order=order)
    theirs, ours = gguf.GGUFReader(str(path)), compat.GGUFReader(path)
    first = data.draw(st.sampled_from(list(theirs.fields)), label="asked first")
    with pytest.MonkeyPatch.context() as mp:  # numpy's work cut in slices of a few items, as a million are
        mp.setattr(compat.reader, "_SLICE", data.draw(st.sampled_from([2, 3, 1 << 15]), label="slice"))
        assert _parts_record(ours.fields[first].parts) == _parts_record(theirs.fields[first].parts)
        assert_same_reading(theirs, ours)


def test_version_1_files_are_read_though_gguf_refuses_them(tmp_path):
    path = write(tmp_path, demo_bytes("little", 1))
    with pytest.raises(ValueError, match="version 1"):
        gguf.GGUFReader(str(path))
    ours = compat.GGUFReader(path)
    with gguf_schema.open(path) as f:
        assert ours.fields["GGUF.version"].contents() == 1
        assert ours.fields["GGUF.kv_count"].parts[0].dtype == np.uint32  # v1 counts are uint32
        for key, field in f.fields.items():
            if field.type != ValueType.ARRAY or field.element_type != ValueType.ARRAY:
                plain = field.plain()
                assert ours.fields[key].contents() == (plain.tolist() if isinstance(plain, np.ndarray) else plain), key
        for t in ours.tensors:
            assert t.data.tobytes() == bytes(f.tensors[t.name].raw())


def test_fields_are_built_only_when_used(gemma):
    ours = compat.GGUFReader(gemma)
    tokens = ours.fields["tokenizer.ggml.tokens"]
    assert not tokens._built("parts")  # opening built no parts
    assert len(tokens.data) == 262_144 and tokens.contents(5) == tokens.contents()[5]
    assert not tokens._built("parts")  # neither do data, types and contents
    assert len(tokens.parts) == 5 + 2 * 262_144


# ---------------------------------------------------------------------- modes and edits


def test_edits_through_parts_in_r_plus_write_the_same_bytes(tmp_path, variant):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    shutil.copy(variant, a)
    shutil.copy(variant, b)
    edits = {"llama.context_length": 4096, "demo.float64": 2.5, "demo.bool": False}
    for path, cls in ((a, gguf.GGUFReader), (b, compat.GGUFReader)):
        r = cls(str(path), "r+")
        for key, value in edits.items():
            f = r.fields[key]
            f.parts[f.data[0]][0] = value
        tokens = r.fields["tokenizer.ggml.tokens"]
        tokens.parts[tokens.data[1]][:] = np.frombuffer(b"<S>", np.uint8)
        r.tensors[0].data[0, :4] = 7.0
        del r
    assert a.read_bytes() == b.read_bytes() != variant.read_bytes()
    with gguf_schema.open(b) as f:
        assert f.metadata["llama.context_length"] == 4096 and f.metadata["tokenizer.ggml.tokens"][1] == "<S>"


def test_mode_c_changes_only_the_copy_in_memory(tmp_path):
    path = write(tmp_path, demo_bytes())
    before = path.read_bytes()
    r = compat.GGUFReader(path, "c")
    f = r.fields["llama.block_count"]
    f.parts[f.data[0]][0] = 9
    assert f.contents() == 9 and path.read_bytes() == before


def test_mode_r_is_read_only(tmp_path):
    r = compat.GGUFReader(write(tmp_path, demo_bytes()))
    f = r.fields["llama.block_count"]
    with pytest.raises(ValueError, match="read-only"):
        f.parts[f.data[0]][0] = 9


def test_reader_field_and_tensor_behave_like_named_tuples(tmp_path):
    r = compat.GGUFReader(write(tmp_path, demo_bytes()))
    offset, name, parts, data, types = r.fields["general.name"]
    assert (name, data, types) == ("general.name", [4], [compat.GGUFValueType.STRING])
    assert r.fields["general.name"]._asdict()["offset"] == offset and len(parts) == 5
    field = compat.ReaderField(0, "x", [np.array([5], np.uint32)], [0], [compat.GGUFValueType.UINT32])
    assert field.contents() == 5 and field._replace(name="y").name == "y"
    assert r.get_tensor(0).name == r.tensors[0].name and r.get_field("nope") is None
    assert r.tensors[0]._asdict()["n_bytes"] == r.tensors[0].n_bytes
    assert compat.GGUFReader.gguf_scalar_to_np[compat.GGUFValueType.FLOAT32] is np.float32
    assert isinstance(r.data, np.memmap) and r.data.dtype == np.uint8 and r.data.size == len(demo_bytes())
    given = compat.ReaderTensor(
        "t", compat.GGMLQuantizationType.F32, np.array([2], np.uint64), 2, 8, 0, np.zeros(2), field
    )
    assert given.shape.tolist() == [2] and given.field is field


def test_records_and_enum_members_are_gguf_own(tmp_path):
    r = compat.GGUFReader(write(tmp_path, demo_bytes("big", 3)))
    field, tensor = r.fields["general.name"], r.tensors[0]
    assert isinstance(field, gguf.ReaderField) and isinstance(tensor, gguf.ReaderTensor)
    assert isinstance(field, tuple) and field._fields == gguf.ReaderField._fields
    assert field.types[0] is gguf.GGUFValueType.STRING and r.endianess is gguf.GGUFEndian.BIG
    assert tensor.tensor_type is gguf.GGMLQuantizationType[tensor.tensor_type.name]
    assert all(isinstance(t.tensor_type, gguf.GGMLQuantizationType) for t in r.tensors)
    assert all(type(k) is gguf.GGUFValueType for k in compat.GGUFReader.gguf_scalar_to_np)
    _offset, _name, parts, data, types = field  # unpacking, indexing and _replace go through the built members
    assert field[2] is parts and field == tuple(field) and field._replace(name="x")[1:] == ("x", parts, data, types)
    assert pickle_round_trip(field).contents() == field.contents()
    with compat.patch():
        assert isinstance(field, gguf.ReaderField) and gguf.ReaderField is compat.ReaderField


def pickle_round_trip(x):
    import pickle

    return pickle.loads(pickle.dumps(x))


# ---------------------------------------------------------------------- bad files


def test_bad_files_raise_our_errors(tmp_path):
    good = demo_bytes()
    with pytest.raises(GGUFTruncatedError) as e:
        compat.GGUFReader(write(tmp_path, good[:100]))
    assert isinstance(e.value, ValueError) and e.value.offset is not None
    with pytest.raises(GGUFFormatError, match="magic"):
        compat.GGUFReader(write(tmp_path, b"GGML" + good[4:]))
    with pytest.raises(GGUFTruncatedError, match="runs past the end"):
        compat.GGUFReader(write(tmp_path, good[: len(good) - 64]))
    with pytest.raises(FileNotFoundError):
        compat.GGUFReader(tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match="mode"):
        compat.GGUFReader(write(tmp_path, good), "w")


def test_repeated_keys_and_tensor_names_are_refused_as_gguf_refuses_them(tmp_path):
    buf = io.BytesIO()
    fields = [gguf_schema.make_field("a", 1), gguf_schema.make_field("a", 2)]
    gguf_schema.writer.write_file(buf, fields, [], version=3, byte_order="little")
    with pytest.raises(KeyError):
        gguf.GGUFReader(str(write(tmp_path, buf.getvalue())))
    with pytest.raises(GGUFFormatError, match="duplicate key 'a'"):
        compat.GGUFReader(write(tmp_path, buf.getvalue()))


def test_limits_apply(tmp_path):
    path = write(tmp_path, demo_bytes())
    with pytest.raises(GGUFLimitError):
        compat.GGUFReader(path, limits=Limits(max_array_length=4))
    assert len(compat.GGUFReader(path, limits=Limits(max_array_length=8)).fields) == 32


# ---------------------------------------------------------------------- quants

BOTH_DEQUANTIZE = [t for t in gguf.GGMLQuantizationType if t.name not in ("Q8_1", "I8", "I16", "I32", "I64", "F64")]


@pytest.mark.parametrize("qtype", BOTH_DEQUANTIZE, ids=lambda t: t.name)
def test_dequantize_gives_gguf_floats(qtype):
    rng = np.random.default_rng(int(qtype))
    t = GGMLType(int(qtype))
    if t.quantized:
        raw = random_blocks(t, 8, rng).reshape(2, 2, -1)
    else:
        raw = np.frombuffer(random_tensor(t, (2, 2, 32), rng).data, np.uint8).reshape(2, 2, -1)
    try:
        theirs = gguf.quants.dequantize(raw, qtype)
    except NotImplementedError:
        pytest.skip(f"gguf-py does not dequantize {qtype.name}")
    ours = compat.dequantize(raw, qtype)
    assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


QUANTIZE = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4"]


@pytest.mark.parametrize("name", QUANTIZE)
def test_quantize_gives_gguf_bytes(name):
    qtype = gguf.GGMLQuantizationType[name]
    x = np.random.default_rng(3).standard_normal((2, 3, 512)).astype(np.float32)
    theirs, ours = gguf.quants.quantize(x, qtype), compat.quantize(x, qtype)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape and ours.tobytes() == theirs.tobytes()
    back_theirs, back_ours = gguf.quants.dequantize(theirs, qtype), compat.dequantize(ours, qtype)
    assert back_ours.tobytes() == back_theirs.tobytes()


def test_quantize_errors_and_types_beyond_gguf():
    with pytest.raises(compat.QuantError):
        compat.quantize(np.ones((2, 100), np.float32), compat.GGMLQuantizationType.Q4_K)
    with pytest.raises(NotImplementedError):
        gguf.quants.quantize(np.ones((2, 256), np.float32), gguf.GGMLQuantizationType.Q4_K)
    x = np.linspace(-1, 1, 3 * 512, dtype=np.float32).reshape(3, 1, 512)
    q = compat.quantize(x, compat.GGMLQuantizationType.Q4_K)  # gguf-py cannot: ggml's bytes, leading axes kept
    assert q.shape == (3, 1, 288) and q.tobytes() == gguf_schema.tensors.quantize(x, "Q4_K").tobytes()
    back = compat.dequantize(q, compat.GGMLQuantizationType.Q4_K)
    assert back.shape == x.shape and np.abs(back - x).max() < 0.05  # 4.5 bits per weight
    with pytest.raises(ValueError, match="not a multiple"):
        compat.dequantize(np.zeros((2, 100), np.uint8), compat.GGMLQuantizationType.Q4_K)


def test_lazy_tensors_are_quantized_when_evaluated():
    lazy = gguf.LazyNumpyTensor.from_eager(np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32))
    q = compat.quantize(lazy, compat.GGMLQuantizationType.Q8_0)
    assert isinstance(q, gguf.LazyNumpyTensor) and q.shape == (2, 34)
    assert gguf.LazyNumpyTensor.to_eager(q).tobytes() == gguf.quants.quantize(lazy.to_eager(lazy), 8).tobytes()


def test_code_tables_have_gguf_names_and_values():
    for cls in ("GGMLQuantizationType", "GGUFValueType", "LlamaFileType", "GGUFEndian"):
        theirs, ours = getattr(gguf, cls), getattr(compat, cls)
        assert {m.name: int(m) for m in theirs} == {m.name: int(m) for m in ours if m.name in theirs.__members__}
        # ggml's newest type and llama.cpp's file type of it, after gguf-py 0.19
        assert set(ours.__members__) - set(theirs.__members__) <= {"Q2_0", "MOSTLY_Q2_0"}
    differ = {t.name for t in gguf.GGML_QUANT_SIZES if compat.GGML_QUANT_SIZES[int(t)] != gguf.GGML_QUANT_SIZES[t]}
    # ggml's Q8_1 block is 36 bytes; gguf-py 0.19.0 on PyPI says 40, llama.cpp's in-tree gguf-py 36
    assert differ <= {"Q8_1"} and compat.GGML_QUANT_SIZES[compat.GGMLQuantizationType.Q8_1] == (32, 36)
    for value in ("s", b"b", [1], 1.5, True, 3):
        assert compat.GGUFValueType.get_type(value) == gguf.GGUFValueType.get_type(value)


# ---------------------------------------------------------------------- writer


def _write_both(tmp_path: Path, calls, **kw) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Run ``calls(writer)`` on gguf-py's GGUFWriter and ours, each in a folder of its own; return the files."""
    out = []
    for name, cls in (("theirs", gguf.GGUFWriter), ("ours", compat.GGUFWriter)):
        folder = tmp_path / name
        folder.mkdir()
        w = cls(folder / "model.gguf", "llama", **kw)
        calls(w)
        out.append({p.name: p.read_bytes() for p in sorted(folder.iterdir())})
    return out[0], out[1]


def _metadata(w, alignment: int = 64) -> None:
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 2**32 - 1)
    w.add_int32("t.i32", np.int32(-7))
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", np.pi)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_string("t.empty", "")  # left out, as gguf-py leaves it out
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, 1.5])
    w.add_array("t.bools", [True, False])
    w.add_array("t.strs", ["a", "", "日本"])
    w.add_array("t.bytes", b"\x00\x01\xff")
    w.add_array("t.nested", [[1, 2], ["x"], [[True]]])
    w.add_key_value("t.typed", [1, 2], compat.GGUFValueType.ARRAY, sub_type=compat.GGUFValueType.UINT64)
    w.add_key_value("t.u32", 5, compat.GGUFValueType.UINT32)  # overwritten in place
    # gguf-py's typed helpers, run on our writer through its primitives
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_name("demo")
    w.add_token_list(["<s>", "</s>", "hi"])
    w.add_token_scores([0.0, -1.0, -2.0])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if alignment != 32:
        w.add_custom_alignment(alignment)


def _tensors(w, raw: bool = True) -> None:
    rng = np.random.default_rng(0)
    w.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("f16", np.arange(7, dtype=np.float16))
    w.add_tensor("i8", np.arange(-4, 4, dtype=np.int8).reshape(2, 4))
    w.add_tensor("i64", np.arange(3, dtype=np.int64))
    w.add_tensor("f64", np.ones((1, 1, 2), np.float64))
    if raw:
        q = random_blocks(GGMLType.Q8_0, 4, rng).reshape(2, -1)
        w.add_tensor("q8", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        bf = np.arange(8, dtype=np.uint16).view(np.uint8).reshape(2, 8)
        w.add_tensor("bf16", bf, raw_dtype=gguf.GGMLQuantizationType.BF16)
        w.add_tensor(
            "q4k", random_blocks(GGMLType.Q4_K, 2, rng), raw_shape=(2, 144), raw_dtype=gguf.GGMLQuantizationType.Q4_K
        )


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("endianess", ["LITTLE", "BIG"])
@pytest.mark.parametrize("temp", [False, True], ids=["in-memory", "use_temp_file"])
def test_writer_calls_give_gguf_bytes(tmp_path, endianess, temp):
    def calls(w):
        _metadata(w)
        _tensors(w)
        _finish(w)

    theirs, ours = _write_both(tmp_path, calls, endianess=gguf.GGUFEndian[endianess], use_temp_file=temp)
    assert list(ours) == ["model.gguf"] and ours == theirs
    with gguf_schema.open(tmp_path / "ours" / "model.gguf") as f:
        assert f.byte_order == endianess.lower() and f.metadata["llama.block_count"] == 2


@pytest.mark.parametrize(
    "split",
    [{"split_max_tensors": 3}, {"split_max_size": 100}, {"split_max_tensors": 2, "small_first_shard": True}],
    ids=["max-tensors", "max-size", "small-first-shard"],
)
def test_split_writes_give_gguf_shards(tmp_path, split):
    def calls(w):
        _metadata(w, alignment=32)
        _tensors(w, raw=False)
        _finish(w)

    theirs, ours = _write_both(tmp_path, calls, **split)
    assert len(ours) > 1 and ours == theirs
    assert next(iter(ours)) == f"model-00001-of-{len(ours):05d}.gguf"


def test_split_with_custom_alignment_gives_every_shard_its_alignment(tmp_path):
    w = compat.GGUFWriter(tmp_path / "m.gguf", "llama", split_max_tensors=2)
    _metadata(w, alignment=64)
    _tensors(w, raw=False)
    _finish(w)
    with gguf_schema.open_split(tmp_path / "m-00001-of-00003.gguf") as model:
        assert model.tensors["i64"].data.tolist() == [0, 1, 2]
    with gguf_schema.open(tmp_path / "m-00003-of-00003.gguf") as last:  # gguf-py leaves the key out here
        assert last.metadata["general.alignment"] == 64 and last.data_offset % 64 == 0


def test_streaming_one_tensor_at_a_time_gives_gguf_bytes(tmp_path):
    """gguf-new-metadata's way: tensor infos first, then each tensor's data, one call each."""
    tensors = {f"t{i}": np.full((4, 8), i, np.float32) for i in range(3)}

    def calls(w):
        w.add_uint32("a", 1)
        for name, t in tensors.items():
            w.add_tensor_info(name, t.shape, t.dtype, t.nbytes)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in tensors.values():
            w.write_tensor_data(t)
        w.close()

    theirs, ours = _write_both(tmp_path, calls)
    assert ours == theirs


def test_lazy_tensors_are_written_as_gguf_writes_them(tmp_path):
    def calls(w):
        base = gguf.LazyNumpyTensor.from_eager(np.arange(64, dtype=np.float32).reshape(2, 32))
        w.add_tensor("lazy", base * 2)
        w.add_tensor("q", gguf.quants.quantize(base, gguf.GGMLQuantizationType.Q8_0), raw_dtype=8)
        _finish(w)

    theirs, ours = _write_both(tmp_path, calls)
    assert ours == theirs


class ChunkedTensor:
    """A tensor with the protocol of llama.cpp's newest gguf-py ``LazyChunkedTensor`` (written here, not
    taken from it): ``shape``, ``dtype``, ``nbytes``, ``byteswap``, and ``tofile`` that loads and writes one
    chunk of rows at a time; it refuses to become an ndarray (gguf-py's refuses since llama.cpp #27869).
    ``by_write`` writes each chunk with ``fout.write`` instead of numpy's ``tofile`` (which needs a real file)."""

    def __init__(self, loaders, shape, dtype, by_write=False, loaded=None):
        self.loaders, self.shape, self.dtype, self.by_write = loaders, tuple(shape), np.dtype(dtype), by_write
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.loaded = loaded if loaded is not None else [0]  # chunks loaded (shared with its byteswapped copy)

    def __array__(self, *args, **kw):
        raise TypeError("ChunkedTensor cannot become an ndarray")

    def byteswap(self, inplace=False):
        swapped = [lambda f=f: f().byteswap() for f in self.loaders]
        return ChunkedTensor(swapped, self.shape, self.dtype, self.by_write, self.loaded)

    def tofile(self, fout):
        for load in self.loaders:
            chunk = np.ascontiguousarray(load(), self.dtype)
            self.loaded[0] += 1
            if self.by_write:
                fout.write(chunk.tobytes())
            else:
                chunk.tofile(fout)


def _chunked(rows: int = 10, cols: int = 24, step: int = 3, by_write: bool = False) -> ChunkedTensor:
    full = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    loaders = [lambda a=a: full[a : a + step] for a in range(0, rows, step)]
    return ChunkedTensor(loaders, full.shape, np.float32, by_write)


@pytest.mark.parametrize("how", ["in-memory", "use_temp_file", "big-endian", "by-write", "split", "streaming"])
def test_chunked_tensors_write_themselves_as_in_gguf(tmp_path, how):
    kw = {
        "use_temp_file": {"use_temp_file": True},
        "big-endian": {"endianess": gguf.GGUFEndian.BIG},
        "split": {"split_max_tensors": 1},
    }.get(how, {})
    made = []

    def calls(w):
        t = _chunked(by_write=how == "by-write")
        made.append(t)
        if how == "streaming":
            w.add_tensor_info("chunked", t.shape, t.dtype, t.nbytes)
            w.add_tensor_info("after", (3,), np.float32, 12)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_ti_data_to_file()
            w.write_tensor_data(t)
            w.write_tensor_data(np.ones(3, np.float32))
            w.close()
            return
        w.add_tensor("before", np.ones(5, np.float16))
        w.add_tensor("chunked", t)
        w.add_tensor("after", np.arange(3, dtype=np.int32))
        _finish(w)

    theirs, ours = _write_both(tmp_path, calls, **kw)
    assert ours == theirs and all(t.loaded == [4] for t in made)
    with compat.patch():  # and through the names gguf-py's users call
        folder = tmp_path / "patched"
        folder.mkdir()
        w = gguf.GGUFWriter(folder / "model.gguf", "llama", **kw)
        calls(w)
        assert {p.name: p.read_bytes() for p in sorted(folder.iterdir())} == theirs


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "big-endian"])
def test_gguf_pys_own_lazy_chunked_tensors_write_as_in_gguf(tmp_path, qtype):
    # llama.cpp's in-tree gguf-py (its converter's conversion/qwen4exp.py): run where it is installed (CI installs it
    # in a step of its own from llama.cpp's source), skipped with gguf-py 0.19.0 from PyPI, which has no such class
    lazy_chunked = getattr(gguf, "LazyChunkedTensor", None)
    if lazy_chunked is None:
        pytest.skip("the installed gguf-py has no LazyChunkedTensor (llama.cpp's in-tree gguf-py has)")
    full = np.linspace(-3, 3, 8 * 64, dtype=np.float32).reshape(8, 64)
    kw = {"endianess": gguf.GGUFEndian.BIG} if qtype == "big-endian" else {}

    def calls(w):
        t = lazy_chunked([lambda a=a: full[a : a + 3] for a in range(0, 8, 3)], full.shape, np.float32)
        if qtype not in ("F32", "big-endian"):
            t = t.quantize(gguf.GGMLQuantizationType[qtype])
        w.add_tensor("before", np.ones(5, np.float16))
        if qtype == "big-endian":
            t = t.byteswap()
        w.add_tensor(
            "chunked", t, raw_dtype=None if qtype in ("F32", "big-endian") else gguf.GGMLQuantizationType[qtype]
        )
        _finish(w)

    theirs, ours = _write_both(tmp_path, calls, **kw)
    assert ours == theirs and len(ours["model.gguf"]) > full.nbytes // 4
    with compat.patch():
        folder = tmp_path / "patched"
        folder.mkdir()
        w = gguf.GGUFWriter(folder / "model.gguf", "llama", **kw)
        calls(w)
        assert {p.name: p.read_bytes() for p in sorted(folder.iterdir())} == theirs


def test_gguf_pys_remove_key_and_add_chat_template_none_as_in_gguf(tmp_path):
    # llama.cpp's in-tree gguf-py: remove_key (add_chat_template(None) removes the template), run on compat's writer
    # through the installed gguf-py's own method; skipped with gguf-py 0.19.0 from PyPI, which has neither
    if not hasattr(gguf.GGUFWriter, "remove_key"):
        pytest.skip("the installed gguf-py's GGUFWriter has no remove_key (llama.cpp's in-tree gguf-py has)")

    def calls(w):
        _metadata(w)
        w.add_chat_template("{{ messages }}")
        w.add_string("t.gone", "x")
        w.remove_key("t.gone")
        w.remove_key("t.never-there")
        w.add_chat_template(None)
        w.add_tensor("w", np.ones(4, np.float32))
        _finish(w)

    theirs, ours = _write_both(tmp_path, calls)
    assert ours == theirs and b"t.gone" not in ours["model.gguf"] and b"chat_template" not in ours["model.gguf"]


def test_a_chunked_tensor_that_writes_the_wrong_size_is_refused(tmp_path):
    t = _chunked()
    t.nbytes += 4  # says more than it writes
    w = compat.GGUFWriter(tmp_path / "m.gguf", "llama")
    w.add_tensor("chunked", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    with pytest.raises(GGUFError, match="expected"):
        w.write_tensors_to_file()
    with pytest.raises(ValueError, match="incomplete"):
        w.close()
    assert not (tmp_path / "m.gguf").exists()


def test_vocab_only_files_and_empty_models_give_gguf_bytes(tmp_path):
    def header_and_keys(w):
        _metadata(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.close()

    theirs, ours = _write_both(tmp_path / "a", header_and_keys) if (tmp_path / "a").mkdir() is None else ({}, {})
    assert ours == theirs and len(ours["model.gguf"]) > 24

    def no_tensors(w):
        _metadata(w)
        _finish(w)

    theirs, ours = _write_both(tmp_path / "b", no_tensors) if (tmp_path / "b").mkdir() is None else ({}, {})
    assert ours == theirs


def test_writes_are_atomic_and_incomplete_files_are_not_published(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"old")
    w = compat.GGUFWriter(path, "llama")
    w.add_tensor("a", np.ones(4, np.float32))
    w.add_tensor_info("b", (4,), np.dtype(np.float32), 16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert path.read_bytes() == b"old"  # nothing is visible before the file is complete
    w.write_tensor_data(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="1 tensors declared but not written"):
        w.close()
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


def test_writer_misuse_raises_as_gguf_does(tmp_path):
    w = compat.GGUFWriter(tmp_path / "m.gguf", "llama")
    w.add_tensor("a", np.ones(4, np.float32))
    with pytest.raises(ValueError, match="Duplicated tensor name"):
        w.add_tensor("a", np.ones(4, np.float32))
    with pytest.raises(ValueError, match="Only F16, F32"):
        w.add_tensor("u", np.ones(4, np.uint32))
    with pytest.raises(ValueError, match="Expected output file to contain the header"):
        w.write_kv_data_to_file()
    w.add_array("bad", [1, "x"])
    with pytest.raises(ValueError, match="same type"):
        w.write_header_to_file()
    w2 = compat.GGUFWriter(tmp_path / "n.gguf", "llama")
    w2.add_uint8("big", 300)
    with pytest.raises(GGUFError, match="300 does not fit in UINT8"):
        w2.write_header_to_file()
    assert not (tmp_path / "m.gguf").exists() and not (tmp_path / "n.gguf").exists()


def test_dry_run_logs_the_plan_and_exits_without_writing(tmp_path, caplog):
    w = compat.GGUFWriter(tmp_path / "m.gguf", "llama", dry_run=True, split_max_tensors=1)
    w.add_tensor("a", np.ones(4, np.float32))
    w.add_tensor("b", np.ones(4, np.float32))
    with caplog.at_level("INFO", logger="gguf_schema.compat"), pytest.raises(SystemExit):
        w.write_header_to_file()
    assert "m-00002-of-00002.gguf" in caplog.text and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- patch()


def test_patch_swaps_names_and_unpatch_restores_them():
    import gguf.scripts.gguf_dump as dump  # imported before patch(): bound gguf-py's reader at its top

    before = (gguf.GGUFReader, gguf.gguf_reader.GGUFReader, gguf.GGUFWriter, gguf.quants.dequantize, dump.GGUFReader)
    with compat.patch() as handle:
        assert handle.applied and compat.is_patched()
        assert gguf.GGUFReader is gguf.gguf_reader.GGUFReader is compat.GGUFReader
        assert dump.GGUFReader is compat.GGUFReader  # rebound in the module that imported it earlier
        assert gguf.GGUFWriter is compat.GGUFWriter and gguf.gguf_writer.GGUFWriter is compat.GGUFWriter
        assert gguf.quants.dequantize is gguf.dequantize is compat.dequantize
        assert gguf.QuantError is gguf.quants.QuantError is compat.QuantError
        assert not compat.patch().applied  # a second patch() changes nothing
        from gguf import GGUFReader  # imported after patch()

        assert GGUFReader is compat.GGUFReader
        assert gguf.Keys is not None and gguf.MODEL_ARCH is not None  # gguf-py's own tables stay
    assert not compat.is_patched()
    assert (
        gguf.GGUFReader,
        gguf.gguf_reader.GGUFReader,
        gguf.GGUFWriter,
        gguf.quants.dequantize,
        dump.GGUFReader,
    ) == before


def test_patched_writer_keeps_gguf_helpers_and_isinstance(tmp_path):
    with compat.patch():
        w = gguf.GGUFWriter(tmp_path / "m.gguf", "llama")
        w.add_feed_forward_length(64)
        w.add_chat_template("{{ x }}")
        assert isinstance(w, gguf.GGUFWriter)
        _finish(w)
    with gguf_schema.open(tmp_path / "m.gguf") as f:
        assert f.metadata["llama.feed_forward_length"] == 64 and f.metadata["tokenizer.chat_template"] == "{{ x }}"


def _run_script(module: str, argv: list[str], patched: bool, monkeypatch) -> str:
    """Run one of gguf-py's scripts as its command would (``main()`` with ``argv``); return what it printed."""
    mod = __import__(f"gguf.scripts.{module}", fromlist=["main"])
    monkeypatch.setattr(sys, "argv", [module, *argv])
    monkeypatch.setattr("builtins.input", lambda prompt="": "YES")
    out = io.StringIO()
    with compat.patch() if patched else contextlib.nullcontext(), contextlib.redirect_stdout(out):
        if patched:  # whether it reaches the reader through the module or bound it at import
            assert gguf.GGUFReader is getattr(mod, "GGUFReader", gguf.GGUFReader) is compat.GGUFReader
        with contextlib.suppress(SystemExit):
            mod.main()
    return out.getvalue()


def _script_inputs(tmp_path: Path) -> list[Path]:
    demo = write(tmp_path, demo_bytes(), "demo.gguf")
    real = VOCAB_DIR / "ggml-vocab-bert-bge.gguf"  # the smallest real file: gguf-py reads it in under a second
    return [demo, real]


@pytest.mark.parametrize("args", [[], ["--json", "--json-array"], ["--markdown"]], ids=["text", "json", "markdown"])
def test_gguf_dump_prints_the_same_under_patch(tmp_path, monkeypatch, args):
    for path in _script_inputs(tmp_path)[: 1 if args else 2]:
        theirs = _run_script("gguf_dump", [str(path), *args], False, monkeypatch)
        ours = _run_script("gguf_dump", [str(path), *args], True, monkeypatch)
        assert ours == theirs and len(ours) > 500


def _copies(tmp_path: Path, path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / f"theirs-{path.name}", tmp_path / f"ours-{path.name}"
    shutil.copy(path, a)
    shutil.copy(path, b)
    return a, b


def test_gguf_set_metadata_edits_the_same_bytes_under_patch(tmp_path, monkeypatch):
    for path in _script_inputs(tmp_path):
        a, b = _copies(tmp_path, path)
        with gguf_schema.open(path) as f:
            key = next(k for k in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.mask_token_id") if k in f.fields)
        _run_script("gguf_set_metadata", [str(a), key, "5", "--force"], False, monkeypatch)
        _run_script("gguf_set_metadata", [str(b), key, "5", "--force"], True, monkeypatch)
        assert a.read_bytes() == b.read_bytes() != path.read_bytes()


def test_gguf_new_metadata_writes_the_same_file_under_patch(tmp_path, monkeypatch):
    for path in _script_inputs(tmp_path):
        outs = []
        for patched in (False, True):
            out = tmp_path / f"new-{patched}-{path.name}"
            args = [str(path), str(out), "--general-name", "renamed", "--special-token-by-id", "bos", "1", "--force"]
            _run_script("gguf_new_metadata", args, patched, monkeypatch)
            outs.append(out.read_bytes())
        assert outs[0] == outs[1]
        with gguf_schema.open(tmp_path / f"new-True-{path.name}") as f:
            assert f.metadata["general.name"] == "renamed"


def test_gguf_convert_endian_swaps_the_same_bytes_under_patch(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    tensors = {
        t: random_tensor(GGMLType[t], (2, 256), rng) for t in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")
    }
    src = tmp_path / "m.gguf"
    gguf_schema.save(src, example_metadata(nested=False), tensors)
    a, b = _copies(tmp_path, src)
    _run_script("gguf_convert_endian", [str(a), "big"], False, monkeypatch)
    _run_script("gguf_convert_endian", [str(b), "big"], True, monkeypatch)
    assert a.read_bytes() == b.read_bytes() != src.read_bytes()
    with gguf_schema.open(b) as big, gguf_schema.open(src) as little:
        assert big.byte_order == "big"
        assert big.tensors["Q4_K"].dequantize().tobytes() == little.tensors["Q4_K"].dequantize().tobytes()
    _run_script("gguf_convert_endian", [str(b), "little"], True, monkeypatch)
    assert b.read_bytes() == src.read_bytes()


def record_digests() -> None:
    """Read every real file with gguf-py and record the digest of its reading (gguf-py takes ~30 s for all)."""
    digests = {p.name: reading_digest(gguf.GGUFReader(str(p))) for p in VOCAB_FILES}
    DIGESTS.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    record_digests()
