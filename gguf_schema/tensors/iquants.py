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
from .ops import (
    BYTE_BITS,
    F32,
    bitplanes,
    crumbs,
    field,
    grid_words,
    half,
    kv_levels,
    lane_fields,
    nibbles,
    pack_rows,
    packed_nibbles,
    scale_into,
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
