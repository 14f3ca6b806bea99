"""ggml's own GGUF reader, loaded with ctypes from a shared library the user names, run in a capped child.

This module owns the ggml side of ``ggml_diff.py``. It loads ``libggml-base.so`` from the path
given on the command line (nothing of ggml is part of this project) and calls its public C API
(``gguf.h``): ``gguf_init_from_file``, then ``gguf_get_data_offset``, ``gguf_get_alignment``,
``gguf_get_n_tensors``, ``gguf_get_tensor_offset`` ... Each load runs in a forked child under a
time cap and an address-space cap (:mod:`capped`), because ggml may abort (``GGML_ASSERT``) or
crash on hostile input; that is recorded as the verdict ``crash``.

Two loads are made, as ggml's users make them:

``meta``
    ``no_alloc = true`` with a ``ggml_context`` out-parameter: tensor infos and metadata only,
    the way llama.cpp's model loader opens a file before it maps the data.
``full``
    ``no_alloc = false``: the data section (the sum of the padded tensor sizes) is read into
    memory too, so a file that ends before the padding after its last tensor is rejected. This
    is the verdict the ``ggml`` validation profile models. It runs only when ``meta`` accepts
    (every check of ``meta`` comes first in ``full``).

When ``meta`` accepts, the data offset, the alignment and every tensor's offset are recorded, so
the harness can tell whether ggml would read the data where we do.
"""

from __future__ import annotations

import ctypes
import os
import re
import time
from array import array
from dataclasses import dataclass
from typing import Any

from capped import ChildResult, hwm_kb, reset_hwm, run_capped

__all__ = ["GGMLLib", "GGMLVerdict", "ggml_verdict", "normalize_reason"]


class _InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(ctypes.c_void_p))]


class GGMLLib:
    """ctypes handle on the GGUF functions of a ``libggml-base`` shared library."""

    def __init__(self, path: str):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no ggml library at {path!r} (give --ggml-lib PATH to a libggml-base.so)")
        lib = ctypes.CDLL(os.path.abspath(path))
        vp, i64, sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
        sigs = {
            "gguf_init_from_file": (vp, [ctypes.c_char_p, _InitParams]),
            "gguf_free": (None, [vp]),
            "ggml_free": (None, [vp]),
            "gguf_get_version": (ctypes.c_uint32, [vp]),
            "gguf_get_alignment": (sz, [vp]),
            "gguf_get_data_offset": (sz, [vp]),
            "gguf_get_n_kv": (i64, [vp]),
            "gguf_get_n_tensors": (i64, [vp]),
            "gguf_get_tensor_offset": (sz, [vp, i64]),
            "gguf_get_tensor_size": (sz, [vp, i64]),
        }
        for name, (res, args) in sigs.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.lib = lib
        self.path = path

    def load(self, path: str, no_alloc: bool) -> tuple[int | None, int | None]:
        """``gguf_init_from_file`` (call it in a child: it may abort). Returns (gguf ctx, ggml ctx) or (None, None)."""
        mctx = ctypes.c_void_p()
        ctx = self.lib.gguf_init_from_file(os.fsencode(path), _InitParams(no_alloc, ctypes.pointer(mctx)))
        return (ctx, mctx.value) if ctx else (None, None)

    def describe(self, ctx: int) -> tuple[dict[str, Any], array]:
        """Layout facts of an accepted file, and the tensor offsets (relative to the data section)."""
        lib = self.lib
        n = lib.gguf_get_n_tensors(ctx)
        offsets = array("Q", (lib.gguf_get_tensor_offset(ctx, i) for i in range(n)))
        return {
            "version": lib.gguf_get_version(ctx),
            "alignment": lib.gguf_get_alignment(ctx),
            "data_offset": lib.gguf_get_data_offset(ctx),
            "n_kv": lib.gguf_get_n_kv(ctx),
            "n_tensors": n,
        }, offsets

    def free(self, ctx: int | None, mctx: int | None) -> None:
        if ctx:
            self.lib.gguf_free(ctx)
        if mctx:
            self.lib.ggml_free(mctx)


@dataclass
class GGMLVerdict:
    """ggml's verdict on one file.

    Attributes:
        meta: ``accept``, ``reject``, ``crash`` or ``timeout`` of the metadata-only load.
        full: the same for the full load (None when ``meta`` did not accept: it is then the same).
        meta_seconds / full_seconds: time of each load inside the child.
        rss_mb: peak RSS of the children (MiB, what they inherited at fork included).
        reason: ggml's first log line, numbers and quoted names kept (what it said, for the report).
        layout: ``version``, ``alignment``, ``data_offset``, ``n_kv``, ``n_tensors`` when ``meta`` accepted.
        offsets_path: file holding the tensor offsets (uint64, native order) when ``meta`` accepted.
    """

    meta: str
    full: str | None
    meta_seconds: float
    full_seconds: float | None
    rss_mb: float
    reason: str
    layout: dict[str, Any] | None
    offsets_path: str | None

    @property
    def verdict(self) -> str:
        """The full-load verdict (``meta``'s when the full load did not run)."""
        return self.full if self.full is not None else self.meta

    def to_dict(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "full": self.full,
            "verdict": self.verdict,
            "meta_s": round(self.meta_seconds, 4),
            "full_s": None if self.full_seconds is None else round(self.full_seconds, 4),
            "rss_mb": round(self.rss_mb, 1),
            "reason": self.reason,
            "layout": self.layout,
        }


def _outcome(child: ChildResult, mode: str) -> tuple[str, float, dict[str, Any] | None]:
    rec = next((r for r in child.records if r.get("mode") == mode), None)
    if child.timed_out:
        return "timeout", child.seconds, None
    if rec is None:
        return "crash", child.seconds, None
    return ("accept" if rec["ok"] else "reject"), rec["seconds"], rec.get("layout")


def ggml_verdict(lib: GGMLLib, path: str, *, timeout: float, mem_cap: int, workdir: str) -> GGMLVerdict:
    """Load ``path`` with ggml (``meta``, then ``full`` when ``meta`` accepts), each in its own capped child."""
    log = os.path.join(workdir, "ggml_stderr.txt")
    offsets_path = os.path.join(workdir, "ggml_offsets.bin")
    if os.path.exists(offsets_path):
        os.unlink(offsets_path)

    def meta(emit):
        reset_hwm()
        t0 = time.perf_counter()
        ctx, mctx = lib.load(path, no_alloc=True)
        dt = time.perf_counter() - t0
        if ctx is None:
            emit({"mode": "meta", "ok": False, "seconds": dt, "hwm_kb": hwm_kb()})
            return
        layout, offsets = lib.describe(ctx)
        with open(offsets_path, "wb") as fh:
            offsets.tofile(fh)
        emit({"mode": "meta", "ok": True, "seconds": dt, "hwm_kb": hwm_kb(), "layout": layout})
        lib.free(ctx, mctx)

    def full(emit):
        reset_hwm()
        t0 = time.perf_counter()
        ctx, _mctx = lib.load(path, no_alloc=False)
        emit({"mode": "full", "ok": ctx is not None, "seconds": time.perf_counter() - t0, "hwm_kb": hwm_kb()})

    env = {"GGML_NO_BACKTRACE": "1"}  # an abort must not start a debugger
    child = run_capped(meta, timeout=timeout, mem_cap=mem_cap, stderr_path=log, env=env)
    m, m_s, layout = _outcome(child, "meta")
    reason = _first_line(child.stderr_head())
    rss = child.maxrss_kb
    f = f_s = None
    if m == "accept":
        log_full = log + ".full"
        child = run_capped(full, timeout=timeout, mem_cap=mem_cap, stderr_path=log_full, env=env)
        f, f_s, _ = _outcome(child, "full")
        if f != "accept":
            reason = _first_line(child.stderr_head()) or reason
        rss = max(rss, child.maxrss_kb)
    if m in ("crash", "timeout") or f in ("crash", "timeout"):
        reason = reason or (child.status if not child.timed_out else f"no answer in {timeout:g} s")
    return GGMLVerdict(m, f, m_s, f_s, rss / 1024, reason, layout, offsets_path if m == "accept" else None)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("Behavior may be unexpected"):
            return line[:300]
    return ""


_QUOTED = re.compile(r"'[^']*'")
_NUMBER = re.compile(r"\d+")


def normalize_reason(reason: str) -> str:
    """ggml's log line with quoted names and numbers blanked: groups one kind of rejection.

    >>> normalize_reason("gguf_init_from_reader: tensor 'blk.0.w' has invalid ggml type 256. should be in [0, 43)")
    "gguf_init_from_reader: tensor '…' has invalid ggml type N. should be in [N, N)"
    """
    return _NUMBER.sub("N", _QUOTED.sub("'…'", reason))[:160]
