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

from typing import Callable

import numpy as np

from .blocks import QK_K, _as_uint8, _checked_type, block_dtype, byteswap
from .errors import GGUFFormatError
from .quant_tables import (
    IQ1S_DELTA, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
    KSIGNS_IQ2XS, KVALUES_IQ4NL, KVALUES_MXFP4,
)
from .types import GGMLType

__all__ = ["dequantize", "quantize", "DEQUANTIZE_TYPES", "QUANTIZE_TYPES"]

F32 = np.float32
_CHUNK_ELEMENTS = 1 << 15
"""Elements dequantized per step: the working set stays in the CPU's L2 cache."""

# ----------------------------------------------------------------------------------------
# Lookup tables derived once at import (all float32 unless noted).

_BYTES = np.arange(256, dtype=np.uint8)
_NIB = np.stack([_BYTES & 15, _BYTES >> 4], axis=1)  # (256, 2): low, high nibble
_CRUMB = np.stack([(_BYTES >> s) & 3 for s in (0, 2, 4, 6)], axis=1)  # (256, 4) 2-bit fields
_BIT = np.unpackbits(_BYTES[:, None], axis=1, bitorder="little")  # (256, 8) bit k of byte

_NIB_Q4_0 = (_NIB.astype(np.int16) - 8).astype(F32)
_NIB_U = _NIB.astype(F32)
_NIB_IQ4 = KVALUES_IQ4NL[_NIB].astype(F32)
_NIB_FP4 = KVALUES_MXFP4[_NIB].astype(F32)
_CRUMB_U = _CRUMB.astype(F32)
_CRUMB_M1 = (_CRUMB.astype(np.int16) - 1).astype(F32)
_PM1 = np.where(_BIT == 1, F32(1), F32(-1)).astype(F32)  # Q1_0: bit set -> +1
_SIGN8 = np.where(_BIT == 1, F32(-1), F32(1)).astype(F32)  # IQ: bit set -> negative
_SIGN7 = _SIGN8[KSIGNS_IQ2XS]  # (128, 8) signs of a 7-bit sign index
_LEVELS_Q3 = np.arange(-4, 4, dtype=F32)
_LEVELS_Q5 = np.arange(32, dtype=F32)
_LEVELS_Q6 = np.arange(-32, 32, dtype=F32)


def _trits() -> np.ndarray:
    """(256, 5) ternary digits of a TQ1_0 byte, minus one: digit n = ((q * 3**n) mod 256 * 3) >> 8."""
    out = np.empty((256, 5), dtype=F32)
    for n in range(5):
        q = (_BYTES.astype(np.uint16) * 3**n) & 0xFF
        out[:, n] = ((q * 3) >> 8).astype(F32) - 1
    return out


_TRITS = _trits()


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
_GRID_IQ2XXS = IQ2XXS_GRID.astype(F32)
_GRID_IQ2XS = IQ2XS_GRID.astype(F32)
_GRID_IQ2S = IQ2S_GRID.astype(F32)
_GRID_IQ3XXS = IQ3XXS_GRID.astype(F32)
_GRID_IQ3S = IQ3S_GRID.astype(F32)
_GRID_IQ1S = IQ1S_GRID.astype(F32)
_SHIFT8 = np.arange(8, dtype=np.uint8)

# ----------------------------------------------------------------------------------------
# Field access. Kernels receive the blocks of a chunk as a (n, type_size) uint8 array and
# read each field by its ggml name through the block layout (offset and size from the dtype).


def _field(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """The bytes of field ``name`` of every block: a (n, field_bytes) uint8 view."""
    sub, off = block_dtype(t).fields[name][:2]
    return q[:, off:off + sub.itemsize]


def _half(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """A ``ggml_half`` field as float32, shape (n, 1)."""
    return _field(q, t, name).view("<f2").astype(F32)


def _u16(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    return _field(q, t, name).view("<u2")


def _u32(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """A byte field read as little-endian uint32 words (as ggml does with memcpy)."""
    return _field(q, t, name).view("<u4")


def _split_halves(values: np.ndarray) -> np.ndarray:
    """(…, k, 2) per-byte (low, high) values -> (…, 2, k): low nibbles first, as ggml lays them."""
    return values.swapaxes(-1, -2)


# ----------------------------------------------------------------------------------------
# Dequantization kernels: (q: (n, type_size) uint8, out: (n, block_size) float32) -> None.


def _dq_q4_0(q, out):
    t = GGMLType.Q4_0
    n = len(q)
    np.multiply(_split_halves(_NIB_Q4_0[_field(q, t, "qs")]), _half(q, t, "d")[:, :, None],
                out=out.reshape(n, 2, 16))


def _dq_q4_1(q, out):
    t = GGMLType.Q4_1
    n = len(q)
    o = out.reshape(n, 2, 16)
    np.multiply(_split_halves(_NIB_U[_field(q, t, "qs")]), _half(q, t, "d")[:, :, None], out=o)
    o += _half(q, t, "m")[:, :, None]


def _q5_levels(q, t):
    """The 5-bit quants of Q5_0/Q5_1 as uint8 (n, 2, 16): low nibble | 5th bit from qh."""
    n = len(q)
    qs = _field(q, t, "qs")
    hb = np.unpackbits(_field(q, t, "qh"), axis=1, bitorder="little").reshape(n, 2, 16)
    nib = _NIB[qs].swapaxes(-1, -2)
    return nib | (hb << 4)


def _dq_q5_0(q, out):
    t = GGMLType.Q5_0
    n = len(q)
    np.multiply(_LEVELS_Q5[_q5_levels(q, t)] - F32(16), _half(q, t, "d")[:, :, None],
                out=out.reshape(n, 2, 16))


def _dq_q5_1(q, out):
    t = GGMLType.Q5_1
    n = len(q)
    o = out.reshape(n, 2, 16)
    np.multiply(_q5_levels(q, t), _half(q, t, "d")[:, :, None], out=o)
    o += _half(q, t, "m")[:, :, None]


def _dq_q8_0(q, out):
    t = GGMLType.Q8_0
    np.multiply(_field(q, t, "qs").view(np.int8), _half(q, t, "d"), out=out)


def _dq_q8_1(q, out):
    t = GGMLType.Q8_1
    np.multiply(_field(q, t, "qs").view(np.int8), _half(q, t, "d"), out=out)


def _dq_q8_k(q, out):
    t = GGMLType.Q8_K
    np.multiply(_field(q, t, "qs").view(np.int8), _field(q, t, "d").view("<f4"), out=out)


def _dq_q2_k(q, out):
    t = GGMLType.Q2_K
    n = len(q)
    sc = _field(q, t, "scales")
    dl = (_half(q, t, "d") * (sc & 15)).reshape(n, 2, 4, 2, 1)
    ml = (_half(q, t, "dmin") * (sc >> 4)).reshape(n, 2, 4, 2, 1)
    # element (half h, shift j, l) is crumb j of qs[32h + l]; 16 elements share a scale
    vals = _CRUMB_U[_field(q, t, "qs").reshape(n, 2, 32)].swapaxes(-1, -2).reshape(n, 2, 4, 2, 16)
    o = out.reshape(n, 2, 4, 2, 16)
    np.multiply(vals, dl, out=o)
    o -= ml


def _q3_k_scales(sc: np.ndarray) -> np.ndarray:
    """The sixteen 6-bit Q3_K scales (n, 16) as int: low 4 bits from bytes 0-7, high 2 from 8-11."""
    low = np.concatenate([sc[:, :8] & 15, sc[:, :8] >> 4], axis=1)
    high = (sc[:, 8:12][:, None, :] >> (2 * np.arange(4, dtype=np.uint8))[:, None]) & 3
    return (low | (high.reshape(-1, 16) << 4)).astype(np.int16) - 32


def _dq_q3_k(q, out):
    t = GGMLType.Q3_K
    n = len(q)
    dl = (_half(q, t, "d") * _q3_k_scales(_field(q, t, "scales")).astype(F32)).reshape(n, 2, 4, 2, 1)
    crumbs = _CRUMB[_field(q, t, "qs").reshape(n, 2, 32)].swapaxes(-1, -2)  # (n, 2, 4, 32)
    hbit = (_field(q, t, "hmask")[:, None, :] >> _SHIFT8[:, None]) & 1  # (n, 8, 32), bit 4h+j
    idx = crumbs | (hbit.reshape(n, 2, 4, 32) << 2)  # level + 4
    np.multiply(_LEVELS_Q3[idx].reshape(n, 2, 4, 2, 16), dl, out=out.reshape(n, 2, 4, 2, 16))


def _k4_scale_min(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """get_scale_min_k4 for j = 0..7: the 6-bit scales and mins packed in 12 bytes, (n, 8) each."""
    a, b, c = sc[:, 0:4], sc[:, 4:8], sc[:, 8:12]
    scale = np.concatenate([a & 63, (c & 15) | ((a >> 6) << 4)], axis=1)
    mn = np.concatenate([b & 63, (c >> 4) | ((b >> 6) << 4)], axis=1)
    return scale, mn


def _dq_q4_k(q, out):
    t = GGMLType.Q4_K
    n = len(q)
    sc, mn = _k4_scale_min(_field(q, t, "scales"))
    d1 = (_half(q, t, "d") * sc).reshape(n, 4, 2, 1)
    m1 = (_half(q, t, "dmin") * mn).reshape(n, 4, 2, 1)
    o = out.reshape(n, 4, 2, 32)
    np.multiply(_split_halves(_NIB_U[_field(q, t, "qs").reshape(n, 4, 32)]), d1, out=o)
    o -= m1


def _dq_q5_k(q, out):
    t = GGMLType.Q5_K
    n = len(q)
    sc, mn = _k4_scale_min(_field(q, t, "scales"))
    d1 = (_half(q, t, "d") * sc).reshape(n, 4, 2, 1)
    m1 = (_half(q, t, "dmin") * mn).reshape(n, 4, 2, 1)
    nib = _split_halves(_NIB[_field(q, t, "qs").reshape(n, 4, 32)])  # (n, 4, 2, 32)
    hbit = (_field(q, t, "qh")[:, None, :] >> _SHIFT8[:, None]) & 1  # bit s for sub-block s
    o = out.reshape(n, 4, 2, 32)
    np.multiply(_LEVELS_Q5[nib | (hbit.reshape(n, 4, 2, 32) << 4)], d1, out=o)
    o -= m1


def _dq_q6_k(q, out):
    t = GGMLType.Q6_K
    n = len(q)
    ql = _field(q, t, "ql").reshape(n, 2, 2, 32)
    nib = np.concatenate([ql & 15, ql >> 4], axis=2)  # (n, 2, 4, 32): quarter g of each half
    qh = _CRUMB[_field(q, t, "qh").reshape(n, 2, 32)].swapaxes(-1, -2)  # (n, 2, 4, 32)
    dl = (_half(q, t, "d") * _field(q, t, "scales").view(np.int8)).reshape(n, 2, 4, 2, 1)
    vals = _LEVELS_Q6[nib | (qh << 4)].reshape(n, 2, 4, 2, 16)
    np.multiply(dl, vals, out=out.reshape(n, 2, 4, 2, 16))


def _dq_tq1_0(q, out):
    t = GGMLType.TQ1_0
    n = len(q)
    d = _half(q, t, "d")[:, :, None]
    qs = _field(q, t, "qs")
    np.multiply(_TRITS[qs[:, :32]].swapaxes(-1, -2), d, out=out[:, :160].reshape(n, 5, 32))
    np.multiply(_TRITS[qs[:, 32:48]].swapaxes(-1, -2), d, out=out[:, 160:240].reshape(n, 5, 16))
    np.multiply(_TRITS[_field(q, t, "qh")][:, :, :4].swapaxes(-1, -2), d, out=out[:, 240:].reshape(n, 4, 4))


def _dq_tq2_0(q, out):
    t = GGMLType.TQ2_0
    n = len(q)
    vals = _CRUMB_M1[_field(q, t, "qs").reshape(n, 2, 32)].swapaxes(-1, -2)
    np.multiply(vals, _half(q, t, "d")[:, :, None, None], out=out.reshape(n, 2, 4, 32))


def _dq_mxfp4(q, out):
    t = GGMLType.MXFP4
    n = len(q)
    d = _E8M0_HALF[_field(q, t, "e")]
    np.multiply(_split_halves(_NIB_FP4[_field(q, t, "qs")]), d[:, :, None], out=out.reshape(n, 2, 16))


def _dq_nvfp4(q, out):
    t = GGMLType.NVFP4
    n = len(q)
    d = _UE4M3_HALF[_field(q, t, "d")]  # (n, 4): one scale per 16 elements
    vals = _split_halves(_NIB_FP4[_field(q, t, "qs").reshape(n, 4, 8)])
    np.multiply(vals, d[:, :, None, None], out=out.reshape(n, 4, 2, 8))


def _dq_q1_0(q, out):
    t = GGMLType.Q1_0
    n = len(q)
    np.multiply(_PM1[_field(q, t, "qs")], _half(q, t, "d")[:, :, None], out=out.reshape(n, 16, 8))


def _dq_q2_0(q, out):
    t = GGMLType.Q2_0
    n = len(q)
    np.multiply(_CRUMB_M1[_field(q, t, "qs")], _half(q, t, "d")[:, :, None], out=out.reshape(n, 16, 4))


def _dq_iq4_nl(q, out):
    t = GGMLType.IQ4_NL
    n = len(q)
    np.multiply(_split_halves(_NIB_IQ4[_field(q, t, "qs")]), _half(q, t, "d")[:, :, None],
                out=out.reshape(n, 2, 16))


def _dq_iq4_xs(q, out):
    t = GGMLType.IQ4_XS
    n = len(q)
    lo = _NIB[_field(q, t, "scales_l")].reshape(n, 8)
    hi = (_u16(q, t, "scales_h") >> (2 * np.arange(8, dtype=np.uint16))) & 3
    dl = _half(q, t, "d") * ((lo | (hi << 4)).astype(np.int16) - 32)
    vals = _split_halves(_NIB_IQ4[_field(q, t, "qs").reshape(n, 8, 16)])
    np.multiply(vals, dl[:, :, None, None], out=out.reshape(n, 8, 2, 16))


def _iq_scale(q: np.ndarray, t: GGMLType, nibbles: np.ndarray) -> np.ndarray:
    """d * (0.5 + s) * 0.25, the IQ2 block scale (float32)."""
    d = _half(q, t, "d").reshape((-1,) + (1,) * (nibbles.ndim - 1))
    return d * (nibbles.astype(F32) + F32(0.5)) * F32(0.25)


def _dq_iq2_xxs(q, out):
    t = GGMLType.IQ2_XXS
    n = len(q)
    raw = _field(q, t, "qs").reshape(n, 8, 8)  # per 32 elements: 4 grid bytes, 1 sign/scale word
    grid_idx = raw[:, :, :4]
    word = raw[:, :, 4:].reshape(n, 32).view("<u4")  # (n, 8)
    db = _iq_scale(q, t, word >> 28)
    signs = (word[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 127
    o = out.reshape(n, 8, 4, 8)
    np.multiply(_GRID_IQ2XXS[grid_idx], db[:, :, None, None], out=o)
    o *= _SIGN7[signs]


def _dq_iq2_xs(q, out):
    t = GGMLType.IQ2_XS
    n = len(q)
    qs = _u16(q, t, "qs").reshape(n, 8, 4)
    db = _iq_scale(q, t, _NIB[_field(q, t, "scales")])  # (n, 8, 2)
    o = out.reshape(n, 8, 2, 2, 8)
    np.multiply(_GRID_IQ2XS[qs & 511].reshape(n, 8, 2, 2, 8), db[:, :, :, None, None], out=o)
    o *= _SIGN7[qs >> 9].reshape(n, 8, 2, 2, 8)


def _dq_iq2_s(q, out):
    t = GGMLType.IQ2_S
    n = len(q)
    qs = _field(q, t, "qs")
    low, signs = qs[:, :32].reshape(n, 8, 4), qs[:, 32:].reshape(n, 8, 4)
    high = _CRUMB[_field(q, t, "qh")].astype(np.uint16)  # (n, 8, 4)
    db = _iq_scale(q, t, _NIB[_field(q, t, "scales")])  # (n, 8, 2)
    o = out.reshape(n, 8, 2, 2, 8)
    np.multiply(_GRID_IQ2S[low | (high << 8)].reshape(n, 8, 2, 2, 8), db[:, :, :, None, None], out=o)
    o *= _SIGN8[signs].reshape(n, 8, 2, 2, 8)


def _dq_iq3_xxs(q, out):
    t = GGMLType.IQ3_XXS
    n = len(q)
    qs = _field(q, t, "qs")
    grid_idx = qs[:, :64].reshape(n, 8, 8)
    word = qs[:, 64:].view("<u4")  # (n, 8): 28 sign bits + 4-bit scale
    db = _half(q, t, "d") * ((word >> 28).astype(F32) + F32(0.5)) * F32(0.5)
    signs = (word[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 127
    o = out.reshape(n, 8, 4, 8)
    np.multiply(_GRID_IQ3XXS[grid_idx].reshape(n, 8, 4, 8), db[:, :, None, None], out=o)
    o *= _SIGN7[signs]


def _dq_iq3_s(q, out):
    t = GGMLType.IQ3_S
    n = len(q)
    high = (_field(q, t, "qh")[:, :, None] >> _SHIFT8) & 1  # (n, 8, 8)
    idx = _field(q, t, "qs").reshape(n, 8, 8) | (high.astype(np.uint16) << 8)
    db = _half(q, t, "d") * (1 + 2 * _NIB[_field(q, t, "scales")].reshape(n, 8).astype(np.int16))
    o = out.reshape(n, 8, 4, 8)
    np.multiply(_GRID_IQ3S[idx].reshape(n, 8, 4, 8), db[:, :, None, None], out=o)
    o *= _SIGN8[_field(q, t, "signs").reshape(n, 8, 4)]


def _dq_iq1_s(q, out):
    t = GGMLType.IQ1_S
    n = len(q)
    qh = _u16(q, t, "qh")  # (n, 8)
    dl = _half(q, t, "d") * (2 * ((qh >> 12) & 7) + 1).astype(F32)
    delta = np.where(qh & 0x8000, F32(-IQ1S_DELTA), F32(IQ1S_DELTA))
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7
    idx = _field(q, t, "qs").reshape(n, 8, 4) | (high << 8)
    o = out.reshape(n, 8, 4, 8)
    np.add(_GRID_IQ1S[idx], delta[:, :, None, None], out=o)
    o *= dl[:, :, None, None]


def _dq_iq1_m(q, out):
    t = GGMLType.IQ1_M
    n = len(q)
    sc = _field(q, t, "scales").view("<u2")  # (n, 4): 3-bit scales + the f16 scale's nibbles
    bits = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | (sc[:, 3] & 0xF000)
    d = bits.view("<f2").astype(F32)[:, None, None]
    s3 = (sc[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7  # (n, 4, 4) -> 8 x 2
    dl = d * (2 * s3.reshape(n, 8, 2) + 1).astype(F32)
    nib = _NIB[_field(q, t, "qh")].reshape(n, 8, 4)  # per group of 8: 3 index bits + delta sign
    idx = _field(q, t, "qs").reshape(n, 8, 4) | ((nib & 7).astype(np.uint16) << 8)
    delta = np.where(nib & 8, F32(-IQ1S_DELTA), F32(IQ1S_DELTA))
    o = out.reshape(n, 8, 4, 8)
    np.add(_GRID_IQ1S[idx], delta[:, :, :, None], out=o)
    o.reshape(n, 8, 2, 16)[...] *= dl[:, :, :, None]


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

    Returns:
        A new C-contiguous float32 array. Work proceeds in chunks of about
        32k elements, so memory beyond the result stays bounded.

    Raises:
        GGUFFormatError: unknown or removed type, a last dimension that is not a whole number
            of blocks, or a byte length that does not match the shape.

    >>> raw = bytes.fromhex("0040") + bytes([0x98] * 16)   # Q4_0: d = 2.0, nibbles 8 and 9
    >>> dequantize(raw, GGMLType.Q4_0, (32,))[[0, 16]].tolist()
    [0.0, 2.0]
    >>> dequantize(np.arange(6, dtype="<f2").view(np.uint8), GGMLType.F16, (2, 3), rows=slice(1, 2))
    array([[3., 4., 5.]], dtype=float32)
    """
    t = _resolve_type(t)
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
    out = np.empty((stop - start) * cols, dtype=F32)

    if not t.quantized:
        src = data.view(block_dtype(t, byte_order))
        if t == GGMLType.BF16:
            bits = out.view(np.uint32)
            for i in range(0, out.size, _CHUNK_ELEMENTS):
                np.left_shift(src[i:i + _CHUNK_ELEMENTS], 16, out=bits[i:i + _CHUNK_ELEMENTS], dtype=np.uint32)
        else:
            for i in range(0, out.size, _CHUNK_ELEMENTS):
                out[i:i + _CHUNK_ELEMENTS] = src[i:i + _CHUNK_ELEMENTS]
    else:
        kernel = _KERNELS[t]
        blocks = data.reshape(-1, t.type_size)
        out_blocks = out.reshape(-1, t.block_size)
        step = max(1, _CHUNK_ELEMENTS // t.block_size)
        with np.errstate(all="ignore"):  # inf/nan scales in the data decode to inf/nan, as in ggml
            for i in range(0, len(blocks), step):
                q = blocks[i:i + step]
                if byte_order == "big":
                    q = byteswap(q, t, "big", "little").reshape(-1, t.type_size)
                kernel(q, out_blocks[i:i + step])

    if rows is None:
        return out.reshape(tuple(int(s) for s in shape))
    return out.reshape(stop - start, cols)
