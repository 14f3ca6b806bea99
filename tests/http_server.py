"""A small HTTP file server on 127.0.0.1 for the remote-file tests: range requests, counters, misbehaviour on demand.

It serves bytes or local files under names (``server.add("m.gguf", data_or_path)`` gives the URL),
answers ``HEAD`` and ``GET`` with single ``Range: bytes=A-B`` requests (206 and ``Content-Range``),
and counts every request and every body byte it sends (``requests``, ``bytes_sent``, ``log``).
Each name can be told to misbehave (``server.behave(name, ...)``):

* ``ranges=False``: ignore ``Range`` and answer 200 with the whole file (``accept_ranges`` says what
  ``Accept-Ranges`` to announce: ``None`` for nothing, ``"none"``);
* ``fail=[503, 503]``: answer these statuses to the next requests, one each, before behaving;
* ``delay=S``: wait S seconds before answering;
* ``shrink_to=N, after=K``: after K requests for the name, serve only the first N bytes (the file
  got shorter while a client had it open);
* ``require=("X-Token", "secret")``: answer 401 to a request without that header.

A name that was never added is a 404.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass
class Behaviour:
    ranges: bool = True
    accept_ranges: str | None = "bytes"
    fail: list[int] = field(default_factory=list)
    delay: float = 0.0
    shrink_to: int | None = None
    after: int = 0
    require: tuple[str, str] | None = None
    seen: int = 0


@dataclass
class Entry:
    """One request: method, name, Range header, status, body bytes sent."""

    method: str
    name: str
    range: str | None
    status: int
    sent: int


class FileServer:
    """See the module docstring. Use as a context manager (it stops its thread on exit)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes | Path] = {}
        self.behaviour: dict[str, Behaviour] = {}
        self.log: list[Entry] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body leave at once, not 40 ms apart

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                server._answer(self, head=True)

            def do_GET(self) -> None:
                server._answer(self, head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="test-http", daemon=True)

    # ---------------------------------------------------------------- set-up

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def add(self, name: str, data: bytes | Path) -> str:
        """Serve ``data`` (bytes, or a local file read on demand) under ``name``; returns its URL."""
        self.files[name] = data
        self.behaviour[name] = Behaviour()
        return self.url(name)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def behave(self, name: str, **kw: Any) -> None:
        """Make ``name`` misbehave (see the module docstring); ``behave(name)`` restores good manners."""
        self.behaviour[name] = Behaviour(**kw)

    def reset(self) -> None:
        """Forget the counted requests."""
        with self._lock:
            self.log.clear()

    # ---------------------------------------------------------------- counters

    def entries(self, name: str | None = None) -> list[Entry]:
        with self._lock:
            return [e for e in self.log if name is None or e.name == name]

    def requests(self, name: str | None = None) -> int:
        return len(self.entries(name))

    def bytes_sent(self, name: str | None = None) -> int:
        return sum(e.sent for e in self.entries(name))

    # ---------------------------------------------------------------- serving

    def _content(self, name: str, start: int, end: int) -> bytes:
        data = self.files[name]
        if isinstance(data, bytes):
            return data[start:end]
        with open(data, "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    def _size(self, name: str) -> int:
        data = self.files[name]
        return len(data) if isinstance(data, bytes) else data.stat().st_size

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        name = h.path.lstrip("/").split("?", 1)[0]
        wanted = h.headers.get("Range")
        # counted before anything is sent: a client that has the answer sees it in the log
        entry = Entry(h.command, name, wanted, 0, 0)
        with self._lock:
            self.log.append(entry)
        try:
            if name not in self.files:
                self._empty(h, entry, 404)
                return
            b = self.behaviour[name]
            with self._lock:
                b.seen += 1
                seen = b.seen
                failing = b.fail.pop(0) if b.fail else None
            if b.delay:
                time.sleep(b.delay)
            if failing is None and b.require is not None and h.headers.get(b.require[0]) != b.require[1]:
                failing = 401
            if failing is not None:
                self._empty(h, entry, failing)
                return
            size = self._size(name)
            if b.shrink_to is not None and seen > b.after:
                size = min(size, b.shrink_to)
            start, end = 0, size
            m = _RANGE.match(wanted or "") if b.ranges else None
            if m and (m.group(1) or m.group(2)):
                if m.group(1):
                    start = int(m.group(1))
                    end = min(size, int(m.group(2)) + 1) if m.group(2) else size
                else:  # the last N bytes
                    start = max(0, size - int(m.group(2)))
                if start >= size:
                    self._empty(h, entry, 416, {"Content-Range": f"bytes */{size}"})
                    return
                entry.status = 206
                h.send_response(206)
                h.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            else:
                entry.status = 200
                h.send_response(200)
            h.send_header("Content-Type", "application/octet-stream")
            h.send_header("Content-Length", str(end - start))
            if b.accept_ranges is not None:
                h.send_header("Accept-Ranges", b.accept_ranges)
            h.end_headers()
            if head:
                return
            pos = start
            while pos < end:
                chunk = self._content(name, pos, min(end, pos + 2**20))
                entry.sent += len(chunk)
                h.wfile.write(chunk)
                pos += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True  # the client stopped reading: fine

    @staticmethod
    def _empty(h: BaseHTTPRequestHandler, entry: Entry, status: int, headers: dict[str, str] | None = None) -> None:
        entry.status = status
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", "0")
        h.end_headers()
