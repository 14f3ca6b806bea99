"""The audit of an untrusted GGUF file: what its loader will run, and what hides from the tools that look at it.

A GGUF file carries a program (``tokenizer.chat_template``: Jinja that runtimes render, some
without a sandbox), and the format itself offers places to hide one: ggml rejects duplicate keys
by their stored bytes but looks keys up as C strings, first match wins, so a key
``tokenizer.chat_template`` + NUL + anything, stored first, is the template llama.cpp renders while
every dictionary-based tool shows the harmless one stored after it. This module owns the file-level
audit; the template analysis is :func:`~gguf_schema.check.templates.audit_template`, and what ggml
sees is :class:`~gguf_schema.check.ggml_view.GGMLView`.

:func:`audit` reads the header only (tensor data is never read, and of a URL only the header and,
when ``read_gaps`` is set, the small padding ranges are fetched) and reports :class:`AuditFinding`\\ s:

* keys as the loader reads them: NUL shadowing (``GGUF-A101``), keys holding a NUL (``GGUF-A102``),
  look-alike keys: trailing spaces, compatibility forms, confusable letters (``GGUF-A103``);
* every template key (``tokenizer.chat_template``, ``tokenizer.chat_template.*``, and any key that
  reads or looks like one), stored as text or not (an ARRAY of strings is audited joined, and its
  type flagged: ``GGUF-A104``), through the template audit (``GGUF-T*`` rules), and every other text a
  loader renders of it (:mod:`.loaders`: cut at a NUL, cut by llama-cpp-python's buffer, rewritten by
  transformers: ``GGUF-A106``), each distinct text analysed once and rendered in Jinja's sandbox (one
  child process for the file; ``render=False`` leaves the render out);
* invisible or direction-changing characters in special tokens (``GGUF-A201``);
* bytes no loader reads: trailing data (``GGUF-A301``), gaps between tensors (``GGUF-A302``),
  non-zero padding (``GGUF-A303``), overlapping tensors (``GGUF-A304``), a file that ends before the
  tensor data it declares (``GGUF-A305``, an error), and tensor data that ggml
  reads at other offsets than a whole-key reader (``GGUF-A401``); tensor names with a NUL (``GGUF-A105``).

:data:`AUDIT_RULES` lists them all (the template rules included); :func:`to_sarif` turns reports
into SARIF 2.1.0 for code-scanning dashboards.

>>> import io, gguf_schema
>>> from gguf_schema.format.values import make_field
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, [make_field("tokenizer.chat_template\\0", "{{ cycler.__init__.__globals__.os.popen('id') }}"),
...                        make_field("tokenizer.chat_template", "{{ messages[0]['content'] }}")])
>>> r = audit(buf.getvalue())
>>> [(f.rule, f.severity) for f in r.findings][:2]
[('GGUF-A101', 'error'), ('GGUF-A102', 'warning')]
>>> r.exit_code
1
"""

from __future__ import annotations

import os
import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import GGUFError, GGUFInternalError
from ..format import keys as K
from ..format.limits import Limits
from ..format.types import GGMLType, ValueType, tensor_nbytes
from ..format.values import Field, GGUFArray
from ..io.source import is_url
from ..model import GGUFFile
from ..reader import read
from . import templates
from .ggml_view import GGMLView, c_string, ggml_pad
from .loaders import View, template_views
from .templates import AuditRule, TemplateFinding, hidden_characters

__all__ = [
    "AUDIT_RULES",
    "AuditFinding",
    "AuditResult",
    "audit",
    "key_skeleton",
    "to_sarif",
]

TEMPLATE_KEY = K.TOKENIZER_CHAT_TEMPLATE
#: CPU seconds the audit of one file spends on its templates: the static analysis (the auditing thread's CPU) and
#: the sandboxed render (its child process's, the child's start included) together. With the process's own start
#: (about 0.25 s for ``gguf-schema audit``) and the rest of the audit, a file's audit stays within 1 s of CPU.
#: Each text's analysis gets what is left (at most ``templates.ANALYSIS_SECONDS``), the render what the analyses
#: left; what does not fit is GGUF-T402 (a file of thousands of distinct templates gets one finding for those past
#: it; the same template twice is analysed once). The costliest real template needs 0.1 s to analyse and 0.2 s to
#: render.
TEMPLATE_SECONDS = 0.6
#: The sandboxed render of a file's templates (one child process for the file): CPU seconds each template text
#: has for all its renders (at most; the file's budget may leave less), the child's address space, and how many
#: distinct texts are rendered (real files have a few; the texts past it get one GGUF-T503 warning)
RENDER_SECONDS = 0.5  # real templates need milliseconds; the work bound (observe) stops costly ones sooner
RENDER_MEMORY = 256 << 20
RENDER_MAX_TEMPLATES = 8
_EXCERPT = 80  # characters of a value shown in a finding
_PEEK = 32  # bytes of an unread region shown in a finding
_SEVERE = ("error", "warning")
#: Findings of one rule a file's report lists; past it, one more finding says how many were left out
FINDINGS_PER_RULE = 500

_FILE_RULES = (
    AuditRule(
        "GGUF-A101",
        "error",
        "shadowed-key",
        "Two stored keys are equal up to their first NUL. ggml rejects duplicate keys by their stored bytes but "
        "looks keys up as C strings, first match wins: llama.cpp reads the first, while tools that read keys as "
        "whole strings (dictionaries) also show the later one, usually as the real value.",
    ),
    AuditRule(
        "GGUF-A102",
        "warning",
        "nul-in-key",
        "A key holds a NUL byte: C code reads it as the text before the NUL, other tools as a different key.",
    ),
    AuditRule(
        "GGUF-A103",
        "warning",
        "look-alike-key",
        "A key looks like another key or like a template key without being it (trailing spaces, compatibility "
        "forms, letters of other scripts that look Latin): what a reviewer reads is not what a loader looks up.",
    ),
    AuditRule(
        "GGUF-A104",
        "warning",
        "template-not-text",
        "A chat template key is stored with another type than STRING (e.g. an ARRAY of strings): loaders that "
        "join it render a program scanners of string values skip. The audit checks the joined text.",
    ),
    AuditRule(
        "GGUF-A105",
        "warning",
        "nul-in-tensor-name",
        "A tensor name holds a NUL byte: ggml names the tensor by the text before it.",
    ),
    AuditRule(
        "GGUF-A106",
        "warning",
        "loader-renders-other-text",
        "A loader renders a template key as another text than the stored value: llama.cpp cuts it at a NUL and "
        "skips an ARRAY stored first, llama-cpp-python copies it through a 1,024-byte buffer (a value of that size "
        "loses its last byte), transformers replaces the architecture name inside it. The text each loader "
        "renders is audited too; the template findings of a text only a loader sees say which loader.",
    ),
    AuditRule(
        "GGUF-A201",
        "warning",
        "hidden-character-in-token",
        "A special token (one a *_token_id key names, or of type CONTROL) holds invisible or direction-changing "
        "Unicode: the token a reviewer reads is not the one the model gets.",
    ),
    AuditRule(
        "GGUF-A301",
        "warning",
        "trailing-bytes",
        "Bytes after the last tensor's data and its padding: no loader reads them, so they can carry anything.",
    ),
    AuditRule(
        "GGUF-A302",
        "warning",
        "gap-between-tensors",
        "Bytes between two tensors beyond the alignment padding: ggml rejects such a layout, readers that follow "
        "the offsets skip the bytes.",
    ),
    AuditRule(
        "GGUF-A303",
        "warning",
        "nonzero-padding",
        "Padding bytes (before the data section or after a tensor) are not zero: writers pad with zeros.",
    ),
    AuditRule(
        "GGUF-A304",
        "warning",
        "overlapping-tensors",
        "Two tensors' data ranges overlap: writing one changes the other, and their sizes do not add up.",
    ),
    AuditRule(
        "GGUF-A305",
        "error",
        "truncated",
        "The file ends before the tensor data it declares: loaders fail on it (or, reading lazily, fail when they "
        "reach the missing bytes), while tools that read only the header find nothing wrong.",
    ),
    AuditRule(
        "GGUF-A401",
        "warning",
        "ggml-reads-elsewhere",
        "ggml takes ALIGNMENT from another key than 'general.alignment' (a C-string match) and reads the tensor "
        "data at other offsets than a reader of whole keys: the two see different weights.",
    ),
    AuditRule(
        "GGUF-A501",
        "error",
        "template-not-analysed",
        "A template was found but Jinja2 is not installed, so only its characters were checked: an audit that "
        "could not look is not a pass (pip install 'gguf-schema[audit]').",
    ),
)

#: Every rule of the file audit, by id: the file rules (``GGUF-A*``) and the template rules (``GGUF-T*``).
AUDIT_RULES: Mapping[str, AuditRule] = MappingProxyType({r.id: r for r in (*_FILE_RULES, *templates.RULES.values())})


@dataclass(frozen=True)
class AuditFinding:
    """One finding of the audit.

    Attributes:
        rule: the rule id (a key of :data:`AUDIT_RULES`).
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        message: what was found, in words.
        key: the metadata key (NULs shown as ``\\0``, hidden characters as ``<U+XXXX>``) or tensor name involved.
        offset: the byte offset in the file (of the key's record, the value, or the region), if any.
        length: the length in bytes of the region, for the byte-layout rules.
        excerpt: at most about 80 characters of the value, template line or bytes involved.
        line: for template findings, the 1-based line in the template.
        column: for template findings, the 1-based column when known.
        chain: for template findings, the steps (with template lines) from where a name or a cost comes from to
            where it is used.
        loaders: for template findings, the loaders that render the text the finding is of
            (:mod:`~gguf_schema.check.loaders`): ``llama.cpp``, ``llama-cpp-python``, ``transformers``,
            ``gguf-py``; empty when none of them reads the key as a template (a look-alike key).
    """

    rule: str
    severity: str
    message: str
    key: str | None = None
    offset: int | None = None
    length: int | None = None
    excerpt: str = ""
    line: int | None = None
    column: int | None = None
    chain: tuple[str, ...] = ()
    loaders: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["chain"] = list(self.chain)
        out["loaders"] = list(self.loaders)
        return out

    def __str__(self) -> str:
        at = f"@{self.offset}" if self.offset is not None else "@-"
        where = f" [{self.key}]" if self.key is not None else ""
        line = f" line {self.line}" if self.line is not None else ""
        text = f"{at} {self.rule} {self.severity}{where}{line}: {self.message}"
        return text + (f" | {self.excerpt}" if self.excerpt else "")


@dataclass
class AuditResult:
    """The audit of one file.

    Attributes:
        source: the path or URL (None for bytes or a file object).
        findings: every finding.
        readable: False when the file could not be opened (``error`` says why).
        error: why the file could not be read.
        notes: what the audit could not check, and why (e.g. padding of a URL not fetched).
        bytes_read: for a URL, the bytes fetched.
    """

    source: str | None
    findings: list[AuditFinding] = field(default_factory=list)
    readable: bool = True
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    bytes_read: int | None = None

    @property
    def flagged(self) -> bool:
        """A finding at warning severity or above."""
        return any(f.severity in _SEVERE for f in self.findings)

    @property
    def exit_code(self) -> int:
        """0 nothing at warning or above, 1 findings, 2 unreadable (what ``gguf-schema audit`` exits with)."""
        return 2 if not self.readable else int(self.flagged)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "source": self.source,
            "readable": self.readable,
            "error": self.error,
            "flagged": self.flagged,
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
            "bytes_read": self.bytes_read,
        }


# --------------------------------------------------------------------------- showing untrusted text


def show(text: str, limit: int = _EXCERPT) -> str:
    """``text`` safe to print: NUL as ``\\0``, other control, format and separator characters as ``<U+XXXX>``,
    cut to about ``limit`` characters with the full length said.

    >>> show("tokenizer.chat_template\\0x"), show("a\\u202eb"), show("x" * 100, 10)
    ('tokenizer.chat_template\\\\0x', 'a<U+202E>b', 'xxxxxxxxxx... (100 characters)')
    """
    cut = text[:limit]
    out = []
    for ch in cut:
        if ch == "\0":
            out.append("\\0")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") and ch not in "\n\t":
            out.append(f"<U+{ord(ch):04X}>")
        elif ch in "\n\t":
            out.append("\\n" if ch == "\n" else "\\t")
        else:
            out.append(ch)
    return "".join(out) + (f"... ({len(text):,} characters)" if len(text) > limit else "")


# --------------------------------------------------------------------------- look-alike keys

# Letters of other scripts (and a few symbols) that render like a Latin letter, digit or '.'/'_'.
# A small hand-made map of the usual suspects, after NFKC (which already folds fullwidth and
# compatibility forms): Cyrillic, Greek, Armenian and a few Latin extensions.
_CONFUSABLE = str.maketrans(
    {
        **dict.fromkeys("\u0430\u0251\u03b1", "a"),
        **dict.fromkeys("\u044c\u044a", "b"),
        **dict.fromkeys("\u0441\u03f2\u217d", "c"),
        **dict.fromkeys("\u0501", "d"),
        **dict.fromkeys("\u0435\u0454\u04bd", "e"),
        **dict.fromkeys("\u0261", "g"),
        **dict.fromkeys("\u04bb", "h"),
        **dict.fromkeys("\u0456\u0131\u0269\u03b9\u04cf", "i"),
        **dict.fromkeys("\u0458\u03f3", "j"),
        **dict.fromkeys("\u03ba\u043a", "k"),
        **dict.fromkeys("\u217c\u01c0", "l"),
        **dict.fromkeys("\u0578", "n"),
        **dict.fromkeys("\u043e\u03bf\u0585\u09e6", "o"),
        **dict.fromkeys("\u0440\u03c1", "p"),
        **dict.fromkeys("\u051b", "q"),
        **dict.fromkeys("\u0433", "r"),
        **dict.fromkeys("\u0455", "s"),
        **dict.fromkeys("\u0442", "t"),
        **dict.fromkeys("\u03c5\u057d", "u"),
        **dict.fromkeys("\u03bd\u0475", "v"),
        **dict.fromkeys("\u051d", "w"),
        **dict.fromkeys("\u0445\u03c7", "x"),
        **dict.fromkeys("\u0443\u03b3", "y"),
        **dict.fromkeys("\u1d22", "z"),
        **dict.fromkeys("\u00b7\u2024\u2027\u3002", "."),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u30fc", "-"),
        **dict.fromkeys("\u02cd\uff3f", "_"),
    }
)


def key_skeleton(key: str) -> str:
    """What a key looks like to a reader: NFKC, case folded, confusable letters mapped to Latin,
    invisible characters dropped, surrounding spaces stripped, cut at its first NUL.

    >>> key_skeleton("tokenizer.chat_templ\\u0430te ") == key_skeleton("Tokenizer.chat_template") == "tokenizer.chat_template"
    True
    """
    key = c_string(key)
    if key.isascii() and key.isprintable():  # the common case: nothing to normalize, map or drop
        return key.lower().strip()
    text = unicodedata.normalize("NFKC", key).casefold().translate(_CONFUSABLE)
    return "".join(ch for ch in text if unicodedata.category(ch) not in ("Cf", "Cc", "Mn")).strip()


def _is_template_name(name: str) -> bool:
    return name == TEMPLATE_KEY or name.startswith(TEMPLATE_KEY + ".")


# --------------------------------------------------------------------------- the audit


def audit(
    source: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    render: bool = True,
    read_gaps: bool | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> AuditResult:
    """Audit a GGUF file for what its loader will run and for what hides from other tools.

    Args:
        source: a path, URL, bytes, binary file object, or an open :class:`~gguf_schema.model.GGUFFile`.
        storage_options: for a URL, the options of its fsspec backend.
        render: also render every template (and every other text a loader renders of it) in Jinja's sandbox,
            under each loader's Jinja configuration, on sample conversations, in one child process for the file
            with time, memory and output bounds (:func:`~gguf_schema.check.templates.sandbox.render_many`). On by
            default; ``False`` leaves only the static analysis, which is weaker (a render proves what a render
            does; the analysis can only over-approximate it), and saves the child process (a few tenths of a
            second when the file has a template; nothing when it has none).
        read_gaps: read the contents of padding, gaps and trailing bytes (at most a few bytes of each
            region). Default: yes for local files, no for URLs (their sizes are still checked from the
            offsets; a note says the contents were not fetched).
        limits: resource limits for reading ``source`` (:class:`~gguf_schema.format.limits.Limits`): a file
            over one is reported unreadable, the limit named in its ``error``.
        mmap: map a local file (default) or read it with positioned reads (``False``).

    Never raises for a bad file: one that cannot be opened gives a report with ``readable`` False.

    >>> audit(b"GGUF").readable
    False
    """
    name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else getattr(source, "name", None)
    name = name if isinstance(name, str) else None
    if isinstance(source, GGUFFile):
        return _audit_open(source, source.name, render, read_gaps)
    try:
        f = read(source, lazy=True, storage_options=storage_options, limits=limits, mmap=mmap)
    except GGUFError as e:
        return AuditResult(name, readable=False, error=str(e))
    except OSError as e:
        return AuditResult(name, readable=False, error=f"{e.strerror or e}")
    with f:
        return _audit_open(f, name, render, read_gaps)


def _audit_open(f: GGUFFile, name: str | None, render: bool, read_gaps: bool | None) -> AuditResult:
    report = _Auditor(f, name, render, read_gaps).run()
    fetched = getattr(f.storage, "bytes_fetched", None)
    if name is not None and is_url(name) and fetched is not None:
        report.bytes_read = int(fetched)
    return report


class _Auditor:
    def __init__(self, f: GGUFFile, name: str | None, render: bool, read_gaps: bool | None):
        self.f = f
        self.view = GGMLView(f)
        self.render_file = render  # every template text of the file rendered together, in one child (render_all)
        self.render = False  # so not one child per template
        remote = name is not None and is_url(name)
        self.read_gaps = (not remote) if read_gaps is None else read_gaps
        self.report = AuditResult(name)
        self.counts: dict[str, int] = {}

    def add(self, rule: str, message: str, **kw: Any) -> None:
        n = self.counts[rule] = self.counts.get(rule, 0) + 1
        if n <= FINDINGS_PER_RULE:  # past it, counted and said once at the end (a report stays readable and cheap)
            self.report.findings.append(AuditFinding(rule, AUDIT_RULES[rule].severity, message, **kw))

    def more(self) -> None:
        """One finding per rule that had more than :data:`FINDINGS_PER_RULE`: how many were not listed."""
        for rule, n in self.counts.items():
            if n > FINDINGS_PER_RULE:
                self.report.findings.append(
                    AuditFinding(
                        rule,
                        AUDIT_RULES[rule].severity,
                        f"{n - FINDINGS_PER_RULE:,} more {rule} findings in this file, not listed (the first "
                        f"{FINDINGS_PER_RULE:,} are)",
                    )
                )

    def value_offset(self, fld: Field) -> int | None:
        at = self.f.pair_offsets(fld)
        return None if at is None else at.value

    def run(self) -> AuditResult:
        self.keys()
        self.templates()
        self.special_tokens()
        self.tensor_names()
        self.layout()
        self.more()
        return self.report

    # ---------------------------------------------------------------- keys

    def keys(self) -> None:
        view = self.view
        for sh in view.shadows:
            read_value = _excerpt_value(sh.read)
            strings = ""
            if sh.read.type == ValueType.ARRAY:
                first = next((h for h in sh.hidden if h.type != ValueType.ARRAY), None)
                if first is not None:
                    strings = (
                        f"; llama.cpp's map of metadata as text (its chat templates, llama_model_meta_val_str) skips "
                        f"ARRAY values, so there {show(first.key)} at offset {first.offset} is read instead"
                    )
            for hidden in sh.hidden:
                if hidden.key == sh.read.key:
                    continue  # an exact duplicate: ggml refuses the file (check --profile ggml says so)
                self.add(
                    "GGUF-A101",
                    f"{show(hidden.key)!s} is never read by ggml's key lookup: the lookup of {show(sh.key)} returns "
                    f"{show(sh.read.key)} at offset {sh.read.offset}, whose value is {read_value}{strings}",
                    key=show(hidden.key),
                    offset=hidden.offset,
                    excerpt=_excerpt_value(hidden),
                )
        for fld in self.f.fields.records:
            if "\0" in fld.key:
                self.add(
                    "GGUF-A102",
                    f"key {show(fld.key)} holds a NUL: ggml/llama.cpp read it as {show(c_string(fld.key))}",
                    key=show(fld.key),
                    offset=fld.offset,
                    excerpt=_excerpt_value(fld),
                )
        groups: dict[str, list[Field]] = {}
        for fld in self.f.fields.records:
            groups.setdefault(key_skeleton(fld.key), []).append(fld)
        for skel, flds in groups.items():
            names = {c_string(f.key) for f in flds}
            if len(names) > 1:  # NUL-only differences are A101/A102 above
                first = flds[0]
                for other in flds[1:]:
                    if c_string(other.key) != c_string(first.key):
                        self.add(
                            "GGUF-A103",
                            f"key {show(other.key)} looks like key {show(first.key)} (offset {first.offset}) but is "
                            "another key",
                            key=show(other.key),
                            offset=other.offset,
                            excerpt=_excerpt_value(other),
                        )
            elif _is_template_name(skel) and not _is_template_name(c_string(flds[0].key)):
                for fld in flds:
                    self.add(
                        "GGUF-A103",
                        f"key {show(fld.key)} looks like {skel} but is another key: no loader reads it as a template",
                        key=show(fld.key),
                        offset=fld.offset,
                        excerpt=_excerpt_value(fld),
                    )

    # ---------------------------------------------------------------- templates

    def templates(self) -> None:
        self.template_seconds = TEMPLATE_SECONDS
        self.unanalysed: list[str] = []
        views = template_views(self.f)
        stored: list[tuple[Field, str]] = []
        for fld in self.f.fields.records:
            if not _is_template_name(key_skeleton(fld.key)):
                continue
            text = _template_text(fld)
            if fld.type != ValueType.STRING:
                kind = fld.type.name + (f" of {fld.element_type.name}" if fld.element_type is not None else "")
                self.add(
                    "GGUF-A104",
                    f"template key {show(fld.key)} is stored as {kind}, not STRING"
                    + (" (its items joined are audited)" if text is not None else ""),
                    key=show(fld.key),
                    offset=fld.offset,
                    excerpt=show(text) if text is not None else "",
                )
            if text is not None:
                stored.append((fld, text))
        # what each loader renders that is not the stored text of the pair it comes from (cut, rewritten...)
        other: dict[tuple[int, str], list[View]] = {}
        by_field: dict[int, list[View]] = {}
        for v in views:
            by_field.setdefault(id(v.field), []).append(v)
            if v.text != _template_text(v.field):
                other.setdefault((id(v.field), v.text), []).append(v)
        texts = [text for _, text in stored] + [text for _, text in other]
        # the static analysis first (within the file's budget; cached by text), then the render of what it could
        # analyse: a text it could not is GGUF-T402 already, and its render would only add cost
        analysed = [text for text in dict.fromkeys(texts) if self.analyse_first(text)]
        rendered = self.render_all(analysed)
        for fld, text in stored:
            seen = [v.loader for v in by_field.get(id(fld), ()) if v.text == text]
            self.template(fld, text, rendered.get(text, []), loaders=tuple(dict.fromkeys(seen)))
        for (_, text), vs in other.items():
            self.loader_view(vs, text, rendered.get(text, []))
        if self.unanalysed:
            keys = ", ".join(show(k, 40) for k in self.unanalysed[:3]) + (" ..." if len(self.unanalysed) > 3 else "")
            self.add(
                "GGUF-T402",
                f"{len(self.unanalysed):,} template(s) not analysed: the file's templates used up the audit's "
                f"{TEMPLATE_SECONDS:g} s of CPU for templates ({keys})",
                key=show(self.unanalysed[0]),
            )

    def analyse_first(self, text: str) -> bool:
        """Analyse ``text`` statically within what is left of the file's budget; whether it was analysed in full."""
        if self.template_seconds <= 0 and not templates.is_cached(text):
            return False
        started = time.thread_time()
        try:
            seconds = min(templates.ANALYSIS_SECONDS, max(self.template_seconds, 0.05))
            found = templates.audit_template(text, seconds=seconds)
        except ImportError:
            return False
        finally:
            self.template_seconds -= time.thread_time() - started
        return templates.is_cached(text) and not any(f.rule == "GGUF-T402" for f in found)

    def render_all(self, texts: list[str]) -> dict[str, list[TemplateFinding]]:
        """The sandboxed render of every distinct text, in one child process for the file."""
        if not self.render_file or not texts:
            return {}
        # a text too large to analyse is GGUF-T402 already; rendering it would cost in proportion to its size
        texts = [t for t in dict.fromkeys(texts) if len(t) <= templates.MAX_ANALYSED]
        if len(texts) > RENDER_MAX_TEMPLATES:
            self.add(
                "GGUF-T503",
                f"{len(texts) - RENDER_MAX_TEMPLATES:,} of the file's {len(texts):,} template texts not rendered: the "
                f"audit renders at most {RENDER_MAX_TEMPLATES} (real files have a few); they were analysed",
            )
            texts = texts[:RENDER_MAX_TEMPLATES]
        try:
            budget = max(self.template_seconds, 0.0)  # what the static analyses left of the file's budget
            return templates.sandbox.render_many(texts, RENDER_SECONDS, memory=RENDER_MEMORY, budget=budget)
        except ImportError:
            return {}  # no Jinja2: reported per template below

    def loader_view(self, vs: list[View], text: str, rendered: list[TemplateFinding]) -> None:
        """A text loaders render that differs from the stored value: said (GGUF-A106), and audited as such."""
        fld = vs[0].field
        loaders = tuple(dict.fromkeys(v.loader for v in vs))
        how = "; ".join(dict.fromkeys(f"{v.loader}: {v.change}" for v in vs))
        self.add(
            "GGUF-A106",
            f"{' and '.join(loaders)} render{'s' if len(loaders) == 1 else ''} template {show(vs[0].name)} from "
            f"{show(fld.key)} as another text than the stored one ({how})",
            key=show(fld.key),
            offset=self.value_offset(fld),
            excerpt=show(text),
            loaders=loaders,
        )
        before = {(f.rule, f.line, f.message) for f in self.report.findings if f.key == show(fld.key)}
        self.template(
            fld, text, rendered, loaders=loaders, skip=before, prefix=f"as {' and '.join(loaders)} render it: "
        )

    def template(
        self,
        fld: Field,
        text: str,
        rendered: Sequence[TemplateFinding] = (),
        *,
        loaders: tuple[str, ...] = (),
        skip: set[tuple[str, int | None, str]] | None = None,
        prefix: str = "",
    ) -> None:
        at = self.value_offset(fld)
        if self.template_seconds <= 0 and not templates.is_cached(text):
            self.unanalysed.append(fld.key)
            for run in templates.hidden.hidden_runs(text, 1):
                self.add(
                    "GGUF-T301",
                    f"hidden characters ({'/'.join(run.kinds)}) in a template not analysed",
                    key=show(fld.key),
                    offset=at,
                    line=run.line,
                    column=run.column,
                )
            return
        started = time.thread_time()
        try:
            found = templates.audit_template(
                text, name=fld.key, render=self.render, seconds=max(self.template_seconds, 0.05)
            )
            found = [*found, *rendered]  # the render's findings beside the static ones
        except ImportError:
            self.add(
                "GGUF-A501",
                f"template {show(fld.key)} not analysed: Jinja2 is not installed, so only its characters were "
                "checked (pip install 'gguf-schema[audit]')",
                key=show(fld.key),
                offset=at,
            )
            found = []
            for h in hidden_characters(text):
                found.append(
                    templates.TemplateFinding(
                        "GGUF-T301",
                        templates.RULES["GGUF-T301"].severity,
                        f"hidden character ({h.kind}): U+{h.codepoint:04X} {h.name}",
                        h.line,
                        show(text.splitlines()[h.line - 1] if text.splitlines() else text),
                        h.column,
                        fld.key,
                    )
                )
        self.template_seconds -= time.thread_time() - started
        for t in found:
            if skip is not None and (t.rule, t.line, t.message) in skip:
                continue
            self.add(
                t.rule,
                prefix + t.message,
                loaders=loaders,
                key=show(fld.key),
                offset=at,
                excerpt=t.excerpt[: _EXCERPT * 2],
                line=t.line,
                column=t.column,
                chain=t.chain,
            )

    # ---------------------------------------------------------------- special tokens

    def special_tokens(self) -> None:
        fields = self.f.fields
        tokens = fields.get(K.TOKENIZER_GGML_TOKENS)
        if tokens is None or tokens.type != ValueType.ARRAY or tokens.element_type != ValueType.STRING:
            return
        items = tokens.value.items
        n = len(items)
        ids: dict[int, str] = {}
        for fld in fields.records:
            named = fld.key.startswith("tokenizer.ggml.") and fld.key.endswith("_token_id")
            if named and fld.type.is_integer and 0 <= int(fld.value) < n:
                ids.setdefault(int(fld.value), fld.key)
        types = fields.get(K.TOKENIZER_GGML_TOKEN_TYPE)
        if (
            types is not None
            and types.type == ValueType.ARRAY
            and types.element_type is not None
            and types.element_type.is_integer
            and len(types.value) == n
        ):
            control = np.flatnonzero(np.asarray(types.value.items) == 3)  # llama.cpp's token type CONTROL
            for i in control.tolist():
                ids.setdefault(i, "a CONTROL token")
        for i in sorted(ids):
            token = items[i]
            if not isinstance(token, str):
                continue
            hidden = hidden_characters(token)
            if hidden:
                h = hidden[0]
                self.add(
                    "GGUF-A201",
                    f"special token {i} ({ids[i]}) holds {len(hidden)} hidden character(s), the first "
                    f"U+{h.codepoint:04X} {h.name} ({h.kind})",
                    key=f"tokenizer.ggml.tokens[{i}]",
                    offset=self.value_offset(tokens),
                    excerpt=show(token),
                )

    def tensor_names(self) -> None:
        for t in self.f.tensor_list:
            if "\0" in t.name:
                self.add(
                    "GGUF-A105",
                    f"tensor name {show(t.name)} holds a NUL: ggml names it {show(c_string(t.name))}",
                    key=show(t.name),
                    offset=t.info_offset,
                )

    # ---------------------------------------------------------------- bytes no loader reads

    def peek(self, start: int, count: int) -> bytes | None:
        if not self.read_gaps or count <= 0:
            return None
        return bytes(self.f.view(start, min(count, self.f.file_size - start)))

    def nonzero_padding(self, start: int, count: int, what: str) -> None:
        if count <= 0:
            return
        data = self.peek(start, count)
        if data is None:
            return
        i = next((j for j, b in enumerate(data) if b), None)
        if i is not None:
            self.add(
                "GGUF-A303",
                f"{what}: {count} padding bytes, byte {i} is 0x{data[i]:02x}",
                offset=start + i,
                length=count,
                excerpt=data[i : i + _PEEK].hex(" "),
            )

    def region(self, rule: str, start: int, count: int, what: str) -> None:
        data = self.peek(start, _PEEK)
        self.add(
            rule,
            f"{what}: {count:,} bytes [{start:,}, {start + count:,}) that no loader reads",
            offset=start,
            length=count,
            excerpt=data.hex(" ") if data is not None else "",
        )

    def layout(self) -> None:
        f, view = self.f, self.view
        a = f.alignment if f.alignment and f.alignment > 0 else 32
        pad = f.padding
        i = next((j for j, b in enumerate(pad) if b), None)
        if i is not None:
            self.add(
                "GGUF-A303",
                f"padding before the data section: byte {i} of {len(pad)} is 0x{pad[i]:02x}",
                offset=f.metadata_end + i,
                length=len(pad),
                excerpt=bytes(pad[i : i + _PEEK]).hex(" "),
            )
        if f.tensor_list and view.alignment is not None and view.data_offset != f.data_offset:
            fld = view.alignment_field
            if fld is None:
                raise GGUFInternalError("fld is not None does not hold")
            self.add(
                "GGUF-A401",
                f"ggml takes ALIGNMENT {view.alignment} from key {show(fld.key)} and reads tensor data from offset "
                f"{view.data_offset}; a reader of whole keys takes ALIGNMENT {f.alignment} and reads it from "
                f"offset {f.data_offset}",
                key=show(fld.key),
                offset=fld.offset,
            )
        spans = []
        for t in f.tensor_list:
            if not isinstance(t.type, GGMLType) or t.type.removed:
                continue
            try:
                n = tensor_nbytes(t.type, t.dims)
            except ValueError:
                continue
            spans.append((t.stored_offset, n, t.name))
        if not spans and f.tensor_list:
            return  # no tensor has a known size: nothing can be said about the data section
        spans.sort()
        base = f.data_offset
        end = 0  # relative to the data section: the furthest byte any tensor so far covers
        end_name = None
        for off, n, tname in spans:
            if off < end:
                self.add(
                    "GGUF-A304",
                    f"tensor {show(tname)} [{base + off:,}, {base + off + n:,}) overlaps tensor {show(end_name or '')} "
                    f"(which runs to {base + end:,})",
                    key=show(tname),
                    offset=base + off,
                    length=min(end, off + n) - off,
                )
            elif off > end:
                padded = ggml_pad(end, a)
                self.nonzero_padding(base + end, min(off, padded) - end, f"after tensor {show(end_name or '')}")
                if off > padded:
                    self.region(
                        "GGUF-A302", base + padded, off - padded, f"gap before tensor {show(tname)} (beyond padding)"
                    )
            if off + n > end:
                end, end_name = off + n, tname
        data_end = base + end if spans else f.metadata_end
        size = f.file_size
        cut = [tname for off, n, tname in spans if base + off + n > size]
        if cut:
            names = ", ".join(show(x) for x in cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
            self.add(
                "GGUF-A305",
                f"the file ends at byte {size:,}, {data_end - size:,} bytes before the end of the tensor data it "
                f"declares: {len(cut)} of {len(f.tensor_list)} tensors cut or missing ({names})",
                key=show(cut[0]),
                offset=size,
                length=data_end - size,
            )
        if data_end >= size:
            return
        padded_end = base + ggml_pad(end, a) if spans else ggml_pad(f.metadata_end, a)
        tail_pad = min(padded_end, size) - data_end
        if spans:
            self.nonzero_padding(data_end, tail_pad, "after the last tensor")
        if size > padded_end:
            self.region("GGUF-A301", padded_end, size - padded_end, "after the end of the data")
        if not self.read_gaps and size > f.data_offset:
            self.report.notes.append(
                "padding after tensors and trailing bytes were located from the offsets but not fetched "
                "(their contents need ranges of the data section; pass read_gaps=True / --read-gaps)"
            )


def _template_text(fld: Field) -> str | None:
    """The template text a loader that accepts the value would render: a string, or the items of an ARRAY
    of strings joined; None for other types."""
    if fld.type == ValueType.STRING:
        return str(fld.value)
    if fld.type == ValueType.ARRAY and fld.element_type == ValueType.STRING:
        arr: GGUFArray = fld.value
        return "".join(str(s) for s in arr.items)
    return None


def _excerpt_value(fld: Field) -> str:
    if fld.type == ValueType.STRING:
        return show(str(fld.value))
    if fld.type == ValueType.ARRAY:
        n = len(fld.value)
        kind = fld.element_type.name if fld.element_type is not None else "?"
        return f"ARRAY of {n:,} {kind}"
    return show(repr(fld.value))


# --------------------------------------------------------------------------- SARIF

_SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def to_sarif(reports: Sequence[AuditResult] | AuditResult, *, tool_version: str | None = None) -> dict[str, Any]:
    """The reports as one SARIF 2.1.0 log (one run; a result per finding, located by byte offset).

    An unreadable file gives a tool execution notification, not a result.

    >>> log = to_sarif(audit(b"GGUF"))
    >>> log["version"], log["runs"][0]["invocations"][0]["executionSuccessful"]
    ('2.1.0', False)
    """
    if isinstance(reports, AuditResult):
        reports = [reports]
    if tool_version is None:
        tool_version = _package_version()
    used = sorted({f.rule for r in reports for f in r.findings})
    rules = [
        {
            "id": rid,
            "name": AUDIT_RULES[rid].title,
            "shortDescription": {"text": AUDIT_RULES[rid].title.replace("-", " ")},
            "fullDescription": {"text": AUDIT_RULES[rid].description},
            "defaultConfiguration": {"level": _LEVEL[AUDIT_RULES[rid].severity]},
        }
        for rid in used
    ]
    index = {rid: i for i, rid in enumerate(used)}
    results: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    for r in reports:
        uri = _uri(r.source)
        if not r.readable:
            notifications.append(
                {"level": "error", "message": {"text": f"{r.source or '<bytes>'}: cannot read the file: {r.error}"}}
            )
            continue
        for f in r.findings:
            location: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": uri}}}
            if f.offset is not None:
                region: dict[str, Any] = {"byteOffset": f.offset}
                if f.length:
                    region["byteLength"] = f.length
                location["physicalLocation"]["region"] = region
            if f.key is not None:
                location["logicalLocations"] = [{"name": f.key, "kind": "member"}]
            text = f.message + (f" (template line {f.line})" if f.line is not None else "")
            result: dict[str, Any] = {
                "ruleId": f.rule,
                "ruleIndex": index[f.rule],
                "level": _LEVEL[f.severity],
                "message": {"text": text},
                "locations": [location],
            }
            if f.excerpt or f.chain or f.loaders:
                result["properties"] = {
                    "excerpt": f.excerpt,
                    **({"chain": list(f.chain)} if f.chain else {}),
                    **({"loaders": list(f.loaders)} if f.loaders else {}),
                }
            results.append(result)
    return {
        "$schema": _SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gguf-schema audit",
                        "version": str(tool_version),
                        "rules": rules,
                    }
                },
                "invocations": [
                    {
                        "executionSuccessful": all(r.readable for r in reports),
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "results": results,
            }
        ],
    }


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf-schema")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree that was never installed
        return "0+unknown"


def _uri(source: str | None) -> str:
    if source is None:
        return "stdin.gguf"
    if is_url(source):
        return source
    return source.replace(os.sep, "/")
