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
   did not touch as the bytes it is stored as: nothing else is decoded or encoded again. The new
   header's size is counted first (:func:`gguf_schema.writer.header_size`, nothing kept); a header
   that keeps its size is built once into a spool (:func:`gguf_schema.writer.spool_header`: an
   unnamed temporary file past 8 MiB), checked from there, and compared with the file a megabyte
   at a time: memory stays the changed records plus a constant, whatever the header's size.
3. **In place, crash-safe**, when the new header (everything before the data section) has exactly
   the old size, so every tensor keeps its offset (a shorter header fits when the padding absorbs
   the difference): only the changed span is written, after the bytes it overwrites were saved to
   a journal (:func:`gguf_schema.durable.write_in_place`). A kill or a power cut at any instant
   leaves the old file or the new one once the journal is replayed; gguf-schema's readers never see
   a half-written header (they take a shared lock while they parse it), other programs may.
   **Or a clone renamed over it** (``in_place=False``, ``--no-in-place``; the default where the
   filesystem clones files, :func:`gguf_schema.durable.can_clone`): the file is cloned (or, where
   it cannot be, copied), the changed span written into the copy, which replaces the file
   atomically: every program sees the old file or the new one.
4. **Otherwise a rewrite**: the new header and the old data section (copied in the kernel) go to a
   temporary file that replaces the target atomically and durably, keeping its mode, owner and group
   (:func:`gguf_schema.durable.atomic_replace`). A read-only file is refused either way.

A symbolic link is followed: the file it points to is edited (its journal and temporaries beside
it), and the link stays a link. With ``output`` the source is only read and the edited file is written there
(an interrupted earlier edit of the source is recovered first all the same: until then it cannot be read).

>>> import os, tempfile, numpy as np, gguf_schema
>>> path = os.path.join(tempfile.mkdtemp(), "m.gguf")
>>> gguf_schema.save(path, {"general.name": "abc"}, {"w": np.ones(4, np.float32)})
>>> set_key(path, "general.name", "xyz").bytes_written   # same length: only the changed bytes are written
3
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
from typing import IO, Any

import numpy as np

from ..durable import (
    atomic_replace,
    can_clone,
    check_same_file,
    copy_file,
    locked_open,
    real_path,
    recover,
    write_in_place,
)
from ..errors import GGUFChangedError
from ..format.limits import Limits
from ..format.types import ValueType
from ..io import PathLike
from ..io.source import MappedSource, PositionedSource
from ..model import GGUFFile
from ..reader import read
from ..writer import HeaderSpool, Progress, TensorRecord, save_file, spool_header

__all__ = ["EditResult", "delete_key", "edit_file", "rename_key", "set_key", "set_key_from_file"]


@dataclass(frozen=True)
class EditResult:
    """What an edit did.

    Attributes:
        path: the file written (as it was named: a symbolic link stays one, its target was written).
        in_place: True when only header bytes of the original file were overwritten (through the journal).
        bytes_written: bytes written to disk (the changed span in place or into a clone, the
            whole file for a copy).
        cloned: True when a new file was made as a clone of the old one (cheap on filesystems with
            reflinks), the changed span written into it, and renamed over the old one.
        missing_bytes: bytes of tensor data the file declares past its end (0 for a whole file): the
            edit does not repair a truncated file, and this says it is one.
    """

    path: str
    in_place: bool
    bytes_written: int
    cloned: bool = False
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
    in_place: bool | None = None,
    strict: str | None = None,
) -> EditResult:
    """Apply ``edit`` (a function changing an open :class:`GGUFFile`'s metadata) to a file.

    Without ``output`` the file itself changes: in place when the header size is unchanged, else
    by a streamed rewrite that atomically replaces it (see the module docstring). With ``output``
    the edited file is written there (atomically) and the original stays as it was. A symbolic
    link is followed: the file it points to is edited, and the link stays.

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
        in_place: ``False``: never change the file's bytes where they are: a new file is written
            and renamed over it, so a program reading the file meanwhile (one that takes no lock,
            such as llama.cpp) sees the old file or the new one, never a torn header. The new file
            is a clone of the old one where the filesystem clones cheaply (reflinks: btrfs, XFS),
            else a full copy. ``True``: an edit that keeps the header's size is made in place,
            through the journal. ``None`` (default): in place unless the filesystem clones cheaply
            (:func:`gguf_schema.durable.can_clone`), where the clone costs as little.
        strict: a validation profile ("spec", "ggml", "lenient"): refuse the edit (a
            :class:`~gguf_schema.errors.GGUFValidationError`; the file is not touched) when the edited
            header breaks an error rule of it. Without it, each broken rule is a
            :class:`~gguf_schema.errors.GGUFWarning` and the edit is made.

    >>> import os, tempfile, gguf_schema
    >>> p = os.path.join(tempfile.mkdtemp(), "v.gguf")
    >>> gguf_schema.save(p, {"a": 1, "b": 2})
    >>> edit_file(p, lambda f: f.delete("a")).in_place
    False
    >>> list(gguf_schema.open(p).metadata)
    ['b']
    >>> r = edit_file(p, lambda f: f.set("b", 3), in_place=False)   # same size, but a new file renamed over it
    >>> r.in_place, gguf_schema.open(p).metadata["b"]
    (False, 3)
    """
    if in_place is not None and not isinstance(in_place, bool):
        raise TypeError(f"in_place must be True, False or None, got {in_place!r}")
    src = os.fspath(path)
    out = os.fspath(output) if output is not None else None
    if out is not None and os.path.exists(out) and os.path.samefile(src, out):
        out = None
    if out is not None:
        # the source is only read, but an interrupted edit of it is undone first, as by every edit
        # (its readers refuse a file with a journal beside it until then)
        recover(src, timeout=lock_timeout)
        with read(src, lazy=True, limits=limits, mmap=mmap) as f:
            edit(f)
            save_file(f, out, progress=progress, sync=sync, strict=strict)
            missing = f.truncation()[0]
        return EditResult(out, False, os.path.getsize(out), missing_bytes=missing)
    real = real_path(src)
    with (
        locked_open(real, write=True, timeout=lock_timeout) as (fd, st),
        _held_source(fd, real, mmap) as source,
        read(source, lazy=True, limits=limits) as f,
    ):
        old_alignment = f.alignment
        missing = f.truncation()[0]
        edit(f)
        if f.alignment == old_alignment:
            layout: dict[str, Any] = dict(
                version=f.version,
                byte_order=f.byte_order,
                padding=f.padding,
                data_size=f.data_section.size,
                source=f,
            )
            infos = [TensorRecord.of(t) for t in f.tensor_list]
            with spool_header(f.fields.records, infos, **layout) as new:
                if new.size == f.data_offset:  # every tensor keeps its offset: only header bytes change
                    source.release_pages()  # the old header is only read by positioned reads from here on
                    new.check(strict)  # warnings, or refused when strict
                    check_same_file(real, (st.st_dev, st.st_ino))
                    span = _changed_span(fd, new)
                    if span is None:
                        return EditResult(src, True, 0, missing_bytes=missing)
                    first, last = span
                    if in_place if in_place is not None else not can_clone(real):
                        write_in_place(fd, real, first, new.read_at, length=last - first, sync=sync)
                        return EditResult(src, True, last - first, missing_bytes=missing)
                    cloned = _replace_patched(fd, real, new, first, last, sync, progress, (st.st_dev, st.st_ino))
                    return EditResult(
                        src, False, last - first if cloned else st.st_size, cloned=cloned, missing_bytes=missing
                    )
        # the lock on the old file is held until the rename, and the path re-checked just before it
        save_file(f, real, progress=progress, sync=sync, strict=strict, expected=(st.st_dev, st.st_ino))
    return EditResult(src, False, os.path.getsize(real), missing_bytes=missing)


def _held_source(fd: int, name: str, mmap: bool) -> MappedSource | PositionedSource:
    """The locked descriptor as a source to parse (not closed by it, not locked again by the reader):
    mapped, or read with positioned reads (``mmap=False``)."""
    kind = MappedSource if mmap else PositionedSource
    source = kind(os.fdopen(fd, "rb", closefd=False), name, owned=True)
    source.lock_held = True
    return source


#: bytes of the old and the new header compared at a time
_COMPARE_CHUNK = 1 << 20


def _changed_span(fd: int, new: HeaderSpool) -> tuple[int, int] | None:
    """The first and one past the last offset where the file ``fd`` and the new header differ
    (None: equal), compared a chunk at a time with positioned reads: neither header is held whole
    (and the file's map is not touched again).

    >>> import tempfile
    >>> from gguf_schema.writer import HeaderSpool
    >>> with tempfile.TemporaryFile() as fh, HeaderSpool() as h:
    ...     _ = fh.write(b"abcdef"); fh.flush(); _ = h.write(b"abXdeY")
    ...     _changed_span(fh.fileno(), h)
    (2, 6)
    """
    first = last = None
    for pos in range(0, new.size, _COMPARE_CHUNK):
        b = new.read_at(pos, _COMPARE_CHUNK)
        a = os.pread(fd, len(b), pos)
        if a == b:
            continue
        x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
        if len(x) != len(y):  # the file is shorter than its header now: it changed under the lock
            raise GGUFChangedError("the file ended early while it was being edited", value=pos + len(x))
        d = np.flatnonzero(x != y)
        if first is None:
            first = pos + int(d[0])
        last = pos + int(d[-1]) + 1
    return None if first is None or last is None else (first, last)


def _replace_patched(
    fd: int,
    path: str,
    new: HeaderSpool,
    first: int,
    last: int,
    sync: bool,
    progress: Progress | None,
    expected: tuple[int, int],
) -> bool:
    """Replace the file ``fd`` (at ``path``, which must still name the file ``expected``: device,
    inode) by a copy of it with ``[first, last)`` taken from the new
    header, through a temporary file renamed over it (readers see the old file or the new one).
    The copy is a clone where the filesystem makes one (True: only the span is written), else a
    full copy (False)."""
    cloned = False

    def write(out: IO[bytes]) -> None:
        nonlocal cloned
        out.flush()
        cloned = copy_file(fd, out.fileno(), progress)
        out.seek(first)
        for pos in range(first, last, _COMPARE_CHUNK):
            out.write(new.read_at(pos, min(_COMPARE_CHUNK, last - pos)))

    atomic_replace(path, write, sync=sync, expected=expected)
    return cloned


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
    in_place: bool | None = None,
    strict: str | None = None,
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
        in_place=in_place,
        strict=strict,
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
    in_place: bool | None = None,
    strict: str | None = None,
) -> EditResult:
    """Set ``key`` to the contents of the text file ``source`` as a STRING (e.g. a chat template).

    The bytes are stored exactly as they are in ``source`` (not decoded and re-encoded). The keyword
    arguments as in :func:`edit_file`.
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
        in_place=in_place,
        strict=strict,
    )


def delete_key(
    path: PathLike,
    key: str,
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
    in_place: bool | None = None,
    strict: str | None = None,
) -> EditResult:
    """Remove every occurrence of metadata ``key``; raises :class:`~gguf_schema.reader.GGUFKeyError` if absent.
    The keyword arguments as in :func:`edit_file`."""
    return edit_file(
        path,
        lambda f: f.delete(key),
        output=output,
        progress=progress,
        limits=limits,
        mmap=mmap,
        in_place=in_place,
        strict=strict,
    )


def rename_key(
    path: PathLike,
    old: str,
    new: str,
    *,
    output: PathLike | None = None,
    progress: Progress | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
    in_place: bool | None = None,
    strict: str | None = None,
) -> EditResult:
    """Rename metadata key ``old`` to ``new``, keeping its position, type and value; the keyword arguments as
    in :func:`edit_file`."""
    return edit_file(
        path,
        lambda f: f.rename(old, new),
        output=output,
        progress=progress,
        limits=limits,
        mmap=mmap,
        in_place=in_place,
        strict=strict,
    )
