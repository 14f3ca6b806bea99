"""Resource limits that bound what a hostile file can make the reader do.

Every length and count in a GGUF file is checked against the bytes that remain before
anything is allocated; these limits bound the rest. The defaults accept every real file we
know of and match the ggml C reader's caps (1 GiB strings, 2**30 array elements).

>>> Limits().max_array_length == 2**30
True
>>> Limits(max_depth=4).max_depth
4
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits", "DEFAULT_LIMITS"]


@dataclass(frozen=True)
class Limits:
    """Caps applied while parsing.

    Attributes:
        max_string_length: longest string (key, value or tensor name) in bytes.
        max_array_length: most elements in one metadata array.
        max_depth: deepest nesting of arrays inside arrays (1 = arrays of scalars only).
    """

    max_string_length: int = 2**30
    max_array_length: int = 2**30
    max_depth: int = 64


DEFAULT_LIMITS = Limits()
