"""The metadata keys this library itself reads or writes, each named once.

The spec fixes the meaning of a few keys (``general.alignment`` sets ALIGNMENT); llama.cpp's
conventions add the others we act on: the split layout of ``gguf-split``, the tokenizer a
chat template renders with, the type and quantization a file declares. Every module that reads or
writes one of them uses the constant here, not the string. This is not a table of every key the
ecosystem knows (the ``gguf`` package has that, and :mod:`gguf_schema.compat` uses it from the
installed package); only ours.

>>> GENERAL_ALIGNMENT, SPLIT_COUNT
('general.alignment', 'split.count')
"""

from __future__ import annotations

__all__ = [
    "GENERAL_ALIGNMENT",
    "GENERAL_ARCHITECTURE",
    "GENERAL_FILE_TYPE",
    "GENERAL_NAME",
    "GENERAL_QUANTIZATION_VERSION",
    "GENERAL_SIZE_LABEL",
    "GENERAL_TYPE",
    "SPLIT_COUNT",
    "SPLIT_ID",
    "SPLIT_NO",
    "SPLIT_TENSORS_COUNT",
    "TOKENIZER_CHAT_TEMPLATE",
    "TOKENIZER_GGML_BOS_TOKEN_ID",
    "TOKENIZER_GGML_EOS_TOKEN_ID",
    "TOKENIZER_GGML_MERGES",
    "TOKENIZER_GGML_MODEL",
    "TOKENIZER_GGML_PRE",
    "TOKENIZER_GGML_SCORES",
    "TOKENIZER_GGML_TOKENS",
    "TOKENIZER_GGML_TOKEN_TYPE",
]

# general: what every file says about itself
GENERAL_ALIGNMENT = "general.alignment"  # the spec's ALIGNMENT (32 when absent)
GENERAL_ARCHITECTURE = "general.architecture"
GENERAL_NAME = "general.name"
GENERAL_TYPE = "general.type"  # "model", "adapter" ...
GENERAL_SIZE_LABEL = "general.size_label"
GENERAL_FILE_TYPE = "general.file_type"  # a FileType: the model's main quantization
GENERAL_QUANTIZATION_VERSION = "general.quantization_version"

# split: the shards of one model (llama.cpp's gguf-split)
SPLIT_NO = "split.no"
SPLIT_COUNT = "split.count"
SPLIT_TENSORS_COUNT = "split.tensors.count"
SPLIT_ID = "split.id"  # ours: the identity of a set of shards (llama-gguf-split writes none)

# tokenizer
TOKENIZER_GGML_MODEL = "tokenizer.ggml.model"
TOKENIZER_GGML_PRE = "tokenizer.ggml.pre"
TOKENIZER_GGML_TOKENS = "tokenizer.ggml.tokens"
TOKENIZER_GGML_SCORES = "tokenizer.ggml.scores"
TOKENIZER_GGML_TOKEN_TYPE = "tokenizer.ggml.token_type"
TOKENIZER_GGML_MERGES = "tokenizer.ggml.merges"
TOKENIZER_GGML_BOS_TOKEN_ID = "tokenizer.ggml.bos_token_id"
TOKENIZER_GGML_EOS_TOKEN_ID = "tokenizer.ggml.eos_token_id"
TOKENIZER_CHAT_TEMPLATE = "tokenizer.chat_template"
