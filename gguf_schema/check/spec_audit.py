"""Spec audit: compare a GGUF spec document with our transcription (``spec/``) and with the schema.

This module owns reading ``spec/gguf.json`` (:func:`load_spec`), extracting the normative facts
of a spec document (:func:`extract_facts`: its C ``enum``/``struct``/``union`` blocks, whether
fenced or rendered as plain text, enum values stated in prose, the typed key lists, each
architecture's required keys, and a few stated rules such as the alignment), and
:func:`audit_spec`, which reports every difference between those facts and

* ``spec/`` (kind prefixes as below, ``against="spec"``), and
* the code: :mod:`gguf_schema.format.types` enums and the construct structs of
  :func:`gguf_schema.format.schema.gguf_schema` for v3, introspected subcon by subcon (``against="schema"``).

:func:`schema_differences` compares the code with ``spec/`` directly; the test-suite pins that
list, so the schema cannot drift from the transcription unnoticed. ``gguf-schema audit-spec``
is the command line. A document that states none of the spec's structure (an empty file, an
unrelated text) is a :class:`~gguf_schema.errors.GGUFDocumentError`, not a clean audit.

>>> r = audit_spec('''enum gguf_metadata_value_type: uint32_t { GGUF_METADATA_VALUE_TYPE_UINT8 = 0, GGUF_METADATA_VALUE_TYPE_INT8 = 2, };''')
>>> [(d.against, d.kind, d.item, d.document, d.ours) for d in r.differences][:2]
[('spec', 'enum-value-renumbered', 'gguf_metadata_value_type.INT8', 2, 1), ('spec', 'enum-value-missing', 'gguf_metadata_value_type.UINT16', None, 2)]
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import GGUFDocumentError, GGUFInternalError
from ..format import keys as K

__all__ = [
    "SpecAuditReport",
    "SpecDifference",
    "audit_spec",
    "extract_facts",
    "load_spec",
    "schema_differences",
    "schema_facts",
]


ENUMS = ("ggml_type", "gguf_metadata_value_type", K.GENERAL_FILE_TYPE)
STRUCTS = (
    "gguf_string_t",
    "gguf_metadata_value_t",
    "gguf_metadata_value_t.array",
    "gguf_metadata_kv_t",
    "gguf_header_t",
    "gguf_tensor_info_t",
    "gguf_file_t",
)
_UNIONS = ("gguf_metadata_value_t",)


@functools.cache
def load_spec() -> dict[str, Any]:
    """Our transcription of the spec: ``spec/gguf.json`` at the top of the repository, installed as
    the package data of ``gguf_schema.spec`` (see its README).

    >>> load_spec()["enums"]["gguf_metadata_value_type"]["values"]["FLOAT64"]
    12
    """
    try:
        text = resources.files("gguf_schema.spec").joinpath("gguf.json").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        # imported from a clone's own gguf_schema folder (Python started in the clone after
        # `pip install .`): the spec data is the clone's top-level spec/, which only an install maps in
        beside = Path(__file__).resolve().parents[2] / "spec" / "gguf.json"
        if not beside.is_file():
            raise
        text = beside.read_text(encoding="utf-8")
    spec: dict[str, Any] = json.loads(text)
    return spec


@dataclass(frozen=True)
class SpecDifference:
    """One way a document differs from ``spec/`` or from the schema.

    Attributes:
        against: ``"spec"`` (our ``spec/`` transcription) or ``"schema"`` (the code).
        kind: e.g. ``enum-value-renumbered``, ``field-type``, ``key-retyped``, ``arch-key-missing``, ``rule-differs``.
        item: what differs, e.g. ``ggml_type.I8``, ``gguf_header_t.tensor_count``, ``general.alignment``.
        document: what the document says (None when it does not have the item).
        ours: what ``spec/`` or the schema says (None when it does not have the item).
    """

    against: str
    kind: str
    item: str
    document: Any
    ours: Any

    def to_dict(self) -> dict[str, Any]:
        return {
            "against": self.against,
            "kind": self.kind,
            "item": self.item,
            "document": self.document,
            "ours": self.ours,
        }

    def __str__(self) -> str:
        return f"[{self.against}] {self.kind} {self.item}: document {self.document!r}, ours {self.ours!r}"


@dataclass
class SpecAuditReport:
    """Differences found, and the parts of the spec the document does not cover at all.

    Attributes:
        differences: every :class:`SpecDifference`, against ``spec/`` first, then against the schema.
        not_covered: sections of ``spec/`` the document has nothing on (e.g. ``enum general.file_type``).
        facts: what was extracted from the document.
    """

    differences: list[SpecDifference] = field(default_factory=list)
    not_covered: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.differences

    def summary(self) -> list[tuple[str, str, str]]:
        """``(against, kind, item)`` of every difference: handy to compare in tests."""
        return [(d.against, d.kind, d.item) for d in self.differences]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "differences": [d.to_dict() for d in self.differences],
            "not_covered": list(self.not_covered),
        }


# --------------------------------------------------------------------------- extraction from a document

_BLOCK_START = re.compile(r"\b(enum|struct|union)\s+(\w+)\s*(?::\s*(\w+))?\s*\{")
_PAIR = re.compile(r"\b([A-Z][A-Z0-9_]*)\s*=\s*(\d+)\b")
_REMOVED = ("removed", "移除")
_KEY = r"(?:\[llm\]|[a-z][a-z0-9_]*)(?:\.[a-z0-9_]+)+"
_KEY_LINE = re.compile(rf"^\s*(?:[-*•]\s+)?(?:\*\*)?`?({_KEY})(?::\s*([a-z0-9_\[\]]*))?`?")
_TYPE_ALIASES = {
    "u8": "uint8",
    "i8": "int8",
    "u16": "uint16",
    "i16": "int16",
    "u32": "uint32",
    "i32": "int32",
    "u64": "uint64",
    "i64": "int64",
    "f32": "float32",
    "f64": "float64",
    "uint32_t": "uint32",
    "uint64_t": "uint64",
    "int32_t": "int32",
}
_NOT_ARCH = ("general", "tokenizer", "[llm]", "split")


def _body(text: str, start: int) -> tuple[str, int]:
    """The text between the brace at ``start`` and its match, and the index after the match."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return text[start + 1 :], len(text)


def _c_blocks(text: str) -> dict[str, tuple[str, str | None, str]]:
    """name -> (kind, underlying type, body) for every enum/struct/union block in the text."""
    out: dict[str, tuple[str, str | None, str]] = {}
    pos = 0
    while m := _BLOCK_START.search(text, pos):
        body, pos = _body(text, m.end() - 1)
        out.setdefault(m.group(2), (m.group(1), m.group(3), body))
    return out


def _strip_prefix(name: str, prefix: str) -> str:
    return name[len(prefix) :] if prefix and name.startswith(prefix) else name


def _c_enum(body: str, prefix: str) -> tuple[dict[str, int], dict[str, int]]:
    """Values (C numbering: an entry without ``=`` is the previous value + 1) and removed ids (from comments)."""
    values: dict[str, int] = {}
    removed: dict[str, int] = {}
    nxt = 0
    for line in body.splitlines():
        code, _, comment = line.partition("//")
        if comment and any(w in comment for w in _REMOVED):
            m = re.search(r"(\w+)\s*(?:=\s*(\d+)|\((\d+)\))", comment)
            if m:
                removed[_strip_prefix(m.group(1), prefix)] = int(m.group(2) or m.group(3))
        for entry in code.split(","):
            m = re.fullmatch(r"\s*(\w+)\s*(?:=\s*(\d+)\s*)?", entry)
            if not m or not entry.strip():
                continue
            nxt = int(m.group(2)) if m.group(2) is not None else nxt
            values[_strip_prefix(m.group(1), prefix)] = nxt
            nxt += 1
    return values, removed


def _c_fields(body: str) -> list[tuple[str, str]]:
    """Fields of a struct/union body as (name, type); an inline ``struct {...} name;`` gets type ``struct``."""
    body = re.sub(r"//[^\n]*", "", body)
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(body):
        m = re.compile(r"\s*struct\s*\{").match(body, pos)
        if m:
            _, after = _body(body, m.end() - 1)
            n = re.compile(r"\s*(\w+)\s*;").match(body, after)
            out.append((n.group(1) if n else "?", "struct"))
            pos = n.end() if n else after
            continue
        end = body.find(";", pos)
        if end < 0:
            break
        decl = " ".join(body[pos:end].split())
        pos = end + 1
        m = re.fullmatch(r"(\w+)\s+(\w+)\s*(\[[^\]]*\])?", decl)
        if m:
            out.append((m.group(2), m.group(1) + (m.group(3).replace(" ", "") if m.group(3) else "")))
    return out


def _anonymous_struct(body: str) -> list[tuple[str, str]] | None:
    m = re.search(r"struct\s*\{", re.sub(r"//[^\n]*", "", body))
    if not m:
        return None
    clean = re.sub(r"//[^\n]*", "", body)
    inner, _ = _body(clean, m.end() - 1)
    return _c_fields(inner)


def _window(text: str, start: int, stop_names: tuple[str, ...]) -> str:
    """Text from ``start`` to the next heading, unindented list item, other enum name, or 4000 characters."""
    end = min(len(text), start + 4000)
    for pat in (r"\n#", r"\n- ", r"\n\n[A-Z][^\n]{0,40}\n"):
        m = re.compile(pat).search(text, start + 1)
        if m and m.start() < end:
            end = m.start()
    for name in stop_names:
        i = text.find(name, start + 1)
        if 0 <= i < end:
            end = i
    return text[start:end]


def _prose_enum(text: str, name: str, prefix: str) -> tuple[dict[str, int], dict[str, int]] | None:
    """``NAME=NUM`` pairs stated in prose or in a markdown list after the enum's name; None if there are none."""
    others = tuple(n for n in ENUMS if n != name and not name.startswith(n) and not n.startswith(name))
    for m in re.finditer(re.escape(name), text):
        win = _window(text, m.end(), others)
        pairs = list(_PAIR.finditer(win))
        if len(pairs) < 3:
            continue
        values: dict[str, int] = {}
        removed: dict[str, int] = {}
        for i, p in enumerate(pairs):
            nxt = pairs[i + 1].start() if i + 1 < len(pairs) else len(win)
            after = re.split(r"[.,;]", win[p.end() : nxt], maxsplit=1)[0]
            opened = win.rfind("(", 0, p.start())
            group = win[opened : win.find(")", p.end()) + 1] if opened > win.rfind(")", 0, p.start()) else ""
            marker = win.lower().rfind("removed:", 0, p.start())
            in_removed_list = marker >= 0 and not re.search(r"[.;]", win[marker : p.start()])
            n, v = _strip_prefix(p.group(1), prefix), int(p.group(2))
            if (
                any(w in after.lower() for w in _REMOVED)
                or any(w in group.lower() for w in _REMOVED)
                or in_removed_list
            ):
                removed[n] = v
            else:
                values[n] = v
        return values, removed
    return None


def _norm_type(t: str | None) -> str | None:
    if not t:
        return None
    m = re.fullmatch(r"array\[(\w+)\]", t)
    if m:
        return f"array[{_TYPE_ALIASES.get(m.group(1), m.group(1))}]"
    return _TYPE_ALIASES.get(t, t)


def _keys(text: str) -> tuple[dict[str, str | None], dict[str, dict[str, list[str]]]]:
    """Typed standardized keys, and architecture -> {"required": [...], "optional": [...]} from the key bullets."""
    keys: dict[str, str | None] = {}
    archs: dict[str, dict[str, list[str]]] = {}
    optional_for: str | None = None
    for line in text.splitlines():
        stripped = line.strip().lstrip("#").strip()
        if stripped in ("Optional", "可选项"):
            optional_for = "?"
            continue
        if line.lstrip().startswith("#"):
            optional_for = None
            continue
        m = _KEY_LINE.match(line)
        bare = re.fullmatch(
            rf"\s*({_KEY}):\s*([a-z0-9_\[\]]+)\s*", line
        )  # a `key: type` line of its own (a code span rendered as a block)
        if not m or not (line.lstrip().startswith(("-", "*", "•")) or bare):
            continue
        key, typ = m.group(1), _norm_type(m.group(2))
        first = key.split(".", 1)[0]
        if first in _NOT_ARCH:
            keys.setdefault(key, typ)
            continue
        if typ is not None:
            keys.setdefault(key, typ)
        if optional_for == "?":
            optional_for = first
        elif optional_for is not None and optional_for != first:
            optional_for = None
        entry = archs.setdefault(first, {"required": [], "optional": []})
        entry["optional" if optional_for == first else "required"].append(key)
    return keys, archs


def _known_architectures(text: str) -> list[str] | None:
    m = re.search(r"known values\s*([a-z0-9]+(?:\s*,\s*[a-z0-9]+)+)", text)
    if m:
        return [x.strip() for x in m.group(1).split(",")]
    m = re.search(r"(?:Known values include|已知的值包括)[^\n]*\n", text)
    if not m:
        return None
    out = []
    for line in text[m.end() :].splitlines():
        if not line.strip():
            continue
        n = re.fullmatch(r"\s*[-•*]\s+`?([a-z0-9]+)`?\s*", line)
        if not n:
            break
        out.append(n.group(1))
    return out or None


def _rules(text: str) -> dict[str, Any]:
    """A few normative numbers stated in words (only those the document states)."""
    rules: dict[str, Any] = {}
    if m := re.search(r"Must be `?(\d+)`? for version described in this spec", text):
        rules["version"] = int(m.group(1))
    if m := re.search(r"at most 2\^16-1(?:/65535)? bytes", text):
        rules["key_max_bytes"] = 65535
    if m := re.search(r"(?:caveat that\s*(?://\s*)?it must be at most|name[^\n]{0,80}at most) (\d+) bytes", text):
        rules["tensor_name_max_bytes"] = int(m.group(1))
    words = {"one": 1, "two": 2, "three": 3, "four": 4}
    if m := re.search(r"Currently at most (\w+)", text):
        rules["max_dimensions"] = int(m.group(1)) if m.group(1).isdigit() else words.get(m.group(1), m.group(1))
    if re.search(r"must be a multiple of 8|必须是8的倍数", text):
        rules["alignment"] = "multiple of 8"
    if m := re.search(r"(?:assume it is|假设它为)\s*`?(\d+)", text):
        rules["default_alignment"] = int(m.group(1))
    if m := re.search(r"global `?ALIGNMENT`? constant[^.]*\.\s*This is currently (\d+) bytes", text):
        rules["alignment"] = f"fixed constant of {m.group(1)} bytes"
        rules["default_alignment"] = int(m.group(1))
    return rules


def extract_facts(text: str) -> dict[str, Any]:
    """The normative facts a spec document states, in the shape of ``spec/gguf.json``.

    Sections the document does not state are left out.

    >>> extract_facts("enum ggml_type: uint32_t { GGML_TYPE_F32 = 0, GGML_TYPE_F16, };")["enums"]["ggml_type"]
    {'values': {'F32': 0, 'F16': 1}, 'removed': {}}
    """
    spec = load_spec()
    facts: dict[str, Any] = {"enums": {}, "structs": {}}
    blocks = _c_blocks(text)
    for name in ENUMS:
        prefix = spec["enums"][name]["prefix"]
        if name in blocks and blocks[name][0] == "enum":
            values, removed = _c_enum(blocks[name][2], prefix)
        else:
            found = _prose_enum(text, name, prefix)
            if found is None:
                continue
            values, removed = found
        facts["enums"][name] = {"values": values, "removed": removed}
    for name, (kind, _, body) in blocks.items():
        if kind in ("struct", "union") and name in STRUCTS:
            facts["structs"][name] = _c_fields(body)
            if name in _UNIONS:
                inner = _anonymous_struct(body)
                if inner is not None:
                    facts["structs"][f"{name}.array"] = inner
    keys, archs = _keys(text)
    if keys:
        facts["keys"] = keys
    if archs:
        facts["architectures"] = archs
    known = _known_architectures(text)
    if known:
        facts["known_architectures"] = known
    facts["rules"] = _rules(text)
    return facts


# --------------------------------------------------------------------------- the schema, introspected


def schema_facts() -> dict[str, Any]:
    """The same facts read off the code: ``types`` enums and the v3 construct structs.

    >>> schema_facts()["structs"]["gguf_header_t"][2]
    ('tensor_count', 'uint64_t')
    """
    from construct import Adapter, Bytes, Computed, Const, FormatField, LazyBound, Rebuild, Renamed, Struct, Switch

    from ..format.nodes import (
        AlignmentPadding,
        BoolValue,
        FloatValue,
        IndexedArray,
        StringValue,
        TensorData,
        ValueTypeField,
    )
    from ..format.schema import gguf_schema
    from ..format.types import GGML_TYPE_COUNT, FileType, GGMLType, ValueType

    s = gguf_schema("little", 3)
    named = {
        id(s.gguf_string_t): "gguf_string_t",
        id(s.gguf_metadata_kv_t): "gguf_metadata_kv_t",
        id(s.gguf_header_t): "gguf_header_t",
        id(s.gguf_tensor_info_t): "gguf_tensor_info_t",
        id(s.gguf_metadata_value_type): "gguf_metadata_value_type",
    }
    c_ints = {
        "<B": "uint8_t",
        "<b": "int8_t",
        "<H": "uint16_t",
        "<h": "int16_t",
        "<I": "uint32_t",
        "<i": "int32_t",
        "<L": "uint32_t",
        "<l": "int32_t",
        "<Q": "uint64_t",
        "<q": "int64_t",
    }

    def count(expr: Any) -> str:  # construct's this.header.tensor_count reprs as this['header']['tensor_count']
        return ".".join(re.findall(r"\['(\w+)'\]", repr(expr)))

    def ctype(c: Any) -> str:
        if id(c) in named:
            return named[id(c)]
        if isinstance(c, StringValue):  # keys, names and values: each its own gguf_string_t with its own length limit
            return "gguf_string_t"
        if isinstance(c, (Rebuild, Renamed)):
            return ctype(c.subcon)
        if isinstance(c, Const):
            # the magic is the 4 bytes 'GGUF': the spec declares it uint32_t and compares it at the byte level
            return "uint32_t" if isinstance(c.value, bytes) and len(c.value) == 4 else ctype(c.subcon)
        if isinstance(c, FormatField):
            return c_ints[c.fmtstr]
        if isinstance(c, FloatValue):
            return "float" if c.dtype.itemsize == 4 else "double"
        if isinstance(c, BoolValue):
            return "bool"
        if isinstance(c, ValueTypeField):
            return "gguf_metadata_value_type"
        if isinstance(c, Bytes):
            return f"char[{count(c.length)}]"
        if isinstance(c, IndexedArray):
            return f"{ctype(c.subcon)}[{count(c.count)}]"
        if isinstance(c, (AlignmentPadding, TensorData)):
            return "uint8_t[]"
        if isinstance(c, Switch):
            return "gguf_metadata_value_t"
        if isinstance(c, LazyBound):
            return "struct"
        if isinstance(c, Adapter):
            return ctype(c.subcon)
        return type(c).__name__

    def fields(st: Any) -> list[tuple[str, str]]:
        st = st.subcon if isinstance(st, Adapter) else st
        if not isinstance(st, Struct):
            raise GGUFInternalError("isinstance(st, Struct) does not hold")
        return [
            (sc.name, ctype(sc))
            for sc in st.subcons
            if not isinstance(sc.subcon if isinstance(sc, Renamed) else sc, Computed)
        ]

    switch = s.gguf_metadata_value_t(0)
    union = [(("bool_" if vt == ValueType.BOOL else vt.name.lower()), ctype(c)) for vt, c in switch.cases.items()]
    structs = {
        "gguf_string_t": fields(s.gguf_string_t),
        "gguf_metadata_value_t": union,
        "gguf_metadata_value_t.array": fields(s.gguf_array_t),
        "gguf_metadata_kv_t": fields(s.gguf_metadata_kv_t),
        "gguf_header_t": fields(s.gguf_header_t),
        "gguf_tensor_info_t": fields(s.gguf_tensor_info_t),
        "gguf_file_t": fields(s.gguf_file_t),
    }
    enums = {
        "ggml_type": {
            "values": {**{t.name: int(t) for t in GGMLType if not t.removed}, "COUNT": GGML_TYPE_COUNT},
            "removed": {t.name: int(t) for t in GGMLType if t.removed},
        },
        "gguf_metadata_value_type": {"values": {t.name: int(t) for t in ValueType}, "removed": {}},
        K.GENERAL_FILE_TYPE: {
            "values": {t.name: int(t) for t in FileType if t not in _REMOVED_FILE_TYPES},
            "removed": {t.name: int(t) for t in FileType if t in _REMOVED_FILE_TYPES},
        },
    }
    return {"enums": enums, "structs": structs}


_REMOVED_FILE_TYPES = frozenset({5, 6, 33, 34, 35})


# --------------------------------------------------------------------------- comparing


def _enum_diffs(against: str, name: str, doc: dict[str, Any], ours: dict[str, Any]) -> list[SpecDifference]:
    out = []
    dv, ov = doc["values"], ours["values"]
    for k, v in dv.items():
        if k not in ov:
            out.append(SpecDifference(against, "enum-value-added", f"{name}.{k}", v, None))
        elif ov[k] != v:
            out.append(SpecDifference(against, "enum-value-renumbered", f"{name}.{k}", v, ov[k]))
    for k, v in ov.items():
        if k not in dv:
            out.append(SpecDifference(against, "enum-value-missing", f"{name}.{k}", None, v))
    dr, orr = set(doc["removed"].values()), set(ours["removed"].values())
    if dr != orr:
        out.append(SpecDifference(against, "enum-removed-differs", f"{name}.removed", sorted(dr), sorted(orr)))
    return out


def _same_type(doc: str, ours: str, enums: set[str]) -> bool:
    if doc == ours:
        return True
    # an enum field is its underlying uint32_t
    return {doc, ours} <= enums | {"uint32_t"} and "uint32_t" in {doc, ours}


def _struct_diffs(against: str, name: str, doc: list, ours: list) -> list[SpecDifference]:
    out = []
    enums = set(ENUMS)
    dn, on = [f[0] for f in doc], [f[0] for f in ours]
    dt, ot = dict(doc), dict(ours)
    for n in dn:
        if n not in ot:
            out.append(SpecDifference(against, "field-added", f"{name}.{n}", dt[n], None))
        elif not _same_type(dt[n], ot[n], enums):
            out.append(SpecDifference(against, "field-type", f"{name}.{n}", dt[n], ot[n]))
    for n in on:
        if n not in dt:
            out.append(SpecDifference(against, "field-missing", f"{name}.{n}", None, ot[n]))
    common_d = [n for n in dn if n in ot]
    common_o = [n for n in on if n in dt]
    if name not in _UNIONS and common_d != common_o:
        out.append(SpecDifference(against, "field-order", name, common_d, common_o))
    return out


def _spec_struct(spec: dict[str, Any], name: str) -> list[tuple[str, str]]:
    return [(f[0], f[1]) for f in spec["structs"][name]]


def _compare(
    facts: dict[str, Any], ours: dict[str, Any], against: str, not_covered: list[str] | None
) -> list[SpecDifference]:
    diffs: list[SpecDifference] = []
    for name in ENUMS:
        if name in facts["enums"]:
            diffs += _enum_diffs(against, name, facts["enums"][name], ours["enums"][name])
        elif not_covered is not None:
            not_covered.append(f"enum {name}")
    for name in STRUCTS:
        if name in facts["structs"]:
            diffs += _struct_diffs(against, name, facts["structs"][name], ours["structs"][name])
        elif not_covered is not None:
            not_covered.append(f"struct {name}")
    return diffs


def _spec_as_facts(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "enums": {n: {"values": e["values"], "removed": e["removed"]} for n, e in spec["enums"].items()},
        "structs": {n: _spec_struct(spec, n) for n in spec["structs"]},
    }


def audit_spec(markdown_text: str) -> SpecAuditReport:
    """Every difference between a spec document and ``spec/`` and the schema.

    Against ``spec/``: enum values, struct fields (order and types), typed keys, each
    architecture's required and optional keys, the known architectures, and the stated rules
    (version, alignment, limits). Against the schema: enum values and struct fields. Parts the
    document does not state at all are listed in ``not_covered``, not as differences.

    >>> from pathlib import Path
    >>> seed = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "000_d466ef7820170e32.txt"
    >>> r = audit_spec(seed.read_text(encoding="utf-8")) if seed.is_file() else None
    >>> sorted({d.item for d in r.differences if d.kind.startswith(("arch", "known"))}) if r else ['mamba']
    ['mamba']
    """
    spec = load_spec()
    facts = extract_facts(markdown_text)
    if not _covers_anything(facts):
        raise GGUFDocumentError(
            "the document states no part of the GGUF specification (no ggml_type, value type or file "
            "type enum, no gguf_* struct, no typed key list, architecture or rule): nothing to audit",
            value=markdown_text[:80] if markdown_text.strip() else "(empty)",
        )
    report = SpecAuditReport(facts=facts)
    not_covered: list[str] = []
    diffs = _compare(facts, _spec_as_facts(spec), "spec", not_covered)
    diffs += _key_diffs(facts, spec, not_covered)
    diffs += _rule_diffs(facts, spec)
    diffs += _compare(facts, schema_facts(), "schema", None)
    report.differences = diffs
    report.not_covered = not_covered
    return report


def _covers_anything(facts: dict[str, Any]) -> bool:
    """Whether a document's facts hold any spec structure at all (else there is nothing to audit)."""
    return any(facts.get(k) for k in ("enums", "structs", "keys", "architectures", "known_architectures", "rules"))


def _key_diffs(facts: dict[str, Any], spec: dict[str, Any], not_covered: list[str]) -> list[SpecDifference]:
    out: list[SpecDifference] = []
    add = spec.get("additions", {})
    if "keys" in facts:
        doc, ours = facts["keys"], dict(spec["keys"])
        for k, t in doc.items():
            if k not in ours and k not in add.get("keys", {}):
                out.append(SpecDifference("spec", "key-added", k, t, None))
            elif k in ours and t is not None and ours[k] is not None and t != ours[k]:
                out.append(SpecDifference("spec", "key-retyped", k, t, ours[k]))
        for k, t in ours.items():
            if k not in doc and not _arch_key(k, facts):
                out.append(SpecDifference("spec", "key-missing", k, None, t))
        for k, t in add.get("keys", {}).items():
            if k not in doc:
                out.append(SpecDifference("spec", "key-missing", k, None, t))
    else:
        not_covered.append("keys")
    if "architectures" in facts:
        doc_a = facts["architectures"]
        ours_a = {**spec["architectures"], **add.get("architectures", {})}
        for a, v in doc_a.items():
            if a not in ours_a:
                out.append(SpecDifference("spec", "arch-added", a, v["required"], None))
                continue
            for part in ("required", "optional"):
                d, o = v[part], ours_a[a][part]
                for k in d:
                    if k not in o:
                        out.append(SpecDifference("spec", f"arch-{part}-key-added", k, a, None))
                for k in o:
                    if k not in d:
                        out.append(SpecDifference("spec", f"arch-{part}-key-missing", k, None, a))
        for a, v in ours_a.items():
            if a not in doc_a:
                out.append(SpecDifference("spec", "arch-missing", a, None, v["required"]))
    else:
        not_covered.append("architectures")
    if "known_architectures" in facts:
        doc_k, ours_k = facts["known_architectures"], spec["known_architectures"] + add.get("known_architectures", [])
        for a in doc_k:
            if a not in ours_k:
                out.append(SpecDifference("spec", "known-arch-added", a, a, None))
        for a in ours_k:
            if a not in doc_k:
                out.append(SpecDifference("spec", "known-arch-missing", a, None, a))
    else:
        not_covered.append("known_architectures")
    return out


def _arch_key(key: str, facts: dict[str, Any]) -> bool:
    """Arch-specific typed keys (``rwkv.context_length``) count as stated when the arch's list has them."""
    first = key.split(".", 1)[0]
    if first in _NOT_ARCH:
        return False
    arch = facts.get("architectures", {}).get(first)
    return bool(arch) and key in arch["required"] + arch["optional"]


def _rule_diffs(facts: dict[str, Any], spec: dict[str, Any]) -> list[SpecDifference]:
    ours = spec["rules"]
    return [
        SpecDifference("spec", "rule-differs", k, v, ours[k]) for k, v in facts["rules"].items() if ours.get(k) != v
    ]


def schema_differences() -> list[SpecDifference]:
    """Differences between the code (types + schema) and ``spec/``, reported as ``against="schema"`` with spec/ as the document.

    >>> [d.item for d in schema_differences()][:4]
    ['ggml_type.I8', 'ggml_type.I16', 'ggml_type.I32', 'ggml_type.COUNT']
    """
    return _compare(_spec_as_facts(load_spec()), schema_facts(), "schema", None)
