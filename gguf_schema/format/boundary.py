"""The error boundary: the one place where the schema is run, and where anything construct
itself raises becomes one of our errors.

The schema's nodes raise :class:`~gguf_schema.errors.GGUFError` subclasses themselves, with
offset, path and value, for everything a malformed file can do. What can still come out of
construct (a struct used outside the schema's own entry points, a value a field cannot pack) is
translated here by its class and its ``path`` attribute, never by matching construct's English
messages. The target's own failures while building (a full disk, a closed file) surface as the
:class:`~gguf_schema.errors.GGUFIOError` of that ``OSError``.

>>> import io
>>> from gguf_schema.format.schema import gguf_schema
>>> s = gguf_schema("little", 3)
>>> parse(s, b"GGUF\\x03\\x00\\x00\\x00" + bytes(5))
Traceback (most recent call last):
...
gguf_schema.errors.GGUFTruncatedError: file ends early: 8 bytes needed, 5 left (at offset 8, in header -> tensor_count)
"""

from __future__ import annotations

from typing import IO, Any

from construct import Construct, ConstructError, Container

from ..errors import GGUFBuildError, GGUFError, GGUFFormatError, GGUFLimitError, os_error
from ..io.source import ByteReader
from .limits import Limits
from .nodes import where
from .schema import GGUFSchema

__all__ = ["Sink", "build", "parse"]


def parse(schema: GGUFSchema, data: Any, *, limits: Limits | None = None, lazy: bool = False) -> Container:
    """Parse a whole file from a buffer (bytes, mmap) or a :class:`ByteReader`: our errors only."""
    reader = data if isinstance(data, ByteReader) else ByteReader(data)
    try:
        return schema.parse_stream(reader, limits=limits, lazy=lazy)
    except GGUFError:
        raise
    except RecursionError:
        raise GGUFLimitError("arrays nested deeper than this interpreter can follow", offset=reader.last) from None
    except ConstructError as e:
        raise GGUFFormatError(
            f"cannot parse: {type(e).__name__}", offset=reader.last, path=where(getattr(e, "path", None))
        ) from None


class Sink:
    """A write-only stream wrapper that counts bytes (so the padding node knows its position) and
    remembers the target's own failure, which construct would otherwise wrap.

    A writer that moves bytes into the target behind its back (``copy_file_range``) says so with
    :meth:`moved`.
    """

    __slots__ = ("error", "pos", "stream")

    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.pos = 0
        self.error: OSError | None = None

    def write(self, b: Any) -> int:
        try:
            n = self.stream.write(b)
        except OSError as e:
            self.error = e
            raise
        size = b.nbytes if isinstance(b, memoryview) else len(b)
        self.pos += size
        return n if n is not None else size

    def tell(self) -> int:
        return self.pos

    def moved(self, n: int) -> None:
        """``n`` bytes were put at the end of the target without :meth:`write`."""
        self.pos += n
        inner = getattr(self.stream, "moved", None)
        if inner is not None:
            inner(n)

    def __getattr__(self, name: str) -> Any:  # fileno, flush, seek: the target's own
        return getattr(self.stream, name)


def build(node: Construct, obj: Any, stream: IO[bytes] | Sink, *, depth: int = 1) -> None:
    """Build ``obj`` with a struct of the schema (``gguf_file_t``, or one record such as
    ``gguf_metadata_kv_t``) into ``stream``: our errors only.

    ``depth`` is the deepest array nesting in ``obj``, named in the error if the interpreter cannot follow it.
    """
    out = stream if isinstance(stream, Sink) else Sink(stream)
    try:
        node.build_stream(obj, out)
    except OSError as e:
        raise os_error(e) from e
    except GGUFError:
        raise
    except RecursionError:
        raise GGUFBuildError(f"arrays nested {depth} deep are too deep to write", value=depth) from None
    except ConstructError as e:
        if out.error is not None:  # the target's own failure, wrapped by construct
            raise os_error(out.error) from out.error
        raise GGUFBuildError(
            f"cannot build: {type(e).__name__}: {str(e)[:300]}", path=where(getattr(e, "path", None))
        ) from None
