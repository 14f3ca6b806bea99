"""The rules of the template audit and what a finding of one looks like.

Each module of this package declares the rules it checks with :func:`rule`, beside the checks
themselves; an id is declared once (a second declaration raises). :data:`RULES` in the package
gathers them, sorted by id. :class:`Findings` collects the findings of one template with their
excerpts, so every check reports the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Literal

from ...format import keys as K

__all__ = ["AuditRule", "Findings", "Severity", "TemplateFinding", "capped", "declared", "rule"]

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class AuditRule:
    """One check of the template audit.

    Attributes:
        id: stable identifier, e.g. ``GGUF-T101``.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        title: a few words, e.g. ``internal-name``.
        description: what a finding of this rule means.
    """

    id: str
    severity: Severity
    title: str
    description: str


@dataclass(frozen=True)
class TemplateFinding:
    """One problem found in a chat template.

    Attributes:
        rule: the rule id (see ``RULES``), e.g. ``GGUF-T101``.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        message: what was found, in words.
        line: 1-based line in the template source, or None when not about one place.
        excerpt: at most ~120 characters of that line (hidden characters shown as ``<U+XXXX>``),
            never the whole template.
        column: 1-based column when known (hidden characters), else None.
        template: the metadata key the template came from.
        chain: how the value got there, step by step with line numbers (for a name: from its
            source, through every operation and assignment, to the lookup), at most a dozen steps.
    """

    rule: str
    severity: Severity
    message: str
    line: int | None
    excerpt: str
    column: int | None = None
    template: str = K.TOKENIZER_CHAT_TEMPLATE
    chain: tuple[str, ...] = ()


_DECLARED: dict[str, AuditRule] = {}


def rule(id: str, severity: Severity, title: str, description: str) -> AuditRule:
    """Declare a rule (once per id) and return it."""
    if id in _DECLARED:
        raise ValueError(f"rule {id} is declared twice")
    r = _DECLARED[id] = AuditRule(id, severity, title, description)
    return r


def declared() -> dict[str, AuditRule]:
    """Every rule declared so far, sorted by id."""
    return dict(sorted(_DECLARED.items()))


Excerpt = Callable[[str, str | None, int | None], str]
"""How a finding shows its line: ``excerpt(line, needle, column)``
(:func:`~gguf_schema.check.templates.hidden.excerpt`, passed in by whoever collects the findings:
hidden characters decide how a line is shown, and their module declares rules of this one)."""


class Findings:
    """The findings of one template: each with its rule's severity and a short excerpt of its line.

    A finding is kept once per (rule, line, message).
    """

    def __init__(self, lines: list[str], name: str, excerpt: Excerpt):
        self.lines = lines
        self.name = name
        self.excerpt = excerpt
        self.found: dict[tuple[str, int | None, str], TemplateFinding] = {}
        self.extra: dict[str, int] = {}
        self.needles: dict[tuple[str, int | None, str], str] = {}

    def add(
        self,
        r: AuditRule,
        message: str,
        line: int | None = None,
        *,
        needle: str | None = None,
        column: int | None = None,
        chain: Iterable[str] = (),
    ) -> None:
        key = (r.id, line, message)
        if key in self.found:
            return
        # the excerpt is made for the findings kept (see result): a template can have thousands of findings
        self.found[key] = TemplateFinding(r.id, r.severity, message, line, "", column, self.name, tuple(chain))
        if needle is not None:
            self.needles[key] = needle

    def extend(self, findings: Iterable[TemplateFinding]) -> None:
        for f in findings:
            self.found.setdefault((f.rule, f.line, f.message), f)

    def __iter__(self) -> Iterator[TemplateFinding]:
        return iter(self.found.values())

    def __len__(self) -> int:
        return len(self.found)

    def more(self, r: AuditRule, count: int) -> None:
        """``count`` further findings of ``r`` that were counted, not made (a scan stopped at the cap)."""
        self.extra[r.id] = self.extra.get(r.id, 0) + count

    def result(self, cap: int) -> list[TemplateFinding]:
        """The findings in rule order, then line order: at most ``cap`` of a rule, then one that counts the rest;
        each with a short excerpt of its line."""
        out = []
        for f in capped(list(self.found.values()), self.name, cap, self.extra):
            if f.line and 0 < f.line <= len(self.lines) and not f.excerpt:
                needle = self.needles.get((f.rule, f.line, f.message))
                f = replace(f, excerpt=self.excerpt(self.lines[f.line - 1], needle, f.column))
            out.append(f)
        return out


def capped(
    findings: list[TemplateFinding], name: str, cap: int, extra: dict[str, int] | None = None
) -> list[TemplateFinding]:
    """``findings`` in rule order, then line order: at most ``cap`` of a rule, then one finding counting the rest."""
    findings = sorted(findings, key=lambda f: (f.rule, f.line if f.line is not None else 1 << 62))
    listed: dict[str, int] = {}
    for f in findings:
        listed[f.rule] = listed.get(f.rule, 0) + 1
    total = {r: n + (extra or {}).get(r, 0) for r, n in listed.items()}
    kept: list[TemplateFinding] = []
    seen: dict[str, int] = {}
    for f in findings:
        seen[f.rule] = seen.get(f.rule, 0) + 1
        if seen[f.rule] <= cap:
            kept.append(f)
        if seen[f.rule] == min(cap, listed[f.rule]) and total[f.rule] > cap:
            kept.append(
                TemplateFinding(
                    f.rule,
                    f.severity,
                    f"{total[f.rule] - cap} more findings of this rule are not listed ({total[f.rule]} in all)",
                    None,
                    "",
                    None,
                    name,
                )
            )
    return kept
