"""How bytes reach the disk safely: atomic replacement, the rollback journal of in-place edits, locks.

A user's file is never left unreadable, half-written or silently changed, whatever is killed or
fails at the time (``docs/writes.md`` states the guarantees and the figures measured). This module
owns the mechanisms every write goes through (see ``../shared/design/safe-writes.md`` for where
they come from):

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
  saves the bytes it will overwrite to ``NAME.gguf-journal`` (with the file's identity and a
  checksum), fsyncs it and the folder, then writes and fsyncs the file, then deletes the journal
  and fsyncs the folder: the deletion is the commit point. :func:`recover` (run before every
  edit, and by ``gguf-schema recover``) puts the saved bytes back if a complete journal of this
  file is found, and deletes an incomplete one (the file was not touched yet) or one of a file
  that has since been replaced. A reader that finds a complete journal refuses the file.
* :class:`FileLock` -- advisory ``flock`` locks on the file itself: an editor holds an exclusive
  lock for the whole edit (a second editor waits, up to a timeout, or fails clearly), readers a
  shared one while they parse the header (:func:`shared_header_lock`: they never see a
  half-written one). After taking the lock, the path is checked to still name the locked file
  (device and inode): a lock on a file that another process has replaced meanwhile protects
  nothing, so the open is retried; and an edit re-checks just before it writes
  (:func:`expect_same_file`, :func:`check_same_file`).
* :func:`refuse_overwriting_inputs` -- every command that writes a new file refuses an output that
  is one of its inputs (by resolved path, device and inode), before writing anything.

``sync=False`` (everywhere) skips the fsyncs: faster, and a power cut may then lose the change
(never the old file, for replacements; in-place edits keep their journal either way).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import os
import secrets
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Union

from .errors import (
    GGUFBuildError,
    GGUFChangedError,
    GGUFError,
    GGUFFileNotFoundError,
    GGUFIOError,
    GGUFPermissionError,
    os_error,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: locks are a documented no-op there
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "JOURNAL_SUFFIX",
    "FileLock",
    "Journal",
    "PendingFiles",
    "atomic_replace",
    "atomic_replace_set",
    "check_no_journal",
    "check_same_file",
    "expect_same_file",
    "fsync_dir",
    "journal_path",
    "locked_open",
    "read_only_reason",
    "recover",
    "refuse_overwriting_inputs",
    "remove_stale_temporaries",
    "shared_header_lock",
    "write_in_place",
]

PathLike = Union[str, "os.PathLike[str]"]

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


# --------------------------------------------------------------------------- atomic replacement


def _tmp_name(path: str) -> str:
    folder, base = os.path.split(path)
    return os.path.join(folder, f".{base}{_TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def remove_stale_temporaries(path: PathLike) -> list[str]:
    """Remove the named temporary files that writers of ``path`` which died left beside it; return them."""
    path = os.path.abspath(os.fspath(path))
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


def atomic_replace(path: PathLike, write: Callable[[IO[bytes]], None], *, sync: bool = True) -> None:
    """Call ``write(stream)`` on a temporary file beside ``path``, then rename it over ``path``.

    If ``write`` raises (or the process dies), ``path`` is untouched and no temporary file is left
    (see the module docstring). A new file gets the permissions the process's umask gives; a
    replaced file keeps its mode, owner and group. OS errors surface as
    :class:`~gguf_schema.errors.GGUFIOError`.
    """
    atomic_replace_set([(path, write)], sync=sync)


_EXPECTED: contextvars.ContextVar[dict[str, tuple[int, int]] | None] = contextvars.ContextVar(
    "gguf_schema_expected_targets", default=None
)


@contextlib.contextmanager
def expect_same_file(path: PathLike, st: os.stat_result) -> Iterator[None]:
    """While this is active, a replacement of ``path`` (:func:`atomic_replace`) first checks that the
    path still names the file ``st`` describes (device and inode), and raises
    :class:`~gguf_schema.errors.GGUFChangedError` instead of replacing a file that another process
    put there meanwhile (an editor holds a lock on the file it read, which does not stop a
    program that ignores locks from renaming another file over the path)."""
    expected = dict(_EXPECTED.get() or {})
    expected[os.path.abspath(os.fspath(path))] = (st.st_dev, st.st_ino)
    token = _EXPECTED.set(expected)
    try:
        yield
    finally:
        _EXPECTED.reset(token)


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


def _check_expected(path: str) -> None:
    ident = (_EXPECTED.get() or {}).get(path)
    if ident is not None:
        check_same_file(path, ident)


#: above this many files in one set, each temporary gets its name as soon as it is complete (so as
#: not to hold one descriptor per file); below it, all stay unnamed until the whole set is written
_MAX_UNNAMED = 256


def atomic_replace_set(files: Sequence[tuple[PathLike, Callable[[IO[bytes]], None]]], *, sync: bool = True) -> None:
    """Write a set of files (the shards of a split model) so that they appear together.

    Every file is first written in full to a temporary file beside its target and fsynced (on
    Linux unnamed, ``O_TMPFILE``: a writer killed in this phase, which is nearly all of the work,
    leaves nothing). Only then are they named and renamed over their targets one after the other,
    and the folders fsynced. A writer killed during those renames (a few milliseconds) leaves some
    targets new and the others as they were; readers of a set detect it (the shards of a split
    carry their set's identity) and the named temporaries it leaves are removed by the next write
    of the same names. If a ``write`` raises, no target is touched.
    """
    with PendingFiles([p for p, _ in files], sync=sync) as pending:
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
    write is refused before anything is written.
    """

    def __init__(self, paths: Sequence[PathLike], *, sync: bool = True):
        self.targets = [os.path.abspath(os.fspath(p)) for p in paths]
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
        # per file: an open descriptor (None once closed), the temporary's name (None while unnamed), its stream
        self._done: list[tuple[int | None, str | None, IO[bytes] | None] | None] = [None] * len(self.targets)
        self._finished = [False] * len(self.targets)
        self.committed = False

    def open(self, i: int) -> IO[bytes]:
        """The stream of the temporary file of target ``i`` (opened on first call)."""
        entry = self._done[i]
        if entry is None:
            path = self.targets[i]
            try:
                fd, named = _open_temporary(os.path.dirname(path), path)
            except OSError as e:  # pragma: no cover - _open_temporary classifies its own errors
                raise os_error(e, path) from e
            stream = os.fdopen(fd, "wb", closefd=False)
            entry = self._done[i] = (fd, named, stream)
        assert entry[2] is not None, "the temporary was finished already"
        return entry[2]

    def finish(self, i: int) -> None:
        """Target ``i`` is complete: flush and fsync its temporary (and with many files, name and close it)."""
        if self._finished[i]:
            return
        self.open(i)
        fd, named, stream = self._done[i]  # type: ignore[misc]
        path = self.targets[i]
        try:
            assert stream is not None and fd is not None
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
            for i, path in enumerate(self.targets):
                current = path
                fd, named, _ = self._done[i]  # type: ignore[misc]
                if named is None and fd is not None:  # unnamed (O_TMPFILE): give it a name only now the set is complete
                    named = _tmp_name(path)
                    _link_unnamed(fd, named)
                    self._done[i] = (fd, named, None)
            for i, path in enumerate(self.targets):
                current = path
                fd, named, _ = self._done[i]  # type: ignore[misc]
                assert named is not None
                _check_expected(path)
                os.replace(named, path)
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


def _open_temporary(folder: str, path: str) -> tuple[int, str | None]:
    """An unnamed temporary file in ``folder`` where the OS offers one (returns name None), else a named one."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(folder, tmpfile | os.O_WRONLY | _O_CLOEXEC, 0o666), None
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise os_error(e, folder) from None
    name = _tmp_name(path)
    try:
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o666), name
    except OSError as e:
        raise os_error(e, name) from None


# --------------------------------------------------------------------------- the rollback journal

_JOURNAL_MAGIC = b"GGUFJRNL"
_JOURNAL_HEAD = struct.Struct("<8sIQQQQQ")  # magic, format version, file size, offset, length, device, inode


def journal_path(path: PathLike) -> str:
    """Where the journal of an in-place edit of ``path`` lives: ``path + "-journal"``."""
    return os.fspath(path) + JOURNAL_SUFFIX


@dataclass(frozen=True)
class Journal:
    """The bytes an in-place edit overwrites, saved before it does (see the module docstring).

    Attributes:
        offset, saved: where in the file, and the original bytes there.
        file_size: the file's size when the journal was written.
        device, inode: which file it was (a journal beside a file that has since been replaced
            belongs to the file that is gone, and is never applied to the new one).
    """

    offset: int
    saved: bytes
    file_size: int
    device: int = 0
    inode: int = 0

    def encode(self) -> bytes:
        head = _JOURNAL_HEAD.pack(
            _JOURNAL_MAGIC, 2, self.file_size, self.offset, len(self.saved), self.device, self.inode
        )
        return head + self.saved + hashlib.sha256(head + self.saved).digest()

    @classmethod
    def decode(cls, data: bytes) -> Journal | None:
        """The journal ``data`` holds, or None when it is incomplete or damaged (never applied)."""
        n = _JOURNAL_HEAD.size
        if len(data) < n + 32:
            return None
        magic, version, size, offset, length, device, inode = _JOURNAL_HEAD.unpack_from(data)
        if magic != _JOURNAL_MAGIC or version != 2 or len(data) != n + length + 32:
            return None
        if hashlib.sha256(data[: n + length]).digest() != data[n + length :]:
            return None
        return cls(offset, data[n : n + length], size, device, inode)

    def is_for(self, st: os.stat_result) -> bool:
        """True when this journal was written for the file ``st`` describes (device and inode)."""
        return (self.device, self.inode) == (st.st_dev, st.st_ino)


def _read_journal(path: str) -> tuple[str, bytes | None]:
    jpath = journal_path(path)
    try:
        with open(jpath, "rb") as fh:
            return jpath, fh.read()
    except FileNotFoundError:
        return jpath, None
    except OSError as e:
        raise os_error(e, jpath) from None


def write_in_place(fd: int, path: str, offset: int, new: bytes, *, sync: bool = True) -> None:
    """Overwrite ``len(new)`` bytes of the open file ``fd`` at ``offset``, crash-safely (journal first).

    The caller holds the exclusive lock on ``fd``. The journal is created exclusively: if one is
    there already, an edit of another file under the same name (one that replaced this file
    meanwhile) is under way, and this edit is refused with
    :class:`~gguf_schema.errors.GGUFChangedError`.
    """
    st = os.fstat(fd)
    old = os.pread(fd, len(new), offset)
    if len(old) != len(new):
        raise GGUFChangedError("the file ended early while it was being edited", path=path)
    jpath = journal_path(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        jfd = os.open(jpath, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
    except FileExistsError:
        raise GGUFChangedError(
            f"{jpath} exists: another edit of a file under this name is under way (run the edit again)", path=path
        ) from None
    except OSError as e:
        raise os_error(e, jpath) from None
    try:
        data = Journal(offset, old, st.st_size, st.st_dev, st.st_ino).encode()
        if os.write(jfd, data) != len(data):
            raise GGUFIOError("the journal could not be written whole", path=jpath)
        os.fsync(jfd)  # always: the journal must be on disk before the file is touched
    except BaseException:
        os.close(jfd)
        with contextlib.suppress(OSError):
            os.unlink(jpath)
        raise
    os.close(jfd)
    fsync_dir(folder)
    try:
        _pwrite_all(fd, new, offset)
        if sync:
            os.fsync(fd)
        else:
            os.fdatasync(fd) if hasattr(os, "fdatasync") else os.fsync(fd)  # the journal is about to go
    except BaseException:
        # the write failed (disk full, I/O error): put the old bytes back at once if the disk lets us;
        # if it does not, the journal stays and the next open for writing (or recover) finishes the job
        with contextlib.suppress(OSError):
            _pwrite_all(fd, old, offset)
            os.ftruncate(fd, st.st_size) if os.fstat(fd).st_size != st.st_size else None
            os.fsync(fd)
            os.unlink(jpath)
            fsync_dir(folder)
        raise
    os.unlink(jpath)  # the commit point
    if sync:
        fsync_dir(folder)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def recover(path: PathLike, *, timeout: float | None = 60.0) -> str | None:
    """Undo an interrupted in-place edit of ``path``; say what was done (None: nothing to do).

    A complete journal means the file may be torn: its saved bytes are written back. An incomplete
    one means the file was not touched yet: it is deleted. The file is locked exclusively first
    (an edit under way is waited for, never undone). ``gguf-schema recover FILE`` calls this; so
    does every edit before it starts.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "m.gguf")
    >>> with open(p, "wb") as fh:
    ...     _ = fh.write(b"GGUF old header")
    >>> st = os.stat(p)
    >>> with open(journal_path(p), "wb") as fh:  # what a writer killed in the middle leaves
    ...     _ = fh.write(Journal(5, b"old", 15, st.st_dev, st.st_ino).encode())
    >>> with open(p, "r+b") as fh:
    ...     _ = fh.write(b"GGUF n")           # ... after tearing the file
    >>> recover(p)
    'restored 3 bytes at offset 5 from ...m.gguf-journal: the interrupted edit was undone'
    >>> open(p, "rb").read(), os.path.exists(journal_path(p)), recover(p)
    (b'GGUF old header', False, None)
    """
    path = os.fspath(path)
    if not os.path.exists(journal_path(path)):
        if not os.path.exists(path):
            raise GGUFFileNotFoundError(
                "there is no such file (and no journal beside it)", path=path, errno=errno.ENOENT
            )
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    except OSError as e:
        raise os_error(e, path) from None
    try:
        with FileLock(fd, exclusive=True, timeout=timeout, path=path):
            st, now = os.fstat(fd), os.stat(path)
            if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
                raise GGUFChangedError("the file was replaced while it was being locked: run recover again", path=path)
            return _recover_locked(path, st)
    finally:
        os.close(fd)


def _recover_locked(path: str, st: os.stat_result) -> str | None:
    """:func:`recover` for a caller that holds the exclusive lock on ``path``, the file ``st`` describes."""
    path = os.fspath(path)
    jpath, data = _read_journal(path)
    if data is None:
        return None
    journal = Journal.decode(data)
    folder = os.path.dirname(os.path.abspath(path))
    if journal is None or not journal.is_for(st):
        os.unlink(jpath)
        fsync_dir(folder)
        if journal is None:
            return f"removed an incomplete journal ({jpath}): the file had not been changed"
        return f"removed {jpath}: it was left by an edit of a file that has since been replaced by this one"
    try:
        fd = os.open(path, os.O_RDWR | _O_CLOEXEC)
    except OSError as e:
        raise os_error(e, path) from None
    try:
        _pwrite_all(fd, journal.saved, journal.offset)
        if os.fstat(fd).st_size != journal.file_size:
            os.ftruncate(fd, journal.file_size)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.unlink(jpath)
    fsync_dir(folder)
    return f"restored {len(journal.saved):,} bytes at offset {journal.offset:,} from {jpath}: the interrupted edit was undone"


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
    """Open ``path`` and lock it (exclusive to write, shared to read), making sure the path still
    names the locked file (another process may replace it meanwhile: then open it again).

    Yields the descriptor and its stat; closes it (releasing the lock) at the end. Before an
    exclusive lock is handed out, an interrupted in-place edit is recovered (:func:`recover`).
    """
    path = os.fspath(path)
    flags = (os.O_RDWR if write else os.O_RDONLY) | _O_CLOEXEC
    for _ in range(100):
        try:
            fd = os.open(path, flags)
        except PermissionError as e:
            if write:
                raise GGUFPermissionError(
                    "the file is read-only: it is not edited (make it writable first, or write elsewhere with -o)",
                    path=path,
                    errno=e.errno,
                ) from None
            raise os_error(e, path) from None
        except OSError as e:
            raise os_error(e, path) from None
        lock = FileLock(fd, exclusive=write, timeout=timeout, path=path)
        try:
            st = os.fstat(fd)
            why = read_only_reason(path, st) if write else None
            if why is not None:
                raise GGUFPermissionError(
                    f"{why}: it is not edited (make it writable first, or write elsewhere with -o)",
                    path=path,
                    errno=errno.EACCES,
                )
            lock.acquire()
            st = os.fstat(fd)
            try:
                now: os.stat_result | None = os.stat(path)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                if write:
                    _recover_locked(path, st)
                    st = os.fstat(fd)
                yield fd, st
                return
        finally:
            lock.release()
            os.close(fd)
        # replaced while we waited for the lock: lock the file the path names now
    raise GGUFChangedError("the file kept being replaced while it was being opened", path=path)


def check_no_journal(path: PathLike, st: os.stat_result | None = None) -> None:
    """Refuse to read a file with a pending journal: its header may be torn until it is recovered.

    Only meaningful under a shared lock on the file (:func:`shared_header_lock`): an editor holds
    an exclusive lock for as long as its journal exists, so a complete journal for this file
    (``st``: its device and inode; None: any file) was left by a writer that died. An incomplete
    journal, or one of a file that has since been replaced, says nothing about this file.
    """
    jpath, data = _read_journal(os.fspath(path))
    journal = Journal.decode(data) if data is not None else None
    if journal is not None and (st is None or journal.is_for(st)):
        raise GGUFError(
            f"an interrupted edit left {jpath}: the file may be torn until it is recovered "
            "(run: gguf-schema recover FILE; any edit of the file also puts the old bytes back)",
            path=os.fspath(path),
        )


@contextlib.contextmanager
def shared_header_lock(fd: int, path: str | None, *, timeout: float | None = 60.0) -> Iterator[None]:
    """Hold a shared lock on the open file ``fd`` while its header is read (readers).

    Once the lock is held no in-place edit of that file is under way, so a journal beside
    ``path`` means one died: the read is refused (:func:`check_no_journal`). The journal is only
    looked at when ``path`` still names the locked file: the journal of a file that replaced it
    meanwhile belongs to an editor of that other file.
    """
    with FileLock(fd, exclusive=False, timeout=timeout, path=path):
        if path is not None:
            try:
                st, now = os.fstat(fd), os.stat(path)
            except OSError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                check_no_journal(path, st)
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
