"""Scanning many GGUF files: the header of each (local or remote), one :class:`ScanRecord` per file.

:func:`scan` reads the headers of many files concurrently -- the work is I/O bound, so a bounded
pool of threads does it -- and returns one record per file, in the order given: its size,
version, byte order, architecture, name, file type, tensor count, parameter count, tensor type
histogram, vocabulary size, and the verdict of each validation profile
(:func:`gguf_schema.check.check`). Tensor data is never read (a remote file costs its header:
see :mod:`gguf_schema.io.remote`). A file that cannot be read gets a record with ``error``
set; one bad file never stops a scan.

:func:`expand` turns patterns into paths and URLs (local globs, folders, fsspec globs such as
``s3://bucket/**/*.gguf``); :func:`write_parquet` writes records as a Parquet table (the
optional extra ``pip install 'gguf-schema[parquet]'``: pyarrow).

For corpora that outgrow one machine, :func:`scan_file` -- one path in, one record out -- is a
plain module-level function and records are plain picklable dataclasses, so an existing engine
distributes it; with Dask (``pip install 'gguf-schema[dask]'``)::

    import dask.bag as db
    from dask.distributed import Client, LocalCluster
    from gguf_schema import scan_file

    with LocalCluster() as cluster, Client(cluster):
        records = db.from_sequence(urls, partition_size=64).map(scan_file, profiles=("ggml",)).compute()

>>> import io, os, tempfile, numpy as np, gguf_schema
>>> d = tempfile.mkdtemp()
>>> gguf_schema.save(os.path.join(d, "a.gguf"), {"general.architecture": "llama", "general.name": "a"},
...                  {"w": np.zeros((2, 32), np.float32)})
>>> with open(os.path.join(d, "b.gguf"), "wb") as fh:
...     _ = fh.write(b"GGUF\\x03\\x00\\x00\\x00")
>>> a, b = scan(expand([os.path.join(d, "*.gguf")]), profiles=("ggml",))
>>> a.architecture, a.name, a.parameter_count, a.type_histogram, a.verdicts
('llama', 'a', 64, {'F32': 1}, {'ggml': True})
>>> b.error_type, b.verdicts, b.failed_rules
('GGUFTruncatedError', {'ggml': False}, {'ggml': ['GGUF-E001']})
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..check import PROFILES, check
from ..check.validate import split_place
from ..errors import GGUFDependencyError, GGUFError, GGUFFormatError, shorten
from ..format import keys as K
from ..format.limits import Limits
from ..format.types import FileType
from ..io.source import is_url
from ..model import GGUFFile
from ..reader import read
from ..shards import open_split

__all__ = ["THREADS", "ScanRecord", "expand", "scan", "scan_file", "write_parquet"]

#: default number of files read at once by :func:`scan`
THREADS = 8


@dataclass(frozen=True)
class ScanRecord:
    """What :func:`scan_file` found in one file (``None`` where the file could not tell).

    Attributes:
        path: the path or URL as given.
        size: the file's size in bytes.
        version, byte_order, alignment: the header's.
        data_offset: where the data section starts (the bytes of the header, padding included).
        architecture, name: ``general.architecture`` and ``general.name``.
        file_type: ``general.file_type`` by name (``MOSTLY_Q4_K_M``), or its number if unknown.
        tensor_count: tensor infos in the file.
        parameter_count: elements of all tensors.
        type_histogram: tensor type name -> number of tensors of that type.
        vocab_size: tokens in ``tokenizer.ggml.tokens``.
        split_no, split_count: for a shard of a split model, its place (``split.no``, 0-based) and the
            number of shards; None for a file that is not split. A shard is checked as a shard (a
            later one holds no model metadata of its own), and the first shard with every shard's
            tensors when the others are found beside it.
        verdicts: profile -> True when the file breaks no error rule of the profile (empty when
            the file could not be reached at all: an I/O error says nothing about its content).
        failed_rules: profile -> the ids of the error rules the file breaks (``GGUF-E001`` for a
            file that cannot be parsed).
        error: why the file could not be read (None if it was).
        error_type: the class of that error (``GGUFTruncatedError``, ``GGUFFileNotFoundError`` ...).
    """

    path: str
    size: int | None = None
    version: int | None = None
    byte_order: str | None = None
    alignment: int | None = None
    data_offset: int | None = None
    architecture: str | None = None
    name: str | None = None
    file_type: str | None = None
    tensor_count: int | None = None
    parameter_count: int | None = None
    type_histogram: dict[str, int] = field(default_factory=dict)
    vocab_size: int | None = None
    verdicts: dict[str, bool] = field(default_factory=dict)
    failed_rules: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None
    error_type: str | None = None
    split_no: int | None = None
    split_count: int | None = None

    @property
    def readable(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (a fresh dict)."""
        return dataclasses.asdict(self)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _file_type(value: Any) -> str | None:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return None if value is None else str(value)
    try:
        return FileType(value).name
    except ValueError:
        return str(value)


def _record(path: str, f: GGUFFile, profiles: Sequence[str], options: Mapping[str, Any]) -> ScanRecord:
    md = f.metadata
    tokens = f.fields.get(K.TOKENIZER_GGML_TOKENS)
    histogram = Counter(t.type_name for t in f.tensor_list)
    place = split_place(f)
    model: Any = None
    if place is not None and place[0] == 0:  # a first shard: checked with its model's tensors, if found
        with contextlib.suppress(GGUFError, OSError):
            model = open_split(path, lazy=True, **options)
    try:
        reports = {p: check(f, p, model=model) for p in profiles}
    finally:
        if model is not None:
            model.close()
    return ScanRecord(
        path=path,
        size=f.file_size,
        version=f.version,
        byte_order=f.byte_order,
        alignment=f.alignment,
        data_offset=f.data_offset,
        architecture=_text(md.get(K.GENERAL_ARCHITECTURE)),
        name=_text(md.get(K.GENERAL_NAME)),
        file_type=_file_type(md.get(K.GENERAL_FILE_TYPE)),
        tensor_count=len(f.tensor_list),
        parameter_count=sum(t.n_elements for t in f.tensor_list),
        type_histogram=dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
        vocab_size=len(tokens.value) if tokens is not None and hasattr(tokens.value, "__len__") else None,
        verdicts={p: r.ok for p, r in reports.items()},
        failed_rules={p: list(dict.fromkeys(x.rule for x in r.errors)) for p, r in reports.items()},
        split_no=place[0] if place is not None else None,
        split_count=place[1] if place is not None else None,
    )


def scan_file(
    path: str | os.PathLike[str],
    *,
    profiles: Sequence[str] = PROFILES,
    storage_options: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> ScanRecord:
    """The :class:`ScanRecord` of one file (a path or URL): its header only, checked under each of ``profiles``.

    Never raises for the file: whatever stops it being read is the record's ``error``. Plain and
    picklable, for engines that distribute work (see the module docstring). An unknown profile is
    a ``ValueError``. ``storage_options``, ``limits`` and ``mmap`` as in :func:`gguf_schema.open`
    (a file over a limit is a record with the :class:`~gguf_schema.errors.GGUFLimitError` as its error).
    """
    bad = [p for p in profiles if p not in PROFILES]
    if bad or isinstance(profiles, str):
        raise ValueError(f"profiles must be a list of {', '.join(PROFILES)}; got {profiles!r}")
    name = os.fspath(path)
    try:
        options: dict[str, Any] = {"storage_options": storage_options, "limits": limits, "mmap": mmap}
        with read(name, lazy=True, **options) as f:
            return _record(name, f, profiles, options)
    except GGUFFormatError as e:  # the file is there and is not a readable GGUF file
        return ScanRecord(
            path=name,
            verdicts=dict.fromkeys(profiles, False),
            failed_rules={p: ["GGUF-E001"] for p in profiles},
            error=str(e),
            error_type=type(e).__name__,
        )
    except (GGUFError, OSError, ValueError, TypeError) as e:  # could not be reached: nothing known of its content
        return ScanRecord(path=name, error=str(e) or type(e).__name__, error_type=type(e).__name__)


def scan(
    paths: Iterable[str | os.PathLike[str]],
    *,
    profiles: Sequence[str] = PROFILES,
    threads: int = THREADS,
    storage_options: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> list[ScanRecord]:
    """The :class:`ScanRecord` of each file (paths or URLs), in the order given, read ``threads`` at a time.

    Args:
        paths: paths and URLs (see :func:`expand` for patterns and folders).
        profiles: the validation profiles whose verdicts each record carries.
        threads: files read at once (the work waits on I/O: more threads than cores help remote files).
        storage_options: for URLs, the options of their fsspec backend (credentials, endpoints).
        limits: resource limits for reading each file (:class:`~gguf_schema.format.limits.Limits`).
        mmap: map local files (default) or read them with positioned reads (``False``).
    """
    if isinstance(paths, (str, os.PathLike)):
        raise TypeError("paths must be a list of paths or URLs, not one string (see expand() for patterns)")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    items = [os.fspath(p) for p in paths]
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="gguf-scan") as pool:
        return list(
            pool.map(
                lambda p: scan_file(p, profiles=profiles, storage_options=storage_options, limits=limits, mmap=mmap),
                items,
            )
        )


_MAGIC = frozenset("*?[")


def expand(
    patterns: Iterable[str | os.PathLike[str]], *, storage_options: Mapping[str, Any] | None = None
) -> list[str]:
    """Paths and URLs from patterns: a local glob (``**`` recurses), a local folder (every
    ``*.gguf`` under it), a URL glob (through fsspec: ``s3://bucket/**/*.gguf``), or a path or
    URL taken as it is. Each pattern's matches are sorted; the first occurrence of a duplicate is kept.
    """
    out: dict[str, None] = {}
    for pattern in patterns:
        p = os.fspath(pattern)
        if is_url(p):
            matches = _url_glob(p, storage_options) if _MAGIC & set(p.split("://", 1)[1]) else [p]
        elif _MAGIC & set(p):
            matches = sorted(glob.glob(p, recursive=True))
        elif os.path.isdir(p):
            matches = sorted(glob.glob(os.path.join(glob.escape(p), "**", "*.gguf"), recursive=True))
        else:
            matches = [p]
        out.update(dict.fromkeys(m for m in matches if is_url(m) or not os.path.isdir(m)))
    return list(out)


def _url_glob(pattern: str, storage_options: Mapping[str, Any] | None) -> list[str]:
    from ..io.ioerrors import io_error
    from ..io.remote import url_filesystem

    fs, path = url_filesystem(pattern, storage_options)
    try:
        found = fs.glob(path)
    except Exception as e:
        error = io_error(e, pattern)
        if error is not None:
            raise error from None
        raise ValueError(f"cannot expand {pattern!r}: {e}") from None
    return sorted(fs.unstrip_protocol(m) for m in found)


def write_parquet(records: Iterable[ScanRecord], target: str | os.PathLike[str]) -> None:
    """Write records as a Parquet table: one row per file, one column per :class:`ScanRecord`
    field (``type_histogram`` a map of type name to count; ``verdicts`` and ``failed_rules``
    maps by profile). Needs pyarrow (``pip install 'gguf-schema[parquet]'``)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # absent, or installed but unusable (built for another numpy)
        why = "" if isinstance(e, ModuleNotFoundError) or not str(e) else f" ({shorten(str(e), 200)})"
        raise GGUFDependencyError(
            f"writing Parquet needs pyarrow{why}: pip install 'gguf-schema[parquet]'", name="pyarrow"
        ) from None
    schema = pa.schema(
        [
            ("path", pa.string()),
            ("size", pa.int64()),
            ("version", pa.int32()),
            ("byte_order", pa.string()),
            ("alignment", pa.int64()),
            ("data_offset", pa.int64()),
            ("architecture", pa.string()),
            ("name", pa.string()),
            ("file_type", pa.string()),
            ("tensor_count", pa.int64()),
            ("parameter_count", pa.int64()),
            ("type_histogram", pa.map_(pa.string(), pa.int64())),
            ("vocab_size", pa.int64()),
            ("verdicts", pa.map_(pa.string(), pa.bool_())),
            ("failed_rules", pa.map_(pa.string(), pa.list_(pa.string()))),
            ("error", pa.string()),
            ("error_type", pa.string()),
            ("split_no", pa.int32()),
            ("split_count", pa.int32()),
        ]
    )
    rows = [r.to_dict() for r in records]
    for row in rows:
        for key in ("type_histogram", "verdicts", "failed_rules"):
            row[key] = list(row[key].items())
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), os.fspath(target))
