"""Every builtin a chat template can call, in one table: Jinja's filters, tests and globals, the runtime helpers
loaders add, the methods of ``str``, ``list``, ``dict`` and ``Markup``, and the methods of Jinja's own objects.

The table says, for each builtin, its parameters (as the callee binds them: positional arguments in order,
keyword arguments by name, so ``center(width=10**9)`` and ``center(10**9)`` are the same width) and the name of
the rule that bounds its cost (:mod:`.cost` implements each rule). A builtin that is not in the table is not
modelled, and an analysis that meets one must treat what it does and returns as *anything* (unbounded): the
table is the one place that decides what is modelled. The name analysis may read the same table.

>>> lookup("filter", "center").params
('width',)
>>> lookup("method", "expandtabs").rule
'expandtabs'
>>> lookup("method", "__init__") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["BUILTINS", "KINDS", "Builtin", "lookup"]

KINDS = ("filter", "test", "global", "method", "jinja-method")


@dataclass(frozen=True)
class Builtin:
    """One builtin.

    Attributes:
        kind: ``filter``, ``test``, ``global`` (a name a template calls, Jinja's or a runtime's), ``method``
            (of ``str``, ``list``, ``dict`` or ``Markup``: what request data and template-made values have) or
            ``jinja-method`` (of Jinja's loop, cycler, joiner objects).
        name: as the template spells it.
        params: the parameters after the receiver (a filter's or method's), in order; each may also be given
            by keyword.
        rule: the name of the cost rule (see :mod:`.cost`).
        star: it takes any further positional arguments (``*args``), bounded by the rule.
        starstar: it takes any further keyword arguments (``**kwargs``), bounded by the rule.
        mutates: it changes its receiver in place (a list or dict grows or shrinks).
    """

    kind: str
    name: str
    params: tuple[str, ...]
    rule: str
    star: bool = False
    starstar: bool = False
    mutates: bool = False


def _b(kind: str, names: str, params: str, rule: str, **kw: bool) -> list[Builtin]:
    ps = tuple(params.split()) if params else ()
    return [Builtin(kind, name, ps, rule if rule != "=" else name, **kw) for name in names.split()]


_TABLE: list[Builtin] = [
    # -- Jinja's filters (jinja2 3.1) ---------------------------------------------------------------
    *_b("filter", "abs", "", "number_same"),
    *_b("filter", "int", "default base", "to_number"),
    *_b("filter", "float", "default", "to_number"),
    *_b("filter", "round", "precision method", "round"),
    *_b("filter", "attr", "name", "attr"),
    *_b("filter", "batch", "linecount fill_with", "="),
    *_b("filter", "slice", "slices fill_with", "="),
    *_b("filter", "capitalize lower upper title", "", "case"),
    *_b("filter", "trim striptags safe string", "chars", "text_same"),
    *_b("filter", "e escape forceescape", "", "escape"),
    *_b("filter", "urlencode", "", "escape"),
    *_b("filter", "urlize", "trim_url_limit nofollow target rel extra_schemes", "urlize"),
    *_b("filter", "xmlattr", "autospace", "escape"),
    *_b("filter", "center", "width", "center"),
    *_b("filter", "length count wordcount", "", "length"),
    *_b("filter", "default d", "default_value boolean", "default"),
    *_b("filter", "dictsort", "case_sensitive by reverse", "sequence"),
    *_b("filter", "filesizeformat", "binary", "short_text"),
    *_b("filter", "first last random", "", "pick"),
    *_b("filter", "min max", "case_sensitive attribute", "pick"),
    *_b("filter", "format", "", "printf", star=True, starstar=True),
    *_b("filter", "groupby", "attribute default case_sensitive", "groupby"),
    *_b("filter", "indent", "width first blank", "indent"),
    *_b("filter", "items list reverse", "", "sequence"),
    *_b("filter", "sort unique", "reverse case_sensitive attribute", "sequence"),
    *_b("filter", "join", "d attribute", "join"),
    *_b("filter", "map select reject selectattr rejectattr", "", "map", star=True, starstar=True),
    *_b("filter", "pprint", "", "tojson"),
    *_b("filter", "tojson", "indent ensure_ascii separators sort_keys", "tojson"),  # transformers' takes more
    *_b("filter", "replace", "old new count", "replace"),
    *_b("filter", "sum", "attribute start", "sum"),
    *_b("filter", "truncate", "length killwords end leeway", "truncate"),
    *_b("filter", "wordwrap", "width break_long_words wrapstring break_on_hyphens", "wordwrap"),
    *_b("filter", "from_json", "", "from_json"),  # a filter some runtimes add
    # -- Jinja's tests: each reads its operands at most once, and gives a boolean ----------------------
    *_b(
        "test",
        "boolean callable defined divisibleby eq equalto escaped even false filter float ge greaterthan gt in "
        "integer iterable le lessthan lower lt mapping ne none number odd sameas sequence string test true "
        "undefined upper == != < <= > >=",
        "value",
        "test",
    ),
    # -- globals: Jinja's, and the helpers runtimes add -------------------------------------------------
    *_b("global", "range", "start stop step", "range"),
    *_b("global", "lipsum", "n html min max", "lipsum"),
    *_b("global", "dict", "", "dict", star=True, starstar=True),
    *_b("global", "namespace", "", "namespace", star=True, starstar=True),
    *_b("global", "cycler", "", "cycler", star=True),
    *_b("global", "joiner", "sep", "joiner"),
    *_b("global", "raise_exception", "message", "raise"),
    *_b("global", "strftime_now", "format", "strftime"),
    # -- methods of str (and of Markup, a str) ----------------------------------------------------------
    *_b("method", "center ljust rjust", "width fillchar", "center"),
    *_b("method", "zfill", "width", "center"),
    *_b("method", "expandtabs", "tabsize", "="),
    *_b("method", "replace", "old new count", "replace"),
    *_b("method", "join", "iterable", "str_join"),
    *_b("method", "format", "", "str_format", star=True, starstar=True),
    *_b("method", "format_map", "mapping", "str_format"),
    *_b("method", "split rsplit", "sep maxsplit", "split"),
    *_b("method", "splitlines", "keepends", "split"),
    *_b("method", "partition rpartition", "sep", "split"),
    *_b("method", "count find index rfind rindex", "sub start end", "search"),
    *_b("method", "startswith endswith", "prefix start end", "search"),
    *_b(
        "method",
        "isalnum isalpha isascii isdecimal isdigit isidentifier islower isnumeric isprintable isspace istitle isupper",
        "",
        "search",
    ),
    *_b("method", "upper lower title capitalize casefold swapcase", "", "case"),
    *_b("method", "strip lstrip rstrip removeprefix removesuffix", "chars", "text_same"),
    *_b("method", "encode", "encoding errors", "encode"),
    *_b("method", "escape", "", "escape"),  # Markup's
    *_b("method", "striptags unescape", "", "text_same"),  # Markup's
    # -- methods of numbers ---------------------------------------------------------------------------------
    *_b("method", "bit_length bit_count conjugate is_integer", "", "number_same"),  # at most the number itself
    *_b("method", "hex", "", "text_same"),  # no longer than the number's own text bound (24, or 4,400 digits)
    # -- methods of list and dict -------------------------------------------------------------------------
    *_b("method", "keys values items", "", "view"),
    *_b("method", "get", "key default", "get"),
    *_b("method", "pop", "key default", "get", mutates=True),
    *_b("method", "popitem", "", "get", mutates=True),
    *_b("method", "copy", "", "copy"),
    *_b("method", "append", "object", "append", mutates=True),
    *_b("method", "insert", "index object", "insert", mutates=True),
    *_b("method", "extend", "iterable", "extend", mutates=True),
    *_b("method", "update", "other", "update", starstar=True, mutates=True),
    *_b("method", "setdefault", "key default", "setdefault", mutates=True),
    *_b("method", "remove clear", "value", "shrink", mutates=True),
    *_b("method", "reverse", "", "shrink", mutates=True),  # in place: same size
    *_b("method", "sort", "key reverse", "list_sort", mutates=True),
    # -- methods of Jinja's own objects (loop, cycler, joiner) ---------------------------------------------
    *_b("jinja-method", "cycle", "", "cycle", star=True),
    *_b("jinja-method", "changed", "", "changed", star=True),
    *_b("jinja-method", "next current reset", "", "cycler_next"),
]

#: Every builtin, by (kind, name).
BUILTINS: Mapping[tuple[str, str], Builtin] = MappingProxyType({(b.kind, b.name): b for b in _TABLE})


def lookup(kind: str, name: str) -> Builtin | None:
    """The builtin ``name`` of ``kind``, or None when it is not modelled (then it is *anything*)."""
    return BUILTINS.get((kind, name))
