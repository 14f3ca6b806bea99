"""Ctrl-C: a real SIGINT sent to the command at chosen moments. Whatever the moment, one line on stderr says
truthfully what became of the file, the exit status is 130, and there is never a traceback (issue 28).

The moments are aimed, not guessed: the command is held where it matters by something real (a lock another
process holds; a pipe nobody reads; ``strace`` delaying one system call), the test sees it there (in /proc),
then interrupts it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.shards import open_split

STRACE = shutil.which("strace")
needs_strace = pytest.mark.skipif(STRACE is None or not os.path.isdir("/proc/self"), reason="needs strace and /proc")
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "m.gguf"
    gguf_schema.save(
        p,
        {"general.architecture": "llama", "general.name": "abcd"},
        {f"t{i}": np.full(4096, i, np.float32) for i in range(3)},
    )
    return p


def _start(args: list[object], *, delay: str | None = None, **kw: object) -> tuple[subprocess.Popen[bytes], int]:
    """``gguf-schema ARGS`` in a process (under ``strace`` delaying ``delay``, a system call, when given);
    returns the process and the pid of the Python running the command."""
    command = [sys.executable, "-m", "gguf_schema", *map(str, args)]
    if delay is not None:
        assert STRACE is not None
        call, _, when = delay.partition("@")
        inject = f"inject={call}:delay_enter=500000" + (f":when={when}" if when else "")
        command = [STRACE, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={call}", "-e", inject, *command]
    env = {**os.environ, "GGUF_SCHEMA_PROGRESS": "0"}
    # Ctrl-C as a terminal delivers it: with SIGINT's default action. A test run started in the
    # background by a shell without job control inherits SIGINT ignored (as `cmd &` and nohup do),
    # and Python then rightly leaves it ignored in the command too.
    p = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=_default_sigint,
        **kw,  # type: ignore[call-overload]
    )
    return p, (_traced_child(p.pid) if delay is not None else p.pid)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _traced_child(tracer: int) -> int:
    """The Python process strace runs (its child is strace itself until it execs Python: match argv[0])."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for task in os.listdir(f"/proc/{tracer}/task"):
            with open(f"/proc/{tracer}/task/{task}/children") as fh:
                kids = fh.read().split()
            for kid in kids:
                try:
                    with open(f"/proc/{kid}/cmdline", "rb") as fh:
                        if fh.read().split(b"\0")[0] == os.fsencode(sys.executable):  # exec'd: Python now
                            return int(kid)
                except OSError:
                    continue
        time.sleep(0.002)
    raise AssertionError("strace started no child")


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw: {what}")
        time.sleep(0.002)


def _has_open(pid: int, path: Path) -> bool:
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return any(link == str(path) or link.startswith(f"{path.parent}/#") for link in links)


def _interrupt(p: subprocess.Popen[bytes], pid: int) -> tuple[int, str]:
    os.kill(pid, signal.SIGINT)
    _, err = p.communicate(timeout=30)
    return p.returncode, err.decode()


def _no_temporaries(folder: Path) -> bool:
    return not any(".gguf-tmp-" in n or n.endswith("-journal") for n in os.listdir(folder))


def test_interrupted_while_waiting_for_the_lock_leaves_the_file_unchanged(model: Path) -> None:
    before = model.read_bytes()
    with open(model, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another editor: `set` waits for it
        p, pid = _start(["set", model, "general.name", "wxyz"])
        _wait_for(lambda: _has_open(pid, model), "the editor opening the file")
        time.sleep(0.05)  # in its wait for the lock
        code, err = _interrupt(p, pid)
    assert (code, err) == (130, f"gguf-schema: interrupted; {model} unchanged\n")
    assert model.read_bytes() == before and _no_temporaries(model.parent)


def test_interrupted_reader_says_nothing_was_written(model: Path) -> None:
    with open(model, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # readers wait for an editor's lock
        p, pid = _start(["info", model], stdout=subprocess.DEVNULL)
        _wait_for(lambda: _has_open(pid, model), "the reader opening the file")
        time.sleep(0.05)
        code, err = _interrupt(p, pid)
    assert (code, err) == (130, "gguf-schema: interrupted; nothing was written\n")


@needs_strace
def test_interrupted_inside_an_in_place_edit_lets_it_commit_and_says_so(model: Path) -> None:
    # the journal is fsynced before the file is touched: that fsync (the first) is held 0.5 s, and Ctrl-C comes then
    journal = Path(str(model) + "-journal")
    p, pid = _start(["set", model, "general.name", "wxyz"], delay="fsync@1")
    _wait_for(journal.exists, "the journal")
    code, err = _interrupt(p, pid)
    assert (code, err) == (130, f"gguf-schema: interrupted; {model} changed: the edit had committed\n")
    with gguf_schema.open(model) as f:
        assert f.metadata["general.name"] == "wxyz"
    assert _no_temporaries(model.parent)


def test_interrupted_right_after_an_in_place_edit_committed(model: Path) -> None:
    # the edit commits, then its JSON result waits on a full pipe nobody reads: Ctrl-C comes there
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 65536)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    try:
        p, pid = _start(["set", "--json", model, "general.name", "wxyz"], stdout=w)

        def blocked_on_the_pipe() -> bool:
            with open(f"/proc/{pid}/wchan") as fh:
                return "pipe_write" in fh.read()  # (anon_)pipe_write, as kernels name it

        _wait_for(blocked_on_the_pipe, "the result waiting on the pipe")
        with gguf_schema.open(model) as f:
            assert f.metadata["general.name"] == "wxyz"  # committed before the result is printed
        os.kill(pid, signal.SIGINT)
        os.close(w)
        w = -1
        while os.read(r, 1 << 20):
            pass
        _, err = p.communicate(timeout=30)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert (p.returncode, err.decode()) == (130, f"gguf-schema: interrupted; {model} changed: the edit had committed\n")
    assert _no_temporaries(model.parent)


@needs_strace
@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_interrupted_while_a_rewrite_writes_its_data_leaves_nothing(model: Path, existing: bool) -> None:
    out = model.with_name("out.gguf")
    if existing:
        out.write_bytes(b"the old output")
    # convert (progress on) copies the data section with copy_file_range: held there, then Ctrl-C
    p, pid = _start(["convert", model, out, "--version", "2"], delay="copy_file_range", stdout=subprocess.DEVNULL)
    _wait_for(lambda: _has_open(pid, out), "the temporary file beside the output")
    code, err = _interrupt(p, pid)
    assert (code, err) == (130, f"gguf-schema: interrupted; {out} {'unchanged' if existing else 'not written'}\n")
    assert (out.read_bytes() == b"the old output") if existing else not out.exists()
    assert _no_temporaries(model.parent)


@needs_strace
def test_interrupted_between_the_renames_of_a_split_finishes_the_set(model: Path) -> None:
    prefix = model.with_name("s")
    shards = [Path(f"{prefix}-0000{i}-of-00003.gguf") for i in (1, 2, 3)]
    p, pid = _start(["split", model, prefix, "--max-tensors", "1"], delay="rename@2", stdout=subprocess.DEVNULL)
    _wait_for(lambda: shards[0].exists(), "the first shard renamed into place")
    assert not shards[2].exists()
    code, err = _interrupt(p, pid)
    names = ", ".join(map(str, shards))
    assert (code, err) == (130, f"gguf-schema: interrupted; {names} written: the write had committed\n")
    with open_split(shards[0]) as m:
        assert list(m.tensors) == ["t0", "t1", "t2"]
    assert _no_temporaries(model.parent)
