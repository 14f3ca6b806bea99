"""Validation profiles: one file per rule that breaks exactly that rule, ggml's malformed-file classes, real files, CLI."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGMLType, GGUFArray, ValueType, make_field
from gguf_schema.check.validate import CHECKS, PROFILES, RULES, Report, check, validate
from gguf_schema.check.validate import alignment as alignment_rules
from gguf_schema.check.validate import core as core_rules
from gguf_schema.check.validate import header as header_rules
from gguf_schema.check.validate import keys as keys_rules
from gguf_schema.check.validate import layout as layout_rules
from gguf_schema.check.validate import standard as standard_rules
from gguf_schema.check.validate import tensors as tensors_rules
from gguf_schema.check.validate import values as values_rules
from gguf_schema.check.validate.core import Checker, Rule, reports
from gguf_schema.errors import GGUFFormatError, GGUFInternalError, GGUFValidationError
from gguf_schema.format.values import BoolByte
from gguf_schema.testing.demo import example_metadata, example_tensors
from gguf_schema.testing.malformed import (
    GGML_PROFILE_DIFFERS,
    alignment_nul_key_file,
    base_metadata,
    ggml_edge_cases,
    malformed_cases,
    zero_bytes_short_file,
)
from gguf_schema.writer import RawTensor

from . import helpers
from .conftest import gemma_path, write

RULE_MODULES = (
    core_rules,
    header_rules,
    keys_rules,
    values_rules,
    alignment_rules,
    tensors_rules,
    layout_rules,
    standard_rules,
)

# --------------------------------------------------------------------------- building files


def save(metadata: Any = None, tensors: Any = None, **kw: Any) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, metadata, tensors, **kw)
    return buf.getvalue()


def fields(md: dict[str, Any], *extra: Any) -> list:
    return [make_field(k, v) for k, v in md.items()] + list(extra)


def patch(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


def u32(v: int) -> bytes:
    return v.to_bytes(4, "little")


def u64(v: int) -> bytes:
    return v.to_bytes(8, "little")


def opened(data: bytes) -> gguf_schema.GGUFFile:
    return gguf_schema.open(data)


def value_at(data: bytes, key: str) -> int:
    """Offset of a key's value: the record's offset (from the reader) + key string + value type."""
    with opened(data) as f:
        return f.fields[key].offset + 8 + len(key.encode()) + 4


def record_at(data: bytes, key: str, occurrence: int = 0) -> int:
    with opened(data) as f:
        return [r.offset for r in f.fields.records if r.key == key][occurrence]


def tensor_field_at(data: bytes, index: int, what: str, dim: int = 0) -> int:
    """Offset of a tensor-info field: name, n_dims, dims[dim], type or offset."""
    with opened(data) as f:
        t = f.tensor_list[index]
        n = len(t.name.encode("utf-8", "surrogateescape"))
        at = {"name": 0, "n_dims": 8 + n, "dim": 8 + n + 4 + 8 * dim, "type": 8 + n + 4 + 8 * len(t.dims)}
        at["offset"] = at["type"] + 4
        return t.info_offset + at[what]


def base(**extra: Any) -> dict[str, Any]:
    md = base_metadata()
    md.update(extra)
    return md


F32_2x4 = {"w": np.arange(8, dtype=np.float32).reshape(2, 4)}


# --------------------------------------------------------------------------- one file per rule


@dataclass
class RuleCase:
    """A file that breaks ``rule``; ``rules`` gives every profile's exact list of rule ids."""

    rule: str
    build: Callable[[], bytes]
    rules: dict[str, list[str]]
    offset: Callable[[bytes], int | None]
    name: str | None
    value: Any


def _plain() -> bytes:
    return save(base(), {"a": np.zeros(3, np.float32), "b": np.ones(8, np.float32)})


def _truncated() -> bytes:
    return _plain()[:-1]


def _type_patched(t: int) -> Callable[[], bytes]:
    def build() -> bytes:
        d = save(base_metadata(quantized=True), F32_2x4)
        return patch(d, tensor_field_at(d, 0, "type"), u32(t))

    return build


def _dims_patched(dtype: Any, shape: tuple[int, ...], dims: dict[int, int]) -> Callable[[], bytes]:
    def build() -> bytes:
        d = save(base(), {"t": np.zeros(shape, dtype)})
        for j, v in dims.items():
            d = patch(d, tensor_field_at(d, 0, "dim", j), u64(v))
        return d

    return build


def _zero_bytes_short() -> bytes:  # two zero-byte tensors, the file ends before the aligned data start
    return zero_bytes_short_file(0)


ZERO_BYTES_DATA_OFFSET = (lambda d: -(-len(d) // 32) * 32)(zero_bytes_short_file(0))


def _misaligned_offsets() -> bytes:  # declared 64, laid out for 32
    d = save(base(), {"a": np.zeros(6, np.float32), "b": np.ones(6, np.float32)}, alignment=32)
    return patch(d, value_at(d, "general.alignment"), u32(64))


def _inconsistent_alignment() -> bytes:  # declared 32, laid out for 64: offsets 0 and 64, ggml expects 0 and 32
    d = save(base(), {"a": np.zeros(8, np.float32), "b": np.ones(8, np.float32)}, alignment=64)
    return patch(d, value_at(d, "general.alignment"), u32(32))


def _size_overflow() -> bytes:
    d = save(base(), {"a": np.zeros(4, np.float64), "b": np.zeros(4, np.float64)})
    d = patch(d, tensor_field_at(d, 0, "dim"), u64(2**60))
    d = patch(d, tensor_field_at(d, 1, "dim"), u64(2**60))
    return patch(d, tensor_field_at(d, 1, "offset"), u64(2**63))


def _no_final_padding() -> bytes:
    d = save(base(), {"a": np.zeros(8, np.float32), "b": np.ones(1, np.float32)})
    with opened(d) as f:
        end = f.tensors["b"].offset + 4
    assert len(d) - end == 28
    return d[:end]


def _nonzero_padding() -> bytes:
    d = save(base(), F32_2x4)
    with opened(d) as f:
        assert len(f.padding) > 0
        return patch(d, f.metadata_end, b"\x07")


def _tokenizer(**over: Any) -> bytes:
    md = base(
        **{
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": ["a", "b", "c"],
            "tokenizer.ggml.scores": np.zeros(3, np.float32),
            "tokenizer.ggml.token_type": np.ones(3, np.int32),
            "tokenizer.ggml.bos_token_id": np.uint32(0),
        }
    )
    md.update(over)
    return save(md)


def _without(key: str) -> dict[str, Any]:
    md = base()
    del md[key]
    return md


def _pad_offset() -> Callable[[bytes], int]:
    def at(d: bytes) -> int:
        with opened(d) as f:
            return f.metadata_end

    return at


def _data_offset(name: str) -> Callable[[bytes], int]:
    def at(d: bytes) -> int:
        with opened(d) as f:
            return f.tensors[name].offset

    return at


def _array_item(key: str, index: int, item_size: int) -> Callable[[bytes], int]:
    return lambda d: value_at(d, key) + 4 + 8 + index * item_size


NONE: dict[str, list[str]] = {"spec": [], "ggml": [], "lenient": []}


def R(
    spec: list[str] | None = None, ggml: list[str] | None = None, lenient: list[str] | None = None
) -> dict[str, list[str]]:
    return {"spec": spec or [], "ggml": ggml or [], "lenient": lenient or []}


E = lambda n: f"GGUF-E{n:03d}"  # noqa: E731
W = lambda n: f"GGUF-W{n:03d}"  # noqa: E731

RULE_CASES = [
    RuleCase(E(1), lambda: b"GGUF" + u32(9) + bytes(16), R([E(1)], [E(1)], [E(1)]), lambda d: 4, "header.version", 9),
    RuleCase(E(2), _truncated, R([E(2)], [E(2), E(40)], [E(2)]), _data_offset("b"), "b", 32),
    RuleCase(E(3), _type_patched(43), R([E(3)], [E(3)], [E(3)]), lambda d: tensor_field_at(d, 0, "type"), "w", 43),
    RuleCase(E(4), _type_patched(4), R([E(4)], [E(4)], [E(4)]), lambda d: tensor_field_at(d, 0, "type"), "w", 4),
    RuleCase(
        E(5),
        _type_patched(int(GGMLType.Q8_0)),
        R([E(5)], [E(5)], [E(5)]),
        lambda d: tensor_field_at(d, 0, "dim"),
        "w",
        4,
    ),
    RuleCase(E(10), lambda: save(base(), F32_2x4, version=1), R([E(12)], [E(10)]), lambda d: 4, None, 1),
    RuleCase(E(11), lambda: save(base(), F32_2x4, byte_order="big"), R(ggml=[E(11)]), lambda d: 4, None, "big"),
    RuleCase(E(12), lambda: save(base(), F32_2x4, version=2), R([E(12)]), lambda d: 4, None, 2),
    RuleCase(
        E(20), lambda: save(base(**{"Bad.Key": 1})), R([E(20)]), lambda d: record_at(d, "Bad.Key"), "Bad.Key", "Bad.Key"
    ),
    RuleCase(
        E(21),
        lambda: save(base(**{"a" * 65536: 1})),
        R([E(21)]),
        lambda d: record_at(d, "a" * 65536),
        "a" * 120 + "... (65,536 characters)",  # a finding names a key by its first characters and its length
        65536,
    ),
    RuleCase(
        E(22), lambda: save(fields(base(), make_field("", 1))), R([E(20)], [E(22)]), lambda d: record_at(d, ""), "", ""
    ),
    RuleCase(
        E(23),
        lambda: save(fields(base(), make_field("general.name", "x"), make_field("general.name", "y"))),
        R([W(4)], [E(23)]),
        lambda d: record_at(d, "general.name", 1),
        "general.name",
        "general.name",
    ),
    RuleCase(
        E(24),
        lambda: save(
            base(**{"demo.nested": GGUFArray(ValueType.ARRAY, [GGUFArray(ValueType.INT8, np.array([1], np.int8))])})
        ),
        R(ggml=[E(24)]),
        lambda d: value_at(d, "demo.nested"),
        "demo.nested",
        "ARRAY",
    ),
    RuleCase(
        E(25),
        lambda: save(fields(base(), make_field("demo.flag", BoolByte(2), ValueType.BOOL))),
        R([E(25)]),
        lambda d: value_at(d, "demo.flag"),
        "demo.flag",
        2,
    ),
    RuleCase(
        E(26),
        lambda: save(base(**{"general.name": "x\udcfe"})),
        R([E(26)]),
        lambda d: value_at(d, "general.name"),
        "general.name",
        b"x\xfe",
    ),
    RuleCase(
        E(27),
        lambda: save(fields(base(), make_field("general.alignment", 32, ValueType.INT32))),
        R([E(53)], [E(27)]),
        lambda d: value_at(d, "general.alignment"),
        "general.alignment",
        "INT32",
    ),
    RuleCase(
        E(28),
        lambda: save(base(), F32_2x4, alignment=48),
        R(ggml=[E(28)]),
        lambda d: value_at(d, "general.alignment"),
        "general.alignment",
        48,
    ),
    RuleCase(
        E(29),
        lambda: save(base(), F32_2x4, alignment=4),
        R([E(29)]),
        lambda d: value_at(d, "general.alignment"),
        "general.alignment",
        4,
    ),
    RuleCase(
        E(30),
        lambda: save(base(), {"n" * 64: np.zeros(2, np.float32)}),
        R(ggml=[E(30)]),
        lambda d: tensor_field_at(d, 0, "name"),
        "n" * 64,
        64,
    ),
    RuleCase(
        E(31),
        lambda: save(base(), {"n" * 65: np.zeros(2, np.float32)}),
        R([E(31)], [E(30)]),
        lambda d: tensor_field_at(d, 0, "name"),
        "n" * 65,
        65,
    ),
    RuleCase(
        E(32),
        lambda: save(base(), {"a\0x": np.zeros(2, np.float32), "a\0y": np.zeros(2, np.float32)}),
        R(ggml=[E(32)]),
        lambda d: tensor_field_at(d, 1, "name"),
        "a\0y",
        "a",
    ),
    RuleCase(
        E(33),
        lambda: save(base(), {"t": np.zeros((1, 1, 1, 2, 2), np.float32)}),
        R([E(33)], [E(33)]),
        lambda d: tensor_field_at(d, 0, "n_dims"),
        "t",
        5,
    ),
    RuleCase(
        E(34),
        _dims_patched(np.float32, (0, 4), {0: 2**64 - 1}),
        R(ggml=[E(34)]),
        lambda d: tensor_field_at(d, 0, "dim", 0),
        "t",
        -1,
    ),
    RuleCase(  # 2^33 * (2^31 + 1) wraps to 2^33 in int64: positive, so ggml's check runs and rejects
        E(35),
        _dims_patched(np.float32, (4, 4), {0: 2**33, 1: 2**31 + 1}),
        R([E(2)], [E(35), E(2)], [E(2)]),
        lambda d: tensor_field_at(d, 0, "dim", 0),
        "t",
        (2**33, 2**31 + 1),
    ),
    RuleCase(  # 2^61 F64 elements: 2^64 bytes
        E(36),
        _dims_patched(np.float64, (4,), {0: 2**61}),
        R([E(2)], [E(36), E(2)], [E(2)]),
        lambda d: tensor_field_at(d, 0, "dim", 0),
        "t",
        (2**61,),
    ),
    RuleCase(E(37), _misaligned_offsets, R([E(37)], [E(38)]), lambda d: tensor_field_at(d, 1, "offset"), "b", 32),
    RuleCase(E(38), _inconsistent_alignment, R(ggml=[E(38)]), lambda d: tensor_field_at(d, 1, "offset"), "b", 64),
    RuleCase(
        E(39),
        _size_overflow,
        R([E(2), E(2)], [E(2), E(2), E(39)], [E(2), E(2)]),
        lambda d: tensor_field_at(d, 1, "offset"),
        "b",
        2**63,
    ),
    RuleCase(E(40), _no_final_padding, R(ggml=[E(40)]), lambda d: gguf_schema.open(d).data_offset, None, 64),
    RuleCase(
        E(41),
        _zero_bytes_short,
        R(ggml=[E(2), E(2), E(41)]),
        lambda d: gguf_schema.open(d).metadata_end,
        None,
        ZERO_BYTES_DATA_OFFSET,
    ),
    RuleCase(E(50), lambda: save({"general.name": "x"}), R([E(50)]), lambda d: None, "general.architecture", None),
    RuleCase(
        E(51),
        lambda: save({"general.architecture": "Gpt-2"}),
        R([E(51)]),
        lambda d: value_at(d, "general.architecture"),
        "general.architecture",
        "Gpt-2",
    ),
    RuleCase(
        E(52),
        lambda: save(base(), {"q": RawTensor(GGMLType.Q8_0, (1, 32), bytes(34))}),
        R([E(52)]),
        lambda d: None,
        "general.quantization_version",
        None,
    ),
    RuleCase(
        E(53),
        lambda: save(base(**{"gpt2.context_length": np.float32(64)})),
        R([E(53)]),
        lambda d: value_at(d, "gpt2.context_length"),
        "gpt2.context_length",
        "FLOAT32",
    ),
    RuleCase(E(54), lambda: save(_without("gpt2.block_count")), R([E(54)]), lambda d: None, "gpt2.block_count", None),
    RuleCase(
        E(55),
        lambda: _tokenizer(**{"tokenizer.ggml.scores": np.zeros(2, np.float32)}),
        R([E(55)]),
        lambda d: value_at(d, "tokenizer.ggml.scores") + 4,
        "tokenizer.ggml.scores",
        2,
    ),
    RuleCase(
        E(56),
        lambda: _tokenizer(**{"tokenizer.ggml.eos_token_id": np.uint32(3)}),
        R([E(56)]),
        lambda d: value_at(d, "tokenizer.ggml.eos_token_id"),
        "tokenizer.ggml.eos_token_id",
        3,
    ),
    RuleCase(
        E(57),
        lambda: save(base(**{"general.file_type": np.uint32(7)}), F32_2x4),
        R([E(57)]),
        lambda d: value_at(d, "general.file_type"),
        "general.file_type",
        7,
    ),
    RuleCase(
        W(1),
        lambda: save({"general.architecture": "phi3"}),
        R([W(1)]),
        lambda d: value_at(d, "general.architecture"),
        "general.architecture",
        "phi3",
    ),
    RuleCase(
        W(2),
        lambda: save(base(**{"general.file_type": np.uint32(32)}), {"b": RawTensor(GGMLType.BF16, (4,), bytes(8))}),
        R([W(2)]),
        lambda d: value_at(d, "general.file_type"),
        "general.file_type",
        32,
    ),
    RuleCase(W(3), _nonzero_padding, R([W(3)]), _pad_offset(), None, 7),
    RuleCase(
        W(4),
        lambda: save(fields(base(), make_field("general.name", "x"), make_field("general.name", "x"))),
        R([W(4)], [E(23)]),
        lambda d: record_at(d, "general.name", 1),
        "general.name",
        "general.name",
    ),
    RuleCase(
        W(5),
        lambda: patch(
            d := save(base(), {"a": np.zeros(2, np.float32), "b": np.ones(2, np.float32)}),
            tensor_field_at(d, 1, "name") + 8,
            b"a",
        ),
        R([W(5)], [E(32)]),
        lambda d: tensor_field_at(d, 1, "name"),
        "a",
        "a",
    ),
    RuleCase(
        W(10),
        lambda: alignment_nul_key_file(64),
        R([E(20)], [W(10)]),
        lambda d: value_at(d, "general.alignment\0x"),
        "general.alignment\0x",
        64,
    ),
    RuleCase(
        W(11),
        lambda: save(fields(base(), make_field("general.name\0x", "payload"), make_field("general.name", "x"))),
        R([E(20)], [W(11)]),
        lambda d: record_at(d, "general.name"),
        "general.name",
        "general.name",
    ),
]

# variants that pin offsets inside arrays
EXTRA_CASES = [
    RuleCase(
        E(25),
        lambda: save(base(**{"demo.flags": GGUFArray(ValueType.BOOL, np.array([1, 0, 2], np.uint8).view(bool))})),
        R([E(25)]),
        _array_item("demo.flags", 2, 1),
        "demo.flags[2]",
        2,
    ),
    RuleCase(
        E(26),
        lambda: _tokenizer(**{"tokenizer.ggml.tokens": ["ab", "c\udcff", "d"]}),
        R([E(26)]),
        lambda d: value_at(d, "tokenizer.ggml.tokens") + 4 + 8 + (8 + 2),
        "tokenizer.ggml.tokens[1]",
        b"c\xff",
    ),
    RuleCase(
        E(53),
        lambda: save(base(**{"general.quantization_version": np.uint64(2)})),
        R([E(53)]),
        lambda d: value_at(d, "general.quantization_version"),
        "general.quantization_version",
        "UINT64",
    ),
    RuleCase(
        E(53),
        lambda: _tokenizer(**{"tokenizer.ggml.scores": np.zeros(3, np.float64)}),
        R([E(53)]),
        lambda d: value_at(d, "tokenizer.ggml.scores"),
        "tokenizer.ggml.scores",
        "ARRAY[FLOAT64]",
    ),
]


def test_every_rule_has_a_case_and_the_table_is_well_formed():
    assert [c.rule for c in RULE_CASES] == list(RULES)
    for r in RULES.values():
        assert r.severity == ("error" if r.id.startswith("GGUF-E") else "warning")
        assert r.profiles and r.profiles <= set(PROFILES)
        assert r.statement and r.source


def test_the_rule_table_is_every_rule_the_checks_declare():
    """Each rule is declared once, beside its check: the table holds exactly the rules of the concern
    modules, each module's rules are the ones its checks declare, and E001 (the unreadable file) alone
    belongs to no check."""
    declared = {r.id: r for module in RULE_MODULES for r in vars(module).values() if isinstance(r, Rule)}
    assert declared == RULES
    by_checks = {r.id for c in CHECKS for r in c.rules}
    assert sorted(set(RULES) - by_checks) == ["GGUF-E001"]


def test_a_check_reports_only_the_rules_it_declares():
    with gguf_schema.open(save({"general.architecture": "gpt2"})) as f:
        c = Checker(f, "ggml")

        @reports(header_rules.E010)
        def wrong(c: Checker) -> None:
            c.add(keys_rules.E022, 0, None, None, "a rule this check does not declare")

        @reports(header_rules.E012)
        def other_profile(c: Checker) -> None:
            c.add(header_rules.E012, 4, None, 2, "a spec rule in the ggml profile")

        with pytest.raises(GGUFInternalError, match="GGUF-E022 reported outside"):
            c.run(wrong)
        with pytest.raises(GGUFInternalError, match="GGUF-E012 reported .* under the ggml profile"):
            c.run(other_profile)
        with pytest.raises(GGUFInternalError):
            c.add(header_rules.E010, 4, None, 2, "outside any check")
        assert c.findings == [] and c.running is None


@pytest.mark.parametrize("case", RULE_CASES + EXTRA_CASES, ids=lambda c: c.rule)
def test_file_breaking_one_rule(case: RuleCase):
    data = case.build()
    for profile in PROFILES:
        report = check(data, profile)
        assert [f.rule for f in report.findings] == case.rules[profile], profile
        assert report.ok == (not any(RULES[r].severity == "error" for r in case.rules[profile]))
    # the finding itself: where, what, which value
    profile = next(p for p in PROFILES if case.rule in case.rules[p])
    finding = next(f for f in check(data, profile).findings if f.rule == case.rule)
    assert finding.severity == RULES[case.rule].severity
    assert (finding.offset, finding.name, finding.value) == (case.offset(data), case.name, case.value)
    assert finding.message


def test_offsets_point_at_the_offending_bytes():
    d = _type_patched(43)()
    f = next(x for x in check(d, "ggml").findings if x.rule == "GGUF-E003")
    assert d[f.offset : f.offset + 4] == u32(43)
    d = _inconsistent_alignment()
    f = check(d, "ggml").findings[0]
    assert d[f.offset : f.offset + 8] == u64(64)
    d = save(base(), F32_2x4, alignment=48)
    f = check(d, "ggml").findings[0]
    assert d[f.offset : f.offset + 4] == u32(48)


# --------------------------------------------------------------------------- ggml's classes of malformed file

CASES = malformed_cases()


def test_malformed_cases_cover_every_class_of_ggml_reader_tests():
    names = {c.name for c in CASES}
    required = {
        "header_bad_magic",
        "header_version_0",
        "header_version_1",
        "header_version_future",
        "header_n_tensors_max",
        "header_n_kv_max",
        "header_empty",
        "kv_key_length_max",
        "kv_empty_key",
        "kv_value_type_13",
        "kv_duplicate_key",
        "kv_alignment_13",
        "kv_alignment_int32",
        "kv_random_values",
        "tensor_name_64_bytes",
        "tensor_n_dims_5",
        "tensor_dim_negative",
        "tensor_element_count_overflow",
        "tensor_byte_size_overflow",
        "tensor_type_43",
        "tensor_offset_max",
        "tensor_duplicate_names",
        "tensor_alignment_13",
        "tensor_offsets_other_alignment",
        "tensor_zero_size_dim",
        "tensor_random_valid",
        "tensor_alignment_1",
        "data_one_byte_short",
        "data_alignment_13",
        "data_inconsistent_alignment",
        "data_memory_size_overflow",
        "data_correct",
        "data_alignment_1",
    }
    assert required <= names
    assert len(names) == len(CASES)
    ggml_accepts = {c.name for c in CASES if c.expected["ggml"] == "accept"}
    assert ggml_accepts == {
        "header_empty",
        "kv_random_values",
        "kv_bool_byte_2",
        "kv_invalid_utf8",
        "tensor_zero_size_dim",
        "tensor_random_valid",
        "tensor_alignment_1",
        "data_correct",
        "data_alignment_1",
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_malformed_case_verdicts(case):
    for profile in PROFILES:
        report = check(case.data, profile)
        assert ("accept" if report.ok else "reject") == case.expected[profile], (
            profile,
            [str(f) for f in report.findings],
        )
        json.dumps(report.to_dict())  # every finding value is JSON-ready


EDGE_CASES = ggml_edge_cases()


@pytest.mark.parametrize("case", EDGE_CASES, ids=lambda c: c.name)
def test_ggml_edge_case_verdicts(case):
    """The ggml profile gives ggml's own verdict on every edge case of the differential harness, except where
    ``GGML_PROFILE_DIFFERS`` says why not (a ggml bug); the other profiles give the table's verdicts."""
    for profile in PROFILES:
        report = check(case.data, profile)
        want = case.expected[profile]
        if profile == "ggml" and case.name in GGML_PROFILE_DIFFERS:
            assert want == "accept"
            want = "reject"
        assert ("accept" if report.ok else "reject") == want, (profile, [str(f) for f in report.findings])


def test_ggml_profile_differs_only_on_edge_cases_with_a_reason():
    names = {c.name for c in EDGE_CASES}
    assert set(GGML_PROFILE_DIFFERS) <= names
    assert all(len(reason) > 40 for reason in GGML_PROFILE_DIFFERS.values())


def test_ggml_profile_says_where_ggml_reads_the_data():
    """A key 'general.alignment\\0x' = 64: ggml (C-string lookup) reads the data 32 bytes after a whole-key reader."""
    d = alignment_nul_key_file(64)
    with gguf_schema.open(d) as f:
        spec_offset = f.data_offset
        # what a C-string first-match lookup returns, computed here without the library's view
        first = next(r for r in f.fields.records if r.key.split("\0")[0] == "general.alignment")
    assert (first.key, first.value) == ("general.alignment\0x", 64)
    (w,) = check(d, "ggml").findings
    assert w.rule == "GGUF-W010"
    assert f"offset {-(-spec_offset // 64) * 64}" in w.message and f"offset {spec_offset}" in w.message
    assert -(-spec_offset // 64) * 64 == spec_offset + 32


def test_rejected_files_still_open():
    """A file any profile rejects still opens unless its bytes cannot be parsed at all (GGUF-E001)."""
    for case in CASES:
        unreadable = check(case.data, "lenient").findings[:1]
        if unreadable and unreadable[0].rule == "GGUF-E001":
            with pytest.raises(gguf_schema.GGUFError):
                gguf_schema.open(case.data)
        else:
            gguf_schema.open(case.data).close()


def test_random_values_file_holds_every_value_type():
    data = next(c for c in CASES if c.name == "kv_random_values").data
    with gguf_schema.open(data) as f:
        types = {r.type for r in f.fields.records}
        elements = {r.element_type for r in f.fields.records if r.element_type is not None}
        assert types == set(ValueType)
        assert elements == set(ValueType) - {ValueType.ARRAY}
        assert len(f.fields.records) >= 100


# --------------------------------------------------------------------------- real files

VOCAB_SPEC_FINDINGS = {
    "ggml-vocab-baichuan.gguf": [("GGUF-W001", "general.architecture", "baichuan")],
    "ggml-vocab-bert-bge.gguf": [("GGUF-W001", "general.architecture", "bert")],
    "ggml-vocab-deepseek-coder.gguf": [],
    "ggml-vocab-deepseek-llm.gguf": [],
    "ggml-vocab-falcon.gguf": [("GGUF-E054", "falcon.attention.use_norm", None)],
    "ggml-vocab-gpt-2.gguf": [],
    "ggml-vocab-gpt-neox.gguf": [],
    "ggml-vocab-llama-spm.gguf": [],
    "ggml-vocab-mpt.gguf": [
        ("GGUF-E054", "mpt.attention.alibi_bias_max", None),
        ("GGUF-E054", "mpt.attention.clip_kqv", None),
    ],
    "ggml-vocab-phi-3.gguf": [("GGUF-W001", "general.architecture", "phi3")],
    "ggml-vocab-refact.gguf": [("GGUF-W001", "general.architecture", "refact")],
    "ggml-vocab-starcoder.gguf": [("GGUF-W001", "general.architecture", "starcoder2")],
}


def test_vocab_files_pass_ggml_and_lenient_and_spec_says_exactly(vocab_file):
    for profile in ("ggml", "lenient"):
        r = check(vocab_file, profile)
        assert r.findings == [] and r.ok and r.path == str(vocab_file)
    r = check(vocab_file, "spec")
    assert [(f.rule, f.name, f.value) for f in r.findings] == VOCAB_SPEC_FINDINGS[vocab_file.name]


def test_demo_file_verdicts():
    data = save(example_metadata(), example_tensors())
    assert check(data, "spec").findings == [] and check(data, "lenient").findings == []
    # the demo carries a nested array on purpose (every value type); ggml's reader rejects those
    r = check(data, "ggml")
    assert [(f.rule, f.name, f.offset) for f in r.findings] == [
        ("GGUF-E024", "demo.nested", value_at(data, "demo.nested"))
    ]


def test_gemma_model_verdicts():
    path = gemma_path()
    if path is None:
        pytest.skip("gemma-3-270m is not installed")
    assert check(path, "ggml").findings == [] and check(path, "lenient").findings == []
    with gguf_schema.open(path) as f:
        r = validate(f, "spec")
    assert [(x.rule, x.name, x.value) for x in r.findings] == [("GGUF-W001", "general.architecture", "gemma3")]
    assert r.ok


# --------------------------------------------------------------------------- API details


def test_validate_accepts_an_open_file_and_a_missing_path(tmp_path):
    data = save(base(), F32_2x4, alignment=48)
    with gguf_schema.open(data) as f:
        assert validate(f, "ggml").rules == ["GGUF-E028"]
    r = validate(tmp_path / "missing.gguf", "lenient")
    assert not r.readable and r.rules == ["GGUF-E001"] and "No such file" in r.findings[0].message
    with pytest.raises(ValueError):
        validate(data, "pedantic")


def test_unreadable_file_finding_carries_the_error_details():
    data = patch(save(base()), 0, b"GGUX")
    r = check(data, "spec")
    (f,) = r.findings
    assert (f.rule, f.offset, f.name, f.value, r.readable) == ("GGUF-E001", 0, "header.magic", b"GGUX", False)
    assert "not a GGUF file" in f.message
    assert r.to_dict()["findings"][0]["value"] == "GGUX"


def test_report_properties():
    data = _tokenizer(**{"tokenizer.ggml.eos_token_id": np.uint32(9), "general.architecture": "phi3"})
    r = check(data, "spec")
    assert isinstance(r, Report) and not r.ok
    assert [f.rule for f in r.errors] == ["GGUF-E056"] and [f.rule for f in r.warnings] == ["GGUF-W001"]
    d = r.to_dict()
    assert (d["profile"], d["ok"], d["errors"], d["warnings"]) == ("spec", False, 1, 1)


def test_strict_open_raises_on_the_first_error_and_opens_clean_files():
    data = save(base(), F32_2x4, alignment=48)
    with pytest.raises(GGUFValidationError) as e:
        gguf_schema.open(data, strict="ggml")
    assert isinstance(e.value, GGUFFormatError)
    assert e.value.finding.rule == "GGUF-E028" and e.value.value == 48 and e.value.path == "general.alignment"
    assert e.value.offset == value_at(data, "general.alignment")
    assert e.value.report.errors[0] is e.value.finding
    with gguf_schema.open(data, strict="spec") as f:  # 48 is a multiple of 8: the spec is satisfied
        assert f.alignment == 48
    with pytest.raises(gguf_schema.GGUFTruncatedError):  # open()'s own errors propagate unchanged
        gguf_schema.open(data[:30], strict="lenient")


def test_strict_open_passes_open_arguments():
    data = _tokenizer()
    with pytest.raises(gguf_schema.GGUFLimitError):
        gguf_schema.open(data, strict="lenient", limits=gguf_schema.Limits(max_array_length=2))
    with pytest.raises(ValueError, match="unknown profile 'strictest'"):
        gguf_schema.open(data, strict="strictest")


# --------------------------------------------------------------------------- command line


def run_cli(*args: str) -> subprocess.CompletedProcess:
    r = helpers.run_cli(*args)  # in this process: the commands as main runs them
    return subprocess.CompletedProcess(
        args, r.returncode, r.stdout.decode("utf-8", "surrogateescape"), r.stderr.decode()
    )


def test_cli_check_exit_codes_and_text(tmp_path):
    clean = write(tmp_path, save(base(), F32_2x4), "clean.gguf")
    bad = write(tmp_path, save(base(), F32_2x4, alignment=48), "bad.gguf")
    broken = write(tmp_path, b"GGUF" + u32(7), "broken.gguf")
    p = run_cli("check", "--profile", "ggml", str(clean))
    assert p.returncode == 0 and f"{clean}: ok under profile ggml (0 errors, 0 warnings)" in p.stdout
    p = run_cli("check", "--profile", "ggml", str(clean), str(bad))
    assert p.returncode == 1
    assert "GGUF-E028 error [general.alignment]: general.alignment 48 is not a power of two" in p.stdout
    assert run_cli("check", "--profile", "spec", str(bad)).returncode == 0  # spec: 48 is a multiple of 8
    assert run_cli("check", str(bad)).returncode == 1  # the default profile is ggml's
    p = run_cli("check", "--profile", "lenient", str(bad), str(broken))
    assert p.returncode == 2 and f"{broken}: unreadable" in p.stdout


def test_cli_check_json(tmp_path):
    bad = write(tmp_path, save(base(), F32_2x4, alignment=4), "bad.gguf")
    p = run_cli("check", "--json", "--profile", "spec", str(bad))
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert out["profile"] == "spec"
    (rep,) = out["reports"]
    assert (rep["path"], rep["ok"], rep["readable"], rep["errors"]) == (str(bad), False, True, 1)
    (f,) = rep["findings"]
    assert (f["rule"], f["severity"], f["name"], f["value"], f["offset"]) == (
        "GGUF-E029",
        "error",
        "general.alignment",
        4,
        value_at(bad.read_bytes(), "general.alignment"),
    )


def test_cli_rules_lists_the_table():
    p = run_cli("rules", "--profile", "lenient")
    assert p.returncode == 0
    assert [line.split()[0] for line in p.stdout.splitlines() if line.startswith("GGUF-")] == [
        r.id for r in RULES.values() if "lenient" in r.profiles
    ]


def test_tensor_data_beyond_numpy_dimensions_is_a_gguf_error():
    """65 dimensions of 1 under raised limits: numpy cannot shape it; Tensor.data says so as a GGUFFormatError."""
    from gguf_schema.format.limits import Limits
    from gguf_schema.testing.malformed import many_dims_file

    with gguf_schema.open(many_dims_file(65), limits=Limits(max_dims=100)) as f:
        t = f.tensor_list[0]
        assert len(t.dims) == 65
        with pytest.raises(GGUFFormatError, match="65 dimensions") as e:
            t.data
        assert e.value.offset == t.info_offset
