"""Dequantize / quantize throughput of gguf_schema.quants vs the `gguf` package (same inputs).

Run: python benchmarks/bench_quants.py [--elements N] [--repeat R] [--threads T] [--no-gemma]
Prints markdown tables: Melem/s, best of R runs, the candidates timed in turn within each
repetition (so load changes hit all of them alike). "ours 1t" is ``threads=1``; "ours Tt"
is ``threads=T`` (default: the CPU count); the `gguf` package is single-threaded numpy.
Ratios are ours / gguf from the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from gguf_schema.quants import QUANTIZE_TYPES, dequantize, quantize  # noqa: E402
from gguf_schema.types import GGMLType  # noqa: E402
from test_quants import GEMMA, random_blocks  # noqa: E402

warnings.filterwarnings("ignore")


def best(fns: list, repeat: int) -> list[float]:
    """Best wall time of each callable over ``repeat`` rounds; in each round all run once, in turn."""
    times = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            if fn is None:
                continue
            t0 = time.perf_counter()
            fn()
            times[k] = min(times[k], time.perf_counter() - t0)
    return times


def oracle():
    try:
        from gguf import GGMLQuantizationType
        from gguf import quants as gq
    except ImportError:
        return None, None
    return gq, GGMLQuantizationType


def row(label: str, nel: int, ours1: float, ours_t: float, theirs: float) -> str:
    a, b = nel / ours1 / 1e6, nel / ours_t / 1e6
    if theirs == float("inf"):
        return f"| {label} | {nel / 1e6:.1f} | {a:.0f} | {b:.0f} | — | — | — |"
    c = nel / theirs / 1e6
    return f"| {label} | {nel / 1e6:.1f} | {a:.0f} | {b:.0f} | {c:.0f} | {a / c:.1f}x | {b / c:.1f}x |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-gemma", action="store_true")
    args = ap.parse_args()
    gq, GT = oracle()
    th = args.threads
    head = (f"| {{}} | Melem | ours 1t | ours {th}t | gguf | ratio 1t | ratio {th}t |\n"
            "|---|---|---|---|---|---|---|")
    print(f"Melem/s, best of {args.repeat}; {os.cpu_count()} CPUs; numpy {np.__version__}\n")
    n = args.elements
    src8 = np.zeros(n, dtype=np.int8)
    floor_fill, floor_cast = best([lambda: np.empty(n, dtype=np.float32).fill(1.0),
                                   lambda: src8.astype(np.float32)], args.repeat)
    print(f"Floor for any dequantizer that returns a new float32 array of {n / 1e6:.1f} M elements on this "
          f"machine: np.empty + fill {n / floor_fill / 1e6:.0f} Melem/s, int8 -> float32 astype "
          f"{n / floor_cast / 1e6:.0f} Melem/s.\n")

    if not args.no_gemma and gq is not None and os.path.exists(GEMMA):
        import gguf

        print("## Dequantize, gemma-3-270m-q4_k_m.gguf tensors\n")
        print(head.format("tensor (type)"))
        reader = gguf.GGUFReader(GEMMA)
        seen: set[str] = set()
        for info in reader.tensors:
            name = info.tensor_type.name
            if name == "F32" or name in seen:
                continue
            seen.add(name)
            t = GGMLType[name]
            shape = tuple(int(s) for s in reversed(info.shape.tolist()))
            raw = np.ascontiguousarray(np.asarray(info.data).view(np.uint8).reshape(-1))
            rows = min(int(np.prod(shape[:-1])), max(1, (1 << 24) // shape[-1]))  # <= 16M elements
            raw = raw[: rows * t.row_nbytes(shape[-1])]
            nel = rows * shape[-1]
            times = best([lambda: dequantize(raw, t, (rows, shape[-1]), threads=1),
                          lambda: dequantize(raw, t, (rows, shape[-1]), threads=th),
                          lambda: gq.dequantize(raw.reshape(rows, -1), info.tensor_type)], args.repeat)
            print(row(f"{info.name} ({name})", nel, *times))
        print()

    print(f"## Dequantize, random blocks ({args.elements / 1e6:.1f} M elements per type)\n")
    print(head.format("type"))
    for t in GGMLType:
        if t.removed or not t.quantized:
            continue
        n_blocks = args.elements // t.block_size
        cols = t.block_size * 16
        raw = random_blocks(t, n_blocks - n_blocks % 16)
        shape = (len(raw) // 16, cols)
        nel = shape[0] * cols
        theirs = None
        if gq is not None and t != GGMLType.Q8_1:  # the package's Q8_1 block size is wrong (40, not 36)
            try:
                qt = GT(int(t))
                gq.dequantize(raw[:16].reshape(1, -1), qt)
                theirs = (lambda qt=qt: gq.dequantize(raw.reshape(shape[0], -1), qt))
            except (ValueError, NotImplementedError):
                pass
        times = best([lambda: dequantize(raw, t, shape, threads=1),
                      lambda: dequantize(raw, t, shape, threads=th), theirs], args.repeat)
        print(row(t.name, nel, *times))
    print()

    print(f"## Quantize ({args.elements / 1e6:.1f} M float32 elements)\n")
    print(head.format("type"))
    x = np.random.default_rng(0).standard_normal((args.elements // 4096, 4096)).astype(np.float32)
    for t in sorted(QUANTIZE_TYPES, key=int):
        if t.name.startswith("I"):
            continue
        theirs = None
        if gq is not None and t != GGMLType.F32:  # the package returns F32 input as is (no copy)
            try:
                qt = GT(int(t))
                gq.quantize(x[:1], qt)
                theirs = (lambda qt=qt: gq.quantize(x, qt))
            except (ValueError, NotImplementedError):
                pass
        times = best([lambda: quantize(x, t, threads=1), lambda: quantize(x, t, threads=th), theirs],
                     args.repeat)
        print(row(t.name, x.size, *times))


if __name__ == "__main__":
    main()
