"""Opening: the :class:`~.source.Source` for whatever a caller passes as a file.

:func:`open_source` chooses among the sources of :mod:`.source` (a mapped or positioned local
file, bytes in memory, a file object read in ranges) and, for a URL, the
:class:`~.remote.RemoteSource` of :mod:`.remote`. It sits above both, so that :mod:`.remote` can
build on :mod:`.source` without :mod:`.source` importing it back.

>>> with open_source(b"GGUF\\x03\\x00\\x00\\x00") as s:
...     type(s).__name__, s.size, bytes(s.view(4, 4))
('BufferSource', 8, b'\\x03\\x00\\x00\\x00')
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import IO, Any

from ..errors import os_error
from .source import (
    BufferSource,
    MappedSource,
    PositionedSource,
    Source,
    SourceLike,
    StreamSource,
    is_url,
)

__all__ = ["open_source"]


def open_source(
    src: SourceLike | Source, *, mmap: bool = True, storage_options: Mapping[str, Any] | None = None
) -> Source:
    """The :class:`Source` for a path, URL, bytes-like object or binary file object.

    A path (or a file object with a real descriptor) is mapped read-only, or read with positioned
    reads when ``mmap=False``; a URL (:func:`is_url`) is read in ranges through fsspec
    (:class:`~gguf_schema.io.remote.RemoteSource`, given ``storage_options``: credentials,
    endpoints; ignored for anything that is not a URL); bytes-like objects are used as they are;
    other file objects (``read``/``seek``/``tell`` and no descriptor) are read in ranges. OS errors
    are :class:`~gguf_schema.errors.GGUFIOError` s (a missing path is a
    :class:`~gguf_schema.errors.GGUFFileNotFoundError`, also a ``FileNotFoundError``).
    """
    if isinstance(src, Source):
        return src
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    if is_url(src):
        from .remote import RemoteSource  # fsspec is imported only for URLs

        return RemoteSource(src, storage_options)
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
    if hasattr(src, "read") and hasattr(src, "seek") and hasattr(src, "tell"):
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
    raise TypeError(f"cannot read GGUF from a {type(src).__name__}: pass a path, a URL, bytes or a binary file object")
