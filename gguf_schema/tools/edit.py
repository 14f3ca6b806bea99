"""Metadata edits on files: set, delete, rename keys -- one edit engine, safe against crashes and races.

Every edit of a file's metadata (``set``, ``set-file``, ``delete``, ``rename``, the API's
:func:`edit_file`) goes through :func:`edit_file`:

1. **One descriptor, locked.** The file is opened once and locked exclusively
   (:func:`gguf_schema.durable.locked_open`): a second editor waits (``lock_timeout``) or fails
   clearly, so no update is lost; after the lock is taken the path is checked to still name the
   locked file, and an interrupted earlier edit is recovered first. The file is parsed through
   that same descriptor and written through it (in place) or replaced (a rewrite): an edit never
   lands on a file that another process put there meanwhile.
2. **Streamed.** The file is read lazily (string arrays undecoded, numeric arrays as views) and
   written back by the one assembler, :mod:`gguf_schema.writer`, which copies every record the edit
   did not touch as the bytes it is stored as: nothing else is decoded or encoded again, so memory
   stays flat in the header's size.
3. **In place, crash-safe**, when the new header (everything before the data section) has exactly
   the old size, so every tensor keeps its offset (a shorter header fits when the padding absorbs
   the difference): only the changed span is written, after the bytes it overwrites were saved to
   a journal (:func:`gguf_schema.durable.write_in_place`). A kill or a power cut at any instant
   leaves the old file or the new one; a reader never sees a half-written header (readers take a
   shared lock while they parse it).
4. **Otherwise a rewrite**: the new header and the old data section (copied in the kernel) go to a
   temporary file that replaces the target atomically and durably, keeping its mode, owner and group
   (:func:`gguf_schema.durable.atomic_replace`). A read-only file is refused either way.

With ``output`` the source is only read and the edited file is written there.

>>> import os, tempfile, numpy as np, gguf_schema
>>> path = os.path.join(tempfile.mkdtemp(), "m.gguf")
>>> gguf_schema.save(path, {"general.name": "abc"}, {"w": np.ones(4, np.float32)})
>>> set_key(path, "general.name", "xyz").in_place   # same length: header rewritten in place
True
>>> set_key(path, "general.name", "a longer name").in_place
False
>>> with gguf_schema.open(path) as f:
...     f.metadata["general.name"], f.tensors["w"].data.tolist()
('a longer name', [1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ..durable import check_same_file, expect_same_file, locked_open, write_in_place
from ..format.limits import Limits
from ..format.source import MappedSource, PositionedSource
from ..format.types import ValueType
from ..model import GGUFFile
from ..reader import read
from ..writer import Progress, TensorInfo, check_header, header_bytes, save_file

__all__ = ["EditResult", "delete_key", "edit_file", "rename_key", "set_key", "set_key_from_file"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class EditResult:
    """What an edit did.

    Attributes:
        path: the file written.
        in_place: True when only header bytes of the original file were overwritten.
        bytes_written: bytes written to disk (the changed span in place, the whole file for a copy).
        missing_bytes: bytes of tensor data the file declares past its end (0 for a whole file): the
            edit does not repair a truncated file, and this says it is one.
    """

    path: str
    in_place: bool
    bytes_written: int
    missing_bytes: int = 0


def edit_file(
    path: PathLike,
    edit: Callable[[GGUFFile], object],
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
    sync: bool = True,
    lock_timeout: float | None = 60.0,
    limits: Limits | None = None,
    mmap: bool = True,
) -> EditResult:
    """Apply ``edit`` (a function changing an open :class:`GGUFFile`'s metadata) to a file.

    Without ``output`` the file itself changes: in place when the header size is unchanged, else
    by a streamed rewrite that atomically replaces it (see the module docstring). With ``output``
    the edited file is written there (atomically) and the original stays as it was.

    Args:
        path: the file to edit.
        edit: changes the metadata (e.g. ``lambda f: f.set("general.name", "x")``).
        output: write the result here instead.
        progress: called with the number of bytes written, as they are written (rewrites).
        sync: fsync before the change counts as done (default); False is faster and may lose
            the change (never the old file) in a power cut.
        lock_timeout: seconds to wait for another editor of the same file (None: wait for ever).
        limits: resource limits for reading the file, as in :func:`gguf_schema.open`.
        mmap: map the file (default), or read it with positioned reads (``False``), as in
            :func:`gguf_schema.open`; the lock and the in-place write are the same either way.

    >>> import os, tempfile, gguf_schema
    >>> p = os.path.join(tempfile.mkdtemp(), "v.gguf")
    >>> gguf_schema.save(p, {"a": 1, "b": 2})
    >>> edit_file(p, lambda f: f.delete("a")).in_place
    False
    >>> list(gguf_schema.open(p).metadata)
    ['b']
    """
    src = os.fspath(path)
    out = os.fspath(output) if output is not None else None
    if out is not None and os.path.exists(out) and os.path.samefile(src, out):
        out = None
    if out is not None:
        with read(src, lazy=True, limits=limits, mmap=mmap) as f:
            edit(f)
            save_file(f, out, progress=progress, sync=sync)
            missing = f.truncation()[0]
        return EditResult(out, False, os.path.getsize(out), missing)
    with (
        locked_open(src, write=True, timeout=lock_timeout) as (fd, st),
        _held_source(fd, src, mmap) as source,
        read(source, lazy=True, limits=limits) as f,
    ):
        old_alignment = f.alignment
        missing = f.truncation()[0]
        edit(f)
        if f.alignment == old_alignment:
            infos = [TensorInfo.of(t) for t in f.tensor_list]
            new_header = header_bytes(
                f.fields.records,
                infos,
                version=f.version,
                byte_order=f.byte_order,
                padding=f.padding,
                data_size=f.data_section.size,
                source=f,
            )
            if len(new_header) == f.data_offset:
                check_header(new_header)  # warnings, or refused under writer.strict_writes
                check_same_file(os.path.abspath(src), (st.st_dev, st.st_ino))
                done = _in_place(fd, src, f.view(0, len(new_header)), new_header, sync)
                return EditResult(done.path, True, done.bytes_written, missing)
        with expect_same_file(src, st):  # re-checked just before the rename
            save_file(f, src, progress=progress, sync=sync)  # the lock on the old file is held until then
    return EditResult(src, False, os.path.getsize(src), missing)


def _held_source(fd: int, name: str, mmap: bool) -> MappedSource | PositionedSource:
    """The locked descriptor as a source to parse (not closed by it, not locked again by the reader):
    mapped, or read with positioned reads (``mmap=False``)."""
    kind = MappedSource if mmap else PositionedSource
    source = kind(os.fdopen(fd, "rb", closefd=False), name, owned=True)
    source.lock_held = True
    return source


def _in_place(fd: int, path: str, old_header: Any, new_header: bytes, sync: bool) -> EditResult:
    """Write the span where the headers differ, through the journal (:func:`gguf_schema.durable.write_in_place`)."""
    span = _differing_span(old_header, new_header)
    if span is None:
        return EditResult(path, True, 0)
    first, last = span
    write_in_place(fd, path, first, new_header[first:last], sync=sync)
    return EditResult(path, True, last - first)


#: bytes compared at a time when looking for the changed span (bounds the comparison's memory)
_DIFF_CHUNK = 1 << 22


def _differing_span(a: Any, b: bytes) -> tuple[int, int] | None:
    """The first and one past the last offset where the equally long buffers ``a`` and ``b`` differ (None: equal).

    >>> _differing_span(b"abcdef", b"abXdeY"), _differing_span(b"abc", b"abc")
    ((2, 6), None)
    """
    x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
    starts = range(0, len(y), _DIFF_CHUNK)
    first = next(
        (i + int(d[0]) for i in starts if (d := np.flatnonzero(x[i : i + _DIFF_CHUNK] != y[i : i + _DIFF_CHUNK])).size),
        None,
    )
    if first is None:
        return None
    for i in reversed(range(first - first % _DIFF_CHUNK, len(y), _DIFF_CHUNK)):
        d = np.flatnonzero(x[i : i + _DIFF_CHUNK] != y[i : i + _DIFF_CHUNK])
        if d.size:
            return first, i + int(d[-1]) + 1
    raise AssertionError("unreachable: a difference was found")  # pragma: no cover


def set_key(
    path: PathLike,
    key: str,
    value: Any,
    type: ValueType | int | None = None,
    element_type: ValueType | int | None = None,
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> EditResult:
    """Set metadata ``key`` to ``value`` (an existing key keeps its stored type unless ``type`` is given);
    the keyword arguments as in :func:`edit_file`."""
    return edit_file(
        path,
        lambda f: f.set(key, value, type, element_type),
        output=output,
        progress=progress,
        limits=limits,
        mmap=mmap,
    )


def set_key_from_file(
    path: PathLike,
    key: str,
    source: PathLike,
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> EditResult:
    """Set ``key`` to the contents of the text file ``source`` as a STRING (e.g. a chat template).

    The bytes are stored exactly as they are in ``source`` (not decoded and re-encoded).
    """
    with open(source, "rb") as fh:
        text = fh.read().decode("utf-8", "surrogateescape")
    return edit_file(
        path,
        lambda f: f.set(key, text, ValueType.STRING),
        output=output,
        progress=progress,
        limits=limits,
        mmap=mmap,
    )


def delete_key(
    path: PathLike,
    key: str,
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> EditResult:
    """Remove every occurrence of metadata ``key``; raises :class:`~gguf_schema.reader.GGUFKeyError` if absent."""
    return edit_file(path, lambda f: f.delete(key), output=output, progress=progress, limits=limits, mmap=mmap)


def rename_key(
    path: PathLike,
    old: str,
    new: str,
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> EditResult:
    """Rename metadata key ``old`` to ``new``, keeping its position, type and value."""
    return edit_file(path, lambda f: f.rename(old, new), output=output, progress=progress, limits=limits, mmap=mmap)
