"""Memory and time of writing new files: a large vocabulary, and large tensors streamed (issue 28).

Each case runs in a fresh process under ``/usr/bin/time -v`` (peak resident memory as users, ``top``
and container limits see it: the whole process, mapped pages included) beside the same work done
by the ``gguf`` package's ``GGUFWriter`` in the same run, and beside a process that only builds the
input (the baseline both writers start from).

* ``strings``: ``tokenizer.ggml.tokens`` of N strings (default 4,000,000, mixed ASCII and not, ~8
  bytes each) with ``gguf_schema.save(path, {...: tokens})``, and with ``GGUFWriter.add_array``.
* ``tensors``: a file of T tensors of S bytes each (default 8 x 256 MiB = 2 GiB), F16, produced
  row block by row block by a generator: ``gguf_schema.save(path, md, {name: RawTensor("F16", shape,
  callable)})`` never holds a tensor; ``GGUFWriter`` takes each tensor whole
  (``add_tensor_info`` + ``write_tensor_data``), so it holds one tensor at a time.
* ``memmap``: the same tensors given as ``numpy.memmap`` views of a source file (``save`` streams
  them and releases the mapped pages behind its cursor).

``save`` fsyncs the new file before renaming it over the target (``sync=True``, the default);
``GGUFWriter`` does not, so ``save(sync=False)`` is shown too, the like-for-like comparison.

    python benchmarks/bench_write.py [--tokens 4000000] [--tensors 8] [--tensor-mib 256] [--out benchmarks/results/write.md]

Files go to a temporary folder under /tmp (``--tmp``) and are deleted after.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROWS_PER_BLOCK = 4096


def tokens(n: int) -> list[str]:
    """N distinct tokens, one in eight not ASCII, ~8 UTF-8 bytes each on average."""
    return [f"▁t{i}" if i % 8 == 0 else f"tok{i}" for i in range(n)]


def f16_blocks(rows: int, cols: int, seed: int):
    """A tensor's rows, ROWS_PER_BLOCK at a time (never the whole tensor)."""
    for a in range(0, rows, ROWS_PER_BLOCK):
        n = min(ROWS_PER_BLOCK, rows - a)
        yield np.full((n, cols), seed + a % 7, np.float16)


def worker(case: str, path: str, n: int, t: int, mib: int) -> None:
    cols = 4096
    rows = mib * 2**20 // (2 * cols)
    if case == "strings-input":
        toks = tokens(n)
        print(len(toks))
    elif case == "strings-save":
        import gguf_schema

        toks = tokens(n)
        gguf_schema.save(path, {"general.architecture": "llama", "tokenizer.ggml.tokens": toks})
    elif case == "strings-gguf":
        import gguf

        toks = tokens(n)
        w = gguf.GGUFWriter(path, "llama")
        w.add_array("tokenizer.ggml.tokens", toks)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    elif case == "tensors-input":
        total = sum(b.nbytes for i in range(t) for b in f16_blocks(rows, cols, i))
        print(total)
    elif case in ("tensors-save", "tensors-nosync"):
        import gguf_schema

        tensors = {
            f"blk.{i}.w": gguf_schema.RawTensor("F16", (rows, cols), lambda i=i: f16_blocks(rows, cols, i))
            for i in range(t)
        }
        gguf_schema.save(path, {"general.architecture": "llama"}, tensors, sync=case == "tensors-save")
    elif case == "tensors-gguf":
        import gguf

        w = gguf.GGUFWriter(path, "llama")
        for i in range(t):
            w.add_tensor_info(f"blk.{i}.w", (rows, cols), np.dtype(np.float16), rows * cols * 2)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for i in range(t):
            w.write_tensor_data(np.concatenate(list(f16_blocks(rows, cols, i))))  # GGUFWriter takes a whole tensor
        w.close()
    elif case == "memmap-save":
        import gguf_schema

        src = path + ".src"
        m = np.memmap(src, np.float16, "r", shape=(t, rows, cols))
        gguf_schema.save(path, {"general.architecture": "llama"}, {f"blk.{i}.w": m[i] for i in range(t)})
    else:
        raise SystemExit(f"unknown case {case}")


def measure(case: str, path: str, args: argparse.Namespace) -> tuple[float, float, float]:
    """(wall s, user+sys s, peak RSS MiB) of one worker process, as /usr/bin/time -v reports them."""
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        __file__,
        "--worker",
        case,
        path,
        str(args.tokens),
        str(args.tensors),
        str(args.tensor_mib),
    ]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{case} failed:\n{r.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) / 1024
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", r.stderr).group(1))
    sys_ = float(re.search(r"System time \(seconds\): ([\d.]+)", r.stderr).group(1))
    return wall, user + sys_, rss


def loadavg() -> list[str]:
    with open("/proc/loadavg") as fh:
        return fh.read().split()[:3]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", nargs=5, metavar=("CASE", "PATH", "N", "T", "MIB"))
    ap.add_argument("--tokens", type=int, default=4_000_000)
    ap.add_argument("--tensors", type=int, default=8)
    ap.add_argument("--tensor-mib", type=int, default=256)
    ap.add_argument("--cases", default="strings,tensors,memmap")
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.worker:
        case, path, n, t, mib = args.worker
        worker(case, path, int(n), int(t), int(mib))
        return
    load = loadavg()
    lines = [
        f"machine load before: {' '.join(load)} (1, 5, 15 min); {os.cpu_count()} CPUs",
        "",
        "| case | writer | wall s | CPU s | peak RSS MiB | over the input's MiB | file MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    folder = tempfile.mkdtemp(prefix="gguf-bench-write-", dir=args.tmp)
    try:
        cases = args.cases.split(",")
        groups = {
            "strings": ("strings-input", ["strings-save", "strings-gguf"]),
            "tensors": ("tensors-input", ["tensors-save", "tensors-nosync", "tensors-gguf"]),
            "memmap": ("tensors-input", ["memmap-save"]),
        }
        for group in cases:
            base_case, writers = groups[group]
            if group == "memmap":  # the source the memmaps view
                rows = args.tensor_mib * 2**20 // (2 * 4096)
                src = os.path.join(folder, "memmap-save.gguf.src")
                m = np.memmap(src, np.float16, "w+", shape=(args.tensors, rows, 4096))
                for i in range(args.tensors):
                    m[i] = i
                m.flush()
                del m
            _, _, base = measure(base_case, os.path.join(folder, "input"), args)
            for case in writers:
                out = os.path.join(folder, case + ".gguf")
                wall, cpu, rss = measure(case, out, args)
                size = os.path.getsize(out) / 2**20
                label = {
                    "save": "gguf_schema.save",
                    "nosync": "gguf_schema.save(sync=False)",
                    "gguf": "gguf.GGUFWriter",
                }[case.split("-")[1]]
                lines.append(
                    f"| {group} | {label} | {wall:.2f} | {cpu:.2f} | {rss:,.0f} | {rss - base:+,.0f} | {size:,.0f} |"
                )
                print(lines[-1], flush=True)
                os.unlink(out)
            lines.append(f"| {group} | (input only) | | | {base:,.0f} | | |")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    load = loadavg()
    lines.append("")
    lines.append(f"machine load after: {' '.join(load)}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
