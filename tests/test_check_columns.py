"""The tensor checks on numpy columns find exactly what the tensor-by-tensor checks find.

:class:`~gguf_schema.check.ggml_view.TensorColumns` lets the checks of :mod:`gguf_schema.check.validate`
clear most tensors at once and visit only the others with their per-tensor code. The witness here
is that per-tensor code run on every tensor (:func:`per_tensor`: no tensor cleared, no column
marked small or sized). Both must give the same findings (rule, severity, offset, name, value,
message, in the same order) under every profile, on the malformed cases, ggml's edge cases, real
files and generated tensor tables full of edge values (dimensions 0, 2**31 .. 2**64-1, up to six
dimensions, unknown and removed types, rows that are not whole blocks, offsets misaligned,
misplaced, overlapping and past the end, names with NULs and too long).
"""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema.check.ggml_view import GGMLView, TensorColumns
from gguf_schema.check.validate import PROFILES, validate
from gguf_schema.check.validate.core import Checker
from gguf_schema.format.types import GGMLType, ValueType, tensor_nbytes
from gguf_schema.format.values import make_field
from gguf_schema.testing.malformed import ggml_edge_cases, malformed_cases, many_tensors_file

from .conftest import demo_bytes


def findings(data: bytes, profile: str) -> list[tuple[Any, ...]]:
    report = validate(data, profile)
    return [(f.rule, f.severity, f.offset, f.name, repr(f.value), f.message) for f in report.findings]


def per_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tensor visited by every check, and no column trusted: the checks as they ran tensor by tensor."""
    real_of = TensorColumns.of.__func__  # type: ignore[attr-defined]

    def untrusted(cls: type[TensorColumns], tensors: list[Any]) -> TensorColumns:
        c = real_of(cls, tensors)
        none = np.zeros(len(tensors), bool)
        return TensorColumns(
            c.n_dims, c.ne, c.type_id, c.block_size, c.type_size, none, c.elements, c.nbytes, none, c.stored_offset
        )

    monkeypatch.setattr(TensorColumns, "of", classmethod(untrusted))
    monkeypatch.setattr(Checker, "suspects", lambda self, fine: self.f.tensor_list)


def assert_same(data: bytes, monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[Any, ...]]]:
    fast = [findings(data, p) for p in PROFILES]
    with monkeypatch.context() as m:
        per_tensor(m)
        slow = [findings(data, p) for p in PROFILES]
    assert fast == slow
    return fast


# ----------------------------------------------------------------------- generated tensor tables

_DIMS = [0, 1, 2, 3, 32, 256, 4096, 2**31, 2**32 - 1, 2**32, 2**52, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
_TYPES = [0, 1, 2, 4, 8, 12, 14, 30, 39, 42, 43, 99, 2**32 - 1]  # F32, F16, Q4_0, removed 4, ... unknown ids


def tensor_table(seed: int, count: int = 40, alignment: int | None = None) -> bytes:
    """A file of ``count`` tensor infos drawn from edge values (little-endian v3), its data section after them."""
    rng = np.random.default_rng(seed)
    u32, u64 = struct.Struct("<I").pack, struct.Struct("<Q").pack
    kv = b""
    if alignment is not None:
        key = b"general.alignment"
        kv = u64(len(key)) + key + u32(4) + u32(alignment)
    infos, offset = [], 0
    for i in range(count):
        name = b"t%d" % (i % (count - 3)) if rng.random() < 0.9 else b"n\0%d" % i  # some repeat, some hold a NUL
        if rng.random() < 0.05:
            name = b"long" * 17
        nd = int(rng.choice([0, 1, 1, 2, 2, 3, 4, 5, 6], p=[0.05, 0.2, 0.1, 0.2, 0.1, 0.15, 0.1, 0.05, 0.05]))
        if rng.random() < 0.6:  # plain sizes: the columns clear these
            dims = [int(rng.integers(1, 64)) * 32 for _ in range(nd)]
        else:
            dims = [_DIMS[int(rng.integers(len(_DIMS)))] for _ in range(nd)]
        ggml_type = _TYPES[int(rng.integers(len(_TYPES)))] if rng.random() < 0.4 else int(rng.choice([0, 1, 8]))
        stored = offset
        r = rng.random()
        if r < 0.05:
            stored += 1  # misaligned, misplaced
        elif r < 0.08:
            stored = 2**64 - 1 - int(rng.integers(0, 64))
        elif r < 0.1:
            stored = 2**62
        infos.append(u64(len(name)) + name + u32(nd) + b"".join(map(u64, dims)) + u32(ggml_type) + u64(stored))
        t = GGMLType(ggml_type) if ggml_type < 43 else None
        if t is not None and not t.removed and dims and dims[0] % t.block_size == 0:
            n = dims[0] // t.block_size * t.type_size
            for d in dims[1:]:
                n *= d
            if n < 4096:
                offset += (n + 31) // 32 * 32
    head = b"GGUF" + u32(3) + u64(count) + u64(1 if kv else 0) + kv + b"".join(infos)
    head += bytes(-len(head) % (alignment or 32))
    return head + bytes(int(rng.integers(0, max(1, offset + 64))))


@pytest.mark.parametrize("seed", range(40))
def test_generated_tensor_tables(seed, monkeypatch):
    data = tensor_table(seed, alignment=[None, 32, 64, 1, 48][seed % 5])
    result = assert_same(data, monkeypatch)
    assert any(result), "a table of edge values breaks some rule"


def test_generated_tables_reach_every_tensor_rule():
    """The tables above break every rule the columns clear tensors of (so the comparison is not vacuous)."""
    rules: dict[str, set[str]] = {p: set() for p in PROFILES}
    for seed in range(40):
        data = tensor_table(seed, alignment=[None, 32, 64, 1, 48][seed % 5])
        for p in PROFILES:
            rules[p].update(r[0] for r in findings(data, p))
    tensor_rules = {"GGUF-E002", "GGUF-E003", "GGUF-E004", "GGUF-E005", "GGUF-E033"}
    assert tensor_rules | {"GGUF-E030", "GGUF-E032", "GGUF-E034", "GGUF-E035", "GGUF-E036"} <= rules["ggml"]
    assert tensor_rules | {"GGUF-E031", "GGUF-E037", "GGUF-W005"} <= rules["spec"]
    laid_out = {r[0] for seed in range(30) for r in findings(laid_out_table(seed), "ggml")}
    assert {"GGUF-E038", "GGUF-E039", "GGUF-E040"} <= laid_out


def laid_out_table(seed: int, count: int = 30) -> bytes:
    """Tensors ggml accepts one by one (live types, whole blocks, at most 4 dims, unique short names), laid out
    as ggml lays them, some huge (past the small columns, up to an overflowing total), one offset sometimes moved."""
    rng = np.random.default_rng(seed)
    u32, u64 = struct.Struct("<I").pack, struct.Struct("<Q").pack
    infos, offset, moved = [], 0, int(rng.integers(0, 2 * count))
    for i in range(count):
        t = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_K][int(rng.integers(4))]
        dims = [256 * int(rng.integers(1, 4))] + [int(rng.integers(1, 5)) for _ in range(int(rng.integers(0, 4)))]
        if rng.random() < 0.1:
            dims[-1] = [2**40, 2**50, 2**52][int(rng.integers(3))]
        name = b"w.%d" % i
        stored = offset + (32 if i == moved else 0)
        infos.append(
            u64(len(name)) + name + u32(len(dims)) + b"".join(map(u64, dims)) + u32(int(t)) + u64(stored % 2**64)
        )
        offset += (tensor_nbytes(t, dims) + 31) // 32 * 32
    head = b"GGUF" + u32(3) + u64(count) + u64(0) + b"".join(infos)
    head += bytes(-len(head) % 32)
    return head + bytes(min(offset, 1 << 16) - int(rng.integers(0, 64)))


@pytest.mark.parametrize("seed", range(30))
def test_laid_out_tables(seed, monkeypatch):
    ggml = assert_same(laid_out_table(seed), monkeypatch)[1]
    assert ggml and {r[0] for r in ggml} <= {
        "GGUF-E002",
        "GGUF-E035",
        "GGUF-E036",
        "GGUF-E038",
        "GGUF-E039",
        "GGUF-E040",
    }


def test_every_malformed_and_edge_case(monkeypatch):
    for case in [*malformed_cases(), *ggml_edge_cases()]:
        assert_same(case.data, monkeypatch)


def test_demo_files_and_a_real_vocabulary(monkeypatch, vocab_file):
    for order, version in [("little", 3), ("big", 3), ("little", 1)]:
        assert_same(demo_bytes(order, version), monkeypatch)
    assert_same(vocab_file.read_bytes(), monkeypatch)


def test_the_hostile_file_of_many_tensors(monkeypatch):
    """The builder behind the cost benchmark (fewer tensors), whole, with one misplaced offset, and cut short."""
    data = many_tensors_file(2000)
    spec, ggml, lenient = assert_same(data, monkeypatch)
    assert ggml == lenient == [] and [r[0] for r in spec] == ["GGUF-E050"]  # no general.architecture
    with gguf_schema.open(data) as f:
        at = f.tensor_list[700].info_offset + 8 + 5 + 4 + 8 + 4  # its stored offset
    moved = data[:at] + struct.pack("<Q", 700 * 32 + 8) + data[at + 8 :]
    spec, ggml, lenient = assert_same(moved, monkeypatch)
    assert [r[:3] for r in ggml] == [("GGUF-E038", "error", at)] and "ggml expects 22400" in ggml[0][5]
    assert [r[0] for r in spec] == ["GGUF-E037", "GGUF-E050"] and lenient == []
    spec, ggml, lenient = assert_same(data[:-1000], monkeypatch)  # the data of the last 31 tensors cut
    assert [r[0] for r in lenient] == ["GGUF-E002"] * 31 and [r[3] for r in lenient] == [
        f"t.{i}" for i in range(1969, 2000)
    ]
    assert [r[0] for r in ggml] == ["GGUF-E002"] * 31 + ["GGUF-E040"]


def test_columns_values():
    """The columns of a few tensors, against the sizes the model computes."""
    data = tensor_table(3, count=60)
    with gguf_schema.open(data) as f:
        c = GGMLView(f).columns
        for i, t in enumerate(f.tensor_list):
            dims = (*t.dims[:4], *(1,) * (4 - min(4, len(t.dims))))
            assert c.ne[i].tolist() == list(dims) and c.n_dims[i] == len(t.dims) and c.type_id[i] == int(t.type)
            assert c.stored_offset[i] == t.stored_offset
            exact = int(np.prod([*t.dims], dtype=object)) if t.dims else 1
            assert c.small[i] == (len(t.dims) <= 4 and max(dims) < 2**63 and float(np.prod(np.float64(dims))) < 2**52)
            if c.small[i]:
                assert c.elements[i] == exact
            if c.sized[i]:
                assert c.nbytes[i] == tensor_nbytes(GGMLType(t.type), t.dims)
        assert c.small.any() and (~c.small).any() and c.sized.any()


# ----------------------------------------------------------------------- keys: the file's own index, no second map


@pytest.mark.parametrize("keys", [["a", "b", "a", "c", "b", "a"], ["a", "c\0x", "b", "c", "a", "c\0x"], ["x", "y"]])
def test_repeated_keys_are_named_with_the_first_offset(keys):
    """GGUF-E023 (ggml) and GGUF-W004 (spec) name every repeat and the offset of the first record with that key;
    keys equal as C strings only are the shadows (GGUF-W011), and ``find`` answers as ggml's lookup does."""
    data = io.BytesIO()
    gguf_schema.save(data, [make_field(k, i, ValueType.UINT32) for i, k in enumerate(keys)], sync=False)
    with gguf_schema.open(data.getvalue()) as f:
        records = f.fields.records
        first: dict[str, int] = {}
        want = []
        for r in records:
            if r.key in first:
                want.append((r.offset, r.key, f"first at offset {first[r.key]}"))
            else:
                first[r.key] = r.offset
        view = GGMLView(f)
        for name in {k.split("\0")[0] for k in keys} | {"absent", "c\0x"}:
            found = view.find(name)
            expect = next((r for r in records if r.key.split("\0")[0] == name), None) if "\0" not in name else None
            assert found is expect, name
    for profile, rule in (("ggml", "GGUF-E023"), ("spec", "GGUF-W004")):
        got = [(x.offset, x.name, x.message) for x in validate(data.getvalue(), profile).findings if x.rule == rule]
        assert [(o, n) for o, n, _ in got] == [(o, n) for o, n, _ in want]
        assert all(m.endswith(w + ")") or m.endswith(w) for (_, _, m), (_, _, w) in zip(got, want, strict=True))
    shadows = [x.name for x in validate(data.getvalue(), "ggml").findings if x.rule == "GGUF-W011"]
    assert shadows == (["c"] if "c\0x" in keys else [])
