"""Export to safetensors: read back with the safetensors package and compared with Tensor.dequantize() bit for bit."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGMLType, GGUFFormatError, RawTensor
from gguf_schema.cli import main
from gguf_schema.tensors import quantize
from gguf_schema.testing.fixtures import random_tensor
from gguf_schema.tools import export as export_mod
from gguf_schema.tools.export import MAX_HEADER, export_safetensors, gguf_metadata
from gguf_schema.tools.split import split

st = pytest.importorskip("safetensors")
from safetensors.numpy import load_file  # noqa: E402

QUANTIZED = [
    GGMLType.Q4_0,
    GGMLType.Q5_1,
    GGMLType.Q8_0,
    GGMLType.Q2_K,
    GGMLType.Q4_K,
    GGMLType.Q6_K,
    GGMLType.IQ2_XS,
    GGMLType.IQ4_NL,
    GGMLType.IQ4_XS,
    GGMLType.TQ1_0,
    GGMLType.MXFP4,
]


def make_model(path: Path) -> Path:
    """A model with quantized, float, integer, 0-d, empty and 3-D tensors and a variety of metadata."""
    rng = np.random.default_rng(7)
    tensors: dict = {}
    for t in QUANTIZED:
        tensors[f"q.{t.name.lower()}"] = random_tensor(t, (3, 2 * t.block_size), rng)
    tensors["f16"] = random_tensor(GGMLType.F16, (4, 8), rng)
    tensors["bf16"] = random_tensor(GGMLType.BF16, (2, 16), rng)
    tensors["f32.3d"] = random_tensor(GGMLType.F32, (2, 3, 4), rng)
    tensors["f64"] = random_tensor(GGMLType.F64, (5,), rng)
    tensors["i8"] = random_tensor(GGMLType.I8, (7,), rng)
    tensors["i32"] = random_tensor(GGMLType.I32, (2, 3), rng)
    tensors["i64"] = random_tensor(GGMLType.I64, (3,), rng)
    tensors["empty"] = random_tensor(GGMLType.Q8_0, (0, 32), rng)
    tensors["scalar"] = RawTensor(GGMLType.F32, (), np.float32(2.5).astype("<f4").tobytes())
    meta = {
        "general.architecture": "llama",
        "general.name": "héllo",
        "llama.block_count": np.uint32(2),
        "x.floats": np.array([0.1, np.nan, -0.0], np.float32),
        "x.words": ["a", "ü", ""],
        "x.flag": True,
        "x.big": np.uint64(2**63 + 1),
        "x.eps": np.float32(1e-6),
    }
    gguf_schema.save(path, meta, tensors)
    return path


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_model(tmp_path / "m.gguf")


def raw_tensors(path: Path) -> dict[str, dict]:
    """Every tensor as safetensors' own parser sees it: dtype, shape and raw bytes (BF16 included)."""
    return dict(st.deserialize(path.read_bytes()))


def test_f32_export_equals_dequantize_bit_for_bit(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.safetensors"
    result = export_safetensors(src, out)
    loaded = load_file(str(out))
    with gguf_schema.open(src) as f:
        assert set(loaded) == {t.name for t in f.tensor_list}
        for t in f.tensor_list:
            a = loaded[t.name]
            assert a.shape == t.shape, t.name
            if t.type in (GGMLType.I8, GGMLType.I32, GGMLType.I64):  # integers keep their type and values
                assert a.dtype == t.data.dtype and np.array_equal(a, t.data), t.name
            else:
                assert a.dtype == np.float32
                assert a.tobytes() == t.dequantize().astype("<f4").tobytes(), t.name
        assert result.tensors == len(f.tensor_list)
    assert result.file_bytes == os.path.getsize(out)
    assert loaded["scalar"].shape == () and float(loaded["scalar"]) == 2.5
    assert loaded["empty"].shape == (0, 32)


def test_header_layout(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.safetensors"
    export_safetensors(src, out, dtype="f16")
    raw = out.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert n % 8 == 0 and raw[8:9] == b"{" and raw[8 + n - 1 : 8 + n] in (b" ", b"}")
    header = json.loads(raw[8 : 8 + n])
    assert next(iter(header)) == "__metadata__"
    entries = [(k, v) for k, v in header.items() if k != "__metadata__"]
    # back to back, no holes, widest elements first so every tensor is aligned to its element size
    end = 0
    for name, e in sorted(entries, key=lambda kv: kv[1]["data_offsets"]):
        assert e["data_offsets"][0] == end
        size = {"F16": 2, "I8": 1, "I32": 4, "I64": 8}[e["dtype"]]
        assert e["data_offsets"][0] % size == 0, name
        end = e["data_offsets"][1]
    assert end == len(raw) - 8 - n
    names = [k for k, _ in entries]  # by element size (8, 4, 2, 1 bytes), file order within a size
    assert names[:4] == ["i64", "i32", "q.q4_0", "q.q5_1"] and names[-1] == "i8"
    assert (
        header["f32.3d"]["shape"] == [2, 3, 4] and header["scalar"]["shape"] == [] and header["i32"]["dtype"] == "I32"
    )


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_f16_and_bf16_round_as_quantize_does(src: Path, tmp_path: Path, dtype: str) -> None:
    out = tmp_path / "m.safetensors"
    export_safetensors(src, out, dtype=dtype)
    tensors = raw_tensors(out)
    with gguf_schema.open(src) as f:
        for t in f.tensor_list:
            got = tensors[t.name]
            assert got["shape"] == list(t.shape)
            if t.type in (GGMLType.I8, GGMLType.I32, GGMLType.I64):
                continue
            assert got["dtype"] == dtype.upper()
            if t.n_elements == 0:
                assert got["data"] == b""
                continue
            x = t.dequantize().reshape(-1)
            assert bytes(got["data"]) == quantize(x, dtype.upper()).tobytes(), t.name
            if t.type.name == dtype.upper():  # stored in the output type: the very bytes of the file
                assert bytes(got["data"]) == t.raw().tobytes()


def test_bf16_rounds_to_nearest_even(tmp_path: Path) -> None:
    # 0x3F808000 is halfway between the BF16 values 0x3F80 and 0x3F81: even 0x3F80 wins; 0x3F818000 rounds up to 0x3F82
    x = np.array([0x3F808000, 0x3F818000, 0x3F808001], np.uint32).view(np.float32).reshape(1, 3)
    p = tmp_path / "x.gguf"
    gguf_schema.save(p, {"general.architecture": "llama"}, {"x": x})
    export_safetensors(p, tmp_path / "x.safetensors", dtype="bf16")
    assert np.frombuffer(raw_tensors(tmp_path / "x.safetensors")["x"]["data"], "<u2").tolist() == [
        0x3F80,
        0x3F82,
        0x3F81,
    ]


def test_metadata_round_trips_with_its_types(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.safetensors"
    export_safetensors(src, out)
    with st.safe_open(str(out), "np") as g:
        stored = g.metadata()
    assert json.loads(stored["llama.block_count"]) == {"type": "UINT32", "value": 2}
    assert json.loads(stored["x.floats"]) == {"type": "ARRAY", "element_type": "FLOAT32", "value": [0.1, "nan", -0.0]}
    raw = out.read_bytes()
    in_file = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])["__metadata__"]
    with gguf_schema.open(src) as f:
        assert list(in_file) == list(f.fields)  # the file keeps GGUF's key order (safe_open's mapping has none)
        assert gguf_metadata(in_file) == f.fields.records  # types and values, bit for bit (NaN, -0.0, UINT64)
        by_key = lambda x: x.key  # noqa: E731
        assert sorted(gguf_metadata(stored), key=by_key) == sorted(f.fields.records, key=by_key)


def test_big_endian_source_gives_the_same_file(tmp_path: Path) -> None:
    le, be = make_model(tmp_path / "le.gguf"), tmp_path / "be.gguf"
    with gguf_schema.open(le) as f:
        f.save(be, byte_order="big")  # every block's fields swapped: the same values
    for dtype in ("f32", "f16"):
        export_safetensors(le, tmp_path / "le.safetensors", dtype=dtype)
        export_safetensors(be, tmp_path / "be.safetensors", dtype=dtype)
        assert (tmp_path / "le.safetensors").read_bytes() == (tmp_path / "be.safetensors").read_bytes()


def test_chunks_of_rows_and_progress(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = tmp_path / "whole.safetensors"
    export_safetensors(src, whole)
    calls: list[tuple[str, slice | None]] = []
    real = gguf_schema.Tensor.dequantize

    def spy(self, rows=None, **kw):  # type: ignore[no-untyped-def]
        calls.append((self.name, rows))
        return real(self, rows=rows, **kw)

    monkeypatch.setattr(export_mod, "_CHUNK_ELEMENTS", 40)
    monkeypatch.setattr(gguf_schema.Tensor, "dequantize", spy)
    seen: list[tuple[int, int]] = []
    chunked = tmp_path / "chunked.safetensors"
    export_safetensors(src, chunked, progress=lambda done, total: seen.append((done, total)))
    assert chunked.read_bytes() == whole.read_bytes()
    # 40 values per step: Q4_0 rows of 64 values go one at a time, F32 rows of 4 values ten at a time
    assert [r for n, r in calls if n == "q.q4_0"] == [slice(0, 1), slice(1, 2), slice(2, 3)]
    assert "f32.3d" not in {n for n, _ in calls}  # stored as f32 already: copied, not decoded
    total = seen[-1][1]
    assert seen[-1][0] == total == os.path.getsize(chunked) - 8 - int.from_bytes(chunked.read_bytes()[:8], "little")
    assert all(a[0] < b[0] for a, b in itertools.pairwise(seen))


def test_tensor_filter(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.safetensors"
    r = export_safetensors(src, out, tensors=r"^q\.q[48]")
    assert sorted(load_file(str(out))) == ["q.q4_0", "q.q4_k", "q.q8_0"] and r.tensors == 3
    with pytest.raises(ValueError, match="no tensor name matches 'nothing'"):
        export_safetensors(src, tmp_path / "none.safetensors", tensors="nothing")
    with pytest.raises(ValueError, match="not a regular expression"):
        export_safetensors(src, tmp_path / "none.safetensors", tensors="(")
    assert not (tmp_path / "none.safetensors").exists()
    with pytest.raises(ValueError, match="dtype must be one of 'f32', 'f16', 'bf16'"):
        export_safetensors(src, out, dtype="f8")


def test_never_over_the_source(src: Path, tmp_path: Path) -> None:
    before = src.read_bytes()
    with pytest.raises(ValueError, match="refusing to write the export over its source"):
        export_safetensors(src, src)
    link = tmp_path / "link.gguf"
    os.link(src, link)
    with pytest.raises(ValueError, match="over its source"):
        export_safetensors(src, link)
    with gguf_schema.open(src) as f, pytest.raises(ValueError, match="over its source"):
        export_safetensors(f, str(src))
    assert src.read_bytes() == before


def test_a_failed_export_leaves_the_old_target(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.safetensors"
    out.write_bytes(b"old")

    def fail(done: int, total: int) -> None:
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        export_safetensors(src, out, progress=fail)
    assert out.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["m.gguf", "m.safetensors"]


def _patched(tmp_path: Path, patch) -> Path:  # type: ignore[no-untyped-def]
    p = tmp_path / "bad.gguf"
    gguf_schema.save(p, {"general.architecture": "llama"}, {"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)})
    data = bytearray(p.read_bytes())
    with gguf_schema.open(bytes(data)) as f:
        patch(data, f.tensors["b"].info_offset)
    p.write_bytes(bytes(data))
    return p


def test_unknown_type_and_duplicate_names_are_format_errors(tmp_path: Path) -> None:
    def unknown_type(
        data: bytearray, at: int
    ) -> None:  # name "b": 8 + 1 bytes, n_dims 4 bytes, 1 dim 8 bytes, then the type
        data[at + 21 : at + 25] = (99).to_bytes(4, "little")

    def duplicate(data: bytearray, at: int) -> None:
        data[at + 8 : at + 9] = b"a"

    out = tmp_path / "x.safetensors"
    with pytest.raises(GGUFFormatError, match="unknown ggml type 99"):
        export_safetensors(_patched(tmp_path, unknown_type), out)
    with pytest.raises(GGUFFormatError, match="tensor name 'a' appears twice"):
        export_safetensors(_patched(tmp_path, duplicate), out)
    assert not out.exists()


def test_a_header_too_large_for_readers_is_refused(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_mod, "MAX_HEADER", 64)
    with pytest.raises(ValueError, match="header would take .* readers refuse more than 64"):
        export_safetensors(src, tmp_path / "x.safetensors")
    assert MAX_HEADER == 100_000_000


def test_split_model_exports_as_one(src: Path, tmp_path: Path) -> None:
    shards = split(src, str(tmp_path / "s"), max_tensors=5)
    assert len(shards) > 2
    export_safetensors(src, tmp_path / "one.safetensors")
    export_safetensors(shards[0], tmp_path / "many.safetensors")
    one, many = raw_tensors(tmp_path / "one.safetensors"), raw_tensors(tmp_path / "many.safetensors")
    assert one == many


def test_gemma_subset(gemma: Path, tmp_path: Path) -> None:
    out = tmp_path / "g.safetensors"
    export_safetensors(gemma, out, tensors=r"^(blk\.0\.|output_norm)", dtype="f32")
    loaded = load_file(str(out))
    with gguf_schema.open(gemma) as f, st.safe_open(str(out), "np") as g:
        assert len(loaded) == 14
        for name, a in loaded.items():
            assert a.tobytes() == f.tensors[name].dequantize().tobytes()
        meta = sorted(gguf_metadata(g.metadata()), key=lambda x: x.key)
        assert meta == sorted(f.fields.records, key=lambda x: x.key) and len(meta) == 33
        assert meta[[m.key for m in meta].index("tokenizer.ggml.tokens")].value.items[:3] == ["<pad>", "<eos>", "<bos>"]


def test_cli_export(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.safetensors"
    assert main(["export", str(src), str(out), "--dtype", "bf16", "--tensors", "^q"]) == 0
    err = capsys.readouterr().err
    assert f"wrote {out}: {len(QUANTIZED)} tensors as bf16 ({os.path.getsize(out):,} bytes)" in err
    assert {v["dtype"] for v in raw_tensors(out).values()} == {"BF16"}
    assert main(["export", str(src), str(src)]) == 2
    assert "gguf-schema: error: refusing to write the export over its source" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "absent.gguf"), str(out)]) == 2
    assert "No such file or directory" in capsys.readouterr().err


def test_cli_export_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["export", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gguf-schema export") and "{f32,f16,bf16}" in out and "--tensors REGEX" in out
