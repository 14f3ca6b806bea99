"""The legacy block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 (32 elements per block, one scale).

Decoders ``dq_*(blocks, out)`` and quantizers ``q_*(x, blocks)`` following ggml's
``dequantize_row_*`` and ``quantize_row_*_ref`` step by step in float32.
"""

from __future__ import annotations

import numpy as np

from ..format.types import GGMLType
from .ops import (
    F32,
    c_int,
    field,
    half,
    inverse,
    nibbles,
    pack_halves,
    per_row,
    put,
    round_away,
    row_absmax,
    row_extrema,
    scale_into,
    shl,
    shr,
    signed_max,
)


def dq_q4_0(q, out):
    t = GGMLType.Q4_0
    lv = nibbles(field(q, t, "qs"))
    lv -= 8  # wraps: read as int8 it is nibble - 8
    scale_into(out, lv.view(np.int8), half(q, t, "d"))


def dq_q4_1(q, out):
    t = GGMLType.Q4_1
    lv = nibbles(field(q, t, "qs"))
    scale_into(out, lv, half(q, t, "d"), plus=half(q, t, "m"))


def _q5_levels(q: np.ndarray, t: GGMLType) -> np.ndarray:
    """Q5_0/Q5_1 quants (n, 32) uint8: nibble | 5th bit (bit j of the 32-bit qh) << 4."""
    n = len(q)
    lv = nibbles(field(q, t, "qs")).reshape(n, 32)
    hb = np.unpackbits(field(q, t, "qh"), axis=1, bitorder="little")
    lv |= shl(hb, 4)
    return lv


def dq_q5_0(q, out):
    t = GGMLType.Q5_0
    lv = _q5_levels(q, t)
    lv -= 16
    scale_into(out, lv.view(np.int8), half(q, t, "d"))


def dq_q5_1(q, out):
    t = GGMLType.Q5_1
    scale_into(out, _q5_levels(q, t), half(q, t, "d"), plus=half(q, t, "m"))


def dq_q8_0(q, out):
    t = GGMLType.Q8_0
    scale_into(out, field(q, t, "qs").view(np.int8), half(q, t, "d"))


def dq_q8_1(q, out):
    t = GGMLType.Q8_1
    scale_into(out, field(q, t, "qs").view(np.int8), half(q, t, "d"))


def q_q4_0(x, b):
    d = signed_max(x) / F32(-8)
    v = x * per_row(inverse(d), 32)
    v += F32(8.5)
    b["d"] = d
    put(b, "qs", pack_halves(np.minimum(c_int(v).astype(np.int8), 15).view(np.uint8)))


def q_q4_1(x, b):
    mx, mn = row_extrema(x)
    d = (mx - mn) / F32(15)
    v = x - per_row(mn, 32)
    v *= per_row(inverse(d), 32)
    v += F32(0.5)
    b["d"], b["m"] = d, mn
    put(b, "qs", pack_halves(np.minimum(c_int(v).astype(np.int8), 15).view(np.uint8)))


def _q5_pack(xi: np.ndarray, b: np.ndarray) -> None:
    put(b, "qs", pack_halves(xi & 15))
    put(b, "qh", np.packbits(shr(xi, 4, 1), axis=1, bitorder="little"))


def q_q5_0(x, b):
    d = signed_max(x) / F32(-16)
    v = x * per_row(inverse(d), 32)
    v += F32(16.5)
    b["d"] = d
    _q5_pack(np.minimum(c_int(v).astype(np.int8), 31).view(np.uint8), b)


def q_q5_1(x, b):
    mx, mn = row_extrema(x)
    d = (mx - mn) / F32(31)
    v = x - per_row(mn, 32)
    v *= per_row(inverse(d), 32)
    v += F32(0.5)
    b["d"], b["m"] = d, mn
    _q5_pack(c_int(v).astype(np.uint8), b)


def _q8_levels(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = row_absmax(x) / F32(127)
    return d, round_away(x * per_row(inverse(d), x.shape[1])).astype(np.int8)


def q_q8_0(x, b):
    d, qs = _q8_levels(x)
    b["d"] = d
    put(b, "qs", qs)


def q_q8_1(x, b):
    d, qs = _q8_levels(x)
    b["d"] = d
    put(b, "qs", qs)
    b["s"] = qs.sum(axis=1, dtype=np.int32).astype(F32) * d
