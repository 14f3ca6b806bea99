"""Quantize throughput of gguf_schema.tensors.quantize for every quantized type, beside ggml's own.

Run: python benchmarks/bench_quantize.py [--ggml-lib PATH/libggml-base.so] [--elements N]
                                         [--repeat R] [--types Q4_K,IQ4_XS] [--verify] [--out FILE]

For every quantized type in QUANTIZE_TYPES (so new quantizers appear by themselves), without
and with an importance matrix: Melem/s of the numpy engine on one thread, of the compiled
engine (where this installation has one for the path) on one and on two threads, and, with
``--ggml-lib``, of ggml's ``ggml_quantize_chunk`` (single-threaded, called through ctypes on
the same rows in the same process). Each figure is the best of R rounds; in each round every
candidate runs once, in turn, so that load changes hit all of them alike. The compiled and
ggml outputs of the timed rows are compared byte for byte ("= ggml").

``--verify`` (needs ``--ggml-lib``) also compares both engines with ggml on held-out hostile
rows: several seeds, row lengths 256..4096, magnitudes from subnormal to float32's limit,
exact halves, ties, zeros of both signs, constant and sparse rows, importance matrices with
zero, tiny and huge weights; and reports the cases that differ.

Nothing of ggml is part of this project: the library is loaded from the path given.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from gguf_schema.format.types import GGMLType
from gguf_schema.tensors import CODECS, QUANTIZE_TYPES, quantize
from gguf_schema.tensors import engine as eng

F32 = np.float32


# ---------------------------------------------------------------------------- ggml through ctypes


class _Traits(ctypes.Structure):
    """ggml's ``struct ggml_type_traits`` (public header, ggml.h)."""

    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


class Ggml:
    """ggml's public quantization API from a shared library given on the command line."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        lib.ggml_quantize_chunk.argtypes = [
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_void_p,
        ]
        lib.ggml_get_type_traits.restype = ctypes.POINTER(_Traits)
        lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
        lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
        lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
        self.lib = lib
        self.path = path

    def knows(self, t: GGMLType) -> bool:
        """ggml has the type with our geometry, and ggml_quantize_chunk takes it (it aborts on
        the types it does not quantize, Q8_1 and Q8_K)."""
        if t in (GGMLType.Q8_1, GGMLType.Q8_K):
            return False
        tr = self.lib.ggml_get_type_traits(int(t)).contents
        return (
            (tr.type_name or b"").decode().upper() == t.name
            and tr.blck_size == t.block_size
            and tr.type_size == t.type_size
        )

    def ref(self, t: GGMLType):
        """ggml's reference quantizer of a type ggml_quantize_chunk does not take (Q8_1), or None."""
        tr = self.lib.ggml_get_type_traits(int(t)).contents
        if not tr.from_float_ref or tr.blck_size != t.block_size or tr.type_size != t.type_size:
            return None
        return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(tr.from_float_ref)

    def quantize(self, t: GGMLType, x: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, F32)
        out = np.zeros((len(x), t.row_nbytes(x.shape[1])), np.uint8)
        if not self.knows(t):
            fn = self.ref(t)
            fn(x.ctypes.data, out.ctypes.data, x.size)
            return out
        im = None if imatrix is None else np.ascontiguousarray(imatrix, F32)
        self.lib.ggml_quantize_chunk(
            int(t), x.ctypes.data, out.ctypes.data, 0, len(x), x.shape[1], None if im is None else im.ctypes.data
        )
        return out


# ---------------------------------------------------------------------------- timing


def best(fns: list, repeat: int) -> tuple[list[float], list[float]]:
    """The least wall time and the least process CPU time (all threads) of each callable over
    ``repeat`` rounds; in each round all run once, in turn, so load changes hit all alike."""
    wall = [float("inf")] * len(fns)
    cpu = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            if fn is None:
                continue
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall[k] = min(wall[k], time.perf_counter() - t0)
            cpu[k] = min(cpu[k], time.process_time() - c0)
    return wall, cpu


def compiled_for(t: GGMLType, with_imatrix: bool) -> bool:
    rows = CODECS[t].quantize_rows is not None and (with_imatrix or CODECS[t].quantize is None)
    return t in (eng._COMPILED_ROWS if rows else eng._COMPILED_BLOCKS)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    feats = eng.compiled_kernels.features() if eng.compiled_kernels is not None else "not built"
    return (
        f"{cpu}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} CPUs; "
        f"Python {platform.python_version()}, numpy {np.__version__}; compiled kernels: {feats}"
    )


def load() -> str:
    try:
        return ", ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def fmt(rate: float | None) -> str:
    return "—" if rate is None else (f"{rate:.1f}" if rate < 100 else f"{rate:.0f}")


def speed_table(
    types: list[GGMLType], ggml: Ggml | None, elements: int, numpy_elements: int, repeat: int, lines: list[str]
) -> None:
    cols = 4096
    rng = np.random.default_rng(0)
    x = rng.standard_normal((max(2, elements // cols), cols)).astype(F32)
    xn = x[: max(1, numpy_elements // cols)]
    imatrix = (np.abs(rng.standard_normal(cols)) + 0.05).astype(F32)
    lines += [
        f"Rows of {cols} normal float32 values: {x.size / 1e6:.1f} M elements for the compiled engine "
        f"and ggml, {xn.size / 1e6:.2f} M for the numpy engine (the first rows of the same array); "
        f"importance weights |N(0, 1)| + 0.05 per column; best of {repeat} rounds.",
        "",
        "Throughput is given in Melem per CPU second (elements over the process CPU time of the call, "
        "all threads counted): unlike wall-clock rates it does not depend on how much of the CPUs "
        "other processes take. The wall-clock ratio to ggml (same rounds) is given too. For two "
        'threads: "2t / 1t wall" is the wall-clock speed-up over one thread, "2t busy" the CPU '
        "seconds per wall second of that run (2.0 when both threads compute all the time, which "
        "needs two idle CPUs), and the CPU-time rate of C 2t shows the work threading adds.",
        "",
        "| type | imatrix | numpy 1t | C 1t | C 2t | ggml 1t | C 1t / ggml | C 1t / ggml wall | 2t / 1t wall "
        "| 2t busy | = ggml |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines[-6:]), flush=True)
    for t in types:
        for with_im in (False, True):
            w = imatrix if with_im else None
            if with_im and CODECS[t].quantize_rows is None and (ggml is None or not ggml.knows(t)):
                continue  # neither we nor ggml weigh this type
            if not with_im and CODECS[t].needs_imatrix:
                continue
            compiled = compiled_for(t, with_im)
            gg = ggml is not None and ggml.knows(t)
            fns = [
                lambda: quantize(xn, t, imatrix=w, engine="numpy", threads=1),
                (lambda: quantize(x, t, imatrix=w, engine="compiled", threads=1)) if compiled else None,
                (lambda: quantize(x, t, imatrix=w, engine="compiled", threads=2)) if compiled else None,
                (lambda: ggml.quantize(t, x, w)) if gg else None,
            ]
            wall, cpu = best(fns, repeat)
            sizes = [xn.size, x.size, x.size, x.size]
            rate = [s / c / 1e6 if c not in (0.0, float("inf")) else None for s, c in zip(sizes, cpu, strict=False)]
            fast = [s / w / 1e6 if w != float("inf") else None for s, w in zip(sizes, wall, strict=False)]
            same = "—"
            if gg:
                ours = quantize(x, t, imatrix=w)
                same = "yes" if np.array_equal(ours, ggml.quantize(t, x, w)) else "**NO**"

            def ratio(a: float | None, b: float | None) -> str:
                return f"{a / b:.2f}x" if a and b else "—"

            busy = f"{cpu[2] / wall[2]:.2f}" if fast[2] else "—"
            line = (
                f"| {t.name} | {'yes' if with_im else 'no'} | {fmt(rate[0])} | {fmt(rate[1])} | {fmt(rate[2])} "
                f"| {fmt(rate[3])} | {ratio(rate[1], rate[3])} | {ratio(fast[1], fast[3])} "
                f"| {ratio(fast[2], fast[1])} | {busy} | {same} |"
            )
            lines.append(line)
            print(line, flush=True)


# ---------------------------------------------------------------------------- verification


def hostile(rng: np.random.Generator, n: int, r: int = 6) -> dict[str, np.ndarray]:
    """Held-out rows of every kind the quantizers must treat as ggml does."""
    g = rng.standard_normal
    fam: dict[str, np.ndarray] = {
        "normal": g((r, n)) * 10.0 ** rng.uniform(-3, 3, (r, 1)),
        "heavy tails": rng.standard_t(2, (r, n)),
        "uniform": rng.uniform(-1, 1, (r, n)),
        "near float32 max": rng.uniform(-3.4e38, 3.4e38, (r, n)),
        "huge, one sign": rng.uniform(1e38, 3.4e38, (r, n)),
        "+-max": np.where(rng.random((r, n)) < 0.5, 3.4028235e38, -3.4028235e38) * rng.choice([1, 0.999, 0.5], (r, n)),
        "1e19": g((r, n)) * 1e19,
        "1e30": g((r, n)) * 1e30,
        "subnormal": g((r, n)) * 1e-40,
        "smallest subnormals": rng.integers(-3, 4, (r, n)) * 1.4e-45,
        "1e-20": g((r, n)) * 1e-20,
        "1e-15": g((r, n)) * 1e-15,
        "halves": rng.integers(-16, 16, (r, n)) + 0.5,
        "quarters": rng.integers(-64, 64, (r, n)) / 4,
        "small ints": rng.integers(-8, 8, (r, n)).astype(float),
        "constant": np.repeat(g((r, 1)), n, 1),
        "zeros": np.zeros((r, n)),
        "negative zeros": np.full((r, n), -0.0),
        "positive": np.abs(g((r, n))),
        "negative": -np.abs(g((r, n))),
        "grid": np.round(g((r, n)) * 4) / 4,
    }
    for e in (3, 5, 7, 9, 12):
        fam[f"1e{e}"] = g((r, n)) * 10.0**e
    ties = g((r, n))
    ties[:, 1::2] = -ties[:, ::2]
    fam["sign ties"] = ties
    mixed = g((r, n))
    mixed[:, ::3] *= 1e-40
    mixed[:, 1::7] = 0.0
    mixed[:, :32] = 3e38
    fam["mixed"] = mixed
    sparse = np.zeros((r, n))
    sparse[:, ::7] = -0.0
    sparse[:, 3::11] = g(sparse[:, 3::11].shape)
    fam["sparse"] = sparse
    outlier = g((r, n))
    outlier[np.arange(r), rng.integers(0, n, r)] = rng.choice([1e6, 3e38, -100.0], r)
    fam["outliers"] = outlier
    half = g((r, n))
    half[:, : n // 2] = 0
    fam["half zero"] = half
    return {k: v.astype(F32) for k, v in fam.items()}


def weights(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    w = np.abs(rng.standard_normal(n)) + 0.05
    z = np.abs(rng.standard_normal(n))
    z[::5] = 0
    return {
        k: v.astype(F32)
        for k, v in {
            "|N|+0.05": w,
            "with zeros": z,
            "all zero": np.zeros(n),
            "1e30": w * 1e30,
            "1e-30": w * 1e-30,
            "ones": np.ones(n),
        }.items()
    }


def verify(types: list[GGMLType], ggml: Ggml, seeds: list[int], lengths: list[int], lines: list[str]) -> None:
    engines = ["numpy"] + (["compiled"] if eng.compiled_kernels is not None else [])
    lines += [
        "",
        "## Verification against ggml on held-out inputs",
        "",
        f"Seeds {seeds}, row lengths {lengths}; {len(hostile(np.random.default_rng(0), 256))} input "
        f"families of 6 rows each; with an importance matrix, {len(weights(np.random.default_rng(0), 256))} "
        "kinds of weights. A case is one (seed, length, family, weights) for one type and engine; it "
        "differs if any byte differs from ggml_quantize_chunk (Q8_1: ggml's quantize_row_q8_1_ref).",
        "",
        "| type | engine | cases | differing |",
        "|---|---|---|---|",
    ]
    print("\n".join(lines[-6:]), flush=True)
    for t in types:
        if not ggml.knows(t) and ggml.ref(t) is None:
            lines.append(f"| {t.name} | — | 0 | (no ggml quantizer for it in {os.path.basename(ggml.path)}) |")
            print(lines[-1], flush=True)
            continue
        weighted = ggml.knows(t) and (CODECS[t].quantize_rows is not None or CODECS[t].quantize is not None)
        for engine_name in engines:
            cases = differ = 0
            first = ""
            for seed in seeds:
                for n in lengths:
                    if n % t.block_size:
                        continue
                    rng = np.random.default_rng(10_000 + seed)
                    fams = hostile(rng, n)
                    ims = weights(rng, n)
                    for fname, x in fams.items():
                        variants = ([] if CODECS[t].needs_imatrix else [("none", None)]) + (
                            [(k, v) for k, v in ims.items()] if weighted else []
                        )
                        for iname, w in variants:
                            if engine_name == "compiled" and not compiled_for(t, w is not None):
                                continue
                            cases += 1
                            want = ggml.quantize(t, x, w)
                            got = quantize(x, t, imatrix=w, engine=engine_name)
                            if not np.array_equal(got, want):
                                differ += 1
                                first = first or f" first: seed {seed}, n {n}, {fname}, weights {iname}"
            if cases:
                lines.append(f"| {t.name} | {engine_name} | {cases} | {differ}{first} |")
                print(lines[-1], flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--ggml-lib", help="path of ggml's libggml-base.so, to time (and check) ggml_quantize_chunk beside ours"
    )
    ap.add_argument("--elements", type=int, default=1 << 22, help="elements quantized per call (compiled, ggml)")
    ap.add_argument("--numpy-elements", type=int, default=1 << 19, help="elements per call for the numpy engine")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--types", help="comma-separated type names (default: every quantized type)")
    ap.add_argument("--verify", action="store_true", help="compare with ggml on held-out hostile inputs")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--lengths", default="256,512,1024,2048,4096")
    ap.add_argument("--out", help="also write the markdown to this file")
    args = ap.parse_args()
    ggml = Ggml(args.ggml_lib) if args.ggml_lib else None
    types = (
        [GGMLType[n.strip().upper()] for n in args.types.split(",")]
        if args.types
        else sorted((t for t in QUANTIZE_TYPES if t.quantized), key=int)
    )
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"<!-- python benchmarks/bench_quantize.py {' '.join(sys.argv[1:])}; {now} -->",
        "",
        f"# Quantize: gguf_schema.tensors.quantize{' beside ggml' if ggml else ''}",
        "",
        f"Machine: {machine()}.",
        f"ggml: {args.ggml_lib or 'not given'}.",
        f"Load average (1, 5, 15 min) at the start: {load()} (other processes share the CPUs: "
        "figures are the best of the rounds, ratios are from the same rounds).",
        "",
        'numpy 1t: the numpy engine on one thread; C 1t / 2t: the compiled engine (`engine="compiled"`) '
        "on one / two threads (`threads=`); ggml 1t: `ggml_quantize_chunk` (one thread) through ctypes; "
        "= ggml: the compiled engine's bytes equal ggml's for the timed rows.",
        "",
    ]
    print("\n".join(lines), flush=True)
    speed_table(types, ggml, args.elements, args.numpy_elements, args.repeat, lines)
    if args.verify:
        if ggml is None:
            ap.error("--verify needs --ggml-lib")
        verify(types, ggml, [int(s) for s in args.seeds.split(",")], [int(n) for n in args.lengths.split(",")], lines)
    lines += ["", f"Load average at the end: {load()}."]
    print(lines[-1])
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
