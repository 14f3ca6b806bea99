"""Many presets of one model in one pass: :func:`requantize_many`.

People who publish a model's quantizations make ten or twenty presets of it; ``llama-quantize``
reads and converts the whole source once per preset. :func:`requantize_many` plans every preset
first (:func:`~gguf_schema.tools.requantize.plan_requantize`'s rules, options and checks, for each),
then streams the source once, tensor by tensor and chunk of rows by chunk of rows: each chunk is
read once and decoded once (when some output quantizes it), each distinct result (the tensor's
new type, with or without importance weights) is encoded once and pushed into every output that
takes it (:class:`~gguf_schema.writer.PushedFile`), and the chunk is dropped. Memory is one chunk
of float32 rows and one encoded chunk at a time, whatever the number of presets; every output is
byte for byte the file :func:`~gguf_schema.tools.requantize.requantize` writes for its preset
alone (which is ``llama-quantize``'s). The outputs are written as a set
(:class:`~gguf_schema.durable.PendingFiles`): temporary files until every one is complete and on
disk, then renamed into place one after the other (milliseconds); a run interrupted or failed
before the renames, nearly all of its time, leaves no output under its final name, and one killed
or failed during them leaves some outputs new and the others as they were, each whole. A folder
it makes is synced into its parent before the renames.

With ``client=`` (a ``distributed.Client``) the same plan is made here and the work goes to the
cluster's workers (:mod:`gguf_schema.tools.quantcluster`): the same files. ``on_progress`` reports
the job as it goes, in both runs: each output's tensors and bytes done, of its totals
(:class:`JobProgress`).

Outputs are named ``OUTDIR/<stem>-<PRESET>.gguf``, ``<stem>`` the input's file name without
``.gguf`` (and without a shard suffix ``-00001-of-00003``); with ``keep_split``, the shards of
``OUTDIR/<stem>-<PRESET>``. Existing outputs are refused unless ``overwrite``.

>>> import os, tempfile, numpy as np, gguf_schema
>>> from gguf_schema.testing.quant_models import save_quant_model
>>> d = tempfile.mkdtemp(); src = os.path.join(d, "tiny.gguf"); save_quant_model(src, "llama-gqa")
>>> job = requantize_many(src, os.path.join(d, "out"), ["Q4_K_M", "Q5_K_M", "Q8_0"], threads=1)
>>> [os.path.basename(r.paths[0]) for r in job.results]
['tiny-Q4_K_M.gguf', 'tiny-Q5_K_M.gguf', 'tiny-Q8_0.gguf']
>>> job.results_written, job.results_computed < job.results_written
(441, True)
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..durable import PendingFiles, make_folders, os_error, refuse_overwriting_inputs
from ..errors import GGUFBuildError
from ..format.limits import Limits
from ..format.types import GGMLType
from ..io import PathLike
from ..io.source import is_url
from ..model import Tensor
from ..shards import SplitModel
from ..tensors import dequantize, quantize
from ..tensors.engine import error_sums
from ..writer import PlannedTensor, Progress, PushedFile, ggml_dims, plan_tensor
from .quantplan import Preset
from .requantize import (
    _CHUNK_BYTES,
    ImatrixArg,
    Override,
    RequantizeResult,
    TensorReport,
    TypeArg,
    _cpu_count,
    _fields,
    _imatrix,
    _open,
    _options,
    _outputs,
    _overrides,
    _plan,
    _preset,
    _shard_fields,
)

__all__ = ["JobProgress", "ManyResult", "OutputProgress", "output_stem", "requantize_many"]

_SHARD_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$")


def output_stem(src: PathLike) -> str:
    """The stem of the outputs' names: the input's file name without ``.gguf`` and without a
    shard suffix (a URL's last path part, without its query).

    >>> output_stem("models/gemma-3-270m-f32.gguf"), output_stem("https://h/m/qwen-00001-of-00004.gguf?x=1")
    ('gemma-3-270m-f32', 'qwen')
    """
    text = os.fspath(src)
    if is_url(text):
        text = text.split("?", 1)[0].split("#", 1)[0]
    name = text.rstrip("/").rsplit("/", 1)[-1]
    name = os.path.basename(name)
    if name.lower().endswith(".gguf"):
        name = name[: -len(".gguf")]
    return _SHARD_SUFFIX.sub("", name) or "model"


@dataclass
class ManyResult:
    """What :func:`requantize_many` did (or, with ``dry_run``, would do).

    Attributes:
        results: one :class:`~gguf_schema.tools.requantize.RequantizeResult` per preset, in the
            order asked.
        shared: per tensor (in the order written), its distinct results: ``(what, presets)``,
            ``what`` the output type's name (``"copy"`` for bytes copied as they are, ``"+imatrix"``
            appended when importance weights go in), ``presets`` the outputs that take it.
        source_bytes: the bytes of tensor data read from the source (each once).
        dry_run: True when nothing was written.
    """

    results: list[RequantizeResult]
    shared: list[tuple[str, list[tuple[str, list[str]]]]] = field(default_factory=list)
    source_bytes: int = 0
    dry_run: bool = False

    @property
    def results_written(self) -> int:
        """Tensors written over all outputs."""
        return sum(len(r.tensors) for r in self.results)

    @property
    def results_computed(self) -> int:
        """Distinct (tensor, result) pairs: what one pass computes or copies."""
        return sum(len(groups) for _, groups in self.shared)

    @property
    def paths(self) -> list[str]:
        return [p for r in self.results for p in r.paths]

    @property
    def bytes_written(self) -> int:
        """Bytes of tensor data written over all outputs."""
        return sum(r.output_bytes for r in self.results)

    @property
    def bytes_computed(self) -> int:
        """Bytes of tensor data of the distinct results: what one pass encodes or copies."""
        return sum(b for _, groups in self._shared_bytes() for _, _, b in groups)

    def _shared_bytes(self) -> list[tuple[str, list[tuple[str, list[str], int]]]]:
        by_preset = {r.preset: r for r in self.results}
        return [
            (name, [(what, presets, by_preset[presets[0]].tensors[j].nbytes) for what, presets in groups])
            for j, (name, groups) in enumerate(self.shared)
        ]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record: each output's plan, and the results shared between outputs (each with the
        bytes of its tensor data: computed once, written into each of its outputs)."""
        return {
            "dry_run": self.dry_run,
            "outputs": [r.to_dict() for r in self.results],
            "results_written": self.results_written,
            "results_computed": self.results_computed,
            "bytes_written": self.bytes_written,
            "bytes_computed": self.bytes_computed,
            "source_bytes": self.source_bytes,
            "shared": [
                {
                    "name": name,
                    "results": [{"result": what, "outputs": presets, "bytes": b} for what, presets, b in groups],
                }
                for name, groups in self._shared_bytes()
            ],
        }


def _key(report: TensorReport, used: Mapping[str, np.ndarray]) -> str:
    if not report.requantized:
        return "copy"
    return report.new_type.name + ("+imatrix" if report.name in used else "")


def requantize_many(
    src: PathLike,
    outdir: PathLike,
    types: Sequence[TypeArg],
    *,
    imatrix: ImatrixArg = None,
    tensor_types: Iterable[tuple[str, Any] | str] = (),
    pure: bool = False,
    output_tensor_type: Any = None,
    token_embedding_type: Any = None,
    leave_output_tensor: bool = False,
    allow_requantize: bool = False,
    keep_split: bool = False,
    override_kv: Iterable[Override] = (),
    include_weights: Sequence[str] = (),
    exclude_weights: Sequence[str] = (),
    keep_1d: bool = True,
    threads: int | None = None,
    measure: bool = False,
    dry_run: bool = False,
    overwrite: bool = False,
    progress: Progress | None = None,
    on_plan: Callable[[ManyResult], None] | None = None,
    on_progress: Callable[[JobProgress], None] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
    sync: bool = True,
    strict: str | None = None,
    client: Any = None,
    task_bytes: int | None = None,
) -> ManyResult:
    """Quantize ``src`` under every preset of ``types`` in one pass (see the module docstring).

    Args:
        src: the model (a path, a URL, or the first shard of a split model).
        outdir: the folder of the outputs (made if missing): ``<stem>-<PRESET>.gguf`` each
            (:func:`output_stem`).
        types: the presets (or single types), as :func:`~gguf_schema.tools.requantize.requantize`
            takes one; each at most once.
        overwrite: replace outputs that exist (else refused, before anything is written).
        progress: called with the bytes written, over all outputs.
        on_plan: called with the complete plan (every output's), before anything is written.
        on_progress: called as the work is done (after each chunk of rows; on a cluster after each
            task) with a :class:`JobProgress`: each output's tensors and bytes done, of its totals.
            An exception it raises (``KeyboardInterrupt`` too) stops the run, nothing written.
        client: a ``distributed.Client``: the work goes to its workers, the plan and the headers stay
            here (:mod:`gguf_schema.tools.quantcluster`; the outputs' folder and ``src`` must be reachable
            by every worker under the same names: a shared filesystem, or ``src`` a URL). The files are
            byte for byte those of the local run.
        task_bytes: on a cluster, about how many bytes of source tensor data one task reads (default
            64 MiB): big tensors are cut into ranges of rows, small ones go together.
        the others: as in :func:`~gguf_schema.tools.requantize.requantize`, the same for every preset.

    Returns:
        A :class:`ManyResult`: each preset's result, and the results shared between them.

    Raises:
        ValueError: no preset, a preset given twice, an unknown preset, bad options.
        GGUFBuildError: what a single run refuses, for any preset (nothing written); an output
            that exists without ``overwrite``.
    """
    if threads is None:
        workers = min(_cpu_count(), 8)
    elif isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    else:
        workers = threads
    presets: list[Preset] = [_preset(t) for t in types]
    if not presets:
        raise ValueError("give at least one preset")
    names = [p.name for p in presets]
    if len(set(names)) != len(names):
        raise ValueError(f"a preset given twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    if task_bytes is not None and (isinstance(task_bytes, bool) or not isinstance(task_bytes, int) or task_bytes < 1):
        raise ValueError(f"task_bytes must be a positive int or None, got {task_bytes!r}")
    if client is not None and not callable(getattr(client, "submit", None)):
        raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}")
    if task_bytes is not None and client is None:
        raise ValueError("task_bytes is for a run on a cluster (client=)")
    out = os.fspath(outdir)
    if is_url(out):
        raise ValueError(f"the output folder must be a local path, got the URL {out!r}")
    if os.path.exists(out) and not os.path.isdir(out):
        raise GGUFBuildError(
            "the output of several presets is a folder (each written as <stem>-<PRESET>.gguf in it), and this is a "
            "file: nothing was written",
            path=out,
        )
    reading: dict[str, Any] = {"limits": limits, "mmap": mmap}
    weights = _imatrix(imatrix, include_weights, exclude_weights, reading)
    options = _options(
        tensor_types, pure, output_tensor_type, token_embedding_type, leave_output_tensor, keep_1d, weights
    )
    overrides = _overrides(override_kv)
    stem = output_stem(src)
    model = _open(src, storage_options, reading)
    try:
        inputs = [x for x in (model.paths if isinstance(model, SplitModel) else [model.name]) if x is not None]
        planned: list[tuple[RequantizeResult, dict[str, np.ndarray]]] = []
        for p in presets:
            result, used = _plan(
                model,
                p,
                weights,
                options,
                allow_requantize=allow_requantize,
                keep_split=keep_split,
                overrides=overrides,
                dry_run=dry_run,
            )
            n_split = max((r.shard for r in result.tensors), default=0) + 1 if keep_split else 1
            if keep_split and isinstance(model, SplitModel):
                n_split = max(n_split, len(model.shards))
            base = os.path.join(out, f"{stem}-{p.name}")
            result.paths = _outputs(base + ("" if keep_split else ".gguf"), n_split, keep_split)
            result.dry_run = dry_run
            planned.append((result, used))
        job = ManyResult([r for r, _ in planned], dry_run=dry_run)
        job.shared = _sharing(planned)
        refuse_overwriting_inputs(job.paths, inputs, command="quantize")
        if not overwrite:
            existing = [p for p in job.paths if os.path.lexists(p)]
            if existing:
                raise GGUFBuildError(
                    f"{len(existing)} outputs exist already ({', '.join(existing[:3])}{' ...' if len(existing) > 3 else ''}): "
                    "nothing was written (replace them with --overwrite, overwrite=True)",
                    path=existing[0],
                )
        if on_plan is not None:
            on_plan(job)
        if dry_run:
            return job
        try:
            make_folders(out, sync=sync)  # a new folder's own name synced too: the outputs renamed into it survive
        except OSError as e:  # a file of that name, no permission ...
            raise os_error(e, out) from None
        tracker = _Tracker(job.results, on_progress)
        if client is not None:
            from .quantcluster import write_on_cluster

            job.source_bytes = write_on_cluster(
                client,
                src,
                model,
                planned,
                storage_options=storage_options,
                reading=reading,
                threads=threads or 1,
                measure=measure,
                progress=progress,
                sync=sync,
                strict=strict,
                tracker=tracker,
                task_bytes=task_bytes,
            )
        else:
            job.source_bytes = _write_all(model, planned, workers, measure, progress, sync, strict, tracker)
        return job
    finally:
        model.close()


def _sharing(
    planned: list[tuple[RequantizeResult, dict[str, np.ndarray]]],
) -> list[tuple[str, list[tuple[str, list[str]]]]]:
    shared = []
    first = planned[0][0]
    for j, report in enumerate(first.tensors):
        groups: dict[str, list[str]] = {}
        for result, used in planned:
            r = result.tensors[j]
            if r.name != report.name:  # pragma: no cover - the order is the model's, whatever the preset
                raise GGUFBuildError(f"the presets' tensor orders differ at {j}: {r.name} and {report.name}")
            groups.setdefault(_key(r, used), []).append(result.preset)
        shared.append((report.name, list(groups.items())))
    return shared


def _layouts(
    model: Any, result: RequantizeResult, tensors: Mapping[str, Tensor]
) -> tuple[list[list[PlannedTensor]], list[list[Any]]]:
    """One output's tensors (planned, per shard, in the order written) and the metadata of each shard."""
    n = len(result.paths)
    layouts: list[list[PlannedTensor]] = [[] for _ in range(n)]
    for r in result.tensors:
        t = tensors[r.name]
        layouts[r.shard].append(PlannedTensor(r.name, int(r.new_type), ggml_dims(t.dims), r.nbytes, lambda: ()))
    return layouts, _shard_fields(_fields(model, result), n, len(result.tensors))


def _distinct(
    planned: list[tuple[RequantizeResult, dict[str, np.ndarray]]], j: int
) -> tuple[dict[str, list[tuple[int, TensorReport]]], dict[str, np.ndarray | None]]:
    """Tensor ``j``'s distinct results: key -> the outputs (index, report) that take it; key -> its importance weights."""
    targets: dict[str, list[tuple[int, TensorReport]]] = {}
    weights: dict[str, np.ndarray | None] = {}
    for o, (result, used) in enumerate(planned):
        r = result.tensors[j]
        key = _key(r, used)
        targets.setdefault(key, []).append((o, r))
        weights[key] = used.get(r.name)
    return targets, weights


def _write_all(
    model: Any,
    planned: list[tuple[RequantizeResult, dict[str, np.ndarray]]],
    workers: int,
    measure: bool,
    progress: Progress | None,
    sync: bool,
    strict: str | None,
    tracker: _Tracker,
) -> int:
    """Open every output, stream the source once into all of them, commit them together; return the bytes read."""
    tensors = {t.name: t for t in model.tensor_list}
    head = model.shards[0] if isinstance(model, SplitModel) else model
    paths = [p for r, _ in planned for p in r.paths]
    read = 0
    with PendingFiles(paths, sync=sync) as pending:
        files: list[list[PushedFile]] = []  # per output, per shard
        k = 0
        for result, _ in planned:
            layouts, per_shard = _layouts(model, result, tensors)
            shard_files = []
            for i in range(len(result.paths)):
                try:
                    shard_files.append(
                        PushedFile(
                            pending.open(k),
                            per_shard[i],
                            layouts[i],
                            version=3,
                            byte_order="little",
                            progress=progress,
                            source=head if i == 0 else None,
                            strict=strict,
                        )
                    )
                except OSError as e:
                    raise os_error(e, pending.targets[k]) from e
                k += 1
            files.append(shard_files)
        first = planned[0][0]
        for j, report in enumerate(first.tensors):
            t = tensors[report.name]
            targets, weights = _distinct(planned, j)
            sinks = {key: [_Counted(files[o][r.shard], tracker, o) for o, r in outs] for key, outs in targets.items()}
            try:
                sums = _stream_rows(t, sinks, weights, workers, measure, 0, _rows(t), tracker.report)
            except OSError as e:
                raise os_error(e, pending.targets[0]) from e
            read += sums.read
            if measure:
                _apply_measures(t, targets, sums)
            tracker.tensor_done(j)
        for shard_files in files:
            for f in shard_files:
                f.close()
        pending.commit()
    return read


class _Counted:
    """A sink that counts the bytes pushed into output ``o`` for the job's progress."""

    def __init__(self, f: Any, tracker: _Tracker, o: int):
        self.f, self.tracker, self.o = f, tracker, o

    def push(self, piece: Any) -> None:
        self.f.push(piece)
        self.tracker.add(self.o, piece.nbytes if isinstance(piece, (np.ndarray, memoryview)) else len(piece))


@dataclass
class OutputProgress:
    """How far one output of a job is: tensors complete and bytes of tensor data written, of its totals."""

    preset: str
    tensors_done: int
    tensors: int
    bytes_done: int
    bytes: int


@dataclass
class JobProgress:
    """How far a job of many presets is (the ``on_progress`` callback of :func:`requantize_many`): each
    output's :class:`OutputProgress`, and the whole job's sums.

    >>> p = JobProgress([OutputProgress("Q4_K_M", 3, 10, 300, 1000), OutputProgress("Q8_0", 3, 10, 500, 1500)])
    >>> p.tensors_done, p.tensors, p.bytes_done, p.bytes, p.fraction
    (6, 20, 800, 2500, 0.32)
    """

    outputs: list[OutputProgress]

    @property
    def tensors_done(self) -> int:
        return sum(o.tensors_done for o in self.outputs)

    @property
    def tensors(self) -> int:
        return sum(o.tensors for o in self.outputs)

    @property
    def bytes_done(self) -> int:
        return sum(o.bytes_done for o in self.outputs)

    @property
    def bytes(self) -> int:
        return sum(o.bytes for o in self.outputs)

    @property
    def fraction(self) -> float:
        """The bytes done of the total (1.0 for a job without tensor data once its tensors are done)."""
        if self.bytes:
            return self.bytes_done / self.bytes
        return self.tensors_done / self.tensors if self.tensors else 1.0


class _Tracker:
    """The job's progress, kept as the work is done and handed to ``on_progress`` (a copy each time)."""

    def __init__(self, results: Sequence[RequantizeResult], on_progress: Callable[[JobProgress], None] | None):
        self.outputs = [OutputProgress(r.preset, 0, len(r.tensors), 0, r.output_bytes) for r in results]
        self.on_progress = on_progress

    def add(self, o: int, n: int) -> None:
        self.outputs[o].bytes_done += n

    def tensor_done(self, j: int) -> None:
        """Tensor ``j`` of the order written is complete in every output."""
        for out in self.outputs:
            out.tensors_done += 1
        self.report()

    def report(self) -> None:
        if self.on_progress is not None:
            self.on_progress(JobProgress([dataclasses.replace(o) for o in self.outputs]))


def _rows(t: Tensor) -> int:
    """The rows of a tensor as its data is streamed (a tensor without dimensions is one row)."""
    return math.prod(t.dims[1:]) if t.dims else 1


def _whole(t: Tensor) -> bool:
    """A tensor whose copy is converted (or read whole) by the writer's path: never split into row ranges."""
    return t.byte_order != "little" or not t.dims


def _is_numbers(t: Tensor) -> bool:
    gt = t.known_type()
    return gt.quantized or gt in (GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.F64)


@dataclass
class _Sums:
    """What streaming rows of a tensor read, and measured: per distinct result ``[sum of squared errors,
    sum of squared inputs]``; ``copied``: the input's sum of squares (for the copies' measure)."""

    read: int = 0
    errors: dict[str, list[float]] = field(default_factory=dict)
    copied: float = 0.0

    def add(self, other: _Sums) -> None:
        self.read += other.read
        for k, (e, s) in other.errors.items():
            mine = self.errors.setdefault(k, [0.0, 0.0])
            mine[0] += e
            mine[1] += s
        self.copied += other.copied


def _apply_measures(t: Tensor, targets: Mapping[str, Sequence[tuple[int, TensorReport]]], sums: _Sums) -> None:
    """Each report's RMS error and input from the sums over the tensor (a copy: error 0; None for integers)."""
    n = max(1, t.n_elements)
    numbers = _is_numbers(t)
    for key, outs in targets.items():
        for _, r in outs:
            if key == "copy":
                r.rms_error = 0.0
                r.rms_input = (math.sqrt(sums.copied / t.n_elements) if t.n_elements else 0.0) if numbers else None
            else:
                e, s = sums.errors.get(key, [0.0, 0.0])
                r.rms_error = math.sqrt(e / n)
                r.rms_input = math.sqrt(s / n)


def _stream_rows(
    t: Tensor,
    sinks: Mapping[str, Sequence[Any]],
    weights: Mapping[str, np.ndarray | None],
    threads: int,
    measure: bool,
    lo: int,
    hi: int,
    after_chunk: Callable[[], None] | None = None,
    first_expert: int = 0,
) -> _Sums:
    """Read rows ``lo:hi`` of tensor ``t`` once, a chunk of rows at a time, and push each distinct result
    (``sinks``: key -> the sinks that take it, each with ``push``) into its sinks, in order. The one loop
    of the local run and of a cluster's tasks (:mod:`.quantcluster`): the bytes of a range of rows are
    the same whatever the chunks (every type encodes row by row). A tensor that is :func:`_whole` is
    streamed whole (``lo:hi`` must be all its rows). Importance weights of two dimensions hold a row per
    expert (the tensor's outermost dimension), from expert ``first_expert`` on (a cluster's task gets the
    rows of the experts its rows cover, not all of them)."""
    copies = list(sinks.get("copy", []))
    encoded = {k: v for k, v in sinks.items() if k != "copy"}
    gt = t.known_type()
    numbers = _is_numbers(t)
    sums = _Sums()
    if copies and _whole(t):
        if (lo, hi) != (0, _rows(t)):  # pragma: no cover - the planner never splits such a tensor
            raise GGUFBuildError(f"tensor {t.name!r} is copied whole, not rows {lo}:{hi}")
        for piece in plan_tensor(t.name, t, "little").chunks():
            sums.read += len(memoryview(piece).cast("B")) if not isinstance(piece, np.ndarray) else piece.nbytes
            for f in copies:
                f.push(piece)
        if measure and numbers:
            step = max(1, _CHUNK_BYTES // (4 * max(t.dims[0] if t.dims else 1, 1)))
            for a in range(lo, hi, step):
                x = t.dequantize(rows=slice(a, min(hi, a + step))) if t.dims else t.dequantize()
                sums.copied += error_sums(x, GGMLType.F32, x)[1]
        if after_chunk is not None:
            after_chunk()
        if not encoded:
            return sums
        copies = []
    cols = t.dims[0] if t.dims else 1
    rows = _rows(t)
    measure_copies = measure and bool(copies) and numbers
    decode = bool(encoded) or measure_copies
    row_bytes = t.nbytes // rows if rows else 0
    step = max(1, _CHUNK_BYTES * threads // (4 * max(cols, 1)) if decode else _CHUNK_BYTES // max(1, row_bytes))
    expert_keys = {k for k in encoded if (w := weights.get(k)) is not None and w.ndim == 2 and t.shape[0] > 0}
    per_matrix = rows // t.shape[0] if expert_keys else rows
    sums.errors = {k: [0.0, 0.0] for k in encoded}
    a = lo
    while a < hi:
        b = min(a + step, hi, (a // per_matrix + 1) * per_matrix) if per_matrix else hi
        raw = t.raw(rows=slice(a, b)) if t.dims else t.raw()
        sums.read += raw.nbytes
        for f in copies:
            f.push(raw)
        if decode:
            x = dequantize(raw, gt, (b - a, cols), byte_order=t.byte_order, threads=threads)
            if measure_copies:
                sums.copied += error_sums(x, GGMLType.F32, x)[1]
            for key, outs in encoded.items():
                w = weights.get(key)
                if key in expert_keys and w is not None:
                    w = w[a // per_matrix - first_expert]
                new = GGMLType.of(key.split("+", 1)[0])
                try:
                    q = quantize(x, new, imatrix=w, threads=threads)
                except ValueError as e:
                    raise GGUFBuildError(str(e), path=f"tensor {t.name!r}", value=new.name) from None
                if measure:
                    e_sum, t_sum = error_sums(q, new, x)
                    sums.errors[key][0] += e_sum
                    sums.errors[key][1] += t_sum
                data = q.reshape(-1).data
                for f in outs:
                    f.push(data)
                del q
            del x
        if after_chunk is not None:
            after_chunk()
        a = b
    return sums
