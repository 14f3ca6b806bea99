"""The IQ (importance/lattice) types: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS.

Decoders ``dq_*(blocks, out)`` follow ggml's ``dequantize_row_iq*``; the lattice grids come
from :mod:`.grids`. Grid rows are looked up as whole words (8 int8 levels in one uint64).
"""

from __future__ import annotations

import numpy as np

from ..format.types import GGMLType
from .grids import (
    IQ1S_GRID,
    IQ2S_GRID,
    IQ2XS_GRID,
    IQ2XXS_GRID,
    IQ3S_GRID,
    IQ3XXS_GRID,
    KSIGNS_IQ2XS,
    KVALUES_IQ4NL,
)
from .kquants import GROUP_MAX_EPS
from .layouts import block_dtype
from .ops import (
    BYTE_BITS,
    F32,
    bitplanes,
    col_signed_max,
    columns,
    crumbs,
    field,
    ggml_half,
    grid_words,
    half,
    kv_levels,
    lane_fields,
    nearest_int,
    nibbles,
    pack_halves,
    pack_rows,
    packed_nibbles,
    put,
    quantizer_pair,
    row_seq_sum,
    scale_into,
    seq_sum,
    u16,
)

_SIGN8_WORDS = pack_rows(1 - 2 * BYTE_BITS.astype(np.int8))  # IQ: bit set -> negative


_SIGN7_WORDS = _SIGN8_WORDS[KSIGNS_IQ2XS]


_IQ2XXS_WORDS = grid_words(IQ2XXS_GRID)


_IQ2XS_WORDS = grid_words(IQ2XS_GRID)


_IQ2S_WORDS = grid_words(IQ2S_GRID)


_IQ3XXS_WORDS = grid_words(IQ3XXS_GRID)


_IQ3S_WORDS = grid_words(IQ3S_GRID)


_IQ1S_WORDS8 = np.concatenate([grid_words(IQ1S_GRID * 8 + 1), grid_words(IQ1S_GRID * 8 - 1)])


def dq_iq4_nl(q, out):
    t = GGMLType.IQ4_NL
    lv = kv_levels(field(q, t, "qs"), "iq4nl", KVALUES_IQ4NL)
    scale_into(out, lv, half(q, t, "d"))


def dq_iq4_xs(q, out):
    t = GGMLType.IQ4_XS
    n = len(q)
    lo = packed_nibbles(q, t, "scales_l")
    hi = ((u16(q, t, "scales_h") >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)
    dl = half(q, t, "d") * ((lo | (hi << 4)).astype(np.int16) - 32)
    lv = kv_levels(field(q, t, "qs").reshape(n, 8, 16), "iq4nl", KVALUES_IQ4NL)
    scale_into(out, lv, dl)


def _iq2_scale(q: np.ndarray, t: GGMLType, s: np.ndarray) -> np.ndarray:
    """d * (0.5 + s) * 0.25, the IQ2 scale of 16 or 32 elements (float32, shaped like s)."""
    d = half(q, t, "d").reshape((-1,) + (1,) * (s.ndim - 1))
    return d * (s.astype(F32) + F32(0.5)) * F32(0.25)


def _signed(grid_words: np.ndarray, idx: np.ndarray, sign_words: np.ndarray, sidx: np.ndarray) -> np.ndarray:
    """Grid points times their signs, as int8 levels in element order."""
    lv = grid_words[idx].view(np.int8)
    lv *= sign_words[sidx].view(np.int8).reshape(lv.shape)
    return lv


def dq_iq2_xxs(q, out):
    t = GGMLType.IQ2_XXS
    n = len(q)
    words = field(q, t, "qs").view("<u4").reshape(n, 8, 2)  # per 32: 4 grid bytes | signs+scale
    aux = words[:, :, 1]
    sidx = lane_fields(aux, (0, 7, 14, 21), 127)
    lv = _signed(_IQ2XXS_WORDS, field(q, t, "qs").reshape(n, 8, 8)[:, :, :4], _SIGN7_WORDS, sidx)
    scale_into(out, lv, _iq2_scale(q, t, aux >> 28))


def dq_iq2_xs(q, out):
    t = GGMLType.IQ2_XS
    qs = u16(q, t, "qs")
    lv = _signed(_IQ2XS_WORDS, qs & np.uint16(511), _SIGN7_WORDS, qs >> np.uint16(9))
    sc = packed_nibbles(q, t, "scales")
    scale_into(out, lv, _iq2_scale(q, t, sc))


def dq_iq2_s(q, out):
    t = GGMLType.IQ2_S
    n = len(q)
    qs = field(q, t, "qs")
    high = crumbs(field(q, t, "qh")).swapaxes(1, 2).astype(np.uint16)  # (n, 8, 4)
    idx = qs[:, :32].reshape(n, 8, 4) | (high << 8)
    lv = _signed(_IQ2S_WORDS, idx, _SIGN8_WORDS, qs[:, 32:])
    sc = packed_nibbles(q, t, "scales")
    scale_into(out, lv, _iq2_scale(q, t, sc))


def dq_iq3_xxs(q, out):
    t = GGMLType.IQ3_XXS
    n = len(q)
    qs = field(q, t, "qs")
    aux = qs[:, 64:].view("<u4")  # (n, 8): 28 sign bits + 4-bit scale per 32 elements
    sidx = lane_fields(aux, (0, 7, 14, 21), 127)
    lv = _IQ3XXS_WORDS[qs[:, :64]].view(np.int8).reshape(n, 8, 4, 8)
    lv *= _SIGN7_WORDS[sidx].view(np.int8).reshape(n, 8, 4, 8)
    db = half(q, t, "d") * ((aux >> 28).astype(F32) + F32(0.5)) * F32(0.5)
    scale_into(out, lv, db)


def dq_iq3_s(q, out):
    t = GGMLType.IQ3_S
    n = len(q)
    high = bitplanes(field(q, t, "qh")).swapaxes(1, 2).astype(np.uint16)  # (n, 8, 8)
    idx = field(q, t, "qs").reshape(n, 8, 8) | (high << 8)
    lv = _IQ3S_WORDS[idx].view(np.int8).reshape(n, 32, 8)
    lv *= _SIGN8_WORDS[field(q, t, "signs")].view(np.int8).reshape(n, 32, 8)
    sc = packed_nibbles(q, t, "scales")
    db = half(q, t, "d") * (1 + 2 * sc.astype(np.int16))
    scale_into(out, lv, db)


def dq_iq1_s(q, out):
    t = GGMLType.IQ1_S
    n = len(q)
    qh = u16(q, t, "qh")  # (n, 8)
    high = lane_fields(qh, (0, 3, 6, 9), 7)  # 3 index bits per 8 elements
    high |= ((qh >> np.uint16(12)) & np.uint16(8))[:, :, None]  # qh bit 15, the delta's sign -> bit 11
    idx = field(q, t, "qs").reshape(n, 8, 4) | (high << np.uint16(8))
    lv = _IQ1S_WORDS8[idx].view(np.int8).reshape(n, 256)
    dl8 = half(q, t, "d") * (2 * ((qh >> 12) & 7) + 1).astype(F32) * F32(0.125)
    scale_into(out, lv, dl8)


def dq_iq1_m(q, out):
    t = GGMLType.IQ1_M
    n = len(q)
    sc = field(q, t, "scales").view("<u2")  # (n, 4): 3-bit scales + the f16 scale's nibbles
    bits = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | (sc[:, 3] & 0xF000)
    d = bits.view("<f2").astype(F32)[:, None]
    s3 = lane_fields(sc, (0, 3, 6, 9), 7)  # (n, 4, 4) = 16 halves
    dl8 = d * (2 * s3.reshape(n, 16) + 1).astype(F32) * F32(0.125)
    nib = nibbles(field(q, t, "qh")).swapaxes(1, 2).reshape(n, 32)  # per 8 elems
    idx = field(q, t, "qs") | (nib.astype(np.uint16) << np.uint16(8))  # bit 11: the delta's sign
    lv = _IQ1S_WORDS8[idx].view(np.int8).reshape(n, 256)
    scale_into(out, lv, dl8)


# ---------------------------------------------------------------------------- IQ4_NL, IQ4_XS quantizers
#
# ggml's quantize_row_iq4_nl_impl, for IQ4_NL (one block of 32 per scale) and IQ4_XS (super-
# blocks of 256: eight blocks of 32 whose scales are stored as 6-bit multiples of one half).
# Each block's scale is found by least squares over the non-linear levels, trying the 2*ntry+1
# scales (itry - 127) / max; blocks are columns of a position-major array, as in .kquants.

_IQ4_LEVELS = KVALUES_IQ4NL.astype(F32)
_IQ4_BELOW = np.array([(KVALUES_IQ4NL[1:15] <= f).sum() for f in range(-128, 128)], dtype=np.intp)
"""For an integer f in [-128, 127]: how many of the levels 1-14 are not above it."""


def best_index_iq4(v: np.ndarray) -> np.ndarray:
    """ggml's ``best_index_int8(16, kvalues_iq4nl, v)`` for every element: the index of the
    nearest level (the upper one on a tie; the bisection's result for NaN: 15).

    The bisection ends between levels lo and lo + 1, lo the number of levels 1-14 not above v.
    The levels are integers, so that is the number not above floor(v), read from a table
    (v clipped to the table first; a NaN clips to 127: lo = 14, and the final test is false).
    """
    f = np.floor(np.fmax(np.fmin(v, F32(127)), F32(-128))).astype(np.intp)
    lo = _IQ4_BELOW[f + 128]
    below = (v - _IQ4_LEVELS[lo]) < (_IQ4_LEVELS[lo + 1] - v)
    return lo + ~below


def _iq4_block_scales(xs: np.ndarray, w: np.ndarray, ntry: int) -> tuple[np.ndarray, np.ndarray]:
    """Per block (column): the levels of the first pass and the block's scale (0 below GROUP_MAX_EPS)."""
    amax, mx = col_signed_max(xs)

    def fit(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = best_index_iq4(iscale * xs)
        q = _IQ4_LEVELS[idx]
        wq = w * q
        s = seq_sum(np.stack([wq * xs, wq * q], axis=1))
        return idx, s[0], s[1]

    first, sumqx, sumq2 = fit(F32(1) / ((-mx if ntry > 0 else mx) / F32(-127)))
    d = np.where(sumq2 > 0, sumqx / sumq2, F32(0))
    best = d * sumqx
    for itry in range(-ntry, ntry + 1):
        _, sumqx, sumq2 = fit(F32(itry - 127) / mx)
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = np.where(better, sumqx / sumq2, d)
        best = np.where(better, d * sumqx, best)
    return first, np.where(amax < GROUP_MAX_EPS, F32(0), d)


def _iq4_input(x: np.ndarray, qw: np.ndarray | None, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Blocks of 32 position-major and their weights: ``qw * sqrtf(sigma2 + x * x)`` with sigma2
    twice the mean square of the super-block of ``size``, or ``x * x`` without importance."""
    xs = columns(x, 32)
    if qw is None:
        return xs, xs * xs
    sigma2 = row_seq_sum(x.reshape(-1, size) * x.reshape(-1, size)) * (F32(2) / F32(size))
    return xs, columns(qw, 32) * np.sqrt(np.repeat(sigma2, size // 32) + xs * xs)


def _q_iq4_nl(x: np.ndarray, b: np.ndarray, qw: np.ndarray | None) -> None:
    xs, w = _iq4_input(x, qw, 32)
    _, d = _iq4_block_scales(xs, w, 7)
    b["d"] = ggml_half(d)
    idx = best_index_iq4(np.where(d != 0, F32(1) / d, F32(0)) * xs)
    put(b, "qs", pack_halves(np.ascontiguousarray(idx.T).astype(np.uint8)))


def _q_iq4_xs(x: np.ndarray, b: np.ndarray, qw: np.ndarray | None) -> None:
    n = len(x)
    xs, w = _iq4_input(x, qw, 256)
    _, scales = _iq4_block_scales(xs, w, 7)
    s = scales.reshape(n, 8)
    d = -col_signed_max(s.T)[1] / F32(32)
    dinv = np.where(d != 0, F32(1) / d, F32(0))
    lv = np.clip(nearest_int(dinv[:, None] * s), -32, 31)
    dl = d[:, None] * lv.astype(F32)
    idl = np.where(dl != 0, F32(1) / dl, F32(0)).reshape(-1)
    idx = best_index_iq4(idl * xs)
    lv += 32
    b["d"] = ggml_half(d)
    b["scales_h"] = ((lv >> 4) << (2 * np.arange(8))).sum(axis=1)
    put(b, "scales_l", (lv[:, 0::2] & 15) | ((lv[:, 1::2] & 15) << 4))
    put(b, "qs", pack_halves(np.ascontiguousarray(idx.T).astype(np.uint8)).reshape(n, 128))


q_iq4_nl, qr_iq4_nl = quantizer_pair(
    _q_iq4_nl,
    GGMLType.IQ4_NL,
    "ggml's ``quantize_iq4_nl`` without importance weights (NOT its ``quantize_row_iq4_nl_ref``, "
    "see :func:`quantize_iq4_nl_ref`): blocks (n, 32) -> blocks.",
    "ggml's ``quantize_iq4_nl``: rows -> ``out``, importance-weighted with ``imatrix``.",
)
q_iq4_xs, qr_iq4_xs = quantizer_pair(
    _q_iq4_xs,
    GGMLType.IQ4_XS,
    "ggml's ``quantize_row_iq4_xs_ref`` (= ``quantize_iq4_xs`` without weights): (n, 256) -> blocks.",
    "ggml's ``quantize_iq4_xs``: rows -> ``out``, importance-weighted with ``imatrix``.",
)


def quantize_iq4_nl_ref(x: np.ndarray) -> np.ndarray:
    """ggml's ``quantize_row_iq4_nl_ref`` over all of ``x`` as ONE call: (n, 32) float32 -> (n, 18)
    uint8 blocks. Internal: what :func:`~gguf_schema.tensors.quantize` writes for IQ4_NL is ggml's
    ``quantize_iq4_nl``, which ``llama-quantize`` uses; the reference differs from it in two ways:
    it tries no scales beyond ``max / -127`` (and keeps the first pass's levels), and a block
    below GROUP_MAX_EPS (all zeros) keeps the levels of the block before it, so the result
    depends on how the rows were split into calls. ggml reads uninitialised memory when the
    very first block is such a block; here its levels are index 0.

    >>> x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    >>> quantize_iq4_nl_ref(x).shape
    (2, 18)
    """
    x = np.ascontiguousarray(x, dtype=F32).reshape(-1, 32)
    b = np.zeros(len(x), block_dtype(GGMLType.IQ4_NL))
    with np.errstate(all="ignore"):
        xs = columns(x, 32)
        first, d = _iq4_block_scales(xs, xs * xs, -1)
        idx = np.ascontiguousarray(first.T)
        zero = col_signed_max(xs)[0] < GROUP_MAX_EPS
        if zero.any():  # forward-fill the levels of the last block that had any
            last = np.maximum.accumulate(np.where(zero, -1, np.arange(len(x))))
            idx = np.where((last >= 0)[:, None], idx[np.maximum(last, 0)], 0)
    b["d"] = ggml_half(d)
    put(b, "qs", pack_halves(idx.astype(np.uint8)))
    return b.view(np.uint8).reshape(len(x), -1)
