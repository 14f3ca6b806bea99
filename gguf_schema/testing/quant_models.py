"""Small float32 models of real architectures, for quantization plans, and importance matrices for them.

``llama-quantize`` chooses each tensor's type from its name, its row length, its layer and the
model's metadata (architecture, layer count, attention heads and KV heads, expert count). The
models here have the tensor names and metadata keys of real architectures, as llama.cpp's loader
reads them, with few rows per matrix so that each file is small (a quarter of a MiB to 1.2 MiB):

* ``llama-gqa``: llama, 16 layers, 8 attention heads sharing 2 KV heads (a GQA factor of 4),
  its own ``output.weight``, rows of 256 and 512;
* ``gemma3``: gemma3, 6 layers, tied embeddings (no ``output.weight``), rows of 640 and 2048
  (640 is not a multiple of 256, as in gemma-3-270m);
* ``qwen3moe``: qwen3moe, 4 layers of 8 experts (3-D ``ffn_*_exps`` tensors), expert routers,
  GQA factor 4;
* ``qwen2-odd``: qwen2, 80 layers (llama.cpp's "70B" class for qwen2) of the tensors the rules
  tell apart (attention V and output, FFN up and down), rows of 96 (not a multiple of 256) and
  40 (not even of 32), biases;
* ``falcon``: falcon (rules of its own for the output, FFN down and attention output), 16
  layers, fused QKV tensors, one KV head.

Values come from integer hashing (no random generator, no transcendental function), so every
numpy version makes the same bytes: the expected plans and file digests recorded from
``llama-quantize`` for these models (``tests/data/quantize_plans``) stay valid.

>>> meta, tensors = quant_model("llama-gqa")
>>> int(meta["llama.attention.head_count"]), int(meta["llama.attention.head_count_kv"]), len(tensors)
(8, 2, 147)
>>> tensors["blk.0.attn_v.weight"].shape, tensors["blk.0.attn_v.weight"].dtype
((8, 256), dtype('float32'))
>>> sorted(imatrix_entries(tensors))[:2]
['blk.0.attn_k.weight', 'blk.0.attn_output.weight']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..format import keys as K
from ..format.types import ValueType
from ..format.values import GGUFArray, make_field
from ..io import PathLike
from ..writer import save

__all__ = ["QUANT_MODELS", "imatrix_entries", "legacy_imatrix_bytes", "quant_model", "save_imatrix", "save_quant_model"]

QUANT_MODELS = ("llama-gqa", "gemma3", "qwen3moe", "qwen2-odd", "falcon")
"""The models :func:`quant_model` makes."""

U32 = np.uint32


def _values(n: int, seed: int, scale: float) -> np.ndarray:
    """``n`` float32 values, roughly normal with standard deviation ``scale``: the sum of four
    uniform values from an integer hash of (seed, index), centred. Exact in any numpy."""
    i = np.arange(4 * n, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15 & 0xFFFFFFFF)
    h = (i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(2246822519)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(13)
    u = (h >> np.uint64(8)).astype(np.float64) / float(1 << 24)  # [0, 1), 24 bits: exact in float32
    s = u.reshape(n, 4).sum(axis=1) - 2.0  # Irwin-Hall(4), variance 1/3
    return (s * (scale * 3**0.5)).astype(np.float32)


def _matrix(shape: tuple[int, ...], seed: int, scale: float = 0.05) -> np.ndarray:
    return _values(int(np.prod(shape)), seed, scale).reshape(shape)


Shapes = dict[str, tuple[int, ...]]


def _llama_like(n_layer: int, cols: int, ff: int, rows: int) -> Shapes:
    """Per-layer tensors of a llama-like block (numpy shapes: rows x columns)."""
    s: Shapes = {}
    for i in range(n_layer):
        b = f"blk.{i}."
        s[b + "attn_norm.weight"] = (cols,)
        for name in ("attn_q", "attn_k", "attn_v"):
            s[b + name + ".weight"] = (rows, cols)
        s[b + "attn_output.weight"] = (rows, cols)
        s[b + "ffn_norm.weight"] = (cols,)
        s[b + "ffn_gate.weight"] = (rows, cols)
        s[b + "ffn_up.weight"] = (rows, cols)
        s[b + "ffn_down.weight"] = (rows, ff)
    return s


def _shapes(kind: str) -> tuple[dict[str, Any], Shapes]:
    """The metadata (architecture keys) and tensor shapes of one model, in the order a converter writes them."""
    if kind == "llama-gqa":
        arch, n_layer, embd, ff = "llama", 16, 256, 512
        meta: dict[str, Any] = {
            f"{arch}.attention.head_count": U32(8),
            f"{arch}.attention.head_count_kv": U32(2),
            f"{arch}.attention.layer_norm_rms_epsilon": np.float32(1e-5),
            f"{arch}.rope.dimension_count": U32(32),
        }
        s: Shapes = {"token_embd.weight": (64, embd)}
        s.update(_llama_like(n_layer, embd, ff, 8))
        s.update({"output_norm.weight": (embd,), "output.weight": (64, embd)})
    elif kind == "gemma3":
        arch, n_layer, embd, ff = "gemma3", 6, 640, 2048
        meta = {
            f"{arch}.attention.head_count": U32(4),
            f"{arch}.attention.head_count_kv": U32(1),
            f"{arch}.attention.key_length": U32(256),
            f"{arch}.attention.value_length": U32(256),
            f"{arch}.attention.sliding_window": U32(512),
            f"{arch}.attention.layer_norm_rms_epsilon": np.float32(1e-6),
            f"{arch}.rope.freq_base": np.float32(1e6),
        }
        s = {"token_embd.weight": (32, embd)}
        for i in range(n_layer):
            b = f"blk.{i}."
            s[b + "attn_norm.weight"] = (embd,)
            s[b + "attn_q.weight"] = (4, embd)
            s[b + "attn_k.weight"] = (4, embd)
            s[b + "attn_v.weight"] = (4, embd)
            s[b + "attn_q_norm.weight"] = (256,)
            s[b + "attn_k_norm.weight"] = (256,)
            s[b + "attn_output.weight"] = (4, 1024)
            s[b + "post_attention_norm.weight"] = (embd,)
            s[b + "ffn_norm.weight"] = (embd,)
            s[b + "ffn_gate.weight"] = (4, embd)
            s[b + "ffn_up.weight"] = (4, embd)
            s[b + "ffn_down.weight"] = (4, ff)
            s[b + "post_ffw_norm.weight"] = (embd,)
        s["output_norm.weight"] = (embd,)
    elif kind == "qwen3moe":
        arch, n_layer, embd, ff = "qwen3moe", 4, 256, 768
        n_expert = 8
        meta = {
            f"{arch}.attention.head_count": U32(16),
            f"{arch}.attention.head_count_kv": U32(4),
            f"{arch}.attention.key_length": U32(64),
            f"{arch}.attention.value_length": U32(64),
            f"{arch}.attention.layer_norm_rms_epsilon": np.float32(1e-6),
            f"{arch}.expert_count": U32(n_expert),
            f"{arch}.expert_used_count": U32(2),
            f"{arch}.expert_feed_forward_length": U32(256),
        }
        s = {"token_embd.weight": (32, embd)}
        for i in range(n_layer):
            b = f"blk.{i}."
            s[b + "attn_norm.weight"] = (embd,)
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                s[b + name + ".weight"] = (4, embd)
            s[b + "attn_q_norm.weight"] = (64,)
            s[b + "attn_k_norm.weight"] = (64,)
            s[b + "ffn_norm.weight"] = (embd,)
            s[b + "ffn_gate_inp.weight"] = (n_expert, embd)
            s[b + "ffn_gate_exps.weight"] = (n_expert, 2, embd)
            s[b + "ffn_up_exps.weight"] = (n_expert, 2, embd)
            s[b + "ffn_down_exps.weight"] = (n_expert, 2, ff)
        s.update({"output_norm.weight": (embd,), "output.weight": (32, embd)})
    elif kind == "qwen2-odd":
        arch, n_layer, embd, ff = "qwen2", 80, 96, 40
        meta = {
            f"{arch}.attention.head_count": U32(8),
            f"{arch}.attention.head_count_kv": U32(8),
            f"{arch}.attention.layer_norm_rms_epsilon": np.float32(1e-6),
        }
        s = {"token_embd.weight": (16, embd)}
        for i in range(n_layer):  # the tensors the rules tell apart (attn_v, attn_output, ffn_down), few others
            b = f"blk.{i}."
            s[b + "attn_norm.weight"] = (embd,)
            s[b + "attn_v.weight"] = (2, embd)
            s[b + "attn_v.bias"] = (2,)
            s[b + "attn_output.weight"] = (2, embd)
            s[b + "ffn_up.weight"] = (2, embd)
            s[b + "ffn_down.weight"] = (2, ff)
        s.update({"output_norm.weight": (embd,), "output.weight": (16, embd)})
    elif kind == "falcon":
        arch, n_layer, embd, ff = "falcon", 16, 256, 1024
        meta = {
            f"{arch}.attention.head_count": U32(8),
            f"{arch}.attention.head_count_kv": U32(1),
            f"{arch}.attention.layer_norm_epsilon": np.float32(1e-5),
        }
        s = {"token_embd.weight": (32, embd)}
        for i in range(n_layer):  # fused QKV (an attention V for the rules), biases, no FFN gate
            b = f"blk.{i}."
            s[b + "attn_norm.weight"] = (embd,)
            s[b + "attn_norm.bias"] = (embd,)
            s[b + "attn_qkv.weight"] = (6, embd)
            s[b + "attn_output.weight"] = (4, embd)
            s[b + "ffn_up.weight"] = (4, embd)
            s[b + "ffn_down.weight"] = (4, ff)
        s.update({"output_norm.weight": (embd,), "output_norm.bias": (embd,), "output.weight": (32, embd)})
    else:
        raise ValueError(f"unknown model {kind!r}: the models are {', '.join(QUANT_MODELS)}")
    base = {
        K.GENERAL_ARCHITECTURE: arch,
        K.GENERAL_NAME: f"tiny {kind}",
        K.GENERAL_FILE_TYPE: U32(0),  # ALL_F32
        f"{arch}.context_length": U32(4096),
        f"{arch}.embedding_length": U32(embd),
        f"{arch}.feed_forward_length": U32(ff),
        f"{arch}.block_count": U32(n_layer),
    }
    return {**base, **meta}, s


def quant_model(kind: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Metadata and float32 tensors of model ``kind`` (one of :data:`QUANT_MODELS`)."""
    meta, shapes = _shapes(kind)
    tensors = {}
    for seed, (name, shape) in enumerate(shapes.items()):
        if len(shape) == 1:
            tensors[name] = 1 + _matrix(shape, seed, 0.1) if name.endswith("norm.weight") else _matrix(shape, seed)
        else:
            tensors[name] = _matrix(shape, seed, 0.02 + 0.01 * (seed % 7))
    return meta, tensors


def save_quant_model(path: PathLike, kind: str) -> None:
    """Write model ``kind`` to ``path``."""
    meta, tensors = quant_model(kind)
    save(path, meta, tensors)


def imatrix_entries(tensors: Mapping[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """An importance matrix for a model's weight matrices, as ``llama-imatrix`` stores it:
    tensor name -> (sums of squared activations, shape (matrices, columns); the count of
    activations per matrix, shape (matrices,)). Routers and 1-D tensors get none, and neither
    does ``token_embd.weight`` (llama-imatrix never sees it multiply)."""
    out = {}
    for seed, (name, x) in enumerate(sorted(tensors.items())):
        if x.ndim < 2 or name == "token_embd.weight" or "ffn_gate_inp" in name:
            continue
        n = x.shape[0] if x.ndim == 3 else 1
        cols = x.shape[-1]
        counts = np.full(n, 512.0, np.float32)
        counts[n - 1 :: 3] = 0 if n > 1 else 512  # an expert never routed to (every third, from the last)
        sums = np.abs(_values(n * cols, 1000 + seed, 1.0)).reshape(n, cols) * np.float32(512) + np.float32(0.5)
        out[name] = (sums.astype(np.float32), counts)
    return out


def save_imatrix(path: PathLike, tensors: Mapping[str, np.ndarray], dataset: str = "tiny.txt") -> None:
    """Write a GGUF importance matrix (``llama-imatrix``'s current form) for a model's tensors."""
    meta = [
        make_field(K.GENERAL_TYPE, "imatrix"),
        make_field("imatrix.datasets", GGUFArray(ValueType.STRING, [dataset])),
        make_field("imatrix.chunk_count", 10, ValueType.UINT32),
        make_field("imatrix.chunk_size", 512, ValueType.UINT32),
    ]
    data: dict[str, np.ndarray] = {}
    for name, (sums, counts) in imatrix_entries(tensors).items():
        data[name + ".in_sum2"] = sums
        data[name + ".counts"] = counts.reshape(-1, 1)
    save(path, meta, data)


def legacy_imatrix_bytes(tensors: Mapping[str, np.ndarray], dataset: str = "tiny.txt") -> bytes:
    """The same importance matrix in the legacy ``.dat`` form: per entry the values summed over
    ``ncall`` calls (each the mean over the call's activations) and ``ncall``; then the chunk
    count and the dataset name."""
    parts = [np.int32(len(imatrix_entries(tensors))).tobytes()]
    for name, (sums, counts) in imatrix_entries(tensors).items():
        ncall = 10
        raw = name.encode()
        values = (sums / np.maximum(counts, 1)[:, None] * np.float32(ncall)).astype("<f4").reshape(-1)
        parts += [np.int32(len(raw)).tobytes(), raw, np.int32(ncall).tobytes(), np.int32(values.size).tobytes()]
        parts.append(values.tobytes())
    parts += [np.int32(10).tobytes(), np.int32(len(dataset)).tobytes(), dataset.encode()]
    return b"".join(parts)
