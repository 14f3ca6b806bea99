"""Split (sharded) models: split a file into shards and merge shards back (opening them as one model is
:mod:`gguf_schema.shards`, on the reading side).

The layout is llama.cpp's ``gguf-split`` convention (``reference/conventions.md``):

* shards are named ``<prefix>-00001-of-00003.gguf`` ... (1-based, five digits);
* every shard carries ``split.no`` (UINT16, **0-based**), ``split.count`` (UINT16) and
  ``split.tensors.count`` (INT32, the total over all shards), in that order, after its other keys;
* the first shard holds the full metadata; the others only the split keys (and
  ``general.alignment`` when the model sets one, since it governs their own data layout);
* each shard has its own tensor infos and data section; tensor names are unique across shards;
* this module adds ``split.id`` (STRING) to every shard: the identity of the set, derived from
  the source file and the plan, so that :func:`~gguf_schema.shards.open_split` can tell shards of different splits
  apart (llama.cpp ignores the key; :func:`merge` drops it).

``llama_layout=True`` writes the shards exactly as llama.cpp's ``llama-gguf-split`` writes them,
byte for byte (so that both tools' outputs can be compared): no ``split.id``, the split keys in
its order (``split.no``, ``split.tensors.count``, ``split.count``: it sets the count last), the
other shards without ``general.alignment``, and a shard closed when its tensor data alone (each
tensor padded to 32 bytes; the headers do not count) would pass ``max_size``. ``llama-gguf-split``
writes 32-byte alignment only, so this layout needs a model of that alignment; where
``llama-gguf-split`` refuses (a first tensor larger than ``max_size``) the tensor gets a shard of
its own.

A set of shards is written as a set (:func:`gguf_schema.durable.atomic_replace_set`): every
shard goes to a temporary file first, and only when all of them are complete and on disk are
they renamed into place. A split killed before that leaves no new shard; one killed during the
renames (milliseconds) leaves a mixed set, which :func:`~gguf_schema.shards.open_split` refuses (shard numbers,
counts, tensor names and ``split.id`` must agree).

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
>>> with gguf_schema.open(paths[0], split=True) as model:
...     list(model.tensors), model.tensors["t2"].data.tolist(), model.metadata["general.name"]
(['t0', 't1', 't2'], [2.0, 2.0, 2.0, 2.0], 'm')
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from ..durable import atomic_replace_set, refuse_overwriting_inputs
from ..errors import GGUFBuildError, GGUFFormatError
from ..format import keys as K
from ..format.limits import Limits
from ..format.nodes import align_offset
from ..format.types import ValueType
from ..format.values import Field, make_field
from ..io import PathLike
from ..io.source import is_url
from ..model import GGUFFile, Tensor
from ..reader import read
from ..shards import open_split, shard_name, shard_paths
from ..writer import Progress, TensorRecord, encoded_size, ggml_dims, header_bytes, plan_tensor, write_file

__all__ = [
    "SPLIT_ID_KEY",
    "SPLIT_KEYS",
    "ShardPlan",
    "SplitPlan",
    "merge",
    "parse_size",
    "plan_split",
    "split",
    "split_plan",
]

StorageOptions = Mapping[str, Any] | None

#: the identity of a set of shards, written after llama.cpp's three keys (not a llama.cpp key; absent from its splits)
SPLIT_ID_KEY = K.SPLIT_ID
#: the keys a split adds to each shard, in the order they are written (llama.cpp's three, then
#: :data:`SPLIT_ID_KEY`): a merge, or anything that makes one file of a split model, drops them
SPLIT_KEYS = (K.SPLIT_NO, K.SPLIT_COUNT, K.SPLIT_TENSORS_COUNT, SPLIT_ID_KEY)
_ALL_SPLIT_KEYS = SPLIT_KEYS
_LLAMA_ALIGNMENT = 32

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?B?)\s*$", re.IGNORECASE)


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


def _split_fields(no: int, count: int, total: int, split_id: str | None = None, llama: bool = False) -> list[Field]:
    fields = [
        make_field(K.SPLIT_NO, no, ValueType.UINT16),
        make_field(K.SPLIT_COUNT, count, ValueType.UINT16),
        make_field(K.SPLIT_TENSORS_COUNT, total, ValueType.INT32),
    ]
    if llama:  # llama-gguf-split sets split.count again at the end: the key moves last
        fields = [fields[0], fields[2], fields[1]]
    if split_id is not None:
        fields.append(make_field(SPLIT_ID_KEY, split_id, ValueType.STRING))
    return fields


def plan_split(
    f: GGUFFile,
    *,
    max_size: int | None = None,
    max_tensors: int | None = None,
    no_tensor_first_split: bool = False,
    llama_layout: bool = False,
) -> list[list[Tensor]]:
    """Group the tensors of ``f`` into shards, in order (see the module docstring for the rule).

    ``no_tensor_first_split``: the first shard holds the metadata only (as llama.cpp's
    ``gguf-split --no-tensor-first-split``); the tensors start in the second.
    ``llama_layout``: ``llama-gguf-split``'s rule for ``max_size`` (tensor data only).
    """
    return [
        group for group, _ in _plan(f, max_size, max_tensors, no_tensor_first_split, not llama_layout, llama_layout)
    ]


#: the length of ``split.id``'s value (hex digits)
_ID_LEN = 16


def _plan(
    f: GGUFFile,
    max_size: int | None,
    max_tensors: int | None,
    no_tensor_first_split: bool,
    with_id: bool,
    llama: bool = False,
) -> list[tuple[list[Tensor], int]]:
    """The shards' tensors, and each shard's exact file size (``llama``: llama-gguf-split's layout and rule)."""
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
    if llama and (align != _LLAMA_ALIGNMENT or f.byte_order != "little" or f.version != 3):
        raise GGUFBuildError(
            f"llama-gguf-split's layout is little-endian GGUF v3 aligned to {_LLAMA_ALIGNMENT}: this model is "
            f"{f.byte_order}-endian v{f.version} aligned to {align}",
            value=align,
        )
    variant: dict[str, Any] = {"version": f.version, "byte_order": f.byte_order}
    fixed = len(header_bytes([], [], padding=b"", data_size=0, **variant))  # magic, version and the two counts
    split_kv = encoded_size(_split_fields(0, 1, 0, "0" * _ID_LEN if with_id else None), **variant)
    first_kv = encoded_size([x for x in f.fields.records if x.key not in _ALL_SPLIT_KEYS], **variant) + split_kv
    other_kv = split_kv
    if K.GENERAL_ALIGNMENT in f.fields and not llama:
        other_kv += encoded_size([f.fields[K.GENERAL_ALIGNMENT]], **variant)

    def size(kv: int, infos: int, data: int) -> int:
        return align_offset(fixed + kv + infos, align) + data

    shards: list[tuple[list[Tensor], int]] = [([], size(first_kv, 0, 0))]
    infos = data = 0
    for t in tensors:
        nbytes = t.nbytes
        record = TensorRecord.of(t)
        if llama:  # llama-gguf-split stores ggml_n_dims dimensions
            record = TensorRecord(record.name, record.type, ggml_dims(record.dims), record.offset)
        info = encoded_size(tensors=[record], **variant)
        current = shards[-1][0]
        kv = first_kv if len(shards) == 1 else other_kv
        grown = size(kv, infos + info, align_offset(data, align) + nbytes)
        measured = align_offset(data, align) + align_offset(nbytes, align) if llama else grown  # gguf-split: data only
        full = (max_tensors is not None and len(current) >= max_tensors) or (
            max_size is not None and measured > max_size
        )
        if (current and full) or (no_tensor_first_split and len(shards) == 1):
            infos = data = 0
            kv = other_kv
            grown = size(kv, info, nbytes)
            shards.append(([], grown))
        shards[-1][0].append(t)
        shards[-1] = (shards[-1][0], grown)
        infos += info
        data = align_offset(data, align) + nbytes
    return shards


@dataclass(frozen=True)
class ShardPlan:
    """One shard of a :class:`SplitPlan`: its path, its tensors' names and its exact size in bytes."""

    path: str
    tensors: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class SplitPlan:
    """What :func:`split` writes (or, with ``dry_run``, would write).

    Attributes:
        shards: the shards in order.
        split_id: the set's ``split.id`` (None when not written).
        warnings: what the caller should tell the user (e.g. a tensor larger than ``max_size``).
        paths: the shards' paths.
    """

    shards: tuple[ShardPlan, ...]
    split_id: str | None
    warnings: tuple[str, ...]

    @property
    def paths(self) -> list[str]:
        return [s.path for s in self.shards]

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON-able data: ``{"split_id", "shards": [{"path", "tensors", "size"}], "warnings"}``."""
        return {
            "split_id": self.split_id,
            "shards": [{"path": s.path, "tensors": list(s.tensors), "size": s.size} for s in self.shards],
            "warnings": list(self.warnings),
        }


def _split_id(f: GGUFFile, source: str, groups: list[list[Tensor]]) -> str:
    """An identity for the set: a digest of the source's header, size and modification time and of the plan
    (the same source split the same way gets the same identity, so a re-run writes identical shards)."""
    h = hashlib.sha256()
    h.update(bytes(f.view(0, f.data_offset)))
    h.update(str(f.file_size).encode())
    if not is_url(source):
        with contextlib.suppress(OSError):
            h.update(str(os.stat(source).st_mtime_ns).encode())
    for g in groups:
        h.update(b"\0".join(t.name.encode("utf-8", "surrogateescape") for t in g) + b"\1")
    return h.hexdigest()[:_ID_LEN]


def _make_plan(
    f: GGUFFile,
    source: str,
    prefix: str,
    max_size: int | None,
    max_tensors: int | None,
    no_tensor_first_split: bool,
    identity: bool,
    llama: bool = False,
) -> tuple[SplitPlan, list[list[Tensor]]]:
    planned = _plan(f, max_size, max_tensors, no_tensor_first_split, identity, llama)
    n = len(planned)
    if n > 65535:
        raise GGUFBuildError(f"{n} shards needed: split.count is a UINT16 (at most 65535)", value=n)
    groups = [g for g, _ in planned]
    warnings = []
    if max_size is not None:
        for g, size in planned:
            if size > max_size:
                t = max(g, key=lambda t: t.nbytes)
                warnings.append(
                    f"tensor {t.name} ({t.nbytes:,} bytes) does not fit in a shard of {max_size:,} bytes: "
                    f"its shard holds {size:,} bytes"
                )
    split_id = _split_id(f, source, groups) if identity else None
    shards = tuple(
        ShardPlan(shard_name(prefix, i, n), tuple(t.name for t in g), size) for i, (g, size) in enumerate(planned)
    )
    return SplitPlan(shards, split_id, tuple(warnings)), groups


def split_plan(
    source: PathLike,
    prefix: str,
    *,
    max_size: int | None = None,
    max_tensors: int | None = None,
    no_tensor_first_split: bool = False,
    dry_run: bool = False,
    identity: bool = True,
    llama_layout: bool = False,
    progress: Progress | None = None,
    storage_options: StorageOptions = None,
    limits: Limits | None = None,
    mmap: bool = True,
    strict: str | None = None,
) -> SplitPlan:
    """Split ``source`` (a path or URL) into shards named ``<prefix>-0000i-of-0000n.gguf``; return the plan.

    Like :func:`split`, which returns the paths only. ``dry_run``: plan only, write nothing.
    ``identity``: write ``split.id`` in every shard. ``llama_layout``: the shards exactly as
    ``llama-gguf-split`` writes them (see the module docstring; no ``split.id``). The returned plan's ``warnings`` say what
    the caller should tell the user (this library prints nothing). Refuses (before writing
    anything) a shard name that is the source. ``limits`` and ``mmap``: how the source is read,
    as in :func:`gguf_schema.open`. ``strict``: a validation profile; a shard whose header breaks an
    error rule of it is refused (:class:`~gguf_schema.errors.GGUFValidationError`) and no shard is
    written (without it, each broken rule is a :class:`~gguf_schema.errors.GGUFWarning`).

    >>> import os, tempfile, numpy as np, gguf_schema
    >>> d = tempfile.mkdtemp(); src = os.path.join(d, "m.gguf")
    >>> gguf_schema.save(src, {}, {"a": np.zeros(1000, np.float32), "b": np.zeros(10, np.float32)})
    >>> plan = split_plan(src, os.path.join(d, "m"), max_size=2000, dry_run=True)
    >>> [(os.path.basename(s.path), s.tensors, s.size) for s in plan.shards]
    [('m-00001-of-00002.gguf', ('a',), 4192), ('m-00002-of-00002.gguf', ('b',), 232)]
    >>> plan.warnings
    ('tensor a (4,000 bytes) does not fit in a shard of 2,000 bytes: its shard holds 4,192 bytes',)
    >>> os.listdir(d)
    ['m.gguf']
    """
    src = os.fspath(source)
    with read(src, storage_options=storage_options, limits=limits, mmap=mmap) as f:
        identity = identity and not llama_layout
        plan, groups = _make_plan(f, src, prefix, max_size, max_tensors, no_tensor_first_split, identity, llama_layout)
        refuse_overwriting_inputs(plan.paths, [src], command="split")
        if dry_run:
            return plan
        f.require_whole("its shards")
        n = len(groups)
        total = len(f.tensor_list)
        if total > 2**31 - 1:  # pragma: no cover - not a real file
            raise GGUFBuildError(f"{total} tensors do not fit in split.tensors.count (INT32)", value=total)
        base = [x for x in f.fields.records if x.key not in _ALL_SPLIT_KEYS]
        alignment = [] if llama_layout else [x for x in base if x.key == K.GENERAL_ALIGNMENT][:1]

        def writer(i: int, group: list[Tensor]) -> Any:
            fields = (base if i == 0 else alignment) + _split_fields(i, n, total, plan.split_id, llama_layout)
            planned = [plan_tensor(t.name, t, f.byte_order, kernel_copy=True) for t in group]
            if llama_layout:  # llama-gguf-split rewrites every tensor info as ggml stores it
                for p in planned:
                    p.dims = ggml_dims(p.dims)

            def write(stream: IO[bytes]) -> None:
                write_file(
                    stream,
                    fields,
                    planned,
                    version=f.version,
                    byte_order=f.byte_order,
                    progress=progress,
                    strict=strict,
                )

            return write

        atomic_replace_set([(p, writer(i, g)) for i, (p, g) in enumerate(zip(plan.paths, groups, strict=True))])
    return plan


def split(
    source: PathLike,
    prefix: str,
    *,
    max_size: int | None = None,
    max_tensors: int | None = None,
    progress: Progress | None = None,
    storage_options: StorageOptions = None,
    no_tensor_first_split: bool = False,
    llama_layout: bool = False,
    limits: Limits | None = None,
    mmap: bool = True,
    strict: str | None = None,
) -> list[str]:
    """Split ``source`` (a path or URL) into shards named ``<prefix>-0000i-of-0000n.gguf``; returns their paths.

    The shards are written as a set (see the module docstring). Raises
    :class:`~gguf_schema.errors.GGUFBuildError` when neither limit is given, more than 65535
    shards would be needed, or a shard would be written over the source. ``storage_options``
    are those of a URL's fsspec backend; ``limits`` and ``mmap`` as in :func:`gguf_schema.open`.
    ``llama_layout``: the shards exactly as ``llama-gguf-split`` writes them. ``strict`` as in
    :func:`split_plan`, which also returns the plan and warnings.
    """
    return split_plan(
        source,
        prefix,
        max_size=max_size,
        max_tensors=max_tensors,
        no_tensor_first_split=no_tensor_first_split,
        llama_layout=llama_layout,
        progress=progress,
        storage_options=storage_options,
        limits=limits,
        mmap=mmap,
        strict=strict,
    ).paths


def merge(
    first_shard: PathLike,
    target: PathLike,
    *,
    progress: Progress | None = None,
    storage_options: StorageOptions = None,
    limits: Limits | None = None,
    mmap: bool = True,
    strict: str | None = None,
) -> None:
    """Merge the shards of a split model (local, or URLs: see :func:`open_split`) into one local file (the
    first shard's metadata without the split keys, then every tensor in shard order, copied byte for byte).

    The output is written atomically; it may not be one of the shards (refused before anything is written).
    A file that is not split (no ``split.count``) is refused with a
    :class:`~gguf_schema.errors.GGUFBuildError`: merging it would only copy it.
    ``limits`` and ``mmap``: how the shards are read, as in :func:`gguf_schema.open`. ``strict``: a
    validation profile; a merged header that breaks an error rule of it is refused
    (:class:`~gguf_schema.errors.GGUFValidationError`, nothing written).
    """
    first = os.fspath(first_shard)
    reading: dict[str, Any] = {"limits": limits, "mmap": mmap}
    inputs = [first] if is_url(first) or not os.path.exists(first) else shard_paths(first, **reading)
    refuse_overwriting_inputs([target], inputs, command="merge")
    with open_split(first_shard, storage_options=storage_options, **reading) as model:
        refuse_overwriting_inputs([target], model.paths, command="merge")
        if K.SPLIT_COUNT not in model.fields:
            raise GGUFBuildError(
                "not a split model (it has no split.count key): there is nothing to merge, and nothing was "
                "written (to copy a file, use convert)",
                path=first,
            )
        for shard in model.shards:
            shard.require_whole("the merged file")
        fields = [x for x in model.fields.records if x.key not in _ALL_SPLIT_KEYS]
        planned = [plan_tensor(t.name, t, model.byte_order, kernel_copy=True) for t in model.tensor_list]
        write_file(
            target,
            fields,
            planned,
            version=model.version,
            byte_order=model.byte_order,
            progress=progress,
            strict=strict,
        )
