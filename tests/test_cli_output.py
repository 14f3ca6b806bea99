"""What the command line prints for a new user (issue 35): summaries by default and details on
request (``quantize``, ``check``), ``-q/--quiet`` on every command, and the edges a first run meets
(many files to the inspecting commands, ``--ctx 8k``, ``diff`` of a truncated file, BOOL and float
values as dump and diff show them, plurals, bare ``gguf-schema``, ``convert`` with nothing to change,
the default ``check`` profile)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import gguf_schema
from gguf_schema import Field, GGUFArray, ValueType
from gguf_schema.cli import COMMANDS, build_parser
from gguf_schema.cli.text_values import type_label
from gguf_schema.testing.strategies import fields
from gguf_schema.tools import jsonio

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


# --------------------------------------------------------------------------- the edges a first run meets


def test_info_dump_and_tensors_take_many_files(f32_model: Path, truncated: Path, tmp_path: Path) -> None:
    demo = tmp_path / "demo.gguf"
    demo.write_bytes(demo_bytes())
    for command in ("info", "dump", "tensors"):
        one = [run_cli(command, p).stdout.decode() for p in (f32_model, demo)]
        both = run_cli(command, f32_model, demo)
        assert both.returncode == 0, both
        assert both.stdout.decode() == f"==> {f32_model} <==\n{one[0]}\n==> {demo} <==\n{one[1]}", command
        docs = json.loads(run_cli(command, f32_model, demo, "--json").stdout)
        assert docs == [json.loads(run_cli(command, p, "--json").stdout) for p in (f32_model, demo)], command
    # the worst exit code; a file that cannot be read does not stop the others
    r = run_cli("info", f32_model, tmp_path / "absent.gguf", truncated)
    assert r.returncode == 2 and f"==> {truncated} <==" in r.stdout.decode()
    assert b"absent.gguf" in r.stderr and b"is truncated" in r.stderr
    assert run_cli("tensors", f32_model, truncated).returncode == 3
    r = run_cli("tensors", f32_model, demo, "--filter", "blk.0.ffn_up*")
    assert r.returncode == 0 and b"no tensor name matches" not in r.stderr
    r = run_cli("tensors", f32_model, demo, "--filter", "blk.0.attn_q*")  # in one file only
    assert r.returncode == 0 and r.stderr.decode() == f"gguf-schema: {demo}: no tensor name matches blk.0.attn_q*\n"
    r = run_cli("tensors", f32_model, demo, "--filter", "nothing*")
    assert r.returncode == 1 and r.stderr.decode().count("no tensor name matches nothing*") == 2


def test_estimate_takes_a_context_with_a_suffix(tmp_path: Path) -> None:
    model = tmp_path / "demo.gguf"
    model.write_bytes(demo_bytes())
    for text, tokens in (("8k", 8192), ("8K", 8192), ("32Ki", 32768), ("1M", 1 << 20), ("4096", 4096)):
        r = run_cli("estimate", model, "--ctx", text, "--json")
        assert r.returncode == 0, r
        assert json.loads(r.stdout)["settings"]["n_ctx"] == tokens, text
    r = run_cli("estimate", model, "--ctx", "8.5k")
    assert r.returncode == 2 and b"needs a whole number of tokens" in r.stderr


def test_diff_of_a_truncated_file_says_the_data_was_not_compared(truncated: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole.gguf"
    whole.write_bytes(demo_bytes())
    r = run_cli("diff", whole, truncated)
    assert r.returncode == 3  # not 0: not known to be equal
    assert r.stdout.decode() == (
        "no differences in header, metadata or tensor types and shapes; tensor data not compared "
        "(a file is truncated: exit 3)\n"
    )
    assert json.loads(run_cli("diff", whole, truncated, "--json").stdout) == {
        "equal": None,
        "data_compared": False,
        "differences": [],
    }
    assert json.loads(run_cli("diff", whole, whole, "--json").stdout) == {
        "equal": True,
        "data_compared": True,
        "differences": [],
    }


def test_bool_and_float_values_look_the_same_in_dump_and_diff(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    floats = np.linspace(0, 1, 20, dtype=np.float32)
    gguf_schema.save(a, {"x.b": True, "x.f": floats, "x.one": np.float32(0.1)})
    gguf_schema.save(b, {"x.b": False, "x.f": floats * 2, "x.one": np.float32(0.2)})
    dump = {
        line.split()[1]: line.split(None, 3)[3]
        for line in run_cli("dump", a, "--no-tensors").stdout.decode().splitlines()[2:]
    }
    diff = {}
    for line in run_cli("diff", a, b).stdout.decode().splitlines():
        key, change = line.split(": ", 1)
        diff[key.split()[-1]] = change.split(" -> ")[0].split(" ", 1)[1]
    assert dump == diff
    assert dump["x.b"] == "true" and dump["x.one"] == "0.1"
    shown = dump["x.f"]
    assert shown.startswith("(20 items) [") and shown.endswith(", ...]")
    items = json.loads(shown.split(" ", 2)[2].replace(", ...]", "]"))  # every item whole, none cut
    assert items == [float(x) for x in map(str, floats[:8])]


def test_edits_count_bytes_in_good_english(f32_model: Path) -> None:
    r = run_cli("set", f32_model, "general.name", "tinz")  # one byte differs
    assert r.stderr.decode() == f"set general.name: {f32_model} (in place, 1 header byte changed)\n"


def test_bare_gguf_schema_prints_the_help() -> None:
    r = run_cli()
    assert r.returncode == 0 and r.stderr == b""
    assert r.stdout == run_cli("--help").stdout and r.stdout.startswith(b"usage: gguf-schema")


def test_convert_with_nothing_to_change_writes_nothing(f32_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy.gguf"
    r = run_cli("convert", f32_model, out)
    assert r.returncode == 2 and not out.exists()
    assert (
        r.stderr
        == b"gguf-schema: error: convert: nothing to change: give --byte-order and/or --version (nothing was written)\n"
    )
    r = run_cli("convert", f32_model, out, "--byte-order", "little", "--version", "3")
    assert r.returncode == 2 and not out.exists()
    assert b"is little-endian GGUF v3 already: nothing to change" in r.stderr
    assert run_cli("convert", f32_model, out, "--version", "2").returncode == 0 and out.exists()


def test_the_default_check_asks_whether_llama_cpp_loads_the_file(tmp_path: Path) -> None:
    p = tmp_path / "gemma3.gguf"
    gguf_schema.save(p, {"general.architecture": "gemma3", "general.name": "x"}, {"w": np.ones(4, np.float32)})
    r = run_cli("check", p)
    assert (r.returncode, r.stdout.decode()) == (0, f"{p}: ok under profile ggml (0 errors, 0 warnings)\n")
    spec = run_cli("check", "--profile", "spec", p).stdout.decode()
    assert "GGUF-W001 warning [general.architecture]: architecture 'gemma3' is not one the spec names" in spec


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields())
def test_every_value_is_shown_whole_as_its_json(f: Field) -> None:
    """What dump and diff print for any value (jsonio.value_text): its JSON, an array's first 8 items
    whole (the text parses back to them) and a count, never a repr cut in the middle."""
    text = jsonio.value_text(f)
    if f.type == ValueType.ARRAY:
        n = len(f.value.items)
        count, _, body = text.partition(" ")
        assert count == f"({n:,}"
        body = body.split(" ", 1)[1]
        if n > 8:
            assert body.endswith(", ...]")
            body = body[: -len(", ...]")] + "]"
        shown = GGUFArray(f.value.type, f.value.items[:8])
        assert json.loads(body) == json.loads(json.dumps(jsonio.encode_value(ValueType.ARRAY, shown)))
    elif f.type == ValueType.STRING:
        assert text == repr(f.value) or text.endswith(f"...' ({len(f.value):,} chars)")
    else:
        assert json.loads(text) == json.loads(json.dumps(jsonio.encode_value(f.type, f.value)))
    assert describe(f) == f"{type_label(f)} {text}"  # diff shows it the same way, after the type


def describe(f: Field) -> str:
    from gguf_schema.tools.diff import describe_value

    return describe_value(f, limit=200)


def test_exports_progress_bar_shows_its_total(tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    demo = tmp_path / "demo.gguf"
    demo.write_bytes(demo_bytes())
    r = run_cli("export", demo, tmp_path / "d.safetensors", env={"GGUF_SCHEMA_PROGRESS": "1"})  # a bar off a terminal
    assert r.returncode == 0
    frames = [x for x in r.stderr.decode().replace("\r", "\n").splitlines() if x.startswith("export:")]
    assert frames and all(re.search(r"\| +[\d.]+[kMG]?/[\d.]+[kMG]? \[", x) for x in frames[1:])  # done/total
    assert len(frames) >= 2
