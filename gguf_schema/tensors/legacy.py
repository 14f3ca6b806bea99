"""The legacy block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 (32 elements per block, one scale).

Decoders ``dq_*(blocks, out)`` and quantizers ``q_*(x, blocks)`` following ggml's
``dequantize_row_*`` and ``quantize_row_*_ref`` step by step in float32; row quantizers
``qr_*(rows, out, imatrix)`` for ggml's importance-weighted ``quantize_q4_0`` etc.
"""

from __future__ import annotations

import numpy as np

from ..format.types import GGMLType
from .kquants import search_qkx, search_qx
from .layouts import block_dtype
from .ops import (
    F32,
    c_int,
    columns,
    field,
    ggml_half,
    half,
    inverse,
    nibbles,
    pack_halves,
    per_row,
    put,
    round_away,
    row_absmax,
    row_extrema,
    row_seq_sum,
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


# ---------------------------------------------------------------------------- importance paths
#
# ggml's quantize_row_q4_0_impl etc.: with importance weights the legacy types search their
# scale as the K-quants do (make_qx_quants for Q4_0/Q5_0, make_qkx3_quants for Q4_1/Q5_1),
# each element weighted by ``imatrix * sqrtf(sigma2 + x * x)``, sigma2 the mean square of the
# whole row. Without weights they are the reference quantizers above.


def _row_search_input(x: np.ndarray, imatrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Blocks of 32 position-major, and their weights."""
    _n_rows, n_per_row = x.shape
    sigma2 = row_seq_sum(x * x) / F32(n_per_row)
    xs = columns(x, 32)
    qw = columns(np.broadcast_to(imatrix, x.shape), 32)
    return xs, qw * np.sqrt(np.repeat(sigma2, n_per_row // 32) + xs * xs)


def _by_rows(x: np.ndarray, out: np.ndarray, imatrix: np.ndarray | None, t: GGMLType, ref, search) -> None:
    b = out.reshape(-1).view(block_dtype(t))
    with np.errstate(all="ignore"):
        if imatrix is None:
            ref(np.ascontiguousarray(x).reshape(-1, 32), b)
        else:
            search(*_row_search_input(x, imatrix), b)


def _qx_blocks(xs: np.ndarray, w: np.ndarray, b: np.ndarray, nmax: int) -> np.ndarray:
    levels, d = search_qx(xs, w, nmax)
    b["d"] = ggml_half(d)
    return np.ascontiguousarray(levels.T).astype(np.uint8)


def _qkx_blocks(xs: np.ndarray, w: np.ndarray, b: np.ndarray, nmax: int) -> np.ndarray:
    levels, d, the_min = search_qkx(xs, w, nmax, -0.9, 0.05, 36, False)
    b["d"], b["m"] = ggml_half(d), ggml_half(-the_min)
    return np.ascontiguousarray(levels.T).astype(np.uint8)


def qr_q4_0(x, out, imatrix):
    """ggml's ``quantize_q4_0``: rows -> ``out``, importance-weighted with ``imatrix``."""

    def search(xs, w, b):
        put(b, "qs", pack_halves(_qx_blocks(xs, w, b, 8)))

    _by_rows(x, out, imatrix, GGMLType.Q4_0, q_q4_0, search)


def qr_q4_1(x, out, imatrix):
    """ggml's ``quantize_q4_1``: rows -> ``out``, importance-weighted with ``imatrix``."""

    def search(xs, w, b):
        put(b, "qs", pack_halves(_qkx_blocks(xs, w, b, 15)))

    _by_rows(x, out, imatrix, GGMLType.Q4_1, q_q4_1, search)


def qr_q5_0(x, out, imatrix):
    """ggml's ``quantize_q5_0``: rows -> ``out``, importance-weighted with ``imatrix``."""

    def search(xs, w, b):
        _q5_pack(_qx_blocks(xs, w, b, 16), b)

    _by_rows(x, out, imatrix, GGMLType.Q5_0, q_q5_0, search)


def qr_q5_1(x, out, imatrix):
    """ggml's ``quantize_q5_1``: rows -> ``out``, importance-weighted with ``imatrix``."""

    def search(xs, w, b):
        _q5_pack(_qkx_blocks(xs, w, b, 31), b)

    _by_rows(x, out, imatrix, GGMLType.Q5_1, q_q5_1, search)
