"""The JSON form: every stored detail survives JSON text and comes back as the same bytes."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import gguf_schema
from gguf_schema import BoolByte, Field, GGUFArray, ValueType
from gguf_schema.errors import GGUFBuildError
from gguf_schema.tools.jsonio import build, dumps, from_json, loads, to_json

from .conftest import demo_bytes

BAD = b"\xff\xfeok".decode("utf-8", "surrogateescape")


def roundtrip(data: bytes, tensors_from: bool = True) -> bytes:
    with gguf_schema.open(data) as f:
        text = dumps(f)
        out = io.BytesIO()
        build(loads(text), out, tensors_from=f if tensors_from else None)
    return out.getvalue()


def odd_file(byte_order: str = "little", version: int = 3) -> bytes:
    nan_bits = np.array([0x7F800001, 0xFFC00001, 0x7FC00000, 0x80000000], np.uint32).view(np.float32)
    fields = [
        Field("dup", ValueType.UINT8, 1),
        Field("dup", ValueType.STRING, "second"),  # duplicate key, other type
        Field("f32.snan", ValueType.FLOAT32, np.uint32(0x7F800001).view(np.float32)),
        Field("f32.tenth", ValueType.FLOAT32, np.float32(0.1)),
        Field("f64.neg0", ValueType.FLOAT64, np.float64(-0.0)),
        Field("f64.nan", ValueType.FLOAT64, np.uint64(0x7FF0000000000123).view(np.float64)),
        Field("f32.inf", ValueType.FLOAT32, np.float32(-np.inf)),
        Field("bool.byte", ValueType.BOOL, BoolByte(7)),
        Field("bools", ValueType.ARRAY, GGUFArray(ValueType.BOOL, np.array([0, 1, 2], np.uint8).view(np.bool_))),
        Field("bad.utf8", ValueType.STRING, BAD),
        Field("key." + BAD, ValueType.UINT64, 2**64 - 1),
        Field("floats", ValueType.ARRAY, GGUFArray(ValueType.FLOAT32, nan_bits)),
        Field(
            "nested",
            ValueType.ARRAY,
            GGUFArray(
                ValueType.ARRAY,
                [GGUFArray(ValueType.INT16, np.array([-1], np.int16)), GGUFArray(ValueType.STRING, [BAD, ""])],
            ),
        ),
        Field("empty", ValueType.ARRAY, GGUFArray(ValueType.UINT32, np.array([], np.uint32))),
    ]
    buf = io.BytesIO()
    gguf_schema.save(buf, fields, {"w" + BAD: np.arange(4, dtype=np.float32)}, byte_order=byte_order, version=version)
    return buf.getvalue()


@pytest.mark.parametrize("byte_order,version", [("little", 3), ("big", 3), ("little", 2), ("little", 1), ("big", 1)])
def test_odd_values_rebuild_byte_for_byte(byte_order: str, version: int) -> None:
    data = odd_file(byte_order, version)
    assert roundtrip(data) == data


def test_json_shows_values_readably() -> None:
    with gguf_schema.open(odd_file()) as f:
        doc = json.loads(dumps(f))
    by_key = {}
    for rec in doc["metadata"]:
        by_key.setdefault(json.dumps(rec["key"]), []).append(rec)
    assert [r["value"] for r in by_key['"dup"']] == [1, "second"]
    assert by_key['"f32.snan"'][0]["value"] == "0x7f800001"
    assert by_key['"f32.tenth"'][0]["value"] == 0.1
    assert by_key['"f64.nan"'][0]["value"] == "0x7ff0000000000123"
    assert by_key['"f32.inf"'][0]["value"] == "-inf"
    assert by_key['"bool.byte"'][0]["value"] == 7
    assert by_key['"bools"'][0]["value"] == [False, True, 2]
    assert by_key['"bad.utf8"'][0]["value"] == {"hex": "fffe6f6b"}
    assert by_key['{"hex": "6b65792efffe6f6b"}'][0]["value"] == 2**64 - 1
    assert by_key['"floats"'][0]["value"] == ["0x7f800001", "0xffc00001", "nan", -0.0]
    assert by_key['"nested"'][0]["value"] == [
        {"element_type": "INT16", "value": [-1]},
        {"element_type": "STRING", "value": [{"hex": "fffe6f6b"}, ""]},
    ]
    assert doc["tensors"] == [{"name": {"hex": "77fffe6f6b"}, "type": "F32", "dims": [4], "offset": 0}]
    assert (doc["version"], doc["byte_order"], doc["alignment"]) == (3, "little", 32)


def test_non_zero_padding_is_kept() -> None:
    data = bytearray(demo_bytes())
    with gguf_schema.open(bytes(data)) as f:
        start, end = f.metadata_end, f.data_offset
    data[start:end] = b"\xaa" * (end - start)
    assert roundtrip(bytes(data)) == bytes(data)


def test_shortest_float32_decimal_for_a_whole_vocabulary_of_scores() -> None:
    scores = np.random.default_rng(3).standard_normal(5000).astype(np.float32)
    buf = io.BytesIO()
    gguf_schema.save(buf, {"tokenizer.ggml.scores": scores})
    with gguf_schema.open(buf.getvalue()) as f:
        values = to_json(f)["metadata"][0]["value"]
    assert all(len(repr(v)) <= 15 for v in values)  # shortest decimals, not 17-digit doubles
    assert np.array_equal(np.array(values, np.float64).astype(np.float32).view(np.uint32), scores.view(np.uint32))
    assert roundtrip(buf.getvalue()) == buf.getvalue()


def test_hand_written_json_without_offsets_lays_tensors_out(tmp_path) -> None:
    src = io.BytesIO()
    gguf_schema.save(src, {}, {"a": np.ones(3, np.float32), "b": np.zeros((2, 2), np.float16)})
    doc = {
        "metadata": [
            {"key": "general.name", "type": "string", "value": "hand"},
            {"key": "ids", "type": "ARRAY", "element_type": "INT8", "value": [-1, 2]},
        ],
        "tensors": [{"name": "b", "type": "F16", "dims": [2, 2]}, {"name": "a", "type": 0, "dims": [3]}],
    }
    out = tmp_path / "hand.gguf"
    with gguf_schema.open(src.getvalue()) as s:
        build(doc, out, tensors_from=s)
    with gguf_schema.open(out) as f:
        assert f.metadata["general.name"] == "hand" and f.metadata["ids"].tolist() == [-1, 2]
        assert [(t.name, t.stored_offset) for t in f.tensor_list] == [("b", 0), ("a", 32)]
        assert f.tensors["a"].data.tolist() == [1.0, 1.0, 1.0]


def test_json_errors_name_the_member() -> None:
    cases = [
        ({"metadata": [{"key": "k", "type": "UINT8", "value": 300}]}, "300 does not fit in UINT8", "metadata[0] 'k'"),
        (
            {"metadata": [{"key": "k", "type": "FLOAT32", "value": "pi"}]},
            "FLOAT32 needs a number",
            "metadata[0] 'k'.value",
        ),
        (
            {"metadata": [{"key": "k", "type": "BOOLEAN", "value": True}]},
            "unknown value type 'BOOLEAN'",
            "metadata[0] 'k'.type",
        ),
        ({"metadata": [{"key": "k", "type": "ARRAY", "value": []}]}, 'needs "element_type"', "metadata[0] 'k'"),
        (
            {"metadata": [{"key": "k", "type": "ARRAY", "element_type": "INT8", "value": [1, 200]}]},
            "do not fit in INT8",
            "metadata[0] 'k'.value",
        ),
        ({"metadata": [{"key": {"hex": "zz"}, "type": "UINT8", "value": 1}]}, "not hex", "metadata[0].key"),
        ({"version": 4, "metadata": []}, "version must be 1, 2 or 3", "version"),
        ({"byte_order": "middle"}, "byte_order must be", "byte_order"),
        ({"tensors": [{"name": "t", "type": "Q9_9", "dims": [1]}]}, "unknown ggml type 'Q9_9'", "tensors[0].type"),
    ]
    for doc, reason, path in cases:
        with pytest.raises(GGUFBuildError) as e:
            from_json(doc)
        assert reason in e.value.reason and e.value.path == path, doc
    with pytest.raises(GGUFBuildError, match="not JSON: Expecting value at line 1 column 14"):
        loads('{"metadata": ]')


def test_tensor_source_must_match_the_json(tmp_path) -> None:
    src = io.BytesIO()
    gguf_schema.save(src, {}, {"a": np.ones(4, np.float32)})
    doc = {"metadata": [], "tensors": [{"name": "a", "type": "F16", "dims": [4]}]}
    with gguf_schema.open(src.getvalue()) as s:
        with pytest.raises(GGUFBuildError, match="tensor 'a' is F32 \\[4\\] in the source, F16 \\[4\\] in the JSON"):
            build(doc, tmp_path / "x.gguf", tensors_from=s)
        with pytest.raises(GGUFBuildError, match="tensor 'zz' is not in"):
            build({"tensors": [{"name": "zz", "type": "F32", "dims": [4]}]}, tmp_path / "x.gguf", tensors_from=s)
    assert not (tmp_path / "x.gguf").exists()
