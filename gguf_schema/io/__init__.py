"""Where a file's bytes come from: the I/O layer under the spec.

This layer knows nothing of GGUF: it hands bytes to :mod:`gguf_schema.format`, which interprets
them. It sits below ``format`` (the schema's nodes read from its :class:`~gguf_schema.io.source.ByteReader`)
and above ``errors`` only.

| module | owns |
|---|---|
| ``source.py`` | ``Source`` (a memory map, a buffer, positioned reads, ranged reads with a bounded cache) and ``ByteReader`` (bounded reads) |
| ``remote.py`` | URLs: ``RemoteSource`` (ranged reads through fsspec, the optional ``remote`` extra), retries |
| ``opening.py`` | ``open_source``: the ``Source`` for a path, URL, buffer or file object (above ``source`` and ``remote``, so neither imports the other back) |
| ``ioerrors.py`` | the one classifier of what reading raised (OS, fsspec, aiohttp errors) into ``GGUFIOError`` subclasses |
"""

from __future__ import annotations

import os
from typing import Union

__all__ = ["PathLike"]

#: a local path as every function that takes one accepts it: a string or an ``os.PathLike`` of a string
PathLike = Union[str, "os.PathLike[str]"]
