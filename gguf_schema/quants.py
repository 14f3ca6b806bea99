"""Tensor data conversion: raw ggml bytes <-> float32 numpy arrays, for every ggml type.

This module owns the arithmetic of ggml's (de)quantizers. It reads block fields through the
layouts of :mod:`gguf_schema.blocks` (the single description of each block) and the grids of
:mod:`gguf_schema.quant_tables`; it never parses file structure.

* :func:`dequantize` -- raw bytes of a tensor (any type ggml can store, either byte order)
  to a float32 array, optionally for a range of rows only, in bounded working memory.
* :func:`quantize` -- float array to the raw bytes of a tensor, bit-exact with ggml's
  ``quantize_row_*_ref`` for the types in :data:`QUANTIZE_TYPES`.

Every computation is the same float32 operation, in the same order, as ggml's C reference
(``ggml-quants.c``), so results are identical to ggml's, bit for bit. Work is vectorised over
blocks; the few Python loops run over positions inside a block, never over blocks.

Two engines run the arithmetic. The numpy kernels below cover every type and are the
reference. Where the package was built with a C compiler, the optional module
``gguf_schema._kernels`` repeats the decoders of :data:`COMPILED_DEQUANTIZE` and the
quantizers of :data:`COMPILED_QUANTIZE` in compiled loops (same operations, same bits, at
memory speed and without the GIL, so threads run in parallel); ``engine="auto"`` (the
default) uses them when present, ``engine="numpy"`` never does.

>>> import numpy as np
>>> x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
>>> raw = quantize(x, GGMLType.Q8_0)
>>> raw.shape
(2, 34)
>>> y = dequantize(raw, GGMLType.Q8_0, (2, 32))
>>> float(abs(y - x).max()) < 0.005
True
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from .blocks import _as_uint8, _checked_type, block_dtype, byteswap
from .errors import GGUFFormatError
from .quant_tables import (
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
    KSIGNS_IQ2XS, KVALUES_IQ4NL, KVALUES_MXFP4,
)
from .types import GGMLType

try:
    from . import _kernels as _compiled
except ImportError:  # built without a C compiler: the numpy kernels do all the work
    _compiled = None

__all__ = ["dequantize", "quantize", "DEQUANTIZE_TYPES", "QUANTIZE_TYPES", "COMPILED_DEQUANTIZE",
           "COMPILED_QUANTIZE", "ENGINES"]

F32 = np.float32
_CHUNK_ELEMENTS = 1 << 18
"""Elements dequantized per step: the working set stays in the CPU's L2 cache."""
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _compiled_types(direction: int) -> frozenset[GGMLType]:
    """Types the compiled module handles in one direction (2: decode, 3: encode), keeping only
    those whose block geometry agrees with :mod:`gguf_schema.types`."""
    if _compiled is None:
        return frozenset()
    found = []
    for tid, entry in _compiled.layouts().items():
        t = GGMLType(tid)
        if entry[direction] and (entry[0], entry[1]) == (t.block_size, t.type_size):
            found.append(t)
    return frozenset(found)


COMPILED_DEQUANTIZE: frozenset[GGMLType] = _compiled_types(2)
"""Types whose decoder is compiled in this installation (empty if ``_kernels`` was not built)."""
COMPILED_QUANTIZE: frozenset[GGMLType] = _compiled_types(3)
"""Types whose quantizer is compiled in this installation (empty if ``_kernels`` was not built)."""
ENGINES = ("auto", "numpy", "compiled")
"""Values of the ``engine`` argument: compiled kernels where built, numpy only, compiled only."""

_PARALLEL_MIN_ELEMENTS = 1 << 22
"""With ``threads=None``, tensors smaller than this (16 MiB of float32) run on the calling thread:
below it, handing work to threads cost more than it gained here (benchmarks/bench_threads.py: a
1.3 M-element Q6_K tensor, median 2263 M elements/s on one thread, 1714 on two)."""
_MAX_AUTO_THREADS = 8


def _use_compiled(t: GGMLType, engine: str, available: frozenset[GGMLType]) -> bool:
    if engine == "auto":
        return t in available
    if engine == "numpy":
        return False
    if engine == "compiled":
        if t not in available:
            built = "not built in this installation" if _compiled is None else \
                f"built for {', '.join(sorted(x.name for x in available))}"
            raise GGUFFormatError(f"no compiled kernel for {t.name} (the compiled kernels are {built})")
        return True
    raise GGUFFormatError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _thread_count(threads: int | None, elements: int = 0, compiled: bool = False) -> int:
    """The number of worker threads: ``threads`` itself, or for ``None`` the CPU count when
    the compiled kernels run a large tensor (numpy holds the GIL too often to gain), else 1."""
    if threads is None:
        if not compiled or elements < _PARALLEL_MIN_ELEMENTS:
            return 1
        return max(1, min(_cpu_count(), _MAX_AUTO_THREADS))
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise GGUFFormatError(f"threads must be a positive int or None, got {threads!r}")
    return threads


_PAGE = 4096
_TASK_CHUNKS = 4
"""Chunks per pool task when the calling thread faults the result in ahead of the workers."""


def _run_chunks(starts: range, fn: Callable[[int], None], threads: int,
                fresh: np.ndarray | None = None, per_chunk: int = 0) -> None:
    """Call ``fn(start)`` for every chunk start; with threads > 1 the chunks go to a shared
    pool (each chunk writes its own slice of the output: same result).

    ``fresh``: the result array when it is newly allocated, ``per_chunk`` its elements per
    chunk (chunk k writes elements from k * per_chunk on). Then this thread touches each page of the result just before the chunks that
    write it are handed out, so that only one thread ever takes page faults. On this 2-vCPU
    VM (benchmarks/bench_threads.py, Q8_0, 15 runs) two threads each faulting their own half
    had worst runs of 135-161 M elements/s against medians of 1410-2202; faulting ahead kept
    the worst at 772-1052 for medians of 1565-1636.
    """
    global _POOL
    threads = min(threads, len(starts))
    if threads <= 1:
        for i in starts:
            fn(i)
        return
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < threads:  # noqa: SLF001
            _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gguf_schema.quants")
        pool = _POOL
    # contiguous runs of chunks per task: one run per thread, or short runs faulted in ahead
    per = _TASK_CHUNKS if fresh is not None else -(-len(starts) // threads)
    nbytes = per_chunk * fresh.itemsize if fresh is not None else 0  # bytes of result per chunk
    flat = fresh.reshape(-1).view(np.uint8) if fresh is not None else None

    def run_group(group: range) -> None:
        for i in group:
            fn(i)

    futures = []
    for k in range(0, len(starts), per):
        if flat is not None:
            flat[k * nbytes:(k + per) * nbytes:_PAGE] = 0
        futures.append(pool.submit(run_group, starts[k:k + per]))
    for f in futures:
        f.result()


# ----------------------------------------------------------------------------------------
# Design of the kernels: each one first builds the integer level of every element (an
# int8/uint8 array in final element order), then casts it to float32 and does ONE float32
# multiply by the per-(sub-)block scale, plus one subtraction (addition) for types with a
# min. The float operations are those of ggml's C code: ``(float)level * scale`` and
# ``scale * level - min``, so results are bit-identical.
#
# What makes numpy fast here (measured on 256k-element chunks):
# * every operation runs over long contiguous arrays: a field of the blocks is first copied
#   out as one void item per block (``_field``), and rows are placed the same way
#   (``_rows_into``); an operation on a (n, 16) slice of the blocks would run one short
#   inner loop per block, about ten times slower;
# * bit fields are cut in 64/16-bit lanes with a byte-replicated mask (x86 has no 8-bit
#   vector shift or multiply, so numpy does those one byte at a time);
# * look-ups fetch several levels at once (a grid row of 8 int8 as one uint64, four 4-bit
#   levels per 16-bit pair of bytes);
# * per-block scales are expanded with ``np.repeat`` so the multiply is contiguous too.

_BYTES = np.arange(256, dtype=np.uint8)


def _pack_rows(table: np.ndarray) -> np.ndarray:
    """(256, k) int8 table -> (256,) of k-byte words, so that one np.take yields k levels."""
    return np.ascontiguousarray(table.astype(np.int8)).view(f"<u{table.shape[1]}").reshape(256)


_BIT = np.unpackbits(_BYTES[:, None], axis=1, bitorder="little")  # (256, 8): bit k of byte
_Q1_WORDS = _pack_rows(2 * _BIT.astype(np.int8) - 1)  # Q1_0: bit set -> +1, else -1
_Q2_WORDS = _pack_rows(np.stack([(_BYTES >> s) & 3 for s in (0, 2, 4, 6)], axis=1).astype(np.int8) - 1)
_SIGN8_WORDS = _pack_rows(1 - 2 * _BIT.astype(np.int8))  # IQ: bit set -> negative
_SIGN7_WORDS = _SIGN8_WORDS[KSIGNS_IQ2XS]


def _grid_words(grid: np.ndarray, scale: int = 1) -> np.ndarray:
    g = (grid.astype(np.int16) * scale).astype(np.int8)
    return np.ascontiguousarray(g).view(f"<u{grid.shape[1]}").reshape(-1)


_IQ2XXS_WORDS = _grid_words(IQ2XXS_GRID)
_IQ2XS_WORDS = _grid_words(IQ2XS_GRID)
_IQ2S_WORDS = _grid_words(IQ2S_GRID)
_IQ3XXS_WORDS = _grid_words(IQ3XXS_GRID)
_IQ3S_WORDS = _grid_words(IQ3S_GRID)
# IQ1_S/IQ1_M: 8 * (coordinate + delta) = 8g + 1 for indices < 2048, 8g - 1 from 2048 on
# (index bit 11 is the delta's sign bit), an integer, so one look-up gives 8 exact levels.
_IQ1S_WORDS8 = np.concatenate([_grid_words(IQ1S_GRID * 8 + 1), _grid_words(IQ1S_GRID * 8 - 1)])


def _e8m0_half() -> np.ndarray:
    """ggml_e8m0_to_fp32_half for every byte: 2**(e-128) as float32 bits."""
    e = np.arange(256, dtype=np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32)
    return bits.view(F32)


def _ue4m3_half() -> np.ndarray:
    """ggml_ue4m3_to_fp32 for every byte: unsigned E4M3 (bias 7) times one half; 0x00, 0x7F -> 0."""
    x = np.arange(256)
    exp = (x >> 3) & 0xF
    man = (x & 7).astype(F32)
    raw = np.where(exp == 0, np.ldexp(man, -9), np.ldexp(F32(1) + man / F32(8), exp - 7)).astype(F32)
    raw = (raw * F32(0.5)).astype(F32)
    raw[(x == 0) | (x == 0x7F)] = 0
    return raw


_E8M0_HALF = _e8m0_half()
_UE4M3_HALF = _ue4m3_half()

# ----------------------------------------------------------------------------------------
# Field access. Kernels receive the blocks of a chunk as a (n, type_size) uint8 array and
# read each field by its ggml name through the block layout (offset and size from the dtype).


_FIELD_VIEWS: dict[tuple[GGMLType, str], np.dtype] = {}


def _field(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """The bytes of field ``name`` of every block: a contiguous (n, field_bytes) uint8 copy.

    The copy goes through a one-field void dtype, so numpy moves each block's field with one
    memcpy-like step over all blocks; byte-wise operations on a (n, k) slice of the blocks
    would instead run one short inner loop per block (about ten times slower).
    """
    key = (t, name)
    vdt = _FIELD_VIEWS.get(key)
    if vdt is None:
        sub, off = block_dtype(t).fields[name][:2]
        vdt = np.dtype({"names": ["f"], "formats": [f"V{sub.itemsize}"], "offsets": [off],
                        "itemsize": t.type_size})
        _FIELD_VIEWS[key] = vdt
    v = np.ascontiguousarray(q).reshape(-1).view(vdt)["f"]
    return np.ascontiguousarray(v).view(np.uint8).reshape(len(q), -1)


def _rows_into(out: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """Place part j (…, k) at out[…, j, :] for out (…, len(parts), k), all uint8/int8.

    Copies whole k-byte rows as void items (one fast strided copy per part).
    """
    k = out.shape[-1]
    dst = out.reshape(-1, len(parts) * k).view(f"V{k}")
    for j, p in enumerate(parts):
        dst[:, j] = np.ascontiguousarray(p).reshape(-1, k).view(f"V{k}")[:, 0]
    return out


def _half(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """A ``ggml_half`` field as float32, shape (n, 1)."""
    return _field(q, t, name).view("<f2").astype(F32)


def _u16(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    return _field(q, t, name).view("<u2")


_LANES = ((np.uint64, 0x0101010101010101), (np.uint32, 0x01010101), (np.uint16, 0x0101))


def _shr(a: np.ndarray, s: int, mask: int = 0xFF) -> np.ndarray:
    """Per byte ``(a >> s) & mask`` of a uint8 array, computed in 64/32/16-bit lanes.

    x86 has no 8-bit vector shift, so numpy shifts uint8 arrays one byte at a time; a wide
    shift followed by a mask replicated in every byte gives the same bytes many times faster.
    """
    a = np.ascontiguousarray(a)
    m = mask & (0xFF >> s)
    for dt, rep in _LANES:
        if a.ndim and a.shape[-1] % np.dtype(dt).itemsize == 0:
            w = a.view(dt)
            return ((w >> dt(s)) & dt(m * rep)).view(np.uint8).reshape(a.shape)
    return (a >> s) & m


def _shl(a: np.ndarray, s: int) -> np.ndarray:
    """Per byte ``(a << s) & 0xFF`` of a uint8 array, in wide lanes (see :func:`_shr`)."""
    a = np.ascontiguousarray(a)
    m = (0xFF << s) & 0xFF
    for dt, rep in _LANES:
        if a.ndim and a.shape[-1] % np.dtype(dt).itemsize == 0:
            w = a.view(dt)
            return ((w << dt(s)) & dt(m * rep)).view(np.uint8).reshape(a.shape)
    return (a << s) & m


_SPREAD_SHIFTS: dict[tuple[tuple[int, ...], int], np.ndarray] = {}


def _spread(src: np.ndarray, shifts: tuple[int, ...], mask: int) -> np.ndarray:
    """Planes of bit fields: (…, k) uint8 -> (…, len(shifts), k), plane j = (src >> shifts[j]) & mask.

    Each row of k bytes is repeated once per plane (``np.repeat`` of k-byte void items), then
    shifted in place by a precomputed per-lane shift pattern and masked, all in 64-bit lanes:
    three contiguous passes, whatever the number of planes. ``mask`` must fit the shifted
    byte (``mask <= 0xFF >> max(shifts)``) so that no bit crosses from a neighbouring byte.
    """
    k = src.shape[-1]
    m = len(shifts)
    src = np.ascontiguousarray(src)
    rows = src.size // k if k else 0
    if k % 8 or rows == 0:  # narrow rows (a few scale bytes): plain byte-wise operations
        out = np.empty(src.shape[:-1] + (m, k), dtype=np.uint8)
        for j, s in enumerate(shifts):
            np.bitwise_and(src >> s, mask, out=out[..., j, :])
        return out
    words = k // 8
    need = rows * m * words
    key = (shifts, words)
    pattern = _SPREAD_SHIFTS.get(key)
    if pattern is None or pattern.size < need:
        pattern = np.tile(np.repeat(np.array(shifts, dtype=np.uint64), words), max(rows, 1024))
        _SPREAD_SHIFTS[key] = pattern
    r = np.repeat(src.reshape(rows, k).view(f"V{k}")[:, 0], m).view(np.uint64)
    np.right_shift(r, pattern[:need], out=r)
    np.bitwise_and(r, np.uint64(mask * 0x0101010101010101), out=r)
    return r.view(np.uint8).reshape(src.shape[:-1] + (m, k))


_LANE_SHIFTS: dict[tuple[tuple[int, ...], str, int], np.ndarray] = {}


def _lane_fields(w: np.ndarray, shifts: tuple[int, ...], mask: int) -> np.ndarray:
    """Bit fields of integers: (…) -> (…, len(shifts)), field j = (w >> shifts[j]) & mask.

    Repeats each integer once per field and shifts by a precomputed pattern (contiguous
    passes instead of a broadcast whose inner loop is only len(shifts) long).
    """
    w = np.ascontiguousarray(w)
    m = len(shifts)
    need = w.size * m
    key = (shifts, w.dtype.str, 0)
    pattern = _LANE_SHIFTS.get(key)
    if pattern is None or pattern.size < need:
        pattern = np.tile(np.array(shifts, dtype=w.dtype), max(w.size, 4096))
        _LANE_SHIFTS[key] = pattern
    r = np.repeat(w.reshape(-1), m)
    np.right_shift(r, pattern[:need], out=r)
    np.bitwise_and(r, w.dtype.type(mask), out=r)
    return r.reshape(w.shape + (m,))


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """Low nibbles of ``qs`` (…, k) in [..., 0, :], high nibbles in [..., 1, :]."""
    return _spread(qs, (0, 4), 15)


def _packed_nibbles(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """A field of 4-bit values, two per byte, low nibble first: (n, 2 * field_bytes) in order."""
    return _nibbles(_field(q, t, name)).swapaxes(1, 2).reshape(len(q), -1)


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """2-bit field j of ``qs`` (…, k) in [..., j, :] for j = 0..3."""
    return _spread(qs, (0, 2, 4, 6), 3)


def _bitplanes(qh: np.ndarray) -> np.ndarray:
    """Bit j of ``qh`` (…, k) in [..., j, :] for j = 0..7."""
    return _spread(qh, (0, 1, 2, 3, 4, 5, 6, 7), 1)


def _scale_into(
    out: np.ndarray, lv: np.ndarray, scale: np.ndarray,
    minus: np.ndarray | None = None, plus: np.ndarray | None = None,
) -> None:
    """``out = float(lv) * scale [- minus] [+ plus]`` with one scale (and min) per run of elements.

    ``out`` is (n, k) float32, ``lv`` any integer array of n*k levels in element order,
    ``scale``/``minus``/``plus`` (n, s) float32 with s dividing k: entry j covers elements
    [j*k/s, (j+1)*k/s) of its row. The levels are cast in one contiguous pass and the
    scales expanded with ``np.repeat`` so that the multiply runs over contiguous memory
    (a broadcast over 16 or 32 elements costs several times more). Same float32 product
    and difference as ggml's ``d * q`` and ``d * q - m``.
    """
    np.copyto(out, lv.reshape(out.shape), casting="unsafe")
    run = out.shape[1] // scale.shape[1]
    np.multiply(out, np.repeat(scale.reshape(len(out), -1), run, axis=1), out=out)
    if minus is not None:
        np.subtract(out, np.repeat(minus.reshape(len(out), -1), run, axis=1), out=out)
    if plus is not None:
        np.add(out, np.repeat(plus.reshape(len(out), -1), run, axis=1), out=out)


# ----------------------------------------------------------------------------------------
# Dequantization kernels: (q: (n, type_size) uint8, out: (n, block_size) float32) -> None.


def _dq_q4_0(q, out):
    t = GGMLType.Q4_0
    lv = _nibbles(_field(q, t, "qs"))
    lv -= 8  # wraps: read as int8 it is nibble - 8
    _scale_into(out, lv.view(np.int8), _half(q, t, "d"))


def _dq_q4_1(q, out):
    t = GGMLType.Q4_1
    lv = _nibbles(_field(q, t, "qs"))
    _scale_into(out, lv, _half(q, t, "d"), plus=_half(q, t, "m"))


def _q5_levels(q: np.ndarray, t: GGMLType) -> np.ndarray:
    """Q5_0/Q5_1 quants (n, 32) uint8: nibble | 5th bit (bit j of the 32-bit qh) << 4."""
    n = len(q)
    lv = _nibbles(_field(q, t, "qs")).reshape(n, 32)
    hb = np.unpackbits(_field(q, t, "qh"), axis=1, bitorder="little")
    lv |= _shl(hb, 4)
    return lv


def _dq_q5_0(q, out):
    t = GGMLType.Q5_0
    lv = _q5_levels(q, t)
    lv -= 16
    _scale_into(out, lv.view(np.int8), _half(q, t, "d"))


def _dq_q5_1(q, out):
    t = GGMLType.Q5_1
    _scale_into(out, _q5_levels(q, t), _half(q, t, "d"), plus=_half(q, t, "m"))


def _dq_q8_0(q, out):
    t = GGMLType.Q8_0
    _scale_into(out, _field(q, t, "qs").view(np.int8), _half(q, t, "d"))


def _dq_q8_1(q, out):
    t = GGMLType.Q8_1
    _scale_into(out, _field(q, t, "qs").view(np.int8), _half(q, t, "d"))


def _dq_q8_k(q, out):
    t = GGMLType.Q8_K
    _scale_into(out, _field(q, t, "qs").view(np.int8), _field(q, t, "d").view("<f4"))


def _dq_q2_k(q, out):
    t = GGMLType.Q2_K
    n = len(q)
    sc = _field(q, t, "scales")
    dl = _half(q, t, "d") * (sc & 15)
    ml = _half(q, t, "dmin") * (sc >> 4)
    # element (half h, shift j, l < 32) is crumb j of qs[32h + l]; 16 elements share a scale
    lv = _crumbs(_field(q, t, "qs").reshape(n, 2, 32))
    _scale_into(out, lv, dl, minus=ml)


def _q3_k_scales(sc: np.ndarray) -> np.ndarray:
    """The sixteen 6-bit Q3_K scales (n, 16) minus 32: low 4 bits from bytes 0-7, high 2 from 8-11."""
    w = np.ascontiguousarray(sc).view("<u4")  # (n, 3): four scale bytes per lane
    a, b, c = w[:, 0], w[:, 1], w[:, 2]
    m4, m2 = np.uint32(0x0F0F0F0F), np.uint32(0x03030303)
    out = np.empty((len(w), 4), dtype="<u4")
    for j, (src, shift) in enumerate(((a, 0), (b, 0), (a, 4), (b, 4))):
        out[:, j] = ((src >> np.uint32(shift)) & m4) | (((c >> np.uint32(2 * j)) & m2) << np.uint32(4))
    return out.view(np.uint8).astype(np.int16) - 32


def _dq_q3_k(q, out):
    t = GGMLType.Q3_K
    n = len(q)
    dl = _half(q, t, "d") * _q3_k_scales(_field(q, t, "scales"))
    lv = _crumbs(_field(q, t, "qs").reshape(n, 2, 32))
    hb = _bitplanes(_field(q, t, "hmask"))  # bit 4h + j of hmask[l]
    hb ^= 1
    lv -= _shl(hb, 2).reshape(n, 2, 4, 32)  # crumb - 4 where the high bit is clear
    _scale_into(out, lv.view(np.int8), dl)


def _k4_scale_min(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """get_scale_min_k4 for j = 0..7: the 6-bit scales and mins packed in 12 bytes, (n, 8) each."""
    w = np.ascontiguousarray(sc).view("<u4")  # (n, 3): bytes 0-3, 4-7, 8-11, four per lane
    a, b, c = w[:, 0], w[:, 1], w[:, 2]
    m6, m4, m2 = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F), np.uint32(0x03030303)
    scale = np.empty((len(w), 2), dtype="<u4")
    mn = np.empty((len(w), 2), dtype="<u4")
    scale[:, 0] = a & m6
    scale[:, 1] = (c & m4) | (((a >> np.uint32(6)) & m2) << np.uint32(4))
    mn[:, 0] = b & m6
    mn[:, 1] = ((c >> np.uint32(4)) & m4) | (((b >> np.uint32(6)) & m2) << np.uint32(4))
    return scale.view(np.uint8), mn.view(np.uint8)


def _dq_q4_k(q, out):
    t = GGMLType.Q4_K
    n = len(q)
    sc, mn = _k4_scale_min(_field(q, t, "scales"))
    lv = _nibbles(_field(q, t, "qs").reshape(n, 4, 32))
    _scale_into(out, lv, _half(q, t, "d") * sc, minus=_half(q, t, "dmin") * mn)


def _dq_q5_k(q, out):
    t = GGMLType.Q5_K
    n = len(q)
    sc, mn = _k4_scale_min(_field(q, t, "scales"))
    lv = _nibbles(_field(q, t, "qs").reshape(n, 4, 32)).reshape(n, 8, 32)
    hb = _bitplanes(_field(q, t, "qh"))  # bit s of qh[l] for sub-block s
    lv |= _shl(hb, 4)
    _scale_into(out, lv, _half(q, t, "d") * sc, minus=_half(q, t, "dmin") * mn)


def _dq_q6_k(q, out):
    t = GGMLType.Q6_K
    n = len(q)
    ql = _field(q, t, "ql").reshape(n, 2, 64)
    # (half, quarter g, l): quarters 0, 1 low nibbles, 2, 3 high nibbles
    lv = _nibbles(ql).reshape(n, 2, 4, 32)
    hb = _crumbs(_field(q, t, "qh").reshape(n, 2, 32))
    lv |= _shl(hb, 4)
    lv -= 32
    _scale_into(out, lv.view(np.int8), _half(q, t, "d") * _field(q, t, "scales").view(np.int8))


_TQ1_POW3 = np.repeat(np.array([1, 3, 9, 27, 81], dtype=np.uint16), 26)  # per 16-bit lane of a plane
_TQ1_PARTS = np.dtype({"names": ["a", "b", "c"], "formats": ["V32", "V16", "V4"], "offsets": [0, 32, 48],
                       "itemsize": 52})


def _dq_tq1_0(q, out):
    t = GGMLType.TQ1_0
    n = len(q)
    # qs (48 bytes) then qh (4 bytes): 5 trits per byte (4 used in qh). Digit d of a byte is
    # (uint8)(q * 3**d) * 3 >> 8, i.e. 0, 1 or 2 as that product is below 86, below 171 or
    # above; ggml stores it plus one. The 52 bytes are repeated once per digit (plane d) and
    # the uint8 products formed per byte in 16-bit lanes (x86 has no 8-bit vector multiply).
    src = np.concatenate([_field(q, t, "qs"), _field(q, t, "qh")], axis=1)
    w = np.repeat(src.view("V52")[:, 0], 5).view("<u2").reshape(n, 130)
    lo = w & np.uint16(0xFF)
    lo *= _TQ1_POW3
    lo &= np.uint16(0xFF)
    w >>= np.uint16(8)
    w *= _TQ1_POW3
    w <<= np.uint16(8)
    w |= lo
    x = w.view(np.uint8)  # (n, 5 * 52): byte m of plane d is (uint8)(src[m] * 3**d)
    trit = (x > 170).view(np.int8)
    trit += x > 85
    trit -= 1
    parts = trit.view(_TQ1_PARTS).reshape(n, 5)  # per plane: qs[:32], qs[32:], qh as void items
    lv = np.empty((n, 256), dtype=np.int8)
    lv.view("V32")[:, :5] = parts["a"]  # digit d of qs[m]: element 32d + m
    lv.view("V16")[:, 10:15] = parts["b"]  # of qs[32 + m]: 160 + 16d + m
    lv.view("V4")[:, 60:64] = parts["c"][:, :4]  # of qh[m], 4 digits: 240 + 4d + m
    _scale_into(out, lv, _half(q, t, "d"))


def _dq_tq2_0(q, out):
    t = GGMLType.TQ2_0
    n = len(q)
    lv = _crumbs(_field(q, t, "qs").reshape(n, 2, 32))
    lv -= 1
    _scale_into(out, lv.view(np.int8), _half(q, t, "d"))


_PAIR_TABLES: dict[str, np.ndarray] = {}


def _pair_table(name: str, kvalues: np.ndarray) -> np.ndarray:
    """For every 16-bit pair of bytes b0, b1: the four levels kv[b0 & 15], kv[b1 & 15],
    kv[b0 >> 4], kv[b1 >> 4] packed in a little-endian uint32 (built on first use, 256 KiB)."""
    table = _PAIR_TABLES.get(name)
    if table is None:
        w = np.arange(1 << 16, dtype=np.uint32)
        kv = kvalues.astype(np.uint8).astype(np.uint32)  # int8 levels as bytes
        b0, b1 = w & 0xFF, w >> 8
        table = kv[b0 & 15] | (kv[b1 & 15] << 8) | (kv[b0 >> 4] << 16) | (kv[b1 >> 4] << 24)
        _PAIR_TABLES[name] = table
    return table


def _kv_levels(qs: np.ndarray, name: str, kvalues: np.ndarray) -> np.ndarray:
    """Non-linear 4-bit levels (…, 2, k) int8: kv[low nibbles] then kv[high nibbles].

    One look-up per two bytes (four levels) in :func:`_pair_table`; k must be even.
    """
    words = _pair_table(name, kvalues)[np.ascontiguousarray(qs).view("<u2")]
    lo = words.astype("<u2").view(np.uint8)  # levels of the low nibbles, in byte order
    hi = (words >> np.uint32(16)).astype("<u2").view(np.uint8)
    lv = np.empty(qs.shape[:-1] + (2, qs.shape[-1]), dtype=np.uint8)
    return _rows_into(lv, [lo, hi]).view(np.int8)


def _dq_mxfp4(q, out):
    t = GGMLType.MXFP4
    lv = _kv_levels(_field(q, t, "qs"), "mxfp4", KVALUES_MXFP4)
    _scale_into(out, lv, _E8M0_HALF[_field(q, t, "e")])


def _dq_nvfp4(q, out):
    t = GGMLType.NVFP4
    n = len(q)
    lv = _kv_levels(_field(q, t, "qs").reshape(n, 4, 8), "mxfp4", KVALUES_MXFP4)
    _scale_into(out, lv, _UE4M3_HALF[_field(q, t, "d")])  # one scale per 16 elements


def _dq_q1_0(q, out):
    t = GGMLType.Q1_0
    lv = _Q1_WORDS[_field(q, t, "qs")].view(np.int8)  # (n, 128) of +-1
    _scale_into(out, lv, _half(q, t, "d"))


def _dq_q2_0(q, out):
    t = GGMLType.Q2_0
    lv = _Q2_WORDS[_field(q, t, "qs")].view(np.int8)  # (n, 64) of crumb - 1
    _scale_into(out, lv, _half(q, t, "d"))


def _dq_iq4_nl(q, out):
    t = GGMLType.IQ4_NL
    lv = _kv_levels(_field(q, t, "qs"), "iq4nl", KVALUES_IQ4NL)
    _scale_into(out, lv, _half(q, t, "d"))


def _dq_iq4_xs(q, out):
    t = GGMLType.IQ4_XS
    n = len(q)
    lo = _packed_nibbles(q, t, "scales_l")
    hi = ((_u16(q, t, "scales_h") >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)
    dl = _half(q, t, "d") * ((lo | (hi << 4)).astype(np.int16) - 32)
    lv = _kv_levels(_field(q, t, "qs").reshape(n, 8, 16), "iq4nl", KVALUES_IQ4NL)
    _scale_into(out, lv, dl)


def _iq2_scale(q: np.ndarray, t: GGMLType, s: np.ndarray) -> np.ndarray:
    """d * (0.5 + s) * 0.25, the IQ2 scale of 16 or 32 elements (float32, shaped like s)."""
    d = _half(q, t, "d").reshape((-1,) + (1,) * (s.ndim - 1))
    return d * (s.astype(F32) + F32(0.5)) * F32(0.25)


def _signed(grid_words: np.ndarray, idx: np.ndarray, sign_words: np.ndarray, sidx: np.ndarray) -> np.ndarray:
    """Grid points times their signs, as int8 levels in element order."""
    lv = grid_words[idx].view(np.int8)
    lv *= sign_words[sidx].view(np.int8).reshape(lv.shape)
    return lv


def _dq_iq2_xxs(q, out):
    t = GGMLType.IQ2_XXS
    n = len(q)
    words = _field(q, t, "qs").view("<u4").reshape(n, 8, 2)  # per 32: 4 grid bytes | signs+scale
    aux = words[:, :, 1]
    sidx = _lane_fields(aux, (0, 7, 14, 21), 127)
    lv = _signed(_IQ2XXS_WORDS, _field(q, t, "qs").reshape(n, 8, 8)[:, :, :4], _SIGN7_WORDS, sidx)
    _scale_into(out, lv, _iq2_scale(q, t, aux >> 28))


def _dq_iq2_xs(q, out):
    t = GGMLType.IQ2_XS
    qs = _u16(q, t, "qs")
    lv = _signed(_IQ2XS_WORDS, qs & np.uint16(511), _SIGN7_WORDS, qs >> np.uint16(9))
    sc = _packed_nibbles(q, t, "scales")
    _scale_into(out, lv, _iq2_scale(q, t, sc))


def _dq_iq2_s(q, out):
    t = GGMLType.IQ2_S
    n = len(q)
    qs = _field(q, t, "qs")
    high = _crumbs(_field(q, t, "qh")).swapaxes(1, 2).astype(np.uint16)  # (n, 8, 4)
    idx = qs[:, :32].reshape(n, 8, 4) | (high << 8)
    lv = _signed(_IQ2S_WORDS, idx, _SIGN8_WORDS, qs[:, 32:])
    sc = _packed_nibbles(q, t, "scales")
    _scale_into(out, lv, _iq2_scale(q, t, sc))


def _dq_iq3_xxs(q, out):
    t = GGMLType.IQ3_XXS
    n = len(q)
    qs = _field(q, t, "qs")
    aux = qs[:, 64:].view("<u4")  # (n, 8): 28 sign bits + 4-bit scale per 32 elements
    sidx = _lane_fields(aux, (0, 7, 14, 21), 127)
    lv = _IQ3XXS_WORDS[qs[:, :64]].view(np.int8).reshape(n, 8, 4, 8)
    lv *= _SIGN7_WORDS[sidx].view(np.int8).reshape(n, 8, 4, 8)
    db = _half(q, t, "d") * ((aux >> 28).astype(F32) + F32(0.5)) * F32(0.5)
    _scale_into(out, lv, db)


def _dq_iq3_s(q, out):
    t = GGMLType.IQ3_S
    n = len(q)
    high = _bitplanes(_field(q, t, "qh")).swapaxes(1, 2).astype(np.uint16)  # (n, 8, 8)
    idx = _field(q, t, "qs").reshape(n, 8, 8) | (high << 8)
    lv = _IQ3S_WORDS[idx].view(np.int8).reshape(n, 32, 8)
    lv *= _SIGN8_WORDS[_field(q, t, "signs")].view(np.int8).reshape(n, 32, 8)
    sc = _packed_nibbles(q, t, "scales")
    db = _half(q, t, "d") * (1 + 2 * sc.astype(np.int16))
    _scale_into(out, lv, db)


def _dq_iq1_s(q, out):
    t = GGMLType.IQ1_S
    n = len(q)
    qh = _u16(q, t, "qh")  # (n, 8)
    high = _lane_fields(qh, (0, 3, 6, 9), 7)  # 3 index bits per 8 elements
    high |= ((qh >> np.uint16(12)) & np.uint16(8))[:, :, None]  # qh bit 15, the delta's sign -> bit 11
    idx = _field(q, t, "qs").reshape(n, 8, 4) | (high << np.uint16(8))
    lv = _IQ1S_WORDS8[idx].view(np.int8).reshape(n, 256)
    dl8 = _half(q, t, "d") * (2 * ((qh >> 12) & 7) + 1).astype(F32) * F32(0.125)
    _scale_into(out, lv, dl8)


def _dq_iq1_m(q, out):
    t = GGMLType.IQ1_M
    n = len(q)
    sc = _field(q, t, "scales").view("<u2")  # (n, 4): 3-bit scales + the f16 scale's nibbles
    bits = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | (sc[:, 3] & 0xF000)
    d = bits.view("<f2").astype(F32)[:, None]
    s3 = _lane_fields(sc, (0, 3, 6, 9), 7)  # (n, 4, 4) = 16 halves
    dl8 = d * (2 * s3.reshape(n, 16) + 1).astype(F32) * F32(0.125)
    nib = _nibbles(_field(q, t, "qh")).swapaxes(1, 2).reshape(n, 32)  # per 8 elems
    idx = _field(q, t, "qs") | (nib.astype(np.uint16) << np.uint16(8))  # bit 11: the delta's sign
    lv = _IQ1S_WORDS8[idx].view(np.int8).reshape(n, 256)
    _scale_into(out, lv, dl8)

_KERNELS: dict[GGMLType, Callable[[np.ndarray, np.ndarray], None]] = {
    GGMLType.Q4_0: _dq_q4_0, GGMLType.Q4_1: _dq_q4_1, GGMLType.Q5_0: _dq_q5_0,
    GGMLType.Q5_1: _dq_q5_1, GGMLType.Q8_0: _dq_q8_0, GGMLType.Q8_1: _dq_q8_1,
    GGMLType.Q2_K: _dq_q2_k, GGMLType.Q3_K: _dq_q3_k, GGMLType.Q4_K: _dq_q4_k,
    GGMLType.Q5_K: _dq_q5_k, GGMLType.Q6_K: _dq_q6_k, GGMLType.Q8_K: _dq_q8_k,
    GGMLType.IQ2_XXS: _dq_iq2_xxs, GGMLType.IQ2_XS: _dq_iq2_xs, GGMLType.IQ2_S: _dq_iq2_s,
    GGMLType.IQ3_XXS: _dq_iq3_xxs, GGMLType.IQ3_S: _dq_iq3_s, GGMLType.IQ1_S: _dq_iq1_s,
    GGMLType.IQ1_M: _dq_iq1_m, GGMLType.IQ4_NL: _dq_iq4_nl, GGMLType.IQ4_XS: _dq_iq4_xs,
    GGMLType.TQ1_0: _dq_tq1_0, GGMLType.TQ2_0: _dq_tq2_0, GGMLType.MXFP4: _dq_mxfp4,
    GGMLType.NVFP4: _dq_nvfp4, GGMLType.Q1_0: _dq_q1_0, GGMLType.Q2_0: _dq_q2_0,
}

DEQUANTIZE_TYPES: frozenset[GGMLType] = frozenset(
    [GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.F64,
     GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64, *_KERNELS]
)
"""Every type :func:`dequantize` reads: all the non-removed ggml types."""


# ----------------------------------------------------------------------------------------
# Argument checking shared by both directions.


def _resolve_type(t: GGMLType | int) -> GGMLType:
    try:
        return _checked_type(t)
    except TypeError:
        raise GGUFFormatError(f"tensor type must be a GGMLType or an int, got {t!r}") from None


def _check_shape(shape: tuple[int, ...], t: GGMLType) -> tuple[int, int]:
    """(rows, columns) of a tensor shape (numpy order: the last axis is the row)."""
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise GGUFFormatError(f"shape must be a tuple of ints, got {shape!r}") from None
    if not shape or any(s < 0 for s in shape):
        raise GGUFFormatError(f"invalid {t.name} tensor shape {shape}: need one or more non-negative dims")
    cols = shape[-1]
    if cols % t.block_size:
        raise GGUFFormatError(
            f"{t.name} tensor shape {shape}: the last dimension {cols} is not a multiple of "
            f"the {t.name} block size {t.block_size}"
        )
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return rows, cols


def _result_buffer(out: np.ndarray | None, n: int) -> np.ndarray:
    """A flat float32 array of n elements: new, or a view of the caller's ``out`` once checked."""
    if out is None:
        return np.empty(n, dtype=F32)
    ok = (isinstance(out, np.ndarray) and out.dtype == F32 and out.dtype.isnative
          and out.flags.c_contiguous and out.flags.writeable and out.size == n)
    if not ok:
        got = (f"{out.dtype} array of shape {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__)
        raise GGUFFormatError(f"out must be a writable C-contiguous float32 array of {n} elements, got {got}")
    return out.reshape(-1)


def _row_range(rows: slice | None, n_rows: int) -> tuple[int, int]:
    if rows is None:
        return 0, n_rows
    if not isinstance(rows, slice):
        raise GGUFFormatError(f"rows must be a slice, got {rows!r}")
    start, stop, step = rows.indices(n_rows)
    if step != 1:
        raise GGUFFormatError(f"rows must be a contiguous slice (step 1), got step {step}")
    return start, max(start, stop)


# ----------------------------------------------------------------------------------------
# Public API


def dequantize(
    raw: np.ndarray | bytes | bytearray | memoryview,
    t: GGMLType | int,
    shape: tuple[int, ...],
    byte_order: str = "little",
    rows: slice | None = None,
    threads: int | None = None,
    engine: str = "auto",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Decode the raw bytes of a tensor of ggml type ``t`` into float32.

    Args:
        raw: the tensor's bytes (``bytes``, ``memoryview``, ``mmap`` slice or any numpy
            array, viewed as bytes), exactly ``rows * t.row_nbytes(shape[-1])`` long.
        t: the ggml type (a :class:`GGMLType` or its id).
        shape: the numpy shape, outermost first (GGUF stores dims innermost first: reverse them).
        byte_order: ``"little"`` (almost every file) or ``"big"``.
        rows: a contiguous ``slice`` of the rows (the tensor seen as ``(-1, shape[-1])``) to
            decode; then only those rows are read and the result is ``(len, shape[-1])``.
        threads: worker threads, each decoding its own run of chunks (the result does not
            depend on it). ``None`` (the default): one per CPU (at most 8) when a compiled
            kernel decodes a tensor of 4 M elements or more, else one. The numpy kernels
            hold the GIL during several operations (void-item copies, ``np.repeat``, fancy
            indexing), so extra threads gain them little; see the benchmark.
        engine: ``"auto"`` (compiled kernel if this installation has one for ``t``, see
            :data:`COMPILED_DEQUANTIZE`), ``"numpy"``, or ``"compiled"`` (an error if there
            is none). Both engines give the same bits.
        out: a writable C-contiguous float32 array with exactly as many elements as the
            result, to decode into instead of allocating (for example one buffer reused
            across tensors); the result is then a view of it.

    Returns:
        A new C-contiguous float32 array (a view of ``out`` if given). Work proceeds in
        chunks of about 256k elements, so memory beyond the result stays bounded (a few MiB).

    Raises:
        GGUFFormatError: unknown or removed type, a last dimension that is not a whole number
            of blocks, a byte length that does not match the shape, or a bad ``threads``,
            ``engine`` or ``out``.

    >>> raw = bytes.fromhex("0040") + bytes([0x98] * 16)   # Q4_0: d = 2.0, nibbles 8 and 9
    >>> dequantize(raw, GGMLType.Q4_0, (32,))[[0, 16]].tolist()
    [0.0, 2.0]
    >>> dequantize(np.arange(6, dtype="<f2").view(np.uint8), GGMLType.F16, (2, 3), rows=slice(1, 2))
    array([[3., 4., 5.]], dtype=float32)
    """
    t = _resolve_type(t)
    if tuple(shape) == () and rows is None:  # an n_dims 0 tensor: one element
        return dequantize(raw, t, (1,), byte_order, None, threads, engine, out).reshape(())
    n_rows, cols = _check_shape(shape, t)
    data = _as_uint8(raw)
    row_bytes = cols // t.block_size * t.type_size
    if data.size != n_rows * row_bytes:
        raise GGUFFormatError(
            f"{t.name} tensor of shape {tuple(shape)} needs {n_rows * row_bytes} bytes "
            f"({n_rows} rows of {row_bytes}), got {data.size}"
        )
    if byte_order not in ("little", "big"):
        raise GGUFFormatError(f"byte order must be 'little' or 'big', got {byte_order!r}")
    start, stop = _row_range(rows, n_rows)
    data = data[start * row_bytes:stop * row_bytes]
    given = out
    out = _result_buffer(out, (stop - start) * cols)
    # plain types: the compiled converters read little-endian data only
    compiled = _use_compiled(t, engine, COMPILED_DEQUANTIZE) and (t.quantized or byte_order == "little")
    workers = _thread_count(threads, out.size, compiled)
    fresh = out if given is None else None  # memory no one has written yet

    if not t.quantized:
        src = data.view(block_dtype(t, byte_order))
        bits = out.view(np.uint32)
        c = _CHUNK_ELEMENTS

        def run(i: int) -> None:
            if compiled:
                _compiled.decode(t, data[i * t.type_size:(i + c) * t.type_size], out[i:i + c])
            elif t == GGMLType.BF16:
                np.left_shift(src[i:i + c], 16, out=bits[i:i + c], dtype=np.uint32)
            else:
                out[i:i + c] = src[i:i + c]

        _run_chunks(range(0, out.size, c), run, workers, fresh, c)
    else:
        kernel = _KERNELS[t]
        blocks = data.reshape(-1, t.type_size)
        out_blocks = out.reshape(-1, t.block_size)
        step = max(1, _CHUNK_ELEMENTS // t.block_size)

        def run(i: int) -> None:
            q = blocks[i:i + step]
            if byte_order == "big":
                q = byteswap(q, t, "big", "little").reshape(-1, t.type_size)
            if compiled:
                _compiled.decode(t, q, out_blocks[i:i + step])
                return
            with np.errstate(all="ignore"):  # inf/nan scales decode to inf/nan, as in ggml
                kernel(q, out_blocks[i:i + step])

        _run_chunks(range(0, len(blocks), step), run, workers, fresh, step * t.block_size)

    if rows is None:
        return out.reshape(tuple(int(s) for s in shape))
    return out.reshape(stop - start, cols)


# ----------------------------------------------------------------------------------------
# Quantization: float32 blocks (n, block_size) -> structured little-endian blocks (n,).
# Each follows ggml's quantize_row_*_ref step by step in float32.


def _c_int(v: np.ndarray) -> np.ndarray:
    """C's ``(int)`` cast of float32 as ggml's x86 builds compute it (``cvttss2si``): truncation
    toward zero, and INT_MIN for NaN, infinities and values outside int32 (a later cast to 8 bits
    makes that 0). C leaves these cases undefined and numpy's own cast differs by platform; they
    arise when ``1/d`` overflows for a block of subnormal values. Mirrors ``trunc_int`` in _kernels.c.
    """
    ok = np.abs(v) < F32(2.0**31)  # False for NaN
    return np.where(ok, np.trunc(np.where(ok, v, F32(0))), F32(-(2.0**31))).astype(np.int32)


def _round_away(v: np.ndarray) -> np.ndarray:
    """C ``(int)roundf(v)``: nearest integer, halves away from zero, as int32; NaN, infinities and
    values outside int32 give INT_MIN as :func:`_c_int` (mirrors ``round_int`` in _kernels.c)."""
    t = _c_int(v)
    frac = v - t.astype(F32)  # exact where t is in range; garbage (ignored) elsewhere
    ok = np.abs(v) < F32(2.0**31)
    with np.errstate(invalid="ignore"):
        step = (frac >= F32(0.5)).astype(np.int32) - (frac <= F32(-0.5)).astype(np.int32)
    return np.where(ok, t + step, t)


def _nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: the bits of ``v + 12582912.0f`` (round half to even for
    |v| < 2**22), computed exactly as ggml does for every input, infinities and NaN included."""
    with np.errstate(invalid="ignore", over="ignore"):
        bits = (np.asarray(v, F32) + F32(12582912.0)).view(np.int32)
    return (bits & 0x007FFFFF) - 0x00400000


def _inverse(d: np.ndarray) -> np.ndarray:
    """``d ? 1.0f/d : 0.0f``."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / d, F32(0)).astype(F32)


def _row_extrema(x: np.ndarray, want_min: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Maximum and minimum of each row of a float32 (n, k) array, shapes (n,).

    A reduction along short rows costs numpy one inner loop per row; instead the rows are
    transposed in 16-byte units (4 floats) and reduced along the first axis, which runs
    over long contiguous rows. Max and min are exact whatever the order; a zero extreme
    gets the sign of the row's first zero (see :func:`_first_zero_sign`).
    """
    n, k = x.shape
    if k % 4 or n == 0:
        mx, mn = x.max(axis=1), (x.min(axis=1) if want_min else None)
    else:
        t = np.ascontiguousarray(np.ascontiguousarray(x).view("V16").T).view(F32).reshape(k // 4, n, 4)
        mx4 = t.max(axis=0)
        mx = np.maximum(np.maximum(mx4[:, 0], mx4[:, 1]), np.maximum(mx4[:, 2], mx4[:, 3]))
        mn = None
        if want_min:
            mn4 = t.min(axis=0)
            mn = np.minimum(np.minimum(mn4[:, 0], mn4[:, 1]), np.minimum(mn4[:, 2], mn4[:, 3]))
    for ext in (mx, mn):
        if ext is not None:
            _first_zero_sign(x, ext)
    return mx, mn


def _first_zero_sign(x: np.ndarray, ext: np.ndarray) -> None:
    """Where a row's extreme is zero, give it the sign of the row's first zero, as ggml's
    in-order scan keeps it (+0.0 and -0.0 compare equal, so the first one stays)."""
    rows = np.nonzero(ext == 0)[0]
    if len(rows):
        xs = x[rows]
        ext[rows] = xs[np.arange(len(rows)), (xs == 0).argmax(axis=1)]


def _row_absmax(x: np.ndarray) -> np.ndarray:
    """max |x| of each row, shape (n,)."""
    return _row_extrema(np.abs(x), want_min=False)[0]


def _signed_max(x: np.ndarray) -> np.ndarray:
    """ggml's ``max``: the first value of largest magnitude of each row (0 if all are 0), (n,)."""
    mx, mn = _row_extrema(x)
    out = np.where(-mn > mx, mn, mx)
    tie = (-mn == mx) & (mx != 0)  # +a and -a both present: the first one wins
    if tie.any():
        rows = np.nonzero(tie)[0]
        xs = x[rows]
        out[rows] = xs[np.arange(len(rows)), np.abs(xs).argmax(axis=1)]
    out[(mx == 0) & (mn == 0)] = 0  # ggml starts from max = 0.0f
    return out


def _per_row(s: np.ndarray, k: int) -> np.ndarray:
    """A per-row value (n,) repeated over the row's k elements: (n, k), contiguous."""
    return np.repeat(s.reshape(-1), k).reshape(-1, k)


def _halves(xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and second half of each row of a (n, 2k) uint8 array, as contiguous (n, k) copies."""
    n, k2 = xi.shape
    v = np.ascontiguousarray(xi).view(f"V{k2 // 2}")
    return (np.ascontiguousarray(v[:, 0]).view(np.uint8).reshape(n, -1),
            np.ascontiguousarray(v[:, 1]).view(np.uint8).reshape(n, -1))


def _pack_halves(xi: np.ndarray) -> np.ndarray:
    """ggml's nibble packing: byte j = level j | level j + k/2 << 4, levels < 16, (n, k) -> (n, k/2)."""
    lo, hi = _halves(xi)
    return lo | _shl(hi, 4)


def _put(b: np.ndarray, name: str, values: np.ndarray) -> None:
    """Store ``values`` (n, …) into field ``name`` of every block of the structured array ``b``,
    one void item per block (a direct field assignment runs one short loop per block)."""
    sub, off = b.dtype.fields[name][:2]
    vdt = np.dtype({"names": ["f"], "formats": [f"V{sub.itemsize}"], "offsets": [off],
                    "itemsize": b.dtype.itemsize})
    src = np.ascontiguousarray(values, dtype=sub.base).reshape(len(b), -1)
    b.view(vdt)["f"] = src.view(f"V{sub.itemsize}").reshape(len(b))


def _q_q4_0(x, b):
    d = _signed_max(x) / F32(-8)
    v = x * _per_row(_inverse(d), 32)
    v += F32(8.5)
    b["d"] = d
    _put(b, "qs", _pack_halves(np.minimum(_c_int(v).astype(np.int8), 15).view(np.uint8)))


def _q_q4_1(x, b):
    mx, mn = _row_extrema(x)
    d = (mx - mn) / F32(15)
    v = x - _per_row(mn, 32)
    v *= _per_row(_inverse(d), 32)
    v += F32(0.5)
    b["d"], b["m"] = d, mn
    _put(b, "qs", _pack_halves(np.minimum(_c_int(v).astype(np.int8), 15).view(np.uint8)))


def _q5_pack(xi: np.ndarray, b: np.ndarray) -> None:
    _put(b, "qs", _pack_halves(xi & 15))
    _put(b, "qh", np.packbits(_shr(xi, 4, 1), axis=1, bitorder="little"))


def _q_q5_0(x, b):
    d = _signed_max(x) / F32(-16)
    v = x * _per_row(_inverse(d), 32)
    v += F32(16.5)
    b["d"] = d
    _q5_pack(np.minimum(_c_int(v).astype(np.int8), 31).view(np.uint8), b)


def _q_q5_1(x, b):
    mx, mn = _row_extrema(x)
    d = (mx - mn) / F32(31)
    v = x - _per_row(mn, 32)
    v *= _per_row(_inverse(d), 32)
    v += F32(0.5)
    b["d"], b["m"] = d, mn
    _q5_pack(_c_int(v).astype(np.uint8), b)


def _q8_levels(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = _row_absmax(x) / F32(127)
    return d, _round_away(x * _per_row(_inverse(d), x.shape[1])).astype(np.int8)


def _q_q8_0(x, b):
    d, qs = _q8_levels(x)
    b["d"] = d
    _put(b, "qs", qs)


def _q_q8_1(x, b):
    d, qs = _q8_levels(x)
    b["d"] = d
    _put(b, "qs", qs)
    b["s"] = qs.sum(axis=1, dtype=np.int32).astype(F32) * d


def _q_q8_k(x, b):
    mx = _signed_max(x)[:, None]
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, F32(-127) / mx, F32(0)).astype(F32)
    qs = np.minimum(_nearest_int(iscale * x), 127).astype(np.int8)
    b["qs"] = qs
    b["bsums"] = qs.reshape(len(x), 16, 16).sum(axis=2, dtype=np.int16)
    with np.errstate(divide="ignore"):
        b["d"] = np.where(mx != 0, F32(1) / iscale, F32(0))[:, 0]


def _ternary(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TQ1_0/TQ2_0: d = max |x|; levels round(x / d) + 1 in {0, 1, 2}."""
    d = _row_absmax(x)[:, None]
    r = _round_away(x * _per_row(_inverse(d), x.shape[1]))  # id = inf (a subnormal d): INT_MIN, + 1 wraps to 1 in 8 bits
    return d, (r + 1).astype(np.uint8)


def _pieces(t: np.ndarray, k: int) -> list[np.ndarray]:
    """Split each row of a (n, m*k) uint8 array into m contiguous (n, k) arrays."""
    v = np.ascontiguousarray(t).view(f"V{k}")
    return [np.ascontiguousarray(v[:, j]).view(np.uint8).reshape(len(t), k) for j in range(v.shape[1])]


def _q_tq1_0(x, b):
    d, t = _ternary(x)

    def pack(parts: list[np.ndarray]) -> np.ndarray:
        """Base-3 digits (first most significant) -> ceil(q * 256 / 243) per byte."""
        q = parts[0].astype(np.uint16)
        for p in parts[1:]:
            q *= np.uint16(3)
            q += p
        if len(parts) == 4:
            q *= np.uint16(3)  # 4 trits, shifted up by one
        q &= np.uint16(0xFF)
        q *= np.uint16(256)
        q += np.uint16(242)
        return (q // np.uint16(243)).astype(np.uint8)  # ((q & 255) * 256 + 242) / 243 < 2**16

    p32 = _pieces(t[:, :160], 32)
    p16 = _pieces(t[:, 160:240], 16)
    p4 = _pieces(t[:, 240:], 4)
    _put(b, "qs", np.concatenate([pack(p32), pack(p16)], axis=1))
    _put(b, "qh", pack(p4))
    b["d"] = d[:, 0]


def _q_tq2_0(x, b):
    d, t = _ternary(x)
    p = _pieces(t, 32)  # 8 runs of 32 levels (< 4): byte l of half h = sum_j run[4h + j] << 2j
    halves = [p[4 * h] | _shl(p[4 * h + 1], 2) | _shl(p[4 * h + 2], 4) | _shl(p[4 * h + 3], 6) for h in (0, 1)]
    _put(b, "qs", np.concatenate(halves, axis=1))
    b["d"] = d[:, 0]


def _best_fp4(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """best_index_mxfp4: the first of the 16 E2M1 codes minimising |kvalue * d - x| (float32).

    ``d`` (> 0 or 0) broadcasts against ``x``. The codes are +-[0, 1, 2, 3, 4, 6, 8, 12]
    (8-15 negative): a negative code never beats its positive twin for x >= 0 and the
    reverse for x < 0 (at 0 they tie and the first, positive, wins), so the answer is the
    best of the eight magnitudes for |x|, plus 8 for negative x. Along the sorted
    magnitudes the float32 error |k*d - |x|| falls strictly, then rises (a tie is possible
    only at the bottom), so the first minimum is the number of strict decreases.
    """
    a = np.abs(x)
    dd = np.ascontiguousarray(np.broadcast_to(d, x.shape), dtype=F32)
    count = np.zeros(x.shape, dtype=np.uint8)
    prev = np.abs(a)  # error of code 0: |0 * d - |x||
    for k in KVALUES_MXFP4[1:8]:
        err = dd * F32(k)
        err -= a
        np.abs(err, out=err)
        count += err < prev
        prev = err
    count += ((x < 0) & (count > 0)).view(np.uint8) << 3
    return count


def _q_mxfp4(x, b):
    amax = _row_absmax(x)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0).astype(np.int32).astype(np.uint8)
    i = _best_fp4(x, _E8M0_HALF[e][:, None])
    b["e"] = e
    _put(b, "qs", _pack_halves(i))


def _fp32_to_ue4m3(x: np.ndarray) -> np.ndarray:
    """ggml_fp32_to_ue4m3: round a positive float to unsigned E4M3 (saturating at 0x7E)."""
    x = np.minimum(x, F32(448)).astype(F32)
    bits = x.view(np.uint32).astype(np.int64)
    exp = ((bits >> 23) & 0xFF) - 127 + 7
    man = ((bits >> 20) & 7) + ((bits >> 19) & 1)
    exp = np.where(man > 7, exp + 1, exp)
    man = np.where(man > 7, 0, man)
    normal = np.where(exp >= 15, 0x7E, (np.clip(exp, 0, 15) << 3) | man)
    sub = np.minimum(np.trunc(x * F32(512) + F32(0.5)), 7).astype(np.int64)
    sub = np.where(sub < 1, 0, sub)
    orig_exp = ((bits >> 23) & 0xFF) - 127 + 7
    r = np.where(orig_exp <= 0, sub, np.where(orig_exp >= 15, 0x7E, normal))
    return np.where(x > 0, r, 0).astype(np.uint8)


def _q_nvfp4(x, b):
    n = len(x)
    xs = x.reshape(n, 4, 16)
    ue = _fp32_to_ue4m3(np.abs(xs).max(axis=2) / F32(6))
    i = _best_fp4(xs, _UE4M3_HALF[ue][:, :, None])
    b["d"] = ue
    _put(b, "qs", _pack_halves(i.reshape(n * 4, 16)).reshape(n, 32))


def _q_q1_0(x, b):
    d = np.cumsum(np.abs(x), axis=1, dtype=F32)[:, -1] / F32(128)  # sequential sum, as in C
    b["d"] = d
    b["qs"] = np.packbits(x >= 0, axis=1, bitorder="little")


def _q_q2_0(x, b):
    d = np.abs(x).max(axis=1, keepdims=True)
    q = np.clip(_round_away(x * _inverse(d)).astype(np.int64) + 1, 0, 3).astype(np.uint8).reshape(len(x), 16, 4)
    b["qs"] = np.bitwise_or.reduce(q << (2 * np.arange(4, dtype=np.uint8)), axis=2)
    b["d"] = d[:, 0]


_QUANTIZERS: dict[GGMLType, Callable[[np.ndarray, np.ndarray], None]] = {
    GGMLType.Q4_0: _q_q4_0, GGMLType.Q4_1: _q_q4_1, GGMLType.Q5_0: _q_q5_0,
    GGMLType.Q5_1: _q_q5_1, GGMLType.Q8_0: _q_q8_0, GGMLType.Q8_1: _q_q8_1,
    GGMLType.Q8_K: _q_q8_k, GGMLType.TQ1_0: _q_tq1_0, GGMLType.TQ2_0: _q_tq2_0,
    GGMLType.MXFP4: _q_mxfp4, GGMLType.NVFP4: _q_nvfp4, GGMLType.Q1_0: _q_q1_0,
    GGMLType.Q2_0: _q_q2_0,
}

QUANTIZE_TYPES: frozenset[GGMLType] = frozenset(
    [GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.F64,
     GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64, *_QUANTIZERS]
)
"""Every type :func:`quantize` writes."""


def _to_bf16(x: np.ndarray, out: np.ndarray) -> None:
    """ggml_compute_fp32_to_bf16 of float32 ``x`` into uint16 ``out``: round to nearest even;
    NaN stays a quiet NaN. (In 32-bit lanes: only NaNs can wrap, and they are redone.)"""
    u = x.view(np.uint32)
    r = u >> np.uint32(16)
    r &= np.uint32(1)
    r += np.uint32(0x7FFF)
    r += u
    r >>= np.uint32(16)
    np.copyto(out, r, casting="unsafe")
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(64)).astype(np.uint16)


def _to_int(x: np.ndarray, t: GGMLType) -> np.ndarray:
    dtype = t.numpy_dtype
    assert dtype is not None
    info = np.iinfo(dtype)
    if x.dtype.kind == "f":
        bad = ~np.isfinite(x) | (x != np.trunc(x))
        if bad.any():
            raise GGUFFormatError(f"{t.name} needs integer values, got {float(x[bad].flat[0])!r}")
    if x.size and (x.min() < info.min or x.max() > info.max):
        raise GGUFFormatError(f"values out of the {t.name} range [{info.min}, {info.max}]")
    return x.astype(dtype)


def quantize(array: np.ndarray, t: GGMLType | int, threads: int | None = None, engine: str = "auto") -> np.ndarray:
    """Encode a numeric array as the raw bytes of a tensor of ggml type ``t``.

    Quantized types follow ggml's ``quantize_row_*_ref`` exactly (the same bytes). Integer
    types need integer values in range. The array's last axis is the row.

    Args:
        array: any numeric array (its last dimension a multiple of ``t.block_size``).
        t: one of :data:`QUANTIZE_TYPES`.
        threads: worker threads, as in :func:`dequantize` (the bytes do not depend on it).
        engine: as in :func:`dequantize`, with :data:`COMPILED_QUANTIZE` (F16 from float32
            input only: numpy converts other float widths in one rounding step).

    Returns:
        uint8 array of shape ``(rows, bytes_per_row)`` (rows = product of the leading dims,
        1 for a 1-D array).

    Raises:
        GGUFFormatError: type not quantizable here, row length not a whole number of blocks,
            integer values out of range, or a bad ``threads`` or ``engine``.

    >>> quantize(np.array([1.0, -2.0], dtype=np.float32), GGMLType.F16).tobytes().hex()
    '003c00c0'
    >>> raw = quantize(np.full(32, 0.5, dtype=np.float32), GGMLType.Q4_0)
    >>> raw.shape, dequantize(raw, GGMLType.Q4_0, (32,))[:2].tolist()
    ((1, 18), [0.5, 0.5])
    """
    t = _resolve_type(t)
    a = np.asarray(array)
    if a.ndim == 0 or a.dtype.kind not in "fiub":
        raise GGUFFormatError(f"cannot quantize {a.dtype} array of shape {a.shape} to {t.name}")
    n_rows, cols = _check_shape(a.shape, t)
    if t not in QUANTIZE_TYPES:
        raise GGUFFormatError(f"quantizing to {t.name} is not supported (supported: "
                              f"{', '.join(sorted(x.name for x in QUANTIZE_TYPES))})")
    rows2d = a.reshape(n_rows, cols)
    compiled = _use_compiled(t, engine, COMPILED_QUANTIZE)
    if not t.quantized:
        if t in (GGMLType.BF16, GGMLType.F32, GGMLType.F16, GGMLType.F64):
            flat = np.ascontiguousarray(rows2d, dtype=F32 if t == GGMLType.BF16 else None).reshape(-1)
            compiled = compiled and flat.dtype == F32
            res = np.empty(flat.size, dtype=np.uint16 if t == GGMLType.BF16 else t.numpy_dtype)
            c = _CHUNK_ELEMENTS

            def convert(i: int) -> None:
                if compiled:
                    _compiled.encode(t, flat[i:i + c], res[i:i + c].view(np.uint8))
                elif t == GGMLType.BF16:
                    _to_bf16(flat[i:i + c], res[i:i + c])
                else:
                    with np.errstate(over="ignore"):  # beyond the F16 range: inf, as in ggml
                        np.copyto(res[i:i + c], flat[i:i + c], casting="unsafe")

            _run_chunks(range(0, flat.size, c), convert, _thread_count(threads, flat.size, compiled))
            return res.astype(res.dtype.newbyteorder("<"), copy=False).view(np.uint8).reshape(n_rows, -1)
        _thread_count(threads)  # checked, though integer types need no workers
        data = _to_int(rows2d, t)
        return np.ascontiguousarray(data).view(np.uint8).reshape(n_rows, -1)
    blocks = np.zeros(n_rows * cols // t.block_size, dtype=block_dtype(t))
    x = np.ascontiguousarray(rows2d, dtype=F32).reshape(-1, t.block_size)
    step = max(1, (1 << 16) // t.block_size)
    quantizer = _QUANTIZERS[t]
    raw = blocks.view(np.uint8).reshape(len(blocks), -1)

    def run(i: int) -> None:
        if compiled:
            _compiled.encode(t, x[i:i + step], raw[i:i + step])
            return
        with np.errstate(all="ignore"):
            quantizer(x[i:i + step], blocks[i:i + step])

    _run_chunks(range(0, len(x), step), run, _thread_count(threads, x.size, compiled))
    return raw.reshape(n_rows, -1)
