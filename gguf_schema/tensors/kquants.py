"""The K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K (256-element super-blocks of sub-blocks).

Decoders ``dq_*(blocks, out)`` follow ggml's ``dequantize_row_*`` in float32. Quantizers:
``q_*(x, blocks)`` are ggml's ``quantize_row_*_ref`` (what ``ggml_quantize_chunk`` writes
without an importance matrix); ``qr_*(rows, out, imatrix)`` are ggml's ``quantize_<type>``,
whose importance-weighted path (``quantize_row_*_impl``) runs when ``imatrix`` is given.

This module also owns the scale searches of ggml's "2-6 bit quantization in super-blocks"
(``make_qx_quants``, ``make_q3_quants``, ``make_qkx2_quants``/``make_qkx3_quants``,
``make_qp_quants``), which the importance paths of the legacy types reuse. They work on many
sub-blocks at once, position-major (see :func:`.ops.columns`): each step of ggml's loop over
the elements of one sub-block is one numpy operation over all sub-blocks, in the same float32
operations and order, so the bytes are ggml's.

>>> x = np.linspace(-1, 1, 256, dtype=np.float32)[None]
>>> from .layouts import block_dtype
>>> b = np.zeros(1, block_dtype(GGMLType.Q4_K))
>>> q_q4_k(x, b)
>>> out = np.empty((1, 256), np.float32)
>>> dq_q4_k(b.view(np.uint8).reshape(1, -1), out)
>>> float(abs(out - x).max()) < 0.04
True
"""

from __future__ import annotations

import numpy as np

from ..format.types import GGMLType
from .layouts import QK_K
from .ops import (
    F32,
    bitplanes,
    col_min_max,
    col_signed_max,
    columns,
    crumbs,
    field,
    half,
    half_round,
    nearest_int,
    nibbles,
    pack_crumbs,
    positive_max,
    put,
    quantizer_pair,
    row_seq_sum,
    scale_into,
    seq_sum,
    shl,
    signed_max,
)


def dq_q8_k(q, out):
    t = GGMLType.Q8_K
    scale_into(out, field(q, t, "qs").view(np.int8), field(q, t, "d").view("<f4"))


def dq_q2_k(q, out):
    t = GGMLType.Q2_K
    n = len(q)
    sc = field(q, t, "scales")
    dl = half(q, t, "d") * (sc & 15)
    ml = half(q, t, "dmin") * (sc >> 4)
    # element (half h, shift j, l < 32) is crumb j of qs[32h + l]; 16 elements share a scale
    lv = crumbs(field(q, t, "qs").reshape(n, 2, 32))
    scale_into(out, lv, dl, minus=ml)


def _q3_k_scales(sc: np.ndarray) -> np.ndarray:
    """The sixteen 6-bit Q3_K scales (n, 16) minus 32: low 4 bits from bytes 0-7, high 2 from 8-11."""
    w = np.ascontiguousarray(sc).view("<u4")  # (n, 3): four scale bytes per lane
    a, b, c = w[:, 0], w[:, 1], w[:, 2]
    m4, m2 = np.uint32(0x0F0F0F0F), np.uint32(0x03030303)
    out = np.empty((len(w), 4), dtype="<u4")
    for j, (src, shift) in enumerate(((a, 0), (b, 0), (a, 4), (b, 4))):
        out[:, j] = ((src >> np.uint32(shift)) & m4) | (((c >> np.uint32(2 * j)) & m2) << np.uint32(4))
    return out.view(np.uint8).astype(np.int16) - 32


def dq_q3_k(q, out):
    t = GGMLType.Q3_K
    n = len(q)
    dl = half(q, t, "d") * _q3_k_scales(field(q, t, "scales"))
    lv = crumbs(field(q, t, "qs").reshape(n, 2, 32))
    hb = bitplanes(field(q, t, "hmask"))  # bit 4h + j of hmask[l]
    hb ^= 1
    lv -= shl(hb, 2).reshape(n, 2, 4, 32)  # crumb - 4 where the high bit is clear
    scale_into(out, lv.view(np.int8), dl)


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


def dq_q4_k(q, out):
    t = GGMLType.Q4_K
    n = len(q)
    sc, mn = _k4_scale_min(field(q, t, "scales"))
    lv = nibbles(field(q, t, "qs").reshape(n, 4, 32))
    scale_into(out, lv, half(q, t, "d") * sc, minus=half(q, t, "dmin") * mn)


def dq_q5_k(q, out):
    t = GGMLType.Q5_K
    n = len(q)
    sc, mn = _k4_scale_min(field(q, t, "scales"))
    lv = nibbles(field(q, t, "qs").reshape(n, 4, 32)).reshape(n, 8, 32)
    hb = bitplanes(field(q, t, "qh"))  # bit s of qh[l] for sub-block s
    lv |= shl(hb, 4)
    scale_into(out, lv, half(q, t, "d") * sc, minus=half(q, t, "dmin") * mn)


def dq_q6_k(q, out):
    t = GGMLType.Q6_K
    n = len(q)
    ql = field(q, t, "ql").reshape(n, 2, 64)
    # (half, quarter g, l): quarters 0, 1 low nibbles, 2, 3 high nibbles
    lv = nibbles(ql).reshape(n, 2, 4, 32)
    hb = crumbs(field(q, t, "qh").reshape(n, 2, 32))
    lv |= shl(hb, 4)
    lv -= 32
    scale_into(out, lv.view(np.int8), half(q, t, "d") * field(q, t, "scales").view(np.int8))


def q_q8_k(x, b):
    mx = signed_max(x)[:, None]
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, F32(-127) / mx, F32(0)).astype(F32)
    qs = np.minimum(nearest_int(iscale * x), 127).astype(np.int8)
    b["qs"] = qs
    b["bsums"] = qs.reshape(len(x), 16, 16).sum(axis=2, dtype=np.int16)
    with np.errstate(divide="ignore"):
        b["d"] = np.where(mx != 0, F32(1) / iscale, F32(0))[:, 0]


# ---------------------------------------------------------------------------- scale searches
#
# Arrays are position-major: x[i, g] is element i of sub-block g. Each function returns
# per-sub-block results as arrays over g.

GROUP_MAX_EPS = F32(1e-15)
"""Below this largest magnitude ggml treats a group as all zeros."""


def _pair_sums(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The in-order sums of two position-major arrays (one loop for both)."""
    s = seq_sum(np.stack([a, b], axis=1))
    return s[0], s[1]


def search_qx(x: np.ndarray, w: np.ndarray | None, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``make_qx_quants(n, nmax, x, L, 1, w)``: a signed scale for levels in
    [-nmax, nmax), trying 19 scales around ``-nmax / max``; ``w`` None means weights ``x * x``.

    Returns the levels plus nmax (int32, like x) and the scale per sub-block.
    """
    amax, mx = col_signed_max(x)
    if w is None:
        w = x * x
    wx = w * x

    def trial(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lv = np.clip(nearest_int(iscale * x), -nmax, nmax - 1)
        lf = lv.astype(F32)
        return (lv, *_pair_sums(wx * lf, w * lf * lf))

    lv, sumlx, suml2 = trial(F32(-nmax) / mx)
    scale = np.where(suml2 != 0, sumlx / suml2, F32(0))
    best = scale * sumlx
    levels = lv + nmax
    for step in range(-9, 10):
        if step == 0:
            continue
        lv, sumlx, suml2 = trial(-(F32(nmax) + F32(0.1) * F32(step)) / mx)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        if better.any():
            levels[:, better] = lv[:, better] + nmax
            scale = np.where(better, sumlx / suml2, scale)
            best = np.where(better, scale * sumlx, best)
    zero = amax < GROUP_MAX_EPS
    levels[:, zero] = 0
    scale[zero] = 0
    return levels, scale


def search_q3(x: np.ndarray, nmax: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``make_q3_quants(n, nmax, x, L, true)``: levels in [-nmax, nmax) from ``-nmax / max``,
    then up to five passes that move single levels while the weighted fit (weights ``x * x``)
    improves. Returns the levels plus nmax (int32) and the scale per sub-block."""
    amax, mx = col_signed_max(x)
    w = x * x
    wx = w * x
    levels = np.clip(nearest_int((F32(-nmax) / mx) * x), -nmax, nmax - 1)
    lf = levels.astype(F32)
    sumlx, suml2 = _pair_sums(wx * lf, w * lf * lf)
    for _ in range(5):  # a pass that changes nothing would change nothing again: ggml stops there
        changed = False
        for i in range(len(x)):
            li = levels[i]
            lf = li.astype(F32)
            slx = sumlx - wx[i] * lf
            sl2 = suml2 - w[i] * lf * lf
            new = np.clip(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1)
            nf = new.astype(F32)
            slx_new = slx + wx[i] * nf
            sl2_new = sl2 + w[i] * nf * nf
            take = (slx > 0) & (new != li) & (sl2_new > 0) & (slx_new * slx_new * suml2 > sumlx * sumlx * sl2_new)
            if take.any():
                levels[i] = np.where(take, new, li)
                sumlx = np.where(take, slx_new, sumlx)
                suml2 = np.where(take, sl2_new, suml2)
                changed = True
        if not changed:
            break
    scale = np.where(suml2 > 0, sumlx / suml2, F32(0))
    levels += nmax
    zero = amax < GROUP_MAX_EPS
    levels[:, zero] = 0
    scale[zero] = 0
    return levels, scale


def search_qkx(
    x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int, mad: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ggml's ``make_qkx2_quants`` / ``make_qkx3_quants`` (the same steps for finite input): a
    scale and a minimum for levels in [0, nmax], the scales ``(rmin + rdelta * k + nmax) /
    (max - min)`` for k = 0..nstep each refitted by weighted least squares and kept if the
    weighted error (absolute with ``mad``, else squared) falls.

    Returns the levels (int32), the scale and ``-min`` per sub-block.
    """
    mn, mx = col_min_max(x)
    sum_w = seq_sum(w, from_first=True)
    sum_x = seq_sum(w * x, from_first=True)
    mn = np.where(mn > 0, F32(0), mn)
    flat = mx == mn
    nm = F32(nmax)

    def error(scale: np.ndarray, lf: np.ndarray, m: np.ndarray) -> np.ndarray:
        diff = scale * lf + m - x
        return seq_sum(w * (np.abs(diff) if mad else diff * diff))

    iscale = nm / (mx - mn)
    scale = F32(1) / iscale
    levels = np.clip(nearest_int(iscale * (x - mn)), 0, nmax)
    best = error(scale, levels.astype(F32), mn)
    for step in range(nstep + 1):
        iscale = (F32(rmin) + F32(rdelta) * F32(step) + nm) / (mx - mn)
        trial = np.clip(nearest_int(iscale * (x - mn)), 0, nmax)
        lf = trial.astype(F32)
        wl = w * lf
        s = seq_sum(np.stack([wl, wl * lf, wl * x], axis=1))
        sum_l, sum_l2, sum_xl = s[0], s[1], s[2]
        det = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
        pos = this_min > 0
        this_min = np.where(pos, F32(0), this_min)
        this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
        cur = error(this_scale, lf, this_min)
        better = (det > 0) & (cur < best)
        if better.any():
            levels[:, better] = trial[:, better]
            best = np.where(better, cur, best)
            scale = np.where(better, this_scale, scale)
            mn = np.where(better, this_min, mn)
    levels[:, flat] = 0
    scale[flat] = 0
    return levels, scale, -mn


def search_qp(x: np.ndarray, w: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``make_qp_quants(n, nmax, x, L, w)``: one scale for non-negative levels up to nmax
    (the sub-block scales or minimums of a super-block), the best of nine scales around
    ``nmax / max`` by weighted squared error, then up to five passes that move single levels
    while the weighted fit improves. Returns the levels as ggml stores them (uint8) and the scale."""
    n = len(x)
    mx = np.zeros(x.shape[1:], F32)
    for i in range(n):
        mx = np.where(mx > x[i], mx, x[i])  # ggml's MAX(max, x[i])
    iscale = F32(nmax) / mx

    def mse(scale: np.ndarray, lf: np.ndarray) -> np.ndarray:
        diff = x - scale * lf
        return seq_sum(w * diff * diff)

    best = mse(F32(1) / iscale, nearest_int(iscale * x).astype(np.uint8).astype(F32))
    for step in range(-4, 5):
        if step == 0:
            continue
        trial_iscale = (F32(0.1) * F32(step) + F32(nmax)) / mx
        lv = np.minimum(nmax, nearest_int(trial_iscale * x))
        cur = mse(F32(1) / trial_iscale, lv.astype(F32))
        better = cur < best
        best = np.where(better, cur, best)
        iscale = np.where(better, trial_iscale, iscale)
    lv = np.minimum(nmax, nearest_int(iscale * x))
    levels = lv.astype(np.uint8)
    wx = w * x
    lf = lv.astype(F32)
    sumlx, suml2 = _pair_sums(wx * lf, w * lf * lf)
    for _ in range(5):
        changed = False
        for i in range(n):
            li = levels[i].astype(np.int32)
            lf = li.astype(F32)
            slx = sumlx - wx[i] * lf
            sl2 = suml2 - w[i] * lf * lf
            new = np.minimum(nmax, nearest_int(x[i] * sl2 / slx))
            nf = new.astype(F32)
            slx_new = slx + wx[i] * nf
            sl2_new = sl2 + w[i] * nf * nf
            take = (slx > 0) & (sl2 > 0) & (new != li) & (slx_new * slx_new * suml2 > sumlx * sumlx * sl2_new)
            if take.any():
                levels[i] = np.where(take, new.astype(np.uint8), levels[i])
                sumlx = np.where(take, slx_new, sumlx)
                suml2 = np.where(take, sl2_new, suml2)
                changed = True
        if not changed:
            break
    scale = np.where(suml2 > 0, sumlx / suml2, F32(0))
    zero = mx < GROUP_MAX_EPS
    levels[:, zero] = 0
    scale[zero] = 0
    return levels, scale


# ---------------------------------------------------------------------------- quantizers
#
# Each _q*_k(x, b, qw) quantizes super-blocks x (n, 256) into the zeroed structured blocks b:
# ggml's quantize_row_*_ref when qw is None, else its quantize_row_*_impl with the importance
# weights qw (n, 256) of those elements.


def _by_super_block(v: np.ndarray, nb: int) -> np.ndarray:
    """Per-sub-block values (m,) as (sub-blocks, super-blocks), position-major for a search over super-blocks."""
    return np.ascontiguousarray(v.reshape(nb, -1).T)


def _elements(levels: np.ndarray, nb: int) -> np.ndarray:
    """Position-major levels (n, sub-blocks) back in element order, (nb, 256) uint8."""
    return np.ascontiguousarray(levels.T).reshape(nb, QK_K).astype(np.uint8)


def _requantize(
    x: np.ndarray, d: np.ndarray, m: np.ndarray | None, levels: np.ndarray, lo: int, hi: int, offset: int = 0
) -> np.ndarray:
    """ggml's last pass: with the stored sub-block scale d (and min m) non-zero, the level is
    ``nearest_int((x + m) / d)`` clipped to [lo, hi] (plus offset); where d is zero the search's
    levels stay."""
    v = x if m is None else x + m
    new = np.clip(nearest_int(v / d), lo, hi) + offset
    return np.where(d != 0, new, levels)


def _weights(x: np.ndarray, xs: np.ndarray, qw: np.ndarray, n: int, factor: float) -> np.ndarray:
    """The K-quant importance weights ``qw * sqrtf(sigma2 + x * x)`` per element, position-major,
    with ``sigma2 = factor * sum(x * x) / 256`` per super-block."""
    sigma2 = F32(factor) * row_seq_sum(x * x) / F32(QK_K)  # 1.0f * s is s: one expression for both
    return columns(qw, n) * np.sqrt(np.repeat(sigma2, QK_K // n) + xs * xs)


def _q2_k(x: np.ndarray, b: np.ndarray, qw: np.ndarray | None) -> None:
    nb = len(x)
    xs = columns(x, 16)
    if qw is None:
        levels, scales, mins = search_qkx(xs, np.abs(xs), 3, -0.5, 0.1, 15, True)
        s, m = scales.reshape(nb, 16), mins.reshape(nb, 16)
        max_scale, max_min = positive_max(s)[:, None], positive_max(m)[:, None]
        sc = np.where(max_scale > 0, nearest_int((F32(15) / max_scale) * s), 0)
        sc |= np.where(max_min > 0, nearest_int((F32(15) / max_min) * m) << 4, 0)
        d = np.where(max_scale > 0, max_scale / F32(15), F32(0))[:, 0]
        dmin = np.where(max_min > 0, max_min / F32(15), F32(0))[:, 0]
    else:
        w = _weights(x, xs, qw, 16, 1)
        sw = _by_super_block(seq_sum(w), nb)
        levels, scales, mins = search_qkx(xs, w, 3, -0.9, 0.05, 36, False)
        ls, d = search_qp(_by_super_block(scales, nb), sw, 15)
        lm, dmin = search_qp(_by_super_block(mins, nb), sw, 15)
        sc = ls.T.astype(np.int32) | (lm.T.astype(np.int32) << 4)
    sc = (sc & 0xFF).astype(np.uint8)
    dh, df = half_round(d)
    mh, mf = half_round(dmin)
    levels = _requantize(xs, (df[:, None] * (sc & 15)).reshape(-1), (mf[:, None] * (sc >> 4)).reshape(-1), levels, 0, 3)
    b["d"], b["dmin"] = dh, mh
    put(b, "scales", sc)
    put(b, "qs", pack_crumbs(_elements(levels, nb)))


def _pack_q3_scales(lv: np.ndarray) -> np.ndarray:
    """Sixteen 6-bit scales (n, 16) -> 12 bytes: low nibbles in bytes 0-7 (j and j + 8), the
    top two bits of scale j at bits 2 (j / 4) of byte 8 + j % 4."""
    lv = lv.astype(np.int32)
    out = np.empty((len(lv), 12), np.int32)
    out[:, :8] = (lv[:, :8] & 15) | ((lv[:, 8:] & 15) << 4)
    hi = (lv >> 4).reshape(len(lv), 4, 4)  # [q, k]: scale 4q + k
    out[:, 8:] = hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)
    return (out & 0xFF).astype(np.uint8)


def _q3_k(x: np.ndarray, b: np.ndarray, qw: np.ndarray | None) -> None:
    nb = len(x)
    xs = columns(x, 16)
    if qw is None:
        levels, scales = search_q3(xs)
        s = scales.reshape(nb, 16)
        max_scale = col_signed_max(s.T)[1]
        iscale = (F32(-32) / max_scale)[:, None]
        lv = np.clip(nearest_int(iscale * s).astype(np.int8), -32, 31).astype(np.int32) + 32
        lv[max_scale == 0] = 0
        d = np.where(max_scale != 0, F32(1) / iscale[:, 0], F32(0))
    else:
        w = _weights(x, xs, qw, 16, 2)
        sw = _by_super_block(seq_sum(w), nb)
        levels, scales = search_qx(xs, w, 4)
        lv, d = search_qx(_by_super_block(scales, nb), sw, 32)
        lv = lv.T
    sc = _pack_q3_scales(lv)
    dh, df = half_round(d)
    dq = (df[:, None] * _q3_k_scales(sc)).reshape(-1)
    lv = _elements(_requantize(xs, dq, None, levels, -4, 3, 4), nb)
    high = lv > 3
    b["d"] = dh
    put(b, "scales", sc)
    put(b, "hmask", np.packbits(high.reshape(nb, 8, 32), axis=1, bitorder="little"))
    put(b, "qs", pack_crumbs(lv - (high.view(np.uint8) << 2)))


def _pack_k4_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Eight scales and mins (n, 8) -> 12 bytes, as ggml's Q4_K/Q5_K store them (the top two bits
    of entries 4-7 in the top bits of bytes 0-7)."""
    ls, lm = ls.astype(np.int32), lm.astype(np.int32)
    out = np.empty((len(ls), 12), np.int32)
    out[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    out[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:] & 15) | ((lm[:, 4:] & 15) << 4)
    return (out & 0xFF).astype(np.uint8)


def _q45_k(x: np.ndarray, b: np.ndarray, qw: np.ndarray | None, nmax: int) -> None:
    """Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32 with 6-bit scales and mins."""
    nb = len(x)
    xs = columns(x, 32)
    if qw is None:
        av_x = np.sqrt(seq_sum(xs * xs) / F32(32))
        rmin, nstep = (-1.0, 20) if nmax == 15 else (-0.5, 15)
        levels, scales, mins = search_qkx(xs, av_x + np.abs(xs), nmax, rmin, 0.1, nstep, False)
        s, m = scales.reshape(nb, 8), mins.reshape(nb, 8)
        max_scale, max_min = positive_max(s)[:, None], positive_max(m)[:, None]
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0))
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0))
        ls = np.minimum(63, nearest_int(inv_scale * s).astype(np.uint8))
        lm = np.minimum(63, nearest_int(inv_min * m).astype(np.uint8))
        d, dmin = max_scale[:, 0] / F32(63), max_min[:, 0] / F32(63)
    else:
        w = _weights(x, xs, qw, 32, 2)
        sw = _by_super_block(seq_sum(w), nb)
        levels, scales, mins = search_qkx(xs, w, nmax, -0.9, 0.05, 36, False)
        ls, d = search_qp(_by_super_block(scales, nb), sw, 63)
        lm, dmin = search_qp(_by_super_block(mins, nb), sw, 63)
        ls, lm = ls.T, lm.T
        if nmax == 31:
            ls, lm = np.minimum(63, ls), np.minimum(63, lm)
    sc = _pack_k4_scales(ls, lm)
    dh, df = half_round(d)
    mh, mf = half_round(dmin)
    s6, m6 = _k4_scale_min(sc)
    levels = _requantize(xs, (df[:, None] * s6).reshape(-1), (mf[:, None] * m6).reshape(-1), levels, 0, nmax)
    lv = _elements(levels, nb).reshape(nb, 4, 2, 32)  # [k, half, l]: element 64k + 32 half + l
    b["d"], b["dmin"] = dh, mh
    put(b, "scales", sc)
    put(b, "qs", (lv[:, :, 0] & 15) | ((lv[:, :, 1] & 15) << 4))
    if nmax == 31:  # the fifth bit of element 64k + 32h + l at bit 2k + h of qh[l]
        high = (lv >> 4).transpose(0, 3, 1, 2).reshape(nb, 32, 8)
        put(b, "qh", np.packbits(high, axis=2, bitorder="little"))


def _q4_k(x, b, qw):
    _q45_k(x, b, qw, 15)


def _q5_k(x, b, qw):
    _q45_k(x, b, qw, 31)


def _q6_k(x: np.ndarray, b: np.ndarray, qw: np.ndarray | None) -> None:
    nb = len(x)
    xs = columns(x, 16)
    levels, scales = search_qx(xs, None if qw is None else columns(qw, 16), 32)
    s = scales.reshape(nb, 16)
    amax, max_scale = col_signed_max(s.T)
    iscale = F32(-128) / max_scale
    dh, df = half_round(F32(1) / iscale)
    sc = np.minimum(127, nearest_int(iscale[:, None] * s)).astype(np.int8)
    lv = _elements(_requantize(xs, (df[:, None] * sc).reshape(-1), None, levels, -32, 31, 32), nb)
    lv = lv.reshape(nb, 2, 4, 32)  # [half, quarter, l]
    ql = np.concatenate(
        [(lv[:, :, 0] & 15) | ((lv[:, :, 2] & 15) << 4), (lv[:, :, 1] & 15) | ((lv[:, :, 3] & 15) << 4)], axis=2
    )  # (nb, half, 64)
    hb = lv >> 4
    qh = hb[:, :, 0] | (hb[:, :, 1] << 2) | (hb[:, :, 2] << 4) | (hb[:, :, 3] << 6)
    zero = amax < GROUP_MAX_EPS  # ggml zeroes the whole block
    b["d"] = np.where(zero, np.float16(0), dh)
    put(b, "scales", np.where(zero[:, None], np.int8(0), sc))
    put(b, "ql", np.where(zero[:, None], np.uint8(0), ql.reshape(nb, 128)))
    put(b, "qh", np.where(zero[:, None], np.uint8(0), qh.reshape(nb, 64)))


def _pair(kernel, t: GGMLType):
    ref = f"quantize_row_{t.name[:2].lower()}_K_ref"
    return quantizer_pair(
        kernel,
        t,
        f"ggml's ``{ref}``: super-blocks (n, 256) -> blocks.",
        f"ggml's ``quantize_{t.name[:2].lower()}_K``: rows -> ``out``; with ``imatrix``, the "
        f"importance-weighted search, else ``{ref}``.",
    )


q_q2_k, qr_q2_k = _pair(_q2_k, GGMLType.Q2_K)
q_q3_k, qr_q3_k = _pair(_q3_k, GGMLType.Q3_K)
q_q4_k, qr_q4_k = _pair(_q4_k, GGMLType.Q4_K)
q_q5_k, qr_q5_k = _pair(_q5_k, GGMLType.Q5_K)
q_q6_k, qr_q6_k = _pair(_q6_k, GGMLType.Q6_K)
