"""Our ``construct`` nodes: the pieces of the spec's schema that construct's own classes do not provide.

:mod:`gguf_schema.format.schema` declares the spec's structs with these nodes; this module
owns how each one reads and writes bytes, checks what a file claims, and reports errors:

* every read is bounded: a length or count is checked against the bytes left (and against
  :class:`~gguf_schema.format.limits.Limits`) before anything is read or allocated;
* every failure is raised here as a :class:`~gguf_schema.errors.GGUFError` naming the offset,
  the schema path (construct passes it to each node) and the value, so nothing upstream has to
  interpret construct's own messages.

These are the plain nodes: :class:`ValueArray` reads an array's items one element at a time, and
:class:`IndexedArray` reads the records one declared struct at a time. The faster nodes that
replace them are a layer of their own, :mod:`gguf_schema.format.fast`.

>>> from construct import Struct
>>> s = Struct("n" / Number("<L"), "s" / StringBytes(this.n, 4))
>>> s.parse(b"\\x02\\x00\\x00\\x00hi").s
b'hi'
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from construct import Adapter, Array, Bytes, Construct, Container, FormatField, ListContainer, evaluate, this

from ..errors import SHOWN, GGUFBuildError, GGUFError, GGUFFormatError, GGUFLimitError, GGUFTruncatedError
from ..io.source import ByteReader
from .limits import DEFAULT_LIMITS, MAX_SAFE_DEPTH, Limits
from .types import ValueType
from .values import BoolByte, GGUFArray
from .variant import Variant

__all__ = [
    "AlignmentPadding",
    "ArrayValue",
    "BoolValue",
    "DataSection",
    "FloatValue",
    "IndexedArray",
    "Number",
    "StringBytes",
    "StringValue",
    "TensorData",
    "ValueArray",
    "ValueTypeField",
    "limits_of",
    "min_value_size",
    "numbers",
    "this",
    "where",
]


def where(path: str | None) -> str | None:
    """A construct path as our errors show it: without construct's ``(parsing) -> `` prefix."""
    if not path:
        return None
    for prefix in ("(parsing) -> ", "(building) -> ", "(sizing) -> ", "(parsing)", "(building)", "(sizing)"):
        if path.startswith(prefix):
            path = path[len(prefix) :]
            break
    return path or None


def limits_of(context: Any) -> Limits:
    """The :class:`Limits` of the parse in progress (``parse_stream(..., limits=...)``)."""
    params = context.get("_params") if hasattr(context, "get") else None
    return (params.get("limits") if params else None) or DEFAULT_LIMITS


def min_value_size(vt: ValueType, size_t: int) -> int:
    """The fewest bytes a value of type ``vt`` can take: its size, a string's length, an array's type and count."""
    if vt == ValueType.STRING:
        return size_t
    if vt == ValueType.ARRAY:
        return 4 + size_t
    return vt.itemsize


def _remaining(stream: Any) -> int | None:
    if isinstance(stream, ByteReader):
        return stream.remaining
    try:
        here = stream.tell()
        end = stream.seek(0, 2)
        stream.seek(here)
        return int(end - here)
    except (AttributeError, OSError, ValueError):
        return None


def _check_count(
    stream: Any,
    count: int,
    min_size: int,
    path: str | None,
    limit: int | None = None,
    what: str = "count",
    limit_name: str = "the limit",
) -> None:
    """A count the file cannot hold (too few bytes left) or a limit forbids fails before any loop."""
    if count < 0:
        raise GGUFFormatError(f"negative {what} {count}", offset=stream.tell(), path=where(path), value=count)
    left = _remaining(stream)
    if left is not None and count * min_size > left:
        raise GGUFTruncatedError(
            f"{what} {count:,} needs at least {count * min_size:,} bytes, {left:,} left",
            offset=stream.tell(),
            path=where(path),
            value=count,
        )
    if limit is not None and count > limit:
        raise GGUFLimitError(
            f"{what} {count:,} exceeds {limit_name} = {limit:,}", offset=stream.tell(), path=where(path), value=count
        )


# --------------------------------------------------------------------------- numbers


class Number(FormatField):
    """An integer field (``uint32_t``, ``uint64_t`` ...): a truncated file is our error, not construct's."""

    def __init__(self, fmt: str):
        super().__init__(fmt[0], fmt[1])
        self.unpack = struct.Struct(fmt).unpack

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        n = self.length
        data = stream.read(n)
        if len(data) != n:
            raise GGUFTruncatedError(
                f"file ends early: {n} bytes needed, {len(data)} left",
                offset=stream.tell() - len(data),
                path=where(path),
            )
        return self.unpack(data)[0]


_FORMATS = dict(u8="B", i8="b", u16="H", i16="h", u32="L", i32="l", u64="Q", i64="q")


@dataclass(frozen=True)
class _Numbers:
    u8: Number
    i8: Number
    u16: Number
    i16: Number
    u32: Number
    i32: Number
    u64: Number
    i64: Number


def numbers(variant: Variant) -> _Numbers:
    """The integer fields of one byte order: ``numbers(Variant.of("big", 3)).u32`` is a big-endian ``uint32_t``."""
    return _Numbers(**{name: Number(variant.endian + code) for name, code in _FORMATS.items()})


# --------------------------------------------------------------------------- arrays of records


class IndexedArray(Array):
    """``Array`` whose error paths name the element index, checked against the bytes left.

    ``min_size`` is the fewest bytes one element can take: a count that cannot fit in what
    remains fails at once instead of after a long loop. ``limit`` names the
    :class:`Limits` field that caps the count. Records that begin with a name (metadata
    pairs, tensor infos) add that name, shortened, to the error path.
    """

    def __init__(
        self,
        count: Any,
        subcon: Construct,
        min_size: Any,
        *,
        limit: str | None = None,
        named: bool = False,
        what: str = "count",
    ):
        super().__init__(count, subcon)
        self.min_size = min_size
        self.limit = limit
        self.named = named
        self.what = what

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        count = evaluate(self.count, context)
        cap = getattr(limits_of(context), self.limit) if self.limit else None
        _check_count(stream, count, evaluate(self.min_size, context), path, cap, self.what, self.limit or "the limit")
        obj = ListContainer()
        obj.offsets = offsets = []  # where each element starts: for error messages and validation
        for i in range(count):
            context._index = i
            start = stream.tell()
            offsets.append(start)
            try:
                obj.append(self.subcon._parsereport(stream, context, f"{path}[{i}]"))
            except GGUFError as e:
                raise self._named(e, stream, start, f"{path}[{i}]", context) from None
        return obj

    def _named(self, err: GGUFError, stream: Any, start: int, path: str, context: Any) -> GGUFError:
        """The error with the record's name added after its index (once, by the innermost record)."""
        here = where(path) or ""
        if not self.named or not err.path or not err.path.startswith(here) or "'" in err.path[len(here) :]:
            return err
        name = _peek_name(stream, start, context)
        return err if name is None else err.replace(path=err.path.replace(here, f"{here} {name}", 1))

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        count = evaluate(self.count, context)
        if count != len(obj):
            raise GGUFBuildError(f"count {count} but {len(obj)} elements", path=where(path), value=count)
        for i, e in enumerate(obj):
            context._index = i
            self.subcon._build(e, stream, context, f"{path}[{i}]")
        return obj


def _peek_name(stream: Any, start: int, context: Any) -> str | None:
    """The (shortened) name a record at ``start`` begins with, reading at most a few dozen bytes of it."""
    here = stream.tell()
    try:
        stream.seek(start)
        size_t = context._params.get("size_t", 8)
        head = stream.read(size_t)
        if len(head) != size_t:
            return None
        n = int.from_bytes(head, context._params.get("byte_order", "little"))
        text = repr(stream.read(min(n, SHOWN)).decode("utf-8", "surrogateescape"))
        return text if n <= SHOWN else f"{text[:-1]}...{text[-1]} ({n:,} bytes)"
    except (OSError, ValueError):
        return None
    finally:
        stream.seek(here)


# --------------------------------------------------------------------------- strings and scalars


class StringBytes(Bytes):
    """``char string[len]``: checked against a limit and the bytes left before reading.

    ``limit`` names the :class:`Limits` field that caps this kind of string (keys, tensor
    names and values have their own).
    """

    def __init__(self, length: Any, length_size: int, limit: str = "max_string_length"):
        super().__init__(length)
        self.length_size = length_size
        self.limit = limit

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        n = evaluate(self.length, context)
        at = stream.tell() - self.length_size
        cap = getattr(limits_of(context), self.limit)
        if n > cap:
            raise GGUFLimitError(
                f"string of {n:,} bytes exceeds {self.limit} = {cap:,}", offset=at, path=where(path), value=n
            )
        left = _remaining(stream)
        if left is not None and n > left:
            raise GGUFTruncatedError(
                f"string length {n:,} needs {n:,} bytes, {left:,} left", offset=at, path=where(path), value=n
            )
        return stream.read(n)


class StringValue(Adapter):
    """``gguf_string_t`` <-> ``str``: UTF-8, with undecodable bytes kept as surrogate escapes."""

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        return obj.string.decode("utf-8", "surrogateescape")

    def _encode(self, obj: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, str):
            raise GGUFBuildError(f"a string field needs a str, got {type(obj).__name__}", path=where(path), value=obj)
        try:
            return Container(string=obj.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError as e:
            raise GGUFBuildError(
                f"string cannot be encoded as UTF-8: {e.reason}", path=where(path), value=obj
            ) from None


class BoolValue(Adapter):
    """``bool``: one byte, 0 is false and 1 is true; another byte is kept as :class:`BoolByte`."""

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        return obj == 1 if obj <= 1 else BoolByte(obj)

    def _encode(self, obj: Any, context: Any, path: str) -> Any:
        return int(obj)


class ValueTypeField(Adapter):
    """``gguf_metadata_value_type``: a uint32 that must name one of the 13 value types."""

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        try:
            return ValueType(obj)
        except ValueError:
            raise GGUFFormatError(
                f"unknown metadata value type {obj} (valid: 0..12)", path=where(path), value=obj
            ) from None

    def _encode(self, obj: Any, context: Any, path: str) -> Any:
        try:
            return int(ValueType(obj))
        except (ValueError, TypeError):
            raise GGUFBuildError(f"unknown metadata value type {obj!r}", path=where(path), value=obj) from None


class FloatValue(Construct):
    """A float32/float64 scalar as a numpy scalar, so every bit (NaN payloads too) survives."""

    def __init__(self, dtype: np.dtype):
        super().__init__()
        self.dtype = np.dtype(dtype)

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        size = self.dtype.itemsize
        data = stream.read(size)
        if len(data) != size:
            raise GGUFTruncatedError(
                f"{size}-byte float needs {size} bytes, {len(data)} left",
                offset=stream.tell() - len(data),
                path=where(path),
            )
        return np.frombuffer(data, self.dtype)[0]

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        try:
            stream.write(np.asarray(obj, dtype=self.dtype).tobytes())
        except (TypeError, ValueError) as e:
            raise GGUFBuildError(f"not a float: {e}", path=where(path), value=obj) from None
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        return self.dtype.itemsize


# --------------------------------------------------------------------------- metadata arrays


class ArrayValue(Adapter):
    """The ``array`` member of ``gguf_metadata_value_t`` <-> :class:`GGUFArray`."""

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        return GGUFArray(obj.type, obj.array)

    def _encode(self, obj: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, GGUFArray):
            raise GGUFBuildError(
                f"an ARRAY value must be a GGUFArray, got {type(obj).__name__}", path=where(path), value=obj
            )
        return Container(type=obj.type, array=obj.items)


@contextlib.contextmanager
def nested(context: Any, limits: Limits, offset: int, path: str) -> Iterator[None]:
    """One level deeper into arrays of arrays, refused past ``limits.max_depth`` (and past
    :data:`~gguf_schema.format.limits.MAX_SAFE_DEPTH`, whatever the limit says: the parser recurses)."""
    params = context._params
    depth = params.get("_depth", 1) + 1
    cap = min(limits.max_depth, MAX_SAFE_DEPTH)
    if depth > cap:
        name = "max_depth" if cap == limits.max_depth else "the deepest nesting this reader follows"
        raise GGUFLimitError(
            f"arrays nested {depth} deep exceed {name} = {cap}", offset=offset, path=where(path), value=depth
        )
    params["_depth"] = depth
    try:
        yield
    finally:
        params["_depth"] = depth - 1


def numeric_bytes(items: Any, vt: ValueType, byte_order: str, path: str | None) -> bytes:
    """The stored bytes of a numeric array body, after checking the items' dtype against ``vt``."""
    dtype = vt.numpy_dtype(byte_order)
    arr = np.asarray(items)
    if arr.dtype.kind not in "biuf" or arr.ndim != 1:
        raise GGUFBuildError(
            f"items of a {vt.name} array must be a 1-d numeric array", path=where(path), value=arr.dtype
        )
    if arr.dtype.newbyteorder("=") != dtype.newbyteorder("="):
        raise GGUFBuildError(
            f"items of a {vt.name} array must have dtype {dtype.newbyteorder('=')}, got {arr.dtype}",
            path=where(path),
            value=arr.dtype,
        )
    return arr.astype(dtype, copy=False).tobytes()


class ValueItems(IndexedArray):
    """construct's ``Array`` of the value union, under the count checks and limits of every array."""

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        n, limits = evaluate(self.count, context), limits_of(context)
        _check_count(stream, n, evaluate(self.min_size, context), path)
        if n > limits.max_array_length:
            raise GGUFLimitError(
                f"array of {n} elements exceeds the limit of {limits.max_array_length}",
                offset=stream.tell(),
                path=where(path),
                value=n,
            )
        if context.type != ValueType.ARRAY:
            return super()._parse(stream, context, path)
        with nested(context, limits, stream.tell(), path):
            return super()._parse(stream, context, path)


class ValueArray(Adapter):
    """``gguf_metadata_value_t array[len]``: construct's ``Array`` of the value union (:class:`ValueItems`),
    its items handed out as every array's items are (read-only numpy arrays for numbers, lists else)."""

    def __init__(self, count: Any, value: Construct, size_t: int):
        super().__init__(ValueItems(count, value, min_size=lambda ctx: min_value_size(ctx.type, size_t)))

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        vt = context.type
        if vt.is_numeric:
            if vt == ValueType.BOOL:
                arr = np.array([int(x) for x in obj], dtype=np.uint8).view(np.bool_)
            else:
                arr = np.array(list(obj), dtype=vt.numpy_dtype("little").newbyteorder("="))
            arr.flags.writeable = False
            return arr
        return list(obj)

    def _encode(self, obj: Any, context: Any, path: str) -> Any:
        vt = context.type
        if vt == ValueType.BOOL:
            return np.asarray(obj).view(np.uint8).tolist()
        if vt.is_numeric:
            numeric_bytes(obj, vt, "little", path)  # the type rules of every array body
            return list(np.asarray(obj)) if vt in (ValueType.FLOAT32, ValueType.FLOAT64) else np.asarray(obj).tolist()
        return list(obj)


# --------------------------------------------------------------------------- padding and data


def align_offset(offset: int, alignment: int) -> int:
    """The spec's ``align_offset``, ggml's ``GGML_PAD(x, n)``: ``offset`` rounded up to a multiple of ``alignment``.

    The one rounding of the library (the layout, ggml's view of it, the estimates of buffers). In exact
    integers: where ggml computes in ``size_t``, the caller wraps the result (``& SIZE_MAX``; see
    :func:`gguf_schema.check.ggml_view.ggml_pad`).

    >>> align_offset(33, 32), align_offset(64, 32), align_offset(0, 256)
    (64, 64, 0)
    """
    return offset + (alignment - (offset % alignment)) % alignment


class AlignmentPadding(Construct):
    """``_padding``: zero bytes up to the next multiple of ALIGNMENT, kept as read.

    Parsing keeps the bytes found (so non-zero padding rebuilds exactly) and accepts a file
    that ends before the padding is complete. Building writes the kept bytes when they fit the
    position, else zeros (``None`` asks for zeros); a file without data keeps a short padding.
    """

    def __init__(self, alignment: Any):
        super().__init__()
        self.alignment = alignment
        self.flagbuildnone = True

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        pos = stream.tell()
        want = align_offset(pos, evaluate(self.alignment, context)) - pos
        return stream.read(want)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        pos = stream.tell()
        want = align_offset(pos, evaluate(self.alignment, context)) - pos
        if obj is not None and (len(obj) == want or (len(obj) < want and _empty_data(context))):
            stream.write(bytes(obj))
            return obj
        stream.write(bytes(want))
        return bytes(want)


def _empty_data(context: Any) -> bool:
    data = context.get("tensor_data")
    return getattr(data, "size", None) == 0 or data == b""


@dataclass(frozen=True)
class DataSection:
    """Where ``tensor_data`` lies in the parsed buffer: ``offset`` and ``size`` (to the end of the file)."""

    offset: int
    size: int


class TensorData(Construct):
    """``tensor_data``: everything after the padding. Parsing records its extent and reads nothing.

    Building writes ``bytes`` as they are, or calls ``obj.write_to(stream)`` so tensor data is
    streamed straight to the file.
    """

    def __init__(self) -> None:
        super().__init__()
        self.flagbuildnone = True

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        left = _remaining(stream)
        return DataSection(stream.tell(), left if left is not None else 0)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            return obj
        if isinstance(obj, (bytes, bytearray, memoryview)):
            stream.write(obj)
        else:
            obj.write_to(stream)
        return obj
