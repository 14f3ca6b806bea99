"""Constant folding, bounded: computing what Jinja would compute on constants, without letting a template make the
audit allocate or loop.

Every fold checks its inputs and its output's size first (:func:`plain`): strings and containers
of at most a few thousand items, numbers of a few thousand bits, format widths and repeat counts
of at most a few thousand. What cannot be folded within those limits raises :class:`Unfoldable`,
and the interpreter then treats the value as unknown (top), never as safe.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import string
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["FOLD_FILTERS", "Unfoldable", "fold_binop", "fold_filter", "fold_method", "format_fields", "plain"]

TEXT_LIMIT = 4096  # longest string (or container) folded
NUM_LIMIT = 4096  # largest width, count or repeat used while folding
FIELDS = 64  # replacement fields of a format string folded


class Unfoldable(Exception):
    """The operation on these constants is not folded (too large, or not an operation the audit runs)."""


def _size_ok(x: Any, budget: list[int]) -> bool:
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if isinstance(x, (str, bytes)):
        budget[0] -= len(x) // 8
        return len(x) <= TEXT_LIMIT and budget[0] >= 0
    if isinstance(x, bool) or x is None or isinstance(x, float):
        return True
    if isinstance(x, int):
        return x.bit_length() <= 4 * NUM_LIMIT
    if isinstance(x, (list, tuple)):
        return len(x) <= TEXT_LIMIT and all(_size_ok(i, budget) for i in x)
    if isinstance(x, dict):
        return len(x) <= TEXT_LIMIT and all(_size_ok(k, budget) and _size_ok(i, budget) for k, i in x.items())
    return False


def plain(x: Any) -> Any:
    """``x`` as plain data (str, bytes, numbers, None, lists, tuples, dicts) within the size limits."""
    if isinstance(x, str) and type(x) is not str:
        x = str(x)  # Markup
    if isinstance(x, (range, type({}.keys()), type({}.values()), type({}.items()))) or (
        hasattr(x, "__next__") and not isinstance(x, (str, list, tuple, dict))
    ):
        x = list(itertools.islice(x, TEXT_LIMIT + 1))
    if isinstance(x, list):
        x = [plain(i) for i in x]
    if not _size_ok(x, [4 * TEXT_LIMIT]):
        raise Unfoldable
    return x


def _small_int(x: Any) -> bool:
    return isinstance(x, bool) or (isinstance(x, int) and abs(x) <= NUM_LIMIT)


def check_args(values: Iterable[Any]) -> None:
    for a in values:
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > NUM_LIMIT:
            raise Unfoldable
        if isinstance(a, float) and (math.isnan(a) or abs(a) > NUM_LIMIT):
            raise Unfoldable
        if not _size_ok(a, [4 * TEXT_LIMIT]):
            raise Unfoldable


_PRINTF_RE = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def _check_printf(fmt: str) -> None:
    """Refuse to fold a %-format whose output could be large (computed widths, wide or many fields)."""
    fields = _PRINTF_RE.findall(fmt)
    if len(fields) > FIELDS:
        raise Unfoldable
    for width, precision, _conv in fields:
        for g in (width, precision):
            if g == "*" or (g and int(g) > NUM_LIMIT):
                raise Unfoldable


def format_fields(fmt: str) -> list[tuple[str, str]]:
    """``(field_name, format_spec)`` of every replacement field of a str.format string (nested too).

    Raises ValueError for a malformed format string (as str.format would).
    """
    out = []
    for _lit, field, spec, _conv in string.Formatter().parse(fmt):
        if field is not None:
            out.append((field, spec or ""))
            if spec and "{" in spec:
                out.extend(format_fields(spec))
    return out


def _check_format(fmt: str) -> None:
    try:
        fields = format_fields(fmt)
    except ValueError:
        raise Unfoldable from None
    if len(fields) > FIELDS:
        raise Unfoldable
    for field, spec in fields:
        if "." in field or "[" in field or "{" in spec:
            raise Unfoldable
        for digits in re.findall(r"\d+", spec):
            if int(digits) > NUM_LIMIT:
                raise Unfoldable


def fold_binop(op: str, a: Any, b: Any) -> Any:
    """``a op b`` on constants, as Jinja computes it, refusing anything large."""
    check_args((a, b))
    r: Any
    if op == "~":
        r = f"{a}{b}"
    elif op == "+":
        if isinstance(a, str) != isinstance(b, str):
            raise Unfoldable
        r = a + b
    elif op == "*":
        for x, y in ((a, b), (b, a)):
            if isinstance(x, (str, list, tuple)) and _small_int(y) and len(x) * max(y, 0) > TEXT_LIMIT:
                raise Unfoldable
        r = a * b
    elif op == "%":
        if isinstance(a, str):
            _check_printf(a)
        r = a % b
    elif op == "**":
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or abs(b) > 64 or abs(a) > 2**32:
            raise Unfoldable
        r = a**b
    elif op in ("-", "/", "//"):
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            raise Unfoldable
        r = a - b if op == "-" else a / b if op == "/" else a // b
    else:  # pragma: no cover - every operator is listed above
        raise Unfoldable
    return plain(r)


STR_METHODS = frozenset(
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
        "isascii",
        "center",
        "ljust",
        "rjust",
        "zfill",
        "format",
        "encode",
        "expandtabs",
    }
)
DICT_METHODS = frozenset({"get", "keys", "values", "items", "copy"})
SEQ_METHODS = frozenset({"index", "count", "copy"})
INT_METHODS = frozenset({"to_bytes", "bit_length", "conjugate", "as_integer_ratio", "is_integer", "hex"})
BYTES_METHODS = frozenset({"decode", "upper", "lower", "replace", "strip", "hex"})


def _check_replace(text: Any, args: Sequence[Any]) -> None:
    if len(args) >= 2 and isinstance(text, str) and isinstance(args[0], str) and isinstance(args[1], str):
        n = text.count(args[0]) if args[0] else len(text) + 1
        if len(text) + n * len(args[1]) > TEXT_LIMIT:
            raise Unfoldable


def _check_join(sep: Any, items: Any) -> None:
    if isinstance(items, (list, tuple, str)):
        size = len(str(sep)) * len(items) + sum(len(str(i)) for i in items)
        if size > 4 * TEXT_LIMIT:
            raise Unfoldable


def fold_method(recv: Any, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``recv.name(*args, **kwargs)`` on constants, for the methods of plain types listed here only."""
    check_args([*args, *kwargs.values()])  # the receiver may be a large number (its bytes are a name)
    if not _size_ok(recv, [4 * TEXT_LIMIT]):
        raise Unfoldable
    if isinstance(recv, str):
        if name not in STR_METHODS:
            raise Unfoldable
        if name == "format":
            _check_format(recv)
        if name == "replace":
            _check_replace(recv, args)
        if name == "join":
            _check_join(recv, args[0] if args else ())
        if name == "expandtabs" and any(isinstance(a, int) and a > 64 for a in [*args, *kwargs.values()]):
            raise Unfoldable
    elif isinstance(recv, dict):
        if name not in DICT_METHODS:
            raise Unfoldable
    elif isinstance(recv, (list, tuple)):
        if name not in SEQ_METHODS:
            raise Unfoldable
    elif isinstance(recv, bytes):
        if name not in BYTES_METHODS:
            raise Unfoldable
    elif isinstance(recv, (int, float)):
        if name not in INT_METHODS or (name == "to_bytes" and any(isinstance(a, int) and a > 256 for a in args)):
            raise Unfoldable
    else:
        raise Unfoldable
    try:
        return plain(getattr(recv, name)(*args, **kwargs))
    except Unfoldable:
        raise
    except Exception:
        raise Unfoldable from None


def _check_filter(name: str, value: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Refuse to fold a filter call whose output could be large."""
    if name == "format" and isinstance(value, str):
        _check_printf(value)
    elif name == "replace":
        _check_replace(value, args)
    elif name == "join":
        _check_join(args[0] if args else kwargs.get("d", ""), value)
    elif name in ("center", "indent", "wordwrap", "truncate", "batch", "slice") and any(
        isinstance(a, (int, str)) and not isinstance(a, bool) and (a > 256 if isinstance(a, int) else len(a) > 256)
        for a in [*args, *kwargs.values()]
    ):
        raise Unfoldable


#: filters folded on constants (run in an immutable sandbox, within the limits above)
FOLD_FILTERS = frozenset(
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
        "batch",
        "slice",
        "dictsort",
        "items",
        "tojson",
        "urlencode",
        "filesizeformat",
        "select",
        "reject",
        "bool",
    }
)


def fold_filter(env: Any, name: str, value: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``value | name(*args, **kwargs)`` on constants, run by Jinja's own filter in ``env``."""
    check_args([value, *args, *kwargs.values()])
    _check_filter(name, value, args, kwargs)
    try:
        if name == "tojson":  # as runtimes define it (json.dumps), not Jinja's HTML-safe variant
            return plain(json.dumps(value, ensure_ascii=False, **kwargs))
        return plain(env.call_filter(name, value, args, kwargs))
    except Unfoldable:
        raise
    except Exception:
        raise Unfoldable from None
