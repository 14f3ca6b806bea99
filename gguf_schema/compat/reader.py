"""gguf-py's ``GGUFReader`` over our reader: the same fields, parts and tensors, at the cost of our open.

:class:`GGUFReader` opens a file the way the ``gguf`` package does (``np.memmap`` of the whole
file in mode ``r``, ``r+`` or ``c``) but parses it with :func:`gguf_schema.reader.read`: the
schema, its limits and its errors. What gguf-py builds at open -- a numpy view for every
key, every string and every array element, a million of them for a 262k-token vocabulary --
is built here only when asked for: an array's when it is, the others' a block of fields at a time:

* :attr:`ReaderField.parts` is laid out exactly as gguf-py lays it out (key length, key bytes,
  value type, then the value: one part per scalar, two per string, element type and count
  then each element's parts for an array; for a tensor info: name length, name, n_dims, dims,
  type, offset), as numpy views of the map in the file's byte order: writing into them in mode
  ``r+`` writes the file, in mode ``c`` only the private copy;
* :attr:`ReaderField.data` and :attr:`ReaderField.types` are worked out from the parsed values,
  without building the parts; :meth:`ReaderField.contents` of an array reads the map directly;
* a :class:`ReaderTensor` 's ``data`` and ``field`` are views made on first access.

Where the positions of the parts come from: each pair's offset as the schema recorded it, and
the sizes of the values the schema parsed (strings' own length fields, walked by the same
compiled scan the reader uses). Nothing here parses the file a second time. What a walk of every
part of a huge file makes (millions of views and lists, which gguf-py's callers keep) is made by numpy
indexing mapped over arrays of offsets, a slice at a time, with the cyclic collector off meanwhile
(``benchmarks/bench_compat_walk.py``).

>>> import io, os, tempfile, numpy as np, gguf_schema
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.gguf")
>>> gguf_schema.save(path, {"general.architecture": "llama", "tokenizer.ggml.tokens": ["a", "bc"]},
...                  {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
>>> reader = GGUFReader(path)
>>> list(reader.fields)
['GGUF.version', 'GGUF.tensor_count', 'GGUF.kv_count', 'general.architecture', 'tokenizer.ggml.tokens']
>>> field = reader.fields["tokenizer.ggml.tokens"]
>>> field.types, field.data, field.contents()
([<GGUFValueType.ARRAY: 9>, <GGUFValueType.STRING: 8>], [6, 8], ['a', 'bc'])
>>> [p.tolist() for p in field.parts]
[[21], [116, 111, 107, 101, 110, 105, 122, 101, 114, 46, 103, 103, 109, 108, 46, 116, 111, 107, 101, 110, 115], [9], [8], [2], [1], [97], [2], [98, 99]]
>>> t = reader.tensors[0]
>>> t.name, t.tensor_type.name, t.shape.tolist(), t.n_bytes, t.data[1].tolist()
('w', 'F32', [3, 2], 24, [3.0, 4.0, 5.0])
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import operator
import os
import sys
from collections import OrderedDict
from collections.abc import Iterator
from operator import itemgetter
from typing import Any, ClassVar, Literal, NamedTuple

import numpy as np

from ..errors import GGUFChangedError, GGUFError, GGUFFormatError, GGUFInternalError, GGUFTruncatedError, os_error
from ..format import keys as K
from ..format.layout import InfoOffsets, PairOffsets
from ..format.limits import Limits
from ..format.nodes import align_offset
from ..format.types import GGMLType, ValueType
from ..format.values import _U64_MAX, GGUFArray, LazyStrings, compiled_scan
from ..format.variant import Variant
from ..model import GGUFFile, Tensor
from ..reader import read
from .constants import GGUF_DEFAULT_ALIGNMENT, members
from .errors import CompatDuplicateKeyError, CompatShapeError, as_gguf_py
from .originals import original

__all__ = ["GGUFReader", "ReaderField", "ReaderTensor"]

#: numpy scalar type of each fixed-size value type (gguf-py's ``GGUFReader.gguf_scalar_to_np``)
_SCALAR_TYPES: dict[ValueType, type[np.generic]] = {
    ValueType.UINT8: np.uint8,
    ValueType.INT8: np.int8,
    ValueType.UINT16: np.uint16,
    ValueType.INT16: np.int16,
    ValueType.UINT32: np.uint32,
    ValueType.INT32: np.int32,
    ValueType.FLOAT32: np.float32,
    ValueType.UINT64: np.uint64,
    ValueType.INT64: np.int64,
    ValueType.FLOAT64: np.float64,
    ValueType.BOOL: np.bool_,
}

#: the plain tensor types gguf-py gives their own dtype (BF16 is not one: it comes as bytes)
_PLAIN_TENSOR_TYPES: dict[GGMLType, type[np.generic]] = {
    GGMLType.F16: np.float16,
    GGMLType.F32: np.float32,
    GGMLType.F64: np.float64,
    GGMLType.I8: np.int8,
    GGMLType.I16: np.int16,
    GGMLType.I32: np.int32,
    GGMLType.I64: np.int64,
}


def _decode(raw: Any) -> str:
    """A string's bytes as str; bytes that are not UTF-8 survive as surrogate escapes (gguf-py raises)."""
    return str(raw, "utf-8", "surrogateescape")


class _FieldRecord(NamedTuple):
    """gguf-py's ``ReaderField`` record (its field names, order and defaults), for when gguf-py is not installed."""

    offset: int
    name: str
    parts: list[np.ndarray] = []  # noqa: RUF012 (gguf-py's defaults)
    data: list[int] = [-1]  # noqa: RUF012
    types: list[Any] = []  # noqa: RUF012


class _TensorRecord(NamedTuple):
    """gguf-py's ``ReaderTensor`` record, for when gguf-py is not installed."""

    name: str
    tensor_type: Any
    shape: np.ndarray
    n_elements: int
    n_bytes: int
    data_offset: int
    data: np.ndarray
    field: Any


def _record(name: str, fallback: type) -> Any:
    """gguf-py's own record class of that name (a named tuple), as installed; ours when gguf-py is not."""
    theirs = original(name)
    return theirs if isinstance(theirs, type) and issubclass(theirs, tuple) and hasattr(theirs, "_fields") else fallback


_FieldBase: Any = _record("ReaderField", _FieldRecord)
_TensorBase: Any = _record("ReaderTensor", _TensorRecord)


class ReaderField(_FieldBase):
    """One field as gguf-py's ``ReaderField``: ``offset``, ``name``, ``parts``, ``data``, ``types``.

    A subclass of the installed gguf-py's own ``ReaderField`` (a named tuple), so
    ``isinstance(field, gguf.ReaderField)`` holds. Built by :class:`GGUFReader` with ``parts``,
    ``data`` and ``types`` left unbuilt until first read (the tuple holds where they come from in
    their places; unpacking, indexing, ``_asdict`` and ``_replace`` go through the attributes); constructed
    directly (``ReaderField(offset, name, parts, data, types)``) it holds what it is given, as
    gguf-py's does.
    """

    __slots__ = ()  # (no instance dict: a field opened lazily holds its index and its reader's _Views instead)

    def __new__(cls, *args: Any, **kw: Any) -> ReaderField:
        return super().__new__(cls, *args, **kw)

    def _built(self, what: str) -> bool:
        """Whether ``parts``, ``data`` or ``types`` (``what``) exists yet (always, for a field constructed directly)."""
        store: Any = tuple.__getitem__(self, 3)
        if type(store) is not _Views:
            return True
        return getattr(store, what)[tuple.__getitem__(self, 2)] is not None

    @property
    def parts(self) -> list[np.ndarray]:
        """The field's bytes as numpy views of the map, in gguf-py's layout (built on first access)."""
        store: Any = tuple.__getitem__(self, 3)
        if type(store) is not _Views:
            return tuple.__getitem__(self, 2)
        i: int = tuple.__getitem__(self, 2)
        built = store.parts[i]
        return built if built is not None else store.build_parts(i)

    @property
    def data(self) -> list[int]:
        """The indices of the parts that hold the value (for an array: each element's)."""
        store: Any = tuple.__getitem__(self, 3)
        if type(store) is not _Views:
            return store
        i: int = tuple.__getitem__(self, 2)
        built = store.data[i]
        return built if built is not None else store.build_data(i)

    @property
    def types(self) -> list[Any]:
        """The value type, then for an array its element type (and so on down the first element)."""
        store: Any = tuple.__getitem__(self, 3)
        if type(store) is not _Views:
            return tuple.__getitem__(self, 4)
        i: int = tuple.__getitem__(self, 2)
        built = store.types[i]
        return built if built is not None else store.build_types(i)

    def contents(self, index_or_slice: int | slice = slice(None)) -> Any:
        """The value as plain Python data: a scalar, a str, or for an array a list (an ``int`` index
        gives one element, a ``slice`` some); None for a tensor info. Arrays of arrays give their
        innermost values flattened, as gguf-py does."""
        store: Any = tuple.__getitem__(self, 3)
        if type(store) is _Views:
            i: int = tuple.__getitem__(self, 2)
            parts = store.parts[i]
            if parts is None:
                fast = store.layout(i).contents(index_or_slice)
                if fast is not _SLOW:
                    return fast
            elif store.vts[i] in _SCALAR_TYPES:  # (a pseudo-key's one part, or a pair's last)
                return parts[-1].tolist()[0]
        types = self.types
        if not types:
            return None
        parts, data = self.parts, self.data
        if types[0] == ValueType.ARRAY:
            if types[-1] == ValueType.STRING:
                if isinstance(index_or_slice, int):
                    return _decode(parts[data[index_or_slice]])
                return [_decode(parts[i]) for i in data[index_or_slice]]
            if isinstance(index_or_slice, int):
                return parts[data[index_or_slice]].tolist()[0]
            return [v for i in data[index_or_slice] for v in parts[i].tolist()]
        if types[0] == ValueType.STRING:
            return _decode(parts[-1])
        return parts[-1].tolist()[0]

    # the tuple protocol, through the attributes (a field opened lazily holds its index and its reader's _Views)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.offset, self.name, self.parts, self.data, self.types))

    def __getitem__(self, i: Any) -> Any:
        return tuple(self)[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # (gguf-py's holds lists: unhashable)

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    def __reduce__(self) -> Any:
        return (ReaderField, tuple(self))

    def __repr__(self) -> str:
        shown = "" if self._built("parts") else ", parts not built"
        return f"ReaderField(offset={self.offset}, name={self.name!r}, types={self.types!r}{shown})"


class ReaderTensor(_TensorBase):
    """One tensor as gguf-py's ``ReaderTensor``: ``name``, ``tensor_type``, ``shape`` (the stored dims,
    innermost first, as a view of the map), ``n_elements``, ``n_bytes``, ``data_offset`` (absolute),
    ``data`` and ``field`` (its tensor info).

    A subclass of the installed gguf-py's own ``ReaderTensor`` (a named tuple). ``data`` is a view
    of the map: plain types in their own dtype and the reversed shape; quantized types and BF16 as
    ``uint8`` rows of bytes. ``shape``, ``data`` and ``field`` are made on first access and kept
    (so ``tensor.data.resize(...)`` in place sticks, as gguf-py's scripts expect).
    """

    __slots__ = ()  # (no instance dict: a tensor opened lazily keeps its _TensorLayout in the tuple's field slot)

    def __new__(cls, *args: Any, **kw: Any) -> ReaderTensor:
        return super().__new__(cls, *args, **kw)

    @classmethod
    def _lazy(
        cls, name: str, tensor_type: Any, n_elements: int, n_bytes: int, data_offset: int, layout: _TensorLayout
    ) -> ReaderTensor:
        t: ReaderTensor = tuple.__new__(cls, (name, tensor_type, None, n_elements, n_bytes, data_offset, None, layout))
        return t

    @property
    def field(self) -> ReaderField:
        x: Any = tuple.__getitem__(self, 7)
        if type(x) is not _TensorLayout:
            return x
        if x.built_field is None:
            x.built_field = x.field()
        return x.built_field

    @property
    def shape(self) -> np.ndarray:
        """The stored dims, innermost first: the dims part of the tensor's info (a view of the map)."""
        if type(tuple.__getitem__(self, 7)) is not _TensorLayout:
            return tuple.__getitem__(self, 2)
        return self.field.parts[3]

    @property
    def data(self) -> np.ndarray:
        x: Any = tuple.__getitem__(self, 7)
        if type(x) is not _TensorLayout:
            return tuple.__getitem__(self, 6)
        if x.built_data is None:
            x.built_data = x.data()
        return x.built_data

    def __iter__(self) -> Iterator[Any]:
        return (getattr(self, name) for name in self._fields)

    def __getitem__(self, i: Any) -> Any:
        return tuple(self)[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    def __reduce__(self) -> Any:
        return (ReaderTensor, tuple(self))

    def __repr__(self) -> str:
        return (
            f"ReaderTensor(name={self.name!r}, tensor_type={self.tensor_type!r}, n_elements={self.n_elements}, "
            f"n_bytes={self.n_bytes}, data_offset={self.data_offset})"
        )


class GGUFReader:
    """gguf-py's ``GGUFReader`` on our reader (see the module docstring).

    Args:
        path: the file's path.
        mode: ``"r"`` (read-only map), ``"r+"`` (writes through ``parts`` and tensor ``data`` go to
            the file) or ``"c"`` (copy on write: changes stay in memory).
        limits: our :class:`~gguf_schema.format.limits.Limits` (the defaults accept every real file).

    Attributes:
        fields: ordered ``key -> ReaderField``, the pseudo-keys ``GGUF.version``,
            ``GGUF.tensor_count`` and ``GGUF.kv_count`` first.
        tensors: the tensors in file order (:class:`ReaderTensor`).
        byte_order: ``"I"`` when the file's byte order is this machine's, ``"S"`` when swapped.
        endianess: the file's byte order (:class:`~gguf_schema.compat.constants.GGUFEndian`).
        alignment: ALIGNMENT; data_offset: where the data section starts.
        data: the whole file as a ``numpy.memmap`` of ``uint8``.

    A file that cannot be read raises our :class:`~gguf_schema.errors.GGUFError` subclasses (a
    malformed file is a :class:`~gguf_schema.errors.GGUFFormatError`, also a ``ValueError`` as
    gguf-py's errors are), never a numpy error or a crash.
    """

    byte_order: Literal["I", "S"] = "I"
    alignment: int = GGUF_DEFAULT_ALIGNMENT
    data_offset: int
    gguf_scalar_to_np: ClassVar[dict[Any, type[np.generic]]] = {
        members()[1][int(k)]: v for k, v in _SCALAR_TYPES.items()
    }

    def __init__(
        self, path: os.PathLike[str] | str, mode: Literal["r", "r+", "c"] = "r", *, limits: Limits | None = None
    ):
        if mode not in ("r", "r+", "c"):
            raise ValueError(f"mode must be 'r', 'r+' or 'c', got {mode!r}")
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        try:
            parsed = read(path, lazy=True, limits=limits)
            try:
                self.data = _map(path, mode, parsed)
                self._open(parsed)
            finally:
                parsed.close()  # lazily read values keep the bytes they view alive
        except GGUFError as e:
            raise as_gguf_py(e) from None  # also the builtin gguf-py raises for the same defect (.errors)

    def _open(self, f: GGUFFile) -> None:
        self.byte_order = "I" if f.byte_order == sys.byteorder else "S"
        quant_types, value_types, endians = members()
        self.endianess = endians[0 if f.byte_order == "little" else 1]
        _check_alignment(f)
        self.alignment = f.alignment
        # where ggml and gguf-py put the data section: also past the end of a file without tensors
        # whose padding was left out (our reader says where the file ends)
        self.data_offset = align_offset(f.metadata_end, f.alignment)
        self._view = _Views(self.data, self.byte_order, f.variant, value_types)
        self.fields: OrderedDict[str, ReaderField] = OrderedDict()
        size = self._view.size
        count_size = self._view.length_size  # v1 stored the counts as uint32
        with _no_gc():  # a million small objects: the collector would walk them again and again meanwhile
            self._fields(f, count_size)
            self.tensors: list[ReaderTensor] = []
            seen: set[str] = set()
            # the installed gguf-py's own limit, when it has one (llama.cpp's in-tree gguf-py refuses more dimensions
            # than ggml's GGML_MAX_DIMS; gguf-py 0.19.0 on PyPI has no such limit and reads them)
            max_dims = original("GGML_MAX_DIMS")
            for t in f.tensor_list:
                if isinstance(max_dims, int) and len(t.dims) > max_dims:
                    raise GGUFFormatError(
                        f"tensor {t.name!r} has {len(t.dims)} dimensions, more than GGML_MAX_DIMS ({max_dims}): the "
                        "installed gguf-py refuses it",
                        offset=t.info_offset,
                        path=f"tensor {t.name!r}.n_dims",
                        value=len(t.dims),
                    )
                if t.name in seen:
                    raise GGUFFormatError(
                        f"duplicate tensor name {t.name!r} (gguf-py refuses files that repeat a name)",
                        offset=t.info_offset,
                        path=f"tensor {t.name!r}",
                        value=t.name,
                    )
                seen.add(t.name)
                self.tensors.append(self._tensor(t, size, quant_types))

    def _fields(self, f: GGUFFile, count_size: int) -> None:
        view, fields = self._view, self.fields
        count_type = ValueType.UINT64 if count_size == 8 else ValueType.UINT32
        for offset, name, vt in (
            (4, "GGUF.version", ValueType.UINT32),
            (8, "GGUF.tensor_count", count_type),
            (8 + count_size, "GGUF.kv_count", count_type),
        ):
            fields[name] = view.add(offset, name, None, vt, None)
        records = f.fields.records
        for record in records:
            if record.offset is None:
                raise GGUFInternalError("record.offset is not None does not hold")
        keys = [r.key for r in records]
        fields.update(zip(keys, view.extend(records), strict=True))
        if len(fields) != 3 + len(records):  # a key twice (or a pseudo-key's name): the first one repeated
            seen = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
            for record in records:
                if record.key in seen:
                    raise CompatDuplicateKeyError(
                        f"duplicate key {record.key!r} (gguf-py refuses files that repeat a key)",
                        offset=record.offset,
                        path=f"metadata_kv {record.key!r}",
                        value=record.key,
                    )
                seen.add(record.key)

    def _tensor(self, t: Tensor, size: int, quant_types: dict[int, Any]) -> ReaderTensor:
        gt = t.known_type()
        n_elements = math.prod(t.dims)
        n_bytes = n_elements * gt.type_size // gt.block_size
        if gt.quantized and not t.dims:
            raise CompatShapeError(
                f"a {gt.name} tensor needs a dimension: its one element is not a whole block of {gt.block_size}",
                offset=t.info_offset,
                path=f"tensor {t.name!r}",
                value=t.dims,
            )
        if gt.quantized and t.dims[0] % gt.block_size:
            raise GGUFFormatError(
                f"{gt.name} rows of {t.dims[0]} elements are not whole blocks of {gt.block_size}",
                offset=t.info_offset,
                path=f"tensor {t.name!r}",
                value=t.dims,
            )
        start = self.data_offset + t.stored_offset
        if n_bytes and start + n_bytes > size:  # (an empty tensor may sit where the data section would start)
            raise GGUFTruncatedError(
                f"tensor data [{start}, {start + n_bytes}) runs past the end of the file ({size} bytes)",
                offset=t.info_offset,
                path=f"tensor {t.name!r}",
                value=n_bytes,
            )
        layout = _TensorLayout(self._view, t, gt, start)
        if not n_elements and max(t.dims, default=0) > 1:
            _check_representable(t, layout)
        return ReaderTensor._lazy(t.name, quant_types[int(gt)], n_elements, n_bytes, start, layout)

    def get_field(self, key: str) -> ReaderField | None:
        """The field of ``key`` (pseudo-keys included), or None."""
        return self.fields.get(key, None)

    def get_tensor(self, idx: int) -> ReaderTensor:
        """The tensor at index ``idx`` of :attr:`tensors`."""
        return self.tensors[idx]


def _check_alignment(f: GGUFFile) -> None:
    """Refuse what gguf-py and ggml refuse: ``general.alignment`` not a UINT32, or not a power of two.

    (Our reader reads such files; a gguf-py caller would get a reader whose ``alignment`` and
    ``data_offset`` gguf-py never gives.)"""
    record = next((r for r in f.fields.records if r.key == K.GENERAL_ALIGNMENT), None)
    if record is None:
        return
    if record.type != ValueType.UINT32:
        raise GGUFFormatError(
            f"general.alignment is stored as {record.type.name}, not UINT32 (gguf-py and ggml refuse the file)",
            offset=record.offset,
            path=f"metadata_kv {K.GENERAL_ALIGNMENT!r}",
            value=record.value,
        )
    a = int(record.value)
    if a == 0 or a & (a - 1):
        raise GGUFFormatError(
            f"general.alignment {a} is not a power of two (gguf-py and ggml refuse the file)",
            offset=record.offset,
            path=f"metadata_kv {K.GENERAL_ALIGNMENT!r}",
            value=a,
        )


def _check_representable(t: Tensor, layout: _TensorLayout) -> None:
    """A tensor of no elements whose other dims numpy cannot multiply (2^62 x 0): refused at open, as
    gguf-py refuses it (numpy's ``ValueError`` there), in our error family here."""
    try:
        layout.data()
    except ValueError as e:
        raise GGUFFormatError(
            f"a tensor of no elements whose shape numpy cannot represent ({e})",
            offset=t.info_offset,
            path=f"tensor {t.name!r}",
            value=t.dims,
        ) from None


def _map(path: os.PathLike[str] | str, mode: Literal["r", "r+", "c"], parsed: GGUFFile) -> np.memmap:
    """The whole file mapped as gguf-py maps it, after checking that ``path`` still names the file parsed."""
    fd = parsed.fileno()
    try:
        with open(path, "r+b" if mode == "r+" else "rb") as fh:
            if fd is not None:
                a, b = os.fstat(fd), os.fstat(fh.fileno())
                if (a.st_dev, a.st_ino, a.st_size) != (b.st_dev, b.st_ino, b.st_size):
                    raise GGUFChangedError("the file was replaced or resized while it was being opened", path=str(path))
            return np.memmap(fh, mode=mode)
    except OSError as e:
        raise os_error(e, os.fspath(path)) from None


class _Views:
    """Numpy views of the map at given offsets, in the file's byte order, as gguf-py makes them; and the
    fields of a reader, one entry per field in lists (where each pair lies, its key, value type and
    parsed value; its parts, data and types once built), so that a field is a tuple and nothing more."""

    def __init__(self, data: np.memmap, byte_order: str, variant: Variant, value_types: dict[int, Any]):
        self.value_types = value_types
        self.u8: np.ndarray = data.view(np.ndarray)  # plain ndarray views: indexing np.memmap runs Python code
        self.size = self.u8.size
        self.order = byte_order
        self.variant = variant
        self.length_size = length_size = variant.size_t
        self.length_type: type[np.generic] = np.uint64 if length_size == 8 else np.uint32
        self._phases: dict[tuple[str, int], np.ndarray] = {}
        self._dtypes: dict[type[np.generic], np.dtype] = {}
        # the fields, by index: what the schema parsed, then what is built from it (None until asked for)
        self.offsets: list[int] = []
        self.keys: list[str | None] = []  # None: a pseudo-key of the header (GGUF.version ...)
        self.vts: list[ValueType] = []
        self.values: list[Any] = []
        self.parts: list[list[np.ndarray] | None] = []
        self.data: list[list[int] | None] = []
        self.types: list[list[Any] | None] = []
        self.blocks = 0  # how many blocks were built: the next is larger (see _block)

    def add(self, offset: int, name: str, key: str | None, vt: ValueType, value: Any) -> ReaderField:
        """A new field, opened lazily (its parts, data and types built when first asked for); ``key`` None
        for a pseudo-key of the header, ``name``."""
        i = len(self.offsets)
        self.offsets.append(offset)
        self.keys.append(key)
        self.vts.append(vt)
        self.values.append(value)
        self.parts.append(None)
        self.data.append(None)
        self.types.append(None)
        f: ReaderField = tuple.__new__(ReaderField, (offset, name, i, self, None))
        return f

    def extend(self, records: list[Any]) -> list[ReaderField]:
        """:meth:`add` for each of the parsed pairs ``records`` (:class:`~gguf_schema.format.values.Field`), at once."""
        n, first = len(records), len(self.offsets)
        offsets = [r.offset for r in records]
        keys = [r.key for r in records]
        self.offsets += offsets
        self.keys += keys
        self.vts += [r.type for r in records]
        self.values += [r.value for r in records]
        self.parts += [None] * n
        self.data += [None] * n
        self.types += [None] * n
        rows = zip(offsets, keys, range(first, first + n), itertools.repeat(self), itertools.repeat(None))
        return list(map(tuple.__new__, itertools.repeat(ReaderField), rows))

    def layout(self, i: int) -> _Layout:
        """Field ``i``'s value, laid out in the map (made for the moment: it computes, it holds nothing)."""
        return _Layout(self, self.offsets[i], self.keys[i], self.vts[i], self.values[i])

    def dtype(self, t: type[np.generic]) -> np.dtype:
        d = self._dtypes.get(t)
        if d is None:
            d = np.dtype(t)
            d = self._dtypes[t] = d.newbyteorder("S") if self.order == "S" else d
        return d

    def one(self, offset: int, t: type[np.generic]) -> np.ndarray:
        """A one-element view of ``t`` at ``offset`` (as :meth:`at` gives it), by one numpy index of a row array."""
        size = self.dtype(t).itemsize
        return self.rows_at(offset % size, t)[offset // size]

    def at(self, offset: int, t: type[np.generic], count: int = 1) -> np.ndarray:
        d = self.dtype(t)
        return self.u8[offset : offset + d.itemsize * count].view(d)

    def rows(self, offset: int, t: type[np.generic], count: int) -> list[np.ndarray]:
        """``count`` consecutive one-element views (one loop in C)."""
        return list(self.at(offset, t, count).reshape(count, 1))

    def rows_at(self, phase: int, t: type[np.generic]) -> np.ndarray:
        """The map from byte ``phase`` on as ``(n, 1)`` rows of ``t``: row ``i`` is a one-element view at
        ``phase + i * itemsize``, made by one numpy index (the string lengths of a vocabulary)."""
        d = self.dtype(t)
        key = (d.str, phase)
        rows = self._phases.get(key)
        if rows is None:
            n = (self.size - phase) // d.itemsize
            rows = self._phases[key] = self.u8[phase : phase + n * d.itemsize].view(d).reshape(n, 1)
        return rows

    def ones(self, offsets: np.ndarray, t: type[np.generic]) -> list[np.ndarray]:
        """One-element views of ``t`` at each of ``offsets`` (as :meth:`one` gives them), in their order: one
        numpy index each, by ``map`` over the row array of each byte phase (loops in C). Made a slice of
        offsets at a time, so that the indices, Python ints made for the moment, are few at any time (a
        million of them between the views kept would leave the memory they took spread among the views)."""
        if len(offsets) <= _SLICE:
            return self._ones(offsets, t)
        out: list[np.ndarray] = []
        for a in range(0, len(offsets), _SLICE):
            out += self._ones(offsets[a : a + _SLICE], t)
        return out

    def _ones(self, offsets: np.ndarray, t: type[np.generic]) -> list[np.ndarray]:
        n, size = len(offsets), self.dtype(t).itemsize
        if n == 0:
            return []
        phase = offsets % size
        first = int(phase[0])
        if not (phase != first).any():  # one phase (every record laid out alike): no reordering
            return list(map(self.rows_at(first, t).__getitem__, (offsets // size).tolist()))
        order = np.argsort(phase, kind="stable")  # grouped by phase: one row array each
        grouped: list[np.ndarray] = []
        sorted_phase, sorted_offsets = phase[order], offsets[order]
        for k in np.unique(phase).tolist():
            at = sorted_offsets[sorted_phase == k]
            grouped.extend(map(self.rows_at(k, t).__getitem__, (at // size).tolist()))
        back = np.empty(n, np.int64)
        back[order] = np.arange(n)
        return [grouped[i] for i in back.tolist()] if n < 2 else list(itemgetter(*back.tolist())(grouped))

    # the parts, data and types of fields that are not arrays are built a block of fields at a time (numpy
    # does the views of a block in a few calls), with the collector off; an array's are built alone, when asked

    def _block(self, i: int, built: list[Any]) -> list[int]:
        """The fields built with field ``i``: those from it on that are not arrays and not yet built, within a
        span of :data:`_BLOCK` fields at first, twice as long every other block: a walk of every field builds
        them in a few blocks (each with the collector off), and a look at one field builds a thousand."""
        vts = self.vts
        self.blocks += 1
        span = max(_BLOCK, _BLOCK << min(self.blocks, 40) // 2)
        return [j for j in range(i, min(i + span, len(vts))) if built[j] is None and vts[j] != ValueType.ARRAY]

    def build_parts(self, i: int) -> list[np.ndarray]:
        with _no_gc():
            parts = self.parts
            if self.vts[i] == ValueType.ARRAY:
                built = parts[i] = self.layout(i).parts()
                return built
            todo = self._block(i, parts)
            keys, vts = self.keys, self.vts
            self._scalar_parts([j for j in todo if keys[j] is not None and vts[j] in _SCALAR_TYPES])
            for j in todo:
                if parts[j] is None:
                    parts[j] = self.layout(j).parts()
            return parts[i]  # type: ignore[return-value]

    def _scalar_parts(self, pairs: list[int]) -> None:
        """The parts of key-value pairs of one scalar value each (key length, key, value type, value), at once."""
        n = len(pairs)
        if n == 0:
            return
        offsets, keys, vts = self.offsets, self.keys, self.vts
        starts = np.fromiter(map(offsets.__getitem__, pairs), np.int64, n)
        named: list[str] = list(map(keys.__getitem__, pairs))  # type: ignore[arg-type]  # (pairs: each has a key)
        if all(map(str.isascii, named)):
            sizes = np.fromiter(map(len, named), np.int64, n)
        else:
            sizes = np.fromiter((len(k.encode("utf-8", "surrogateescape")) for k in named), np.int64, n)
        key_at = starts + self.length_size
        type_at = key_at + sizes
        value_at = type_at + 4
        lengths = self.ones(starts, self.length_type)
        names = list(map(self.u8.__getitem__, map(slice, key_at.tolist(), type_at.tolist())))
        kinds = self.ones(type_at, np.uint32)
        codes = np.fromiter(map(vts.__getitem__, pairs), np.int64, n)
        distinct = np.unique(codes).tolist()
        if len(distinct) == 1:
            values = self.ones(value_at, _SCALAR_TYPES[ValueType(distinct[0])])
        else:
            values = [self.u8] * n
            for code in distinct:
                sel = np.flatnonzero(codes == code)
                for k, v in zip(sel.tolist(), self.ones(value_at[sel], _SCALAR_TYPES[ValueType(code)]), strict=True):
                    values[k] = v
        _put(self.parts, pairs, list(map(list, zip(lengths, names, kinds, values, strict=True))))

    def build_data(self, i: int) -> list[int]:
        with _no_gc():
            data = self.data
            if self.vts[i] == ValueType.ARRAY:
                built = data[i] = self.layout(i).data()
                return built
            keys, vts, string = self.keys, self.vts, ValueType.STRING
            todo = self._block(i, data)
            _put(data, todo, [[0] if keys[j] is None else [4] if vts[j] == string else [3] for j in todo])
            return data[i]  # type: ignore[return-value]

    def build_types(self, i: int) -> list[Any]:
        with _no_gc():
            types = self.types
            if self.vts[i] == ValueType.ARRAY:
                built = types[i] = self.layout(i).types()
                return built
            named, vts = self.value_types, self.vts
            todo = self._block(i, types)
            _put(types, todo, [[named[vts[j]]] for j in todo])
            return types[i]  # type: ignore[return-value]


def _put(into: list[Any], where: list[int], values: list[Any]) -> None:
    """``into[where[k]] = values[k]`` for each k (one slice assignment when ``where`` is a run of indices)."""
    if where and where[-1] - where[0] + 1 == len(where):
        into[where[0] : where[-1] + 1] = values
        return
    for j, x in zip(where, values, strict=True):
        into[j] = x


#: the fields whose parts, data or types are built together (those that are not arrays)
_BLOCK = 1024
#: the views :meth:`_Views.ones` makes from one slice of offsets
_SLICE = 1 << 15


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic collector off while many small objects are made (none of them in a cycle): it would
    otherwise walk every object made so far, again and again, as the count grows."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Slow:
    """The marker of a value :meth:`_Layout.contents` leaves to the parts."""


_SLOW: Any = _Slow()


class _Layout:
    """Where one field's value lies in the map, from the parsed pair: computes its parts, data, types and contents."""

    __slots__ = ("key", "offset", "value", "view", "vt")

    def __init__(self, view: _Views, offset: int, key: str | None, vt: ValueType, value: Any):
        self.view, self.offset, self.key, self.vt, self.value = view, offset, key, vt, value

    def _value_at(self) -> int:
        if self.key is None:
            return self.offset
        return PairOffsets.of(self.view.variant, self.offset, self.key).value

    def parts(self) -> list[np.ndarray]:
        v = self.view
        if self.key is None:  # a pseudo-key of the header
            return [v.at(self.offset, _SCALAR_TYPES[self.vt])]
        at = PairOffsets.of(v.variant, self.offset, self.key)
        out = [v.one(at.start, v.length_type), v.u8[at.key : at.value_type], v.one(at.value_type, np.uint32)]
        _value_parts(v, self.vt, self.value, at.value, out)
        return out

    def data(self) -> list[int]:
        if self.key is None:
            return [0]
        if self.vt != ValueType.ARRAY:
            return [4] if self.vt == ValueType.STRING else [3]
        et, n = self.value.type, len(self.value.items)
        if et in _SCALAR_TYPES:  # (the key's three parts, the element type and count, then one part each)
            return list(range(5, 5 + n))
        if et == ValueType.STRING:  # (a length and the bytes each: the bytes)
            return list(range(6, 6 + 2 * n, 2))
        return [3 + i for i in _data_indices(self.vt, self.value)]

    def types(self) -> list[Any]:
        vts = self.view.value_types
        return [vts[int(t)] for t in _types(self.vt, self.value)]

    def contents(self, index_or_slice: int | slice) -> Any:
        """The value read from the map without building parts, where that is simple (flat arrays); else _SLOW."""
        if self.vt != ValueType.ARRAY or self.value.type == ValueType.ARRAY or not len(self.value):
            return _SLOW
        v, et, n = self.view, self.value.type, len(self.value)
        start = self._value_at() + 4 + v.length_size
        if et == ValueType.STRING:
            items = self.value.items
            nbytes = len(items.raw) if isinstance(items, LazyStrings) else _strings_size(items, v.length_size)
            raw = v.u8.data[start : start + nbytes]
            fmt = ("<" if (sys.byteorder == "little") == (v.order == "I") else ">") + (
                "Q" if v.length_size == 8 else "I"
            )
            strings = _decode_strings(raw, n, fmt)
            return strings[index_or_slice]
        return v.at(start, _SCALAR_TYPES[et], n)[index_or_slice].tolist()


def _decode_strings(raw: Any, n: int, fmt: str) -> list[str]:
    if compiled_scan is not None:
        _, _, items = compiled_scan.decode(raw, 0, n, 8 if fmt[1] == "Q" else 4, fmt[0] == ">", _U64_MAX)
        if items is not None:
            return items
    return LazyStrings(raw, n, fmt).tolist()


def _strings_size(items: list[str], length_size: int) -> int:
    return sum(length_size + len(s.encode("utf-8", "surrogateescape")) for s in items)


def _value_size(vt: ValueType, value: Any, length_size: int) -> int:
    """Bytes a value takes in the file, from the parsed value."""
    if vt in _SCALAR_TYPES:
        return vt.itemsize
    if vt == ValueType.STRING:
        return length_size + len(value.encode("utf-8", "surrogateescape"))
    items = value.items
    size = 4 + length_size
    if value.type in _SCALAR_TYPES:
        return size + value.type.itemsize * len(items)
    if value.type == ValueType.STRING:
        return size + (len(items.raw) if isinstance(items, LazyStrings) else _strings_size(items, length_size))
    return size + sum(_value_size(ValueType.ARRAY, a, length_size) for a in items)


def _value_parts(v: _Views, vt: ValueType, value: Any, at: int, out: list[np.ndarray]) -> int:
    """Append the parts of a value at offset ``at`` to ``out``; return where the value ends."""
    scalar = _SCALAR_TYPES.get(vt)
    if scalar is not None:
        out.append(v.one(at, scalar))
        return at + vt.itemsize
    ls = v.length_size
    if vt == ValueType.STRING:
        n = len(value.encode("utf-8", "surrogateescape"))
        out.append(v.one(at, v.length_type))
        out.append(v.u8[at + ls : at + ls + n])
        return at + ls + n
    et, items = value.type, value.items
    out.append(v.one(at, np.uint32))
    out.append(v.one(at + 4, v.length_type))
    at += 4 + ls
    n = len(items)
    scalar = _SCALAR_TYPES.get(et)
    if scalar is not None:
        out.extend(v.rows(at, scalar, n))
        return at + et.itemsize * n
    if et == ValueType.STRING:
        if isinstance(items, LazyStrings):
            starts = items.starts() + at
        else:
            sizes = [ls + len(s.encode("utf-8", "surrogateescape")) for s in items]
            starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64) + at
        out.extend(_string_parts(v, starts))
        return int(starts[n])
    end = _arrays_of_numbers_parts(v, items, at, out)
    if end is not None:
        return end
    for inner in items:
        at = _value_parts(v, ValueType.ARRAY, inner, at, out)
    return at


#: bytes of one item of each numeric value type (:attr:`ValueType.itemsize`, looked up once)
_ITEMSIZES: dict[ValueType, int] = {t: t.itemsize for t in _SCALAR_TYPES}


def _of_numbers(items: Any) -> bool:
    """Whether every item of an array of arrays is an array of numbers (else it is walked one by one)."""
    return all(map(_ITEMSIZES.__contains__, map(_TYPE, items)))


_TYPE = operator.attrgetter("type")


def _slices(items: Any) -> Iterator[Any]:
    """``items`` a slice at a time (see :data:`_SLICE`): what numpy makes for one slice is dropped before the next."""
    for a in range(0, len(items), _SLICE):
        yield items[a : a + _SLICE]


def _arrays_of_numbers_parts(v: _Views, items: Any, at: int, out: list[np.ndarray]) -> int | None:
    """The parts of an array of arrays of numbers (each inner array's element type, count, then its
    items), appended to ``out`` in file order, by numpy over a slice of inner arrays at a time instead of
    a walk of each; returns where it ends, or None (nothing appended) for another array of arrays."""
    if not _of_numbers(items):
        return None
    for part in _slices(items):
        at = _numbers_parts(v, part, at, out)
    return at


def _numbers_parts(v: _Views, items: Any, at: int, out: list[np.ndarray]) -> int:
    n = len(items)
    isz = np.fromiter(map(_ITEMSIZES.__getitem__, map(_TYPE, items)), np.int64, n)
    counts = np.fromiter(map(len, items), np.int64, n)
    sizes = 4 + v.length_size + counts * isz
    ends = at + np.cumsum(sizes)
    starts = ends - sizes
    kinds = v.ones(starts, np.uint32)
    lengths = v.ones(starts + 4, v.length_type)
    total = int(counts.sum())
    if total == 0:  # empty inner arrays: their two parts each
        out.extend(itertools.chain.from_iterable(zip(kinds, lengths, strict=True)))
        return int(ends[-1])
    inner = np.repeat(np.arange(n), counts)  # the inner array of each item
    before = np.cumsum(counts) - counts  # items before each inner array
    j = np.arange(total) - before[inner]  # each item's index in its inner array
    item_at = starts[inner] + 4 + v.length_size + j * isz[inner]
    codes = np.fromiter(map(_TYPE, items), np.int64, n)[inner]
    values: list[np.ndarray] = [v.u8] * total
    for code in np.unique(codes).tolist():
        sel = np.flatnonzero(codes == code)
        views = v.ones(item_at[sel], _SCALAR_TYPES[ValueType(code)])
        if len(sel) == total:
            values = views
        else:
            for i, view in zip(sel.tolist(), views, strict=True):
                values[i] = view
    # every part's place in the value's parts: inner array i's kind at 2i + (items before it), its count next
    base = 2 * np.arange(n) + before
    place = np.concatenate([base, base + 1, base[inner] + 2 + j])
    gathered = kinds + lengths + values
    out.extend(itemgetter(*np.argsort(place, kind="stable").tolist())(gathered))
    return int(ends[-1])


def _string_parts(v: _Views, starts: np.ndarray) -> Iterator[np.ndarray]:
    """The parts of ``len(starts) - 1`` strings whose length fields start at ``starts`` (and the last ends
    at ``starts[-1]``): a length view and a bytes view each, in order. The views are made by ``map``
    over numpy's own indexing (loops in C), a slice of strings at a time (see :meth:`_Views.ones`)."""
    n, ls = len(starts) - 1, v.length_size
    for a in range(0, n, _SLICE):
        first = starts[a : min(a + _SLICE, n)]
        lengths = v.ones(first, v.length_type)
        strings = map(v.u8.__getitem__, map(slice, (first + ls).tolist(), starts[a + 1 : a + 1 + len(first)].tolist()))
        yield from itertools.chain.from_iterable(zip(lengths, strings, strict=True))


def _data_indices(vt: ValueType, value: Any) -> list[int]:
    """The indices (within the value's own parts) of the parts that hold the data, as gguf-py gives them."""
    if vt in _SCALAR_TYPES:
        return [0]
    if vt == ValueType.STRING:
        return [1]
    et, items, n = value.type, value.items, len(value.items)
    if et in _SCALAR_TYPES:
        return list(range(2, 2 + n))
    if et == ValueType.STRING:
        return list(range(3, 3 + 2 * n, 2))
    if _of_numbers(items):  # arrays of numbers: each item's part, (its inner array's first part) + 2 + its index
        indices: list[int] = []
        base = 2  # the first part of the slice's first inner array
        for part in _slices(items):
            counts = np.fromiter(map(len, part), np.int64, len(part))
            total = int(counts.sum())
            if total:
                inner = np.repeat(np.arange(len(part)), counts)
                before = np.cumsum(counts) - counts
                first = base + 2 * np.arange(len(part)) + before
                indices += (first[inner] + 2 + np.arange(total) - before[inner]).tolist()
            base += 2 * len(part) + total
        return indices
    out: list[int] = []
    base = 2
    for inner in items:
        out.extend(base + i for i in _data_indices(ValueType.ARRAY, inner))
        base += _part_count(inner)
    return out


def _part_count(a: GGUFArray) -> int:
    """How many parts an inner array (its element type, count and items) has."""
    if a.type in _SCALAR_TYPES:
        return 2 + len(a.items)
    if a.type == ValueType.STRING:
        return 2 + 2 * len(a.items)
    return 2 + sum(_part_count(x) for x in a.items)


def _types(vt: ValueType, value: Any) -> list[ValueType]:
    """The value type, then for an array its element type, and so on down the first element (an empty
    array stops the list, as in gguf-py)."""
    if vt != ValueType.ARRAY:
        return [vt]
    if not len(value.items):
        return [vt]
    first = value.items[0] if value.type == ValueType.ARRAY else None
    return [vt, *_types(value.type, first)]


class _TensorLayout:
    """Where one tensor's info and data lie in the map: makes its field and data views on demand."""

    __slots__ = ("built_data", "built_field", "gt", "start", "t", "view")

    def __init__(self, view: _Views, t: Tensor, gt: GGMLType, start: int):
        self.view, self.t, self.gt, self.start = view, t, gt, start
        self.built_field: ReaderField | None = None  # what the ReaderTensor built, kept here
        self.built_data: np.ndarray | None = None

    def field(self) -> ReaderField:
        v, t = self.view, self.t
        at = InfoOffsets.of(v.variant, t.info_offset, t.name, len(t.dims))
        parts = [
            v.at(at.start, v.length_type),
            v.u8[at.name : at.n_dimensions],
            v.at(at.n_dimensions, np.uint32),
            v.at(at.dimensions, v.length_type, len(t.dims)),
            v.at(at.type, np.uint32),
            v.at(at.offset, np.uint64),
        ]
        return ReaderField(at.start, t.name, parts, [1, 3, 4, 5], [])

    def data(self) -> np.ndarray:
        t, gt, v = self.t, self.gt, self.view
        shape = tuple(reversed(t.dims))
        plain = _PLAIN_TENSOR_TYPES.get(gt)
        if plain is not None:
            return v.at(self.start, plain, math.prod(t.dims)).reshape(shape)
        n_bytes = math.prod(t.dims) * gt.type_size // gt.block_size
        # rows of bytes; a BF16 tensor of no dimension is its one element's bytes (gguf-py cannot read it)
        shape = (*shape[:-1], shape[-1] // gt.block_size * gt.type_size) if shape else (n_bytes,)
        return v.u8[self.start : self.start + n_bytes].reshape(shape)
