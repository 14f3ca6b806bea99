"""How bytes reach the disk safely: atomic replacement, the rollback journal of in-place edits, locks.

A user's file is never left unreadable, half-written or silently changed, whatever is killed or
fails at the time (``docs/writes.md`` states the guarantees and the figures measured). This module
owns the mechanisms every write goes through:

* :func:`atomic_replace` -- a new version of a file is written to a temporary file in the same
  folder and renamed over the target only when complete and fsynced; then the folder is fsynced,
  so the rename survives a power cut. On Linux the temporary file is unnamed (``O_TMPFILE``) until
  it is complete: a writer killed while writing leaves nothing. It is then named
  (``.NAME.gguf-tmp-PID-XXXX``) and renamed over the target; a writer killed between the two
  leaves that name, as do writers elsewhere (where temporaries are named from the start): the next
  write of the same target removes those of dead writers.
  A replaced file keeps its permission bits, owner and group; when it cannot (another user's
  file), or the file is read-only, the replacement is refused before anything is written.
  :func:`atomic_replace_set` does the same for a set of files (the shards of a split): all are
  written and fsynced before the first is renamed.
* :class:`Journal` -- an in-place change of bytes (an edit whose header keeps its size) first
  saves the bytes it will overwrite to ``NAME.gguf-journal`` (with the file's size, inode and
  device, a digest of each 512-byte sector of the new bytes, and a checksum), fsyncs it and the
  folder, then writes and fsyncs the file, then deletes the journal and fsyncs the folder: the
  deletion is the commit point. Nothing is held whole: the journal is streamed from the file and
  the new bytes from the caller, a megabyte at a time. :func:`recover` (run before every edit, and
  by ``gguf-schema recover``) puts the saved bytes back if a complete journal fits the file, told
  by what a restart keeps (its size, and the span's bytes sector by sector or its inode; never the
  device number, which a restart may renumber); deletes an incomplete one (the file was not
  touched yet); and keeps aside, renamed ``NAME.gguf-journal.orphan-TIME``, one that does not
  fit (never deleted). A reader that finds a journal whose edit had begun refuses the file.
* :func:`real_path` -- every write first resolves the path it was given to the real file
  (symbolic links): the file a link points to is written, never the link, and journals, locks and
  temporaries sit beside the real file.
* :func:`can_clone`, :func:`clone_file`, :func:`copy_file` -- copy-on-write clones (reflinks:
  btrfs, XFS, bcachefs) where the filesystem makes them, so that an edit can go into a clone
  renamed over the file (atomic for every reader) at the cost of an edit in place.
* :class:`FileLock` -- advisory ``flock`` locks on the file itself: an editor holds an exclusive
  lock for the whole edit (a second editor waits, up to a timeout, or fails clearly), readers a
  shared one while they parse the header (:func:`shared_header_lock`: they never see a
  half-written one). After taking the lock, the path is checked to still name the locked file
  (device and inode): a lock on a file that another process has replaced meanwhile protects
  nothing, so the open is retried; and an edit re-checks just before it writes
  (:func:`check_same_file`, or ``expected=`` to :func:`atomic_replace`: the file the path must still
  name at the rename).
* :func:`refuse_overwriting_inputs` -- every command that writes a new file refuses an output that
  is one of its inputs (by resolved path, device and inode), before writing anything.

``sync=False`` (everywhere) skips the fsyncs: faster, and a power cut may then lose the change
(never the old file, for replacements; in-place edits keep their journal either way).

Interrupts: the moments that decide a file's fate (the renames of :func:`atomic_replace_set`,
the journal, write and commit of :func:`write_in_place`, a recovery) hold back Ctrl-C (SIGINT, in
the main thread) until they are done, so an interrupt never lands between a commit and the record
of it; :func:`recording` lists what each write did to its target (:class:`WriteRecord`), which is
how the command line tells the truth about a file after Ctrl-C.

:func:`recording` is the one ambient value the library keeps (a ``ContextVar``); everything that
changes what a write does is an argument of the call (``strict=``, ``sync=``, ``expected=`` ...).
It stays ambient because it is an observer, not an input: it never changes which bytes are written,
where, or whether a write is refused; it only notes, in the same uninterruptible step as each
commit, that the commit happened, for the process's interrupt report. As an argument it would
have to be threaded through every function that writes (``save``, ``GGUFFile.save``, the five
edits, convert, split, merge, build, quantize, export, the compat ``GGUFWriter``, and below them
:func:`atomic_replace`, :func:`atomic_replace_set`, :class:`PendingFiles`, :func:`write_in_place`,
:func:`recover`), a parameter that means nothing to any caller but the command line; and a write
path that forgot to pass it on would make the Ctrl-C line silently untrue, where the recorder here
sees every commit because every commit happens in this module. Outside :func:`recording` it
records nothing and costs one lookup per write.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import os
import secrets
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from .errors import (
    GGUFBuildError,
    GGUFChangedError,
    GGUFError,
    GGUFFileNotFoundError,
    GGUFInternalError,
    GGUFIOError,
    GGUFPermissionError,
    os_error,
)
from .io import PathLike

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: locks are a documented no-op there
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "JOURNAL_SUFFIX",
    "FileLock",
    "Journal",
    "PendingFiles",
    "WriteRecord",
    "atomic_replace",
    "atomic_replace_set",
    "can_clone",
    "check_no_journal",
    "check_same_file",
    "clone_file",
    "copy_file",
    "fsync_dir",
    "journal_path",
    "locked_open",
    "make_folders",
    "read_only_reason",
    "real_path",
    "recording",
    "recover",
    "refuse_overwriting_inputs",
    "remove_stale_temporaries",
    "shared_header_lock",
    "write_in_place",
]

JOURNAL_SUFFIX = "-journal"
_TMP_MARK = ".gguf-tmp-"
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def fsync_dir(folder: str) -> None:
    """fsync a folder, so that a rename or an unlink in it survives a power cut (POSIX; a no-op elsewhere)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC)
    except OSError:  # pragma: no cover - Windows cannot open folders
        return
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems do not fsync folders: nothing more can be done there
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def make_folders(folder: PathLike, *, sync: bool = True) -> list[str]:
    """Make ``folder`` and its missing parents (as :func:`os.makedirs` does); with ``sync``, fsync the
    folder that holds each one made, so that it survives a power cut: a file renamed into a new
    folder is durable once that folder is fsynced (as every commit here does) *and* the new folder's
    own name in its parent is; nothing else syncs the latter. Returns the folders made, outermost first.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> [os.path.relpath(p, d) for p in make_folders(os.path.join(d, "a", "b"))], make_folders(os.path.join(d, "a"))
    (['a', 'a/b'], [])
    """
    path = os.path.abspath(os.fspath(folder))
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:  # pragma: no cover - the root always is a folder
            break
        path = parent
    made = []
    for p in reversed(missing):
        try:
            os.mkdir(p)
        except FileExistsError:
            if not os.path.isdir(p):  # a file, or a link to nothing, under that name
                raise
            continue  # made by another process in the meantime
        made.append(p)
    if sync:
        for parent in dict.fromkeys(os.path.dirname(p) for p in made):
            fsync_dir(parent)
    return made


def real_path(path: PathLike) -> str:
    """The file ``path`` names, symbolic links resolved (absolute). Every write changes that file and
    puts its journal, its temporaries and its checks beside it: writing through a link changes the
    file it points to, and the link stays a link.

    >>> import os, tempfile
    >>> d = os.path.realpath(tempfile.mkdtemp())
    >>> os.symlink("real.gguf", os.path.join(d, "link.gguf"))
    >>> real_path(os.path.join(d, "link.gguf")) == os.path.join(d, "real.gguf")
    True
    """
    return os.path.realpath(os.fspath(path))


# --------------------------------------------------------------------------- what writes did, and interrupts


@dataclass
class WriteRecord:
    """What a write did to one target (see :func:`recording`).

    Attributes:
        path: the target's real path (absolute, symbolic links resolved).
        existed: whether the target existed when the write began.
        committed: whether the change reached the target (renamed over it, or an in-place edit's
            journal deleted): set in the same uninterruptible step as the commit itself.
    """

    path: str
    existed: bool
    committed: bool = False


_RECORDS: contextvars.ContextVar[list[WriteRecord] | None] = contextvars.ContextVar(
    "gguf_schema_write_records", default=None
)


@contextlib.contextmanager
def recording() -> Iterator[list[WriteRecord]]:
    """Within this block, every write records what it did to its target in the list yielded, one
    :class:`WriteRecord` per target, in order: the command line reads it after an interrupt to say
    truthfully whether each file changed.

    >>> import os, tempfile, numpy as np, gguf_schema
    >>> p = os.path.join(tempfile.mkdtemp(), "m.gguf")
    >>> with recording() as writes:
    ...     gguf_schema.save(p, {"general.name": "m"}, {"w": np.ones(4, np.float32)})
    >>> [(os.path.basename(w.path), w.existed, w.committed) for w in writes]
    [('m.gguf', False, True)]
    """
    records: list[WriteRecord] = []
    token = _RECORDS.set(records)
    try:
        yield records
    finally:
        _RECORDS.reset(token)


def _record(path: str, existed: bool) -> WriteRecord:
    """A record of a write beginning on ``path`` (kept only inside :func:`recording`)."""
    record = WriteRecord(real_path(path), existed)
    records = _RECORDS.get()
    if records is not None:
        records.append(record)
    return record


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold back SIGINT (Ctrl-C) while the block runs, then deliver it: a commit and its record are
    one step that an interrupt cannot split. Only the main thread receives signals in Python; in
    other threads, or where the handler cannot be changed, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    except (ValueError, OSError):  # pragma: no cover - no signals here (an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            signal.raise_signal(signal.SIGINT)  # as if it arrived now: the caller's handler decides


# --------------------------------------------------------------------------- atomic replacement


def _tmp_name(path: str) -> str:
    folder, base = os.path.split(path)
    return os.path.join(folder, f".{base}{_TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def remove_stale_temporaries(path: PathLike) -> list[str]:
    """Remove the named temporary files that writers of ``path`` which died left beside it (beside
    the real file: symbolic links resolved); return them."""
    path = real_path(path)
    folder, base = os.path.split(path)
    prefix = f".{base}{_TMP_MARK}"
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if not name.startswith(prefix):
                continue
            pid = name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))
                    removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _keep_identity(fd: int, old: os.stat_result | None) -> None:
    """Give the new file the old one's mode, owner and group (checked before writing: :func:`_may_replace`)."""
    if old is None:
        return
    if (old.st_uid, old.st_gid) != (os.fstat(fd).st_uid, os.fstat(fd).st_gid) and hasattr(os, "fchown"):
        os.fchown(fd, old.st_uid, old.st_gid)
    os.fchmod(fd, old.st_mode & 0o7777)


def read_only_reason(path: str, st: os.stat_result) -> str | None:
    """Why ``path`` must not be changed, or None: the user may not write it, or no write bit is set
    at all (``chmod a-w``: a statement that root, who may write anything, respects here too)."""
    if not os.access(path, os.W_OK):
        return "the file is read-only for this user"
    if st.st_mode & 0o222 == 0:
        return f"the file is read-only (mode {st.st_mode & 0o7777:04o})"
    return None


def _may_replace(path: str, old: os.stat_result | None) -> None:
    """Refuse to replace a file the user could not write, or whose owner a new file would not keep."""
    if old is None:
        return
    why = read_only_reason(path, old)
    if why is not None:
        raise GGUFPermissionError(
            f"{why}: it is not replaced (make it writable first, or write elsewhere with -o)",
            path=path,
            errno=errno.EACCES,
        )
    euid = os.geteuid() if hasattr(os, "geteuid") else None
    if euid not in (None, 0) and old.st_uid != euid:
        raise GGUFPermissionError(
            f"the file belongs to user {old.st_uid}: a rewritten copy would belong to user {euid}, so it is not "
            "replaced (its owner, or root, can edit it; or write elsewhere with -o)",
            path=path,
            errno=errno.EPERM,
        )


def atomic_replace(
    path: PathLike,
    write: Callable[[IO[bytes]], None],
    *,
    sync: bool = True,
    expected: tuple[int, int] | None = None,
) -> None:
    """Call ``write(stream)`` on a temporary file beside ``path``, then rename it over ``path``.

    If ``write`` raises (or the process dies), ``path`` is untouched and no temporary file is left
    (see the module docstring). A new file gets the permissions the process's umask gives; a
    replaced file keeps its mode, owner and group. OS errors surface as
    :class:`~gguf_schema.errors.GGUFIOError`.

    ``expected``: the file (device, inode) ``path`` must still name just before the rename, else
    :class:`~gguf_schema.errors.GGUFChangedError` and nothing replaced (an editor holds a lock on
    the file it read, which does not stop a program that ignores locks from renaming another file
    over the path meanwhile).
    """
    atomic_replace_set([(path, write)], sync=sync, expected=None if expected is None else {path: expected})


def check_same_file(path: str, ident: tuple[int, int]) -> None:
    """Raise :class:`~gguf_schema.errors.GGUFChangedError` unless ``path`` names the file ``ident`` (device, inode)."""
    try:
        st = os.stat(path)
        now: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except FileNotFoundError:
        now = None
    except OSError as e:
        raise os_error(e, path) from None
    if now != ident:
        raise GGUFChangedError(
            "another process replaced or removed the file while it was being edited: the edit is not "
            "written (run it again on the file as it is now)",
            path=path,
        )


#: above this many files in one set, each temporary gets its name as soon as it is complete (so as
#: not to hold one descriptor per file); below it, all stay unnamed until the whole set is written
_MAX_UNNAMED = 256


def atomic_replace_set(
    files: Sequence[tuple[PathLike, Callable[[IO[bytes]], None]]],
    *,
    sync: bool = True,
    expected: Mapping[PathLike, tuple[int, int]] | None = None,
) -> None:
    """Write a set of files (the shards of a split model) so that they appear together.

    Every file is first written in full to a temporary file beside its target and fsynced (on
    Linux unnamed, ``O_TMPFILE``: a writer killed in this phase, which is nearly all of the work,
    leaves nothing). Only then are they named and renamed over their targets one after the other,
    and the folders fsynced. A writer killed during those renames (a few milliseconds) leaves some
    targets new and the others as they were; readers of a set detect it (the shards of a split
    carry their set's identity) and the named temporaries it leaves are removed by the next write
    of the same names. If a ``write`` raises, no target is touched. ``expected``: for some
    targets, the file (device, inode) each must still name just before the renames
    (:func:`atomic_replace`).
    """
    with PendingFiles([p for p, _ in files], sync=sync, expected=expected) as pending:
        for i, (_, write) in enumerate(files):
            try:
                write(pending.open(i))
            except OSError as e:
                raise os_error(e, pending.targets[i]) from e
            pending.finish(i)
        pending.commit()


class PendingFiles:
    """A set of new files written over time, then made to appear together: what
    :func:`atomic_replace_set` does, for writers that produce their files in several calls (the
    ``gguf`` package's ``GGUFWriter`` API in :mod:`gguf_schema.compat`).

    :meth:`open` gives the stream of a temporary file beside a target (unnamed where the OS offers
    it); :meth:`finish` flushes and fsyncs one; :meth:`commit` finishes the rest and renames them
    all over their targets; :meth:`discard` (or leaving a ``with`` block without committing)
    removes them and touches no target. The targets are checked first: a file the user could not
    write is refused before anything is written. ``expected`` as for :func:`atomic_replace_set`.
    ``named``: every temporary has a name from the start (:meth:`temporary`), for other processes
    (the workers of a cluster, on a shared filesystem) to open and write into; a writer killed
    leaves it as a stale temporary, removed by the next writer of that target.
    """

    def __init__(
        self,
        paths: Sequence[PathLike],
        *,
        sync: bool = True,
        expected: Mapping[PathLike, tuple[int, int]] | None = None,
        named: bool = False,
    ):
        self.targets = [real_path(p) for p in paths]
        #: target (real path) -> the file (device, inode) it must still name at the rename
        self._expected = {real_path(p): ident for p, ident in (expected or {}).items()}
        self.sync = sync
        self._olds: list[os.stat_result | None] = []
        for path in self.targets:
            try:
                self._olds.append(os.stat(path))
            except FileNotFoundError:
                self._olds.append(None)
            except OSError as e:
                raise os_error(e, path) from None
            _may_replace(path, self._olds[-1])
            remove_stale_temporaries(path)
        # what each target becomes, for an interrupt to tell (:func:`recording`)
        self._records = [_record(path, old is not None) for path, old in zip(self.targets, self._olds, strict=True)]
        # per file: an open descriptor (None once closed), the temporary's name (None while unnamed), its stream
        self._done: list[tuple[int | None, str | None, IO[bytes] | None] | None] = [None] * len(self.targets)
        self._finished = [False] * len(self.targets)
        self._named = named
        self.committed = False

    def open(self, i: int) -> IO[bytes]:
        """The stream of the temporary file of target ``i`` (opened on first call)."""
        entry = self._done[i]
        if entry is None:
            path = self.targets[i]
            try:
                fd, named = _open_temporary(os.path.dirname(path), path, unnamed=not self._named)
            except OSError as e:  # pragma: no cover - _open_temporary classifies its own errors
                raise os_error(e, path) from e
            stream = os.fdopen(fd, "wb", closefd=False)
            entry = self._done[i] = (fd, named, stream)
        if entry[2] is None:
            raise ValueError(f"file {i} of the set is finished already: its temporary cannot be opened again")
        return entry[2]

    def temporary(self, i: int) -> str:
        """The name of the temporary file of target ``i`` (opened first if need be); only with ``named=True``."""
        if not self._named:
            raise ValueError("the temporaries of this set are unnamed (PendingFiles(..., named=True) names them)")
        self.open(i)
        named = self._done[i][1]  # type: ignore[index]
        if named is None:  # pragma: no cover - a named set's temporaries are named when opened
            raise GGUFInternalError("a named temporary without a name")
        return named

    def finish(self, i: int) -> None:
        """Target ``i`` is complete: flush and fsync its temporary (and with many files, name and close it)."""
        if self._finished[i]:
            return
        self.open(i)
        fd, named, stream = self._done[i]  # type: ignore[misc]
        path = self.targets[i]
        try:
            if not (stream is not None and fd is not None):
                raise GGUFInternalError("stream is not None and fd is not None does not hold")
            stream.flush()
            stream.close()
            _keep_identity(fd, self._olds[i])
            if self.sync:
                os.fsync(fd)
            if named is not None or len(self.targets) > _MAX_UNNAMED:
                if named is None:  # name it now; if killed, it is a stale temporary for the next writer to remove
                    named = _tmp_name(path)
                    _link_unnamed(fd, named)
                os.close(fd)
                fd = None
        except OSError as e:
            raise os_error(e, path) from e
        self._done[i] = (fd, named, None)
        self._finished[i] = True

    def commit(self) -> None:
        """Finish every file, then rename them over their targets and fsync the folders."""
        for i in range(len(self.targets)):
            self.finish(i)
        current = self.targets[0] if self.targets else ""
        try:
            with _interrupts_held():  # the set appears whole (or a rename fails): Ctrl-C waits for it
                for i, path in enumerate(self.targets):
                    current = path
                    fd, named, _ = self._done[i]  # type: ignore[misc]
                    if named is None and fd is not None:  # unnamed (O_TMPFILE): named only now the set is complete
                        named = _tmp_name(path)
                        _link_unnamed(fd, named)
                        self._done[i] = (fd, named, None)
                for i, path in enumerate(self.targets):
                    current = path
                    fd, named, _ = self._done[i]  # type: ignore[misc]
                    if named is None:
                        raise GGUFInternalError("named is not None does not hold")
                    ident = self._expected.get(path)
                    if ident is not None:
                        check_same_file(path, ident)
                    os.replace(named, path)
                    self._records[i].committed = True
                    self._done[i] = (fd, None, None)
                if self.sync:
                    for folder in dict.fromkeys(os.path.dirname(p) for p in self.targets):
                        current = folder
                        fsync_dir(folder)
        except OSError as e:
            raise os_error(e, current) from e
        self.committed = True
        self._close()

    def discard(self) -> None:
        """Remove the temporaries (named ones are unlinked, unnamed ones vanish when closed); no target is touched."""
        for entry in self._done:
            if entry is not None and entry[1] is not None:
                with contextlib.suppress(OSError):
                    os.unlink(entry[1])
        self._close()

    def _close(self) -> None:
        for i, entry in enumerate(self._done):
            if entry is None:
                continue
            fd, named, stream = entry
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.close()
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._done[i] = (None, named, None)

    def __enter__(self) -> PendingFiles:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.committed:
            self.discard()


def _link_unnamed(fd: int, name: str) -> None:
    """Give the unnamed file ``fd`` (``O_TMPFILE``) the name ``name``: ``linkat`` following ``/proc/self/fd``."""
    proc = os.open("/proc/self/fd", os.O_RDONLY | _O_CLOEXEC)
    try:
        os.link(str(fd), name, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)


def _open_temporary(
    folder: str, path: str, access: int = os.O_WRONLY, *, unnamed: bool = True
) -> tuple[int, str | None]:
    """An unnamed temporary file in ``folder`` where the OS offers one (returns name None), else (or
    with ``unnamed=False``) a named one."""
    tmpfile = getattr(os, "O_TMPFILE", 0) if unnamed else 0
    if tmpfile and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(folder, tmpfile | access | _O_CLOEXEC, 0o666), None
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise _temporary_error(e, path) from None
    name = _tmp_name(path)
    try:
        return os.open(name, access | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o666), name
    except OSError as e:
        raise _temporary_error(e, path) from None


def _temporary_error(e: OSError, path: str) -> GGUFIOError:
    """An error creating the temporary file beside ``path``, named after ``path``: the user asked for
    that file; our temporary's name means nothing to them."""
    error = os_error(e, path)
    folder = os.path.dirname(path) or "."
    return type(error)(f"{error.reason}: cannot create a file in {folder}", path=path, errno=error.errno)


# --------------------------------------------------------------------------- copies and clones

#: Linux's ioctl that makes one file share another's blocks, copy-on-write (``FICLONE``)
_FICLONE = getattr(fcntl, "FICLONE", 0x40049409) if fcntl is not None and sys.platform.startswith("linux") else None
#: errors that mean "this filesystem (or this pair of files) cannot be cloned", not a failure of the disk
_NO_CLONE = frozenset(
    e for e in (errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", None), errno.EXDEV, errno.EINVAL, errno.ENOTTY) if e
)
_CLONE_PROBES: dict[int, bool] = {}


def clone_file(src_fd: int, dst_fd: int) -> bool:
    """Make the open file ``dst_fd`` a copy-on-write clone of ``src_fd`` (their whole contents), or
    return False when the filesystem cannot (nothing is then changed).

    A clone shares the source's blocks until either file writes them: milliseconds for any size, no
    space used (Linux ``FICLONE``, the reflinks of btrfs, XFS, bcachefs, OCFS2; not ext4 or tmpfs).
    """
    if _FICLONE is None:  # pragma: no cover - not Linux
        return False
    try:
        fcntl.ioctl(dst_fd, _FICLONE, src_fd)
    except OSError as e:
        if e.errno in _NO_CLONE:
            return False
        raise
    return True


def can_clone(path: PathLike) -> bool:
    """Whether the filesystem that holds ``path`` (a file, or a folder) clones files cheaply
    (:func:`clone_file`). Probed once per filesystem and process, on two small unnamed temporary
    files made in the folder (nothing is left there); False when the probe cannot be made.

    >>> import tempfile
    >>> can_clone(tempfile.gettempdir()) in (True, False)
    True
    """
    real = real_path(path)
    folder = real if os.path.isdir(real) else os.path.dirname(real)
    try:
        device = os.stat(folder).st_dev
    except OSError:
        return False
    if device not in _CLONE_PROBES:
        _CLONE_PROBES[device] = _probe_clone(folder)
    return _CLONE_PROBES[device]


def _probe_clone(folder: str) -> bool:
    opened: list[tuple[int, str | None]] = []
    try:
        for _ in range(2):
            opened.append(_open_temporary(folder, os.path.join(folder, ".clone-probe"), os.O_RDWR))
        os.write(opened[0][0], bytes(4096))
        return clone_file(opened[0][0], opened[1][0])
    except (OSError, GGUFError):
        return False
    finally:
        for fd, name in opened:
            os.close(fd)
            if name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(name)


def copy_file(src_fd: int, dst_fd: int, progress: Callable[[int], None] | None = None) -> bool:
    """Copy the whole open file ``src_fd`` into ``dst_fd`` (from its start): a clone where the
    filesystem can (then True), else a copy inside the kernel (``copy_file_range``), else by chunks;
    ``progress(n)`` is told of the bytes copied as they are."""
    if clone_file(src_fd, dst_fd):
        return True
    size, done = os.fstat(src_fd).st_size, 0
    copy = getattr(os, "copy_file_range", None)
    while done < size and copy is not None:
        try:
            n = copy(src_fd, dst_fd, size - done, done, done)
        except OSError as e:
            if done or e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            break
        if n == 0:
            break
        done += n
        if progress is not None:
            progress(n)
    while done < size:
        chunk = os.pread(src_fd, min(_CHUNK, size - done), done)
        if not chunk:
            raise GGUFChangedError("the file ended early while it was being copied", value=done)
        _pwrite_all(dst_fd, chunk, done)
        done += len(chunk)
        if progress is not None:
            progress(len(chunk))
    return False


# --------------------------------------------------------------------------- the rollback journal

_JOURNAL_MAGIC = b"GGUFJRNL"
#: format 2 (until issue 27): magic, format, file size, offset, length, device, inode; the saved bytes; SHA-256
_HEAD_V2 = struct.Struct("<8sIQQQQQ")
#: format 3: the same and the sector size; then the saved (old) bytes, one digest of each sector of
#: the new bytes, and a SHA-256 of all that
_HEAD_V3 = struct.Struct("<8sIQQQQQI")
#: the unit a crash may tear a write into (a sector: what a disk writes whole)
SECTOR = 512
_DIGEST_SIZE = 8
#: bytes read, hashed or written at a time (a multiple of SECTOR)
_CHUNK = 1 << 20
_ORPHAN_MARK = ".orphan-"


def journal_path(path: PathLike) -> str:
    """Where the journal of an in-place edit of ``path`` lives: beside the real file (symbolic
    links resolved, :func:`real_path`), its name with ``-journal`` added."""
    return real_path(path) + JOURNAL_SUFFIX


def _journal_candidates(path: PathLike) -> list[str]:
    """The journal of ``path``, and (when ``path`` is a symbolic link) the one an earlier version
    put beside the link's own name."""
    found = [journal_path(path)]
    beside_link = os.path.abspath(os.fspath(path)) + JOURNAL_SUFFIX
    return found if beside_link == found[0] else [*found, beside_link]


def _sector_digest(data: Any) -> bytes:
    return hashlib.blake2b(data, digest_size=_DIGEST_SIZE).digest()


def _sectors(offset: int, length: int) -> Iterator[tuple[int, int]]:
    """The pieces ``[a, b)`` of ``[offset, offset + length)`` cut at every multiple of :data:`SECTOR`."""
    a, end = offset, offset + length
    while a < end:
        b = min(end, (a // SECTOR + 1) * SECTOR)
        yield a, b
        a = b


def _span_chunks(offset: int, length: int, read_at: Callable[[int, int], Any]) -> Iterator[tuple[int, bytes]]:
    """``[offset, offset + length)`` read by ``read_at(pos, n)`` in pieces cut at multiples of
    :data:`_CHUNK` (so at sector boundaries too): ``(pos, bytes)``."""
    pos, end = offset, offset + length
    while pos < end:
        stop = min(end, (pos // _CHUNK + 1) * _CHUNK)
        data = bytes(read_at(pos, stop - pos))
        if len(data) != stop - pos:
            raise GGUFChangedError("the file ended early while it was being edited", value=pos + len(data))
        yield pos, data
        pos = stop


def _digests(offset: int, length: int, read_at: Callable[[int, int], Any]) -> Iterator[bytes]:
    """The digest of every sector piece of the span (:func:`_sectors`), a chunk of digests at a time."""
    for pos, data in _span_chunks(offset, length, read_at):
        view = memoryview(data)
        yield b"".join(_sector_digest(view[a - pos : b - pos]) for a, b in _sectors(pos, len(data)))


def _journal_chunks(
    offset: int,
    length: int,
    file_size: int,
    device: int,
    inode: int,
    old_at: Callable[[int, int], Any],
    digests: Iterable[bytes] | None,
) -> Iterator[bytes]:
    """A journal's bytes, streamed: its head, the old bytes of the span, the new bytes' sector digests
    (format 3; None: format 2), the SHA-256 of everything before it."""
    if digests is None:
        head = _HEAD_V2.pack(_JOURNAL_MAGIC, 2, file_size, offset, length, device, inode)
    else:
        head = _HEAD_V3.pack(_JOURNAL_MAGIC, 3, file_size, offset, length, device, inode, SECTOR)
    total = hashlib.sha256(head)
    yield head
    for _, data in _span_chunks(offset, length, old_at):
        total.update(data)
        yield data
    for data in digests or ():
        total.update(data)
        yield data
    yield total.digest()


def _n_sectors(offset: int, length: int) -> int:
    """How many pieces :func:`_sectors` cuts the span into."""
    return 0 if length <= 0 else (offset + length - 1) // SECTOR - offset // SECTOR + 1


@dataclass(frozen=True)
class _Record:
    """A complete journal as found (its saved bytes stay where they are: at ``saved_at`` in it)."""

    version: int
    file_size: int
    offset: int
    length: int
    device: int
    inode: int
    saved_at: int
    digests: bytes | None  # format 3: one per sector piece of the span


def _parse_record(size: int, read_at: Callable[[int, int], bytes]) -> _Record | None:
    """The journal of ``size`` bytes that ``read_at(pos, n)`` reads, or None when it is incomplete
    or damaged (then it is never applied). Its checksum is verified in chunks."""
    head = read_at(0, _HEAD_V3.size)
    if len(head) < _HEAD_V2.size:
        return None
    magic, version, file_size, offset, length, device, inode = _HEAD_V2.unpack_from(head)
    if magic != _JOURNAL_MAGIC or version not in (2, 3):
        return None
    if version == 3 and (len(head) < _HEAD_V3.size or _HEAD_V3.unpack_from(head)[7] != SECTOR):
        return None
    saved_at = _HEAD_V2.size if version == 2 else _HEAD_V3.size
    digests_size = _DIGEST_SIZE * _n_sectors(offset, length) if version == 3 else 0
    body = saved_at + length + digests_size
    if body + 32 != size:
        return None
    total = hashlib.sha256()
    for pos in range(0, body, _CHUNK):
        total.update(read_at(pos, min(_CHUNK, body - pos)))
    if total.digest() != read_at(body, 32):
        return None
    digests = read_at(saved_at + length, digests_size) if version == 3 else None
    return _Record(version, file_size, offset, length, device, inode, saved_at, digests)


@dataclass(frozen=True)
class Journal:
    """The bytes an in-place edit overwrites, saved before it does (see the module docstring): a
    journal in memory, as :meth:`encode` writes it and :meth:`decode` reads it (the editor itself
    streams the same bytes to disk, never holding the span).

    Attributes:
        offset, saved: where in the file, and the original bytes there.
        file_size: the file's size when the journal was written.
        device, inode: the file's identity then (recorded; the inode is one way a journal is
            matched to its file, the device number never is: a restart may change it).
        new_digests: the new bytes, one 8-byte BLAKE2b digest per 512-byte sector of the span (cut
            at multiples of 512 in the file); None for a journal of format 2, which had none.
    """

    offset: int
    saved: bytes
    file_size: int
    device: int = 0
    inode: int = 0
    new_digests: bytes | None = None

    @classmethod
    def of_edit(cls, offset: int, old: bytes, new: bytes, st: os.stat_result) -> Journal:
        """The journal of replacing ``old`` by ``new`` at ``offset`` in the file ``st`` describes."""
        if len(old) != len(new):
            raise ValueError(f"the old and new bytes differ in length ({len(old)} and {len(new)})")
        digests = b"".join(_digests(offset, len(new), lambda pos, n: new[pos - offset : pos - offset + n]))
        return cls(offset, bytes(old), st.st_size, st.st_dev, st.st_ino, digests)

    def encode(self) -> bytes:
        saved = self.saved
        return b"".join(
            _journal_chunks(
                self.offset,
                len(saved),
                self.file_size,
                self.device,
                self.inode,
                lambda pos, n: saved[pos - self.offset : pos - self.offset + n],
                None if self.new_digests is None else [self.new_digests],
            )
        )

    @classmethod
    def decode(cls, data: bytes) -> Journal | None:
        """The journal ``data`` holds, or None when it is incomplete or damaged (never applied)."""
        r = _parse_record(len(data), lambda pos, n: bytes(data[pos : pos + n]))
        if r is None:
            return None
        saved = bytes(data[r.saved_at : r.saved_at + r.length])
        return cls(r.offset, saved, r.file_size, r.device, r.inode, r.digests)


def _open_record(jpath: str) -> tuple[int, _Record | None] | None:
    """The journal at ``jpath``: its open descriptor and its record (None: incomplete); None when there is no journal."""
    try:
        jfd = os.open(jpath, os.O_RDONLY | _O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise os_error(e, jpath) from None
    try:
        return jfd, _parse_record(os.fstat(jfd).st_size, lambda pos, n: os.pread(jfd, n, pos))
    except BaseException:
        os.close(jfd)
        raise


#: what a journal finds in the file it stands beside (:func:`_match`)
OLD, CHANGED, OTHER = "old", "changed", "other"


def _match(fd: int, record: _Record, jfd: int) -> tuple[str, str]:
    """Does the journal fit the file ``fd``, and how? ``(state, why)``.

    A journal fits the file when the file has the size it recorded and either every sector of the
    span holds the saved bytes or the new ones (the new ones by their digests, format 3), or the
    file is the inode it recorded (then a sector torn inside, or any bytes, are this edit's). Both
    survive a restart; the device number, which a restart may renumber (LVM, several NVMe drives,
    btrfs subvolumes), is not compared. ``OLD``: it fits and every sector holds the saved bytes
    (the edit wrote nothing yet, or was undone); ``CHANGED``: it fits and some sector does not (the
    edit wrote some or all of the new bytes); ``OTHER``: it does not fit (another file, or one
    changed since by another program).
    """
    st = os.fstat(fd)
    if st.st_size != record.file_size:
        return OTHER, f"the file has {st.st_size:,} bytes, the journal's had {record.file_size:,}"
    same_inode = st.st_ino == record.inode
    saved, digests, k = record.saved_at - record.offset, record.digests, 0
    changed, foreign = False, None
    for pos, now in _span_chunks(record.offset, record.length, lambda p, n: os.pread(fd, n, p)):
        old = os.pread(jfd, len(now), saved + pos)
        if now == old:
            k += _n_sectors(pos, len(now))
            continue
        for a, b in _sectors(pos, len(now)):
            here = now[a - pos : b - pos]
            if here != old[a - pos : b - pos]:
                changed = True
                if foreign is None and (digests is None or _sector_digest(here) != digests[k * 8 : k * 8 + 8]):
                    foreign = a
            k += 1
        if foreign is not None and not same_inode:
            break
    if not changed:
        return OLD, "the file holds the saved bytes"
    if foreign is None:
        return CHANGED, "every sector of the span holds the saved bytes or the new ones"
    if same_inode:
        return CHANGED, f"the file is the same inode ({st.st_ino}) and size"
    return OTHER, (
        f"the bytes at offset {foreign:,} are neither the saved nor the new ones, and the file is inode "
        f"{st.st_ino}, the journal's was {record.inode}"
    )


def _pread_exact(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    if len(data) != n:
        raise GGUFChangedError("the file ended early while it was being edited", value=pos + len(data))
    return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_in_place(
    fd: int,
    path: str,
    offset: int,
    new: bytes | Callable[[int, int], Any],
    *,
    length: int | None = None,
    sync: bool = True,
) -> None:
    """Overwrite ``[offset, offset + length)`` of the open file ``fd`` crash-safely (journal first).

    ``new``: the new bytes, or ``new(pos, n)`` giving the new bytes at file offset ``pos`` (then
    ``length`` is required): the span is streamed, never held whole. The caller holds the
    exclusive lock on ``fd``. The journal (beside the real file: symbolic links resolved) is
    written first, in chunks copied from the file, with the digest of each sector of the new
    bytes; it is created exclusively: if one is there already, an edit of another file under the
    same name (one that replaced this file meanwhile) is under way, and this edit is refused with
    :class:`~gguf_schema.errors.GGUFChangedError`. If writing the new bytes fails (disk full, I/O
    error, an interrupt), the saved bytes are put back at once and the journal removed; only if
    that fails too does the journal stay, for :func:`recover`.
    """
    if callable(new):
        if length is None:
            raise TypeError("length is required when new is a function")
        new_at = new
    else:
        buf = memoryview(new).cast("B")
        length = buf.nbytes
        new_at = lambda pos, n: buf[pos - offset : pos - offset + n]  # noqa: E731
    if length == 0:
        return
    st = os.fstat(fd)
    if offset + length > st.st_size:
        raise GGUFChangedError("the file ended early while it was being edited", path=path)
    written = _record(path, True)
    with _interrupts_held():  # journal, write, commit: one step that Ctrl-C waits for (a header's worth)
        _journalled_write(fd, path, offset, length, new_at, st, sync, written)


def _journalled_write(
    fd: int,
    path: str,
    offset: int,
    length: int,
    new_at: Callable[[int, int], Any],
    st: os.stat_result,
    sync: bool,
    written: WriteRecord,
) -> None:
    """:func:`write_in_place` once the span is known: journal, write, commit (``written`` records the commit)."""
    jpath = journal_path(path)
    folder = os.path.dirname(jpath)
    try:
        jfd = os.open(jpath, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
    except FileExistsError:
        raise GGUFChangedError(
            f"{jpath} exists: another edit of a file under this name is under way (run the edit again)", path=path
        ) from None
    except OSError as e:
        raise os_error(e, jpath) from None
    try:
        chunks = _journal_chunks(
            offset,
            length,
            st.st_size,
            st.st_dev,
            st.st_ino,
            lambda pos, n: _pread_exact(fd, n, pos),
            _digests(offset, length, new_at),
        )
        for chunk in chunks:
            _write_all(jfd, chunk)
        os.fsync(jfd)  # always: the journal must be on disk before the file is touched
    except BaseException:
        os.close(jfd)
        with contextlib.suppress(OSError):
            os.unlink(jpath)
        raise
    os.close(jfd)
    fsync_dir(folder)
    try:
        for pos, data in _span_chunks(offset, length, new_at):
            _pwrite_all(fd, data, pos)
        if sync:
            os.fsync(fd)
        else:
            os.fdatasync(fd) if hasattr(os, "fdatasync") else os.fsync(fd)  # the journal is about to go
    except BaseException:
        # the write failed (disk full, I/O error, an interrupt): put the old bytes back at once if the
        # disk lets us; if it does not, the journal stays and the next edit (or recover) finishes the job
        with contextlib.suppress(OSError, GGUFError):
            found = _open_record(jpath)
            if found is not None:
                jfd, record = found
                try:
                    if record is not None:
                        _restore(fd, jfd, record, jpath)
                finally:
                    os.close(jfd)
        raise
    os.unlink(jpath)  # the commit point
    written.committed = True
    if sync:
        fsync_dir(folder)


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _restore(fd: int, jfd: int, record: _Record, jpath: str) -> None:
    """Write the journal's saved bytes back into ``fd`` (open for writing), then remove the journal."""
    saved = record.saved_at - record.offset
    for pos, data in _span_chunks(record.offset, record.length, lambda p, n: os.pread(jfd, n, saved + p)):
        _pwrite_all(fd, data, pos)
    if os.fstat(fd).st_size != record.file_size:
        os.ftruncate(fd, record.file_size)
    os.fsync(fd)
    os.unlink(jpath)
    fsync_dir(os.path.dirname(jpath))


def _keep_aside(jpath: str) -> str:
    """Rename a journal that does not fit its file to ``NAME-journal.orphan-TIME`` (never deleted:
    its bytes may still matter to someone); return the new name."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = f"{jpath}{_ORPHAN_MARK}{stamp}"
    n = 1
    while os.path.lexists(aside):
        n += 1
        aside = f"{jpath}{_ORPHAN_MARK}{stamp}-{n}"
    os.rename(jpath, aside)
    fsync_dir(os.path.dirname(jpath))
    return aside


def recover(path: PathLike, *, timeout: float | None = 60.0) -> str | None:
    """Undo an interrupted in-place edit of ``path``; say what was done (None: nothing to do).

    ``path`` may be the file or a symbolic link to it: the journal is looked for beside the real
    file (and, for a link, beside the link's own name too, where earlier versions put it). A
    complete journal whose bytes fit the file (:func:`_match`: the old or the new bytes, sector by
    sector, and the same size) means the file may be torn: its saved bytes are written back. An
    incomplete one means the file was not touched yet: it is deleted. A complete journal that does
    not fit the file (the file was replaced, or changed by another program, since) is never
    applied and never deleted: it is renamed ``NAME-journal.orphan-TIME`` and the message says so.
    The file is locked exclusively first (an edit under way is waited for, never undone).
    ``gguf-schema recover FILE`` calls this; so does every edit before it starts.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "m.gguf")
    >>> old = b"GGUF" + bytes(1020)
    >>> with open(p, "wb") as fh:
    ...     _ = fh.write(old)
    >>> journal = Journal.of_edit(500, old[500:524], b"N" * 24, os.stat(p))
    >>> with open(journal_path(p), "wb") as fh:    # what an editor killed in the middle leaves
    ...     _ = fh.write(journal.encode())
    >>> with open(p, "r+b") as fh:                  # ... after writing the first sector only
    ...     _ = fh.seek(500); _ = fh.write(b"N" * 12)
    >>> recover(p)
    'restored 24 bytes at offset 500 from ...m.gguf-journal: the interrupted edit was undone'
    >>> open(p, "rb").read() == old, os.path.exists(journal_path(p)), recover(p)
    (True, False, None)
    """
    candidates = _journal_candidates(path)
    if not any(os.path.lexists(j) for j in candidates):
        if not os.path.exists(path):
            raise GGUFFileNotFoundError(
                "there is no such file (and no journal beside it)", path=os.fspath(path), errno=errno.ENOENT
            )
        return None
    real = real_path(path)
    try:
        fd = os.open(real, os.O_RDONLY | _O_CLOEXEC)
    except OSError as e:
        raise os_error(e, os.fspath(path)) from None
    try:
        with FileLock(fd, exclusive=True, timeout=timeout, path=os.fspath(path)):
            st, now = os.fstat(fd), os.stat(real)
            if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
                raise GGUFChangedError(
                    "the file was replaced while it was being locked: run recover again", path=os.fspath(path)
                )
            return _recover_locked(path, fd)
    finally:
        os.close(fd)


def _recover_locked(path: PathLike, fd: int) -> str | None:
    """:func:`recover` for a caller that holds the exclusive lock on the open file ``fd`` that ``path`` names."""
    said = []
    for jpath in _journal_candidates(path):
        found = _open_record(jpath)
        if found is None:
            continue
        jfd, record = found
        try:
            if record is None:
                os.unlink(jpath)
                fsync_dir(os.path.dirname(jpath))
                said.append(f"removed an incomplete journal ({jpath}): the file had not been changed")
                continue
            state, why = _match(fd, record, jfd)
            if state == OLD:
                os.unlink(jpath)
                fsync_dir(os.path.dirname(jpath))
                said.append(f"removed {jpath}: the interrupted edit had not changed the file yet ({why})")
            elif state == CHANGED:
                wfd = _reopen_for_writing(fd, path)
                restored = _record(real_path(path), True)
                try:
                    with _interrupts_held():  # the saved bytes back, then the journal gone: one step for Ctrl-C
                        _restore(wfd, jfd, record, jpath)
                        restored.committed = True
                finally:
                    if wfd != fd:
                        os.close(wfd)
                said.append(
                    f"restored {record.length:,} bytes at offset {record.offset:,} from {jpath}: "
                    "the interrupted edit was undone"
                )
            else:
                aside = _keep_aside(jpath)
                said.append(
                    f"kept {jpath} aside as {os.path.basename(aside)}: it does not fit the file ({why}), so it was "
                    "left by an edit of a file that has since been replaced or changed by another program; the "
                    "file was not touched"
                )
        finally:
            os.close(jfd)
    return "; ".join(said) or None


def _reopen_for_writing(fd: int, path: PathLike) -> int:
    """``fd`` itself if it was opened for writing, else the same file opened again for writing."""
    if fcntl is not None and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR:
        return fd
    try:
        wfd = os.open(real_path(path), os.O_RDWR | _O_CLOEXEC)
    except OSError as e:
        raise os_error(e, os.fspath(path)) from None
    if (os.fstat(wfd).st_dev, os.fstat(wfd).st_ino) != (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
        os.close(wfd)
        raise GGUFChangedError(
            "the file was replaced while it was being recovered: run recover again", path=os.fspath(path)
        )
    return wfd


# --------------------------------------------------------------------------- locks


class FileLock:
    """An advisory lock on an open file (``flock``), taken with a timeout.

    ``exclusive``: one holder and no shared holders (an editor); else shared (readers). On systems
    without ``fcntl`` (Windows) locks are a no-op.
    """

    def __init__(self, fd: int, *, exclusive: bool, timeout: float | None = 60.0, path: str | None = None):
        self.fd = fd
        self.exclusive = exclusive
        self.timeout = timeout
        self.path = path

    def acquire(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        mode = fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(self.fd, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    who = (
                        "another process is editing the file"
                        if not self.exclusive
                        else "another process holds the file"
                    )
                    raise GGUFChangedError(f"{who}: gave up waiting after {self.timeout} s", path=self.path) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)

    def release(self) -> None:
        if fcntl is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


@contextlib.contextmanager
def locked_open(path: PathLike, *, write: bool, timeout: float | None = 60.0) -> Iterator[tuple[int, os.stat_result]]:
    """Open the file ``path`` names (symbolic links resolved: :func:`real_path`) and lock it
    (exclusive to write, shared to read), making sure the path still names the locked file
    (another process may replace it, or point the link elsewhere, meanwhile: then open it again).

    Yields the descriptor and its stat; closes it (releasing the lock) at the end. Before an
    exclusive lock is handed out, an interrupted in-place edit is recovered (:func:`recover`).
    """
    given = os.fspath(path)
    flags = (os.O_RDWR if write else os.O_RDONLY) | _O_CLOEXEC
    for _ in range(100):
        real = real_path(given)
        try:
            fd = os.open(real, flags)
        except PermissionError as e:
            if write:
                raise GGUFPermissionError(
                    "the file is read-only: it is not edited (make it writable first, or write elsewhere with -o)",
                    path=given,
                    errno=e.errno,
                ) from None
            raise os_error(e, given) from None
        except OSError as e:
            raise os_error(e, given) from None
        lock = FileLock(fd, exclusive=write, timeout=timeout, path=given)
        try:
            st = os.fstat(fd)
            why = read_only_reason(real, st) if write else None
            if why is not None:
                raise GGUFPermissionError(
                    f"{why}: it is not edited (make it writable first, or write elsewhere with -o)",
                    path=given,
                    errno=errno.EACCES,
                )
            lock.acquire()
            st = os.fstat(fd)
            try:
                now: os.stat_result | None = os.stat(given)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                if write:
                    _recover_locked(given, fd)
                    st = os.fstat(fd)
                yield fd, st
                return
        finally:
            lock.release()
            os.close(fd)
        # replaced while we waited for the lock: lock the file the path names now
    raise GGUFChangedError("the file kept being replaced while it was being opened", path=given)


def check_no_journal(path: PathLike, fd: int | None = None) -> None:
    """Refuse to read a file with a pending journal: its header may be torn until it is recovered.

    Only meaningful under a shared lock on the file (:func:`shared_header_lock`): an editor holds
    an exclusive lock for as long as its journal exists, so a complete journal was left by a
    writer that died. It is held against the file open at ``fd`` only if it fits it (:func:`_match`:
    some sector holds the new bytes, every other the old ones; None: any complete journal is held
    against the file). An incomplete journal, one whose edit had not changed the file yet, or one
    of another file (replaced since) says nothing about this file.
    """
    for jpath in _journal_candidates(path):
        found = _open_record(jpath)
        if found is None:
            continue
        jfd, record = found
        try:
            if record is not None and (fd is None or _match(fd, record, jfd)[0] == CHANGED):
                raise GGUFError(
                    f"an interrupted edit left {jpath}: the file may be torn until it is recovered "
                    "(run: gguf-schema recover FILE; any edit of the file also puts the old bytes back)",
                    path=os.fspath(path),
                )
        finally:
            os.close(jfd)


@contextlib.contextmanager
def shared_header_lock(fd: int, path: str | None, *, timeout: float | None = 60.0) -> Iterator[None]:
    """Hold a shared lock on the open file ``fd`` while its header is read (readers).

    Once the lock is held no in-place edit of that file is under way, so a journal beside
    ``path`` (beside the real file, symbolic links resolved) means one died: the read is refused
    (:func:`check_no_journal`). The journal is only looked at when ``path`` still names the locked
    file: the journal of a file that replaced it meanwhile belongs to an editor of that other file.
    """
    with FileLock(fd, exclusive=False, timeout=timeout, path=path):
        if path is not None:
            try:
                st, now = os.fstat(fd), os.stat(path)
            except OSError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                check_no_journal(path, fd)
        yield


# --------------------------------------------------------------------------- inputs are never outputs


def refuse_overwriting_inputs(outputs: Iterable[Any], inputs: Iterable[Any], *, command: str = "this command") -> None:
    """Raise :class:`~gguf_schema.errors.GGUFBuildError` if an output path is one of the input files.

    Paths are compared resolved (symbolic links followed) and, for files that exist, by device and
    inode, so another name of the same file (a symbolic or hard link) is caught too. Anything that
    is not a local path (a URL, an open stream, None) is ignored. Call it before writing anything.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); a = os.path.join(d, "a.gguf"); open(a, "wb").close()
    >>> os.link(a, os.path.join(d, "b.gguf"))
    >>> refuse_overwriting_inputs([os.path.join(d, "b.gguf")], [a], command="merge")
    Traceback (most recent call last):
    ...
    gguf_schema.errors.GGUFBuildError: merge would write over its input .../a.gguf (another name of the same file): the output must not be the input ...
    """

    def local(p: Any) -> str | None:
        if not isinstance(p, (str, os.PathLike)):
            return None
        p = os.fspath(p)
        if not isinstance(p, str) or "://" in p or p == "-":
            return None
        return p

    def identity(p: str) -> tuple[str, tuple[int, int] | None]:
        try:
            st = os.stat(p)
            return os.path.realpath(p), (st.st_dev, st.st_ino)
        except OSError:
            return os.path.realpath(p), None

    ins = [(p, *identity(p)) for p in (local(x) for x in inputs) if p is not None]
    for out in (local(x) for x in outputs):
        if out is None:
            continue
        real, ident = identity(out)
        for inp, in_real, in_ident in ins:
            if real == in_real or (ident is not None and ident == in_ident):
                same = "" if os.path.abspath(out) == os.path.abspath(inp) else f" {inp} (another name of the same file)"
                raise GGUFBuildError(
                    f"{command} would write over its input{same}: the output must not be the input "
                    "(an input is never overwritten); write the output to another path",
                    path=out,
                )
