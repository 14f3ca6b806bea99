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
import sys
import threading
from dataclasses import dataclass

__all__ = ["DEFAULT_LIMITS", "MAX_SAFE_DEPTH", "Limits", "ensure_recursion_headroom"]


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

#: Deepest array nesting construct is given Python frames for, whatever ``Limits.max_depth`` says:
#: deeper files fail with a GGUFLimitError instead of risking the C stack.
MAX_SAFE_DEPTH = 256
_FRAMES_PER_LEVEL = 16  # measured: 12 Python frames per level of nested arrays
_HEADROOM_LOCK = threading.Lock()


def ensure_recursion_headroom(depth: int) -> None:
    """Make sure the interpreter lets the parser recurse through ``depth`` nested arrays.

    The recursion limit is only ever raised (under a lock), never lowered or restored: two
    threads parsing at once cannot undo each other's headroom. With the default
    ``max_depth`` the default limit of 1000 frames suffices and nothing changes.
    """
    need = 400 + _FRAMES_PER_LEVEL * min(depth, MAX_SAFE_DEPTH)
    if need > sys.getrecursionlimit():
        with _HEADROOM_LOCK:
            if need > sys.getrecursionlimit():
                sys.setrecursionlimit(need)
