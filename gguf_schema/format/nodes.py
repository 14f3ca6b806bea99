"""Our ``construct`` nodes: the pieces of the schema that construct's own classes do not provide.

:mod:`gguf_schema.format.schema` declares the spec's structs with these nodes; this module
owns how each one reads and writes bytes, checks what a file claims, and reports errors:

* every read is bounded: a length or count is checked against the bytes left (and against
  :class:`~gguf_schema.format.limits.Limits`) before anything is read or allocated;
* every failure is raised here as a :class:`~gguf_schema.errors.GGUFError` naming the offset,
  the schema path (construct passes it to each node) and the value, so nothing upstream has to
  interpret construct's own messages;
* speed lives in :class:`ArrayItems`, the body of a metadata array: one ``numpy.frombuffer``
  for numbers, one walk over the strings (decoding them, or lazily a length-only scan). The walk
  is compiled when the optional module ``gguf_schema.format._scan`` was built (``csrc/scan.c``:
  ``compiled_scan``, from :mod:`~gguf_schema.format.values`); the Python loops here are the fallback and the reference, and both
  raise the same errors (:meth:`ArrayItems.string_error` names the string where either stops).

>>> from construct import Struct
>>> s = Struct("n" / Number("<L"), "s" / StringBytes(this.n, 4))
>>> s.parse(b"\\x02\\x00\\x00\\x00hi").s
b'hi'
"""

from __future__ import annotations

import contextlib
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NoReturn

import numpy as np
from construct import Adapter, Array, Bytes, Construct, Container, FormatField, ListContainer, evaluate, this

from ..errors import SHOWN, GGUFBuildError, GGUFError, GGUFFormatError, GGUFLimitError, GGUFTruncatedError
from .limits import DEFAULT_LIMITS, MAX_SAFE_DEPTH, Limits
from .source import ByteReader
from .types import ValueType
from .values import _U64_MAX, STRIDE, BoolByte, Field, GGUFArray, LazyStrings, compiled_scan

__all__ = [
    "AlignmentPadding",
    "ArrayItems",
    "ArrayValue",
    "BoolValue",
    "DataSection",
    "FloatValue",
    "IndexedArray",
    "KeyValueArray",
    "Number",
    "RecordArray",
    "StringBytes",
    "StringValue",
    "TensorData",
    "TensorInfo",
    "TensorInfoArray",
    "ValueTypeField",
    "Verbatim",
    "compiled_scan",
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


def numbers(byte_order: str) -> _Numbers:
    """The integer fields of one byte order: ``numbers("big").u32`` is a big-endian ``uint32_t``."""
    e = "<" if byte_order == "little" else ">"
    return _Numbers(**{name: Number(e + code) for name, code in _FORMATS.items()})


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


class Verbatim:
    """A record to write back exactly as it is stored: its bytes (a view of the file it was read from),
    given as ``data``, or as the span ``[start, end)`` of a ``buffer`` (:meth:`span`).

    An edit writes the records it did not touch this way, so they are never decoded or encoded
    again (a 100 MB vocabulary is copied, not rebuilt) and come out byte for byte. Records that are
    spans of one buffer, each starting where the one before ends, are written in one piece (a file
    of 800,000 keys: one write, not 800,000).
    """

    __slots__ = ("buffer", "data", "end", "key", "start", "type", "value")

    def __init__(self, data: Any, record: Any = None):
        self.data = data
        self.buffer: Any = None
        self.start = self.end = 0
        # what the record says, for the rules computed from the records (ALIGNMENT reads general.alignment)
        self.key: str = record.key if record is not None else ""
        self.type: Any = record.type if record is not None else None
        self.value: Any = record.value if record is not None else None

    @classmethod
    def span(cls, buffer: Any, span: tuple[int, int], record: Any = None) -> Verbatim:
        """The record stored at ``buffer[start:end]`` (``span``; sliced only when it is written)."""
        v = cls.__new__(cls)
        v.data, v.buffer, (v.start, v.end) = None, buffer, span
        v.key, v.type, v.value = (record.key, record.type, record.value) if record is not None else ("", None, None)
        return v


def _write_verbatim(stream: Any, records: Any, build: Any) -> None:
    """Write ``records``: :class:`Verbatim` ones as their bytes, adjacent spans of one buffer in one
    piece; any other through ``build(record, index)``."""
    buffer, start, end = None, 0, 0
    for i, x in enumerate(records):
        if isinstance(x, Verbatim) and x.buffer is not None:
            if x.buffer is buffer and x.start == end:
                end = x.end
                continue
            if buffer is not None:
                stream.write(buffer[start:end])
            buffer, start, end = x.buffer, x.start, x.end
            continue
        if buffer is not None:
            stream.write(buffer[start:end])
            buffer = None
        if isinstance(x, Verbatim):
            stream.write(x.data)
        else:
            build(x, i)
    if buffer is not None:
        stream.write(buffer[start:end])


class _Slow(Exception):
    """Raised inside a fast record loop: this record needs the declared struct (which names the failure)."""


class RecordArray(IndexedArray):
    """An array of the spec's records read in one loop: the metadata pairs or the tensor infos.

    The records are those the declared struct (``subcon``) describes; this node reads them
    without construct's per-field calls, which cost tens of microseconds a record (a legal file of
    800,000 keys). It checks what the struct checks (lengths against the bytes left and the
    limits); a record it cannot read is read again through the struct, which raises the exact
    error (offset, path, value). Building goes through the struct, record by record.
    """

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        r, base = _buffered(stream, context)
        try:
            return self._parse_records(r, context, path)
        finally:
            if r is not stream:
                stream.seek(base + r.pos)

    def _parse_records(self, r: ByteReader, context: Any, path: str) -> Any:
        count = evaluate(self.count, context)
        cap = getattr(limits_of(context), self.limit) if self.limit else None
        _check_count(r, count, evaluate(self.min_size, context), path, cap, self.what, self.limit or "the limit")
        read, run = self._reader(context), self._compiled_run(context)
        obj = ListContainer()
        obj.offsets = offsets = []
        i = 0
        while i < count:
            if run is not None:  # records the compiled loop reads, up to one it leaves to this loop
                got, at, done, r.pos = run(r, count - i)
                obj.extend(got)
                offsets.extend(at)
                i += done
                if i == count:
                    break
            start = r.pos
            offsets.append(start)
            try:
                obj.append(read(r))
            except (_Slow, GGUFError, struct.error, ValueError, IndexError, UnicodeError):
                r.pos = start
                context._index = i
                try:
                    self.subcon._parsereport(r, context, f"{path}[{i}]")
                except GGUFError as e:
                    raise self._named(e, r, start, f"{path}[{i}]", context) from None
                raise GGUFFormatError(
                    "a record the struct reads but the fast loop does not", offset=start, path=where(f"{path}[{i}]")
                ) from None
            i += 1
        return obj

    def _reader(self, context: Any) -> Any:
        raise NotImplementedError

    def _compiled_run(self, context: Any) -> Any:
        """``run(r, n) -> (records, offsets, count, end)``: up to ``n`` records read by compiled code, or None."""
        return None

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        count = evaluate(self.count, context)
        if count != len(obj):
            raise GGUFBuildError(f"count {count} but {len(obj)} elements", path=where(path), value=count)

        def build(x: Any, i: int) -> None:
            context._index = i
            self.subcon._build(self._record(x), stream, context, f"{path}[{i}]")

        _write_verbatim(stream, obj, build)
        return obj

    def _record(self, x: Any) -> Any:
        return x


_TYPES = tuple(ValueType)  # by value: ValueType(i) is _TYPES[i]
_STRING, _ARRAY = int(ValueType.STRING), int(ValueType.ARRAY)


class KeyValueArray(RecordArray):
    """``gguf_metadata_kv_t metadata_kv[metadata_kv_count]``, read in one loop (see :class:`RecordArray`).

    Scalars are unpacked in place, strings decoded in place, arrays read by the schema's array
    body (``items``, an :class:`ArrayItems`). Where the compiled module was built, runs of pairs of
    scalars and strings are read by its loop (``_scan.pairs``, the same checks); a float, an array or
    a pair that fails a check is read here, so the errors are this loop's. Each pair comes out as the plain value it stands
    for, a :class:`~gguf_schema.format.values.Field` with its offset (one object per pair: a file
    of 800,000 keys costs 800,000 of them, not twice that). Building takes Fields or containers.
    """

    def __init__(
        self,
        count: Any,
        subcon: Construct,
        min_size: Any,
        *,
        items: ArrayItems,
        byte_order: str,
        size_t: int,
        limit: str,
    ):
        super().__init__(count, subcon, min_size, limit=limit, named=True)
        self.items = items
        e = "<" if byte_order == "little" else ">"
        self.length = struct.Struct(e + ("L" if size_t == 4 else "Q"))
        self.array_head = struct.Struct(e + "L" + ("L" if size_t == 4 else "Q"))
        self.u32 = struct.Struct(e + "L")
        codes = {
            ValueType.UINT8: "B",
            ValueType.INT8: "b",
            ValueType.UINT16: "H",
            ValueType.INT16: "h",
            ValueType.UINT32: "L",
            ValueType.INT32: "l",
            ValueType.UINT64: "Q",
            ValueType.INT64: "q",
            ValueType.BOOL: "B",
        }
        self.scalars = {vt: struct.Struct(e + code) for vt, code in codes.items()}
        self.floats = {ValueType.FLOAT32: np.dtype(e + "f4"), ValueType.FLOAT64: np.dtype(e + "f8")}

    def _record(self, x: Any) -> Any:
        return Container(key=x.key, value_type=x.type, value=x.value) if isinstance(x, Field) else x

    def _compiled_run(self, context: Any) -> Any:
        """Pairs of scalars and strings read by the compiled loop (``_scan.pairs``), checked as :meth:`_reader`
        checks them; it stops before a float, an array or a pair that fails, which the Python loop reads."""
        if compiled_scan is None:
            return None
        limits = limits_of(context)
        key_cap, string_cap = min(limits.max_key_length, _U64_MAX), min(limits.max_string_length, _U64_MAX)
        lsize, big, pairs, types = self.length.size, self.length.format[0] == ">", compiled_scan.pairs, _TYPES

        def run(r: ByteReader, n: int) -> tuple[list[Field], list[int], int, int]:
            return pairs(r.data, r.pos, n, lsize, big, key_cap, string_cap, types, Field, BoolByte)

        return run

    def _reader(self, context: Any) -> Any:
        limits = limits_of(context)
        key_cap, string_cap = limits.max_key_length, limits.max_string_length
        length, u32, array_head, scalars, floats = (
            self.length,
            self.u32.unpack_from,
            self.array_head,
            self.scalars,
            self.floats,
        )
        lsize, types, items = length.size, list(ValueType), self.items

        def read(r: ByteReader) -> Field:
            data, start, size = r.data, r.pos, r.size
            pos = start
            (klen,) = length.unpack_from(data, pos)
            pos += lsize
            if klen > key_cap or pos + klen > size:
                raise _Slow
            key = str(data[pos : pos + klen], "utf-8", "surrogateescape")
            pos += klen
            vt = types[u32(data, pos)[0]]
            pos += 4
            sc = scalars.get(vt)
            if sc is not None:
                (value,) = sc.unpack_from(data, pos)
                pos += sc.size
                if vt == ValueType.BOOL:
                    value = value == 1 if value <= 1 else BoolByte(value)
            elif vt in floats:
                dt = floats[vt]
                if pos + dt.itemsize > size:
                    raise _Slow
                value = np.frombuffer(data, dt, 1, pos)[0]
                pos += dt.itemsize
            elif vt == ValueType.STRING:
                (n,) = length.unpack_from(data, pos)
                pos += lsize
                if n > string_cap or pos + n > size:
                    raise _Slow
                value = str(data[pos : pos + n], "utf-8", "surrogateescape")
                pos += n
            else:  # ARRAY
                et, n = array_head.unpack_from(data, pos)
                r.pos = pos + array_head.size
                et = types[et]
                value = GGUFArray(et, items.parse_items(r, et, n, context, "array"))
                pos = r.pos
            r.pos = pos
            return Field(key, vt, value, start)

        return read


class TensorInfo(Container):
    """One ``gguf_tensor_info_t`` as :class:`TensorInfoArray` reads it: a construct ``Container`` whose fields
    are also plain attributes.

    Reading ``info.name`` from a ``Container`` goes through construct's ``__getattr__``, which Python calls
    only after the normal lookup fails (about half a microsecond); here the lookup finds the field at once,
    which counts when the reader takes four fields from each of 100,000 tensor infos. Everything else is
    the ``Container`` (equal to one with the same items, built by the declared struct).

    >>> info = TensorInfo(name="w", n_dimensions=1, dimensions=[4], type=0, offset=0)
    >>> info.name, info["dimensions"], info == Container(name="w", n_dimensions=1, dimensions=[4], type=0, offset=0)
    ('w', [4], True)
    """

    __slots__ = ["__recursion_lock__"]  # Container's own slot, so that its __setattr__ still finds it

    name = property(itemgetter("name"))
    n_dimensions = property(itemgetter("n_dimensions"))
    dimensions = property(itemgetter("dimensions"))
    type = property(itemgetter("type"))
    offset = property(itemgetter("offset"))


class TensorInfoArray(RecordArray):
    """``gguf_tensor_info_t tensor_infos[tensor_count]``, read in one loop (see :class:`RecordArray`); each
    record a :class:`TensorInfo`."""

    def __init__(self, count: Any, subcon: Construct, min_size: Any, *, byte_order: str, size_t: int, limit: str):
        super().__init__(count, subcon, min_size, limit=limit, named=True)
        self.e = "<" if byte_order == "little" else ">"
        self.size_code = "L" if size_t == 4 else "Q"
        self.length = struct.Struct(self.e + self.size_code)
        self.tail = struct.Struct(self.e + "LQ")  # type, offset
        self.u32 = struct.Struct(self.e + "L")

    def _reader(self, context: Any) -> Any:
        limits = limits_of(context)
        name_cap, dims_cap = limits.max_tensor_name_length, limits.max_dims
        length, tail, u32, e, code = self.length, self.tail, self.u32.unpack_from, self.e, self.size_code
        lsize, dims_structs = length.size, {n: struct.Struct(f"{e}{n}{code}") for n in range(5)}

        def read(r: ByteReader) -> Container:
            data, pos, size = r.data, r.pos, r.size
            (n,) = length.unpack_from(data, pos)
            pos += lsize
            if n > name_cap or pos + n > size:
                raise _Slow
            name = str(data[pos : pos + n], "utf-8", "surrogateescape")
            pos += n
            (nd,) = u32(data, pos)
            pos += 4
            if nd > dims_cap or pos + nd * lsize + tail.size > size:
                raise _Slow
            dims_struct = dims_structs.get(nd) or struct.Struct(f"{e}{nd}{code}")
            dims = ListContainer(dims_struct.unpack_from(data, pos))
            pos += nd * lsize
            ggml_type, offset = tail.unpack_from(data, pos)
            r.pos = pos + tail.size
            return TensorInfo(name=name, n_dimensions=nd, dimensions=dims, type=ggml_type, offset=offset)

        return read


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


def _buffered(stream: Any, context: Any) -> tuple[ByteReader, int]:
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


class ArrayItems(Construct):
    """The body of a metadata array (``array[len]``), decoded in one step: the fast node.

    Numbers and bools: one ``numpy.frombuffer`` (a read-only array in native byte order).
    Strings: one tight loop over the buffer; with ``lazy=True`` a length-only scan that leaves
    them undecoded (:class:`~gguf_schema.format.values.LazyStrings`). Arrays of arrays recurse
    into ``nested`` (the schema's ``gguf_array_t``). Every count is checked against the bytes
    left and the limits before anything is read.
    """

    def __init__(self, item_type: Any, count: Any, byte_order: str, length_format: str, nested: Construct):
        super().__init__()
        self.item_type = item_type
        self.count = count
        self.byte_order = byte_order
        self.length = struct.Struct(("<" if byte_order == "little" else ">") + length_format)
        self.nested = nested
        self.head = struct.Struct(self.length.format[0] + "I" + self.length.format[1])  # an inner array's type, len
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
        r, base = _buffered(stream, context)
        try:
            return self._parse_body(r, context, path)
        finally:
            if r is not stream:
                stream.seek(base + r.pos)

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
                raise GGUFFormatError("inconsistent array", offset=start, path=where(f"{path}[{i}]")) from None
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

    def _parse_strings(self, r: ByteReader, n: int, limits: Limits, path: str) -> list[str]:
        """Decode ``n`` strings (invalid UTF-8 kept as surrogate escapes): compiled, or :meth:`walk_strings`."""
        if compiled_scan is None:
            return self.walk_strings(r, n, limits, path)
        stopped, at, items = compiled_scan.decode(
            r.data, r.pos, n, self.length.size, self.byte_order == "big", min(limits.max_string_length, _U64_MAX)
        )
        if items is None:
            self.string_error(r, stopped, n, at, limits.max_string_length, path)
        r.pos = at
        return items

    def _skip_strings(self, r: ByteReader, n: int, limits: Limits, path: str) -> LazyStrings:
        """Check ``n`` strings without decoding them: the lazy open's only loop; compiled, or :meth:`skip_strings`.

        Hands out a view of the strings' bytes, not a copy, and where every STRIDE-th string starts
        (the index of :class:`LazyStrings`).
        """
        if compiled_scan is None:
            end, marks = self.skip_strings(r, n, limits, path)
        else:
            stopped, end, found = compiled_scan.skip(
                r.data,
                r.pos,
                n,
                self.length.size,
                self.byte_order == "big",
                min(limits.max_string_length, _U64_MAX),
                STRIDE,
            )
            if found is None:
                self.string_error(r, stopped, n, end, limits.max_string_length, path)
            marks = array("Q")
            marks.frombytes(found)
        raw = memoryview(r.data)[r.pos : end]
        r.pos = end
        return LazyStrings(raw, n, self.length.format, marks)

    def walk_strings(self, r: ByteReader, n: int, limits: Limits, path: str, decode: bool = True) -> list[str]:
        """The Python walk: decode ``n`` strings (``decode=False`` only checks them); the reference of the compiled one."""
        lsize = self.length.size
        data, pos, size, unpack = r.data, r.pos, r.size, self.length.unpack_from
        cap = limits.max_string_length
        out = [""] * n
        for i in range(n):
            if pos + lsize > size:
                self.string_error(r, i, n, pos, cap, path)
            (ln,) = unpack(data, pos)
            start = pos + lsize
            if start + ln > size or ln > cap:
                self.string_error(r, i, n, pos, cap, path)
            pos = start + ln
            if decode:
                out[i] = str(data[start:pos], "utf-8", "surrogateescape")
        r.pos = pos
        return out

    def skip_strings(self, r: ByteReader, n: int, limits: Limits, path: str) -> tuple[int, array[int]]:
        """The Python length-only walk: where ``n`` strings end and the marks; the reference of the compiled one.

        The fast loop checks nothing per string; when the strings run past the buffer or all of
        them together exceed ``limits.max_string_length`` (so one alone might), :meth:`walk_strings`
        walks them again and names the first that fails, exactly as an eager parse does.
        """
        lsize = self.length.size
        data, start, unpack = r.data, r.pos, self.length.unpack_from
        marks, pos = array("Q"), start
        try:
            for _ in range(n // STRIDE):  # this loop is the whole cost of a lazy open without the compiled walk
                marks.append(pos - start)
                for _ in range(STRIDE // 4):
                    pos += unpack(data, pos)[0] + lsize
                    pos += unpack(data, pos)[0] + lsize
                    pos += unpack(data, pos)[0] + lsize
                    pos += unpack(data, pos)[0] + lsize
            if n % STRIDE:
                marks.append(pos - start)
                for _ in range(n % STRIDE):
                    pos += unpack(data, pos)[0] + lsize
            marks.append(pos - start)
        except (struct.error, OverflowError):  # past the end, or a length past anything an offset can be
            pos = r.size + 1
        if pos > r.size or pos - start - n * lsize > limits.max_string_length:
            self.walk_strings(r, n, limits, path, decode=False)  # raises for the first string that fails
            r.pos = start
        return pos, marks

    def string_error(self, r: ByteReader, i: int, n: int, at: int, cap: int, path: str) -> NoReturn:
        """Raise the error for string ``i`` of ``n``, whose length field starts at ``at``: where both walks stop."""
        lsize = self.length.size
        if at + lsize > r.size:
            raise GGUFTruncatedError(
                f"file ends inside the length of string {i} of {n}", offset=at, path=where(f"{path}[{i}]")
            )
        (ln,) = self.length.unpack_from(r.data, at)
        if ln > cap:
            raise GGUFLimitError(
                f"string of {ln:,} bytes exceeds max_string_length = {cap:,}",
                offset=at,
                path=where(f"{path}[{i}]"),
                value=ln,
            )
        raise GGUFTruncatedError(
            f"string length {ln:,} needs {ln:,} bytes, {max(0, r.size - at - lsize):,} left",
            offset=at,
            path=where(f"{path}[{i}]"),
            value=ln,
        )

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        vt = evaluate(self.item_type, context)
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
            for i, a in enumerate(obj):
                self.nested._build(a, stream, context, f"{path}[{i}]")
        else:
            stream.write(numeric_bytes(obj, vt, self.byte_order, path))
        return obj


#: strings of an array encoded and written at a time: building a vocabulary of millions costs one
#: batch of per-string objects, never one per string of the whole array
_STRING_BATCH = 1 << 16


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


# --------------------------------------------------------------------------- padding and data


def align_offset(offset: int, alignment: int) -> int:
    """The spec's ``align_offset``: ``offset`` rounded up to a multiple of ``alignment``.

    >>> align_offset(33, 32), align_offset(64, 32)
    (64, 64)
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
