"""What the command line prints for a new user (issue 35): summaries by default and details on
request (``quantize``, ``check``), ``-q/--quiet`` on every command, and the edges a first run meets
(many files to the inspecting commands, ``--ctx 8k``, ``diff`` of a truncated file, BOOL and float
values as dump and diff show them, plurals, bare ``gguf-schema``, ``convert`` with nothing to change,
the default ``check`` profile)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.cli import COMMANDS, build_parser

from .conftest import demo_bytes
from .helpers import run_cli


@pytest.fixture
def f32_model(tmp_path: Path) -> Path:
    """F32 weights: rows of 256 (whole Q4_K blocks) and of 96 and 48 (which fall back)."""
    rng = np.random.default_rng(0)
    p = tmp_path / "f32.gguf"
    gguf_schema.save(
        p,
        {"general.architecture": "llama", "general.name": "tiny"},
        {
            "token_embd.weight": rng.standard_normal((16, 256)).astype(np.float32),
            "blk.0.attn_q.weight": rng.standard_normal((8, 256)).astype(np.float32),
            "blk.0.ffn_down.weight": rng.standard_normal((8, 96)).astype(np.float32),
            "blk.0.ffn_up.weight": rng.standard_normal((6, 48)).astype(np.float32),
            "blk.0.ffn_gate.weight": rng.standard_normal((6, 48)).astype(np.float32),
            "output.weight": rng.standard_normal((16, 256)).astype(np.float32),
        },
    )
    return p


@pytest.fixture
def truncated(tmp_path: Path) -> Path:
    """The demo model cut inside its tensor data: every tensor after the cut runs past the end."""
    p = tmp_path / "cut.gguf"
    data = demo_bytes()
    with gguf_schema.open(data) as f:
        first = min(t.offset for t in f.tensor_list)
    p.write_bytes(data[: first + 8])
    return p


# --------------------------------------------------------------------------- summaries, --verbose, --quiet


def test_quantize_prints_a_summary_and_counts_the_fallbacks_in_one_line(f32_model: Path, tmp_path: Path) -> None:
    r = run_cli("quantize", f32_model, tmp_path / "q.gguf", "Q4_K")
    assert r.returncode == 0, r
    out = r.stdout.decode().splitlines()
    assert len(out) == 1 and out[0].startswith("Q4_K: 6 of 6 tensors quantized (")
    assert "3 fell back" in out[0]
    err = r.stderr.decode().splitlines()
    assert err[0].startswith(
        "gguf-schema: note: 3 tensors fell back to another type (rows that are not whole blocks of the type chosen, "
        "as llama-quantize does): "
    )
    assert err[0].endswith("; --verbose lists them")
    assert not [line for line in err if "rows of" in line]  # one line, not one per tensor
    assert err[-1] == f"gguf-schema: wrote {tmp_path / 'q.gguf'}"

    verbose = run_cli("quantize", f32_model, tmp_path / "v.gguf", "Q4_K", "--verbose")
    table = verbose.stdout.decode().splitlines()
    assert table[0].split()[:4] == ["tensor", "shape", "type", "bytes"] and len(table) == 1 + 6 + 1
    assert table[-1] == out[0]
    each = [line for line in verbose.stderr.decode().splitlines() if "fallback" in line]
    assert len(each) == 3 and all(line.startswith("gguf-schema: blk.0.ffn_") for line in each)
    assert (tmp_path / "v.gguf").read_bytes() == (tmp_path / "q.gguf").read_bytes()

    quiet = run_cli("quantize", f32_model, tmp_path / "s.gguf", "Q4_K", "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")
    assert (tmp_path / "s.gguf").read_bytes() == (tmp_path / "q.gguf").read_bytes()


def test_every_command_takes_quiet_before_or_after_it() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in COMMANDS:
        flags = {f for a in sub.choices[name]._actions for f in a.option_strings}
        assert {"-q", "--quiet"} <= flags, name
    assert {"-q", "--quiet"} <= {f for a in parser._actions for f in a.option_strings}


def test_quiet_leaves_out_status_lines_and_keeps_results(f32_model: Path, tmp_path: Path) -> None:
    loud = run_cli("convert", f32_model, tmp_path / "be.gguf", "--byte-order", "big")
    assert loud.stderr.decode().startswith(f"wrote {tmp_path / 'be.gguf'}")
    for argv in (["-q", "convert"], ["convert", "-q"]):
        r = run_cli(*argv, f32_model, tmp_path / "be2.gguf", "--byte-order", "big")
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), argv
    r = run_cli("set", f32_model, "general.name", "tinz", "--quiet")
    assert (r.returncode, r.stderr) == (0, b"")
    r = run_cli("get", f32_model, "general.name", "-q")
    assert r.stdout == b"tinz\n"  # results still print


def test_check_groups_the_findings_of_one_rule_with_a_count(truncated: Path) -> None:
    report = json.loads(run_cli("check", truncated, "--json").stdout)["reports"][0]
    rules = [x["rule"] for x in report["findings"]]
    cut = rules.count("GGUF-E002")  # one per tensor past the end
    with gguf_schema.open(truncated) as f:
        assert cut == len(f.truncation()[1]) >= 4
    others = len(rules) - cut
    r = run_cli("check", truncated)
    assert r.returncode == 1
    lines = r.stdout.decode().splitlines()
    assert lines[0] == f"{truncated}: rejected under profile ggml ({len(rules)} errors, 0 warnings)"
    assert len([line for line in lines if line.startswith("  @") and " GGUF-E002 " in line]) == 2
    assert f"  ... and {cut - 2} more GGUF-E002 errors like these ({cut} in all; --verbose lists them)" in lines
    assert len(lines) == 1 + others + 3
    every = run_cli("check", truncated, "--verbose").stdout.decode().splitlines()
    assert len([line for line in every if " GGUF-E002 " in line]) == cut and len(every) == 1 + len(rules)
