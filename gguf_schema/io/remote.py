"""Remote files: a GGUF file behind a URL, read in ranges through fsspec (:class:`RemoteSource`).

Any string with a scheme is a URL (:func:`~gguf_schema.io.source.is_url`): ``https://``,
``hf://`` (with ``huggingface_hub``), ``s3://`` (``s3fs``), ``gs://`` (``gcsfs``), ``file://``,
``memory://`` ... -- whatever fsspec has a backend for. fsspec and its HTTP client aiohttp are an
optional extra (``pip install 'gguf-schema[remote]'``); without them a URL raises a
:class:`~gguf_schema.errors.GGUFDependencyError` saying so. ``storage_options`` go to fsspec as
they are (credentials, endpoints, ``anon=True``, ``client_kwargs`` ...).

What opening a remote file costs: one request for its size (HTTP: ``HEAD``), then the header in
growing ranged reads (2 MiB first, then as much again each time the parse runs past the end of
what was fetched: :func:`gguf_schema.reader.read`), and nothing of the tensor data. A tensor's data,
``raw()`` or ``dequantize(rows=...)`` then fetches exactly the byte range it needs, in one
request; ranges up to ``cache_bytes`` (64 MiB by default) are kept in a least-recently-used cache.
Tensor views of a remote file are copies of the fetched bytes (read-only numpy arrays), not maps.

Failures are :class:`~gguf_schema.errors.GGUFIOError` s carrying the URL (``path``) and, for a
failed ranged read, its ``offset``; never a raw fsspec or aiohttp exception:

======================================  ====================================================
what happened                           error
======================================  ====================================================
no file there (HTTP 404, 410)           :class:`~gguf_schema.errors.GGUFFileNotFoundError`
access refused (HTTP 401, 403)          :class:`~gguf_schema.errors.GGUFPermissionError`
host unreachable, connection dropped    :class:`~gguf_schema.errors.GGUFConnectionError`
no answer in time (30 s; connect 10 s)  :class:`~gguf_schema.errors.GGUFTimeoutError`
other HTTP error status                 :class:`~gguf_schema.errors.GGUFRemoteError` (``status``)
the file got shorter after opening      :class:`~gguf_schema.errors.GGUFChangedError`
======================================  ====================================================

Connection errors, timeouts and the statuses 408, 425, 429, 500, 502, 503 and 504 are retried
``retries`` times (3 by default) after ``backoff``, twice as long each time (0.25 s, 0.5 s, 1 s,
each shortened by up to half at random so that many readers do not retry in step).

A server that ignores range requests (``Accept-Ranges: none``, or a full answer to a ranged
request) is read as one stream from the start of the file instead: the open still works, but
every read of tensor data downloads all the bytes before it. The source says so in
:attr:`RemoteSource.notes` (the command line prints them); the library never prints.

>>> import fsspec, io, numpy as np, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.name": "tiny"}, {"w": np.arange(4, dtype=np.float32)})
>>> fsspec.filesystem("memory").pipe_file("/doc/tiny.gguf", buf.getvalue())
>>> with gguf_schema.open("memory://doc/tiny.gguf") as f:
...     f.metadata["general.name"], f.tensors["w"].data.tolist(), f.storage.requests
('tiny', [0.0, 1.0, 2.0, 3.0], 2)
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..errors import (
    GGUFChangedError,
    GGUFConnectionError,
    GGUFDependencyError,
    GGUFError,
    GGUFIOError,
    GGUFRemoteError,
    GGUFTimeoutError,
    shorten,
)
from .ioerrors import describe, io_error
from .source import CACHE_BYTES, FIRST_READ, RangeSource

__all__ = ["BACKOFF", "RETRIES", "TIMEOUT", "RemoteSource", "url_filesystem"]

log = logging.getLogger(__name__)

#: retries of a request that failed for a reason that may pass (connection, timeout, 5xx, 429)
RETRIES = 3
#: seconds before the first retry; each further retry waits twice as long
BACKOFF = 0.25
#: seconds an HTTP(S) read may wait for the next bytes (a connection may take at most 10 s to open)
TIMEOUT = 30.0
_CONNECT = 10.0

_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_INSTALL = "pip install 'gguf-schema[remote]'"
_NO_RANGES = (
    "the server does not answer range requests: the file is read as one stream from its start "
    "(opening works; reading tensor data downloads every byte before it)"
)

T = TypeVar("T")

#: the package that gives fsspec its backend for a scheme (fsspec itself has http, file, memory ...)
_BACKENDS = {
    "hf": "huggingface_hub",
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
}


def url_filesystem(
    url: str, storage_options: Mapping[str, Any] | None = None, *, timeout: float | None = TIMEOUT
) -> Any:
    """The fsspec filesystem and path for ``url`` (``(fs, path)``), with ``storage_options``.

    For HTTP(S) a read ``timeout`` (seconds; at most 10 s to connect) is set unless ``storage_options`` give
    aiohttp's own (``client_kwargs={"timeout": aiohttp.ClientTimeout(...)}``). A missing fsspec,
    aiohttp or backend package is a :class:`~gguf_schema.errors.GGUFDependencyError`; a scheme
    fsspec has no backend for is a ``ValueError``.
    """
    try:
        import fsspec  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise GGUFDependencyError(
            f"reading a URL needs fsspec (and aiohttp for http/https): {_INSTALL}", name="fsspec"
        ) from None
    options = dict(storage_options or {})
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("http", "https") and timeout is not None:
        client = dict(options.get("client_kwargs") or {})
        if "timeout" not in client:
            try:
                import aiohttp
            except ImportError:
                raise GGUFDependencyError(
                    f"reading {scheme}:// URLs needs aiohttp: {_INSTALL}", name="aiohttp"
                ) from None
            client["timeout"] = aiohttp.ClientTimeout(
                total=None, sock_connect=min(timeout, _CONNECT), sock_read=timeout
            )
            options["client_kwargs"] = client
    try:
        return fsspec.core.url_to_fs(url, **options)
    except ImportError as e:
        if scheme in ("http", "https"):
            raise GGUFDependencyError(f"reading {scheme}:// URLs needs aiohttp: {_INSTALL}", name="aiohttp") from None
        package = _BACKENDS.get(scheme)
        raise GGUFDependencyError(
            f"reading {scheme}:// URLs needs fsspec's backend for them: pip install {package}"
            if package
            else f"reading {scheme}:// URLs needs a package that is not installed ({shorten(str(e), 200)})",
            name=package,
        ) from None
    except ValueError as e:
        if scheme not in fsspec.available_protocols():
            raise ValueError(f"fsspec has no backend for {scheme}:// URLs ({shorten(url)})") from None
        error = io_error(e, url)
        if error is None:
            raise ValueError(f"cannot use the URL {shorten(url)}: {shorten(str(e), 200)}") from None
        raise error from None
    except Exception as e:
        raise _as_io_error(e, url, None) from None


class RemoteSource(RangeSource):
    """A file behind a URL, read in ranges through fsspec (see the module docstring).

    Args:
        url: the file's URL.
        storage_options: passed to fsspec (``fsspec.core.url_to_fs(url, **storage_options)``).
        first_read: bytes fetched by the first read of the header.
        cache_bytes: the bound of the cache of fetched ranges.
        retries: how many times a request that failed for a passing reason is tried again.
        backoff: seconds before the first retry (doubling each time).
        timeout: seconds an HTTP(S) read may wait for data (and a connection to open, at most 10 s);
            no limit on a whole transfer, so a large tensor takes the time it takes.

    Attributes:
        url: the URL (also ``name``).
        requests: requests made (the size, each ranged read, each stream opened, each retry).
        bytes_fetched: bytes received.
        notes: what the caller should know about how the file is read (e.g. no range requests).
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        first_read: int = FIRST_READ,
        cache_bytes: int = CACHE_BYTES,
        retries: int = RETRIES,
        backoff: float = BACKOFF,
        timeout: float | None = TIMEOUT,
    ):
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, got {type(url).__name__}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative int, got {retries!r}")
        if not backoff >= 0:
            raise ValueError(f"backoff must be a non-negative number of seconds, got {backoff!r}")
        self.url = self.name = url
        self.retries = retries
        self.backoff = backoff
        self._lock = threading.Lock()
        self._file: Any = None
        self._stream: Any = None
        self._stream_pos = 0
        self._fs, self._path = url_filesystem(url, storage_options, timeout=timeout)
        self._http = any(p in ("http", "https") for p in _protocols(self._fs))
        info = self._retrying(lambda: self._counted(self._fs.info, self._path), None)
        if info.get("type") == "directory":
            raise GGUFIOError("the URL names a directory, not a file", path=url)
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            raise GGUFRemoteError("the server does not say how large the file is", path=url, value=size)
        self._ranges = info.get("partial", True) is not False
        if not self._ranges:
            self._note(_NO_RANGES)
        else:
            self._file = self._retrying(lambda: self._fs.open(self._path, "rb", cache_type="none", size=size), None)
        try:
            super().__init__(size, url, first_read=first_read, cache_bytes=cache_bytes)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ reading

    def fetch(self, offset: int, nbytes: int) -> bytes:
        if nbytes == 0:
            return b""
        with self._lock:
            if self._ranges:
                try:
                    self.requests += 1
                    self._file.seek(offset)
                    return bytes(self._file.read(nbytes))
                except ValueError:
                    # fsspec's HTTP file refuses a read past the start when the server answered a
                    # ranged request with the whole file: stream it instead
                    if not self._http or offset == 0 or self.closed:
                        raise
                self._ranges = False
                self._note(_NO_RANGES)
            return self._stream_read(offset, nbytes)

    def _stream_read(self, offset: int, nbytes: int) -> bytes:
        """``nbytes`` from ``offset`` of one plain download of the file, opened again only to go back
        (or after a failure: a retry starts a new download)."""
        try:
            if self._stream is None or offset < self._stream_pos:
                self._close_stream()
                self.requests += 1
                self._stream = self._fs.open(self._path, "rb", block_size=0, size=self.size)
                self._stream_pos = 0
            while self._stream_pos < offset:  # skip what comes before
                skipped = len(self._stream.read(min(offset - self._stream_pos, 2**20)))
                if not skipped:
                    return b""
                self._stream_pos += skipped
                self.bytes_fetched += skipped
            parts: list[bytes] = []
            got = 0
            while got < nbytes:
                part = self._stream.read(min(nbytes - got, 2**22))
                if not part:
                    break
                parts.append(bytes(part))
                got += len(part)
            self._stream_pos += got
            return b"".join(parts)
        except BaseException:
            self._close_stream()
            raise

    def _fetch(self, offset: int, nbytes: int) -> bytes:
        data = self._retrying(lambda: self.fetch(offset, nbytes), offset)
        self.bytes_fetched += len(data)
        return data

    def _counted(self, fn: Callable[..., T], *args: Any) -> T:
        self.requests += 1
        return fn(*args)

    def _retrying(self, attempt: Callable[[], T], offset: int | None) -> T:
        """``attempt()``, tried again after a passing failure (bounded, with backoff); errors become ours."""
        for n in range(self.retries + 1):
            try:
                return attempt()
            except GGUFError:
                raise
            except Exception as e:
                error = _as_io_error(e, self.url, offset)
                if n == self.retries or not _passing(error):
                    raise (_as_io_error(e, self.url, offset, f" (after {n + 1} attempts)") if n else error) from None
            time.sleep(self.backoff * 2**n * (0.5 + random.random() / 2))
        raise AssertionError("unreachable")  # pragma: no cover

    def _short_read(self, offset: int, nbytes: int, got: int) -> GGUFError:
        return GGUFChangedError(
            f"{got:,} of {nbytes:,} bytes came back from offset {offset:,}: the file is shorter than the "
            f"{self.size:,} bytes it had when it was opened (it changed meanwhile)",
            path=self.url,
            offset=offset + got,
            value=nbytes,
        )

    # ------------------------------------------------------------------ closing

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except Exception as e:  # a connection that is gone already: nothing left to release
                log.debug("closing the stream of %s: %r", self.url, e)

    def close(self) -> None:
        with self._lock:
            self._close_stream()
            f, self._file = self._file, None
            if f is not None:
                try:
                    f.close()
                except Exception as e:  # as above
                    log.debug("closing %s: %r", self.url, e)
        super().close()

    def __repr__(self) -> str:
        return f"RemoteSource({self.url!r}, {self.size:,} bytes, {self.requests} requests, {self.bytes_fetched:,} bytes fetched)"


def _protocols(fs: Any) -> tuple[str, ...]:
    p = getattr(fs, "protocol", ())
    return (p,) if isinstance(p, str) else tuple(p)


def _passing(error: GGUFIOError) -> bool:
    """Whether trying again may help."""
    if isinstance(error, (GGUFConnectionError, GGUFTimeoutError)):
        return True
    return isinstance(error, GGUFRemoteError) and error.status in _RETRY_STATUS


def _as_io_error(e: BaseException, url: str | None, offset: int | None, suffix: str = "") -> GGUFIOError:
    error = io_error(e, url, offset, suffix)
    return (
        error
        if error is not None
        else GGUFRemoteError(f"reading failed: {describe(e)}{suffix}", path=url, offset=offset)
    )
