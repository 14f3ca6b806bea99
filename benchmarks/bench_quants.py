"""Dequantize / quantize throughput of gguf_schema.quants vs the `gguf` package (same inputs).

Run: python benchmarks/bench_quants.py [--elements N] [--repeat R] [--no-gemma]
Prints a markdown table (Melem/s, best of R runs, one thread each).
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


def best(fn, repeat: int) -> float:
    t = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def oracle():
    try:
        from gguf import GGMLQuantizationType
        from gguf import quants as gq
    except ImportError:
        return None, None
    return gq, GGMLQuantizationType


def row(label: str, nel: int, ours: float, theirs: float | None) -> str:
    a = nel / ours / 1e6
    if theirs is None:
        return f"| {label} | {nel / 1e6:.1f} | {a:.0f} | — | — |"
    b = nel / theirs / 1e6
    return f"| {label} | {nel / 1e6:.1f} | {a:.0f} | {b:.0f} | {a / b:.1f}x |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=1 << 23)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-gemma", action="store_true")
    args = ap.parse_args()
    gq, GT = oracle()
    head = "| {} | Melem | ours Melem/s | gguf Melem/s | ratio |\n|---|---|---|---|---|"

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
            ours = best(lambda: dequantize(raw, t, (rows, shape[-1])), args.repeat)
            theirs = best(lambda: gq.dequantize(raw.reshape(rows, -1), info.tensor_type), args.repeat)
            print(row(f"{info.name} ({name})", nel, ours, theirs))
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
        ours = best(lambda: dequantize(raw, t, shape), args.repeat)
        theirs = None
        if gq is not None and t != GGMLType.Q8_1:  # the package's Q8_1 block size is wrong (40, not 36)
            try:
                qt = GT(int(t))
                gq.dequantize(raw[:16].reshape(1, -1), qt)
                theirs = best(lambda: gq.dequantize(raw.reshape(shape[0], -1), qt), args.repeat)
            except (ValueError, NotImplementedError):
                pass
        print(row(t.name, nel, ours, theirs))
    print()

    print(f"## Quantize ({args.elements / 1e6:.1f} M float32 elements)\n")
    print(head.format("type"))
    x = np.random.default_rng(0).standard_normal((args.elements // 4096, 4096)).astype(np.float32)
    for t in sorted(QUANTIZE_TYPES, key=int):
        if t.name.startswith("I"):
            continue
        ours = best(lambda: quantize(x, t), args.repeat)
        theirs = None
        if gq is not None:
            try:
                qt = GT(int(t))
                gq.quantize(x[:1], qt)
                theirs = best(lambda: gq.quantize(x, qt), args.repeat)
            except (ValueError, NotImplementedError):
                pass
        print(row(t.name, x.size, ours, theirs))


if __name__ == "__main__":
    main()
