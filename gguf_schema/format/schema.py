"""The GGUF file layout as ``construct`` declarations: the spec, transcribed.

Read this module next to the spec (``docs/gguf.md`` of ggml; ``spec/`` holds our copy of its
facts). Each spec struct appears in the spec's order under the spec's name and field names:
``gguf_string_t``, ``gguf_metadata_value_t`` (a ``Switch`` on the value type),
``gguf_metadata_kv_t``, ``gguf_header_t``, ``gguf_tensor_info_t``, ``gguf_file_t``.

One factory, :func:`gguf_schema`, builds them for a (byte order, version) pair: little or big
endian; version 1 (uint32 counts, lengths and dimensions) or 2/3 (uint64). Arrays recurse
through ``LazyBound``. Speed lives in two schema nodes of our own, not in a second parser:
:class:`ArrayItems` parses a metadata array body of numbers in one numpy step and a body of
strings in one tight loop. ``fast=False`` gives the pure-construct reference variant of the
same schema (``Array`` of the ``Switch``); both give identical values and identical bytes.

>>> s = gguf_schema("little", 3)
>>> s.gguf_string_t.build("hi")
b'\\x02\\x00\\x00\\x00\\x00\\x00\\x00\\x00hi'
>>> gguf_schema("big", 3).gguf_string_t.parse(b"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02hi")
'hi'
>>> gguf_schema("little", 1).gguf_string_t.build("hi")
b'\\x02\\x00\\x00\\x00hi'
"""

from __future__ import annotations

import contextlib
import functools
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from construct import (
    Adapter,
    Array,
    Bytes,
    Computed,
    Const,
    ConstError,
    Construct,
    ConstructError,
    Container,
    Int8sl,
    Int8ul,
    Int16sb,
    Int16sl,
    Int16ub,
    Int16ul,
    Int32sb,
    Int32sl,
    Int32ub,
    Int32ul,
    Int64sb,
    Int64sl,
    Int64ub,
    Int64ul,
    LazyBound,
    ListContainer,
    Rebuild,
    StreamError,
    Struct,
    Switch,
    evaluate,
    len_,
    this,
)

from ..errors import _UNSET, GGUFBuildError, GGUFError, GGUFFormatError, GGUFLimitError, GGUFTruncatedError
from .limits import DEFAULT_LIMITS, Limits
from .source import ByteReader
from .types import ValueType
from .values import BoolByte, GGUFArray, LazyStrings

__all__ = ["gguf_schema", "GGUFSchema", "DEFAULT_ALIGNMENT", "align_offset", "sniff", "DataSection", "gguf_error"]

#: ``general.alignment`` when the key is absent.
DEFAULT_ALIGNMENT = 32

_INTS = {
    "little": dict(u8=Int8ul, i8=Int8sl, u16=Int16ul, i16=Int16sl, u32=Int32ul, i32=Int32sl, u64=Int64ul, i64=Int64sl),
    "big": dict(u8=Int8ul, i8=Int8sl, u16=Int16ub, i16=Int16sb, u32=Int32ub, i32=Int32sb, u64=Int64ub, i64=Int64sb),
}


def align_offset(offset: int, alignment: int) -> int:
    """The spec's ``align_offset``: ``offset`` rounded up to a multiple of ``alignment``.

    >>> align_offset(33, 32), align_offset(64, 32)
    (64, 64)
    """
    return offset + (alignment - (offset % alignment)) % alignment


def sniff(head: bytes) -> tuple[str, int]:
    """Byte order and version of a GGUF file from its first 8 bytes.

    The magic is the bytes ``GGUF`` in both byte orders; a version whose low 16 bits are zero
    when read little-endian means the file is big-endian (the ecosystem's convention).

    >>> sniff(b"GGUF\\x03\\x00\\x00\\x00"), sniff(b"GGUF\\x00\\x00\\x00\\x03")
    (('little', 3), ('big', 3))
    """
    if len(head) < 4 or head[:4] != b"GGUF":
        if len(head) < 4 and b"GGUF".startswith(bytes(head)):
            raise GGUFTruncatedError(f"file ends inside the magic ({len(head)} bytes)", offset=0, path="header.magic", value=bytes(head))
        raise GGUFFormatError(f"not a GGUF file: magic {bytes(head[:4])!r}, expected b'GGUF'", offset=0, path="header.magic", value=bytes(head[:4]))
    if len(head) < 8:
        raise GGUFTruncatedError(f"file ends inside the version ({len(head)} bytes)", offset=4, path="header.version", value=bytes(head))
    version = int.from_bytes(head[4:8], "little")
    order = "little"
    if version & 0xFFFF == 0 and version:
        version = int.from_bytes(head[4:8], "big")
        order = "big"
    if version not in (1, 2, 3):
        raise GGUFFormatError(f"unsupported GGUF version {version} (this library reads 1, 2 and 3)", offset=4, path="header.version", value=version)
    return order, version


@dataclass(frozen=True)
class DataSection:
    """Where ``tensor_data`` lies in the parsed buffer: ``offset`` and ``size`` (to the end of the file)."""

    offset: int
    size: int


# --------------------------------------------------------------------------- custom nodes


def _limits(context: Any) -> Limits:
    params = context.get("_params") if hasattr(context, "get") else None
    return (params.get("limits") if params else None) or DEFAULT_LIMITS




class IndexedArray(Array):
    """``Array`` whose error paths name the element index, checked against the bytes left.

    ``min_size`` is the fewest bytes one element can take: a count that cannot fit in what
    remains fails at once instead of after a long loop. Records that begin with a name
    (metadata pairs, tensor infos) add that name to the error path.
    """

    def __init__(self, count: Any, subcon: Construct, min_size: int, named: bool = False):
        super().__init__(count, subcon)
        self.min_size = min_size
        self.named = named

    def _parse(self, stream, context, path):
        count = evaluate(self.count, context)
        _check_count(stream, count, evaluate(self.min_size, context), path)
        obj = ListContainer()
        obj.offsets = offsets = []  # where each element starts: for error messages and validation
        for i in range(count):
            context._index = i
            start = stream.tell()
            offsets.append(start)
            try:
                obj.append(self.subcon._parsereport(stream, context, f"{path}[{i}]"))
            except (GGUFFormatError, ConstructError) as e:
                err = gguf_error(e, stream)
                here = _clean_path(f"{path}[{i}]") or ""
                if self.named and err.path and err.path.startswith(here) and "'" not in err.path[len(here):]:
                    name = _peek_name(self.subcon, stream, start, context)
                    if name is not None:
                        err = type(err)(err.reason, offset=err.offset, path=err.path.replace(here, f"{here} {name!r}", 1),
                                        value=err.value if err.has_value else _UNSET)
                if err is e:
                    raise
                raise err from None
        return obj

    def _build(self, obj, stream, context, path):
        count = evaluate(self.count, context)
        if count != len(obj):
            raise GGUFBuildError(f"count {count} but {len(obj)} elements", path=path, value=count)
        for i, e in enumerate(obj):
            context._index = i
            self.subcon._build(e, stream, context, f"{path}[{i}]")
        return obj


def _min_value_size(vt: ValueType, size_t: int) -> int:
    """The fewest bytes a value of type ``vt`` can take: its size, a string's length, an array's type and count."""
    if vt == ValueType.STRING:
        return size_t
    if vt == ValueType.ARRAY:
        return 4 + size_t
    return vt.itemsize


def gguf_error(e: BaseException, stream: Any) -> GGUFError:
    """The :class:`GGUFError` for an error raised while parsing (construct's own errors translated).

    The offset is where the failing read started; the path is the schema path without the
    top-level prefix.
    """
    if isinstance(e, GGUFError):
        clean = _clean_path(e.path)
        if clean != e.path:
            return type(e)(e.reason, offset=e.offset, path=clean, value=e.value if e.has_value else _UNSET)
        return e
    at = getattr(stream, "last", None)
    if isinstance(e, RecursionError):
        return GGUFLimitError("arrays nested too deep for the reference schema", offset=at)
    path = _clean_path(getattr(e, "path", None))
    msg = str(e).split("\n", 1)[-1] if isinstance(e, ConstructError) else str(e)
    short = re.fullmatch(r"stream read less than specified amount, expected (\d+), found (\d+)", msg)
    if short:
        return GGUFTruncatedError(f"file ends early: {short[1]} bytes needed, {short[2]} left", offset=at, path=path)
    if isinstance(e, StreamError) or (isinstance(stream, ByteReader) and stream.pos >= stream.size):
        return GGUFTruncatedError(f"file ends early ({msg})", offset=at, path=path)
    if isinstance(e, ConstError):
        return GGUFFormatError(f"unexpected bytes: {msg}", offset=at, path=path)
    return GGUFFormatError(f"{type(e).__name__}: {msg}", offset=at, path=path)


def _clean_path(path: str | None) -> str | None:
    if not path:
        return None
    for prefix in ("(parsing) -> ", "gguf_file_t -> ", "(parsing)"):
        if path.startswith(prefix):
            path = path[len(prefix):]
    return path or None


def _check_count(stream, count: int, min_size: int, path: str) -> None:
    if count < 0:
        raise GGUFFormatError(f"negative count {count}", offset=stream.tell(), path=path, value=count)
    if isinstance(stream, ByteReader) and count * min_size > stream.remaining:
        raise GGUFTruncatedError(
            f"count {count} needs at least {count * min_size} bytes, {stream.remaining} left",
            offset=stream.tell(),
            path=path,
            value=count,
        )


def _peek_name(record: Construct, stream, start: int, context) -> str | None:
    here = stream.tell()
    try:
        stream.seek(start)
        first = record.subcons[0] if hasattr(record, "subcons") else None
        return first._parsereport(stream, context, "") if first is not None else None
    except Exception:  # only used to decorate an error that is already on its way
        return None
    finally:
        stream.seek(here)


class StringBytes(Bytes):
    """``char string[len]``: checked against the bytes left before reading, so a huge length fails at once."""

    def __init__(self, length: Any, length_size: int):
        super().__init__(length)
        self.length_size = length_size

    def _parse(self, stream, context, path):
        n = evaluate(self.length, context)
        cap = _limits(context).max_string_length
        if n > cap:
            raise GGUFLimitError(f"string of {n} bytes exceeds the limit of {cap}", offset=stream.tell() - self.length_size, path=path, value=n)
        if isinstance(stream, ByteReader) and n > stream.remaining:
            raise GGUFTruncatedError(f"string length {n} needs {n} bytes, {stream.remaining} left",
                                     offset=stream.pos - self.length_size, path=path, value=n)
        return super()._parse(stream, context, path)


class StringValue(Adapter):
    """``gguf_string_t`` <-> ``str``: UTF-8, with undecodable bytes kept as surrogate escapes."""

    def _decode(self, obj, context, path):
        return obj.string.decode("utf-8", "surrogateescape")

    def _encode(self, obj, context, path):
        if not isinstance(obj, str):
            raise GGUFBuildError(f"a string field needs a str, got {type(obj).__name__}", path=path, value=obj)
        try:
            return Container(string=obj.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError as e:
            raise GGUFBuildError(f"string cannot be encoded as UTF-8: {e.reason}", path=path, value=obj) from None


class BoolValue(Adapter):
    """``bool``: one byte, 0 is false and 1 is true; another byte is kept as :class:`BoolByte`."""

    def _decode(self, obj, context, path):
        return obj == 1 if obj <= 1 else BoolByte(obj)

    def _encode(self, obj, context, path):
        return int(obj)


class ValueTypeField(Adapter):
    """``gguf_metadata_value_type``: a uint32 that must name one of the 13 value types."""

    def _decode(self, obj, context, path):
        try:
            return ValueType(obj)
        except ValueError:
            raise GGUFFormatError(f"unknown metadata value type {obj} (valid: 0..12)", path=path, value=obj) from None

    def _encode(self, obj, context, path):
        try:
            return int(ValueType(obj))
        except (ValueError, TypeError):
            raise GGUFBuildError(f"unknown metadata value type {obj!r}", path=path, value=obj) from None


class FloatValue(Construct):
    """A float32/float64 scalar as a numpy scalar, so every bit (NaN payloads too) survives."""

    def __init__(self, dtype: np.dtype):
        super().__init__()
        self.dtype = np.dtype(dtype)

    def _parse(self, stream, context, path):
        data = stream.read(self.dtype.itemsize)
        if len(data) != self.dtype.itemsize:
            raise GGUFTruncatedError(f"{self.dtype.itemsize}-byte float needs {self.dtype.itemsize} bytes, {len(data)} left", offset=stream.tell() - len(data), path=path)
        return np.frombuffer(data, self.dtype)[0]

    def _build(self, obj, stream, context, path):
        try:
            stream.write(np.asarray(obj, dtype=self.dtype).tobytes())
        except (TypeError, ValueError) as e:
            raise GGUFBuildError(f"not a float: {e}", path=path, value=obj) from None
        return obj

    def _sizeof(self, context, path):
        return self.dtype.itemsize


class ArrayValue(Adapter):
    """The ``array`` member of ``gguf_metadata_value_t`` <-> :class:`GGUFArray`."""

    def _decode(self, obj, context, path):
        return GGUFArray(obj.type, obj.array)

    def _encode(self, obj, context, path):
        if not isinstance(obj, GGUFArray):
            raise GGUFBuildError(f"an ARRAY value must be a GGUFArray, got {type(obj).__name__}", path=path, value=obj)
        return Container(type=obj.type, array=obj.items)


class ArrayItems(Construct):
    """The body of a metadata array (``array[len]``), decoded in one step: the fast node.

    Numbers and bools: one ``numpy.frombuffer`` (a read-only array in native byte order).
    Strings: one tight loop over the buffer. Arrays of arrays recurse into ``nested``.
    Every count is checked against the bytes left and the limits before anything is read.
    """

    def __init__(self, item_type: Any, count: Any, byte_order: str, length_format: str, nested: Construct):
        super().__init__()
        self.item_type = item_type
        self.count = count
        self.byte_order = byte_order
        self.length = struct.Struct(("<" if byte_order == "little" else ">") + length_format)
        self.nested = nested

    def _parse(self, stream, context, path):
        if not isinstance(stream, ByteReader):  # another stream (construct's own parse()): go through a buffer of the rest
            start = stream.tell()
            r = ByteReader(stream.read())
            try:
                return self._parse(r, context, path)
            finally:
                stream.seek(start + r.pos)
        vt = evaluate(self.item_type, context)
        n = evaluate(self.count, context)
        limits = _limits(context)
        r = stream
        _check_count(r, n, _min_value_size(vt, self.length.size), path)  # a count the file cannot hold: truncated
        if n > limits.max_array_length:
            raise GGUFLimitError(f"array of {n} elements exceeds the limit of {limits.max_array_length}", offset=r.pos, path=path, value=n)
        if vt == ValueType.STRING:
            if context._params.get("lazy"):
                return self._skip_strings(r, n, limits, path)
            return self._parse_strings(r, n, limits, path)
        if vt == ValueType.ARRAY:
            return self._parse_arrays(r, n, context, limits, path)
        dtype = vt.numpy_dtype(self.byte_order)
        _check_count(r, n, dtype.itemsize, path)
        arr = np.frombuffer(r.data, dtype, n, r.pos)
        arr = arr.astype(dtype.newbyteorder("=")) if not dtype.isnative else arr.copy()
        arr.flags.writeable = False
        r.pos += n * dtype.itemsize
        return arr

    def _parse_strings(self, r: ByteReader, n: int, limits: Limits, path: str) -> list[str]:
        lsize = self.length.size
        _check_count(r, n, lsize, path)
        data, pos, size, unpack = r.data, r.pos, r.size, self.length.unpack_from
        cap = limits.max_string_length
        out = [""] * n
        i = 0
        try:
            for i in range(n):
                (ln,) = unpack(data, pos)
                start = pos + lsize
                pos = start + ln
                if pos > size or ln > cap:
                    _string_failure(r, i, ln, start - lsize, cap, path, lsize)
                out[i] = data[start:pos].decode("utf-8", "surrogateescape")
        except struct.error:
            raise GGUFTruncatedError(f"file ends inside the length of string {i} of {n}", offset=pos, path=f"{path}[{i}]") from None
        r.pos = pos
        return out

    def _skip_strings(self, r: ByteReader, n: int, limits: Limits, path: str) -> LazyStrings:
        """Find where ``n`` strings end without decoding them: the lazy open's only loop.

        ``limits.max_string_length`` is enforced here too: when all the strings together fit
        under it no single one can exceed it; otherwise a second pass over the lengths finds
        the first one that does (if any).
        """
        lsize = self.length.size
        _check_count(r, n, lsize, path)
        data, start, unpack = r.data, r.pos, self.length.unpack_from
        pos = start
        try:
            for _ in range(n >> 2):  # unrolled: this loop is the whole cost of a lazy open
                pos += unpack(data, pos)[0] + lsize
                pos += unpack(data, pos)[0] + lsize
                pos += unpack(data, pos)[0] + lsize
                pos += unpack(data, pos)[0] + lsize
            for _ in range(n & 3):
                pos += unpack(data, pos)[0] + lsize
        except struct.error:
            pos = r.size + 1
        if pos > r.size:
            self._parse_strings(r, n, DEFAULT_LIMITS, path)  # names the string that runs past the end
        cap = limits.max_string_length
        if pos - start - n * lsize > cap:
            at = start
            for i in range(n):
                (ln,) = unpack(data, at)
                if ln > cap:
                    _string_failure(r, i, ln, at, cap, path, lsize)
                at += lsize + ln
        r.pos = pos
        return LazyStrings(data[start:pos], n, self.length.format)

    def _parse_arrays(self, r: ByteReader, n: int, context, limits: Limits, path: str) -> list[GGUFArray]:
        _check_count(r, n, 4 + self.length.size, path)
        with _nested(context, limits, r.pos, path):
            return [self.nested._parsereport(r, context, f"{path}[{i}]") for i in range(n)]

    def _build(self, obj, stream, context, path):
        vt = evaluate(self.item_type, context)
        if vt == ValueType.STRING:
            if isinstance(obj, LazyStrings) and obj.length_format == self.length.format:
                stream.write(obj.raw)  # unchanged strings go back exactly as they were read
                return obj
            pack = self.length.pack
            parts = []
            for i, s in enumerate(obj):
                try:
                    b = s.encode("utf-8", "surrogateescape")
                except (AttributeError, UnicodeEncodeError):
                    raise GGUFBuildError("a STRING array item must be a UTF-8 encodable str", path=f"{path}[{i}]", value=s) from None
                parts.append(pack(len(b)))
                parts.append(b)
            stream.write(b"".join(parts))
        elif vt == ValueType.ARRAY:
            for i, a in enumerate(obj):
                self.nested._build(a, stream, context, f"{path}[{i}]")
        else:
            stream.write(_numeric_bytes(obj, vt, self.byte_order, path))
        return obj


@contextlib.contextmanager
def _nested(context, limits: Limits, offset: int, path: str):
    """One level deeper into arrays of arrays, refused past ``limits.max_depth``."""
    params = context._params
    depth = params.get("_depth", 1) + 1
    if depth > limits.max_depth:
        raise GGUFLimitError(f"arrays nested {depth} deep exceed the limit of {limits.max_depth}", offset=offset, path=path, value=depth)
    params["_depth"] = depth
    try:
        yield
    finally:
        params["_depth"] = depth - 1


class ValueItems(IndexedArray):
    """The reference variant's array body: construct's ``Array`` of the value union, under the same limits."""

    def _parse(self, stream, context, path):
        n, limits = evaluate(self.count, context), _limits(context)
        _check_count(stream, n, evaluate(self.min_size, context), path)
        if n > limits.max_array_length:
            raise GGUFLimitError(f"array of {n} elements exceeds the limit of {limits.max_array_length}", offset=stream.tell(), path=path, value=n)
        if context.type != ValueType.ARRAY:
            return super()._parse(stream, context, path)
        _check_count(stream, n, evaluate(self.min_size, context), path)
        with _nested(context, limits, stream.tell(), path):
            return super()._parse(stream, context, path)


def _string_failure(r: ByteReader, i: int, ln: int, at: int, cap: int, path: str, lsize: int):
    if ln > cap:
        raise GGUFLimitError(f"string of {ln} bytes exceeds the limit of {cap}", offset=at, path=f"{path}[{i}]", value=ln)
    raise GGUFTruncatedError(f"string length {ln} needs {ln} bytes, {max(0, r.size - at - lsize)} left", offset=at, path=f"{path}[{i}]", value=ln)


def _numeric_bytes(items: Any, vt: ValueType, byte_order: str, path: str) -> bytes:
    dtype = vt.numpy_dtype(byte_order)
    arr = np.asarray(items)
    if arr.dtype.kind not in "biuf" or arr.ndim != 1:
        raise GGUFBuildError(f"items of a {vt.name} array must be a 1-d numeric array", path=path, value=arr.dtype)
    if arr.dtype.newbyteorder("=") != dtype.newbyteorder("="):
        raise GGUFBuildError(f"items of a {vt.name} array must have dtype {dtype.newbyteorder('=')}, got {arr.dtype}", path=path, value=arr.dtype)
    return arr.astype(dtype, copy=False).tobytes()


class ItemsList(Adapter):
    """The reference variant's array body: construct's list of elements <-> the fast node's form."""

    def _decode(self, obj, context, path):
        vt = context.type
        if vt.is_numeric:
            if vt == ValueType.BOOL:
                arr = np.array([int(x) for x in obj], dtype=np.uint8).view(np.bool_)
            else:
                arr = np.array(list(obj), dtype=vt.numpy_dtype("little").newbyteorder("="))
            arr.flags.writeable = False
            return arr
        return list(obj)

    def _encode(self, obj, context, path):
        vt = context.type
        if vt == ValueType.BOOL:
            return np.asarray(obj).view(np.uint8).tolist()
        if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
            _numeric_bytes(obj, vt, "little", path)  # same type rules as the fast node
            return list(np.asarray(obj))
        if vt.is_numeric:
            _numeric_bytes(obj, vt, "little", path)
            return np.asarray(obj).tolist()
        return list(obj)


class AlignmentPadding(Construct):
    """``_padding``: zero bytes up to the next multiple of ALIGNMENT, kept as read.

    Parsing keeps the bytes found (so non-zero padding rebuilds exactly) and accepts a file
    that ends before the padding is complete. Building writes the kept bytes when they fit the
    position, else zeros (``None`` asks for zeros).
    """

    def __init__(self, alignment: Any):
        super().__init__()
        self.alignment = alignment
        self.flagbuildnone = True

    def _parse(self, stream, context, path):
        pos = stream.tell()
        want = align_offset(pos, evaluate(self.alignment, context)) - pos
        return stream.read(want)

    def _build(self, obj, stream, context, path):
        pos = stream.tell()
        want = align_offset(pos, evaluate(self.alignment, context)) - pos
        if obj is not None and (len(obj) == want or (len(obj) < want and _empty_data(context))):
            stream.write(bytes(obj))
            return obj
        stream.write(bytes(want))
        return bytes(want)


def _empty_data(context) -> bool:
    data = context.get("tensor_data")
    return getattr(data, "size", None) == 0 or data == b""


class TensorData(Construct):
    """``tensor_data``: everything after the padding. Parsing records its extent and reads nothing.

    Building writes ``bytes`` as they are, or calls ``obj.write_to(stream)`` so tensor data is
    streamed straight to the file.
    """

    def __init__(self):
        super().__init__()
        self.flagbuildnone = True

    def _parse(self, stream, context, path):
        return DataSection(stream.tell(), _remaining(stream))

    def _build(self, obj, stream, context, path):
        if obj is None:
            return obj
        if isinstance(obj, (bytes, bytearray, memoryview)):
            stream.write(obj)
        else:
            obj.write_to(stream)
        return obj


def _remaining(stream) -> int:
    if isinstance(stream, ByteReader):
        return stream.remaining
    here = stream.tell()
    end = stream.seek(0, 2)
    stream.seek(here)
    return end - here


def alignment_of(metadata_kv: list) -> int:
    """ALIGNMENT: the first ``general.alignment`` if it is a positive integer, else 32.

    Takes parsed ``gguf_metadata_kv_t`` records or :class:`~gguf_schema.format.values.Field` objects.
    """
    for kv in metadata_kv:
        if kv.key == "general.alignment":
            # a parsed record names its type value_type, a Field names it type (UINT8 is 0: no `or`)
            vt = kv.value_type if hasattr(kv, "value_type") else kv.type
            value = kv.value
            if vt.is_integer and value > 0:
                return int(value)
            return DEFAULT_ALIGNMENT
    return DEFAULT_ALIGNMENT


# --------------------------------------------------------------------------- the factory


@dataclass(frozen=True)
class GGUFSchema:
    """The structs of the spec for one (byte order, version), plus the scalar fields they use."""

    byte_order: str
    version: int
    fast: bool
    gguf_string_t: Construct
    gguf_metadata_value_type: Construct
    gguf_metadata_value_t: Callable[[Any], Construct]
    gguf_array_t: Construct
    gguf_metadata_kv_t: Construct
    gguf_header_t: Construct
    ggml_type: Construct
    gguf_tensor_info_t: Construct
    gguf_file_t: Construct
    count_size: int

    def parse(self, data: bytes, *, limits: Limits | None = None, lazy: bool = False) -> Container:
        """Parse a whole file from a buffer (bytes or mmap). ``lazy`` leaves string arrays undecoded."""
        return self.parse_stream(ByteReader(data), limits=limits, lazy=lazy)

    def parse_stream(self, reader: ByteReader, *, limits: Limits | None = None, lazy: bool = False) -> Container:
        limits = limits or DEFAULT_LIMITS
        with recursion_headroom(limits.max_depth):
            return self.gguf_file_t._parsereport(reader, _top_context(limits, lazy), "gguf_file_t")


#: Deepest array nesting construct is given Python frames for, whatever ``Limits.max_depth`` says:
#: deeper files fail with a GGUFLimitError (from RecursionError) instead of risking the C stack.
MAX_SAFE_DEPTH = 256


@contextlib.contextmanager
def recursion_headroom(depth: int):
    """Let construct recurse through ``depth`` nested arrays (12-15 Python frames each; 16 allowed), up to MAX_SAFE_DEPTH."""
    old = sys.getrecursionlimit()
    frame, used = sys._getframe(), 0
    while frame is not None:
        frame, used = frame.f_back, used + 1
    need = 200 + 16 * min(depth, MAX_SAFE_DEPTH) + used
    if need > old:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if need > old:
            sys.setrecursionlimit(old)


def _top_context(limits: Limits | None, lazy: bool = False) -> Container:
    ctx = Container(_parsing=True, _building=False, _sizing=False, limits=limits or DEFAULT_LIMITS, lazy=lazy, _depth=1)
    ctx._params = ctx
    return ctx


@functools.lru_cache(maxsize=None)
def gguf_schema(byte_order: str = "little", version: int = 3, *, fast: bool = True) -> GGUFSchema:
    """The GGUF schema for ``byte_order`` ("little" or "big") and ``version`` (1, 2 or 3).

    ``fast=False`` returns the pure-construct reference variant. Results are cached: each
    variant is built once.
    """
    if byte_order not in _INTS:
        raise GGUFBuildError(f"byte order must be 'little' or 'big', got {byte_order!r}", value=byte_order)
    if version not in (1, 2, 3):
        raise GGUFBuildError(f"unsupported GGUF version {version} (1, 2 and 3 exist)", value=version)
    I = _INTS[byte_order]  # noqa: E741 - the integer fields of this byte order
    e = "<" if byte_order == "little" else ">"
    # v1 stored counts, lengths and dimensions as uint32; v2 widened them to uint64.
    length = I["u32"] if version == 1 else I["u64"]
    size_t = 4 if version == 1 else 8

    # struct gguf_string_t { uint64_t len; char string[len]; }
    gguf_string_t = StringValue(
        Struct(
            "len" / Rebuild(length, len_(this.string)),
            "string" / StringBytes(this.len, size_t),
        )
    )

    # enum gguf_metadata_value_type: uint32_t { UINT8 = 0, ... FLOAT64 = 12 }
    gguf_metadata_value_type = ValueTypeField(I["u32"])

    # union gguf_metadata_value_t, selected by the value type
    cases: dict[int, Construct] = {
        ValueType.UINT8: I["u8"],
        ValueType.INT8: I["i8"],
        ValueType.UINT16: I["u16"],
        ValueType.INT16: I["i16"],
        ValueType.UINT32: I["u32"],
        ValueType.INT32: I["i32"],
        ValueType.FLOAT32: FloatValue(np.dtype(e + "f4")),
        ValueType.BOOL: BoolValue(I["u8"]),
        ValueType.STRING: gguf_string_t,
        ValueType.ARRAY: LazyBound(lambda: gguf_array_t),
        ValueType.UINT64: I["u64"],
        ValueType.INT64: I["i64"],
        ValueType.FLOAT64: FloatValue(np.dtype(e + "f8")),
    }

    def gguf_metadata_value_t(value_type: Any) -> Construct:
        return Switch(value_type, cases)

    if fast:
        items: Construct = ArrayItems(this.type, this.len, byte_order, "I" if version == 1 else "Q", LazyBound(lambda: gguf_array_t))
    else:
        items = ItemsList(ValueItems(this.len, gguf_metadata_value_t(this.type), min_size=lambda ctx: _min_value_size(ctx.type, size_t)))

    # the `array` member of the union: { gguf_metadata_value_type type; uint64_t len; gguf_metadata_value_t array[len]; }
    gguf_array_t = ArrayValue(
        Struct(
            "type" / gguf_metadata_value_type,
            "len" / Rebuild(length, len_(this.array)),
            "array" / items,
        )
    )

    # struct gguf_metadata_kv_t { gguf_string_t key; gguf_metadata_value_type value_type; gguf_metadata_value_t value; }
    gguf_metadata_kv_t = Struct(
        "key" / gguf_string_t,
        "value_type" / gguf_metadata_value_type,
        "value" / gguf_metadata_value_t(this.value_type),
    )

    # struct gguf_header_t
    gguf_header_t = Struct(
        "magic" / Const(b"GGUF"),
        "version" / Const(version, I["u32"]),
        "tensor_count" / Rebuild(length, len_(this._.tensor_infos)),
        "metadata_kv_count" / Rebuild(length, len_(this.metadata_kv)),
        "metadata_kv" / IndexedArray(this.metadata_kv_count, gguf_metadata_kv_t, min_size=size_t + 4 + 1, named=True),
    )

    # enum ggml_type: uint32_t (kept as the stored integer; types.GGMLType names it)
    ggml_type = I["u32"]

    # struct gguf_tensor_info_t
    gguf_tensor_info_t = Struct(
        "name" / gguf_string_t,
        "n_dimensions" / Rebuild(I["u32"], len_(this.dimensions)),
        "dimensions" / IndexedArray(this.n_dimensions, length, min_size=size_t),
        "type" / ggml_type,
        "offset" / I["u64"],
    )

    # struct gguf_file_t
    gguf_file_t = Struct(
        "header" / gguf_header_t,
        "tensor_infos" / IndexedArray(this.header.tensor_count, gguf_tensor_info_t, min_size=size_t + 4 + 4 + 8, named=True),
        # ALIGNMENT: general.alignment, 32 by default
        "alignment" / Computed(lambda ctx: alignment_of(ctx.header.metadata_kv)),
        "_padding" / AlignmentPadding(this.alignment),
        "tensor_data" / TensorData(),
    )

    return GGUFSchema(
        byte_order=byte_order,
        version=version,
        fast=fast,
        gguf_string_t=gguf_string_t,
        gguf_metadata_value_type=gguf_metadata_value_type,
        gguf_metadata_value_t=gguf_metadata_value_t,
        gguf_array_t=gguf_array_t,
        gguf_metadata_kv_t=gguf_metadata_kv_t,
        gguf_header_t=gguf_header_t,
        ggml_type=ggml_type,
        gguf_tensor_info_t=gguf_tensor_info_t,
        gguf_file_t=gguf_file_t,
        count_size=size_t,
    )
