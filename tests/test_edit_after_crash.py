"""An edit after an interrupted edit: every editing command, CLI and API alike, first puts back the
bytes the interrupted edit's journal saved (as ``recover`` does), then edits.

Each case starts from the state a kill leaves: an in-place edit of ``general.name`` ("abcdef" to
"XYZXYZ") that had written its complete journal and half of its new bytes ("XYZdef" on disk). The
edit under test changes another key; afterwards the file reads, the journal is gone, the name is the
old one again (the torn bytes were undone, not kept) and the edit is there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFError
from gguf_schema.durable import Journal, journal_path
from gguf_schema.tools import edit as api

from .helpers import run_cli


def torn(tmp_path: Path) -> Path:
    """A file torn by a killed in-place edit, with the complete journal beside it."""
    p = tmp_path / "m.gguf"
    gguf_schema.save(
        p,
        {"general.architecture": "llama", "general.name": "abcdef", "x.edit": "value1"},
        {"w": np.ones(4, np.float32)},
    )
    old = p.read_bytes()
    at = old.index(b"abcdef")
    journal = Journal.of_edit(at, old[at : at + 6], b"XYZXYZ", os.stat(p))
    Path(journal_path(p)).write_bytes(journal.encode())
    with open(p, "r+b") as fh:
        fh.seek(at)
        fh.write(b"XYZ")  # killed after half of the new bytes
    with pytest.raises(GGUFError, match="an interrupted edit left"):
        gguf_schema.open(p)  # readers refuse it until it is recovered
    return p


def _cli(*argv: str) -> Callable[[Path, Path], object]:
    def run(p: Path, tmp: Path) -> object:
        (tmp / "value.txt").write_text("value2")
        args = [
            a.replace("FILE", str(p)).replace("OUT", str(tmp / "out.gguf")).replace("TXT", str(tmp / "value.txt"))
            for a in argv
        ]
        r = run_cli(*args)
        assert r.returncode == 0, r
        return r

    return run


#: (how the edit is made, the file that holds the result, what it holds afterwards)
CASES: dict[str, tuple[Callable[[Path, Path], object], str, dict[str, str]]] = {
    "cli set": (_cli("set", "FILE", "x.edit", "value2"), "m.gguf", {"x.edit": "value2"}),
    "cli set a new key": (_cli("set", "FILE", "x.new", "v", "--add"), "m.gguf", {"x.edit": "value1", "x.new": "v"}),
    "cli set -o": (_cli("set", "FILE", "x.edit", "value2", "-o", "OUT"), "out.gguf", {"x.edit": "value2"}),
    "cli set --no-in-place": (_cli("set", "FILE", "x.edit", "value2", "--no-in-place"), "m.gguf", {"x.edit": "value2"}),
    "cli set-file": (_cli("set-file", "FILE", "x.edit", "TXT"), "m.gguf", {"x.edit": "value2"}),
    "cli delete": (_cli("delete", "FILE", "x.edit"), "m.gguf", {}),
    "cli rename": (_cli("rename", "FILE", "x.edit", "x.renamed"), "m.gguf", {"x.renamed": "value1"}),
    "api set_key": (lambda p, t: api.set_key(p, "x.edit", "value2"), "m.gguf", {"x.edit": "value2"}),
    "api set_key output": (
        lambda p, t: api.set_key(p, "x.edit", "value2", output=t / "out.gguf"),
        "out.gguf",
        {"x.edit": "value2"},
    ),
    "api set_key_from_file": (
        lambda p, t: (t / "v.txt").write_text("value2") and api.set_key_from_file(p, "x.edit", t / "v.txt"),
        "m.gguf",
        {"x.edit": "value2"},
    ),
    "api delete_key": (lambda p, t: api.delete_key(p, "x.edit"), "m.gguf", {}),
    "api rename_key": (lambda p, t: api.rename_key(p, "x.edit", "x.renamed"), "m.gguf", {"x.renamed": "value1"}),
    "api edit_file output": (
        lambda p, t: api.edit_file(p, lambda f: f.set("x.edit", "value2"), output=t / "out.gguf"),
        "out.gguf",
        {"x.edit": "value2"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_edit_recovers_an_interrupted_edit_first(case: str, tmp_path: Path) -> None:
    edit, result, expected = CASES[case]
    p = torn(tmp_path)
    edit(p, tmp_path)
    assert not os.path.lexists(journal_path(p))
    with gguf_schema.open(p) as f:
        assert f.metadata["general.name"] == "abcdef"  # the interrupted edit undone
    with gguf_schema.open(tmp_path / result) as f:
        md = dict(f.metadata)
    assert md["general.name"] == "abcdef"
    assert {k: v for k, v in md.items() if k.startswith("x.")} == expected


def test_the_cli_says_what_it_recovered(tmp_path: Path) -> None:
    p = torn(tmp_path)
    r = run_cli("set", p, "x.edit", "value2")
    lines = r.stderr.decode().splitlines()
    assert lines[0].startswith(f"gguf-schema: note: {p}: restored 6 bytes at offset ")
    assert lines[0].endswith("the interrupted edit was undone")
    assert lines[1].startswith(f"set x.edit: {p} (")
    (tmp_path / "again").mkdir()
    p2 = torn(tmp_path / "again")
    assert run_cli("-q", "set", p2, "x.edit", "value2").stderr == b""  # --quiet: no note, no status line
