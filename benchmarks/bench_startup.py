"""Start-up cost, whole processes, side by side: ``import numpy``, ``import gguf``, ``import gguf_schema``,
``gguf-schema info`` on a small file, gguf-py's ``gguf-dump`` on the same file plain and through
``python -m gguf_schema.compat``, and a small gguf-py script with and without ``gguf_schema.compat.patch()``;
before and after a change.

Each command runs as its own process from a checkout (``python -m`` / ``-c`` with the checkout as the
working folder, so that its ``gguf_schema`` is the one imported), the checkouts and commands
interleaved round by round. CPU time (user + system, every thread of the process) and peak RSS come
from the kernel's accounting of the child (``os.wait4``), wall time from the clock. Prints one row per
command and checkout: the medians over the rounds, and the CPU time as a multiple of ``import numpy``'s.

``gguf-schema info`` runs as the program does (``python -m gguf_schema``, which asks OpenBLAS for one
thread: see ``gguf_schema.cli.console``); the row ``gguf-schema info, main()`` runs the same command by
calling ``main()`` in a process that leaves numpy's BLAS threads at their default, to show what that
setting is worth. Before measuring, each checkout's modules are compiled (``compileall``), as an
installed copy's are.

    python benchmarks/bench_startup.py --before /path/to/old/checkout --after . \
        --file /work/shared/testdata/vocab/ggml-vocab-bert-bge.gguf --rounds 9 > benchmarks/results/startup.md

A checkout needs its compiled extensions in place (``pip install -e`` in it, or the ``.so`` files
copied from one that has them: the kernels' sources must be the same).
"""

from __future__ import annotations

import argparse
import os
import shutil
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
ONE_THREAD = "import os\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\n"
MAIN = "import sys\nfrom gguf_schema.cli import main\nsys.exit(main(sys.argv[1:]))\n"
#: commands that do not depend on the checkout: run once per round, from the "after" side
SHARED = ("import numpy", "import numpy, one BLAS thread", "import gguf", "gguf-dump (gguf-py)", "gguf-py script")


def commands(file: str) -> dict[str, list[str]]:
    py = sys.executable
    dump = shutil.which("gguf-dump", path=os.path.dirname(py)) or "gguf-dump"
    return {
        "import numpy": [py, "-c", "import numpy"],
        "import numpy, one BLAS thread": [py, "-c", ONE_THREAD + "import numpy"],
        "import gguf": [py, "-c", "import gguf"],
        "import gguf_schema": [py, "-c", "import gguf_schema"],
        "gguf-schema info": [py, "-m", "gguf_schema", "info", file],
        "gguf-schema info, main()": [py, "-c", MAIN, "info", file],
        "gguf-dump (gguf-py)": [dump, file],
        "gguf-dump, python -m gguf_schema.compat": [py, "-m", "gguf_schema.compat", "gguf-dump", file],
        "gguf-py script": [py, "-c", SCRIPT.format(path=file)],
        "gguf-py script, patched": [py, "-c", PATCH + SCRIPT.format(path=file)],
    }


def run(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s, max RSS KiB) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
    for cwd in sides.values():
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "gguf_schema"], cwd=cwd, check=True, stdout=subprocess.DEVNULL
        )
    # the user's own BLAS thread settings would hide what the program sets: measured without them
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    file = os.path.abspath(args.file)
    cmds = commands(file)
    results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    load0 = os.getloadavg()
    for _ in range(args.rounds):
        for name, cmd in cmds.items():
            for side, cwd in sides.items():
                if name in SHARED and side == "before":
                    continue  # the same for both
                if name == "gguf-schema info, main()" and side == "before":
                    continue  # main() was all there was: the row "gguf-schema info" of before
                results.setdefault((name, side), []).append(run(cmd, cwd, env))
    load1 = os.getloadavg()
    print(
        f"Python {sys.version.split()[0]}; {os.cpu_count()} CPUs; file {Path(file).name} ({os.path.getsize(file):,} bytes); "
        f"{args.rounds} rounds, interleaved; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} before, "
        f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} after\n"
    )
    numpy_cpu = statistics.median(r[1] for r in results[("import numpy", "after")])
    print("| command | checkout | wall s (median) | CPU s (median) | CPU / `import numpy` | max RSS MiB (median) |")
    print("|---|---|---:|---:|---:|---:|")
    for (name, side), rows in sorted(
        results.items(), key=lambda kv: (list(cmds).index(kv[0][0]), kv[0][1] != "before")
    ):
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        rss = statistics.median(r[2] for r in rows) / 1024
        shown = "" if name in SHARED else side
        print(f"| {name} | {shown} | {wall:.3f} | {cpu:.3f} | {cpu / numpy_cpu:.2f} | {rss:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
