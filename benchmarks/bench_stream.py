"""Resident memory and time of the commands that stream a whole file, on a 10 GB model (issue 28).

Each command runs as a user runs it (``gguf-schema ...`` in a fresh process) under ``/usr/bin/time -v``;
the figures are the whole process: wall time, CPU time (user + system) and peak resident memory
(``Maximum resident set size``: what ``top`` and container limits see, mapped file pages included).
Beside them, in the same run, ``cp`` of the same file (the floor for a copy), and with ``--before DIR``
the same commands run from another checkout of gguf-schema (e.g. ``git archive main``), for a
before/after comparison.

* the 10 GB file: ``--tensors`` F16 tensors of ``--tensor-mib`` MiB each (default 40 x 256 MiB),
  written by ``gguf_schema.save`` from generators (one block of rows at a time);
* commands: ``convert --version 2`` (same byte order: the data copied in the kernel),
  ``convert --byte-order big`` (every element swapped), ``split --max-size 2G``, ``merge``,
  ``export --dtype f16`` (copied, little-endian), ``diff`` (SHA-256 of every tensor of both files);
* a file with a 2,000,000-token vocabulary: ``info``, ``check``, ``audit``.

    python benchmarks/bench_stream.py [--tensors 40] [--tensor-mib 256] [--tokens 2000000] [--before DIR]
                                      [--tmp /tmp] [--out benchmarks/results/stream.md]

Generated files go to a new folder under ``--tmp`` and are deleted at the end (and between steps,
so at most three 10 GB files exist at once). Target: peak RSS under 300 MB for the streaming
commands, time within 1.3x ``cp`` on a quiet machine. The machine's load is recorded before and after.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def make_big(path: str, tensors: int, mib: int) -> None:
    import gguf_schema

    cols = 4096
    rows = mib * 2**20 // (2 * cols)

    def blocks(seed: int):
        for a in range(0, rows, 2048):
            n = min(2048, rows - a)
            yield np.full((n, cols), seed + a % 1000, np.float16)

    gguf_schema.save(
        path,
        {"general.architecture": "llama", "general.name": "stream-bench", "llama.block_count": np.uint32(tensors)},
        {
            f"blk.{i}.ffn_up.weight": gguf_schema.RawTensor("F16", (rows, cols), lambda i=i: blocks(i))
            for i in range(tensors)
        },
    )


def make_vocab(path: str, n: int) -> None:
    import gguf_schema

    tokens = [f"▁t{i}" if i % 8 == 0 else f"tok{i}" for i in range(n)]
    gguf_schema.save(
        path,
        {
            "general.architecture": "llama",
            "general.name": "vocab-bench",
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": np.zeros(n, np.float32),
            "tokenizer.ggml.token_type": np.ones(n, np.int32),
        },
        {"token_embd.weight": np.zeros((16, 64), np.float32)},
    )


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, float, int]:
    # (run from the temporary folder: started in a checkout, Python would import that checkout first)
    """(wall s, user s, sys s, peak RSS MiB, exit status) of one process, as /usr/bin/time -v reports them."""
    t0 = time.perf_counter()
    r = subprocess.run(
        ["/usr/bin/time", "-v", *cmd],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    wall = time.perf_counter() - t0
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) / 1024
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", r.stderr).group(1))
    sys_ = float(re.search(r"System time \(seconds\): ([\d.]+)", r.stderr).group(1))
    status = int(re.search(r"Exit status: (\d+)", r.stderr).group(1))
    if status not in (0, 1):
        print(r.stderr[-2000:], file=sys.stderr)
    return wall, user, sys_, rss, status


def free_gb(folder: str) -> float:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, default=40)
    ap.add_argument("--tensor-mib", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=2_000_000)
    ap.add_argument("--before", default=None, help="another checkout of gguf-schema to run the same commands from")
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    size_gb = args.tensors * args.tensor_mib * 2**20 / 1e9
    if not args.skip_big and free_gb(args.tmp) < 3.5 * size_gb + 5:
        raise SystemExit(f"not enough free space in {args.tmp}: {free_gb(args.tmp):.0f} GB")
    folder = tempfile.mkdtemp(prefix="gguf-bench-stream-", dir=args.tmp)
    versions = {"after": {**os.environ}}
    if args.before:
        versions["before"] = {**os.environ, "PYTHONPATH": os.path.abspath(args.before)}
    rows: list[str] = []

    def gs(version: str, *a: str) -> tuple[float, float, float, float, int]:
        return run([sys.executable, "-m", "gguf_schema", *a], env=versions[version])

    def record(what: str, version: str, result: tuple[float, float, float, float, int], cp_wall: float | None) -> None:
        wall, user, sys_, rss, status = result
        ratio = f"{wall / cp_wall:.2f}x" if cp_wall else ""
        rows.append(f"| {what} | {version} | {wall:.1f} | {user:.1f} | {sys_:.1f} | {rss:,.0f} | {ratio} | {status} |")
        print(rows[-1], flush=True)

    head = [
        f"machine: {os.cpu_count()} CPUs; load before: {load()} (1, 5, 15 min)",
        "",
        "| command | version | wall s | user s | sys s | peak RSS MiB | wall / cp | exit |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(head), flush=True)
    try:
        if not args.skip_big:
            src = os.path.join(folder, "big.gguf")
            t0 = time.perf_counter()
            make_big(src, args.tensors, args.tensor_mib)
            print(f"wrote {src}: {os.path.getsize(src) / 1e9:.2f} GB in {time.perf_counter() - t0:.0f} s", flush=True)
            run(["cat", src])  # the file in the page cache for every command alike (cp's own run included)
            dst = os.path.join(folder, "copy.gguf")
            cp = run(["cp", src, dst])
            record("cp FILE OUT", "-", cp, cp[0])
            os.unlink(dst)
            # every gguf-schema write fsyncs the new file before it replaces the target; cp does not
            record("cp FILE OUT && sync OUT", "-", run(["sh", "-c", f"cp '{src}' '{dst}' && sync '{dst}'"]), cp[0])
            os.unlink(dst)
            for version in versions:
                steps = [
                    ("convert FILE OUT --version 2", ["convert", src, dst, "--version", "2"]),
                    ("convert FILE OUT --byte-order big", ["convert", src, dst, "--byte-order", "big"]),
                    ("export FILE OUT --dtype f16", ["export", src, dst, "--dtype", "f16"]),
                ]
                for what, a in steps:
                    record(what, version, gs(version, *a), cp[0])
                    os.unlink(dst)
                prefix = os.path.join(folder, "shard")
                record(
                    "split FILE PREFIX --max-size 2G",
                    version,
                    gs(version, "split", src, prefix, "--max-size", "2G"),
                    cp[0],
                )
                first = sorted(glob.glob(prefix + "-*.gguf"))[0]
                merged = os.path.join(folder, "merged.gguf")
                record("merge FIRST_SHARD OUT", version, gs(version, "merge", first, merged), cp[0])
                for p in glob.glob(prefix + "-*.gguf"):
                    os.unlink(p)
                record("diff FILE MERGED (both hashed)", version, gs(version, "diff", src, merged), 2 * cp[0])
                os.unlink(merged)
            os.unlink(src)
            rows.append("")
            rows.append(
                f"{size_gb:.1f} GB file: {args.tensors} F16 tensors of {args.tensor_mib} MiB; `wall / cp` is the ratio to `cp` of "
                "the same file in this run (diff: to two `cp`s, since it reads both files)."
            )
            rows.append("")
        vocab = os.path.join(folder, "vocab.gguf")
        make_vocab(vocab, args.tokens)
        rows.append(f"| (vocabulary of {args.tokens:,} tokens, {os.path.getsize(vocab) / 1e6:.0f} MB) | | | | | | | |")
        for version in versions:
            for what in ("info", "check", "audit"):
                record(f"{what} VOCAB", version, gs(version, what, vocab), None)
        os.unlink(vocab)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    text = "\n".join(head + rows + ["", f"load after: {load()}"]) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
