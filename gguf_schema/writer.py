"""Writing: the one file assembler. Fields and tensors go in, GGUF bytes come out, streamed and atomic.

Every GGUF file this library writes is assembled here (``save``, ``GGUFFile.save``, and the
tools: edit, convert, split, merge, JSON build): the header bytes come from the same schema that
parses them (:mod:`gguf_schema.format.schema`, through :mod:`gguf_schema.format.boundary`);
this module turns API objects back into the schema's records, lays tensors out (aligned,
contiguous, padded after each, as ggml writes them) and supplies the data section as a stream,
so tensor bytes go from their source to the file in chunks: a tensor of another file is copied
without loading it whole (inside the kernel with ``copy_file_range`` where both ends allow it),
its blocks converted to the target's byte order field by field where needed. A write to a path
goes through :func:`gguf_schema.durable.atomic_replace`: a temporary file in the same folder,
renamed over the target only when complete: a failed or killed write leaves the old file as it was.

Before anything is written, the header about to be written is checked with the validation rules
(:func:`gguf_schema.check.writing.check_before_write`, which the package puts in the slot
:data:`gguf_schema.wiring.header_check`; see :func:`check_header`): each broken rule is a
:class:`~gguf_schema.errors.GGUFWarning` carrying its rule id, and ``strict=PROFILE`` refuses the
write instead with a :class:`~gguf_schema.errors.GGUFValidationError`. Every function of the library
that writes a GGUF file takes ``strict=`` as an explicit keyword argument and passes it down to
:func:`check_header`: no ambient setting makes a write strict.

>>> import io, numpy as np
>>> buf = io.BytesIO()
>>> save(buf, {"general.architecture": "llama", "llama.block_count": 2}, {"t": np.zeros((2, 8), np.float16)})
>>> data = buf.getvalue()
>>> data[:4], len(data) % 32
(b'GGUF', 0)
"""

from __future__ import annotations

import contextlib
import gc
import io
import mmap
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from construct import Container

from . import wiring
from .durable import atomic_replace
from .errors import GGUFBuildError, GGUFInternalError
from .format import boundary
from .format import keys as K
from .format.boundary import Sink
from .format.fast import Verbatim, fast_schema
from .format.nodes import DataSection, align_offset
from .format.schema import alignment_of
from .format.types import GGMLType, ValueType, tensor_nbytes
from .format.values import Field, make_field
from .io import PathLike
from .model import GGUFFile, Tensor

__all__ = [
    "CHUNK",
    "SPOOL_MEMORY",
    "HeaderSpool",
    "PlannedTensor",
    "Progress",
    "PushedFile",
    "RawTensor",
    "TensorRecord",
    "check_header",
    "encoded_size",
    "ggml_dims",
    "header_bytes",
    "header_size",
    "plan_tensor",
    "save",
    "save_file",
    "spool_header",
    "write_file",
    "write_header",
]

#: bytes copied per write when streaming tensor data
CHUNK = 16 * 2**20
#: ``madvise`` advice that drops pages from the resident set (None where the platform has none)
_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None) if hasattr(mmap.mmap, "madvise") else None

Progress = Callable[[int], None]
"""A progress callback: called with the number of bytes just written (the CLI draws a bar from it)."""

_DTYPE_TYPES = {
    np.dtype("float32"): GGMLType.F32,
    np.dtype("float16"): GGMLType.F16,
    np.dtype("float64"): GGMLType.F64,
    np.dtype("int8"): GGMLType.I8,
    np.dtype("int16"): GGMLType.I16,
    np.dtype("int32"): GGMLType.I32,
    np.dtype("int64"): GGMLType.I64,
}


@dataclass(frozen=True)
class RawTensor:
    """Tensor bytes with an explicit ggml type: quantized blocks, BF16 bits, or any type, given whole
    or as a stream.

    Attributes:
        type: the ggml type (a :class:`GGMLType`, its id or its name).
        shape: numpy shape, outermost first (``shape[-1]`` must be a multiple of the block size).
        data: the bytes, in one of these forms:

            * bytes-like or a numpy array (a ``numpy.memmap`` too: it is read a piece at a time and
              its pages are released behind the writer, so a memmap of any size costs little memory);
            * an iterable of pieces (bytes-like or numpy arrays, of any sizes that add up to the
              tensor's size), consumed once, when the tensor is written;
            * a callable returning such an iterable, called when the tensor is written (so a file
              can be written again from the same object).

            Streamed pieces are written one at a time and dropped: a tensor never has to be whole in
            memory (:func:`save` writes a 10 GB model in the memory of one piece).
        byte_order: the byte order ``data`` is in (default little, as ggml and quantizers write
            blocks); a file of the other order gets every block's multi-byte fields swapped.
    """

    type: GGMLType | int | str
    shape: tuple[int, ...]
    data: Any
    byte_order: str = "little"


@dataclass(frozen=True)
class TensorRecord:
    """A tensor info record as stored: name, ggml type id, dims (innermost first), relative offset."""

    name: str
    type: int
    dims: tuple[int, ...]
    offset: int

    @classmethod
    def of(cls, t: Tensor) -> TensorRecord:
        return cls(t.name, int(t.type), tuple(t.dims), t.stored_offset)


@dataclass
class PlannedTensor:
    """A tensor on its way into a file: its info record and where its bytes come from (the input of
    :func:`write_file`, the one assembler; :func:`plan_tensor` makes one from an array, a
    :class:`RawTensor` or a tensor of an open file).

    Attributes:
        name: the tensor's name.
        type: the ggml type id (``int(GGMLType.F16)``).
        dims: dimensions as stored, innermost first (a numpy shape reversed).
        nbytes: the size of its data in bytes (``tensor_nbytes(type, dims)``).
        chunks: called once when the tensor is written; returns an iterable of pieces (bytes-like
            or numpy arrays) in the target's byte order that add up to ``nbytes``. Each piece is
            written and dropped before the next is asked for.
        offset: the data's offset relative to the data section, or None to be laid out (aligned,
            after the tensor before it).
        source: a tensor of an open file whose bytes are exactly these (same byte order): they are
            then copied inside the kernel where both files allow it (``copy_file_range``: no page of
            either file passes through this process), else read from ``chunks``.
    """

    name: str
    type: int
    dims: tuple[int, ...]
    nbytes: int
    chunks: Callable[[], Iterable[Any]] = field(repr=False)
    offset: int | None = None
    source: Tensor | None = field(default=None, repr=False)

    def info(self) -> TensorRecord:
        if self.offset is None:
            raise GGUFInternalError("self.offset is not None does not hold")
        return TensorRecord(self.name, self.type, self.dims, self.offset)


TensorLike = np.ndarray | RawTensor | Tensor


def ggml_dims(dims: Sequence[int]) -> tuple[int, ...]:
    """The dimensions (innermost first) as ggml's writer stores them: ``gguf_write_tensor_info``
    writes ``ggml_n_dims`` of them, the dimensions up to the last one larger than 1, at least one.
    ggml's tools that write a model (``llama-quantize``, ``llama-gguf-split``) store a one-row
    matrix with one dimension, so every offset after it is 8 bytes earlier than with two. The
    tools of this library that write those tools' files use it; edits and copies keep the dims as
    stored. One deliberate difference: a trailing dimension of 0 is kept (ggml would drop it too,
    giving the info of a tensor with elements whose data has none: a broken file).

    >>> ggml_dims((256, 1)), ggml_dims((256, 1, 8)), ggml_dims((1, 1)), ggml_dims(()), ggml_dims((256, 0, 1))
    ((256,), (256, 1, 8), (1,), (1,), (256, 0))
    """
    n = len(dims)
    while n > 1 and dims[n - 1] == 1:
        n -= 1
    return tuple(int(d) for d in dims[:n]) or (1,)


# --------------------------------------------------------------------------- the check before writing

HeaderCheck = wiring.HeaderCheck
"""``check(header, strict_profile)``: warns for each broken rule, or raises when strict."""


def register_header_check(check: HeaderCheck | None) -> None:
    """Install the check run on every header before it is written
    (:func:`gguf_schema.check.writing.check_before_write`): the validator sits above the writer, so
    the package (``gguf_schema/__init__.py``, where the layers are wired) fills
    :data:`gguf_schema.wiring.header_check` once, explicitly; this sets the same slot. None: headers
    are written unchecked (for measuring the check's cost)."""
    wiring.header_check = check


def check_header(header: bytes | memoryview | IO[bytes], strict: str | None = None) -> None:
    """Check ``header`` (the bytes before the data section, or a file that holds them) before it is written: a
    :class:`~gguf_schema.errors.GGUFWarning` for each broken rule, or, with ``strict`` (a validation
    profile), a :class:`~gguf_schema.errors.GGUFValidationError` for the first error of that profile.
    Every writer calls it before writing anything, with the ``strict`` its caller gave.

    >>> check_header(header_bytes([make_field("", 1)], [], version=3, byte_order="little", data_size=0), "ggml")
    Traceback (most recent call last):
    ...
    gguf_schema.errors.GGUFValidationError: GGUF-E022: empty key (at offset 24)
    """
    check = wiring.header_check
    if check is not None:
        check(header, strict)


# --------------------------------------------------------------------------- public entry points


def save(
    target: PathLike | IO[bytes],
    metadata: Mapping[str, Any] | Iterable[Field] | None = None,
    tensors: Mapping[str, TensorLike] | None = None,
    *,
    version: int = 3,
    byte_order: str = "little",
    alignment: int | None = None,
    sync: bool = True,
    progress: Progress | None = None,
    strict: str | None = None,
) -> None:
    """Write a new GGUF file.

    Args:
        target: a path (written atomically) or a writable binary file object.
        metadata: mapping key -> value (types inferred, see :func:`gguf_schema.format.values.infer_type`;
            use numpy scalars or :class:`~gguf_schema.format.values.GGUFArray` to choose), or :class:`Field` records.
        tensors: mapping name -> numpy array (F32, F16, F64, I8..I64 from its dtype),
            :class:`RawTensor`, or a :class:`~gguf_schema.model.Tensor` of an open file.
        version: 1, 2 or 3.
        byte_order: "little" or "big".
        alignment: sets ``general.alignment`` (UINT32) when given.
        sync: fsync the new file before it replaces the old one (a path target only). False is
            faster; a power cut right after the write may then leave an incomplete file.
        progress: called with the number of bytes written, as they are written.
        strict: a validation profile ("spec", "ggml", "lenient"): refuse (a
            :class:`~gguf_schema.errors.GGUFValidationError`, nothing written) a header that breaks
            an error rule of it. Without it, each broken rule is a :class:`~gguf_schema.errors.GGUFWarning`.

    Tensors are laid out in order, each at an offset aligned to ALIGNMENT and padded after, as
    ggml writes them. n_dims is the array's ``ndim``.

    >>> import io, warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     save(io.BytesIO(), {"a": 1}, {"t": np.zeros((1, 1, 1, 1, 2), np.float32)})
    >>> [(w.category.__name__, w.message.rule) for w in caught]
    [('GGUFWarning', 'GGUF-E033')]
    """
    _check_variant(version, byte_order)
    fields = _fields_from(metadata)
    if alignment is not None:
        if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
            raise GGUFBuildError(f"alignment must be a positive integer, got {alignment!r}", value=alignment)
        key = K.GENERAL_ALIGNMENT
        fields = [f for f in fields if f.key != key] + [make_field(K.GENERAL_ALIGNMENT, alignment, ValueType.UINT32)]
    planned = [plan_tensor(name, t, byte_order) for name, t in (tensors or {}).items()]
    write_file(
        target, fields, planned, version=version, byte_order=byte_order, sync=sync, progress=progress, strict=strict
    )


def save_file(
    f: GGUFFile,
    target: PathLike | IO[bytes],
    *,
    version: int | None = None,
    byte_order: str | None = None,
    sync: bool = True,
    progress: Progress | None = None,
    strict: str | None = None,
    expected: tuple[int, int] | None = None,
) -> None:
    """Write a :class:`~gguf_schema.model.GGUFFile` back out (:meth:`GGUFFile.save`).

    With the byte order and alignment unchanged the data section is copied verbatim (so an
    unedited file comes out byte-identical, padding and trailing bytes included) and the
    stored padding after the tensor infos is kept where it still fits. Otherwise tensors are
    laid out afresh, contiguous and aligned, with the padding as read kept where it fits (a
    file with no data may end before its padding is complete). ``strict`` as in :func:`save`;
    ``expected`` as in :func:`write_file`.
    """
    version = version or f.version
    byte_order = byte_order or f.byte_order
    _check_variant(version, byte_order)
    fields = f.fields.records
    tensors = f.tensor_list
    if byte_order == f.byte_order and alignment_of(fields) == f.stored_alignment:
        infos = [TensorRecord.of(t) for t in tensors]
        write_file(
            target,
            fields,
            infos,
            version=version,
            byte_order=byte_order,
            padding=f.padding,
            data=DataCopy(f, f.data_section),
            sync=sync,
            progress=progress,
            source=f,
            strict=strict,
            expected=expected,
        )
    else:
        planned = [plan_tensor(t.name, t, byte_order) for t in tensors]
        write_file(
            target,
            fields,
            planned,
            version=version,
            byte_order=byte_order,
            padding=f.padding,
            sync=sync,
            progress=progress,
            source=f,
            strict=strict,
            expected=expected,
        )


def write_file(
    target: PathLike | IO[bytes],
    fields: Sequence[Field],
    tensors: Sequence[PlannedTensor] | Sequence[TensorRecord],
    *,
    version: int,
    byte_order: str,
    padding: bytes | None = None,
    data: DataCopy | None = None,
    sync: bool = True,
    progress: Progress | None = None,
    source: GGUFFile | None = None,
    strict: str | None = None,
    expected: tuple[int, int] | None = None,
) -> None:
    """Assemble a file: the header from ``fields`` and tensor infos, then the data section.

    ``tensors`` are :class:`PlannedTensor` s (their bytes streamed at their ``offset``, laid out
    contiguously and aligned where it is None), or, with ``data`` (a verbatim copy of another
    file's data section), :class:`TensorRecord` s whose offsets already point into it.
    ``padding``: the padding after the tensor infos to keep where it fits. ``source``: the file
    the fields and tensor infos were read from; those still as stored there are copied as they
    are, never encoded again (when the variant is the same). The header is checked first
    (:func:`check_header`: warnings, or ``strict`` refuses). ``expected``: the file (device,
    inode) a path ``target`` must still name when it is replaced
    (:func:`~gguf_schema.durable.atomic_replace`).
    """
    alignment = alignment_of(fields)
    if data is None:
        planned = [t for t in tensors if isinstance(t, PlannedTensor)]
        if len(planned) != len(tensors):
            raise TypeError("tensors must be PlannedTensor records when no data section is copied")
        section: Any = TensorStream(planned, alignment)
        infos = [t.info() for t in planned]
    else:
        infos = [t if isinstance(t, TensorRecord) else t.info() for t in tensors]
        section = data
    same = _same_variant(source, version, byte_order)
    if wiring.header_check is not None:  # the header without its padding: a hostile alignment costs nothing here
        with spool_header(
            fields, infos, version=version, byte_order=byte_order, padding=b"", data_size=0, source=same
        ) as spooled:
            if same is not None and same.storage is not None:
                same.storage.release_pages()  # what building the header read of the source: not needed while checking
            spooled.check(strict)
    with _bulk():
        obj = _file_container(fields, infos, padding, section, same)
    schema = fast_schema(byte_order, version)
    depth = max((_nesting(f.value) for f in fields if f.type == ValueType.ARRAY), default=0)

    def build(stream: IO[bytes]) -> None:
        out: Any = _Counting(stream, progress) if progress is not None else stream
        with _bulk():
            boundary.build(schema.gguf_file_t, obj, out, depth=depth)

    if isinstance(target, (str, os.PathLike)):
        atomic_replace(target, build, sync=sync, expected=expected)
    else:
        build(target)


class PushedFile:
    """A file assembled as :func:`write_file` assembles it, with its tensor data pushed rather than
    pulled: the header is checked and written at once (the layout is known from the planned tensors'
    sizes), then the caller pushes each tensor's bytes in the planned order (:meth:`push`), and
    :meth:`close` checks that every tensor got all its bytes and writes the last padding. The bytes
    are exactly :func:`write_file`'s for the same fields and tensors. Several files can be written at
    once this way from one read of their source (the presets of one model, in one pass); the
    ``chunks`` of the planned tensors are not called.

    >>> out = io.BytesIO()
    >>> f = PushedFile(out, [make_field("a", 1)], [PlannedTensor("t", 0, (4,), 16, lambda: ())], version=3, byte_order="little")
    >>> f.push(np.arange(4, dtype=np.float32)); f.close()
    >>> pulled = io.BytesIO()
    >>> write_file(pulled, [make_field("a", 1)], [plan_tensor("t", np.arange(4, dtype=np.float32), "little")], version=3, byte_order="little")
    >>> out.getvalue() == pulled.getvalue()
    True
    """

    def __init__(
        self,
        stream: IO[bytes],
        fields: Sequence[Field],
        tensors: Sequence[PlannedTensor],
        *,
        version: int,
        byte_order: str,
        progress: Progress | None = None,
        source: GGUFFile | None = None,
        strict: str | None = None,
    ):
        _check_variant(version, byte_order)
        layout = TensorStream(list(tensors), alignment_of(fields))
        self._planned = layout.planned
        self._size = layout.size
        infos = [t.info() for t in tensors]
        same = _same_variant(source, version, byte_order)
        if wiring.header_check is not None:
            with spool_header(
                fields, infos, version=version, byte_order=byte_order, padding=b"", data_size=0, source=same
            ) as spooled:
                spooled.check(strict)
        self._out: Any = _Counting(stream, progress) if progress is not None else stream
        #: where the data section starts in the stream (the header's size); each planned tensor's data
        #: is at ``data_offset + tensor.offset`` (its ``offset`` is set here), the file ends at ``data_offset + data_size``
        self.data_offset = write_header(
            self._out, fields, infos, version=version, byte_order=byte_order, data_size=self._size, source=same
        )
        self.data_size = self._size
        self._k = -1  # the tensor being written
        self._written = 0
        self._pos = 0  # bytes of the data section written
        self._advance()

    def _advance(self) -> None:
        """Move on past complete tensors (those of 0 bytes too), writing the padding before the next."""
        while self._k < 0 or (self._k < len(self._planned) and self._written == self._planned[self._k].nbytes):
            self._k += 1
            self._written = 0
            if self._k < len(self._planned):
                start = self._planned[self._k].offset or 0
                self._out.write(bytes(start - self._pos))
                self._pos = start
                if self._planned[self._k].nbytes:
                    break

    def push(self, piece: Any) -> None:
        """The next bytes of the current tensor (bytes-like or a numpy array, in the file's byte order)."""
        data = _as_bytes(piece) if isinstance(piece, np.ndarray) else memoryview(piece).cast("B")
        n = data.nbytes
        if self._k >= len(self._planned):
            raise GGUFBuildError("tensor data pushed after the last tensor", value=n)
        p = self._planned[self._k]
        if self._written + n > p.nbytes:
            raise GGUFBuildError(
                f"tensor data gave more than the {p.nbytes} bytes it takes", path=f"tensor {p.name!r}", value=n
            )
        self._out.write(data.data if isinstance(data, np.ndarray) else data)
        self._written += n
        self._pos += n
        if self._written == p.nbytes:
            self._advance()

    @property
    def current(self) -> str | None:
        """The name of the tensor the next bytes belong to (None when all are written)."""
        return self._planned[self._k].name if self._k < len(self._planned) else None

    def close(self) -> None:
        """Check that every tensor got its bytes, and write the padding after the last."""
        if self._k < len(self._planned):
            p = self._planned[self._k]
            raise GGUFBuildError(
                f"tensor data gave {self._written} bytes, {p.nbytes} expected",
                path=f"tensor {p.name!r}",
                value=self._written,
            )
        self._out.write(bytes(self._size - self._pos))
        self._pos = self._size


def header_bytes(
    fields: Iterable[Field],
    tensors: Sequence[TensorRecord],
    *,
    version: int,
    byte_order: str,
    padding: bytes | None = None,
    data_size: int = 1,
    source: GGUFFile | None = None,
) -> bytes:
    """The bytes of a GGUF file before its data section: what :func:`write_file` writes first.

    Args:
        fields: metadata records in file order (duplicates allowed).
        tensors: tensor infos with their stored (relative) offsets.
        version, byte_order: the file variant.
        padding: the padding bytes to keep after the tensor infos when they fit (else zeros).
        data_size: size of the data section that will follow; with 0 a short ``padding`` is kept
            as it is (a file with no data may end before the padding is complete).
        source: the file the records come from: records still as stored there are copied as they are.

    The whole header in memory: a header of 100 MB (a huge vocabulary) is better streamed with
    :func:`write_header` or spooled with :func:`spool_header`.

    >>> len(header_bytes([make_field("a", 1)], [TensorRecord("t", 0, (4,), 0)], version=3, byte_order="little"))
    96
    """
    out = io.BytesIO()
    write_header(
        out,
        fields,
        tensors,
        version=version,
        byte_order=byte_order,
        padding=padding,
        data_size=data_size,
        source=source,
    )
    return out.getvalue()


def write_header(
    stream: Any,
    fields: Iterable[Field],
    tensors: Sequence[TensorRecord],
    *,
    version: int,
    byte_order: str,
    padding: bytes | None = None,
    data_size: int = 1,
    source: GGUFFile | None = None,
) -> int:
    """Stream the header :func:`header_bytes` returns into ``stream`` (anything with ``write``); return its size.

    The header is built by the schema, record by record, as :func:`write_file` builds it (the same
    records, the same assembler): records still as stored in ``source`` are written as views of
    its bytes, so a 100 MB vocabulary goes to ``stream`` without a copy in memory. Arguments as in
    :func:`header_bytes`; :func:`header_size` is this with a stream that keeps nothing.

    >>> out = io.BytesIO()
    >>> write_header(out, [make_field("a", 1)], [], version=3, byte_order="little", data_size=0)
    64
    """
    fields = list(fields)
    data = b"" if data_size == 0 else _NoData(data_size)
    sink = Sink(stream)
    with _bulk():
        obj = _file_container(fields, tensors, padding, data, _same_variant(source, version, byte_order))
        depth = max((_nesting(f.value) for f in fields if f.type == ValueType.ARRAY), default=0)
        boundary.build(fast_schema(byte_order, version).gguf_file_t, obj, sink, depth=depth)
    return sink.pos


class _Discard:
    """A stream that keeps nothing (the header's size is counted by the :class:`Sink` around it)."""

    def write(self, b: Any) -> int:
        return b.nbytes if isinstance(b, memoryview) else len(b)


def header_size(
    fields: Iterable[Field],
    tensors: Sequence[TensorRecord],
    *,
    version: int,
    byte_order: str,
    padding: bytes | None = None,
    data_size: int = 1,
    source: GGUFFile | None = None,
) -> int:
    """``len(header_bytes(...))`` without holding the header: built by the same assembler into a
    stream that keeps nothing (records copied from ``source`` cost nothing; only records built
    anew are encoded).

    >>> header_size([make_field("a", 1)], [TensorRecord("t", 0, (4,), 0)], version=3, byte_order="little")
    96
    """
    return write_header(
        _Discard(),
        fields,
        tensors,
        version=version,
        byte_order=byte_order,
        padding=padding,
        data_size=data_size,
        source=source,
    )


#: a spooled header stays in memory up to this many bytes, and goes to an unnamed temporary file beyond
SPOOL_MEMORY = 8 * 2**20


class HeaderSpool:
    """A header built once and kept aside, in memory while small, else in an unnamed temporary file
    (``TMPDIR``): read back in chunks (:meth:`read_at`) or checked from its file (:meth:`check`), so
    that a 100 MB header is never held in memory as a second copy. Made by :func:`spool_header`."""

    def __init__(self, memory_limit: int = SPOOL_MEMORY):
        self.size = 0
        self._memory: io.BytesIO | None = io.BytesIO()
        self._file: IO[bytes] | None = None
        self._limit = memory_limit

    def write(self, b: Any) -> int:
        n = b.nbytes if isinstance(b, memoryview) else len(b)
        if self._memory is not None and self.size + n > self._limit:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            self._file.write(self._memory.getbuffer())
            self._memory = None
        target = self._memory if self._memory is not None else self._file
        if target is None:
            raise GGUFInternalError("target is not None does not hold")
        target.write(b)
        self.size += n
        return n

    def read_at(self, offset: int, n: int) -> bytes:
        """The header's bytes ``[offset, offset + n)`` (fewer at its end)."""
        if self._memory is not None:
            return bytes(self._memory.getbuffer()[offset : offset + n])
        if self._file is None:
            raise GGUFInternalError("self._file is not None does not hold")
        self._file.flush()
        return os.pread(self._file.fileno(), n, offset)

    def check(self, strict: str | None = None) -> None:
        """:func:`check_header` on the spooled header (read back from its file, mapped, when it is
        in one: never copied into memory)."""
        if wiring.header_check is None:
            return
        if self._memory is not None:
            check_header(self._memory.getvalue(), strict)
            return
        if self._file is None:
            raise GGUFInternalError("self._file is not None does not hold")
        self._file.flush()
        self._file.seek(0)
        check_header(self._file, strict)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._memory = self._file = None

    def __enter__(self) -> HeaderSpool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def spool_header(
    fields: Iterable[Field],
    tensors: Sequence[TensorRecord],
    *,
    version: int,
    byte_order: str,
    padding: bytes | None = None,
    data_size: int = 1,
    source: GGUFFile | None = None,
) -> HeaderSpool:
    """The header :func:`header_bytes` returns, built into a :class:`HeaderSpool` (close it, or use
    it as a context manager). Arguments as in :func:`header_bytes`.

    >>> with spool_header([make_field("a", 1)], [], version=3, byte_order="little", data_size=0) as h:
    ...     h.size, h.read_at(0, 4)
    (64, b'GGUF')
    """
    spool = HeaderSpool()
    try:
        write_header(
            spool,
            fields,
            tensors,
            version=version,
            byte_order=byte_order,
            padding=padding,
            data_size=data_size,
            source=source,
        )
    except BaseException:
        spool.close()
        raise
    return spool


def encoded_size(
    fields: Iterable[Field] = (), tensors: Iterable[TensorRecord] = (), *, version: int, byte_order: str = "little"
) -> int:
    """Bytes that ``fields`` (metadata pairs) and ``tensors`` (tensor infos) take in a file of this variant.

    >>> encoded_size([make_field("a", 1)], version=3)
    17
    """
    schema = fast_schema(byte_order, version)
    total = 0
    for f in fields:
        out = io.BytesIO()
        boundary.build(
            schema.gguf_metadata_kv_t,
            Container(key=f.key, value_type=f.type, value=f.value),
            out,
            depth=_nesting(f.value) if f.type == ValueType.ARRAY else 1,
        )
        total += out.tell()
    for t in tensors:
        out = io.BytesIO()
        boundary.build(schema.gguf_tensor_info_t, _info_container(t), out)
        total += out.tell()
    return total


# --------------------------------------------------------------------------- records


@contextlib.contextmanager
def _bulk() -> Iterator[None]:
    """No cyclic garbage collection while a header's records are made and written: a file of 800,000
    keys makes a million small objects that are never part of a cycle, and collecting while they
    pile up cost 3 of the 4 seconds of a build (measured: ``benchmarks/results/edit.md``)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _file_container(
    fields: Sequence[Field], infos: Sequence[TensorRecord], padding: bytes | None, data: Any, source: GGUFFile | None
) -> Container:
    """The ``gguf_file_t`` record the schema builds; records still as stored in ``source`` go in verbatim."""
    stored = source.stored_view() if source is not None else None
    spans = source.stored_spans(fields) if source is not None else [None] * len(fields)
    verbatim = Verbatim.span
    pairs: list[Any] = [
        verbatim(stored, span, f) if span is not None else Container(key=f.key, value_type=f.type, value=f.value)
        for f, span in zip(fields, spans, strict=True)
    ]
    if source is not None and list(infos) == [TensorRecord.of(t) for t in source.tensor_list]:
        tensor_infos: list[Any] = [Verbatim.span(stored, source.stored_info_span(i)) for i in range(len(infos))]
    else:
        tensor_infos = [_info_container(t) for t in infos]
    return Container(header=Container(metadata_kv=pairs), tensor_infos=tensor_infos, _padding=padding, tensor_data=data)


def _same_variant(source: GGUFFile | None, version: int, byte_order: str) -> GGUFFile | None:
    """``source`` when its records can be copied into a file of this variant as they are."""
    if source is None or source.storage is None or source.storage.closed:
        return None
    return source if (source.version, source.byte_order) == (version, byte_order) else None


def _info_container(t: TensorRecord) -> Container:
    return Container(name=t.name, dimensions=list(t.dims), type=int(t.type), offset=int(t.offset))


def _check_variant(version: int, byte_order: str) -> None:
    if version not in (1, 2, 3):
        raise ValueError(f"version must be 1, 2 or 3, got {version!r}")
    if byte_order not in ("little", "big"):
        raise ValueError(f"byte order must be 'little' or 'big', got {byte_order!r}")


def _fields_from(metadata: Mapping[str, Any] | Iterable[Field] | None) -> list[Field]:
    if metadata is None:
        return []
    if isinstance(metadata, Mapping):
        return [v if isinstance(v, Field) and v.key == k else make_field(k, v) for k, v in metadata.items()]
    out = []
    for f in metadata:
        if not isinstance(f, Field):
            raise GGUFBuildError(f"metadata records must be Field objects, got {type(f).__name__}", value=f)
        out.append(f)
    return out


def _nesting(a: Any) -> int:
    """How deep arrays nest in a GGUFArray (1 for an array of scalars)."""
    depth, level = 1, a
    while level.type == ValueType.ARRAY and len(level.items):
        level = max(level.items, key=_nesting) if len(level.items) > 1 else level.items[0]
        depth += 1
    return depth


# --------------------------------------------------------------------------- tensor sources


def plan_tensor(
    name: str, t: TensorLike, byte_order: str, offset: int | None = None, *, kernel_copy: bool = False
) -> PlannedTensor:
    """A :class:`PlannedTensor` for a numpy array, a :class:`RawTensor` or a :class:`Tensor` of an open
    file, its bytes converted to ``byte_order`` as they are streamed.

    ``kernel_copy``: a tensor of an open local file whose bytes go out unchanged is copied inside the
    kernel where both files allow it (:attr:`PlannedTensor.source`), instead of read through ``chunks``
    (which a caller may wrap, e.g. to measure the data as it passes)."""
    if not isinstance(name, str):
        raise GGUFBuildError(f"a tensor name must be a str, got {type(name).__name__}", value=name)
    where = f"tensor {name!r}"
    if isinstance(t, Tensor):
        gt = t.known_type()
        nbytes = t.nbytes
        return PlannedTensor(
            name,
            int(gt),
            tuple(t.dims),
            nbytes,
            lambda: _swapped(t.chunks(CHUNK), gt, t.byte_order, byte_order),  # a piece at a time, pages released
            offset,
            t if kernel_copy and (t.byte_order == byte_order or _unit(gt) == 1) else None,
        )
    if isinstance(t, RawTensor):
        try:
            gt = GGMLType.of(t.type)
        except (ValueError, TypeError) as e:
            raise GGUFBuildError(str(e), path=where, value=t.type) from None
        shape = tuple(int(d) for d in t.shape)
        if gt.removed:
            raise GGUFBuildError(f"ggml type {gt.name} has been removed", path=where, value=int(gt))
        if any(d < 0 for d in shape):
            raise GGUFBuildError(f"negative dimension in shape {shape}", path=where, value=shape)
        try:
            nbytes = tensor_nbytes(gt, tuple(reversed(shape)))
        except ValueError:
            raise GGUFBuildError(
                f"{gt.name} rows must be a multiple of {gt.block_size} elements, shape {shape} has "
                f"{shape[-1] if shape else 1}",
                path=where,
                value=shape,
            ) from None
        data = t.data
        if isinstance(data, np.ndarray) or _bytes_like(data):
            size = data.nbytes if isinstance(data, np.ndarray) else memoryview(data).nbytes
            if size != nbytes:
                raise GGUFBuildError(
                    f"{gt.name} tensor of shape {shape} takes {nbytes} bytes, {size} given", path=where, value=size
                )
            whole = data

            def pieces() -> Iterable[Any]:
                return _array_pieces(whole) if isinstance(whole, np.ndarray) else [whole]

        elif callable(data):
            pieces = data
        elif isinstance(data, Iterable):
            given = data

            def pieces() -> Iterable[Any]:
                return given
        else:
            raise GGUFBuildError(
                "RawTensor data must be bytes-like, a numpy array, an iterable of pieces or a callable returning one, "
                f"got {type(data).__name__}",
                path=where,
                value=type(data).__name__,
            )
        return PlannedTensor(
            name,
            int(gt),
            tuple(reversed(shape)),
            nbytes,
            lambda: _swapped(_counted(pieces(), nbytes, where), gt, t.byte_order, byte_order),
            offset,
        )
    if isinstance(t, np.ndarray):
        gt = _DTYPE_TYPES.get(t.dtype.newbyteorder("="))  # type: ignore[assignment]
        if gt is None:
            raise GGUFBuildError(
                f"no ggml type for numpy dtype {t.dtype}: convert it, or pass RawTensor(type, shape, data)",
                path=where,
                value=str(t.dtype),
            )
        arr = t
        src_order = (
            "big"
            if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and np.little_endian is False)
            else "little"
        )
        return PlannedTensor(
            name,
            int(gt),
            tuple(reversed(arr.shape)),
            arr.nbytes,
            lambda: _swapped(_array_pieces(arr), gt, src_order, byte_order),
            offset,
        )
    raise GGUFBuildError(
        f"a tensor must be a numpy array, RawTensor or Tensor, got {type(t).__name__}",
        path=where,
        value=type(t).__name__,
    )


def _unit(t: GGMLType) -> int:
    """Bytes of the smallest piece of ``t`` that converts on its own: a block, or an element."""
    return t.type_size if t.quantized else t.numpy_dtype.itemsize  # type: ignore[union-attr]


def _swapped(pieces: Iterable[Any], t: GGMLType, src_order: str, dst_order: str) -> Iterator[Any]:
    """A tensor's pieces in ``dst_order``: the one place tensor data changes byte order (every
    multi-byte field of every block swapped, byte arrays left alone: :func:`gguf_schema.tensors.byteswap`).
    Pieces that cut a block are joined with the next, so any piece sizes convert."""
    unit = _unit(t)
    if src_order == dst_order or unit == 1:
        yield from pieces
        return
    carry = np.empty(0, np.uint8)
    for piece in pieces:
        raw = _as_bytes(piece)
        if carry.size:
            raw = np.concatenate([carry, raw])
        cut = raw.size - raw.size % unit
        carry = raw[cut:].copy()
        if cut:
            yield _byteswap(raw[:cut], t, src_order, dst_order)
    if carry.size:  # a piece that ends inside a block: the size check names it
        yield carry


def _as_bytes(piece: Any) -> np.ndarray:
    """A piece of tensor data as a flat ``uint8`` array (no copy where it is contiguous)."""
    if isinstance(piece, np.ndarray):
        return np.ascontiguousarray(piece).reshape(-1).view(np.uint8)
    return np.frombuffer(piece, np.uint8)


def _bytes_like(data: Any) -> bool:
    return isinstance(data, (bytes, bytearray, memoryview))


def _array_pieces(arr: np.ndarray) -> Iterator[Any]:
    """An array's bytes in C order, in contiguous pieces of about :data:`CHUNK` bytes: never a copy of the
    whole array (a non-contiguous one is copied a piece at a time); a memmap's pages are released behind."""
    if arr.ndim == 0:
        yield np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        return
    if arr.flags.c_contiguous:
        flat = arr.reshape(-1).view(np.uint8)
        step = max(arr.itemsize, CHUNK - CHUNK % arr.itemsize)
        for a in range(0, flat.size, step):
            piece = flat[a : a + step]
            yield piece.data
            _release_mapped(arr, piece)
        return
    per_row = arr[0].nbytes if len(arr) else 0
    if per_row > CHUNK:  # one index of the first axis is itself large: go one level down
        for sub in arr:
            yield from _array_pieces(sub)
        return
    rows = max(1, CHUNK // per_row) if per_row else len(arr)
    for a in range(0, len(arr), rows):
        yield np.ascontiguousarray(arr[a : a + rows]).reshape(-1).view(np.uint8).data


def _release_mapped(arr: np.ndarray, piece: np.ndarray) -> None:
    """For a ``numpy.memmap`` that shares its file (modes r, r+, w+: never ``c``, whose private changes
    dropping the pages would lose), let the pages of ``piece`` go from the resident memory."""
    owner = arr
    while not isinstance(owner, np.memmap) and isinstance(owner.base, np.ndarray):
        owner = owner.base
    mm = getattr(owner, "_mmap", None)
    if not isinstance(owner, np.memmap) or getattr(owner, "mode", "c") == "c" or mm is None or _DONTNEED is None:
        return
    try:
        base = np.frombuffer(mm, np.uint8, count=1).ctypes.data  # where the map starts
        start = piece.ctypes.data - base
        end = start + piece.nbytes
        start -= start % mmap.PAGESIZE
        end -= end % mmap.PAGESIZE
        if 0 <= start < end <= len(mm):
            mm.madvise(_DONTNEED, start, end - start)
    except (ValueError, OSError, TypeError, AttributeError):  # a hint only
        return


def _counted(pieces: Iterable[Any], nbytes: int, where: str) -> Iterator[Any]:
    """The pieces of a streamed tensor, refused as soon as they give more than ``nbytes`` bytes, or
    at their end when they gave fewer."""
    done = 0
    for piece in pieces:
        if not (isinstance(piece, np.ndarray) or _bytes_like(piece)):
            raise GGUFBuildError(
                f"a piece of tensor data must be bytes-like or a numpy array, got {type(piece).__name__}",
                path=where,
                value=type(piece).__name__,
            )
        done += piece.nbytes if isinstance(piece, np.ndarray) else memoryview(piece).nbytes
        if done > nbytes:
            raise GGUFBuildError(f"tensor data gave more than the {nbytes} bytes it takes", path=where, value=done)
        yield piece
    if done != nbytes:
        again = (
            " (an iterator gives its pieces once: if an earlier write consumed it, give a callable that returns a "
            "new one)"
            if done == 0 and iter(pieces) is pieces
            else ""
        )
        raise GGUFBuildError(f"tensor data gave {done} bytes, {nbytes} expected{again}", path=where, value=done)


class TensorStream:
    """The data section of planned tensors: each at its offset, zero padding between and after them."""

    def __init__(self, planned: list[PlannedTensor], alignment: int):
        pos = 0
        for p in planned:
            if p.offset is None:
                p.offset = align_offset(pos, alignment)
            pos = p.offset + p.nbytes
        self.planned = sorted(planned, key=lambda p: p.offset or 0)
        for a, b in zip(self.planned, self.planned[1:], strict=False):
            if (b.offset or 0) < (a.offset or 0) + a.nbytes:
                raise GGUFBuildError(
                    f"tensor {b.name!r} at offset {b.offset} overlaps {a.name!r} (which ends at "
                    f"{(a.offset or 0) + a.nbytes})",
                    path=f"tensor {b.name!r}",
                    value=b.offset,
                )
        end = max(((p.offset or 0) + p.nbytes for p in planned), default=0)
        self.size = align_offset(end, alignment) if planned else 0

    def write_to(self, stream: IO[bytes]) -> None:
        pos = 0
        for p in self.planned:
            stream.write(bytes((p.offset or 0) - pos))
            pos = (p.offset or 0) + p.nbytes
            where = p.source.file_range() if p.source is not None else None
            if where is not None and where[2] == p.nbytes and _copy_in_kernel(where[0], stream, where[1], p.nbytes):
                continue
            written = 0
            for chunk in p.chunks():
                n = chunk.nbytes if isinstance(chunk, (memoryview, np.ndarray)) else len(chunk)
                if written + n > p.nbytes:
                    raise GGUFBuildError(
                        f"tensor data gave more than the {p.nbytes} bytes it takes",
                        path=f"tensor {p.name!r}",
                        value=written + n,
                    )
                stream.write(chunk if not isinstance(chunk, np.ndarray) else _as_bytes(chunk).data)
                written += n
            if written != p.nbytes:
                raise GGUFBuildError(
                    f"tensor data gave {written} bytes, {p.nbytes} expected", path=f"tensor {p.name!r}", value=written
                )
        stream.write(bytes(self.size - pos))


class DataCopy:
    """Another file's data section, copied verbatim (tensor bytes, gaps, trailing bytes)."""

    def __init__(self, f: GGUFFile, section: DataSection):
        self.f = f
        self.section = section
        self.size = section.size

    def write_to(self, stream: Any) -> None:
        start, size = self.section.offset, self.section.size
        src = self.f.fileno()
        if src is not None and _copy_in_kernel(src, stream, start, size):
            return
        storage = self.f.storage
        for a in range(start, start + size, CHUNK):
            n = min(CHUNK, start + size - a)
            stream.write(self.f.view(a, n))
            if storage is not None:
                storage.release(a, n)  # a mapped source: the pages behind leave the resident memory


def _copy_in_kernel(fd: int, stream: Any, offset: int, count: int) -> bool:
    """Copy ``count`` bytes of file ``fd`` from ``offset`` to the end of ``stream`` inside the kernel, if both ends allow it."""
    copy = getattr(os, "copy_file_range", None)
    moved = getattr(stream, "moved", None)  # a progress counter to tell, if there is one
    if copy is None:
        return False
    try:
        out = stream.fileno()
        stream.flush()
        here = stream.tell()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False
    if os.lseek(out, 0, os.SEEK_CUR) != here:  # a stream that does not write at its descriptor's position
        return False
    done = 0
    try:
        while done < count:
            n = copy(fd, out, count - done, offset + done)
            if n == 0:
                break
            done += n
    except OSError:
        if done:
            raise
        return False
    if done != count:
        raise GGUFBuildError(f"source ended after {done} of {count} bytes of tensor data", value=done)
    stream.seek(here + count)
    if moved is not None:
        moved(count)
    return True


class _NoData:
    """A stand-in for a non-empty data section that writes nothing (the padding node asks its size)."""

    def __init__(self, size: int):
        self.size = size

    def write_to(self, stream: Any) -> None:
        return None


class _Counting:
    """Passes writes on and reports their sizes to a progress callback."""

    def __init__(self, stream: IO[bytes], progress: Progress):
        self.stream = stream
        self.progress = progress

    def write(self, b: Any) -> int:
        n = self.stream.write(b)
        self.progress(b.nbytes if isinstance(b, memoryview) else len(b))
        return n

    def moved(self, n: int) -> None:
        self.progress(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _byteswap(raw: Any, t: Any, src_order: str, dst_order: str) -> Any:
    """:func:`gguf_schema.tensors.byteswap` (the kernels' package is imported when first needed)."""
    from .tensors import byteswap

    return byteswap(raw, t, src_order, dst_order)
