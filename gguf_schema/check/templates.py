"""Chat templates: what a GGUF file's Jinja programs could reach, found by reading them.

A GGUF file carries programs. ``tokenizer.chat_template`` (and the named variants
``tokenizer.chat_template.<name>``) is Jinja source that inference runtimes render, and some
render it without a sandbox: there a template reaches Python internals through attribute
lookups (``cycler.__init__.__globals__.os``) and runs commands. Scanners that grep the source
for ``__class__`` are bypassed by names built at render time (``'__cla' ~ 'ss__'``,
``'%c%c' | format(95, 95)``, ``dict(__class__=1) | first``...). This module owns the audit of one
template:

* :func:`audit_template` parses the source with Jinja's own parser and interprets the syntax
  tree abstractly: every value that can become an attribute or item name (subscripts, the
  ``attr`` filter, the ``attribute=`` parameters of ``map``/``sum``/``sort``/..., the first
  argument of ``selectattr``, ``.get()`` keys, ``str.format`` fields) is followed back to where
  it comes from: constants are folded through ``~``, ``+``, ``*``, ``%``, ``join``, ``format``,
  ``replace``, ``reverse``, slicing, string methods, ``{% set %}``, namespaces, macro arguments,
  loops and list mutation; a name that folds to a Python internal is an error (``GGUF-T101``),
  and so is a name assembled at render time that cannot be folded (``GGUF-T102``). Names that
  come from the conversation (``message[key]`` in a loop over ``message``) are the normal case
  and pass on conversation data; looked up on a Jinja object, or selecting something that is then
  called, they let whoever writes the request choose the attribute (``GGUF-T106``). The
  interpretation is flow-insensitive (every assignment of a variable is joined, loop and macro
  variables scoped to their binder) and iterated to a fixpoint, so a branch the sample
  conversations never take is covered too.
  Optionally the template is also rendered in Jinja's immutable sandbox, in a separate process
  with time, memory and output bounds, and the sandbox's refusals are reported.
* :func:`hidden_characters` finds invisible and direction-changing characters; the file-level
  audit applies it to special tokens as well.
* :data:`RULES` lists every rule: id, severity, what it means.

Jinja2 is an optional dependency (``pip install 'gguf-schema[audit]'``); only
:func:`audit_template` needs it.

>>> findings = audit_template("{{ cycler.__init__.__globals__.os.popen('id').read() }}")
>>> [(f.rule, f.severity, f.line) for f in findings]
[('GGUF-T101', 'error', 1), ('GGUF-T101', 'error', 1), ('GGUF-T101', 'error', 1)]
>>> print(findings[0].message)
attribute '__init__' of cycler (a Jinja global) is a Python internal
>>> audit_template("{% for m in messages %}{{ m['role'] ~ ': ' ~ m['content'] }}{% endfor %}")
[]
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import json
import math
import os
import re
import string
import subprocess
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "RULES",
    "HiddenCharacter",
    "Rule",
    "TemplateFinding",
    "audit_template",
    "hidden_characters",
]

Severity = Literal["error", "warning", "info"]


# --------------------------------------------------------------------------------------------
# Rules and findings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
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


_RULE_LIST = (
    Rule(
        "GGUF-T101",
        "error",
        "internal-name",
        "An attribute or item lookup reaches a Python internal: a dunder or private name "
        "(__class__, __globals__, _TemplateReference__context...), a frame, generator or code "
        "attribute (mro, gi_frame, f_globals...), or a command runner (popen...). The name may be "
        "written out or folded from constants (~, join, format, %, replace, reverse, slicing, "
        "escapes, {% set %}, macro arguments, dict(...) keys). Without a sandbox this is how a "
        "template runs code.",
    ),
    Rule(
        "GGUF-T102",
        "error",
        "computed-name",
        "An attribute, item or filter name is assembled at render time from template material "
        "(string building, stringified objects, macro or block output, special-token text, "
        "strftime_now) in a way the audit cannot fold to a constant, so it cannot be shown "
        "harmless. Real chat templates use constant names or names taken from the conversation.",
    ),
    Rule(
        "GGUF-T103",
        "error",
        "format-fields",
        "str.format or format_map runs with a format string whose fields read attributes or "
        "items ({0.__class__}, {0[key]}), or whose format string is built at render time: "
        "format strings walk Python objects.",
    ),
    Rule(
        "GGUF-T104",
        "warning",
        "internal-name-literal",
        "A string literal or identifier spells a Python internal or a command runner "
        "(__globals__, __subclasses__, gi_frame, popen...) without the audit seeing it used as a "
        "name; benign chat templates never contain one.",
    ),
    Rule(
        "GGUF-T105",
        "warning",
        "escaped-literal",
        "A string literal writes plain ASCII characters with escape sequences (\\x5f, \\u005f, "
        "octal, \\N{...}): a way to hide names from text searches.",
    ),
    Rule(
        "GGUF-T106",
        "error",
        "conversation-named-lookup",
        "A name taken from the conversation (messages, tools, other request data) is looked up on a Jinja "
        "or Python object (a global, loop, self, caller, a namespace), or a value selected by such a name is "
        "called. Whoever writes the request then chooses the attribute or what runs, so a model shipped with "
        "this template is exploitable by its users. Real templates look such names up only on conversation "
        "data, and never call what they select.",
    ),
    Rule(
        "GGUF-T201",
        "warning",
        "loads-template",
        "{% include %}, {% import %}, {% from ... import %} or {% extends %}: the template loads "
        "other templates, whose source the audit cannot see.",
    ),
    Rule(
        "GGUF-T301",
        "warning",
        "hidden-character",
        "Invisible or direction-changing Unicode (zero-width characters, bidi controls, a BOM "
        "inside the text, tag characters, variation selectors outside emoji, control characters, "
        "fillers): what a reviewer reads differs from what runs.",
    ),
    Rule(
        "GGUF-T302",
        "info",
        "leading-bom",
        "The template starts with a byte order mark (U+FEFF), which runtimes print as text.",
    ),
    Rule(
        "GGUF-T401", "warning", "syntax-error", "Jinja cannot parse the template (the runtime cannot render it either)."
    ),
    Rule(
        "GGUF-T402",
        "error",
        "not-analysed",
        "The template parses, but the audit could not finish (nesting too deep), so nothing can be "
        "said about what it reaches.",
    ),
    Rule(
        "GGUF-T501",
        "error",
        "sandbox-violation",
        "Rendering sample conversations in Jinja's immutable sandbox raised a SecurityError: the "
        "template tried to reach an unsafe attribute, call, format string or mutation.",
    ),
    Rule(
        "GGUF-T502",
        "warning",
        "render-bound",
        "Rendering a sample conversation in the sandbox exceeded the time, memory or output bound.",
    ),
    Rule(
        "GGUF-T503",
        "warning",
        "render-unavailable",
        "The sandboxed render was asked for but could not run (for example Jinja2 older than 3.1.6, "
        "whose sandbox has known escapes).",
    ),
)

#: Every rule of the template audit, by id.
RULES: Mapping[str, Rule] = MappingProxyType({r.id: r for r in _RULE_LIST})


@dataclass(frozen=True)
class TemplateFinding:
    """One problem found in a chat template.

    Attributes:
        rule: the rule id (see :data:`RULES`), e.g. ``GGUF-T101``.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        message: what was found, in words.
        line: 1-based line in the template source, or None when not about one place.
        excerpt: at most ~120 characters of that line (hidden characters shown as ``<U+XXXX>``),
            never the whole template.
        column: 1-based column when known (hidden characters), else None.
        template: the metadata key the template came from.
    """

    rule: str
    severity: Severity
    message: str
    line: int | None
    excerpt: str
    column: int | None = None
    template: str = "tokenizer.chat_template"


# --------------------------------------------------------------------------------------------
# Hidden characters
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HiddenCharacter:
    """An invisible or direction-changing character in a text.

    Attributes:
        index: position in the string (0-based).
        line: 1-based line (lines end at ``\\r\\n``, ``\\r`` or ``\\n``, as Jinja counts them).
        column: 1-based column in that line.
        codepoint: the character's code point.
        name: its Unicode name (``RIGHT-TO-LEFT OVERRIDE``), or ``U+XXXX`` when it has none.
        kind: ``bidi``, ``zero-width``, ``bom``, ``tag``, ``variation-selector``, ``control``,
            ``filler``, ``separator`` or ``format``.
    """

    index: int
    line: int
    column: int
    codepoint: int
    name: str
    kind: str


_HIDDEN_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x0000, 0x0008, "control"),
    (0x000B, 0x000C, "control"),
    (0x000E, 0x001F, "control"),
    (0x007F, 0x009F, "control"),
    (0x00AD, 0x00AD, "format"),  # soft hyphen
    (0x034F, 0x034F, "zero-width"),  # combining grapheme joiner
    (0x0600, 0x0605, "format"),
    (0x061C, 0x061C, "bidi"),
    (0x06DD, 0x06DD, "format"),
    (0x070F, 0x070F, "format"),
    (0x0890, 0x0891, "format"),
    (0x08E2, 0x08E2, "format"),
    (0x115F, 0x1160, "filler"),
    (0x17B4, 0x17B5, "filler"),
    (0x180B, 0x180F, "variation-selector"),
    (0x200B, 0x200D, "zero-width"),
    (0x200E, 0x200F, "bidi"),
    (0x2028, 0x2029, "separator"),
    (0x202A, 0x202E, "bidi"),
    (0x2060, 0x2064, "zero-width"),
    (0x2066, 0x2069, "bidi"),
    (0x206A, 0x206F, "format"),
    (0x2800, 0x2800, "filler"),
    (0x3164, 0x3164, "filler"),
    (0xFE00, 0xFE0F, "variation-selector"),
    (0xFEFF, 0xFEFF, "bom"),
    (0xFFA0, 0xFFA0, "filler"),
    (0xFFF9, 0xFFFB, "format"),
    (0x110BD, 0x110BD, "format"),
    (0x110CD, 0x110CD, "format"),
    (0x13430, 0x1343F, "format"),
    (0x1BCA0, 0x1BCA3, "format"),
    (0x1D173, 0x1D17A, "format"),
    (0xE0000, 0xE007F, "tag"),
    (0xE0100, 0xE01EF, "variation-selector"),
)


def _char_class(ranges: Iterable[tuple[int, int, str]]) -> str:
    def esc(cp: int) -> str:
        return f"\\U{cp:08x}"

    return "[" + "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b, _ in ranges) + "]"


_HIDDEN_RE = re.compile(_char_class(_HIDDEN_RANGES))
_NEWLINE_RE = re.compile(r"\r\n|\r|\n")


def _kind_of(cp: int) -> str:
    for lo, hi, kind in _HIDDEN_RANGES:
        if lo <= cp <= hi:
            return kind
    return "format"  # pragma: no cover - the regex only matches the ranges above


def _is_emoji_like(ch: str) -> bool:
    return ord(ch) > 0x7F and unicodedata.category(ch) in ("So", "Sk", "Sm")


def _is_joining_letter(ch: str) -> bool:
    """A letter or mark of a script that uses ZWJ/ZWNJ in ordinary text (Arabic, Indic...)."""
    return ord(ch) >= 0x0590 and unicodedata.category(ch)[0] in "LM"


def _benign_in_context(text: str, i: int, cp: int) -> bool:
    prev = text[i - 1] if i > 0 else ""
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if cp in (0xFE0E, 0xFE0F):  # text/emoji presentation after a symbol or keycap base
        return (
            bool(prev)
            and (_is_emoji_like(prev) or prev in "0123456789#*")
            and not (nxt and 0xFE00 <= ord(nxt) <= 0xFE0F)
        )
    if cp == 0x200D:  # emoji ZWJ sequences, and joining scripts
        left_ok = bool(prev) and (_is_emoji_like(prev) or ord(prev) == 0xFE0F or 0x1F3FB <= ord(prev) <= 0x1F3FF)
        if left_ok and nxt and _is_emoji_like(nxt):
            return True
    if cp in (0x200C, 0x200D):
        return bool(prev) and bool(nxt) and _is_joining_letter(prev) and _is_joining_letter(nxt)
    return False


def hidden_characters(text: str) -> list[HiddenCharacter]:
    """Every invisible or direction-changing character in ``text``, with its position.

    Covers bidi controls (U+202A-U+202E, U+2066-U+2069, U+200E/U+200F, U+061C), zero-width
    characters (U+200B-U+200D, U+2060-U+2064, U+034F), the BOM U+FEFF, tag characters
    (U+E0000-U+E007F), variation selectors, C0/C1 control characters other than tab and line
    ends, Hangul and Khmer fillers, line/paragraph separators and the other format characters.
    Not reported: a variation selector right after an emoji or keycap base, a ZWJ inside an
    emoji sequence, and ZWJ/ZWNJ between letters of scripts that need them (Persian, Hindi...).
    The file-level audit also applies this to special tokens.

    >>> [(h.line, h.column, f"U+{h.codepoint:04X}", h.kind) for h in hidden_characters("ab\\r\\nc\\u202ed")]
    [(2, 2, 'U+202E', 'bidi')]
    >>> persian = "\\u0645\\u06cc\\u200c\\u062e\\u0648\\u0627\\u0647\\u0645"  # a word with its ZWNJ
    >>> hidden_characters(persian + " \\u270c\\ufe0f")  # and an emoji with its presentation selector
    []
    """
    if not isinstance(text, str):
        raise TypeError(f"hidden_characters needs a str, not {type(text).__name__}")
    found: list[HiddenCharacter] = []
    line_starts: list[int] | None = None
    for m in _HIDDEN_RE.finditer(text):
        i = m.start()
        cp = ord(text[i])
        if _benign_in_context(text, i, cp):
            continue
        if line_starts is None:
            line_starts = [0] + [n.end() for n in _NEWLINE_RE.finditer(text)]
        line = bisect.bisect_right(line_starts, i)
        found.append(
            HiddenCharacter(
                i, line, i - line_starts[line - 1] + 1, cp, unicodedata.name(text[i], f"U+{cp:04X}"), _kind_of(cp)
            )
        )
    return found


def _visible(text: str) -> str:
    """``text`` with hidden characters and line ends written as ``<U+XXXX>`` / ``\\n``."""
    out = []
    for ch in text:
        cp = ord(ch)
        if ch in "\r\n\t":
            out.append({"\r": "\\r", "\n": "\\n", "\t": " "}[ch])
        elif _HIDDEN_RE.match(ch) or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn", "Cs"):
            out.append(f"<U+{cp:04X}>")
        else:
            out.append(ch)
    return "".join(out)


_EXCERPT = 120


def _excerpt(line_text: str, needle: str | None = None, column: int | None = None) -> str:
    """A short, printable window of one source line around ``needle`` (or ``column``)."""
    text = line_text.strip(" \t")
    offset = len(line_text) - len(line_text.lstrip(" \t"))
    at = -1
    if column is not None:
        at = max(0, column - 1 - offset)
    elif needle:
        at = text.find(needle)
    if len(text) > _EXCERPT - 2:
        start = 0 if at < 0 else max(0, min(at - 40, len(text) - (_EXCERPT - 2)))
        window = text[start : start + _EXCERPT - 2]
        text = ("…" if start else "") + window + ("…" if start + len(window) < len(text) else "")
    shown = _visible(text)
    if len(shown) > _EXCERPT:  # hidden characters widen the text: cut again
        shown = shown[: _EXCERPT - 1] + "…"
    return shown


# --------------------------------------------------------------------------------------------
# Names that reach Python internals
# --------------------------------------------------------------------------------------------

#: Attribute names without underscores that still lead into the interpreter.
_INTERNAL_NAMES = frozenset(
    {
        "mro",
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "cr_await",
        "cr_origin",
        "ag_frame",
        "ag_code",
        "ag_await",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "f_trace",
        "tb_frame",
        "tb_next",
        "co_code",
        "co_consts",
        "co_names",
        "func_globals",
        "func_code",
        "func_closure",
        "func_defaults",
        "func_dict",
        "im_func",
        "im_self",
        "im_class",
    }
)
#: Functions that run commands or load code (reached after an internal walk).
_RUNNER_NAMES = frozenset(
    {
        "popen",
        "Popen",
        "check_output",
        "check_call",
        "getoutput",
        "getstatusoutput",
        "import_module",
        "execv",
        "execve",
        "execvp",
        "execvpe",
        "execl",
        "execle",
        "execlp",
        "spawnv",
        "spawnve",
        "spawnl",
        "spawnle",
        "posix_spawn",
        "posix_spawnp",
        "startfile",
    }
)
#: Words a string literal or identifier must not spell (GGUF-T104); dunders are matched by shape.
_LITERAL_WORDS = _INTERNAL_NAMES | {"popen", "Popen", "check_output", "getoutput", "import_module"}
_DUNDER_WORDS = frozenset(
    {
        "class",
        "mro",
        "base",
        "bases",
        "subclasses",
        "globals",
        "builtins",
        "import",
        "init",
        "dict",
        "getattribute",
        "getattr",
        "setattr",
        "delattr",
        "code",
        "closure",
        "func",
        "self",
        "module",
        "loader",
        "spec",
        "reduce",
        "reduce_ex",
        "getitem",
        "call",
        "new",
        "qualname",
        "defaults",
        "kwdefaults",
        "wrapped",
        "objclass",
        "traceback",
        "frame",
        "class_getitem",
        "init_subclass",
        "subclasshook",
        "getstate",
        "setstate",
        "file",
        "cached",
        "package",
        "annotations",
        "dir",
        "slots",
        "weakref",
        "name",
        "doc",
        "locals",
    }
)
_WORD_RE = re.compile(r"[A-Za-z0-9_]+")


def _is_internal(name: str) -> bool:
    """True when looking ``name`` up on an object can lead to Python internals."""
    return (len(name) > 1 and name[0] == "_") or name in _INTERNAL_NAMES or name in _RUNNER_NAMES


def _alarm_words(text: str) -> list[str]:
    """The words of ``text`` that spell an internal name (GGUF-T104)."""
    if "_" not in text and "mro" not in text and "open" not in text and "getoutput" not in text:
        return []
    hits = []
    for w in _WORD_RE.findall(text):
        if w in _LITERAL_WORDS or (len(w) > 4 and w.startswith("__") and w.endswith("__") and w[2:-2] in _DUNDER_WORDS):
            hits.append(w)
    return hits


# --------------------------------------------------------------------------------------------
# Abstract values
# --------------------------------------------------------------------------------------------

_CAP = 256  # candidate constants tracked per value (more: "unknown text")
_COMBOS = 32  # combinations of candidates an operator is folded over
_NUMBERS = 4  # candidate numbers tracked per value (more: "a number")
_FIELDS = 64  # replacement fields of a format string folded
_TEXT_LIMIT = 4096  # longest string (or container) folded
_NUM_LIMIT = 4096  # largest width, count or repeat used while folding
_DEPTH = 3  # nesting of container values tracked
_PASSES = 8  # fixpoint passes before widening


def _ckey(c: Any) -> tuple[str, Any]:
    """A hashable identity for a constant (``True`` and ``1`` stay apart)."""
    if c is None or isinstance(c, (str, int, float)):
        return type(c).__name__, c
    return type(c).__name__, repr(c)


class _V:
    """What an expression can evaluate to, over every way the template can run.

    ``consts``: the constants it may be (complete when no flag is set). Flags: ``data`` (from the
    conversation the runtime passes: as a name it is safe on conversation data only), ``built`` (text assembled at
    render time from template material, unknown), ``obj`` (a Jinja or Python object: global,
    macro, method), ``num`` (a number or boolean), ``ns`` (a ``namespace()``), ``loop`` (the loop
    variable), ``flat`` (a container nested too deep: its own element), ``dyn`` (selected by a name taken
    from the conversation: it may be whatever attribute the request named). ``calls``: what calling it
    does (``macro:<name>``, ``range``, ``caller``...). ``methods``: bound methods ``(name,
    receiver)``. ``elems``: what its elements may be, for containers built from non-constants.
    ``origin``: how the unknown text was made, for messages.
    """

    __slots__ = (
        "_sig",
        "built",
        "calls",
        "consts",
        "data",
        "dyn",
        "elems",
        "flat",
        "loop",
        "methods",
        "ns",
        "num",
        "obj",
        "origin",
    )

    def __init__(
        self,
        consts: tuple = (),
        *,
        data: bool = False,
        built: bool = False,
        obj: bool = False,
        num: bool = False,
        ns: bool = False,
        loop: bool = False,
        flat: bool = False,
        dyn: bool = False,
        calls: frozenset = frozenset(),
        methods: tuple = (),
        elems: _V | None = None,
        origin: str = "",
    ):
        self.consts = consts
        self.data = data
        self.built = built
        self.obj = obj
        self.num = num
        self.ns = ns
        self.loop = loop
        self.flat = flat
        self.dyn = dyn
        self.calls = calls
        self.methods = methods
        self.elems = elems
        self.origin = origin
        self._sig: tuple | None = None

    def sig(self) -> tuple:
        if self._sig is None:
            self._sig = (
                frozenset(_ckey(c) for c in self.consts),
                (self.data, self.built, self.obj, self.num, self.ns, self.loop, self.flat, self.dyn),
                self.calls,
                frozenset((n, r.sig()) for n, r in self.methods),
                self.elems.sig() if self.elems is not None else None,
            )
        return self._sig

    def pure(self) -> bool:
        """Only constants: fully known."""
        return bool(self.consts) and not (
            self.data
            or self.built
            or self.obj
            or self.num
            or self.ns
            or self.loop
            or self.flat
            or self.calls
            or self.methods
            or self.elems is not None
        )

    def numeric(self) -> bool:
        """Only numbers and booleans (known or not): text made from it cannot spell a name."""
        return (
            (self.num or bool(self.consts))
            and all(isinstance(c, (int, float)) for c in self.consts)
            and not (
                self.data
                or self.built
                or self.obj
                or self.ns
                or self.loop
                or self.flat
                or self.calls
                or self.methods
                or self.elems is not None
            )
        )

    def material(self) -> bool:
        """Carries text the template (or the model file) chose: constants, built text or objects."""
        return (
            self.built
            or self.obj
            or any(not isinstance(c, (int, float, type(None))) for c in self.consts)
            or (self.elems is not None and self.elems.material())
        )

    def without_methods(self) -> _V:
        if not self.methods:
            return self
        return _V(
            self.consts,
            data=self.data,
            built=self.built,
            obj=self.obj,
            num=self.num,
            ns=self.ns,
            loop=self.loop,
            flat=self.flat,
            dyn=self.dyn,
            calls=self.calls,
            elems=self.elems,
            origin=self.origin,
        )

    def split(self) -> tuple[_V, _V]:
        """(its constants alone, everything else) -- to fold the known part of a mixed value."""
        return _V(self.consts), _V(
            data=self.data,
            built=self.built,
            obj=self.obj,
            num=self.num,
            ns=self.ns,
            loop=self.loop,
            flat=self.flat,
            dyn=self.dyn,
            calls=self.calls,
            methods=self.methods,
            elems=self.elems,
            origin=self.origin,
        )

    def objectish(self) -> bool:
        """May be a Jinja or Python object (a global, the loop, a namespace...) rather than conversation data."""
        return self.obj or self.ns or self.loop


_BOT = _V()
_DATA = _V(data=True)
_DYN = _V(dyn=True)
_NUM = _V(num=True)


def _built(origin: str, *, obj: bool = False) -> _V:
    return _V(built=True, obj=obj, origin=origin)


def _const(*values: Any) -> _V:
    return _V(tuple(values))


def _candidates(values: Iterable[Any], origin: str) -> _V:
    """Any one of ``values`` (unknown text when there are more than the audit tracks)."""
    unique = {_ckey(c): c for c in values}
    return _V(tuple(unique.values())) if len(unique) <= _CAP else _built(origin)


def _depth(v: _V) -> int:
    d = 0
    while v.elems is not None:
        d += 1
        v = v.elems
    return d


def _flatten(v: _V) -> _V:
    """``v`` with every nesting level merged into one value that is also its own element."""
    levels = []
    level: _V | None = v
    while level is not None:
        levels.append(
            _V(
                level.consts,
                data=level.data,
                built=level.built,
                obj=level.obj,
                num=level.num,
                ns=level.ns,
                loop=level.loop,
                dyn=level.dyn,
                calls=level.calls,
                methods=level.methods,
                origin=level.origin,
            )
        )
        level = level.elems
    flat = _join(*levels)
    return _V(
        flat.consts,
        data=flat.data,
        built=flat.built,
        obj=flat.obj,
        num=flat.num,
        ns=flat.ns,
        loop=flat.loop,
        flat=True,
        dyn=flat.dyn,
        calls=flat.calls,
        methods=flat.methods,
        origin=flat.origin,
    )


def _join(*vals: _V | None) -> _V:
    """What any one of ``vals`` can be (the least upper bound)."""
    vs = [v for v in vals if v is not None and v is not _BOT]
    if not vs:
        return _BOT
    first = vs[0]
    if len(vs) == 1:
        return first
    sig = first.sig()
    if all(v is first or v.sig() == sig for v in vs):
        return first
    consts: list = []
    seen: set = set()
    data = built = obj = num = ns = loop = flat = dyn = False
    calls: frozenset = frozenset()
    methods: dict[str, list[_V]] = {}
    elems: list[_V] = []
    origin = ""
    for v in vs:
        for c in v.consts:
            k = _ckey(c)
            if k not in seen:
                seen.add(k)
                consts.append(c)
        data |= v.data
        built |= v.built
        obj |= v.obj
        num |= v.num
        ns |= v.ns
        loop |= v.loop
        flat |= v.flat
        dyn |= v.dyn
        if v.calls:
            calls |= v.calls
        for n, r in v.methods:
            methods.setdefault(n, []).append(r)
        if v.elems is not None:
            elems.append(v.elems)
        origin = origin or v.origin
    if sum(isinstance(c, (int, float)) and not isinstance(c, bool) for c in consts) > _NUMBERS:
        # numbers are never names: a counter need not be tracked value by value
        consts = [c for c in consts if not (isinstance(c, (int, float)) and not isinstance(c, bool))]
        num = True
    if len(consts) > _CAP:
        consts = [c for c in consts if isinstance(c, (int, float, bool, type(None)))][:_CAP]
        built = True
        origin = origin or "more candidate values than the audit tracks"
    out = _V(
        tuple(consts),
        data=data,
        built=built,
        obj=obj,
        num=num,
        ns=ns,
        loop=loop,
        flat=flat,
        dyn=dyn,
        calls=calls,
        methods=tuple((n, _join(*rs)) for n, rs in sorted(methods.items())),
        elems=_join(*elems) if elems else None,
        origin=origin,
    )
    if out.elems is not None and _depth(out) > _DEPTH:
        out = _flatten(out)
    return out


def _container(elems: _V) -> _V:
    """A list/dict made of non-constant parts: only its elements are tracked."""
    v = _V(elems=elems if elems is not _BOT else None)
    return _flatten(v) if _depth(v) > _DEPTH else v


# --------------------------------------------------------------------------------------------
# Constant folding (bounded: a template must not make the audit allocate or loop)
# --------------------------------------------------------------------------------------------


class _Unfoldable(Exception):
    pass


def _size_ok(x: Any, budget: list[int]) -> bool:
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if isinstance(x, str):
        budget[0] -= len(x) // 8
        return len(x) <= _TEXT_LIMIT and budget[0] >= 0
    if isinstance(x, bool) or x is None or isinstance(x, float):
        return True
    if isinstance(x, int):
        return x.bit_length() <= 4 * _NUM_LIMIT
    if isinstance(x, (list, tuple)):
        return len(x) <= _TEXT_LIMIT and all(_size_ok(i, budget) for i in x)
    if isinstance(x, dict):
        return len(x) <= _TEXT_LIMIT and all(_size_ok(k, budget) and _size_ok(i, budget) for k, i in x.items())
    return False


def _plain(x: Any) -> Any:
    """``x`` as plain data (str, numbers, None, lists, tuples, dicts) within the size limits."""
    if isinstance(x, str) and type(x) is not str:
        x = str(x)  # Markup
    if isinstance(x, (range, type({}.keys()), type({}.values()), type({}.items()))) or (
        hasattr(x, "__next__") and not isinstance(x, (str, list, tuple, dict))
    ):
        x = list(itertools.islice(x, _TEXT_LIMIT + 1))
    if isinstance(x, list):
        x = [_plain(i) for i in x]
    if not _size_ok(x, [4 * _TEXT_LIMIT]):
        raise _Unfoldable
    return x


def _small_int(x: Any) -> bool:
    return isinstance(x, bool) or (isinstance(x, int) and abs(x) <= _NUM_LIMIT)


def _check_args(values: Iterable[Any]) -> None:
    for a in values:
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > _NUM_LIMIT:
            raise _Unfoldable
        if isinstance(a, float) and (math.isnan(a) or abs(a) > _NUM_LIMIT):
            raise _Unfoldable
        if not _size_ok(a, [4 * _TEXT_LIMIT]):
            raise _Unfoldable


_PRINTF_RE = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def _check_printf(fmt: str) -> None:
    """Refuse to fold a %-format whose output could be large (computed widths, wide or many fields)."""
    fields = _PRINTF_RE.findall(fmt)
    if len(fields) > _FIELDS:
        raise _Unfoldable
    for width, precision, _conv in fields:
        for g in (width, precision):
            if g == "*" or (g and int(g) > _NUM_LIMIT):
                raise _Unfoldable


def _format_fields(fmt: str) -> list[tuple[str, str]]:
    """``(field_name, format_spec)`` of every replacement field of a str.format string (nested too)."""
    out = []
    for _lit, field, spec, _conv in string.Formatter().parse(fmt):
        if field is not None:
            out.append((field, spec or ""))
            if spec and "{" in spec:
                out.extend(_format_fields(spec))
    return out


def _check_format(fmt: str) -> None:
    try:
        fields = _format_fields(fmt)
    except ValueError:
        raise _Unfoldable from None
    if len(fields) > _FIELDS:
        raise _Unfoldable
    for field, spec in fields:
        if "." in field or "[" in field or "{" in spec:
            raise _Unfoldable
        for digits in re.findall(r"\d+", spec):
            if int(digits) > _NUM_LIMIT:
                raise _Unfoldable


def _fold_binop(op: str, a: Any, b: Any) -> Any:
    """``a op b`` on constants, as Jinja computes it, refusing anything large."""
    _check_args((a, b))
    r: Any
    if op == "~":
        r = f"{a}{b}"
    elif op == "+":
        if isinstance(a, str) != isinstance(b, str):
            raise _Unfoldable
        r = a + b
    elif op == "*":
        for x, y in ((a, b), (b, a)):
            if isinstance(x, (str, list, tuple)) and _small_int(y) and len(x) * max(y, 0) > _TEXT_LIMIT:
                raise _Unfoldable
        r = a * b
    elif op == "%":
        if isinstance(a, str):
            _check_printf(a)
        r = a % b
    elif op == "**":
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or abs(b) > 64 or abs(a) > 2**32:
            raise _Unfoldable
        r = a**b
    elif op in ("-", "/", "//"):
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            raise _Unfoldable
        r = a - b if op == "-" else a / b if op == "/" else a // b
    else:  # pragma: no cover - every operator is listed above
        raise _Unfoldable
    return _plain(r)


_STR_METHODS = frozenset(
    {
        "upper",
        "lower",
        "title",
        "capitalize",
        "casefold",
        "swapcase",
        "strip",
        "lstrip",
        "rstrip",
        "split",
        "rsplit",
        "splitlines",
        "replace",
        "join",
        "startswith",
        "endswith",
        "find",
        "rfind",
        "index",
        "rindex",
        "count",
        "partition",
        "rpartition",
        "removeprefix",
        "removesuffix",
        "isdigit",
        "isalpha",
        "isalnum",
        "isspace",
        "islower",
        "isupper",
        "istitle",
        "isnumeric",
        "isdecimal",
        "isidentifier",
        "center",
        "ljust",
        "rjust",
        "zfill",
        "format",
    }
)
_DICT_METHODS = frozenset({"get", "keys", "values", "items", "copy"})


def _check_replace(text: Any, args: Sequence[Any]) -> None:
    if len(args) >= 2 and isinstance(text, str) and isinstance(args[0], str) and isinstance(args[1], str):
        n = text.count(args[0]) if args[0] else len(text) + 1
        if len(text) + n * len(args[1]) > _TEXT_LIMIT:
            raise _Unfoldable


def _check_join(sep: Any, items: Any) -> None:
    if isinstance(items, (list, tuple, str)):
        size = len(str(sep)) * len(items) + sum(len(str(i)) for i in items)
        if size > 4 * _TEXT_LIMIT:
            raise _Unfoldable


_SEQ_METHODS = frozenset({"index", "count", "copy"})


def _fold_method(recv: Any, name: str, args: list, kwargs: dict) -> Any:
    _check_args([recv, *args, *kwargs.values()])
    if isinstance(recv, str):
        if name not in _STR_METHODS:
            raise _Unfoldable
        if name == "format":
            _check_format(recv)
        if name == "replace":
            _check_replace(recv, args)
        if name == "join":
            _check_join(recv, args[0] if args else ())
    elif isinstance(recv, dict):
        if name not in _DICT_METHODS:
            raise _Unfoldable
    elif isinstance(recv, (list, tuple)):
        if name not in _SEQ_METHODS:
            raise _Unfoldable
    else:
        raise _Unfoldable
    try:
        return _plain(getattr(recv, name)(*args, **kwargs))
    except _Unfoldable:
        raise
    except Exception:
        raise _Unfoldable from None


def _check_filter(name: str, value: Any, args: list, kwargs: dict) -> None:
    """Refuse to fold a filter call whose output could be large."""
    if name == "format" and isinstance(value, str):
        _check_printf(value)
    elif name == "replace":
        _check_replace(value, args)
    elif name == "join":
        _check_join(args[0] if args else kwargs.get("d", ""), value)
    elif name in ("center", "indent", "wordwrap", "truncate") and any(
        isinstance(a, int) and a > 256 for a in [*args, *kwargs.values()]
    ):
        raise _Unfoldable


_FOLD_FILTERS = frozenset(
    {
        "join",
        "format",
        "replace",
        "string",
        "lower",
        "upper",
        "title",
        "capitalize",
        "trim",
        "reverse",
        "first",
        "last",
        "list",
        "length",
        "count",
        "default",
        "d",
        "e",
        "escape",
        "forceescape",
        "center",
        "int",
        "float",
        "abs",
        "round",
        "wordcount",
        "sort",
        "unique",
        "min",
        "max",
        "sum",
        "truncate",
        "indent",
        "wordwrap",
        "safe",
        "striptags",
    }
)


# --------------------------------------------------------------------------------------------
# Filters: which parameters are attribute names, and what the result is made of
# --------------------------------------------------------------------------------------------

#: filter -> (position of the attribute parameter among the filter's arguments, its keyword)
_ATTRIBUTE_PARAMS: Mapping[str, tuple[int | None, str | None]] = {
    "selectattr": (0, None),
    "rejectattr": (0, None),
    "groupby": (0, "attribute"),
    "sum": (0, "attribute"),
    "sort": (2, "attribute"),
    "unique": (1, "attribute"),
    "min": (1, "attribute"),
    "max": (1, "attribute"),
    "join": (1, "attribute"),
}
_F_NUMBER = frozenset({"length", "count", "wordcount", "int", "float", "abs", "round", "filesizeformat", "bool"})
_F_ELEMENT = frozenset({"first", "last", "random", "min", "max"})
_F_SAME = frozenset({"list", "sort", "unique", "select", "reject", "selectattr", "rejectattr"})
_F_NESTED = frozenset({"batch", "slice"})  # lists of lists of the elements
_F_PAIRS = frozenset({"dictsort", "items", "groupby"})
_F_TEXT = frozenset(
    {
        "safe",
        "e",
        "escape",
        "forceescape",
        "trim",
        "striptags",
        "lower",
        "upper",
        "title",
        "capitalize",
        "string",
        "truncate",
        "wordwrap",
        "indent",
        "center",
        "urlencode",
        "tojson",
        "pprint",
        "urlize",
        "reverse",
        "xmlattr",
        "replace",
    }
)
_F_ASSEMBLE = frozenset({"join", "format"})

_METHOD_SELECT = frozenset(
    {
        "split",
        "rsplit",
        "splitlines",
        "partition",
        "rpartition",
        "strip",
        "lstrip",
        "rstrip",
        "removeprefix",
        "removesuffix",
        "copy",
    }
)
_METHOD_PAIRS = frozenset({"items", "keys", "values"})
_METHOD_NUMBER = frozenset(
    {
        "startswith",
        "endswith",
        "find",
        "rfind",
        "index",
        "rindex",
        "count",
        "isdigit",
        "isalpha",
        "isalnum",
        "isspace",
        "islower",
        "isupper",
        "istitle",
        "isnumeric",
        "isdecimal",
        "isidentifier",
        "isascii",
        "changed",
    }
)
_METHOD_TEXT = frozenset(
    {
        "lower",
        "upper",
        "title",
        "capitalize",
        "casefold",
        "swapcase",
        "replace",
        "join",
        "center",
        "ljust",
        "rjust",
        "zfill",
        "expandtabs",
        "translate",
        "encode",
        "decode",
        "format",
        "format_map",
    }
)
_METHOD_LOOKUP = frozenset({"get", "pop", "setdefault"})
_MUTATORS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "update",
        "add",
        "remove",
        "clear",
        "discard",
        "sort",
        "reverse",
        "pop",
        "setdefault",
        "popitem",
    }
)

_JINJA_GLOBALS = ("range", "dict", "lipsum", "cycler", "joiner", "namespace")
#: filters whose arguments name attributes (or, for map, a filter that may be ``attr``)
_NAME_FILTERS = frozenset({"attr", "map", *_ATTRIBUTE_PARAMS})
_RUNTIME_HELPERS = ("raise_exception", "strftime_now")
_LOOP_NUMBERS = frozenset({"index", "index0", "revindex", "revindex0", "length", "depth", "depth0", "first", "last"})
_TOKEN_NAME_RE = re.compile(r"^[a-z]+_token$")


# --------------------------------------------------------------------------------------------
# The analysis
# --------------------------------------------------------------------------------------------


class _Analysis:
    """Abstract interpretation of one parsed template (flow-insensitive, iterated to a fixpoint)."""

    def __init__(self, nodes: Any, lines: list[str], name: str):
        self.n = nodes
        self.lines = lines
        self.name = name
        self.state: dict[tuple[str, str], _V] = {}
        self.read: set[tuple[str, str]] = set()
        self.stale = False
        self.changed_keys: set[tuple[str, str]] = set()
        self.first_pass = True
        self.bound: dict[str, list[tuple[str, str]]] = {}  # name -> keys of the binders around, innermost last
        self.name_cache: dict[str, tuple[_V, _V]] = {}
        self.macros: dict[str, list[tuple[list[str], int]]] = {}  # name -> (parameters, id of the Macro node)
        self.findings: dict[tuple, TemplateFinding] = {}
        self.t101_words: set[tuple[int | None, str]] = set()
        self.t104: list[tuple[int | None, str, str]] = []
        self.block_value: list[_V] = []
        self._expr = self._dispatch("ev_")
        self._stmt = self._dispatch("st_")
        # expressions whose parts can be skimmed one by one (their own value is never a lookup)
        self._skim_generic = {
            getattr(nodes, k)
            for k in (
                "Concat",
                "Add",
                "Sub",
                "Mul",
                "Div",
                "FloorDiv",
                "Mod",
                "Pow",
                "And",
                "Or",
                "Not",
                "Neg",
                "Pos",
                "Compare",
                "CondExpr",
                "Test",
                "List",
                "Tuple",
                "Dict",
                "Slice",
                "MarkSafe",
                "MarkSafeIfAutoescape",
            )
        }

    def _dispatch(self, prefix: str) -> dict[type, Callable]:
        table = {}
        for attr in dir(self):
            if attr.startswith(prefix):
                cls = getattr(self.n, attr[len(prefix) :], None)
                if isinstance(cls, type):
                    table[cls] = getattr(self, attr)
        return table

    # -- running ------------------------------------------------------------------------------

    def run(self, tree: Any) -> list[TemplateFinding]:
        """Walk until a pass reads no value that changes later in the same pass; report from that pass.

        Values only grow (joins), so such a pass saw the final value of everything it read.
        """
        texts: dict[tuple[str, str], tuple[int, int]] = {}  # key -> (string constants, passes they grew in a row)
        for _ in range(_PASSES):
            if not self.one_pass(tree):
                break
            # Text that gains new constants pass after pass (indentation built up by a recursive
            # macro) would take _CAP passes to settle: after five, stand for it by "unknown text".
            for key in self.changed_keys:
                v = self.state[key]
                count = sum(isinstance(c, str) for c in v.consts)
                before, run = texts.get(key, (0, 0))
                run = run + 1 if count > before else 0
                texts[key] = (count, run)
                if run >= 5:
                    self.state[key] = _join(
                        _V(
                            tuple(c for c in v.consts if not isinstance(c, str)),
                            data=v.data,
                            obj=v.obj,
                            num=v.num,
                            ns=v.ns,
                            loop=v.loop,
                            flat=v.flat,
                            dyn=v.dyn,
                            calls=v.calls,
                            methods=v.methods,
                            elems=v.elems,
                        ),
                        _built("text that grows with each call"),
                    )
        else:
            # Did not settle (a value keeps growing, e.g. text built up by a recursive macro): widen
            # what still changes to "unknown text", which covers every further growth, and settle.
            for _ in range(_PASSES):
                for key in self.changed_keys:
                    self.state[key] = _join(self.state[key], _built("a value the audit could not settle"))
                if not self.one_pass(tree):
                    break
        for line, word, where in self.t104:
            if (line, word) not in self.t101_words:
                self.report("GGUF-T104", line, f"{where} spells {word!r}, a Python internal or command runner", word)
        return list(self.findings.values())

    def one_pass(self, tree: Any) -> bool:
        """One walk over the template; True when something read in it changed afterwards."""
        self.findings.clear()
        self.read.clear()
        self.changed_keys = set()
        self.stale = False
        self.walk(tree.body)
        self.first_pass = False
        return self.stale

    def report(self, rule: str, line: int | None, message: str, needle: str | None = None) -> None:
        key = (rule, line, message)
        if key in self.findings:
            return
        text = self.lines[line - 1] if line and 0 < line <= len(self.lines) else ""
        self.findings[key] = TemplateFinding(
            rule, RULES[rule].severity, message, line, _excerpt(text, needle), None, self.name
        )

    # -- state: variables, namespace attributes and pools, joined over the whole template --------

    def get(self, key: tuple[str, str]) -> _V:
        self.read.add(key)
        return self.state.get(key, _BOT)

    def put(self, key: tuple[str, str], v: _V) -> None:
        old = self.state.get(key, _BOT)
        new = _join(old, v)
        if new is not old and new.sig() != old.sig():
            self.state[key] = new
            self.changed_keys.add(key)
            if key in self.read or (key[0] == "ns" and ("ns", "*") in self.read):
                self.stale = True

    def set_var(self, name: str, v: _V) -> None:
        self.put(self.var_key(name)[0], v)

    def set_ns(self, attr: str, v: _V) -> None:
        self.put(("ns", attr), v)

    def pool(self, name: str, v: _V) -> None:
        self.put(("pool", name), v)

    def pooled(self, name: str) -> _V:
        return self.get(("pool", name))

    # -- checks -------------------------------------------------------------------------------

    def literal(self, node: Any, text: str, where: str) -> None:
        """Note the internal names a literal or identifier spells (GGUF-T104; the tree is fixed, one pass does)."""
        if self.first_pass:
            for w in _alarm_words(text):
                self.t104.append((getattr(node, "lineno", None), w, where))

    def check_static(self, node: Any, attr: str, recv_node: Any) -> None:
        if _is_internal(attr):
            self.t101_words.add((node.lineno, attr))
            kind = "a command runner" if attr in _RUNNER_NAMES else "a Python internal"
            self.report("GGUF-T101", node.lineno, f"attribute {attr!r} of {self.describe(recv_node)} is {kind}", attr)

    def check_name(
        self, node: Any, v: _V, how: str, *, path: bool = False, indirect: bool = False, recv: _V | None = None
    ) -> None:
        """Report when ``v``, used as an attribute/item name on ``recv``, may reach internals or is unknown text."""
        for c in v.consts:
            if not isinstance(c, str):
                continue
            parts = re.split(r"[.,]", c) if path else [c]
            for p in parts:
                if _is_internal(p) or (indirect and p in ("format", "format_map")):
                    self.t101_words.add((node.lineno, p))
                    shown = repr(c) if p == c else f"{c!r} (part {p!r})"
                    folded = "" if self.is_literal(node) else " (built at render time)"
                    self.report("GGUF-T101", node.lineno, f"{how} is {shown}{folded}, a Python internal", p)
        if v.built:
            self.report(
                "GGUF-T102",
                node.lineno,
                f"{how} is computed at render time from {v.origin or 'template text'}; its value cannot be checked",
                None,
            )
        if v.data and recv is not None and recv.objectish():
            self.report(
                "GGUF-T106",
                node.lineno,
                f"{how} comes from the conversation and is looked up on a Jinja or Python object: the "
                "request chooses the attribute",
                None,
            )

    @staticmethod
    def is_literal(node: Any) -> bool:
        return node is None or type(node).__name__ == "Const"

    def describe(self, node: Any) -> str:
        text = self.path_text(node, 4)
        if type(node).__name__ == "Name":
            if node.name in _JINJA_GLOBALS or node.name == "self":
                return f"{text} (a Jinja global)"
            if node.name in ("loop", "caller", "varargs", "kwargs"):
                return f"{text} (a Jinja object)"
        return text

    def path_text(self, node: Any, budget: int) -> str:
        n = self.n
        if budget <= 0:
            return "…"
        if isinstance(node, n.Name):
            return node.name
        if isinstance(node, n.Getattr):
            return f"{self.path_text(node.node, budget - 1)}.{node.attr}"
        if isinstance(node, n.Getitem):
            arg = repr(node.arg.value) if isinstance(node.arg, n.Const) else "…"
            return f"{self.path_text(node.node, budget - 1)}[{arg}]"
        if isinstance(node, n.Call):
            return f"{self.path_text(node.node, budget - 1)}(…)"
        if isinstance(node, n.Filter):
            return f"{self.path_text(node.node, budget - 1)}|{node.name}" if node.node is not None else f"|{node.name}"
        if isinstance(node, n.Const):
            text = repr(node.value)
            return text if len(text) <= 30 else text[:27] + "…"
        return "(expression)"

    # -- statements -----------------------------------------------------------------------------

    def walk(self, body: Iterable[Any]) -> None:
        for node in body:
            fn = self._stmt.get(type(node))
            if fn is not None:
                fn(node)
            elif isinstance(node, self.n.Expr):
                self.ev(node)
            else:
                self.generic(node)

    def generic(self, node: Any) -> _V:
        """Any node the audit has no rule for: look inside, assume the worst about its value."""
        for child in node.iter_child_nodes():
            if isinstance(child, self.n.Expr):
                self.ev(child)
            else:
                self.walk([child])
        return _built("an expression the audit does not model", obj=True)

    def st_Output(self, node: Any) -> None:
        for child in node.nodes:
            if not isinstance(child, self.n.TemplateData):
                self.skim(child)

    def st_If(self, node: Any) -> None:
        self.skim(node.test)
        self.walk(node.body)
        self.walk(node.elif_)
        self.walk(node.else_)

    def st_For(self, node: Any) -> None:
        it = self.ev(node.iter)
        if node.recursive:
            it = _join(it, self.pooled("loop-recursion"))
        elem = self.elements(it)
        self.pool("loop-items", elem)
        with self.scope(node, self.target_names(node.target)):
            self.assign(node.target, elem)
            if node.test is not None:
                self.skim(node.test)
            self.walk(node.body)
        self.walk(node.else_)  # the loop variable is not bound in {% else %}

    def target_names(self, target: Any) -> list[str]:
        if isinstance(target, self.n.Name):
            return [target.name]
        if isinstance(target, (self.n.Tuple, self.n.List)):
            return [name for item in target.items for name in self.target_names(item)]
        return []

    @contextlib.contextmanager
    def scope(self, binder: Any, names: Iterable[str]) -> Iterator[None]:
        """Names bound by a loop, macro, call block or with block: their own variables inside it."""
        bound = list(dict.fromkeys(names))
        for name in bound:
            self.bound.setdefault(name, []).append(("var", f"{name}@{id(binder)}"))
        try:
            yield
        finally:
            for name in bound:
                self.bound[name].pop()

    def var_key(self, name: str) -> tuple[tuple[str, str], bool]:
        """The state key of variable ``name`` here, and whether a binder (not the template) owns it."""
        keys = self.bound.get(name)
        if keys:
            return keys[-1], True
        return ("var", name), False

    def st_Assign(self, node: Any) -> None:
        self.assign(node.target, self.ev(node.node))

    def st_AssignBlock(self, node: Any) -> None:
        self.walk(node.body)
        value = _built("the output of a {% set %} block")
        if node.filter is not None:
            value = self.ev_block_filter(node.filter, value)
        self.assign(node.target, value)

    def st_FilterBlock(self, node: Any) -> None:
        self.walk(node.body)
        self.ev_block_filter(node.filter, _built("the output of a {% filter %} block"))

    def ev_block_filter(self, flt: Any, value: _V) -> _V:
        self.block_value.append(value)
        try:
            return self.ev(flt)
        finally:
            self.block_value.pop()

    def st_Macro(self, node: Any) -> None:
        self.set_var(node.name, _V(obj=True, calls=frozenset({"macro:" + node.name})))
        with self.scope(node, (a.name for a in node.args)):
            self.macro_def(node.name, node.args, node.defaults, node)
            self.walk(node.body)

    def macro_def(self, name: str | None, args: list, defaults: list, node: Any) -> None:
        params = [a.name for a in args]
        for a in args:
            self.literal(node, a.name, "a parameter name")
        if name is not None:
            self.literal(node, name, "a macro name")
            entry = (params, id(node))
            known = self.macros.setdefault(name, [])
            if entry not in known:
                known.append(entry)
        for param, default in zip(params[len(params) - len(defaults) :], defaults, strict=True):
            self.set_var(param, self.ev(default))

    def st_CallBlock(self, node: Any) -> None:
        self.ev(node.call)
        with self.scope(node, (a.name for a in node.args)):
            self.macro_def(None, node.args, node.defaults, node)
            for a in node.args:
                self.set_var(a.name, self.pooled("caller-args"))
            self.walk(node.body)

    def st_With(self, node: Any) -> None:
        values = [self.ev(value) for value in node.values]
        names = [name for target in node.targets for name in self.target_names(target)]
        with self.scope(node, names):
            for target, value in zip(node.targets, values, strict=True):
                self.assign(target, value)
            self.walk(node.body)

    def loads(self, node: Any, what: str) -> None:
        self.ev(node.template)
        self.report(
            "GGUF-T201",
            node.lineno,
            f"{what} loads another template, whose source the audit cannot see",
            what.split()[0].strip("{%} "),
        )

    def st_Include(self, node: Any) -> None:
        self.loads(node, "{% include %}")

    def st_Extends(self, node: Any) -> None:
        self.loads(node, "{% extends %}")

    def st_Import(self, node: Any) -> None:
        self.loads(node, "{% import %}")
        self.set_var(
            node.target,
            _V(obj=True, built=True, calls=frozenset({"imported"}), origin="a name imported from another template"),
        )

    def st_FromImport(self, node: Any) -> None:
        self.loads(node, "{% from ... import %}")
        for item in node.names:
            alias = item[1] if isinstance(item, tuple) else item
            self.set_var(
                alias,
                _V(obj=True, built=True, calls=frozenset({"imported"}), origin="a name imported from another template"),
            )

    def st_ExprStmt(self, node: Any) -> None:
        self.skim(node.node)

    def assign(self, target: Any, value: _V) -> None:
        n = self.n
        if isinstance(target, n.Name):
            self.literal(target, target.name, "a variable name")
            self.set_var(target.name, value)
        elif isinstance(target, n.NSRef):
            self.check_static(target, target.attr, n.Name(target.name, "load", lineno=target.lineno))
            self.set_ns(target.attr, value)
        elif isinstance(target, (n.Tuple, n.List)):
            elem = self.elements(value)
            for item in target.items:
                self.assign(item, elem)
        else:
            self.generic(target)

    # -- expressions ----------------------------------------------------------------------------

    def ev(self, node: Any) -> _V:
        fn = self._expr.get(type(node))
        if fn is None:
            return self.generic(node)
        return fn(node)

    def skim(self, node: Any) -> None:
        """Visit an expression whose value nobody uses (output, conditions): run every check and
        every side effect (calls bind macro arguments), but build no value for it."""
        n = self.n
        kind = type(node)
        if kind is n.Const:
            if isinstance(node.value, str):
                self.literal(node, node.value, "a string literal")
        elif kind is n.Name:
            self.literal(node, node.name, "a variable name")
        elif kind is n.TemplateData:
            pass
        elif kind is n.Getattr:
            self.skim(node.node)
            self.check_static(node, node.attr, node.node)
        elif kind is n.Getitem:
            if isinstance(node.arg, n.Slice):
                self.skim(node.node)
                self.skim(node.arg)
            else:
                key = self.ev(node.arg)
                recv = self.ev(node.node) if key.data else None  # the receiver matters for GGUF-T106 only
                if recv is None:
                    self.skim(node.node)
                self.check_name(node.arg, key, f"the item name in {self.path_text(node, 3)}", recv=recv)
        elif kind is n.Filter:
            args, kwargs, dyn_a, dyn_k = self.call_args(node)
            recv = _BOT
            if node.node is None:
                recv = self.block_value[-1] if self.block_value else _built("block output")
            elif node.name in _NAME_FILTERS and (
                dyn_a is not None or dyn_k is not None or any(a.data for a in args) or any(v.data for _, v in kwargs)
            ):
                recv = self.ev(node.node)
            else:
                self.skim(node.node)
            self.apply_filter(node, node.name, recv, args, dict(kwargs), dyn_a, dyn_k)
        elif kind is n.Call or kind not in self._skim_generic:
            self.ev(node)
        else:
            for child in node.iter_child_nodes():
                if isinstance(child, n.Keyword):
                    self.literal(child, child.key, "a keyword argument name")
                    self.skim(child.value)
                elif isinstance(child, n.Pair):
                    self.skim(child.key)
                    self.skim(child.value)
                elif isinstance(child, n.Operand):
                    self.skim(child.expr)
                else:
                    self.skim(child)

    def ev_Const(self, node: Any) -> _V:
        if isinstance(node.value, str):
            self.literal(node, node.value, "a string literal")
        return _const(node.value)

    def ev_TemplateData(self, node: Any) -> _V:
        return _const(node.data)

    def ev_Name(self, node: Any) -> _V:
        name = node.name
        self.literal(node, name, "a variable name")
        key, bound = self.var_key(name)
        assigned = self.get(key)
        if bound:
            return assigned
        if name in ("varargs", "kwargs"):
            return _join(assigned, self.free(name))
        cached = self.name_cache.get(name)
        if cached is None or cached[0] is not assigned:
            cached = self.name_cache[name] = (assigned, _join(assigned, self.free(name)))
        return cached[1]

    def free(self, name: str) -> _V:
        """The value of a name the template does not assign: a Jinja global, a helper, or data."""
        if name in _JINJA_GLOBALS:
            return _V(obj=True, calls=frozenset({name}), origin=f"the Jinja global {name!r}")
        if name == "self":
            return _V(obj=True, calls=frozenset({"self"}), origin="the template object 'self'")
        if name == "loop":
            return _V(obj=True, loop=True, calls=frozenset({"loop"}), origin="the loop object")
        if name == "caller":
            return _V(obj=True, calls=frozenset({"caller"}), origin="the caller object")
        if name == "varargs":
            return _container(self.pooled("varargs"))
        if name == "kwargs":
            return _container(self.pooled("kwargs"))
        if name in _RUNTIME_HELPERS:
            return _V(obj=True, calls=frozenset({name}), origin=f"the runtime helper {name!r}")
        if _TOKEN_NAME_RE.match(name):
            return _built(f"{name} (text of a token from the model file)")
        return _DATA

    def ev_Tuple(self, node: Any) -> _V:
        return self.sequence([self.ev(i) for i in node.items], tuple)

    def ev_List(self, node: Any) -> _V:
        return self.sequence([self.ev(i) for i in node.items], list)

    def sequence(self, items: list[_V], kind: type) -> _V:
        if all(i.pure() for i in items) and math.prod(len(i.consts) for i in items) <= _COMBOS:
            return _V(tuple(kind(p) for p in itertools.product(*(i.consts for i in items))))
        return _container(_join(*items))

    def ev_Dict(self, node: Any) -> _V:
        keys = [self.ev(p.key) for p in node.items]
        values = [self.ev(p.value) for p in node.items]
        if all(v.pure() and len(v.consts) == 1 for v in keys + values):
            try:
                return _const({k.consts[0]: v.consts[0] for k, v in zip(keys, values, strict=True)})
            except TypeError:  # unhashable key: the runtime fails too
                pass
        return _container(_join(*keys, *values))

    def ev_CondExpr(self, node: Any) -> _V:
        self.skim(node.test)
        return _join(self.ev(node.expr1), self.ev(node.expr2) if node.expr2 is not None else None)

    def ev_And(self, node: Any) -> _V:
        return _join(self.ev(node.left), self.ev(node.right))

    ev_Or = ev_And

    def ev_Not(self, node: Any) -> _V:
        self.skim(node.node)
        return _NUM

    def ev_Neg(self, node: Any) -> _V:
        v = self.ev(node.node)
        if v.pure() and all(isinstance(c, (int, float)) for c in v.consts):
            return _V(tuple(-c for c in v.consts))
        return _NUM

    ev_Pos = ev_Neg

    def ev_Compare(self, node: Any) -> _V:
        self.skim(node)
        return _NUM

    def ev_Test(self, node: Any) -> _V:
        self.skim(node)
        return _NUM

    def ev_MarkSafe(self, node: Any) -> _V:
        return self.ev(node.expr)

    ev_MarkSafeIfAutoescape = ev_MarkSafe

    def ev_Slice(self, node: Any) -> _V:
        for part in (node.start, node.stop, node.step):
            if part is not None:
                self.ev(part)
        return _NUM

    # text building -----------------------------------------------------------------------------

    def fold(self, op: str, parts: list[_V], origin: str) -> _V:
        """Apply a binary text/number operator over every combination of constants, or give up."""
        if all(p.pure() for p in parts):
            combos = math.prod(len(p.consts) for p in parts)
            if combos <= _COMBOS:
                results = []
                try:
                    for combo in itertools.product(*(p.consts for p in parts)):
                        acc = combo[0]
                        if op == "~":
                            acc = _fold_binop("~", "", acc)
                        for x in combo[1:]:
                            acc = _fold_binop(op, acc, x)
                        results.append(acc)
                    return _V(tuple(results))
                except Exception:  # _Unfoldable, or the operation fails as it would at render time
                    pass
        if all(p.numeric() for p in parts):
            return _NUM
        return _built(origin)

    def ev_Concat(self, node: Any) -> _V:
        return self.fold("~", [self.ev(x) for x in node.nodes], "'~' concatenation")

    def ev_Add(self, node: Any) -> _V:
        a, b = self.ev(node.left), self.ev(node.right)
        if a.pure() and b.pure():
            return self.fold("+", [a, b], "'+' concatenation")
        if a.numeric() and b.numeric():
            return _NUM
        if self.sequence_like(a) or self.sequence_like(b):  # list + list: elements carried over
            return _container(_join(self.elements(a), self.elements(b)))
        if not a.material() and not b.material():
            return _join(a, b)  # conversation data joined with conversation data
        return _built("'+' concatenation")

    def sequence_like(self, v: _V) -> bool:
        return v.elems is not None or any(isinstance(c, (list, tuple)) for c in v.consts)

    def ev_Mul(self, node: Any) -> _V:
        a, b = self.ev(node.left), self.ev(node.right)
        if not a.material() and not b.material() and (a.data or b.data):
            return _join(a, b)
        return self.fold("*", [a, b], "'*' repetition")

    def ev_Mod(self, node: Any) -> _V:
        a, b = self.ev(node.left), self.ev(node.right)
        if a.pure() and b.pure():
            return self.fold("%", [a, b], "'%' formatting")
        if a.numeric() and b.numeric():
            return _NUM
        return _built("'%' formatting")

    def arith(self, op: str, node: Any) -> _V:
        a, b = self.ev(node.left), self.ev(node.right)
        if a.pure() and b.pure():
            v = self.fold(op, [a, b], f"{op!r} arithmetic")
            return _NUM if v.built else v
        return _NUM

    def ev_Sub(self, node: Any) -> _V:
        return self.arith("-", node)

    def ev_Div(self, node: Any) -> _V:
        return self.arith("/", node)

    def ev_FloorDiv(self, node: Any) -> _V:
        return self.arith("//", node)

    def ev_Pow(self, node: Any) -> _V:
        return self.arith("**", node)

    # lookups ----------------------------------------------------------------------------------

    def elements(self, v: _V, *, item: bool = False) -> _V:
        """What iterating ``v`` (or indexing it with an unknown key, ``item=True``) can give."""
        parts: list[_V | None] = [v.elems, self.pooled("mutations") if self.mutable(v) else None]
        if v.flat:  # nested deeper than tracked: its elements are like itself
            parts.append(v)
        chars: list = []
        for c in v.consts:
            if isinstance(c, str):
                if len(c) <= _TEXT_LIMIT:
                    chars.extend(dict.fromkeys(c))
                else:
                    parts.append(_built("characters of a long string"))
            elif isinstance(c, (list, tuple)):
                parts.append(_candidates(c, "a long constant list"))
            elif isinstance(c, dict):
                parts.append(_candidates(c.values() if item else c.keys(), "a large constant dict"))
        if chars:
            parts.append(_candidates(chars, "the characters of a string"))
        if v.data:
            parts.append(_DATA)
        if v.built or v.obj:
            parts.append(_built(v.origin or "an object", obj=v.obj))
        if v.num:
            parts.append(_NUM)
        if v.ns:
            parts.append(self.all_ns())
        if v.dyn:
            parts.append(_DYN)
        return _join(*parts)

    def all_ns(self) -> _V:
        self.read.add(("ns", "*"))
        return _join(*(v for k, v in self.state.items() if k[0] == "ns"), self.pooled("ns-any"))

    def mutable(self, v: _V) -> bool:
        """May be a list or dict (which ``append``/``update``/... may have changed)."""
        return v.data or v.flat or v.elems is not None or any(isinstance(c, (list, dict)) for c in v.consts)

    def attr_value(self, recv: _V, name: str) -> _V:
        """``recv.name`` (Jinja tries the attribute, then the item)."""
        parts: list[_V | None] = [self.pooled("mutations") if self.mutable(recv) else None]
        if recv.loop:
            if name in _LOOP_NUMBERS:
                parts.append(_NUM)
            elif name in ("previtem", "nextitem"):
                parts.append(self.pooled("loop-items"))
            elif name in ("cycle", "changed"):
                parts.append(_V(methods=((name, _V(loop=True)),)))
            else:
                parts.append(_built("an attribute of the loop object", obj=True))
        if recv.ns:
            parts.append(self.get(("ns", name)))
            parts.append(self.pooled("ns-any"))
        for c in recv.consts:
            if isinstance(c, dict) and name in c and not hasattr(dict, name):
                parts.append(_const(c[name]))
            elif not _is_internal(name) and callable(getattr(type(c), name, None)):
                parts.append(_V(methods=((name, _const(c)),)))
        if recv.elems is not None:
            parts.append(recv.elems)
        if recv.data:
            parts.append(_V(data=True, methods=((name, _DATA),)))
        if recv.built:
            parts.append(_V(built=True, origin=recv.origin, methods=((name, _built(recv.origin)),)))
        if recv.obj and not recv.loop:
            parts.append(
                _V(
                    built=True,
                    obj=True,
                    origin=f"an attribute of {recv.origin or 'an object'}",
                    methods=((name, recv.without_methods()),),
                )
            )
        if recv.num:
            parts.append(_NUM)
        if recv.flat:
            parts.append(recv.without_methods())
        return _join(*parts)

    def ev_Getattr(self, node: Any) -> _V:
        recv = self.ev(node.node)
        self.check_static(node, node.attr, node.node)
        return self.attr_value(recv, node.attr)

    def ev_Getitem(self, node: Any) -> _V:
        recv = self.ev(node.node)
        if isinstance(node.arg, self.n.Slice):
            parts = [
                self.ev(p) if p is not None else _const(None) for p in (node.arg.start, node.arg.stop, node.arg.step)
            ]
            return self.sliced(recv, parts)
        key = self.ev(node.arg)
        self.check_name(node.arg, key, f"the item name in {self.path_text(node, 3)}", recv=recv)
        return self.item_value(recv, key)

    def sliced(self, recv: _V, parts: list[_V]) -> _V:
        if recv.pure() and all(p.pure() for p in parts):
            out = []
            try:
                for c in recv.consts:
                    for s in itertools.product(*(p.consts for p in parts)):
                        _check_args(s)
                        out.append(_plain(c[slice(*s)]))
                if len(out) <= _COMBOS:
                    return _V(tuple(out))
            except Exception:
                pass
            return _built("slicing")
        # slicing a list keeps its elements; slicing template text gives pieces of that text
        return _join(
            _container(self.elements(recv)) if self.sequence_like(recv) else None,
            _built("slicing") if (recv.built or recv.obj or any(isinstance(c, str) for c in recv.consts)) else None,
            _DATA if recv.data else None,
            _NUM if recv.num else None,
        )

    def item_value(self, recv: _V, key: _V) -> _V:
        parts: list[_V | None] = [self.pooled("mutations") if self.mutable(recv) else None]
        if recv.pure() and key.pure():
            for c in recv.consts:
                for k in key.consts:
                    try:
                        if isinstance(c, dict):
                            if k in c:
                                parts.append(_const(c[k]))
                                continue
                        elif isinstance(c, (list, tuple, str)) and isinstance(k, int) and not isinstance(k, bool):
                            parts.append(_const(c[k]))
                            continue
                    except (IndexError, TypeError, KeyError):
                        continue
                    if isinstance(k, str):
                        parts.append(self.attr_value(_const(c), k))
            return _join(*parts)
        for k in key.consts:
            if isinstance(k, str):
                parts.append(self.attr_value(recv, k))
        if not key.pure() or any(not isinstance(k, str) for k in key.consts):
            parts.append(self.elements(recv, item=True))
        if key.data:
            parts.append(_DYN)
        return _join(*parts)

    # calls ------------------------------------------------------------------------------------

    def call_args(self, node: Any) -> tuple[list[_V], list[tuple[str, _V]], _V | None, _V | None]:
        args = [self.ev(a) for a in node.args]
        kwargs = []
        for k in node.kwargs:
            self.literal(k, k.key, "a keyword argument name")
            kwargs.append((k.key, self.ev(k.value)))
        dyn_a = self.ev(node.dyn_args) if node.dyn_args is not None else None
        dyn_k = self.ev(node.dyn_kwargs) if node.dyn_kwargs is not None else None
        return args, kwargs, dyn_a, dyn_k

    def ev_Call(self, node: Any) -> _V:
        callee = self.ev(node.node)
        args, kwargs, dyn_a, dyn_k = self.call_args(node)
        results: list[_V | None] = []
        for target in sorted(callee.calls):
            results.append(self.call_known(target, node, args, kwargs, dyn_a, dyn_k))
        for name, recv in callee.methods:
            results.append(self.call_method(node, name, recv, args, kwargs, dyn_a, dyn_k))
        if callee.data:
            results.append(_DATA)  # items of the conversation are not callable; nothing to track
        if callee.built or (callee.obj and not callee.calls and not callee.methods):
            results.append(_built(f"the result of calling {self.path_text(node.node, 3)}", obj=callee.obj))
        if callee.consts and not callee.methods:
            results.append(_built("the result of calling a constant"))
        if callee.dyn:
            self.report(
                "GGUF-T106",
                node.lineno,
                f"{self.path_text(node.node, 3)} is selected by a name from the conversation and then called: "
                "the request chooses what runs",
                None,
            )
        return _join(*results)

    def spread(self, dyn_a: _V | None, dyn_k: _V | None) -> _V:
        """Everything ``*args`` / ``**kwargs`` can hand over: elements, keys and values."""
        return _join(
            self.elements(dyn_a) if dyn_a is not None else None,
            self.elements(dyn_a, item=True) if dyn_a is not None else None,
            self.elements(dyn_k) if dyn_k is not None else None,
            self.elements(dyn_k, item=True) if dyn_k is not None else None,
        )

    def call_known(
        self, target: str, node: Any, args: list[_V], kwargs: list[tuple[str, _V]], dyn_a: _V | None, dyn_k: _V | None
    ) -> _V:
        extra = self.spread(dyn_a, dyn_k)
        everything = _join(*args, *(v for _, v in kwargs), extra)
        if target.startswith("macro:"):
            self.bind_macro(target[6:], args, kwargs, extra)
            return _built(f"the output of macro {target[6:]!r}")
        if target == "range":
            return _NUM
        if target == "dict":
            if not args and dyn_a is None and dyn_k is None and all(v.pure() and len(v.consts) == 1 for _, v in kwargs):
                return _const({k: v.consts[0] for k, v in kwargs})
            return _container(
                _join(
                    _V(tuple(k for k, _ in kwargs)),
                    *(v for _, v in kwargs),
                    *(self.elements(a) for a in args),
                    *(self.elements(self.elements(a)) for a in args),
                    extra,
                )
            )
        if target == "namespace":
            for k, v in kwargs:
                self.set_ns(k, v)
            if args or extra is not _BOT:
                self.pool(
                    "ns-any",
                    _join(*(self.elements(a) for a in args), *(self.elements(a, item=True) for a in args), extra),
                )
            return _V(ns=True)
        if target == "caller":
            self.pool("caller-args", everything)
            return _built("the output of a {% call %} block")
        if target == "loop":
            self.pool("loop-recursion", _join(*args, extra))
            return _built("the output of a recursive loop")
        if target == "raise_exception":
            return _BOT
        if target == "cycler":
            return _V(obj=True, elems=everything if everything is not _BOT else None, origin="a cycler")
        if target in ("joiner", "lipsum", "strftime_now", "self", "imported"):
            return _built(f"the result of {target}()", obj=target == "joiner")
        return _built(f"the result of {target}()", obj=True)  # pragma: no cover - every call target is listed

    def bind_macro(self, name: str, args: list[_V], kwargs: list[tuple[str, _V]], extra: _V) -> None:
        """Hand a call's arguments to every macro of that name (its parameters, varargs, kwargs)."""
        for params, binder in self.macros.get(name, ()):
            keys = {p: ("var", f"{p}@{binder}") for p in params}
            for i, a in enumerate(args):
                if i < len(params):
                    self.put(keys[params[i]], a)
                else:
                    self.pool("varargs", a)
            for k, v in kwargs:
                if k in keys:
                    self.put(keys[k], v)
                else:
                    self.pool("kwargs", _join(_const(k), v))
            if extra is not _BOT:
                for key in keys.values():
                    self.put(key, extra)
                self.pool("varargs", extra)
                self.pool("kwargs", extra)

    def call_method(
        self,
        node: Any,
        name: str,
        recv: _V,
        args: list[_V],
        kwargs: list[tuple[str, _V]],
        dyn_a: _V | None,
        dyn_k: _V | None,
    ) -> _V:
        everything = _join(*args, *(v for _, v in kwargs), self.spread(dyn_a, dyn_k))
        if name in ("format", "format_map"):
            self.check_format(node, recv, bool(args or kwargs or dyn_a is not None or dyn_k is not None))
        if name in _METHOD_LOOKUP and args:
            self.check_name(node.args[0] if node.args else node, args[0], f"the key of .{name}()", recv=recv)
        if name in _MUTATORS and (args or dyn_a is not None or kwargs):
            added = _join(
                *(self.elements(a) for a in args if name in ("extend", "update")),
                *(self.elements(a, item=True) for a in args if name == "update"),
                *(args if name not in ("extend", "update") else ()),
                *(v for _, v in kwargs),
                _const(*(k for k, _ in kwargs)) if kwargs else None,
                self.spread(dyn_a, dyn_k),
            )
            self.pool("mutations", added)
        if recv.loop and name == "cycle":
            return everything
        if recv.consts and not recv.pure():  # fold the constants, reason about the rest
            known, rest = recv.split()
            return _join(
                self.call_method(node, name, known, args, kwargs, dyn_a, dyn_k),
                self.call_method(node, name, rest, args, kwargs, dyn_a, dyn_k),
            )
        # constants: run the real method when it is on the allow-list and small
        if (
            recv.pure()
            and all(a.pure() for a in args)
            and all(v.pure() for _, v in kwargs)
            and dyn_a is None
            and dyn_k is None
        ):
            out = []
            try:
                for c in recv.consts:
                    for combo in itertools.product(*(a.consts for a in args)):
                        for kcombo in itertools.product(*(v.consts for _, v in kwargs)):
                            out.append(
                                _fold_method(
                                    c, name, list(combo), dict(zip((k for k, _ in kwargs), kcombo, strict=True))
                                )
                            )
                            if len(out) > _COMBOS:
                                raise _Unfoldable
                return _V(tuple(out))
            except _Unfoldable:
                pass
        if name in _METHOD_NUMBER:
            return _NUM
        if name in _METHOD_LOOKUP:
            return _join(self.elements(recv, item=True), args[1] if len(args) > 1 else None)
        if name in _METHOD_PAIRS:
            inner = _join(self.elements(recv), self.elements(recv, item=True))
            return _container(_join(inner, _container(inner)) if name == "items" else inner)
        if name in _MUTATORS:
            return _const(None)
        if name in _METHOD_SELECT:  # pieces of the receiver: of the conversation's text, or of template text
            text = recv.built or recv.obj or any(isinstance(c, str) for c in recv.consts)
            return _join(
                _DATA if recv.data else None,
                _built(f"the result of .{name}()", obj=recv.obj) if text else None,
                _container(self.elements(recv)) if self.sequence_like(recv) or recv.flat else None,
            )
        if name in _METHOD_TEXT:
            if recv.data and not recv.material() and not everything.material():
                return _DATA
            if recv.numeric() and everything.numeric():
                return _NUM
            return _built(f"the result of .{name}()")
        if recv.data and not recv.material():
            return _DATA
        return _built(f"the result of .{name}()", obj=recv.obj)

    def check_format(self, node: Any, recv: _V, has_args: bool) -> None:
        for c in recv.consts:
            if not isinstance(c, str):
                continue
            try:
                fields = _format_fields(c)
            except ValueError:
                continue
            for field, _spec in fields:
                if "." in field or "[" in field:
                    words = [w for w in re.split(r"[.\[\]]", field) if w]
                    bad = next((w for w in words if _is_internal(w)), None)
                    if bad:
                        self.t101_words.add((node.lineno, bad))
                    self.report(
                        "GGUF-T103",
                        node.lineno,
                        f"format string field {{{field}}} reads attributes or items of its argument",
                        field,
                    )
        if recv.built or recv.obj:
            self.report(
                "GGUF-T103",
                node.lineno,
                f"format string is computed at render time from {recv.origin or 'template text'}",
                "format",
            )
        if (recv.data or recv.dyn) and has_args:
            self.report(
                "GGUF-T103",
                node.lineno,
                "format string comes from the conversation: the request chooses which attributes of the "
                "arguments it reads",
                "format",
            )

    # filters ----------------------------------------------------------------------------------

    def ev_Filter(self, node: Any) -> _V:
        if node.node is None:
            recv = self.block_value[-1] if self.block_value else _built("block output")
        else:
            recv = self.ev(node.node)
        args, kwargs, dyn_a, dyn_k = self.call_args(node)
        return self.apply_filter(node, node.name, recv, args, dict(kwargs), dyn_a, dyn_k)

    def apply_filter(
        self,
        node: Any,
        name: str,
        recv: _V,
        args: list[_V],
        kwargs: dict[str, _V],
        dyn_a: _V | None,
        dyn_k: _V | None,
        depth: int = 0,
    ) -> _V:
        extra = self.spread(dyn_a, dyn_k) if (dyn_a is not None or dyn_k is not None) else None
        # -- names this filter looks up ----------------------------------------------------------
        if name == "attr":
            target = args[0] if args else kwargs.get("name", _BOT)
            self.check_name(node, _join(target, extra), "the attribute name of |attr", recv=recv)
            return _join(
                *(self.attr_value(recv, c) for c in target.consts if isinstance(c, str)),
                _built("an attribute fetched by |attr", obj=True) if (target.built or target.data or extra) else None,
                _DYN if target.data else None,
            )
        if name in ("map", "select", "reject", "selectattr", "rejectattr") and extra is not None:
            self.check_name(
                node, extra, f"a name spread into |{name}", path=True, indirect=True, recv=self.elements(recv)
            )
        if name == "map":
            if not args and "attribute" in kwargs:
                self.check_name(
                    node,
                    kwargs["attribute"],
                    "the attribute of |map",
                    path=True,
                    indirect=True,
                    recv=self.elements(recv),
                )
                return _container(self.attr_path_value(self.elements(recv), kwargs["attribute"]))
            if args:
                fname = args[0]
                if fname.built or fname.obj:
                    self.report(
                        "GGUF-T102",
                        node.lineno,
                        f"filter name of |map is computed at render time from {fname.origin or 'template text'}",
                    )
                results = []
                for c in fname.consts:
                    if isinstance(c, str) and depth < 3:
                        results.append(
                            self.apply_filter(node, c, self.elements(recv), args[1:], kwargs, dyn_a, dyn_k, depth + 1)
                        )
                return _container(
                    _join(
                        *results,
                        _built("|map with a computed filter") if fname.built else None,
                        _DATA if fname.data else None,
                    )
                )
            return _container(self.elements(recv))
        spec = _ATTRIBUTE_PARAMS.get(name)
        attribute = _BOT
        if spec is not None:
            pos, kw = spec
            if pos is not None and len(args) > pos:
                attribute = args[pos]
            elif kw is not None and kw in kwargs:
                attribute = kwargs[kw]
            if attribute is not _BOT:
                self.check_name(
                    node, attribute, f"the attribute of |{name}", path=True, indirect=True, recv=self.elements(recv)
                )
        # -- what the result is made of ----------------------------------------------------------
        if recv.consts and not recv.pure() and attribute is _BOT and name in _FOLD_FILTERS:
            known, rest = recv.split()  # fold the constants, reason about the rest
            return _join(
                self.apply_filter(node, name, known, args, kwargs, dyn_a, dyn_k, depth),
                self.apply_filter(node, name, rest, args, kwargs, dyn_a, dyn_k, depth),
            )
        if (
            recv.pure()
            and attribute is _BOT
            and name in _FOLD_FILTERS
            and extra is None
            and all(a.pure() for a in args)
            and all(v.pure() for v in kwargs.values())
        ):
            folded = self.fold_filter(name, recv, args, kwargs)
            if folded is not None:
                return folded
        if name in _F_NUMBER:
            return _NUM
        if attribute is not _BOT and name in ("sum", "join", "groupby"):
            looked_up = self.attr_path_value(self.elements(recv), attribute)
            if name == "join":
                return self.assembled([looked_up, *args[:1]], "the 'join' filter")
            if name == "groupby":
                return _container(_join(looked_up, self.elements(recv), _container(self.elements(recv))))
            return _join(looked_up, args[1] if len(args) > 1 else kwargs.get("start"))
        if name in _F_ELEMENT:
            return self.elements(recv)
        if name in ("default", "d"):
            return _join(recv, args[0] if args else kwargs.get("default_value"))
        if name in _F_SAME:
            return _join(_container(self.elements(recv)), recv if recv.data else None)
        if name in _F_NESTED:
            fill = args[1] if len(args) > 1 else kwargs.get("fill_with")
            return _join(_container(_container(_join(self.elements(recv), fill))), recv if recv.data else None)
        if name in _F_PAIRS:
            inner = _join(self.elements(recv), self.elements(recv, item=True))
            return _container(_join(inner, _container(inner)))
        if name in _F_ASSEMBLE:
            pieces = [self.elements(recv) if name == "join" else recv, *args, *kwargs.values()]
            return self.assembled(pieces, f"the {name!r} filter")
        if name in _F_TEXT:
            if recv.data and not recv.material() and not any(a.material() for a in args):
                return _DATA
            if recv.numeric():
                return _NUM
            if recv.elems is not None and name not in ("string", "tojson", "pprint"):
                return _join(recv, _built(f"the {name!r} filter"))
            return _built(f"the {name!r} filter", obj=False)
        if name == "sum":
            return _join(self.elements(recv), args[1] if len(args) > 1 else kwargs.get("start"))
        # a filter the audit does not know (a runtime may add its own): assume unknown text
        return _built(f"the {name!r} filter", obj=recv.obj)

    def assembled(self, pieces: list[_V], origin: str) -> _V:
        if all(p.numeric() for p in pieces):
            return _NUM
        return _built(origin)

    def attr_path_value(self, items: _V, attribute: _V) -> _V:
        out: list[_V] = []
        for c in attribute.consts:
            if isinstance(c, str):
                v = items
                for part in c.split("."):
                    v = self.item_value(v, _const(int(part) if part.isdigit() else part))
                out.append(v)
            elif isinstance(c, int):
                out.append(self.item_value(items, _const(c)))
        if attribute.built or attribute.data or not attribute.consts:
            out.append(self.elements(items, item=True))
            if attribute.data:
                out.append(_DYN)
            if attribute.built:
                out.append(_built("an attribute path computed at render time", obj=True))
        return _join(*out)

    def fold_filter(self, name: str, recv: _V, args: list[_V], kwargs: dict[str, _V]) -> _V | None:
        env = _fold_environment()
        out = []
        try:
            for c in recv.consts:
                for combo in itertools.product(*(a.consts for a in args)):
                    for kcombo in itertools.product(*(v.consts for v in kwargs.values())):
                        _check_args([c, *combo, *kcombo])
                        _check_filter(name, c, list(combo), dict(zip(kwargs, kcombo, strict=True)))
                        out.append(
                            _plain(env.call_filter(name, c, list(combo), dict(zip(kwargs, kcombo, strict=True))))
                        )
                        if len(out) > _COMBOS:
                            return None
        except Exception:
            return None
        return _V(tuple(out))


# --------------------------------------------------------------------------------------------
# Jinja: parsing environment, the generation tag, escapes in literals
# --------------------------------------------------------------------------------------------

_INSTALL_HINT = "pip install 'gguf-schema[audit]'"


def _require_jinja() -> Any:
    try:
        import jinja2
    except ImportError as e:
        raise ImportError(f"auditing chat templates needs Jinja2, which is not installed: {_INSTALL_HINT}") from e
    return jinja2


_cache: dict[str, Any] = {}


def _generation_extension() -> type:
    """transformers' ``{% generation %}...{% endgeneration %}`` tag, as a no-op that keeps its body."""
    ext = _cache.get("generation")
    if ext is None:
        import jinja2.ext

        class GenerationTag(jinja2.ext.Extension):
            tags = {"generation"}  # noqa: RUF012 - the attribute Jinja reads, declared by its base class

            def parse(self, parser: Any) -> Any:
                next(parser.stream)
                return parser.parse_statements(("name:endgeneration",), drop_needle=True)

        ext = _cache["generation"] = GenerationTag
    return ext


_EXTENSIONS = ("jinja2.ext.loopcontrols", "jinja2.ext.do")


def _parse_environment() -> Any:
    env = _cache.get("parse")
    if env is None:
        jinja2 = _require_jinja()
        env = _cache["parse"] = jinja2.Environment(extensions=[*_EXTENSIONS, _generation_extension()])
    return env


def _fold_environment() -> Any:
    """Where constant filters run while folding: a sandbox, so a folded ``attr`` cannot escape."""
    env = _cache.get("fold")
    if env is None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = _cache["fold"] = ImmutableSandboxedEnvironment()
    return env


_ESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[0-7]{1,3}|.)", re.S)


def _escaped_ascii(raw: str) -> str:
    """The printable ASCII characters a string token writes with escape sequences."""
    out = []
    for m in _ESCAPE_RE.finditer(raw):
        code = m.group(1)
        ch = None
        if code[0] in "xuU":
            ch = chr(int(code[1:], 16))
        elif code[0] == "N":
            try:
                ch = unicodedata.lookup(code[2:-1])
            except KeyError:
                ch = None
        elif code[0] in "01234567":
            ch = chr(int(code, 8))
        if ch is not None and 0x21 <= ord(ch) <= 0x7E:
            out.append(ch)
    return "".join(out)


def _parse(source: str, name: str) -> tuple[Any, list[tuple[int, str]]]:
    """The template's syntax tree and its string tokens ``(line, raw text)``, lexed once."""
    from jinja2.lexer import TokenStream
    from jinja2.parser import Parser

    env = _parse_environment()
    raw = list(env.lexer.tokeniter(source, name))
    parser = Parser(env, source, name)
    parser.stream = TokenStream(env.lexer.wrap(iter(raw), name), name, None)
    strings = [(line, value) for line, token, value in raw if token == "string"]
    # Parser.parse() also binds every node to the environment (for constant folding at compile
    # time), a walk the audit does not need.
    return _nodes().Template(parser.subparse(), lineno=1), strings


# --------------------------------------------------------------------------------------------
# The sandboxed render (a separate process: time, memory and output bounds)
# --------------------------------------------------------------------------------------------

#: Sample conversations rendered when ``render=True``.
_CONVERSATIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "chat",
        {
            "add_generation_prompt": True,
            "messages": [
                {"role": "system", "content": "You are a careful assistant."},
                {"role": "user", "content": "Hello! Wie geht's? 你好"},
                {"role": "assistant", "content": "Hi, how can I help?"},
                {"role": "user", "content": "Name three primes."},
            ],
        },
    ),
    (
        "no-system",
        {
            "add_generation_prompt": False,
            "messages": [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"},
                {"role": "user", "content": "And 3+3?"},
                {"role": "assistant", "content": "6"},
            ],
        },
    ),
    (
        "tools",
        {
            "add_generation_prompt": True,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Current weather for a city.",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "city": {"type": "string", "description": "City name"},
                                "unit": {"type": "string", "enum": ["c", "f"]},
                            },
                            "required": ["city"],
                        },
                    },
                }
            ],
            "messages": [
                {"role": "system", "content": "Use tools when useful."},
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temp": 21}'},
            ],
        },
    ),
    (
        "thinking",
        {
            "add_generation_prompt": True,
            "enable_thinking": True,
            "messages": [
                {"role": "user", "content": "Is 91 prime?"},
                {
                    "role": "assistant",
                    "reasoning_content": "91 = 7 * 13.",
                    "content": "<think>91 = 7 * 13.</think>No, 91 = 7 * 13.",
                },
                {"role": "user", "content": "And 97?"},
            ],
        },
    ),
)
_COMMON_CONTEXT = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "01 Jan 2025"}


def _render_worker() -> None:  # pragma: no cover - runs in the child process (tests run it through audit_template)
    """Child side of the sandboxed render: read a JSON job on stdin, write one JSON line per render."""
    job = json.loads(sys.stdin.read())
    sys.dont_write_bytecode = True  # with the file-size limit below, writing a .pyc would kill the process
    sys.path[:0] = [p for p in job["path"] if p not in sys.path]
    import datetime
    import traceback

    import jinja2
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:  # from here on: no more memory, CPU, files or processes than the render needs
        import resource

        mem = job["memory"]
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        cpu = max(1, math.ceil(job["timeout"]) + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    except (ImportError, ValueError, OSError):
        pass

    class Sandbox(ImmutableSandboxedEnvironment):
        def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
            raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return datetime.datetime(2025, 1, 1, 12, 0, 0).strftime(fmt)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = Sandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do", _generation_extension()],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def emit(**fields: Any) -> None:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    def template_line(tb: Any) -> int | None:
        line = None
        for frame in traceback.extract_tb(tb):
            if frame.filename == "<template>":
                line = frame.lineno
        return line

    try:
        template = env.from_string(job["source"])
    except Exception as e:
        emit(kind="compile-error", message=f"{type(e).__name__}: {e}")
        return
    for label, context in job["conversations"]:
        size = 0
        try:
            for chunk in template.generate(**context):
                size += len(chunk)
                if size > job["max_output"]:
                    emit(kind="output", conversation=label, message=f"output passed {job['max_output']} characters")
                    break
            else:
                emit(kind="ok", conversation=label, size=size)
        except SecurityError as e:
            emit(kind="security", conversation=label, message=str(e), line=template_line(e.__traceback__))
        except MemoryError:
            emit(kind="memory", conversation=label, message="memory bound exceeded")
        except RecursionError:
            emit(kind="error", conversation=label, message="RecursionError")
        except Exception as e:
            emit(kind="error", conversation=label, message=f"{type(e).__name__}: {str(e)[:200]}")


_WORKER_BOOT = (
    "import importlib.util, sys\n"
    "sys.dont_write_bytecode = True\n"
    "spec = importlib.util.spec_from_file_location('_gguf_template_worker', sys.argv[1])\n"
    "mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "mod._render_worker()\n"
)


def _sandbox_render(
    source: str, lines: list[str], name: str, timeout: float, max_output: int, memory: int
) -> list[TemplateFinding]:
    jinja2 = _require_jinja()
    version = tuple(int(p) for p in re.findall(r"\d+", jinja2.__version__)[:3])

    def finding(rule: str, message: str, line: int | None = None) -> TemplateFinding:
        text = lines[line - 1] if line and 0 < line <= len(lines) else ""
        return TemplateFinding(rule, RULES[rule].severity, message, line, _excerpt(text), None, name)

    if version < (3, 1, 6):
        return [
            finding(
                "GGUF-T503",
                f"sandboxed render skipped: Jinja2 {jinja2.__version__} is older than 3.1.6, "
                "whose sandbox has known escapes (CVE-2024-56326, CVE-2025-27516)",
            )
        ]
    job = json.dumps(
        {
            "source": source,
            "conversations": [[label, {**_COMMON_CONTEXT, **ctx}] for label, ctx in _CONVERSATIONS],
            "timeout": timeout,
            "max_output": max_output,
            "memory": memory,
            "path": sys.path,
        }
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _WORKER_BOOT, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )
    except OSError as e:
        return [finding("GGUF-T503", f"sandboxed render could not start a process: {e}")]
    timed_out = False
    try:
        out, _ = proc.communicate(job, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        timed_out = True
    findings: list[TemplateFinding] = []
    seen: set[str] = set()
    done: set[str] = set()
    for row in out.splitlines():
        try:
            event = json.loads(row)
        except ValueError:
            continue
        kind, label = event.get("kind"), event.get("conversation", "")
        done.add(label)
        if kind == "security" and event["message"] not in seen:
            seen.add(event["message"])
            findings.append(
                finding(
                    "GGUF-T501",
                    f"sandboxed render ({label} conversation) refused: {event['message']}",
                    event.get("line"),
                )
            )
        elif kind in ("output", "memory"):
            findings.append(finding("GGUF-T502", f"sandboxed render ({label} conversation): {event['message']}"))
    if timed_out or (proc.returncode not in (0, None) and len(done) < len(_CONVERSATIONS)):
        why = f"did not finish within {timeout:g} s" if timed_out else f"stopped (exit status {proc.returncode})"
        findings.append(finding("GGUF-T502", f"sandboxed render {why}; the memory bound is {memory >> 20} MiB"))
    return findings


# --------------------------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------------------------


def _lines(source: str) -> list[str]:
    return _NEWLINE_RE.split(source)


def _hidden_findings(source: str, lines: list[str], name: str) -> list[TemplateFinding]:
    found = hidden_characters(source)
    findings: list[TemplateFinding] = []
    groups: list[list[HiddenCharacter]] = []
    for h in found:
        if groups and groups[-1][-1].index + 1 == h.index:
            groups[-1].append(h)
        else:
            groups.append([h])
    for group in groups:
        first = group[0]
        if first.index == 0 and first.kind == "bom" and len(group) == 1:
            findings.append(
                TemplateFinding(
                    "GGUF-T302",
                    "info",
                    "the template starts with a byte order mark (U+FEFF)",
                    1,
                    _excerpt(lines[0], column=1),
                    1,
                    name,
                )
            )
            continue
        kinds = sorted({h.kind for h in group})
        names = list(dict.fromkeys(f"U+{h.codepoint:04X} {h.name}" for h in group))
        what = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        message = (
            f"{len(group)} hidden character{'s' if len(group) > 1 else ''} ({'/'.join(kinds)}): {what}"
            if len(group) > 1
            else f"hidden character ({first.kind}): {what}"
        )
        tags = "".join(chr(h.codepoint - 0xE0000) for h in group if 0xE0020 <= h.codepoint <= 0xE007E)
        if tags:
            message += f"; the tag characters spell {tags[:60]!r}"
        findings.append(
            TemplateFinding(
                "GGUF-T301",
                "warning",
                message,
                first.line,
                _excerpt(lines[first.line - 1], column=first.column),
                first.column,
                name,
            )
        )
    return findings


_MAX_PER_RULE = 100


def _capped(findings: list[TemplateFinding], name: str) -> list[TemplateFinding]:
    """The findings in rule order, then line order: at most ``_MAX_PER_RULE`` of a rule, then one counting the rest."""
    order = {r.id: i for i, r in enumerate(_RULE_LIST)}
    findings = sorted(findings, key=lambda f: (order[f.rule], f.line if f.line is not None else math.inf))
    total: dict[str, int] = {}
    for f in findings:
        total[f.rule] = total.get(f.rule, 0) + 1
    kept: list[TemplateFinding] = []
    seen: dict[str, int] = {}
    for f in findings:
        seen[f.rule] = seen.get(f.rule, 0) + 1
        if seen[f.rule] <= _MAX_PER_RULE:
            kept.append(f)
        if seen[f.rule] == total[f.rule] > _MAX_PER_RULE:
            kept.append(
                TemplateFinding(
                    f.rule,
                    f.severity,
                    f"{total[f.rule] - _MAX_PER_RULE} more findings of this "
                    f"rule are not listed ({total[f.rule]} in all)",
                    None,
                    "",
                    None,
                    name,
                )
            )
    return kept


@functools.lru_cache(maxsize=64)
def _static_findings(source: str, name: str) -> tuple[TemplateFinding, ...]:
    """Everything but the render (cached: a directory of models often repeats one template)."""
    jinja2 = _require_jinja()
    lines = _lines(source)
    findings = _hidden_findings(source, lines, name)

    try:
        tree, strings = _parse(source, name)
    except jinja2.TemplateSyntaxError as e:
        line = e.lineno if e.lineno else None
        text = lines[line - 1] if line and 0 < line <= len(lines) else ""
        findings.append(
            TemplateFinding(
                "GGUF-T401",
                "warning",
                f"Jinja cannot parse the template: {e.message}",
                line,
                _excerpt(text),
                None,
                name,
            )
        )
        for i, text in enumerate(lines, 1):  # still name what a text search can see
            for w in dict.fromkeys(_alarm_words(text)):
                findings.append(
                    TemplateFinding(
                        "GGUF-T104",
                        "warning",
                        f"the unparsed source spells {w!r}, a Python internal or command runner",
                        i,
                        _excerpt(text, w),
                        None,
                        name,
                    )
                )
        return tuple(_capped(findings, name))
    except RecursionError:
        findings.append(
            TemplateFinding(
                "GGUF-T402", "error", "the template nests too deeply for Jinja's parser", None, "", None, name
            )
        )
        return tuple(_capped(findings, name))

    for line, raw in strings:
        hidden = _escaped_ascii(raw)
        if hidden:
            text = lines[line - 1] if 0 < line <= len(lines) else ""
            findings.append(
                TemplateFinding(
                    "GGUF-T105",
                    "warning",
                    f"string literal writes {hidden[:40]!r} with escape sequences",
                    line,
                    _excerpt(text, "\\"),
                    None,
                    name,
                )
            )

    analysis = _Analysis(_nodes(), lines, name)
    try:
        findings.extend(analysis.run(tree))
    except RecursionError:
        findings.append(
            TemplateFinding(
                "GGUF-T402",
                "error",
                "the template nests too deeply for the audit to follow; nothing is known about what it reaches",
                None,
                "",
                None,
                name,
            )
        )
    return tuple(_capped(findings, name))


def audit_template(
    source: str,
    *,
    name: str = "tokenizer.chat_template",
    render: bool = False,
    render_timeout: float = 5.0,
    render_max_output: int = 1 << 20,
    render_memory: int = 1 << 30,
) -> list[TemplateFinding]:
    """Audit one chat template (Jinja source) for ways to reach Python internals, without running it.

    Args:
        source: the template text (e.g. ``metadata["tokenizer.chat_template"]``).
        name: the metadata key it came from; copied into each finding.
        render: also render a few sample conversations (system/user/assistant, tool calls, a
            thinking block) in Jinja's ``ImmutableSandboxedEnvironment`` with the helpers
            runtimes provide, in a child process bounded by ``render_timeout`` seconds,
            ``render_memory`` bytes of address space and ``render_max_output`` characters of
            output; the sandbox's refusals are reported (``GGUF-T501``). Errors such as missing
            variables are not findings. This adds a child process: a few tenths of a second.

    Returns:
        The findings in rule order, then line order (at most 100 of one rule, then one finding
        that counts the rest); empty for a clean template.

    Raises:
        ImportError: Jinja2 is not installed (``pip install 'gguf-schema[audit]'``).
        TypeError: ``source`` is not a str.

    >>> [f.rule for f in audit_template("{% set n = '__cla' ~ 'ss__' %}{{ messages[n] }}")]
    ['GGUF-T101']
    >>> [f.rule for f in audit_template("{{ x[(lipsum|string)[18] * 2 ~ 'class' ~ (lipsum|string)[18] * 2] }}")]
    ['GGUF-T102']
    >>> [(f.rule, f.line) for f in audit_template("{% if x %}\\n{{ y }\\n")]
    [('GGUF-T401', 2)]
    """
    if isinstance(source, (bytes, bytearray)):
        raise TypeError("audit_template needs the template as str; decode the bytes as UTF-8 first")
    if not isinstance(source, str):
        raise TypeError(f"audit_template needs the template as str, not {type(source).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    _require_jinja()
    findings = list(_static_findings(source, name))
    if render:
        findings = _capped(
            findings + _sandbox_render(source, _lines(source), name, render_timeout, render_max_output, render_memory),
            name,
        )
    return findings


def _nodes() -> Any:
    from jinja2 import nodes

    return nodes
