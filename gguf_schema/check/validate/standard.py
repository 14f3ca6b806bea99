"""The spec's standardized keys: the architecture, the required keys of each architecture, the keys'
types, the tokenizer's arrays and ids, ``general.file_type`` (the ``spec`` profile; ``spec/gguf.json``
holds the spec's tables)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...errors import shorten
from ...format.types import FileType, GGMLType, ValueType
from ...format.values import Field
from ..spec_audit import load_spec
from .core import SPEC, Checker, reports, rule

__all__ = [
    "FILE_TYPE_MAIN",
    "file_type",
    "key_types",
    "known_architectures",
    "required_keys",
    "spec_key_types",
    "standard_keys",
    "tokenizer",
]


E050 = rule(
    "GGUF-E050",
    "general.architecture is present",
    "spec: '**general.architecture: string**' is bolded, i.e. required",
    [SPEC],
)
E051 = rule(
    "GGUF-E051",
    "general.architecture is lowercase ASCII [a-z0-9]+",
    "spec: 'All lowercase ASCII, with only `[a-z0-9]+` characters allowed'",
    [SPEC],
)
E052 = rule(
    "GGUF-E052",
    "general.quantization_version is present when any tensor is quantized",
    "spec: 'If any tensors are quantized, this _must_ be present'",
    [SPEC],
)
E053 = rule(
    "GGUF-E053",
    "each standardized key has its specified type (uint32 accepted where uint64 is named)",
    "spec: the typed key lists; 'Some models may use `uint32` for their values; it is recommended that readers support both'",
    [SPEC],
)
E054 = rule(
    "GGUF-E054",
    "every key the architecture's section lists is present",
    "spec: 'The following sections describe the metadata for each model architecture. Each key specified _must_ be present.'",
    [SPEC],
)
E055 = rule(
    "GGUF-E055",
    "tokenizer.ggml.scores and tokenizer.ggml.token_type have as many items as tokenizer.ggml.tokens",
    "spec: 'If present, it must have the same length and index as `tokens`'",
    [SPEC],
)
E056 = rule(
    "GGUF-E056",
    "special token ids index into tokenizer.ggml.tokens",
    "spec: 'tokenizer.ggml.tokens: A list of tokens indexed by the token ID used by the model'",
    [SPEC],
)
E057 = rule(
    "GGUF-E057",
    "general.file_type names a tensor type that some tensor has",
    "spec: 'general.file_type: An enumerated value describing the type of the majority of the tensors in the file'",
    [SPEC],
)
W001 = rule(
    "GGUF-W001",
    "general.architecture is one of the architectures the spec names",
    "spec: 'Known values include: llama, mpt, gptneox, gptj, gpt2, bloom, falcon, rwkv'",
    [SPEC],
)
W002 = rule(
    "GGUF-W002",
    "general.file_type is a value of the spec's table (0-18, 5 and 6 removed)",
    "spec: the general.file_type list stops at MOSTLY_Q6_K = 18; 'MOSTLY_Q4_2 = 5 (support removed)'",
    [SPEC],
)


@reports(E050, E051, E052, E053, E054, W001)
def standard_keys(c: Checker) -> None:
    """The architecture, the quantization version, the standardized keys' types and each architecture's required keys (``spec``)."""
    spec = load_spec()
    fields = c.f.fields
    arch_fld = fields.get("general.architecture")
    arch = arch_fld.value if arch_fld is not None and arch_fld.type == ValueType.STRING else None
    if arch_fld is None:
        c.add(E050, None, "general.architecture", None, "general.architecture is missing")
    elif arch is not None:
        if not _ARCH_SYNTAX.fullmatch(arch):
            c.add(
                E051,
                c.value_offset(arch_fld),
                arch_fld.key,
                arch,
                f"architecture {shorten(arch)} is not [a-z0-9]+",
            )
        elif arch not in known_architectures(spec):
            c.add(
                W001,
                c.value_offset(arch_fld),
                arch_fld.key,
                arch,
                f"architecture {shorten(arch)} is not one the spec names",
            )
    tensors = c.model_tensors if c.model_tensors is not None else c.f.tensor_list
    quantized = [t for t in tensors if isinstance(t.type, GGMLType) and t.type.quantized]
    if quantized and "general.quantization_version" not in fields:
        c.add(
            E052,
            None,
            "general.quantization_version",
            None,
            f"general.quantization_version is missing but tensor {shorten(quantized[0].name)} is {quantized[0].type_name}",
        )
    key_types.run(c)
    if arch is not None:
        for key in required_keys(spec).get(arch, []):
            if key not in fields:
                c.add(E054, None, key, None, f"{key} is missing (required for architecture {shorten(arch)})")


@reports(E053)
def key_types(c: Checker) -> None:
    """GGUF-E053: each standardized key the file holds has its specified type."""
    fields = c.f.fields
    types = spec_key_types(load_spec())
    templates = {k[len(_LLM) :]: v for k, v in types.items() if k.startswith(_LLM)}
    typed = _typed_keys(c.key_text, types, templates, fields)
    for fld in fields.records:
        if typed is not None and fld.key not in typed:
            continue
        want = _key_type(fld.key, types, templates)
        if want is not None and not _type_matches(fld, want):
            have = fld.type.name + (f"[{fld.element_type.name}]" if fld.element_type is not None else "")
            c.add(E053, c.value_offset(fld), fld.key, have, f"{fld.key} is {have}, the spec says {want}")


@reports(E055, E056)
def tokenizer(c: Checker) -> None:
    """The tokenizer's arrays as long as its tokens, and its special token ids inside them (``spec``)."""
    fields = c.f.fields
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is None or tokens.type != ValueType.ARRAY:
        return
    n = len(tokens.value)
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        fld = fields.get(key)
        if fld is not None and fld.type == ValueType.ARRAY and len(fld.value) != n:
            at = c.value_offset(fld)
            c.add(
                E055,
                at + 4 if at is not None else None,
                key,
                len(fld.value),
                f"{key} has {len(fld.value)} items, tokenizer.ggml.tokens has {n}",
            )
    for fld in fields.records:
        if (
            fld.key.startswith("tokenizer.ggml.")
            and fld.key.endswith("_token_id")
            and fld.type.is_integer
            and not 0 <= fld.value < n
        ):
            c.add(
                E056,
                c.value_offset(fld),
                fld.key,
                fld.value,
                f"token id {fld.value} is outside the {n} tokens",
            )


@reports(E057, W002)
def file_type(c: Checker) -> None:
    """``general.file_type``: a value of the spec's table, naming a type some tensor has (``spec``)."""
    fld = c.f.fields.get("general.file_type")
    if fld is None or not fld.type.is_integer:
        return
    v, at = fld.value, c.value_offset(fld)
    spec_values = load_spec()["enums"]["general.file_type"]["values"]
    if v not in spec_values.values():
        c.add(W002, at, fld.key, v, f"general.file_type {v} is not in the spec's table")
    main = FILE_TYPE_MAIN.get(v)
    tensors = c.model_tensors  # None: a first shard alone, whose model's tensors are not known
    present = {t.type for t in tensors or ()}
    if main is not None and tensors and main not in present:
        names = ", ".join(sorted(x.name if isinstance(x, GGMLType) else str(x) for x in present))
        c.add(
            E057,
            at,
            fld.key,
            v,
            f"general.file_type {v} ({FileType(v).name}) means mostly {main.name}, but the tensors are {names}",
        )


FILE_TYPE_MAIN: dict[int, GGMLType] = {
    FileType.ALL_F32: GGMLType.F32,
    FileType.MOSTLY_F16: GGMLType.F16,
    FileType.MOSTLY_Q4_0: GGMLType.Q4_0,
    FileType.MOSTLY_Q4_1: GGMLType.Q4_1,
    FileType.MOSTLY_Q4_1_SOME_F16: GGMLType.Q4_1,
    FileType.MOSTLY_Q8_0: GGMLType.Q8_0,
    FileType.MOSTLY_Q5_0: GGMLType.Q5_0,
    FileType.MOSTLY_Q5_1: GGMLType.Q5_1,
    FileType.MOSTLY_Q2_K: GGMLType.Q2_K,
    FileType.MOSTLY_Q3_K_S: GGMLType.Q3_K,
    FileType.MOSTLY_Q3_K_M: GGMLType.Q3_K,
    FileType.MOSTLY_Q3_K_L: GGMLType.Q3_K,
    FileType.MOSTLY_Q4_K_S: GGMLType.Q4_K,
    FileType.MOSTLY_Q4_K_M: GGMLType.Q4_K,
    FileType.MOSTLY_Q5_K_S: GGMLType.Q5_K,
    FileType.MOSTLY_Q5_K_M: GGMLType.Q5_K,
    FileType.MOSTLY_Q6_K: GGMLType.Q6_K,
    FileType.MOSTLY_IQ2_XXS: GGMLType.IQ2_XXS,
    FileType.MOSTLY_IQ2_XS: GGMLType.IQ2_XS,
    FileType.MOSTLY_Q2_K_S: GGMLType.Q2_K,
    FileType.MOSTLY_IQ3_XS: GGMLType.IQ3_S,
    FileType.MOSTLY_IQ3_XXS: GGMLType.IQ3_XXS,
    FileType.MOSTLY_IQ1_S: GGMLType.IQ1_S,
    FileType.MOSTLY_IQ4_NL: GGMLType.IQ4_NL,
    FileType.MOSTLY_IQ3_S: GGMLType.IQ3_S,
    FileType.MOSTLY_IQ3_M: GGMLType.IQ3_S,
    FileType.MOSTLY_IQ2_S: GGMLType.IQ2_S,
    FileType.MOSTLY_IQ2_M: GGMLType.IQ2_S,
    FileType.MOSTLY_IQ4_XS: GGMLType.IQ4_XS,
    FileType.MOSTLY_IQ1_M: GGMLType.IQ1_M,
    FileType.MOSTLY_BF16: GGMLType.BF16,
    FileType.MOSTLY_TQ1_0: GGMLType.TQ1_0,
    FileType.MOSTLY_TQ2_0: GGMLType.TQ2_0,
    FileType.MOSTLY_MXFP4_MOE: GGMLType.MXFP4,
    FileType.MOSTLY_NVFP4: GGMLType.NVFP4,
    FileType.MOSTLY_Q1_0: GGMLType.Q1_0,
    FileType.MOSTLY_Q2_0: GGMLType.Q2_0,
}


def known_architectures(spec: dict[str, Any]) -> list[str]:
    """The architectures spec/ names: the document's list plus the recorded additions."""
    return list(spec["known_architectures"]) + list(spec.get("additions", {}).get("known_architectures", []))


def required_keys(spec: dict[str, Any]) -> dict[str, list[str]]:
    """Architecture -> the keys its section requires (document and additions)."""
    archs = dict(spec["architectures"])
    archs.update(spec.get("additions", {}).get("architectures", {}))
    return {a: list(v["required"]) for a, v in archs.items()}


def spec_key_types(spec: dict[str, Any]) -> dict[str, str]:
    """Standardized key (``[llm].`` templates included) -> its spec type, for keys that have one."""
    keys = dict(spec["keys"])
    keys.update(spec.get("additions", {}).get("keys", {}))
    return {k: v for k, v in keys.items() if v}


_NOT_ARCH = ("general.", "tokenizer.", "split.")
_LLM = "[llm]."


def _typed_keys(
    text: str | None, types: dict[str, str], templates: dict[str, str], fields: Mapping[str, Any]
) -> set[str] | None:
    """A superset of the keys that :func:`_key_type` gives a type, found at once over ``text`` (the
    keys, one per line: :func:`.core.joined_keys`): the keys named in ``types``, and the lines ending in
    ``.X`` for a template ``X``. None (look at every key) when there is no such text.

    >>> sorted(_typed_keys("k.1\\nllama.context_length\\ngeneral.name", {"general.name": "string"},
    ...                    {"context_length": "uint64"}, {"general.name": 1}))
    ['general.name', 'llama.context_length']
    """
    if text is None:
        return None
    found = {k for k in types if k in fields}
    if templates:
        ends = re.compile(r"\.(?:" + "|".join(map(re.escape, sorted(templates))) + r")$", re.MULTILINE)
        for m in ends.finditer(text):
            found.add(text[text.rfind("\n", 0, m.start()) + 1 : m.end()])
    return found


def _key_type(key: str, types: dict[str, str], templates: dict[str, str]) -> str | None:
    """The spec type of ``key``: ``types`` by name, else the ``[llm].X`` template (``templates``: X ->
    type) for ``<arch>.X``; whisper's keys add an encoder/decoder segment (``whisper.encoder.X``).

    >>> _key_type("llama.context_length", {}, {"context_length": "uint64"})
    'uint64'
    >>> _key_type("whisper.encoder.context_length", {}, {"context_length": "uint64"})
    'uint64'
    >>> _key_type("general.context_length", {}, {"context_length": "uint64"}) is None
    True
    """
    t = types.get(key)
    if t is not None or key.startswith(_NOT_ARCH):
        return t
    dot = key.find(".")
    if dot < 0:
        return None
    t = templates.get(key[dot + 1 :])
    if t is None and key.startswith("whisper."):
        second = key.find(".", dot + 1)
        if second >= 0:
            t = templates.get(key[second + 1 :])
    return t


_SPEC_TYPES = {
    "uint8": "UINT8",
    "int8": "INT8",
    "uint16": "UINT16",
    "int16": "INT16",
    "uint32": "UINT32",
    "int32": "INT32",
    "float32": "FLOAT32",
    "bool": "BOOL",
    "string": "STRING",
    "uint64": "UINT64",
    "int64": "INT64",
    "float64": "FLOAT64",
}


def _type_matches(fld: Field, want: str) -> bool:
    m = re.fullmatch(r"array\[(\w+)\]", want)
    if m:
        return (
            fld.type == ValueType.ARRAY
            and fld.element_type is not None
            and fld.element_type.name == _SPEC_TYPES[m.group(1)]
        )
    if want == "uint64":
        return fld.type in (ValueType.UINT64, ValueType.UINT32)
    return fld.type.name == _SPEC_TYPES[want]


_ARCH_SYNTAX = re.compile(r"[a-z0-9]+")
