"""Templates for the oracle, as Hypothesis strategies: random ones over the whole of Jinja, and mutants of known ones.

:func:`templates` draws a random template: statements (output, ``set`` and ``set`` blocks, ``for``
with ``loop`` and ``else`` and ``recursive``, ``if``/``elif``, ``macro`` and ``call`` blocks, ``filter``
blocks, ``with``, ``namespace`` attributes, ``do``, ``break``/``continue``) over expressions (literals,
the request's variables, arithmetic, concatenation, comparisons, ``in``, conditional expressions, slices,
list/tuple/dict literals, every builtin filter with its keyword arguments, every test, every global
(``range``, ``dict``, ``lipsum``, ``cycler``, ``joiner``, ``namespace``), str/list/dict methods). Above
all, names and sizes are COMPUTED: ``x[expr]``, ``|attr(expr)``, ``map(attribute=expr)``,
``selectattr(expr)``, ``sort(attribute=expr)``, ``.get(expr)``, ``map(expr)`` (a filter chosen by
value), ``'fmt'.format(...)`` and ``'%s' % ...``, ``range(expr)``, ``'x' * expr``, ``width=expr``: the
point is to build names and counts in ways nobody listed. The ``random`` filter is left out (a render
would not repeat, and Hypothesis needs it to).

:func:`mutants` draws a real template or a known trick and mutates it: a string literal or a number
replaced by a random expression, a random statement inserted, two templates spliced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "data" / "templates" / "real"

# name material: ordinary names, and the pieces internal names are made of
NAMES = (
    "role",
    "content",
    "name",
    "tool_calls",
    "function",
    "arguments",
    "items",
    "keys",
    "values",
    "get",
    "upper",
    "split",
    "append",
    "pop",
    "update",
    "real",
    "imag",
    "a",
    "b",
    "x",
    "index",
    "length",
    "first",
    "_",
    "__",
    "class",
    "init",
    "globals",
    "mro",
    "base",
    "subclasses",
    "os",
    "popen",
    "environ",
    "builtins",
    "import",
    "gi_frame",
    "f_globals",
    "__class__",
    "__init__",
    "__globals__",
    "__dict__",
)
STRINGS = (
    *NAMES,
    "",
    " ",
    ",",
    "%s",
    "%c",
    "%d",
    "{}",
    "{0}",
    "{0.real}",
    "{x}",
    "{0[0]}",
    "abc",
    "A_B",
    "\n",
    "1",
    "-",
)
VARIABLES = (
    "messages",
    "tools",
    "documents",
    "add_generation_prompt",
    "enable_thinking",
    "bos_token",
    "eos_token",
    "unk_token",
    "undefined_thing",
)
GLOBALS = ("range", "dict", "lipsum", "cycler", "joiner", "namespace", "raise_exception", "strftime_now")
TESTS = (
    "boolean",
    "callable",
    "defined",
    "divisibleby",
    "eq",
    "equalto",
    "escaped",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "gt",
    "greaterthan",
    "in",
    "integer",
    "iterable",
    "le",
    "lower",
    "lt",
    "lessthan",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "sameas",
    "sequence",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
)
FILTER_NAMES = (
    "abs",
    "capitalize",
    "count",
    "e",
    "escape",
    "first",
    "float",
    "forceescape",
    "int",
    "items",
    "last",
    "length",
    "list",
    "lower",
    "pprint",
    "reverse",
    "safe",
    "string",
    "striptags",
    "title",
    "tojson",
    "trim",
    "upper",
    "urlencode",
    "wordcount",
    "xmlattr",
    "filesizeformat",
    "sum",
    "min",
    "max",
    "unique",
    "dictsort",
)
STR_METHODS = (
    "upper",
    "lower",
    "strip",
    "lstrip",
    "rstrip",
    "title",
    "capitalize",
    "split",
    "rsplit",
    "splitlines",
    "replace",
    "startswith",
    "endswith",
    "find",
    "rfind",
    "count",
    "join",
    "format",
    "format_map",
    "center",
    "ljust",
    "rjust",
    "zfill",
    "expandtabs",
    "partition",
    "rpartition",
    "swapcase",
    "casefold",
    "isdigit",
    "isalpha",
    "encode",
    "translate",
    "removeprefix",
    "removesuffix",
    "index",
)
LIST_METHODS = ("append", "extend", "insert", "pop", "index", "count", "copy", "reverse", "sort", "remove", "clear")
DICT_METHODS = ("get", "items", "keys", "values", "pop", "setdefault", "update", "copy", "popitem", "fromkeys")
OTHER_METHODS = ("hex", "bit_length", "to_bytes", "as_integer_ratio", "conjugate", "is_integer", "real")


class _Scope:
    def __init__(self) -> None:
        self.variables: list[str] = list(VARIABLES)
        self.macros: list[tuple[str, int]] = []
        self.in_loop = 0
        self.in_macro = False
        self.namespaces: list[str] = []
        self.n = 0

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def _q(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def _int(draw: Any) -> str:
    return str(draw(st.sampled_from((0, 1, 2, 3, -1, 5, 10, 64, 100, 1000, 10**5, 10**7, 2**31))))


def _name_expr(draw: Any, scope: _Scope, depth: int) -> str:
    """An expression meant to be a NAME (an attribute, a key, a filter or test name): mostly computed."""
    how = draw(st.integers(0, 9))
    if how <= 2 or depth <= 0:
        return _q(draw(st.sampled_from(NAMES)))
    if how == 3:
        return f"({_name_expr(draw, scope, depth - 1)} ~ {_name_expr(draw, scope, depth - 1)})"
    if how == 4:
        return f"({_name_expr(draw, scope, depth - 1)} * {draw(st.sampled_from(('2', '1', '0')))})"
    if how == 5:
        fmt = draw(st.sampled_from(("%s%s", "%c%c", "{}{}", "%s_%s")))
        a = _expr(draw, scope, depth - 1)
        b = _expr(draw, scope, depth - 1)
        return f"({_q(fmt)}|format({a}, {b}))" if "%" in fmt else f"({_q(fmt)}.format({a}, {b}))"
    if how == 6:
        return f"({_expr(draw, scope, depth - 1)}|string)[{_slice(draw, scope, depth - 1)}]"
    if how == 7:
        return f"({_expr(draw, scope, depth - 1)}|{draw(st.sampled_from(('string', 'first', 'last', 'join', 'lower', 'trim', 'tojson')))})"
    if how == 8:
        return _expr(draw, scope, depth - 1)
    return f"([{_name_expr(draw, scope, depth - 1)}, {_name_expr(draw, scope, depth - 1)}]|join({_q(draw(st.sampled_from(('', '_', '__'))))}))"


OBJECTS = (
    "cycler",
    "joiner",
    "namespace",
    "lipsum",
    "range",
    "dict",
    "raise_exception",
    "strftime_now",
    "messages",
    "''",
    "[]",
    "{}",
    "(1).real",
    "bos_token",
    "messages[0]",
    "namespace()",
    "cycler(1)",
    "joiner()",
)


def _size_expr(draw: Any, scope: _Scope, depth: int) -> str:
    """An expression meant to be a COUNT (a range, a repetition, a width): mostly computed integers."""
    how = draw(st.integers(0, 7))
    if how <= 1 or depth <= 0:
        return _int(draw)
    if how == 2:
        return f"({_expr(draw, scope, depth - 1)}|length)"
    if how == 3:
        return f"({_expr(draw, scope, depth - 1)}|int)"
    if how == 4:
        op = draw(st.sampled_from(("+", "*", "**", "-", "//")))
        return f"({_size_expr(draw, scope, depth - 1)} {op} {_size_expr(draw, scope, depth - 1)})"
    if how == 5:
        return draw(
            st.sampled_from(
                ("messages|length", "tools|length", "(messages|tojson|length)", "loop.index" if scope.in_loop else "3")
            )
        )
    if how == 6:
        return f"({_expr(draw, scope, depth - 1)}|wordcount)"
    return f"({_expr(draw, scope, depth - 1)}|count)"


def _reach(draw: Any, scope: _Scope, depth: int) -> str:
    """A lookup of a computed name on a Jinja global, the request or a literal, in one of the ways Jinja has."""
    obj = draw(st.sampled_from(OBJECTS))
    name = _name_expr(draw, scope, depth)
    how = draw(st.integers(0, 9))
    if how <= 2:
        out = f"{obj}[{name}]"
    elif how == 3:
        out = f"({obj}|attr({name}))"
    elif how == 4:
        out = f"([{obj}]|map(attribute={name})|first)"
    elif how == 5:
        out = f"([{obj}]|selectattr({name})|list)"
    elif how == 6:
        out = f"([{obj}, {obj}]|sort(attribute={name})|first)"
    elif how == 7:
        out = f"({obj}.get({name}) if {obj} is mapping else {obj})"
    elif how == 8:
        out = f"'{{0.{draw(st.sampled_from(NAMES))}}}'.format({obj})"
    else:
        out = f"([{obj}]|map({name})|first)"
    if draw(st.booleans()):
        out = f"{out}[{_name_expr(draw, scope, depth)}]"
    return out


def _slice(draw: Any, scope: _Scope, depth: int) -> str:
    parts = [draw(st.sampled_from(("", "0", "1", "2", "-1", "-2", "10"))) for _ in range(3)]
    if draw(st.booleans()) and depth > 0:
        parts[1] = _expr(draw, scope, depth - 1)
    return f"{parts[0]}:{parts[1]}" + (f":{parts[2]}" if parts[2] not in ("", "0") else "")


def _args(draw: Any, scope: _Scope, depth: int, n: int) -> str:
    return ", ".join(_expr(draw, scope, depth - 1) for _ in range(n))


def _filter(draw: Any, scope: _Scope, depth: int) -> str:
    """``name(args)`` of a builtin filter (every one but ``random``), with its keyword arguments."""
    d = depth - 1
    n = lambda: _name_expr(draw, scope, d)  # noqa: E731
    e = lambda: _expr(draw, scope, d)  # noqa: E731
    b = lambda: draw(st.sampled_from(("true", "false")))  # noqa: E731
    i = lambda: _size_expr(draw, scope, d)  # noqa: E731
    options = [
        lambda: draw(st.sampled_from(FILTER_NAMES)),
        lambda: f"attr({n()})",
        lambda: f"batch({i()}, {e()})",
        lambda: f"center({i()})",
        lambda: f"center(width={i()})",
        lambda: f"default({e()}, {b()})",
        lambda: f"d({e()})",
        lambda: f"dictsort(case_sensitive={b()}, by={draw(st.sampled_from(('key', 'value')))!r}, reverse={b()})",
        lambda: f"format({e()}, {e()})",
        lambda: f"groupby({n()})",
        lambda: f"groupby(attribute={n()}, default={e()}, case_sensitive={b()})",
        lambda: f"indent({i()}, first={b()}, blank={b()})",
        lambda: f"indent(width={i()})",
        lambda: f"int(default={e()}, base={draw(st.sampled_from(('10', '16', '2', '0')))})",
        lambda: f"float(default={e()})",
        lambda: f"join({e()})",
        lambda: f"join(attribute={n()})",
        lambda: f"join({e()}, {n()})",
        lambda: f"map({n()})",
        lambda: f"map(attribute={n()}, default={e()})",
        lambda: f"map({_q('attr')}, {n()})",
        lambda: f"map({draw(st.sampled_from(('upper', 'string', 'length', 'first', 'list', 'int', 'tojson')))!r})",
        lambda: f"max(attribute={n()})",
        lambda: f"min(case_sensitive={b()}, attribute={n()})",
        lambda: f"replace({e()}, {e()})",
        lambda: f"replace({e()}, {e()}, {i()})",
        lambda: f"round({i()}, {draw(st.sampled_from(('common', 'floor', 'ceil')))!r})",
        lambda: f"select({n()})",
        lambda: f"select({draw(st.sampled_from(TESTS))!r}, {e()})",
        lambda: f"reject({n()}, {e()})",
        lambda: f"selectattr({n()})",
        lambda: f"selectattr({n()}, {draw(st.sampled_from(TESTS))!r}, {e()})",
        lambda: f"rejectattr({n()}, {n()})",
        lambda: f"slice({i()}, {e()})",
        lambda: f"sort(reverse={b()}, case_sensitive={b()}, attribute={n()})",
        lambda: f"sum(attribute={n()}, start={e()})",
        lambda: f"truncate({i()}, {b()}, {e()}, {i()})",
        lambda: f"unique(case_sensitive={b()}, attribute={n()})",
        lambda: f"wordwrap({i()}, {b()}, {e()}, {b()})",
        lambda: f"wordwrap(width={i()})",
        lambda: f"tojson(indent={i()})",
        lambda: f"urlize({i()})",
        lambda: f"xmlattr({b()})",
        lambda: f"filesizeformat({b()})",
        lambda: "items",
        lambda: "striptags",
        lambda: "pprint",
    ]
    return draw(st.sampled_from(options))()


def _test(draw: Any, scope: _Scope, depth: int) -> str:
    name = draw(st.sampled_from(TESTS))
    if name in (
        "divisibleby",
        "eq",
        "equalto",
        "ge",
        "gt",
        "greaterthan",
        "in",
        "le",
        "lt",
        "lessthan",
        "ne",
        "sameas",
    ):
        return f"{name}({_expr(draw, scope, depth - 1)})"
    return name


def _method(draw: Any, scope: _Scope, depth: int) -> str:
    d = depth - 1
    kind = draw(st.integers(0, 3))
    if kind == 0:
        m = draw(st.sampled_from(STR_METHODS))
    elif kind == 1:
        m = draw(st.sampled_from(LIST_METHODS))
    elif kind == 2:
        m = draw(st.sampled_from(DICT_METHODS))
    else:
        m = draw(st.sampled_from(OTHER_METHODS))
    if m == "get" or m == "pop" or m == "setdefault":
        return f"{m}({_name_expr(draw, scope, d)}" + (f", {_expr(draw, scope, d)})" if draw(st.booleans()) else ")")
    if m in ("format", "format_map"):
        return f"{m}({_args(draw, scope, depth, draw(st.integers(0, 2)))})"
    if m == "update":
        return f"update({{{_name_expr(draw, scope, d)}: {_expr(draw, scope, d)}}})"
    return f"{m}({_args(draw, scope, depth, draw(st.integers(0, 2)))})"


def _atom(draw: Any, scope: _Scope) -> str:
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return _q(draw(st.sampled_from(STRINGS)))
    if kind == 1:
        return _int(draw)
    if kind == 2:
        return draw(st.sampled_from(("true", "false", "none", "1.5", "0.1", "1e3")))
    if kind == 3 and scope.in_loop:
        return draw(
            st.sampled_from(
                (
                    "loop.index",
                    "loop.index0",
                    "loop.length",
                    "loop.first",
                    "loop.last",
                    "loop.revindex",
                    "loop.depth",
                    "loop.previtem",
                    "loop.nextitem",
                )
            )
        )
    if kind == 4:
        return draw(st.sampled_from(GLOBALS))
    return draw(st.sampled_from(scope.variables))


def _expr(draw: Any, scope: _Scope, depth: int) -> str:
    if depth <= 0:
        return _atom(draw, scope)
    d = depth - 1
    e = lambda: _expr(draw, scope, d)  # noqa: E731
    kind = draw(st.integers(0, 24))
    if kind <= 3:
        return _atom(draw, scope)
    if kind == 4:
        if draw(st.booleans()):
            return f"({e()} * {_size_expr(draw, scope, d)})"
        return f"({e()} {draw(st.sampled_from(('~', '+', '-', '*', '/', '//', '%', '**')))} {e()})"
    if kind == 5:
        return f"({e()} {draw(st.sampled_from(('==', '!=', '<', '>', '<=', '>=', 'in', 'not in', 'and', 'or')))} {e()})"
    if kind == 6:
        return f"({e()} if {e()} else {e()})"
    if kind == 7:
        return f"{e()}[{_name_expr(draw, scope, d)}]"
    if kind == 8:
        return f"{e()}[{_slice(draw, scope, d)}]"
    if kind == 9:
        return f"{e()}.{draw(st.sampled_from(NAMES))}"
    if kind in (10, 11, 12):
        return f"({e()}|{_filter(draw, scope, depth)})"
    if kind == 13:
        neg = draw(st.sampled_from(("", "not ")))
        return f"({e()} is {neg}{_test(draw, scope, depth)})"
    if kind == 14:
        return f"{e()}.{_method(draw, scope, depth)}"
    if kind == 15:
        return f"[{_args(draw, scope, depth, draw(st.integers(0, 3)))}]"
    if kind == 16:
        return "{" + ", ".join(f"{_name_expr(draw, scope, d)}: {e()}" for _ in range(draw(st.integers(0, 2)))) + "}"
    if kind == 17:
        g = draw(st.sampled_from(("range", "dict", "lipsum", "cycler", "joiner", "namespace")))
        if g == "range":
            z = lambda: _size_expr(draw, scope, d)  # noqa: E731
            return f"range({z()})" if draw(st.booleans()) else f"range({z()}, {z()}, {z()})"
        if g == "dict":
            return (
                f"dict({draw(st.sampled_from(NAMES)).strip('_') or 'k'}={e()})"
                if draw(st.booleans())
                else f"dict({e()})"
            )
        if g == "lipsum":
            return f"lipsum({draw(st.sampled_from(('1', '2', 'n=1')))}, html={draw(st.sampled_from(('true', 'false')))}, min=1, max=3)"
        if g == "cycler":
            return f"cycler({e()}, {e()})" + draw(st.sampled_from(("", ".next()", ".current", ".reset()")))
        if g == "joiner":
            return f"joiner({e()})" + draw(st.sampled_from(("", "()")))
        return f"namespace({draw(st.sampled_from(('a', 'b', 'x')))}={e()})"
    if kind == 18:
        fmt = draw(st.sampled_from(("%s", "%d", "%c", "%5s", "%-3s|%s", "%(a)s", "%r", "%x")))
        return f"({_q(fmt)} % {e()})"
    if kind == 19:
        fmt = draw(st.sampled_from(("{}", "{0}", "{0.real}", "{x}", "{0!r}", "{0:>5}", "{0[0]}", "{0.__class__}")))
        return f"{_q(fmt)}.format({e()}, x={e()})"
    if kind == 20 and scope.macros:
        name, n = draw(st.sampled_from(scope.macros))
        return f"{name}({_args(draw, scope, depth, n)})"
    if kind == 21:
        if draw(st.booleans()):
            return _reach(draw, scope, d)
        return f"(-{e()})" if draw(st.booleans()) else f"(not {e()})"
    if kind == 22:
        return f"({e()}, {e()})"
    if kind == 23:
        return f"{e()}[{draw(st.sampled_from(('0', '-1', '1', 'true', 'false')))}]"
    if kind == 24 and scope.namespaces:
        return f"{draw(st.sampled_from(scope.namespaces))}.{draw(st.sampled_from(('a', 'b', 'x')))}"
    return _atom(draw, scope)


def _statements(draw: Any, scope: _Scope, depth: int, n: int) -> str:
    return "".join(_statement(draw, scope, depth) for _ in range(n))


def _statement(draw: Any, scope: _Scope, depth: int) -> str:
    e = lambda: _expr(draw, scope, draw(st.integers(0, 3)))  # noqa: E731
    kind = draw(st.integers(0, 15)) if depth > 0 else draw(st.sampled_from((0, 1, 2)))
    if kind == 0:
        return "{{ " + e() + " }}"
    if kind == 1:
        return draw(st.sampled_from(("text", " ", "\n", "<|im_start|>", "[INST] ")))
    if kind == 2:
        v = scope.fresh("v")
        out = "{% set " + v + " = " + e() + " %}"
        scope.variables.append(v)
        return out
    if kind == 3:
        v = scope.fresh("s")
        body = _statements(draw, scope, depth - 1, draw(st.integers(1, 2)))
        scope.variables.append(v)
        return "{% set " + v + " %}" + body + "{% endset %}"
    if kind in (4, 5):
        v = scope.fresh("i")
        it = draw(st.sampled_from(("messages", "tools", "messages[1:]", "range(3)"))) if draw(st.booleans()) else e()
        cond = f" if {e()}" if draw(st.integers(0, 4)) == 0 else ""
        recursive = draw(st.integers(0, 6)) == 0
        scope.variables.append(v)
        scope.in_loop += 1
        body = _statements(draw, scope, depth - 1, draw(st.integers(1, 3)))
        if recursive:
            body += "{{ loop(" + v + " if " + v + " is iterable and " + v + " is not string else []) }}"
        if draw(st.integers(0, 3)) == 0:
            body += draw(
                st.sampled_from(("{% break %}", "{% continue %}", "{% if loop.index > 2 %}{% break %}{% endif %}"))
            )
        scope.in_loop -= 1
        els = "{% else %}" + _statements(draw, scope, depth - 1, 1) if draw(st.integers(0, 4)) == 0 else ""
        rec = " recursive" if recursive else ""
        return "{% for " + v + " in " + it + cond + rec + " %}" + body + els + "{% endfor %}"
    if kind == 6:
        out = "{% if " + e() + " %}" + _statements(draw, scope, depth - 1, draw(st.integers(1, 2)))
        if draw(st.booleans()):
            out += "{% elif " + e() + " %}" + _statements(draw, scope, depth - 1, 1)
        if draw(st.booleans()):
            out += "{% else %}" + _statements(draw, scope, depth - 1, 1)
        return out + "{% endif %}"
    if kind == 7:
        m = scope.fresh("m")
        params = [scope.fresh("p") for _ in range(draw(st.integers(0, 2)))]
        saved = list(scope.variables)
        scope.variables.extend(params)
        was = scope.in_macro
        scope.in_macro = True
        body = _statements(draw, scope, depth - 1, draw(st.integers(1, 2)))
        if draw(st.integers(0, 2)) == 0:
            body += "{{ caller() if caller is defined else '' }}"
        if draw(st.integers(0, 5)) == 0 and params:
            body += (
                "{% if "
                + params[0]
                + " is number and "
                + params[0]
                + " > 0 %}{{ "
                + m
                + "("
                + ", ".join([params[0] + " - 1", *params[1:]])
                + ") }}{% endif %}"
            )
        scope.in_macro = was
        scope.variables = saved
        scope.macros.append((m, len(params)))
        params_src = ", ".join(params + (["k=" + e()] if draw(st.integers(0, 3)) == 0 else []))
        return "{% macro " + m + "(" + params_src + ") %}" + body + "{% endmacro %}"
    if kind == 8 and scope.macros:
        name, n = draw(st.sampled_from(scope.macros))
        args = _args(draw, scope, 2, n)
        return "{% call " + name + "(" + args + ") %}" + _statements(draw, scope, depth - 1, 1) + "{% endcall %}"
    if kind == 9:
        return (
            "{% filter " + _filter(draw, scope, 1) + " %}" + _statements(draw, scope, depth - 1, 1) + "{% endfilter %}"
        )
    if kind == 10:
        v = scope.fresh("w")
        scope.variables.append(v)
        return "{% with " + v + " = " + e() + " %}" + _statements(draw, scope, depth - 1, 1) + "{% endwith %}"
    if kind == 11:
        ns = scope.fresh("ns")
        scope.namespaces.append(ns)
        scope.variables.append(ns)
        return "{% set " + ns + " = namespace(a=" + e() + ", b='', x=0) %}"
    if kind == 12 and scope.namespaces:
        ns = draw(st.sampled_from(scope.namespaces))
        return "{% set " + ns + "." + draw(st.sampled_from(("a", "b", "x"))) + " = " + e() + " %}"
    if kind == 13:
        return "{% do " + e() + " %}"
    if kind == 14:
        return "{{ " + _reach(draw, scope, draw(st.integers(1, 3))) + " }}"
    return "{{ " + _expr(draw, scope, 4) + " }}"


@st.composite
def templates(draw: Any, depth: int = 3) -> str:
    """A random template (see the module)."""
    scope = _Scope()
    return _statements(draw, scope, depth, draw(st.integers(1, 5)))


def _known() -> list[tuple[str, str]]:
    from tests import test_template_tricks as tricks
    from tests import test_templates as payloads

    out = [(f"real:{p.stem}", p.read_bytes().decode("utf-8")) for p in sorted(REAL.glob("*.jinja"))]
    for folder in ("benign", "tricks"):  # the corpus' live tricks, where the branch has them
        for p in sorted((REAL.parent / folder).glob("*.jinja")):
            out.append((f"{folder}:{p.stem}", p.read_bytes().decode("utf-8")))
    for name, p in payloads.P.items():
        out.append(
            (f"payload:{name}", p.source.replace("{CMD}", "'true'").replace("{MARKFILE}", "x").replace("{MARK}", "x"))
        )
    for name, t in {**tricks.T, **tricks.DOS}.items():
        out.append(
            (f"trick:{name}", t.source.replace("{CMD}", "'true'").replace("{MARKFILE}", "x").replace("{MARK}", "x"))
        )
    return out


_KNOWN: list[tuple[str, str]] = []


def known() -> list[tuple[str, str]]:
    """(label, source) of the real templates, the payloads and the tricks of the test-suite (placeholders filled)."""
    if not _KNOWN:
        _KNOWN.extend(_known())
    return _KNOWN


@st.composite
def mutants(draw: Any) -> str:
    """A known template (real, payload or trick) mutated once to three times (see the module)."""
    import re

    pool = known()
    _, source = draw(st.sampled_from(pool))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.integers(0, 3))
        scope = _Scope()
        if how == 0:  # a string literal becomes a random expression (often a computed name)
            spots = [m.span() for m in re.finditer(r"'[A-Za-z_]{1,20}'", source)]
            if spots:
                a, b = draw(st.sampled_from(spots))
                source = source[:a] + "(" + _name_expr(draw, scope, 2) + ")" + source[b:]
        elif how == 1:  # a number literal becomes a random expression (often a size)
            spots = [m.span() for m in re.finditer(r"(?<![\w.])\d{1,6}(?![\w.])", source)]
            spots = [s for s in spots if _inside_code(source, s[0])]
            if spots:
                a, b = draw(st.sampled_from(spots))
                source = source[:a] + "(" + _expr(draw, scope, 2) + ")" + source[b:]
        elif how == 2:  # a random statement at a statement boundary
            cuts = [0, len(source), *[m.end() for m in re.finditer(r"%\}|\}\}", source)]]
            at = draw(st.sampled_from(sorted(set(cuts))))
            source = source[:at] + _statement(draw, scope, 2) + source[at:]
        else:  # spliced with another known template
            _, other = draw(st.sampled_from(pool))
            cut = [m.end() for m in re.finditer(r"%\}|\}\}", other)] or [0]
            at = draw(st.sampled_from(cut))
            source = source + other[:at]
    return source


def _inside_code(source: str, i: int) -> bool:
    a = max(source.rfind("{{", 0, i), source.rfind("{%", 0, i))
    b = max(source.rfind("}}", 0, i), source.rfind("%}", 0, i))
    return a > b
