"""Where the bytes come from: a bounded, random-access reader over an mmap, bytes or a file object.

The schema parses from a :class:`ByteReader`. It never hands out more bytes than the buffer
holds, so a claimed length of 2**60 costs nothing before it fails, and its numpy-backed nodes
slice the underlying buffer directly instead of copying through ``read``.

>>> r = ByteReader(b"GGUF\\x03\\x00\\x00\\x00")
>>> r.read(4), r.tell(), r.remaining
(b'GGUF', 4, 4)
>>> r.read(100)  # never more than is there
b'\\x03\\x00\\x00\\x00'
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
from typing import IO, Any, Union

from ..errors import os_error

__all__ = ["ByteReader", "Source", "SourceLike"]

SourceLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]


class ByteReader:
    """A read-only stream over a buffer (bytes or mmap) with ``read``/``seek``/``tell``.

    Attributes:
        data: the underlying buffer (slicing it gives ``bytes``).
        pos: the current position.
        size: the buffer's length.
    """

    __slots__ = ("data", "last", "pos", "size")

    def __init__(self, data: bytes | mmap.mmap, pos: int = 0):
        self.data = data
        self.size = len(data)
        self.pos = pos
        self.last = pos  # where the latest read started: the offset an error names

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def read(self, n: int | None = -1) -> bytes:
        start = self.last = self.pos
        end = self.size if n is None or n < 0 else min(start + n, self.size)
        self.pos = end
        return self.data[start:end]

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
    """Owns the buffer a file is read from, and closes it (the mmap and the file) when asked.

    A path or a file object with a real file descriptor is memory-mapped read-only; bytes-like
    objects are used as they are; other file objects are read whole.
    """

    def __init__(self, src: SourceLike):
        self.name: str | None = None
        self._file: IO[bytes] | None = None
        self._mmap: mmap.mmap | None = None
        data: Any
        if isinstance(src, (str, os.PathLike)):
            self.name = os.fspath(src)
            try:
                self._file = builtin_open(self.name, "rb")
                data = self._map(self._file)
            except OSError as e:
                if self._file is not None:
                    self._file.close()
                raise os_error(e, self.name) from None
        elif isinstance(src, (bytes, bytearray, memoryview)):
            data = bytes(src) if not isinstance(src, bytes) else src
        elif hasattr(src, "read"):
            self.name = getattr(src, "name", None) if isinstance(getattr(src, "name", None), str) else None
            data = None
            try:
                src.fileno()
                data = self._map(src)
            except (OSError, AttributeError, io.UnsupportedOperation, ValueError):
                data = src.read()
                if not isinstance(data, bytes):
                    data = bytes(data)
        else:
            raise TypeError(f"cannot read GGUF from a {type(src).__name__}: pass a path, bytes or a binary file object")
        self.data: bytes | mmap.mmap = data

    def _map(self, f: IO[bytes]) -> bytes | mmap.mmap:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._mmap

    def fileno(self) -> int | None:
        """The descriptor of the open file behind the map, if there is one."""
        return self._file.fileno() if self._file is not None and not self._file.closed else None

    def reader(self, pos: int = 0) -> ByteReader:
        return ByteReader(self.data, pos)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def closed(self) -> bool:
        return self.data is None

    def close(self) -> None:
        """Release the map and the file. Numpy views of the map taken before stay valid: then the
        map is left to them (freed when the last one goes)."""
        if self._mmap is not None:
            with contextlib.suppress(BufferError):  # views still use it
                self._mmap.close()
            self._mmap = None
        if self._file is not None:
            self._file.close()
            self._file = None
        self.data = None  # type: ignore[assignment]


builtin_open = open
