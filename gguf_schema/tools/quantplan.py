"""The quantization plan: which type ``llama-quantize`` gives each tensor, as tables.

This module holds every rule llama.cpp applies when it quantizes a model (``src/llama-quant.cpp``
and ``tools/quantize/quantize.cpp`` of llama.cpp 0c1e57098, the source vendored in
llama-cpp-python 0.3.36), as data, in the order llama.cpp applies them:

* :data:`PRESETS`: the names ``llama-quantize`` takes (``Q4_K_M``, ``IQ3_XS``, ``COPY`` ...),
  each with its ``general.file_type`` and default tensor type;
* :data:`NEVER_QUANTIZED` (and :data:`NEVER_QUANTIZED_BY_ARCH`): the name parts of tensors
  that are always copied as they are (norms, routers, position embeddings, small convolutions ...);
* :data:`SECTIONS`: the mixes: for each role of a tensor (``attn_v``, ``ffn_down``, the output
  ...) and preset, the rules that give it another type than the preset's default (more bits for
  some layers, for models with grouped-query attention, for mixtures of experts ...);
* :data:`FALLBACK`: the type a tensor falls back to when its rows are not whole blocks of the
  chosen type.

A new llama.cpp rule is one more line in one of these tables. :func:`plan_types` applies them
to a model's tensors; everything it needs to know of the model is in :class:`ModelFacts`, read
from the model's metadata keys (:meth:`ModelFacts.of`). Nothing here reads or writes a file:
:mod:`gguf_schema.tools.requantize` does.

>>> facts = ModelFacts("llama", n_layer_all=8, n_layer=8, n_head=32, n_head_kv=8, n_expert=0)
>>> tensors = [("token_embd.weight", (256, 100), GGMLType.F32), ("blk.0.attn_v.weight", (256, 64), GGMLType.F32),
...            ("blk.0.attn_norm.weight", (256,), GGMLType.F32), ("output.weight", (256, 100), GGMLType.F32)]
>>> for c in plan_types(tensors, preset("Q4_K_M"), facts):
...     print(c.name, c.type.name, "|", c.why)
token_embd.weight Q4_K | Q4_K_M: the default type
blk.0.attn_v.weight Q6_K | Q4_K_M: attn_v: Q6_K in the first and last eighth of the layers and every third between
blk.0.attn_norm.weight F32 | kept: 1-D
output.weight Q6_K | Q4_K_M: output: Q6_K
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import GGUFBuildError
from ..format import keys as K
from ..format.types import FileType, GGMLType
from .ecmascript import compile_ecmascript

__all__ = [
    "FALLBACK",
    "NEVER_QUANTIZED",
    "NEVER_QUANTIZED_BY_ARCH",
    "PRESETS",
    "SECTIONS",
    "Choice",
    "ModelFacts",
    "PlanOptions",
    "PlanRule",
    "Preset",
    "Role",
    "Section",
    "fallback",
    "guessed_file_type",
    "layer_of",
    "llama_order",
    "never_quantized",
    "plan_types",
    "preset",
    "preset_names",
    "requires_imatrix",
    "role_of",
]

T = GGMLType
F = FileType


# --------------------------------------------------------------------------- presets


@dataclass(frozen=True)
class Preset:
    """One ``llama-quantize`` type argument.

    Attributes:
        name: as ``llama-quantize`` spells it (``Q4_K_M``).
        file_type: the ``general.file_type`` it writes (``COPY``: the input's, see :func:`guessed_file_type`).
        default: the type of every quantized tensor that no rule gives another type.
        description: ``llama-quantize``'s own line for it (sizes and perplexities are llama.cpp's).
        mix: False for a single ggml type that is not one of ``llama-quantize``'s names (this
            library's extension: every quantized tensor that type, as with ``--pure``).
    """

    name: str
    file_type: FileType | None
    default: GGMLType
    description: str = ""
    mix: bool = True

    @property
    def copy(self) -> bool:
        """COPY: every tensor copied as it is."""
        return self.name == "COPY"

    @property
    def mix_name(self) -> str:
        """The name the rules know the mix by: its file type's (the aliases ``Q3_K``, ``Q4_K``,
        ``Q5_K`` are the _M mixes)."""
        if self.mix and self.file_type is not None and self.file_type.name.startswith("MOSTLY_"):
            return self.file_type.name[len("MOSTLY_") :]
        return self.name


def _p(name: str, ftype: FileType, default: GGMLType, description: str) -> Preset:
    return Preset(name, ftype, default, description)


PRESETS: tuple[Preset, ...] = (
    _p("Q1_0", F.MOSTLY_Q1_0, T.Q1_0, "1.125 bpw quantization"),
    _p("Q2_0", F.MOSTLY_Q2_0, T.Q2_0, "2.25 bpw quantization (group 64)"),
    _p("Q4_0", F.MOSTLY_Q4_0, T.Q4_0, "4.34G, +0.4685 ppl @ Llama-3-8B"),
    _p("Q4_1", F.MOSTLY_Q4_1, T.Q4_1, "4.78G, +0.4511 ppl @ Llama-3-8B"),
    _p("MXFP4_MOE", F.MOSTLY_MXFP4_MOE, T.MXFP4, "MXFP4 MoE"),
    _p("Q5_0", F.MOSTLY_Q5_0, T.Q5_0, "5.21G, +0.1316 ppl @ Llama-3-8B"),
    _p("Q5_1", F.MOSTLY_Q5_1, T.Q5_1, "5.65G, +0.1062 ppl @ Llama-3-8B"),
    _p("IQ2_XXS", F.MOSTLY_IQ2_XXS, T.IQ2_XXS, "2.06 bpw quantization"),
    _p("IQ2_XS", F.MOSTLY_IQ2_XS, T.IQ2_XS, "2.31 bpw quantization"),
    _p("IQ2_S", F.MOSTLY_IQ2_S, T.IQ2_XS, "2.5  bpw quantization"),
    _p("IQ2_M", F.MOSTLY_IQ2_M, T.IQ2_S, "2.7  bpw quantization"),
    _p("IQ1_S", F.MOSTLY_IQ1_S, T.IQ1_S, "1.56 bpw quantization"),
    _p("IQ1_M", F.MOSTLY_IQ1_M, T.IQ1_M, "1.75 bpw quantization"),
    _p("TQ1_0", F.MOSTLY_TQ1_0, T.TQ1_0, "1.69 bpw ternarization"),
    _p("TQ2_0", F.MOSTLY_TQ2_0, T.TQ2_0, "2.06 bpw ternarization"),
    _p("Q2_K", F.MOSTLY_Q2_K, T.Q2_K, "2.96G, +3.5199 ppl @ Llama-3-8B"),
    _p("Q2_K_S", F.MOSTLY_Q2_K_S, T.Q2_K, "2.96G, +3.1836 ppl @ Llama-3-8B"),
    _p("IQ3_XXS", F.MOSTLY_IQ3_XXS, T.IQ3_XXS, "3.06 bpw quantization"),
    _p("IQ3_S", F.MOSTLY_IQ3_S, T.IQ3_S, "3.44 bpw quantization"),
    _p("IQ3_M", F.MOSTLY_IQ3_M, T.IQ3_S, "3.66 bpw quantization mix"),
    _p("Q3_K", F.MOSTLY_Q3_K_M, T.Q3_K, "alias for Q3_K_M"),
    _p("IQ3_XS", F.MOSTLY_IQ3_XS, T.IQ3_S, "3.3 bpw quantization"),
    _p("Q3_K_S", F.MOSTLY_Q3_K_S, T.Q3_K, "3.41G, +1.6321 ppl @ Llama-3-8B"),
    _p("Q3_K_M", F.MOSTLY_Q3_K_M, T.Q3_K, "3.74G, +0.6569 ppl @ Llama-3-8B"),
    _p("Q3_K_L", F.MOSTLY_Q3_K_L, T.Q3_K, "4.03G, +0.5562 ppl @ Llama-3-8B"),
    _p("IQ4_NL", F.MOSTLY_IQ4_NL, T.IQ4_NL, "4.50 bpw non-linear quantization"),
    _p("IQ4_XS", F.MOSTLY_IQ4_XS, T.IQ4_XS, "4.25 bpw non-linear quantization"),
    _p("Q4_K", F.MOSTLY_Q4_K_M, T.Q4_K, "alias for Q4_K_M"),
    _p("Q4_K_S", F.MOSTLY_Q4_K_S, T.Q4_K, "4.37G, +0.2689 ppl @ Llama-3-8B"),
    _p("Q4_K_M", F.MOSTLY_Q4_K_M, T.Q4_K, "4.58G, +0.1754 ppl @ Llama-3-8B"),
    _p("Q5_K", F.MOSTLY_Q5_K_M, T.Q5_K, "alias for Q5_K_M"),
    _p("Q5_K_S", F.MOSTLY_Q5_K_S, T.Q5_K, "5.21G, +0.1049 ppl @ Llama-3-8B"),
    _p("Q5_K_M", F.MOSTLY_Q5_K_M, T.Q5_K, "5.33G, +0.0569 ppl @ Llama-3-8B"),
    _p("Q6_K", F.MOSTLY_Q6_K, T.Q6_K, "6.14G, +0.0217 ppl @ Llama-3-8B"),
    _p("Q8_0", F.MOSTLY_Q8_0, T.Q8_0, "7.96G, +0.0026 ppl @ Llama-3-8B"),
    _p("F16", F.MOSTLY_F16, T.F16, "14.00G, +0.0020 ppl @ Mistral-7B"),
    _p("BF16", F.MOSTLY_BF16, T.BF16, "14.00G, -0.0050 ppl @ Mistral-7B"),
    _p("F32", F.ALL_F32, T.F32, "26.00G              @ 7B"),
    _p("COPY", F.ALL_F32, T.F32, "only copy tensors, no quantizing"),
)
"""``llama-quantize``'s type names, in its order (``Q3_K``, ``Q4_K``, ``Q5_K`` are its aliases of the _M mixes)."""

_BY_NAME = {p.name: p for p in PRESETS}


def preset_names() -> list[str]:
    """The names :func:`preset` takes, in ``llama-quantize``'s order."""
    return [p.name for p in PRESETS]


def preset(name: str | int | FileType | GGMLType, *, single_types: Iterable[GGMLType] = ()) -> Preset:
    """The preset ``name`` names, as ``llama-quantize`` reads its type argument: a name in any
    case, or a file type number (the first preset of that file type). A :class:`GGMLType`, or
    the name of a type in ``single_types`` that is not a preset name, gives a single-type
    preset (``mix`` False: every quantized tensor that type).

    Raises ``ValueError`` naming the presets (and single types) for anything else.

    >>> preset("q4_k_m").file_type.name, preset("Q4_K").mix_name, preset(15).name, preset("18").name
    ('MOSTLY_Q4_K_M', 'Q4_K_M', 'Q4_K', 'Q6_K')
    >>> p = preset(GGMLType.Q8_K)
    >>> p.name, p.mix, p.file_type
    ('Q8_K', False, None)
    >>> preset("Q4_KM")
    Traceback (most recent call last):
    ValueError: unknown quantization type 'Q4_KM': the presets are Q1_0, Q2_0, Q4_0, Q4_1, MXFP4_MOE, Q5_0, Q5_1, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S, IQ1_M, TQ1_0, TQ2_0, Q2_K, Q2_K_S, IQ3_XXS, IQ3_S, IQ3_M, Q3_K, IQ3_XS, Q3_K_S, Q3_K_M, Q3_K_L, IQ4_NL, IQ4_XS, Q4_K, Q4_K_S, Q4_K_M, Q5_K, Q5_K_S, Q5_K_M, Q6_K, Q8_0, F16, BF16, F32, COPY
    """
    singles = set(single_types)
    if isinstance(name, GGMLType):
        return _single(name)
    if isinstance(name, FileType) or (isinstance(name, int) and not isinstance(name, bool)):
        for p in PRESETS:
            if p.file_type is not None and int(p.file_type) == int(name) and not p.copy:
                return p
        raise ValueError(f"no preset has file type {int(name)}: {_known(singles)}")
    if isinstance(name, str):
        key = name.strip().upper()
        if key in _BY_NAME:
            return _BY_NAME[key]
        if key.isdigit():
            return preset(int(key))
        gt = GGMLType.__members__.get(key)
        if gt is not None and gt in singles:
            return _single(gt)
        raise ValueError(f"unknown quantization type {name!r}: {_known(singles)}")
    raise TypeError(f"a quantization type is a preset name, a file type or a GGMLType, got {type(name).__name__}")


def _known(singles: set[GGMLType]) -> str:
    text = f"the presets are {', '.join(preset_names())}"
    extra = sorted((t for t in singles if t.name not in _BY_NAME), key=int)
    if extra:
        text += f"; single ggml types: {', '.join(t.name for t in extra)}"
    return text


def _single(t: GGMLType) -> Preset:
    same = _BY_NAME.get(t.name)
    ftype = FileType.__members__.get(f"MOSTLY_{t.name}") if same is None else same.file_type
    if t == GGMLType.F32:
        ftype = FileType.ALL_F32
    elif t == GGMLType.MXFP4:
        ftype = FileType.MOSTLY_MXFP4_MOE
    return Preset(t.name, ftype, t, "every quantized tensor " + t.name, mix=False)


_GUESS: dict[GGMLType, FileType] = {
    T.F32: F.ALL_F32,
    T.F16: F.MOSTLY_F16,
    T.BF16: F.MOSTLY_BF16,
    T.Q4_0: F.MOSTLY_Q4_0,
    T.Q4_1: F.MOSTLY_Q4_1,
    T.Q5_0: F.MOSTLY_Q5_0,
    T.Q5_1: F.MOSTLY_Q5_1,
    T.Q8_0: F.MOSTLY_Q8_0,
    T.Q2_K: F.MOSTLY_Q2_K,
    T.Q3_K: F.MOSTLY_Q3_K_M,
    T.Q4_K: F.MOSTLY_Q4_K_M,
    T.Q5_K: F.MOSTLY_Q5_K_M,
    T.Q6_K: F.MOSTLY_Q6_K,
    T.TQ1_0: F.MOSTLY_TQ1_0,
    T.TQ2_0: F.MOSTLY_TQ2_0,
    T.IQ2_XXS: F.MOSTLY_IQ2_XXS,
    T.IQ2_XS: F.MOSTLY_IQ2_XS,
    T.IQ2_S: F.MOSTLY_IQ2_S,
    T.IQ3_XXS: F.MOSTLY_IQ3_XXS,
    T.IQ1_S: F.MOSTLY_IQ1_S,
    T.IQ1_M: F.MOSTLY_IQ1_M,
    T.IQ4_NL: F.MOSTLY_IQ4_NL,
    T.IQ4_XS: F.MOSTLY_IQ4_XS,
    T.IQ3_S: F.MOSTLY_IQ3_S,
    T.NVFP4: F.MOSTLY_NVFP4,
    T.Q1_0: F.MOSTLY_Q1_0,
    T.Q2_0: F.MOSTLY_Q2_0,
}
"""llama.cpp's loader's file type of a model whose most common tensor type is the key (others: ALL_F32)."""


def guessed_file_type(types: Sequence[GGMLType], stored: int | None) -> int:
    """The file type llama.cpp's loader gives a model (what ``COPY`` writes): ``general.file_type``
    when the model has it, else the file type of its most common tensor type (the first to reach
    the highest count, in ``types``' order, which should be :func:`llama_order`) with the GUESSED
    flag (1024) set.

    >>> guessed_file_type([GGMLType.F32, GGMLType.Q8_0, GGMLType.Q8_0], None), guessed_file_type([], 7)
    (1031, 7)
    """
    if stored is not None:
        return int(stored)
    counts: dict[GGMLType, int] = {}
    best, top = GGMLType.F32, 0
    for t in types:
        counts[t] = counts.get(t, 0) + 1
        if counts[t] > top:
            top, best = counts[t], t
    return int(_GUESS.get(best, FileType.ALL_F32)) | int(FileType.GUESSED)


# --------------------------------------------------------------------------- never quantized

NEVER_QUANTIZED: tuple[str, ...] = (
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
)
"""Name parts of tensors ``llama-quantize`` never quantizes: norms, MoE routers and DeepSeek-V4's
routing table, Gemma-3n's small AltUp/Laurel/per-layer matrices, Mamba/LFM2 convolutions,
MiniMax's indexer projections, RWKV's small time-mix matrices, T5's relative position bias,
vision and audio encoders' position and patch embeddings and codebooks."""

NEVER_QUANTIZED_NAMES = frozenset({"position_embd.weight", "token_types.weight"})
"""Whole names never quantized: position embeddings and BERT's token types."""

NEVER_QUANTIZED_BY_ARCH: Mapping[str, tuple[str, ...]] = {
    "glm5-next": (
        "hc_",
        "indexer.attn_q_b",
        "indexer.attn_k",
        "indexer.proj",
        "indexer_compressor_gate",
        "indexer_compressor_ape",
        "ssm_f_a.weight",
        "ssm_f_b.weight",
        "ssm_g_a.weight",
        "ssm_g_b.weight",
        "ssm_beta.weight",
        "attn_kv_a_mqa.weight",
        "attn_k_b.weight",
        "attn_v_b.weight",
    ),
}
"""More name parts never quantized, for one architecture."""


def never_quantized(name: str, arch: str) -> str | None:
    """The rule (name part) that keeps tensor ``name`` as it is, or None.

    >>> never_quantized("blk.0.attn_norm.weight", "llama"), never_quantized("blk.0.attn_q.weight", "llama")
    ('_norm.weight', None)
    """
    if name in NEVER_QUANTIZED_NAMES:
        return name
    for part in NEVER_QUANTIZED + NEVER_QUANTIZED_BY_ARCH.get(arch, ()):
        if part in name:
            return part
    return None


# --------------------------------------------------------------------------- roles


class Role(enum.Enum):
    """What a tensor does, as llama.cpp's rules tell tensors apart (by name)."""

    TOKEN_EMBD = "token_embd"
    ATTN_Q = "attn_q"
    ATTN_V = "attn_v"
    ATTN_K = "attn_k"
    ATTN_QKV = "attn_qkv"
    ATTN_KV_B = "attn_kv_b"
    ATTN_OUTPUT = "attn_output"
    FFN_UP = "ffn_up"
    FFN_GATE = "ffn_gate"
    FFN_DOWN = "ffn_down"
    OUTPUT = "output"
    OTHER = "other"


_ROLE_NAMES: tuple[tuple[Role, tuple[str, ...], bool], ...] = (
    (Role.OUTPUT, ("output.weight",), True),
    (Role.TOKEN_EMBD, ("token_embd.weight", "per_layer_token_embd.weight"), True),
    (Role.ATTN_QKV, ("attn_qkv.weight",), False),
    (Role.ATTN_KV_B, ("attn_kv_b.weight",), False),
    (Role.ATTN_V, ("attn_v.weight",), False),
    (Role.ATTN_K, ("attn_k.weight",), False),
    (Role.ATTN_Q, ("attn_q.weight",), False),
    (Role.ATTN_OUTPUT, ("attn_output.weight",), False),
    (Role.FFN_UP, ("ffn_up",), False),
    (Role.FFN_GATE, ("ffn_gate",), False),
    (Role.FFN_DOWN, ("ffn_down",), False),
)
"""(role, names, whole name?): the first row whose name is the tensor's (or a part of it) gives its role."""

ATTN_V_LIKE = frozenset({Role.ATTN_V, Role.ATTN_QKV, Role.ATTN_KV_B})
"""Roles llama.cpp treats as attention V (the tensors most sensitive to quantization)."""


def role_of(name: str) -> Role:
    """The role of tensor ``name``.

    >>> role_of("blk.3.ffn_down_exps.weight"), role_of("output.weight"), role_of("blk.0.attn_k.bias")
    (<Role.FFN_DOWN: 'ffn_down'>, <Role.OUTPUT: 'output'>, <Role.OTHER: 'other'>)
    """
    for role, names, whole in _ROLE_NAMES:
        if any(name == n if whole else n in name for n in names):
            return role
    return Role.OTHER


_LAYER = re.compile(r"blk\.[ \t\n\v\f\r]*([+-]?\d+)")


def layer_of(name: str) -> int | None:
    """The layer number a name starts with (``blk.N.``), as llama.cpp reads it, or None."""
    m = _LAYER.match(name)
    return int(m.group(1)) if m else None


def llama_order(names: Iterable[str]) -> list[str]:
    """Names in the order ``llama-quantize`` writes them: by layer (names outside a layer first),
    then by name, byte for byte.

    >>> llama_order(["output.weight", "blk.10.a", "blk.2.b", "blk.2.a", "token_embd.weight"])
    ['output.weight', 'token_embd.weight', 'blk.2.a', 'blk.2.b', 'blk.10.a']
    """

    def key(n: str) -> tuple[int, bytes]:
        layer = layer_of(n)
        return (-1 if layer is None else layer, n.encode("utf-8", "surrogateescape"))

    return sorted(names, key=key)


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class ModelFacts:
    """What llama.cpp's rules ask of a model, from its metadata keys (``ARCH.block_count`` ...).

    Attributes:
        arch: ``general.architecture``.
        n_layer_all: ``ARCH.block_count`` (with the next-token prediction layers).
        n_layer: the layers without ``ARCH.nextn_predict_layers``.
        n_head, n_head_kv: attention heads and KV heads of layer 0 (``ARCH.attention.head_count``,
            ``ARCH.attention.head_count_kv``, which defaults to the former).
        n_expert: ``ARCH.expert_count`` (0 without).
    """

    arch: str
    n_layer_all: int = 0
    n_layer: int = 0
    n_head: int = 0
    n_head_kv: int = 0
    n_expert: int = 0

    @property
    def gqa(self) -> int:
        """Attention heads per KV head (llama.cpp's ``n_gqa()``; 0 without KV heads)."""
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @property
    def is_70b(self) -> bool:
        """llama.cpp's "70B" model class (its rules give such models' attention V more bits)."""
        rule = LLM_TYPE_70B.get(self.arch)
        return rule is not None and rule(self)

    @classmethod
    def of(cls, metadata: Mapping[str, Any], tensor_names: Iterable[str] = ()) -> tuple[ModelFacts, list[str]]:
        """The facts of a model from its metadata, and notes on what it lacks. Without
        ``ARCH.block_count`` (llama.cpp refuses such a model) the layers are counted from the
        tensor names."""
        notes = []
        arch = metadata.get(K.GENERAL_ARCHITECTURE)
        arch = arch if isinstance(arch, str) else ""

        def number(key: str, default: int = 0) -> int:
            v: Any = metadata.get(f"{arch}.{key}", default)
            if isinstance(v, bool):
                return default
            if not isinstance(v, (int, float)):
                items: Any = v
                try:
                    v = next(iter(items))  # a per-layer array: layer 0's
                except (TypeError, StopIteration):
                    return default
            try:
                return int(v)
            except (TypeError, ValueError, OverflowError):
                return default

        n_all = number("block_count", -1)
        if n_all < 0:
            layers = {layer_of(n) for n in tensor_names} - {None}
            n_all = max((x for x in layers if x is not None), default=-1) + 1
            notes.append(
                f"the model has no {arch or 'ARCH'}.block_count: {n_all} layer{'s' if n_all != 1 else ''} counted "
                "from tensor names"
            )
        head = number("attention.head_count")
        facts = cls(
            arch=arch,
            n_layer_all=n_all,
            n_layer=n_all - number("nextn_predict_layers"),
            n_head=head,
            n_head_kv=number("attention.head_count_kv", head),
            n_expert=number("expert_count"),
        )
        return facts, notes


LLM_TYPE_70B: Mapping[str, Callable[[ModelFacts], bool]] = {
    "llama": lambda m: m.n_layer == 80 and m.n_head != m.n_head_kv and m.n_expert != 8,
    "qwen2": lambda m: m.n_layer == 80,
    "deci": lambda m: m.n_layer == 80,
    "olmo": lambda m: m.n_layer == 80,
    "jais2": lambda m: m.n_layer == 68,
}
"""The architectures whose loader calls some models "70B" (by layer count), and when."""


# --------------------------------------------------------------------------- the mixes


@dataclass
class Situation:
    """One tensor as a rule sees it: its name, role and row length, the model, the preset, the
    candidate type, and where the tensor stands among its kind (llama.cpp's running counters)."""

    name: str
    role: Role
    row: int
    n_mat: int
    type: GGMLType
    preset: str
    model: ModelFacts
    has_imatrix: bool
    tied: bool
    """the model has no ``output.weight``: its token embeddings are its output too"""
    output_type: GGMLType | None
    """``--output-tensor-type``"""
    i_attn_v: int
    n_attn_v: int
    counter: int
    """how many tensors of this role (ffn_down, ffn_gate, ffn_up) the rules saw before this one"""

    @property
    def layer(self) -> int:
        """The layer llama.cpp uses for this FFN tensor: its counter, or for a mixture of experts
        the number in its name (a name without one is an error, as in llama.cpp)."""
        if self.model.n_expert <= 1:
            return self.counter
        i = layer_of(self.name)
        if i is None:
            raise GGUFBuildError(f"failed to determine the layer of tensor {self.name!r}", value=self.name)
        if not 0 <= i < self.model.n_layer_all:
            raise GGUFBuildError(
                f"bad layer {i} for tensor {self.name!r}: must be in [0, {self.model.n_layer_all})", value=i
            )
        return i

    @property
    def n_layer(self) -> int:
        return self.model.n_layer_all

    def more_bits(self, i: int, n: int) -> bool:
        """llama.cpp's ``use_more_bits``: the first and last eighth of the layers and every third between."""
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


Pick = Callable[[Situation], GGMLType | None]


@dataclass(frozen=True)
class PlanRule:
    """``to`` for the tensors of ``roles`` (None: any) under ``presets`` (None: any) when ``when``
    holds (None: always). ``to`` is a type, or a function of the situation (None: keep the candidate)."""

    presets: frozenset[str] | None
    roles: frozenset[Role] | None
    when: Callable[[Situation], bool] | None
    to: GGMLType | Pick
    why: str

    def applies(self, s: Situation) -> bool:
        return (
            (self.presets is None or s.preset in self.presets)
            and (self.roles is None or s.role in self.roles)
            and (self.when is None or self.when(s))
        )

    def type_for(self, s: Situation) -> GGMLType | None:
        return self.to if isinstance(self.to, GGMLType) else self.to(s)


@dataclass(frozen=True)
class Section:
    """A branch of llama.cpp's choice: the first section whose ``guard`` holds decides; in it the
    first rule that applies gives the type (none: the candidate stays); then each of ``after``
    that applies changes the result."""

    name: str
    guard: Callable[[Situation], bool]
    rules: tuple[PlanRule, ...]
    after: tuple[PlanRule, ...] = ()
    counts: frozenset[Role] = frozenset()
    """the roles whose running counter (``Situation.i_attn_v``, ``counter``) this section advances"""
    layered: bool = False
    """the section reads the tensor's layer (for a mixture of experts, from its name) before any rule"""


def R(
    presets: str | None,
    roles: Role | frozenset[Role] | None,
    to: GGMLType | Pick,
    why: str,
    when: Callable[[Situation], bool] | None = None,
) -> PlanRule:
    """A rule: ``presets`` space-separated (or None), ``roles`` one role, a set, or None."""
    ps = frozenset(presets.split()) if presets is not None else None
    rs = frozenset({roles}) if isinstance(roles, Role) else roles
    return PlanRule(ps, rs, when, to, why)


def _in(*names: str) -> Callable[[Situation], bool]:
    wanted = frozenset(" ".join(names).split())
    return lambda s: s.preset in wanted


IQ_LOW = "IQ2_XXS IQ2_XS IQ1_S IQ2_S IQ2_M IQ1_M"
"""The presets of llama.cpp's own low-bit IQ branch."""
_LOW_OUTPUT = "IQ2_XXS IQ2_XS IQ3_XXS IQ1_S IQ2_S IQ2_M IQ1_M"
_FLOATS = frozenset({T.F32, T.F16, T.BF16})
_V, _K, _Q, _O = ATTN_V_LIKE, Role.ATTN_K, Role.ATTN_Q, Role.ATTN_OUTPUT
_DOWN, _GATE, _UP = Role.FFN_DOWN, Role.FFN_GATE, Role.FFN_UP


def _more_bits_v(s: Situation) -> bool:
    return s.more_bits(s.i_attn_v, s.n_attn_v)


def _more_bits_layer(s: Situation) -> bool:
    return s.more_bits(s.layer, s.n_layer)


def _first_eighth(s: Situation) -> bool:
    return s.layer < s.n_layer // 8


def _middle(s: Situation) -> bool:
    return s.n_layer // 8 <= s.layer < 7 * s.n_layer // 8


def _gqa4(s: Situation) -> bool:
    return s.model.gqa >= 4


def _experts8(s: Situation) -> bool:
    return s.model.n_expert == 8


def _falcon(s: Situation) -> bool:
    return s.model.arch == "falcon"


SECTIONS: tuple[Section, ...] = (
    Section(
        "glm5-next attention projections",
        lambda s: (
            s.model.arch == "glm5-next"
            and s.type not in _FLOATS
            and any(p in s.name for p in ("attn_q_a", "attn_q_b", "nextn.eh_proj"))
        ),
        (R(None, None, T.Q8_0, "glm5-next: attn_q_a, attn_q_b, nextn.eh_proj at Q8_0"),),
    ),
    Section(
        "output",
        lambda s: s.role == Role.OUTPUT or (s.tied and s.role == Role.TOKEN_EMBD),
        (
            R(
                None,
                None,
                lambda s: s.output_type,
                "--output-tensor-type (tied token embeddings)",
                lambda s: s.output_type is not None,
            ),
            R("MXFP4_MOE", None, T.Q8_0, "output: Q8_0"),
            R(
                None,
                None,
                T.Q8_0,
                "output: Q8_0 (falcon, or rows not whole blocks)",
                lambda s: _falcon(s) or s.row % s.type.block_size != 0,
            ),
            R(_LOW_OUTPUT, None, T.Q5_K, "output: Q5_K"),
            R(None, None, T.Q6_K, "output: Q6_K", lambda s: s.type != T.Q8_0),
        ),
    ),
    Section(
        "mixture of experts in MXFP4",
        lambda s: s.preset == "MXFP4_MOE",
        (
            R(
                None,
                None,
                T.MXFP4,
                "expert tensors MXFP4",
                lambda s: s.n_mat > 1 and (s.model.arch != "bailingmoe3" or s.role in (_UP, _GATE, _DOWN)),
            ),
            R(None, None, T.Q8_0, "tensors not of experts: Q8_0"),
        ),
    ),
    Section(
        "token embeddings",
        lambda s: s.role == Role.TOKEN_EMBD,
        (
            R("IQ2_XXS IQ2_XS IQ1_S IQ1_M", None, T.Q2_K, "token_embd: Q2_K"),
            R("IQ2_S IQ2_M IQ3_XXS", None, T.IQ3_S, "token_embd: IQ3_S"),
            R("TQ1_0 TQ2_0 Q2_0", None, T.Q4_K, "token_embd: Q4_K"),
        ),
    ),
    Section(
        "low-bit IQ mixes",
        _in(IQ_LOW),
        (
            R(
                None,
                _V,
                T.Q4_K,
                "attn_v: Q4_K with GQA >= 4 or 4 experts or more",
                lambda s: _gqa4(s) or s.model.n_expert >= 4,
            ),
            R("IQ2_S IQ2_M", _V, T.IQ3_S, "attn_v: IQ3_S"),
            R(None, _V, T.Q2_K, "attn_v: Q2_K"),
            R(None, _K, T.Q4_K, "attn_k with 8 experts: Q4_K", _experts8),
            R(
                "IQ2_S IQ2_M",
                _DOWN,
                T.IQ3_S,
                "ffn_down of the first eighth: IQ3_S",
                lambda s: s.counter < s.n_layer // 8,
            ),
            R(None, _DOWN, T.Q2_K, "ffn_down of the first eighth: Q2_K", lambda s: s.counter < s.n_layer // 8),
            R(None, _O, T.Q5_K, "attn_output with 8 experts: Q5_K", _experts8),
            R("IQ1_S IQ1_M", _O, T.IQ2_XXS, "attn_output: IQ2_XXS"),
            R("IQ2_S IQ2_M", _O, T.IQ3_S, "attn_output: IQ3_S"),
        ),
        counts=_V | {_DOWN},
    ),
    Section(
        "attention V",
        lambda s: s.role in _V,
        (
            R("Q2_K", None, lambda s: T.Q4_K if _gqa4(s) else T.Q3_K, "attn_v: Q3_K (Q4_K with GQA >= 4)"),
            R("Q2_K_S", None, T.Q4_K, "attn_v with GQA >= 4: Q4_K", _gqa4),
            R(
                "IQ3_XXS",
                None,
                lambda s: T.Q4_K if _gqa4(s) else T.IQ3_XXS if s.has_imatrix else T.IQ3_S,
                "attn_v: Q4_K with GQA >= 4, else IQ3_S without an importance matrix",
            ),
            R("IQ3_XS IQ3_S", None, T.Q4_K, "attn_v with GQA >= 4: Q4_K", _gqa4),
            R("IQ3_M", None, T.Q4_K, "attn_v: Q4_K"),
            R(
                "Q3_K_M",
                None,
                lambda s: T.Q5_K if s.i_attn_v < 2 else T.Q4_K,
                "attn_v: Q5_K in the first two, then Q4_K",
            ),
            R("Q3_K_L", None, T.Q5_K, "attn_v: Q5_K"),
            R("IQ4_NL IQ4_XS", None, T.Q5_K, "attn_v with GQA >= 4: Q5_K", _gqa4),
            R(
                "Q4_K_M Q5_K_M",
                None,
                T.Q6_K,
                "attn_v: Q6_K in the first and last eighth of the layers and every third between",
                _more_bits_v,
            ),
            R("Q4_K_S", None, T.Q5_K, "attn_v: Q5_K in the first four", lambda s: s.i_attn_v < 4),
        ),
        after=(
            R(
                None,
                None,
                T.Q5_K,
                "attn_v of a 70B model: Q5_K",
                lambda s: s.model.is_70b and s.type in (T.Q3_K, T.Q4_K),
            ),
            R(None, None, T.Q8_0, "attn_v with 8 experts: Q8_0", _experts8),
        ),
        counts=_V,
    ),
    Section(
        "attention K",
        lambda s: s.role == _K,
        (
            R(None, None, T.Q8_0, "attn_k with 8 experts: Q8_0", _experts8),
            R("IQ3_XS", None, T.IQ3_XXS, "attn_k: IQ3_XXS"),
            R("IQ3_XXS", None, T.IQ2_S, "attn_k: IQ2_S"),
        ),
    ),
    Section(
        "attention Q",
        lambda s: s.role == _Q,
        (R("IQ3_XS", None, T.IQ3_XXS, "attn_q: IQ3_XXS"), R("IQ3_XXS", None, T.IQ2_S, "attn_q: IQ2_S")),
    ),
    Section(
        "FFN down",
        lambda s: s.role == _DOWN,
        (
            R("Q2_K", None, T.Q3_K, "ffn_down: Q3_K"),
            R("Q2_K_S", None, T.Q4_K, "ffn_down of the first eighth: Q4_K", _first_eighth),
            R(
                "IQ3_XXS",
                None,
                lambda s: T.Q4_K if _first_eighth(s) else T.Q3_K,
                "ffn_down without an importance matrix: Q4_K in the first eighth, else Q3_K",
                lambda s: not s.has_imatrix,
            ),
            R(
                "Q3_K_M",
                None,
                lambda s: (
                    T.Q5_K if s.layer < s.n_layer // 16 else T.Q4_K if not _falcon(s) or _more_bits_layer(s) else T.Q3_K
                ),
                "ffn_down: Q5_K in the first sixteenth, then Q4_K",
            ),
            R(
                "IQ3_M",
                None,
                T.Q4_K,
                "ffn_down: Q4_K in the first eighth (with 8 experts, more)",
                lambda s: _first_eighth(s) or (_experts8(s) and _more_bits_layer(s)),
            ),
            R("Q3_K_L", None, lambda s: T.Q4_K if _falcon(s) else T.Q5_K, "ffn_down: Q5_K"),
            R(
                "Q4_K_M",
                None,
                lambda s: (
                    (T.Q6_K if s.layer < s.n_layer // 16 else T.Q5_K if _more_bits_layer(s) else T.Q4_K)
                    if _falcon(s)
                    else T.Q6_K
                    if _more_bits_layer(s)
                    else None
                ),
                "ffn_down: Q6_K in the first and last eighth of the layers and every third between",
            ),
            R(
                "IQ4_NL IQ4_XS",
                None,
                T.Q5_K,
                "ffn_down of the first eighth without an importance matrix: Q5_K",
                lambda s: _first_eighth(s) and not s.has_imatrix,
            ),
            R(
                "Q5_K_M",
                None,
                T.Q6_K,
                "ffn_down: Q6_K in the first and last eighth of the layers and every third between",
                _more_bits_layer,
            ),
            R(
                "Q4_K_S",
                None,
                T.Q5_K,
                "ffn_down of the first eighth: Q5_K",
                lambda s: not _falcon(s) and _first_eighth(s),
            ),
            R(
                "Q4_0",
                None,
                T.Q4_1,
                "ffn_down of the first eighth, with an importance matrix: Q4_1",
                lambda s: s.has_imatrix and _first_eighth(s),
            ),
            R(
                "Q5_0",
                None,
                T.Q5_1,
                "ffn_down of the first eighth, with an importance matrix: Q5_1",
                lambda s: s.has_imatrix and _first_eighth(s),
            ),
        ),
        counts=frozenset({_DOWN}),
        layered=True,
    ),
    Section(
        "attention output",
        lambda s: s.role == _O,
        (
            R(
                "Q2_K IQ3_XS IQ3_XXS Q3_K_S Q3_K_M IQ4_NL Q4_K_S Q4_K_M IQ3_S IQ3_M IQ4_XS",
                None,
                T.Q5_K,
                "attn_output with 8 experts: Q5_K",
                lambda s: not _falcon(s) and _experts8(s),
            ),
            R(None, None, lambda s: None, "", lambda s: not _falcon(s) and _experts8(s)),
            R("Q2_K", None, T.Q3_K, "attn_output: Q3_K", lambda s: not _falcon(s)),
            R("IQ3_XXS", None, T.IQ3_S, "attn_output: IQ3_S", lambda s: not _falcon(s)),
            R("Q3_K_M IQ3_M", None, T.Q4_K, "attn_output: Q4_K", lambda s: not _falcon(s)),
            R("Q3_K_L", None, lambda s: T.Q4_K if _falcon(s) else T.Q5_K, "attn_output: Q5_K (falcon: Q4_K)"),
        ),
    ),
    # (llama.cpp's branch for attn_qkv comes after that of attention V, which takes attn_qkv first: it never applies)
    Section(
        "FFN gate",
        lambda s: s.role == _GATE,
        (R("IQ3_XS", None, T.IQ3_XXS, "ffn_gate of the middle layers: IQ3_XXS", _middle),),
        counts=frozenset({_GATE}),
        layered=True,
    ),
    Section(
        "FFN up",
        lambda s: s.role == _UP,
        (R("IQ3_XS", None, T.IQ3_XXS, "ffn_up of the middle layers: IQ3_XXS", _middle),),
        counts=frozenset({_UP}),
        layered=True,
    ),
)
"""llama.cpp's mixes (``llama_tensor_get_type_impl``): the first section whose guard holds decides."""


# --------------------------------------------------------------------------- fallbacks

FALLBACK: Mapping[GGMLType, GGMLType] = {
    **dict.fromkeys((T.IQ1_S, T.IQ1_M, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ4_XS), T.IQ4_NL),
    **dict.fromkeys((T.Q2_0, T.Q2_K, T.Q3_K, T.TQ1_0, T.TQ2_0), T.Q4_0),
    T.Q4_K: T.Q5_0,
    T.Q5_K: T.Q5_1,
    T.Q6_K: T.Q8_0,
}
"""The type a tensor falls back to when its rows are not whole blocks of the chosen type; when
that does not fit either, or the chosen type has blocks of 32 or fewer and no entry, F16. A type
of larger blocks without an entry (NVFP4, Q1_0, Q8_K) has no fallback: llama.cpp refuses."""


def fallback(name: str, row: int, t: GGMLType) -> tuple[GGMLType, str | None]:
    """The type of a tensor of rows of ``row`` elements for which ``t`` was chosen, and why it
    fell back (None: it did not).

    >>> fallback("w", 640, GGMLType.Q4_K)
    (<GGMLType.Q5_0: 6>, 'rows of 640 are not whole Q4_K blocks (256): fallback Q5_0')
    >>> fallback("w", 40, GGMLType.Q8_0)[0].name
    'F16'
    """
    if not t.quantized or row % t.block_size == 0:
        return t, None
    why = f"rows of {row} are not whole {t.name} blocks ({t.block_size})"
    to = FALLBACK.get(t)
    if to is None:
        if t.block_size > 32:
            raise GGUFBuildError(
                f"{why}, and llama.cpp has no fallback for {t.name}: choose a type for it with "
                f"--tensor-type / tensor_types (F16, BF16 and F32 fit any row)",
                path=f"tensor {name!r}",
                value=row,
            )
        return T.F16, f"{why}: fallback F16"
    if row % to.block_size:
        return T.F16, f"{why}, nor {to.name}'s ({to.block_size}): fallback F16"
    return to, f"{why}: fallback {to.name}"


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class PlanOptions:
    """``llama-quantize``'s options that change the plan.

    Attributes:
        pure: no mix: every quantized tensor the preset's default type (``--pure``).
        output_tensor_type: the type of ``output.weight`` (``--output-tensor-type``), and of
            tied token embeddings when ``token_embedding_type`` is not given.
        token_embedding_type: the type of ``token_embd.weight`` and ``per_layer_token_embd.weight``
            (``--token-embedding-type``; a ``tensor_types`` pattern that matches
            ``per_layer_token_embd.weight`` wins over it).
        tensor_types: ``(regular expression, type)``: a quantized tensor whose name the first
            matching expression is found in gets that type (``--tensor-type``), then its fallback.
        leave_output_tensor: keep ``output.weight`` as it is (``--leave-output-tensor``).
        has_imatrix: an importance matrix with entries is given (some rules depend on it).
        keep_1d: keep tensors of one dimension (llama.cpp always does; False is this library's extension).
    """

    pure: bool = False
    output_tensor_type: GGMLType | None = None
    token_embedding_type: GGMLType | None = None
    tensor_types: tuple[tuple[str, GGMLType], ...] = ()
    leave_output_tensor: bool = False
    has_imatrix: bool = False
    keep_1d: bool = True


@dataclass
class Choice:
    """The plan of one tensor.

    Attributes:
        name: the tensor's name.
        type: the type it is written as.
        requested: the type chosen before any fallback (None: the tensor is not quantized).
        why: why it gets ``type``.
        fallback: why it fell back (None: it did not).
        pattern: the ``tensor_types`` expression that chose its type (None: none did).
    """

    name: str
    type: GGMLType
    requested: GGMLType | None
    why: str
    fallback: str | None = None
    pattern: str | None = None


def _n_dims(dims: Sequence[int]) -> int:
    """ggml's ``ggml_n_dims``: dimensions up to the last one larger than 1 (at least 1)."""
    for i in range(len(dims) - 1, 0, -1):
        if dims[i] > 1:
            return i + 1
    return 1


def _is_numbers(t: GGMLType) -> bool:
    return t.quantized or t in (T.F32, T.F16, T.BF16, T.F64)


def plan_types(
    tensors: Iterable[tuple[str, Sequence[int], GGMLType]],
    p: Preset,
    model: ModelFacts,
    options: PlanOptions = PlanOptions(),
) -> list[Choice]:
    """The type of every tensor, in the order given (which should be the order llama-quantize
    processes them in: :func:`llama_order`, or the shards' order for ``--keep-split``).

    Args:
        tensors: ``(name, ggml dims (innermost first), type)``.
        p: the preset.
        model: the model's facts.
        options: the options that change the plan.

    Raises:
        GGUFBuildError: a row no type fits (and no fallback), an FFN tensor of a mixture of experts
            without a layer in its name.
    """
    items = [(name, tuple(int(d) for d in dims), t, role_of(name)) for name, dims, t in tensors]
    patterns = [(compile_ecmascript(rx), rx, t) for rx, t in options.tensor_types]  # llama-quantize's std::regex
    tied = not any(name == "output.weight" for name, _, _, _ in items)
    n_attn_v = sum(role in ATTN_V_LIKE for _, _, _, role in items)
    counters = {role: 0 for role in Role}
    out = []
    for name, dims, t, role in items:
        keep = _kept(name, dims, t, p, model, options)
        if keep is not None:
            out.append(Choice(name, t, None, keep))
            continue
        raw = name.encode("utf-8", "surrogateescape")  # std::regex_search runs over the name's bytes
        matched = next(((rx, to) for c, rx, to in patterns if c.search(raw)), None)
        given = None
        if options.token_embedding_type is not None and role == Role.TOKEN_EMBD:
            if name != "per_layer_token_embd.weight" or matched is None:
                given = ("--token-embedding-type", options.token_embedding_type)
        elif options.output_tensor_type is not None and role == Role.OUTPUT:
            given = ("--output-tensor-type", options.output_tensor_type)
        if given is not None:  # as given: llama.cpp applies no fallback (and aborts where the rows do not fit)
            option, to = given
            row = dims[0] if dims else 1
            if to.quantized and row % to.block_size:
                raise GGUFBuildError(
                    f"{option} {to.name} does not fit {name}: rows of {row} are not whole {to.name} blocks "
                    f"({to.block_size}) (llama-quantize aborts here); choose another type",
                    path=f"tensor {name!r}",
                    value=to.name,
                )
            out.append(Choice(name, to, to, option))
            continue
        if not p.default.quantized:
            out.append(Choice(name, p.default, p.default, f"{p.name}: every tensor {p.default.name}"))
            continue
        pattern = None
        if matched is not None:
            pattern, want = matched
            why = f"--tensor-type {pattern}={want.name}"
        elif options.pure or not p.mix:
            want, why = p.default, f"{p.name}: every tensor {p.default.name}" + (" (--pure)" if options.pure else "")
        else:
            want, why = _mix(name, role, dims, p, model, options, tied, counters, n_attn_v)
        got, fell = fallback(name, dims[0] if dims else 1, want)
        out.append(Choice(name, got, want, why if fell is None else f"{why}; {fell}", fell, pattern))
    return out


def _kept(
    name: str, dims: tuple[int, ...], t: GGMLType, p: Preset, model: ModelFacts, options: PlanOptions
) -> str | None:
    """Why llama.cpp copies a tensor as it is (``tensor_allows_quantization``), or None."""
    if p.copy:
        return "kept: COPY"
    if not _is_numbers(t):
        return f"kept: {t.name} data"
    if _n_dims(dims) < 2 and options.keep_1d:
        return "kept: 1-D"
    if not name.endswith("weight"):
        return "kept: not a weight"
    rule = never_quantized(name, model.arch)
    if rule is not None:
        return f"kept: never quantized ({rule})"
    if options.leave_output_tensor and name == "output.weight":
        return "kept: --leave-output-tensor"
    return None


def _mix(
    name: str,
    role: Role,
    dims: tuple[int, ...],
    p: Preset,
    model: ModelFacts,
    options: PlanOptions,
    tied: bool,
    counters: dict[Role, int],
    n_attn_v: int,
) -> tuple[GGMLType, str]:
    s = Situation(
        name=name,
        role=role,
        row=dims[0] if dims else 1,
        n_mat=dims[2] if len(dims) > 2 else 1,
        type=p.default,
        preset=p.mix_name,
        model=model,
        has_imatrix=options.has_imatrix,
        tied=tied,
        output_type=options.output_tensor_type,
        i_attn_v=counters[Role.ATTN_V],
        n_attn_v=n_attn_v,
        counter=counters[role],
    )
    why = f"{p.name}: the default type"
    for section in SECTIONS:
        if not section.guard(s):
            continue
        if section.layered:
            _ = s.layer  # llama.cpp reads it first (and fails for an expert tensor outside a layer)
        for rule in section.rules:
            if rule.applies(s):
                to = rule.type_for(s)
                if to is not None and to != s.type:
                    s.type, why = to, f"{p.name}: {rule.why}"
                break
        for rule in section.after:
            if rule.applies(s):
                to = rule.type_for(s)
                if to is not None and to != s.type:
                    s.type, why = to, f"{p.name}: {rule.why}"
        if role in section.counts:
            counters[Role.ATTN_V if role in ATTN_V_LIKE else role] += 1
        break
    return s.type, why


def requires_imatrix(name: str, t: GGMLType, p: Preset) -> bool:
    """Whether ``llama-quantize`` refuses to quantize tensor ``name`` to ``t`` without an importance
    matrix (the IQ types below 3 bits, IQ3_XXS, and Q2_K in a Q2_K_S file; never the token
    embeddings and the output).

    >>> requires_imatrix("blk.0.ffn_up.weight", GGMLType.IQ2_S, preset("IQ2_M")), requires_imatrix("output.weight", GGMLType.IQ1_M, preset("IQ1_M"))
    (True, False)
    """
    if name in ("token_embd.weight", "per_layer_token_embd.weight", "output.weight"):
        return False
    if t in (T.IQ3_XXS, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_M, T.IQ1_S):
        return True
    return t == T.Q2_K and p.mix_name == "Q2_K_S"
