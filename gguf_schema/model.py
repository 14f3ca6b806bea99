"""The model of a GGUF file: :class:`GGUFFile`, its :class:`Fields` and :class:`Metadata`, its :class:`Tensor` s.

These are the objects users hold. They are built by :mod:`gguf_schema.reader` from the records
the schema parses, and turned back into records by :mod:`gguf_schema.writer`; this module does
no I/O of its own. A file's bytes are reached through its :class:`Storage` (the reader's
memory map or buffer), which tensors hold directly: no object here refers back to the file that
contains it, so a file that goes out of scope is freed at once (no reference cycles).

>>> import io, numpy as np, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.architecture": "llama"}, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
>>> with gguf_schema.open(buf.getvalue()) as f:
...     t = f.tensors["w"]
...     print(t.type.name, t.shape, t.dims, t.data[1].tolist(), np.asarray(t).sum())
F32 (2, 3) (3, 2) [3.0, 4.0, 5.0] 15.0
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import math
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Protocol

import numpy as np

from . import wiring
from .errors import GGUFError, GGUFFormatError, GGUFInternalError, GGUFKeyError, GGUFTruncatedError
from .format import keys as K
from .format.layout import InfoOffsets, PairOffsets
from .format.nodes import DataSection
from .format.schema import alignment_of
from .format.types import GGMLType, ValueType, tensor_nbytes, type_name
from .format.values import Field, make_field
from .format.variant import Variant

__all__ = ["Fields", "GGUFFile", "Metadata", "Storage", "Tensor"]

_MAX_SPAN = int(np.iinfo(np.intp).max)
#: bytes per piece when a tensor is read as a stream (:meth:`Tensor.chunks`)
CHUNK_BYTES = 16 * 2**20
#: the most stored keys compared with a missing one to suggest what was meant
_MAX_SUGGESTION_KEYS = 10_000
#: the most dimensions a numpy array can have (64 since numpy 2.0, 32 before)
_MAX_NDIM = 64 if int(np.__version__.split(".")[0]) >= 2 else 32


class Storage(Protocol):
    """Where a file's bytes are (:class:`gguf_schema.io.source.Source`): a map, a buffer, positioned or ranged reads."""

    name: str | None
    size: int
    closed: bool

    def view(self, offset: int, nbytes: int) -> Any: ...

    def release(self, offset: int, nbytes: int) -> None: ...

    def fileno(self) -> int | None: ...

    def release_pages(self) -> None: ...

    def close(self) -> None: ...


class Tensor:
    """One tensor: its info record and a lazy view of its bytes.

    Attributes:
        name: the tensor's name.
        type: its :class:`~gguf_schema.format.types.GGMLType` (the plain ``int`` for an id ggml does not know).
        dims: dimensions as stored, innermost first (GGUF/ggml order).
        shape: the numpy shape, outermost first (``dims`` reversed).
        stored_offset: offset as stored, relative to the start of the data section.
        offset: absolute offset of the first byte in the file.
        info_offset: where the tensor's info record starts in the file.
        byte_order: the byte order of the file it lives in.
    """

    __slots__ = (
        "__weakref__",
        "_storage",
        "byte_order",
        "dims",
        "info_offset",
        "name",
        "offset",
        "stored_offset",
        "type",
    )

    def __init__(
        self,
        name: str,
        type: int,
        dims: tuple[int, ...],
        stored_offset: int,
        *,
        data_offset: int,
        byte_order: str,
        storage: Storage | None,
        info_offset: int,
    ):
        self.name = name
        try:
            self.type: GGMLType | int = GGMLType(type)
        except ValueError:
            self.type = type
        self.dims = dims
        self.stored_offset = stored_offset
        self.offset = data_offset + stored_offset
        self.info_offset = info_offset
        self.byte_order = byte_order
        self._storage = storage

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.dims))

    @property
    def n_elements(self) -> int:
        return math.prod(self.dims)

    @property
    def type_name(self) -> str:
        """The type's name (``Q4_K``), or ``type N`` for an id ggml does not know."""
        return type_name(self.type)

    @property
    def source_name(self) -> str | None:
        """The path of the file this tensor lives in, if it was read from one."""
        return self._storage.name if self._storage is not None else None

    def known_type(self) -> GGMLType:
        """The tensor's type; a :class:`~gguf_schema.errors.GGUFFormatError` for an unknown or removed one."""
        if not isinstance(self.type, GGMLType):
            raise GGUFFormatError(
                f"unknown ggml type {self.type}", offset=self.info_offset, path=f"tensor {self.name!r}", value=self.type
            )
        if self.type.removed:
            raise GGUFFormatError(
                f"ggml type {self.type.name} ({int(self.type)}) has been removed",
                offset=self.info_offset,
                path=f"tensor {self.name!r}",
                value=int(self.type),
            )
        return self.type

    @property
    def nbytes(self) -> int:
        """Bytes of data, from the type's block layout. Raises for an unknown or removed type."""
        t = self.known_type()
        try:
            return tensor_nbytes(t, self.dims)
        except ValueError as e:
            raise GGUFFormatError(
                str(e), offset=self.info_offset, path=f"tensor {self.name!r}", value=self.dims
            ) from None

    @property
    def data(self) -> np.ndarray:
        """Read-only view of the tensor's bytes in the file: zero-copy for a mapped file, a copy of
        exactly the tensor's bytes for a file read in ranges (remote, ``mmap=False``, file objects).

        Plain types get their own dtype in the file's byte order and ``shape`` (F32, F16, F64,
        I8..I64; BF16 as ``uint16`` bit patterns). Block-quantized types get ``uint8`` of shape
        ``(rows, bytes per row)`` where a row is ``dims[0]`` elements.
        """
        t = self.known_type()
        nbytes = self.nbytes
        span = math.prod(d for d in self.dims if d) * (t.type_size if t.quantized else t.numpy_dtype.itemsize)  # type: ignore[union-attr]
        if span > _MAX_SPAN or len(self.dims) > _MAX_NDIM:  # numpy cannot shape such an array, even an empty one
            raise GGUFFormatError(
                f"{len(self.dims)} dimensions (at most {_MAX_NDIM}) or {span} bytes spanned (at most {_MAX_SPAN}): "
                "too many or too large for an array",
                offset=self.info_offset,
                path=f"tensor {self.name!r}",
                value=self.dims,
            )
        buf = self._bytes(0, nbytes, nbytes)
        if t.quantized:
            row = t.row_nbytes(self.dims[0]) if self.dims else nbytes
            rows = nbytes // row if row else 0
            return np.frombuffer(buf, np.uint8, nbytes).reshape(rows, row)
        dtype = t.numpy_dtype.newbyteorder(Variant.endian_of(self.byte_order))  # type: ignore[union-attr]
        return np.frombuffer(buf, dtype, self.n_elements).reshape(self.shape)

    def _bytes(self, start: int, count: int, nbytes: int) -> Any:
        """Bytes ``[start, start + count)`` of the tensor's ``nbytes`` bytes, from its file."""
        storage = self._storage
        if storage is None or storage.closed:
            raise GGUFError(
                "the file is closed: tensor data is only available while it is open", path=f"tensor {self.name!r}"
            )
        try:
            return storage.view(self.offset + start, count)
        except GGUFTruncatedError as e:
            raise GGUFTruncatedError(
                f"tensor data [{self.offset}, {self.offset + nbytes}) runs past the end of the file ({e.reason})",
                offset=self.offset,
                path=f"tensor {self.name!r}",
                value=nbytes,
            ) from None

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[Any]:
        """The tensor's bytes as stored, in pieces of at most ``size`` bytes (whole blocks, or whole
        elements for plain types, so each piece can be converted on its own), read one at a time.

        Streaming a tensor this way keeps memory flat whatever its size: a piece of a file read with
        positioned or ranged reads is a copy of just those bytes; a piece of a mapped file is a
        zero-copy view, and once the next piece is asked for, the pages behind it are released from
        this process's resident memory (:meth:`release_pages`). Convert, split, merge, export and
        diff read tensors this way.

        >>> import io, numpy as np, gguf_schema
        >>> buf = io.BytesIO()
        >>> gguf_schema.save(buf, {}, {"w": np.arange(10, dtype=np.float32)})
        >>> with gguf_schema.open(buf.getvalue()) as f:
        ...     [bytes(c) for c in f.tensors["w"].chunks(16)][-1] == np.arange(8, 10, dtype=np.float32).tobytes()
        True
        """
        t = self.known_type()
        nbytes = self.nbytes
        unit = t.type_size if t.quantized else t.numpy_dtype.itemsize  # type: ignore[union-attr]
        step = max(unit, size - size % unit)
        for start in range(0, nbytes, step):
            count = min(step, nbytes - start)
            yield self._bytes(start, count, nbytes)
            self.release_pages(start, count)

    def file_range(self) -> tuple[int, int, int] | None:
        """``(descriptor, offset, nbytes)`` of the tensor's bytes in the local file open behind it, for a
        copy inside the kernel (``copy_file_range``); None when it is not in an open local file."""
        storage = self._storage
        fd = storage.fileno() if storage is not None and not storage.closed else None
        return None if fd is None else (fd, self.offset, self.nbytes)

    def release_pages(self, start: int = 0, nbytes: int | None = None) -> None:
        """Say that bytes ``[start, start + nbytes)`` of the tensor (default: all of it) are done with.

        For a mapped file their pages leave this process's resident memory (they stay in the operating
        system's page cache, and touching them again maps them again: views taken before stay valid);
        for other files nothing happens. A long sequential read (a copy, a hash) calls it behind its cursor
        so its resident memory stays flat instead of growing to the size of the file.
        """
        storage = self._storage
        if storage is None or storage.closed:
            return
        total = self.nbytes
        count = total - start if nbytes is None else nbytes
        storage.release(self.offset + start, max(0, min(count, total - start)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(tensor)``: the data (:attr:`data`; quantized types as their raw blocks)."""
        data = self.data
        return data if dtype is None else data.astype(dtype)

    def dequantize(
        self, rows: slice | None = None, threads: int | None = None, engine: str = "auto", out: np.ndarray | None = None
    ) -> np.ndarray:
        """The tensor as float32 in ``shape`` (any ggml type; see :func:`gguf_schema.tensors.dequantize`).

        ``rows`` decodes only a contiguous range of rows (the tensor seen as ``(-1, shape[-1])``),
        and reads only their bytes from the file (for a remote file: fetches only them);
        ``threads``, ``engine`` and ``out`` (a float32 buffer to decode into) are passed on.

        >>> import io, numpy as np, gguf_schema
        >>> buf = io.BytesIO()
        >>> gguf_schema.save(buf, {}, {"w": np.arange(12, dtype=np.float32).reshape(4, 3)})
        >>> with gguf_schema.open(buf.getvalue()) as f:
        ...     f.tensors["w"].dequantize(rows=slice(1, 3)).tolist()
        [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
        """
        t = self.known_type()
        if rows is None or not self.dims:
            data: Any = self.data
            shape = self.shape
        else:
            data, n = self._row_bytes(rows)
            shape, rows = (n, self.dims[0]), None
        from .tensors import dequantize  # (the kernels are imported when first used)

        return dequantize(
            data,
            t,
            shape,
            byte_order=self.byte_order,
            rows=rows,
            threads=threads,
            engine=engine,
            out=out,
        )

    def raw(self, rows: slice | None = None) -> memoryview:
        """The tensor's bytes as a read-only memoryview (of the map: no copy; of the fetched bytes for a remote file).

        ``rows``: only the bytes of a contiguous range of rows (the tensor seen as ``(-1, shape[-1])``),
        read alone from the file, as in :meth:`dequantize`; as stored (the file's byte order).

        >>> import io, numpy as np, gguf_schema
        >>> buf = io.BytesIO()
        >>> gguf_schema.save(buf, {}, {"w": np.arange(6, dtype=np.int8).reshape(3, 2)})
        >>> with gguf_schema.open(buf.getvalue()) as f:
        ...     bytes(f.tensors["w"].raw(rows=slice(1, 3)))
        b'\\x02\\x03\\x04\\x05'
        """
        if rows is None or not self.dims:
            return self.data.reshape(-1).view(np.uint8).data
        return memoryview(self._row_bytes(rows)[0]).cast("B")

    def _row_bytes(self, rows: slice) -> tuple[Any, int]:
        """The stored bytes of a range of rows, and how many rows they are."""
        nbytes = self.nbytes
        n_rows = math.prod(self.dims[1:])
        from .tensors.engine import _row_range  # the engine's reading of ``rows=``, shared

        start, stop = _row_range(rows, n_rows)
        row = nbytes // n_rows if n_rows else 0
        return self._bytes(start * row, (stop - start) * row, nbytes), stop - start

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.type_name}, shape={self.shape}, offset={self.offset})"


class Fields(Mapping[str, Field]):
    """Ordered mapping key -> :class:`Field` over the stored list of pairs.

    Duplicate keys are kept (lookup gives the first); :attr:`records` lists them all. Edits
    (:meth:`set`, :meth:`delete`, :meth:`rename`) change the records in place and set
    :attr:`modified`.
    """

    def __init__(self, records: list[Field]):
        self._records = list(records)
        self.modified = False
        self._reindex()

    def _reindex(self) -> None:
        records = self._records
        first = dict(
            zip([f.key for f in records], records, strict=True)
        )  # one dict, built in C: right unless a key repeats
        if len(first) != len(records):  # duplicate keys: the first of each wins, in file order
            first = {}
            for f in records:
                first.setdefault(f.key, f)
        self._first = first
        self._positions: dict[str, int] | None = None  # worked out when first asked (edits): 800,000 ints otherwise

    def __getitem__(self, key: str) -> Field:
        return self._first[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def __contains__(self, key: object) -> bool:
        return key in self._first

    @property
    def records(self) -> list[Field]:
        """Every stored pair in file order, duplicate keys included (a copy)."""
        return list(self._records)

    def position(self, key: str) -> int | None:
        """The index among :attr:`records` of the first pair with ``key``, or None."""
        if self._positions is None:
            records = self._records
            if len(self._first) == len(records):  # no key repeats: one dict, built in C
                self._positions = dict(zip([f.key for f in records], range(len(records)), strict=True))
            else:
                self._positions = {}
                for i, f in enumerate(records):
                    self._positions.setdefault(f.key, i)
        return self._positions.get(key)

    def set(
        self, key: str, value: Any, type: ValueType | int | None = None, element_type: ValueType | int | None = None
    ) -> Field:
        """Set a key (replacing it in place, or appending it). Returns the new :class:`Field`.

        Without ``type`` an existing key keeps its stored type and a new key's type is inferred.
        """
        i = self.position(key)
        if type is None and i is not None:
            old = self._records[i]
            type, element_type = old.type, element_type if element_type is not None else old.element_type
        new = make_field(key, value, type, element_type)
        if i is None:
            self._records.append(new)
            if self._positions is not None:
                self._positions[key] = len(self._records) - 1
        else:
            self._records[i] = new
        self._first[key] = new  # the first pair of the key is the one replaced (or the only one)
        self.modified = True
        return new

    def near(self, key: str, n: int = 3) -> list[str]:
        """Up to ``n`` stored keys that look like ``key`` (a typo's likely meaning), closest first.

        >>> Fields([make_field("llama.context_length", 1), make_field("general.name", "x")]).near("llama.context_lenght")
        ['llama.context_length']
        """
        keys = list(itertools.islice(self._first, _MAX_SUGGESTION_KEYS))  # a hostile file of 800,000 keys costs no more
        return difflib.get_close_matches(key, keys, n=n, cutoff=0.85)

    def missing(self, key: str) -> GGUFKeyError:
        """The error for ``key`` not being here, naming the stored keys it may have meant."""
        near = self.near(key)
        hint = f" (did you mean {' or '.join(repr(k) for k in near)}?)" if near else ""
        return GGUFKeyError(f"no metadata key {key!r}{hint}", value=key)

    def delete(self, key: str) -> None:
        """Remove every pair with ``key``; :class:`~gguf_schema.errors.GGUFKeyError` if there is none."""
        if key not in self._first:
            raise self.missing(key)
        self._records[:] = [f for f in self._records if f.key != key]
        self._reindex()
        self.modified = True

    def rename(self, old: str, new: str) -> None:
        """Rename a key, keeping its position, type and value."""
        if old not in self._first:
            raise self.missing(old)
        if new in self._first and new != old:
            raise GGUFKeyError(f"metadata key {new!r} exists already", value=new)
        self._records[:] = [Field(new, f.type, f.value) if f.key == old else f for f in self._records]
        self._reindex()
        self.modified = True

    def __repr__(self) -> str:
        return f"Fields({self._records!r})"


class Metadata(MutableMapping[str, Any]):
    """Ordered mapping key -> plain Python value over a :class:`Fields`; assignment keeps a key's stored type.

    Setting an existing key converts the value to the key's stored type (raising
    :class:`~gguf_schema.errors.GGUFBuildError` if it does not fit); a new key's type is
    inferred (:func:`gguf_schema.format.values.infer_type`). Use :meth:`Fields.set` to give a type.
    """

    def __init__(self, fields: Fields):
        self._fields = fields

    def __getitem__(self, key: str) -> Any:
        return self._fields[key].plain()

    def __setitem__(self, key: str, value: Any) -> None:
        self._fields.set(key, value)

    def __delitem__(self, key: str) -> None:
        self._fields.delete(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return "Metadata({" + ", ".join(f"{k!r}: {v!r}" for k, v in self.items()) + "})"


def register_writer(save_file: wiring.SaveFunction) -> None:
    """Lend the model the function :meth:`GGUFFile.save` runs (:func:`gguf_schema.writer.save_file`).

    The model does no I/O and sits below the writer, so it cannot import it: the package
    (``gguf_schema/__init__.py``, where the layers are wired) fills :data:`gguf_schema.wiring.save_file`
    once, explicitly; this sets the same slot.
    """
    wiring.save_file = save_file


class GGUFFile:
    """A parsed GGUF file. Use as a context manager; tensor views need the file open.

    Attributes:
        version: format version (1, 2 or 3).
        byte_order: ``"little"`` or ``"big"``.
        fields: ordered mapping key -> :class:`Field` (stored types and exact values).
        metadata: ordered mapping key -> plain value.
        tensors: ordered mapping name -> :class:`Tensor` (the first of duplicate names).
        alignment: ALIGNMENT (``general.alignment`` or 32), as the fields say now.
        stored_alignment: ALIGNMENT as the file was read (before any edit).
        data_offset: absolute offset of the data section (after the padding).
        data_section: offset and size of the data section.
        metadata_end: where the tensor infos end (the padding starts).
        padding: the padding bytes between the tensor infos and the data section, as read.
        name: the path it was read from, if any.
    """

    def __init__(
        self,
        *,
        version: int,
        byte_order: str,
        fields: list[Field],
        tensors: list[Tensor],
        padding: bytes,
        data: DataSection,
        storage: Storage | None,
        metadata_end: int,
    ):
        self.version = version
        self.byte_order = byte_order
        self.fields = Fields(fields)
        self.metadata = Metadata(self.fields)
        self.padding = padding
        self.data_section = data
        self.data_offset = data.offset
        self.metadata_end = metadata_end
        self.storage = storage
        self.name = storage.name if storage is not None else None
        self.stored_alignment = self.alignment
        self._tensor_list = list(tensors)
        by_name: dict[str, Tensor] = {}
        for t in self._tensor_list:
            by_name.setdefault(t.name, t)
        self.tensors: Mapping[str, Tensor] = by_name
        # where each record lies as stored: the pairs (by the identity of their Field, worked out when
        # first asked: only writes need it) and the tensor infos
        self._stored_fields = list(fields)  # keeps the identities valid
        self._fields_end = tensors[0].info_offset if tensors else metadata_end
        self._spans: dict[int, tuple[int, int]] | None = None
        self._header_view: memoryview | None = None

    # ---------------------------------------------------------------- reading

    def pair_offsets(self, field: Field) -> PairOffsets | None:
        """Where the parts of ``field``'s pair are stored (key, value type, value, array items), from the
        start the parse recorded; None for a pair made in memory (it has no place in the file yet)."""
        return None if field.offset is None else PairOffsets.of(self.variant, field.offset, field.key)

    def info_offsets(self, tensor: Tensor) -> InfoOffsets:
        """Where the parts of ``tensor``'s info are stored (name, dimensions, type, offset), from the start
        the parse recorded."""
        return InfoOffsets.of(self.variant, tensor.info_offset, tensor.name, len(tensor.dims))

    @property
    def variant(self) -> Variant:
        """The file's :class:`~gguf_schema.format.variant.Variant`: byte order, version and what the layout derives from them."""
        return Variant.of(self.byte_order, self.version)

    @property
    def alignment(self) -> int:
        """ALIGNMENT as the fields say now (``general.alignment``, or 32)."""
        found = self.fields.get(K.GENERAL_ALIGNMENT)
        return alignment_of([] if found is None else [found])

    @property
    def tensor_list(self) -> list[Tensor]:
        """All tensor infos in file order (duplicate names included)."""
        return list(self._tensor_list)

    @property
    def modified(self) -> bool:
        """True once the metadata was edited."""
        return self.fields.modified

    def view(self, offset: int, nbytes: int) -> Any:
        """Bytes ``[offset, offset + nbytes)`` of the file as a read-only buffer (zero-copy where mapped)."""
        if self.storage is None or self.storage.closed:
            raise GGUFError("the file is closed: its bytes are only available while it is open", path=self.name)
        return self.storage.view(offset, nbytes)

    def stored_bytes(self, field: Field) -> Any:
        """The bytes ``field`` occupies in this file, if it is one of the pairs read from it and still
        unchanged (an edit replaces a pair by a new Field); else None. The writer copies such pairs
        as they are, without encoding them again."""
        span = self.stored_span(field)
        return None if span is None else self.stored_view()[span[0] : span[1]]

    def stored_span(self, field: Field) -> tuple[int, int] | None:
        """Where ``field`` lies in :meth:`stored_view` (``[start, end)``), as :meth:`stored_bytes` tells."""
        return self.stored_spans([field])[0]

    def stored_spans(self, fields: Sequence[Field]) -> list[tuple[int, int] | None]:
        """:meth:`stored_span` of each of ``fields``, at once."""
        if self._spans is None:
            self._spans = _field_spans(self._stored_fields, self._fields_end)
        if self.storage is None or self.storage.closed:
            return [None] * len(fields)
        get = self._spans.get
        return [get(id(f)) for f in fields]

    def stored_info_span(self, index: int) -> tuple[int, int]:
        """Where tensor info ``index`` lies in :meth:`stored_view` (``[start, end)``)."""
        t = self._tensor_list[index]
        end = self._tensor_list[index + 1].info_offset if index + 1 < len(self._tensor_list) else self.metadata_end
        return t.info_offset, end

    def stored_view(self) -> memoryview:
        """The stored pairs and tensor infos, the file's bytes up to :attr:`metadata_end`, as one view
        taken once (a record's bytes are a slice of it: 800,000 records cost 800,000 slices, not
        800,000 checks of the file's size)."""
        if self._header_view is None or self.storage is None or self.storage.closed:
            self._header_view = memoryview(self.view(0, self.metadata_end))
        return self._header_view

    @property
    def file_size(self) -> int:
        """The file's size in bytes (as it was opened)."""
        return self.storage.size if self.storage is not None else self.data_offset + self.data_section.size

    def fileno(self) -> int | None:
        """The descriptor of the open file behind the map, if there is one."""
        return self.storage.fileno() if self.storage is not None else None

    def truncation(self) -> tuple[int, list[str]]:
        """``(bytes missing, names of the tensors cut)``: how much of the tensor data the tensor infos
        declare lies past the end of the file (``(0, [])`` for a whole file). Tensors of an unknown
        type have no size to check.

        >>> import io, numpy as np, gguf_schema
        >>> buf = io.BytesIO()
        >>> gguf_schema.save(buf, {}, {"a": np.zeros(8, np.float32), "b": np.zeros(8, np.float32)})
        >>> gguf_schema.open(buf.getvalue()[:-20]).truncation()
        (20, ['b'])
        """
        end, cut = self.file_size, []
        need = end
        for t in self._tensor_list:
            try:
                stop = t.offset + t.nbytes
            except GGUFFormatError:  # unknown type: no size to check
                continue
            if stop > end:
                cut.append(t.name)
                need = max(need, stop)
        return need - end, cut

    def require_whole(self, doing: str) -> None:
        """Raise :class:`~gguf_schema.errors.GGUFTruncatedError` if the file is truncated
        (:meth:`truncation`): what would be written from it (``doing``) would be truncated too, or fail
        halfway."""
        missing, cut = self.truncation()
        if cut:
            names = ", ".join(cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
            raise GGUFTruncatedError(
                f"the file is truncated: {missing:,} bytes of tensor data are missing ({len(cut)} of "
                f"{len(self._tensor_list)} tensors affected: {names}); {doing} would not be whole, so nothing was "
                "written",
                offset=self.file_size,
                path=self.name,
                value=missing,
            )

    def close(self) -> None:
        """Close the file. Tensor views already taken stay valid (the map is freed when they are)."""
        if self._header_view is not None:
            with contextlib.suppress(BufferError):
                self._header_view.release()
            self._header_view = None
        if self.storage is not None:
            self.storage.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"GGUFFile({self.name or '<buffer>'!r}, v{self.version}, {self.byte_order}-endian, "
            f"{len(self.fields.records)} keys, {len(self._tensor_list)} tensors)"
        )

    # ---------------------------------------------------------------- editing metadata

    def set(
        self, key: str, value: Any, type: ValueType | int | None = None, element_type: ValueType | int | None = None
    ) -> Field:
        """Set a metadata key (see :meth:`Fields.set`). Returns the new :class:`Field`."""
        return self.fields.set(key, value, type, element_type)

    def delete(self, key: str) -> None:
        """Remove a metadata key (every occurrence); a ``KeyError``-compatible GGUFError if absent."""
        self.fields.delete(key)

    def rename(self, old: str, new: str) -> None:
        """Rename a metadata key, keeping its position, type and value."""
        self.fields.rename(old, new)

    # ---------------------------------------------------------------- writing

    def save(
        self,
        target: Any,
        *,
        version: int | None = None,
        byte_order: str | None = None,
        sync: bool = True,
        strict: str | None = None,
    ) -> None:
        """Write this file (with any metadata edits) to ``target`` atomically; unchanged files come out byte-identical.

        ``version`` and ``byte_order`` convert the file (tensor blocks are byte-swapped as their
        layouts say); ``sync=False`` skips the fsyncs; ``strict=PROFILE`` refuses a header that
        breaks an error rule of that validation profile (nothing is written). See
        :func:`gguf_schema.writer.save_file`.
        """
        save = wiring.save_file
        if save is None:  # the package wires it before anything can be opened
            raise GGUFInternalError("no writer is wired to GGUFFile.save (gguf_schema/__init__.py wires it)")
        save(self, target, version=version, byte_order=byte_order, sync=sync, strict=strict)


def _field_spans(fields: list[Field], end: int) -> dict[int, tuple[int, int]]:
    """Field identity -> the bytes ``[start, end)`` its pair occupies: each pair ends where the next begins."""
    offsets = [f.offset for f in fields]
    if any(o is None for o in offsets):
        return {}
    bounds = [*offsets, end]
    return {id(f): (bounds[i], bounds[i + 1]) for i, f in enumerate(fields)}  # type: ignore[misc]
