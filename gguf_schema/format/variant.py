"""The variant of a GGUF file: its byte order and version, and everything the layout derives from them.

A file is little or big endian (``sniff`` tells which from its first 8 bytes) and of version 1
(counts, lengths and dimensions stored as ``uint32_t``) or 2/3 (``uint64_t``). Everything else
about how its bytes are laid out follows from those two facts; :class:`Variant` computes it once
(like tifffile's ``TiffFormat``) and every module asks it, instead of deriving
``"<" if byte_order == "little"`` or ``4 if version == 1 else 8`` again.

>>> v = Variant.of("big", 1)
>>> v.endian, v.size_t, v.size_code, v.length_format
('>', 4, 'I', '>I')
>>> Variant.of("little", 3).dtype("f4")
dtype('float32')
>>> Variant.of("big", 3) is Variant.of("big", 3)
True
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["Endian", "Variant"]

Endian = Literal["<", ">"]


@dataclass(frozen=True)
class Variant:
    """One (byte order, version) and what the layout derives from it.

    Attributes:
        byte_order: ``"little"`` or ``"big"``.
        version: 1, 2 or 3.
        endian: the ``struct``/numpy byte-order character, ``"<"`` or ``">"``.
        big: whether the file is big-endian.
        size_t: bytes of a stored count, length or dimension (4 in version 1, else 8).
        size_code: the ``struct`` code of that integer (``"I"`` or ``"Q"``).
        length_format: the ``struct`` format of one stored length (``endian + size_code``).
    """

    byte_order: str
    version: int
    endian: Endian
    big: bool
    size_t: int
    size_code: str
    length_format: str

    @staticmethod
    @functools.cache
    def of(byte_order: str, version: int) -> Variant:
        """The variant of ``byte_order`` ("little" or "big") and ``version`` (1, 2 or 3); one object per pair."""
        if byte_order not in ("little", "big"):
            raise ValueError(f"byte order must be 'little' or 'big', got {byte_order!r}")
        if version not in (1, 2, 3):
            raise ValueError(f"unsupported GGUF version {version} (1, 2 and 3 exist)")
        endian = Variant.endian_of(byte_order)
        size_t, code = (4, "I") if version == 1 else (8, "Q")
        return Variant(byte_order, version, endian, byte_order == "big", size_t, code, endian + code)

    @staticmethod
    def endian_of(byte_order: str) -> Endian:
        """The byte-order character of ``byte_order`` ("little" or "big"), for a caller without a version."""
        return ">" if byte_order == "big" else "<"

    def dtype(self, code: str) -> np.dtype:
        """The numpy dtype ``code`` (``"f4"``, ``"u8"`` ...) in this byte order."""
        return np.dtype(self.endian + code)

    def struct(self, fmt: str) -> struct.Struct:
        """A ``struct.Struct`` of ``fmt`` in this byte order; ``N`` stands for a stored count (``size_t``)."""
        return struct.Struct(self.endian + fmt.replace("N", self.size_code))
