"""Progress reporting for long operations (copying, converting, splitting, merging, hashing).

A :class:`Progress` shows a ``tqdm`` bar (bytes done, rate, time left) on standard error, and
only when standard error is a terminal and ``tqdm`` is installed (the optional ``cli`` extra:
``pip install 'gguf-schema[cli]'``): piped or redirected output stays clean, and without
``tqdm`` there is simply no bar. ``GGUF_SCHEMA_PROGRESS=0`` turns it off on a terminal too,
``=1`` forces it on (still only with ``tqdm``). The library never draws: its long operations
take a ``progress`` callback, and the command line passes :meth:`Progress.update`.

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
from typing import Any, TextIO

from .conventions import is_quiet

__all__ = ["Progress", "file_size", "progress_enabled", "tqdm_class"]


def tqdm_class() -> Any:
    """``tqdm.tqdm`` if it is installed, else None (then no bar is drawn)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def progress_enabled(stream: TextIO | None = None) -> bool:
    """Whether a progress bar should be drawn on ``stream`` (default: ``sys.stderr``).

    True when the stream is a terminal, unless ``GGUF_SCHEMA_PROGRESS`` is ``0``; that
    variable set to ``1`` forces the bar on. Never under ``-q/--quiet``.

    >>> import io
    >>> progress_enabled(io.StringIO())
    False
    """
    if is_quiet():
        return False
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


class Progress:
    """A byte-count progress bar on stderr (``tqdm``), drawn only on a terminal.

    Args:
        total: the amount of work (bytes), or 0 when unknown.
        label: a word or two shown before the bar.
        stream: where to draw (default ``sys.stderr``).
        enabled: force on/off; by default :func:`progress_enabled` decides. Without ``tqdm``
            nothing is drawn either way.

    The bar is erased when closed (``leave=False``).

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
        self.done = 0
        tqdm = tqdm_class()
        wanted = progress_enabled(self.stream) if enabled is None else enabled
        self.enabled = bool(wanted and tqdm is not None)
        self._bar: Any = None
        if self.enabled:
            self._bar = tqdm(
                total=self.total or None,
                desc=label,
                unit="B",
                unit_scale=True,
                unit_divisor=1000,
                file=self.stream,
                leave=False,
                dynamic_ncols=True,
                mininterval=0.1,
            )

    def set_total(self, total: int) -> None:
        """The amount of work, once it is known (a bar made before it showed none)."""
        self.total = max(0, int(total))
        if self._bar is not None and self._bar.total != (self.total or None):
            self._bar.total = self.total or None
            self._bar.refresh()

    def describe(self, text: str, *, refresh: bool = False) -> None:
        """Words shown after the bar (how far each part of the job is), redrawn with the next update
        (or now, with ``refresh``)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=refresh)

    def update(self, n: int) -> None:
        """Add ``n`` units of work done."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        """Erase the bar (if one was drawn)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

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
