"""The spec audit: each seed document against spec/ and the schema, exact differences; schema and spec/ agree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gguf_schema.check.spec_audit import audit_spec, extract_facts, load_spec, schema_differences, schema_facts

from . import helpers
from .conftest import SHARED

SEEDS = SHARED / "seeds"
REPO = Path(__file__).resolve().parents[1]

# ggml types and llama.cpp file types the code knows beyond what a document lists (not in these lists: the schema's
# "enum-value-missing" differences, asserted separately below)
TYPES_16_23 = ["IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS"]
TYPES_27_42 = ["I64", "F64", "IQ1_M", "BF16", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0", "Q2_0"]
FILE_TYPES_19_UP = [
    "MOSTLY_IQ2_XXS",
    "MOSTLY_IQ2_XS",
    "MOSTLY_Q2_K_S",
    "MOSTLY_IQ3_XS",
    "MOSTLY_IQ3_XXS",
    "MOSTLY_IQ1_S",
    "MOSTLY_IQ4_NL",
    "MOSTLY_IQ3_S",
    "MOSTLY_IQ3_M",
    "MOSTLY_IQ2_S",
    "MOSTLY_IQ2_M",
    "MOSTLY_IQ4_XS",
    "MOSTLY_IQ1_M",
    "MOSTLY_BF16",
    "MOSTLY_TQ1_0",
    "MOSTLY_TQ2_0",
    "MOSTLY_MXFP4_MOE",
    "MOSTLY_NVFP4",
    "MOSTLY_Q1_0",
    "MOSTLY_Q2_0",
    "GUESSED",
]

EXPECTED_000 = """\
spec key-missing [llm].ssm.conv_kernel
spec key-missing [llm].ssm.inner_size
spec key-missing [llm].ssm.state_size
spec key-missing [llm].ssm.time_step_rank
spec arch-missing mamba
spec known-arch-missing mamba
schema enum-value-renumbered ggml_type.I8
schema enum-value-renumbered ggml_type.I16
schema enum-value-renumbered ggml_type.I32
schema enum-value-renumbered ggml_type.COUNT
schema enum-removed-differs ggml_type.removed
schema enum-removed-differs general.file_type.removed
"""

EXPECTED_001 = """\
spec key-missing rwkv.block_count
spec key-missing rwkv.embedding_length
spec key-missing rwkv.feed_forward_length
spec key-missing tokenizer.ggml.added_tokens
spec key-missing [llm].ssm.conv_kernel
spec key-missing [llm].ssm.inner_size
spec key-missing [llm].ssm.state_size
spec key-missing [llm].ssm.time_step_rank
spec arch-required-key-missing rwkv.block_count
spec arch-required-key-missing rwkv.embedding_length
spec arch-required-key-missing rwkv.feed_forward_length
spec arch-missing mamba
spec known-arch-missing mamba
schema enum-value-renumbered ggml_type.I8
schema enum-value-renumbered ggml_type.I16
schema enum-value-renumbered ggml_type.I32
schema enum-value-renumbered ggml_type.COUNT
schema enum-removed-differs ggml_type.removed
schema enum-removed-differs general.file_type.removed
"""

EXPECTED_002 = """\
spec enum-value-added ggml_type.IQ2_XXS
spec enum-value-added ggml_type.IQ2_XS
spec enum-value-added ggml_type.IQ3_XXS
spec enum-value-added ggml_type.IQ1_S
spec enum-value-added ggml_type.IQ4_NL
spec enum-value-added ggml_type.IQ3_S
spec enum-value-added ggml_type.IQ2_S
spec enum-value-added ggml_type.IQ4_XS
spec enum-value-renumbered ggml_type.I8
spec enum-value-renumbered ggml_type.I16
spec enum-value-renumbered ggml_type.I32
spec enum-value-added ggml_type.I64
spec enum-value-added ggml_type.F64
spec enum-value-added ggml_type.IQ1_M
spec enum-value-renumbered ggml_type.COUNT
schema enum-value-renumbered ggml_type.COUNT
schema enum-removed-differs ggml_type.removed
"""

EXPECTED_003 = """\
spec enum-value-missing gguf_metadata_value_type.UINT64
spec enum-value-missing gguf_metadata_value_type.INT64
spec enum-value-missing gguf_metadata_value_type.FLOAT64
spec field-type gguf_string_t.len
spec field-missing gguf_metadata_value_t.uint64
spec field-missing gguf_metadata_value_t.int64
spec field-missing gguf_metadata_value_t.float64
spec field-type gguf_metadata_value_t.array.len
spec field-order gguf_metadata_value_t.array
spec field-added gguf_metadata_kv_t.value_len
spec field-type gguf_header_t.tensor_count
spec field-type gguf_header_t.metadata_kv_count
spec field-type gguf_tensor_info_t.dimensions
spec field-added gguf_tensor_info_t.n_elements
spec field-type gguf_file_t._padding
spec field-order gguf_file_t
spec key-retyped general.file_type
spec key-added general.url.original_source
spec key-retyped [llm].context_length
spec key-added [llm].hidden_size
spec key-added [llm].num_layers
spec key-added [llm].num_rotary
spec key-added [llm].max_seq_len
spec key-added [llm].attention.num_heads
spec key-added [llm].attention.alibi_bias_max
spec key-added [llm].attention.clip_kqv
spec key-added [llm].num_mult
spec key-added [llm].rot
spec key-added [llm].num_rot
spec key-added tokenizer.embedded.tokens
spec key-added tokenizer.embedded.scores
spec key-missing general.alignment
spec key-missing general.name
spec key-missing general.author
spec key-missing general.url
spec key-missing general.source.url
spec key-missing general.source.huggingface.repository
spec key-missing [llm].embedding_length
spec key-missing [llm].block_count
spec key-missing [llm].feed_forward_length
spec key-missing [llm].tensor_data_layout
spec key-missing [llm].expert_count
spec key-missing [llm].expert_used_count
spec key-missing [llm].attention.head_count
spec key-missing [llm].attention.head_count_kv
spec key-missing [llm].attention.max_alibi_bias
spec key-missing [llm].attention.clamp_kqv
spec key-missing [llm].attention.layer_norm_epsilon
spec key-missing [llm].attention.layer_norm_rms_epsilon
spec key-missing [llm].rope.dimension_count
spec key-missing [llm].rope.freq_base
spec key-missing [llm].rope.scaling.type
spec key-missing [llm].rope.scaling.factor
spec key-missing [llm].rope.scaling.original_context_length
spec key-missing [llm].rope.scaling.finetuned
spec key-missing [llm].rope.scale_linear
spec key-missing rwkv.architecture_version
spec key-missing rwkv.context_length
spec key-missing rwkv.block_count
spec key-missing rwkv.embedding_length
spec key-missing rwkv.feed_forward_length
spec key-missing whisper.encoder.mels_count
spec key-missing tokenizer.ggml.model
spec key-missing tokenizer.ggml.tokens
spec key-missing tokenizer.ggml.scores
spec key-missing tokenizer.ggml.token_type
spec key-missing tokenizer.ggml.merges
spec key-missing tokenizer.ggml.added_tokens
spec key-missing tokenizer.ggml.bos_token_id
spec key-missing tokenizer.ggml.eos_token_id
spec key-missing tokenizer.ggml.unknown_token_id
spec key-missing tokenizer.ggml.separator_token_id
spec key-missing tokenizer.ggml.padding_token_id
spec key-missing tokenizer.huggingface.json
spec key-missing tokenizer.chat_template
spec key-missing [llm].ssm.conv_kernel
spec key-missing [llm].ssm.inner_size
spec key-missing [llm].ssm.state_size
spec key-missing [llm].ssm.time_step_rank
spec arch-required-key-added llama.hidden_size
spec arch-required-key-added llama.num_layers
spec arch-required-key-added llama.num_mult
spec arch-required-key-added llama.rot
spec arch-required-key-added llama.attention.num_heads
spec arch-required-key-missing llama.embedding_length
spec arch-required-key-missing llama.block_count
spec arch-required-key-missing llama.feed_forward_length
spec arch-required-key-missing llama.rope.dimension_count
spec arch-required-key-missing llama.attention.head_count
spec arch-required-key-missing llama.attention.layer_norm_rms_epsilon
spec arch-optional-key-missing llama.rope.scale
spec arch-optional-key-missing llama.attention.head_count_kv
spec arch-optional-key-missing llama.tensor_data_layout
spec arch-optional-key-missing llama.expert_count
spec arch-optional-key-missing llama.expert_used_count
spec arch-required-key-added mpt.max_seq_len
spec arch-required-key-added mpt.hidden_size
spec arch-required-key-added mpt.num_layers
spec arch-required-key-added mpt.attention.num_heads
spec arch-required-key-missing mpt.context_length
spec arch-required-key-missing mpt.embedding_length
spec arch-required-key-missing mpt.block_count
spec arch-required-key-missing mpt.attention.head_count
spec arch-required-key-missing mpt.attention.layer_norm_epsilon
spec arch-required-key-added gptneox.hidden_size
spec arch-required-key-added gptneox.num_layers
spec arch-required-key-added gptneox.num_rot
spec arch-required-key-added gptneox.attention.num_heads
spec arch-required-key-missing gptneox.embedding_length
spec arch-required-key-missing gptneox.block_count
spec arch-required-key-missing gptneox.rope.dimension_count
spec arch-required-key-missing gptneox.attention.head_count
spec arch-required-key-missing gptneox.attention.layer_norm_epsilon
spec arch-optional-key-missing gptneox.rope.scale
spec arch-required-key-added gptj.hidden_size
spec arch-required-key-added gptj.num_layers
spec arch-required-key-added gptj.num_rot
spec arch-required-key-added gptj.attention.num_heads
spec arch-required-key-missing gptj.embedding_length
spec arch-required-key-missing gptj.block_count
spec arch-required-key-missing gptj.rope.dimension_count
spec arch-required-key-missing gptj.attention.head_count
spec arch-required-key-missing gptj.attention.layer_norm_epsilon
spec arch-optional-key-missing gptj.rope.scale
spec arch-required-key-added gpt2.hidden_size
spec arch-required-key-added gpt2.num_layers
spec arch-required-key-added gpt2.attention.num_heads
spec arch-required-key-missing gpt2.embedding_length
spec arch-required-key-missing gpt2.block_count
spec arch-required-key-missing gpt2.attention.head_count
spec arch-required-key-missing gpt2.attention.layer_norm_epsilon
spec arch-required-key-added bloom.hidden_size
spec arch-required-key-added bloom.num_layers
spec arch-required-key-added bloom.num_mult
spec arch-required-key-added bloom.attention.num_heads
spec arch-required-key-missing bloom.embedding_length
spec arch-required-key-missing bloom.block_count
spec arch-required-key-missing bloom.feed_forward_length
spec arch-required-key-missing bloom.attention.head_count
spec arch-required-key-missing bloom.attention.layer_norm_epsilon
spec arch-missing falcon
spec arch-missing rwkv
spec arch-missing whisper
spec arch-missing mamba
spec known-arch-missing mamba
spec rule-differs version
spec rule-differs max_dimensions
spec rule-differs alignment
spec rule-differs default_alignment
schema enum-value-renumbered ggml_type.I8
schema enum-value-renumbered ggml_type.I16
schema enum-value-renumbered ggml_type.I32
schema enum-value-renumbered ggml_type.COUNT
schema enum-removed-differs ggml_type.removed
schema field-type gguf_string_t.len
schema field-missing gguf_metadata_value_t.uint64
schema field-missing gguf_metadata_value_t.int64
schema field-missing gguf_metadata_value_t.float64
schema field-type gguf_metadata_value_t.array.len
schema field-order gguf_metadata_value_t.array
schema field-added gguf_metadata_kv_t.value_len
schema field-type gguf_header_t.tensor_count
schema field-type gguf_header_t.metadata_kv_count
schema field-type gguf_tensor_info_t.dimensions
schema field-added gguf_tensor_info_t.n_elements
schema field-type gguf_file_t._padding
schema field-order gguf_file_t
"""

EXPECTED_004 = """\
spec enum-value-added ggml_type.IQ2_XXS
spec enum-value-added ggml_type.IQ2_XS
spec enum-value-added ggml_type.IQ3_XXS
spec enum-value-added ggml_type.IQ1_S
spec enum-value-added ggml_type.IQ4_NL
spec enum-value-added ggml_type.IQ3_S
spec enum-value-added ggml_type.IQ2_S
spec enum-value-added ggml_type.IQ4_XS
spec enum-value-renumbered ggml_type.I8
spec enum-value-renumbered ggml_type.I16
spec enum-value-renumbered ggml_type.I32
spec enum-value-added ggml_type.I64
spec enum-value-added ggml_type.F64
spec enum-value-added ggml_type.IQ1_M
spec enum-value-added ggml_type.BF16
spec enum-value-added ggml_type.TQ1_0
spec enum-value-added ggml_type.TQ2_0
spec enum-value-added ggml_type.MXFP4
spec enum-value-renumbered ggml_type.COUNT
schema enum-value-renumbered ggml_type.COUNT
schema enum-removed-differs ggml_type.removed
schema enum-removed-differs general.file_type.removed
"""


def seed(name: str) -> str:
    path = SEEDS / name
    if not path.is_file():
        pytest.skip("../shared/seeds is absent")
    return path.read_text(encoding="utf-8")


def listed(report, missing_in_schema: list[str]) -> tuple[list[str], list[str]]:
    """(the report's differences as 'against kind item' lines, the schema's enum-value-missing items)."""
    lines = [
        f"{d.against} {d.kind} {d.item}"
        for d in report.differences
        if not (d.against == "schema" and d.kind == "enum-value-missing")
    ]
    missing = [d.item for d in report.differences if d.against == "schema" and d.kind == "enum-value-missing"]
    return lines, missing


CASES = [
    (
        "000_d466ef7820170e32.txt",
        EXPECTED_000,
        [f"ggml_type.{t}" for t in TYPES_16_23 + TYPES_27_42] + [f"general.file_type.{t}" for t in FILE_TYPES_19_UP],
        [],
    ),
    (
        "001_73a6ebcf9512e9a7.txt",
        EXPECTED_001,
        [f"ggml_type.{t}" for t in TYPES_16_23 + TYPES_27_42] + [f"general.file_type.{t}" for t in FILE_TYPES_19_UP],
        [],
    ),
    (
        "002_26b09f180d62a9a2.txt",
        EXPECTED_002,
        [f"ggml_type.{t}" for t in ["BF16", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0", "Q2_0"]],
        ["enum general.file_type", "keys", "architectures", "known_architectures"],
    ),
    (
        "003_df799e11d736362b.txt",
        EXPECTED_003,
        [f"ggml_type.{t}" for t in TYPES_16_23 + TYPES_27_42]
        + ["gguf_metadata_value_type.UINT64", "gguf_metadata_value_type.INT64", "gguf_metadata_value_type.FLOAT64"],
        ["enum general.file_type"],
    ),
    (
        "004_c146410c70882888.txt",
        EXPECTED_004,
        [f"ggml_type.{t}" for t in ["NVFP4", "Q1_0", "Q2_0"]] + [f"general.file_type.{t}" for t in FILE_TYPES_19_UP],
        [
            "struct gguf_string_t",
            "struct gguf_metadata_value_t",
            "struct gguf_metadata_value_t.array",
            "struct gguf_metadata_kv_t",
            "struct gguf_header_t",
            "struct gguf_tensor_info_t",
            "struct gguf_file_t",
            "keys",
            "architectures",
        ],
    ),
]


@pytest.mark.parametrize("name,expected,missing,not_covered", CASES, ids=[c[0][:3] for c in CASES])
def test_seed_differences_are_exactly(name, expected, missing, not_covered):
    report = audit_spec(seed(name))
    lines, got_missing = listed(report, missing)
    assert lines == expected.splitlines()
    assert got_missing == missing
    assert report.not_covered == not_covered
    assert not report.ok


def test_current_spec_differs_only_by_mamba_and_ggml_numbering():
    report = audit_spec(seed("000_d466ef7820170e32.txt"))
    spec_side = [d for d in report.differences if d.against == "spec"]
    assert {d.item for d in spec_side} == {
        "[llm].ssm.conv_kernel",
        "[llm].ssm.inner_size",
        "[llm].ssm.state_size",
        "[llm].ssm.time_step_rank",
        "mamba",
    }
    i8 = next(d for d in report.differences if d.item == "ggml_type.I8")
    assert (i8.against, i8.kind, i8.document, i8.ours) == ("schema", "enum-value-renumbered", 16, 24)
    assert report.facts["rules"] == {
        "version": 3,
        "key_max_bytes": 65535,
        "tensor_name_max_bytes": 64,
        "max_dimensions": 4,
        "alignment": "multiple of 8",
        "default_alignment": 32,
    }


def test_older_rendering_shorter_enum_and_fixed_alignment():
    report = audit_spec(seed("003_df799e11d736362b.txt"))
    facts = report.facts
    assert facts["enums"]["gguf_metadata_value_type"]["values"] == {
        n: i
        for i, n in enumerate(
            ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY"]
        )
    }
    assert facts["enums"]["ggml_type"]["values"]["COUNT"] == 19
    rules = {d.item: (d.document, d.ours) for d in report.differences if d.kind == "rule-differs"}
    assert rules == {
        "version": (1, 3),
        "max_dimensions": (2, 4),
        "alignment": ("fixed constant of 64 bytes", "multiple of 8"),
        "default_alignment": (64, 32),
    }
    order = next(
        d for d in report.differences if d.kind == "field-order" and d.item == "gguf_file_t" and d.against == "spec"
    )
    assert order.document == ["header", "_padding", "tensor_infos", "tensor_data"]


def test_summary_newest_type_ids():
    report = audit_spec(seed("004_c146410c70882888.txt"))
    added = {d.item: d.document for d in report.differences if d.against == "spec" and d.kind == "enum-value-added"}
    assert {k: added[k] for k in ("ggml_type.BF16", "ggml_type.TQ1_0", "ggml_type.TQ2_0", "ggml_type.MXFP4")} == {
        "ggml_type.BF16": 30,
        "ggml_type.TQ1_0": 34,
        "ggml_type.TQ2_0": 35,
        "ggml_type.MXFP4": 39,
    }
    # against the code only COUNT and the newest ids differ: every id the summary gives matches GGMLType
    schema_side = [
        (d.kind, d.item, d.document, d.ours)
        for d in report.differences
        if d.against == "schema" and d.item.startswith("ggml_type")
    ]
    assert schema_side == [
        ("enum-value-renumbered", "ggml_type.COUNT", 40, 43),
        ("enum-value-missing", "ggml_type.NVFP4", None, 40),
        ("enum-value-missing", "ggml_type.Q1_0", None, 41),
        ("enum-value-missing", "ggml_type.Q2_0", None, 42),
        ("enum-removed-differs", "ggml_type.removed", [4, 5], [4, 5, 31, 32, 33, 36, 37, 38]),
    ]
    assert report.facts["enums"]["ggml_type"]["removed"] == {"Q4_2": 4, "Q4_3": 5}
    assert report.facts["enums"]["general.file_type"]["removed"] == {"Q4_2": 5, "Q4_3": 6}


def test_article_newer_enum():
    facts = extract_facts(seed("002_26b09f180d62a9a2.txt"))
    assert facts["enums"]["ggml_type"]["values"]["IQ1_M"] == 29 and facts["enums"]["ggml_type"]["values"]["COUNT"] == 30


def test_schema_and_spec_dir_agree_except_the_recorded_deviations():
    """The anti-drift guard: renumber a type, reorder or retype a struct field, and this list changes."""
    got = [(d.kind, d.item, d.document, d.ours) for d in schema_differences()]
    from gguf_schema.format.types import GGMLType

    spec = load_spec()
    dev = spec["deviations"]["ggml_type"]
    expected = [
        ("enum-value-renumbered", f"ggml_type.{n}", dev[n]["spec"], dev[n]["schema"])
        for n in ("I8", "I16", "I32", "COUNT")
    ]
    expected += [("enum-value-missing", f"ggml_type.{n}", None, int(GGMLType[n])) for n in TYPES_16_23 + TYPES_27_42]
    expected += [("enum-removed-differs", "ggml_type.removed", [4, 5], [4, 5, 31, 32, 33, 36, 37, 38])]
    from gguf_schema.format.types import FileType

    expected += [("enum-value-missing", f"general.file_type.{n}", None, int(FileType[n])) for n in FILE_TYPES_19_UP]
    expected += [("enum-removed-differs", "general.file_type.removed", [5, 6], [5, 6, 33, 34, 35])]
    assert got == expected
    # the structs agree field for field; the one spelling difference: the schema stores ggml_type as its uint32_t
    ours = schema_facts()["structs"]
    for name, fields in spec["structs"].items():
        mine = [(n, "ggml_type" if (name, n) == ("gguf_tensor_info_t", "type") else t) for n, t in ours[name]]
        doc = [tuple(f) for f in fields]
        if name == "gguf_metadata_value_t":  # a union: members, not an order
            doc, mine = sorted(doc), sorted(mine)
        assert doc == mine, name


#: folders of a working tree that hold build products, not sources: a copy of the spec data there
#: (``pip install .`` leaves ``build/lib.../gguf_schema/spec/gguf.json``) is not a second source
_BUILD_PRODUCTS = {"build", "dist", ".git", ".tox", ".nox", ".venv", "venv", "__pycache__"}


def _source_copies_of_spec_data() -> list[Path]:
    return sorted(
        p
        for p in REPO.rglob("*.json")
        if p.name in ("gguf.json", "spec_data.json")
        and not (_BUILD_PRODUCTS & set(p.relative_to(REPO).parts))
        and not any(part.endswith(".egg-info") for part in p.relative_to(REPO).parts)
    )


def test_spec_data_is_one_copy_read_as_package_data():
    # one copy in the source tree (build products ignored: the README's `pip install .` leaves one in
    # build/), and it is exactly what the library reads as package data
    copies = _source_copies_of_spec_data()
    assert [p.relative_to(REPO).as_posix() for p in copies] == ["spec/gguf.json"]  # top level, as the tree shows
    assert load_spec() == json.loads(copies[0].read_text(encoding="utf-8"))


def test_spec_dir_names_its_source():
    readme = (REPO / "spec" / "README.md").read_text(encoding="utf-8")
    assert "docs/gguf.md" in readme and "000_d466ef7820170e32" in readme
    assert load_spec()["source"]["format_version"] == 3


def run_cli(*args: str) -> subprocess.CompletedProcess:
    r = helpers.run_cli(*args)  # in this process: the commands as main runs them
    return subprocess.CompletedProcess(
        args, r.returncode, r.stdout.decode("utf-8", "surrogateescape"), r.stderr.decode()
    )


def test_cli_audit_spec(tmp_path):
    path = SEEDS / "004_c146410c70882888.txt"
    if not path.is_file():
        pytest.skip("../shared/seeds is absent")
    p = run_cli("audit-spec", str(path))
    assert p.returncode == 1 and f"{path}: 46 differences" in p.stdout  # (46th: llama.cpp's MOSTLY_Q2_0, 41)
    assert "[spec] enum-value-added ggml_type.BF16: document 30, ours None" in p.stdout
    p = run_cli("audit-spec", "--json", str(path))
    out = json.loads(p.stdout)
    assert (
        p.returncode == 1
        and len(out["differences"]) == 46
        and out["differences"][0]
        == {"against": "spec", "kind": "enum-value-added", "item": "ggml_type.IQ2_XXS", "document": 16, "ours": None}
    )
    clean = tmp_path / "clean.md"
    clean.write_text(
        "enum gguf_metadata_value_type: uint32_t { GGUF_METADATA_VALUE_TYPE_UINT8 = 0, GGUF_METADATA_VALUE_TYPE_INT8, "
        "GGUF_METADATA_VALUE_TYPE_UINT16, GGUF_METADATA_VALUE_TYPE_INT16, GGUF_METADATA_VALUE_TYPE_UINT32, "
        "GGUF_METADATA_VALUE_TYPE_INT32, GGUF_METADATA_VALUE_TYPE_FLOAT32, GGUF_METADATA_VALUE_TYPE_BOOL, "
        "GGUF_METADATA_VALUE_TYPE_STRING, GGUF_METADATA_VALUE_TYPE_ARRAY, GGUF_METADATA_VALUE_TYPE_UINT64, "
        "GGUF_METADATA_VALUE_TYPE_INT64, GGUF_METADATA_VALUE_TYPE_FLOAT64, };\n"
    )
    p = run_cli("audit-spec", str(clean))
    assert p.returncode == 0 and "0 differences" in p.stdout
    assert run_cli("audit-spec", str(tmp_path / "nope.md")).returncode == 2
