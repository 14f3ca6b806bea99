"""The code tables of GGUF: metadata value types, ggml tensor types, ``general.file_type``.

This module owns every numeric code the format stores and the facts attached to each code
(block size and bytes per block for tensor types, numpy dtypes for value types). Nothing
here reads or writes bytes.

>>> GGMLType.Q4_K.block_size, GGMLType.Q4_K.type_size
(256, 144)
>>> GGMLType.Q4_K.row_nbytes(4096)
2304
>>> ValueType.UINT32.numpy_dtype("big").str
'>u4'
>>> GGMLType(4).removed
True

The codes print as their names (``str``, ``format``, f-strings); ``repr`` and ``int`` give the
number, and a numeric format spec formats the number:

>>> t = GGMLType.Q4_K
>>> print(t)
Q4_K
>>> f"{t:6}|{t:d}|{t:#x}", repr(t), int(t)
('Q4_K  |12|0xc', '<GGMLType.Q4_K: 12>', 12)
"""

from __future__ import annotations

import enum

import numpy as np

from .variant import Variant

__all__ = ["GGML_TYPE_COUNT", "FileType", "GGMLType", "ValueType", "tensor_nbytes", "type_name"]


_NUMERIC_FORMATS = frozenset("bcdoxXneEfFgG%")


class _Code(enum.IntEnum):
    """A code of the format: an ``int`` whose ``str()`` and ``format()`` give its name (numeric
    format specs such as ``d`` or ``x`` format the number)."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        if spec and spec[-1] in _NUMERIC_FORMATS:
            return int.__format__(int(self), spec)
        return format(self.name, spec)


class ValueType(_Code):
    """``gguf_metadata_value_type``: the type tag of a metadata value (spec order)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12

    @property
    def is_numeric(self) -> bool:
        """True for the fixed-size types that map onto a numpy dtype (BOOL included)."""
        return self in _VALUE_DTYPES

    @property
    def is_integer(self) -> bool:
        return self.is_numeric and self not in (ValueType.FLOAT32, ValueType.FLOAT64, ValueType.BOOL)

    @property
    def itemsize(self) -> int:
        """Bytes of one value; 0 for STRING and ARRAY, which have no fixed size."""
        code = _VALUE_DTYPES.get(self)
        return np.dtype(code).itemsize if code else 0

    def numpy_dtype(self, byte_order: str = "little") -> np.dtype:
        """The numpy dtype of this value type in the given byte order ("little" or "big")."""
        code = _VALUE_DTYPES.get(self)
        if code is None:
            raise TypeError(f"value type {self.name} has no numpy dtype")
        dtype: np.dtype = np.dtype(code).newbyteorder(Variant.endian_of(byte_order))
        return dtype

    @classmethod
    def from_dtype(cls, dtype: np.dtype) -> ValueType:
        """The value type stored for a numpy dtype (any byte order)."""
        kind = np.dtype(dtype).newbyteorder("=").str[1:]
        for vt, code in _VALUE_DTYPES.items():
            if np.dtype(code).str[1:] == kind:
                return vt
        raise TypeError(f"no GGUF value type for numpy dtype {np.dtype(dtype)}")


_VALUE_DTYPES: dict[ValueType, str] = {
    ValueType.UINT8: "u1",
    ValueType.INT8: "i1",
    ValueType.UINT16: "u2",
    ValueType.INT16: "i2",
    ValueType.UINT32: "u4",
    ValueType.INT32: "i4",
    ValueType.FLOAT32: "f4",
    ValueType.BOOL: "?",
    ValueType.UINT64: "u8",
    ValueType.INT64: "i8",
    ValueType.FLOAT64: "f8",
}


class GGMLType(_Code):
    """``ggml_type``: the storage type of a tensor, with its block layout.

    Removed ids are kept as members (``removed`` is true, block size 0) so that a file that
    names them can still be described; ggml rejects tensors of those types.
    """

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q4_2 = 4
    Q4_3 = 5
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    Q4_0_4_4 = 31
    Q4_0_4_8 = 32
    Q4_0_8_8 = 33
    TQ1_0 = 34
    TQ2_0 = 35
    IQ4_NL_4_4 = 36
    IQ4_NL_4_8 = 37
    IQ4_NL_8_8 = 38
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42

    @property
    def block_size(self) -> int:
        """Elements per block (1 for plain types, 0 for removed types)."""
        return _BLOCKS[self][0]

    @property
    def type_size(self) -> int:
        """Bytes per block (0 for removed types)."""
        return _BLOCKS[self][1]

    @property
    def removed(self) -> bool:
        return self.block_size == 0

    @property
    def quantized(self) -> bool:
        """True for block-quantized types (block size above 1)."""
        return self.block_size > 1

    @property
    def numpy_dtype(self) -> np.dtype | None:
        """Little-endian dtype of one element for plain types (BF16 as its uint16 bits); None for quantized."""
        code = _PLAIN_DTYPES.get(self)
        return np.dtype(code) if code else None

    @classmethod
    def of(cls, value: GGMLType | int | str) -> GGMLType:
        """The type ``value`` names: a :class:`GGMLType`, its id, or its name in any case.

        Raises ``ValueError`` for an unknown id or name, ``TypeError`` for anything else.

        >>> GGMLType.of("q4_k"), GGMLType.of(8), GGMLType.of(GGMLType.F16)
        (<GGMLType.Q4_K: 12>, <GGMLType.Q8_0: 8>, <GGMLType.F16: 1>)
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ValueError(
                    f"unknown ggml type name {value!r} (known: {', '.join(t.name for t in cls if not t.removed)})"
                ) from None
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            try:
                return cls(int(value))
            except ValueError:
                raise ValueError(f"unknown ggml type id {int(value)}") from None
        raise TypeError(f"a ggml type is a GGMLType, an int id or a name, got {type(value).__name__} {value!r}")

    def row_nbytes(self, n_elements: int) -> int:
        """Bytes taken by ``n_elements`` consecutive elements (a multiple of the block size)."""
        if self.removed:
            raise ValueError(f"tensor type {self.name} has been removed from ggml")
        if n_elements % self.block_size:
            raise ValueError(f"{n_elements} elements is not a multiple of the {self.name} block size {self.block_size}")
        return n_elements // self.block_size * self.type_size


GGML_TYPE_COUNT = 43

_BLOCKS: dict[GGMLType, tuple[int, int]] = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 18),
    GGMLType.Q4_1: (32, 20),
    GGMLType.Q4_2: (0, 0),
    GGMLType.Q4_3: (0, 0),
    GGMLType.Q5_0: (32, 22),
    GGMLType.Q5_1: (32, 24),
    GGMLType.Q8_0: (32, 34),
    GGMLType.Q8_1: (32, 36),
    GGMLType.Q2_K: (256, 84),
    GGMLType.Q3_K: (256, 110),
    GGMLType.Q4_K: (256, 144),
    GGMLType.Q5_K: (256, 176),
    GGMLType.Q6_K: (256, 210),
    GGMLType.Q8_K: (256, 292),
    GGMLType.IQ2_XXS: (256, 66),
    GGMLType.IQ2_XS: (256, 74),
    GGMLType.IQ3_XXS: (256, 98),
    GGMLType.IQ1_S: (256, 50),
    GGMLType.IQ4_NL: (32, 18),
    GGMLType.IQ3_S: (256, 110),
    GGMLType.IQ2_S: (256, 82),
    GGMLType.IQ4_XS: (256, 136),
    GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4),
    GGMLType.I64: (1, 8),
    GGMLType.F64: (1, 8),
    GGMLType.IQ1_M: (256, 56),
    GGMLType.BF16: (1, 2),
    GGMLType.Q4_0_4_4: (0, 0),
    GGMLType.Q4_0_4_8: (0, 0),
    GGMLType.Q4_0_8_8: (0, 0),
    GGMLType.TQ1_0: (256, 54),
    GGMLType.TQ2_0: (256, 66),
    GGMLType.IQ4_NL_4_4: (0, 0),
    GGMLType.IQ4_NL_4_8: (0, 0),
    GGMLType.IQ4_NL_8_8: (0, 0),
    GGMLType.MXFP4: (32, 17),
    GGMLType.NVFP4: (64, 36),
    GGMLType.Q1_0: (128, 18),
    GGMLType.Q2_0: (64, 18),
}

_PLAIN_DTYPES: dict[GGMLType, str] = {
    GGMLType.F32: "<f4",
    GGMLType.F16: "<f2",
    GGMLType.BF16: "<u2",
    GGMLType.F64: "<f8",
    GGMLType.I8: "i1",
    GGMLType.I16: "<i2",
    GGMLType.I32: "<i4",
    GGMLType.I64: "<i8",
}


class FileType(_Code):
    """``general.file_type``: the type of most of the tensors (llama.cpp's ``llama_ftype``).

    The spec lists 0-18; later ids are as llama.cpp writes them. 5, 6 and 33-35 are removed ids.
    """

    ALL_F32 = 0
    MOSTLY_F16 = 1
    MOSTLY_Q4_0 = 2
    MOSTLY_Q4_1 = 3
    MOSTLY_Q4_1_SOME_F16 = 4
    MOSTLY_Q4_2 = 5
    MOSTLY_Q4_3 = 6
    MOSTLY_Q8_0 = 7
    MOSTLY_Q5_0 = 8
    MOSTLY_Q5_1 = 9
    MOSTLY_Q2_K = 10
    MOSTLY_Q3_K_S = 11
    MOSTLY_Q3_K_M = 12
    MOSTLY_Q3_K_L = 13
    MOSTLY_Q4_K_S = 14
    MOSTLY_Q4_K_M = 15
    MOSTLY_Q5_K_S = 16
    MOSTLY_Q5_K_M = 17
    MOSTLY_Q6_K = 18
    MOSTLY_IQ2_XXS = 19
    MOSTLY_IQ2_XS = 20
    MOSTLY_Q2_K_S = 21
    MOSTLY_IQ3_XS = 22
    MOSTLY_IQ3_XXS = 23
    MOSTLY_IQ1_S = 24
    MOSTLY_IQ4_NL = 25
    MOSTLY_IQ3_S = 26
    MOSTLY_IQ3_M = 27
    MOSTLY_IQ2_S = 28
    MOSTLY_IQ2_M = 29
    MOSTLY_IQ4_XS = 30
    MOSTLY_IQ1_M = 31
    MOSTLY_BF16 = 32
    MOSTLY_Q4_0_4_4 = 33
    MOSTLY_Q4_0_4_8 = 34
    MOSTLY_Q4_0_8_8 = 35
    MOSTLY_TQ1_0 = 36
    MOSTLY_TQ2_0 = 37
    MOSTLY_MXFP4_MOE = 38
    MOSTLY_NVFP4 = 39
    MOSTLY_Q1_0 = 40
    MOSTLY_Q2_0 = 41
    GUESSED = 1024


def type_name(t: GGMLType | int) -> str:
    """The name of a ggml type id as printed everywhere: ``Q4_K``, or ``type 99`` for an id ggml does not know.

    >>> type_name(12), type_name(99)
    ('Q4_K', 'type 99')
    """
    try:
        return GGMLType(int(t)).name
    except ValueError:
        return f"type {int(t)}"


def tensor_nbytes(t: GGMLType, dims: tuple[int, ...] | list[int]) -> int:
    """Bytes of the data of a tensor of type ``t`` with ``dims`` (as stored: innermost first).

    A row is ``dims[0]`` elements (one element for ``n_dims == 0``) and must be whole blocks.
    Raises ``ValueError`` for a removed type or a row that is not whole blocks.

    >>> tensor_nbytes(GGMLType.Q4_K, (4096, 2)), tensor_nbytes(GGMLType.F32, ())
    (4608, 4)
    """
    row = dims[0] if len(dims) else 1
    rows = 1
    for d in dims[1:]:
        rows *= d
    return t.row_nbytes(row) * rows
