"""Reading: ``open()`` a GGUF file and get a :class:`~gguf_schema.model.GGUFFile` of typed fields and lazy tensors.

Data flows one way: the source's bytes (:mod:`gguf_schema.format.source`) are parsed by the
schema (:mod:`gguf_schema.format.schema`, through the error boundary of
:mod:`gguf_schema.format.boundary`); the parsed records become
:class:`~gguf_schema.format.values.Field` and :class:`~gguf_schema.model.Tensor` objects here.
Tensor data is never read while opening: :attr:`Tensor.data` is a zero-copy, read-only numpy
view into the memory map, made on first access.

Validation is not this module's business: ``gguf_schema.open(..., strict=PROFILE)`` composes this
reader with :mod:`gguf_schema.check`.

>>> import io, numpy as np, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.architecture": "llama"}, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
>>> with read(buf.getvalue()) as f:
...     print(f.version, f.byte_order, f.metadata["general.architecture"], f.tensors["w"].data[1].tolist())
3 little llama [3.0, 4.0, 5.0]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from .durable import FileLock, check_no_journal
from .errors import GGUFTruncatedError
from .format import boundary
from .format.limits import Limits
from .format.nodes import DataSection
from .format.schema import GGUFSchema, gguf_schema, sniff
from .format.source import ByteReader, Source, SourceLike, open_source
from .format.values import Field
from .model import GGUFFile, Tensor

__all__ = ["read", "read_with"]

SchemaFor = Callable[[str, int], GGUFSchema]


def read(
    source: SourceLike | Source, *, lazy: bool = False, limits: Limits | None = None, mmap: bool = True
) -> GGUFFile:
    """Open a GGUF file: a path, bytes-like object or binary file object.

    Metadata and tensor infos are parsed at once; tensor data is not read. Raises
    :class:`~gguf_schema.errors.GGUFError` (and nothing else) for a file that cannot be read:
    a malformed one (:class:`~gguf_schema.errors.GGUFFormatError` and its subclasses) or one the
    operating system will not give (:class:`~gguf_schema.errors.GGUFIOError`, also the matching
    ``OSError`` such as ``FileNotFoundError``).

    Args:
        source: where the file is.
        lazy: leave string arrays (vocabularies) undecoded until used: they come back as
            :class:`~gguf_schema.format.values.LazyStrings`, which compare equal to lists of str.
        limits: resource limits (:class:`~gguf_schema.format.limits.Limits`); the defaults accept every real file.
        mmap: map a local file (default: tensor data as zero-copy views), or read it with positioned
            reads (``False``: tensor data copied on access, and another process truncating the file
            meanwhile gives a clean :class:`~gguf_schema.errors.GGUFTruncatedError` instead of killing
            this one with SIGBUS).
    """
    return read_with(gguf_schema, source, lazy=lazy, limits=limits, mmap=mmap)


def read_with(
    schema_for: SchemaFor,
    source: SourceLike | Source,
    *,
    lazy: bool = False,
    limits: Limits | None = None,
    mmap: bool = True,
) -> GGUFFile:
    """:func:`read` with another variant of the schema (``schema_for(byte_order, version)``):
    the tests prove the fast schema against the reference one (:mod:`gguf_schema.testing.reference`)."""
    if not isinstance(lazy, bool):
        raise TypeError(f"lazy must be True or False, got {lazy!r}")
    if not isinstance(mmap, bool):
        raise TypeError(f"mmap must be True or False, got {mmap!r}")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"limits must be a gguf_schema.Limits, got {type(limits).__name__}")
    src = open_source(source, mmap=mmap)
    try:
        with _header_lock(src):
            return _parse(src, schema_for, limits=limits, lazy=lazy)
    except BaseException:
        src.close()
        raise


def _header_lock(src: Source) -> FileLock | contextlib.nullcontext[None]:
    """A local file is read under a shared lock while its header is parsed, so that an edit in place
    (which holds an exclusive one) is never seen half-written; a file an interrupted edit left torn
    (a journal beside it) is refused until it is recovered."""
    fd = src.fileno()
    if fd is None or src.lock_held:
        return contextlib.nullcontext()
    if src.name is not None:
        check_no_journal(src.name)
    return FileLock(fd, exclusive=False, path=src.name)


def _parse(src: Source, schema_for: SchemaFor, *, limits: Limits | None, lazy: bool) -> GGUFFile:
    """Parse the header; where the source holds only a prefix of the file, grow it until the parse
    no longer runs into its end."""
    while True:
        head = src.header()
        try:
            order, version = sniff(bytes(head[:8]))
            parsed = boundary.parse(schema_for(order, version), ByteReader(head), limits=limits, lazy=lazy)
        except GGUFTruncatedError:
            if src.complete() or not src.extend(max(2 * len(head), 1024)):
                raise
            continue
        if not src.complete() and parsed.tensor_data.offset >= len(head):  # the padding may run on
            src.extend(len(head) + 64 * 1024)
            continue
        break
    kvs, infos = parsed.header.metadata_kv, parsed.tensor_infos
    fields = [
        kv if isinstance(kv, Field) else Field(kv.key, kv.value_type, kv.value, at)
        for kv, at in zip(kvs, kvs.offsets, strict=True)
    ]
    data_offset = parsed.tensor_data.offset
    tensors = [
        Tensor(
            ti.name,
            ti.type,
            tuple(ti.dimensions),
            ti.offset,
            data_offset=data_offset,
            byte_order=order,
            storage=src,
            info_offset=at,
        )
        for ti, at in zip(infos, infos.offsets, strict=True)
    ]
    metadata_end = data_offset - len(parsed._padding)
    return GGUFFile(
        version=version,
        byte_order=order,
        fields=fields,
        tensors=tensors,
        padding=bytes(parsed._padding),
        data=DataSection(data_offset, src.size - data_offset),
        storage=src,
        metadata_end=metadata_end,
    )
