"""The audit's own CPU budget, enforced even where no code reads the clock.

The analyses read the CPU clock as they go (every few evaluations), but a step between two readings can be long
(Jinja's parser on a pathological token, a large join of bounds). :func:`cpu_deadline` makes the budget a hard
one: in the main thread, a CPU interval timer (``ITIMER_PROF``, which counts the process's user and system time)
interrupts whatever runs when the budget is spent, with :class:`OutOfBudget` (a ``BaseException``, so no
``except Exception`` on the way swallows it). Elsewhere (another thread, a platform without the timer) it is a
no-op and the clock readings remain the bound. Any timer and handler set before are restored after.

>>> try:
...     with cpu_deadline(0.05):
...         while True:
...             pass
... except OutOfBudget:
...     print("stopped")
stopped
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


@contextmanager
def cpu_deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`OutOfBudget` in the block once it has used ``seconds`` of CPU (main thread, POSIX).

    The timer counts the whole process's CPU time; when it rings before this thread has used ``seconds``
    (other threads were busy), it is set again for what is left, so the budget is this thread's own.
    """
    if seconds <= 0 or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    started = time.thread_time()
    started_process = time.process_time()
    done = False

    def ring(signum: int, frame: FrameType | None) -> None:
        if done:
            return
        left = seconds - (time.thread_time() - started)
        if left > 1e-3:
            signal.setitimer(signal.ITIMER_PROF, left)
            return
        raise OutOfBudget

    try:
        previous = signal.signal(signal.SIGPROF, ring)
    except (ValueError, OSError):  # pragma: no cover - not the main interpreter
        yield
        return
    old_timer = signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        done = True
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        if old_timer[0] > 0:  # someone else's timer: running again, less what this block used
            used = time.process_time() - started_process
            signal.setitimer(signal.ITIMER_PROF, max(old_timer[0] - used, 1e-3), old_timer[1])
