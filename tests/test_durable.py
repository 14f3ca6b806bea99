"""Crash and race safety of writes (gguf_schema.durable): the journal of in-place edits and its recovery,
permissions, locks, a path replaced under an edit, truncated files under readers, sets of files written
together, and outputs that would overwrite an input. Writers are killed for real (SIGKILL in a child process)."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import durable
from gguf_schema.cli import main
from gguf_schema.errors import (
    GGUFBuildError,
    GGUFChangedError,
    GGUFError,
    GGUFFileNotFoundError,
    GGUFPermissionError,
    GGUFTruncatedError,
)
from gguf_schema.tools.edit import edit_file, set_key
from gguf_schema.tools.split import split

NAME_OLD, NAME_NEW = "a" * 24, "b" * 24
LONG = "a name longer than the padding can absorb, so the header grows and the file is rewritten " * 2


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "m.gguf"
    gguf_schema.save(
        p,
        {"general.name": NAME_OLD, "general.alignment": np.uint32(32), "x.count": np.uint32(7)},
        {"w": np.arange(64, dtype=np.float32), "v": np.full((4, 8), 3, np.float16)},
    )
    return p


def run_cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gguf_schema", *map(str, args)], capture_output=True, timeout=60, check=False
    )


def cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """The command line run in this process: exit code, stdout, stderr."""
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def run_child(code: str) -> int:
    """Run ``code`` in a fresh Python process; its return code (-9: it was killed by SIGKILL)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], timeout=60, check=False).returncode


#: a child that edits general.name in place and is killed (SIGKILL) half-way through writing the new bytes
KILLED_IN_PLACE_EDIT = """
    import os, signal
    from gguf_schema.tools.edit import set_key
    real = os.pwrite
    def torn(fd, data, offset):
        real(fd, bytes(data)[: len(data) // 2], offset)
        os.kill(os.getpid(), signal.SIGKILL)
    os.pwrite = torn
    set_key({path!r}, "general.name", {value!r}, in_place=True)
"""


def killed_in_place(path: Path) -> bytes:
    """Kill an in-place edit of ``path`` half-way; return the file's bytes from before."""
    before = path.read_bytes()
    assert run_child(KILLED_IN_PLACE_EDIT.format(path=str(path), value=NAME_NEW)) == -signal.SIGKILL
    torn = path.read_bytes()
    assert torn != before and len(torn) == len(before)  # half of the new bytes are there
    assert Path(durable.journal_path(path)).is_file()
    return before


def test_a_killed_in_place_edit_is_refused_by_readers_and_undone_by_recover(model: Path) -> None:
    before = killed_in_place(model)
    with pytest.raises(GGUFError, match="run: gguf-schema recover FILE") as info:
        gguf_schema.open(model)
    assert info.value.path == str(model)
    r = run_cli("recover", model)
    assert r.returncode == 0, r.stderr
    assert b"restored 24 bytes at offset" in r.stdout and b"the interrupted edit was undone" in r.stdout
    assert b"it reads: 3 keys, 2 tensors" in r.stdout
    assert model.read_bytes() == before
    assert sorted(os.listdir(model.parent)) == ["m.gguf"]
    r = run_cli("recover", model)  # nothing left to do
    assert r.returncode == 0 and b"no interrupted edit to recover" in r.stdout
    assert r.stdout.startswith(str(model).encode())


def test_a_killed_in_place_edit_is_undone_by_the_next_edit(model: Path) -> None:
    before = killed_in_place(model)
    result = set_key(model, "x.count", np.uint32(8), in_place=True)  # recovers first, then edits in place
    assert result.in_place
    with gguf_schema.open(model) as f:
        assert f.metadata["general.name"] == NAME_OLD and f.metadata["x.count"] == 8
        assert f.tensors["w"].data.tolist() == list(range(64))
    assert len(model.read_bytes()) == len(before)
    assert sorted(os.listdir(model.parent)) == ["m.gguf"]


def test_an_incomplete_journal_is_discarded_and_the_file_left_alone(model: Path, capsys) -> None:
    before = model.read_bytes()
    complete = durable.Journal(40, b"x" * 100, len(before)).encode()
    Path(durable.journal_path(model)).write_bytes(complete[:-7])  # the writer died while writing it
    assert durable.Journal.decode(complete[:-7]) is None
    rc, out, _ = cli(capsys, "recover", model)
    assert rc == 0 and "removed an incomplete journal" in out
    assert model.read_bytes() == before and not Path(durable.journal_path(model)).exists()


def test_recover_of_a_missing_file_fails_clearly(tmp_path: Path, model: Path, capsys) -> None:
    rc, out, err = cli(capsys, "recover", tmp_path / "absent.gguf", model)
    assert rc == 2
    assert "there is no such file" in err and "absent.gguf" in err
    assert "no interrupted edit to recover" in out  # the other file was still seen to


# --------------------------------------------------------------------------- permissions


def test_a_rewrite_keeps_mode_owner_and_group(model: Path) -> None:
    os.chmod(model, 0o640)
    if os.geteuid() == 0:
        os.chown(model, 12345, 23456)
    st = model.stat()
    assert not set_key(model, "general.name", LONG).in_place
    now = model.stat()
    assert now.st_ino != st.st_ino  # really replaced
    assert (now.st_mode & 0o7777, now.st_uid, now.st_gid) == (0o640, st.st_uid, st.st_gid)


@pytest.mark.parametrize("value", [NAME_NEW, LONG], ids=["in-place", "rewrite"])
def test_a_read_only_file_is_refused_in_place_and_by_rewrite(model: Path, value: str) -> None:
    os.chmod(model, 0o444)
    before = model.read_bytes()
    with pytest.raises(GGUFPermissionError, match="read-only"):
        set_key(model, "general.name", value)
    assert model.read_bytes() == before and sorted(os.listdir(model.parent)) == ["m.gguf"]


# --------------------------------------------------------------------------- locks and replaced paths


def test_an_editor_waiting_for_the_lock_edits_the_file_the_path_names_then(model: Path, tmp_path: Path) -> None:
    replacement = tmp_path / "other.gguf"
    gguf_schema.save(replacement, {"general.name": "c" * 24, "x.count": np.uint32(1)})
    with open(model, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another editor holds the file
        done: list[object] = []
        t = threading.Thread(target=lambda: done.append(set_key(model, "general.name", NAME_NEW)))
        t.start()
        time.sleep(0.2)
        assert not done  # waiting for the lock
        os.replace(replacement, model)  # meanwhile the path is given another file
        fcntl.flock(held, fcntl.LOCK_UN)
        t.join(10)
        with gguf_schema.open(held.name) as f:  # the path: the replacement, edited
            assert f.metadata["general.name"] == NAME_NEW and f.metadata["x.count"] == 1
        held.seek(0)
        with gguf_schema.open(held) as f:  # the file that was locked: untouched
            assert f.metadata["general.name"] == NAME_OLD


def test_an_editor_gives_up_after_its_lock_timeout(model: Path) -> None:
    before = model.read_bytes()
    with open(model, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        t0 = time.monotonic()
        with pytest.raises(GGUFChangedError, match="gave up waiting after 0.3 s"):
            edit_file(model, lambda f: f.set("general.name", NAME_NEW), lock_timeout=0.3)
        assert 0.3 <= time.monotonic() - t0 < 5
    assert model.read_bytes() == before


@pytest.mark.parametrize("value", [NAME_NEW, LONG], ids=["in-place", "rewrite"])
def test_a_path_replaced_during_an_edit_is_not_overwritten(model: Path, tmp_path: Path, value: str) -> None:
    replacement = tmp_path / "other.gguf"
    gguf_schema.save(replacement, {"general.name": "c" * 24})
    theirs = replacement.read_bytes()

    def edit(f: gguf_schema.GGUFFile) -> None:
        f.set("general.name", value)
        os.replace(replacement, model)  # a program that ignores locks replaces the file after the parse

    with pytest.raises(GGUFChangedError, match="another process replaced or removed the file"):
        edit_file(model, edit)
    assert model.read_bytes() == theirs
    assert sorted(os.listdir(tmp_path)) == ["m.gguf"]


# --------------------------------------------------------------------------- truncation under readers


@pytest.mark.parametrize("mmap", [False, True])
def test_a_reader_of_a_truncated_file_gets_a_truncated_error(model: Path, mmap: bool) -> None:
    with gguf_schema.open(model, mmap=mmap) as f:
        w = f.tensors["w"]
        assert w.data.tolist() == list(range(64))  # before
        cut = f.data_offset + 16
        with open(model, "r+b") as other:
            other.truncate(cut)  # another program shrinks the file
        with pytest.raises(GGUFTruncatedError, match="truncated meanwhile") as info:
            f.tensors["v"].data
        assert info.value.path == "tensor 'v'" and f"{cut:,} bytes" in str(info.value)


# --------------------------------------------------------------------------- sets of files, temporaries


def test_a_set_whose_writer_fails_touches_no_target(tmp_path: Path) -> None:
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"old a")

    def fail(out: object) -> None:
        raise RuntimeError("no more data")

    with pytest.raises(RuntimeError, match="no more data"):
        durable.atomic_replace_set([(a, lambda out: out.write(b"new a")), (b, fail)])
    assert a.read_bytes() == b"old a" and sorted(os.listdir(tmp_path)) == ["a.bin"]
    durable.atomic_replace_set([(a, lambda out: out.write(b"new a")), (b, lambda out: out.write(b"new b"))])
    assert (a.read_bytes(), b.read_bytes()) == (b"new a", b"new b")


def test_temporaries_of_dead_writers_are_removed_by_the_next_write(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    target = tmp_path / "m.gguf"
    stale = tmp_path / f".m.gguf.gguf-tmp-{dead.pid}-abcd1234"
    live = tmp_path / f".m.gguf.gguf-tmp-{os.getpid()}-abcd1234"  # a writer still running: kept
    stale.write_bytes(b"partial")
    live.write_bytes(b"partial")
    gguf_schema.save(target, {"a": 1})
    assert sorted(os.listdir(tmp_path)) == [live.name, "m.gguf"]


# --------------------------------------------------------------------------- never write over an input


def test_no_command_writes_over_an_input(model: Path, tmp_path: Path, capsys) -> None:
    os.symlink(model, tmp_path / "link.gguf")
    os.link(model, tmp_path / "hard.gguf")
    js = tmp_path / "m.json"
    js.write_text(cli(capsys, "dump", "--json", model)[1])
    shards = split(model, str(tmp_path / "s"), max_tensors=1)
    shard_like = tmp_path / "q-00001-of-00001.gguf"
    shard_like.write_bytes(model.read_bytes())
    listing = sorted(os.listdir(tmp_path))
    before = {p: (tmp_path / p).read_bytes() for p in listing if not p.startswith("link")}
    attempts = [
        ("convert", model, model),
        ("convert", model, tmp_path / "link.gguf"),
        ("convert", model, "-o", tmp_path / "hard.gguf"),
        ("merge", shards[0], shards[0]),
        ("merge", shards[0], "-o", shards[1]),
        ("split", shard_like, tmp_path / "q", "--max-tensors", "9"),  # the one shard's name is the input's
        ("build", js, js),
        ("build", js, "-o", model, "--tensors-from", model),
    ]
    for args in attempts:
        rc, _, err = cli(capsys, *args)
        assert rc == 2, args
        assert "would write over its input" in err and "the output must not be the input" in err, args
    assert sorted(os.listdir(tmp_path)) == listing
    assert {p: (tmp_path / p).read_bytes() for p in before} == before
    with pytest.raises(GGUFBuildError, match="the output must not be the input"):
        durable.refuse_overwriting_inputs([tmp_path / "link.gguf"], [tmp_path / "hard.gguf"], command="quantize")


def test_outputs_are_named_alike_positionally_or_with_o(model: Path, tmp_path: Path, capsys) -> None:
    assert cli(capsys, "convert", model, "-o", tmp_path / "be.gguf", "--byte-order", "big")[0] == 0
    assert cli(capsys, "convert", tmp_path / "be.gguf", tmp_path / "le.gguf", "--byte-order", "little")[0] == 0
    assert (tmp_path / "le.gguf").read_bytes() == model.read_bytes()
    for args, message in (
        (("merge", model, tmp_path / "a.gguf", "-o", tmp_path / "b.gguf"), "the output is given twice"),
        (("split", model, "--max-tensors", "1"), "the output file is required"),
    ):
        with pytest.raises(SystemExit) as info:  # usage errors: argparse exits with 2
            main([str(a) for a in args])
        assert info.value.code == 2 and message in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["be.gguf", "le.gguf", "m.gguf"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_an_error_names_the_users_path_not_our_temporary(tmp_path: Path) -> None:
    # issue 28: where no temporary file can be made (here /proc, which takes no new files: O_TMPFILE is refused
    # and the named temporary fails), the error named `.y.gguf.gguf-tmp-PID-XXXX`, a file the user never asked for
    src = tmp_path / "x.gguf"
    gguf_schema.save(src, {"general.name": "x"}, {"w": np.ones(4, np.float32)})
    with pytest.raises(GGUFFileNotFoundError) as e:
        gguf_schema.open(src).save("/proc/y.gguf")
    assert str(e.value) == "No such file or directory: cannot create a file in /proc (in /proc/y.gguf)"
    assert e.value.errno == errno.ENOENT and e.value.filename == "/proc/y.gguf"
    r = run_cli("convert", src, "/proc/y.gguf", "--byte-order", "big")  # the real command, in a process
    assert r.returncode == 2
    assert (
        r.stderr == b"gguf-schema: error: No such file or directory: cannot create a file in /proc (in /proc/y.gguf)\n"
    )
    assert b"gguf-tmp" not in r.stderr
