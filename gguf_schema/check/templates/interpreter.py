"""The abstract interpreter: every name a template can look up, proven safe or reported.

:class:`Analysis` interprets a parsed template over :mod:`.values`. The interpretation is
flow-insensitive (every assignment of a variable joins into it; loop, macro, call-block and
with-block variables are scoped to their binder) and solved as a system of units: each
statement-level expression is a unit; a unit that reads a variable is evaluated again when that
variable grows. A variable that keeps growing is widened (:func:`.values.widen`) after a few
changes, so the solution is reached in a bounded number of evaluations whatever the template
(ten thousand macros called ten thousand times are bound through one pool per macro name, not
each call to each definition). A last pass over the solved state runs the checks.

A lookup (``x.name``, ``x[name]``, ``|attr``, the attribute parameters of ``map``, ``selectattr``,
``sort``, ``groupby``, ``sum``, ``unique``, ``min``, ``max``, ``join``, and the keys of ``.get``,
``.pop``, ``.setdefault``) is accepted only when its name is proven safe: a constant that does
not name an internal of the receiver (any underscore name on an object; a dunder or private
attribute on plain data, where ``'_key'`` is just an item), or text the request chose looked up
as an item on plain data. Anything else, whatever operation made it, is a finding, with the
chain of steps that made the name.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import folding
from .jinja import fold_environment, identifier, target_names
from .rules import Findings, rule
from .values import (
    BOT,
    DYN,
    INTERNAL_NAMES,
    LOOP,
    NS,
    NUM,
    OBJ,
    REQ,
    TEXT,
    V,
    candidates,
    const,
    container,
    is_internal,
    is_plain_internal,
    join,
    key_sites,
    kind,
    may_be_container,
    site_root,
    sub_sites,
    top,
    widen,
    with_sites,
)

__all__ = ["T101", "T102", "T103", "T104", "T106", "T201", "Analysis", "AnalysisOverBudget"]

T101 = rule(
    "GGUF-T101",
    "error",
    "internal-name",
    "An attribute or item lookup reaches a Python internal: a dunder or private name (__class__, __globals__, "
    "_TemplateReference__context...), a frame, generator or code attribute (mro, gi_frame, f_globals...), or a "
    "command runner (popen...). The name may be written out or folded from constants (~, join, format, %, "
    "replace, reverse, slicing, escapes, {% set %}, macro arguments, dict(...) keys, numbers turned to text). "
    "On plain data (a str, a number, request data) only the attributes those types have count: '_key' is an "
    "item there. Without a sandbox this is how a template runs code.",
)
T102 = rule(
    "GGUF-T102",
    "error",
    "computed-name",
    "An attribute, item or filter name is not proven safe: it is made at render time from template or model-file "
    "material (string building, stringified objects, macro or block output, special-token text, strftime_now, "
    "numbers or booleans turned to text and edited, values of operations the audit does not fold) in a way that "
    "cannot be shown to be harmless. Real chat templates use constant names or names taken from the request.",
)
T103 = rule(
    "GGUF-T103",
    "error",
    "format-fields",
    "str.format or format_map runs with a format string whose fields read attributes or items ({0.__class__}, "
    "{0[key]}), or whose format string is built at render time or chosen by the request: format strings walk "
    "Python objects.",
)
T104 = rule(
    "GGUF-T104",
    "warning",
    "internal-name-literal",
    "A string literal or identifier spells a Python internal or a command runner (__globals__, __subclasses__, "
    "gi_frame, popen...) without the audit seeing it used as a name; benign chat templates never contain one.",
)
T106 = rule(
    "GGUF-T106",
    "error",
    "conversation-named-lookup",
    "A name taken from the request (messages, tools, other request data) is looked up on a Jinja or Python object "
    "(a global, loop, self, caller, a namespace, a value the request itself picked), read with |attr (which tries "
    "attributes first), or a value picked by such a name is called. Whoever writes the request then chooses the "
    "attribute or what runs, so a model shipped with this template is exploitable by its users. Real templates "
    "look such names up only as items of request data, and never call what they pick.",
)
T201 = rule(
    "GGUF-T201",
    "warning",
    "loads-template",
    "{% include %}, {% import %}, {% from ... import %} or {% extends %}: the template loads other templates, "
    "whose source the audit cannot see.",
)

COMBOS = 32  # combinations of candidates an operator is folded over
CHANGES = 12  # changes of one variable before it is widened
DEADLINE_CHECK = 256  # units evaluated between two looks at the clock

JINJA_GLOBALS = frozenset({"range", "dict", "lipsum", "cycler", "joiner", "namespace"})
RUNTIME_HELPERS = frozenset({"raise_exception", "strftime_now"})
LOOP_NUMBERS = frozenset({"index", "index0", "revindex", "revindex0", "length", "depth", "depth0", "first", "last"})
_TOKEN_NAME_RE = re.compile(r"(^|_)tokens?$")
_MACRO_ATTRS = frozenset({"name", "arguments", "defaults", "catch_kwargs", "catch_varargs", "caller"})

#: filter -> (position of the attribute parameter among the filter's arguments, its keyword)
ATTRIBUTE_PARAMS: dict[str, tuple[int | None, str | None]] = {
    "selectattr": (0, None),
    "rejectattr": (0, None),
    "groupby": (0, "attribute"),
    "sum": (0, "attribute"),
    "sort": (2, "attribute"),
    "unique": (1, "attribute"),
    "min": (1, "attribute"),
    "max": (1, "attribute"),
    "join": (1, "attribute"),
    "map": (None, "attribute"),
}
#: filters whose result is a number, a boolean or None
F_NUMBER = frozenset({"length", "count", "wordcount", "int", "float", "abs", "round", "bool"})
#: filters whose result is one element of the receiver
F_ELEMENT = frozenset({"first", "last", "random", "min", "max"})
#: filters whose result is a list of (some of) the receiver's elements
F_SAME = frozenset({"list", "sort", "unique", "select", "reject", "selectattr", "rejectattr"})
F_NESTED = frozenset({"batch", "slice"})
F_PAIRS = frozenset({"dictsort", "items"})
#: text filters whose output, for request text and no template-chosen arguments, is still request text
F_TEXT = frozenset(
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
        "xmlattr",
        "replace",
        "format",
        "filesizeformat",
    }
)
#: string methods whose result is a piece of the receiver's text (or a list of pieces)
M_PIECES = frozenset(
    {"split", "rsplit", "splitlines", "partition", "rpartition", "strip", "lstrip", "rstrip", "removeprefix"}
    | {"removesuffix", "upper", "lower", "title", "capitalize", "casefold", "swapcase", "encode", "decode"}
)
M_SPLITS = frozenset({"split", "rsplit", "splitlines", "partition", "rpartition"})
M_NUMBER = frozenset(
    {"startswith", "endswith", "find", "rfind", "index", "rindex", "count", "isdigit", "isalpha", "isalnum"}
    | {"isspace", "islower", "isupper", "istitle", "isnumeric", "isdecimal", "isidentifier", "isascii", "bit_length"}
    | {"conjugate", "is_integer", "as_integer_ratio", "hex", "bit_count"}
)
M_TEXT = frozenset(
    {"replace", "join", "center", "ljust", "rjust", "zfill", "expandtabs", "translate", "format", "format_map"}
)
M_KEYS = frozenset({"get", "pop", "setdefault"})
MUTATORS = frozenset(
    {"append", "extend", "insert", "update", "add", "remove", "clear", "discard", "sort", "reverse", "pop"}
    | {"setdefault", "popitem"}
)
#: attribute names of str, list and dict that are methods (looked up on request data, they give the method)
_PLAIN_METHODS = frozenset(n for t in (str, list, dict, bytes) for n in dir(t) if not n.startswith("_"))


class AnalysisOverBudget(Exception):
    """The analysis ran past its time budget."""


class Undefined:
    """What a missing item or attribute is at render time: text '' and nothing more."""

    __slots__ = ()

    def __str__(self) -> str:
        return ""

    def __repr__(self) -> str:
        return "Undefined"


UNDEF = Undefined()
_UNDEF_V = V((UNDEF,))


def _line(node: Any) -> int | None:
    return getattr(node, "lineno", None)


def _show(c: Any) -> str:
    text = repr(c)
    return text if len(text) <= 40 else text[:37] + "…'"


class Unit:
    """One statement-level evaluation: a node, what to do with it, and the binders around it."""

    __slots__ = ("inner", "kind", "node", "scope")

    def __init__(self, kind: str, node: Any, scope: tuple[Any, ...], inner: tuple[Any, ...] = ()):
        self.kind = kind
        self.node = node
        self.scope = scope
        self.inner = inner


class Analysis:
    """Abstract interpretation of one parsed template (see the module docstring)."""

    def __init__(self, nodes: Any, findings: Findings, deadline: float):
        self.n = nodes
        self.findings = findings
        self.deadline = deadline
        self.state: dict[tuple[Any, ...], V] = {}
        self.changes: dict[tuple[Any, ...], int] = {}
        self.const_changes: dict[tuple[Any, ...], int] = {}
        self.readers: dict[tuple[Any, ...], set[int]] = {}
        self.units: list[Unit] = []
        self.current = -1
        self.scope: tuple[Any, ...] = ()
        self.checking = False
        self.block_value: list[V] = []
        self.macros: dict[str, list[Any]] = {}  # identifier -> Macro nodes of that name
        self.t101_words: set[tuple[int | None, str]] = set()
        self.literals: list[tuple[int | None, str, str]] = []
        self.free_cache: dict[str, V] = {}
        self.order: dict[int, int] = {}
        self.first_set: dict[str, int] = {}
        self._expr = self._dispatch("ev_")
        self.worklist: deque[int] = deque()
        self.queued: set[int] = set()

    def _dispatch(self, prefix: str) -> dict[type, Callable[[Any], V]]:
        table = {}
        for attr in dir(self):
            if attr.startswith(prefix):
                cls = getattr(self.n, attr[len(prefix) :], None)
                if isinstance(cls, type):
                    table[cls] = getattr(self, attr)
        return table

    # ------------------------------------------------------------------ running

    def run(self, tree: Any) -> None:
        """Build the units, solve, then check every unit against the solution."""
        self.number(tree)
        self.build(tree.body, ())
        self.collect_literals(tree)
        count = 0
        for i in range(len(self.units)):
            self.evaluate(i)
            count += 1
            if count % DEADLINE_CHECK == 0:
                self.tick()
        while self.worklist:
            i = self.worklist.popleft()
            self.queued.discard(i)
            self.evaluate(i)
            count += 1
            if count % DEADLINE_CHECK == 0:
                self.tick()
        self.checking = True
        for i in range(len(self.units)):
            self.evaluate(i)
            if i % DEADLINE_CHECK == 0:
                self.tick()
        for line, word, where in self.literals:
            if (line, word) not in self.t101_words:
                self.findings.add(
                    T104, f"{where} spells {word!r}, a Python internal or command runner", line, needle=word
                )

    def tick(self) -> None:
        if time.process_time() > self.deadline:
            raise AnalysisOverBudget

    def evaluate(self, i: int) -> None:
        unit = self.units[i]
        self.current = i
        self.scope = unit.scope
        getattr(self, "u_" + unit.kind)(unit)

    # ------------------------------------------------------------------ state

    def get(self, key: tuple[Any, ...]) -> V:
        if not self.checking:
            self.readers.setdefault(key, set()).add(self.current)
        return self.state.get(key, BOT)

    def put(self, key: tuple[Any, ...], v: V) -> None:
        if self.checking or v.is_bot():
            return
        old = self.state.get(key, BOT)
        new = join(old, v)
        if new is old or new.sig() == old.sig():
            return
        # widening: after CHANGES changes, what keeps changing jumps to the top of its kind (its constants only
        # when they are what kept changing); after four times as many, the value becomes anything
        n = self.changes[key] = self.changes.get(key, 0) + 1
        if new.sig()[0] != old.sig()[0]:
            self.const_changes[key] = self.const_changes.get(key, 0) + 1
        if n > 4 * CHANGES:
            new = top("a value that kept changing")
        elif n > CHANGES:
            new = join(widen(new, old, widen_consts=self.const_changes.get(key, 0) > CHANGES), old)
        if new.sig() == old.sig():
            return
        self.state[key] = new
        for r in self.readers.get(key, ()):
            if r not in self.queued:
                self.queued.add(r)
                self.worklist.append(r)

    def pool(self, name: Any, v: V) -> None:
        self.put(("pool", name), v)

    def pooled(self, name: Any) -> V:
        return self.get(("pool", name))

    def var_key(self, name: str) -> tuple[tuple[Any, ...], bool]:
        """The state key of variable ``name`` here, and whether a binder (not the template) owns it."""
        for binder, names in reversed(self.scope):
            if name in names:
                return ("var", name, binder), True
        return ("var", name), False

    def set_var(self, name: str, v: V) -> None:
        self.put(self.var_key(identifier(name))[0], v)

    # ------------------------------------------------------------------ building the units

    def build(self, body: Iterable[Any], scope: tuple[Any, ...]) -> None:
        n = self.n
        for node in body:
            if isinstance(node, n.Output):
                for child in node.nodes:
                    if not isinstance(child, n.TemplateData):
                        self.units.append(Unit("expr", child, scope))
            elif isinstance(node, n.If):
                self.units.append(Unit("expr", node.test, scope))
                self.build(node.body, scope)
                self.build(node.elif_, scope)
                self.build(node.else_, scope)
            elif isinstance(node, n.For):
                inner = (*scope, (id(node), frozenset(target_names(self.n, node.target)) | {"loop"}))
                self.units.append(Unit("for", node, scope, inner))
                self.build(node.body, inner)
                self.build(node.else_, scope)
            elif isinstance(node, n.Macro):
                self.macros.setdefault(identifier(node.name), []).append(node)
                inner = (*scope, (id(node), frozenset(identifier(a.name) for a in node.args) | {"varargs", "kwargs"}))
                self.units.append(Unit("macro", node, scope, inner))
                self.build(node.body, inner)
            elif isinstance(node, n.CallBlock):
                inner = (*scope, (id(node), frozenset(identifier(a.name) for a in node.args)))
                self.units.append(Unit("callblock", node, scope, inner))
                self.build(node.body, inner)
            elif isinstance(node, n.With):
                names = frozenset(name for t in node.targets for name in target_names(self.n, t))
                inner = (*scope, (id(node), names))
                self.units.append(Unit("with", node, scope, inner))
                self.build(node.body, inner)
            elif isinstance(node, n.Assign):
                self.units.append(Unit("assign", node, scope))
            elif isinstance(node, n.AssignBlock):
                self.build(node.body, scope)
                self.units.append(Unit("assignblock", node, scope))
            elif isinstance(node, n.FilterBlock):
                self.build(node.body, scope)
                self.units.append(Unit("filterblock", node, scope))
            elif isinstance(node, n.ExprStmt):
                self.units.append(Unit("expr", node.node, scope))
            elif isinstance(node, (n.Include, n.Import, n.FromImport, n.Extends)):
                self.units.append(Unit("load", node, scope))
            elif isinstance(node, n.Block):
                self.build(node.body, scope)
            elif isinstance(node, n.Expr):
                self.units.append(Unit("expr", node, scope))
            elif isinstance(node, n.Node):
                # Scope, OverlayScope, eval-context modifiers, extension nodes: their expressions and statements
                for child in node.iter_child_nodes():
                    if isinstance(child, n.Expr):
                        self.units.append(Unit("expr", child, scope))
                    else:
                        self.build([child], scope)

    def number(self, tree: Any) -> None:
        """Source order of the nodes, and where each name is first set unconditionally at the top level: a read
        after that cannot see a value the runtime passed under that name."""
        n = self.n
        self.order = {id(node): i for i, node in enumerate(tree.find_all(n.Node))}
        body = tree.body
        for j, node in enumerate(body):
            if isinstance(node, (n.Assign, n.AssignBlock)):
                end = self.order[id(body[j + 1])] if j + 1 < len(body) else len(self.order)
                for name in target_names(self.n, node.target):
                    self.first_set.setdefault(name, end)

    def collect_literals(self, tree: Any) -> None:
        """Every literal and identifier that spells an internal (for GGUF-T104), found once."""
        n = self.n
        for node in tree.find_all((n.Const, n.Name, n.Keyword, n.Macro, n.CallBlock, n.NSRef, n.Getattr)):
            line = _line(node)
            if isinstance(node, n.Const):
                if isinstance(node.value, str):
                    self.literal(line, node.value, "a string literal")
            elif isinstance(node, n.Name):
                self.literal(line, identifier(node.name), "a variable name")
            elif isinstance(node, n.Keyword):
                self.literal(line, identifier(node.key), "a keyword argument name")
            elif isinstance(node, (n.Macro, n.CallBlock)):
                if isinstance(node, n.Macro):
                    self.literal(line, identifier(node.name), "a macro name")
                for a in node.args:
                    self.literal(line, identifier(a.name), "a parameter name")

    def literal(self, line: int | None, text: str, where: str) -> None:
        for w in alarm_words(text):
            self.literals.append((line, w, where))

    # ------------------------------------------------------------------ units

    def u_expr(self, unit: Unit) -> None:
        self.ev(unit.node)

    def u_for(self, unit: Unit) -> None:
        node = unit.node
        it = self.ev(node.iter)
        if node.recursive:
            it = join(it, self.pooled("loop-recursion"))
        elem = self.elements(it).step(f"line {node.lineno}: a loop variable over {self.path_text(node.iter, 3)}")
        self.pool("loop-items", elem)
        self.scope = unit.inner
        self.put(("var", "loop", id(node)), self.free("loop"))
        self.assign(node.target, elem, node)
        if node.test is not None:
            self.ev(node.test)

    def u_macro(self, unit: Unit) -> None:
        node = unit.node
        name = identifier(node.name)
        self.set_var(name, V((), OBJ, calls=frozenset({"macro:" + name})))
        params = [identifier(a.name) for a in node.args]
        self.scope = unit.inner
        defaults = {
            p: self.ev(d) for p, d in zip(params[len(params) - len(node.defaults) :], node.defaults, strict=True)
        }
        everything = self.pooled(("margs", "*"))
        spread = join(self.pooled(("margs", name, "spread")), everything)
        for i, p in enumerate(params):
            v = join(
                self.pooled(("margs", name, i)),
                self.pooled(("margs", name, "kw", p)),
                spread,
                defaults.get(p),
            )
            self.put(("var", p, id(node)), v.step(f"line {node.lineno}: parameter {p} of macro {node.name}"))
        self.put(("var", "varargs", id(node)), container(join(self.pooled(("margs", name, "extra")), spread)))
        self.put(("var", "kwargs", id(node)), container(join(self.pooled(("margs", name, "kwextra")), spread)))

    def u_callblock(self, unit: Unit) -> None:
        node = unit.node
        self.ev(node.call)
        params = [identifier(a.name) for a in node.args]
        self.scope = unit.inner
        defaults = {
            p: self.ev(d) for p, d in zip(params[len(params) - len(node.defaults) :], node.defaults, strict=True)
        }
        args = self.pooled("caller-args")
        for p in params:
            self.put(
                ("var", p, id(node)),
                join(args, defaults.get(p)).step(f"line {node.lineno}: parameter {p} of a call block"),
            )

    def u_with(self, unit: Unit) -> None:
        node = unit.node
        values = [self.ev(value) for value in node.values]
        self.scope = unit.inner
        for target, value in zip(node.targets, values, strict=True):
            self.assign(target, value, node)

    def u_assign(self, unit: Unit) -> None:
        self.assign(unit.node.target, self.ev(unit.node.node), unit.node)

    def u_assignblock(self, unit: Unit) -> None:
        node = unit.node
        value = kind(TEXT, f"line {node.lineno}: the text a {{% set %}} block captures")
        if node.filter is not None:
            value = self.block_filter(node.filter, value)
        self.assign(node.target, value, node)

    def u_filterblock(self, unit: Unit) -> None:
        node = unit.node
        self.block_filter(node.filter, kind(TEXT, f"line {node.lineno}: the output of a {{% filter %}} block"))

    def block_filter(self, flt: Any, value: V) -> V:
        self.block_value.append(value)
        try:
            return self.ev(flt)
        finally:
            self.block_value.pop()

    def u_load(self, unit: Unit) -> None:
        node = unit.node
        n = self.n
        self.ev(node.template)
        what = {n.Include: "{% include %}", n.Extends: "{% extends %}", n.Import: "{% import %}"}.get(
            type(node), "{% from ... import %}"
        )
        if self.checking:
            self.findings.add(
                T201,
                f"{what} loads another template, whose source the audit cannot see",
                node.lineno,
                needle=what.split()[1],
            )
        loaded = top(f"line {node.lineno}: a name {what} brings from another template")
        if isinstance(node, n.Import):
            self.set_var(node.target, loaded)
        elif isinstance(node, n.FromImport):
            for item in node.names:
                self.set_var(item[1] if isinstance(item, tuple) else item, loaded)

    def assign(self, target: Any, value: V, at: Any) -> None:
        n = self.n
        if isinstance(target, n.Name):
            self.set_var(target.name, value.step(f"line {at.lineno}: set {target.name}"))
        elif isinstance(target, n.NSRef):
            self.check_lookup(
                target,
                const(target.attr),
                self.ev_Name(n.Name(target.name, "load", lineno=target.lineno)),
                f"namespace attribute {target.name}.{target.attr}",
                "attr",
            )
            self.put(("ns", target.attr), value.step(f"line {at.lineno}: set {target.name}.{target.attr}"))
        elif isinstance(target, (n.Tuple, n.List)):
            elem = self.elements(value)
            for item in target.items:
                self.assign(item, elem, at)

    # ------------------------------------------------------------------ checks

    def check_lookup(self, node: Any, name: V, recv: V, how: str, mode: str) -> None:
        """Report when ``name``, looked up on ``recv``, is not proven safe.

        ``mode``: ``attr`` (attribute first: ``x.name``, ``|attr``), ``item`` (item first, then the
        attribute: ``x[name]``), ``path`` (a dotted attribute parameter, item first per part), ``key``
        (the key of a dict method: ``.get``, ``.pop``, ``.setdefault``).
        """
        if not self.checking:
            return
        line = _line(node)
        plain = recv.plain()
        if mode == "key" and plain:
            return  # a dict key lookup: it never reaches an attribute
        for c in name.consts:
            if not isinstance(c, str):
                continue
            parts = c.split(".") if mode == "path" else [c]
            for p in parts:
                if mode == "path" and p.isdigit():
                    continue
                if is_plain_internal(p) if plain else is_internal(p):
                    self.t101_words.add((line, p))
                    shown = repr(c) if p == c else f"{c!r} (part {p!r})"
                    kind_ = "a command runner" if p in _RUNNERS else "a Python internal"
                    said = f"{how} is {kind_}" if repr(p) in how else f"{how} is {shown}, {kind_}"
                    self.findings.add(T101, said, line, needle=p, chain=self.chain(name, line, how))
        if name.kinds & (TEXT | OBJ):
            why = name.why[0] if name.why else "template text"
            self.findings.add(
                T102,
                f"{how} is computed at render time ({_cut(why)}); it cannot be proven harmless",
                line,
                chain=self.chain(name, line, how),
            )
        if name.kinds & (REQ | DYN) and (mode == "attr" or not plain):
            where = (
                "read with |attr, which tries attributes first"
                if mode == "attr"
                else ("looked up on a Jinja or Python object")
            )
            self.findings.add(
                T106,
                f"{how} comes from the request and is {where}: the request chooses the attribute",
                line,
                chain=self.chain(name, line, how),
            )

    @staticmethod
    def chain(v: V, line: int | None, how: str) -> tuple[str, ...]:
        return (*v.why, f"line {line}: {how}")

    def check_call(self, node: Any, callee: V) -> None:
        if self.checking and callee.kinds & DYN:
            self.findings.add(
                T106,
                f"{self.path_text(node.node, 3)} is picked by a name from the request and then called: "
                "the request chooses what runs",
                node.lineno,
                chain=self.chain(callee, node.lineno, "called"),
            )

    def check_format(self, node: Any, recv: V, has_args: bool) -> None:
        if not self.checking:
            return
        for c in recv.strings():
            try:
                fields = folding.format_fields(c)
            except ValueError:
                continue
            for field, _spec in fields:
                if "." in field or "[" in field:
                    words = [w for w in re.split(r"[.\[\]]", field) if w]
                    bad = next((w for w in words if is_internal(w)), None)
                    if bad:
                        self.t101_words.add((node.lineno, bad))
                    self.findings.add(
                        T103,
                        f"format string field {{{_cut(field)}}} reads attributes or items of its argument",
                        node.lineno,
                        needle=field,
                        chain=self.chain(recv, node.lineno, "used as a str.format string"),
                    )
        if recv.kinds & (TEXT | OBJ):
            self.findings.add(
                T103,
                f"format string is computed at render time ({_cut(recv.why[0] if recv.why else 'template text')})",
                node.lineno,
                needle="format",
                chain=self.chain(recv, node.lineno, "used as a str.format string"),
            )
        if recv.kinds & (REQ | DYN) and has_args:
            self.findings.add(
                T103,
                "format string comes from the request: the request chooses which attributes of the arguments it reads",
                node.lineno,
                needle="format",
                chain=self.chain(recv, node.lineno, "used as a str.format string"),
            )

    def describe(self, node: Any) -> str:
        text = self.path_text(node, 4)
        if isinstance(node, self.n.Name):
            name = identifier(node.name)
            if name in JINJA_GLOBALS or name == "self":
                return f"{text} (a Jinja global)"
            if name in ("loop", "caller", "varargs", "kwargs"):
                return f"{text} (a Jinja object)"
        return text

    def path_text(self, node: Any, budget: int) -> str:
        n = self.n
        if budget <= 0:
            return "…"
        if isinstance(node, n.Name):
            return _cut(node.name, 30)
        if isinstance(node, n.Getattr):
            return f"{self.path_text(node.node, budget - 1)}.{_cut(node.attr, 30)}"
        if isinstance(node, n.Getitem):
            arg = _show(node.arg.value) if isinstance(node.arg, n.Const) else "…"
            return f"{self.path_text(node.node, budget - 1)}[{arg}]"
        if isinstance(node, n.Call):
            return f"{self.path_text(node.node, budget - 1)}(…)"
        if isinstance(node, n.Filter):
            return f"{self.path_text(node.node, budget - 1)}|{node.name}" if node.node is not None else f"|{node.name}"
        if isinstance(node, n.Const):
            return _show(node.value)
        return "(expression)"

    # ------------------------------------------------------------------ expressions

    def ev(self, node: Any) -> V:
        fn = self._expr.get(type(node))
        v = self.generic(node) if fn is None else fn(node)
        if not v.sites and (v.elems is not None or any(isinstance(c, (list, dict)) for c in v.consts)):
            v = with_sites(v, frozenset({f"n{id(node)}"}))
        return v

    def generic(self, node: Any) -> V:
        """A node the audit has no rule for: evaluate what is inside, assume anything about its value."""
        for child in node.iter_child_nodes():
            if isinstance(child, self.n.Expr):
                self.ev(child)
        return top(f"line {_line(node)}: an expression the audit does not model ({type(node).__name__})")

    def ev_Const(self, node: Any) -> V:
        return V((node.value,))

    def ev_TemplateData(self, node: Any) -> V:
        return V((node.data,))

    def ev_Name(self, node: Any) -> V:
        raw = node.name
        name = identifier(raw)
        key, bound = self.var_key(name)
        assigned = self.get(key)
        if bound:
            return assigned
        first = self.first_set.get(name)
        if first is not None and self.order.get(id(node), -1) >= first:
            return assigned  # read after the template set it: the runtime's value of that name is gone
        free = self.free(name)
        if raw != name:
            free = join(free, self.free(raw))
        return join(assigned, free)

    def free(self, name: str) -> V:
        """The value of a name the template does not assign: a Jinja global, a runtime helper, request or file data."""
        v = self.free_cache.get(name)
        if v is not None:
            return v
        if name in JINJA_GLOBALS:
            v = V((), OBJ, calls=frozenset({name}), why=(f"the Jinja global {name}",))
        elif name == "self":
            v = V((), OBJ, calls=frozenset({"self"}), why=("the template object self",))
        elif name == "loop":
            v = V((), LOOP, calls=frozenset({"loop"}), why=("the loop object",))
        elif name == "caller":
            v = V((), OBJ, calls=frozenset({"caller"}), why=("the caller object",))
        elif name in ("varargs", "kwargs"):
            v = container(self.pooled(("margs", "*")))
        elif name in RUNTIME_HELPERS:
            v = V((), OBJ, calls=frozenset({name}), why=(f"the runtime helper {name}",))
        elif _TOKEN_NAME_RE.search(name):
            v = V((), TEXT, why=(f"{name}: a token's text, chosen by the model file",))
        else:
            v = V((), REQ, why=(f"{name}: data of the request",), sites=frozenset({"req:" + name}))
        if name not in ("varargs", "kwargs"):
            self.free_cache[name] = v
        return v

    def ev_Tuple(self, node: Any) -> V:
        return self.sequence([self.ev(i) for i in node.items], tuple)

    def ev_List(self, node: Any) -> V:
        return self.sequence([self.ev(i) for i in node.items], list)

    def sequence(self, items: list[V], kind_: type) -> V:
        if (
            len(items) <= folding.TEXT_LIMIT
            and all(i.pure() for i in items)
            and math.prod(len(i.consts) for i in items) <= COMBOS
        ):
            return V(tuple(kind_(p) for p in itertools.product(*(i.consts for i in items))))
        return container(join(*items))

    def ev_Dict(self, node: Any) -> V:
        keys = [self.ev(p.key) for p in node.items]
        values = [self.ev(p.value) for p in node.items]
        if len(keys) <= folding.TEXT_LIMIT and all(v.pure() and len(v.consts) == 1 for v in keys + values):
            try:
                return const({k.consts[0]: v.consts[0] for k, v in zip(keys, values, strict=True)})
            except TypeError:  # an unhashable key: the runtime fails too
                pass
        return container(join(*keys, *values))

    def ev_CondExpr(self, node: Any) -> V:
        self.ev(node.test)
        return join(self.ev(node.expr1), self.ev(node.expr2) if node.expr2 is not None else _UNDEF_V)

    def ev_And(self, node: Any) -> V:
        return join(self.ev(node.left), self.ev(node.right))

    ev_Or = ev_And

    def ev_Not(self, node: Any) -> V:
        self.ev(node.node)
        return kind(NUM)

    def ev_Neg(self, node: Any) -> V:
        v = self.ev(node.node)
        if v.pure() and all(isinstance(c, (int, float)) for c in v.consts):
            return V(tuple(-c if type(node).__name__ == "Neg" else +c for c in v.consts))
        return kind(NUM)

    ev_Pos = ev_Neg

    def ev_Compare(self, node: Any) -> V:
        self.ev(node.expr)
        for op in node.ops:
            self.ev(op.expr)
        return kind(NUM)

    def ev_Test(self, node: Any) -> V:
        self.ev(node.node)
        self.call_args(node)
        return kind(NUM)

    def ev_MarkSafe(self, node: Any) -> V:
        return self.ev(node.expr)

    ev_MarkSafeIfAutoescape = ev_MarkSafe

    def ev_Slice(self, node: Any) -> V:
        for part in (node.start, node.stop, node.step):
            if part is not None:
                self.ev(part)
        return kind(NUM)

    # -- operators ---------------------------------------------------------------------------

    def ev_Concat(self, node: Any) -> V:
        return self.binop("~", [self.ev(x) for x in node.nodes], node)

    def ev_Add(self, node: Any) -> V:
        return self.binop("+", [self.ev(node.left), self.ev(node.right)], node)

    def ev_Sub(self, node: Any) -> V:
        return self.binop("-", [self.ev(node.left), self.ev(node.right)], node)

    def ev_Mul(self, node: Any) -> V:
        return self.binop("*", [self.ev(node.left), self.ev(node.right)], node)

    def ev_Div(self, node: Any) -> V:
        return self.binop("/", [self.ev(node.left), self.ev(node.right)], node)

    def ev_FloorDiv(self, node: Any) -> V:
        return self.binop("//", [self.ev(node.left), self.ev(node.right)], node)

    def ev_Mod(self, node: Any) -> V:
        return self.binop("%", [self.ev(node.left), self.ev(node.right)], node)

    def ev_Pow(self, node: Any) -> V:
        return self.binop("**", [self.ev(node.left), self.ev(node.right)], node)

    def binop(self, op: str, parts: list[V], node: Any) -> V:
        """``a op b (op c ...)`` over every way the operands can be: constants folded, the rest by kind."""
        line = _line(node)
        folded: V | None = None
        if all(p.consts for p in parts) and math.prod(len(p.consts) for p in parts) <= COMBOS:
            results = []
            try:
                for combo in itertools.product(*(p.consts for p in parts)):
                    acc = combo[0]
                    if op == "~":
                        acc = folding.fold_binop("~", "", acc)
                    for x in combo[1:]:
                        acc = folding.fold_binop(op, acc, x)
                    results.append(acc)
                folded = V(tuple(results))
                if any(isinstance(r, str) and r[:1] == "_" for r in results):
                    why = max((p.why for p in parts), key=len)
                    folded = folded.but(why=(*why, f"line {line}: {_OPS.get(op, op)} gives {_show(results[0])}"))
            except Exception:  # Unfoldable, or the operation fails as it would at render time
                folded = None
            if folded is not None and all(p.pure() for p in parts):
                return folded
        return join(folded, self.binop_kinds(op, parts, line, True))

    def binop_kinds(self, op: str, parts: list[V], line: int | None, with_consts: bool) -> V:
        """The result of an operator from what its operands are made of (their constants included when
        ``with_consts``): Python's operators on numbers, text and containers, anything for objects."""
        what = f"line {line}: {_OPS.get(op, op)}"
        if any(p.kinds & (OBJ | DYN | NS | LOOP) or p.calls or p.methods for p in parts):
            return top(f"{what} of an object")
        number = all(self.may_be_number(p) for p in parts)
        if op in ("-", "/", "//", "**"):
            if op == "-" and self.may_be_container(parts[0]):  # dict views and sets subtract
                return join(kind(NUM), container(self.elements(parts[0])))
            return kind(NUM)
        if op == "~":
            return self.text_of(parts, what, with_consts)
        out: list[V | None] = [kind(NUM) if number else None]
        if op == "+":  # number + number, text + text, list + list
            if all(self.may_be_container(p) for p in parts):
                out.append(container(join(*(self.elements(p) for p in parts))))
            if all(self.may_be_text(p) for p in parts):
                out.append(self.text_of(parts, what, with_consts))
            return join(*out)
        if op == "*":  # repetition: a text or a list times a number keeps what it is made of
            if any(self.may_be_number(p) for p in parts):
                lists = [p for p in parts if self.may_be_container(p)]
                if lists:
                    out.append(container(join(*(self.elements(p) for p in lists))))
                texts = [p for p in parts if self.may_be_text(p)]
                if texts:
                    out.append(self.text_of(texts, what, with_consts))
            return join(*out)
        if op == "%":  # printf formatting; a number modulo a number
            if self.may_be_text(parts[0]):
                args = [parts[1], self.elements(parts[1])] if self.may_be_container(parts[1]) else [parts[1]]
                out.append(self.text_of([parts[0], *args], what, with_consts))
            return join(*out)
        return top(what)  # pragma: no cover - every operator is listed

    def text_of(self, parts: list[V], what: str, with_consts: bool) -> V:
        """Text made by joining the text of ``parts``: request text stays request text (with numbers'
        digits), anything with template text in it is unknown text."""
        kinds = 0
        for p in parts:
            kinds |= p.kinds
            if p.elems is not None:
                kinds |= TEXT  # a container's repr: brackets and quotes the template added
            if with_consts and any(p.strings()):
                kinds |= TEXT
        if kinds & TEXT:
            worst = max(parts, key=lambda p: (bool(p.kinds & TEXT), len(p.why)))
            return V((), TEXT, why=(*worst.why, what)[-12:])
        out = 0
        if kinds & (REQ | DYN):
            out |= REQ
        elif kinds & NUM or with_consts:
            out |= NUM
        if not out:
            return BOT
        src = next((p for p in parts if p.kinds & (REQ | DYN)), parts[0])
        return V((), out, why=src.why)

    @staticmethod
    def may_be_number(v: V) -> bool:
        return bool(v.kinds & (NUM | REQ | TEXT | OBJ)) or any(
            c is None or isinstance(c, (int, float)) for c in v.consts
        )

    @staticmethod
    def may_be_text(v: V) -> bool:
        return bool(v.kinds & (REQ | TEXT | OBJ | DYN)) or any(isinstance(c, (str, bytes)) for c in v.consts)

    @staticmethod
    def may_be_container(v: V) -> bool:
        return may_be_container(v)

    # -- lookups -----------------------------------------------------------------------------

    def mutations(self, v: V) -> V | None:
        """What ``append``/``update``/... may have put in ``v``, were it a container: the changes made through any
        value that may be the same container (the places it may have been made), and through unknown ones."""
        if not may_be_container(v):
            return None
        roots = {site_root(s) for s in v.sites if not s.startswith("key:")}
        if v.kinds & REQ:
            roots.add("req")
        if v.kinds & (TEXT | OBJ | DYN) or "*" in roots:
            return self.pooled(("mut", "**"))  # an unknown object: any container
        return join(self.pooled(("mut", "*")), *(self.pooled(("mut", s)) for s in roots))

    def shuffled(self, v: V) -> bool:
        """A container a mutation may have reordered, shortened or lengthened: its positions mean nothing."""
        roots = {site_root(s) for s in v.sites if not s.startswith("key:")}
        return any(not self.pooled(("shuffled", r)).is_bot() for r in (*roots, "*"))

    def mutate(self, recv: V, added: V) -> None:
        """Record that ``added`` may now be in the containers ``recv`` may be (and that their order changed)."""
        mark = const(True)
        self.pool(("shuffled", "*") if recv.kinds & (TEXT | OBJ | DYN) else ("shuffled", "-"), mark)
        for s in recv.sites:
            if not s.startswith("key:"):
                self.pool(("shuffled", site_root(s)), mark)
        if added.is_bot():
            return
        self.pool(("mut", "**"), added)
        roots = {site_root(s) for s in recv.sites if not s.startswith("key:")}
        if recv.kinds & REQ and not any(r.startswith("req:") for r in roots):
            roots.add("req")
        if recv.kinds & (TEXT | OBJ | DYN) or "*" in roots:
            self.pool(("mut", "*"), added)
            return
        for s in roots:
            self.pool(("mut", s), added)

    def elements(self, v: V, *, item: bool = False) -> V:
        """What iterating ``v`` (or indexing it with an unknown key, ``item=True``) can give."""
        parts: list[V | None] = [v.elems, self.mutations(v)]
        if v.flat:
            parts.append(V(v.consts, v.kinds & ~DYN, flat=True, calls=v.calls, methods=v.methods, why=v.why))
        chars: list[str] = []
        inner = sub_sites(v, "*")
        for c in v.consts:
            if isinstance(c, str):
                if len(c) <= folding.TEXT_LIMIT:
                    chars.extend(dict.fromkeys(c))
                else:
                    parts.append(kind(TEXT, "the characters of a long string"))
            elif isinstance(c, (list, tuple)):
                parts.append(with_sites(candidates(c, "a long constant list"), inner))
            elif isinstance(c, dict):
                parts.append(with_sites(candidates(c.values() if item else c.keys(), "a large constant dict"), inner))
        if chars:
            parts.append(candidates(chars, "the characters of a string"))
        if v.kinds & (REQ | DYN):  # items of request data; iterated, also the keys of a dict
            parts.append(V((), REQ, why=v.why, sites=inner if item else inner | key_sites(v)))
        if v.kinds & (TEXT | OBJ):
            parts.append(V((), v.kinds & (TEXT | OBJ) | (TEXT if v.kinds & OBJ else 0), why=v.why))
        if v.kinds & NUM:
            parts.append(kind(NUM))
        if v.kinds & LOOP:
            parts.append(self.pooled("loop-items"))
        if "range" in v.calls:
            parts.append(kind(NUM))
        return join(*parts)

    def ns_all(self) -> V:
        return self.pooled("ns-any")

    def lookup(self, recv: V, name: str, attr_first: bool) -> V:
        """``recv.name`` (``attr_first``) or ``recv[name]``: Jinja tries one, then the other."""
        parts: list[V | None] = [self.mutations(recv)]
        if recv.kinds & LOOP:
            if name in LOOP_NUMBERS:
                parts.append(kind(NUM, f"loop.{name} (a number)"))
            elif name in ("previtem", "nextitem"):
                parts.append(self.pooled("loop-items"))
            elif name in ("cycle", "changed"):
                parts.append(V(methods=((name, kind(LOOP)),)))
            else:
                parts.append(text(f"an attribute of the loop object ({name})", obj=True))
        if recv.kinds & NS:
            parts.append(self.get(("ns", name)))
            parts.append(self.ns_all())
        for c in recv.consts:
            parts.append(self.const_lookup(c, name, attr_first, recv.sites))
        if recv.elems is not None:
            parts.append(recv.elems)
            if name in _PLAIN_METHODS:
                parts.append(V(methods=((name, container(recv.elems)),)))
        if recv.kinds & REQ:
            parts.append(V((), REQ, why=recv.why, sites=sub_sites(recv, name)))
            if name in _PLAIN_METHODS:
                parts.append(V(methods=((name, V((), REQ, why=recv.why, sites=recv.sites)),)))
        if recv.kinds & TEXT and name in _PLAIN_METHODS:
            parts.append(V(methods=((name, V((), TEXT, why=recv.why)),)))
        if recv.kinds & (OBJ | DYN):  # an attribute the template names of an object: not picked by the request
            parts.append(
                V(
                    (),
                    TEXT | OBJ,
                    methods=((name, V((), OBJ | TEXT, why=recv.why)),),
                    why=(*recv.why, f"its attribute {name}")[-12:],
                )
            )
        if recv.kinds & NUM and name in ("real", "imag", "numerator", "denominator"):
            parts.append(kind(NUM))
        elif recv.kinds & NUM and not name.startswith("_"):
            parts.append(V(methods=((name, kind(NUM)),)))
        if recv.flat:  # its items are like itself; but a name the template wrote picks nothing the request chose
            parts.append(V(recv.consts, recv.kinds & ~DYN, flat=True, why=recv.why))
        for target in recv.calls:
            parts.append(self.callable_attr(target, name))
        for mname, _ in recv.methods:  # a bound method of plain data has no attribute without underscores
            parts.append(_UNDEF_V if not name.startswith("_") else top(f"an attribute of the method {mname}"))
        return join(*parts)

    def const_lookup(self, c: Any, name: str, attr_first: bool, sites: frozenset[str] = frozenset()) -> V:
        if isinstance(c, dict):
            has_attr = hasattr(dict, name)
            if name in c and not (attr_first and has_attr):
                return V((c[name],), sites=sub_sites(V(sites=sites), name))
            if has_attr and not name.startswith("_"):
                return V(methods=((name, V((c,), sites=sites)),))
            return _UNDEF_V
        if c is UNDEF or c is None:
            return _UNDEF_V
        if isinstance(c, (int, float)) and name in ("real", "imag", "numerator", "denominator"):
            return const(getattr(c, name))
        if not name.startswith("_") and callable(getattr(type(c), name, None)):
            return V(methods=((name, V((c,), sites=sites)),))
        return _UNDEF_V

    def callable_attr(self, target: str, name: str) -> V:
        """An attribute of a Jinja callable: a macro's name and arguments are constants of the template."""
        if target.startswith("macro:") and name in _MACRO_ATTRS:
            defs = self.macros.get(target[6:], [])
            if name == "name":
                return V(tuple(d.name for d in defs))
            if name == "arguments":
                return V(tuple(tuple(a.name for a in d.args) for d in defs))
            if name == "defaults":
                return container(join(*(self.ev(x) for d in defs for x in d.defaults)))
            return kind(NUM)
        if target == "self":
            return V((), OBJ, calls=frozenset({"block"}), why=(f"the block {name} of self",))
        if target == "loop":
            return BOT  # the loop object's attributes are its own (see lookup)
        if target == "cycler-object" and name in ("next", "current"):
            return V((), OBJ, calls=frozenset({"cycler-next"}))
        return text(f"an attribute of a Jinja object ({target})", obj=True)

    def ev_Getattr(self, node: Any) -> V:
        recv = self.ev(node.node)
        self.check_lookup(
            node, const(node.attr), recv, f"attribute {node.attr!r} of {self.describe(node.node)}", "attr"
        )
        out = self.lookup(recv, node.attr, True)
        if out.calls & {"cycler-next"}:
            out = V((), OBJ, calls=out.calls, elems=recv.elems)
        return out

    def ev_Getitem(self, node: Any) -> V:
        recv = self.ev(node.node)
        if isinstance(node.arg, self.n.Slice):
            parts = [
                self.ev(p) if p is not None else const(None) for p in (node.arg.start, node.arg.stop, node.arg.step)
            ]
            return self.sliced(recv, parts)
        key = self.ev(node.arg)
        self.check_lookup(node.arg, key, recv, f"the item name in {self.path_text(node, 3)}", "item")
        return self.item_value(recv, key, node)

    def sliced(self, recv: V, parts: list[V]) -> V:
        if recv.pure() and all(p.pure() for p in parts):
            out = []
            try:
                for c in recv.consts:
                    for s in itertools.product(*(p.consts for p in parts)):
                        folding.check_args(s)
                        out.append(folding.plain(c[slice(*s)]))
                if len(out) <= COMBOS:
                    return V(tuple(out), why=recv.why)
            except Exception:
                pass
            return kind(TEXT, "slicing")
        # slicing a list keeps its elements; slicing text gives pieces of that text
        return join(
            container(self.elements(recv)) if self.may_be_container(recv) else None,
            V((), TEXT, why=(*recv.why, "a slice of it")[-12:])
            if (recv.kinds & (TEXT | OBJ) or recv.strings())
            else None,
            V((), recv.kinds & (REQ | DYN | NUM), why=recv.why) if recv.kinds & (REQ | DYN | NUM) else None,
            top("a slice of an object") if recv.kinds & (OBJ | DYN) else None,
        )

    def item_value(self, recv: V, key: V, node: Any) -> V:
        parts: list[V | None] = [self.mutations(recv)]
        if recv.pure() and key.pure() and self.shuffled(recv):  # positions moved: any of its items
            return join(*parts, self.elements(recv, item=True))
        if recv.pure() and key.pure():
            for c in recv.consts:
                for k in key.consts:
                    try:
                        if isinstance(c, dict) and k in c:
                            parts.append(const(c[k]))
                            continue
                        if isinstance(c, (list, tuple, str)) and isinstance(k, int) and not isinstance(k, bool):
                            parts.append(const(c[k]))
                            continue
                    except (IndexError, TypeError, KeyError):
                        continue
                    if isinstance(k, str):
                        parts.append(self.const_lookup(c, k, False))
            out = join(*parts)
            return out.but(why=(*recv.why, f"line {node.lineno}: an item of it")[-12:]) if recv.why else out
        for k in key.consts:
            if isinstance(k, str):
                parts.append(self.lookup(recv, k, False))
        if key.kinds or key.elems is not None or key.flat or any(not isinstance(k, str) for k in key.consts):
            parts.append(self.elements(recv, item=True))
        proven_key = (
            bool(key.sites)
            and not key.kinds & DYN
            and all(s.startswith("key:") and s[4:] in recv.sites for s in key.sites)
        )
        if (
            key.kinds & (REQ | DYN)
            and not proven_key
            and (recv.kinds & (REQ | TEXT | NUM) or recv.elems is not None or recv.consts)
        ):
            parts.append(V((), DYN, why=(*key.why, f"line {node.lineno}: picks {self.path_text(node, 3)}")[-12:]))
        if key.kinds & (TEXT | OBJ) or key.flat:
            parts.append(top(f"line {node.lineno}: an item picked by a computed name"))
        return join(*parts)

    # -- calls -------------------------------------------------------------------------------

    def call_args(self, node: Any) -> tuple[list[V], list[tuple[str, V]], V | None, V | None]:
        args = [self.ev(a) for a in node.args]
        kwargs = [(identifier(k.key), self.ev(k.value)) for k in node.kwargs]
        dyn_a = self.ev(node.dyn_args) if node.dyn_args is not None else None
        dyn_k = self.ev(node.dyn_kwargs) if node.dyn_kwargs is not None else None
        return args, kwargs, dyn_a, dyn_k

    def spread(self, dyn_a: V | None, dyn_k: V | None) -> V:
        """Everything ``*args`` / ``**kwargs`` can hand over: elements, keys and values."""
        return join(
            self.elements(dyn_a) if dyn_a is not None else None,
            self.elements(dyn_a, item=True) if dyn_a is not None else None,
            self.elements(dyn_k) if dyn_k is not None else None,
            self.elements(dyn_k, item=True) if dyn_k is not None else None,
        )

    def ev_Call(self, node: Any) -> V:
        callee = self.ev(node.node)
        args, kwargs, dyn_a, dyn_k = self.call_args(node)
        self.check_call(node, callee)
        results: list[V | None] = []
        for target in sorted(callee.calls):
            results.append(self.call_known(target, callee, node, args, kwargs, dyn_a, dyn_k))
        for name, recv in callee.methods:
            results.append(self.call_method(node, name, recv, args, kwargs, dyn_a, dyn_k))
        if (callee.kinds & (OBJ | DYN | TEXT) and not callee.calls and not callee.methods) or callee.kinds & DYN:
            results.append(top(f"line {node.lineno}: what calling {self.path_text(node.node, 3)} returns"))
        return join(*results)

    def call_known(
        self,
        target: str,
        callee: V,
        node: Any,
        args: list[V],
        kwargs: list[tuple[str, V]],
        dyn_a: V | None,
        dyn_k: V | None,
    ) -> V:
        extra = self.spread(dyn_a, dyn_k) if (dyn_a is not None or dyn_k is not None) else BOT
        everything = join(*args, *(v for _, v in kwargs), extra)
        line = node.lineno
        if target.startswith("macro:") or target == "*":
            name = target[6:] if target != "*" else "*"
            if name == "*":
                self.pool(("margs", "*"), everything.step(f"line {line}: passed to a callable the audit cannot name"))
                return top(f"line {line}: what a callable the audit cannot name returns")
            for i, a in enumerate(args):
                self.pool(("margs", name, i), a.step(f"line {line}: argument {i + 1} of {name}(…)"))
                self.pool(("margs", name, "extra"), a.step(f"line {line}: argument {i + 1} of {name}(…)"))
            for k, v in kwargs:
                self.pool(("margs", name, "kw", k), v.step(f"line {line}: argument {k}= of {name}(…)"))
                self.pool(("margs", name, "kwextra"), join(const(k), v))
            if not extra.is_bot():
                self.pool(("margs", name, "spread"), extra.step(f"line {line}: spread into {name}(…)"))
            return text(f"line {line}: the output of macro {name}")
        if target == "range":
            return V(elems=kind(NUM), why=(f"line {line}: range()",))
        if target == "dict":
            if not args and dyn_a is None and dyn_k is None and all(v.pure() and len(v.consts) == 1 for _, v in kwargs):
                return const({k: v.consts[0] for k, v in kwargs})
            return container(
                join(
                    V(tuple(k for k, _ in kwargs)),
                    *(v for _, v in kwargs),
                    *(self.elements(a) for a in args),
                    *(self.elements(self.elements(a)) for a in args),
                    extra,
                )
            )
        if target == "namespace":
            for k, v in kwargs:
                self.put(("ns", k), v.step(f"line {line}: namespace({k}=…)"))
            if args or not extra.is_bot():
                self.pool(
                    "ns-any",
                    join(*(self.elements(a) for a in args), *(self.elements(a, item=True) for a in args), extra),
                )
            return kind(NS)
        if target == "caller":
            self.pool("caller-args", everything.step(f"line {line}: passed to caller()"))
            return text(f"line {line}: the output of a {{% call %}} block")
        if target == "loop":
            self.pool("loop-recursion", join(*args, extra))
            return text(f"line {line}: the output of a recursive loop")
        if target == "raise_exception":
            return BOT
        if target == "cycler":
            return V((), OBJ, calls=frozenset({"cycler-object"}), elems=everything if not everything.is_bot() else None)
        if target == "cycler-next":
            return callee.elems if callee.elems is not None else BOT
        if target == "joiner":
            sep = args[0] if args else const(", ")
            return V((), OBJ, calls=frozenset({"joined"}), elems=join(sep, const(""), kwargs[0][1] if kwargs else None))
        if target == "joined":
            return callee.elems if callee.elems is not None else const("")
        if target == "strftime_now":
            fmt = args[0] if args else BOT
            if fmt.pure() and all(isinstance(c, str) and "%" not in c for c in fmt.consts):
                return fmt
            return text(f"line {line}: the text strftime_now() returns")
        if target == "lipsum":
            return text(f"line {line}: lipsum() text")
        if target == "block":
            return text(f"line {line}: the output of a block")
        if target in ("self", "cycler-object", "loop-object"):
            return top(f"line {line}: calling a Jinja object")
        return top(f"line {line}: the result of {target}()")

    def call_method(
        self,
        node: Any,
        name: str,
        recv: V,
        args: list[V],
        kwargs: list[tuple[str, V]],
        dyn_a: V | None,
        dyn_k: V | None,
    ) -> V:
        line = node.lineno
        extra = self.spread(dyn_a, dyn_k) if (dyn_a is not None or dyn_k is not None) else BOT
        everything = join(*args, *(v for _, v in kwargs), extra)
        if name in ("format", "format_map"):
            self.check_format(node, recv, bool(args or kwargs or dyn_a is not None or dyn_k is not None))
        if name in M_KEYS and (args or not extra.is_bot()):
            key = join(args[0] if args else None, extra)
            self.check_lookup(node.args[0] if node.args else node, key, recv, f"the key of .{name}()", "key")
        if name in MUTATORS:
            added = join(
                *(self.elements(a) for a in args if name in ("extend", "update")),
                *(self.elements(a, item=True) for a in args if name == "update"),
                *(args if name not in ("extend", "update") else ()),
                *(v for _, v in kwargs),
                V(tuple(k for k, _ in kwargs)) if kwargs else None,
                extra,
            )
            self.mutate(recv, added.step(f"line {line}: .{name}() puts it in a container"))
        if recv.kinds & LOOP and name == "cycle":
            return everything
        if recv.kinds & LOOP and name == "changed":
            return kind(NUM)
        if recv.consts and not recv.pure():  # fold the constants, reason about the rest
            known, rest = recv.split()
            return join(
                self.call_method(node, name, known, args, kwargs, dyn_a, dyn_k),
                self.call_method(node, name, rest, args, kwargs, dyn_a, dyn_k),
            )
        if recv.pure() and all(a.pure() for a in args) and all(v.pure() for _, v in kwargs) and extra.is_bot():
            out = []
            try:
                for c in recv.consts:
                    for combo in itertools.product(*(a.consts for a in args)):
                        for kcombo in itertools.product(*(v.consts for _, v in kwargs)):
                            out.append(
                                folding.fold_method(
                                    c, name, list(combo), dict(zip((k for k, _ in kwargs), kcombo, strict=True))
                                )
                            )
                            if len(out) > COMBOS:
                                raise folding.Unfoldable
                result = V(tuple(out))
                if any(isinstance(r, str) and r[:1] == "_" for r in out):
                    result = result.but(why=(*recv.why, f"line {line}: .{name}() gives {_show(out[0])}"))
                return result
            except folding.Unfoldable:
                pass
        return self.method_kinds(node, name, recv, args, everything)

    def method_kinds(self, node: Any, name: str, recv: V, args: list[V], everything: V) -> V:
        """A method's result from what its receiver and arguments are made of."""
        line = node.lineno
        what = f"line {line}: .{name}()"
        if recv.kinds & (OBJ | DYN) or recv.flat or recv.calls or recv.methods:
            return top(f"{what} of an object")
        material = everything.material()
        parts: list[V | None] = []
        strings = recv.strings()
        # the text this receiver stands for: request text, numbers' digits, or template text
        text_kinds = recv.kinds & (REQ | NUM | TEXT) | (TEXT if strings else 0)
        if name in M_NUMBER:
            return kind(NUM)
        if name in M_PIECES:  # pieces of the receiver's own text (partition also gives back its separator)
            piece = V((), text_kinds, why=(*recv.why, what)[-12:]) if text_kinds else BOT
            if name in ("partition", "rpartition"):
                piece = join(piece, *args)
            parts.append(container(piece) if name in M_SPLITS else piece)
        elif name in M_TEXT:
            kinds = text_kinds | everything.kinds & (REQ | NUM | TEXT) | (TEXT if material else 0)
            if kinds & TEXT or (name in ("format", "format_map") and everything.kinds & (OBJ | DYN)):
                parts.append(V((), TEXT, why=(*recv.why, what)[-12:]))
            else:
                parts.append(V((), kinds & (REQ | NUM), why=recv.why))
        elif name in ("keys", "values", "items", "copy"):  # only dicts have keys(), values() and items()
            keys = with_sites(self.elements(recv), key_sites(recv)) if recv.kinds & REQ else self.elements(recv)
            values = self.elements(recv, item=True)
            if name == "items":
                parts.append(container(join(keys, values, container(join(keys, values)))))
            else:
                parts.append(container(keys if name == "keys" else values if name == "values" else join(keys, values)))
        elif name in ("get", "pop", "setdefault", "popitem"):
            parts.append(self.elements(recv, item=True))
            if name == "popitem":
                parts.append(container(join(self.elements(recv), self.elements(recv, item=True))))
            parts.append(args[1] if len(args) > 1 else const(None))
        elif name in MUTATORS:
            parts.append(const(None))
        elif recv.kinds & NUM and name in ("to_bytes", "from_bytes"):
            parts.append(text(f"{what} turns a number into bytes"))
        else:
            parts.append(top(f"{what}, a method the audit does not model"))
        return join(*parts)

    # -- filters -----------------------------------------------------------------------------

    def ev_Filter(self, node: Any) -> V:
        if node.node is None:
            recv = self.block_value[-1] if self.block_value else kind(TEXT, "block output")
        else:
            recv = self.ev(node.node)
        args, kwargs, dyn_a, dyn_k = self.call_args(node)
        return self.apply_filter(node, node.name, recv, args, dict(kwargs), dyn_a, dyn_k)

    def apply_filter(
        self,
        node: Any,
        name: str,
        recv: V,
        args: list[V],
        kwargs: dict[str, V],
        dyn_a: V | None,
        dyn_k: V | None,
        depth: int = 0,
    ) -> V:
        line = node.lineno
        extra = self.spread(dyn_a, dyn_k) if (dyn_a is not None or dyn_k is not None) else None
        what = f"line {line}: |{name}"
        # -- names this filter looks up ----------------------------------------------------------
        if name == "attr":
            target = join(args[0] if args else kwargs.get("name"), extra)
            self.check_lookup(node, target, recv, "the attribute name of |attr", "attr")
            return join(
                *(self.lookup(recv, c, True) for c in target.strings()),
                top(f"{what} with a name not known in advance") if (target.kinds or target.flat) else None,
            )
        if extra is not None and name in ("map", "select", "reject", "selectattr", "rejectattr", *ATTRIBUTE_PARAMS):
            self.check_lookup(node, extra, self.elements(recv), f"a name spread into |{name}", "path")
        if name == "map" and args:
            fname = args[0]
            if self.checking and (fname.kinds or fname.flat):
                if fname.kinds & (TEXT | OBJ) or fname.flat:
                    self.findings.add(
                        T102,
                        f"the filter name of |map is computed at render time ({_cut(fname.why[0] if fname.why else 'template text')})",
                        line,
                        chain=self.chain(fname, line, "the filter name of |map"),
                    )
                if fname.kinds & (REQ | DYN):
                    self.findings.add(
                        T106,
                        "the filter name of |map comes from the request: the request chooses the filter (attr...)",
                        line,
                        chain=self.chain(fname, line, "the filter name of |map"),
                    )
            results = []
            for c in fname.strings():
                if depth < 3:
                    results.append(
                        self.apply_filter(node, c, self.elements(recv), args[1:], kwargs, dyn_a, dyn_k, depth + 1)
                    )
            if fname.kinds or fname.flat:
                results.append(top(f"{what} with a filter chosen at render time"))
            return container(join(*results))
        spec = ATTRIBUTE_PARAMS.get(name)
        attribute: V | None = None
        if spec is not None:
            pos, kw = spec
            if pos is not None and len(args) > pos:
                attribute = args[pos]
            elif kw is not None and kw in kwargs:
                attribute = kwargs[kw]
            if attribute is not None:
                self.check_lookup(node, attribute, self.elements(recv), f"the attribute of |{name}", "path")
        # -- what the result is made of ----------------------------------------------------------
        if attribute is None and name in folding.FOLD_FILTERS and extra is None:
            if recv.consts and not recv.pure():
                known, rest = recv.split()
                return join(
                    self.apply_filter(node, name, known, args, kwargs, dyn_a, dyn_k, depth),
                    self.apply_filter(node, name, rest, args, kwargs, dyn_a, dyn_k, depth),
                )
            if recv.pure() and all(a.pure() for a in args) and all(v.pure() for v in kwargs.values()):
                folded = self.fold_filter(name, recv, args, kwargs, line)
                if folded is not None:
                    return folded
        if name == "map":
            if attribute is not None:
                return container(self.attr_path_value(self.elements(recv), attribute, line))
            return container(self.elements(recv))
        if name in F_NUMBER:
            return kind(NUM)
        if attribute is not None and name in ("sum", "join", "groupby"):
            looked_up = self.attr_path_value(self.elements(recv), attribute, line)
            if name == "join":
                sep = args[0] if args else kwargs.get("d", const(""))
                return self.text_of([looked_up, sep], what, True)
            if name == "groupby":
                return container(join(looked_up, self.elements(recv), container(self.elements(recv))))
            return join(looked_up, args[1] if len(args) > 1 else kwargs.get("start"))
        if name in F_ELEMENT:
            return self.elements(recv)
        if name in ("default", "d"):
            return join(recv, args[0] if args else kwargs.get("default_value", const("")))
        if name in F_SAME:
            return container(self.elements(recv))
        if name == "reverse":
            return join(
                container(self.elements(recv)) if self.may_be_container(recv) else None,
                self.text_filter(recv, [], kwargs, what) if self.may_be_text(recv) else None,
            )
        if name in F_NESTED:
            fill = args[1] if len(args) > 1 else kwargs.get("fill_with")
            return container(container(join(self.elements(recv), fill)))
        if name in F_PAIRS:
            inner = join(self.elements(recv), self.elements(recv, item=True))
            return container(join(inner, container(inner)))
        if name == "join":
            sep = args[0] if args else kwargs.get("d", const(""))
            return self.text_of([self.elements(recv), sep], what, True)
        if name == "sum":
            return join(self.elements(recv), args[1] if len(args) > 1 else kwargs.get("start", const(0)))
        if name == "groupby":
            return container(join(self.elements(recv), container(self.elements(recv))))
        if name in F_TEXT:
            return self.text_filter(recv, args, kwargs, what)
        if name == "from_json":  # runtimes' JSON parser: request text gives request data, other text unknown data
            parsed = self.text_filter(recv, [], {}, what)
            return join(parsed, container(parsed), kind(NUM))
        if name == "random":
            return self.elements(recv)
        # a filter the audit does not know (a runtime may add its own): anything
        return top(f"{what}, a filter the audit does not model")

    def text_filter(self, recv: V, args: list[V], kwargs: dict[str, V], what: str) -> V:
        """A text filter's result: request text or numbers' digits stay so when the arguments add no template text."""
        if recv.kinds & (OBJ | DYN) or recv.flat or recv.calls or recv.methods:
            return V((), TEXT, why=(*recv.why, f"{what} of an object")[-12:])
        material = any(a.material() for a in args) or any(v.material() for v in kwargs.values())
        kinds = recv.kinds & (REQ | NUM | TEXT) | (TEXT if recv.strings() or recv.elems is not None else 0)
        if recv.consts and not recv.strings():
            kinds |= NUM  # numbers, None, undefined: digits
        if material or kinds & TEXT:
            return V((), TEXT, why=(*recv.why, what)[-12:])
        return V((), kinds, why=recv.why) if kinds else BOT

    def attr_path_value(self, items: V, attribute: V, line: int | None) -> V:
        out: list[V] = []
        for c in attribute.consts:
            if isinstance(c, str):
                v = items
                for part in c.split("."):
                    v = self.lookup(v, part, False) if not part.isdigit() else self.elements(v, item=True)
                out.append(v)
            elif isinstance(c, int):
                out.append(self.elements(items, item=True))
        if attribute.kinds or attribute.flat or not attribute.consts:
            out.append(self.elements(items, item=True))
            if attribute.kinds & (REQ | DYN):
                out.append(kind(DYN, f"line {line}: an attribute parameter from the request"))
            if attribute.kinds & (TEXT | OBJ) or attribute.flat:
                out.append(top(f"line {line}: an attribute path computed at render time"))
        return join(*out)

    def fold_filter(self, name: str, recv: V, args: list[V], kwargs: dict[str, V], line: int | None) -> V | None:
        env = fold_environment()
        out = []
        try:
            for c in recv.consts:
                for combo in itertools.product(*(a.consts for a in args)):
                    for kcombo in itertools.product(*(v.consts for v in kwargs.values())):
                        out.append(
                            folding.fold_filter(env, name, c, list(combo), dict(zip(kwargs, kcombo, strict=True)))
                        )
                        if len(out) > COMBOS:
                            return None
        except Exception:
            return None
        result = V(tuple(out), why=recv.why)
        if any(isinstance(r, str) and r[:1] == "_" for r in out):
            result = result.step(f"line {line}: |{name} gives {_show(out[0])}")
        return result


_OPS = {"~": "'~' concatenation", "+": "'+'", "*": "'*' repetition", "%": "'%' formatting", "-": "'-'"}
_RUNNERS = frozenset(
    {"popen", "Popen", "system", "check_output", "check_call", "getoutput", "getstatusoutput", "import_module"}
)


def text(why: str, *, obj: bool = False) -> V:
    return V((), TEXT | (OBJ if obj else 0), why=(why,))


def _cut(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


#: Words a string literal or identifier must not spell (GGUF-T104); dunders are matched by shape.
_LITERAL_WORDS = INTERNAL_NAMES | {"popen", "Popen", "check_output", "getoutput", "import_module"}
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


def alarm_words(text_: str) -> list[str]:
    """The words of ``text_`` that spell an internal name (GGUF-T104)."""
    if "_" not in text_ and "mro" not in text_ and "open" not in text_ and "getoutput" not in text_:
        return []
    return [
        w
        for w in _WORD_RE.findall(text_)
        if w in _LITERAL_WORDS or (len(w) > 4 and w.startswith("__") and w.endswith("__") and w[2:-2] in _DUNDER_WORDS)
    ]


def iter_units(a: Analysis) -> Iterator[Unit]:  # for debugging
    return iter(a.units)
