"""Memory needed to run a model with llama.cpp: weights by device, KV cache, recurrent state.

This module owns :func:`estimate` and the :class:`Estimate` it returns. It reads only the
metadata and the tensor infos (names, types, shapes), never tensor data, and follows the rules
llama.cpp applies when it loads a model and creates a context:

* **weights**: every tensor's size from its type's block layout. The input layer
  (``token_embd``, ``position_embd``, ``token_types``, ``per_layer_token_embd``) stays on the
  CPU; ``gpu_layers=N`` (llama.cpp's ``-ngl``) puts the output layer and the last ``N - 1``
  repeating layers (``blk.<i>.*``) on the GPU. A model without ``output.weight`` uses
  ``token_embd.weight`` as its output too, and llama.cpp loads a second copy of it where the
  output layer lives when that is the GPU.
* **KV cache**: per attention layer, ``cells x streams x row_size(cache type, n_embd_k_gqa)`` for K
  and the same with ``n_embd_v_gqa`` for V, where ``n_embd_k_gqa = key_length x head_count_kv``
  of that layer (``key_length`` defaults to ``embedding_length / head_count``; ``head_count_kv``
  may be a per-layer array and defaults to ``head_count``). Cells: the context padded to 256,
  split over ``parallel`` sequences (one stream each unless ``kv_unified``); sliding-window
  layers get ``pad256(min(n_ctx_seq, window x (parallel if unified else 1) + ubatch))`` cells
  unless ``swa_full``. Quantized cache types take their block geometry from
  :class:`~gguf_schema.format.types.GGMLType` (Q8_0: 34 bytes per 32 values).
* **recurrent state** (mamba, mamba2, rwkv6, rwkv6qwen2, rwkv7, arwkv7): per layer, float32
  rows of ``n_embd_r`` (conv or token-shift state) and ``n_embd_s`` (SSM or WKV state), one row
  per sequence.
* **devices of the caches**: a layer's KV cache or recurrent state lives on that layer's device
  (llama.cpp's default, ``offload_kqv``); the output buffer is host memory.
* **output buffer**: the logits of one token per sequence (``n_vocab x parallel x 4`` bytes,
  host memory), as allocated when the context is created.
* **compute buffer**: per device, what ggml's graph allocator reserves for llama.cpp's worst-case
  graphs (a prompt ubatch with every token an output, and one token per sequence), computed by
  running the same allocator over the same graph (:mod:`.compute_graph`): logits
  (``n_vocab x n_ubatch`` floats) dominate with big vocabularies, attention scores
  (``n_kv x n_ubatch x n_head`` floats) without flash attention.
* **repacked weights**: the second copy llama.cpp makes, in its ``CPU_REPACK`` buffer, of the
  matmul weights on the CPU whose type its kernels repack for the instruction set (``cpu_isa``;
  AVX2: Q4_0, Q4_K, IQ4_NL, MXFP4 with rows in multiples of 8).

The formulas follow llama.cpp 0c1e570 (:data:`LLAMA_CPP_VERSION`).

Not estimated (and listed in :attr:`Estimate.not_estimated`): backend and driver overhead (CUDA
context, cuBLAS workspaces), the OS page cache of a memory-mapped file, the CPU backend's work
buffer, the caches and compute buffers of
architectures whose layout this module does not model (hybrid attention/recurrent models,
multi-head latent attention, shared-KV models, encoder-decoder models); for those the weights
are still estimated.

``benchmarks/bench_estimate.py`` checks these figures against what llama.cpp reports when it loads
a model (``benchmarks/results/estimate.md``); ``benchmarks/llama_buffers.py`` records every CPU
buffer llama.cpp allocates (``tests/data/llama_buffers/``), which the tests hold the estimate to.

>>> import io, numpy as np, gguf_schema
>>> meta = {"general.architecture": "llama", "llama.block_count": 2, "llama.context_length": 4096,
...         "llama.embedding_length": 256, "llama.attention.head_count": 8, "llama.attention.head_count_kv": 2}
>>> tensors = {f"blk.{i}.attn_q.weight": np.zeros((256, 256), np.float16) for i in range(2)}
>>> buf = io.BytesIO(); gguf_schema.save(buf, meta, tensors)
>>> with gguf_schema.open(buf.getvalue()) as f:
...     e = estimate(f, ctx=1000, cache_type_v="q8_0")
>>> e.settings["n_ctx"], e.kv_layers[0].cells, e.kv_k_bytes, e.kv_v_bytes   # 2 layers x 1024 cells x 64 values
(1024, 1024, 262144, 139264)
>>> e.weights_cpu, e.weights_gpu
(262144, 0)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import GGUFFormatError, GGUFKeyError
from ..format import keys as K
from ..format.nodes import align_offset
from ..format.types import GGMLType
from .compute_graph import ComputeShapes, compute_buffer

__all__ = [
    "CACHE_TYPES",
    "CPU_ISAS",
    "LLAMA_CPP_VERSION",
    "MAX_SEQUENCES",
    "NOT_ESTIMATED",
    "Estimate",
    "KVLayer",
    "RecurrentLayer",
    "WeightGroup",
    "estimate",
]

#: cache types llama.cpp accepts for ``--cache-type-k`` / ``--cache-type-v``
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

#: the llama.cpp whose rules the figures follow (compute graph, allocator, repacking)
LLAMA_CPP_VERSION = "llama.cpp 0c1e570 (as vendored by llama-cpp-python 0.3.36)"

#: what no estimate here includes
NOT_ESTIMATED = (
    "backend and driver overhead (CUDA/Metal/Vulkan context, cuBLAS workspaces, pinned host staging buffers)",
    "page cache of the memory-mapped model file (weights on the CPU are read through mmap)",
    "the CPU backend's work buffer (quantized copies of matmul inputs; allocated per graph at run time, not at "
    "context creation)",
    "growth of the output buffer when a batch asks for more than one token's logits per sequence",
)

#: the weight types llama.cpp's CPU backend repacks (ggml-cpu/repack.cpp), by instruction set, with the row
#: multiple a matrix needs (its ``ne[1]``, the number of rows)
_REPACK: dict[str, dict[str, int]] = {
    "avx2": {"Q4_0": 8, "Q4_K": 8, "IQ4_NL": 8, "MXFP4": 8},
    "avx512": {"Q4_0": 8, "Q4_K": 8, "IQ4_NL": 8, "MXFP4": 8, "Q2_K": 8},
    "neon-dotprod": {"Q4_0": 4, "Q4_K": 8, "Q5_K": 8, "Q6_K": 8, "IQ4_NL": 4, "MXFP4": 4, "Q8_0": 4},
    "neon-i8mm": {"Q4_0": 4, "Q4_K": 8, "Q5_K": 8, "Q6_K": 8, "IQ4_NL": 4, "MXFP4": 4, "Q8_0": 4},
    "none": {},
}

#: instruction sets ``cpu_isa`` accepts: x86 with AVX2, x86 with AVX-512, ARM with dot product, ARM with int8
#: matrix multiply, or no repacking (``--no-repack``, or a CPU without those)
CPU_ISAS = tuple(_REPACK)

MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ: the most sequences decoded in parallel
_MAX_SEQ = MAX_SEQUENCES
_PAD = 256  # llama.cpp pads the context and the SWA cache to 256 cells

#: recurrent architectures (llama.cpp's llm_arch_is_recurrent) and their state family
_RECURRENT = {"mamba": "ssm", "mamba2": "ssm", "rwkv6": "rwkv", "rwkv6qwen2": "rwkv", "rwkv7": "rwkv", "arwkv7": "rwkv"}

#: architectures llama.cpp runs without a KV cache (encoders, embedding and diffusion models)
_NO_CACHE = frozenset(
    {
        "bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "eurobert",
        "wavtokenizer-dec",
        "modern-bert",
        "gemma-embedding",
        "dream",
        "llada",
        "llada-moe",
        "rnd1",
        "t5encoder",
    }
)

#: architectures whose cache layout differs from the per-layer K/V model here
_OTHER_CACHE = {
    **{
        a: "a hybrid of attention and recurrent layers"
        for a in (
            "jamba",
            "falcon-h1",
            "plamo2",
            "granitehybrid",
            "lfm2",
            "lfm2moe",
            "nemotron_h",
            "nemotron_h_moe",
            "qwen3next",
            "kimi-linear",
            "bailingmoe3",
            "kimi-k3",
            "glm5-next",
            "qwen35",
            "qwen35moe",
            "qwen4exp",
            "deepseek4",
            "minimax-01",
        )
    },
    **{
        a: "multi-head latent attention or a sparse-attention indexer cache"
        for a in ("deepseek2", "deepseek32", "glm-dsa", "minicpm3", "minimax-m3", "hy_v4", "dots3note", "mistral4")
    },
    **{a: "layers that share another layer's KV cache" for a in ("gemma3n", "gemma4", "gemma4-assistant")},
    "t5": "an encoder-decoder model (cross-attention)",
}


@dataclass(frozen=True)
class _SWARule:
    """How llama.cpp sets up sliding-window attention for one architecture."""

    period: int  # default layer period of the pattern (load_swa_pattern's n_pattern)
    when: str  # "always", "key>0" (only with a positive window key), "key!=0" (unless the key is 0)
    default_window: int | None = None  # window when the key is absent (None: the key is required)
    fixed_window: int | None = None  # window llama.cpp uses whatever the key says
    dense_first: bool = False  # pattern with the full-attention layer first in each period


_SWA_RULES = {
    "gemma2": _SWARule(2, "always", default_window=4096),
    "gemma3": _SWARule(6, "key>0"),
    "cohere2": _SWARule(4, "always"),
    "cohere2moe": _SWARule(4, "always", dense_first=True),
    "olmo2": _SWARule(4, "key>0"),
    "gpt-oss": _SWARule(2, "always"),
    "afmoe": _SWARule(4, "key>0"),
    "smallthinker": _SWARule(4, "key>0", fixed_window=4096, dense_first=True),
    "llama4": _SWARule(4, "key!=0", fixed_window=8192),  # chunked attention, same cache sizing
}

_LAYER_RE = re.compile(r"(?:^|\.)blk\.(\d+)\.")
_INPUT_TENSORS = frozenset({"token_embd", "position_embd", "token_types", "per_layer_token_embd"})
_FIRST_LAYER_TENSORS = frozenset({"token_embd_norm", "rope_freqs", "rope_factors_long", "rope_factors_short"})


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class WeightGroup:
    """Tensors that llama.cpp places together: ``input``, ``layer <i>``, ``output``, or ``output (tied)``
    (the second copy of ``token_embd.weight`` used as the output matrix)."""

    name: str
    device: str
    bytes: int
    tensors: int


@dataclass(frozen=True)
class KVLayer:
    """The KV cache of one attention layer: ``kind`` is ``"full"`` or ``"swa"`` (sliding window);
    ``cells`` per stream; ``k_bytes``/``v_bytes`` over all streams."""

    layer: int
    kind: str
    device: str
    cells: int
    streams: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int
    k_bytes: int
    v_bytes: int


@dataclass(frozen=True)
class RecurrentLayer:
    """The recurrent state of one layer: ``r_bytes`` (conv / token-shift state, ``n_embd_r`` floats
    per row) and ``s_bytes`` (SSM / WKV state, ``n_embd_s`` floats per row), one row per sequence."""

    layer: int
    device: str
    rows: int
    n_embd_r: int
    n_embd_s: int
    r_bytes: int
    s_bytes: int


@dataclass(frozen=True)
class Estimate:
    """Memory to run a model with llama.cpp, by part and by device (``"CPU"`` or ``"GPU"``), in bytes.

    Attributes:
        architecture: ``general.architecture``.
        settings: the context as llama.cpp would set it up (``n_ctx`` padded, ``n_ctx_seq``,
            streams, ``n_batch``, ``n_ubatch``, cache types, ``gpu_layers`` ...).
        weights: tensor bytes by placement group (see :class:`WeightGroup`).
        kv_layers: the KV cache per attention layer (empty for recurrent or cache-less models).
        recurrent_layers: the recurrent state per layer (recurrent models only).
        output_buffer: host bytes of the logits buffer allocated with the context (0 when the
            vocabulary size is unknown).
        formulas: ``(part, text)``: how each part was computed, with the numbers used.
        not_estimated: what this estimate leaves out.
        notes: assumptions and warnings about this model.
        compute: the compute buffer per device (``{"CPU": bytes, "GPU": bytes}``; empty when the
            graph of this architecture is not modelled).
        repacked: host bytes of the weights llama.cpp repacks for its CPU kernels (a second copy:
            the ``CPU_REPACK`` buffer).
    """

    architecture: str
    settings: Mapping[str, Any]
    weights: tuple[WeightGroup, ...]
    kv_layers: tuple[KVLayer, ...]
    recurrent_layers: tuple[RecurrentLayer, ...]
    output_buffer: int
    formulas: tuple[tuple[str, str], ...]
    not_estimated: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    compute: Mapping[str, int] = field(default_factory=dict)
    repacked: int = 0

    def _weights_on(self, device: str) -> int:
        return sum(g.bytes for g in self.weights if g.device == device)

    @property
    def weights_cpu(self) -> int:
        return self._weights_on("CPU")

    @property
    def weights_gpu(self) -> int:
        return self._weights_on("GPU")

    @property
    def kv_k_bytes(self) -> int:
        return sum(x.k_bytes for x in self.kv_layers)

    @property
    def kv_v_bytes(self) -> int:
        return sum(x.v_bytes for x in self.kv_layers)

    @property
    def kv_bytes(self) -> int:
        return self.kv_k_bytes + self.kv_v_bytes

    @property
    def recurrent_bytes(self) -> int:
        return sum(x.r_bytes + x.s_bytes for x in self.recurrent_layers)

    def cache_on(self, device: str) -> int:
        """KV cache and recurrent state bytes on ``device``."""
        return sum(x.k_bytes + x.v_bytes for x in self.kv_layers if x.device == device) + sum(
            x.r_bytes + x.s_bytes for x in self.recurrent_layers if x.device == device
        )

    def compute_on(self, device: str) -> int:
        """The compute buffer on ``device`` (0 when not estimated)."""
        return int(self.compute.get(device, 0))

    @property
    def total_cpu(self) -> int:
        """Weights, repacked weights, caches, the output buffer and the compute buffer in host memory."""
        return self.weights_cpu + self.repacked + self.cache_on("CPU") + self.output_buffer + self.compute_on("CPU")

    @property
    def total_gpu(self) -> int:
        return self.weights_gpu + self.cache_on("GPU") + self.compute_on("GPU")

    @property
    def total(self) -> int:
        return self.total_cpu + self.total_gpu

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``json.dumps``: every field, plus the totals under ``"totals"``.

        >>> import json
        >>> e = Estimate("x", {"n_ctx": 256}, (WeightGroup("input", "CPU", 10, 1),), (), (), 4, (("weights", "..."),), ())
        >>> d = e.to_dict(); d["totals"]["cpu"], d["formulas"], json.loads(json.dumps(d)) == d
        (14, {'weights': '...'}, True)
        """
        return {
            "architecture": self.architecture,
            "settings": dict(self.settings),
            "weights": [asdict(g) for g in self.weights],
            "kv_layers": [asdict(x) for x in self.kv_layers],
            "recurrent_layers": [asdict(x) for x in self.recurrent_layers],
            "output_buffer": self.output_buffer,
            "compute": dict(self.compute),
            "repacked": self.repacked,
            "totals": {
                "weights_cpu": self.weights_cpu,
                "weights_gpu": self.weights_gpu,
                "repacked_cpu": self.repacked,
                "compute_cpu": self.compute_on("CPU"),
                "compute_gpu": self.compute_on("GPU"),
                "kv_k": self.kv_k_bytes,
                "kv_v": self.kv_v_bytes,
                "kv": self.kv_bytes,
                "recurrent": self.recurrent_bytes,
                "cache_cpu": self.cache_on("CPU"),
                "cache_gpu": self.cache_on("GPU"),
                "cpu": self.total_cpu,
                "gpu": self.total_gpu,
                "all": self.total,
            },
            "formulas": dict(self.formulas),
            "not_estimated": list(self.not_estimated),
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- reading the keys


class _Keys:
    """Typed access to ``{arch}.*`` keys, with errors that name the key."""

    def __init__(self, metadata: Mapping[str, Any], arch: str, where: str | None):
        self.md = metadata
        self.arch = arch
        self.where = where

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def has(self, suffix: str) -> bool:
        return self.key(suffix) in self.md

    def _missing(self, key: str, why: str) -> GGUFKeyError:
        return GGUFKeyError(f"metadata key {key!r} is missing: it gives {why}", path=self.where, value=key)

    def _bad(self, key: str, value: Any, want: str) -> GGUFFormatError:
        shown = value if not isinstance(value, np.ndarray) else value.tolist()
        return GGUFFormatError(f"metadata key {key!r} must be {want}, is {_short(shown)}", path=self.where, value=value)

    def uint(self, suffix: str, why: str, default: int | None = None) -> int:
        key = self.key(suffix)
        if key not in self.md:
            if default is None:
                raise self._missing(key, why)
            return default
        value = self.md[key]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise self._bad(key, value, "a non-negative integer")
        return int(value)

    def per_layer(self, suffix: str, n_layer: int, why: str, default: Sequence[int] | None = None) -> list[int]:
        """A scalar applying to every layer, or an array with one value per layer."""
        key = self.key(suffix)
        if key not in self.md:
            if default is None:
                raise self._missing(key, why)
            return list(default)
        value = self.md[key]
        if isinstance(value, (np.ndarray, list, tuple)):
            items = list(value.tolist() if isinstance(value, np.ndarray) else value)
            if len(items) != n_layer or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in items):
                raise self._bad(key, value, f"a non-negative integer or an array of {n_layer} of them (one per layer)")
            return items
        return [self.uint(suffix, why)] * n_layer

    def optional(self, suffix: str) -> Any:
        return self.md.get(self.key(suffix)) if self.has(suffix) else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _pad(n: int, to: int = _PAD) -> int:
    return align_offset(n, to)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def _cache_type(name: str, value: Any) -> GGMLType:
    if isinstance(value, GGMLType):
        value = value.name
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be a cache type name ({', '.join(CACHE_TYPES)}), got {type(value).__name__} {value!r}"
        )
    if value.strip().lower() not in CACHE_TYPES:
        raise ValueError(f"{name} {value!r} is not a cache type llama.cpp accepts: {', '.join(CACHE_TYPES)}")
    return GGMLType.of(value)


# --------------------------------------------------------------------------- the estimate


def estimate(
    model: Any,
    *,
    ctx: int | None = None,
    batch: int = 512,
    ubatch: int = 512,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    gpu_layers: int = 0,
    parallel: int = 1,
    flash_attn: bool = True,
    swa_full: bool = False,
    kv_unified: bool = False,
    cpu_isa: str = "avx2",
) -> Estimate:
    """Estimate the memory llama.cpp needs to run ``model`` (see the module docstring for the rules).

    Args:
        model: an open :class:`~gguf_schema.reader.GGUFFile` or split model
            (:func:`gguf_schema.open_split`), or anything with ``metadata`` (a mapping) and
            ``tensor_list`` (items with ``name``, ``type``, ``nbytes``, ``n_elements``).
        ctx: context size in tokens (llama.cpp's ``-c``); None or 0: ``{arch}.context_length``.
        batch, ubatch: logical and physical batch sizes (``-b``, ``-ub``).
        cache_type_k, cache_type_v: KV cache types, one of :data:`CACHE_TYPES`.
        gpu_layers: layers to offload (``-ngl``): the output layer first, then repeating layers
            from the last; -1 for all.
        parallel: sequences decoded in parallel (``-np``).
        flash_attn: whether flash attention runs (llama.cpp's default ``auto`` turns it on where
            the backend has it). Without it the V cache is transposed and every layer's V rows
            take the widest layer's width, and a quantized V cache is refused, as in llama.cpp.
        swa_full: give sliding-window layers a full-size cache (``--swa-full``).
        kv_unified: one KV stream shared by all sequences (``--kv-unified``).
        cpu_isa: the CPU's instruction set, which decides the weights llama.cpp repacks for its CPU
            kernels: one of :data:`CPU_ISAS` (``"avx2"``: x86-64 with AVX2, the default;
            ``"none"``: no repacking, as ``--no-repack``).

    Returns:
        An :class:`Estimate`.

    Raises:
        GGUFKeyError: a metadata key the estimate needs is missing (the message names it).
        GGUFFormatError: a key has a value of the wrong kind, or a tensor an unknown type.
        ValueError, TypeError: an argument out of range or of the wrong kind.

    What is not estimated is in :data:`NOT_ESTIMATED` and in each result's ``not_estimated``.
    """
    metadata, tensors = _model_parts(model)
    where = getattr(model, "name", None)
    if K.GENERAL_ARCHITECTURE not in metadata:
        raise GGUFKeyError(
            "metadata key 'general.architecture' is missing: it names the architecture whose keys describe the layers",
            path=where,
            value=K.GENERAL_ARCHITECTURE,
        )
    arch = metadata[K.GENERAL_ARCHITECTURE]
    if not isinstance(arch, str):
        raise GGUFFormatError(
            f"metadata key 'general.architecture' must be a string, is {_short(arch)}", path=where, value=arch
        )
    if ctx is not None:
        ctx = _check_int("ctx", ctx, 0) or None  # 0: the training context, as llama.cpp's -c 0
    batch = _check_int("batch", batch, 1)
    ubatch = _check_int("ubatch", ubatch, 1)
    parallel = _check_int("parallel", parallel, 1, _MAX_SEQ)
    gpu_layers = _check_int("gpu_layers", gpu_layers, -1)
    type_k, type_v = _cache_type("cache_type_k", cache_type_k), _cache_type("cache_type_v", cache_type_v)
    if not isinstance(cpu_isa, str):
        raise TypeError(f"cpu_isa must be one of {', '.join(CPU_ISAS)}, got {type(cpu_isa).__name__} {cpu_isa!r}")
    if cpu_isa not in _REPACK:
        raise ValueError(f"cpu_isa {cpu_isa!r} is not one of {', '.join(CPU_ISAS)}")
    for name, flag in (("flash_attn", flash_attn), ("swa_full", swa_full), ("kv_unified", kv_unified)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__} {flag!r}")
    if type_v.quantized and not flash_attn:
        raise ValueError(
            f"a quantized V cache ({type_v.name}) needs flash attention in llama.cpp: pass flash_attn=True or a float cache_type_v"
        )

    keys = _Keys(metadata, arch, where)
    n_layer_all = keys.uint("block_count", "the number of repeating layers")
    if n_layer_all == 0:
        raise keys._bad(keys.key("block_count"), 0, "a positive integer")
    n_train = keys.uint("context_length", "the training context, the default ctx", default=None if ctx is None else 0)
    notes: list[str] = []
    formulas: list[tuple[str, str]] = []
    not_estimated = list(NOT_ESTIMATED)

    # context, as llama_context sets it up
    requested = ctx if ctx is not None else n_train
    if requested == 0:
        raise keys._bad(keys.key("context_length"), 0, "a positive integer (or pass ctx=)")
    n_ctx = _pad(requested)
    if kv_unified:
        n_ctx_seq, n_stream = n_ctx, 1
        how = f"unified: n_ctx_seq = n_ctx = {n_ctx}, 1 stream shared by {parallel} sequence(s)"
    else:
        n_ctx_seq = _pad(n_ctx // parallel)
        n_ctx, n_stream = n_ctx_seq * parallel, parallel
        how = (
            f"n_ctx_seq = pad256(n_ctx / parallel {parallel}) = {n_ctx_seq}, {parallel} stream(s) of {n_ctx_seq} cells"
        )
    n_batch = min(requested, batch)  # llama.cpp bounds the batch by the context before padding it
    n_ubatch = min(n_batch, ubatch)
    source = f"ctx {ctx}" if ctx is not None else f"{keys.key('context_length')} {n_train}"
    formulas.append(
        (
            "context",
            f"n_ctx = pad256({source}) = {_pad(requested)}; {how}; n_batch = min(ctx {requested}, {batch}) = {n_batch}, "
            f"n_ubatch = min(n_batch, {ubatch}) = {n_ubatch}",
        )
    )
    if n_train and n_ctx_seq > n_train:
        notes.append(
            f"the context per sequence ({n_ctx_seq}) exceeds the training context {n_train}: llama.cpp warns, output may degrade"
        )

    # devices: the output layer counts as layer n_layer_all; the last gpu_layers of the n_layer_all + 1 go to the GPU
    n_gpu = n_layer_all + 1 if gpu_layers < 0 else min(gpu_layers, n_layer_all + 1)
    i_gpu_start = n_layer_all + 1 - n_gpu

    def device(il: int) -> str:
        return "GPU" if il >= i_gpu_start else "CPU"

    weights, weight_text = _weights(tensors, n_layer_all, device)
    formulas.append(("weights", weight_text))
    if any(g.name == "output (tied)" for g in weights):
        notes.append(
            "no output.weight: token_embd.weight is the output matrix too; llama.cpp loads a second copy on the GPU"
        )

    settings: dict[str, Any] = {
        "ctx_requested": requested,
        "n_ctx": n_ctx,
        "n_ctx_seq": n_ctx_seq,
        "n_seq": parallel,
        "n_stream": n_stream,
        "n_batch": n_batch,
        "n_ubatch": n_ubatch,
        "cache_type_k": type_k.name,
        "cache_type_v": type_v.name,
        "gpu_layers": n_gpu,
        "block_count": n_layer_all,
        "flash_attn": flash_attn,
        "swa_full": swa_full,
        "kv_unified": kv_unified,
        "cpu_isa": cpu_isa,
        "llama_cpp": LLAMA_CPP_VERSION,
    }
    repacked, repack_text = _repacked(tensors, device, n_layer_all, cpu_isa)
    formulas.append(("repacked weights", repack_text))

    kv_layers: tuple[KVLayer, ...] = ()
    recurrent: tuple[RecurrentLayer, ...] = ()
    n_nextn = keys.uint("nextn_predict_layers", "", default=0)
    n_layer = n_layer_all - min(n_nextn, n_layer_all)
    if arch in _RECURRENT:
        recurrent, text = _recurrent(keys, _RECURRENT[arch], n_layer, parallel, device)
        formulas.append(("recurrent state", text))
    elif arch in _NO_CACHE:
        formulas.append(("kv cache", f"none: llama.cpp runs {arch!r} without a KV cache"))
    elif arch in _OTHER_CACHE:
        not_estimated.append(
            f"the KV/recurrent cache of {arch!r}: {_OTHER_CACHE[arch]}, which this estimate does not model"
        )
    else:
        if arch not in _KNOWN_ATTENTION:
            notes.append(
                f"architecture {arch!r} is not in this module's list; its KV cache is sized by the standard "
                "attention keys, which is right for ordinary transformer decoders"
            )
        kv_layers, kv_text = _kv_cache(
            keys,
            n_layer_all,
            n_layer,
            n_ctx_seq,
            n_stream,
            parallel,
            n_ubatch,
            type_k,
            type_v,
            flash_attn,
            swa_full,
            kv_unified,
            device,
            notes,
        )
        formulas.extend(kv_text)

    n_vocab = _vocab_size(metadata, keys)
    output_buffer = n_vocab * parallel * 4 if n_vocab else 0
    if n_vocab:
        formulas.append(
            (
                "output buffer",
                f"logits of 1 token per sequence: n_vocab {n_vocab} x {parallel} x 4 bytes = {output_buffer:,} bytes (host)",
            )
        )
    else:
        not_estimated.append(
            "the output (logits) buffer: the vocabulary size is unknown (no tokenizer.ggml.tokens nor vocab_size)"
        )
    compute: dict[str, int] = {}
    if (kv_layers or arch == "mamba") and n_vocab:
        compute, compute_text = _compute(
            keys, tensors, kv_layers, n_layer, n_layer_all, n_vocab, settings, type_k, type_v, device
        )
        formulas.append(("compute buffer", compute_text))
        if any(d == "GPU" for d in compute):
            notes.append(
                "the GPU compute buffer follows the same allocator over the layers placed there (and copies of what "
                "they read from the CPU); it is checked against llama.cpp offloading to an RPC device, not on a "
                "GPU: a GPU backend may add its own (operations it takes over from the CPU, driver workspaces)"
            )
        if arch not in _GRAPHS:
            notes.append(
                f"the compute buffer of {arch!r} is sized by the graph of llama's family (this module models the "
                f"graphs of {', '.join(sorted(_GRAPHS))}); its own extra operations are not counted"
            )
    else:
        why = "no KV cache modelled" if not kv_layers else "the vocabulary size is unknown"
        not_estimated.append(f"the compute buffers ({why}: the graph of {arch!r} is not modelled)")
    return Estimate(
        arch,
        settings,
        weights,
        kv_layers,
        recurrent,
        output_buffer,
        tuple(formulas),
        tuple(not_estimated),
        tuple(notes),
        compute,
        repacked,
    )


#: architectures whose graph the compute emulation follows (others: the llama graph, approximately)
_GRAPHS = frozenset(
    {
        "llama",
        "mistral3",
        "qwen2",
        "qwen2moe",
        "qwen3",
        "qwen3moe",
        "phi3",
        "deci",
        "gemma2",
        "gemma3",
        "granite",
        "mamba",
    }
)


def _repacked(tensors: Sequence[Any], device: Any, n_layer_all: int, isa: str) -> tuple[int, str]:
    """Bytes of the CPU_REPACK copies: CPU matmul weights of a repacked type with whole groups of rows."""
    rules = _REPACK[isa]
    names = {t.name for t in tensors}
    total = 0
    by_type: dict[str, int] = {}
    for t in tensors:
        kind, il = _placement(t.name)
        name = getattr(t, "type_name", None) or getattr(t.type, "name", str(t.type))
        tied = t.name == "token_embd.weight" and "output.weight" not in names
        if kind == "input" and not tied:
            continue
        where = device(n_layer_all if (kind == "output" or tied) else il)
        if where != "CPU" or name not in rules:
            continue
        dims = tuple(t.dims) if hasattr(t, "dims") else tuple(reversed(t.shape))
        matmul = len(dims) == 2 or (len(dims) == 3 and t.name.endswith("_exps.weight"))
        if not matmul or not t.name.endswith(".weight") or dims[1] % rules[name]:
            continue
        size = align_offset(t.nbytes, 32)
        total += size
        by_type[name] = by_type.get(name, 0) + size
    if not rules:
        return 0, "none: no repacking (cpu_isa 'none')"
    kinds = ", ".join(f"{k} (rows a multiple of {v})" for k, v in rules.items())
    found = "; ".join(f"{k} {_mib(v)}" for k, v in sorted(by_type.items())) or "no such weight on the CPU"
    return total, (
        f"{isa}: llama.cpp copies into CPU_REPACK the matmul weights on the CPU of types {kinds}, "
        f"the input embeddings excepted: {found}; total {_mib(total)}"
    )


def _compute(
    keys: _Keys,
    tensors: Sequence[Any],
    kv_layers: Sequence[KVLayer],
    n_layer: int,
    n_layer_all: int,
    n_vocab: int,
    settings: Mapping[str, Any],
    type_k: GGMLType,
    type_v: GGMLType,
    device: Any,
) -> tuple[dict[str, int], str]:
    """The compute buffer per device: the graph allocator over the prompt graph and the generation graph."""
    dims = {t.name: (tuple(t.dims) if hasattr(t, "dims") else tuple(reversed(t.shape))) for t in tensors}
    n_embd = keys.uint("embedding_length", "the width of the model")
    ssm = (0, 0, 0, 0)
    if keys.arch == "mamba":
        n_head = n_head_kv = [0] * n_layer_all
        head_k = head_v = 0
        d_inner = keys.uint("ssm.inner_size", "the inner width of the SSM")
        d_state = keys.uint("ssm.state_size", "the SSM state size")
        ssm = (keys.uint("ssm.conv_kernel", "the convolution width of the SSM"), d_inner, d_state, 0)
        ssm = (*ssm[:3], keys.uint("ssm.time_step_rank", "the rank of the SSM's time step"))
    else:
        n_head = keys.per_layer("attention.head_count", n_layer_all, "the number of attention heads")
        n_head_kv = keys.per_layer("attention.head_count_kv", n_layer_all, "", default=n_head)
        head_k = keys.uint("attention.key_length", "", default=n_embd // max(n_head[0], 1))
        head_v = keys.uint("attention.value_length", "", default=n_embd // max(n_head[0], 1))
    n_ff = max(
        [d[1] for n, d in dims.items() if n.endswith("ffn_up.weight") and len(d) == 2]
        or [max(keys.per_layer("feed_forward_length", n_layer_all, "", default=[0]))]
    )
    exps = [d for n, d in dims.items() if n.endswith("ffn_up_exps.weight") and len(d) == 3]
    n_expert = exps[0][2] if exps else 0
    n_ff_exp = exps[0][1] if exps else 0
    n_used = keys.uint("expert_used_count", "the experts used per token", default=None if n_expert else 0)
    arch = keys.arch
    family = arch if arch in ("gemma2", "gemma3", "mamba", "phi3") else "llama"
    has_gate = any(n.endswith("ffn_gate.weight") for n in dims)
    ffn_kind = "gated" if has_gate else "fused" if arch in ("phi3", "phimoe") else "plain"
    cells = {x.layer: x.cells for x in kv_layers}
    widths = [x.n_embd_v_gqa for x in kv_layers]
    flash = bool(settings["flash_attn"])
    n_seqs, n_ctx, n_ubatch, n_batch = settings["n_seq"], settings["n_ctx"], settings["n_ubatch"], settings["n_batch"]
    base = {
        "n_embd": n_embd,
        "n_ff": n_ff,
        "n_vocab": n_vocab,
        "n_head": n_head[:n_layer],
        "n_head_kv": n_head_kv[:n_layer],
        "head_k": head_k,
        "head_v": head_v,
        "n_kv": [cells.get(il, 0) for il in range(n_layer)],
        "n_seqs": n_seqs,
        "flash_attn": flash,
        "kv_unified": bool(settings["kv_unified"]),
        "family": family,
        "n_expert": n_expert,
        "n_expert_used": n_used,
        "n_ff_exp": n_ff_exp,
        "qk_norm": "blk.0.attn_q_norm.weight" in dims,
        "qkv_bias": "blk.0.attn_q.bias" in dims,
        "fused_qkv": "blk.0.attn_qkv.weight" in dims,
        "v_trans_width": max(widths) if widths else 0,
        "k_rot": type_k.quantized and head_k % 64 == 0,
        "v_rot": type_v.quantized and head_v % 64 == 0,
        "swa": [x.kind == "swa" for x in sorted(kv_layers, key=lambda x: x.layer)],
        "layer_devices": [device(il) for il in range(n_layer)] + [device(n_layer_all)],
        "ssm": ssm,
        "ffn_kind": ffn_kind,
    }
    n_tokens = min(n_ctx, n_ubatch)
    pp_tokens = -(-n_tokens // n_seqs) * n_seqs
    pp = compute_buffer(ComputeShapes(**base, n_tokens=pp_tokens, n_outputs=min(n_tokens, n_batch)))
    tg = compute_buffer(ComputeShapes(**base, n_tokens=n_seqs, n_outputs=n_seqs))
    out = {d: max(pp.peak.get(d, 0), tg.peak.get(d, 0)) for d in sorted(set(pp.peak) | set(tg.peak))}

    def peak(d: str) -> str:
        r = pp if pp.peak.get(d, 0) >= tg.peak.get(d, 0) else tg
        graph = "prompt" if r is pp else "generation"
        size = r.peak_tensor[d]
        return f"{r.peak_at[d]} ({_mib(size)}) placed above {_mib(r.peak[d] - size)} in use, in the {graph} graph"

    per_device = "; ".join(f"{d} {_mib(b)}: {peak(d)}" for d, b in out.items())
    text = (
        f"ggml's graph allocator over llama.cpp's worst-case graphs ({LLAMA_CPP_VERSION}): the prompt graph of "
        f"{pp_tokens} tokens (min(n_ctx, n_ubatch) rounded to the {n_seqs} sequence(s)) with "
        f"{min(n_tokens, n_batch)} outputs, and the generation graph of {n_seqs} token(s); each tensor placed "
        f"best-fit (32-byte aligned), freed after its last use, element-wise ops in place; "
        + (
            "selective-scan layers (conv window + scan output + states per sequence)"
            if ssm[1]
            else f"KV cells per layer as above, attention "
            f"{'by flash attention (F16 mask)' if flash else 'by KQ = n_kv x n_tokens x n_head floats'}"
        )
        + f", logits n_vocab {n_vocab} x outputs x 4 bytes; {pp.nodes} graph nodes; {per_device}"
    )
    return out, text


#: decoder architectures whose cache is the standard per-layer K/V (llama.cpp's default branch)
_KNOWN_ATTENTION = frozenset(
    {
        "llama",
        "llama4",
        "deci",
        "falcon",
        "grok",
        "gpt2",
        "gptj",
        "gptneox",
        "mpt",
        "baichuan",
        "starcoder",
        "refact",
        "bloom",
        "stablelm",
        "qwen",
        "qwen2",
        "qwen2moe",
        "qwen2vl",
        "qwen3",
        "qwen3moe",
        "qwen3vl",
        "qwen3vlmoe",
        "phi2",
        "phi3",
        "phimoe",
        "plamo",
        "plamo3",
        "codeshell",
        "orion",
        "internlm2",
        "minicpm",
        "gemma",
        "gemma2",
        "gemma3",
        "starcoder2",
        "xverse",
        "command-r",
        "cohere2",
        "cohere2moe",
        "dbrx",
        "olmo",
        "olmo2",
        "olmoe",
        "openelm",
        "arctic",
        "deepseek",
        "chatglm",
        "glm4",
        "glm4moe",
        "bitnet",
        "jais",
        "jais2",
        "nemotron",
        "exaone",
        "exaone4",
        "granite",
        "granitemoe",
        "chameleon",
        "plm",
        "bailingmoe",
        "bailingmoe2",
        "dots1",
        "arcee",
        "afmoe",
        "ernie4_5",
        "ernie4_5-moe",
        "hunyuan-moe",
        "hunyuan-dense",
        "smollm3",
        "gpt-oss",
        "smallthinker",
        "seed_oss",
        "grovemoe",
        "apertus",
        "minimax-m2",
        "pangu-embedded",
        "mistral3",
        "maincoder",
        "nanbeige",
        "deepseek2-ocr",
    }
)


def _model_parts(model: Any) -> tuple[Mapping[str, Any], list[Any]]:
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        raise TypeError("estimate() takes an open model: with gguf_schema.open(path) as f: estimate(f)")
    metadata = getattr(model, "metadata", None)
    tensor_list = getattr(model, "tensor_list", None)
    if not isinstance(metadata, Mapping) or tensor_list is None:
        raise TypeError(
            f"estimate() needs a model with .metadata and .tensor_list (an open GGUFFile), got {type(model).__name__}"
        )
    return metadata, list(tensor_list)


def _placement(name: str) -> tuple[str, int]:
    """("input", -1), ("layer", i) or ("output", -1) for a tensor name, as llama.cpp groups tensors."""
    m = _LAYER_RE.search(name)
    if m:
        return "layer", int(m.group(1))
    stem = name.split(".", 1)[0]
    if stem in _INPUT_TENSORS:
        return "input", -1
    if stem in _FIRST_LAYER_TENSORS:
        return "layer", 0
    return "output", -1


def _weights(tensors: Iterable[Any], n_layer_all: int, device: Any) -> tuple[tuple[WeightGroup, ...], str]:
    groups: dict[tuple[str, int], list[int]] = {}
    names = set()
    for t in tensors:
        kind, il = _placement(t.name)
        names.add(t.name)
        entry = groups.setdefault((kind, il), [0, 0])
        entry[0] += t.nbytes
        entry[1] += 1
    out: list[WeightGroup] = []
    if ("input", -1) in groups:
        b, n = groups[("input", -1)]
        out.append(WeightGroup("input", "CPU", b, n))
    for (_, il), (b, n) in sorted((k, v) for k, v in groups.items() if k[0] == "layer"):
        out.append(WeightGroup(f"layer {il}", device(il), b, n))
    out_dev = device(n_layer_all)
    if ("output", -1) in groups:
        b, n = groups[("output", -1)]
        out.append(WeightGroup("output", out_dev, b, n))
    tied = "output.weight" not in names and "token_embd.weight" in names
    if tied and out_dev == "GPU":
        embd = next(t for t in tensors if t.name == "token_embd.weight")
        out.append(WeightGroup("output (tied)", "GPU", embd.nbytes, 1))
    text = (
        f"sum of tensor sizes (elements / block size x bytes per block): input layer -> CPU; "
        f"{_layers_placed(n_layer_all, device)}; output layer -> {out_dev}"
        + ("; tied output: a copy of token_embd.weight on the GPU" if tied and out_dev == "GPU" else "")
    )
    return tuple(out), text


def _layers_placed(n_layer_all: int, device: Any) -> str:
    """Where the repeating layers go, in words.

    >>> _layers_placed(18, lambda il: "CPU"), _layers_placed(2, lambda il: "GPU")
    ('repeating layers -> CPU (all 18; none on the GPU)', 'repeating layers -> GPU (all 2)')
    >>> _layers_placed(18, lambda il: "GPU" if il >= 12 else "CPU")
    'repeating layers: 6 of 18 -> GPU (blk.12 to blk.17), the other 12 -> CPU'
    """
    on_gpu = [il for il in range(n_layer_all) if device(il) == "GPU"]
    if not on_gpu:
        return f"repeating layers -> CPU (all {n_layer_all}; none on the GPU)"
    if len(on_gpu) == n_layer_all:
        return f"repeating layers -> GPU (all {n_layer_all})"
    first, last = on_gpu[0], on_gpu[-1]
    span = f"blk.{first}" if first == last else f"blk.{first} to blk.{last}"
    rest = n_layer_all - len(on_gpu)
    return f"repeating layers: {len(on_gpu)} of {n_layer_all} -> GPU ({span}), the other {rest} -> CPU"


def _vocab_size(metadata: Mapping[str, Any], keys: _Keys) -> int:
    if K.TOKENIZER_GGML_TOKENS in metadata:
        return len(metadata[K.TOKENIZER_GGML_TOKENS])
    return keys.uint("vocab_size", "", default=0)


def _swa_pattern(keys: _Keys, arch: str, n_layer_all: int, notes: list[str]) -> tuple[int, list[bool], str]:
    """(window, is_swa per layer, description) as llama.cpp's per-architecture hparams set them."""
    rule = _SWA_RULES.get(arch)
    window_key = keys.optional("attention.sliding_window")
    if rule is None:
        if window_key:
            notes.append(
                f"{keys.key('attention.sliding_window')} = {window_key}, but llama.cpp applies no sliding window "
                f"to {arch!r} (or this module does not know its rule): every layer sized for the full context"
            )
        return 0, [False] * n_layer_all, ""
    window_int = keys.uint("attention.sliding_window", "the sliding-window size", default=-1)
    if rule.when == "key>0" and window_int <= 0:
        return 0, [False] * n_layer_all, ""
    if rule.when == "key!=0" and window_int == 0:
        return 0, [False] * n_layer_all, ""
    if rule.fixed_window is not None:
        window = rule.fixed_window
    elif window_int >= 0:
        window = window_int
    elif rule.default_window is not None:
        window = rule.default_window
    else:
        window = keys.uint("attention.sliding_window", f"the sliding-window size {arch} needs")
    pattern = keys.optional("attention.sliding_window_pattern")
    if isinstance(pattern, (np.ndarray, list, tuple)):
        flags = [bool(x) for x in (pattern.tolist() if isinstance(pattern, np.ndarray) else pattern)][:n_layer_all]
        flags += [False] * (n_layer_all - len(flags))
        text = f"{keys.key('attention.sliding_window_pattern')} (per layer)"
    else:
        period = keys.uint("attention.sliding_window_pattern", "", default=rule.period)
        if rule.dense_first:
            flags = [period == 0 or il % period != 0 for il in range(n_layer_all)]
            text = f"every {period}th layer full from layer 0, the others sliding-window"
        else:
            flags = [period == 0 or il % period < period - 1 for il in range(n_layer_all)]
            text = f"period {period}: the last layer of each {period} full, the others sliding-window"
    return window, flags, text


def _kv_cache(
    keys: _Keys,
    n_layer_all: int,
    n_layer: int,
    n_ctx_seq: int,
    n_stream: int,
    n_seq: int,
    n_ubatch: int,
    type_k: GGMLType,
    type_v: GGMLType,
    flash_attn: bool,
    swa_full: bool,
    unified: bool,
    device: Any,
    notes: list[str],
) -> tuple[tuple[KVLayer, ...], list[tuple[str, str]]]:
    n_head = keys.per_layer("attention.head_count", n_layer_all, "the number of attention heads")
    n_head_kv = keys.per_layer("attention.head_count_kv", n_layer_all, "", default=n_head)
    if n_head[0] > 0:
        n_embd = None
        if not (keys.has("attention.key_length") and keys.has("attention.value_length")):
            n_embd = keys.uint(
                "embedding_length", "the width of the model (the default head size is embedding_length / head_count)"
            )
        head_k = keys.uint("attention.key_length", "", default=(n_embd or 0) // n_head[0])
        head_v = keys.uint("attention.value_length", "", default=(n_embd or 0) // n_head[0])
    else:
        head_k = head_v = 0
    head_k_swa = keys.uint("attention.key_length_swa", "", default=head_k)
    head_v_swa = keys.uint("attention.value_length_swa", "", default=head_v)
    window, is_swa, pattern_text = _swa_pattern(keys, keys.arch, n_layer_all, notes)

    k_width = [(head_k_swa if is_swa[il] else head_k) * n_head_kv[il] for il in range(n_layer_all)]
    v_width = [(head_v_swa if is_swa[il] else head_v) * n_head_kv[il] for il in range(n_layer_all)]
    v_trans_width = max(v_width)
    size_swa = n_ctx_seq if swa_full else _pad(min(n_ctx_seq, window * (n_seq if unified else 1) + n_ubatch))

    layers = []
    for il in range(n_layer):
        cells = size_swa if is_swa[il] else n_ctx_seq
        vw = v_width[il] if flash_attn else v_trans_width
        k_bytes = _row_bytes(type_k, k_width[il], "K") * cells * n_stream
        v_bytes = _row_bytes(type_v, vw, "V") * cells * n_stream
        layers.append(
            KVLayer(il, "swa" if is_swa[il] else "full", device(il), cells, n_stream, k_width[il], vw, k_bytes, v_bytes)
        )

    def widths(w: list[int]) -> str:
        return str(w[0]) if len(set(w[:n_layer])) == 1 else "per layer " + ",".join(map(str, w[:n_layer]))

    hk = "" if n_head_kv[:n_layer] == [n_head_kv[0]] * n_layer else " (per layer)"
    text = [
        (
            "kv cells",
            f"{n_layer} attention layers"
            + (f" ({n_layer_all - n_layer} next-token-prediction layers excluded)" if n_layer < n_layer_all else "")
            + f"; full layers: n_ctx_seq {n_ctx_seq} cells x {n_stream} stream(s)",
        )
    ]
    if any(is_swa[:n_layer]):
        n_swa_layers = sum(is_swa[:n_layer])
        sizing = (
            "swa_full: n_ctx_seq"
            if swa_full
            else f"pad256(min(n_ctx_seq {n_ctx_seq}, window {window} x {n_seq if unified else 1} + n_ubatch {n_ubatch})) = {size_swa}"
        )
        text.append(
            ("swa", f"{n_swa_layers} of {n_layer} layers use a sliding window ({pattern_text}); their cells: {sizing}")
        )
    text.append(
        (
            "kv k",
            f"per layer: cells x streams x row_size({type_k.name}, n_embd_k_gqa); n_embd_k_gqa = key_length {head_k} x "
            f"head_count_kv {n_head_kv[0]}{hk} = {widths(k_width)}; {_geometry(type_k)}; total {_mib(sum(x.k_bytes for x in layers))}",
        )
    )
    v_note = (
        ""
        if flash_attn or len(set(v_width)) == 1
        else f" (no flash attention: every V row padded to the widest, {v_trans_width})"
    )
    text.append(
        (
            "kv v",
            f"per layer: cells x streams x row_size({type_v.name}, n_embd_v_gqa); n_embd_v_gqa = value_length {head_v} x "
            f"head_count_kv = {widths(v_width)}{v_note}; {_geometry(type_v)}; total {_mib(sum(x.v_bytes for x in layers))}",
        )
    )
    return tuple(layers), text


def _geometry(t: GGMLType) -> str:
    if t.quantized:
        return f"{t.name}: {t.type_size} bytes per block of {t.block_size} values"
    return f"{t.name}: {t.type_size} bytes per value"


def _row_bytes(t: GGMLType, n: int, which: str) -> int:
    if n % t.block_size:
        raise ValueError(
            f"cache type {t.name.lower()} stores {t.block_size} values per block, but this model's {which} rows "
            f"have {n} values: choose another cache type"
        )
    return t.row_nbytes(n)


def _recurrent(
    keys: _Keys, family: str, n_layer: int, n_seq: int, device: Any
) -> tuple[tuple[RecurrentLayer, ...], str]:
    rows = max(1, n_seq)
    if family == "ssm":
        d_conv = keys.uint("ssm.conv_kernel", "the convolution width of the SSM")
        d_inner = keys.uint("ssm.inner_size", "the inner width of the SSM")
        d_state = keys.uint("ssm.state_size", "the SSM state size")
        n_group = keys.uint(
            "ssm.group_count", "the number of SSM groups (mamba2)", default=None if keys.arch == "mamba2" else 0
        )
        n_embd_r = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
        n_embd_s = d_state * d_inner
        text = (
            f"per layer, float32 x {rows} row(s) (one per sequence): conv state n_embd_r = (conv_kernel {d_conv} - 1) x "
            f"(inner_size {d_inner} + 2 x group_count {n_group} x state_size {d_state}) = {n_embd_r}; ssm state n_embd_s = "
            f"state_size {d_state} x inner_size {d_inner} = {n_embd_s}"
        )
    else:
        n_embd = keys.uint("embedding_length", "the width of the model")
        head = keys.uint("wkv.head_size", "the WKV head size")
        shift = keys.uint("token_shift_count", "", default=2)
        n_embd_r = shift * n_embd
        n_embd_s = n_embd * head
        text = (
            f"per layer, float32 x {rows} row(s) (one per sequence): token-shift state n_embd_r = token_shift_count {shift} x "
            f"embedding_length {n_embd} = {n_embd_r}; wkv state n_embd_s = embedding_length {n_embd} x wkv.head_size {head} = {n_embd_s}"
        )
    layers = tuple(
        RecurrentLayer(il, device(il), rows, n_embd_r, n_embd_s, 4 * n_embd_r * rows, 4 * n_embd_s * rows)
        for il in range(n_layer)
    )
    return layers, text + f"; total {_mib(sum(x.r_bytes + x.s_bytes for x in layers))}"
