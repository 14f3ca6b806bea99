"""Start-up cost, whole processes: ``import numpy``, ``import gguf_schema``, ``gguf-schema info`` on a small
file, and a small gguf-py script with and without ``gguf_schema.compat.patch()``, before and after a change.

Each command runs as its own process from a checkout (so that its ``gguf_schema`` is the one imported),
the checkouts interleaved round by round; CPU time (user + system) and peak RSS come from the
kernel's accounting of the child (``os.wait4``), wall time from the clock. Prints one line per
command and checkout: median wall, median CPU, median of the max RSS, over the rounds, and the load
average before and after.

    python benchmarks/bench_startup.py --before /path/to/old/checkout --after . --file small.gguf \
        --rounds 9 > benchmarks/results/startup.md

A checkout needs its compiled extensions in place (``pip install -e`` in it, or the ``.so`` files
copied from one that has them: the kernels' sources must be the same).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = (
    "import gguf\n"
    "r = gguf.GGUFReader({path!r})\n"
    "n = sum(len(f.parts) for f in r.fields.values()) + sum(t.data.nbytes for t in r.tensors)\n"
)
PATCH = "import gguf_schema.compat\ngguf_schema.compat.patch()\n"


def commands(file: str) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "import numpy": [py, "-c", "import numpy"],
        "import gguf": [py, "-c", "import gguf"],
        "import gguf_schema": [py, "-c", "import gguf_schema"],
        "gguf-schema info": [py, "-m", "gguf_schema", "info", file],
        "gguf-py script": [py, "-c", SCRIPT.format(path=file)],
        "gguf-py script, patched": [py, "-c", PATCH + SCRIPT.format(path=file)],
    }


def run(cmd: list[str], cwd: str) -> tuple[float, float, int]:
    """(wall s, CPU s, max RSS KiB) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read() if p.stderr else b""
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed in {cwd}: {err.decode()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a checkout of the code before the change")
    ap.add_argument("--after", default=".", help="a checkout of the code after the change")
    ap.add_argument("--file", required=True, help="a small GGUF file")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    sides = {"after": os.path.abspath(args.after)}
    if args.before:
        sides = {"before": os.path.abspath(args.before), **sides}
    file = os.path.abspath(args.file)
    cmds = commands(file)
    results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    load0 = os.getloadavg()
    for _ in range(args.rounds):
        for name, cmd in cmds.items():
            for side, cwd in sides.items():
                if side == "before" and name in ("import numpy", "import gguf"):
                    continue  # the same for both
                results.setdefault((name, side), []).append(run(cmd, cwd))
    load1 = os.getloadavg()
    print(
        f"Python {sys.version.split()[0]}; file {Path(file).name} ({os.path.getsize(file):,} bytes); "
        f"{args.rounds} rounds, interleaved; load average {load0[0]:.1f} before, {load1[0]:.1f} after\n"
    )
    print("| command | checkout | wall s (median) | CPU s (median) | max RSS MiB (median) |")
    print("|---|---|---|---|---|")
    for (name, side), rows in results.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        rss = statistics.median(r[2] for r in rows) / 1024
        print(f"| {name} | {side} | {wall:.3f} | {cpu:.3f} | {rss:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
