"""The IQ lattice searches: ggml's quantizers of IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S.

This module owns the numpy quantizers of the lattice types -- row quantizers
``q_iq*(x, out, imatrix)`` with the registry's ``quantize_rows`` signature, giving the bytes of
ggml's ``quantize_iq*`` (``ggml_quantize_chunk``) -- and the lattices they search, built at
first use from the grids of :mod:`.grids` (:func:`lattice`). ``csrc/quantize_iq.c`` is the
compiled twin: the same float32 operations in the same order.

**Lattices.** A grid point has 8 coordinates (IQ1, IQ2) or 4 (IQ3), each one of the grid's few
byte values; a coordinate's *level* is the rank of its value among them (IQ2: ``0x08 0x19 0x2b``
are levels 0, 1, 2; IQ3 has 8 levels; IQ1: -1, 0, 1). The searches compare a group of values
``x`` with ``scale * v[level]``, where ``v`` is ``2 * level + 1`` (IQ2, IQ3) or the IQ1 values
``-1, 0, 1`` shifted by plus or minus 1/8. A *key* packs a group's levels, 2 bits (IQ3: 3) per
coordinate, coordinate 0 lowest. Rounding ``x / scale`` to levels gives a key that is often not
a grid point; then ggml tries the key's *neighbours*: the grid points at the 1-3 (``nwant``)
smallest distinct squared level distances from it (ggml builds these lists in
``iq2xs_init_impl`` / ``iq3xs_init_impl``). :func:`lattice` builds the same lists, for the keys a
search can produce (levels 0..2 for IQ1 and IQ2, whose searches clamp there; 0..7 for IQ3), in
ggml's order -- by distance, then point index -- which matters: the first of equally good
candidates wins.

**The searches** (each 256-value super-block on its own; importance weights by position in the
row):

* IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S. Per sub-block (32 or 16 values) the values lose their
  signs (kept as sign bits; IQ2_XXS, IQ2_XS and IQ3_XXS store 7 per 8 values and make the count
  of negatives even by keeping the sign of the least important value). For 13 to 31 candidate
  scales around ``max / (2 kmax - 1)`` (IQ2_XXS: around the scale of ggml's ``make_qp_quants``)
  every group of 4 or 8 magnitudes is rounded to levels and moved onto the grid (the best
  neighbour by weighted squared distance); the candidate with the largest
  ``sum(w x q)^2 / sum(w q^2)`` wins, its groups off the grid are placed again at its own scale,
  and the scale is refitted. The sub-block scales become 4-bit multiples of ``max_scale / 31``.
* IQ1_S, IQ1_M. The values of a sub-block (32 or 16) are sorted; every split of the sorted
  values into levels -1 | 0 | 1 is scored exactly (with either shift sign per sub-block, IQ1_M:
  per 8 values), the best split is moved onto the grid, and 3-bit sub-block scales follow.
  IQ1_M scores its splits from prefix sums per half sub-block, as ggml does since llama.cpp PR
  #28706 (whose bytes differ from the older search's on a few blocks in 10,000).

**Exactness.** ggml sums element by element in float32, where numpy's ``sum`` adds pairwise: the
sums here are explicit loops (:func:`_seq_sum`). Every search keeps ggml's tie rule (strict
comparisons: the first best wins), its float32 operation order, its float -> int rounding
(:func:`~.ops.nearest_int`), and its quirks: IQ2_XXS's ``make_qp_quants`` stores negative levels
in a byte (they wrap), IQ3_S advances its output slots only past non-zero sub-blocks, IQ1_M
sums the skipped sub-blocks into its final scale. ggml sorts with the C library's ``qsort``;
glibc's is a stable merge sort, so equal values keep their order here too (other C libraries
may order ties differently, and their ggml then writes other IQ1 bytes).

**Hostile rows.** Where the weighted squared distances overflow float32 -- magnitudes from about
1e13 on (weights grow like ``|x|``, so distances like ``|x|^3``), less with large importance
weights -- ggml's searches find no candidate at a finite distance, or a NaN scale, and ggml
aborts the process (``GGML_ASSERT``). Both engines raise ``ValueError`` there instead, with the
same message; on every other row they give ggml's bytes. (IQ1_S skips what overflows: it never
aborts.)

>>> import numpy as np
>>> from gguf_schema.tensors.iquants import dq_iq3_s
>>> x = np.random.default_rng(0).normal(size=(1, 256)).astype(np.float32)
>>> q = np.zeros((1, 110), np.uint8)
>>> q_iq3_s(x, q, None)            # 3.44 bits per value
>>> y = np.empty((1, 256), np.float32)
>>> dq_iq3_s(q, y)
>>> round(float(np.sqrt(((y - x) ** 2).mean())), 3)
0.175
>>> grid = lattice("IQ3S")          # levels (7, 7, 7, 7) are no IQ3_S grid point; the nearest are:
>>> grid.neighbours_of([7, 7, 7, 7]), grid.levels[437].tolist()
([437, 338, 431, 441], [6, 4, 4, 5])
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import grids
from .layouts import QK_K
from .ops import F32, nearest_int

__all__ = ["Lattice", "lattice", "q_iq1_m", "q_iq1_s", "q_iq2_s", "q_iq2_xs", "q_iq2_xxs", "q_iq3_s", "q_iq3_xxs"]

FLT_MAX = F32(np.finfo(np.float32).max)
_UNREACHABLE = np.iinfo(np.int32).min


# ---------------------------------------------------------------------------- lattices


@dataclass(frozen=True, eq=False)
class Lattice:
    """A grid with its key map and neighbour lists (see the module docstring).

    Attributes:
        name: the grid (``"IQ2XXS"``, ``"IQ2XS"``, ``"IQ2S"``, ``"IQ1S"``, ``"IQ3XXS"``, ``"IQ3S"``).
        levels: ``(points, dim)`` uint8, the level of each coordinate of each grid point.
        bits: bits per coordinate in a key.
        code: ``(1 << bits * dim,)`` int32 by key: the grid point with that key, or ``-(r + 1)``
            for a key off the grid whose neighbours are list ``r``; INT32_MIN for keys no
            search produces.
        offsets: ``(lists + 1,)``: list ``r`` is ``neighbours[offsets[r]:offsets[r + 1]]``.
        neighbours: the lists, each ordered by (squared level distance, point index).
        nlevels: distinct coordinate values of the grid.
        slot_of_entry: ``(len(neighbours), dim)`` int32: for each list entry (a point p),
            ``i * nlevels + levels[p, i]``: where coordinate i of p finds its term in a
            ``(dim, nlevels)`` table of a search.
    """

    name: str
    levels: np.ndarray
    bits: int
    code: np.ndarray
    offsets: np.ndarray
    neighbours: np.ndarray
    nlevels: int
    slot_of_entry: np.ndarray

    @property
    def dim(self) -> int:
        return self.levels.shape[1]

    def key(self, lv: np.ndarray) -> np.ndarray:
        """Keys of level groups ``(..., dim, ...)`` along axis -2 (coordinate 0 lowest)."""
        k = lv[..., 0, :].astype(np.int32)
        for i in range(1, self.dim):
            k |= lv[..., i, :].astype(np.int32) << (self.bits * i)
        return k

    def neighbours_of(self, lv: list[int]) -> list[int]:
        """The neighbour list of a group of levels (``[]`` for a grid point)."""
        c = int(self.code[self.key(np.asarray(lv).reshape(-1, 1))[0]])
        return [] if c >= 0 else self.neighbours[self.offsets[-c - 1] : self.offsets[-c]].tolist()


# grid name -> (grid, nwant): ggml looks at the nwant nearest distances
_GRIDS = {
    "IQ2XXS": (grids.IQ2XXS_GRID, 2),
    "IQ2XS": (grids.IQ2XS_GRID, 2),
    "IQ2S": (grids.IQ2S_GRID, 1),
    "IQ1S": (grids.IQ1S_GRID, 3),
    "IQ3XXS": (grids.IQ3XXS_GRID, 2),
    "IQ3S": (grids.IQ3S_GRID, 3),
}


@functools.cache
def lattice(name: str) -> Lattice:
    """The lattice of a grid of :mod:`.grids`, built once at first use (0.1-0.8 s).

    Construction: levels = rank of each grid byte among the grid's distinct values; for every
    key whose levels are all at most ``top`` (2 for 8-coordinate grids, 7 for 4-coordinate
    ones) and which is no grid point, the squared level distance to every grid point, the
    ``nwant`` smallest distinct distances, and the points at those distances sorted by
    (distance, index).
    """
    grid, nwant = _GRIDS[name]
    values, levels = np.unique(grid, return_inverse=True)
    levels = levels.reshape(grid.shape).astype(np.uint8)
    points, dim = levels.shape
    bits, top = (2, 2) if dim == 8 else (3, 7)
    shifts = bits * np.arange(dim)
    combos = np.array(list(itertools.product(range(top + 1), repeat=dim)), dtype=np.int16)[:, ::-1]
    keys = (combos.astype(np.int32) << shifts).sum(axis=1)
    point_keys = (levels.astype(np.int32) << shifts).sum(axis=1)
    code = np.full(1 << (bits * dim), _UNREACHABLE, dtype=np.int32)
    code[point_keys] = np.arange(points, dtype=np.int32)
    off = code[keys] < 0
    keys, combos = keys[off], combos[off]
    order = np.argsort(keys)
    keys, combos = keys[order], combos[order]
    dist = np.zeros((len(keys), points), dtype=np.int16)
    for i in range(dim):
        dist += (combos[:, i, None] - levels[None, :, i].astype(np.int16)) ** 2
    limit = np.full(len(keys), -1, dtype=np.int16)
    for _ in range(nwant):  # the next larger distance, nwant times
        nxt = np.where(dist > limit[:, None], dist, np.int16(np.iinfo(np.int16).max)).min(axis=1)
        limit = np.where(nxt < np.iinfo(np.int16).max, nxt, limit)
    rows, cols = np.nonzero(dist <= limit[:, None])
    order = np.lexsort((cols, dist[rows, cols], rows))
    counts = np.bincount(rows, minlength=len(keys))
    code[keys] = -1 - np.arange(len(keys), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    neighbours = cols[order].astype(np.int32)
    slots = (np.arange(dim) * len(values) + levels[neighbours]).astype(np.int32)
    return Lattice(name, levels, bits, code, offsets, neighbours, len(values), slots)


def _best_neighbours(
    lat: Lattice, code: np.ndarray, x: np.ndarray, w: np.ndarray, scale: np.ndarray, table: np.ndarray
) -> np.ndarray:
    """For m keys off the grid (``code`` < 0): the neighbour with the least
    ``sum_i w_i (scale * table[level_i] - x_i)^2`` below FLT_MAX (summed in order, first of
    equals), or -1 where none is (ggml aborts). x, w ``(m, dim)``, scale ``(m,)``, table
    ``(levels,)`` or ``(m, levels)``.

    Each term depends only on the coordinate and its level: the ``dim * levels`` possible terms
    of each key are computed first (the same float32 operations ggml repeats per neighbour)
    and every neighbour's distance is the in-order sum of its terms.
    """
    dim, nlev = lat.dim, lat.nlevels
    values = table[:nlev][None, None, :] if table.ndim == 1 else table[:, None, :nlev]
    diff = scale[:, None, None] * values - x[:, :, None]
    term = (w[:, :, None] * diff * diff).reshape(-1)
    row = -code.astype(np.int64) - 1
    start = lat.offsets[row]
    count = lat.offsets[row + 1] - start
    out = np.empty(len(code), np.int64)
    ends = np.cumsum(count)
    lo = 0
    while lo < len(code):  # batches of about 2**16 candidates: the arrays stay in the CPU's cache
        hi = max(lo + 1, int(np.searchsorted(ends, ends[lo] - count[lo] + (1 << 16), side="right")))
        out[lo:hi] = _nearest_of(lat, term, lo, start[lo:hi], count[lo:hi], dim * nlev)
        lo = hi
    return out


def _nearest_of(
    lat: Lattice, term: np.ndarray, first: int, start: np.ndarray, count: np.ndarray, width: int
) -> np.ndarray:
    """The best neighbour of queries first, first + 1, ... (lists ``start``, ``count``), given
    the flat table of their terms (``width`` per query); -1 where no distance is below FLT_MAX."""
    m = len(start)
    seg_start = np.cumsum(count) - count
    seg = np.repeat(np.arange(m, dtype=np.int32), count)
    pos = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(start - seg_start, count)
    t = term[lat.slot_of_entry[pos] + ((seg + first) * width)[:, None]]
    d2 = t[:, 0] + F32(0)
    for i in range(1, lat.dim):
        d2 += t[:, i]
    d2 = np.where(d2 < FLT_MAX, d2, F32(np.inf))
    least = np.minimum.reduceat(d2, seg_start)
    hits = np.flatnonzero(d2 == np.repeat(least, count))
    at = hits[np.searchsorted(seg[hits], np.arange(m))]
    return np.where(least < np.inf, lat.neighbours[pos[at]], -1)


# ---------------------------------------------------------------------------- float32 helpers


def _seq_sum(t: np.ndarray, axis: int = 0) -> np.ndarray:
    """C's ``s = 0.0f; for (i...) s += t[i]`` along ``axis``: one float32 addition at a time."""
    t = np.moveaxis(t, axis, 0)
    s = t[0] + F32(0)
    for r in t[1:]:
        s += r
    return s


def _seq_max(t: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """ggml's ``m = start (or t[0]); m = MAX(m, t[i])`` (``a > b ? a : b``) along axis 0."""
    m, rest = (t[0].copy(), t[1:]) if start is None else (start.copy(), t)
    for r in rest:
        m = np.where(m > r, m, r)
    return m


def _running_best(
    sqx: np.ndarray, sq2: np.ndarray, best: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """ggml's scan over candidates c = 0, 1, ... (axis 0 of ``sqx``, ``sq2``; columns are
    sub-blocks): where ``sq2 > 0 and sqx * sqx > best * sq2``, ``scale = sqx / sq2``,
    ``best = scale * sqx`` and c is picked (strictly better replaces: the first best stays).
    Returns (pick, -1 where none; scale).

    Candidates go in blocks of 32: within a block, a column's first pick has to beat the best
    held at the block's start, so columns where no candidate of the block does are skipped
    and the others scanned one candidate at a time, exactly as ggml does.
    """
    best, scale = best.copy(), scale.copy()
    pick = np.full(sqx.shape[1], -1)
    for c0 in range(0, len(sqx), 32):
        bx, b2 = sqx[c0 : c0 + 32], sq2[c0 : c0 + 32]
        cols = np.flatnonzero(((b2 > 0) & (bx * bx > best * b2)).any(axis=0))
        if not len(cols):
            continue
        b, sc, pk = best[cols], scale[cols], pick[cols]
        for k in range(len(bx)):
            x, q = bx[k, cols], b2[k, cols]
            take = (q > 0) & (x * x > b * q)
            if take.any():
                new = x / q
                sc = np.where(take, new, sc)
                b = np.where(take, new * x, b)
                pk[take] = c0 + k
        best[cols], scale[cols], pick[cols] = b, sc, pk
    return pick, scale


def _half_bits(v: np.ndarray) -> np.ndarray:
    """``GGML_FP32_TO_FP16`` as uint16 bits: round to nearest even, a NaN becomes 0x7e00 with its sign."""
    v = np.asarray(v, F32)
    h = v.astype(np.float16).view(np.uint16)
    sign = (v.view(np.uint32) >> 16).astype(np.uint16) & np.uint16(0x8000)
    return np.where(np.isnan(v), sign | np.uint16(0x7E00), h)


def _le_bytes(a: np.ndarray, dtype: str) -> np.ndarray:
    """Integers as the bytes of little-endian ``dtype`` words, ``(..., k * size)``."""
    b = np.ascontiguousarray(a, dtype=dtype).view(np.uint8)
    return b.reshape((*b.shape[:-1], -1))


def _nearest_level(v: np.ndarray, hi: int) -> np.ndarray:
    """``MAX(0, MIN(hi, nearest_int(v)))``."""
    return np.clip(nearest_int(v), 0, hi)


def _columns(a: np.ndarray, n: int) -> np.ndarray:
    """Consecutive runs of n values of ``a`` as the columns of a contiguous ``(n, runs)`` array."""
    return np.ascontiguousarray(a.reshape(-1, n).T)


def _fail_message(type_name: str, block: np.ndarray, qw: np.ndarray | None) -> str:
    """The ValueError message of a super-block ggml aborts on (csrc/quantize_iq.c, fail, words it the same)."""
    weights = "" if qw is None else f", importance up to {float(np.abs(qw).max()):.3g}"
    return (
        f"ggml's {type_name} quantizer aborts on a block of 256 values (magnitudes up to "
        f"{float(np.abs(block).max()):.3g}{weights}): its lattice search overflows float32 and ggml "
        "writes no bytes for it; scale the values or the weights down"
    )


@dataclass
class _Rows:
    """Super-blocks of a row quantizer's input: ``x`` ``(nb, 256)``, their importance weights
    ``qw`` (or None) and the per-super-block ``sigma2 = mul * sum(x^2) / 256``."""

    x: np.ndarray
    qw: np.ndarray | None
    sumx2: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray, imatrix: np.ndarray | None) -> _Rows:
        n_rows, cols = x.shape
        xb = np.ascontiguousarray(x, dtype=F32).reshape(-1, QK_K)
        qw = None
        if imatrix is not None:
            qw = np.broadcast_to(np.asarray(imatrix, F32).reshape(1, -1, QK_K), (n_rows, cols // QK_K, QK_K))
            qw = qw.reshape(-1, QK_K)
        return cls(xb, qw, _seq_sum(_columns(xb * xb, QK_K)))

    def check(self, ok: np.ndarray | np.bool_, type_name: str) -> None:
        """Raise ValueError for the first super-block where ``ok`` (per super-block) is False."""
        bad = np.flatnonzero(~ok)
        if len(bad):
            raise ValueError(_fail_message(type_name, self.x[bad[0]], None if self.qw is None else self.qw[bad[0]]))


def _weights(rows: _Rows, n: int, sigma2: np.ndarray, xs: np.ndarray, no_imatrix: str) -> np.ndarray:
    """Importance of each value, position-major ``(n, S)``: ``qw * sqrt(sigma2 + x^2)`` with an
    importance matrix; without one ``x^2`` (``no_imatrix="x2"``) or ``sigma2 / 4 + x^2`` (IQ2_S)."""
    if rows.qw is not None:
        return _columns(rows.qw, n) * np.sqrt(sigma2 + xs * xs)
    if no_imatrix == "x2":
        return xs * xs
    return F32(0.25) * sigma2 + xs * xs


# ---------------------------------------------------------------------------- IQ2 / IQ3


@dataclass(frozen=True)
class _Spec:
    """What distinguishes the five lattice-search quantizers (see csrc/quantize_iq.c, LTYPES)."""

    name: str
    grid: str
    n: int  # values per sub-block
    kmax: int  # ggml's kMaxQ: levels 0 .. kmax-1
    steps: int  # candidate scales is = -steps .. steps,
    step: float  # ... id = (2 kmax - 1 + is * step) / top
    always: bool  # IQ2_XXS: scale from make_qp_quants, second pass whenever scale > 0
    all_groups: bool  # the second pass places every group, not only those off the grid
    start_off: bool  # IQ3_S: groups count as off the grid until a candidate is taken
    parity: bool  # 7 sign bits per 8 values (an even count of negatives)
    eps: float  # sub-blocks with max below it are skipped (0: only exact zeros)
    sigma_mul: float  # sigma2 = sigma_mul * sum(x^2) / 256
    fudge: float  # stored d = max_scale / 31 * fudge
    type_size: int


_IQ2_XXS = _Spec("IQ2_XXS", "IQ2XXS", 32, 3, 6, 0.1, True, True, False, True, 1e-15, 1.0, 1.0, 66)
_IQ2_XS = _Spec("IQ2_XS", "IQ2XS", 16, 3, 9, 0.1, False, False, False, True, 1e-15, 1.0, 1.0, 74)
_IQ2_S = _Spec("IQ2_S", "IQ2S", 16, 3, 9, 0.1, False, False, False, False, 1e-8, 2.0, 0.9875, 82)
_IQ3_XXS = _Spec("IQ3_XXS", "IQ3XXS", 32, 8, 15, 0.2, False, False, False, True, 1e-8, 2.0, 1.0125, 98)
_IQ3_S = _Spec("IQ3_S", "IQ3S", 32, 8, 9, 0.2, False, True, True, False, 0.0, 2.0, 1.033, 110)


def _place(
    lat: Lattice,
    kmax: int,
    x: np.ndarray,
    waux: np.ndarray,
    ids: np.ndarray,
    scales: np.ndarray,
    select: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Round magnitudes to levels and move every group onto the grid.

    x, waux ``(n, S)``; ids, scales ``(..., S)`` (one id and scale per candidate and sub-block).
    Returns levels ``(..., n, S)`` (int32), on-grid flags ``(..., groups, S)`` before moving,
    and ``ok`` ``(S,)``: False where a selected group found no neighbour at a finite distance.
    ``select`` ``(groups, S)``: the groups to place (the others' levels are left as rounded).
    """
    n, S = x.shape
    dim = lat.dim
    groups = n // dim
    lv = _nearest_level(F32(0.5) * (ids[..., None, :] * x - F32(1)), kmax - 1)
    lvg = lv.reshape((*lv.shape[:-2], groups, dim, S))
    code = lat.code[lat.key(lvg)]
    on = code >= 0
    want = ~on if select is None else ~on & select
    ok = np.ones(S, dtype=bool)
    where = np.nonzero(want)
    if len(where[0]):
        g, s = where[-2], where[-1]
        xg = x.reshape(groups, dim, S)
        wg = waux.reshape(groups, dim, S)
        table = (2 * np.arange(8) + 1).astype(F32)
        lead = where[:-2]
        at = (*lead, s)
        p = _best_neighbours(lat, code[where], xg[g, :, s], wg[g, :, s], scales[at], table)
        ok[s[p < 0]] = False
        index: tuple[Any, ...] = (*lead, g, slice(None), s)
        lvg[index] = lat.levels[np.maximum(p, 0)]
    return lv, on, ok


def _level_sums(w: np.ndarray, wx: np.ndarray, lv: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """``sum w x q`` and ``sum w q q`` with q = 2 level + 1, added in order along ``axis``."""
    q = (2 * lv + 1).astype(F32)
    return _seq_sum(wx * q, axis), _seq_sum(w * q * q, axis)


def _search(
    sp: _Spec, lat: Lattice, xv: np.ndarray, w: np.ndarray, waux: np.ndarray, top: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The scale search of S sub-blocks (magnitudes ``xv``, weights, sqrt weights: ``(n, S)``).

    Returns the scale, the levels ``(n, S)``, the grid points ``(groups, S)`` and ``ok`` (S,).
    """
    n, S = xv.shape
    groups = n // lat.dim
    wx = w * xv
    cand = np.arange(-sp.steps, sp.steps + 1).astype(F32)
    ids = (F32(2 * sp.kmax - 1) + cand[:, None] * F32(sp.step)) / top
    lv_all, on_all, ok = _place(lat, sp.kmax, xv, waux, ids, F32(1) / ids)
    sqx, sq2 = _level_sums(w, wx, lv_all, axis=1)
    choice, scale = _running_best(sqx, sq2, np.zeros(S, F32), scale)
    lv = np.zeros((n, S), np.int32)
    on = np.full((groups, S), not sp.start_off)
    taken = np.flatnonzero(choice >= 0)
    lv[:, taken] = lv_all[choice[taken], :, taken].T
    on[:, taken] = on_all[choice[taken], :, taken].T
    again = (sp.always | (~on).any(axis=0)) & (scale > 0)
    sub = np.flatnonzero(again)
    if len(sub):
        sc = scale[sub]
        select = None if sp.all_groups else ~on[:, sub]
        lv2, _, ok2 = _place(lat, sp.kmax, xv[:, sub], waux[:, sub], F32(1) / sc, sc, select)
        if select is not None:
            lv2 = np.where(np.repeat(select, lat.dim, axis=0), lv2, lv[:, sub])
        lv[:, sub] = lv2
        ok[sub] &= ok2
        a, b = _level_sums(w[:, sub], wx[:, sub], lv2, axis=0)
        scale[sub] = np.where(b > 0, a / np.where(b > 0, b, F32(1)), sc)
    code = lat.code[lat.key(lv.reshape(groups, lat.dim, S))]
    ok &= (code >= 0).all(axis=0)
    return scale, lv, np.maximum(code, 0), ok


def _signs(xs: np.ndarray, w: np.ndarray, parity: bool) -> tuple[np.ndarray, np.ndarray]:
    """Magnitudes ``(n, S)`` and sign bytes ``(n / 8, S)`` of position-major values (see
    csrc/quantize_iq.c, group_signs): with parity, an odd count of negatives keeps the sign of
    the first value of least ``w x x`` (its magnitude turns negative) and 7 bits are kept."""
    n, S = xs.shape
    xg = xs.reshape(n // 8, 8, S)
    neg = ~(xg >= 0)
    xval = np.where(neg, -xg, xg)
    bit = (1 << np.arange(8, dtype=np.int32))[None, :, None]
    s = (neg * bit).sum(axis=1)
    if parity:
        odd = neg.sum(axis=1) % 2 == 1
        a = w.reshape(n // 8, 8, S) * xg * xg
        least, at = a[:, 0].copy(), np.zeros(a[:, 0].shape, np.int32)
        for i in range(1, 8):
            lower = a[:, i] < least
            least = np.where(lower, a[:, i], least)
            at = np.where(lower, i, at)
        gi, si = np.nonzero(odd)
        xval[gi, at[gi, si], si] = -xval[gi, at[gi, si], si]
        s = np.where(odd, s ^ (1 << at), s) & 127
    return xval.reshape(n, S), s


def _qp_scale(x: np.ndarray, w: np.ndarray, nmax: int) -> np.ndarray:
    """ggml's ``make_qp_quants`` (levels 0..nmax) on position-major ``(n, S)`` values: its scale."""
    n, S = x.shape
    mx = _seq_max(x, np.zeros(S, F32))
    small = mx < F32(1e-15)
    mx = np.where(small, F32(1), mx)
    iscale = F32(nmax) / mx
    L = nearest_int(iscale * x).astype(np.uint8)
    scale = F32(1) / iscale
    d = x - scale * L.astype(F32)
    best = _seq_sum(w * d * d)
    for i in (-4, -3, -2, -1, 1, 2, 3, 4):
        iscale_i = (F32(0.1) * F32(i) + F32(nmax)) / mx
        scale_i = F32(1) / iscale_i
        lf = np.minimum(nmax, nearest_int(iscale_i * x)).astype(F32)
        d = x - scale_i * lf
        mse = _seq_sum(w * d * d)
        better = mse < best
        best = np.where(better, mse, best)
        iscale = np.where(better, iscale_i, iscale)
    lev = np.minimum(nmax, nearest_int(iscale * x))
    L = lev.astype(np.uint8)  # a negative level wraps, as in ggml's uint8_t array
    lf = lev.astype(F32)
    wx = w * x
    sumlx = _seq_sum(wx * lf)
    suml2 = _seq_sum(w * lf * lf)
    for _ in range(5):
        changed = np.zeros(S, dtype=bool)
        for i in range(n):
            li = L[i].astype(F32)
            slx = sumlx - wx[i] * li
            sl2 = suml2 - w[i] * li * li
            pos = (slx > 0) & (sl2 > 0)
            new = np.minimum(nmax, nearest_int(x[i] * sl2 / np.where(pos, slx, F32(1))))
            try_ = pos & (new != L[i])
            nf = new.astype(F32)
            slx = slx + wx[i] * nf
            sl2 = sl2 + w[i] * nf * nf
            take = try_ & (slx * slx * suml2 > sumlx * sumlx * sl2)
            if take.any():
                L[i] = np.where(take, new.astype(np.uint8), L[i])
                sumlx = np.where(take, slx, sumlx)
                suml2 = np.where(take, sl2, suml2)
                changed |= take
        if not changed.any():  # a pass without change leaves the state as it was: done
            break
    return np.where(small | ~(suml2 > 0), F32(0), sumlx / np.where(suml2 > 0, suml2, F32(1)))


def _lattice_rows(sp: _Spec, x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None) -> None:
    if imatrix is None and sp.name in ("IQ2_XXS", "IQ2_XS"):
        raise ValueError(f"ggml quantizes {sp.name} only with an importance matrix")
    with np.errstate(all="ignore"):
        _lattice_blocks(sp, _Rows.of(x, imatrix), out.reshape(-1, sp.type_size))


def _lattice_blocks(sp: _Spec, rows: _Rows, y: np.ndarray) -> None:
    lat = lattice(sp.grid)
    n, nb = sp.n, len(rows.x)
    nsub = QK_K // n
    S = nb * nsub
    groups = n // lat.dim
    sigma2 = np.repeat(F32(sp.sigma_mul) * rows.sumx2 / F32(QK_K), nsub)
    xs = _columns(rows.x, n)
    w = _weights(rows, n, sigma2, xs, "sigma" if sp.name == "IQ2_S" else "x2")
    waux = np.sqrt(w)
    xval, signs = _signs(xs, w, sp.parity)
    mx = _seq_max(xval)
    active = ~(mx < F32(sp.eps)) if sp.eps else mx != 0
    top = mx
    scale = mx / F32(2 * sp.kmax - 1)
    if sp.always:
        act = np.flatnonzero(active)
        scale = np.zeros(S, F32)
        scale[act] = _qp_scale(xval[:, act], w[:, act], sp.kmax + 1)
        top = scale * F32(sp.kmax)
        active &= ~(top <= 0)
    act = np.flatnonzero(active)
    sc, _, pts, ok = _search(sp, lat, xval[:, act], w[:, act], waux[:, act], top[act], scale[act].copy())
    flip = sc < 0
    sc = np.where(flip, -sc, sc)
    sg = signs[:, act]
    sg[:, flip] = ~sg[:, flip] & (127 if sp.parity else 255)
    ok &= sc >= 0
    sub_ok = np.ones(S, dtype=bool)
    sub_ok[act] = ok
    rows.check(sub_ok.reshape(nb, nsub).all(axis=1), sp.name)
    scales: np.ndarray = np.zeros(S, F32)
    scales[act] = sc
    point: np.ndarray = np.zeros((groups, S), np.int64)
    point[:, act] = pts
    sign: np.ndarray = np.zeros((n // 8, S), np.int64)
    sign[:, act] = sg
    scales = scales.reshape(nb, nsub)
    point = point.T.reshape(nb, nsub, groups)
    sign = sign.T.reshape(nb, nsub, n // 8)
    max_scale = _seq_max(scales.T, np.zeros(nb, F32))
    flat = max_scale == 0
    d = max_scale / F32(31)
    id_ = F32(1) / d
    nib = _nearest_level(F32(0.5) * (id_[:, None] * scales - F32(1)), 15)
    nib[flat] = 0
    y[:] = 0
    y[:, 0:2] = _le_bytes(np.where(flat, 0, _half_bits(d * F32(sp.fudge))), "<u2").reshape(nb, 2)
    if sp.name == "IQ2_XXS":  # per 32: 4 point bytes, a word of 4 x 7 sign bits and the scale
        word = (sign << (7 * np.arange(4))).sum(axis=2) | (nib << 28)
        q = np.concatenate([point.astype(np.uint8), _le_bytes(word, "<u4").reshape(nb, nsub, 4)], axis=2)
        y[:, 2:] = q.reshape(nb, 64)
    elif sp.name == "IQ2_XS":  # per 8: point | signs << 9; scale nibbles
        y[:, 2:66] = _le_bytes(point | (sign << 9), "<u2").reshape(nb, 64)
        y[:, 66:] = nib[:, 0::2] | (nib[:, 1::2] << 4)
    elif sp.name == "IQ2_S":  # point low bytes, signs, 2 high bits per point, scale nibbles
        p = point.reshape(nb, 32)
        y[:, 2:34] = p & 255
        y[:, 34:66] = sign.reshape(nb, 32)
        y[:, 66:74] = ((p >> 8).reshape(nb, 8, 4) << (2 * np.arange(4))).sum(axis=2)
        y[:, 74:] = nib[:, 0::2] | (nib[:, 1::2] << 4)
    elif sp.name == "IQ3_XXS":  # 64 point bytes; 8 words of 4 x 7 sign bits and the scale
        y[:, 2:66] = point.reshape(nb, 64)
        word = (sign << (7 * np.arange(4))).sum(axis=2) | (nib << 28)
        y[:, 66:] = _le_bytes(word, "<u4").reshape(nb, 32)
    else:  # IQ3_S: points and signs at the running slot (it skips zero sub-blocks), 9th bits, scales
        on = active.reshape(nb, nsub)
        slot = np.cumsum(on, axis=1) - on
        bi, si = np.nonzero(on)
        qs = np.zeros((nb, nsub, 8), np.uint8)
        sgn = np.zeros((nb, nsub, 4), np.uint8)
        qs[bi, slot[bi, si]] = point[bi, si] & 255
        sgn[bi, slot[bi, si]] = sign[bi, si]
        y[:, 2:66] = qs.reshape(nb, 64)
        y[:, 66:74] = ((point >> 8) << np.arange(8)).sum(axis=2)
        y[:, 74:106] = sgn.reshape(nb, 32)
        y[:, 106:] = nib[:, 0::2] | (nib[:, 1::2] << 4)
    if sp.parity:  # all scales zero: IQ2_XXS, IQ2_XS and IQ3_XXS drop the points and signs too
        y[flat, 2:] = 0


def q_iq2_xxs(x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None) -> None:
    """ggml's ``quantize_iq2_xxs``: rows ``(n, k)`` float32 -> ``out`` ``(n, k / 256 * 66)`` uint8."""
    _lattice_rows(_IQ2_XXS, x, out, imatrix)


def q_iq2_xs(x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None) -> None:
    """ggml's ``quantize_iq2_xs`` (74 bytes per 256 values)."""
    _lattice_rows(_IQ2_XS, x, out, imatrix)


def q_iq2_s(x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None) -> None:
    """ggml's ``quantize_iq2_s`` (82 bytes per 256 values)."""
    _lattice_rows(_IQ2_S, x, out, imatrix)


def q_iq3_xxs(x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None) -> None:
    """ggml's ``quantize_iq3_xxs`` (98 bytes per 256 values)."""
    _lattice_rows(_IQ3_XXS, x, out, imatrix)


def q_iq3_s(x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None) -> None:
    """ggml's ``quantize_iq3_s`` (110 bytes per 256 values)."""
    _lattice_rows(_IQ3_S, x, out, imatrix)


# ---------------------------------------------------------------------------- IQ1

_X_PLUS = np.array([-1 + 0.125, 0.125, 1 + 0.125], dtype=F32)  # levels -1, 0, 1 shifted by +1/8
_X_MINUS = np.array([-1 - 0.125, -0.125, 1 - 0.125], dtype=F32)
_SHIFTED = np.stack([_X_PLUS, _X_MINUS])


def _sorted_columns(xs: np.ndarray) -> np.ndarray:
    """The order of each column ascending; equal values keep their order (glibc's qsort is a
    stable merge sort; +0.0 and -0.0 are equal)."""
    return np.argsort(xs, axis=0, kind="stable")


def _iq1_points(
    lat: Lattice, L: np.ndarray, xs: np.ndarray, w: np.ndarray, minus: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Grid points of the levels ``L`` ``(n, S)``, 8 per group; off the grid the best neighbour
    at ``scale`` with the group's shifted values (``minus`` ``(groups, S)``: minus shift), then
    the scale refitted where any group moved. Returns points ``(groups, S)``, the refitted
    scale and ok (S,)."""
    n, S = L.shape
    groups = n // 8
    code = lat.code[lat.key(L.reshape(groups, 8, S))]
    ok = np.ones(S, dtype=bool)
    off = np.nonzero(code < 0)
    pts = code.copy()
    if len(off[0]):
        g, s = off
        xg, wg = xs.reshape(groups, 8, S), w.reshape(groups, 8, S)
        p = _best_neighbours(lat, code[off], xg[g, :, s], wg[g, :, s], scale[s], _SHIFTED[minus[off].astype(int)])
        ok[s[p < 0]] = False
        pts[off] = np.maximum(p, 0)
        L.reshape(groups, 8, S)[g, :, s] = lat.levels[pts[off]]
        moved = np.zeros(S, dtype=bool)
        moved[s] = True
        cols = np.flatnonzero(moved)
        v = _SHIFTED[np.repeat(minus[:, cols], 8, axis=0).astype(int), L[:, cols]]
        wq = w[:, cols] * v
        sqx = _seq_sum(wq * xs[:, cols])
        sq2 = _seq_sum(wq * v)
        fit = (sqx > 0) & (sq2 > 0)
        scale = scale.copy()
        scale[cols] = np.where(fit, sqx / np.where(fit, sq2, F32(1)), scale[cols])
    return pts, scale, ok


def q_iq1_s(x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None) -> None:
    """ggml's ``quantize_iq1_s`` (50 bytes per 256 values; needs an importance matrix)."""
    if imatrix is None:
        raise ValueError("ggml quantizes IQ1_S only with an importance matrix")
    with np.errstate(all="ignore"):
        _iq1_s(_Rows.of(x, imatrix), out.reshape(-1, 50))


def _iq1_s(rows: _Rows, y: np.ndarray) -> None:
    lat = lattice("IQ1S")
    nb = len(rows.x)
    S = nb * 8
    sigma2 = np.repeat(F32(2) * rows.sumx2 / F32(QK_K), 8)
    xs = _columns(rows.x, 32)
    w = _weights(rows, 32, sigma2, xs, "x2")
    mx = _seq_max(np.abs(xs))
    active = ~(mx < F32(1e-12))
    order = _sorted_columns(xs)
    cols = np.arange(S)
    xo, wo = xs[order, cols], w[order, cols]
    zero = np.zeros((1, S), F32)
    sumx = np.cumsum(np.concatenate([zero, wo * xo]), axis=0, dtype=F32)
    sumw = np.cumsum(np.concatenate([zero, wo]), axis=0, dtype=F32)
    i1, i2 = np.array([(a, b) for a in range(33) for b in range(a, 33)]).T
    a, b, c = sumx[i1] - sumx[0], sumx[i2] - sumx[i1], sumx[32] - sumx[i2]
    aw, bw, cw = sumw[i1] - sumw[0], sumw[i2] - sumw[i1], sumw[32] - sumw[i2]
    v = _SHIFTED[:, :, None, None]  # (shift, level, 1, 1)
    sqx = a * v[:, 0] + b * v[:, 1] + c * v[:, 2]  # (shift, split, S)
    sq2 = aw * v[:, 0] * v[:, 0] + bw * v[:, 1] * v[:, 1] + cw * v[:, 2] * v[:, 2]
    act = np.flatnonzero(active)  # each split with the plus shift, then the minus shift:
    pick = np.full(S, -1)
    scale = mx.copy()
    cands = (2 * len(i1), len(act))
    pick[act], scale[act] = _running_best(
        sqx[:, :, act].swapaxes(0, 1).reshape(cands),
        sq2[:, :, act].swapaxes(0, 1).reshape(cands),
        np.full(len(act), -FLT_MAX, F32),
        mx[act],
    )
    active &= pick >= 0
    act = np.flatnonzero(active)
    k = pick[act] // 2
    minus = pick[act] % 2 == 1
    pos = np.arange(32)[:, None]
    L = np.where(pos < i1[k], 0, np.where(pos < i2[k], 1, 2))  # by sorted position
    Lv = np.empty_like(L)
    Lv[order[:, act], np.arange(len(act))] = L
    sc = scale[act]
    neg = sc < 0
    Lv[:, neg] = 2 - Lv[:, neg]
    sc = np.where(neg, -sc, sc)
    minus ^= neg
    pts, sc, ok = _iq1_points(lat, Lv, xs[:, act], w[:, act], np.broadcast_to(minus, (4, len(act))), sc)
    ok &= sc >= 0
    sub_ok = np.ones(S, dtype=bool)
    sub_ok[act] = ok
    rows.check(sub_ok.reshape(nb, 8).all(axis=1), "IQ1_S")
    scales: np.ndarray = np.zeros(S, F32)
    scales[act] = sc
    shift_minus = np.zeros(S, dtype=bool)
    shift_minus[act] = minus
    point: np.ndarray = np.zeros((4, S), np.int64)
    point[:, act] = pts
    scales = scales.reshape(nb, 8)
    point = point.T.reshape(nb, 8, 4)
    max_scale = _seq_max(scales.T, np.zeros(nb, F32))
    flat = max_scale == 0
    d = max_scale / F32(15)
    id_ = F32(1) / d
    lev = _nearest_level(F32(0.5) * (id_[:, None] * scales - F32(1)), 7) | (shift_minus.reshape(nb, 8) << 3)
    lev[flat] = 0
    qh = ((point >> 8) << (3 * np.arange(4))).sum(axis=2) | (lev << 12)
    y[:] = 0
    y[:, 0:2] = _le_bytes(np.where(flat, 0, _half_bits(d * F32(1.125))), "<u2").reshape(nb, 2)
    y[:, 2:34] = (point & 255).reshape(nb, 32)
    y[:, 34:] = _le_bytes(qh, "<u2").reshape(nb, 16)


def q_iq1_m(x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None) -> None:
    """ggml's ``quantize_iq1_m`` (56 bytes per 256 values)."""
    with np.errstate(all="ignore"):
        _iq1_m(_Rows.of(x, imatrix), out.reshape(-1, 56))


# the (i1, i2) splits of 16 sorted values in ggml's order
_SPLITS16 = np.array([(a, b) for a in range(17) for b in range(a, 17)]).T


def _iq1_m_split_sums(xo: np.ndarray, wo: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every split (i1, i2) of 16 sorted values and shift choice k: ``sum w v x`` and
    ``sum w v v``, v the value of the level (-1 below i1, 0 below i2, else 1) shifted by the
    element's half's shift (k bit 1: the first 8 values' shift is minus, bit 0: the last 8's),
    as ggml computes them since llama.cpp PR #28706: prefix sums of ``w x`` and ``w`` over the
    sorted values, per half; the three levels of either shift are a unit apart, so a half's sum is
    ``T v[2] - P(i1) - P(i2)`` (and ``W v[2]^2 + Pw(i1) c1 + Pw(i2) c2`` for the squares), in
    ggml's float32 operations. xo, wo ``(16, S)`` sorted; first ``(16, S)``: element in the first
    half. Returns two ``(splits, 4, S)`` arrays."""
    S = xo.shape[1]
    px = np.zeros((2, 17, S), F32)
    pw = np.zeros((2, 17, S), F32)
    wx = wo * xo
    for j in range(16):  # ggml's sequential float32 sums; the other half's prefix is carried over
        for h, mine in ((0, first[j]), (1, ~first[j])):
            px[h, j + 1] = np.where(mine, px[h, j] + wx[j], px[h, j])
            pw[h, j + 1] = np.where(mine, pw[h, j] + wo[j], pw[h, j])
    p2, m2 = _X_PLUS[2], _X_MINUS[2]
    c = {
        "p": (_X_PLUS[0] * _X_PLUS[0] - _X_PLUS[1] * _X_PLUS[1], _X_PLUS[1] * _X_PLUS[1] - _X_PLUS[2] * _X_PLUS[2]),
        "m": (
            _X_MINUS[0] * _X_MINUS[0] - _X_MINUS[1] * _X_MINUS[1],
            _X_MINUS[1] * _X_MINUS[1] - _X_MINUS[2] * _X_MINUS[2],
        ),
    }
    i1, i2 = _SPLITS16
    qx, q2 = {}, {}
    for h in (0, 1):
        sx = px[h, i1] + px[h, i2]  # (splits, S)
        for sign, v2 in (("p", p2), ("m", m2)):
            qx[h, sign] = px[h, 16] * v2 - sx
            q2[h, sign] = pw[h, 16] * v2 * v2 + pw[h, i1] * c[sign][0] + pw[h, i2] * c[sign][1]
    signs = (("p", "p"), ("p", "m"), ("m", "p"), ("m", "m"))  # k = 0..3: the first half's shift, the second's
    sqx = np.stack([qx[0, a] + qx[1, b] for a, b in signs], axis=1)
    sq2 = np.stack([q2[0, a] + q2[1, b] for a, b in signs], axis=1)
    return sqx, sq2


def _iq1_m(rows: _Rows, y: np.ndarray) -> None:
    lat = lattice("IQ1S")
    nb = len(rows.x)
    S = nb * 16
    sigma2 = np.repeat(F32(2) * rows.sumx2 / F32(QK_K), 16)
    xs = _columns(rows.x, 16)
    w = _weights(rows, 16, sigma2, xs, "x2")
    mx = _seq_max(np.abs(xs))
    active = ~(mx < F32(1e-7))
    act = np.flatnonzero(active)
    xa, wa = xs[:, act], w[:, act]
    A = len(act)
    order = _sorted_columns(xa)
    cols = np.arange(A)
    sqx, sq2 = _iq1_m_split_sums(xa[order, cols], wa[order, cols], order < 8)
    # each split, shift choices 0..3
    cands = (4 * sqx.shape[0], A)
    pick, scale = _running_best(sqx.reshape(cands), sq2.reshape(cands), np.full(A, -FLT_MAX, F32), mx[act])
    keep = np.flatnonzero(pick >= 0)
    act, order, scale, pick = act[keep], order[:, keep], scale[keep], pick[keep]
    A = len(act)
    split, bk = pick // 4, pick % 4
    pos = np.arange(16)[:, None]
    i1, i2 = _SPLITS16[0][split], _SPLITS16[1][split]
    L = np.where(pos < i1, 0, np.where(pos < i2, 1, 2))
    Lv = np.empty_like(L)
    Lv[order, np.arange(A)] = L
    neg = scale < 0
    Lv[:, neg] = 2 - Lv[:, neg]
    scale = np.where(neg, -scale, scale)
    bk = np.where(neg, 3 - bk, bk)
    minus = np.stack([bk >= 2, bk % 2 == 1])
    pts, scale, ok = _iq1_points(lat, Lv, xs[:, act], w[:, act], minus, scale)
    ok &= scale >= 0
    sub_ok = np.ones(S, dtype=bool)
    sub_ok[act] = ok
    rows.check(sub_ok.reshape(nb, 16).all(axis=1), "IQ1_M")
    scales: np.ndarray = np.zeros(S, F32)
    scales[act] = scale
    shifts: np.ndarray = np.zeros(S, np.int64)
    shifts[act] = bk
    point: np.ndarray = np.zeros((2, S), np.int64)
    point[:, act] = pts
    scales = scales.reshape(nb, 16)
    shifts = shifts.reshape(nb, 16)
    point = point.T.reshape(nb, 16, 2)
    max_scale = _seq_max(scales.T, np.zeros(nb, F32))
    flat = max_scale == 0
    d = max_scale / F32(15)
    id_ = F32(1) / d
    lev = _nearest_level(F32(0.5) * (id_[:, None] * scales - F32(1)), 7)  # (nb, 16)
    # the super-block scale refitted to the 3-bit scales, over all 256 values in order
    minus_g = np.stack([shifts >= 2, shifts % 2 == 1], axis=2)  # (nb, 16, 2)
    v = _SHIFTED[minus_g[:, :, :, None].astype(int), lat.levels[point].astype(int)]  # (nb, 16, 2, 8)
    q = (v * (2 * lev + 1).astype(F32)[:, :, None, None]).reshape(nb, 256)
    wq = w.T.reshape(nb, 256) * q  # ggml computes the same weights again
    fx = _seq_sum((wq * rows.x).T)
    f2 = _seq_sum((wq * q).T)
    d = np.where(f2 > 0, fx / np.where(f2 > 0, f2, F32(1)), d)
    h = _half_bits(d * F32(1.1125)).astype(np.int64)
    masks = np.array([0x00, 0x80, 0x08, 0x88])
    qh = (point[:, :, 0] >> 8) | ((point[:, :, 1] >> 8) << 4) | np.where(flat[:, None], 0, masks[shifts])
    sc = (lev.reshape(nb, 4, 4) << (3 * np.arange(4))).sum(axis=2)
    sc |= ((h[:, None] >> (4 * np.arange(4))) & 15) << 12
    sc[flat] = 0
    y[:] = 0
    y[:, 0:32] = (point & 255).reshape(nb, 32)
    y[:, 32:48] = qh
    y[:, 48:] = _le_bytes(sc, "<u2").reshape(nb, 8)
