"""Resource limits: what a file may claim before the reader refuses it.

Every length and count in a GGUF file is first checked against the bytes that remain, so a
claim the file cannot back costs nothing. These limits bound the rest: claims the file *can*
back but that no real file makes, so that hostile input cannot cost time or memory out of
proportion to what any reader should have to spend. The defaults accept every real file we
know of (the largest real vocabularies have a few hundred thousand tokens; real keys and
tensor names are under 100 bytes; real files do not nest arrays at all) and are far above
them; each can be raised or lowered per call (``open(..., limits=Limits(...))``) and on the
command line (``--limit NAME=VALUE``).

>>> Limits().max_array_length == 2**30
True
>>> Limits(max_depth=4).max_depth
4
>>> Limits().replace(max_keys=10).max_keys
10
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["DEFAULT_LIMITS", "MAX_SAFE_DEPTH", "Limits"]


@dataclass(frozen=True)
class Limits:
    """Caps applied while parsing (each a count of bytes or items).

    Attributes:
        max_string_length: longest string value in bytes (ggml's cap: 1 GiB).
        max_key_length: longest metadata key in bytes.
        max_tensor_name_length: longest tensor name in bytes.
        max_array_length: most elements in one metadata array (ggml's cap: 2**30).
        max_depth: deepest nesting of arrays inside arrays (1 = arrays of scalars only).
        max_keys: most metadata key-value pairs in a file.
        max_tensors: most tensor infos in a file.
        max_dims: most dimensions of one tensor (ggml allows 4).
    """

    max_string_length: int = 2**30
    max_key_length: int = 2**16
    max_tensor_name_length: int = 2**16
    max_array_length: int = 2**30
    max_depth: int = 32
    max_keys: int = 2**24
    max_tensors: int = 2**24
    max_dims: int = 16

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"Limits.{f.name} must be an int, got {type(v).__name__} {v!r}")
            if v < 0:
                raise ValueError(f"Limits.{f.name} must not be negative, got {v}")

    def replace(self, **changes: int) -> Limits:
        """A copy with some limits changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def names(cls) -> list[str]:
        """The limit names, as ``--limit NAME=VALUE`` takes them."""
        return [f.name for f in dataclasses.fields(cls)]


DEFAULT_LIMITS = Limits()

#: Deepest array nesting the reader follows, whatever ``Limits.max_depth`` says: deeper files fail with a
#: GGUFLimitError instead of risking the C stack. The library never changes the interpreter's recursion
#: limit (process-wide state is the application's): the fast layer follows a level of nesting in one
#: Python frame, so the default limit of 1000 frames suffices for this depth; the plain schema (construct's
#: ``Array``, a dozen frames a level) follows about 40 levels under it, and past that the error boundary
#: turns the ``RecursionError`` into a GGUFLimitError (raise ``sys.setrecursionlimit`` to go deeper).
MAX_SAFE_DEPTH = 256
