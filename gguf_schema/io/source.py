"""Where the bytes come from: sources of a file's bytes, and the bounded reader the schema parses from.

A :class:`Source` owns access to one file's bytes, wherever they are, behind one small interface:

* :meth:`Source.header` -- a contiguous buffer of the first bytes of the file, for the parser
  (:class:`ByteReader` over it); :meth:`Source.extend` makes it longer when the parser needs more;
* :meth:`Source.view` -- the bytes ``[offset, offset + n)``, for tensor data: a zero-copy view of
  the map, or a copy read at that position; a range past the end of the file is a
  :class:`~gguf_schema.errors.GGUFTruncatedError`;
* ``size``, ``name``, :meth:`Source.fileno`, :meth:`Source.close`.

Kinds of source, chosen by :func:`~gguf_schema.io.opening.open_source`:

* :class:`MappedSource` -- a local file mapped read-only (the default): views are zero-copy and
  stay valid after the file is closed. A mapped file that another process truncates makes the next
  access to a vanished page kill the process (SIGBUS): every view is checked against the file's
  current size first, which turns the common case into a clean error; ``mmap=False`` avoids mapping.
* :class:`PositionedSource` -- a local file read with positioned reads (``mmap=False``): the header
  is read once into memory, tensor data by ``os.pread`` with the size checked each time; nothing a
  concurrent writer does can kill the reader.
* :class:`BufferSource` -- bytes already in memory.
* :class:`RangeSource` -- a file reached by ranged reads (a file object that is not a local file;
  remote files, see :mod:`gguf_schema.io.remote`): the header is fetched in growing reads, tensor
  data on demand, exactly the bytes asked for, kept in a bounded cache (:data:`CACHE_BYTES`).
  Views of its data are copies of the fetched bytes (read-only).

A string with a scheme (``https://``, ``hf://``, ``s3://``, ``file://`` ...: :func:`is_url`) is a
URL: :func:`~gguf_schema.io.opening.open_source` opens it as a
:class:`~gguf_schema.io.remote.RemoteSource` through
fsspec (the optional extra ``pip install 'gguf-schema[remote]'``), with ``storage_options``.

The schema parses from a :class:`ByteReader`. It never hands out more bytes than the buffer
holds, so a claimed length of 2**60 costs nothing before it fails, and its numpy-backed nodes
slice the underlying buffer directly instead of copying through ``read``.

>>> r = ByteReader(b"GGUF\\x03\\x00\\x00\\x00")
>>> r.read(4), r.tell(), r.remaining
(b'GGUF', 4, 4)
>>> r.read(100)  # never more than is there
b'\\x03\\x00\\x00\\x00'
>>> with BufferSource(b"GGUF\\x03\\x00\\x00\\x00") as s:
...     s.size, bytes(s.view(4, 4))
(8, b'\\x03\\x00\\x00\\x00')
"""

from __future__ import annotations

import contextlib
import io
import logging
import mmap
import os
import re
import threading
from collections import OrderedDict
from typing import IO, Any, TypeGuard

from ..errors import GGUFError, GGUFTruncatedError
from . import PathLike
from .ioerrors import io_error

log = logging.getLogger("gguf_schema")

__all__ = [
    "BufferSource",
    "ByteReader",
    "MappedSource",
    "PositionedSource",
    "RangeSource",
    "Source",
    "SourceLike",
    "StreamSource",
    "is_url",
]

SourceLike = PathLike | bytes | bytearray | memoryview | IO[bytes]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_url(src: object) -> TypeGuard[str]:
    """True for a string that starts with a scheme and ``://`` (``https://``, ``hf://``, ``file://`` ...).

    >>> is_url("https://host/m.gguf"), is_url("s3://bucket/m.gguf"), is_url("models/m.gguf"), is_url("C:/models/m.gguf")
    (True, True, False, False)
    """
    return isinstance(src, str) and _SCHEME.match(src) is not None


class ByteReader:
    """A read-only stream over a buffer (bytes or mmap) with ``read``/``seek``/``tell``.

    Attributes:
        data: the underlying buffer (slicing it gives ``bytes``).
        pos: the current position.
        size: the buffer's length.
        last: where the latest read started (the offset an error names).
    """

    __slots__ = ("data", "last", "pos", "size")

    def __init__(self, data: Any, pos: int = 0):
        self.data = data
        self.size = len(data)
        self.pos = pos
        self.last = pos

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def read(self, n: int | None = -1) -> bytes:
        start = self.last = self.pos
        end = self.size if n is None or n < 0 else min(start + n, self.size)
        self.pos = end
        return bytes(self.data[start:end])

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = self.last = max(0, base + offset)
        return self.pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True


class Source:
    """One file's bytes (see the module docstring). Subclasses implement :meth:`_read` or override
    :meth:`view` and :meth:`header`."""

    name: str | None = None
    closed: bool = False
    lock_held: bool = False  # the caller holds a lock on the file (an editor): the reader takes none

    def __init__(self, size: int, name: str | None = None):
        self.size = size
        self.name = name

    @property
    def notes(self) -> list[str]:
        """What the caller should know about how the bytes are read (e.g. a server without range
        requests: the file is streamed). The library records them here, and logs them at INFO level
        (logger ``gguf_schema``); it never prints them."""
        return list(self.__dict__.get("_notes", ()))

    def _note(self, text: str) -> None:
        notes = self.__dict__.setdefault("_notes", [])
        if text not in notes:
            notes.append(text)
            log.info("%s: %s", self.name, text)

    def header(self) -> Any:
        """A contiguous buffer of the first bytes of the file (the whole file where that is free)."""
        raise NotImplementedError

    def complete(self) -> bool:
        """True when :meth:`header` already holds the whole file."""
        return True

    def extend(self, want: int) -> bool:
        """Make :meth:`header` hold at least ``want`` bytes (or the whole file); False if it could not grow."""
        return False

    def view(self, offset: int, nbytes: int) -> Any:
        """The bytes ``[offset, offset + nbytes)`` as a read-only buffer."""
        self._check_open()
        self._check_range(offset, nbytes)
        return self._read(offset, nbytes)

    def _read(self, offset: int, nbytes: int) -> Any:
        raise NotImplementedError

    def current_size(self) -> int:
        """The file's size now (a local file may have been truncated or grown since it was opened)."""
        return self.size

    def release(self, offset: int, nbytes: int) -> None:
        """A hint that bytes ``[offset, offset + nbytes)`` are done with (a stream has moved past them):
        a mapped source lets their pages go from the process's resident memory; others do nothing."""
        return None

    def release_pages(self) -> None:
        """Say that the bytes read so far are not needed for a while: a map gives its pages back to the
        system (they are read again from the file if touched), so that they stop counting in this
        process's resident memory. Views stay valid. Nothing for other sources."""

    def _check_open(self) -> None:
        if self.closed:
            raise GGUFError("the file is closed: its bytes are only available while it is open", path=self.name)

    def _check_range(self, offset: int, nbytes: int) -> None:
        size = self.current_size()
        if offset < 0 or nbytes < 0 or offset + nbytes > size:
            has = f"{size:,} bytes" + (
                f"; {self.size:,} when it was opened: truncated meanwhile" if size < self.size else ""
            )
            raise GGUFTruncatedError(has, offset=offset, path=self.name, value=nbytes)

    def fileno(self) -> int | None:
        """The descriptor of the open local file behind this source, if there is one."""
        return None

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BufferSource(Source):
    """Bytes already in memory."""

    def __init__(self, data: bytes | bytearray | memoryview, name: str | None = None):
        self._data: Any = data if isinstance(data, bytes) else bytes(data)
        super().__init__(len(self._data), name)

    def header(self) -> Any:
        self._check_open()
        return self._data

    def _read(self, offset: int, nbytes: int) -> Any:
        return memoryview(self._data)[offset : offset + nbytes]

    def close(self) -> None:
        super().close()
        self._data = b""


class _LocalFile(Source):
    """A local file opened for reading (the descriptor, its size, and the stat that identifies it)."""

    def __init__(self, file: IO[bytes], name: str | None, owned: bool):
        self._file: IO[bytes] | None = file
        self._owned = owned
        st = os.fstat(file.fileno())
        self.stat = st
        super().__init__(st.st_size, name)

    def fileno(self) -> int | None:
        return self._file.fileno() if self._file is not None and not self._file.closed else None

    def current_size(self) -> int:
        fd = self.fileno()
        return os.fstat(fd).st_size if fd is not None else self.size

    def close(self) -> None:
        super().close()
        if self._file is not None and self._owned:
            self._file.close()
        self._file = None


class MappedSource(_LocalFile):
    """A local file mapped read-only: the header and every view are slices of one map (zero-copy).

    Views stay valid after :meth:`close` (the map is freed when the last one goes).
    """

    def __init__(self, file: IO[bytes], name: str | None = None, owned: bool = True):
        super().__init__(file, name, owned)
        self._map: mmap.mmap | None = None
        self._data: Any = b""
        if self.size:
            self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            self._data = self._map

    def header(self) -> Any:
        self._check_open()
        return self._data

    def _read(self, offset: int, nbytes: int) -> Any:
        return memoryview(self._data)[offset : offset + nbytes]

    def release(self, offset: int, nbytes: int) -> None:
        """``madvise(MADV_DONTNEED)`` over the whole pages of ``[offset, offset + nbytes)``: they leave the
        resident memory; the map is shared and read-only, so nothing is lost (the next touch reads
        them again from the page cache) and views already handed out stay valid."""
        if self._map is None or _DONTNEED is None or nbytes <= 0:
            return
        start = offset - offset % mmap.PAGESIZE
        end = min(offset + nbytes, self.size)
        end -= end % mmap.PAGESIZE
        if end > start:
            with contextlib.suppress(OSError, ValueError):  # a hint: never an error
                self._map.madvise(_DONTNEED, start, end - start)

    def release_pages(self) -> None:
        if self._map is not None and hasattr(self._map, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            with contextlib.suppress(OSError, ValueError):
                self._map.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        if self._map is not None:
            with contextlib.suppress(BufferError):  # views still use it: they keep it alive
                self._map.close()
            self._map = None
        self._data = b""
        super().close()


#: ``madvise`` advice that drops pages from the resident set (None where the platform has none)
_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None) if hasattr(mmap.mmap, "madvise") else None

#: the first read of a header that is not mapped; it grows as the parser needs (see RangeSource)
FIRST_READ = 2 * 2**20


class PositionedSource(_LocalFile):
    """A local file read with ``os.pread``: nothing mapped, so a concurrent truncation is an error, not a crash.

    The header is read into memory as the parser needs it; tensor data is read (copied) on demand,
    the file's size checked each time.
    """

    def __init__(self, file: IO[bytes], name: str | None = None, owned: bool = True):
        super().__init__(file, name, owned)
        self._head = b""
        self.extend(min(self.size, FIRST_READ))

    def header(self) -> Any:
        self._check_open()
        return self._head

    def complete(self) -> bool:
        return len(self._head) >= self.size

    def extend(self, want: int) -> bool:
        fd = self.fileno()
        want = min(want, self.size)
        if fd is None or want <= len(self._head):
            return False
        chunk = os.pread(fd, want - len(self._head), len(self._head))
        self._head = self._head + chunk  # a new buffer: views of the old one (lazy values) stay valid
        return bool(chunk)

    def _read(self, offset: int, nbytes: int) -> Any:
        fd = self.fileno()
        if fd is None:  # closed behind our back: the caller closed the file object it lent
            raise GGUFError("the file is closed: its bytes are only available while it is open", path=self.name)
        data = os.pread(fd, nbytes, offset)
        if len(data) != nbytes:  # truncated between the size check and the read
            self._check_range(offset + len(data), nbytes - len(data))
        return data


#: default bound of a :class:`RangeSource`'s cache of fetched ranges, in bytes
CACHE_BYTES = 64 * 2**20


class RangeSource(Source):
    """A file reached by ranged reads (``fetch(offset, n) -> bytes``): the header is fetched in
    growing reads, tensor data on demand. Views are copies (read-only buffers of fetched bytes).

    ``first_read`` bytes are fetched at once; the reader asks :meth:`extend` for more as the
    parse runs into the end of what was fetched (doubling it: see :func:`gguf_schema.reader.read`).
    A view outside the header fetches exactly its bytes, in one request; ranges of at most
    ``cache_bytes`` are kept (least recently used dropped first), so reading a tensor again, or
    rows of a tensor already read, costs nothing. Larger ranges are fetched on every access.

    Attributes:
        requests: requests made so far (the header's reads, views, retries).
        bytes_fetched: bytes received so far.
    """

    requests: int = 0
    bytes_fetched: int = 0

    def __init__(
        self, size: int, name: str | None = None, *, first_read: int = FIRST_READ, cache_bytes: int = CACHE_BYTES
    ):
        super().__init__(size, name)
        self._head = b""
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[int, bytes] = OrderedDict()  # start -> bytes, least recently used first
        self._cached = 0
        self._cache_lock = threading.Lock()
        self.extend(min(size, first_read))

    def fetch(self, offset: int, nbytes: int) -> bytes:
        """``nbytes`` bytes from ``offset`` (exactly, unless the file ends first)."""
        raise NotImplementedError

    def _fetch(self, offset: int, nbytes: int) -> bytes:
        data = self.fetch(offset, nbytes)
        self.requests += 1
        self.bytes_fetched += len(data)
        return data

    def _short_read(self, offset: int, nbytes: int, got: int) -> GGUFError:
        """The error for a read that returned ``got`` of ``nbytes`` bytes inside the size the file had when opened."""
        return GGUFTruncatedError(
            f"the file ended after {offset + got:,} bytes while {nbytes:,} were read from offset {offset:,}"
            f" ({self.size:,} bytes when it was opened: truncated meanwhile)",
            offset=offset + got,
            path=self.name,
            value=nbytes,
        )

    def header(self) -> Any:
        self._check_open()
        return self._head

    def complete(self) -> bool:
        return len(self._head) >= self.size

    def extend(self, want: int) -> bool:
        want = min(want, self.size)
        have = len(self._head)
        if want <= have:
            return False
        chunk = self._fetch(have, want - have)
        if len(chunk) != want - have:
            raise self._short_read(have, want - have, len(chunk))
        self._head = self._head + chunk  # a new buffer: views of the old one (lazy values) stay valid
        return True

    def _read(self, offset: int, nbytes: int) -> Any:
        end = offset + nbytes
        if end <= len(self._head):
            return memoryview(self._head)[offset:end]
        with self._cache_lock:
            for start, data in self._cache.items():
                if start <= offset and end <= start + len(data):
                    self._cache.move_to_end(start)
                    return memoryview(data)[offset - start : end - start]
        data = self._fetch(offset, nbytes)
        if len(data) != nbytes:
            raise self._short_read(offset, nbytes, len(data))
        if nbytes <= self.cache_bytes:
            with self._cache_lock:
                old = self._cache.pop(offset, None)
                self._cached += nbytes - (len(old) if old is not None else 0)
                self._cache[offset] = data
                while self._cached > self.cache_bytes:
                    _, dropped = self._cache.popitem(last=False)
                    self._cached -= len(dropped)
        return memoryview(data)

    def close(self) -> None:
        super().close()
        with self._cache_lock:
            self._cache.clear()
            self._cached = 0


class StreamSource(RangeSource):
    """A binary file object that is not a local file (``read``/``seek``/``tell``): ranged reads through it.

    An ``OSError`` of the stream (or a network error of an fsspec file object) is a
    :class:`~gguf_schema.errors.GGUFIOError` naming the stream.
    """

    def __init__(self, stream: IO[bytes], name: str | None = None):
        self._stream = stream
        self._lock = threading.Lock()
        try:
            here = stream.tell()
            size = stream.seek(0, io.SEEK_END)
            stream.seek(here)
        except Exception as e:
            raise self._error(e, name, None) from None
        super().__init__(size, name)

    def fetch(self, offset: int, nbytes: int) -> bytes:
        try:
            with self._lock:
                self._stream.seek(offset)
                data = self._stream.read(nbytes)
        except Exception as e:
            raise self._error(e, self.name, offset) from None
        return bytes(data) if not isinstance(data, bytes) else data

    @staticmethod
    def _error(e: Exception, name: str | None, offset: int | None) -> Exception:
        translated = io_error(e, name, offset)  # the one classifier of I/O and network errors
        return translated if translated is not None else e
