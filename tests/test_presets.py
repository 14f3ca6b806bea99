"""Quantizing as llama-quantize does: our plan and files against llama-quantize's own, recorded.

``tests/data/quantize_plans/MODEL.json`` holds, for each small model of
``gguf_schema.testing.quant_models`` and each case (every preset, without and with an importance
matrix, and llama-quantize's other options), the type llama-quantize 0c1e570 gave each tensor
(its ``--dry-run``), the ``general.file_type`` it wrote and the SHA-256 of each file it wrote, or
the error it stopped with (``benchmarks/record_quant_plans.py`` made them). The command line runs
here with llama-quantize's own arguments, so these tests need no llama.cpp.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.errors import GGUFBuildError
from gguf_schema.format.types import GGMLType, ValueType
from gguf_schema.format.values import make_field
from gguf_schema.shards import open_split
from gguf_schema.testing.quant_models import (
    QUANT_MODELS,
    legacy_imatrix_bytes,
    quant_model,
    save_imatrix,
    save_quant_model,
)
from gguf_schema.tools.imatrix import Imatrix, read_imatrix
from gguf_schema.tools.quantplan import (
    FALLBACK,
    ModelFacts,
    Role,
    fallback,
    never_quantized,
    plan_types,
    preset,
    role_of,
)
from gguf_schema.tools.requantize import plan_requantize, requantize
from gguf_schema.tools.split import split_plan
from gguf_schema.writer import plan_tensor, write_file

from .helpers import run_cli

PLANS = Path(__file__).parent / "data" / "quantize_plans"
TYPE_CODES = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"


def recorded(model: str) -> dict:
    return json.loads((PLANS / f"{model}.json").read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Every model, its importance matrices (GGUF and .dat) and its split, as the recorder made them."""
    d = tmp_path_factory.mktemp("presets")
    for model in QUANT_MODELS:
        save_quant_model(d / f"{model}.gguf", model)
        _, tensors = quant_model(model)
        save_imatrix(d / f"{model}.imatrix.gguf", tensors)
        (d / f"{model}.imatrix.dat").write_bytes(legacy_imatrix_bytes(tensors))
        split_plan(d / f"{model}.gguf", str(d / f"{model}-split"), max_tensors=40, identity=False)
    return d


def _argv(model: str, case: dict, out: str) -> list[str]:
    """Our command line for a recorded case: llama-quantize's own arguments, then ours."""
    args = list(case["args"])
    if case.get("imatrix"):
        args += ["--imatrix", f"{model}.imatrix.{case['imatrix']}"]
    src = recorded(model)["split_sources"][0] if case.get("split") else f"{model}.gguf"
    return ["quantize", *args, src, out, case["type"], "1"]


def _label(case: dict) -> str:
    return " ".join([case["type"], *case["args"], case.get("imatrix") or ""]).strip()


def _types(plan: str) -> list[str]:
    return [GGMLType(TYPE_CODES.index(c)).name for c in plan]


def _llama_breaks(case: dict) -> bool:
    """llama-quantize plans the case but aborts writing it (a type given for a tensor whose rows it
    does not fit): we refuse it before planning."""
    return any(x in case.get("error", "") for x in ("GGML_ASSERT", "validation failed"))


@pytest.mark.parametrize("model", QUANT_MODELS)
def test_recorded_sources_are_what_the_generator_makes(workdir, model):
    data = recorded(model)
    assert hashlib.sha256((workdir / f"{model}.gguf").read_bytes()).hexdigest() == data["source_sha256"]
    assert sorted(p.name for p in workdir.glob(f"{model}-split-*")) == data["split_sources"]


def _kwargs(case: dict, imatrices: dict[str, Imatrix]) -> dict:
    """plan_requantize's keyword arguments for llama-quantize's arguments (the command line
    translates them the same way; the file test below runs it)."""
    args, kw = list(case["args"]), {"dry_run": True}
    lists = {
        "--tensor-type": "tensor_types",
        "--override-kv": "override_kv",
        "--include-weights": "include_weights",
        "--exclude-weights": "exclude_weights",
    }
    flags = {"--pure": "pure", "--leave-output-tensor": "leave_output_tensor", "--keep-split": "keep_split"}
    while args:
        a = args.pop(0)
        if a in flags:
            kw[flags[a]] = True
        elif a in lists:
            value = args.pop(0)
            if a == "--tensor-type":  # llama-quantize lowercases the expression
                pattern, _, t = value.partition("=")
                value = f"{pattern.lower()}={t}"
            kw.setdefault(lists[a], []).append(value)
        elif a in ("--output-tensor-type", "--token-embedding-type"):
            kw[a[2:].replace("-", "_")] = args.pop(0)
        else:
            raise AssertionError(f"no translation for {a}")
    if case.get("imatrix"):
        kw["imatrix"] = imatrices[case["imatrix"]]
    return kw


@pytest.mark.parametrize("model", QUANT_MODELS)
def test_plan_of_every_case_is_llama_quantizes(workdir, model):
    data = recorded(model)
    imatrices = {kind: read_imatrix(workdir / f"{model}.imatrix.{kind}") for kind in ("gguf", "dat")}
    wrong = []
    with (
        gguf_schema.open(workdir / f"{model}.gguf", lazy=True) as single,
        open_split(workdir / data["split_sources"][0], lazy=True) as split,
    ):
        for case in data["cases"]:
            try:
                result, _ = plan_requantize(
                    split if case.get("split") else single, case["type"], **_kwargs(case, imatrices)
                )
            except (GGUFBuildError, ValueError) as e:
                if case["plan"] is not None and not _llama_breaks(case):
                    wrong.append(f"{_label(case)}: {e}")
                continue
            if case["plan"] is None or _llama_breaks(case):  # llama-quantize refuses (or breaks)
                wrong.append(f"{_label(case)}: planned, llama-quantize refuses ({case['error']})")
                continue
            names = case.get("names") or data["names"]
            ours = [(r.name, r.new_type.name) for r in result.tensors]
            theirs = list(zip(names, _types(case["plan"]), strict=True))
            if ours != theirs:
                diff = [f"{a} != {b}" for a, b in zip(ours, theirs, strict=False) if a != b]
                wrong.append(f"{_label(case)}: {len(diff)} differ: {diff[:5]}")
            if "file_type" in case and result.file_type != case["file_type"]:
                wrong.append(f"{_label(case)}: file type {result.file_type} != {case['file_type']}")
    assert not wrong, "\n".join(wrong)


def _digests(workdir: Path, out: str) -> list[str]:
    stem = out[: -len(".gguf")]
    files = sorted(workdir.glob(f"{stem}*.gguf"))
    return [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]


def file_cases(model: str, every: bool = False) -> list[dict]:
    """The cases whose files this suite writes: every error case, and a fifth of the others,
    chosen so that over the five models each case is written once (all of them:
    ``benchmarks/bench_presets.py --recorded``)."""
    cases = [c for c in recorded(model)["cases"] if "sha256" in c or (c["plan"] is not None and "error" in c)]
    mine = QUANT_MODELS.index(model)
    return [c for c in cases if every or "error" in c or zlib.crc32(_label(c).encode()) % len(QUANT_MODELS) == mine]


@pytest.mark.parametrize("model", QUANT_MODELS)
def test_files_are_llama_quantizes_byte_for_byte(workdir, model, monkeypatch):
    monkeypatch.chdir(workdir)
    wrong = []
    for i, case in enumerate(file_cases(model)):
        out = f"out-{model}-{i}.gguf"
        r = run_cli(*_argv(model, case, out), "--no-measure")
        if "error" in case:
            if r.returncode != 2:
                wrong.append(f"{_label(case)}: written, llama-quantize fails ({case['error']})")
            continue
        if r.returncode != 0:
            wrong.append(f"{_label(case)}: {r.stderr.decode()[-300:]}")
            continue
        if _digests(workdir, out) != case["sha256"]:
            wrong.append(f"{_label(case)}: the files differ")
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- the rules' tables


def test_roles_of_gguf_py_tensor_names():
    """Each tensor kind llama.cpp's rules tell apart gets its role from the names gguf-py writes."""
    gguf = pytest.importorskip("gguf")
    names, kinds = gguf.constants.TENSOR_NAMES, gguf.constants.MODEL_TENSOR
    want = {
        "ATTN_V": Role.ATTN_V, "ATTN_QKV": Role.ATTN_QKV, "ATTN_KV_B": Role.ATTN_KV_B, "ATTN_K": Role.ATTN_K,
        "ATTN_Q": Role.ATTN_Q, "ATTN_OUT": Role.ATTN_OUTPUT, "FFN_DOWN": Role.FFN_DOWN,
        "FFN_DOWN_EXP": Role.FFN_DOWN, "FFN_DOWN_SHEXP": Role.FFN_DOWN, "FFN_GATE": Role.FFN_GATE,
        "FFN_GATE_EXP": Role.FFN_GATE, "FFN_UP": Role.FFN_UP, "FFN_UP_EXP": Role.FFN_UP,
        "TOKEN_EMBD": Role.TOKEN_EMBD, "PER_LAYER_TOKEN_EMBD": Role.TOKEN_EMBD, "OUTPUT": Role.OUTPUT,
        "ATTN_NORM": Role.OTHER,
    }  # fmt: skip
    for kind, role in want.items():
        name = names[getattr(kinds, kind)].format(bid=3) + ".weight"
        assert role_of(name) == role, name
    for kind in ("FFN_GATE_INP", "POS_EMBD", "TOKEN_TYPES", "SSM_CONV1D", "ATTN_NORM", "OUTPUT_NORM"):
        name = names[getattr(kinds, kind)].format(bid=3) + ".weight"
        assert never_quantized(name, "llama") is not None, name


@pytest.mark.parametrize(
    "name",
    [
        "blk.0.ffn_gate_tid2eid.weight",
        "blk.0.indexer.k_proj.weight",
        "blk.0.indexer.q_proj.weight",
        "v.position_embd.weight",
        "sam.pos_embd.weight",
        "sam.neck.0.weight",
        "sam.net_2.weight",
        "v.blk.0.attn.rel_pos_h.weight",
        "v.patch_embd.weight",
        "mm.patch_merger.weight",
        "a.rvq.codebook.0.weight",
        "mm.a.code_embd.weight",
        "position_embd.weight",
        "token_types.weight",
    ],
)
def test_tensors_llama_cpp_never_quantizes(name):
    facts = ModelFacts("llama", 1, 1, 8, 8, 0)
    (choice,) = plan_types([(name, (256, 64), GGMLType.F32)], preset("Q4_K_M"), facts)
    assert choice.type == GGMLType.F32 and choice.requested is None and choice.why.startswith("kept: never quantized")


def test_glm5_next_keeps_more_and_gives_q8_0():
    facts = ModelFacts("glm5-next", 4, 4, 8, 8, 0)
    plan = plan_types(
        [("blk.0.attn_k_b.weight", (256, 8), GGMLType.F32), ("blk.0.attn_q_a.weight", (256, 8), GGMLType.F32)],
        preset("Q4_K_M"),
        facts,
    )
    assert [(c.type, c.why) for c in plan] == [
        (GGMLType.F32, "kept: never quantized (attn_k_b.weight)"),
        (GGMLType.Q8_0, "Q4_K_M: glm5-next: attn_q_a, attn_q_b, nextn.eh_proj at Q8_0"),
    ]


def test_fallbacks_are_llama_cpps():
    assert {t.name: f.name for t, f in FALLBACK.items()} == {
        **dict.fromkeys(["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"], "IQ4_NL"),
        **dict.fromkeys(["Q2_0", "Q2_K", "Q3_K", "TQ1_0", "TQ2_0"], "Q4_0"),
        "Q4_K": "Q5_0",
        "Q5_K": "Q5_1",
        "Q6_K": "Q8_0",
    }
    assert fallback("w", 640, GGMLType.Q2_K) == (
        GGMLType.Q4_0,
        "rows of 640 are not whole Q2_K blocks (256): fallback Q4_0",
    )
    assert fallback("w", 48, GGMLType.MXFP4)[0] == GGMLType.F16  # a 32-element type: F16
    with pytest.raises(GGUFBuildError, match="no fallback for Q1_0"):
        fallback("w", 64, GGMLType.Q1_0)


def test_expert_tensor_outside_a_layer_is_refused_as_llama_cpp_does():
    facts = ModelFacts("qwen3moe", 2, 2, 8, 2, 8)
    with pytest.raises(GGUFBuildError, match="failed to determine the layer of tensor 'ffn_down_exps.weight'"):
        plan_types([("ffn_down_exps.weight", (256, 2, 8), GGMLType.F32)], preset("Q4_K_M"), facts)
    with pytest.raises(
        GGUFBuildError, match=r"bad layer 5 for tensor 'blk.5.ffn_down_exps.weight': must be in \[0, 2\)"
    ):
        plan_types([("blk.5.ffn_down_exps.weight", (256, 2, 8), GGMLType.F32)], preset("Q4_K_M"), facts)


def test_model_facts_from_metadata():
    meta = {
        "general.architecture": "llama",
        "llama.block_count": 81,
        "llama.nextn_predict_layers": 1,
        "llama.attention.head_count": [64] * 81,
        "llama.attention.head_count_kv": 8,
    }
    facts, notes = ModelFacts.of(meta)
    assert (facts.n_layer_all, facts.n_layer, facts.gqa, facts.n_expert, facts.is_70b, notes) == (
        81,
        80,
        8,
        0,
        True,
        [],
    )
    facts, notes = ModelFacts.of({"general.architecture": "qwen2"}, ["blk.0.a", "blk.11.b", "output.weight"])
    assert (facts.n_layer_all, facts.gqa) == (12, 0) and notes == [
        "the model has no qwen2.block_count: 12 layers counted from tensor names"
    ]


# --------------------------------------------------------------------------- refusals and metadata


def test_imatrix_for_another_model_names_what_it_lacks(workdir, tmp_path):
    out = tmp_path / "out.gguf"
    with pytest.raises(GGUFBuildError) as e:
        requantize(workdir / "gemma3.gguf", out, "Q4_K_M", imatrix=workdir / "llama-gqa.imatrix.gguf")
    text = str(e.value)
    assert "imatrix of 256 weights does not fit a tensor of shape (4, 640)" in text and "another model" in text
    other = {"blk.0.attn_q.weight.bogus": np.ones(640, np.float32)}
    with pytest.raises(
        GGUFBuildError,
        match=r"not for this model: it names none of its tensors, and has no entry for the 40 it would be used for \(blk\.0\.attn_k\.weight",
    ):
        requantize(workdir / "gemma3.gguf", out, "Q4_K_M", imatrix=other)
    with pytest.raises(
        GGUFBuildError,
        match=r"IQ2_XS needs an importance matrix \(--imatrix\): it has no entry for 16 tensors \(blk\.0\.attn_q\.weight -> IQ2_XS",
    ):
        requantize(
            workdir / "llama-gqa.gguf",
            out,
            "IQ2_XS",
            imatrix=workdir / "llama-gqa.imatrix.gguf",
            exclude_weights=["attn_q"],
        )
    assert not out.exists()


def test_refused_before_any_tensor_is_read(workdir, tmp_path, monkeypatch):
    """A preset that needs an importance matrix, without one: refused while planning, as llama-quantize does."""
    from gguf_schema.tools import requantize as rq

    monkeypatch.setattr(rq, "quantize", lambda *a, **k: pytest.fail("quantized a tensor"))
    monkeypatch.setattr(rq.Tensor, "dequantize", lambda *a, **k: pytest.fail("read a tensor"))
    for name in ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "Q2_K_S", "IQ3_XXS"):
        with pytest.raises(GGUFBuildError, match=f"{name} needs an importance matrix"):
            requantize(workdir / "llama-gqa.gguf", tmp_path / "out.gguf", name)
    assert not (tmp_path / "out.gguf").exists()
    plan = requantize(workdir / "llama-gqa.gguf", tmp_path / "out.gguf", "IQ2_M", dry_run=True)
    assert any("IQ2_M needs an importance matrix" in n for n in plan.notes)


def test_copy_writes_the_loaders_guess_without_a_file_type(tmp_path):
    meta, tensors = quant_model("qwen3moe")
    del meta["general.file_type"]
    gguf_schema.save(
        tmp_path / "m.gguf", meta, {k: v.astype(np.float16) if v.ndim > 1 else v for k, v in tensors.items()}
    )
    result = requantize(tmp_path / "m.gguf", tmp_path / "copy.gguf", "COPY")
    assert (result.file_type, result.file_type_name) == (1024 | 1, "MOSTLY_F16|GUESSED")  # 27 F16 tensors, 24 F32
    with gguf_schema.open(tmp_path / "copy.gguf") as f:
        assert f.metadata["general.file_type"] == 1025 and [t.name for t in f.tensor_list] == [
            r.name for r in result.tensors
        ]


def test_keep_split_and_overrides_through_the_api(workdir, tmp_path):
    data = recorded("llama-gqa")
    result = requantize(
        workdir / data["split_sources"][0],
        tmp_path / "q.gguf",
        "Q4_K_M",
        keep_split=True,
        override_kv=["general.name=str:renamed", ("test.count", ValueType.INT32, -3)],
    )
    assert [os.path.basename(p) for p in result.paths] == [f"q-0000{i}-of-00004.gguf" for i in range(1, 5)]
    assert list(result.metadata) == ["general.quantization_version", "general.file_type", "general.name", "test.count"]
    with open_split(result.paths[0]) as m:
        assert m.metadata["general.name"] == "renamed" and m.metadata["test.count"] == -3
        assert [len(s.tensor_list) for s in m.shards] == [40, 40, 40, 27]


def test_duplicate_tensor_names_are_refused(tmp_path):
    x = np.ones((2, 256), np.float32)
    write_file(
        tmp_path / "dup.gguf",
        [make_field("general.architecture", "llama")],
        [plan_tensor("blk.0.attn_q.weight", x, "little"), plan_tensor("blk.0.attn_q.weight", x, "little")],
        version=3,
        byte_order="little",
    )
    with pytest.raises(GGUFBuildError, match="tensor 'blk.0.attn_q.weight' occurs twice"):
        requantize(tmp_path / "dup.gguf", tmp_path / "out.gguf", "Q8_0", dry_run=True)


def test_tensor_type_file_is_the_same_as_the_options(workdir, tmp_path, monkeypatch):
    monkeypatch.chdir(workdir)
    listing = tmp_path / "types.txt"
    listing.write_text("ATTN_V=q8_0\n  blk\\.1[0-9]\\.ffn_down=iq4_nl\n")
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    r = run_cli("quantize", "llama-gqa.gguf", a, "Q4_K_M", "--tensor-type-file", listing)
    assert r.returncode == 0, r
    r = run_cli(
        "quantize",
        "llama-gqa.gguf",
        b,
        "Q4_K_M",
        "--tensor-type",
        "attn_v=q8_0",
        "--tensor-type",
        r"blk\.1[0-9]\.ffn_down=iq4_nl",
    )
    assert r.returncode == 0 and a.read_bytes() == b.read_bytes()
    case = next(c for c in recorded("llama-gqa")["cases"] if c["args"][:2] == ["--tensor-type", "attn_v=q8_0"])
    assert _digests(tmp_path, "a.gguf") == case["sha256"]
    listing.write_text("attn_v\n")
    r = run_cli("quantize", "llama-gqa.gguf", a, "Q4_K_M", "--tensor-type-file", listing)
    assert r.returncode == 2 and b"types.txt: a tensor type is REGEX=TYPE, got 'attn_v'" in r.stderr
