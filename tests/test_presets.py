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
import zlib
from pathlib import Path

import pytest

import gguf_schema
from gguf_schema.errors import GGUFBuildError
from gguf_schema.format.types import GGMLType
from gguf_schema.testing.quant_models import (
    QUANT_MODELS,
    legacy_imatrix_bytes,
    quant_model,
    save_imatrix,
    save_quant_model,
)
from gguf_schema.tools.imatrix import Imatrix, read_imatrix
from gguf_schema.tools.requantize import plan_requantize
from gguf_schema.tools.split import open_split, split_plan

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
    """The cases whose files this suite writes: every error case, and a quarter of the others,
    chosen so that over the four models each case is written once (all of them:
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
