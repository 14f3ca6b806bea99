"""Block layouts of the ggml tensor types, and byte-order conversion of tensor data.

This module owns one table, ``LAYOUTS``: for every quantized ggml type, the fields of its
block struct in the order and with the names of ggml's ``ggml-common.h`` (``block_q4_0``,
``block_q6_K``, ...). Everything else is derived from that table:

* :func:`block_dtype` -- a numpy structured dtype of one block, in either byte order;
* :func:`block_struct` -- the equivalent ``construct`` Struct (documentation, validation);
* :func:`byteswap` -- converts a tensor's raw bytes between byte orders for every type.

Fields are typed as ggml declares them: a multi-byte scalar (``ggml_half``, ``uint16_t``,
``float``, ``int16_t``) swaps with the byte order; a byte array (``uint8_t qh[4]``) does not,
even where ggml's code later reads those bytes as a wider integer (Q5_0/Q5_1 ``qh``, IQ1_M
``scales``, Q3_K ``scales``): those bytes are little-endian in every file.
Plain types (F32, F16, BF16, F64, I8..I64) have no block; their "layout" is one element.

>>> block_dtype(GGMLType.Q4_0).itemsize, block_dtype(GGMLType.Q4_0).names
(18, ('d', 'qs'))
>>> block_dtype(GGMLType.Q8_K, "big")["bsums"].str
'|V32'
>>> block_dtype(GGMLType.Q8_K, "big")["bsums"].base.str
'>i2'
"""

from __future__ import annotations

import construct as cs
import numpy as np

from ..errors import GGUFInternalError
from ..format.types import GGMLType

__all__ = ["LAYOUTS", "QK_K", "block_dtype", "block_struct", "byteswap"]

QK_K = 256
"""Elements of a K-quant / IQ super-block."""

# (field name, scalar kind, count). Kinds: "f2" ggml_half, "f4" float, "u1" uint8_t,
# "i1" int8_t, "u2" uint16_t, "i2" int16_t. count 1 means a scalar field.
Field = tuple[str, str, int]

LAYOUTS: dict[GGMLType, tuple[Field, ...]] = {
    GGMLType.Q4_0: (("d", "f2", 1), ("qs", "u1", 16)),
    GGMLType.Q4_1: (("d", "f2", 1), ("m", "f2", 1), ("qs", "u1", 16)),
    GGMLType.Q5_0: (("d", "f2", 1), ("qh", "u1", 4), ("qs", "u1", 16)),
    GGMLType.Q5_1: (("d", "f2", 1), ("m", "f2", 1), ("qh", "u1", 4), ("qs", "u1", 16)),
    GGMLType.Q8_0: (("d", "f2", 1), ("qs", "i1", 32)),
    GGMLType.Q8_1: (("d", "f2", 1), ("s", "f2", 1), ("qs", "i1", 32)),
    GGMLType.Q2_K: (("scales", "u1", 16), ("qs", "u1", 64), ("d", "f2", 1), ("dmin", "f2", 1)),
    GGMLType.Q3_K: (("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12), ("d", "f2", 1)),
    GGMLType.Q4_K: (("d", "f2", 1), ("dmin", "f2", 1), ("scales", "u1", 12), ("qs", "u1", 128)),
    GGMLType.Q5_K: (
        ("d", "f2", 1),
        ("dmin", "f2", 1),
        ("scales", "u1", 12),
        ("qh", "u1", 32),
        ("qs", "u1", 128),
    ),
    GGMLType.Q6_K: (("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "f2", 1)),
    GGMLType.Q8_K: (("d", "f4", 1), ("qs", "i1", 256), ("bsums", "i2", 16)),
    GGMLType.IQ2_XXS: (("d", "f2", 1), ("qs", "u2", 32)),
    GGMLType.IQ2_XS: (("d", "f2", 1), ("qs", "u2", 32), ("scales", "u1", 8)),
    GGMLType.IQ2_S: (("d", "f2", 1), ("qs", "u1", 64), ("qh", "u1", 8), ("scales", "u1", 8)),
    GGMLType.IQ3_XXS: (("d", "f2", 1), ("qs", "u1", 96)),
    GGMLType.IQ3_S: (
        ("d", "f2", 1),
        ("qs", "u1", 64),
        ("qh", "u1", 8),
        ("signs", "u1", 32),
        ("scales", "u1", 4),
    ),
    GGMLType.IQ1_S: (("d", "f2", 1), ("qs", "u1", 32), ("qh", "u2", 8)),
    GGMLType.IQ1_M: (("qs", "u1", 32), ("qh", "u1", 16), ("scales", "u1", 8)),
    GGMLType.IQ4_NL: (("d", "f2", 1), ("qs", "u1", 16)),
    GGMLType.IQ4_XS: (("d", "f2", 1), ("scales_h", "u2", 1), ("scales_l", "u1", 4), ("qs", "u1", 128)),
    GGMLType.TQ1_0: (("qs", "u1", 48), ("qh", "u1", 4), ("d", "f2", 1)),
    GGMLType.TQ2_0: (("qs", "u1", 64), ("d", "f2", 1)),
    GGMLType.MXFP4: (("e", "u1", 1), ("qs", "u1", 16)),
    GGMLType.NVFP4: (("d", "u1", 4), ("qs", "u1", 32)),
    GGMLType.Q1_0: (("d", "f2", 1), ("qs", "u1", 16)),
    GGMLType.Q2_0: (("d", "f2", 1), ("qs", "u1", 16)),
}

_ORDERS = {"little": "<", "big": ">"}

_CONSTRUCT_SCALARS = {
    ("f2", "<"): cs.Float16l,
    ("f2", ">"): cs.Float16b,
    ("f4", "<"): cs.Float32l,
    ("f4", ">"): cs.Float32b,
    ("u2", "<"): cs.Int16ul,
    ("u2", ">"): cs.Int16ub,
    ("i2", "<"): cs.Int16sl,
    ("i2", ">"): cs.Int16sb,
    ("u1", "<"): cs.Int8ul,
    ("u1", ">"): cs.Int8ul,
    ("i1", "<"): cs.Int8sl,
    ("i1", ">"): cs.Int8sl,
}


def _order_char(byte_order: str) -> str:
    try:
        return _ORDERS[byte_order]
    except KeyError:
        raise ValueError(f"byte order must be 'little' or 'big', got {byte_order!r}") from None


def checked_type(t: GGMLType | int | str) -> GGMLType:
    """The live ggml type ``t`` names (see :meth:`GGMLType.of`); ``ValueError`` for a removed one."""
    t = GGMLType.of(t)
    if t.removed:
        raise ValueError(f"tensor type {t.name} (id {int(t)}) has been removed from ggml")
    return t


_DTYPE_CACHE: dict[tuple[GGMLType, str], np.dtype] = {}


def block_dtype(t: GGMLType | int, byte_order: str = "little") -> np.dtype:
    """The numpy dtype of one block of ``t`` (of one element for plain types).

    Quantized types give a structured dtype with ggml's field names; its itemsize is
    ``t.type_size``. Plain types give their element dtype (BF16 as ``uint16`` bits).

    >>> block_dtype(GGMLType.Q6_K).names
    ('ql', 'qh', 'scales', 'd')
    >>> block_dtype(GGMLType.F16, "big").str
    '>f2'
    """
    t = checked_type(t)
    order = _order_char(byte_order)
    key = (t, order)
    dt = _DTYPE_CACHE.get(key)
    if dt is None:
        if t.quantized:
            dt = np.dtype(
                [
                    (name, order + kind) if count == 1 else (name, order + kind, (count,))
                    for name, kind, count in LAYOUTS[t]
                ]
            )
        else:
            plain = t.numpy_dtype
            if plain is None:
                raise GGUFInternalError("plain is not None does not hold")
            dt = plain.newbyteorder("<" if order == "<" else ">")
        _DTYPE_CACHE[key] = dt
    return dt


def block_struct(t: GGMLType | int, byte_order: str = "little") -> cs.Struct:
    """A ``construct`` Struct equivalent to :func:`block_dtype` (same table, same fields).

    >>> s = block_struct(GGMLType.Q4_0)
    >>> s.sizeof()
    18
    >>> block = s.parse(bytes.fromhex("003c") + bytes(range(16)))
    >>> block.d, block.qs[:3]
    (1.0, [0, 1, 2])
    """
    t = checked_type(t)
    order = _order_char(byte_order)
    if not t.quantized:
        kind = {GGMLType.F32: "f4", GGMLType.F16: "f2", GGMLType.BF16: "u2", GGMLType.I8: "i1", GGMLType.I16: "i2"}.get(
            t
        )
        if kind is not None:
            return cs.Struct("v" / _CONSTRUCT_SCALARS[(kind, order)])
        sub = {
            GGMLType.F64: (cs.Float64l, cs.Float64b),
            GGMLType.I32: (cs.Int32sl, cs.Int32sb),
            GGMLType.I64: (cs.Int64sl, cs.Int64sb),
        }[t]
        return cs.Struct("v" / sub[0 if order == "<" else 1])
    fields = []
    for name, kind, count in LAYOUTS[t]:
        scalar = _CONSTRUCT_SCALARS[(kind, order)]
        fields.append(name / (scalar if count == 1 else cs.Array(count, scalar)))
    return cs.Struct(*fields)


_BITS_KIND = {"f2": "u2", "f4": "u4", "f8": "u8", "i2": "u2", "i4": "u4", "i8": "u8", "i1": "u1"}


def _swap_dtype(t: GGMLType, byte_order: str) -> np.dtype:
    """The layout of ``t`` with every field as an unsigned integer of the same size."""
    order = _order_char(byte_order)
    if not t.quantized:
        plain = t.numpy_dtype
        if plain is None:
            raise GGUFInternalError("plain is not None does not hold")
        return np.dtype(f"{order}u{plain.itemsize}")
    return np.dtype([(name, order + _BITS_KIND.get(kind, kind), (count,)) for name, kind, count in LAYOUTS[t]])


def as_uint8(raw: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    if isinstance(raw, np.ndarray):
        return (
            raw.reshape(-1).view(np.uint8)
            if raw.flags.c_contiguous
            else np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
        )
    return np.frombuffer(raw, dtype=np.uint8)


def byteswap(
    raw: np.ndarray | bytes | bytearray | memoryview,
    t: GGMLType | int,
    from_order: str,
    to_order: str,
) -> np.ndarray:
    """Convert a tensor's raw bytes of type ``t`` from one byte order to the other.

    Returns a new flat ``uint8`` array (a copy, also when the orders are equal). Multi-byte
    fields of every block are reversed; byte arrays are left alone.

    >>> raw = np.array([1.0, 2.0], dtype="<f4").view(np.uint8)
    >>> byteswap(raw, GGMLType.F32, "little", "big").view(">f4").tolist()
    [1.0, 2.0]
    >>> q = bytes.fromhex("003c") + bytes(16)
    >>> byteswap(q, GGMLType.Q4_0, "little", "big")[:2].tobytes().hex()
    '3c00'
    """
    t = checked_type(t)
    src = as_uint8(raw)
    src_dt = _swap_dtype(t, from_order)
    dst_dt = _swap_dtype(t, to_order)
    if src.size % src_dt.itemsize:
        raise ValueError(f"{t.name} data of {src.size} bytes is not a whole number of {src_dt.itemsize}-byte blocks")
    # astype between the two byte orders of the same integer-typed layout swaps each field
    # (integers, so that NaN payloads in float fields survive bit for bit).
    return src.view(src_dt).astype(dst_dt).view(np.uint8)
