"""Long fuzz run of the GGUF reader and writer: executions, crash classes, exec/s, peak memory.

Drives :func:`gguf_schema.testing.fuzz.fuzz` in chunks of deterministic seeds so a run can be
stopped and resumed (``--resume`` continues from the state file), then writes a markdown report.
Each crash class found is re-checked against the current code when the report is written, so
the report says which classes still reproduce and which are fixed.

    python benchmarks/fuzz.py --executions 300000                # fresh run, report to benchmarks/results/fuzz.md
    python benchmarks/fuzz.py --executions 300000 --resume       # continue an interrupted run
    python benchmarks/fuzz.py --report-only                      # re-check the findings, rewrite the report
    python benchmarks/fuzz.py --engine atheris --executions 50000 --state /tmp/ath.json  # coverage-guided (atheris);
    python benchmarks/fuzz.py --report-only --state /tmp/ath.json                     # libFuzzer exits: report after

Seeds: the demo model (both byte orders, v1-v3), hand-built nested arrays, the type and
edge-case fixtures, the malformed fixtures, and the real vocabulary files of tests/data/vocab (their
arrays cut to 64 items so each input stays a few KB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gguf_schema.testing.fuzz import FuzzReport, check_input, default_corpus, fuzz  # noqa: E402

VOCAB_DIR = ROOT / "tests" / "data" / "vocab"
STATE = Path(tempfile.gettempdir()) / "gguf_schema_fuzz_state.json"
REPORT = ROOT / "benchmarks" / "results" / "fuzz.md"


def corpus(with_vocab: bool) -> list[bytes]:
    vocab = sorted(VOCAB_DIR.glob("*.gguf")) if with_vocab else []
    seeds = default_corpus(include_vocab=[str(p) for p in vocab], trim=64)
    try:
        from gguf_schema.testing.malformed import malformed_cases

        seeds += [bytes(c.data) for c in malformed_cases() if len(c.data) <= 1 << 16]
    except ImportError:
        pass
    return seeds


def load_state(path: Path) -> dict:
    if path.is_file():
        return json.loads(path.read_text())
    return {
        "executions": 0,
        "seconds": 0.0,
        "accepted": 0,
        "rejected": 0,
        "peak_memory": 0,
        "slowest": 0.0,
        "chunks_done": 0,
        "findings": {},
        "counts": {},
        "seed": 0,
        "corpus": 0,
    }


def save_state(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def merge(state: dict, report: FuzzReport) -> None:
    state["executions"] += report.executions
    state["seconds"] += report.seconds
    state["accepted"] += report.accepted
    state["rejected"] += report.rejected
    state["peak_memory"] = max(state["peak_memory"], report.peak_memory)
    state["slowest"] = max(state["slowest"], report.slowest)
    for sig, n in report.counts.items():
        state["counts"][sig] = state["counts"].get(sig, 0) + n
    for sig, f in report.findings.items():
        state["findings"].setdefault(
            sig,
            {"kind": f.kind, "detail": f.detail[-3000:], "input_hex": f.data.hex(), "found_at": state["executions"]},
        )


def run_mutation(args: argparse.Namespace, state: dict) -> None:
    seeds = corpus(not args.no_vocab)
    state["corpus"] = len(seeds)
    state["seed"] = args.seed
    deadline = time.time() + args.time_limit if args.time_limit else None
    while state["executions"] < args.executions:
        if deadline and time.time() > deadline:
            break
        chunk = state["chunks_done"]
        n = min(args.chunk, args.executions - state["executions"])
        report = fuzz(
            seeds,
            executions=n,
            seed=args.seed * 1_000_003 + chunk,
            timeout=args.timeout,
            on_finding=lambda f: print(f"  new: {f.signature}", flush=True),
        )
        merge(state, report)
        state["chunks_done"] = chunk + 1
        save_state(args.state, state)
        print(
            f"{state['executions']:,} executions, {state['executions'] / state['seconds']:.0f}/s, "
            f"{len(state['findings'])} classes",
            flush=True,
        )


def run_atheris(args: argparse.Namespace, state: dict) -> None:  # pragma: no cover - optional engine
    import atheris

    atheris.instrument_all()  # gguf_schema is already imported: instrument the loaded code for coverage feedback
    seen = {"n": 0, "t0": time.perf_counter()}

    base = state["executions"]

    def one(data: bytes) -> None:
        # libFuzzer ends the process with C exit() when done: keep the state file current as we go
        seen["n"] += 1
        if seen["n"] % 500 == 0:
            state["executions"] = base + seen["n"]
            state["seconds"] += time.perf_counter() - seen["t0"]
            seen["t0"] = time.perf_counter()
            save_state(args.state, state)
        finding = check_input(data, timeout=args.timeout)
        if finding is not None:
            sig = finding.signature
            state["counts"][sig] = state["counts"].get(sig, 0) + 1
            if sig not in state["findings"]:
                print(f"  new: {sig}", flush=True)
                state["findings"][sig] = {
                    "kind": finding.kind,
                    "detail": finding.detail[-3000:],
                    "input_hex": data.hex(),
                    "found_at": base + seen["n"],
                }
                save_state(args.state, state)

    corpus_dir = Path(args.state).with_suffix(".corpus")
    corpus_dir.mkdir(exist_ok=True)
    seeds = corpus(not args.no_vocab)
    state["corpus"] = len(seeds)
    for i, s in enumerate(seeds):
        (corpus_dir / f"seed{i}").write_bytes(s)
    import tracemalloc

    tracemalloc.start()  # check_input applies its memory budget while tracing
    try:
        atheris.Setup([sys.argv[0], str(corpus_dir), f"-runs={args.executions}", "-rss_limit_mb=4096"], one)
        atheris.Fuzz()
    except SystemExit:
        pass
    finally:
        state["executions"] = base + seen["n"]
        state["seconds"] += time.perf_counter() - seen["t0"]
        save_state(args.state, state)


def recheck(state: dict) -> dict[str, str]:
    """Does each stored finding still reproduce with the current code?"""
    status = {}
    for sig, f in state["findings"].items():
        now = check_input(bytes.fromhex(f["input_hex"]), timeout=10)
        status[sig] = "fixed" if now is None else ("reproduces" if now.signature == sig else f"now: {now.signature}")
    return status


def _table(state: dict, status: dict[str, str]) -> list[str]:
    rate = state["executions"] / state["seconds"] if state["seconds"] else 0
    engine = state.get("engine", "mutate")
    lines = [
        "| measure | value |",
        "|---|---|",
        f"| engine | {'atheris (libFuzzer, coverage-guided)' if engine == 'atheris' else 'seeded mutation (gguf_schema.testing.fuzz)'} |",
        f"| executions | {state['executions']:,} |",
        f"| wall time | {state['seconds']:,.0f} s |",
        f"| executions per second (tracemalloc on, both variants) | {rate:,.0f} |",
        f"| seed files | {state['corpus']} |",
    ]
    if engine != "atheris":
        lines += [
            f"| inputs that opened / were refused with a GGUFError | {state['accepted']:,} / {state['rejected']:,} |",
            f"| peak traced memory of one execution | {state['peak_memory'] / 2**20:.1f} MiB |",
            f"| slowest input | {state['slowest'] * 1000:.0f} ms |",
        ]
    lines.append(
        f"| distinct crash classes | {len(state['findings'])} ({sum(1 for s in status.values() if s == 'fixed')} fixed) |"
    )
    return lines


def write_report(state: dict, path: Path, extra: list[dict] = ()) -> str:
    status = recheck(state)
    lines = [
        "# Fuzzing the reader and writer",
        "",
        "`python benchmarks/fuzz.py` (mutation fuzzer of `gguf_schema.testing.fuzz`; resumable, seeded). Every input is opened with",
        "both schema variants (fast and pure-construct reference), every field and tensor (`nbytes`, `data`, `raw()`) is",
        "touched and the file is saved again. A finding is any exception that is not a `GGUFError`, an unedited file",
        "that does not save back byte for byte, the two variants disagreeing, an input over the time budget, or a",
        "traced peak over 16 MiB + 24x the input size.",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs.",
        "",
        *_table(state, status),
        "",
    ]
    for other in extra:
        other_status = recheck(other)
        lines += ["A second run:", "", *_table(other, other_status), ""]
        for sig, f in other["findings"].items():
            if sig not in state["findings"]:
                state["findings"][sig], state["counts"][sig], status[sig] = (
                    f,
                    other["counts"].get(sig, 0),
                    other_status[sig],
                )
    if state["findings"]:
        lines += [
            "## Crash classes",
            "",
            "Hits keep counting until a run restarts on the fixed code (a run imports the library once).",
            "",
            "| class | found by execution | hits | status now | first input (hex, first 96 bytes) |",
            "|---|---|---|---|---|",
        ]
        for sig, f in sorted(state["findings"].items(), key=lambda kv: kv[1].get("found_at", 0)):
            lines.append(
                f"| `{sig.replace('`', chr(39))}` | {f.get('found_at', 0):,} | {state['counts'].get(sig, 0):,} | {status[sig]} | `{f['input_hex'][:192]}` |"
            )
        lines += ["", "Last line of each traceback:", ""]
        for sig, f in sorted(state["findings"].items()):
            last = [x for x in f["detail"].strip().splitlines() if x.strip()][-1:] or [""]
            lines.append(f"- `{sig.replace('`', chr(39))}`: {last[0].strip()[:300].replace('`', chr(39))}")
    text = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--executions", type=int, default=300_000, help="total executions to reach (default 300,000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk", type=int, default=5000, help="executions between checkpoints")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds one input may take")
    p.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds (resume later)")
    p.add_argument("--state", type=Path, default=STATE)
    p.add_argument("--output", type=Path, default=REPORT)
    p.add_argument("--resume", action="store_true", help="continue from the state file")
    p.add_argument("--report-only", action="store_true", help="only re-check the findings and rewrite the report")
    p.add_argument("--no-vocab", action="store_true", help="leave the real vocabulary files out of the seeds")
    p.add_argument("--engine", choices=("mutate", "atheris"), default="mutate")
    p.add_argument("--also", type=Path, action="append", default=[], help="state file of another run to report too")
    args = p.parse_args(argv)
    state = load_state(args.state) if (args.resume or args.report_only) else load_state(Path("/nonexistent"))
    state.setdefault("engine", args.engine)
    if not args.report_only:
        (run_atheris if args.engine == "atheris" else run_mutation)(args, state)
        save_state(args.state, state)
    print(write_report(state, args.output, [load_state(p) for p in args.also]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
