"""The errors of :mod:`gguf_schema.compat`: ours, and also the builtin gguf-py raises in the same situation.

Code written for gguf-py catches what gguf-py raises: ``except IndexError`` around a reader of
truncated files, ``except KeyError`` for a repeated key. Under compat a bad file still raises one
of our :class:`~gguf_schema.errors.GGUFError` subclasses (offset, schema path, value), and the
class is also the builtin gguf-py's reader raises for that defect, so such code keeps catching:

==============================================  =====================================  ==========================
the defect                                      gguf-py 0.19 raises                    compat raises (also)
==============================================  =====================================  ==========================
the file ends inside the header, a key, a       ``IndexError`` (numpy's, reading        :class:`CompatTruncatedError`:
string, an array or a tensor info; a length or  past the map)                          ``IndexError``, ``EOFError``,
count larger than the file (or our limits)                                              ``ValueError``
a quantized tensor of no dimension              ``IndexError`` (a tuple index)         :class:`CompatShapeError`: ``IndexError``, ``ValueError``
arrays nested deeper than the limit             ``RecursionError`` (past ~990 levels)  :class:`CompatDepthError`: ``RecursionError``, ``ValueError``
a repeated key                                  ``KeyError``                           :class:`CompatDuplicateKeyError`: ``KeyError``, ``ValueError``
anything else (magic, version, type ids, a      ``ValueError``                         our class, a ``ValueError`` already
repeated tensor name, tensor data past the
end, the alignment)
==============================================  =====================================  ==========================

Each compat class is a subclass of our class for the defect (``CompatTruncatedError`` is a
:class:`~gguf_schema.errors.GGUFTruncatedError`), so ``except GGUFError`` and ``except
GGUFFormatError`` catch them too. :func:`as_gguf_py` makes the compat error from ours.

>>> from gguf_schema.errors import GGUFTruncatedError
>>> e = as_gguf_py(GGUFTruncatedError("string length 40 needs 40 bytes, 3 left", offset=24))
>>> type(e).__name__, isinstance(e, IndexError), isinstance(e, GGUFTruncatedError), str(e)
('CompatTruncatedError', True, True, 'string length 40 needs 40 bytes, 3 left (at offset 24)')
"""

from __future__ import annotations

from ..errors import GGUFError, GGUFFormatError, GGUFLimitError, GGUFTruncatedError

__all__ = [
    "CompatDepthError",
    "CompatDuplicateKeyError",
    "CompatLengthError",
    "CompatShapeError",
    "CompatTruncatedError",
    "as_gguf_py",
]


class CompatTruncatedError(GGUFTruncatedError, IndexError):
    """The file ends before what its header says (gguf-py: ``IndexError``)."""


class CompatLengthError(GGUFLimitError, IndexError):
    """A length or count beyond our limits (gguf-py reads on past the end of the file: ``IndexError``)."""


class CompatDepthError(GGUFLimitError, RecursionError):
    """Arrays nested deeper than the limit (gguf-py recurses once per level: ``RecursionError`` past ~990)."""


class CompatShapeError(GGUFFormatError, IndexError):
    """A tensor's dimensions gguf-py cannot index (a quantized tensor of no dimension: ``IndexError``)."""


class CompatDuplicateKeyError(GGUFFormatError, KeyError):
    """A key that the file repeats (gguf-py: ``KeyError``)."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return self._message()


def _is_depth(e: GGUFError) -> bool:
    return e.reason.startswith("arrays nested")


def as_gguf_py(e: GGUFError) -> GGUFError:
    """``e`` as the compat class of its defect (the table above): the same reason, offset, path and value.

    An error that is not about a file's content, or whose class gguf-py shares already (a
    ``ValueError``), comes back unchanged.
    """
    if isinstance(e, (CompatTruncatedError, CompatLengthError, CompatDepthError, CompatShapeError)):
        return e
    if isinstance(e, CompatDuplicateKeyError):
        return e
    cls: type[GGUFError]
    if isinstance(e, GGUFTruncatedError):
        cls = CompatTruncatedError
    elif isinstance(e, GGUFLimitError):
        cls = CompatDepthError if _is_depth(e) else CompatLengthError
    else:
        return e
    out = cls(e.reason, offset=e.offset, path=e.path, **({"value": e.value} if e.has_value else {}))
    out.__cause__, out.__traceback__ = e.__cause__, e.__traceback__
    return out
