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

import os as _os
from typing import TYPE_CHECKING, Any, Literal, overload

from . import wiring as _wiring
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

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .check.audit import audit
    from .format.limits import Limits
    from .format.types import FileType, GGMLType, ValueType
    from .format.values import BoolByte, Field, GGUFArray, LazyStrings, make_field
    from .io.source import Source, SourceLike
    from .model import Fields, GGUFFile, Metadata, Tensor
    from .reader import read
    from .shards import SplitModel, open_split
    from .shards import open_model as open_model
    from .tools.scan import ScanRecord, scan, scan_file
    from .writer import RawTensor, save

#: the public names not defined here, each imported from its module on first use (PEP 562's module
#: ``__getattr__``): ``import gguf_schema`` imports only the errors, so a process pays for the layers it
#: uses (numpy and construct come with the first name that needs them)
_LAZY = {
    "Limits": "format.limits",
    "FileType": "format.types",
    "GGMLType": "format.types",
    "ValueType": "format.types",
    "BoolByte": "format.values",
    "Field": "format.values",
    "GGUFArray": "format.values",
    "LazyStrings": "format.values",
    "make_field": "format.values",
    "Source": "io.source",
    "SourceLike": "io.source",
    "Fields": "model",
    "GGUFFile": "model",
    "Metadata": "model",
    "Tensor": "model",
    "read": "reader",
    "RawTensor": "writer",
    "save": "writer",
    "audit": "check.audit",
    "SplitModel": "shards",
    "open_model": "shards",
    "open_split": "shards",
    "ScanRecord": "tools.scan",
    "scan": "tools.scan",
    "scan_file": "tools.scan",
}

#: the package's modules, reachable as attributes (``gguf_schema.writer``) as they were when the package
#: imported them all
_SUBMODULES = frozenset(
    {
        "check",
        "cli",
        "compat",
        "durable",
        "errors",
        "format",
        "io",
        "model",
        "reader",
        "shards",
        "tensors",
        "testing",
        "tools",
        "wiring",
        "writer",
    }
)


def __getattr__(name: str) -> Any:
    from gguf_schema.lazy import attribute

    return attribute(__name__, name, _LAZY, _SUBMODULES, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


def _require(f: Any, strict: str) -> Any:
    """:func:`gguf_schema.check.require` (validation, imported when a profile is asked for)."""
    from .check import require

    return require(f, strict)


def _save_file(*args: Any, **kwargs: Any) -> None:
    """:func:`gguf_schema.writer.save_file`, what :meth:`GGUFFile.save` runs (the writer imported on its first call)."""
    from .writer import save_file

    save_file(*args, **kwargs)


def _check_before_write(header: Any, strict: str | None = None) -> None:
    """The check run before a header is written (imported on the first write)."""
    from .check.writing import check_before_write

    check_before_write(header, strict)


__version__ = "0.1.0"

# The layers wired, here and only here (no module registers itself on import): the model is below
# the writer, so GGUFFile.save is lent the writer's save_file; the writer is below check/, so every
# write is handed the check its header passes first. Both are slots of gguf_schema.wiring, filled
# with functions that import their module when first called, so that this import stays cheap.
_wiring.save_file = _save_file
_wiring.header_check = _check_before_write


def _compiled_elsewhere() -> str | None:
    """:func:`gguf_schema.tensors.engine.compiled_elsewhere`, asked only of a source tree without kernels
    (importing the kernels' package costs more than the rest of this package's import)."""
    import importlib.machinery

    here = _os.path.dirname(_os.path.abspath(__file__))
    if not _os.path.isfile(_os.path.join(_os.path.dirname(here), "setup.py")):
        return None  # not a source tree
    kernels = _os.path.join(here, "tensors", "_kernels")
    if any(_os.path.isfile(kernels + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES):
        return None  # this copy has its kernels
    from .tensors.engine import compiled_elsewhere

    return compiled_elsewhere()


_installed = _compiled_elsewhere()
if _installed is not None:  # once, at import: the library never prints, it warns
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


@overload
def open(
    source: SourceLike | Source,
    *,
    lazy: bool = ...,
    strict: str | None = ...,
    limits: Limits | None = ...,
    mmap: bool = ...,
    storage_options: Mapping[str, Any] | None = ...,
    split: Literal[False] = ...,
) -> GGUFFile: ...


@overload
def open(
    source: SourceLike | Source,
    *,
    lazy: bool = ...,
    strict: str | None = ...,
    limits: Limits | None = ...,
    mmap: bool = ...,
    storage_options: Mapping[str, Any] | None = ...,
    split: Literal[True],
) -> GGUFFile | SplitModel: ...


def open(
    source: SourceLike | Source,
    *,
    lazy: bool = False,
    strict: str | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    split: bool = False,
) -> GGUFFile | SplitModel:
    """Open a GGUF file: a path, URL, bytes-like object or binary file object. This is the way to open
    a file; everything else in the library (``reader.read``, ``shards.open_model``) is what it is made of.

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
            :mod:`gguf_schema.io.remote`). Ignored for anything that is not a URL.
        split: when ``source`` (a path or URL) is the first shard of a split model
            (``split.count`` > 1, ``split.no`` = 0), open every shard as one read-only
            :class:`SplitModel` (the shards found next to it by name and checked to belong
            together); any other file opens as a :class:`GGUFFile`, as without it. ``strict``
            then applies to every shard.

    >>> import io
    >>> try:
    ...     open("no/such/model.gguf")
    ... except FileNotFoundError as e:
    ...     print(type(e).__name__, isinstance(e, GGUFError))
    GGUFFileNotFoundError True
    """
    if split:
        from .shards import SplitModel, open_model

        if not isinstance(source, (str, _os.PathLike)):
            raise TypeError(f"split=True opens a path or URL, got {type(source).__name__}")
        model = open_model(source, lazy=lazy, limits=limits, mmap=mmap, storage_options=storage_options)
        if strict is not None:
            try:
                for shard in model.shards if isinstance(model, SplitModel) else [model]:
                    _require(shard, strict)
            except BaseException:
                model.close()
                raise
        return model
    from .reader import read

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
