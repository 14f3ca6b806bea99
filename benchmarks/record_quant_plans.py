"""Record llama-quantize's plans and files for the small models of gguf_schema.testing.quant_models.

Run (once, where llama-quantize is built; see benchmarks/bench_presets.py for how to build it):

    python benchmarks/record_quant_plans.py --llama-quantize /path/to/llama-quantize [--out tests/data/quantize_plans]

For each model of ``quant_models.QUANT_MODELS`` and each case (every preset llama-quantize
offers, without and with an importance matrix, and a few cases of its other options), this runs
``llama-quantize --dry-run`` to read the type it gives each tensor (its log lines), then the real
quantization to read the ``general.file_type`` it writes and the SHA-256 of each output file, or
the error it stops with; with ``--llama-gguf-split``, also the SHA-256 of the shards
``llama-gguf-split`` writes of the model (``SPLITS``). One JSON file per model goes to ``--out``; the tests
(``tests/test_presets.py``) check our plan and files against them without llama.cpp.

Types are stored one character per tensor (``TYPE_CODES``: the character at a ggml type's id), in
the order llama-quantize writes the tensors (``names``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gguf_schema  # noqa: E402
from gguf_schema.format.types import GGMLType  # noqa: E402
from gguf_schema.testing.quant_models import (  # noqa: E402
    QUANT_MODELS,
    legacy_imatrix_bytes,
    quant_model,
    save_imatrix,
    save_quant_model,
)
from gguf_schema.tools.quantplan import preset_names  # noqa: E402
from gguf_schema.tools.split import split_plan  # noqa: E402

TYPE_CODES = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"
"""The character of ggml type id i is TYPE_CODES[i]."""

LINE = re.compile(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[[^\]]*\], type =\s*(\S+), size =[^(]*(?:\((\S+)\))?\s*$")


def option_cases(model: str) -> list[dict]:
    """The cases beyond the presets: llama-quantize's options (arguments before the type)."""
    arch = {"llama-gqa": "llama", "gemma3": "gemma3", "qwen3moe": "qwen3moe", "qwen2-odd": "qwen2", "falcon": "falcon"}[
        model
    ]
    cases = [
        {"args": ["--pure"], "type": "Q4_K_M"},
        {"args": ["--pure"], "type": "IQ2_M", "imatrix": "gguf"},
        {"args": ["--output-tensor-type", "q8_0", "--token-embedding-type", "q3_k"], "type": "Q4_K_M"},
        {"args": ["--output-tensor-type", "q5_1"], "type": "Q4_K_S"},
        {"args": ["--leave-output-tensor"], "type": "Q3_K_M"},
        {"args": ["--tensor-type", "attn_v=q8_0", "--tensor-type", r"blk\.1[0-9]\.ffn_down=iq4_nl"], "type": "Q4_K_M"},
        {"args": ["--tensor-type", "ffn_up=q6_k", "--tensor-type", "output=q4_0"], "type": "Q2_K"},
        {"args": [], "type": "Q5_K_S", "imatrix": "dat"},
        {"args": [], "type": "IQ3_XXS", "imatrix": "dat"},
        {"args": ["--exclude-weights", "attn_q"], "type": "IQ2_XS", "imatrix": "gguf"},
        {"args": ["--exclude-weights", "attn_q"], "type": "Q4_K_M", "imatrix": "gguf"},
        {"args": ["--include-weights", "ffn_down", "--include-weights", "attn_v"], "type": "IQ4_XS", "imatrix": "gguf"},
        {
            "args": [
                "--override-kv",
                f"{arch}.attention.head_count_kv=int:1",
                "--override-kv",
                "general.name=str:renamed",
                "--override-kv",
                "test.ratio=float:0.5",
                "--override-kv",
                "test.flag=bool:true",
                "--override-kv",
                "test.negative=int:-3",
            ],
            "type": "Q2_K",
        },
        {"args": ["--keep-split"], "type": "Q4_K_M", "split": True},
        {"args": ["--keep-split"], "type": "Q5_K_M", "imatrix": "gguf", "split": True},
    ]
    return cases


def _run(cmd: list[str], cwd: Path) -> tuple[int, str]:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    return p.returncode, p.stdout + p.stderr


def _plan(log: str) -> tuple[list[str], str]:
    names, codes = [], []
    for line in log.splitlines():
        m = LINE.match(line.strip())
        if m:
            name, cur, new = m.groups()
            t = GGMLType[(new or cur).upper()]
            names.append(name)
            codes.append(TYPE_CODES[int(t)])
    return names, "".join(codes)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _error(log: str) -> str:
    lines = [x.strip() for x in log.splitlines()]
    for key in ("offending tensor:", "failed to quantize:", "GGML_ASSERT"):
        for x in lines:
            if key in x:
                return x[x.index(key) :]
    return lines[-1] if lines else ""


SPLITS = (
    ["--split-max-tensors", "40"],
    ["--split-max-size", "1M"],
    ["--split-max-tensors", "40", "--no-tensor-first-split"],
)
"""llama-gguf-split's runs recorded for each model (its shards' SHA-256: gguf-schema split --llama-layout must match)."""


def record_split(model: str, gguf_split: str, work: Path) -> list[dict]:
    out = []
    for args in SPLITS:
        for old in work.glob("gsplit-*"):
            old.unlink()
        rc, log = _run([gguf_split, "--split", *args, f"{model}.gguf", "gsplit"], work)
        if rc != 0:
            raise SystemExit(f"llama-gguf-split failed: {log[-1000:]}")
        out.append({"args": args, "sha256": [_sha(f) for f in sorted(work.glob("gsplit-*.gguf"))]})
    return out


def record(model: str, quantize: str, work: Path, gguf_split: str | None = None) -> dict:
    src = work / f"{model}.gguf"
    save_quant_model(src, model)
    _, tensors = quant_model(model)
    save_imatrix(work / f"{model}.imatrix.gguf", tensors)
    (work / f"{model}.imatrix.dat").write_bytes(legacy_imatrix_bytes(tensors))
    shards = split_plan(src, str(work / f"{model}-split"), max_tensors=40, identity=False)
    cases = [{"args": [], "type": p} for p in preset_names()]
    cases += [{"args": [], "type": p, "imatrix": "gguf"} for p in preset_names()]
    cases += option_cases(model)
    out: dict = {
        "llama_cpp": "0c1e570 (llama-cpp-python 0.3.36's vendor/llama.cpp)",
        "model": model,
        "source_sha256": _sha(src),
        "split_sources": [os.path.basename(p) for p in shards.paths],
        "names": None,
        "cases": [],
    }
    for case in cases:
        args = list(case["args"])
        if case.get("imatrix"):
            args += ["--imatrix", f"{model}.imatrix.{case['imatrix']}"]
        inp = os.path.basename(shards.paths[0]) if case.get("split") else src.name
        rc, log = _run([quantize, "--dry-run", *args, inp, case["type"], "1"], work)
        names, plan = _plan(log)
        if rc != 0 or not names:  # refused before any tensor is planned: no plan, no file
            out["cases"].append({**case, "plan": None, "error": _error(log)})
            print(model, case["type"], " ".join(case["args"]), "dry run:", out["cases"][-1]["error"])
            continue
        record_case: dict = {**case, "plan": plan}
        if out["names"] is None and not case.get("split"):
            out["names"] = names
        if names != out["names"]:
            record_case["names"] = names
        dst = work / "out.gguf"
        for old in work.glob("out*.gguf"):
            old.unlink()
        rc, log = _run([quantize, *args, inp, dst.name, case["type"], "1"], work)
        if rc != 0:
            record_case["error"] = _error(log)
        else:
            files = sorted(work.glob("out*.gguf"))
            record_case["sha256"] = [_sha(f) for f in files]
            with gguf_schema.open(files[0]) as f:
                record_case["file_type"] = int(f.metadata["general.file_type"])
        out["cases"].append(record_case)
        print(model, case["type"], " ".join(case["args"]), case.get("imatrix") or "", record_case.get("error", "ok"))
    if gguf_split is not None:
        out["gguf_split"] = record_split(model, gguf_split, work)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-quantize", required=True, help="path of the llama-quantize binary")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "quantize_plans")
    ap.add_argument("--models", default=",".join(QUANT_MODELS))
    ap.add_argument("--llama-gguf-split", help="path of llama-gguf-split: also record its shards")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    quantize = os.path.abspath(args.llama_quantize)
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as d:
            data = record(model, quantize, Path(d), args.llama_gguf_split and os.path.abspath(args.llama_gguf_split))
        (args.out / f"{model}.json").write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
