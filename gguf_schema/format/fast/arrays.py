"""The fast array body: a metadata array's items (``gguf_metadata_value_t array[len]``) in one step.

:class:`ArrayItems` replaces the plain schema's array body (construct's ``Array`` of the value
union, :class:`~gguf_schema.format.nodes.ValueArray`): numbers and bools with one
``numpy.frombuffer``, strings with one walk (:mod:`~gguf_schema.format.fast.walk`), arrays of
arrays in one loop. It reads what the plain body reads, checks what it checks and raises the same
errors; the tests compare both on every real and generated file.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
from construct import Construct, evaluate

from ...errors import GGUFBuildError, GGUFInternalError, GGUFLimitError
from ...io.source import ByteReader
from ..limits import MAX_SAFE_DEPTH
from ..nodes import _check_count, limits_of, min_value_size, nested, numeric_bytes, where
from ..types import ValueType
from ..values import GGUFArray, LazyStrings
from ..variant import Variant
from .walk import StringWalk

__all__ = ["ArrayItems", "fast_array_body", "parse_buffered"]

_TYPES = tuple(ValueType)  # by value: ValueType(i) is _TYPES[i]
_STRING, _ARRAY = int(ValueType.STRING), int(ValueType.ARRAY)


def _reader(stream: Any, context: Any) -> tuple[ByteReader, int]:
    """A :class:`ByteReader` positioned where ``stream`` is, and the offset of its first byte.

    The schema's fast nodes slice a buffer; a stream that is not one (construct's own
    ``parse_file``, a file object) is mapped or read once per parse, then reused by every array.
    """
    if isinstance(stream, ByteReader):
        return stream, 0
    params = context._params
    cached = params.get("_buffer")
    if cached is None or cached[0] is not stream:
        start = stream.tell()
        data: Any
        try:
            import mmap

            data = memoryview(mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ))[start:]
        except (AttributeError, OSError, ValueError):
            getbuffer = getattr(stream, "getbuffer", None)
            data = getbuffer()[start:] if getbuffer is not None else stream.read()
            stream.seek(start)
        cached = params["_buffer"] = (stream, start, data)
    _, start, data = cached
    return ByteReader(data, stream.tell() - start), start


def parse_buffered(stream: Any, context: Any, parse: Callable[[ByteReader], Any]) -> Any:
    """``parse`` run on a :class:`ByteReader` over ``stream`` (see :func:`_reader`); ``stream`` is left
    after what ``parse`` consumed, as construct expects of a node."""
    r, base = _reader(stream, context)
    try:
        return parse(r)
    finally:
        if r is not stream:
            stream.seek(base + r.pos)


class ArrayItems(StringWalk, Construct):
    """The body of a metadata array (``array[len]``), decoded in one step: the fast node.

    Numbers and bools: one ``numpy.frombuffer`` (a read-only array in native byte order).
    Strings: one tight loop over the buffer; with ``lazy=True`` a length-only scan that leaves
    them undecoded (:class:`~gguf_schema.format.values.LazyStrings`). Arrays of arrays recurse
    into ``nested`` (the schema's ``gguf_array_t``). Every count is checked against the bytes
    left and the limits before anything is read.
    """

    def __init__(self, item_type: Any, count: Any, variant: Variant, nested: Construct):
        super().__init__()
        self.item_type = item_type
        self.count = count
        self.byte_order = byte_order = variant.byte_order
        self.big = variant.big
        self.length = variant.struct("N")
        self.nested = nested
        self.head = variant.struct("IN")  # an inner array's type, len
        # by value type: (dtype in the file's order, native dtype, itemsize, empty read-only arrays eager and lazy)
        self.numeric: dict[int, tuple[np.dtype, np.dtype, int, np.ndarray, np.ndarray]] = {}
        for vt in ValueType:
            if vt.is_numeric:
                dtype = vt.numpy_dtype(byte_order)
                native = dtype.newbyteorder("=")
                eager, lazy = np.empty(0, native), np.empty(0, dtype)
                eager.flags.writeable = lazy.flags.writeable = False
                self.numeric[int(vt)] = (dtype, native, dtype.itemsize, eager, lazy)

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        return parse_buffered(stream, context, lambda r: self._parse_body(r, context, path))

    def _parse_body(self, r: ByteReader, context: Any, path: str) -> Any:
        return self.parse_items(r, evaluate(self.item_type, context), evaluate(self.count, context), context, path)

    def parse_items(self, r: ByteReader, vt: ValueType, n: int, context: Any, path: str) -> Any:
        """The ``n`` items of type ``vt`` at ``r.pos``; ``r`` ends after them."""
        limits = limits_of(context)
        _check_count(r, n, min_value_size(vt, self.length.size), path)  # a count the file cannot hold: truncated
        if n > limits.max_array_length:
            raise GGUFLimitError(
                f"array of {n:,} elements exceeds max_array_length = {limits.max_array_length:,}",
                offset=r.pos,
                path=where(path),
                value=n,
            )
        if vt == ValueType.STRING:
            if context._params.get("lazy"):
                return self._skip_strings(r, n, limits, path)
            return self._parse_strings(r, n, limits, path)
        if vt == ValueType.ARRAY:
            with nested(context, limits, r.pos, path):
                return self._parse_arrays(r, n, context, path)
        dtype = vt.numpy_dtype(self.byte_order)
        arr = np.frombuffer(r.data, dtype, n, r.pos)
        if not context._params.get("lazy"):  # lazily: a read-only view of the map (in the file's byte order)
            arr = arr.astype(dtype.newbyteorder("=")) if not dtype.isnative else arr.copy()
        arr.flags.writeable = False
        r.pos += n * dtype.itemsize
        return arr

    def _parse_arrays(self, r: ByteReader, n: int, context: Any, path: str) -> list[GGUFArray]:
        """``n`` arrays, each ``{type, len, items}``, read in one loop (no construct frames per element).

        The loop reads each inner header and, when the inner array passes the checks
        :meth:`parse_items` makes (its count fits the bytes left and ``max_array_length``), reads
        its body in place: numbers with one ``numpy.frombuffer`` (an empty one is a shared read-only
        empty array), strings through the string walk, arrays of arrays by this loop one level
        deeper (after the depth check). Anything else (a count that fails a check, an array of
        arrays past the depth limit) goes through :meth:`parse_items`, which raises the exact error;
        a header that is cut or names no value type is re-read through the declared struct
        (``nested``), which names it.
        """
        head, hsize = self.head.unpack_from, self.head.size
        numeric, lsize, types = self.numeric, self.length.size, _TYPES
        params = context._params
        lazy = bool(params.get("lazy"))
        limits = limits_of(context)
        max_len = limits.max_array_length
        depth = params.get("_depth", 1)  # this array's (``nested`` set it); an inner array of arrays is one deeper
        deeper = depth + 1 <= min(limits.max_depth, MAX_SAFE_DEPTH)
        min_array = 4 + lsize
        new, frombuffer = object.__new__, np.frombuffer
        data, size = r.data, r.size
        pos = r.pos
        out: list[GGUFArray] = [None] * n  # type: ignore[list-item]  # n arrays fit the bytes left (checked)
        for i in range(n):
            start = pos
            try:
                vt, count = head(data, start)
                t = types[vt]
            except (struct.error, IndexError):  # past the end, or not a value type: the struct says which
                r.pos = start
                self.nested._parsereport(r, context, f"{path}[{i}]")
                raise GGUFInternalError(
                    "an array header the declared struct reads but the fast loop does not",
                    offset=start,
                    path=where(f"{path}[{i}]"),
                ) from None
            pos = start + hsize
            kind = numeric.get(vt)
            items: Any
            if kind is not None and count <= max_len and count * kind[2] <= size - pos:
                if count == 0:
                    items = kind[4] if lazy else kind[3]
                else:
                    items = frombuffer(data, kind[0], count, pos)
                    if not lazy:
                        items = items.astype(kind[1])  # a copy in native byte order
                    items.flags.writeable = False
                    pos += count * kind[2]
            elif vt == _STRING and count <= max_len and count * lsize <= size - pos:
                r.pos = pos
                inner = f"{path}[{i}]"
                items = (
                    self._skip_strings(r, count, limits, inner)
                    if lazy
                    else self._parse_strings(r, count, limits, inner)
                )
                pos = r.pos
            elif vt == _ARRAY and deeper and count <= max_len and count * min_array <= size - pos:
                if count == 0:
                    items = []
                else:  # what ``nested`` does around parse_items, without its frames
                    r.pos = pos
                    params["_depth"] = depth + 1
                    try:
                        items = self._parse_arrays(r, count, context, f"{path}[{i}]")
                    finally:
                        params["_depth"] = depth
                    pos = r.pos
            else:
                r.pos = pos
                items = self.parse_items(r, t, count, context, f"{path}[{i}]")
                pos = r.pos
            a = new(GGUFArray)  # its __init__ converts the type through the enum again: half the cost of an empty array
            a.type, a.items = t, items
            out[i] = a
        r.pos = pos
        return out

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        return self.build_items(evaluate(self.item_type, context), obj, stream, context, path)

    def build_items(self, vt: ValueType, obj: Any, stream: Any, context: Any, path: str) -> Any:
        """Write the items ``obj`` of an array of ``vt``. Arrays of arrays are written here, one Python
        frame per level of nesting (construct's declared ``gguf_array_t`` takes five), so that writing
        the deepest nesting a reader follows needs no more than the interpreter's default recursion limit;
        an inner array this cannot write as plainly (not a GGUFArray, a count the length field cannot hold)
        goes through the declared struct, which raises the exact error."""
        if vt == ValueType.STRING:
            if isinstance(obj, LazyStrings) and obj.length_format == self.length.format:
                stream.write(obj.raw)  # unchanged strings go back exactly as they were read
                return obj
            pack = self.length.pack
            items = obj if isinstance(obj, (list, tuple)) else list(obj)
            for start in range(0, len(items), _STRING_BATCH):  # memory: one batch, not one object per string
                parts = []
                for i, s in enumerate(items[start : start + _STRING_BATCH], start):
                    try:
                        b = s.encode("utf-8", "surrogateescape")
                    except (AttributeError, UnicodeEncodeError):
                        raise GGUFBuildError(
                            "a STRING array item must be a UTF-8 encodable str", path=where(f"{path}[{i}]"), value=s
                        ) from None
                    parts.append(pack(len(b)))
                    parts.append(b)
                stream.write(b"".join(parts))
        elif vt == ValueType.ARRAY:
            head = self.head.pack
            for i, a in enumerate(obj):
                inner = f"{path}[{i}]"
                try:
                    if type(a) is not GGUFArray or not isinstance(a.type, ValueType):
                        raise struct.error
                    header = head(a.type, len(a.items))
                except struct.error:
                    self.nested._build(a, stream, context, inner)
                    continue
                stream.write(header)
                self.build_items(a.type, a.items, stream, context, f"{inner} -> array")
        else:
            stream.write(numeric_bytes(obj, vt, self.byte_order, path))
        return obj


#: strings of an array encoded and written at a time: building a vocabulary of millions costs one
#: batch of per-string objects, never one per string of the whole array
_STRING_BATCH = 1 << 16


def fast_array_body(*, item_type: Any, count: Any, variant: Variant, value: Any, array: Construct) -> Construct:
    """The fast array body for the schema's ``array_body`` hook: an :class:`ArrayItems`."""
    return ArrayItems(item_type, count, variant, array)
