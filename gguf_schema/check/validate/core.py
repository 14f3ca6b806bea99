"""The core of validation: what a rule, a check, a finding and a report are, and the :class:`Checker`
every check runs on.

A rule (:class:`Rule`) is declared once, as a constant beside the check that reports it, in the
module of its concern (:mod:`.header`, :mod:`.keys`, :mod:`.values`, :mod:`.alignment`,
:mod:`.tensors`, :mod:`.layout`, :mod:`.standard`). A check is a function over a :class:`Checker`
that declares the rules it reports (:func:`reports`); the rule table of the package is gathered
from those declarations, and :meth:`Checker.add` refuses (an internal error) a finding of a rule
the running check did not declare, or of a profile the rule is not in: the table and the checks
cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ...errors import GGUFInternalError, shorten
from ...format.types import ValueType
from ...format.values import BoolByte, Field, GGUFArray
from ...model import GGUFFile, Tensor
from ..ggml_view import GGMLView

__all__ = [
    "ALL",
    "GGML",
    "LENIENT",
    "PROFILES",
    "SPEC",
    "Check",
    "Checker",
    "Finding",
    "Report",
    "Rule",
    "reports",
    "rule",
    "split_place",
    "unreadable",
]

PROFILES = ("spec", "ggml", "lenient")
SPEC, GGML, LENIENT = "spec", "ggml", "lenient"
ALL = frozenset(PROFILES)

SURROGATES = re.compile("[\udc80-\udcff]")


@dataclass(frozen=True)
class Rule:
    """One entry of the rule table.

    Attributes:
        id: ``GGUF-E0nn`` (error) or ``GGUF-W0nn`` (warning).
        severity: ``"error"`` or ``"warning"``.
        statement: what a file must do, in one line.
        source: the spec sentence or ggml behaviour the rule comes from.
        profiles: the profiles that check it.
    """

    id: str
    severity: str
    statement: str
    source: str
    profiles: frozenset[str]


def rule(id: str, statement: str, source: str, profiles: Iterable[str]) -> Rule:
    """A rule: an error for a ``GGUF-E`` id, a warning for a ``GGUF-W`` one."""
    return Rule(id, "error" if id.startswith("GGUF-E") else "warning", statement, source, frozenset(profiles))


@dataclass(frozen=True)
class Check:
    """One check: the rules it may report, and the function that looks for them in a file.

    Attributes:
        rules: the rules it reports (its helpers' included).
        run: the check itself, over a :class:`Checker`.
    """

    rules: tuple[Rule, ...]
    run: Callable[[Checker], None]
    #: the ids of :attr:`rules`, looked up for each finding
    ids: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", frozenset(r.id for r in self.rules))


def reports(*rules: Rule) -> Callable[[Callable[[Checker], None]], Check]:
    """Declare a function over a :class:`Checker` a :class:`Check` that reports ``rules``."""

    def declare(run: Callable[[Checker], None]) -> Check:
        return Check(rules, run)

    return declare


#: the file cannot be read at all: what every profile reports for it, the one rule no check reports
E001 = rule(
    "GGUF-E001",
    "the file can be opened and parsed",
    "every profile: a file the reader cannot parse (bad magic, unsupported version, truncated field, unknown value type, count past EOF, limit exceeded)",
    ALL,
)


@dataclass(frozen=True)
class Finding:
    """One broken rule at one place in a file.

    Attributes:
        rule: the rule id (a key of :data:`RULES`).
        severity: ``"error"`` or ``"warning"``.
        offset: byte offset of the offending item (None when the rule is about something absent).
        name: the metadata key or tensor name involved (array items as ``key[i]``), if any.
        value: the offending value (None when absent).
        message: what is wrong, in words.
    """

    rule: str
    severity: str
    offset: int | None
    name: str | None
    value: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "offset": self.offset,
            "name": self.name,
            "value": _jsonable(self.value),
            "message": self.message,
        }

    def __str__(self) -> str:
        at = f"@{self.offset}" if self.offset is not None else "@-"
        name = f" [{self.name}]" if self.name is not None else ""
        return f"{at} {self.rule} {self.severity}{name}: {self.message}"


@dataclass
class Report:
    """The findings of one file under one profile.

    Attributes:
        path: the file's path (None for a buffer).
        profile: the profile used.
        findings: every finding, in the order the checks ran.
        readable: False when the file could not be opened at all.
    """

    path: str | None
    profile: str
    findings: list[Finding] = field(default_factory=list)
    readable: bool = True

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when no finding has error severity (warnings do not fail a file)."""
        return not self.errors

    @property
    def rules(self) -> list[str]:
        """The ids of the broken rules, each once, in order of first finding."""
        return list(dict.fromkeys(f.rule for f in self.findings))

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "path": self.path,
            "profile": self.profile,
            "ok": self.ok,
            "readable": self.readable,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "findings": [f.to_dict() for f in self.findings],
        }


def unreadable(
    path: str | None, profile: str, offset: int | None, name: str | None, value: Any, message: str
) -> Report:
    """The report of a file that cannot be opened: one :data:`E001` finding."""
    f = Finding(E001.id, E001.severity, offset, name, value, f"cannot read the file: {message}")
    return Report(path, profile, [f], readable=False)


def split_place(f: GGUFFile) -> tuple[int, int] | None:
    """``(split.no, split.count)`` of a shard of a split model (llama.cpp's ``gguf-split`` keys, with
    ``split.count`` > 1); None for a file that is not one.

    >>> import io, gguf_schema
    >>> buf = io.BytesIO()
    >>> gguf_schema.save(buf, {"split.no": 1, "split.count": 3})
    >>> split_place(gguf_schema.open(buf.getvalue()))
    (1, 3)
    """
    no, count = f.fields.get("split.no"), f.fields.get("split.count")
    if count is None or not count.type.is_integer or count.value < 2:
        return None
    if no is not None and not no.type.is_integer:
        return None
    return (int(no.value) if no is not None else 0), int(count.value)


def joined_keys(keys: list[str]) -> str | None:
    """The keys joined by newlines, one per line (None if a key holds a newline itself): rules over
    800,000 keys are checked on this one string, at C speed, instead of key by key."""
    text = "\n".join(keys)
    return text if text.count("\n") == len(keys) - 1 else None


class Checker:
    """One profile's checks over one open file: what they look at, and the findings they add."""

    def __init__(self, f: GGUFFile, profile: str, model: Any = None):
        self.f = f
        self.profile = profile
        self.findings: list[Finding] = []
        self.ls = 4 if f.version == 1 else 8  # bytes of a stored length/count
        self.size = f.file_size
        self.view = GGMLView(f)
        self.shard = split_place(f)
        # the tensors of the model this file stands for: its own, every shard's (a first shard with its
        # model), or None (a first shard alone: the model's tensors are not known)
        self.model_tensors: list[Tensor] | None = (
            f.tensor_list if self.shard is None else (list(model.tensor_list) if model is not None else None)
        )
        self.running: Check | None = None

    @cached_property
    def key_list(self) -> list[str]:
        return [fld.key for fld in self.f.fields.records]

    @cached_property
    def key_text(self) -> str | None:
        return joined_keys(self.key_list)

    def run(self, check: Check) -> None:
        """Run ``check``, its findings added to :attr:`findings`."""
        self.running = check
        try:
            check.run(self)
        finally:
            self.running = None

    def add(self, rule: Rule, offset: int | None, name: str | None, value: Any, message: str) -> None:
        """A finding of ``rule``, which the running check declares and the profile checks."""
        if self.running is None or rule.id not in self.running.ids or self.profile not in rule.profiles:
            raise GGUFInternalError(
                f"{rule.id} reported outside the checks that declare it, or under the {self.profile} profile"
            )
        self.findings.append(
            Finding(rule.id, rule.severity, offset, _clip(name), _bounded(value), _clip(message, 400) or "")
        )

    def suspects(self, fine: np.ndarray) -> list[Tensor]:
        """The tensors, in file order, that a check's columns do not clear (``fine`` False): the only ones it visits."""
        tensors = self.f.tensor_list
        return [tensors[i] for i in np.flatnonzero(~fine).tolist()]

    # ---------------------------------------------------------------- offsets of stored items

    def key_bytes(self, fld: Field) -> bytes:
        return fld.key.encode("utf-8", "surrogateescape")

    def value_offset(self, fld: Field) -> Any:
        if fld.offset is None:  # a field set in memory has no place in the file yet
            return None
        return fld.offset + self.ls + len(self.key_bytes(fld)) + 4  # key string, value type

    def item_offset(self, fld: Field, index: int) -> Any:
        """Offset of item ``index`` of a (non-nested) array value."""
        if fld.offset is None:
            return None
        base = self.value_offset(fld) + 4 + self.ls  # element type, count
        arr: GGUFArray = fld.value
        if arr.type == ValueType.STRING:
            return base + sum(self.ls + len(s.encode("utf-8", "surrogateescape")) for s in arr.items[:index])
        return base + index * arr.type.itemsize

    def name_bytes(self, t: Tensor) -> bytes:
        return t.name.encode("utf-8", "surrogateescape")

    def ndims_offset(self, t: Tensor) -> int:
        return t.info_offset + self.ls + len(self.name_bytes(t))

    def dim_offset(self, t: Tensor, j: int) -> int:
        return self.ndims_offset(t) + 4 + j * self.ls

    def type_offset(self, t: Tensor) -> int:
        return self.dim_offset(t, len(t.dims))

    def offset_offset(self, t: Tensor) -> int:
        return self.type_offset(t) + 4


# --------------------------------------------------------------------------- helpers


def encoded(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return int(v) if isinstance(v, BoolByte) else v
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return repr(v)


def _clip(text: str | None, limit: int = 120) -> str | None:
    """A name or message cut to ``limit`` characters, its full length said: findings stay small whatever the file holds."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def _bounded(value: Any) -> Any:
    """A finding's value kept as is when small; long strings, bytes and sequences as a short description."""
    if isinstance(value, (str, bytes, bytearray)) and len(value) > 120:
        return shorten(value, 120)
    if isinstance(value, (list, tuple)) and len(value) > 16:
        return shorten(value, 120)
    return value
