"""Many presets in one pass on a Dask cluster (tools/quantcluster, `quantize IN OUTDIR -t A -t B --dask ADDRESS`),
on a real `distributed.LocalCluster` of two worker processes: every output byte for byte the local one-pass run's
(which tests/test_onepass.py holds to the single runs, and those to llama-quantize), for presets, importance
matrices and task sizes drawn at random on every generated model (task sizes that cut tensors into ranges of rows
at arbitrary places), a big-endian input and --keep-split; a worker process killed while it runs a task (its task
run again by Dask) gives the same bytes; a cancelled or failed run leaves the old files and no temporary; the
progress per output in the local and the cluster run alike. Skipped without dask.distributed."""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import time
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import gguf_schema  # noqa: E402
from gguf_schema.errors import GGUFBuildError  # noqa: E402
from gguf_schema.testing.quant_models import QUANT_MODELS, quant_model, save_imatrix, save_quant_model  # noqa: E402
from gguf_schema.tools.onepass import JobProgress, requantize_many  # noqa: E402
from gguf_schema.tools.quantplan import PRESETS  # noqa: E402
from gguf_schema.tools.split import split  # noqa: E402

from .helpers import run_cli  # noqa: E402


def sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            memory_limit="600MiB",
            dashboard_address=":0",
            silence_logs=50,
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("dask-models")
    out = {}
    for kind in QUANT_MODELS:
        src, im = d / f"{kind}.gguf", d / f"{kind}.imatrix.gguf"
        save_quant_model(src, kind)
        save_imatrix(im, quant_model(kind)[1])
        out[kind] = (src, im)
    return out


def _same_files(local, cluster) -> None:
    assert [r.preset for r in local.results] == [r.preset for r in cluster.results]
    for a, b in zip(local.results, cluster.results, strict=True):
        assert [os.path.basename(p) for p in a.paths] == [os.path.basename(p) for p in b.paths]
        for pa, pb in zip(a.paths, b.paths, strict=True):
            assert sha(pa) == sha(pb), (a.preset, pb)
    assert cluster.source_bytes == local.source_bytes


def _files(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("kind", QUANT_MODELS)
def test_cluster_outputs_are_the_local_run_files(client, models, tmp_path, kind):
    """Three presets drawn at random per model, with or without the importance matrix, and a task size drawn
    from a few hundred bytes (every big tensor cut into many ranges of rows, at places nobody chose) to the
    default: every output equals the local one-pass run's, and so do the measures (to rounding)."""
    src, im = models[kind]
    rng = random.Random(f"dask-{kind}")
    names = rng.sample([p.name for p in PRESETS], 3)
    options = {"allow_requantize": True, "measure": True}
    plan = requantize_many(src, tmp_path / "plan", names, dry_run=True)
    needs = any("needs an importance matrix" in n for r in plan.results for n in r.notes)
    if needs or rng.random() < 0.6:
        options["imatrix"] = str(im)
    task_bytes = rng.choice([rng.randrange(200, 5000), rng.randrange(5000, 200_000), None])
    local = requantize_many(src, tmp_path / "local", names, threads=1, **options)
    seen: list[JobProgress] = []
    cluster = requantize_many(
        src, tmp_path / "cluster", names, client=client, task_bytes=task_bytes, on_progress=seen.append, **options
    )
    _same_files(local, cluster)
    for a, b in zip(local.results, cluster.results, strict=True):
        for x, y in zip(a.tensors, b.tensors, strict=True):
            assert (x.name, x.new_type) == (y.name, y.new_type)
            for k in ("rms_error", "rms_input"):
                vx, vy = getattr(x, k), getattr(y, k)
                assert (vx is None) == (vy is None) and (vx is None or vy == pytest.approx(vx, rel=1e-9, abs=1e-30))
    assert _files(tmp_path / "cluster") == sorted(f"{kind}-{n}.gguf" for n in names)  # no temporary left
    _check_progress(seen, cluster)


def _check_progress(seen: list[JobProgress], job) -> None:
    """Reports only grow, and the last one is every output complete: its tensors, its bytes."""
    assert seen
    for before, after in itertools.pairwise(seen):
        for a, b in zip(before.outputs, after.outputs, strict=True):
            assert a.tensors_done <= b.tensors_done and a.bytes_done <= b.bytes_done
    last = seen[-1]
    assert [o.preset for o in last.outputs] == [r.preset for r in job.results]
    for o, r in zip(last.outputs, job.results, strict=True):
        assert (o.tensors_done, o.tensors) == (len(r.tensors), len(r.tensors))
        assert (o.bytes_done, o.bytes) == (r.output_bytes, r.output_bytes)
    assert last.fraction == 1.0


def test_local_run_reports_the_same_progress(models, tmp_path):
    src, _ = models["gemma3"]
    seen: list[JobProgress] = []
    job = requantize_many(src, tmp_path / "o", ["Q4_K_M", "Q6_K", "COPY"], threads=1, on_progress=seen.append)
    _check_progress(seen, job)
    assert len(seen) > len(job.results[0].tensors)  # after each chunk of rows, not only each tensor


def test_big_endian_input_and_keep_split(client, models, tmp_path):
    """A big-endian source (copies converted whole, by the writer's path) and a split model with --keep-split
    (each output shard its own temporary file)."""
    meta, tensors = quant_model("gemma3")
    big = tmp_path / "gemma3-be.gguf"
    gguf_schema.save(big, meta, tensors, byte_order="big")
    names = ["Q5_K_M", "F16"]
    _same_files(
        requantize_many(big, tmp_path / "l1", names, threads=1),
        requantize_many(big, tmp_path / "c1", names, client=client, task_bytes=3000),
    )
    src, im = models["qwen2-odd"]
    shards = split(src, str(tmp_path / "in"), max_tensors=200)
    assert len(shards) > 1
    options = {"keep_split": True, "imatrix": str(im)}
    local = requantize_many(shards[0], tmp_path / "l2", ["Q4_K_M", "Q8_0"], threads=1, **options)
    cluster = requantize_many(
        shards[0], tmp_path / "c2", ["Q4_K_M", "Q8_0"], client=client, task_bytes=50_000, **options
    )
    assert len(cluster.paths) == 2 * len(shards)
    _same_files(local, cluster)


def test_workers_read_a_url(client, models, tmp_path):
    """The source as a URL (a real HTTP server on 127.0.0.1): each worker reads its rows through the library's
    remote layer; the files are the local run's."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from .http_server import FileServer

    src, _ = models["llama-gqa"]
    names = ["Q4_K_S", "Q8_0"]
    local = requantize_many(src, tmp_path / "l", names, threads=1)
    with FileServer() as server:
        url = server.add("llama-gqa.gguf", src)
        cluster = requantize_many(url, tmp_path / "c", names, client=client, task_bytes=100_000)
        sent = server.bytes_sent("llama-gqa.gguf")
    _same_files(local, cluster)
    assert sent >= src.stat().st_size * 0.9  # the workers read the data from the server


class KillOnce(distributed.WorkerPlugin):
    """On the worker that starts the third task of a quantization first, ``os._exit`` a moment later, while that
    task runs (once per cluster: a marker file, made with O_EXCL, records the victim's pid and the task)."""

    def __init__(self, marker: str):
        self.marker = marker
        self.started = 0

    def setup(self, worker) -> None:
        self.worker = worker

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish != "executing" or "gguf-quantize" not in str(key):
            return
        self.started += 1
        if self.started < 3:
            return
        try:
            fd = os.open(self.marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return
        os.write(fd, f"{os.getpid()} {key}".encode())
        os.close(fd)
        import threading

        threading.Timer(0.002, os._exit, (1,)).start()


def test_a_worker_killed_mid_run_gives_the_same_bytes(client, models, tmp_path):
    """A worker process dies (os._exit) while it runs a task: Dask runs its tasks again elsewhere (or on the
    worker its nanny restarts), and since a task writes the same bytes at the same offsets each time, the files
    are the local run's."""
    src, im = models["qwen3moe"]
    names = ["Q4_K_M", "IQ4_XS", "Q8_0"]
    local = requantize_many(src, tmp_path / "local", names, threads=1, imatrix=str(im))
    marker = tmp_path / "killed"
    client.register_plugin(KillOnce(str(marker)), name="kill-once")
    try:
        cluster = requantize_many(src, tmp_path / "cluster", names, client=client, task_bytes=20_000, imatrix=str(im))
    finally:
        client.unregister_worker_plugin("kill-once")
    pid, key = marker.read_text().split()
    assert key.startswith("gguf-quantize-")
    _same_files(local, cluster)
    assert _files(tmp_path / "cluster") == sorted(f"qwen3moe-{n}.gguf" for n in names)
    # the worker that ran the task is gone: its nanny started another in its place
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = set(client.run(os.getpid, on_error="ignore").values())
        if len(pids) == 2 and int(pid) not in pids:
            break
        time.sleep(0.1)
    assert len(pids) == 2 and int(pid) not in pids, (pid, pids)


def _no_tasks_left(client) -> None:
    """Wait (at most 20 s) until the scheduler holds no task of a quantization: cancelled, or finished."""

    def ours(dask_scheduler=None) -> int:
        return sum(1 for k in dask_scheduler.tasks if "gguf-quantize" in str(k))

    deadline = time.monotonic() + 20
    while client.run_on_scheduler(ours) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.run_on_scheduler(ours) == 0


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_a_cancelled_run_leaves_the_old_files(client, models, tmp_path, stop):
    """Stopped from the progress callback (Ctrl-C, or the caller's own error) after a few tasks, with outputs
    that exist and overwrite=True: the tasks are cancelled, the old files are as they were, and no temporary is
    left, even after the tasks that were running have ended (a late task never makes a file)."""
    src, _ = models["llama-gqa"]
    out = tmp_path / "o"
    out.mkdir()
    old = {}
    for n in ("Q4_K_M", "Q6_K"):
        (out / f"llama-gqa-{n}.gguf").write_bytes(b"old " + n.encode())
        old[n] = sha(out / f"llama-gqa-{n}.gguf")
    calls = []

    def on_progress(p: JobProgress) -> None:
        calls.append(p)
        if len(calls) == 3:
            raise stop("stop")

    with pytest.raises(stop):
        requantize_many(
            src, out, ["Q4_K_M", "Q6_K"], client=client, task_bytes=2000, overwrite=True, on_progress=on_progress
        )
    _no_tasks_left(client)
    assert _files(out) == ["llama-gqa-Q4_K_M.gguf", "llama-gqa-Q6_K.gguf"]
    assert {n: sha(out / f"llama-gqa-{n}.gguf") for n in old} == old
    assert calls[-1].bytes_done < calls[-1].bytes


def test_a_failed_task_leaves_nothing(client, tmp_path):
    """A tensor a worker cannot encode (NaN in a block type) fails its task: the error reaches the caller as the
    local run raises it, and nothing is written."""
    meta, tensors = quant_model("llama-gqa")
    bad = dict(tensors)
    w = bad["blk.3.ffn_up.weight"].copy()
    w[5, 7] = np.nan
    bad["blk.3.ffn_up.weight"] = w
    src = tmp_path / "nan.gguf"
    gguf_schema.save(src, meta, bad)
    with pytest.raises(GGUFBuildError) as local_error:
        requantize_many(src, tmp_path / "local", ["Q4_K_M"], threads=1)
    with pytest.raises(GGUFBuildError) as cluster_error:
        requantize_many(src, tmp_path / "cluster", ["Q4_K_M", "Q8_0"], client=client, task_bytes=10_000)
    assert str(cluster_error.value) == str(local_error.value)
    _no_tasks_left(client)
    assert _files(tmp_path / "cluster") == []


def test_a_changed_source_is_refused_by_the_workers(client, models, tmp_path):
    """The workers read the source by its name: one that is not the file the plan was made from (here replaced
    between the plan and the tasks) is refused, nothing written."""
    src = tmp_path / "m.gguf"
    save_quant_model(src, "llama-gqa")
    other = tmp_path / "other.gguf"
    save_quant_model(other, "gemma3")

    def swap(job) -> None:
        os.replace(other, src)

    with pytest.raises(GGUFBuildError, match="not the file the plan was made from"):
        requantize_many(src, tmp_path / "o", ["Q4_K_M", "Q8_0"], client=client, on_plan=swap)
    assert _files(tmp_path / "o") == []
    _no_tasks_left(client)


def test_a_file_replaced_between_runs_is_read_anew(client, tmp_path):
    """Two runs on the same path, the file replaced between them by one of the same tensors (names, types,
    shapes) and other values: the second run's files are the new file's (a worker opens the source anew for each
    run, never its copy of the last run's)."""
    meta, tensors = quant_model("llama-gqa")
    src = tmp_path / "m.gguf"
    gguf_schema.save(src, meta, tensors)
    names = ["Q4_K_M", "Q8_0"]
    first = requantize_many(src, tmp_path / "c1", names, client=client)
    gguf_schema.save(tmp_path / "new.gguf", meta, {k: v[::-1].copy() * 2 for k, v in tensors.items()})
    os.replace(tmp_path / "new.gguf", src)
    second = requantize_many(src, tmp_path / "c2", names, client=client)
    local = requantize_many(src, tmp_path / "l2", names, threads=1)
    _same_files(local, second)
    assert sha(first.paths[0]) != sha(second.paths[0])

    def held() -> int:
        from gguf_schema.tools import quantcluster

        return len(quantcluster._held)

    assert set(client.run(held).values()) == {0}  # each run's copies of the source closed at its end


def test_cli_dask(client, models, tmp_path):
    src, _ = models["falcon"]
    address = client.scheduler.address
    r = run_cli(
        "quantize",
        src,
        tmp_path / "c",
        "-t",
        "Q4_K_M",
        "-t",
        "Q5_0",
        "--dask",
        address,
        env={"GGUF_SCHEMA_PROGRESS": "1"},
    )
    assert r.returncode == 0, r.stderr
    # the bar (forced on: stderr is not a terminal here) ends on the whole job done, per output
    with gguf_schema.open(tmp_path / "c" / "falcon-Q4_K_M.gguf") as f:
        n = len(f.tensor_list)
    assert f"tensors {2 * n}/{2 * n}; Q4_K_M {n}/{n} 100%; Q5_0 {n}/{n} 100%" in r.stderr.decode(), r.stderr[-500:]
    local = run_cli(
        "quantize",
        src,
        tmp_path / "l",
        "-t",
        "Q4_K_M",
        "-t",
        "Q5_0",
        "--threads",
        "1",
        env={"GGUF_SCHEMA_PROGRESS": "1"},
    )
    assert local.returncode == 0, local.stderr
    assert f"tensors {2 * n}/{2 * n}; Q4_K_M {n}/{n} 100%; Q5_0 {n}/{n} 100%" in local.stderr.decode()
    for n in ("Q4_K_M", "Q5_0"):
        assert sha(tmp_path / "c" / f"falcon-{n}.gguf") == sha(tmp_path / "l" / f"falcon-{n}.gguf")
    assert r.stdout == local.stdout  # the same summaries
    # one preset with --dask: OUT is a folder too
    r = run_cli("quantize", src, tmp_path / "one", "-t", "Q8_0", "--dask", address)
    assert r.returncode == 0, r.stderr
    assert _files(tmp_path / "one") == ["falcon-Q8_0.gguf"]
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):  # nothing listens there: fail fast
        r = run_cli("quantize", src, tmp_path / "x", "-t", "Q8_0", "--dask", "tcp://127.0.0.1:9")
    assert r.returncode == 2 and b"cannot reach the scheduler" in r.stderr, r
