"""The quantize command and tools/requantize.py: generated models requantized, byte for byte against
quantize(dequantize(input)), read back by our reader and the gguf package, checked by the ggml profile;
fallbacks, overrides, importance matrices, errors that leave the target untouched, the command line.

Most tests here ask for a single ggml type (a GGMLType: every quantized tensor that type) to test the
streaming; tests/test_presets.py holds llama-quantize's presets against its own plans and files."""

from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.check import validate
from gguf_schema.errors import GGUFBuildError, GGUFError
from gguf_schema.format.types import FileType, GGMLType
from gguf_schema.tensors import CODECS, QUANTIZE_TYPES, quantize
from gguf_schema.testing.fixtures import arch_model, random_tensor
from gguf_schema.tools import requantize as rq
from gguf_schema.tools.convert import convert
from gguf_schema.tools.imatrix import load_imatrix
from gguf_schema.tools.quantplan import llama_order, preset, requires_imatrix
from gguf_schema.tools.split import split
from gguf_schema.writer import RawTensor

from .conftest import VOCAB_DIR
from .helpers import run_cli

G = GGMLType
META = {
    "general.architecture": "llama",
    "general.name": "tiny",
    "general.file_type": np.uint32(1),
    "general.quantization_version": np.uint32(2),
}


def _tensors(seed: int = 0) -> dict[str, RawTensor | np.ndarray]:
    """A small model: inputs of several types, rows of 256 (fit every type), 96 and 48 (fallbacks),
    tensors llama.cpp keeps (1-D, a router, a bias, integers), a 3-D expert tensor."""
    rng = np.random.default_rng(seed)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {
        "token_embd.weight": random_tensor(G.F16, (16, 256), rng),
        "blk.0.attn_norm.weight": np.ones(256, np.float32) + f32(256) * 0.1,
        "blk.0.attn_q.weight": random_tensor(G.Q8_0, (8, 256), rng),
        "blk.0.attn_k.weight": random_tensor(G.BF16, (8, 256), rng),
        "blk.0.attn_v.weight": random_tensor(G.Q4_K, (4, 256), rng),
        "blk.0.attn_k.bias": f32(8),
        "blk.0.ffn_gate_inp.weight": f32(4, 256),
        "blk.0.ffn_down.weight": f32(8, 96),
        "blk.0.ffn_up.weight": f32(6, 48),
        "blk.0.ffn_gate_exps.weight": f32(3, 5, 256),
        "blk.0.token_count": np.arange(4, dtype=np.int32),
        "output.weight": f32(16, 256),
    }


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rq") / "model.gguf"
    gguf_schema.save(path, META, _tensors())
    return path


def _imatrix(tensors: dict, seed: int = 1) -> dict[str, np.ndarray]:
    """Importance weights for every 2-D and 3-D weight (experts: one row of weights per matrix)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in tensors.items():
        shape = t.shape
        if name.endswith("weight") and len(shape) >= 2:
            n = shape[0] if len(shape) == 3 else 1
            out[name] = (rng.random(n * shape[-1]) * 4 + 0.1).astype(np.float32)
    return out


def _expected(src: gguf_schema.GGUFFile, name: str, t: GGMLType, weights: np.ndarray | None) -> bytes:
    """What the output must hold for a requantized tensor: quantize(dequantize(input)), expert by expert."""
    x = src.tensors[name].dequantize()
    if weights is not None and x.ndim == 3:
        w = weights.reshape(x.shape[0], -1)
        return b"".join(quantize(x[e], t, imatrix=w[e]).tobytes() for e in range(x.shape[0]))
    return quantize(x, t, imatrix=weights).tobytes()


def _check_output(
    src_path: Path, out: Path, result: rq.RequantizeResult, weights: dict | None = None, gguf_reader: bool = True
) -> None:
    with gguf_schema.open(src_path) as src, gguf_schema.open(out) as dst:
        assert list(dst.tensors) == llama_order(src.tensors) == [r.name for r in result.tensors]
        for r in result.tensors:
            got = dst.tensors[r.name]
            assert got.type == r.new_type and got.shape == r.shape
            raw = bytes(got.raw())
            if r.requantized:
                w = weights.get(r.name) if weights is not None and r.imatrix else None
                assert raw == _expected(src, r.name, r.new_type, w), r.name
                x = src.tensors[r.name].dequantize().astype(np.float64)
                y = got.dequantize().astype(np.float64)
                assert r.rms_error == pytest.approx(np.sqrt(np.mean((y - x) ** 2)), rel=1e-6, abs=1e-30)
                assert r.rms_input == pytest.approx(np.sqrt(np.mean(x**2)), rel=1e-6)
            else:
                assert raw == bytes(src.tensors[r.name].raw()), r.name
                assert r.rms_error == 0.0
        assert dst.metadata.get("general.file_type") == result.file_type
        assert dst.metadata["general.quantization_version"] == 2
        assert dst.metadata["general.name"] == "tiny"
    report = validate(out, "ggml")
    assert report.ok, report.findings
    if gguf_reader:
        gguf = pytest.importorskip("gguf")
        reader = gguf.GGUFReader(str(out))
        assert {t.name: int(t.tensor_type) for t in reader.tensors} == {r.name: int(r.new_type) for r in result.tensors}


# --------------------------------------------------------------------------- types


def test_single_type_plan(model):
    result = rq.requantize(model, model.with_name("unused.gguf"), G.Q4_K, dry_run=True)
    assert not model.with_name("unused.gguf").exists()
    by = {r.name: r for r in result.tensors}
    assert {n for n, r in by.items() if r.requested is None} == {
        "blk.0.attn_norm.weight",
        "blk.0.attn_k.bias",
        "blk.0.ffn_gate_inp.weight",
        "blk.0.token_count",
    }
    assert by["blk.0.attn_norm.weight"].why == "kept: 1-D"
    assert by["blk.0.ffn_gate_inp.weight"].why == "kept: never quantized (ffn_gate_inp.weight)"
    assert by["blk.0.token_count"].why == "kept: I32 data"
    assert by["blk.0.attn_v.weight"].why == "Q4_K: every tensor Q4_K; already Q4_K: copied"
    assert not by["blk.0.attn_v.weight"].requantized
    assert (by["blk.0.ffn_down.weight"].new_type, by["blk.0.ffn_up.weight"].new_type) == (G.Q5_0, G.F16)
    assert "nor Q5_0's (32): fallback F16" in by["blk.0.ffn_up.weight"].why
    assert [r.name for r in result.fallbacks] == ["blk.0.ffn_down.weight", "blk.0.ffn_up.weight"]
    assert [r.name for r in result.tensors][:2] == ["output.weight", "token_embd.weight"]  # llama-quantize's order
    assert by["output.weight"].nbytes == 16 * 144 and result.file_type == FileType.MOSTLY_Q4_K_M
    assert all(r.rms_error is None for r in result.tensors) and result.dry_run


@pytest.mark.parametrize("t", ["Q4_K", "Q8_0", "Q6_K", "IQ4_XS", "Q2_K", "IQ3_S", "F16"])
def test_output_is_quantize_of_dequantized_input(model, tmp_path, t):
    out = tmp_path / "out.gguf"
    result = rq.requantize(model, out, G[t], tensor_types=["ffn_up=F16"], allow_requantize=True, measure=True)
    _check_output(model, out, result)
    assert result.output_bytes == sum(r.nbytes for r in result.tensors)


@pytest.mark.parametrize("t", ["Q4_K", "IQ4_XS", "Q5_0", "IQ2_XXS"])
def test_importance_matrix_weights_each_tensor(model, tmp_path, t):
    weights = _imatrix(_tensors())
    out = tmp_path / "out.gguf"
    result = rq.requantize(
        model, out, G[t], imatrix=weights, tensor_types=["ffn_up=F16"], allow_requantize=True, measure=True
    )
    used = {r.name for r in result.tensors if r.imatrix}
    assert "blk.0.ffn_gate_exps.weight" in used and "output.weight" in used
    _check_output(model, out, result, weights, gguf_reader=False)
    if CODECS[G[t]].needs_imatrix:
        with pytest.raises(GGUFBuildError, match="needs an importance matrix"):
            rq.requantize(model, tmp_path / "plain.gguf", G[t], tensor_types=["ffn_up=F16"], allow_requantize=True)
        return
    rq.requantize(model, tmp_path / "plain.gguf", G[t], tensor_types=["ffn_up=F16"], allow_requantize=True)
    with gguf_schema.open(out) as a, gguf_schema.open(tmp_path / "plain.gguf") as b:
        assert bytes(a.tensors["output.weight"].raw()) != bytes(b.tensors["output.weight"].raw())


def test_imatrix_file_gguf_and_missing_entries(model, tmp_path):
    weights = _imatrix(_tensors())
    del weights["token_embd.weight"]
    buf = io.BytesIO()
    tensors = {}
    for name, w in weights.items():
        n = 3 if name.endswith("exps.weight") else 1
        tensors[name + ".in_sum2"] = (w * 10).reshape(n, -1)
        tensors[name + ".counts"] = np.full((n, 1), 10.0, np.float32)
    meta = {"imatrix.datasets": ["x"], "imatrix.chunk_count": np.uint32(1), "imatrix.chunk_size": np.uint32(1)}
    gguf_schema.save(buf, meta, tensors)
    path = tmp_path / "imatrix.gguf"
    path.write_bytes(buf.getvalue())
    out = tmp_path / "out.gguf"
    result = rq.requantize(model, out, G.Q4_K, imatrix=path, allow_requantize=True, measure=True)
    assert any("no importance weights for 1 tensors, quantized without: token_embd.weight" in n for n in result.notes)
    assert not next(r for r in result.tensors if r.name == "token_embd.weight").imatrix
    _check_output(model, out, result, load_imatrix(path), gguf_reader=False)


def _every_type_case(t: GGMLType) -> tuple[dict, dict | None]:
    """A model every type can hold: float rows of 256 (integer values for the integer types)."""
    rng = np.random.default_rng(int(t))
    if t.quantized or t in (G.F32, G.F16, G.BF16, G.F64):
        x = rng.standard_normal((2, 256)).astype(np.float32)
    else:
        x = rng.integers(-100, 100, (2, 256)).astype(np.float32)
    tensors = {"blk.0.attn_q.weight": x.astype(np.float16) if t == G.F32 else x, "blk.0.attn_norm.weight": x[0]}
    return tensors, {"blk.0.attn_q.weight": (rng.random(256) + 0.5).astype(np.float32)}


@pytest.mark.parametrize("t", sorted(QUANTIZE_TYPES, key=int), ids=lambda t: t.name)
def test_every_quantize_type(tmp_path, t):
    tensors, weights = _every_type_case(t)
    src = tmp_path / "in.gguf"
    gguf_schema.save(src, META, tensors)
    out = tmp_path / "out.gguf"
    p = preset(t, single_types=QUANTIZE_TYPES)
    if CODECS[t].needs_imatrix or requires_imatrix("blk.0.attn_q.weight", t, p):
        out.write_bytes(b"old")
        with pytest.raises(GGUFBuildError, match="needs an importance matrix"):
            rq.requantize(src, out, t, measure=True)
        assert out.read_bytes() == b"old"
        result = rq.requantize(src, out, t, imatrix=weights, measure=True)
    else:
        result = rq.requantize(src, out, t, measure=True)
    q = result.tensors[1]
    assert q.name == "blk.0.attn_q.weight" and q.new_type == t and q.requantized
    _check_output(src, out, result, weights, gguf_reader=False)


# --------------------------------------------------------------------------- streaming, inputs


def test_streamed_in_chunks_of_rows(model, tmp_path, monkeypatch):
    """Chunks far smaller than a tensor (and than an expert) give the same bytes and the same errors."""
    whole = rq.requantize(
        model, tmp_path / "whole.gguf", G.Q4_K, imatrix=_imatrix(_tensors()), allow_requantize=True, measure=True
    )
    monkeypatch.setattr(rq, "_CHUNK_BYTES", 2 * 256 * 4)
    calls = []
    real = rq.quantize
    monkeypatch.setattr(rq, "quantize", lambda x, *a, **k: calls.append(x.shape) or real(x, *a, **k))
    small = rq.requantize(
        model,
        tmp_path / "small.gguf",
        G.Q4_K,
        imatrix=_imatrix(_tensors()),
        threads=1,
        allow_requantize=True,
        measure=True,
    )
    assert max(rows for rows, cols in calls if cols == 256) == 2
    assert calls.count((1, 256)) == 3  # 5 rows per expert: 2 + 2 + 1, three times
    assert (tmp_path / "whole.gguf").read_bytes() == (tmp_path / "small.gguf").read_bytes()
    for a, b in zip(whole.tensors, small.tensors, strict=True):
        assert a.rms_error == pytest.approx(b.rms_error, rel=1e-9)


def test_split_and_big_endian_inputs(model, tmp_path):
    direct = tmp_path / "direct.gguf"
    rq.requantize(model, direct, "Q8_0", tensor_types=["ffn_up=F16"], allow_requantize=True)
    shards = split(model, tmp_path / "m", max_tensors=5)
    out = tmp_path / "from_split.gguf"
    result = rq.requantize(shards[0], out, "Q8_0", tensor_types=["ffn_up=F16"], allow_requantize=True)
    assert len(shards) == 3 and len(result.tensors) == 12
    with gguf_schema.open(out) as f:
        assert "split.count" not in f.fields and "split.no" not in f.fields
    assert out.read_bytes() == direct.read_bytes()
    big = tmp_path / "big.gguf"
    convert(model, big, byte_order="big")
    out_big = tmp_path / "from_big.gguf"
    rq.requantize(big, out_big, "Q8_0", tensor_types=["ffn_up=F16"], allow_requantize=True)
    assert out_big.read_bytes() == direct.read_bytes()
    fields, tensors = arch_model("llama")  # a vocabulary: string arrays, read lazily, re-encoded for little-endian
    gguf_schema.save(tmp_path / "llama.gguf", fields, tensors)
    convert(tmp_path / "llama.gguf", tmp_path / "llama-be.gguf", byte_order="big")
    rq.requantize(tmp_path / "llama.gguf", tmp_path / "a.gguf", "Q4_0", allow_requantize=True)
    rq.requantize(tmp_path / "llama-be.gguf", tmp_path / "b.gguf", "Q4_0", allow_requantize=True)
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()
    with gguf_schema.open(tmp_path / "b.gguf") as f:
        assert f.metadata["tokenizer.ggml.tokens"][:3] == ["<unk>", "<s>", "</s>"]


def test_overrides_first_match_wins_and_keep_1d(model, tmp_path):
    out = tmp_path / "out.gguf"
    result = rq.requantize(
        model,
        out,
        G.Q4_K,
        tensor_types=[r"blk\.0\.ffn_(down|gate)=Q8_0", "ffn_down=Q6_K", "ffn_up=Q6_K", "nothing_here=Q4_0"],
        keep_1d=False,
        allow_requantize=True,
        measure=True,
    )
    by = {r.name: r for r in result.tensors}
    assert by["blk.0.ffn_down.weight"].requested == G.Q8_0 and by["blk.0.ffn_down.weight"].new_type == G.Q8_0
    assert by["blk.0.ffn_gate_exps.weight"].new_type == G.Q8_0
    assert by["blk.0.ffn_up.weight"].requested == G.Q6_K and by["blk.0.ffn_up.weight"].new_type == G.F16
    assert by["output.weight"].new_type == G.Q4_K
    assert by["blk.0.attn_norm.weight"].why == "kept: never quantized (_norm.weight)"  # names still keep norms
    assert by["blk.0.attn_k.bias"].why == "kept: not a weight"
    assert by["blk.0.ffn_up.weight"].pattern == "ffn_up" and by["blk.0.ffn_down.weight"].pattern.startswith("blk")
    assert any("'nothing_here' matched no tensor" in n for n in result.notes)
    _check_output(model, out, result, gguf_reader=False)
    one_d = tmp_path / "one_d.gguf"
    gguf_schema.save(one_d, META, {"blk.0.attn_sinks.weight": np.linspace(-1, 1, 64, dtype=np.float32)})
    assert rq.requantize(one_d, tmp_path / "a.gguf", "Q8_0").tensors[0].new_type == G.F32
    assert rq.requantize(one_d, tmp_path / "b.gguf", "Q8_0", keep_1d=False).tensors[0].new_type == G.Q8_0


# --------------------------------------------------------------------------- errors


@pytest.fixture
def target(tmp_path) -> Path:
    t = tmp_path / "target.gguf"
    t.write_bytes(b"previous contents")
    return t


def _untouched(target: Path) -> None:
    assert target.read_bytes() == b"previous contents"
    assert sorted(p.name for p in target.parent.iterdir() if p.name.startswith(".")) == []


def test_row_that_fits_nothing(model, target):
    """A type of blocks over 32 without a fallback: refused, as llama-quantize refuses. (A 32-element
    type falls back to F16 in llama.cpp: Q8_0 on rows of 48 is F16.)"""
    with pytest.raises(GGUFBuildError, match="no fallback for NVFP4") as e:
        rq.requantize(model, target, G.NVFP4, allow_requantize=True)
    assert "blk.0.ffn_down.weight" in str(e.value) and "rows of 96" in str(e.value)
    _untouched(target)
    plan = rq.requantize(model, target, "Q8_0", allow_requantize=True, dry_run=True)
    up = next(r for r in plan.tensors if r.name == "blk.0.ffn_up.weight")
    assert (up.requested, up.new_type) == (G.Q8_0, G.F16) and "rows of 48 are not whole Q8_0 blocks" in up.why


@pytest.mark.parametrize("bad", ["Q9_K", "IQ2_XXS_BAD", 99, "Q4_0_4_4", "Q4_KM"])
def test_unknown_type(model, target, bad):
    with pytest.raises(ValueError, match="the presets are Q1_0, Q2_0, Q4_0, .*, Q4_K_M, .*COPY") as e:
        rq.requantize(model, target, bad)
    assert "single ggml types: F32" not in str(e.value) and "Q8_K" in str(e.value)
    _untouched(target)


def test_imatrix_that_does_not_fit(model, target):
    weights = _imatrix(_tensors())
    weights["output.weight"] = weights["output.weight"][:128]
    with pytest.raises(GGUFBuildError, match="imatrix of 128 weights does not fit.*another model"):
        rq.requantize(model, target, G.Q4_K, imatrix=weights, allow_requantize=True)
    _untouched(target)


def test_bad_data_midway_leaves_target(tmp_path, target):
    """A NaN in the last tensor is found while the file is being written: the write is abandoned."""
    tensors = _tensors()
    bad = tensors["output.weight"].copy()
    bad[3, 7] = np.nan
    tensors["output.weight"] = bad
    src = tmp_path / "nan.gguf"
    gguf_schema.save(src, META, tensors)
    with pytest.raises(GGUFBuildError, match=r"row 3, column 7 is nan.*output\.weight"):
        rq.requantize(src, target, G.Q4_K, allow_requantize=True)
    _untouched(target)
    with pytest.raises(GGUFBuildError, match="I8 needs integer values"):
        rq.requantize(tmp_path / "nan.gguf", target, "I8", allow_requantize=True)
    _untouched(target)


def test_output_must_not_be_input(model, tmp_path):
    before = model.read_bytes()
    with pytest.raises(GGUFBuildError, match="must not be the input"):
        rq.requantize(model, model, "Q4_K")
    link = tmp_path / "hardlink.gguf"
    os.link(model, link)
    with pytest.raises(GGUFBuildError, match="must not be the input"):
        rq.requantize(model, link, "Q4_K")
    assert model.read_bytes() == before


def test_bad_arguments(model, target):
    with pytest.raises(ValueError, match="threads must be"):
        rq.requantize(model, target, "Q4_K", threads=0)
    with pytest.raises(ValueError, match="must be a local path"):
        rq.requantize(model, "https://example.com/out.gguf", "Q4_K")
    with pytest.raises(ValueError, match="is not a regular expression"):
        rq.requantize(model, target, "Q4_K", tensor_types=["(=Q8_0"])
    _untouched(target)


# --------------------------------------------------------------------------- command line


def test_cli_quantize(model, tmp_path):
    out = tmp_path / "out.gguf"
    r = run_cli(
        "quantize",
        model,
        out,
        "--type",
        "q4_k",
        "--tensor-type",
        "ATTN_K=Q8_0",
        "--threads",
        "2",
        "--allow-requantize",
        "--measure",
        "--verbose",
    )
    assert r.returncode == 0, r
    text = r.stdout.decode()
    assert "BF16 -> Q8_0" in text and "--tensor-type attn_k=Q8_0" in text  # lowercased, as llama-quantize does
    assert text.splitlines()[-1] == (
        "Q4_K: 8 of 12 tensors quantized (Q4_K 3, Q6_K 2, Q8_0 2, F16 1); 2 fell back, 1 set by --tensor-type; "
        "4 copied as they are; tensor data 0.05 MiB -> 0.02 MiB; file type MOSTLY_Q4_K_M"
    )
    line = next(x for x in text.splitlines() if x.startswith("blk.0.ffn_down.weight"))
    assert line.split()[1:5] == ["8x96", "F32", "->", "Q8_0"] and line.endswith("fallback Q8_0")
    err = r.stderr.decode()
    assert "blk.0.ffn_up.weight: Q4_K: the default type; rows of 48 are not whole Q4_K blocks (256)" in err
    assert "note: the model has no llama.block_count: 1 layer counted from tensor names" in err and "wrote" in err
    with gguf_schema.open(out) as f:
        assert f.tensors["blk.0.attn_k.weight"].type == G.Q8_0 and f.metadata["general.file_type"] == 15
        assert f.tensors["output.weight"].type == G.Q6_K
    assert run_cli("check", "--profile", "ggml", out).returncode == 0
    again = tmp_path / "again.gguf"  # llama-quantize's own form: IN OUT TYPE THREADS
    r = run_cli("quantize", model, again, "Q4_K", "1", "--tensor-type", "attn_k=q8_0", "--allow-requantize")
    assert r.returncode == 0, r
    assert again.read_bytes() == out.read_bytes()


def test_cli_json_and_dry_run(model, tmp_path):
    out = tmp_path / "out.gguf"
    r = run_cli("quantize", model, out, "-t", "Q6_K", "--json", "--dry-run")
    assert r.returncode == 0, r
    record = json.loads(r.stdout)
    assert record["dry_run"] and record["preset"] == "Q6_K" and record["file_type_name"] == "MOSTLY_Q6_K"
    by = {t["name"]: t for t in record["tensors"]}
    assert list(by["blk.0.ffn_down.weight"])[:4] == ["name", "from", "to", "why"]
    assert by["blk.0.ffn_down.weight"]["to"] == "Q8_0" and by["output.weight"]["bytes"] == 16 * 210
    assert by["blk.0.attn_q.weight"]["from"] == "Q8_0" and by["blk.0.attn_q.weight"]["to"] == "Q6_K"
    assert b"quantized already (blk.0.attn_q.weight: Q8_0" in r.stderr  # a note in a dry run
    assert not out.exists()
    r = run_cli("quantize", model, out, "-t", "Q6_K", "--json")
    assert r.returncode == 2 and b"--allow-requantize" in r.stderr and not out.exists()
    r = run_cli("quantize", model, out, "-t", "Q6_K", "--json", "--allow-requantize", "--measure")
    record = json.loads(r.stdout)
    assert record["tensors"][0]["rms_error"] > 0 and record["tensors"][0]["relative_error"] < 0.05
    r = run_cli("quantize", model, tmp_path / "fast.gguf", "-t", "Q6_K", "--allow-requantize", "--verbose")
    assert (tmp_path / "fast.gguf").read_bytes() == out.read_bytes() and " - " in r.stdout.decode()


def test_cli_legacy_imatrix(model, tmp_path):
    """A legacy .dat importance matrix through the command: output.weight gets its weights, the others none."""
    w = _imatrix(_tensors())["output.weight"]
    name = b"output.weight"
    dat = struct.pack("<ii", 1, len(name)) + name + struct.pack("<ii", 4, w.size) + (w * 4).astype("<f4").tobytes()
    (tmp_path / "imatrix.dat").write_bytes(dat)
    out = tmp_path / "out.gguf"
    r = run_cli(
        "quantize",
        model,
        out,
        "-t",
        "Q4_K",
        "--pure",
        "--imatrix",
        tmp_path / "imatrix.dat",
        "--json",
        "--allow-requantize",
    )
    assert r.returncode == 0, r
    by = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    assert by["output.weight"]["imatrix"] and not by["blk.0.attn_k.weight"]["imatrix"]
    assert b"no importance weights for 5 tensors, quantized without: token_embd.weight, blk.0.attn_k.weight" in r.stderr
    with gguf_schema.open(model) as src, gguf_schema.open(out) as dst:
        assert bytes(dst.tensors["output.weight"].raw()) == _expected(src, "output.weight", G.Q4_K, w)
        assert dst.metadata["quantize.imatrix.file"] == str(tmp_path / "imatrix.dat")
        assert dst.metadata["quantize.imatrix.entries_count"] == 1
        assert "quantize.imatrix.chunks_count" not in dst.metadata  # the file does not say


def test_cli_errors(model, target, tmp_path):
    r = run_cli("quantize", model, target, "--type", "Q9")
    assert r.returncode == 2 and b"unknown quantization type 'Q9': the presets are Q1_0" in r.stderr
    r = run_cli("quantize", model, target, "--type", "Q4_K", "--tensor-type", "([=Q8_0")
    assert r.returncode == 2 and b"not a regular expression" in r.stderr
    r = run_cli("quantize", model, target, "--type", "Q4_K", "--imatrix", model, "--allow-requantize")
    assert r.returncode == 2 and b"not an imatrix file" in r.stderr
    text = tmp_path / "imatrix.txt"
    text.write_text("blk.0.attn_q.weight 0.5 0.25 1.0\n")
    r = run_cli("quantize", model, target, "--type", "Q4_K", "--imatrix", text, "--allow-requantize")
    assert (
        r.returncode == 2 and b"not an importance matrix file: neither GGUF nor llama-imatrix's legacy form" in r.stderr
    )
    r = run_cli("quantize", model, target, "--type", "IQ2_M", "--allow-requantize")
    assert r.returncode == 2 and b"IQ2_M needs an importance matrix (--imatrix): it was not given" in r.stderr
    r = run_cli("quantize", model, target, "Q4_K", "--type", "Q8_0")
    assert r.returncode == 2 and b"two types given" in r.stderr
    r = run_cli("quantize", model, target, "--include-weights", "a", "--exclude-weights", "b", "-t", "Q8_0")
    assert r.returncode == 2 and b"not allowed with argument" in r.stderr
    r = run_cli("quantize", model, target, "--type", "Q4_K", "--override-kv", "a=bool:maybe")
    assert r.returncode == 2 and b"KEY=TYPE:VALUE" in r.stderr
    r = run_cli("quantize", model, target, "--type", "Q4_K", "--output-tensor-type", "Q3_K", "--allow-requantize")
    assert r.returncode == 0  # output.weight has rows of 256
    target.write_bytes(b"previous contents")
    r = run_cli(
        "quantize", model, target, "-t", "Q8_0", "--tensor-type", "ffn_up=F16", "--strict", "spec", "--allow-requantize"
    )
    assert r.returncode == 2 and b"llama.context_length is missing" in r.stderr  # the tiny model lacks llama keys
    _untouched(target)
    assert isinstance(GGUFBuildError("x"), GGUFError)


def test_fallback_table():
    """Each fallback is a type the library writes, with a smaller block, and each type there has a file type."""
    for t, f in rq.FALLBACK.items():
        assert f in QUANTIZE_TYPES and f.block_size < t.block_size
        assert rq.file_type_of(t) is not None


def test_empty_tensors(tmp_path):
    """Tensors with a zero dimension (experts among them) are planned and written, with no rows to stream."""
    src = tmp_path / "empty.gguf"
    gguf_schema.save(
        src, META, {"a.weight": np.zeros((0, 256), np.float32), "b.weight": np.zeros((2, 0, 256), np.float32)}
    )
    weights = {"a.weight": np.ones(256, np.float32), "b.weight": np.ones(512, np.float32)}
    result = rq.requantize(src, tmp_path / "out.gguf", G.Q4_K, imatrix=weights, measure=True)
    # (0, 256) is 1-D to ggml (a dimension of 0 or 1 does not count): kept, as llama-quantize keeps it
    assert [(r.new_type, r.nbytes, r.rms_error) for r in result.tensors] == [(G.F32, 0, 0.0), (G.Q4_K, 0, 0.0)]
    with gguf_schema.open(tmp_path / "out.gguf") as f:
        assert [t.shape for t in f.tensor_list] == [(0, 256), (2, 0, 256)]


@pytest.mark.parametrize("name", ["ggml-vocab-llama-spm.gguf", "ggml-vocab-bert-bge.gguf", "ggml-vocab-phi-3.gguf"])
def test_real_files_keep_their_metadata(name, tmp_path):
    """llama.cpp's vocabulary files: every record but the two quantization keys comes out as it was, in order."""
    vocab_file = VOCAB_DIR / name
    out = tmp_path / "out.gguf"
    result = rq.requantize(vocab_file, out, "Q8_0")
    assert result.tensors == [] and result.file_type == FileType.MOSTLY_Q8_0
    with gguf_schema.open(vocab_file) as a, gguf_schema.open(out) as b:
        replaced = {"general.file_type", "general.quantization_version"}
        kept = [(f.key, f.type, f.value) for f in a.fields.records if f.key not in replaced]
        assert [(f.key, f.type, f.value) for f in b.fields.records if f.key not in replaced] == kept
        assert (b.metadata["general.file_type"], b.metadata["general.quantization_version"]) == (7, 2)
    assert validate(out, "ggml").ok


# --------------------------------------------------------------------------- dimensions as ggml writes them


def _ggml_n_dims(dims: tuple[int, ...]) -> int:
    """ggml_n_dims, written here from its definition: the position of the last dimension larger than 1."""
    return max([i + 1 for i, d in enumerate(dims) if d > 1], default=1)


@pytest.mark.parametrize("preset_name", ["COPY", "Q8_0", "F16"])
def test_one_row_matrices_are_written_with_ggml_n_dims(tmp_path, preset_name):
    """A one-row matrix (a reranker head [256, 1]) and other shapes with trailing ones, drawn at random:
    every output tensor info has ggml_n_dims dimensions (as llama-quantize writes them), the offsets are
    ggml's layout (each tensor aligned after the one before, the data section after the header), and
    the gguf package reads every tensor's values where its info says."""
    import gguf

    rng = np.random.default_rng(38)
    tensors: dict[str, np.ndarray] = {"cls.output.weight": rng.standard_normal((1, 256)).astype(np.float32)}
    for i in range(6):
        n = int(rng.integers(2, 5))
        shape = [int(rng.choice([1, 1, 2, 3])) for _ in range(n - 1)] + [256]  # numpy order: outermost first
        tensors[f"blk.{i}.ffn_up.weight"] = rng.standard_normal(shape).astype(np.float32)
    tensors["output_norm.weight"] = np.ones(256, np.float32)
    meta = {"general.architecture": "llama", "llama.block_count": np.uint32(6)}
    src, dst = tmp_path / "in.gguf", tmp_path / "out.gguf"
    gguf_schema.save(src, meta, tensors)
    rq.requantize(src, dst, preset_name, threads=1)
    r = gguf.GGUFReader(dst)
    end = None
    for t in sorted(r.tensors, key=lambda t: t.data_offset):
        dims = tuple(reversed(tensors[t.name].shape))
        assert len(t.shape) == _ggml_n_dims(dims), (t.name, dims, list(t.shape))  # the stored n_dims
        assert int(np.prod(t.shape)) == tensors[t.name].size
        expected_start = r.data_offset if end is None else -(-end // 32) * 32
        assert t.data_offset == expected_start, t.name
        end = t.data_offset + t.n_bytes
        with gguf_schema.open(dst) as f:
            ours = f.tensors[t.name].dequantize().reshape(-1)
        theirs = gguf.dequantize(t.data, t.tensor_type).reshape(-1)
        np.testing.assert_array_equal(ours, theirs)
    assert r.data_offset % 32 == 0
    with gguf_schema.open(dst) as f:
        assert f.tensors["cls.output.weight"].dims == (256,)
    assert validate(str(dst), "ggml").ok


def test_llama_layout_split_writes_ggml_n_dims_and_default_split_keeps_them(tmp_path):
    """llama-gguf-split rewrites tensor infos as ggml stores them; our own split copies them as stored."""
    from gguf_schema.tools.edit import set_key
    from gguf_schema.tools.split import split_plan

    rng = np.random.default_rng(1)
    tensors = {f"t{i}": rng.standard_normal(shape).astype(np.float32) for i, shape in enumerate([(1, 64), (2, 1, 32)])}
    src = tmp_path / "m.gguf"
    gguf_schema.save(src, {"general.name": "m"}, tensors)
    for llama, expected in ((True, {"t0": (64,), "t1": (32, 1, 2)}), (False, {"t0": (64, 1), "t1": (32, 1, 2)})):
        plan = split_plan(src, str(tmp_path / f"s{llama}"), max_tensors=1, llama_layout=llama)
        for shard in plan.shards:
            assert os.path.getsize(shard.path) == shard.size  # the plan counted the infos as written
            with gguf_schema.open(shard.path) as f:
                for t in f.tensor_list:
                    assert t.dims == expected[t.name]
                    np.testing.assert_array_equal(t.data.reshape(tensors[t.name].shape), tensors[t.name])
    convert(src, tmp_path / "be.gguf", byte_order="big")  # a conversion and an edit keep the infos as stored
    set_key(src, "general.name", "a longer name", in_place=False)
    for path in (tmp_path / "be.gguf", src):
        with gguf_schema.open(path) as f:
            assert [t.dims for t in f.tensor_list] == [(64, 1), (32, 1, 2)]
