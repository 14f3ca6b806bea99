"""The K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K (256-element super-blocks of sub-blocks).

Decoders ``dq_*(blocks, out)`` follow ggml's ``dequantize_row_*`` in float32; ``q_q8_k`` is
ggml's ``quantize_row_q8_K_ref``.
"""

from __future__ import annotations

import numpy as np

from ..format.types import GGMLType
from .ops import (
    F32,
    bitplanes,
    crumbs,
    field,
    half,
    nearest_int,
    nibbles,
    scale_into,
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
