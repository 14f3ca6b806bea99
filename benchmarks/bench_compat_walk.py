"""Extreme but legal files through compat, every part touched, against our own reader's walk of the same file.

Files (generated once into ``--dir`` by :mod:`gguf_schema.testing.malformed`): 500,000 keys, one key of
2,000,000 empty strings, one key of 1,000,000 empty arrays. For each file and checkout, two fresh
processes: ``ours`` opens it with ``gguf_schema.open`` and reads every value (``f.metadata`` items,
arrays made lists); ``compat`` opens it with ``gguf_schema.compat.GGUFReader`` and reads every field's
``parts``, ``data``, ``types`` and ``contents()``. Each child reports its CPU time (``process_time``)
and its peak RSS (``VmHWM``) above what it had before opening (the modules each walk needs imported
before). The last column is compat's CPU time over ours on the same file, in the same checkout.

With ``--phases``, a second table: in the ``after`` checkout, compat's walk cut into its phases (our
reader's lazy parse alone; compat's open, its parse included; then every field's ``parts``, ``data``,
``types`` and ``contents()`` in turn), CPU time of each, with the cyclic collector on (as the walk runs)
and off (what the work itself costs).

    python benchmarks/bench_compat_walk.py --before /old/checkout --after . --phases > benchmarks/results/compat_walk.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

FILES = [("many_keys_file", 500_000), ("many_empty_strings_file", 2_000_000), ("nested_empty_arrays_file", 1_000_000)]

CHILD = r"""
import json, sys, time
import gguf_schema, gguf_schema.reader  # what reading needs, imported before the measure (the package is lazy)
def hwm():
    with open("/proc/self/status") as fh:
        return next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:"))
path, how = sys.argv[1], sys.argv[2]
if how == "compat":
    import gguf_schema.compat
base = hwm()
c = time.process_time()
if how == "ours":
    f = gguf_schema.open(path)
    n = 0
    for k, v in f.metadata.items():
        n += len(v) if isinstance(v, list) else 1
else:
    r = gguf_schema.compat.GGUFReader(path)
    n = 0
    for fld in r.fields.values():
        n += len(fld.parts) + len(fld.data) + len(fld.types)
        fld.contents()
print(json.dumps({"cpu": time.process_time() - c, "rss_mb": (hwm() - base) / 1024, "n": n}))
"""

PHASES = r"""
import gc, json, sys, time
import gguf_schema, gguf_schema.reader, gguf_schema.compat
path, collector = sys.argv[1], sys.argv[2]
if collector == "off":
    gc.disable()
t = [time.process_time()]
gguf_schema.reader.read(path, lazy=True).close()
t.append(time.process_time())
r = gguf_schema.compat.GGUFReader(path)
t.append(time.process_time())
fields = list(r.fields.values())
for x in fields:
    x.parts
t.append(time.process_time())
for x in fields:
    x.data
t.append(time.process_time())
for x in fields:
    x.types
t.append(time.process_time())
for x in fields:
    x.contents()
t.append(time.process_time())
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""
PHASE_NAMES = ("our parse", "compat open", "parts", "data", "types", "contents()")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a checkout before the change")
    ap.add_argument("--after", default=".")
    ap.add_argument("--dir", default="/tmp/bench_compat_walk", help="where the generated files are kept")
    ap.add_argument("--phases", action="store_true", help="also time compat's walk phase by phase (after only)")
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    sides = {"after": os.path.abspath(args.after)}
    if args.before:
        sides = {"before": os.path.abspath(args.before), **sides}
    load0 = os.getloadavg()
    rows = []
    phases: list[tuple[str, str, list[float]]] = []
    for maker, count in FILES:
        path = Path(args.dir) / f"{maker}_{count}.gguf"
        if not path.exists():
            from gguf_schema.testing import malformed

            path.write_bytes(getattr(malformed, maker)(count))
        for side, cwd in sides.items():
            for how in ("ours", "compat"):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(path), how], cwd=cwd, capture_output=True, text=True, check=True
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append((f"`{maker}({count:,})`", side, how, r["cpu"], r["rss_mb"]))
        if args.phases:
            for collector in ("on", "off"):
                out = subprocess.run(
                    [sys.executable, "-c", PHASES, str(path), collector],
                    cwd=sides["after"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                phases.append((f"`{maker}({count:,})`", collector, json.loads(out.stdout.strip().splitlines()[-1])))
    load1 = os.getloadavg()
    print(f"Python {sys.version.split()[0]}; load average {load0[0]:.1f} before, {load1[0]:.1f} after\n")
    print("| file | checkout | reader | CPU s | peak RSS above start, MiB | compat / ours, CPU |")
    print("|---|---|---|---:|---:|---:|")
    ours = {(name, side): cpu for name, side, how, cpu, _ in rows if how == "ours"}
    for name, side, how, cpu, rss in rows:
        ratio = f"{cpu / ours[name, side]:.1f}x" if how == "compat" and ours[name, side] else ""
        print(f"| {name} | {side} | {how} | {cpu:.2f} | {rss:.0f} | {ratio} |")
    if phases:
        print("\ncompat's walk phase by phase (after), CPU s:\n")
        print("| file | collector | " + " | ".join(PHASE_NAMES) + " | compat in all |")
        print("|---|---|" + "---:|" * (len(PHASE_NAMES) + 1))
        for name, collector, times in phases:
            cells = " | ".join(f"{x:.2f}" for x in times)
            print(f"| {name} | {collector} | {cells} | {sum(times[1:]):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
