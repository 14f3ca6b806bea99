"""Progress reporting for long operations (copying, converting, splitting, merging, hashing).

A :class:`Progress` draws one self-overwriting line on standard error, and only when standard
error is a terminal: piped or redirected output stays clean (nothing at all is written).
``GGUF_SCHEMA_PROGRESS=0`` turns it off on a terminal too, ``=1`` forces it on.
The library never draws: its long operations take a ``progress`` callback, and the command
line passes :meth:`Progress.update`.

>>> import io
>>> bar = Progress(1000, "copy", stream=io.StringIO())  # not a terminal: silent
>>> bar.enabled
False
>>> bar.update(500); bar.done, bar.close()
(500, None)
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

__all__ = ["Progress", "file_size", "progress_enabled"]


def progress_enabled(stream: TextIO | None = None) -> bool:
    """Whether a progress bar should be drawn on ``stream`` (default: ``sys.stderr``).

    True when the stream is a terminal, unless ``GGUF_SCHEMA_PROGRESS`` is ``0``; that
    variable set to ``1`` forces the bar on.

    >>> import io
    >>> progress_enabled(io.StringIO())
    False
    """
    env = os.environ.get("GGUF_SCHEMA_PROGRESS")
    if env == "0":
        return False
    if env == "1":
        return True
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


class Progress:
    """A byte-count progress bar on stderr, drawn only on a terminal.

    Args:
        total: the amount of work (bytes), or 0 when unknown.
        label: a word or two shown before the bar.
        stream: where to draw (default ``sys.stderr``).
        enabled: force on/off; by default :func:`progress_enabled` decides.

    Redraws at most ten times a second, and erases its line when closed.

    >>> import io
    >>> with Progress(10, "hash", stream=io.StringIO()) as bar:
    ...     bar.update(10)
    >>> bar.done
    10
    """

    def __init__(self, total: int, label: str, *, stream: TextIO | None = None, enabled: bool | None = None):
        self.total = max(0, int(total))
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.enabled = progress_enabled(self.stream) if enabled is None else enabled
        self.done = 0
        self._last = 0.0
        self._start = time.monotonic()
        self._drawn = False

    def update(self, n: int) -> None:
        """Add ``n`` units of work done and redraw if due."""
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last >= 0.1 or (self.total and self.done >= self.total):
            self._last = now
            self._draw()

    def _draw(self) -> None:
        width = 30
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            text = f"\r{self.label}: [{bar}] {frac * 100:5.1f}% {_human(self.done)} / {_human(self.total)}"
        else:
            text = f"\r{self.label}: {_human(self.done)}"
        self.stream.write(text)
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the bar's line (if one was drawn)."""
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def file_size(path: Any) -> int:
    """The size of the file at ``path`` for a progress total (0 when there is none)."""
    try:
        return os.path.getsize(path) if path is not None else 0
    except OSError:
        return 0
