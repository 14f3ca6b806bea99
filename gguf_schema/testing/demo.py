"""The built-in example: a small model file with every metadata value type and several tensor types.

``gguf-schema demo`` writes it, reads it back, prints what it holds and proves the round trip
(the rebuilt bytes equal the written bytes; every value and tensor read back equals what was
written). The same file is a handy fixture:

>>> import io, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, example_metadata(), example_tensors())
>>> with gguf_schema.open(buf.getvalue()) as f:
...     sorted({fld.type.name for fld in f.fields.values()}) == sorted(t.name for t in gguf_schema.ValueType)
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..format import keys as K
from ..format.types import GGMLType, ValueType
from ..format.values import GGUFArray
from ..writer import RawTensor

__all__ = ["example_metadata", "example_tensors"]


def example_metadata(nested: bool = True) -> dict[str, Any]:
    """Metadata of a tiny llama-style model using all 13 value types.

    ``nested`` adds an array of arrays (``demo.nested``): the spec allows it, ggml's loader does
    not, so ``gguf-schema demo`` leaves it out and writes a file ggml loads.
    """
    tokens = ["<unk>", "<s>", "</s>", "▁the", "▁model", "é", "日本", "\n"]
    metadata = {
        K.GENERAL_ARCHITECTURE: "llama",
        K.GENERAL_NAME: "gguf-schema demo",
        K.GENERAL_ALIGNMENT: np.uint32(32),
        K.GENERAL_QUANTIZATION_VERSION: np.uint32(2),
        K.GENERAL_FILE_TYPE: np.uint32(7),
        "llama.context_length": np.uint32(128),
        "llama.embedding_length": np.uint32(64),
        "llama.block_count": np.uint32(1),
        "llama.feed_forward_length": np.uint32(128),
        "llama.rope.dimension_count": np.uint32(16),
        "llama.attention.head_count": np.uint32(4),
        "llama.attention.layer_norm_rms_epsilon": np.float32(1e-5),
        "demo.uint8": np.uint8(255),
        "demo.int8": np.int8(-128),
        "demo.uint16": np.uint16(65535),
        "demo.int16": np.int16(-32768),
        "demo.int32": np.int32(-(2**31)),
        "demo.uint64": np.uint64(2**64 - 1),
        "demo.int64": np.int64(-(2**63)),
        "demo.float64": np.float64(np.pi),
        "demo.bool": True,
        "demo.empty_string": "",
        K.TOKENIZER_GGML_MODEL: "llama",
        K.TOKENIZER_GGML_TOKENS: tokens,
        K.TOKENIZER_GGML_SCORES: np.linspace(0, -7, len(tokens), dtype=np.float32),
        K.TOKENIZER_GGML_TOKEN_TYPE: np.array([2, 3, 3, 1, 1, 1, 1, 6], np.int32),
        K.TOKENIZER_GGML_BOS_TOKEN_ID: np.uint32(1),
        K.TOKENIZER_GGML_EOS_TOKEN_ID: np.uint32(2),
    }
    if not nested:
        return metadata
    items = list(metadata.items())
    items.insert(
        22,
        (
            "demo.nested",
            GGUFArray(
                ValueType.ARRAY,
                [GGUFArray(ValueType.UINT8, np.array([1, 2], np.uint8)), GGUFArray(ValueType.STRING, ["a", "b"])],
            ),
        ),
    )
    return dict(items)


def example_tensors(seed: int = 0) -> dict[str, Any]:
    """Tensors of several types: F32, F16, I32, and Q8_0 blocks built by hand."""
    rng = np.random.default_rng(seed)
    # Q8_0: per 32 values one float16 scale d and 32 int8 quants q; value = d * q
    rows, cols = 8, 64
    scales = np.full((rows, cols // 32, 1), 0.5, np.float16)
    quants = rng.integers(-127, 128, size=(rows, cols // 32, 32), dtype=np.int8)
    q8_0 = np.concatenate([scales.view(np.uint8), quants.view(np.uint8)], axis=-1).reshape(rows, -1)
    return {
        "token_embd.weight": rng.standard_normal((8, 64), dtype=np.float32),
        "blk.0.attn_norm.weight": np.ones(64, np.float16),
        "blk.0.ffn_up.weight": RawTensor(GGMLType.Q8_0, (rows, cols), q8_0),
        "demo.positions": np.arange(16, dtype=np.int32).reshape(4, 4),
        "output_norm.weight": np.ones(64, np.float32),
    }
