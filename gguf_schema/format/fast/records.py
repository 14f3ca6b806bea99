"""The fast arrays of records: the metadata pairs and the tensor infos, each read in one loop.

:class:`KeyValueArray` (``gguf_metadata_kv_t metadata_kv[metadata_kv_count]``) and
:class:`TensorInfoArray` (``gguf_tensor_info_t tensor_infos[tensor_count]``) replace the plain
schema's arrays of the declared structs (:class:`~gguf_schema.format.nodes.IndexedArray`). A
record they cannot read is read again through the declared struct, which raises the exact
error; if the struct reads it, the two disagree, and that is our bug
(:class:`~gguf_schema.errors.GGUFInternalError`), never the file's. Building goes through the
declared struct record by record, except :class:`Verbatim` records, written back as their bytes.
"""

from __future__ import annotations

import struct
from operator import itemgetter
from typing import Any

import numpy as np
from construct import Construct, Container, ListContainer, evaluate

from ...errors import GGUFBuildError, GGUFError, GGUFInternalError
from ...io.source import ByteReader
from ..nodes import IndexedArray, _check_count, limits_of, where
from ..types import ValueType
from ..values import _U64_MAX, BoolByte, Field, GGUFArray
from ..variant import Variant
from . import walk
from .arrays import _TYPES, ArrayItems, parse_buffered

__all__ = ["KeyValueArray", "RecordArray", "TensorInfo", "TensorInfoArray", "Verbatim", "fast_records"]


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
        return parse_buffered(stream, context, lambda r: self._parse_records(r, context, path))

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
                raise GGUFInternalError(
                    "a record the declared struct reads but the fast loop does not",
                    offset=start,
                    path=where(f"{path}[{i}]"),
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
        variant: Variant,
        limit: str,
    ):
        super().__init__(count, subcon, min_size, limit=limit, named=True)
        self.items = items
        self.length = variant.struct("N")
        self.array_head = variant.struct("LN")
        self.u32 = variant.struct("L")
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
        self.scalars = {vt: variant.struct(code) for vt, code in codes.items()}
        self.floats = {ValueType.FLOAT32: variant.dtype("f4"), ValueType.FLOAT64: variant.dtype("f8")}

    def _record(self, x: Any) -> Any:
        return Container(key=x.key, value_type=x.type, value=x.value) if isinstance(x, Field) else x

    def _compiled_run(self, context: Any) -> Any:
        """Pairs of scalars and strings read by the compiled loop (``_scan.pairs``), checked as :meth:`_reader`
        checks them; it stops before a float, an array or a pair that fails, which the Python loop reads."""
        if walk.compiled_scan is None:
            return None
        limits = limits_of(context)
        key_cap, string_cap = min(limits.max_key_length, _U64_MAX), min(limits.max_string_length, _U64_MAX)
        lsize, big, pairs, types = self.length.size, self.length.format[0] == ">", walk.compiled_scan.pairs, _TYPES

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

    def __init__(self, count: Any, subcon: Construct, min_size: Any, *, variant: Variant, limit: str):
        super().__init__(count, subcon, min_size, limit=limit, named=True)
        self.e, self.size_code = variant.endian, variant.size_code
        self.length = variant.struct("N")
        self.tail = variant.struct("LQ")  # type, offset
        self.u32 = variant.struct("L")

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


def fast_records(
    *, kind: str, count: Any, record: Construct, min_size: int, limit: str, items: Any, variant: Variant
) -> Construct:
    """The fast arrays of records for the schema's ``records`` hook: a :class:`KeyValueArray` or a
    :class:`TensorInfoArray`."""
    if kind == "metadata_kv":
        return KeyValueArray(count, record, min_size, items=items, variant=variant, limit=limit)
    return TensorInfoArray(count, record, min_size, variant=variant, limit=limit)
