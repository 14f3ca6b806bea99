"""Reading: ``open()`` a GGUF file and get a :class:`~gguf_schema.model.GGUFFile` of typed fields and lazy tensors.

Data flows one way: the source's bytes (:mod:`gguf_schema.io.source`) are parsed by the
schema (:mod:`gguf_schema.format.schema`, accelerated by :mod:`gguf_schema.format.fast`, through the error boundary of
:mod:`gguf_schema.format.boundary`); the parsed records become
:class:`~gguf_schema.format.values.Field` and :class:`~gguf_schema.model.Tensor` objects here.
Tensor data is never read while opening: :attr:`Tensor.data` is a zero-copy, read-only numpy
view into the memory map, made on first access.

A source that holds only a prefix of the file (a remote file, positioned reads: see
:mod:`gguf_schema.io.source`) gives the parser what it has fetched; when the parse runs past
its end, the reader asks for twice as much (2 MiB, 4 MiB, 8 MiB ...) and parses again: a header of
``H`` bytes takes about ``log2(H / 2 MiB) + 1`` reads and fetches less than ``2 H`` (and at most
2 MiB for a header under 2 MiB). gemma-3-270m's 6.5 MB header takes three reads, 8 MiB in all.

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
from collections.abc import Callable, Mapping
from typing import Any

from .durable import shared_header_lock
from .errors import GGUFLimitError, GGUFTruncatedError
from .format import boundary
from .format.fast import fast_schema
from .format.limits import Limits
from .format.nodes import DataSection, align_offset
from .format.schema import GGUFSchema, alignment_of, sniff
from .format.values import Field
from .io.opening import open_source
from .io.source import ByteReader, Source, SourceLike
from .model import GGUFFile, Tensor

__all__ = ["MAX_PADDING_FETCH", "read", "read_with"]

SchemaFor = Callable[[str, int], GGUFSchema]

#: the most bytes of alignment padding fetched to find where the data section of a file that is
#: not mapped begins (real files pad to 32 bytes; a hostile ``general.alignment`` may claim 2**63)
MAX_PADDING_FETCH = 2**24


def read(
    source: SourceLike | Source,
    *,
    lazy: bool = False,
    limits: Limits | None = None,
    mmap: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> GGUFFile:
    """Open a GGUF file: a path, URL, bytes-like object or binary file object.

    The internal primitive :func:`gguf_schema.open` is made of; users (and the command line) call
    ``gguf_schema.open``, which adds validation profiles (``strict=``) and split models (``split=True``).

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
        storage_options: for a URL (``https://``, ``hf://``, ``s3://`` ...: read through fsspec, see
            :mod:`gguf_schema.io.remote`), the options of its fsspec backend (credentials,
            endpoints); ignored for anything else.
    """
    return read_with(fast_schema, source, lazy=lazy, limits=limits, mmap=mmap, storage_options=storage_options)


def read_with(
    schema_for: SchemaFor,
    source: SourceLike | Source,
    *,
    lazy: bool = False,
    limits: Limits | None = None,
    mmap: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> GGUFFile:
    """:func:`read` with another variant of the schema (``schema_for(byte_order, version)``):
    ``read_with(gguf_schema, ...)`` reads with the plain schema, without the fast layer (slowly),
    and the tests prove both give the same file."""
    if not isinstance(lazy, bool):
        raise TypeError(f"lazy must be True or False, got {lazy!r}")
    if not isinstance(mmap, bool):
        raise TypeError(f"mmap must be True or False, got {mmap!r}")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"limits must be a gguf_schema.Limits, got {type(limits).__name__}")
    src = open_source(source, mmap=mmap, storage_options=storage_options)
    try:
        with _header_lock(src):
            return _parse(src, schema_for, limits=limits, lazy=lazy)
    except BaseException:
        src.close()
        raise


def _header_lock(src: Source) -> contextlib.AbstractContextManager[None]:
    """A local file is read under a shared lock while its header is parsed, so that an edit in place
    (which holds an exclusive one) is never seen half-written; a file an interrupted edit left torn
    (a journal beside it) is refused until it is recovered."""
    fd = src.fileno()
    if fd is None or src.lock_held:
        return contextlib.nullcontext()
    return shared_header_lock(fd, src.name)


def _parse(src: Source, schema_for: SchemaFor, *, limits: Limits | None, lazy: bool) -> GGUFFile:
    """Parse the header; where the source holds only a prefix of the file, grow it until the parse
    no longer runs into its end (see the module docstring)."""
    while True:
        head = src.header()
        complete = src.complete()
        try:
            order, version = sniff(bytes(head[:8]))
            # a prefix is parsed without decoding strings (lazy): most of these parses fail, and
            # the one that succeeds is parsed again as asked, below
            parsed = boundary.parse(
                schema_for(order, version), ByteReader(head), limits=limits, lazy=lazy or not complete
            )
        except GGUFTruncatedError:
            if complete:
                raise
            want = 2 * len(head)
        else:
            if complete:
                break
            # the padding was read as far as the prefix goes: fetch the rest of it
            metadata_end = parsed.tensor_data.offset - len(parsed._padding)
            want = min(align_offset(metadata_end, alignment_of(parsed.header.metadata_kv)), src.size)
            if want <= len(head):
                if not lazy:
                    parsed = boundary.parse(schema_for(order, version), ByteReader(head), limits=limits, lazy=False)
                break
            if want - len(head) > MAX_PADDING_FETCH:
                raise GGUFLimitError(
                    f"the alignment padding after the tensor infos runs to offset {want:,}: more than "
                    f"{MAX_PADDING_FETCH:,} bytes to fetch beyond the header read so far",
                    offset=metadata_end,
                    path="_padding",
                    value=want - metadata_end,
                )
        if not src.extend(max(want, 1024)):
            raise GGUFTruncatedError(
                f"could not read past {len(head):,} bytes of {src.size:,}", offset=len(head), path=src.name
            )
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
