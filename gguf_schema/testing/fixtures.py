"""Fixture files for testing GGUF code, each with the verdict a validator profile should give.

This module owns the catalogue of fixture files that ``gguf-schema generate`` writes:

* ``arch`` -- a minimal valid model for every architecture the spec names (llama, mpt,
  gptneox, gptj, gpt2, bloom, falcon, rwkv, whisper, and mamba from the newer key list), with
  the keys the spec requires for it, a small tokenizer and plausible tensors named by the
  spec's convention (``token_embd.weight``, ``blk.N.attn_q.weight`` ...): norms F32, matrices Q8_0;
* ``types`` -- one file per ggml type that is not removed, holding one tensor of valid random
  blocks (finite float16 scales, so every value dequantizes to a finite number), and one file
  with all of them;
* ``edge`` -- valid but unusual files: alignment 1, no tensors, no metadata at all, n_dims 0,
  zero-size dimensions, 63- and 64-byte tensor names, a 300,000-token vocabulary, nested
  arrays, NaN/-0.0/inf metadata, a BOOL byte of 2, a non-ASCII key, big-endian, versions 1 and 2;
* ``malformed`` -- the files of :func:`gguf_schema.testing.malformed.malformed_cases`, one per
  class of malformed file in ggml's reader rules.

Each fixture has an expected verdict per profile: ``spec`` (the spec text: ALIGNMENT a multiple
of 8, version 3, ASCII keys, BOOL bytes 0/1, ``general.architecture`` present, tensor names of at
most 64 bytes; the type table is ggml's, since the spec's enum stops at I32 and is out of date),
``ggml`` (what ggml's ``gguf_init_from_file`` loads on a little-endian host: no big-endian
files, no v1, no nested arrays, names under 64 bytes, alignment a UINT32 power of two) and
``lenient`` (anything this library can read). Descriptions give the reason for each verdict.

>>> fx = {f.name: f for f in fixture_files(kinds=("edge",), small=True)}
>>> fx["edge_alignment_1.gguf"].expected
{'spec': 'reject', 'ggml': 'accept', 'lenient': 'accept'}
>>> import gguf_schema
>>> with gguf_schema.open(fx["edge_ndims_0.gguf"].data) as f:
...     f.tensor_list[0].dims
()
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..durable import atomic_replace
from ..format import keys as K
from ..format.types import GGMLType, ValueType
from ..format.values import BoolByte, GGUFArray, make_field
from ..format.variant import Variant
from ..tensors import LAYOUTS, block_dtype
from ..writer import RawTensor, save
from .malformed import malformed_cases

__all__ = [
    "ARCHITECTURES",
    "KINDS",
    "PROFILES",
    "Fixture",
    "arch_model",
    "fixture_files",
    "generate",
    "manifest_record",
    "random_blocks",
    "random_tensor",
]

KINDS = ("arch", "types", "edge", "malformed")
"""The fixture families ``generate --only`` selects from."""

PROFILES = ("spec", "ggml", "lenient")
"""Validator profiles a manifest line gives a verdict for."""

ACCEPT_ALL = {"spec": "accept", "ggml": "accept", "lenient": "accept"}


@dataclass(frozen=True)
class Fixture:
    """One fixture file: its file name, family, what it is, its bytes and its verdict per profile."""

    name: str
    kind: str
    description: str
    data: bytes
    expected: dict[str, str]


def manifest_record(fx: Fixture) -> dict[str, Any]:
    """The manifest line of a fixture (a JSON object: file, kind, description, expected, size, sha256)."""
    return {
        "file": fx.name,
        "kind": fx.kind,
        "description": fx.description,
        "expected": dict(fx.expected),
        "size": len(fx.data),
        "sha256": hashlib.sha256(fx.data).hexdigest(),
    }


# --------------------------------------------------------------------------- tensor data


def random_blocks(t: GGMLType | int, n_blocks: int, rng: np.random.Generator, byte_order: str = "little") -> np.ndarray:
    """``n_blocks`` valid random blocks of quantized type ``t`` as ``uint8`` bytes in ``byte_order``.

    Quant bits are random; every scale field is a small finite float (float16 ``d``/``dmin``/``m``/``s``,
    float32 for Q8_K, an E8M0 exponent near 1 for MXFP4, an E4M3 scale below NaN for NVFP4, and
    IQ1_M's scale bits kept under the float16 infinity), so dequantized values are finite.

    >>> raw = random_blocks(GGMLType.Q8_0, 3, np.random.default_rng(0))
    >>> raw.dtype, raw.size
    (dtype('uint8'), 102)
    """
    t = GGMLType(t)
    dt = block_dtype(t, byte_order)
    raw = rng.integers(0, 256, size=n_blocks * dt.itemsize, dtype=np.uint8)
    blocks = raw.view(dt)
    for name, kind, count in LAYOUTS[t]:
        if kind in ("f2", "f4"):
            shape = (n_blocks,) if count == 1 else (n_blocks, count)
            blocks[name] = rng.uniform(0.001, 0.05, size=shape).astype(np.float32)
    if t == GGMLType.MXFP4:
        blocks["e"] = rng.integers(118, 130, size=n_blocks, dtype=np.uint8)
    elif t == GGMLType.NVFP4:
        blocks["d"] = rng.integers(0x20, 0x40, size=(n_blocks, 4), dtype=np.uint8)
    elif t == GGMLType.IQ1_M:
        blocks["scales"][:, 7] &= 0xBF  # float16 exponent bit 14 clear: the packed scale stays finite
    return raw


def random_tensor(
    t: GGMLType | int, shape: tuple[int, ...], rng: np.random.Generator, byte_order: str = "little"
) -> RawTensor:
    """A :class:`~gguf_schema.writer.RawTensor` of type ``t`` and numpy ``shape`` with valid random data.

    Floats are normal random numbers (BF16: their upper 16 bits), integers random, quantized
    types :func:`random_blocks`. ``shape[-1]`` must be a multiple of the block size.

    >>> r = random_tensor(GGMLType.BF16, (2, 4), np.random.default_rng(0))
    >>> r.type.name, r.shape, len(r.data)
    ('BF16', (2, 4), 16)
    """
    t = GGMLType(t)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    e = Variant.endian_of(byte_order)
    if t.quantized:
        blocks = n // t.block_size
        data = random_blocks(t, blocks, rng, byte_order)
    elif t == GGMLType.BF16:
        f = rng.standard_normal(n).astype(np.float32)
        data = (f.view(np.uint32) >> 16).astype(np.uint16).astype(e + "u2")
    elif t in (GGMLType.F32, GGMLType.F16, GGMLType.F64):
        dtype = np.dtype(t.numpy_dtype)
        data = rng.standard_normal(n).astype(dtype.newbyteorder(e))
    else:
        dtype = np.dtype(t.numpy_dtype)
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True).astype(dtype.newbyteorder(e))
    return RawTensor(t, tuple(shape), np.ascontiguousarray(data).view(np.uint8).tobytes(), byte_order)


# --------------------------------------------------------------------------- architectures

U32, U64, F32, BOOL, STR = ValueType.UINT32, ValueType.UINT64, ValueType.FLOAT32, ValueType.BOOL, ValueType.STRING

N_VOCAB, N_EMBD, N_FF, N_HEAD, N_CTX, N_BLOCK = 32, 64, 128, 4, 128, 1

#: required keys per architecture (spec text; mamba from the newer key list), as (suffix, type, value)
ARCHITECTURES: dict[str, list[tuple[str, ValueType, Any]]] = {
    "llama": [
        ("context_length", U32, N_CTX),
        ("embedding_length", U32, N_EMBD),
        ("block_count", U32, N_BLOCK),
        ("feed_forward_length", U32, N_FF),
        ("rope.dimension_count", U32, N_EMBD // N_HEAD),
        ("attention.head_count", U32, N_HEAD),
        ("attention.layer_norm_rms_epsilon", F32, 1e-5),
    ],
    "mpt": [
        ("context_length", U32, N_CTX),
        ("embedding_length", U32, N_EMBD),
        ("block_count", U32, N_BLOCK),
        ("attention.head_count", U32, N_HEAD),
        ("attention.alibi_bias_max", F32, 8.0),
        ("attention.clip_kqv", F32, 0.0),
        ("attention.layer_norm_epsilon", F32, 1e-5),
    ],
    "gptneox": [
        ("context_length", U32, N_CTX),
        ("embedding_length", U32, N_EMBD),
        ("block_count", U32, N_BLOCK),
        ("use_parallel_residual", BOOL, True),
        ("rope.dimension_count", U32, N_EMBD // N_HEAD // 4),
        ("attention.head_count", U32, N_HEAD),
        ("attention.layer_norm_epsilon", F32, 1e-5),
    ],
    "gptj": [
        ("context_length", U32, N_CTX),
        ("embedding_length", U32, N_EMBD),
        ("block_count", U32, N_BLOCK),
        ("rope.dimension_count", U32, N_EMBD // N_HEAD // 2),
        ("attention.head_count", U32, N_HEAD),
        ("attention.layer_norm_epsilon", F32, 1e-5),
    ],
    "gpt2": [
        ("context_length", U32, N_CTX),
        ("embedding_length", U32, N_EMBD),
        ("block_count", U32, N_BLOCK),
        ("attention.head_count", U32, N_HEAD),
        ("attention.layer_norm_epsilon", F32, 1e-5),
    ],
    "bloom": [
        ("context_length", U32, N_CTX),
        ("embedding_length", U32, N_EMBD),
        ("block_count", U32, N_BLOCK),
        ("feed_forward_length", U32, N_FF),
        ("attention.head_count", U32, N_HEAD),
        ("attention.layer_norm_epsilon", F32, 1e-5),
    ],
    "falcon": [
        ("context_length", U32, N_CTX),
        ("embedding_length", U32, N_EMBD),
        ("block_count", U32, N_BLOCK),
        ("attention.head_count", U32, N_HEAD),
        ("attention.head_count_kv", U32, 1),
        ("attention.use_norm", BOOL, True),
        ("attention.layer_norm_epsilon", F32, 1e-5),
    ],
    "rwkv": [
        ("architecture_version", U32, 4),
        ("context_length", U32, N_CTX),
        ("block_count", U32, N_BLOCK),
        ("embedding_length", U32, N_EMBD),
        ("feed_forward_length", U32, N_FF),
    ],
    "whisper": [
        ("encoder.context_length", U32, 1500),
        ("encoder.embedding_length", U32, N_EMBD),
        ("encoder.block_count", U32, N_BLOCK),
        ("encoder.mels_count", U64, 80),
        ("encoder.attention.head_count", U32, N_HEAD),
        ("decoder.context_length", U32, 448),
        ("decoder.embedding_length", U32, N_EMBD),
        ("decoder.block_count", U32, N_BLOCK),
        ("decoder.attention.head_count", U32, N_HEAD),
    ],
    "mamba": [
        ("context_length", U32, N_CTX),
        ("embedding_length", U32, N_EMBD),
        ("block_count", U32, N_BLOCK),
        ("ssm.conv_kernel", U32, 4),
        ("ssm.inner_size", U32, 2 * N_EMBD),
        ("ssm.state_size", U32, 16),
        ("ssm.time_step_rank", U32, 4),
        ("attention.layer_norm_rms_epsilon", F32, 1e-5),
    ],
}

_TOKENIZER = {"rwkv": "rwkv", "llama": "llama", "mamba": "gpt2", "whisper": "gpt2"}


def _tensor_shapes(arch: str) -> dict[str, tuple[int, ...]]:
    """Plausible tensor names (the spec's naming) and numpy shapes for one tiny model of ``arch``."""
    E, F, V = N_EMBD, N_FF, N_VOCAB
    s: dict[str, tuple[int, ...]] = {"token_embd.weight": (V, E)}
    blk = "blk.0."
    if arch == "llama":
        s.update(
            {
                blk + "attn_norm.weight": (E,),
                blk + "attn_q.weight": (E, E),
                blk + "attn_k.weight": (E, E),
                blk + "attn_v.weight": (E, E),
                blk + "attn_output.weight": (E, E),
                blk + "ffn_norm.weight": (E,),
                blk + "ffn_gate.weight": (F, E),
                blk + "ffn_up.weight": (F, E),
                blk + "ffn_down.weight": (E, F),
            }
        )
        s.update({"output_norm.weight": (E,), "output.weight": (V, E)})
    elif arch in ("mpt", "bloom", "falcon", "gpt2", "gptneox"):
        bias = arch in ("bloom", "gpt2", "gptneox")
        if arch == "gpt2":
            s["pos_embd.weight"] = (N_CTX, E)
        qkv_rows = E + 2 * (E // N_HEAD) if arch == "falcon" else 3 * E
        layers = {"attn_norm": (E,), "attn_qkv": (qkv_rows, E), "attn_output": (E, E)}
        if arch != "falcon":
            layers["ffn_norm"] = (E,)
        layers.update({"ffn_up": (F, E), "ffn_down": (E, F)})
        for name, shape in layers.items():
            s[blk + name + ".weight"] = shape
            if bias or name == "attn_norm":
                s[blk + name + ".bias"] = (shape[0],)
        s["output_norm.weight"] = (E,)
        s["output_norm.bias"] = (E,)
        if arch in ("falcon", "gptneox", "gpt2"):
            s["output.weight"] = (V, E)
    elif arch == "gptj":
        s.update(
            {
                blk + "attn_norm.weight": (E,),
                blk + "attn_norm.bias": (E,),
                blk + "attn_q.weight": (E, E),
                blk + "attn_k.weight": (E, E),
                blk + "attn_v.weight": (E, E),
                blk + "attn_output.weight": (E, E),
                blk + "ffn_up.weight": (F, E),
                blk + "ffn_up.bias": (F,),
                blk + "ffn_down.weight": (E, F),
                blk + "ffn_down.bias": (E,),
                "output_norm.weight": (E,),
                "output_norm.bias": (E,),
                "output.weight": (V, E),
                "output.bias": (V,),
            }
        )
    elif arch == "rwkv":
        for norm in ("attn_norm", "attn_norm_2"):
            s[blk + norm + ".weight"] = (E,)
            s[blk + norm + ".bias"] = (E,)
        for name in (
            "time_mix_key",
            "time_mix_value",
            "time_mix_receptance",
            "time_mix_output",
            "channel_mix_receptance",
        ):
            s[blk + name + ".weight"] = (E, E)
        s[blk + "channel_mix_key.weight"] = (F, E)
        s[blk + "channel_mix_value.weight"] = (E, F)
        s.update({"output_norm.weight": (E,), "output_norm.bias": (E,), "output.weight": (V, E)})
    elif arch == "whisper":
        s = {}
        for side, ctx in (("enc.", 1500), ("dec.", 448)):
            if side == "dec.":
                s["dec.token_embd.weight"] = (V, E)
            s[side + "pos_embd.weight"] = (ctx, E)
            for name, shape in (
                ("attn_norm", (E,)),
                ("attn_q", (E, E)),
                ("attn_k", (E, E)),
                ("attn_v", (E, E)),
                ("attn_output", (E, E)),
                ("ffn_norm", (E,)),
                ("ffn_up", (F, E)),
                ("ffn_down", (E, F)),
            ):
                s[side + blk + name + ".weight"] = shape
            s[side + "output_norm.weight"] = (E,)
    elif arch == "mamba":
        D, N, R, K = 2 * E, 16, 4, 4
        s.update(
            {
                blk + "attn_norm.weight": (E,),
                blk + "ssm_in.weight": (2 * D, E),
                blk + "ssm_conv1d.weight": (D, K),
                blk + "ssm_conv1d.bias": (D,),
                blk + "ssm_x.weight": (R + 2 * N, D),
                blk + "ssm_dt.weight": (D, R),
                blk + "ssm_dt.bias": (D,),
                blk + "ssm_a": (D, N),
                blk + "ssm_d": (D,),
                blk + "ssm_out.weight": (E, D),
                "output_norm.weight": (E,),
                "output.weight": (V, E),
            }
        )
    return s


def _vocab(n: int, model: str) -> dict[str, Any]:
    base = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(min(256, max(0, n - 3)))]
    words = [f"▁tok{i}" if model == "llama" else f"Ġtok{i}" for i in range(max(0, n - len(base)))]
    tokens = (base + words)[:n]
    types = np.ones(n, np.int32)
    types[:3] = (2, 3, 3)
    types[3 : min(n, 259)] = 6
    out: dict[str, Any] = {
        K.TOKENIZER_GGML_MODEL: model,
        K.TOKENIZER_GGML_TOKENS: tokens,
        K.TOKENIZER_GGML_SCORES: -np.arange(n, dtype=np.float32),
        K.TOKENIZER_GGML_TOKEN_TYPE: types,
        K.TOKENIZER_GGML_BOS_TOKEN_ID: np.uint32(1),
        K.TOKENIZER_GGML_EOS_TOKEN_ID: np.uint32(2),
    }
    if model == "gpt2":
        out[K.TOKENIZER_GGML_MERGES] = ["Ġ t", "Ġt o", "Ġto k"]
    return out


def arch_model(arch: str, seed: int = 0) -> tuple[list, dict[str, RawTensor]]:
    """Metadata fields and tensors of a minimal valid ``arch`` model (see :data:`ARCHITECTURES`).

    >>> fields, tensors = arch_model("llama")
    >>> fields[0].key, fields[0].value, tensors["blk.0.ffn_up.weight"].type.name
    ('general.architecture', 'llama', 'Q8_0')
    """
    rng = np.random.default_rng([seed, sum(arch.encode())])
    meta: list = [
        make_field(K.GENERAL_ARCHITECTURE, arch),
        make_field(K.GENERAL_NAME, f"tiny {arch}"),
        make_field(K.GENERAL_ALIGNMENT, 32, U32),
        make_field(K.GENERAL_QUANTIZATION_VERSION, 2, U32),
        make_field(K.GENERAL_FILE_TYPE, 7, U32),  # MOSTLY_Q8_0
    ]
    meta += [make_field(f"{arch}.{suffix}", value, vt) for suffix, vt, value in ARCHITECTURES[arch]]
    meta += [make_field(k, v) for k, v in _vocab(N_VOCAB, _TOKENIZER.get(arch, "gpt2")).items()]
    tensors = {}
    for name, shape in _tensor_shapes(arch).items():
        t = GGMLType.F32 if len(shape) == 1 else GGMLType.Q8_0 if shape[-1] % 32 == 0 else GGMLType.F16
        tensors[name] = random_tensor(t, shape, rng)
    return meta, tensors


# --------------------------------------------------------------------------- building


def _bytes(metadata: Any, tensors: Any = None, **kw: Any) -> bytes:
    buf = io.BytesIO()
    save(buf, metadata, tensors, **kw)
    return buf.getvalue()


def _base_meta(extra: dict[str, Any] | None = None, *, alignment: int = 32) -> list[Any]:
    """general.* keys, an alignment and the keys the spec requires for llama: what every edge-case file carries."""
    fields = [
        make_field(K.GENERAL_ARCHITECTURE, "llama"),
        make_field(K.GENERAL_ALIGNMENT, alignment, U32),
        make_field(K.GENERAL_QUANTIZATION_VERSION, 2, U32),
    ]
    fields += [make_field(f"llama.{suffix}", value, vt) for suffix, vt, value in ARCHITECTURES["llama"]]
    return fields + [
        make_field(k, v) if not isinstance(v, tuple) else make_field(k, *v) for k, v in (extra or {}).items()
    ]


def _arch_fixtures(seed: int) -> list[Fixture]:
    out = []
    for arch in ARCHITECTURES:
        meta, tensors = arch_model(arch, seed)
        source = (
            "the newer key list (seed 004): mamba is not in the spec's model sections"
            if arch == "mamba"
            else "the spec"
        )
        out.append(
            Fixture(
                f"arch_{arch}.gguf",
                "arch",
                f"minimal valid {arch} model: the {arch}.* keys {source} requires (integers as UINT32, which the spec "
                f"allows), a {N_VOCAB}-token vocabulary, {len(tensors)} tensors named by the spec's convention "
                "(norms F32, matrices Q8_0 with finite scales)",
                _bytes(meta, tensors),
                dict(ACCEPT_ALL),
            )
        )
    return out


def _type_fixtures(seed: int) -> list[Fixture]:
    out = []
    every = {}
    for t in GGMLType:
        if t.removed:
            continue
        rng = np.random.default_rng([seed, int(t)])
        shape = (2, 2 * t.block_size) if t.quantized else (2, 8)
        tensor = random_tensor(t, shape, rng)
        every[f"t.{t.name.lower()}"] = tensor
        meta = _base_meta()
        out.append(
            Fixture(
                f"type_{t.name}.gguf",
                "types",
                f"one {t.name} tensor (id {int(t)}) of shape {shape} with valid random data"
                + (" (finite float scales)" if t.quantized else "")
                + "; the spec profile takes ggml's type table (the spec's enum stops at I32)",
                _bytes(meta, {"t": tensor}),
                dict(ACCEPT_ALL),
            )
        )
    out.append(
        Fixture(
            "types_all.gguf",
            "types",
            "one tensor of every ggml type that is not removed, in id order",
            _bytes(_base_meta(), every),
            dict(ACCEPT_ALL),
        )
    )
    return out


def _verdict(spec: str, ggml: str) -> dict[str, str]:
    return {"spec": spec, "ggml": ggml, "lenient": "accept"}


def _edge_fixtures(seed: int, small: bool) -> list[Fixture]:
    rng = np.random.default_rng([seed, 7])
    f32 = lambda *shape: random_tensor(GGMLType.F32, shape, rng)  # noqa: E731
    out: list[Fixture] = []

    def add(name: str, description: str, data: bytes, expected: dict[str, str]) -> None:
        out.append(Fixture(name, "edge", description, data, expected))

    meta1 = _base_meta(alignment=1)
    add(
        "edge_alignment_1.gguf",
        "general.alignment = 1 (UINT32) with odd-sized tensors packed without gaps: ggml accepts any "
        "power of two, the spec wants a multiple of 8",
        _bytes(
            meta1,
            {"a": random_tensor(GGMLType.I8, (3,), rng), "b": random_tensor(GGMLType.F16, (5,), rng), "c": f32(3)},
        ),
        _verdict("reject", "accept"),
    )
    add(
        "edge_no_tensors.gguf",
        "metadata and a vocabulary but 0 tensors",
        _bytes(_base_meta(_vocab(16, "llama"))),
        dict(ACCEPT_ALL),
    )
    add(
        "edge_empty.gguf",
        "a header only: 0 tensors, 0 metadata keys (ggml's 'empty header' test; the spec requires "
        "general.architecture)",
        _bytes([]),
        _verdict("reject", "accept"),
    )
    add(
        "edge_ndims_0.gguf",
        "an F32 tensor with n_dims = 0 (a scalar: one element)",
        _bytes(_base_meta(), {"scalar": RawTensor(GGMLType.F32, (), np.float32(1.5).tobytes())}),
        dict(ACCEPT_ALL),
    )
    add(
        "edge_ndims_4.gguf",
        "an F32 tensor with 4 dimensions (the most ggml allows)",
        _bytes(_base_meta(), {"t4": f32(2, 1, 3, 4)}),
        dict(ACCEPT_ALL),
    )
    add(
        "edge_zero_size_dims.gguf",
        "tensors with a zero-size dimension (0 elements, 0 bytes: ggml accepts them)",
        _bytes(
            _base_meta(),
            {"rows0": f32(0, 8), "cols0": f32(8, 0), "q0": random_tensor(GGMLType.Q8_0, (0, 32), rng), "after": f32(4)},
        ),
        dict(ACCEPT_ALL),
    )
    add(
        "edge_name_63.gguf",
        "a tensor name of 63 bytes (the longest ggml accepts)",
        _bytes(_base_meta(), {"n" * 63: f32(2)}),
        dict(ACCEPT_ALL),
    )
    add(
        "edge_name_64.gguf",
        "a tensor name of 64 bytes: the spec allows at most 64, ggml at most 63",
        _bytes(_base_meta(), {"n" * 64: f32(2)}),
        _verdict("accept", "reject"),
    )
    add(
        "edge_name_empty.gguf",
        "a tensor with an empty name (ggml accepts it; the spec does not forbid it)",
        _bytes(_base_meta(), {"": f32(2)}),
        dict(ACCEPT_ALL),
    )
    vocab_size = 30_000 if small else 300_000
    add(
        f"edge_vocab_{vocab_size // 1000}k.gguf",
        f"a {vocab_size:,}-token vocabulary (tokens, scores, token types)",
        _bytes(_base_meta(_vocab(vocab_size, "gpt2"))),
        dict(ACCEPT_ALL),
    )
    nested = GGUFArray(
        ValueType.ARRAY,
        [
            GGUFArray(ValueType.ARRAY, [GGUFArray(ValueType.INT16, np.array([-1, 2], np.int16))]),
            GGUFArray(ValueType.STRING, ["x", ""]),
            GGUFArray(ValueType.FLOAT64, np.empty(0)),
        ],
    )
    add(
        "edge_nested_arrays.gguf",
        "arrays of arrays (3 deep, mixed element types): the spec allows nesting, ggml rejects "
        "an array whose element type is ARRAY",
        _bytes(_base_meta({"x.nested": nested})),
        _verdict("accept", "reject"),
    )
    specials = np.array(
        [np.nan, -0.0, np.inf, -np.inf, np.finfo(np.float32).max, np.finfo(np.float32).tiny, 1e-45], np.float32
    )
    payload = np.array([0x7F800001, 0xFFC12345], np.uint32).view(np.float32)
    add(
        "edge_float_specials.gguf",
        "FLOAT32/FLOAT64 values NaN (with payloads, signalling), -0.0, +-inf, extremes, subnormals",
        _bytes(
            _base_meta(
                {
                    "x.f32": GGUFArray(ValueType.FLOAT32, np.concatenate([specials, payload])),
                    "x.nan": payload[0],
                    "x.negzero": np.float32(-0.0),
                    "x.f64": GGUFArray(ValueType.FLOAT64, np.array([np.nan, -0.0, 5e-324, np.finfo(np.float64).max])),
                    "x.f64_inf": np.float64(-np.inf),
                }
            )
        ),
        dict(ACCEPT_ALL),
    )
    add(
        "edge_strings.gguf",
        "non-ASCII string values (accents, CJK, emoji, NUL, newline), an empty string and empty arrays",
        _bytes(
            _base_meta(
                {
                    "x.unicode": "héllo 日本語 🦙 \x00 end\n",
                    "x.empty": "",
                    "x.empty_strings": GGUFArray(ValueType.STRING, []),
                    "x.empty_u8": GGUFArray(ValueType.UINT8, []),
                    "x.strings": ["", "ü", "🦙" * 10],
                }
            )
        ),
        dict(ACCEPT_ALL),
    )
    add(
        "edge_bool_byte_2.gguf",
        "a BOOL stored as the byte 2: the spec calls it invalid, ggml reads it as true",
        _bytes(_base_meta({"x.flag": BoolByte(2)})),
        _verdict("reject", "accept"),
    )
    add(
        "edge_non_ascii_key.gguf",
        "a metadata key with non-ASCII characters: the spec requires ASCII keys, ggml does not check",
        _bytes(_base_meta({"x.clé": np.uint32(1)})),
        _verdict("reject", "accept"),
    )
    add(
        "edge_integer_extremes.gguf",
        "every integer type at its minimum and maximum",
        _bytes(
            _base_meta(
                {
                    f"x.{vt.name.lower()}_{end}": (v, vt)
                    for vt in ValueType
                    if vt.is_integer
                    for end, v in (
                        ("min", int(np.iinfo(vt.numpy_dtype()).min)),
                        ("max", int(np.iinfo(vt.numpy_dtype()).max)),
                    )
                }
            )
        ),
        dict(ACCEPT_ALL),
    )
    be = _bytes(
        _base_meta(), {"w": f32(2, 4), "q": random_tensor(GGMLType.Q8_0, (1, 32), rng, "big")}, byte_order="big"
    )
    add(
        "edge_big_endian.gguf",
        "a big-endian v3 file (allowed by the spec; ggml never byte-swaps and rejects it on a little-endian host)",
        be,
        _verdict("accept", "reject"),
    )
    add(
        "edge_version_2.gguf",
        "a version 2 file (same layout as v3 little-endian): ggml loads it; the spec says the version must be 3",
        _bytes(_base_meta(), {"w": f32(2, 4)}, version=2),
        _verdict("reject", "accept"),
    )
    add(
        "edge_version_1.gguf",
        "a version 1 file (uint32 counts and lengths): ggml no longer loads it, the spec describes v3",
        _bytes(_base_meta(), {"w": f32(2, 4)}, version=1),
        _verdict("reject", "reject"),
    )
    trailing = _bytes(_base_meta(), {"w": f32(2, 4)}) + b"trailing bytes after the data section"
    add(
        "edge_trailing_bytes.gguf",
        "bytes after the last tensor's padding (ignored by ggml)",
        trailing,
        dict(ACCEPT_ALL),
    )
    return out


def _malformed_fixtures() -> list[Fixture]:
    out = []
    for case in malformed_cases():
        name = case.name if case.name.endswith(".gguf") else f"malformed_{case.name}.gguf"
        expected = {p: case.expected.get(p, "reject") for p in PROFILES}
        expected.update({k: v for k, v in case.expected.items() if k not in expected})
        out.append(Fixture(name, "malformed", case.description, bytes(case.data), expected))
    return out


def fixture_files(kinds: Iterable[str] = KINDS, seed: int = 0, small: bool = False) -> list[Fixture]:
    """Build the fixtures of the given families in memory (``small`` uses a 30k vocabulary instead of 300k).

    The same ``seed`` gives the same bytes.

    >>> [f.name for f in fixture_files(kinds=("arch",))][:3]
    ['arch_llama.gguf', 'arch_mpt.gguf', 'arch_gptneox.gguf']
    """
    kinds = tuple(kinds)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fixture kinds {sorted(unknown)}: choose from {', '.join(KINDS)}")
    out: list[Fixture] = []
    if "arch" in kinds:
        out += _arch_fixtures(seed)
    if "types" in kinds:
        out += _type_fixtures(seed)
    if "edge" in kinds:
        out += _edge_fixtures(seed, small)
    if "malformed" in kinds:
        out += _malformed_fixtures()
    return out


def generate(
    out_dir: str | os.PathLike[str], kinds: Sequence[str] | None = None, seed: int = 0, small: bool = False
) -> list[dict[str, Any]]:
    """Write the fixtures of ``kinds`` (default: all) into ``out_dir`` with ``manifest.jsonl``; return the manifest records.

    Every file, and the manifest, is written atomically. The manifest has one JSON object per
    line: ``file``, ``kind``, ``description``, ``expected`` (profile -> ``"accept"``/``"reject"``),
    ``size`` and ``sha256``.

    >>> import tempfile, json, pathlib
    >>> with tempfile.TemporaryDirectory() as d:
    ...     records = generate(d, kinds=["types"])
    ...     lines = pathlib.Path(d, "manifest.jsonl").read_text().splitlines()
    >>> len(records) == len(lines), json.loads(lines[0])["file"]
    (True, 'type_F32.gguf')
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for fx in fixture_files(kinds or KINDS, seed=seed, small=small):
        atomic_replace(folder / fx.name, _writes(fx.data))
        records.append(manifest_record(fx))
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    atomic_replace(folder / "manifest.jsonl", _writes(text.encode("utf-8")))
    return records


def _writes(data: bytes) -> Callable[[IO[bytes]], None]:
    def write(stream: IO[bytes]) -> None:
        stream.write(data)

    return write
