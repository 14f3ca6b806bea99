"""``llama-quantize``'s regular expressions (``--tensor-type``) as Python's ``re``, exactly, or refused.

``llama-quantize`` compiles each ``--tensor-type`` expression with C++'s ``std::regex`` (the
ECMAScript grammar, its default) and searches tensor names with ``std::regex_search``, byte by
byte (a ``std::string``, the "C" locale). Python's ``re`` reads many expressions the same way,
and some differently without a word: ``[[:digit:]]`` is a character class (digits) in ECMAScript
and, to Python, the set ``[:digt`` followed by ``]``; ``$`` in Python also matches before a final
newline; ``\\A`` is a literal ``A`` to libstdc++ and the start of the string to Python. So an
expression is translated here, construct by construct, into a Python expression over bytes with
the same meaning, and anything outside the subset below is refused with a ``ValueError`` naming
it, never matched differently:

* ordinary characters (any byte, UTF-8 included), ``.`` (any byte but ``\\n`` and ``\\r``), ``^``
  and ``$`` (the start and end of the name only), ``|``, groups ``( )``, ``(?: )``, lookaheads
  ``(?= )`` and ``(?! )``;
* quantifiers ``* + ? {n} {n,} {n,m}``, each optionally lazy (``?`` after it);
* escapes ``\\d \\D \\s \\S \\w \\W \\b \\B`` (ASCII classes, as in the "C" locale), ``\\f \\n \\r \\t
  \\v``, ``\\0``, ``\\xHH``, and a backslash before any punctuation (that character);
* bracket expressions ``[...]`` and ``[^...]`` of characters, ranges, the escapes above and the
  POSIX classes ``[:alnum:]``, ``[:alpha:]``, ``[:blank:]``, ``[:cntrl:]``, ``[:digit:]``,
  ``[:graph:]``, ``[:lower:]``, ``[:print:]``, ``[:punct:]``, ``[:space:]``, ``[:upper:]``,
  ``[:xdigit:]``, ``[:d:]``, ``[:s:]``, ``[:w:]`` (the "C" locale's sets).

Refused: ``^``, ``\\b`` and ``\\B`` inside a lookahead (libstdc++ sees no character before the
lookahead's start: ``a(?=^b)`` matches ``ab`` there), back-references (ECMAScript lets one to a group that did not take part match the empty
string, Python fails it), ``[=x=]`` and ``[.x.]``, a ``]`` first in a bracket (ECMAScript's empty
class, Python's literal), ``{`` other than a quantifier, a quantifier after a quantifier (Python's
possessive ``*+``), ``\\cX``, ``\\uHHHH``, an escaped letter or digit not listed, a ``]`` or ``}``
outside a bracket, and Python's own syntax (``(?P<``, ``(?<=``, ``(?i)`` ...), which ECMAScript
rejects.

>>> rx = compile_ecmascript(r"blk\\.[[:digit:]]+\\.ffn_down$")
>>> bool(rx.search(b"blk.12.ffn_down")), bool(rx.search(b"blk.x.ffn_down")), bool(rx.search(b"blk.1.ffn_down\\n"))
(True, False, False)
>>> compile_ecmascript(r"(a)\\1")
Traceback (most recent call last):
ValueError: '(a)\\\\1' is not a regular expression matched as llama-quantize matches it (at 3): a back-reference (\\1): llama-quantize's ECMAScript engine and Python's re do not always agree on them; write the expression without one
"""

from __future__ import annotations

import re

from ..errors import GGUFInternalError

__all__ = ["POSIX_CLASSES", "compile_ecmascript", "translate"]

_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

POSIX_CLASSES: dict[str, str] = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "d": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": "".join("\\" + c for c in _PUNCT),
    "space": " \\t\\n\\v\\f\\r",
    "s": " \\t\\n\\v\\f\\r",
    "upper": "A-Z",
    "w": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
"""The POSIX classes of a bracket expression, as Python set items (the "C" locale's sets)."""

_IN_LOOKAHEAD = (
    "{} in a lookahead: libstdc++ reads the lookahead's start as the start of the name there (no character "
    "before it), which Python cannot repeat"
)
_CONTROL = {"f": "\\f", "n": "\\n", "r": "\\r", "t": "\\t", "v": "\\v"}
_CLASSES = "dDsSwW"


def compile_ecmascript(pattern: str) -> re.Pattern[bytes]:
    """``pattern`` (as ``llama-quantize`` compiles it) as a Python expression to search names
    encoded in UTF-8 (``name.encode("utf-8", "surrogateescape")``). Raises ``ValueError`` for
    an expression outside the subset both read the same way (see the module docstring), or one
    neither accepts."""
    translated = translate(pattern)
    try:
        return re.compile(translated.encode("utf-8", "surrogateescape"))
    except re.error as e:
        raise ValueError(f"{pattern!r} is not a regular expression: {e}") from None


def translate(pattern: str) -> str:
    """The Python expression (over bytes, as text) that means what ``pattern`` means to
    ``std::regex`` (ECMAScript); ``ValueError`` where that cannot be said exactly.

    >>> translate("attn_v$"), translate("blk\\\\.[[:digit:]]\\\\."), translate("a.b")
    ('attn_v\\\\Z', 'blk\\\\.[0-9]\\\\.', 'a[^\\\\n\\\\r]b')
    """
    return _Translator(pattern).run()


class _Translator:
    def __init__(self, pattern: str):
        self.p = pattern
        self.i = 0
        self.out: list[str] = []

    def refuse(self, what: str, at: int | None = None) -> ValueError:
        where = self.i if at is None else at
        return ValueError(
            f"{self.p!r} is not a regular expression matched as llama-quantize matches it (at {where}): {what}"
        )

    def run(self) -> str:
        p = self.p
        atom = False  # whether the last item can take a quantifier
        quantified = False
        groups: list[bool] = []  # per open group: whether it is a lookahead
        while self.i < len(p):
            c = p[self.i]
            start = self.i
            if c in "*+?{":
                if c == "{" and not re.match(r"\{\d+(,\d*)?\}", p[self.i :]):
                    raise self.refuse("a '{' that is not a quantifier {n}, {n,} or {n,m} (escape it: \\{)")
                if quantified:
                    raise self.refuse(
                        "a quantifier after a quantifier (Python reads it as possessive, ECMAScript refuses it)"
                    )
                if not atom:
                    raise self.refuse(f"nothing to repeat before {c!r}")
                if c == "{":
                    m = re.match(r"\{(\d+)(,(\d*))?\}", p[self.i :])
                    if m is None:  # the quantifier was matched just above
                        raise GGUFInternalError(f"the quantifier at {self.i} matched above does not match again")
                    lo, hi = int(m.group(1)), m.group(3)
                    if hi and int(hi) < lo:
                        raise self.refuse(f"{m.group(0)}: the maximum is smaller than the minimum")
                    self.out.append(m.group(0))
                    self.i += len(m.group(0))
                else:
                    self.out.append(c)
                    self.i += 1
                if self.i < len(p) and p[self.i] == "?":
                    self.out.append("?")
                    self.i += 1
                quantified, atom = True, False
                continue
            quantified = False
            atom = True
            if c == ".":
                self.out.append("[^\\n\\r]")
                self.i += 1
            elif c == "^":
                if any(groups):
                    raise self.refuse(_IN_LOOKAHEAD.format("^"))
                self.out.append("^")
                atom = False
                self.i += 1
            elif c == "$":
                self.out.append("\\Z")
                atom = False
                self.i += 1
            elif c == "|":
                self.out.append("|")
                atom = False
                self.i += 1
            elif c == "(":
                lookahead = p.startswith("(?=", self.i) or p.startswith("(?!", self.i)
                if lookahead or p.startswith("(?:", self.i):
                    self.out.append(p[self.i : self.i + 3])
                    self.i += 3
                elif p.startswith("(?", self.i):
                    raise self.refuse(
                        f"{p[self.i : self.i + 3]!r}: ECMAScript's groups are (...), (?:...), (?=...) and (?!...)"
                    )
                else:
                    self.out.append("(")
                    self.i += 1
                groups.append(lookahead)
                atom = False
            elif c == ")":
                if not groups:
                    raise self.refuse("a ')' without its '('")
                atom = not groups.pop()  # a lookahead takes no quantifier
                self.out.append(")")
                self.i += 1
            elif c == "[":
                self.bracket()
            elif c in "]}":
                raise self.refuse(f"a {c!r} outside a bracket expression (escape it: \\{c})")
            elif c == "\\":
                if any(groups) and p[start + 1 : start + 2] in ("b", "B"):
                    raise self.refuse(_IN_LOOKAHEAD.format("\\" + p[start + 1]))
                self.out.append(self.escape(in_bracket=False))
                if p[start + 1 : start + 2] in ("b", "B"):
                    atom = False
            else:
                self.out.append(re.escape(c))
                self.i += 1
        if groups:
            raise self.refuse("a '(' without its ')'")
        return "".join(self.out)

    def escape(self, *, in_bracket: bool) -> str:
        """The escape at ``self.i`` (a backslash), as Python reads the same thing."""
        p = self.p
        if self.i + 1 >= len(p):
            raise self.refuse("a '\\' at the end")
        c = p[self.i + 1]
        self.i += 2
        if c in _CLASSES:
            return "\\" + c
        if c in "bB":
            if in_bracket:
                if c == "B":
                    raise self.refuse("\\B in a bracket expression", self.i - 2)
                return "\\x08"
            if c == "B":  # Python's \B never matches in an empty string; ECMAScript's does
                return "(?:(?<=\\w)(?=\\w)|(?<!\\w)(?!\\w))"
            return "\\" + c
        if c in _CONTROL:
            return _CONTROL[c]
        if c == "0":
            if self.i < len(p) and p[self.i].isdigit():
                raise self.refuse("\\0 followed by a digit (Python reads an octal escape)", self.i - 2)
            return "\\x00"
        if c == "x":
            m = re.match(r"[0-9A-Fa-f]{2}", p[self.i :])
            if m is None:
                raise self.refuse("\\x needs two hexadecimal digits", self.i - 2)
            self.i += 2
            return "\\x" + m.group(0)
        if c.isdigit():
            raise self.refuse(
                f"a back-reference (\\{c}): llama-quantize's ECMAScript engine and Python's re do not always "
                "agree on them; write the expression without one",
                self.i - 2,
            )
        if c in _PUNCT:
            return re.escape(c)
        raise self.refuse(
            f"the escape \\{c} (ECMAScript's are \\d \\D \\s \\S \\w \\W \\b \\B \\f \\n \\r \\t \\v \\0 \\xHH and a "
            "backslash before punctuation)",
            self.i - 2,
        )

    def bracket(self) -> None:
        p = self.p
        open_at = self.i
        self.i += 1
        items = ["["]
        if self.i < len(p) and p[self.i] == "^":
            items.append("^")
            self.i += 1
        if self.i < len(p) and p[self.i] == "]":
            raise self.refuse(
                "a ']' first in a bracket expression (ECMAScript reads [] as an empty class, Python as a ']'): "
                "escape it (\\])"
            )
        prev_single = False  # whether the last item is one character (a range may follow)
        while True:
            if self.i >= len(p):
                raise self.refuse("a '[' without its ']'", open_at)
            c = p[self.i]
            if c == "]":
                self.i += 1
                break
            if not c.isascii() and p[self.i + 1 : self.i + 2] == "-" and p[self.i + 2 : self.i + 3] not in ("]", ""):
                raise self.refuse("a range with a character beyond ASCII (std::regex ranges over signed bytes)")
            if c == "[" and p[self.i + 1 : self.i + 2] in (":", ".", "="):
                kind = p[self.i + 1]
                end = p.find(kind + "]", self.i + 2)
                if end < 0:
                    raise self.refuse(f"'[{kind}' without its '{kind}]'")
                name = p[self.i + 2 : end]
                if kind != ":":
                    raise self.refuse(
                        f"[{kind}{name}{kind}]: collating elements and equivalence classes are not supported"
                    )
                if name not in POSIX_CLASSES:
                    raise self.refuse(f"[:{name}:] is not a character class ({', '.join(POSIX_CLASSES)})")
                items.append(POSIX_CLASSES[name])
                self.i = end + 2
                prev_single = False
                continue
            if c == "-" and prev_single and p[self.i + 1 : self.i + 2] not in ("]", ""):
                nxt = p[self.i + 1]
                if nxt == "[":
                    raise self.refuse("a range ending in a bracket item")
                if nxt == "\\":
                    self.i += 1
                    end_item = self.escape(in_bracket=True)
                    if end_item.startswith("\\") and end_item[1:2] in _CLASSES:
                        raise self.refuse("a range ending in a class")
                    items.append("-" + end_item)
                else:
                    if not nxt.isascii():
                        raise self.refuse("a range with a character beyond ASCII (std::regex ranges over signed bytes)")
                    items.append("-" + re.escape(nxt))
                    self.i += 2
                prev_single = False
                continue
            if c == "\\":
                item = self.escape(in_bracket=True)
                items.append(item)
                prev_single = not (item.startswith("\\") and item[1:2] in _CLASSES)
                continue
            if (
                c == "-"
                and not prev_single
                and len(items) > 1 + (items[1:2] == ["^"])
                and p[self.i + 1 : self.i + 2] != "]"
            ):
                raise self.refuse("a range starting at a class")
            items.append(re.escape(c))
            self.i += 1
            prev_single = True
        items.append("]")
        self.out.append("".join(items))
