"""Whole-file conversion: byte order (little <-> big endian) and format version (1, 2, 3).

Metadata values are rebuilt by the schema of the target variant. Tensor data is converted
type by type: plain types (F32, F16, BF16, F64, I8..I64) swap each element; quantized types
swap the multi-byte fields of every block (``ggml_half`` scales, ``uint16``/``int16``/``float``
fields) and leave byte arrays alone, using the block layouts of :mod:`gguf_schema.tensors`.
The conversion is exact both ways: little -> big -> little gives back the original bytes for
a file laid out as ggml lays out files (tensors contiguous and aligned, zero padding).

With the byte order unchanged only the header is rebuilt and the data section is copied
verbatim (a version change keeps every tensor's offset).

>>> import io, os, tempfile, numpy as np, gguf_schema
>>> d = tempfile.mkdtemp()
>>> gguf_schema.save(os.path.join(d, "le.gguf"), {"a": 1}, {"w": np.arange(3, dtype=np.float32)})
>>> convert(os.path.join(d, "le.gguf"), os.path.join(d, "be.gguf"), byte_order="big")
>>> with gguf_schema.open(os.path.join(d, "be.gguf")) as f:
...     f.byte_order, f.tensors["w"].data.tolist()
('big', [0.0, 1.0, 2.0])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from ..durable import refuse_overwriting_inputs
from ..format.limits import Limits
from ..io import PathLike
from ..reader import read
from ..writer import Progress, save_file

__all__ = ["convert"]


def convert(
    source: PathLike,
    target: PathLike | IO[bytes],
    *,
    byte_order: str | None = None,
    version: int | None = None,
    progress: Progress | None = None,
    storage_options: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
    strict: str | None = None,
) -> None:
    """Write ``source`` to ``target`` in another byte order and/or format version.

    Args:
        source: the GGUF file to read (a path, or a URL read through fsspec with ``storage_options``).
        target: the path to write (atomically; it may not be ``source``, nor another name of it) or a binary stream.
        byte_order: "little" or "big" (default: unchanged).
        version: 1, 2 or 3 (default: unchanged). ggml reads versions 2 and 3 only.
        progress: called with the number of bytes written, as they are written.
        limits: resource limits for reading ``source``, as in :func:`gguf_schema.open`.
        mmap: map a local ``source`` (default) or read it with positioned reads (``False``).
        strict: a validation profile ("spec", "ggml", "lenient"): refuse (a
            :class:`~gguf_schema.errors.GGUFValidationError`, nothing written) a header that breaks an
            error rule of it; without it, each broken rule is a :class:`~gguf_schema.errors.GGUFWarning`.

    Raises :class:`~gguf_schema.errors.GGUFError` for an unreadable source, a truncated one
    (:class:`~gguf_schema.errors.GGUFTruncatedError`: its copy would be truncated too), a tensor of an
    unknown or removed type, or an invalid byte order or version.
    """
    if byte_order not in (None, "little", "big"):
        raise ValueError(f"byte order must be 'little' or 'big', got {byte_order!r}")
    if version not in (None, 1, 2, 3):
        raise ValueError(f"version must be 1, 2 or 3, got {version!r}")
    refuse_overwriting_inputs([target], [source], command="convert")
    with read(source, storage_options=storage_options, limits=limits, mmap=mmap) as f:
        f.require_whole("the converted file")  # a truncated source would give a truncated copy
        for t in f.tensor_list:  # fail before writing anything if a tensor cannot be converted
            if byte_order not in (None, f.byte_order):
                t.nbytes  # noqa: B018 - raises GGUFFormatError for an unknown or removed type
        save_file(f, target, byte_order=byte_order, version=version, progress=progress, strict=strict)
