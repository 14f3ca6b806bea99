"""Where the bytes come from: sources of a file's bytes, and the bounded reader the schema parses from.

A :class:`Source` owns access to one file's bytes, wherever they are, behind one small interface:

* :meth:`Source.header` -- a contiguous buffer of the first bytes of the file, for the parser
  (:class:`ByteReader` over it); :meth:`Source.extend` makes it longer when the parser needs more;
* :meth:`Source.view` -- the bytes ``[offset, offset + n)``, for tensor data: a zero-copy view of
  the map, or a copy read at that position; a range past the end of the file is a
  :class:`~gguf_schema.errors.GGUFTruncatedError`;
* ``size``, ``name``, :meth:`Source.fileno`, :meth:`Source.close`.

Kinds of source, chosen by :func:`open_source`:

* :class:`MappedSource` -- a local file mapped read-only (the default): views are zero-copy and
  stay valid after the file is closed. A mapped file that another process truncates makes the next
  access to a vanished page kill the process (SIGBUS): every view is checked against the file's
  current size first, which turns the common case into a clean error; ``mmap=False`` avoids mapping.
* :class:`PositionedSource` -- a local file read with positioned reads (``mmap=False``): the header
  is read once into memory, tensor data by ``os.pread`` with the size checked each time; nothing a
  concurrent writer does can kill the reader.
* :class:`BufferSource` -- bytes already in memory.
* :class:`RangeSource` -- a file reached by ranged reads (a file object that is not a local file;
  remote files, see :mod:`gguf_schema.format.remote`): the header is fetched in growing reads, tensor
  data on demand.

The schema parses from a :class:`ByteReader`. It never hands out more bytes than the buffer
holds, so a claimed length of 2**60 costs nothing before it fails, and its numpy-backed nodes
slice the underlying buffer directly instead of copying through ``read``.

>>> r = ByteReader(b"GGUF\\x03\\x00\\x00\\x00")
>>> r.read(4), r.tell(), r.remaining
(b'GGUF', 4, 4)
>>> r.read(100)  # never more than is there
b'\\x03\\x00\\x00\\x00'
>>> with open_source(b"GGUF\\x03\\x00\\x00\\x00") as s:
...     s.size, bytes(s.view(4, 4))
(8, b'\\x03\\x00\\x00\\x00')
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
from typing import IO, Any, Union

from ..errors import GGUFError, GGUFTruncatedError, os_error

__all__ = [
    "BufferSource",
    "ByteReader",
    "MappedSource",
    "PositionedSource",
    "RangeSource",
    "Source",
    "SourceLike",
    "open_source",
]

SourceLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]


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

    def close(self) -> None:
        if self._map is not None:
            with contextlib.suppress(BufferError):  # views still use it: they keep it alive
                self._map.close()
            self._map = None
        self._data = b""
        super().close()


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
        assert fd is not None
        data = os.pread(fd, nbytes, offset)
        if len(data) != nbytes:  # truncated between the size check and the read
            self._check_range(offset + len(data), nbytes - len(data))
        return data


class RangeSource(Source):
    """A file reached by ranged reads (``fetch(offset, n) -> bytes``): the header is fetched in
    growing reads, tensor data on demand. Views are copies.

    ``first_read`` bytes are fetched at once; :meth:`extend` grows the header by at least half of
    what it holds, so a header of any size takes a few reads.
    """

    def __init__(self, size: int, name: str | None = None, *, first_read: int = FIRST_READ):
        super().__init__(size, name)
        self._head = b""
        self.requests = 0
        self.bytes_fetched = 0
        self.extend(min(size, first_read))

    def fetch(self, offset: int, nbytes: int) -> bytes:
        """``nbytes`` bytes from ``offset`` (exactly, unless the file ends first)."""
        raise NotImplementedError

    def _fetch(self, offset: int, nbytes: int) -> bytes:
        data = self.fetch(offset, nbytes)
        self.requests += 1
        self.bytes_fetched += len(data)
        return data

    def header(self) -> Any:
        self._check_open()
        return self._head

    def complete(self) -> bool:
        return len(self._head) >= self.size

    def extend(self, want: int) -> bool:
        want = min(want, self.size)
        if want <= len(self._head):
            return False
        chunk = self._fetch(len(self._head), want - len(self._head))
        self._head = self._head + chunk  # a new buffer: views of the old one (lazy values) stay valid
        return bool(chunk)

    def _read(self, offset: int, nbytes: int) -> Any:
        if offset + nbytes <= len(self._head):
            return memoryview(self._head)[offset : offset + nbytes]
        data = self._fetch(offset, nbytes)
        if len(data) != nbytes:
            raise GGUFTruncatedError(
                f"the file ended after {offset + len(data):,} bytes while {nbytes:,} were read from offset {offset:,}",
                offset=offset + len(data),
                path=self.name,
                value=nbytes,
            )
        return data


class StreamSource(RangeSource):
    """A binary file object that is not a local file (``read``/``seek``/``tell``): ranged reads through it."""

    def __init__(self, stream: IO[bytes], name: str | None = None):
        self._stream = stream
        here = stream.tell()
        size = stream.seek(0, io.SEEK_END)
        stream.seek(here)
        super().__init__(size, name)

    def fetch(self, offset: int, nbytes: int) -> bytes:
        self._stream.seek(offset)
        data = self._stream.read(nbytes)
        return bytes(data) if not isinstance(data, bytes) else data


def open_source(src: SourceLike | Source, *, mmap: bool = True) -> Source:
    """The :class:`Source` for a path, bytes-like object or binary file object.

    A path (or a file object with a real descriptor) is mapped read-only, or read with positioned
    reads when ``mmap=False``; bytes-like objects are used as they are; other file objects are read
    in ranges. OS errors are :class:`~gguf_schema.errors.GGUFIOError` s (a missing path is a
    :class:`~gguf_schema.errors.GGUFFileNotFoundError`, also a ``FileNotFoundError``).
    """
    if isinstance(src, Source):
        return src
    local = MappedSource if mmap else PositionedSource
    if isinstance(src, (str, os.PathLike)):
        name = os.fspath(src)
        fh: IO[bytes] | None = None
        try:
            fh = open(name, "rb")  # noqa: SIM115 - the source owns and closes it
            return local(fh, name, owned=True)
        except OSError as e:
            if fh is not None:
                fh.close()
            raise os_error(e, name) from None
    if isinstance(src, (bytes, bytearray, memoryview)):
        return BufferSource(src)
    if hasattr(src, "read") and hasattr(src, "seek"):
        given = getattr(src, "name", None)
        stream_name = given if isinstance(given, str) else None
        try:
            src.fileno()
        except (OSError, AttributeError, io.UnsupportedOperation, ValueError):
            return StreamSource(src, stream_name)
        try:
            return local(src, stream_name, owned=False)
        except OSError as e:
            raise os_error(e, stream_name) from None
    raise TypeError(f"cannot read GGUF from a {type(src).__name__}: pass a path, bytes or a binary file object")
