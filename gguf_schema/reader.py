"""Reading: ``open()`` a GGUF file and get a :class:`GGUFFile` of typed fields and lazy tensors.

Data flows one way: the source's bytes are parsed by :mod:`gguf_schema.format.schema`; the parsed
records become :class:`~gguf_schema.format.values.Field` and :class:`Tensor` objects here. Tensor data
is never read while opening: :attr:`Tensor.data` is a zero-copy, read-only numpy view into the
memory map, made on first access.

>>> import io, numpy as np, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.architecture": "llama"}, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
>>> with gguf_schema.open(buf.getvalue()) as f:
...     print(f.version, f.byte_order, f.metadata["general.architecture"])
...     t = f.tensors["w"]
...     print(t.type.name, t.shape, t.dims, t.data[1].tolist())
3 little llama
F32 (2, 3) (3, 2) [3.0, 4.0, 5.0]
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import numpy as np
from construct import ConstructError

from .errors import GGUFError, GGUFFormatError, GGUFTruncatedError
from .format.limits import Limits
from .format.schema import DataSection, alignment_of, gguf_error, gguf_schema, sniff
from .format.source import Source, SourceLike
from .format.types import GGMLType, ValueType
from .format.values import Field, make_field

__all__ = ["open", "GGUFFile", "Tensor", "Metadata", "Fields"]


_MAX_DIM = int(np.iinfo(np.intp).max)


class Tensor:
    """One tensor: its info record and a lazy view of its bytes.

    Attributes:
        name: the tensor's name.
        type: its :class:`~gguf_schema.format.types.GGMLType` (the plain ``int`` for an id ggml does not know).
        dims: dimensions as stored, innermost first (GGUF/ggml order).
        shape: the numpy shape, outermost first (``dims`` reversed).
        stored_offset: offset as stored, relative to the start of the data section.
        offset: absolute offset of the first byte in the file.
    """

    __slots__ = ("name", "type", "dims", "stored_offset", "offset", "info_offset", "_file")

    def __init__(self, name: str, type: int, dims: tuple[int, ...], stored_offset: int, file: "GGUFFile", info_offset: int | None = None):
        self.name = name
        try:
            self.type: GGMLType | int = GGMLType(type)
        except ValueError:
            self.type = type
        self.dims = dims
        self.stored_offset = stored_offset
        self.offset = file.data_offset + stored_offset
        self.info_offset = info_offset
        self._file = file

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.dims))

    @property
    def n_elements(self) -> int:
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int:
        """Bytes of data, from the type's block layout. Raises for an unknown or removed type."""
        t = self._known_type()
        row = self.dims[0] if self.dims else 1
        try:
            return t.row_nbytes(row) * (self.n_elements // row if row else 0)
        except ValueError as e:
            raise GGUFFormatError(str(e), offset=self.info_offset, path=f"tensor {self.name!r}", value=self.dims) from None

    def _known_type(self) -> GGMLType:
        if not isinstance(self.type, GGMLType):
            raise GGUFFormatError(f"unknown ggml type {self.type}", offset=self.info_offset, path=f"tensor {self.name!r}", value=self.type)
        if self.type.removed:
            raise GGUFFormatError(f"ggml type {self.type.name} ({int(self.type)}) has been removed", offset=self.info_offset, path=f"tensor {self.name!r}", value=int(self.type))
        return self.type

    @property
    def data(self) -> np.ndarray:
        """Zero-copy, read-only view of the tensor's bytes in the file.

        Plain types get their own dtype in the file's byte order and ``shape`` (F32, F16, F64,
        I8..I64; BF16 as ``uint16`` bit patterns). Block-quantized types get ``uint8`` of shape
        ``(rows, bytes per row)`` where a row is ``dims[0]`` elements.
        """
        t = self._known_type()
        nbytes = self.nbytes
        span = math.prod(d for d in self.dims if d) * (t.type_size if t.quantized else t.numpy_dtype.itemsize)  # type: ignore[union-attr]
        if span > _MAX_DIM:  # numpy cannot shape such an array, even an empty one
            raise GGUFFormatError(f"dimensions {self.dims} are too large for an array ({span} bytes spanned, at most {_MAX_DIM})",
                                  offset=self.info_offset, path=f"tensor {self.name!r}", value=self.dims)
        f = self._file
        buf = f._buffer()
        if self.offset + nbytes > len(buf):
            raise GGUFTruncatedError(
                f"tensor data [{self.offset}, {self.offset + nbytes}) runs past the end of the file ({len(buf)} bytes)",
                offset=self.offset,
                path=f"tensor {self.name!r}",
                value=nbytes,
            )
        if t.quantized:
            row = t.row_nbytes(self.dims[0]) if self.dims else nbytes
            rows = nbytes // row if row else 0
            return np.frombuffer(buf, np.uint8, nbytes, self.offset).reshape(rows, row)
        dtype = t.numpy_dtype.newbyteorder("<" if f.byte_order == "little" else ">")  # type: ignore[union-attr]
        return np.frombuffer(buf, dtype, self.n_elements, self.offset).reshape(self.shape)

    def dequantize(self, rows: slice | None = None, threads: int | None = None, engine: str = "auto",
                   out: np.ndarray | None = None) -> np.ndarray:
        """The tensor as float32 in ``shape`` (any ggml type; see :func:`gguf_schema.tensors.dequantize`).

        ``rows`` decodes only a contiguous range of rows (the tensor seen as ``(-1, shape[-1])``);
        ``threads``, ``engine`` and ``out`` (a float32 buffer to decode into) are passed on.
        """
        from .tensors import dequantize

        return dequantize(self.data, self._known_type(), self.shape, byte_order=self._file.byte_order,
                          rows=rows, threads=threads, engine=engine, out=out)

    def raw(self) -> memoryview:
        """The tensor's bytes as a read-only memoryview of the file (no copy)."""
        return memoryview(self.data.reshape(-1).view(np.uint8))

    def __repr__(self) -> str:
        tname = self.type.name if isinstance(self.type, GGMLType) else str(self.type)
        return f"Tensor({self.name!r}, {tname}, shape={self.shape}, offset={self.offset})"


class Fields(Mapping[str, Field]):
    """Ordered mapping key -> :class:`Field` over the stored list of pairs (duplicates kept; lookup gives the first)."""

    def __init__(self, records: list[Field]):
        self._records = records
        self._reindex()

    def _reindex(self) -> None:
        index: dict[str, int] = {}
        for i, f in enumerate(self._records):
            index.setdefault(f.key, i)
        self._index = index

    def __getitem__(self, key: str) -> Field:
        return self._records[self._index[key]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    @property
    def records(self) -> list[Field]:
        """Every stored pair in file order, duplicate keys included."""
        return list(self._records)

    def __repr__(self) -> str:
        return f"Fields({list(self._records)!r})"


class Metadata(MutableMapping[str, Any]):
    """Ordered mapping key -> plain Python value; assignment keeps a key's stored type.

    Setting an existing key converts the value to the key's stored type (raising
    :class:`~gguf_schema.errors.GGUFBuildError` if it does not fit); a new key's type is
    inferred (:func:`gguf_schema.format.values.infer_type`). Use :meth:`GGUFFile.set` to give a type.
    """

    def __init__(self, file: "GGUFFile"):
        self._file = file

    def __getitem__(self, key: str) -> Any:
        return self._file.fields[key].plain()

    def __setitem__(self, key: str, value: Any) -> None:
        self._file.set(key, value)

    def __delitem__(self, key: str) -> None:
        self._file.delete(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._file.fields)

    def __len__(self) -> int:
        return len(self._file.fields)

    def __repr__(self) -> str:
        return "Metadata({" + ", ".join(f"{k!r}: {v!r}" for k, v in self.items()) + "})"


class GGUFFile:
    """A parsed GGUF file. Use as a context manager; tensor views need the file open.

    Attributes:
        version: format version (1, 2 or 3).
        byte_order: ``"little"`` or ``"big"``.
        fields: ordered mapping key -> :class:`Field` (stored types and exact values).
        metadata: ordered mapping key -> plain value.
        tensors: ordered mapping name -> :class:`Tensor`.
        alignment: ALIGNMENT (``general.alignment`` or 32).
        data_offset: absolute offset of the data section (after the padding).
        padding: the padding bytes between the tensor infos and the data section, as read.
        name: the path it was read from, if any.
    """

    def __init__(self, *, version: int, byte_order: str, fields: list[Field], tensor_records: list[tuple[str, int, tuple[int, ...], int, int | None]],
                 padding: bytes, data: DataSection, source: Source | None, metadata_end: int):
        self.version = version
        self.byte_order = byte_order
        self.fields = Fields(fields)
        self.metadata = Metadata(self)
        self.padding = padding
        self.data_section = data
        self.data_offset = data.offset
        self.metadata_end = metadata_end
        self._source = source
        self.name = source.name if source else None
        self._read_alignment = self.alignment
        self._tensor_list = [Tensor(n, t, d, o, self, io) for (n, t, d, o, io) in tensor_records]
        tensors: dict[str, Tensor] = {}
        for t in self._tensor_list:
            tensors.setdefault(t.name, t)
        self.tensors: Mapping[str, Tensor] = tensors
        self.modified = False

    # ---------------------------------------------------------------- reading

    @property
    def alignment(self) -> int:
        return alignment_of(self.fields.records)

    @property
    def tensor_list(self) -> list[Tensor]:
        """All tensor infos in file order (duplicate names included)."""
        return list(self._tensor_list)

    @property
    def file_size(self) -> int:
        return self._buffer_len()

    def _buffer(self):
        if self._source is None or self._source.closed:
            raise GGUFError("the file is closed: tensor data is only available while it is open", path=self.name)
        return self._source.data

    def _buffer_len(self) -> int:
        return len(self._buffer())

    def close(self) -> None:
        """Close the file. Tensor views already taken stay valid (the map is freed when they are)."""
        if self._source is not None:
            try:
                self._source.close()
            except BufferError:
                self._source.release()

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"GGUFFile({self.name or '<buffer>'!r}, v{self.version}, {self.byte_order}-endian, "
                f"{len(self.fields.records)} keys, {len(self._tensor_list)} tensors)")

    # ---------------------------------------------------------------- editing metadata

    def set(self, key: str, value: Any, type: ValueType | int | None = None, element_type: ValueType | int | None = None) -> Field:
        """Set a metadata key (replacing it in place, or appending it). Returns the new :class:`Field`.

        Without ``type`` an existing key keeps its stored type and a new key's type is inferred.
        """
        records = self.fields._records
        i = self.fields._index.get(key)
        if type is None and i is not None:
            old = records[i]
            type, element_type = old.type, element_type if element_type is not None else old.element_type
        new = make_field(key, value, type, element_type)
        if i is None:
            records.append(new)
        else:
            records[i] = new
        self.fields._reindex()
        self.modified = True
        return new

    def delete(self, key: str) -> None:
        """Remove a metadata key (every occurrence). Raises ``KeyError``-compatible GGUFError if absent."""
        records = self.fields._records
        if key not in self.fields._index:
            raise GGUFKeyError(f"no metadata key {key!r}", value=key)
        records[:] = [f for f in records if f.key != key]
        self.fields._reindex()
        self.modified = True

    def rename(self, old: str, new: str) -> None:
        """Rename a metadata key, keeping its position, type and value."""
        if old not in self.fields._index:
            raise GGUFKeyError(f"no metadata key {old!r}", value=old)
        if new in self.fields._index and new != old:
            raise GGUFKeyError(f"metadata key {new!r} exists already", value=new)
        records = self.fields._records
        records[:] = [Field(new, f.type, f.value) if f.key == old else f for f in records]
        self.fields._reindex()
        self.modified = True

    # ---------------------------------------------------------------- writing

    def save(self, path: Any, *, version: int | None = None, byte_order: str | None = None, sync: bool = True) -> None:
        """Write this file (with any metadata edits) to ``path`` atomically; unchanged files come out byte-identical.

        ``version`` and ``byte_order`` convert the file (tensor blocks are byte-swapped as their
        layouts say); ``sync=False`` skips the fsync before the rename.
        """
        from .writer import save_file

        save_file(self, path, version=version, byte_order=byte_order, sync=sync)


class GGUFKeyError(GGUFError, KeyError):
    """A metadata key that is not there (also a ``KeyError``)."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return self._message()


def open(source: SourceLike, *, lazy: bool = False, strict: str | None = None, limits: Limits | None = None, fast: bool = True) -> GGUFFile:  # noqa: A001 - mirrors builtins.open
    """Open a GGUF file: a path, bytes-like object or binary file object.

    Metadata and tensor infos are parsed at once; tensor data is not read. Raises
    :class:`~gguf_schema.errors.GGUFError` (and nothing else) for a file that cannot be read.

    Args:
        source: where the file is.
        lazy: leave string arrays (vocabularies) undecoded until used: they come back as
            :class:`~gguf_schema.format.values.LazyStrings`, which compare equal to lists of str.
            Strings are then decoded and checked against ``limits`` when read.
        strict: a validation profile ("spec", "ggml" or "lenient"): raise
            :class:`~gguf_schema.check.validate.GGUFValidationError` for the first error-severity
            finding instead of returning a file that breaks the profile's rules.
        limits: resource limits (:class:`~gguf_schema.format.limits.Limits`); defaults accept every real file.
        fast: use the numpy-backed schema nodes (default) or the pure-construct reference variant.
    """
    if strict is not None:
        from .check.validate import open_strict

        return open_strict(source, strict, lazy=lazy, limits=limits, fast=fast)
    src = Source(source)
    try:
        return _parse(src, limits=limits, fast=fast, lazy=lazy)
    except BaseException:
        src.close()
        raise


def _parse(src: Source, *, limits: Limits | None, fast: bool, lazy: bool = False) -> GGUFFile:
    data = src.data
    order, version = sniff(bytes(data[:8]))
    schema = gguf_schema(order, version, fast=fast)
    reader = src.reader()
    try:
        parsed = schema.parse_stream(reader, limits=limits, lazy=lazy and fast)
    except (ConstructError, RecursionError, GGUFError) as e:
        raise gguf_error(e, reader) from None
    except (UnicodeDecodeError, OverflowError, ValueError, TypeError, KeyError, IndexError, MemoryError) as e:
        raise GGUFFormatError(f"{type(e).__name__}: {e}", offset=reader.last) from None
    kvs, infos = parsed.header.metadata_kv, parsed.tensor_infos
    fields = [Field(kv.key, kv.value_type, kv.value, at) for kv, at in zip(kvs, kvs.offsets)]
    tensor_records = [(ti.name, ti.type, tuple(ti.dimensions), ti.offset, at) for ti, at in zip(infos, infos.offsets)]
    metadata_end = parsed.tensor_data.offset - len(parsed._padding)
    return GGUFFile(version=version, byte_order=order, fields=fields, tensor_records=tensor_records, padding=bytes(parsed._padding),
                    data=parsed.tensor_data, source=src, metadata_end=metadata_end)

