"""Run one function in a forked child under a wall-time cap and an address-space cap; collect what it reports.

This module owns the child-process boundary of the benchmarks that feed hostile files to readers
(``ggml_diff.py``): a reader that aborts, hangs or allocates without bound must not take the
harness, or the machine, with it. :func:`run_capped` forks (the child inherits the already imported
modules, so a child costs a millisecond or two), sets ``RLIMIT_AS`` in the child, lets the function
report JSON records through a pipe, kills the child at the deadline and returns the records with the
child's exit status and peak RSS (``ru_maxrss`` from ``wait4``).

Peak RSS is also available from inside the child: :func:`hwm_kb` reads ``VmHWM`` and
:func:`reset_hwm` lowers it to the current RSS (``/proc/self/clear_refs``), so a child measures
the peak of one action rather than what it inherited at fork.

Unix only (``fork``). Example::

    >>> r = run_capped(lambda emit: emit({"answer": 6 * 7}), timeout=10)
    >>> r.records, r.status, r.timed_out
    ([{'answer': 42}], 'exit 0', False)
    >>> run_capped(lambda emit: os.abort(), timeout=10).status
    'signal SIGABRT'
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChildResult", "hwm_kb", "reset_hwm", "rss_kb", "run_capped"]

Emit = Callable[[dict[str, Any]], None]


@dataclass
class ChildResult:
    """What a capped child did.

    Attributes:
        records: the JSON objects the function emitted, in order.
        status: ``"exit N"``, ``"signal NAME"`` or ``"killed at deadline"``.
        timed_out: True when the child was killed at the deadline.
        seconds: wall time from fork to exit.
        maxrss_kb: the child's ``ru_maxrss`` (kB), inherited pages included.
        stderr_path: where the child's file descriptor 2 went (None: /dev/null).
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    status: str = ""
    timed_out: bool = False
    seconds: float = 0.0
    maxrss_kb: int = 0
    stderr_path: str | None = None

    @property
    def crashed(self) -> bool:
        """Killed by a signal other than our own deadline kill (an abort, a segfault)."""
        return self.status.startswith("signal") and not self.timed_out

    def stderr_head(self, limit: int = 2048) -> str:
        """The first ``limit`` bytes the child wrote to stderr (empty when it went to /dev/null)."""
        if not self.stderr_path:
            return ""
        try:
            with open(self.stderr_path, "rb") as fh:
                return fh.read(limit).decode("utf-8", "replace")
        except OSError:
            return ""


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"signal {signal.Signals(sig).name}"
        except ValueError:
            return f"signal {sig}"
    return f"exit {os.WEXITSTATUS(status)}"


def run_capped(
    fn: Callable[[Emit], None],
    *,
    timeout: float,
    mem_cap: int | None = None,
    stderr_path: str | None = None,
    env: dict[str, str] | None = None,
) -> ChildResult:
    """Fork, run ``fn(emit)`` in the child, and return its records.

    Args:
        fn: called in the child with ``emit(record)``, which sends one JSON-ready dict to the parent.
            An exception escaping ``fn`` is emitted as ``{"child_error": traceback}``.
        timeout: seconds before the child is killed (SIGKILL).
        mem_cap: ``RLIMIT_AS`` for the child, bytes (None: unlimited).
        stderr_path: file that receives the child's fd 2 (truncated first); None sends it to /dev/null.
        env: environment variables set in the child before ``fn`` runs.
    """
    r, w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never return into the caller's code
        code = 0
        try:
            os.close(r)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if stderr_path else devnull
            os.dup2(err, 2)
            for k, v in (env or {}).items():
                os.environ[k] = v
            if mem_cap:
                resource.setrlimit(resource.RLIMIT_AS, (mem_cap, mem_cap))

            def emit(record: dict[str, Any]) -> None:
                data = (json.dumps(record) + "\n").encode()
                view = memoryview(data)
                while view:
                    n = os.write(w, view)
                    view = view[n:]

            try:
                fn(emit)
            except BaseException:
                emit({"child_error": traceback.format_exc()[-4000:]})
                code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(r)
        _, status, usage = os.wait4(pid, 0)
    result = ChildResult(
        status="killed at deadline" if timed_out else _status_text(status),
        timed_out=timed_out,
        seconds=time.perf_counter() - start,
        maxrss_kb=usage.ru_maxrss,
        stderr_path=stderr_path,
    )
    for line in b"".join(chunks).splitlines():
        try:
            result.records.append(json.loads(line))
        except ValueError:  # a line cut by the kill
            pass
    return result


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def hwm_kb() -> int:
    """This process's peak RSS (``VmHWM``), kB."""
    return _status_kb("VmHWM")


def rss_kb() -> int:
    """This process's current RSS (``VmRSS``), kB."""
    return _status_kb("VmRSS")


def reset_hwm() -> None:
    """Lower ``VmHWM`` to the current RSS, so the next :func:`hwm_kb` is the peak of what follows."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:  # not Linux, or not permitted: the peak then includes what came before
        pass
