"""I/O and network errors as ours: the one classifier of what reading a file or URL raised.

:func:`io_error` turns an ``OSError``, an fsspec error or an aiohttp error (possibly wrapped, as
fsspec wraps them) into the matching :class:`~gguf_schema.errors.GGUFIOError` subclass, with the
path or URL and the offset being read. Local streams (:mod:`.source`) and remote files
(:mod:`.remote`) both use it; it imports neither aiohttp nor asyncio, and recognises their
exceptions only once they are imported (they can come from nowhere else).
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import (
    GGUFConnectionError,
    GGUFFileNotFoundError,
    GGUFIOError,
    GGUFPermissionError,
    GGUFRemoteError,
    GGUFTimeoutError,
    os_error,
    shorten,
)

__all__ = ["describe", "io_error"]


def _chain(e: BaseException) -> list[BaseException]:
    """``e`` and the exceptions behind it (``__cause__``, else ``__context__``), outermost first."""
    out: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and cur not in out and len(out) < 16:
        out.append(cur)
        cur = cur.__cause__ if cur.__cause__ is not None else (None if cur.__suppress_context__ else cur.__context__)
    return out


def describe(e: BaseException) -> str:
    """``Type: message`` of an exception, the message shortened to 160 characters."""
    text = str(e)
    return f"{type(e).__name__}: {shorten(text, 160) if len(text) > 160 else text}" if text else type(e).__name__


def io_error(e: BaseException, url: str | None, offset: int | None = None, suffix: str = "") -> GGUFIOError | None:
    """The :class:`~gguf_schema.errors.GGUFIOError` for an exception raised while reading ``url``
    (an OS, fsspec or aiohttp error, possibly wrapped by fsspec), or None if it is none of those;
    ``suffix`` ends its message (e.g. how many attempts were made).

    The exception furthest down the chain that says what happened decides: fsspec reports a
    refused connection while asking for a file's size as a ``FileNotFoundError`` raised from
    aiohttp's connection error, which is a :class:`~gguf_schema.errors.GGUFConnectionError` here.

    >>> io_error(ConnectionRefusedError(111, "Connection refused"), "http://127.0.0.1:9/m.gguf").__class__.__name__
    'GGUFConnectionError'
    >>> io_error(FileNotFoundError("s3://b/m.gguf"), "s3://b/m.gguf").__class__.__name__
    'GGUFFileNotFoundError'
    >>> io_error(KeyError("x"), "memory://m.gguf") is None
    True
    """
    if isinstance(e, GGUFIOError):
        return e
    aiohttp = sys.modules.get("aiohttp")  # its errors can only come from it once it is imported
    chain = _chain(e)
    for classify in (_network, _local):  # what the network says first (a DNS failure is an OSError inside)
        for inner in reversed(chain):
            found = classify(inner, aiohttp, {"path": url, "offset": offset}, suffix)
            if found is not None:
                return found
    return None


def _network(e: BaseException, aiohttp: Any, where: dict[str, Any], suffix: str) -> GGUFIOError | None:
    if aiohttp is not None and isinstance(e, aiohttp.ClientResponseError):
        status = int(e.status)
        words = f"HTTP {status}" + (f" {e.message}" if e.message else "")
        if status in (404, 410):
            return GGUFFileNotFoundError(f"no file at this URL ({words}){suffix}", **where)
        if status in (401, 403, 407):
            return GGUFPermissionError(
                f"access refused ({words}): check the credentials (storage_options){suffix}", **where
            )
        return GGUFRemoteError(f"the server answered {words}{suffix}", status=status, **where)
    asyncio = sys.modules.get("asyncio")  # its TimeoutError (not the builtin's before 3.11) needs it imported
    if isinstance(e, TimeoutError) or (asyncio is not None and isinstance(e, asyncio.TimeoutError)):
        return GGUFTimeoutError(f"the server did not answer in time ({describe(e)}){suffix}", **where)
    if isinstance(e, ConnectionError) or (
        aiohttp is not None and isinstance(e, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError))
    ):
        return GGUFConnectionError(f"cannot reach the server, or the connection broke ({describe(e)}){suffix}", **where)
    if aiohttp is not None and isinstance(e, aiohttp.ClientError):
        return GGUFRemoteError(f"the request failed ({describe(e)}){suffix}", **where)
    return None


def _local(e: BaseException, aiohttp: Any, where: dict[str, Any], suffix: str) -> GGUFIOError | None:
    if isinstance(e, FileNotFoundError):
        return GGUFFileNotFoundError(f"no such file{suffix}", **where)
    if isinstance(e, OSError):
        base = os_error(e, where["path"])
        return type(base)(base.reason + suffix, errno=base.errno, **where)
    return None
