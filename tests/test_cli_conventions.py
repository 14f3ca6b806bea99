"""The conventions every command shares (issue 15): exit codes for truncated files, warnings with rule
ids and ``--strict``, output encoding, one JSON encoder, ``--limit``/``--no-mmap``, ``-o``,
``--version``, closed pipes, and types printed as names. Driven in this process through ``main``,
and in real subprocesses where the point is the process (pipes, stdout encodings)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.check.spec_audit import audit_spec
from gguf_schema.cli import build_parser
from gguf_schema.cli.conventions import open_options, to_json, truncation
from gguf_schema.errors import GGUFDocumentError, GGUFValidationError, GGUFWarning
from gguf_schema.format.types import FileType, GGMLType, ValueType
from gguf_schema.format.values import GGUFArray
from gguf_schema.io.source import MappedSource, PositionedSource
from gguf_schema.tools import edit

from .conftest import SHARED
from .helpers import run_cli as run

SEED_SPEC = SHARED / "seeds" / "000_d466ef7820170e32.txt"


def process(*args: object, env: dict[str, str] | None = None, **kw: object) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("GGUF_SCHEMA_PROGRESS", "PYTHONIOENCODING")}
    environ.update(env or {})
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "gguf_schema", *map(str, args)], env=environ, **{"capture_output": True, **kw}
    )


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A clean little file: two keys, two F32 tensors of 4 KiB each."""
    p = tmp_path / "small.gguf"
    gguf_schema.save(
        p,
        {"general.architecture": "llama", "llama.context_length": np.uint32(2048)},
        {"a": np.arange(1024, dtype=np.float32), "b": np.ones(1024, np.float32)},
    )
    return p


@pytest.fixture
def odd(tmp_path: Path) -> Path:
    """Names and values that are not valid UTF-8 or not ASCII."""
    p = tmp_path / "odd.gguf"
    bad = b"bad.\xff\xfe".decode("utf-8", "surrogateescape")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GGUFWarning)
        gguf_schema.save(
            p,
            {
                bad: "caf\u00e9 \u4e2d\u6587 " + b"\xc3(".decode("utf-8", "surrogateescape"),
                "general.name": "\u00e9t\u00e9",
            },
            {b"t\xff".decode("utf-8", "surrogateescape"): np.zeros(4, np.float32)},
        )
    return p


# ---------------------------------------------------------------- types print as names


def test_codes_print_as_names_and_keep_their_numbers() -> None:
    t = GGMLType.of("Q4_K")
    assert (str(t), f"{t}", f"{t:>6}", repr(t), int(t), f"{t:d}") == (
        "Q4_K",
        "Q4_K",
        "  Q4_K",
        "<GGMLType.Q4_K: 12>",
        12,
        "12",
    )
    assert (str(ValueType.UINT32), str(FileType.MOSTLY_Q4_K_M), f"{ValueType.ARRAY:x}") == (
        "UINT32",
        "MOSTLY_Q4_K_M",
        "9",
    )
    assert json.dumps([GGMLType.Q8_0]) == "[8]"  # the standard JSON encoder still writes the number
    assert to_json([GGMLType.Q8_0]) == '["Q8_0"]'  # the command line's writes the name


def test_quantize_errors_name_the_type_and_the_shape_rule() -> None:
    with pytest.raises(
        ValueError,
        match=r"Q4_K tensor shape \(2, 100\): the last dimension 100 is not a multiple of the Q4_K block size 256",
    ):
        gguf_schema.tensors.quantize(np.zeros((2, 100), np.float32), "Q4_K")


# ---------------------------------------------------------------- set-file keeps the stored type


def test_set_file_into_a_numeric_key_is_refused_and_the_file_kept(small: Path, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}\n")
    before = small.read_bytes()
    r = run("set-file", small, "llama.context_length", template)
    assert r.returncode == 2
    assert b"llama.context_length is stored as UINT32, and the contents of" in r.stderr
    assert b"UINT32 needs an integer, got '{{ messages }}'" in r.stderr
    assert small.read_bytes() == before


def test_set_file_reads_a_number_into_a_numeric_key_as_set_does(small: Path, tmp_path: Path) -> None:
    number = tmp_path / "n.txt"
    number.write_text(" 8192\n")
    assert run("set-file", small, "llama.context_length", number).returncode == 0
    with gguf_schema.open(small) as f:
        fld = f.fields["llama.context_length"]
        assert (fld.type, fld.value) == (ValueType.UINT32, 8192)


def test_set_file_stores_text_exactly_in_a_string_key(small: Path, tmp_path: Path) -> None:
    raw = b"{% for m in messages %}\xff{{ m }}\n{% endfor %}\n"
    (tmp_path / "t.jinja").write_bytes(raw)
    assert run("set-file", small, "tokenizer.chat_template", tmp_path / "t.jinja", "--add").returncode == 0
    assert run("set-file", small, "general.architecture", tmp_path / "t.jinja").returncode == 0
    with gguf_schema.open(small) as f:
        for key in ("tokenizer.chat_template", "general.architecture"):
            assert f.fields[key].type == ValueType.STRING
            assert f.metadata[key].encode("utf-8", "surrogateescape") == raw


# ---------------------------------------------------------------- truncated files


@pytest.fixture
def cut(small: Path, tmp_path: Path) -> Path:
    """``small`` cut 1000 bytes into the data of its second tensor."""
    with gguf_schema.open(small) as f:
        b = f.tensors["b"]
        end = b.offset + 1000
    p = tmp_path / "cut.gguf"
    p.write_bytes(small.read_bytes()[:end])
    return p


def test_truncation_counts_the_missing_bytes_and_names_the_tensors(cut: Path) -> None:
    with gguf_schema.open(cut) as f:
        assert truncation(f) == (4096 - 1000, ["b"])


@pytest.mark.parametrize(
    "command",
    [["info"], ["info", "--json"], ["dump"], ["dump", "--json"], ["tensors"], ["get", "general.architecture"]],
)
def test_truncated_files_warn_and_exit_3(cut: Path, command: list[str]) -> None:
    args = [command[0], cut, *command[1:]]
    r = run(*args)
    assert r.returncode == 3, r
    assert r.stderr.decode() == (
        f"gguf-schema: warning: {cut} is truncated: 3,096 bytes of tensor data are missing; 1 of 2 tensors affected (b)\n"
    )
    assert r.stdout  # the output is still printed
    text = r.stdout.decode()
    assert not re.search(r"(?<![\w.])-\d", text.replace("-endian", ""))  # no negative count anywhere
    assert all(float(x) <= 100 for x in re.findall(r"([\d.]+)%", text))


def test_info_of_a_truncated_file_shows_the_missing_bytes_as_their_own_part(cut: Path) -> None:
    r = run("info", "--json", cut)
    doc = json.loads(r.stdout)
    parts = {p["part"]: p["bytes"] for p in doc["layout"]}
    assert parts["missing (truncated)"] == 3096
    assert all(v >= 0 for v in parts.values())
    assert sum(v for k, v in parts.items() if not k.startswith("missing")) == cut.stat().st_size
    assert doc["truncated"] == {"missing_bytes": 3096, "tensors": ["b"]}
    assert json.loads(run("info", "--json", cut.with_name("small.gguf")).stdout)["truncated"] is None


def test_the_exit_codes_are_in_the_help() -> None:
    text = run("--help").stdout.decode()
    assert "3 the file is truncated" in text and "2 unreadable input, a refused write (--strict)" in text
    assert "3 the file is truncated" in run("info", "--help").stdout.decode()


# ---------------------------------------------------------------- audit-spec needs a spec


@pytest.mark.parametrize("text", ["", "   \n", "# Release notes\n\nNothing about file formats here.\n"])
def test_audit_spec_of_a_document_with_no_spec_structure_is_an_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(GGUFDocumentError, match="states no part of the GGUF specification"):
        audit_spec(text)
    doc = tmp_path / "doc.md"
    doc.write_text(text)
    r = run("audit-spec", doc)
    assert r.returncode == 2
    assert r.stdout == b"" and b"gguf-schema: error: the document states no part of the GGUF specification" in r.stderr


@pytest.mark.skipif(not SEED_SPEC.is_file(), reason="../shared/seeds is absent")
def test_audit_spec_of_the_real_spec_still_runs() -> None:
    r = run("audit-spec", SEED_SPEC)
    assert r.returncode in (0, 1) and r.stdout.startswith(str(SEED_SPEC).encode() + b": ")


# ---------------------------------------------------------------- warnings with rule ids, --strict


def _caught(fn: object) -> list[tuple[str, str | None]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()  # type: ignore[operator]
    return [(w.message.rule, w.message.name) for w in seen if issubclass(w.category, GGUFWarning)]


def test_save_warns_with_rule_ids_for_what_ggml_refuses() -> None:
    name65 = "x" * 65
    nested = GGUFArray(ValueType.ARRAY, [GGUFArray(ValueType.UINT8, [1]), GGUFArray(ValueType.UINT8, [2])])
    found = _caught(
        lambda: gguf_schema.save(
            io.BytesIO(),
            {"general.architecture": "llama", "n": nested},
            {"five": np.zeros((1, 1, 1, 1, 2), np.float32), name65: np.zeros(2, np.float32)},
        )
    )
    assert found == [("GGUF-E024", "n"), ("GGUF-E033", "five"), ("GGUF-E030", name65)]


def test_a_clean_save_warns_nothing(tmp_path: Path) -> None:
    assert (
        _caught(lambda: gguf_schema.save(tmp_path / "ok.gguf", {"general.name": "x"}, {"w": np.ones(4, np.float32)}))
        == []
    )


def test_strict_save_refuses_before_writing(tmp_path: Path) -> None:
    target = tmp_path / "refused.gguf"
    with pytest.raises(GGUFValidationError, match="GGUF-E033") as e:
        gguf_schema.save(target, {"a": 1}, {"five": np.zeros((1, 1, 1, 1, 2), np.float32)}, strict="ggml")
    assert e.value.finding.rule == "GGUF-E033" and not target.exists()
    assert not list(tmp_path.iterdir())  # no temporary file left either
    gguf_schema.save(target, {"a": 1}, {"five": np.zeros((1, 1, 1, 1, 2), np.float32)}, strict="lenient")
    assert target.exists()  # lenient has no rule about dimensions


def test_edits_warn_in_place_and_when_rewriting(small: Path) -> None:
    # same length: the header is rewritten in place; "Llama.context_length" breaks the key syntax
    found = _caught(lambda: edit.rename_key(small, "llama.context_length", "Llama.context_length"))
    assert found == [("GGUF-E020", "Llama.context_length")]
    found = _caught(lambda: edit.set_key(small, "", 1))  # a longer header: rewritten
    assert found == [("GGUF-E022", ""), ("GGUF-E020", "Llama.context_length"), ("GGUF-E020", "")]


def test_cli_prints_warnings_with_rule_ids_and_strict_refuses(small: Path) -> None:
    before = small.read_bytes()
    r = run("set", small, "", "1", "--strict", "ggml", "--add")
    assert (r.returncode, r.stderr.decode()) == (2, "gguf-schema: error: GGUF-E022: empty key (at offset 105)\n")
    assert small.read_bytes() == before
    r = run("set", small, "bad\nkey", "1", "--strict", "ggml", "--add")  # the key syntax is a spec rule, not ggml's
    assert r.returncode == 0 and r.stderr.decode().startswith(
        "gguf-schema: warning: [GGUF-E020] key 'bad\\nkey' is not ASCII lower_snake_case segments"
    )
    r = run("convert", small, small.with_name("s.gguf"), "--strict", "spec", "--byte-order", "big")
    assert r.returncode == 2 and b"GGUF-E020" in r.stderr and not small.with_name("s.gguf").exists()


def test_generate_writes_rule_breaking_fixtures_without_a_warning_each(tmp_path: Path) -> None:
    r = run("generate", tmp_path / "fx", "--only", "edge", "--small")
    assert r.returncode == 0 and b"warning" not in r.stderr


# ---------------------------------------------------------------- output encoding


def run_encoded(encoding: str, *args: object) -> tuple[int, bytes, bytes]:
    """``main(args)`` with stdout and stderr as Python sets them up under ``PYTHONIOENCODING=encoding``
    (strict error handling on both, harsher than Python's own stderr)."""
    import contextlib

    from gguf_schema.cli import main

    out, err = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding=encoding, errors="strict", write_through=True)
    stderr = io.TextIOWrapper(err, encoding=encoding, errors="strict", write_through=True)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("encoding", ["utf-8", "ascii", "latin-1"])
def test_names_that_are_not_utf8_never_raise_whatever_the_encoding(odd: Path, encoding: str) -> None:
    for command in (["dump"], ["tensors"], ["info"], ["get", "general.name"], ["dump", "--json"], ["check"]):
        code, out, err = run_encoded(encoding, command[0], odd, *command[1:])
        assert code in (0, 1), (command, err)
        if command == ["dump"]:
            assert b"bad.\\xff\\xfe" in out  # the bytes that are not UTF-8, escaped visibly
            assert ("caf\u00e9".encode(encoding) if encoding != "ascii" else b"caf\\xe9") in out
        if command == ["dump", "--json"]:
            doc = json.loads(out)
            assert doc["metadata"][0]["key"] == {"hex": "6261642efffe"}  # the stored bytes, lossless
            assert doc["metadata"][0]["value"] == {"hex": ("caf\u00e9 \u4e2d\u6587 ").encode().hex() + "c328"}
            assert doc["metadata"][1]["value"] == "\u00e9t\u00e9"
    code, out, err = run_encoded(encoding, "get", odd, "general.name")
    assert out == ("\u00e9t\u00e9\n".encode(encoding) if encoding != "ascii" else b"\\xe9t\\xe9\n")


@pytest.mark.parametrize("encoding", ["utf-8:strict", "ascii"])
def test_a_real_process_with_a_strict_encoding_prints_odd_names(odd: Path, encoding: str) -> None:
    r = process("dump", odd, env={"PYTHONIOENCODING": encoding})
    assert r.returncode == 0 and b"Traceback" not in r.stderr and b"bad.\\xff\\xfe" in r.stdout


def test_errors_about_odd_names_do_not_raise_either(odd: Path) -> None:
    r = process("get", odd, "nothing.\u00e9", env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 2 and b"Traceback" not in r.stderr and b"nothing.\\xe9" in r.stderr


# ---------------------------------------------------------------- closed pipes


@pytest.mark.parametrize(
    "command",
    [
        ["demo", "-o", "{tmp}/d.gguf"],
        ["check", "{small}"],
        ["audit-spec", "{spec}"],
        ["rules"],
        ["info", "--json", "{small}"],
        ["dump", "{small}"],
        ["tensors", "{small}"],
        ["get", "{small}", "general.architecture"],
        ["diff", "{small}", "{demo}"],
    ],
)
def test_a_closed_pipe_ends_every_command_quietly(command: list[str], small: Path, demo: Path, tmp_path: Path) -> None:
    if "{spec}" in command and not SEED_SPEC.is_file():
        pytest.skip("../shared/seeds is absent")
    args = [a.format(tmp=tmp_path, small=small, demo=demo, spec=SEED_SPEC) for a in command]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte is written
    try:
        r = process(*args, stdout=write_end, capture_output=False, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert r.returncode in (0, 1), r.stderr  # diff: 1, the files differ
    assert b"Traceback" not in r.stderr and b"Broken pipe" not in r.stderr and b"Exception ignored" not in r.stderr


# ---------------------------------------------------------------- JSON everywhere


def test_json_outputs_parse_and_carry_the_data(small: Path, demo: Path, tmp_path: Path) -> None:
    info = json.loads(run("info", "--json", small).stdout)
    assert (info["tensors"], info["metadata_keys"], info["parameters"]) == (2, 2, 2048)
    assert info["tensor_types"] == [
        {"type": "F32", "tensors": 2, "elements": 2048, "bytes": 8192, "bits_per_weight": 32.0}
    ]
    tensors = json.loads(run("tensors", "--json", small, "--filter", "b").stdout)
    assert tensors == {
        "tensors": [
            {
                "name": "b",
                "type": "F32",
                "shape": [1024],
                "elements": 1024,
                "bytes": 4096,
                "offset": tensors["tensors"][0]["offset"],
            }
        ],
        "total": 2,
    }
    assert json.loads(run("get", "--json", small, "llama.context_length").stdout) == {
        "key": "llama.context_length",
        "type": "UINT32",
        "value": 2048,
    }
    rules = json.loads(run("rules", "--json", "--profile", "ggml").stdout)
    assert {"id": "GGUF-E022", "severity": "error", "profiles": ["ggml"]}.items() <= rules[
        [r["id"] for r in rules].index("GGUF-E022")
    ].items()
    out = json.loads(run("set", "--json", small, "llama.context_length", "4096", "-o", tmp_path / "e.gguf").stdout)
    assert out == {
        "command": "set",
        "key": "llama.context_length",
        "path": str(tmp_path / "e.gguf"),
        "in_place": False,
        "cloned": False,
        "bytes_written": small.stat().st_size,
    }
    d = json.loads(run("diff", "--json", small, tmp_path / "e.gguf").stdout)
    assert d["differences"] == [
        {
            "section": "metadata",
            "kind": "~",
            "name": "llama.context_length",
            "old": {"type": "UINT32", "value": 2048},
            "new": {"type": "UINT32", "value": 4096},
            "detail": "UINT32 2048 -> UINT32 4096",
        }
    ]
    conv = json.loads(run("convert", "--json", small, "-o", tmp_path / "be.gguf", "--byte-order", "big").stdout)
    assert conv == {"command": "convert", "path": str(tmp_path / "be.gguf"), "bytes": small.stat().st_size}


def test_version_and_output_options(small: Path, tmp_path: Path) -> None:
    r = run("--version")
    assert r.returncode == 0
    assert r.stdout.decode().splitlines()[0] == f"gguf-schema {gguf_schema.__version__}"  # then the compiled modules
    assert run("convert", small, tmp_path / "a.gguf", "--version", "2").returncode == 0  # positional form
    assert run("convert", small, "-o", tmp_path / "b.gguf", "--version", "2").returncode == 0  # option form
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes() != small.read_bytes()
    r = run("convert", small, tmp_path / "c.gguf", "-o", tmp_path / "d.gguf")
    assert r.returncode == 2 and b"the output is given twice" in r.stderr
    r = run("convert", small)
    assert r.returncode == 2 and b"the output file is required" in r.stderr


# ---------------------------------------------------------------- --limit and --no-mmap


def test_limits_apply_to_every_open(small: Path) -> None:
    for args in (
        ["--limit", "max_keys=1", "info", small],
        ["info", small, "--limit", "max_keys=1"],
        ["check", "--limit", "max_keys=1", small],
        ["get", small, "general.architecture", "--limit", "max_keys=1"],
    ):
        r = run(*args)
        assert r.returncode == 2 and b"exceeds max_keys = 1" in r.stdout + r.stderr, args
    assert run("info", small, "--limit", "max_keys=1e6", "--limit", "max_string_length=64M").returncode == 0


def test_unknown_or_bad_limits_are_usage_errors(small: Path) -> None:
    r = run("info", small, "--limit", "max_cats=3")
    assert r.returncode == 2 and b"NAME one of max_string_length, max_key_length" in r.stderr
    r = run("info", small, "--limit", "max_keys=lots")
    assert r.returncode == 2 and b"max_keys needs a count or a size" in r.stderr


def test_no_mmap_reads_with_positioned_reads(small: Path) -> None:
    parser = build_parser()
    for argv, kind in (
        (["info", str(small)], MappedSource),
        (["--no-mmap", "info", str(small)], PositionedSource),
        (["info", str(small), "--no-mmap"], PositionedSource),
    ):
        with gguf_schema.open(str(small), **open_options(parser.parse_args(argv))) as f:
            assert type(f.storage) is kind
    r = run("dump", small, "--no-mmap")
    assert r.returncode == 0 and r.stdout == run("dump", small).stdout


def test_get_raw_writes_the_stored_bytes_unchanged(odd: Path) -> None:
    key = b"bad.\xff\xfe".decode("utf-8", "surrogateescape")
    r = run("get", "--raw", odd, key)
    assert (r.returncode, r.stdout) == (0, "caf\u00e9 \u4e2d\u6587 ".encode() + b"\xc3(")
    r = run("get", odd, key)  # text output: the byte that is not UTF-8 escaped visibly
    assert r.stdout == "caf\u00e9 \u4e2d\u6587 ".encode() + b"\\xc3(\n"


# ---------------------------------------------------------------- issue 28: one error prefix, reading options


def test_every_error_has_the_one_prefix(tmp_path: Path) -> None:
    for args, words in (
        (["set"], "the following arguments are required: FILE, KEY, VALUE"),
        (["estimate", tmp_path / "m.gguf", "--batch", "x"], "argument --batch: needs a whole number >= 1, got 'x'"),
        (["audit"], "audit: give at least one FILE_OR_URL (or --rules)"),
        (["info", tmp_path / "absent.gguf"], f"No such file or directory (in {tmp_path / 'absent.gguf'})"),
    ):
        r = run(*args)
        lines = r.stderr.decode().splitlines()
        assert r.returncode == 2 and lines[-1] == f"gguf-schema: error: {words}", args
        assert not any(": error:" in line and not line.startswith("gguf-schema: error: ") for line in lines)


@pytest.mark.parametrize("command", ["demo", "generate", "rules", "audit-spec"])
def test_commands_that_read_no_gguf_file_take_no_reading_options(command: str, tmp_path: Path) -> None:
    rest = {"demo": [], "generate": [tmp_path], "rules": [], "audit-spec": [tmp_path / "spec.md"]}[command]
    r = run(command, "--help")
    assert r.returncode == 0 and b"--limit" not in r.stdout and b"--no-mmap" not in r.stdout
    assert b"--storage-option" not in r.stdout
    r = run("--no-mmap", command, *rest)
    assert r.returncode == 2
    assert (
        r.stderr.decode().splitlines()[-1]
        == f"gguf-schema: error: {command} reads no GGUF file, so --no-mmap does not apply"
    )
    r = run("--limit", "max_keys=2", "--storage-option", "anon=true", command, *rest)
    assert r.stderr.decode().splitlines()[-1] == (
        f"gguf-schema: error: {command} reads no GGUF file, so --limit and --storage-option do not apply"
    )
    r = run(command, *rest, "--limit", "max_keys=2")
    assert r.returncode == 2 and b"unrecognized arguments: --limit max_keys=2" in r.stderr
