"""Split (sharded) models: split a file into shards, merge shards back, open shards as one model.

The layout is llama.cpp's ``gguf-split`` convention (``reference/conventions.md``):

* shards are named ``<prefix>-00001-of-00003.gguf`` ... (1-based, five digits);
* every shard carries ``split.no`` (UINT16, **0-based**), ``split.count`` (UINT16) and
  ``split.tensors.count`` (INT32, the total over all shards), in that order, after its other keys;
* the first shard holds the full metadata; the others only the split keys (and
  ``general.alignment`` when the model sets one, since it governs their own data layout);
* each shard has its own tensor infos and data section; tensor names are unique across shards.

Tensors keep their order; each is copied byte for byte. A shard is closed when adding the next
tensor would make the file larger than ``max_size`` bytes or hold more than ``max_tensors``
tensors (a single tensor larger than ``max_size`` gets a shard of its own).

>>> import os, tempfile, numpy as np, gguf_schema
>>> d = tempfile.mkdtemp()
>>> src = os.path.join(d, "m.gguf")
>>> gguf_schema.save(src, {"general.name": "m"}, {f"t{i}": np.full(4, i, np.float32) for i in range(3)})
>>> paths = split(src, os.path.join(d, "m"), max_tensors=2)
>>> [os.path.basename(p) for p in paths]
['m-00001-of-00002.gguf', 'm-00002-of-00002.gguf']
>>> with open_split(paths[0]) as model:
...     list(model.tensors), model.tensors["t2"].data.tolist(), model.metadata["general.name"]
(['t0', 't1', 't2'], [2.0, 2.0, 2.0, 2.0], 'm')
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import Any, Union

from ..errors import GGUFBuildError, GGUFFileNotFoundError, GGUFFormatError, GGUFKeyError
from ..format.nodes import align_offset
from ..format.source import is_url
from ..format.types import ValueType
from ..format.values import Field, make_field
from ..model import Fields, GGUFFile, Tensor
from ..reader import read
from ..writer import Progress, TensorInfo, encoded_size, header_bytes, plan_tensor, write_file

__all__ = [
    "SPLIT_KEYS",
    "SplitModel",
    "merge",
    "open_model",
    "open_split",
    "parse_size",
    "plan_split",
    "shard_name",
    "shard_paths",
    "shard_paths_named",
    "split",
]

PathLike = Union[str, "os.PathLike[str]"]
StorageOptions = Mapping[str, Any] | None

#: the keys a shard carries, in the order llama.cpp writes them
SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?B?)\s*$", re.IGNORECASE)
_SHARD_RE = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def parse_size(text: str) -> int:
    """A size in bytes from ``123``, ``500K``, ``500M``, ``2G``, ``1.5T`` (powers of 1000, as
    llama.cpp's ``gguf-split`` reads them) or ``512MiB``, ``2GiB`` (powers of 1024).

    >>> parse_size("500M"), parse_size("2G"), parse_size("1GiB"), parse_size("4096")
    (500000000, 2000000000, 1073741824, 4096)
    """
    m = _SIZE_RE.match(text)
    if not m:
        raise GGUFBuildError(f"not a size: {text!r} (examples: 500M, 2G, 1.5G, 512MiB, 4096)", value=text)
    number, scale, suffix = m.group(1), m.group(2).upper(), m.group(3).upper()
    base = 1024 if suffix.startswith("I") else 1000
    if suffix.startswith("I") and not scale:
        raise GGUFBuildError(f"not a size: {text!r} (examples: 500M, 2G, 512MiB)", value=text)
    size = int(float(number) * base ** " KMGT".index(scale or " "))
    if size <= 0:
        raise GGUFBuildError(f"a size must be positive, got {text!r}", value=text)
    return size


def shard_name(prefix: str, index: int, count: int) -> str:
    """The path of shard ``index`` (0-based) of ``count``.

    >>> shard_name("out/model", 0, 3)
    'out/model-00001-of-00003.gguf'
    """
    return f"{prefix}-{index + 1:05d}-of-{count:05d}.gguf"


def _split_fields(no: int, count: int, total: int) -> list[Field]:
    return [
        make_field("split.no", no, ValueType.UINT16),
        make_field("split.count", count, ValueType.UINT16),
        make_field("split.tensors.count", total, ValueType.INT32),
    ]


def plan_split(f: GGUFFile, *, max_size: int | None = None, max_tensors: int | None = None) -> list[list[Tensor]]:
    """Group the tensors of ``f`` into shards, in order (see the module docstring for the rule).

    Sizes are the exact sizes the shard files will have.
    """
    if max_size is None and max_tensors is None:
        raise GGUFBuildError("give a maximum shard size or a maximum number of tensors per shard")
    if max_tensors is not None and max_tensors < 1:
        raise GGUFBuildError(
            f"the maximum number of tensors per shard must be at least 1, got {max_tensors}", value=max_tensors
        )
    if max_size is not None and max_size < 1:
        raise GGUFBuildError(f"the maximum shard size must be positive, got {max_size}", value=max_size)
    tensors = f.tensor_list
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise GGUFFormatError(f"tensor name {dup!r} occurs twice: a split model needs unique names", value=dup)
    align = f.alignment
    variant: dict[str, Any] = {"version": f.version, "byte_order": f.byte_order}
    fixed = len(header_bytes([], [], padding=b"", data_size=0, **variant))  # magic, version and the two counts
    split_kv = encoded_size(_split_fields(0, 1, 0), **variant)
    first_kv = encoded_size([x for x in f.fields.records if x.key not in SPLIT_KEYS], **variant) + split_kv
    other_kv = split_kv
    if "general.alignment" in f.fields:
        other_kv += encoded_size([f.fields["general.alignment"]], **variant)
    shards: list[list[Tensor]] = [[]]
    infos = data = 0
    for t in tensors:
        nbytes = t.nbytes
        info = encoded_size(tensors=[TensorInfo.of(t)], **variant)
        current = shards[-1]
        kv = first_kv if len(shards) == 1 else other_kv
        grown = align_offset(fixed + kv + infos + info, align) + align_offset(data, align) + nbytes
        full = (max_tensors is not None and len(current) >= max_tensors) or (max_size is not None and grown > max_size)
        if current and full:
            shards.append([])
            infos = data = 0
        shards[-1].append(t)
        infos += info
        data = align_offset(data, align) + nbytes
    return shards


def split(
    source: PathLike,
    prefix: str,
    *,
    max_size: int | None = None,
    max_tensors: int | None = None,
    progress: Progress | None = None,
    storage_options: StorageOptions = None,
) -> list[str]:
    """Split ``source`` (a path or URL) into shards named ``<prefix>-0000i-of-0000n.gguf``; returns their paths.

    Each shard is written atomically. Raises :class:`~gguf_schema.errors.GGUFBuildError` when
    neither limit is given or more than 65535 shards would be needed. ``storage_options`` are
    those of a URL's fsspec backend.
    """
    with read(source, storage_options=storage_options) as f:
        groups = plan_split(f, max_size=max_size, max_tensors=max_tensors)
        n = len(groups)
        if n > 65535:
            raise GGUFBuildError(f"{n} shards needed: split.count is a UINT16 (at most 65535)", value=n)
        total = len(f.tensor_list)
        if total > 2**31 - 1:  # pragma: no cover - not a real file
            raise GGUFBuildError(f"{total} tensors do not fit in split.tensors.count (INT32)", value=total)
        base = [x for x in f.fields.records if x.key not in SPLIT_KEYS]
        alignment = [x for x in base if x.key == "general.alignment"][:1]
        paths = [shard_name(prefix, i, n) for i in range(n)]
        for i, (path, group) in enumerate(zip(paths, groups, strict=False)):
            fields = (base if i == 0 else alignment) + _split_fields(i, n, total)
            planned = [plan_tensor(t.name, t, f.byte_order) for t in group]
            write_file(path, fields, planned, version=f.version, byte_order=f.byte_order, progress=progress)
    return paths


def shard_paths(first_shard: PathLike, *, storage_options: StorageOptions = None) -> list[str]:
    """The paths (or URLs) of all shards of the split model whose first shard is ``first_shard``.

    A file without ``split.count`` (or with a count of 1) is a model of one shard. The
    others are found by the naming convention ``<prefix>-0000i-of-0000n.gguf``; for a URL the
    convention applies to its path, and a query (``?download=true``) is kept on every shard's URL.

    >>> shard_paths_named("https://host/m/x-00001-of-00003.gguf?download=true", 3)[1]
    'https://host/m/x-00002-of-00003.gguf?download=true'
    """
    first = os.fspath(first_shard)
    with read(first, storage_options=storage_options) as f:
        return _shard_paths_of(f, first)


def _shard_paths_of(f: GGUFFile, first: str) -> list[str]:
    no = _split_int(f, "split.no", 0)
    count = _split_int(f, "split.count", 1)
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


def open_split(first_shard: PathLike, *, storage_options: StorageOptions = None, lazy: bool = False) -> SplitModel:
    """Open a split model from its first shard (a path or URL): one object with its metadata and all tensors.

    Checks each shard's ``split.no`` and ``split.count``, and that ``split.tensors.count``
    equals the number of tensors found. A file that is not split opens as a model of one shard.
    The other shards of a URL are found next to it, by name (:func:`shard_paths`), and read
    remotely too (``storage_options``: those of its fsspec backend). ``lazy`` as in :func:`gguf_schema.open`.
    """
    first = os.fspath(first_shard)
    return _open_shards(read(first, storage_options=storage_options, lazy=lazy), first, storage_options, lazy)


def _open_shards(head: GGUFFile, first: str, storage_options: StorageOptions, lazy: bool) -> SplitModel:
    """The split model whose first shard ``head`` (read from ``first``) is open already: the others read next to it."""
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
                    s = read(p, storage_options=storage_options, lazy=lazy)
                except GGUFFileNotFoundError as e:
                    raise GGUFFormatError(f"{missing} ({e.reason})", path=p) from None
                shards.append(s)
            if len(paths) > 1:
                no, count = _split_int(s, "split.no", -1), _split_int(s, "split.count", -1)
                if (no, count) != (i, len(paths)):
                    raise GGUFFormatError(
                        f"{p}: split.no = {no}, split.count = {count}; expected {i} and {len(paths)}",
                        path=p,
                        value=(no, count),
                    )
                if s.byte_order != shards[0].byte_order:
                    raise GGUFFormatError(
                        f"{p} is {s.byte_order}-endian, the first shard {shards[0].byte_order}-endian", path=p
                    )
        model = SplitModel(shards)
        declared = _split_int(shards[0], "split.tensors.count", len(model.tensor_list))
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


def merge(
    first_shard: PathLike, target: PathLike, *, progress: Progress | None = None, storage_options: StorageOptions = None
) -> None:
    """Merge the shards of a split model (local, or URLs: see :func:`open_split`) into one local file (the
    first shard's metadata without the split keys, then every tensor in shard order, copied byte for byte)."""
    with open_split(first_shard, storage_options=storage_options) as model:
        fields = [x for x in model.fields.records if x.key not in SPLIT_KEYS]
        planned = [plan_tensor(t.name, t, model.byte_order) for t in model.tensor_list]
        write_file(target, fields, planned, version=model.version, byte_order=model.byte_order, progress=progress)


def open_model(path: PathLike, *, lazy: bool = False, storage_options: StorageOptions = None) -> GGUFFile | SplitModel:
    """Open a GGUF file (a path or URL), or every shard of a split model (:func:`open_split`) when
    ``path`` is its first shard; ``lazy`` and ``storage_options`` as in :func:`gguf_schema.open`."""
    f = read(path, lazy=lazy, storage_options=storage_options)
    if "split.count" in f.fields and f.metadata.get("split.no") == 0 and f.metadata["split.count"] > 1:
        return _open_shards(f, os.fspath(path), storage_options, lazy)
    return f
