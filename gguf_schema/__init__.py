"""gguf-schema: the GGUF model file format as a declarative schema, with a lazy reader and a byte-exact writer.

>>> import io, numpy as np, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.architecture": "llama", "general.name": "tiny"},
...                  {"token_embd.weight": np.ones((4, 8), np.float32)})
>>> with gguf_schema.open(buf.getvalue()) as f:
...     f.metadata["general.name"], f.fields["general.name"].type.name, f.tensors["token_embd.weight"].shape
('tiny', 'STRING', (4, 8))

The package is layered (see ARCHITECTURE.md): ``format`` (the spec as a schema), ``tensors``
(tensor data), ``model`` (the objects you hold), ``reader`` / ``writer`` (the only ways in and
out), ``check`` (validation), ``tools`` (edit, convert, split, diff, JSON, scan), ``cli``. This module
only gathers the public names and composes :func:`open` from the reader and the checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import model as _model
from . import writer as _writer
from .check import require as _require
from .check.audit import audit
from .check.writing import check_before_write as _check_before_write
from .errors import (
    GGUFBuildError,
    GGUFChangedError,
    GGUFConnectionError,
    GGUFDependencyError,
    GGUFDocumentError,
    GGUFError,
    GGUFFileNotFoundError,
    GGUFFormatError,
    GGUFInstallWarning,
    GGUFInternalError,
    GGUFIOError,
    GGUFKeyError,
    GGUFLimitError,
    GGUFPermissionError,
    GGUFRemoteError,
    GGUFRoundTripError,
    GGUFTimeoutError,
    GGUFTruncatedError,
    GGUFValidationError,
    GGUFWarning,
)
from .format.limits import Limits
from .format.source import Source, SourceLike
from .format.types import FileType, GGMLType, ValueType
from .format.values import BoolByte, Field, GGUFArray, LazyStrings, make_field
from .model import Fields, GGUFFile, Metadata, Tensor
from .reader import read
from .tensors.engine import compiled_elsewhere as _compiled_elsewhere
from .tools.scan import ScanRecord, scan, scan_file
from .tools.split import SplitModel, open_split
from .writer import RawTensor, save

__version__ = "0.1.0"

# The layers wired, here and only here (no module registers itself on import): the model is below
# the writer, so GGUFFile.save is lent the writer's save_file; the writer is below check/, so every
# write is handed the check its header passes first.
_model.register_writer(_writer.save_file)
_writer.register_header_check(_check_before_write)

_installed = _compiled_elsewhere()
if _installed is not None:  # once, at import: the library never prints, it warns
    import os as _os
    import warnings as _warnings

    _warnings.warn(
        GGUFInstallWarning(
            f"gguf_schema was imported from the source tree {_os.path.dirname(__file__)}, which has no compiled "
            f"kernels, not from the installed copy {_installed}, which has them (Python puts the current folder "
            "first on its import path): the numpy kernels give the same results, more slowly. Start Python outside "
            "the clone, or build the kernels in the clone with: pip install -e ."
        ),
        stacklevel=2,
    )


def open(
    source: SourceLike | Source,
    *,
    lazy: bool = False,
    strict: str | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> GGUFFile:
    """Open a GGUF file: a path, URL, bytes-like object or binary file object.

    Metadata and tensor infos are parsed at once; tensor data is not read. Raises
    :class:`GGUFError` and nothing else for a file that cannot be read: a malformed one
    (:class:`GGUFFormatError` and its subclasses, naming offset, schema path and value) or one
    the operating system will not give (:class:`GGUFIOError`, also the matching ``OSError``:
    a missing path is a :class:`GGUFFileNotFoundError`, also a ``FileNotFoundError``). A bad
    argument is a ``ValueError`` or ``TypeError``.

    Args:
        source: where the file is.
        lazy: leave string arrays (vocabularies) undecoded until used: they come back as
            :class:`LazyStrings`, which compare equal to lists of str.
        strict: a validation profile ("spec", "ggml" or "lenient"): raise
            :class:`GGUFValidationError` for the first error-severity finding instead of
            returning a file that breaks the profile's rules.
        limits: resource limits (:class:`Limits`); the defaults accept every real file.
        mmap: map a local file (tensor data as zero-copy views; the default), or read it with
            positioned reads (``False``: tensor data copied on access; a file truncated by another
            process meanwhile is a clean :class:`GGUFTruncatedError`, never a crash).
        storage_options: for a URL, the options of its fsspec backend (credentials, endpoints):
            ``https://``, ``hf://``, ``s3://``, ``gs://`` ... are read in ranges, the header only,
            tensor data on demand (``pip install 'gguf-schema[remote]'``; see
            :mod:`gguf_schema.format.remote`). Ignored for anything that is not a URL.

    >>> import io
    >>> try:
    ...     open("no/such/model.gguf")
    ... except FileNotFoundError as e:
    ...     print(type(e).__name__, isinstance(e, GGUFError))
    GGUFFileNotFoundError True
    """
    f = read(source, lazy=lazy, limits=limits, mmap=mmap, storage_options=storage_options)
    return f if strict is None else _require(f, strict)


__all__ = [
    "BoolByte",
    "Field",
    "Fields",
    "FileType",
    "GGMLType",
    "GGUFArray",
    "GGUFBuildError",
    "GGUFChangedError",
    "GGUFConnectionError",
    "GGUFDependencyError",
    "GGUFDocumentError",
    "GGUFError",
    "GGUFFile",
    "GGUFFileNotFoundError",
    "GGUFFormatError",
    "GGUFIOError",
    "GGUFInstallWarning",
    "GGUFInternalError",
    "GGUFKeyError",
    "GGUFLimitError",
    "GGUFPermissionError",
    "GGUFRemoteError",
    "GGUFRoundTripError",
    "GGUFTimeoutError",
    "GGUFTruncatedError",
    "GGUFValidationError",
    "GGUFWarning",
    "LazyStrings",
    "Limits",
    "Metadata",
    "RawTensor",
    "ScanRecord",
    "SplitModel",
    "Tensor",
    "ValueType",
    "audit",
    "make_field",
    "open",
    "open_split",
    "read",
    "save",
    "scan",
    "scan_file",
]
