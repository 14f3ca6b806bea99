"""Metadata values as Python objects: the typed records the schema parses to and builds from.

A metadata entry is a :class:`Field`: its key, its stored :class:`~gguf_schema.format.types.ValueType`
and its value in a canonical form that keeps every bit of the file:

=========================  =============================================================
value type                 Python value
=========================  =============================================================
UINT8 ... INT64            ``int``
FLOAT32 / FLOAT64          ``numpy.float32`` / ``numpy.float64`` (exact bits, NaN payloads)
BOOL                       ``bool``; a byte other than 0/1 is kept as :class:`BoolByte`
STRING                     ``str`` (bytes that are not UTF-8 survive as surrogate escapes)
ARRAY                      :class:`GGUFArray`: element type + items
=========================  =============================================================

``GGUFArray.items`` is a read-only numpy array for numeric and bool elements, a list of
``str`` for strings and a list of ``GGUFArray`` for nested arrays, so each inner array keeps
its own element type. :meth:`Field.plain` gives the same value as plain Python data.

>>> f = make_field("llama.context_length", 4096)
>>> f.type.name, f.value
('UINT32', 4096)
>>> make_field("x", [1.5, 2.5]).value
GGUFArray(FLOAT32, [1.5, 2.5])
>>> make_field("x", 7, ValueType.UINT64).type.name
'UINT64'
"""

from __future__ import annotations

import builtins
import os
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from ..errors import GGUFBuildError
from .types import ValueType

try:
    from . import _scan as compiled_scan
except ImportError:  # built without a C compiler: the Python loops do the walks over strings
    compiled_scan = None  # type: ignore[assignment]
if os.environ.get("GGUF_SCHEMA_NO_KERNELS") == "1":  # the switch that skips building it also turns it off
    compiled_scan = None  # type: ignore[assignment]

#: the cap the compiled walk takes when any length is allowed (a length field holds at most this)
_U64_MAX = 2**64 - 1

__all__ = [
    "STRIDE",
    "BoolByte",
    "Field",
    "GGUFArray",
    "LazyStrings",
    "coerce_value",
    "compiled_scan",
    "infer_type",
    "make_field",
    "plain",
    "string_marks",
]

_INT_RANGES = {
    ValueType.UINT8: (0, 2**8 - 1),
    ValueType.INT8: (-(2**7), 2**7 - 1),
    ValueType.UINT16: (0, 2**16 - 1),
    ValueType.INT16: (-(2**15), 2**15 - 1),
    ValueType.UINT32: (0, 2**32 - 1),
    ValueType.INT32: (-(2**31), 2**31 - 1),
    ValueType.UINT64: (0, 2**64 - 1),
    ValueType.INT64: (-(2**63), 2**63 - 1),
}


class BoolByte(int):
    """A BOOL value stored as a byte other than 0 or 1 (the spec calls that invalid; ggml reads it as true).

    Kept so the file rebuilds byte for byte; truthy like any non-zero byte.

    >>> BoolByte(2), bool(BoolByte(2))
    (BoolByte(2), True)
    """

    def __repr__(self) -> str:
        return f"BoolByte({int(self)})"


#: LazyStrings keeps the position of every STRIDE-th string (8 bytes per 64 strings)
STRIDE = 64


def string_marks(raw: Any, count: int, length_format: str, stride: int = STRIDE) -> array[int]:
    """Where strings ``0, stride, 2*stride, ...`` (and the end) start in ``raw``: the index of :class:`LazyStrings`.

    Lengths are taken as they are: callers check them against the buffer first.
    """
    unpack, size = struct.Struct(length_format).unpack_from, struct.calcsize(length_format)
    marks, pos = array("Q"), 0
    for i in range(count):
        if i % stride == 0:
            marks.append(pos)
        pos += unpack(raw, pos)[0] + size
    marks.append(pos)
    return marks


class LazyStrings(Sequence[str]):
    """The items of a STRING array, decoded only when asked for (``open(..., lazy=True)``).

    Holds the array's bytes as stored -- a read-only view of the file's map where the file is
    mapped, not a copy -- its count, and where every 64th string starts (found by the scan that
    checked the lengths at open: 8 bytes per 64 strings). ``len()`` costs nothing; an index decodes
    one string after skipping at most 63 lengths; iteration decodes in order. Compares equal to the
    list it stands for. Like tensor views, it stays valid after the file is closed.

    >>> import struct
    >>> raw = b"".join(struct.pack("<Q", len(s)) + s for s in (b"a", b"bc", b""))
    >>> items = LazyStrings(raw, 3, "<Q")
    >>> len(items), items[1], items[-1], items == ["a", "bc", ""], items.count("a")
    (3, 'bc', '', True, 1)
    """

    __slots__ = ("_marks", "_n", "length_format", "raw")

    def __init__(self, raw: Any, count: int, length_format: str, marks: array[int] | None = None):
        self.raw = raw
        self._n = count
        self.length_format = length_format
        self._marks = marks if marks is not None else string_marks(raw, count, length_format)

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"string index {i} out of range for {self._n} strings")
        unpack, size = struct.Struct(self.length_format).unpack_from, struct.calcsize(self.length_format)
        raw, pos = self.raw, self._marks[i // STRIDE]
        for _ in range(i % STRIDE):
            pos += unpack(raw, pos)[0] + size
        end = pos + size + unpack(raw, pos)[0]
        return str(raw[pos + size : end], "utf-8", "surrogateescape")

    def __iter__(self) -> Iterator[str]:
        unpack, size = struct.Struct(self.length_format).unpack_from, struct.calcsize(self.length_format)
        raw, pos = self.raw, 0
        for _ in range(self._n):
            end = pos + size + unpack(raw, pos)[0]
            yield str(raw[pos + size : end], "utf-8", "surrogateescape")
            pos = end

    def tolist(self) -> list[str]:
        return list(self)

    def starts(self) -> np.ndarray:
        """Where every string's length field starts in :attr:`raw`, and the end: ``len(self) + 1``
        offsets as int64 (one compiled walk where ``gguf_schema.format._scan`` was built).

        >>> import struct
        >>> raw = b"".join(struct.pack("<Q", len(s)) + s for s in (b"a", b"bc", b""))
        >>> LazyStrings(raw, 3, "<Q").starts().tolist()
        [0, 9, 19, 27]
        """
        if compiled_scan is not None:
            size = struct.calcsize(self.length_format)
            big = self.length_format[0] == ">"
            _, _, found = compiled_scan.skip(self.raw, 0, self._n, size, big, _U64_MAX, 1)
            if found is not None:
                return np.frombuffer(found, np.uint64).astype(np.int64)
        return np.array(string_marks(self.raw, self._n, self.length_format, 1), np.int64)

    def invalid_utf8(self) -> list[int]:
        """The indices of the strings that are not valid UTF-8 (they decode with surrogate escapes),
        found without decoding the others (compiled where ``gguf_schema.format._scan`` was built).

        >>> import struct
        >>> raw = b"".join(struct.pack("<Q", len(s)) + s for s in (b"ok", b"\\xff", b"\\xc3\\xa9", b"\\xed\\xa0\\x80"))
        >>> LazyStrings(raw, 4, "<Q").invalid_utf8()
        [1, 3]
        """
        if compiled_scan is not None:
            size = struct.calcsize(self.length_format)
            return compiled_scan.invalid_utf8(self.raw, 0, self._n, size, self.length_format[0] == ">", _U64_MAX)
        unpack, size = struct.Struct(self.length_format).unpack_from, struct.calcsize(self.length_format)
        raw, pos, bad = self.raw, 0, []
        for i in range(self._n):
            end = pos + size + unpack(raw, pos)[0]
            try:
                str(raw[pos + size : end], "utf-8")
            except UnicodeDecodeError:
                bad.append(i)
            pos = end
        return bad

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyStrings):
            return self._n == other._n and (
                bytes(self.raw) == bytes(other.raw)
                if self.length_format == other.length_format
                else list(self) == list(other)
            )
        if isinstance(other, (list, tuple)):
            return self._n == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:4])
        return f"LazyStrings([{head}{', ...' if self._n > 4 else ''}], {self._n} strings)"


class GGUFArray:
    """A metadata array: the element type and the items (see the module docstring for their form)."""

    __slots__ = ("items", "type")

    def __init__(self, type: ValueType | int, items: Any):
        self.type = ValueType(type)
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __getitem__(self, i: Any) -> Any:
        return self.items[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GGUFArray):
            return NotImplemented
        return self.type == other.type and _items_equal(self.type, self.items, other.items)

    def __repr__(self) -> str:
        items = self.items
        shown = list(items[:8]) if not isinstance(items, np.ndarray) else items[:8].tolist()
        more = f", ... ({len(items)} items)" if len(items) > 8 else ""
        body = ", ".join(repr(x) for x in shown)
        return f"GGUFArray({self.type.name}, [{body}{more}])"

    def plain(self) -> Any:
        """Items as plain data: numpy array, list of str, or nested lists."""
        if self.type == ValueType.ARRAY:
            return [a.plain() for a in self.items]
        return self.items


def _items_equal(vt: ValueType, a: Any, b: Any) -> bool:
    if vt.is_numeric:
        a, b = _native(np.asarray(a)), _native(np.asarray(b))
        # compare bit patterns, so NaNs and -0.0 compare as stored
        return bool(a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes())
    return len(a) == len(b) and all(x == y for x, y in zip(a, b, strict=False))


@dataclass(frozen=True, eq=False, slots=True)
class Field:
    """One metadata key-value pair as stored.

    Attributes:
        key: the key.
        type: the stored value type.
        value: the value in canonical form (see the module docstring).
        offset: byte offset of the pair in the file it was read from (None when built in memory).
    """

    key: str
    type: ValueType
    value: Any
    offset: int | None = None

    @property
    def element_type(self) -> ValueType | None:
        """The element type for arrays, else None."""
        return self.value.type if self.type == ValueType.ARRAY else None

    def plain(self) -> Any:
        """The value as plain Python data (floats as ``float``, arrays as numpy arrays or lists)."""
        return plain(self.type, self.value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Field):
            return NotImplemented
        return self.key == other.key and self.type == other.type and _value_equal(self.type, self.value, other.value)

    def __repr__(self) -> str:
        return f"Field({self.key!r}, {self.type.name}, {self.value!r})"


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` in native byte order (lazily read arrays of big-endian files are views in file order)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _value_equal(vt: ValueType, a: Any, b: Any) -> bool:
    if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
        return np.asarray(a).tobytes() == np.asarray(b).tobytes()
    if vt == ValueType.BOOL:
        return int(a) == int(b)
    return bool(a == b)


def plain(vt: ValueType, value: Any) -> Any:
    if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
        return float(value)
    if vt == ValueType.ARRAY:
        return value.plain()
    if vt == ValueType.BOOL:
        return bool(value)
    return value


def infer_type(value: Any) -> ValueType:
    """The value type gguf-schema stores for a Python value when none is given.

    ``bool`` -> BOOL; ``int`` -> UINT32 when it fits, else INT32, UINT64, INT64 (the first
    that fits); ``float`` -> FLOAT32 (what GGUF writers use; pass ``numpy.float64`` or an
    explicit type for FLOAT64); numpy scalars -> their own type; ``str`` -> STRING;
    lists, tuples, 1-d numpy arrays and :class:`GGUFArray` -> ARRAY.

    >>> infer_type(True).name, infer_type(-1).name, infer_type(2**40).name, infer_type("a").name
    ('BOOL', 'INT32', 'UINT64', 'STRING')
    """
    if isinstance(value, (bool, np.bool_, BoolByte)):
        return ValueType.BOOL
    if isinstance(value, np.generic):
        try:
            return ValueType.from_dtype(value.dtype)
        except TypeError:
            raise GGUFBuildError(f"no GGUF value type for numpy {value.dtype} value", value=value) from None
    if isinstance(value, int):
        for vt in (ValueType.UINT32, ValueType.INT32, ValueType.UINT64, ValueType.INT64):
            lo, hi = _INT_RANGES[vt]
            if lo <= value <= hi:
                return vt
        raise GGUFBuildError(f"integer {value} does not fit in 64 bits", value=value)
    if isinstance(value, float):
        return ValueType.FLOAT32
    if isinstance(value, str):
        return ValueType.STRING
    if isinstance(value, (list, tuple, np.ndarray, GGUFArray)):
        return ValueType.ARRAY
    raise GGUFBuildError(f"no GGUF value type for a {type(value).__name__}", value=value)


def _infer_element_type(items: Any) -> ValueType:
    if isinstance(items, np.ndarray):
        try:
            return ValueType.from_dtype(items.dtype)
        except TypeError:
            raise GGUFBuildError(f"no GGUF element type for numpy dtype {items.dtype}", value=items.dtype) from None
    if len(items) == 0:
        raise GGUFBuildError(
            "the element type of an empty list is ambiguous: pass GGUFArray(ValueType.<type>, []) "
            "or an explicit element type",
            value=items,
        )
    if set(map(type, items)) == {str}:  # the common case (vocabularies), without a call per item
        return ValueType.STRING
    kinds = {infer_type(x) for x in items}
    if kinds <= {ValueType.STRING}:
        return ValueType.STRING
    if kinds <= {ValueType.BOOL}:
        return ValueType.BOOL
    if kinds <= {ValueType.ARRAY}:
        return ValueType.ARRAY
    if all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in items):
        if any(isinstance(x, (float, np.floating)) for x in items):
            return ValueType.FLOAT32
        lo, hi = min(items), max(items)
        for vt in (ValueType.UINT32, ValueType.INT32, ValueType.UINT64, ValueType.INT64):
            if _INT_RANGES[vt][0] <= lo and hi <= _INT_RANGES[vt][1]:
                return vt
        raise GGUFBuildError("integers in the list do not fit in 64 bits", value=(lo, hi))
    raise GGUFBuildError(
        "a GGUF array holds one element type; this list mixes " + ", ".join(sorted(k.name for k in kinds)),
        value=[type(x).__name__ for x in items[:8]],
    )


def coerce_value(
    value: Any, vt: ValueType | int | None = None, element_type: ValueType | int | None = None
) -> tuple[ValueType, Any]:
    """Check ``value`` against a value type (inferred when None) and put it in canonical form.

    Raises :class:`GGUFBuildError` for a value the type cannot hold (out of range, wrong kind).

    >>> coerce_value(300, ValueType.UINT8)
    Traceback (most recent call last):
    ...
    gguf_schema.errors.GGUFBuildError: 300 does not fit in UINT8 (range 0..255)
    """
    if vt is None:
        vt = infer_type(value)
    try:
        vt = ValueType(vt)
    except ValueError:
        raise GGUFBuildError(f"unknown value type {vt}", value=vt) from None
    if vt == ValueType.ARRAY:
        return vt, _coerce_array(value, element_type)
    if element_type is not None:
        raise GGUFBuildError(f"an element type only goes with ARRAY, not {vt.name}", value=element_type)
    return vt, _coerce_scalar(value, vt)


def _coerce_scalar(value: Any, vt: ValueType) -> Any:
    if vt in _INT_RANGES:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise GGUFBuildError(f"{vt.name} needs an integer, got {type(value).__name__} {value!r}", value=value)
        value = int(value)
        lo, hi = _INT_RANGES[vt]
        if not lo <= value <= hi:
            raise GGUFBuildError(f"{value} does not fit in {vt.name} (range {lo}..{hi})", value=value)
        return value
    if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise GGUFBuildError(f"{vt.name} needs a number, got {type(value).__name__} {value!r}", value=value)
        dtype = np.float32 if vt == ValueType.FLOAT32 else np.float64
        if isinstance(value, np.floating) and value.dtype == dtype:
            return value
        with np.errstate(over="ignore"):
            out = dtype(value)
        if np.isinf(out) and np.isfinite(float(value)):
            raise GGUFBuildError(f"{value!r} overflows {vt.name}", value=value)
        return out
    if vt == ValueType.BOOL:
        if isinstance(value, BoolByte):
            if not 0 <= int(value) <= 255:
                raise GGUFBuildError(f"a BOOL byte must be 0..255, got {int(value)}", value=value)
            return value
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
            return bool(value)
        raise GGUFBuildError(f"BOOL needs True or False, got {value!r}", value=value)
    if vt == ValueType.STRING:
        if not isinstance(value, str):
            raise GGUFBuildError(f"STRING needs a str, got {type(value).__name__}", value=value)
        return value
    raise GGUFBuildError(f"{vt.name} is not a scalar type", value=value)  # pragma: no cover


def _coerce_array(value: Any, element_type: ValueType | int | None) -> GGUFArray:
    if isinstance(value, GGUFArray):
        if element_type is not None and ValueType(element_type) != value.type:
            raise GGUFBuildError(
                f"array of {value.type.name} given where {ValueType(element_type).name} was asked", value=value
            )
        element_type, items = value.type, value.items
    elif isinstance(value, (list, tuple, np.ndarray)):
        items = value
        if element_type is None:
            element_type = _infer_element_type(items)
    else:
        raise GGUFBuildError(
            f"ARRAY needs a list, tuple, numpy array or GGUFArray, got {type(value).__name__}", value=value
        )
    try:
        et = ValueType(element_type)
    except ValueError:
        raise GGUFBuildError(f"unknown element type {element_type}", value=element_type) from None
    return GGUFArray(et, _coerce_items(items, et))


def _coerce_items(items: Any, et: ValueType) -> Any:
    if et == ValueType.STRING:
        if isinstance(items, LazyStrings):
            return items
        out = list(items)
        if set(map(type, out)) != {str}:  # (a check per item in C; the loop only for subclasses and errors)
            for i, s in enumerate(out):
                if not isinstance(s, str):
                    raise GGUFBuildError(f"item [{i}] of a STRING array is a {type(s).__name__}", value=s)
        return out
    if et == ValueType.ARRAY:
        return [_coerce_array(x, None) for x in items]
    dtype = et.numpy_dtype("little").newbyteorder("=")
    if isinstance(items, np.ndarray):
        if items.ndim != 1:
            raise GGUFBuildError(f"a metadata array must be 1-d, got shape {items.shape}", value=items.shape)
        arr = items
    else:
        for i, x in enumerate(items):
            try:
                _coerce_scalar(x, et)
            except GGUFBuildError as e:
                raise GGUFBuildError(f"item [{i}]: {e.reason}", value=x) from None
        if et == ValueType.BOOL:
            arr = np.array([int(x) for x in items], dtype=np.uint8).view(np.bool_)
        elif et in (ValueType.FLOAT32, ValueType.FLOAT64):
            arr = np.array([_coerce_scalar(x, et) for x in items], dtype=dtype) if len(items) else np.empty(0, dtype)
        else:
            arr = np.array([int(x) for x in items], dtype=dtype) if len(items) else np.empty(0, dtype)
    if arr.dtype != dtype:
        arr = _cast_checked(arr, et, dtype)
    elif not arr.dtype.isnative:
        arr = arr.astype(dtype)
    if arr.flags.writeable or not arr.flags.c_contiguous:
        arr = np.array(arr, order="C")  # our own read-only copy: later changes to the caller's array cannot reach it
        arr.flags.writeable = False
    return arr


def _cast_checked(arr: np.ndarray, et: ValueType, dtype: np.dtype) -> np.ndarray:
    if arr.dtype.kind in "iub" and et in _INT_RANGES and arr.size:
        lo, hi = _INT_RANGES[et]
        if int(arr.min()) < lo or int(arr.max()) > hi:
            raise GGUFBuildError(
                f"values {int(arr.min())}..{int(arr.max())} do not fit in {et.name}",
                value=(int(arr.min()), int(arr.max())),
            )
    elif arr.dtype.kind == "f" and et in _INT_RANGES:
        raise GGUFBuildError(f"a float array cannot be stored as {et.name}", value=arr.dtype)
    elif (
        et == ValueType.BOOL
        and arr.dtype.kind != "b"
        and (arr.dtype.kind not in "iu" or (arr.size and not np.isin(arr, (0, 1)).all()))
    ):
        raise GGUFBuildError("a BOOL array needs bools or 0/1", value=arr.dtype)
    if et in (ValueType.FLOAT32, ValueType.FLOAT64) and arr.dtype.kind == "f":
        with np.errstate(over="ignore"):
            out = arr.astype(dtype)
        if (np.isinf(out) & np.isfinite(arr)).any():
            raise GGUFBuildError(f"values overflow {et.name}", value=arr.dtype)
        return out
    return arr.astype(dtype)


def make_field(
    key: str, value: Any, type: ValueType | int | None = None, element_type: ValueType | int | None = None
) -> Field:
    """A :class:`Field` from a key and a Python value, typed explicitly or by :func:`infer_type`."""
    if not isinstance(key, str):
        raise GGUFBuildError(f"a key must be a str, got {builtins.type(key).__name__}", value=key)
    try:
        vt, canon = coerce_value(value, type, element_type)
    except GGUFBuildError as e:
        raise GGUFBuildError(e.reason, path=f"key {key!r}", value=e.value if e.has_value else value) from None
    return Field(key, vt, canon)
