"""Threads and fresh memory in gguf_schema.tensors.dequantize (the figures behind its threading choices).

Run: python benchmarks/bench_threads.py [--repeat R]
Prints markdown: Melem/s over R runs (median, best, worst) of

1. Q8_0 token_embd of gemma-3-270m (16.8 M elements, read through the `gguf` package's memory map,
   as bench_quants.py does) and random Q8_0 blocks in anonymous memory, decoded into a new array:
   one thread; two threads where the calling thread faults the result in just ahead of the workers
   (what ``threads=2`` does); two threads that each fault their own half (the plain split, what
   ``out=`` buffers and the earlier code use);
2. the gemma Q6_K ffn_down tensor (1.3 M elements) on one thread and on two: why ``threads=None``
   keeps tensors under 4 M elements on one thread.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from test_quants import GEMMA, random_blocks

from gguf_schema import quants
from gguf_schema.format.types import GGMLType


def decode_q8_0(raw: np.ndarray, rows: int, cols: int, threads: int, fault_ahead: bool) -> None:
    """quants.dequantize's Q8_0 path on ``threads`` threads, faulting ahead or not."""
    t = GGMLType.Q8_0
    out = np.empty(rows * cols, dtype=np.float32)
    blocks = raw.reshape(-1, t.type_size)
    out_blocks = out.reshape(-1, t.block_size)
    step = quants._CHUNK_ELEMENTS // t.block_size

    def run(i: int) -> None:
        quants._compiled.decode(t, blocks[i : i + step], out_blocks[i : i + step])

    fresh = out if fault_ahead else None
    quants._run_chunks(range(0, len(blocks), step), run, threads, fresh, step * t.block_size)


def stats(times: list[float], n: int) -> str:
    rates = sorted(n / s / 1e6 for s in times)
    return f"{np.median(rates):.0f} | {rates[-1]:.0f} | {rates[0]:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    if quants._compiled is None:
        sys.exit("needs the compiled kernels (gguf_schema.tensors._kernels)")
    import gguf  # the `bench` extra

    reader = gguf.GGUFReader(GEMMA)
    infos = {i.name: i for i in reader.tensors}
    emb = infos["token_embd.weight"]
    cols = int(emb.shape[0])
    rows = (1 << 24) // cols
    mapped = np.asarray(emb.data).view(np.uint8).reshape(-1)[: rows * GGMLType.Q8_0.row_nbytes(cols)]
    anonymous = random_blocks(GGMLType.Q8_0, rows * cols // 32, 1).reshape(-1)
    print(f"Melem/s over {args.repeat} runs each, candidates in turn; {os.cpu_count()} CPUs; numpy {np.__version__}\n")
    print("## Q8_0 into a new array (16.8 M elements)\n")
    print("| source | how | median | best | worst |\n|---|---|---|---|---|")
    cases = [
        ("1 thread", 1, True),
        ("2 threads, caller faults ahead", 2, True),
        ("2 threads, each faults its half", 2, False),
    ]
    for label, src in (("gemma, via the package's memory map", mapped), ("random blocks, anonymous memory", anonymous)):
        times: dict[str, list[float]] = {c[0]: [] for c in cases}
        for _ in range(args.repeat):
            for name, th, ahead in cases:
                t0 = time.perf_counter()
                decode_q8_0(src, rows, cols, th, ahead)
                times[name].append(time.perf_counter() - t0)
        for name, _, _ in cases:
            print(f"| {label} | {name} | {stats(times[name], rows * cols)} |")
    print()

    down = infos["blk.0.ffn_down.weight"]
    shape = tuple(int(s) for s in reversed(down.shape.tolist()))
    raw = np.asarray(down.data).view(np.uint8).reshape(-1)
    n = int(np.prod(shape))
    print(f"## Q6_K ffn_down, {n / 1e6:.1f} M elements, default engine\n")
    print("| threads | median | best | worst |\n|---|---|---|---|")
    times = {1: [], 2: []}
    for _ in range(args.repeat):
        for th in (1, 2):
            t0 = time.perf_counter()
            quants.dequantize(raw, GGMLType.Q6_K, shape, threads=th)
            times[th].append(time.perf_counter() - t0)
    for th in (1, 2):
        print(f"| {th} | {stats(times[th], n)} |")


if __name__ == "__main__":
    main()
