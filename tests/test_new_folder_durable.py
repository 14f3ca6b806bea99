"""A folder a write makes is itself made durable: the one-pass quantize into a new folder fsyncs the
folder that holds each folder it made, before the outputs are renamed into it.

A rename is durable once its folder is fsynced, but a folder made a moment ago is itself only a name
in its parent: until the parent is fsynced, a power cut can take the new folder, and every output
renamed into it, away. The system calls are watched with ``strace`` (a real process, nothing
replaced); the order of ``mkdir``, ``fsync`` of the parent and ``rename`` is what is checked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_schema.durable import make_folders
from gguf_schema.errors import GGUFError
from gguf_schema.testing.quant_models import save_quant_model
from gguf_schema.tools.onepass import requantize_many

STRACE = shutil.which("strace")
needs_strace = pytest.mark.skipif(STRACE is None or not os.path.isdir("/proc/self"), reason="needs strace and /proc")

_CALL = re.compile(r"^(?:\d+\s+)?(\w+)\((.*)\)\s+=\s+(-?\d+)")


def _events(argv: list[str], cwd: Path) -> list[tuple[str, str]]:
    """Run ``argv`` under strace: its successful mkdir, fsync (of the path the descriptor was opened
    on) and rename calls, in order, as (call, absolute path)."""
    log = cwd / "strace.log"
    trace = "trace=mkdir,mkdirat,open,openat,fsync,rename,renameat,renameat2"
    subprocess.run([STRACE, "-f", "-qq", "-o", str(log), "-e", trace, *argv], cwd=cwd, check=True)  # type: ignore[list-item]
    fds: dict[str, str] = {}
    events = []
    for line in log.read_text().splitlines():
        m = _CALL.match(line)
        if m is None or int(m.group(3)) < 0:
            continue
        call, args, ret = m.groups()
        paths = [os.path.normpath(os.path.join(cwd, p)) for p in re.findall(r'"([^"]*)"', args)]
        if call in ("open", "openat") and paths:
            fds[ret] = paths[0]
        elif call == "fsync":
            events.append(("fsync", fds.get(args.strip(), "?")))
        elif call in ("mkdir", "mkdirat") and paths:
            events.append(("mkdir", paths[0]))
        elif call.startswith("rename") and len(paths) == 2:
            events.append(("rename", paths[1]))
    return events


def _synced_after(events: list[tuple[str, str]], folder: str) -> int:
    """The index of the first fsync of ``folder``'s parent after ``folder`` was made (-1: none)."""
    made = events.index(("mkdir", folder))
    parent = os.path.dirname(folder)
    return next((i for i in range(made + 1, len(events)) if events[i] == ("fsync", parent)), -1)


@needs_strace
def test_make_folders_syncs_the_parent_of_each_folder_made(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    code = f"from gguf_schema.durable import make_folders; make_folders({str(target)!r})"
    events = _events([sys.executable, "-c", code], tmp_path)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert _synced_after(events, str(folder)) > 0, (folder, events)
    assert target.is_dir()


@needs_strace
def test_one_pass_into_a_new_folder_syncs_it_before_the_renames(tmp_path: Path) -> None:
    src = tmp_path / "m.gguf"
    save_quant_model(src, "llama-gqa")
    out = tmp_path / "new" / "out"
    argv = [sys.executable, "-m", "gguf_schema", "quantize", str(src), str(out), "-t", "Q8_0", "-t", "Q4_0"]
    events = _events([*argv, "--threads", "1"], tmp_path)
    renames = [i for i, (call, path) in enumerate(events) if call == "rename" and path.startswith(str(out) + os.sep)]
    assert len(renames) == 2, events
    for folder in (tmp_path / "new", out):
        synced = _synced_after(events, str(folder))
        assert 0 < synced < renames[0], (folder, events)
    assert sorted(os.listdir(out)) == ["m-Q4_0.gguf", "m-Q8_0.gguf"]


def test_make_folders_returns_what_it_made_and_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    assert make_folders(tmp_path / "x" / "y", sync=False) == [str(tmp_path / "x"), str(tmp_path / "x" / "y")]
    assert make_folders(tmp_path / "x" / "y") == []
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(FileExistsError):
        make_folders(tmp_path / "f")
    with pytest.raises(FileExistsError):  # the file is where a folder must be made
        make_folders(tmp_path / "f" / "z")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    with pytest.raises(FileExistsError):
        make_folders(tmp_path / "dangling")


def test_one_pass_under_a_file_is_refused_with_its_path(tmp_path: Path) -> None:
    src = tmp_path / "m.gguf"
    save_quant_model(src, "llama-gqa")
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(GGUFError) as e:
        requantize_many(src, tmp_path / "f" / "out", ["Q8_0", "Q4_0"], threads=1)
    assert str(tmp_path / "f" / "out") in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["f", "m.gguf"]
