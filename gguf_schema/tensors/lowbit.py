"""FP4, ternary and 1-2 bit types: MXFP4, NVFP4, TQ1_0, TQ2_0, Q1_0, Q2_0.

Decoders ``dq_*(blocks, out)`` and quantizers ``q_*(x, blocks)`` following ggml's
``dequantize_row_*`` and ``quantize_row_*_ref`` in float32.
"""

from __future__ import annotations

import numpy as np

from ..format.types import GGMLType
from .grids import KVALUES_MXFP4
from .ops import (
    ALL_BYTES,
    BYTE_BITS,
    F32,
    crumbs,
    field,
    half,
    inverse,
    kv_levels,
    pack_crumbs,
    pack_halves,
    pack_rows,
    per_row,
    pieces,
    put,
    round_away,
    row_absmax,
    scale_into,
)

_Q1_WORDS = pack_rows(2 * BYTE_BITS.astype(np.int8) - 1)  # Q1_0: bit set -> +1, else -1


_Q2_WORDS = pack_rows(np.stack([(ALL_BYTES >> s) & 3 for s in (0, 2, 4, 6)], axis=1).astype(np.int8) - 1)


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


_TQ1_POW3 = np.repeat(np.array([1, 3, 9, 27, 81], dtype=np.uint16), 26)  # per 16-bit lane of a plane


_TQ1_PARTS = np.dtype(
    {"names": ["a", "b", "c"], "formats": ["V32", "V16", "V4"], "offsets": [0, 32, 48], "itemsize": 52}
)


def dq_tq1_0(q, out):
    t = GGMLType.TQ1_0
    n = len(q)
    # qs (48 bytes) then qh (4 bytes): 5 trits per byte (4 used in qh). Digit d of a byte is
    # (uint8)(q * 3**d) * 3 >> 8, i.e. 0, 1 or 2 as that product is below 86, below 171 or
    # above; ggml stores it plus one. The 52 bytes are repeated once per digit (plane d) and
    # the uint8 products formed per byte in 16-bit lanes (x86 has no 8-bit vector multiply).
    src = np.concatenate([field(q, t, "qs"), field(q, t, "qh")], axis=1)
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
    scale_into(out, lv, half(q, t, "d"))


def dq_tq2_0(q, out):
    t = GGMLType.TQ2_0
    n = len(q)
    lv = crumbs(field(q, t, "qs").reshape(n, 2, 32))
    lv -= 1
    scale_into(out, lv.view(np.int8), half(q, t, "d"))


def dq_mxfp4(q, out):
    t = GGMLType.MXFP4
    lv = kv_levels(field(q, t, "qs"), "mxfp4", KVALUES_MXFP4)
    scale_into(out, lv, _E8M0_HALF[field(q, t, "e")])


def dq_nvfp4(q, out):
    t = GGMLType.NVFP4
    n = len(q)
    lv = kv_levels(field(q, t, "qs").reshape(n, 4, 8), "mxfp4", KVALUES_MXFP4)
    scale_into(out, lv, _UE4M3_HALF[field(q, t, "d")])  # one scale per 16 elements


def dq_q1_0(q, out):
    t = GGMLType.Q1_0
    lv = _Q1_WORDS[field(q, t, "qs")].view(np.int8)  # (n, 128) of +-1
    scale_into(out, lv, half(q, t, "d"))


def dq_q2_0(q, out):
    t = GGMLType.Q2_0
    lv = _Q2_WORDS[field(q, t, "qs")].view(np.int8)  # (n, 64) of crumb - 1
    scale_into(out, lv, half(q, t, "d"))


def _ternary(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TQ1_0/TQ2_0: d = max |x|; levels round(x / d) + 1 in {0, 1, 2}."""
    d = row_absmax(x)[:, None]
    r = round_away(x * per_row(inverse(d), x.shape[1]))  # id = inf (a subnormal d): INT_MIN, + 1 wraps to 1 in 8 bits
    return d, (r + 1).astype(np.uint8)


def q_tq1_0(x, b):
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

    p32 = pieces(t[:, :160], 32)
    p16 = pieces(t[:, 160:240], 16)
    p4 = pieces(t[:, 240:], 4)
    put(b, "qs", np.concatenate([pack(p32), pack(p16)], axis=1))
    put(b, "qh", pack(p4))
    b["d"] = d[:, 0]


def q_tq2_0(x, b):
    d, t = _ternary(x)
    put(b, "qs", pack_crumbs(t))
    b["d"] = d[:, 0]


def _best_fp4(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """best_index_mxfp4: the first of the 16 E2M1 codes minimising |kvalue * d - x| (float32).

    ``d`` (> 0 or 0) broadcasts against ``x``. The codes are +-[0, 1, 2, 3, 4, 6, 8, 12]
    (8-15 negative). For x >= 0 a negative code never beats the codes before it (its error
    |-k*d - x| is at least |x|, the error of code 0), and for x < 0 the same holds for the
    positive codes, while |-k*d - x| equals |k*d - |x|| bit for bit. So the answer is the first
    minimum of the eight errors |k*d - |x|| (code 0 first), plus 8 for negative x unless that
    is code 0. Those errors fall, then rise, but rounding can make equal neighbours anywhere
    (large |x| against the saturated NVFP4 scale), so the first minimum is searched for.
    """
    a = np.abs(x)
    dd = np.ascontiguousarray(np.broadcast_to(d, x.shape), dtype=F32)
    err = np.empty((8, *x.shape), dtype=F32)
    for k, v in enumerate(KVALUES_MXFP4[:8]):
        np.multiply(dd, F32(v), out=err[k])
        err[k] -= a
    np.abs(err, out=err)
    best = err.argmin(axis=0).astype(np.uint8)  # the first of equal minimums
    best += ((x < 0) & (best > 0)).view(np.uint8) << 3
    return best


def q_mxfp4(x, b):
    amax = row_absmax(x)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0).astype(np.int32).astype(np.uint8)
    i = _best_fp4(x, _E8M0_HALF[e][:, None])
    b["e"] = e
    put(b, "qs", pack_halves(i))


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


def q_nvfp4(x, b):
    n = len(x)
    xs = x.reshape(n, 4, 16)
    ue = _fp32_to_ue4m3(np.abs(xs).max(axis=2) / F32(6))
    i = _best_fp4(xs, _UE4M3_HALF[ue][:, :, None])
    b["d"] = ue
    put(b, "qs", pack_halves(i.reshape(n * 4, 16)).reshape(n, 32))


def q_q1_0(x, b):
    d = np.cumsum(np.abs(x), axis=1, dtype=F32)[:, -1] / F32(128)  # sequential sum, as in C
    b["d"] = d
    b["qs"] = np.packbits(x >= 0, axis=1, bitorder="little")


def q_q2_0(x, b):
    d = np.abs(x).max(axis=1, keepdims=True)
    q = np.clip(round_away(x * inverse(d)).astype(np.int64) + 1, 0, 3).astype(np.uint8).reshape(len(x), 16, 4)
    b["qs"] = np.bitwise_or.reduce(q << (2 * np.arange(4, dtype=np.uint8)), axis=2)
    b["d"] = d[:, 0]
