"""Plain element types: F32, F16, BF16, F64 and the integers I8, I16, I32, I64.

One element per "block": decoding is a conversion to float32 (BF16 through its bits),
encoding a conversion from the input (BF16 rounded as ggml rounds; integers checked to be
integral and in range).
"""

from __future__ import annotations

import numpy as np

from ..errors import GGUFInternalError
from ..format.types import GGMLType

# ---------------------------------------------------------------------------- decoders
# (blocks: (n, itemsize) little-endian uint8, out: (n, 1) float32), as every codec's.


def _decoder(dtype: str):
    def decode(q: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, np.ascontiguousarray(q).view(dtype), casting="unsafe")

    return decode


dq_f32 = _decoder("<f4")
dq_f16 = _decoder("<f2")
dq_f64 = _decoder("<f8")
dq_i8 = _decoder("i1")
dq_i16 = _decoder("<i2")
dq_i32 = _decoder("<i4")
dq_i64 = _decoder("<i8")


def dq_bf16(q: np.ndarray, out: np.ndarray) -> None:
    """BF16 bits are the top half of a float32: shift them up."""
    np.left_shift(np.ascontiguousarray(q).view("<u2"), 16, out=out.view(np.uint32), dtype=np.uint32)


# ---------------------------------------------------------------------------- encoders


def to_bf16(x: np.ndarray, out: np.ndarray) -> None:
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


def to_int(x: np.ndarray, t: GGMLType) -> np.ndarray:
    dtype = t.numpy_dtype
    if dtype is None:
        raise GGUFInternalError("dtype is not None does not hold")
    info = np.iinfo(dtype)
    if x.dtype.kind == "f":
        bad = ~np.isfinite(x) | (x != np.trunc(x))
        if bad.any():
            raise ValueError(f"{t.name} needs integer values, got {float(x[bad].flat[0])!r}")
    if x.size and (x.min() < info.min or x.max() > info.max):
        raise ValueError(f"values out of the {t.name} range [{info.min}, {info.max}]")
    return x.astype(dtype)
