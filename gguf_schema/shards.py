"""Split models on the reading side: the shards of one model opened as one.

A model may be stored as several files (llama.cpp's ``gguf-split`` convention): shards named
``<prefix>-00001-of-00003.gguf`` ..., each with ``split.no`` (0-based), ``split.count`` and
``split.tensors.count``, the first with the full metadata. This module finds the shards of a first
shard (:func:`shard_paths`, by name; also for URLs), opens them (:func:`open_split`) and checks
that they belong together (numbers, counts, byte order, tensor names, our ``split.id``), and
presents them as one read-only :class:`SplitModel`. Users reach it through
``gguf_schema.open(path, split=True)``; writing shards (split, merge) is
:mod:`gguf_schema.tools.split`.

>>> import os, tempfile, numpy as np, gguf_schema
>>> from gguf_schema.tools.split import split
>>> d = tempfile.mkdtemp()
>>> src = os.path.join(d, "m.gguf")
>>> gguf_schema.save(src, {"general.name": "m"}, {f"t{i}": np.full(4, i, np.float32) for i in range(3)})
>>> paths = split(src, os.path.join(d, "m"), max_tensors=2)
>>> with gguf_schema.open(paths[0], split=True) as model:
...     len(model.shards), list(model.tensors), model.metadata["general.name"]
(2, ['t0', 't1', 't2'], 'm')
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import GGUFFileNotFoundError, GGUFFormatError, GGUFKeyError
from .format import keys as K
from .format.limits import Limits
from .io import PathLike
from .io.source import is_url
from .model import Fields, GGUFFile, Tensor
from .reader import read

__all__ = ["SplitModel", "open_model", "open_split", "shard_name", "shard_paths", "shard_paths_named"]

StorageOptions = Mapping[str, Any] | None


_SHARD_RE = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def shard_name(prefix: str, index: int, count: int) -> str:
    """The path of shard ``index`` (0-based) of ``count``.

    >>> shard_name("out/model", 0, 3)
    'out/model-00001-of-00003.gguf'
    """
    return f"{prefix}-{index + 1:05d}-of-{count:05d}.gguf"


def shard_paths(
    first_shard: PathLike,
    *,
    storage_options: StorageOptions = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> list[str]:
    """The paths (or URLs) of all shards of the split model whose first shard is ``first_shard``.

    A file without ``split.count`` (or with a count of 1) is a model of one shard. The
    others are found by the naming convention ``<prefix>-0000i-of-0000n.gguf``; for a URL the
    convention applies to its path, and a query (``?download=true``) is kept on every shard's URL.
    The first shard is read as ``storage_options``, ``limits`` and ``mmap`` say (see :func:`gguf_schema.open`).

    >>> shard_paths_named("https://host/m/x-00001-of-00003.gguf?download=true", 3)[1]
    'https://host/m/x-00002-of-00003.gguf?download=true'
    """
    first = os.fspath(first_shard)
    with read(first, storage_options=storage_options, limits=limits, mmap=mmap) as f:
        return _shard_paths_of(f, first)


def _shard_paths_of(f: GGUFFile, first: str) -> list[str]:
    no = _split_int(f, K.SPLIT_NO, 0)
    count = _split_int(f, K.SPLIT_COUNT, 1)
    if no != 0:
        raise GGUFFormatError(
            f"{first} is shard {no + 1} of {count}, not the first shard (split.no = {no})", path=first, value=no
        )
    if count < 1:
        raise GGUFFormatError(f"split.count is {count}", path=first, value=count)
    if count == 1:
        return [first]
    return shard_paths_named(first, count)


def shard_paths_named(first: str, count: int) -> list[str]:
    """The ``count`` shard paths (or URLs) named after ``first`` by the convention ``<prefix>-0000i-of-0000n.gguf``."""
    base, query = _url_parts(first) if is_url(first) else (first, "")
    m = _SHARD_RE.match(base)
    name = base.rsplit("/", 1)[-1] if is_url(first) else os.path.basename(base)
    if not m:
        raise GGUFFormatError(
            f"a model of {count} shards needs names like PREFIX-00001-of-{count:05d}.gguf, got {name!r}",
            path=first,
            value=name,
        )
    if int(m.group("count")) != count:
        raise GGUFFormatError(
            f"the name says {int(m.group('count'))} shards, split.count says {count}", path=first, value=count
        )
    return [shard_name(m.group("prefix"), i, count) + query for i in range(count)]


def _url_parts(url: str) -> tuple[str, str]:
    """A URL without its query and fragment, and them (``?a=b#c``)."""
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    return url[:cut], url[cut:]


def _split_int(f: GGUFFile, key: str, default: int) -> int:
    field = f.fields.get(key)
    if field is None:
        return default
    if not field.type.is_integer:
        raise GGUFFormatError(f"{key} must be an integer, is {field.type.name}", path=f.name, value=field.value)
    return int(field.value)


class _AllTensors(Mapping[str, Tensor]):
    def __init__(self, tensors: dict[str, Tensor]):
        self._t = tensors

    def __getitem__(self, name: str) -> Tensor:
        return self._t[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._t)

    def __len__(self) -> int:
        return len(self._t)


class _ReadOnlyMetadata(Mapping[str, Any]):
    def __init__(self, fields: Fields):
        self._fields = fields

    def __getitem__(self, key: str) -> Any:
        try:
            return self._fields[key].plain()
        except KeyError:
            raise GGUFKeyError(f"no metadata key {key!r}", value=key) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


class SplitModel:
    """All shards of a split model presented as one (read-only).

    Attributes:
        shards: the open shards (:class:`GGUFFile`), in order.
        paths: their paths.
        fields, metadata: the first shard's metadata (split keys included).
        tensors: every tensor of every shard by name; each :class:`Tensor`'s ``data`` is a
            zero-copy view into its own shard.
        version, byte_order, alignment: the first shard's.
    """

    def __init__(self, shards: list[GGUFFile]):
        self.shards = shards
        self.paths = [s.name for s in shards]
        first = shards[0]
        self.name = first.name
        self.version = first.version
        self.byte_order = first.byte_order
        self.alignment = first.alignment
        self.fields = first.fields
        self.metadata: Mapping[str, Any] = _ReadOnlyMetadata(first.fields)
        every = [t for s in shards for t in s.tensor_list]
        by_name: dict[str, Tensor] = {}
        for t in every:
            if t.name in by_name:
                raise GGUFFormatError(f"tensor {t.name!r} is in two shards", path=t.source_name, value=t.name)
            by_name[t.name] = t
        self._tensor_list = every
        self.tensors: Mapping[str, Tensor] = _AllTensors(by_name)

    @property
    def tensor_list(self) -> list[Tensor]:
        """Every tensor info of every shard, in order."""
        return list(self._tensor_list)

    @property
    def file_size(self) -> int:
        """The total size of the shards in bytes."""
        return sum(s.file_size for s in self.shards)

    def close(self) -> None:
        """Close every shard."""
        for s in self.shards:
            s.close()

    def __enter__(self) -> SplitModel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SplitModel({self.name!r}, {len(self.shards)} shards, {len(self.fields)} keys, {len(self._tensor_list)} tensors)"


def open_split(
    first_shard: PathLike,
    *,
    storage_options: StorageOptions = None,
    lazy: bool = False,
    limits: Limits | None = None,
    mmap: bool = True,
) -> SplitModel:
    """Open a split model from its first shard (a path or URL): one object with its metadata and all tensors.

    Checks each shard's ``split.no`` and ``split.count``, and that ``split.tensors.count``
    equals the number of tensors found. A file that is not split opens as a model of one shard.
    The other shards of a URL are found next to it, by name (:func:`shard_paths`), and read
    remotely too (``storage_options``: those of its fsspec backend). ``lazy``, ``limits`` and ``mmap``
    as in :func:`gguf_schema.open`, for every shard.
    """
    first = os.fspath(first_shard)
    options: dict[str, Any] = {"storage_options": storage_options, "lazy": lazy, "limits": limits, "mmap": mmap}
    return _open_shards(read(first, **options), first, options)


def _open_shards(head: GGUFFile, first: str, options: dict[str, Any]) -> SplitModel:
    """The split model whose first shard ``head`` (read from ``first``) is open already: the others read next
    to it, with the same reading ``options`` (the keyword arguments of :func:`~gguf_schema.reader.read`)."""
    shards: list[GGUFFile] = [head]
    try:
        paths = _shard_paths_of(head, first)
        for i, p in enumerate(paths):
            missing = f"shard {i + 1} of {len(paths)} is missing: {p}"
            if i == 0:
                s = head
            elif not is_url(p) and not os.path.exists(p):
                raise GGUFFormatError(missing, path=p)
            else:
                try:
                    s = read(p, **options)
                except GGUFFileNotFoundError as e:
                    raise GGUFFormatError(f"{missing} ({e.reason})", path=p) from None
                shards.append(s)
            if len(paths) > 1:
                _check_shard(s, p, i, len(paths), shards[0])
        model = SplitModel(shards)
        declared = _split_int(shards[0], K.SPLIT_TENSORS_COUNT, len(model.tensor_list))
        if declared != len(model.tensor_list):
            raise GGUFFormatError(
                f"split.tensors.count is {declared} but the shards hold {len(model.tensor_list)} tensors",
                path=paths[0],
                value=declared,
            )
        return model
    except BaseException:
        for s in shards:
            s.close()
        raise


def _check_shard(s: GGUFFile, p: str, i: int, count: int, first: GGUFFile) -> None:
    """Shard ``i`` of ``count`` (read from ``p``) must say so, and belong to the same set as the first."""
    no, n = _split_int(s, K.SPLIT_NO, -1), _split_int(s, K.SPLIT_COUNT, -1)
    if (no, n) != (i, count):
        raise GGUFFormatError(
            f"{p}: split.no = {no}, split.count = {n}; expected {i} and {count}",
            path=p,
            value=(no, n),
        )
    if s.byte_order != first.byte_order:
        raise GGUFFormatError(f"{p} is {s.byte_order}-endian, the first shard {first.byte_order}-endian", path=p)
    total, first_total = _split_int(s, K.SPLIT_TENSORS_COUNT, -1), _split_int(first, K.SPLIT_TENSORS_COUNT, -1)
    if total != first_total:
        raise GGUFFormatError(
            f"{p} belongs to another split: split.tensors.count = {total}, the first shard's is {first_total}",
            path=p,
            value=total,
        )
    ident, first_ident = s.fields.get(K.SPLIT_ID), first.fields.get(K.SPLIT_ID)
    mine, theirs = (None if x is None else x.value for x in (ident, first_ident))
    if mine != theirs:
        raise GGUFFormatError(
            f"{p} belongs to another split: {K.SPLIT_ID} = {mine!r}, the first shard's is {theirs!r} "
            "(a split was interrupted while its shards were renamed, or shards of two splits were mixed)",
            path=p,
            value=mine,
        )


def open_model(
    path: PathLike,
    *,
    lazy: bool = False,
    storage_options: StorageOptions = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> GGUFFile | SplitModel:
    """Open a GGUF file (a path or URL), or every shard of a split model (:func:`open_split`) when
    ``path`` is its first shard; ``lazy``, ``storage_options``, ``limits`` and ``mmap`` as in
    :func:`gguf_schema.open` (for every shard)."""
    options: dict[str, Any] = {"storage_options": storage_options, "lazy": lazy, "limits": limits, "mmap": mmap}
    f = read(path, **options)
    if K.SPLIT_COUNT in f.fields and f.metadata.get(K.SPLIT_NO) == 0 and f.metadata[K.SPLIT_COUNT] > 1:
        return _open_shards(f, os.fspath(path), options)
    return f
