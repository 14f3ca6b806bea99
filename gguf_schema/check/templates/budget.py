"""The audit's own CPU budget, enforced even where no code reads the clock.

The analyses read the CPU clock as they go (every few evaluations), but a step between two readings can be long
(Jinja's parser on a pathological token, a large join of bounds). :func:`cpu_deadline` makes the budget a hard
one: in the main thread of a process with no other thread, a CPU interval timer (``ITIMER_PROF``, which counts
the process's user and system time) interrupts whatever runs when the budget is spent, with
:class:`OutOfBudget` (a ``BaseException``, so no ``except Exception`` on the way swallows it). Elsewhere (another
thread, other threads running, a platform without the timer) it does nothing and the clock readings (the
auditing thread's CPU time) remain the bound. Any timer and handler set before are restored after.

>>> with cpu_deadline(5.0):  # a block that ends within its budget: nothing happens
...     total = sum(range(1000))
>>> total
499500
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["OutOfBudget", "cpu_deadline"]


class OutOfBudget(BaseException):
    """The CPU budget of the analysis is spent."""


def _ring(signum: int, frame: FrameType | None) -> None:
    raise OutOfBudget


@contextmanager
def cpu_deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`OutOfBudget` in the block once it has used ``seconds`` of CPU (main thread, POSIX)."""
    if (
        seconds <= 0
        or not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
        or threading.active_count() > 1  # the timer counts the whole process: other threads would spend it
    ):
        yield
        return
    try:
        previous = signal.signal(signal.SIGPROF, _ring)
    except (ValueError, OSError):  # pragma: no cover - not the main interpreter
        yield
        return
    started = time.process_time()
    old_timer = signal.setitimer(signal.ITIMER_PROF, seconds)
    rung = False
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        while True:  # a ring still pending is handled here, by this handler, before the old one is back
            try:
                signal.signal(signal.SIGPROF, previous)
                break
            except OutOfBudget:
                rung = True
        if old_timer[0] > 0:  # someone else's timer: running again, less what this block used
            used = time.process_time() - started
            signal.setitimer(signal.ITIMER_PROF, max(old_timer[0] - used, 1e-3), old_timer[1])
    if rung:
        raise OutOfBudget
