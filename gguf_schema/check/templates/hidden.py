"""Hidden characters: invisible and direction-changing Unicode in a template or a token, and how a line is shown.

:func:`hidden_characters` lists every such character of a (short) text. The template audit uses
:func:`hidden_runs`, which reads the text once with a compiled pattern and reports runs of
adjacent hidden characters, so a template of five million zero-width spaces costs one scan and one
finding, not five million objects. :func:`excerpt` is how every finding shows its line: short,
with hidden characters written as ``<U+XXXX>``.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .rules import Findings, rule

__all__ = ["HiddenCharacter", "excerpt", "hidden_characters", "hidden_runs", "report_hidden"]

T301 = rule(
    "GGUF-T301",
    "warning",
    "hidden-character",
    "Invisible or direction-changing Unicode (zero-width characters, bidi controls, a BOM inside the text, tag "
    "characters, variation selectors outside emoji, control characters, fillers): what a reviewer reads differs "
    "from what runs.",
)
T302 = rule(
    "GGUF-T302",
    "info",
    "leading-bom",
    "The template starts with a byte order mark (U+FEFF), which runtimes print as text.",
)


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
_RUN_RE = re.compile(_char_class(_HIDDEN_RANGES) + "+")
_TAG_RE = re.compile("[\U000e0020-\U000e007e]")
_NEWLINE_RE = re.compile(r"\r\n|\r|\n")
#: the characters that can be harmless in context (emoji presentation, joiners)
_CONTEXTUAL = frozenset("\ufe0e\ufe0f\u200c\u200d")


def _kind_of(cp: int) -> str:
    for lo, hi, kind in _HIDDEN_RANGES:
        if lo <= cp <= hi:
            return kind
    return "format"  # pragma: no cover - the pattern only matches the ranges above


def _is_emoji_like(ch: str) -> bool:
    return ord(ch) > 0x7F and unicodedata.category(ch) in ("So", "Sk", "Sm")


def _is_joining_letter(ch: str) -> bool:
    """A letter or mark of a script that uses ZWJ/ZWNJ in ordinary text (Arabic, Indic...)."""
    return ord(ch) >= 0x0590 and unicodedata.category(ch)[0] in "LM"


def _benign_in_context(text: str, i: int) -> bool:
    ch = text[i]
    if ch not in _CONTEXTUAL:
        return False
    cp = ord(ch)
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
    return bool(prev) and bool(nxt) and _is_joining_letter(prev) and _is_joining_letter(nxt)


def _spans(text: str) -> Iterator[tuple[int, int]]:
    """Maximal runs ``(start, end)`` of hidden characters that are not harmless in their context.

    Inside a run, a character's neighbours are hidden characters themselves, so only the first
    two and the last character of a run can be harmless (an emoji's presentation selector and the
    joiner after it); the rest of a run is decided without looking at it.
    """
    for m in _RUN_RE.finditer(text):
        start, end = m.span()
        if end - start <= 3:
            benign = [i for i in range(start, end) if _benign_in_context(text, i)]
        else:
            benign = [i for i in (start, start + 1, end - 1) if _benign_in_context(text, i)]
        if not benign:
            yield start, end
            continue
        at = start
        for i in benign:
            if at < i:
                yield at, i
            at = i + 1
        if at < end:
            yield at, end


class _Lines:
    """Line and column of a position, as Jinja counts lines (``\\r\\n``, ``\\r`` or ``\\n``)."""

    def __init__(self, text: str):
        self.starts = [0] + [n.end() for n in _NEWLINE_RE.finditer(text)]

    def at(self, i: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, i)
        return line, i - self.starts[line - 1] + 1


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
    lines: _Lines | None = None
    for start, end in _spans(text):
        if lines is None:
            lines = _Lines(text)
        for i in range(start, end):
            cp = ord(text[i])
            line, column = lines.at(i)
            found.append(HiddenCharacter(i, line, column, cp, unicodedata.name(text[i], f"U+{cp:04X}"), _kind_of(cp)))
    return found


@dataclass(frozen=True)
class HiddenRun:
    """Adjacent hidden characters: where they start, how many, which kinds and names (the first three)."""

    index: int
    line: int
    column: int
    length: int
    kinds: tuple[str, ...]
    names: tuple[str, ...]
    distinct: int
    tags: str


def hidden_runs(text: str, limit: int | None = None) -> Iterator[HiddenRun]:
    """The runs of adjacent hidden characters of ``text`` (at most ``limit``), each described in one object."""
    lines: _Lines | None = None
    for n, (start, end) in enumerate(_spans(text)):
        if limit is not None and n >= limit:
            return
        if lines is None:
            lines = _Lines(text)
        span = text[start:end]
        distinct = list(dict.fromkeys(span))
        line, column = lines.at(start)
        yield HiddenRun(
            start,
            line,
            column,
            end - start,
            tuple(sorted({_kind_of(ord(c)) for c in distinct})),
            tuple(f"U+{ord(c):04X} {unicodedata.name(c, f'U+{ord(c):04X}')}" for c in distinct[:3]),
            len(distinct),
            "".join(chr(ord(c) - 0xE0000) for c in _TAG_RE.findall(span, 0, 4 * 60)[:60]),
        )


def count_runs(text: str, skip: int, limit: int) -> int:
    """How many runs follow the first ``skip`` (counting at most ``limit``)."""
    n = 0
    for n, _ in enumerate(_spans(text), 1):
        if n >= skip + limit:
            break
    return max(0, n - skip)


def report_hidden(text: str, lines: list[str], findings: Findings, cap: int) -> None:
    """Findings for the hidden characters of a template: one per run (``GGUF-T301``), a leading BOM (``GGUF-T302``)."""
    for run in hidden_runs(text, cap + 1):
        if run.index == 0 and run.length == 1 and run.kinds == ("bom",):
            findings.add(T302, "the template starts with a byte order mark (U+FEFF)", 1, column=1)
            continue
        what = ", ".join(run.names) + (f" and {run.distinct - 3} more" if run.distinct > 3 else "")
        if run.length > 1:
            message = f"{run.length} hidden characters ({'/'.join(run.kinds)}): {what}"
        else:
            message = f"hidden character ({run.kinds[0]}): {what}"
        if run.tags:
            message += f"; the tag characters spell {run.tags!r}"
        findings.add(T301, message, run.line, column=run.column)


def visible(text: str) -> str:
    """``text`` with hidden characters and line ends written as ``<U+XXXX>`` / ``\\n``."""
    out = []
    for ch in text:
        if ch in "\r\n\t":
            out.append({"\r": "\\r", "\n": "\\n", "\t": " "}[ch])
        elif _HIDDEN_RE.match(ch) or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn", "Cs"):
            out.append(f"<U+{ord(ch):04X}>")
        else:
            out.append(ch)
    return "".join(out)


_EXCERPT = 120


def excerpt(line_text: str, needle: str | None = None, column: int | None = None) -> str:
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
    shown = visible(text)
    if len(shown) > _EXCERPT:  # hidden characters widen the text: cut again
        shown = shown[: _EXCERPT - 1] + "…"
    return shown


def split_lines(source: str) -> list[str]:
    """The template's lines, as Jinja counts them."""
    return _NEWLINE_RE.split(source)
