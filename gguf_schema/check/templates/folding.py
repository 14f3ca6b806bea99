"""Constant folding, exact and bounded: computing what Jinja would compute on constants, under every configuration a
loader renders with, without letting a template make the audit allocate or loop.

Exact: a fold runs the real operation (Python's operators and methods on the constants, with
their types: a ``Markup`` stays ``Markup`` and escapes what is added to it; Jinja's own filters)
once per configuration a loader uses (:data:`CONFIGS`: autoescape off and on; plain jinja2's
``tojson``, which sorts keys and escapes HTML, and transformers', which does neither), and the
result is every outcome. Bounded: every fold checks its inputs and its output's size first
(:func:`plain`): strings and containers of at most a few thousand items, numbers of a few
thousand bits, format widths and repeat counts of at most a few thousand. What cannot be folded
within those limits raises :class:`Unfoldable`, and the interpreter then treats the value as
unknown text or anything, never as safe.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import string
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "CONFIGS",
    "FOLD_FILTERS",
    "Unfoldable",
    "fold_binop",
    "fold_concat",
    "fold_filter",
    "fold_method",
    "format_fields",
    "plain",
]

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
    """``x`` as plain data (str or Markup, bytes, numbers, None, lists, tuples, dicts) within the size limits."""
    if isinstance(x, str) and type(x) is not str and type(x).__name__ != "Markup":
        x = str(x)
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


#: filters folded on constants (scalars in, run by Jinja's own filter functions, within the limits above)
FOLD_FILTERS = frozenset(
    {
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
        "truncate",
        "indent",
        "wordwrap",
        "safe",
        "striptags",
        "batch",
        "slice",
        "tojson",
        "urlencode",
        "filesizeformat",
    }
)

#: The configurations a fold runs under, as (autoescape, tojson): a loader renders with one of them.
CONFIGS = ((False, "jinja"), (True, "jinja"), (False, "transformers"), (True, "transformers"))
_ENVS: dict[tuple[bool, str], Any] = {}


def _transformers_tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _environment(config: tuple[bool, str]) -> Any:
    env = _ENVS.get(config)
    if env is None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(autoescape=config[0])
        if config[1] == "transformers":
            env.filters["tojson"] = _transformers_tojson
        _ENVS[config] = env
    return env


def fold_filter(name: str, value: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    """``value | name(*args, **kwargs)`` on constants: its result under every configuration (:data:`CONFIGS`)."""
    if name not in FOLD_FILTERS:
        raise Unfoldable
    check_args([value, *args, *kwargs.values()])
    _check_filter(name, value, args, kwargs)
    from jinja2.nodes import EvalContext

    out: list[Any] = []
    for config in CONFIGS:
        if config[1] == "transformers" and name != "tojson":
            continue  # the two tojson variants differ in that filter only
        env = _environment(config)
        try:
            r = plain(env.call_filter(name, value, args, kwargs, eval_ctx=EvalContext(env)))
        except Unfoldable:
            raise
        except Exception:
            continue  # fails at render time in this configuration: no value
        if not any(type(r) is type(o) and r == o for o in out):
            out.append(r)
    return out


def fold_concat(parts: Sequence[Any]) -> list[Any]:
    """``a ~ b ~ ...`` on constants: str_join without autoescape, markup_join with it (Markup escapes the rest)."""
    check_args(parts)
    if sum(len(str(p)) for p in parts) > TEXT_LIMIT:
        raise Unfoldable
    from jinja2.runtime import markup_join, str_join

    out: list[Any] = []
    for join_ in (str_join, markup_join):
        r = plain(join_(parts))
        if not any(type(r) is type(o) and r == o for o in out):
            out.append(r)
    return out
