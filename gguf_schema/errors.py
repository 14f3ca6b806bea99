"""The one error hierarchy of gguf-schema.

Every failure caused by a file's content or by a value handed to the library surfaces as a
:class:`GGUFError`. Subclasses also inherit the builtin a Python user would reach for first,
so ``except EOFError`` or ``except ValueError`` keep working. Each error carries structured
facts (``offset``, ``path``, ``value``) and says them in its message.

>>> err = GGUFTruncatedError("string length 40 needs 40 bytes, 3 left", offset=24, path="metadata_kv[0].key")
>>> print(err)
string length 40 needs 40 bytes, 3 left (at offset 24, in metadata_kv[0].key)
>>> isinstance(err, EOFError), isinstance(err, GGUFError)
(True, True)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GGUFError",
    "GGUFFormatError",
    "GGUFTruncatedError",
    "GGUFLimitError",
    "GGUFBuildError",
    "GGUFRoundTripError",
]

_UNSET: Any = object()


class GGUFError(Exception):
    """Root of every error raised by gguf-schema.

    Attributes:
        reason: what is wrong, in words.
        offset: byte offset in the file where it went wrong (None when not about a file position).
        path: schema path of the offending item, e.g. ``metadata_kv[3] 'general.name' -> value``.
        value: the offending value, when there is one.
    """

    def __init__(self, reason: str, *, offset: int | None = None, path: str | None = None, value: Any = _UNSET):
        self.reason = reason
        self.offset = offset
        self.path = path
        self.has_value = value is not _UNSET
        self.value = value if self.has_value else None
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.offset is not None:
            where.append(f"at offset {self.offset}")
        if self.path:
            where.append(f"in {self.path}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def __reduce__(self):  # keep pickling (multiprocessing) working with keyword-only fields
        return (_rebuild, (type(self), self.reason, self.offset, self.path, self.value if self.has_value else _UNSET))


def _rebuild(cls, reason, offset, path, value):
    return cls(reason, offset=offset, path=path, value=value)


class GGUFFormatError(GGUFError, ValueError):
    """The bytes are not a valid GGUF file (bad magic, unknown type id, inconsistent sizes...)."""


class GGUFTruncatedError(GGUFFormatError, EOFError):
    """The file ends before a field the format requires (also an ``EOFError``)."""


class GGUFLimitError(GGUFFormatError):
    """A declared length, count or nesting depth exceeds a configured resource limit."""


class GGUFBuildError(GGUFError, ValueError):
    """A value cannot be written as GGUF (wrong type, out of range, inconsistent tensor)."""


class GGUFRoundTripError(GGUFError, ValueError):
    """A file cannot be rebuilt byte for byte (and the caller asked for exactness)."""
