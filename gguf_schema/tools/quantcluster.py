"""Many presets of one model in one pass, on a Dask cluster: :func:`write_on_cluster`.

:func:`~gguf_schema.tools.onepass.requantize_many` with ``client=`` (a ``distributed.Client``; the
command line's ``quantize IN OUTDIR -t A -t B ... --dask ADDRESS``) plans every preset here, on the
client, exactly as the local run does (the same outputs, the same type for each tensor, the same
headers). Then, on the client:

1. each output's temporary file is made beside its final name, with a name (every worker opens it
   by that name on a shared filesystem: :class:`~gguf_schema.durable.PendingFiles` with
   ``named=True``), its header written (:class:`~gguf_schema.writer.PushedFile`: the header checks
   of every write) and its size set to the whole file's (the padding between tensors is the zeros
   of a file extended);
2. the source's tensors are cut into pieces (a tensor, or a range of rows of a big one) and the
   pieces into tasks of about ``task_bytes`` of source data; each task names its source (the path
   or URL as given, resolved to an absolute path), the tensors' records (type, dimensions, size:
   checked against what the worker reads), and for each distinct result of each piece its type,
   its importance weights, and the offsets in the temporary files where its bytes go.

On a worker, a task opens the source through this library's reader (a path, or a URL through
:mod:`gguf_schema.io.remote`; the open model is kept for the next task of the same thread), runs
the local run's own loop over its rows (:func:`~gguf_schema.tools.onepass._stream_rows`: the
same reads, decodes and encodes, a few MiB of rows at a time, so a worker's memory is the local
run's), and writes each result with ``pwrite`` at its offsets, then ``fdatasync`` (with
``sync``). A task writes the same bytes at the same offsets each time it runs, and never creates
a file (the temporaries are opened without ``O_CREAT``): a task whose worker is lost is simply
run again by Dask, and a late task of a cancelled run writes into a file already unlinked, or
finds none.

Back on the client, when every task is done, each temporary is fsynced and the set is renamed
into place together (:meth:`~gguf_schema.durable.PendingFiles.commit`). A failed task, an
exception in a callback, or ``KeyboardInterrupt`` cancels the tasks left and removes the
temporaries: the old files stay as they were, and nothing half-written is ever under a final name.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..durable import PendingFiles, os_error
from ..errors import GGUFBuildError, GGUFDependencyError, shorten
from ..format.types import tensor_nbytes
from ..io.source import is_url
from ..model import Tensor
from ..shards import SplitModel
from ..writer import Progress, PushedFile
from .onepass import _apply_measures, _distinct, _layouts, _rows, _stream_rows, _Sums, _Tracker, _whole
from .requantize import RequantizeResult, TensorReport, _open

__all__ = ["DEFAULT_TASK_BYTES", "write_on_cluster"]

DEFAULT_TASK_BYTES = 64 * 2**20
"""About how many bytes of source tensor data one task reads, unless ``task_bytes`` says."""


@dataclass(frozen=True)
class _Result:
    """One distinct result of a piece: its key (``"copy"``, ``"Q4_K"``, ``"Q4_K+imatrix"``), its
    importance weights, and where its bytes go: (temporary file, offset of the piece's first row)."""

    key: str
    weights: np.ndarray | None
    places: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class _Piece:
    """Rows ``lo:hi`` of one source tensor, with the record the client planned from (type, dims, bytes)."""

    tensor: str
    lo: int
    hi: int
    record: tuple[int, tuple[int, ...], int]
    results: tuple[_Result, ...]
    nbytes: int  # of source data
    first_expert: int = 0  # the expert of the first row of each result's weights of two dimensions


@dataclass(frozen=True)
class _Job:
    """What every task of a run shares: the source, how to read it, and how to work."""

    src: str
    storage_options: Mapping[str, Any] | None
    reading: Mapping[str, Any]
    threads: int
    measure: bool
    sync: bool
    run: str  # this run's token: a worker opens the source anew for each run
    files: tuple[tuple[str, int, int], ...] = ()  # each local source file: (path, size, mtime in ns) at the plan


def _opened(model: Any) -> tuple[tuple[str, int, int], ...]:
    """The path, size and modification time of each local file of the open model, the plan's source (of
    the files it has open: a file replaced since under the same name is not it)."""
    out = []
    for f in model.shards if isinstance(model, SplitModel) else [model]:
        fd = f.fileno()
        if fd is None or f.name is None or is_url(f.name):
            continue
        try:
            st = os.fstat(fd)
        except OSError as e:
            raise os_error(e, f.name) from None
        out.append((os.path.abspath(f.name), st.st_size, st.st_mtime_ns))
    return tuple(out)


def _identity(paths: Sequence[str]) -> tuple[tuple[str, int, int], ...]:
    """Each local file's path, size and modification time (what a worker compares with the plan's)."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as e:
            raise os_error(e, p) from None
        out.append((p, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _require_distributed() -> Any:
    try:
        import distributed
    except ImportError as e:
        why = "" if isinstance(e, ModuleNotFoundError) or not str(e) else f" ({shorten(str(e), 200)})"
        raise GGUFDependencyError(
            f"quantizing on a cluster needs dask.distributed{why}: pip install 'gguf-schema[dask]'", name="distributed"
        ) from None
    return distributed


def write_on_cluster(
    client: Any,
    src: Any,
    model: Any,
    planned: list[tuple[RequantizeResult, dict[str, np.ndarray]]],
    *,
    storage_options: Mapping[str, Any] | None,
    reading: Mapping[str, Any],
    threads: int,
    measure: bool,
    progress: Progress | None,
    sync: bool,
    strict: str | None,
    tracker: _Tracker,
    task_bytes: int | None,
) -> int:
    """Write the planned outputs with the workers of ``client`` (see the module docstring); return
    the bytes of tensor data the tasks read. Called by :func:`~gguf_schema.tools.onepass.requantize_many`."""
    distributed = _require_distributed()
    where = os.fspath(src)
    if not is_url(where):
        where = os.path.abspath(where)
    token = secrets.token_hex(6)
    job = _Job(
        where,
        dict(storage_options) if storage_options else None,
        dict(reading),
        threads,
        measure,
        sync,
        token,
        _opened(model),
    )
    tensors = {t.name: t for t in model.tensor_list}
    head = model.shards[0] if isinstance(model, SplitModel) else model
    paths = [p for r, _ in planned for p in r.paths]
    with PendingFiles(paths, sync=sync, named=True) as pending:
        offsets = _headers(pending, model, planned, tensors, head, progress, strict)
        pieces, bytes_of = _pieces(planned, tensors, offsets, task_bytes or DEFAULT_TASK_BYTES)
        tasks = _tasks(pieces, task_bytes or DEFAULT_TASK_BYTES)
        left: dict[str, int] = {}  # tensor -> pieces not done
        for task in tasks:
            for p in task:
                left[p.tensor] = left.get(p.tensor, 0) + 1
        order = {r.name: j for j, r in enumerate(planned[0][0].tensors)}
        totals: dict[str, _Sums] = {}
        read = 0
        futures: list[Any] = []
        try:
            for i, task in enumerate(tasks):
                futures.append(client.submit(_run_task, job, task, key=f"gguf-quantize-{token}-{i}", pure=False))
            index = {f.key: i for i, f in enumerate(futures)}
            for future in distributed.as_completed(futures):
                task = tasks[index[future.key]]
                results: list[_Sums] = future.result()
                for p, sums in zip(task, results, strict=True):
                    read += sums.read
                    totals.setdefault(p.tensor, _Sums()).add(sums)
                    for o, n in bytes_of[id(p)]:
                        tracker.add(o, n)
                        if progress is not None:
                            progress(n)
                    left[p.tensor] -= 1
                    if left[p.tensor] == 0:
                        j = order[p.tensor]
                        if measure:
                            _apply_measures(tensors[p.tensor], _distinct(planned, j)[0], totals[p.tensor])
                        tracker.tensor_done(j)
                tracker.report()
        finally:  # done, failed or stopped: the tasks left cancelled (the results were all taken), the run over
            with contextlib.suppress(Exception):
                client.cancel(futures)
            with contextlib.suppress(Exception):  # the workers close their copies of the source (best effort)
                client.run(_forget, token, on_error="ignore")
        pending.commit()  # each temporary fsynced here (the workers' bytes with it), then renamed together
    return read


def _headers(
    pending: PendingFiles,
    model: Any,
    planned: list[tuple[RequantizeResult, dict[str, np.ndarray]]],
    tensors: Mapping[str, Tensor],
    head: Any,
    progress: Progress | None,
    strict: str | None,
) -> list[list[tuple[str, dict[str, int]]]]:
    """Make each output's temporary file: its header (as the local run writes it), its whole size.
    Returns per output, per shard: the temporary's name and each tensor's absolute offset in it."""
    out: list[list[tuple[str, dict[str, int]]]] = []
    k = 0
    for result, _ in planned:
        layouts, per_shard = _layouts(model, result, tensors)
        shards = []
        for i in range(len(result.paths)):
            try:
                stream = pending.open(k)
                f = PushedFile(
                    stream,
                    per_shard[i],
                    layouts[i],
                    version=3,
                    byte_order="little",
                    progress=progress,
                    source=head if i == 0 else None,
                    strict=strict,
                )
                stream.flush()
                os.ftruncate(stream.fileno(), f.data_offset + f.data_size)
            except OSError as e:
                raise os_error(e, pending.targets[k]) from e
            shards.append((pending.temporary(k), {p.name: f.data_offset + (p.offset or 0) for p in layouts[i]}))
            k += 1
        out.append(shards)
    return out


def _pieces(
    planned: list[tuple[RequantizeResult, dict[str, np.ndarray]]],
    tensors: Mapping[str, Tensor],
    offsets: list[list[tuple[str, dict[str, int]]]],
    task_bytes: int,
) -> tuple[list[_Piece], dict[int, list[tuple[int, int]]]]:
    """Every source tensor as pieces of at most about ``task_bytes`` (ranges of rows), in the order
    written; and per piece (by id) the bytes it writes into each output."""
    pieces: list[_Piece] = []
    bytes_of: dict[int, list[tuple[int, int]]] = {}
    for j, report in enumerate(planned[0][0].tensors):
        t = tensors[report.name]
        targets, weights = _distinct(planned, j)
        rows = _rows(t)
        n = 1 if _whole(t) or rows == 0 else max(1, min(rows, math.ceil(t.nbytes / task_bytes)))
        step = math.ceil(rows / n) if rows else 0
        record = (int(t.type), tuple(int(d) for d in t.dims), int(t.nbytes))
        for lo in range(0, max(rows, 1), max(step, 1)):
            hi = min(rows, lo + step) if rows else 0
            results = []
            written: list[tuple[int, int]] = []
            per_expert = rows // t.shape[0] if t.dims and t.shape and t.shape[0] > 0 else 0
            first = lo // per_expert if per_expert else 0
            last = (hi - 1) // per_expert + 1 if per_expert and hi > lo else first
            for key, outs in targets.items():
                row_bytes = _row_bytes(t, outs[0][1], key, rows)
                places = []
                for o, r in outs:
                    name, where = offsets[o][r.shard]
                    places.append((name, where[r.name] + lo * row_bytes))
                    written.append((o, (hi - lo) * row_bytes if rows else r.nbytes))
                w = weights.get(key)
                if w is not None and w.ndim == 2:  # a row of weights per expert: those of this piece's rows only
                    w = np.ascontiguousarray(w[first:last])
                results.append(_Result(key, w, tuple(places)))
            piece = _Piece(
                t.name,
                lo,
                hi,
                record,
                tuple(results),
                (hi - lo) * (t.nbytes // rows) if rows else t.nbytes,
                first,
            )
            pieces.append(piece)
            bytes_of[id(piece)] = written
            if not rows:
                break
    return pieces, bytes_of


def _row_bytes(t: Tensor, r: TensorReport, key: str, rows: int) -> int:
    """The bytes of one row of result ``key`` of ``t`` (the report's whole size divided evenly: every type
    stores whole rows)."""
    if not rows:
        return 0
    size = t.nbytes if key == "copy" else r.nbytes
    if key != "copy" and t.dims and tensor_nbytes(r.new_type, t.dims[:1]) * rows != size:  # pragma: no cover
        raise GGUFBuildError(f"tensor {t.name!r}: {size} bytes are not {rows} rows of {r.new_type.name}")
    return size // rows


def _tasks(pieces: Sequence[_Piece], task_bytes: int) -> list[list[_Piece]]:
    """Consecutive pieces gathered into tasks of about ``task_bytes`` of source data each."""
    tasks: list[list[_Piece]] = []
    current: list[_Piece] = []
    size = 0
    for p in pieces:
        if current and size + p.nbytes > task_bytes:
            tasks.append(current)
            current, size = [], 0
        current.append(p)
        size += p.nbytes
    if current:
        tasks.append(current)
    return tasks


# --------------------------------------------------------------------------- on a worker

_held: dict[tuple[str, int], tuple[Any, dict[str, Tensor]]] = {}  # (run, thread) -> the source, its tensors
_held_lock = threading.Lock()
_over: set[str] = set()  # runs that ended: a late task of one does nothing


def _model(job: _Job) -> tuple[Any, dict[str, Tensor]]:
    """The source, opened once per run and worker thread, kept for the run's next tasks on that thread
    (closed by :func:`_forget` at the end of the run). A local source file that is not the one the plan
    was made from (another size or modification time) is refused, at every task."""
    now = _identity([p for p, _, _ in job.files])
    if now != job.files:
        raise GGUFBuildError(
            f"the source {job.src!r} read by a worker is not the file the plan was made from (size, modification "
            f"time): {now} there, {job.files} in the plan",
            path=job.src,
        )
    key = (job.run, threading.get_ident())
    with _held_lock:
        held = _held.get(key)
    if held is not None:
        return held
    model = _open(job.src, job.storage_options, dict(job.reading))
    opened = (model, {t.name: t for t in model.tensor_list})
    with _held_lock:
        over = job.run in _over
        if not over:
            _held[key] = opened
    if over:
        model.close()
        raise GGUFBuildError("a task of a run that has ended (cancelled, or failed elsewhere): nothing done")
    return opened


def _forget(run: str) -> int:
    """Close the worker's copies of run ``run``'s source (never another run's: it may be running); return how many."""
    with _held_lock:
        _over.add(run)
        models = [_held.pop(k)[0] for k in [k for k in _held if k[0] == run]]
    for m in models:
        with contextlib.suppress(Exception):
            m.close()
    return len(models)


class _At:
    """A sink that writes what is pushed at consecutive offsets of an open file (``pwrite``)."""

    def __init__(self, fd: int, offset: int, name: str):
        self.fd, self.offset, self.name = fd, offset, name

    def push(self, piece: Any) -> None:
        if isinstance(piece, np.ndarray):
            piece = np.ascontiguousarray(piece).reshape(-1).view(np.uint8)
        data = memoryview(piece).cast("B")
        while data.nbytes:
            try:
                n = os.pwrite(self.fd, data, self.offset)
            except OSError as e:
                raise os_error(e, self.name) from None
            self.offset += n
            data = data[n:]


def _run_task(job: _Job, pieces: Sequence[_Piece]) -> list[_Sums]:
    """One task on a worker: each piece read, quantized and written at its offsets; the sums measured.
    Idempotent: the same bytes at the same offsets each time; no file is created."""
    with _held_lock:
        if job.run in _over:
            raise GGUFBuildError("a task of a run that has ended (cancelled, or failed elsewhere): nothing done")
    _, by_name = _model(job)
    fds: dict[str, int] = {}
    out = []
    try:
        for p in pieces:
            t = by_name.get(p.tensor)
            record = (int(t.type), tuple(int(d) for d in t.dims), int(t.nbytes)) if t is not None else None
            if record != p.record:
                raise GGUFBuildError(
                    f"the source {job.src!r} read by a worker is not the file the plan was made from: tensor "
                    f"{p.tensor!r} is {record} there (type, dimensions, bytes), {p.record} in the plan",
                    path=job.src,
                )
            if t is None:  # pragma: no cover - the record check above refuses it
                raise GGUFBuildError(f"tensor {p.tensor!r} missing")
            sinks: dict[str, list[Any]] = {}
            weights: dict[str, np.ndarray | None] = {}
            for result in p.results:
                for name, offset in result.places:
                    if name not in fds:
                        try:
                            fds[name] = os.open(name, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
                        except OSError as e:
                            raise os_error(e, name) from None
                    sinks.setdefault(result.key, []).append(_At(fds[name], offset, name))
                weights[result.key] = result.weights
            try:
                out.append(
                    _stream_rows(t, sinks, weights, job.threads, job.measure, p.lo, p.hi, first_expert=p.first_expert)
                )
            except OSError as e:
                raise os_error(e, job.src) from None
        if job.sync:
            for name, fd in fds.items():
                try:
                    os.fdatasync(fd)
                except OSError as e:
                    raise os_error(e, name) from None
    finally:
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
    return out
