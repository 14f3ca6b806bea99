"""The everyday subcommands, driven as a user drives them: in this process through ``main`` (fast), and in a
real subprocess for what only a process shows (pipes, ``python -m gguf_schema``)."""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.cli.progress import Progress, progress_enabled

from .conftest import VOCAB_FILES
from .helpers import run_cli

COMMANDS = [
    "info",
    "dump",
    "build",
    "tensors",
    "get",
    "set",
    "set-file",
    "delete",
    "rename",
    "convert",
    "split",
    "merge",
    "diff",
]


run = run_cli


def run_process(*args: object, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = dict(os.environ)
    environ.pop("GGUF_SCHEMA_PROGRESS", None)
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "gguf_schema", *map(str, args)], capture_output=True, env=environ)


def tensor_hashes(path: Path) -> dict[str, str]:
    with gguf_schema.open(path) as f:
        return {t.name: hashlib.sha256(t.raw()).hexdigest() for t in f.tensor_list}


@pytest.fixture
def gemma_copy(gemma: Path, tmp_path: Path) -> Path:
    p = tmp_path / "gemma.gguf"
    shutil.copyfile(gemma, p)
    return p


# ---------------------------------------------------------------- help and exit codes


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    r = run(command, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(b"usage: gguf-schema " + command.encode())


def test_missing_file_exits_2_with_one_line_error(tmp_path: Path) -> None:
    r = run("info", tmp_path / "absent.gguf")
    assert r.returncode == 2
    assert r.stdout == b""
    assert r.stderr.decode().startswith("gguf-schema: error: No such file or directory")
    assert r.stderr.count(b"\n") == 1


def test_not_a_gguf_file_names_offset_and_magic(tmp_path: Path) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04 not a model")
    for cmd in (
        ["info", p],
        ["dump", p],
        ["tensors", p],
        ["get", p, "k"],
        ["set", p, "k", "1"],
        ["convert", p, tmp_path / "o", "--byte-order", "big"],
    ):
        r = run(*cmd)
        assert r.returncode == 2, cmd
        assert (
            r.stderr.decode()
            == "gguf-schema: error: not a GGUF file: magic b'PK\\x03\\x04', expected b'GGUF' (at offset 0, in header.magic)\n"
        )
    assert p.read_bytes() == b"PK\x03\x04 not a model"


def test_usage_errors_exit_2(demo: Path) -> None:
    r = run("split", demo, "out", "--max-size", "2X")
    assert r.returncode == 2
    assert b"not a size: '2X'" in r.stderr
    r = run("split", demo, "out")
    assert r.returncode == 2 and b"one of the arguments --max-size --max-tensors is required" in r.stderr
    r = run("convert", demo, "o.gguf", "--version", "1")
    assert r.returncode == 2 and b"invalid choice: 1" in r.stderr


# ---------------------------------------------------------------- info, dump, tensors, get


def test_info_on_gemma_reports_counts_types_parameters_and_layout(gemma: Path) -> None:
    r = run("info", gemma)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "GGUF v3, little-endian, alignment 32, data at offset 6,525,120" in out
    assert "33 metadata keys, 236 tensors" in out
    assert (
        "model:       gemma3, name 'Gemma 3 270m', size_label '270M', type 'model', file type MOSTLY_Q4_K_M (15)" in out
    )
    assert "tokenizer:   llama, 262,144 tokens" in out
    assert "parameters:  268,098,176 (268.1M)" in out
    for line in (
        "  Q8_0        10 tensors",
        "  Q5_0        81 tensors",
        "  Q4_K        27 tensors",
        "  Q6_K         9 tensors",
        "  F32        109 tensors",
    ):
        assert line in out
    assert "  tensor data                 246,587,904 bytes" in out
    assert "  metadata in all               6,525,120 bytes" in out


def test_dump_lists_every_key_with_its_stored_type(demo: Path) -> None:
    r = run("dump", demo)
    assert r.returncode == 0
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "GGUF v3, little-endian, alignment 32: 29 metadata keys, 5 tensors"
    assert "    18  demo.uint64                             UINT64          18446744073709551615" in lines
    assert "    21  demo.bool                               BOOL            true" in lines
    assert any(line.split()[1:3] == ["demo.nested", "ARRAY[ARRAY]"] for line in lines)
    assert (
        "     3  blk.0.ffn_up.weight     Q8_0     shape [8, 64]  dims [64, 8]  offset 2,176 (absolute 3,776)  544 bytes"
        in lines
    )
    assert "tensors:" not in run("dump", demo, "--no-tensors").stdout.decode()


def test_dump_abbreviates_long_arrays_unless_asked() -> None:
    vocab_file = VOCAB_FILES[0]
    short = run("dump", vocab_file, "--no-tensors").stdout.decode()
    full = run("dump", vocab_file, "--no-tensors", "--full-arrays").stdout.decode()
    tokens_short = next(line for line in short.split("\n") if "tokenizer.ggml.tokens " in line)
    tokens_full = next(line for line in full.split("\n") if "tokenizer.ggml.tokens " in line)
    assert tokens_short.endswith(", ...]")
    with gguf_schema.open(vocab_file) as f:
        tokens = f.fields["tokenizer.ggml.tokens"].value.items
    assert f"({len(tokens):,} items)" in tokens_short
    assert len(tokens_full) > len(tokens_short)
    assert json.loads(tokens_full.split(" items) ", 1)[1]) == [
        t if t.isascii() or _utf8(t) else {"hex": t.encode("utf-8", "surrogateescape").hex()} for t in tokens
    ]


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def test_info_and_dump_json_then_build_on_every_vocab_file(vocab_file: Path, tmp_path: Path) -> None:
    with gguf_schema.open(vocab_file) as f:
        n_tokens = len(f.fields["tokenizer.ggml.tokens"].value)
        keys = len(f.fields.records)
    info = run("info", vocab_file)
    assert info.returncode == 0, info.stderr
    assert f"{keys} metadata keys, 0 tensors" in info.stdout.decode()
    assert f"{n_tokens:,} tokens" in info.stdout.decode()
    assert "parameters:  0 (0)" in info.stdout.decode()
    js = tmp_path / "v.json"
    r = run("dump", vocab_file, "--json")
    assert r.returncode == 0
    js.write_bytes(r.stdout)
    out = tmp_path / "rebuilt.gguf"
    r = run("build", js, out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == vocab_file.read_bytes()


def test_dump_json_then_build_reproduces_the_demo_file_from_stdin(demo: Path, tmp_path: Path) -> None:
    doc = run("dump", demo, "--json").stdout
    out = tmp_path / "rebuilt.gguf"
    r = run("build", "-", out, "--tensors-from", demo, stdin=doc)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == demo.read_bytes()
    r = run("build", "-", tmp_path / "x.gguf", stdin=doc)
    assert r.returncode == 2
    assert (
        r.stderr
        == b"gguf-schema: error: the JSON lists 5 tensors: give --tensors-from FILE for their data (in tensors)\n"
    )
    assert not (tmp_path / "x.gguf").exists()


def test_dump_json_then_build_reproduces_gemma(gemma: Path, tmp_path: Path) -> None:
    js = tmp_path / "g.json"
    js.write_bytes(run("dump", gemma, "--json").stdout)
    out = tmp_path / "g.gguf"
    assert run("build", js, out, "--tensors-from", gemma).returncode == 0
    assert _sha(out) == _sha(gemma)


def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def test_tensors_filter_by_glob(demo: Path) -> None:
    r = run("tensors", demo, "--filter", "blk.0.*")
    lines = r.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == ["blk.0.attn_norm.weight", "blk.0.ffn_up.weight"]
    assert lines[-1] == "2 of 5 tensors, 576 elements"
    assert lines[2].split()[:3] == ["blk.0.ffn_up.weight", "Q8_0", "[8,"]
    r = run("tensors", demo, "--filter", "nothing.*", "--filter", "none")
    assert (r.returncode, r.stdout) == (1, b"")
    assert r.stderr.decode() == "gguf-schema: no tensor name matches nothing.* or none\n"


def test_get_prints_values_as_stored(demo: Path) -> None:
    assert run("get", demo, "general.name").stdout == b"gguf-schema demo\n"
    assert run("get", demo, "demo.int64").stdout == b"-9223372036854775808\n"
    assert run("get", demo, "llama.attention.layer_norm_rms_epsilon").stdout == b"1e-05\n"
    assert run("get", demo, "tokenizer.ggml.token_type").stdout == b"[2, 3, 3, 1, 1, 1, 1, 6]\n"
    assert run("get", demo, "demo.uint16", "--type").stdout == b"UINT16\n"
    assert json.loads(run("get", demo, "tokenizer.ggml.scores", "--json").stdout) == {
        "key": "tokenizer.ggml.scores",
        "type": "ARRAY",
        "element_type": "FLOAT32",
        "value": [0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0],
    }
    r = run("get", demo, "no.such.key")
    assert r.returncode == 2
    assert r.stderr == f"gguf-schema: error: no metadata key 'no.such.key' (in {demo})\n".encode()


# ---------------------------------------------------------------- edits


def test_same_size_set_edits_in_place_and_keeps_tensor_bytes(gemma_copy: Path) -> None:
    before = tensor_hashes(gemma_copy)
    inode = gemma_copy.stat().st_ino
    size = gemma_copy.stat().st_size
    r = run("set", gemma_copy, "general.name", "Gemma 3 999m")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == f"set general.name: {gemma_copy} (in place, 3 header bytes changed)\n"
    assert gemma_copy.stat().st_ino == inode and gemma_copy.stat().st_size == size
    assert run("get", gemma_copy, "general.name").stdout == b"Gemma 3 999m\n"
    assert tensor_hashes(gemma_copy) == before


def test_growing_edits_rewrite_the_file_and_keep_tensor_bytes(gemma_copy: Path, tmp_path: Path) -> None:
    before = tensor_hashes(gemma_copy)
    template = tmp_path / "chat.jinja"
    template.write_bytes("{% for m in messages %}<start>{{ m['content'] }}\n{% endfor %}ü".encode())
    r = run("set-file", gemma_copy, "tokenizer.chat_template", template, "--add")
    assert r.returncode == 0
    assert (
        r.stderr.decode()
        == f"set tokenizer.chat_template from {template} (a new key): {gemma_copy} (rewritten, 253,113,152 bytes)\n"
    )
    with gguf_schema.open(gemma_copy) as f:
        assert f.fields["tokenizer.chat_template"].value.encode() == template.read_bytes()
        assert len(f.tensor_list) == 236
    assert run("get", gemma_copy, "tokenizer.chat_template", "--raw").stdout == template.read_bytes()
    assert tensor_hashes(gemma_copy) == before


def test_set_rename_delete_on_a_file_with_tensors(demo: Path) -> None:
    before = tensor_hashes(demo)
    assert run("set", demo, "llama.context_length", "8192").returncode == 0
    assert run("set", demo, "my.ratio", "0.25", "--type", "float64", "--add").returncode == 0
    assert run("rename", demo, "general.name", "general.basename").returncode == 0
    assert run("delete", demo, "tokenizer.ggml.scores").returncode == 0
    with gguf_schema.open(demo) as f:
        assert (f.fields["llama.context_length"].type, f.metadata["llama.context_length"]) == (
            gguf_schema.ValueType.UINT32,
            8192,
        )
        assert f.fields["my.ratio"].type == gguf_schema.ValueType.FLOAT64 and f.metadata["my.ratio"] == 0.25
        assert f.metadata["general.basename"] == "gguf-schema demo" and "general.name" not in f.metadata
        assert list(f.metadata)[1] == "general.basename"  # renamed in its place
        assert "tokenizer.ggml.scores" not in f.metadata
    assert tensor_hashes(demo) == before


def test_edits_with_output_leave_the_original_alone(demo: Path, tmp_path: Path) -> None:
    original = demo.read_bytes()
    out = tmp_path / "out.gguf"
    r = run("delete", demo, "demo.nested", "-o", out)
    assert r.returncode == 0, r.stderr
    assert demo.read_bytes() == original
    with gguf_schema.open(out) as f:
        assert "demo.nested" not in f.metadata and len(f.metadata) == 28
    assert tensor_hashes(out) == tensor_hashes(demo)


def test_set_keeps_the_stored_type_or_takes_the_given_one(demo: Path) -> None:
    assert run("set", demo, "demo.uint8", "7").returncode == 0
    assert run("set", demo, "new.list", '["x", "y"]', "--add").returncode == 0
    assert run("set", demo, "new.ids", "[1, 2, 300]", "--type", "array[uint16]", "--add").returncode == 0
    assert run("set", demo, "new.big", "0x1_0000_0000".replace("_", ""), "--add").returncode == 0
    assert run("set", demo, "demo.bool", "false").returncode == 0
    with gguf_schema.open(demo) as f:
        assert (f.fields["demo.uint8"].type.name, f.metadata["demo.uint8"]) == ("UINT8", 7)
        assert (f.fields["new.list"].element_type.name, f.metadata["new.list"]) == ("STRING", ["x", "y"])
        assert f.fields["new.ids"].element_type.name == "UINT16" and f.metadata["new.ids"].tolist() == [1, 2, 300]
        assert (f.fields["new.big"].type.name, f.metadata["new.big"]) == ("UINT64", 2**32)
        assert f.metadata["demo.bool"] is False


def test_bad_edits_exit_2_and_change_nothing(demo: Path) -> None:
    original = demo.read_bytes()
    cases = [
        (
            ["set", demo, "demo.uint8", "256"],
            "gguf-schema: error: 256 does not fit in UINT8 (range 0..255) (in key 'demo.uint8')\n",
        ),
        (
            ["set", demo, "demo.uint8", "abc"],
            "gguf-schema: error: UINT8 needs an integer, got 'abc' (in key 'demo.uint8')\n",
        ),
        (["set", demo, "k", "1", "--type", "uint7"], None),
        (["delete", demo, "absent.key"], "gguf-schema: error: no metadata key 'absent.key'\n"),
        (
            ["rename", demo, "general.name", "general.architecture"],
            "gguf-schema: error: metadata key 'general.architecture' exists already\n",
        ),
    ]
    for args, message in cases:
        r = run(*args)
        assert r.returncode == 2, args
        if message is not None:
            assert r.stderr.decode() == message
        else:
            assert r.stderr.startswith(b"gguf-schema: error: unknown value type 'uint7'")
    assert demo.read_bytes() == original


# ---------------------------------------------------------------- convert, split, merge, diff


def test_convert_le_be_le_is_byte_identical(demo: Path, tmp_path: Path) -> None:
    be, le = tmp_path / "be.gguf", tmp_path / "le.gguf"
    assert run("convert", demo, be, "--byte-order", "big").returncode == 0
    assert be.read_bytes()[4:8] == b"\x00\x00\x00\x03"
    assert run("convert", be, le, "--byte-order", "little").returncode == 0
    assert le.read_bytes() == demo.read_bytes()
    r = run("diff", demo, be)
    assert (r.returncode, r.stdout) == (1, b"header ~ byte_order: little -> big\n")


def test_convert_gemma_to_big_endian_and_back(gemma: Path, tmp_path: Path) -> None:
    be, le = tmp_path / "be.gguf", tmp_path / "le.gguf"
    assert run("convert", gemma, be, "--byte-order", "big").returncode == 0
    assert run("convert", be, le, "--byte-order", "little").returncode == 0
    assert _sha(le) == _sha(gemma)
    with gguf_schema.open(be) as f, gguf_schema.open(gemma) as g:
        assert f.byte_order == "big" and len(f.tensor_list) == 236
        t, u = f.tensors["token_embd.weight"], g.tensors["token_embd.weight"]
        assert t.type.name == "Q8_0"
        # Q8_0 block: a float16 scale (swapped) then 32 int8 quants (not swapped)
        assert t.data[0, :2].tobytes() == u.data[0, 1::-1].tobytes()
        assert t.data[0, 2:34].tobytes() == u.data[0, 2:34].tobytes()


def test_convert_version(demo: Path, tmp_path: Path) -> None:
    v2 = tmp_path / "v2.gguf"
    assert run("convert", demo, v2, "--version", "2").returncode == 0
    data = v2.read_bytes()
    assert data[4:8] == b"\x02\x00\x00\x00" and data[8:] == demo.read_bytes()[8:]


def test_split_then_merge_reproduces_gemma(gemma: Path, tmp_path: Path) -> None:
    r = run("split", gemma, tmp_path / "g", "--max-size", "100M")
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in tmp_path.glob("g-*.gguf"))
    assert names == ["g-00001-of-00003.gguf", "g-00002-of-00003.gguf", "g-00003-of-00003.gguf"]
    for i, name in enumerate(names):
        with gguf_schema.open(tmp_path / name) as s:
            split_fields = [(f.key, f.type.name, f.value) for f in s.fields.records[-4:]]
            assert split_fields == [
                ("split.no", "UINT16", i),
                ("split.count", "UINT16", 3),
                ("split.tensors.count", "INT32", 236),
                ("split.id", "STRING", split_fields[3][2]),
            ]
            assert len(split_fields[3][2]) == 16
            assert len(s.fields.records) == (37 if i == 0 else 4)
            if len(s.tensor_list) > 1:
                assert s.file_size <= 100_000_000
    # issue 28: split's own shards failed check (E050, E052; the first shard E057 on file_type) and scan
    # marked them all rejected: each shard is checked as a shard, the first with its model's tensors
    whole = json.loads(run("check", "--json", gemma).stdout)["reports"][0]
    r = run("check", "--json", tmp_path / names[0])
    reports = json.loads(r.stdout)["reports"]
    assert [Path(x["path"]).name for x in reports] == names
    assert [f["rule"] for f in reports[0]["findings"]] == [f["rule"] for f in whole["findings"]]
    assert [x["ok"] for x in reports] == [whole["ok"], True, True] and r.returncode == (0 if whole["ok"] else 1)
    r = run("scan", "--json", *(tmp_path / n for n in names))
    records = json.loads(r.stdout)
    assert [(x["split_no"], x["split_count"], x["name"]) for x in records] == [
        (0, 3, "Gemma 3 270m"),
        (1, 3, None),
        (2, 3, None),
    ]
    assert [x["verdicts"]["spec"] for x in records] == [whole["ok"], True, True]
    assert all(x["verdicts"]["ggml"] for x in records)
    r = run("scan", tmp_path / names[1])
    assert ", shard 2 of 3, - -, file type -, " in r.stdout.decode() and "None" not in r.stdout.decode()
    merged = tmp_path / "merged.gguf"
    assert run("merge", tmp_path / names[0], merged).returncode == 0
    assert _sha(merged) == _sha(gemma)
    r = run("diff", tmp_path / names[0], gemma)
    assert r.returncode == 1
    assert r.stdout.decode().splitlines() == [
        "header ~ metadata keys: 37 -> 33",
        "metadata - split.no: UINT16 0",
        "metadata - split.count: UINT16 3",
        "metadata - split.tensors.count: INT32 236",
        f"metadata - split.id: STRING {split_fields[3][2]!r}",
    ]


def test_split_by_tensor_count_and_merge(demo: Path, tmp_path: Path) -> None:
    r = run("split", demo, tmp_path / "d", "--max-tensors", "2")
    assert r.returncode == 0
    assert r.stdout.decode().splitlines() == [
        f"{tmp_path / 'd'}-00001-of-00003.gguf: 2 tensors, 3,712 bytes",
        f"{tmp_path / 'd'}-00002-of-00003.gguf: 2 tensors, 928 bytes",
        f"{tmp_path / 'd'}-00003-of-00003.gguf: 1 tensors, 512 bytes",
    ]
    out = tmp_path / "m.gguf"
    assert run("merge", tmp_path / "d-00001-of-00003.gguf", out).returncode == 0
    assert out.read_bytes() == demo.read_bytes()
    r = run("merge", tmp_path / "d-00002-of-00003.gguf", out)
    assert r.returncode == 2 and b"is shard 2 of 3, not the first shard (split.no = 1)" in r.stderr


def test_diff_reports_metadata_and_tensor_changes(demo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    md = gguf_schema.testing.demo.example_metadata()
    md["general.name"] = "changed"
    md["llama.block_count"] = np.uint64(1)
    del md["demo.int8"]
    md["added.key"] = "x"
    tensors = gguf_schema.testing.demo.example_tensors()
    tensors["output_norm.weight"] = np.zeros(64, np.float32)
    del tensors["demo.positions"]
    tensors["extra"] = np.ones(2, np.float32)
    gguf_schema.save(other, md, tensors)
    r = run("diff", demo, other)
    assert r.returncode == 1
    assert r.stdout.decode().splitlines() == [
        "metadata ~ general.name: STRING 'gguf-schema demo' -> STRING 'changed'",
        "metadata ~ llama.block_count: type UINT32 -> UINT64: UINT32 1 -> UINT64 1",
        "metadata - demo.int8: INT8 -128",
        "metadata + added.key: STRING 'x'",
        "tensor - demo.positions: I32 [4, 4]",
        "tensor ~ output_norm.weight: data differs (sha256 "
        + _tensor_sha(demo, "output_norm.weight")[:16]
        + "... -> "
        + hashlib.sha256(np.zeros(64, np.float32).tobytes()).hexdigest()[:16]
        + "...)",
        "tensor + extra: F32 [2]",
    ]
    r = run("diff", demo, demo)
    assert (r.returncode, r.stdout) == (0, b"no differences in header, metadata or tensors\n")
    r = run("diff", demo, other, "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["equal"] is False and len(doc["differences"]) == 7
    assert doc["differences"][0] == {
        "section": "metadata",
        "kind": "~",
        "name": "general.name",
        "old": {"type": "STRING", "value": "gguf-schema demo"},
        "new": {"type": "STRING", "value": "changed"},
        "detail": "STRING 'gguf-schema demo' -> STRING 'changed'",
    }
    assert doc["differences"][-1] == {
        "section": "tensor",
        "kind": "+",
        "name": "extra",
        "old": None,
        "new": {"type": "F32", "shape": [2]},
        "detail": "F32 [2]",
    }
    r = run("diff", demo, demo, "--json")
    assert (r.returncode, json.loads(r.stdout)) == (0, {"equal": True, "data_compared": True, "differences": []})


def _tensor_sha(path: Path, name: str) -> str:
    with gguf_schema.open(path) as f:
        return hashlib.sha256(f.tensors[name].raw()).hexdigest()


# ---------------------------------------------------------------- progress


def test_long_operations_are_quiet_when_piped(demo: Path, tmp_path: Path) -> None:
    # a real process whose stderr is a pipe: no progress bar, only the one status line
    r = run_process("convert", demo, tmp_path / "be.gguf", "--byte-order", "big")
    assert r.returncode == 0
    assert r.stderr == (  # the demo's nested array is worth a warning (ggml refuses it), then the status line
        b"gguf-schema: warning: [GGUF-E024] 'demo.nested': array of arrays: ggml rejects nested arrays\n"
        + f"wrote {tmp_path / 'be.gguf'} ({demo.stat().st_size:,} bytes)\n".encode()
    )
    r = run_process("diff", demo, tmp_path / "be.gguf")
    assert r.stderr == b""


def test_progress_draws_on_a_terminal_and_erases_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tqdm")
    monkeypatch.delenv("GGUF_SCHEMA_PROGRESS", raising=False)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal 100 columns wide
    try:
        with open(slave, "w", closefd=False) as tty:
            assert progress_enabled(tty)
            with Progress(2_000_000, "copy", stream=tty) as bar:
                bar.update(1_000_000)
                time.sleep(0.15)  # past the bar's redraw interval
                bar.update(1_000_000)
            tty.flush()
        chunks = []
        while select.select([master], [], [], 0.5)[0]:
            chunk = os.read(master, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        drawn = b"".join(chunks).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert "copy: 100%" in drawn and "2.00M/2.00M" in drawn and "B/s]" in drawn  # tqdm: done, total, rate
    assert drawn.endswith("\r" + " " * (len(drawn.rsplit("\r", 2)[-2])) + "\r") or drawn.endswith(" \r")


def test_progress_without_tqdm_draws_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_tqdm(name: str, *a: object, **kw: object) -> object:
        if name == "tqdm":
            raise ImportError("no tqdm here")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    stream = io.StringIO()
    with Progress(100, "copy", stream=stream, enabled=True) as bar:
        bar.update(100)
    assert (bar.enabled, bar.done, stream.getvalue()) == (False, 100, "")


def test_progress_environment_switch(tmp_path: Path, demo: Path) -> None:
    pytest.importorskip("tqdm")
    r = run("convert", demo, tmp_path / "be.gguf", "--byte-order", "big", env={"GGUF_SCHEMA_PROGRESS": "1"})
    assert r.returncode == 0
    assert b"\rconvert:" in r.stderr and b"/4.64k [" in r.stderr  # tqdm's bar with the total in bytes
    assert r.stderr.endswith(b"\r" + b"wrote " + str(tmp_path / "be.gguf").encode() + b" (4,640 bytes)\n")


def test_dump_into_a_closed_pipe_is_quiet() -> None:
    cmd = f"{sys.executable} -m gguf_schema dump --full-arrays {VOCAB_FILES[0]} | head -c 10"
    r = subprocess.run(cmd, shell=True, capture_output=True)
    assert r.stdout == b"GGUF v3, l"
    assert r.stderr == b""


def test_set_of_a_key_that_is_not_there_is_refused_with_near_matches(demo: Path) -> None:
    # issue 28: a typo in a key silently added a new key and rewrote the whole file
    original = demo.read_bytes()
    r = run("set", demo, "llama.context_lenght", "4096")
    assert r.returncode == 2 and demo.read_bytes() == original
    assert r.stderr.decode() == (
        "gguf-schema: error: no metadata key 'llama.context_lenght' (did you mean 'llama.context_length'?): nothing "
        f"was written (pass --add to add it as a new key) (in {demo})\n"
    )
    r = run("set-file", demo, "general.nmae", demo)
    assert r.returncode == 2 and b"(did you mean 'general.name'?): nothing was written" in r.stderr
    r = run("set", demo, "unrelated.key", "1")
    assert r.returncode == 2 and b"no metadata key 'unrelated.key': nothing was written (pass --add" in r.stderr
    assert demo.read_bytes() == original
    r = run("set", demo, "llama.context_lenght", "4096", "--add")
    assert r.returncode == 0 and "\nset llama.context_lenght (a new key): " in r.stderr.decode()
    r = run("set", demo, "llama.context_length", "4096", "--add")  # --add on a key that is there: a plain set
    assert r.returncode == 0 and "\nset llama.context_length: " in r.stderr.decode()
    with gguf_schema.open(demo) as f:
        assert f.metadata["llama.context_lenght"] == 4096 and f.metadata["llama.context_length"] == 4096


def _set_on_a_terminal(path: Path, answer: bytes) -> tuple[int, bytes]:
    """``gguf-schema set PATH llama.context_lenght 4096`` with stdin and stderr on a terminal, answering ``answer``."""
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen(
            [sys.executable, "-m", "gguf_schema", "set", str(path), "llama.context_lenght", "4096"],
            stdin=slave,
            stderr=slave,
            stdout=subprocess.PIPE,
        )
        seen = b""
        while b"[y/N]" not in seen and select.select([master], [], [], 20)[0]:
            seen += os.read(master, 4096)
        os.write(master, answer)
        code = p.wait(timeout=30)
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        os.close(slave)
    return code, seen


def test_set_of_a_new_key_asks_on_a_terminal(demo: Path) -> None:
    original = demo.read_bytes()
    code, seen = _set_on_a_terminal(demo, b"n\n")
    text = seen.decode().replace("\r\n", "\n")
    assert code == 2 and demo.read_bytes() == original
    assert (
        f"gguf-schema: {demo} has no key 'llama.context_lenght' (did you mean 'llama.context_length'?); "
        "add it as a new key? [y/N] " in text
    )
    assert "nothing was written (pass --add to add it as a new key)" in text
    code, seen = _set_on_a_terminal(demo, b"y\n")
    assert code == 0 and b"set llama.context_lenght (a new key): " in seen
    with gguf_schema.open(demo) as f:
        assert f.metadata["llama.context_lenght"] == 4096


def test_set_refuses_a_type_name_that_is_not_one(demo: Path) -> None:
    original = demo.read_bytes()
    r = run("set", demo, "llama.context_length", "4096", "--type", "FLOAT")
    assert r.returncode == 2 and demo.read_bytes() == original
    assert r.stderr.decode() == (
        "gguf-schema: error: unknown value type 'FLOAT' (did you mean float32 or float64?); the value types are "
        "uint8, int8, uint16, int16, uint32, int32, float32, bool, string, uint64, int64, float64, and arrays as "
        "array[TYPE]\n"
    )


def test_a_value_of_the_wrong_kind_names_the_key(demo: Path) -> None:
    r = run("set", demo, "llama.context_length", "eight")
    assert r.returncode == 2
    assert (
        r.stderr.decode()
        == "gguf-schema: error: UINT32 needs an integer, got 'eight' (in key 'llama.context_length')\n"
    )
    r = run("set", demo, "general.name", "[1,", "--type", "array[uint8]")
    assert r.returncode == 2 and r.stderr.decode().endswith("(in key 'general.name')\n")


@pytest.mark.parametrize("text, value", [("007", 7), ("010", 10), ("08", 8), ("0x10", 16), ("-0", 0)])
def test_set_reads_integers_as_people_type_them(demo: Path, text: str, value: int) -> None:
    with gguf_schema.open(demo) as f:
        key = next(k for k, fld in f.fields.items() if fld.type.name == "INT32")
    r = run("set", demo, key, text)
    assert r.returncode == 0, r.stderr
    with gguf_schema.open(demo) as f:
        assert f.metadata[key] == value and f.fields[key].type.name == "INT32"
