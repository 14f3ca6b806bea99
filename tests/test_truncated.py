"""A truncated file (tensor data declared past its end) is noticed by every command that reads tensor data or
vouches for a file, the way ``check`` notices it (issue 28: ``audit`` said "clean", ``estimate`` and ``set`` said
nothing, ``convert`` wrote a truncated copy)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.check import audit
from gguf_schema.errors import GGUFTruncatedError
from gguf_schema.tools import convert, edit, export, split

from .helpers import run_cli


@pytest.fixture
def cut(tmp_path: Path) -> Path:
    whole = tmp_path / "whole.gguf"
    gguf_schema.save(
        whole,
        {
            "general.architecture": "llama",
            "general.name": "tiny",
            "llama.block_count": np.uint32(1),
            "llama.context_length": np.uint32(64),
            "llama.embedding_length": np.uint32(64),
            "llama.attention.head_count": np.uint32(4),
        },
        {"blk.0.ffn_up.weight": np.ones((64, 64), np.float32), "output.weight": np.ones((64, 64), np.float32)},
    )
    p = tmp_path / "cut.gguf"
    p.write_bytes(whole.read_bytes()[:-10_000])
    return p


WARNING = "is truncated: 10,000 bytes of tensor data are missing"
REFUSED = "the file is truncated: 10,000 bytes of tensor data are missing (1 of 2 tensors affected: output.weight)"


def test_the_library_refuses_to_write_from_a_truncated_file_and_says_so(cut: Path, tmp_path: Path) -> None:
    with gguf_schema.open(cut) as f:
        assert f.truncation() == (10_000, ["output.weight"])
    for doing, words in (
        (lambda: convert.convert(cut, tmp_path / "o.gguf"), "the converted file would not be whole"),
        (lambda: split.split(cut, str(tmp_path / "s"), max_tensors=1), "its shards would not be whole"),
        (lambda: export.export_safetensors(cut, tmp_path / "o.safetensors"), "the export would not be whole"),
    ):
        with pytest.raises(GGUFTruncatedError) as e:
            doing()
        assert str(e.value).startswith(f"{REFUSED}; {words}, so nothing was written")
    assert sorted(os.listdir(tmp_path)) == ["cut.gguf", "whole.gguf"]
    result = edit.set_key(cut, "general.name", "tin2")  # an edit is made, and says the file is truncated
    assert (result.in_place, result.missing_bytes) == (True, 10_000)
    findings = audit(cut).findings
    assert [(f.rule, f.severity, f.key, f.length) for f in findings] == [
        ("GGUF-A305", "error", "output.weight", 10_000)
    ]


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["audit", "@"], 1, None),
        (["estimate", "@"], 3, WARNING),
        (["set", "@", "general.name", "tin2"], 3, WARNING + " (the edit was made"),
        (["delete", "@", "general.name"], 3, WARNING + " (the edit was made"),
        (["diff", "--no-data", "@", "@"], 3, WARNING),
        (["diff", "@", "@"], 3, "tensor data not compared: a file is truncated"),
        (["recover", "@"], 3, WARNING),
        (["convert", "@", "@out.gguf", "--byte-order", "big"], 2, REFUSED),
        (["split", "@", "@s", "--max-tensors", "1"], 2, REFUSED),
        (["export", "@", "@o.safetensors"], 2, REFUSED),
        (["check", "@"], 1, None),
    ],
)
def test_every_command_that_reads_or_vouches_notices_truncation(
    cut: Path, args: list[str], code: int, words: str | None
) -> None:
    argv = [str(cut) if a == "@" else str(cut.parent / a[1:]) if a.startswith("@") else a for a in args]
    r = run_cli(*argv)
    assert r.returncode == code, r.stderr
    if words is not None:
        assert words in r.stderr.decode()
    if args[0] == "audit":
        assert b"GGUF-A305 error [output.weight]: the file ends at byte" in r.stdout and b"clean" not in r.stdout
    if args[0] == "check":
        assert b"GGUF-E002" in r.stdout
    assert not (cut.parent / "out.gguf").exists() and not (cut.parent / "o.safetensors").exists()


def test_json_results_of_a_truncated_file_still_parse(cut: Path) -> None:
    r = run_cli("set", "--json", cut, "general.name", "tin2")
    assert r.returncode == 3 and json.loads(r.stdout)["in_place"] is True


def test_merge_and_build_refuse_truncated_inputs(cut: Path, tmp_path: Path) -> None:
    shards = split.split(tmp_path / "whole.gguf", str(tmp_path / "s"), max_tensors=1)
    data = Path(shards[1]).read_bytes()
    Path(shards[1]).write_bytes(data[:-100])
    r = run_cli("merge", shards[0], tmp_path / "m.gguf")
    assert r.returncode == 2 and not (tmp_path / "m.gguf").exists()
    assert "the file is truncated: 100 bytes of tensor data are missing" in r.stderr.decode()
    assert "the merged file would not be whole, so nothing was written" in r.stderr.decode()
    (tmp_path / "w.json").write_bytes(run_cli("dump", "--json", tmp_path / "whole.gguf").stdout)
    r = run_cli("build", tmp_path / "w.json", tmp_path / "b.gguf", "--tensors-from", cut)
    assert r.returncode == 2 and not (tmp_path / "b.gguf").exists()
    assert f"{REFUSED}; the built file would not be whole" in r.stderr.decode()
