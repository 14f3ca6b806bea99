"""The abstract interpreter: every name a template can look up, proven safe or reported, soundly.

:class:`Analysis` interprets a parsed template over :mod:`.values`. Its one rule: **what is not
modelled exactly is anything**. Every node type, filter, test, global and method has its rule in
this module's tables (:data:`FILTERS`, :data:`STR_METHODS` ...); a node, filter, method or receiver
outside them evaluates to :data:`~.values.TOP`, never to something small. So every abstract value
covers every concrete value a render can make (the argument is written out in docs/audit.md, and
the containment oracle in the test-suite checks it on generated templates and inputs).

The interpretation is flow-insensitive: every assignment of a variable joins into it, loop, macro,
call-block and with-block variables are scoped to their binder, and the containers the template
makes are summarised per place of creation (a *site*): a mutation through any alias reaches the
one summary. Mutations of request data, and of containers the audit cannot name, pollute every
read that could see them. It is solved as a system of units (each statement-level expression is
one; a unit that reads a state key is evaluated again when that key grows); values are finite
(constants are capped, sites are nodes), so the solution is reached in a bounded number of steps.
A last pass over the solved state runs the checks.

A name (``x.name``, ``x[name]``, ``|attr``, the attribute parameters of ``map``, ``selectattr``,
``sort``, ``groupby``, ``sum``, ``unique``, ``min``, ``max``, ``join``, the filter and test names
given to ``map``, ``select``, ``reject``, and the keys of ``.get``, ``.pop``, ``.setdefault``) is
accepted only when every text it may be is a constant that names no internal of the receiver, or
text the request chose looked up as an item of plain data. Under the interpretation, a syntactic
floor reports what no real template writes whatever the interpretation says: a name position
holding an expression that builds text, a call of a value that is not a name or a method, a
``str.format`` whose format string is not a literal.
"""

from __future__ import annotations

import itertools
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from . import folding
from .jinja import identifier, target_names
from .rules import Findings, rule
from .values import (
    BOT,
    CALLER,
    DYN,
    NUM,
    RANGE,
    REQ,
    STR,
    SUSPECTS,
    TOP,
    UNDEF,
    Atom,
    V,
    atom,
    const_atom,
    is_internal,
    is_plain_internal,
    join,
    number,
    of,
    strip_strings,
    text,
    top,
)

__all__ = ["T101", "T102", "T103", "T104", "T106", "T201", "Analysis", "AnalysisOverBudget", "alarm_words"]

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
    "An attribute, item or filter name is not proven safe, or a value that is not proven callable is called: the "
    "name is made at render time from template or model-file material (string building, stringified objects, "
    "macro or block output, special-token text, numbers or booleans turned to text, values of operations the "
    "audit does not model exactly) in a way that cannot be shown to be harmless, or the expression is one no "
    "real template writes (text built in a name position, a call of a computed value). Real chat templates use "
    "constant names or names taken from the request, and call names and methods.",
)
T103 = rule(
    "GGUF-T103",
    "error",
    "format-fields",
    "str.format or format_map runs with a format string whose fields read attributes or items ({0.__class__}, "
    "{0[key]}), or whose format string is not a literal of the template: format strings walk Python objects.",
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

COMBOS = 64  # combinations of constants an operation is folded over
TICK = 64  # expressions evaluated between two looks at the clock

JINJA_GLOBALS = frozenset({"range", "dict", "lipsum", "cycler", "joiner", "namespace"})
RUNTIME_HELPERS = frozenset({"raise_exception", "strftime_now"})
LOOP_NUMBERS = frozenset({"index", "index0", "revindex", "revindex0", "length", "depth", "depth0", "first", "last"})
_TOKEN_NAME_RE = re.compile(r"(^|_)tokens?$")

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
#: filters whose result is text (whatever they are given): str or Markup
F_TEXT = frozenset(
    {"safe", "e", "escape", "forceescape", "trim", "striptags", "lower", "upper", "title", "capitalize", "string"}
    | {"truncate", "wordwrap", "indent", "center", "urlencode", "tojson", "pprint", "urlize", "xmlattr", "replace"}
    | {"format", "filesizeformat", "join"}
)
#: filters whose result is a number (or an error)
F_COUNT = frozenset({"length", "count", "wordcount"})
#: filters whose result is one element of the receiver
F_ELEMENT = frozenset({"first", "last", "random", "min", "max"})
#: filters whose result is a new list of (some of) the receiver's elements
F_SAME = frozenset({"list", "sort", "unique", "select", "reject", "selectattr", "rejectattr"})
#: Jinja's builtin tests (their result is a boolean)
TESTS = frozenset(
    {"boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter", "float"}
    | {"ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne"}
    | {"none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper", "=="}
    | {"!=", ">", ">=", "<", "<="}
)
#: every filter this module models (map's and the block filters' names are checked against it)
FILTERS = (
    F_TEXT
    | F_COUNT
    | F_ELEMENT
    | F_SAME
    | {"attr", "map", "default", "d", "int", "float", "abs", "round", "reverse", "batch", "slice", "dictsort"}
    | {"items", "sum", "groupby", "selectattr", "rejectattr", "list", "from_json"}
)

# -- methods by receiver type ---------------------------------------------------------------------
M_STR_NUMBER = frozenset(
    {"startswith", "endswith", "find", "rfind", "index", "rindex", "count", "isdigit", "isalpha", "isalnum"}
    | {"isspace", "islower", "isupper", "istitle", "isnumeric", "isdecimal", "isidentifier", "isascii"}
    | {"isprintable"}
)
M_STR_TEXT = frozenset(
    {"upper", "lower", "title", "capitalize", "casefold", "swapcase", "strip", "lstrip", "rstrip", "replace"}
    | {"center", "ljust", "rjust", "zfill", "expandtabs", "removeprefix", "removesuffix", "join", "format"}
    | {"format_map", "translate", "encode", "escape", "unescape", "striptags"}
)
M_STR_SPLIT = frozenset({"split", "rsplit", "splitlines", "partition", "rpartition"})
M_LIST = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "index", "count", "copy"}
)
M_DICT = frozenset(
    {"get", "pop", "setdefault", "popitem", "keys", "values", "items", "update", "clear", "copy", "fromkeys"}
)
M_NUMBER = frozenset({"bit_length", "bit_count", "conjugate", "is_integer", "hex", "as_integer_ratio", "to_bytes"})
M_KEYS = frozenset({"get", "pop", "setdefault"})
#: attribute names of plain types that are methods (looked up on plain data, they give the method)
_PLAIN_METHODS = frozenset(n for t in (str, list, dict, bytes, int, float) for n in dir(t) if not n.startswith("_"))
_STR_ATTRS = frozenset(n for n in dir(str) if not n.startswith("_")) | {"escape", "unescape", "striptags"}
_LIST_ATTRS = frozenset(n for n in dir(list) if not n.startswith("_"))
_DICT_ATTRS = frozenset(n for n in dir(dict) if not n.startswith("_"))
_NUM_ATTRS = frozenset(n for t in (int, float) for n in dir(t) if not n.startswith("_"))
_NUM_VALUES = frozenset({"real", "imag", "numerator", "denominator"})

#: filters the syntactic floor lets stand in a name position (the interpretation judges their result)
#: Jinja globals and runtime helpers that are plain functions (their attributes are dunders only)
_FUNCTIONS = frozenset({"lipsum", "raise_exception", "strftime_now"})  # range is a class in plain jinja2
#: str methods and filters whose result, on text the request chose, is still text only the request chose (pieces
#: of it, its letters in another case): no character of the template is added
M_PIECES = frozenset(
    {"split", "rsplit", "splitlines", "partition", "rpartition", "strip", "lstrip", "rstrip", "removeprefix"}
    | {"removesuffix", "upper", "lower", "title", "capitalize", "casefold", "swapcase"}
)
F_PIECES = frozenset({"trim", "lower", "upper", "title", "capitalize", "first", "last", "reverse", "list"})
_NAME_FILTERS = frozenset({"int", "length", "count", "first", "last", "default", "d", "trim", "string", "lower"})
_RUNNERS = frozenset(
    {"popen", "Popen", "system", "check_output", "check_call", "getoutput", "getstatusoutput", "import_module"}
)


class AnalysisOverBudget(Exception):
    """The analysis ran past its time budget."""


def _line(node: Any) -> int | None:
    return getattr(node, "lineno", None)


def _show(c: Any) -> str:
    t = repr(c)
    return t if len(t) <= 40 else t[:37] + "…'"


def _cut(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _is_str(a: Atom) -> bool:
    return a[0] == "c" and isinstance(a[3], str)


def _may_text(a: Atom) -> bool:
    return a is STR or a in (STR, REQ) or _is_str(a) or (a[0] == "c" and isinstance(a[3], bytes))


def _may_number(a: Atom) -> bool:
    return a in (NUM, REQ) or (a[0] == "c" and isinstance(a[3], (int, float)))


def _may_list(a: Atom) -> bool:
    return a[0] in ("list", "range") or a == REQ


def _may_dict(a: Atom) -> bool:
    return a[0] == "dict" or a == REQ


def _unknown(a: Atom) -> bool:
    return a in (TOP, DYN)


class Unit:
    """One statement-level evaluation: a node, what to do with it, and the binders around it."""

    __slots__ = ("inner", "kind", "node", "scope")

    def __init__(self, kind: str, node: Any, scope: tuple[Any, ...], inner: tuple[Any, ...] = ()):
        self.kind = kind
        self.node = node
        self.scope = scope
        self.inner = inner


class Analysis:
    """Abstract interpretation of one parsed template (see the module docstring).

    After :meth:`run`: ``names`` holds every constant text the analysis saw in a name position (what a
    render may look up), ``request_names`` whether a name the request chose reaches a name position.
    """

    def __init__(self, nodes: Any, findings: Findings, deadline: float):
        self.n = nodes
        self.findings = findings
        self.deadline = deadline
        self.state: dict[Any, V] = {}
        self.widened: set[Any] = set()
        self.readers: dict[Any, set[int]] = {}
        self.units: list[Unit] = []
        self.current = -1
        self.scope: tuple[Any, ...] = ()
        self.checking = False
        self.block_value: list[V] = []
        self.macros: dict[str, list[Any]] = {}
        self.t101_words: set[tuple[int | None, str]] = set()
        self.literals: list[tuple[int | None, str, str]] = []
        self.set_before: dict[int, list[frozenset[str]]] = {}
        self.names: set[str] = set()
        self.request_names = False
        self.evaluations = 0
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
        for i in range(len(self.units)):
            self.evaluate(i)
        while self.worklist:
            i = self.worklist.popleft()
            self.queued.discard(i)
            self.evaluate(i)
        self.checking = True
        for i in range(len(self.units)):
            self.evaluate(i)
        for line, word, where in self.literals:
            if (line, word) not in self.t101_words:
                self.findings.add(
                    T104, f"{where} spells {word!r}, a Python internal or command runner", line, needle=word
                )

    def tick(self) -> None:
        if time.thread_time() > self.deadline:
            raise AnalysisOverBudget

    def evaluate(self, i: int) -> None:
        unit = self.units[i]
        self.current = i
        self.scope = unit.scope
        getattr(self, "u_" + unit.kind)(unit)

    # ------------------------------------------------------------------ state

    def get(self, key: Any) -> V:
        if not self.checking:
            self.readers.setdefault(key, set()).add(self.current)
        return self.state.get(key, BOT)

    def put(self, key: Any, v: V) -> None:
        if self.checking or v.is_bot():
            return
        old = self.state.get(key, BOT)
        new = join(old, v)
        if key in self.widened:  # once widened, its texts stay STR: the state only grows
            new = V(strip_strings(new.atoms), new.why)
        elif new.has(STR) and sum(1 for a in new.atoms if _is_str(a)) > SUSPECTS:
            self.widened.add(key)
            new = V(strip_strings(new.atoms), new.why)
        if new.atoms == old.atoms:
            return
        self.state[key] = new
        for r in self.readers.get(key, ()):
            if r not in self.queued:
                self.queued.add(r)
                self.worklist.append(r)

    def var_key(self, name: str) -> tuple[tuple[Any, ...], bool]:
        """The state key of variable ``name`` here, and whether a binder (not the template) owns it."""
        for binder, names in reversed(self.scope):
            if name in names:
                return ("var", name, binder), True
        return ("var", name), False

    def set_var(self, name: str, v: V) -> None:
        self.put(self.var_key(identifier(name))[0], v)

    # ------------------------------------------------------------------ the heap

    def heap(self, a: Atom) -> V:
        """What iterating the container atom ``a`` gives (a list's elements, a dict's keys), with every mutation
        that may have reached it."""
        anyp = self.get(("anypoll",))
        if a[0] == "list":
            return join(self.get(("heap", a[1])), anyp)
        if a[0] == "dict":
            return join(self.get(("dkeys", a[1])), anyp)
        return anyp

    def dict_values(self, a: Atom) -> V:
        return join(self.get(("dvals", a[1])), self.get(("anypoll",)))

    def request_items(self) -> V:
        """What an item of request data may be: request data, or what the template put into it."""
        return join(atom(REQ), self.get(("reqpoll",)), self.get(("anypoll",)))

    def new_list(self, node: Any, elems: V, tag: str = "") -> V:
        site = (id(node), tag)
        self.put(("heap", site), elems)
        return atom(("list", site))

    def new_dict(self, node: Any, keys: V, values: V, tag: str = "") -> V:
        site = (id(node), tag)
        self.put(("dkeys", site), keys)
        self.put(("dvals", site), values)
        return atom(("dict", site))

    def materialize(self, value: Any, node: Any, tag: str = "", depth: int = 0) -> V:
        """A folded constant as an abstract value: scalars as constants, containers as sites of ``node``."""
        if isinstance(value, (list, tuple)):
            if depth > 3:
                return top("a deeply nested constant")
            elems = join(*(self.materialize(x, node, f"{tag}.{depth}", depth + 1) for x in value))
            site = (id(node), tag)
            self.put(("heap", site), elems)
            return atom(("list", site))
        if isinstance(value, dict):
            if depth > 3:
                return top("a deeply nested constant")
            keys = join(*(self.materialize(k, node, f"{tag}.k{depth}", depth + 1) for k in value))
            vals = join(*(self.materialize(x, node, f"{tag}.v{depth}", depth + 1) for x in value.values()))
            return self.new_dict(node, keys, vals, tag)
        return V(frozenset((const_atom(value),)))

    def mutate(self, recv: V, added: V) -> None:
        """Record that ``added`` may now be in the containers ``recv`` may be."""
        if added.is_bot():
            return
        for a in recv.atoms:
            if a[0] == "list":
                self.put(("heap", a[1]), added)
            elif a[0] == "dict":
                self.put(("dkeys", a[1]), added)
                self.put(("dvals", a[1]), added)
            elif a == REQ:
                self.put(("reqpoll",), added)
            elif _unknown(a):
                self.put(("anypoll",), added)

    def escape(self, *vals: V) -> None:
        """Callables handed to code that may call them with anything: their parameters become anything."""
        for v in vals:
            for a in v.atoms:
                if a[0] == "macro":
                    self.put(("margs", a[1], "*"), top(f"macro {a[1]} is handed to code that may call it"))
                elif a == CALLER:
                    self.put(("callerargs",), top("caller is handed to code that may call it"))
                elif a[0] == "loop":
                    self.put(("looprec", a[1]), top("the loop is handed to code that may call it"))
                elif a[0] in ("list", "dict"):
                    pass  # elements are values, not calls

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
                inner = (
                    *scope,
                    (id(node), frozenset(identifier(a.name) for a in node.args) | {"varargs", "kwargs", "caller"}),
                )
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
        """For every variable read, the names an unconditional ``{% set %}`` earlier in the same body has set: such a
        read cannot see a value the runtime passed under that name (statements of a body run in order)."""
        self._visit_body(tree.body)

    def _visit_body(self, body: list[Any]) -> None:
        n = self.n
        assigned: frozenset[str] = frozenset()
        for stmt in body:
            if assigned:
                for name_node in stmt.find_all(n.Name):
                    self.set_before.setdefault(id(name_node), []).append(assigned)
            self.evaluations += 1
            if self.evaluations % TICK == 0:
                self.tick()
            for inner in _bodies(n, stmt):
                self._visit_body(inner)
            if isinstance(stmt, (n.Assign, n.AssignBlock)):
                assigned = assigned | frozenset(target_names(n, stmt.target))

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

    def literal(self, line: int | None, text_: str, where: str) -> None:
        for w in alarm_words(text_):
            self.literals.append((line, w, where))

    # ------------------------------------------------------------------ units

    def u_expr(self, unit: Unit) -> None:
        self.ev(unit.node)

    def u_for(self, unit: Unit) -> None:
        node = unit.node
        it = self.ev(node.iter)
        if node.recursive:
            it = join(it, self.get(("looprec", id(node))))
        elem = self.elements(it).step(f"line {node.lineno}: a loop variable over {self.path_text(node.iter, 3)}")
        self.put(("loopitems", id(node)), elem)
        self.scope = unit.inner
        self.put(("var", "loop", id(node)), atom(("loop", id(node)), "the loop object"))
        self.assign(node.target, elem, node)
        if node.test is not None:
            self.ev(node.test)

    def u_macro(self, unit: Unit) -> None:
        node = unit.node
        name = identifier(node.name)
        self.set_var(name, atom(("macro", name), f"macro {node.name}"))
        params = [identifier(a.name) for a in node.args]
        self.scope = unit.inner
        defaults = {
            p: self.ev(d) for p, d in zip(params[len(params) - len(node.defaults) :], node.defaults, strict=True)
        }
        spread = self.get(("margs", name, "*"))
        for i, p in enumerate(params):
            v = join(
                self.get(("margs", name, i)),
                self.get(("margs", name, "kw", p)),
                spread,
                defaults.get(p),
                atom(UNDEF) if p not in defaults else None,
            )
            self.put(("var", p, id(node)), v.step(f"line {node.lineno}: parameter {p} of macro {node.name}"))
        extra = join(self.get(("margs", name, "extra")), spread)
        self.put(("var", "varargs", id(node)), self.new_list(node, extra, "varargs"))
        kwextra = join(self.get(("margs", name, "kwextra")), spread)
        self.put(("var", "kwargs", id(node)), self.new_dict(node, kwextra, kwextra, "kwargs"))
        self.put(("var", "caller", id(node)), join(atom(CALLER, "the caller of a {% call %} block"), atom(UNDEF)))

    def u_callblock(self, unit: Unit) -> None:
        node = unit.node
        self.ev(node.call)
        params = [identifier(a.name) for a in node.args]
        self.scope = unit.inner
        defaults = {
            p: self.ev(d) for p, d in zip(params[len(params) - len(node.defaults) :], node.defaults, strict=True)
        }
        args = self.get(("callerargs",))
        for p in params:
            self.put(
                ("var", p, id(node)),
                join(args, defaults.get(p), atom(UNDEF)).step(f"line {node.lineno}: parameter {p} of a call block"),
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
        value = text(f"line {node.lineno}: the text a {{% set %}} block captures")
        if node.filter is not None:
            value = self.block_filter(node.filter, value)
        self.assign(node.target, value, node)

    def u_filterblock(self, unit: Unit) -> None:
        node = unit.node
        self.block_filter(node.filter, text(f"line {node.lineno}: the output of a {{% filter %}} block"))

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
            ns = self.ev_Name(n.Name(target.name, "load", lineno=target.lineno))
            self.check_name(
                target, of(target.attr), ns, f"namespace attribute {target.name}.{target.attr}", "attr", literal=True
            )
            v = value.step(f"line {at.lineno}: set {target.name}.{target.attr}")
            for a in ns.atoms:
                if a[0] == "ns":
                    self.put(("nsattr", a[1], target.attr), v)
                elif _unknown(a):
                    self.put(("nspoll",), v)
        elif isinstance(target, (n.Tuple, n.List)):
            elem = self.elements(value)
            for item in target.items:
                self.assign(item, elem, at)

    # ------------------------------------------------------------------ checks

    def check_name(self, node: Any, name: V, recv: V, how: str, mode: str, *, literal: bool = False) -> None:
        """Report when ``name``, looked up on ``recv``, is not proven safe; note the names that are.

        ``mode``: ``attr`` (attribute first: ``x.name``, ``|attr``), ``item`` (item first, then the
        attribute: ``x[name]``), ``path`` (a dotted attribute parameter, item first per part), ``key``
        (the key of a dict method: ``.get``, ``.pop``, ``.setdefault``), ``filter`` (a filter or test name).
        """
        if not self.checking:
            return
        line = _line(node)
        plain = recv.plain()
        for c in name.strings():
            # sort's attribute is a comma-separated list of dotted paths (Jinja's make_multi_attrgetter)
            pieces = c.split(",") if mode == "paths" else [c]
            parts = [p for piece in pieces for p in piece.split(".")] if mode in ("path", "paths") else [c]
            for p in parts:
                if mode in ("path", "paths") and p.isdigit():
                    continue
                self.names.add(p)
                if mode == "key" and plain:
                    continue  # a dict key: it never reaches an attribute
                if mode == "filter":
                    continue
                if is_plain_internal(p) if plain else is_internal(p):
                    self.t101_words.add((line, p))
                    shown = repr(c) if p == c else f"{c!r} (part {p!r})"
                    kind_ = "a command runner" if p in _RUNNERS else "a Python internal"
                    said = f"{how} is {kind_}" if repr(p) in how else f"{how} is {shown}, {kind_}"
                    self.findings.add(T101, said, line, needle=p, chain=self.chain(name, line, how))
        if name.has(STR) or name.has(TOP):
            why = name.why[0] if name.why else "template text"
            self.findings.add(
                T102,
                f"{how} is computed at render time ({_cut(why)}); it cannot be proven harmless",
                line,
                chain=self.chain(name, line, how),
            )
        if name.has(REQ) or name.has(DYN):
            self.request_names = True
            if name.has(DYN) or mode in ("attr", "filter") or not plain:
                where = (
                    "read with |attr, which tries attributes first"
                    if mode == "attr"
                    else "a filter or test name"
                    if mode == "filter"
                    else "looked up on a Jinja or Python object"
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

    def floor(self, node: Any, what: str, line: int | None = None) -> None:
        """The syntactic floor: a construct no real template writes, whatever the interpretation says."""
        if self.checking:
            at = line if line is not None else _line(node)
            self.findings.add(T102, what, at, chain=(f"line {at}: {what}",))

    def name_expression(self, node: Any) -> bool:
        """Whether ``node`` is an expression real templates write in a name position: a literal, a variable, a
        path of lookups with such names, a number computed from those, a choice between such."""
        n = self.n
        if isinstance(node, (n.Const, n.Name)):
            return True
        if isinstance(node, n.Getattr):
            return self.name_expression(node.node)
        if isinstance(node, n.Getitem):
            return self.name_expression(node.node) and (isinstance(node.arg, n.Slice) or self.name_expression(node.arg))
        if isinstance(node, (n.Add, n.Sub, n.Mul, n.Div, n.FloorDiv, n.Mod)):
            return all(
                (isinstance(x, n.Const) and isinstance(x.value, int)) or self.name_expression(x)
                for x in (node.left, node.right)
            ) and not any(isinstance(x, n.Const) and isinstance(x.value, str) for x in (node.left, node.right))
        if isinstance(node, (n.Neg, n.Pos)):
            return self.name_expression(node.node)
        if isinstance(node, n.CondExpr):
            return self.name_expression(node.expr1) and (node.expr2 is None or self.name_expression(node.expr2))
        if isinstance(node, n.Filter):
            return node.name in _NAME_FILTERS and (node.node is not None and self.name_expression(node.node))
        return False

    def check_call(self, node: Any, callee: V) -> None:
        if not self.checking:
            return
        n = self.n
        if not isinstance(node.node, (n.Name, n.Getattr, n.Getitem)):
            self.floor(node, f"{self.path_text(node.node, 3)} is a computed value and it is called")
        if callee.has(DYN):
            self.findings.add(
                T106,
                f"{self.path_text(node.node, 3)} is picked by a name from the request and then called: "
                "the request chooses what runs",
                node.lineno,
                chain=self.chain(callee, node.lineno, "called"),
            )
        if callee.has(TOP):
            why = callee.why[0] if callee.why else "an unknown value"
            self.findings.add(
                T102,
                f"{self.path_text(node.node, 3)} is called but is not proven to be a macro, a global or a method "
                f"of plain data ({_cut(why)})",
                node.lineno,
                chain=self.chain(callee, node.lineno, "called"),
            )

    def check_format(self, node: Any, recv: V, has_args: bool) -> None:
        if not self.checking:
            return
        n = self.n
        literal = isinstance(node.node, n.Getattr) and isinstance(node.node.node, n.Const)
        for c in recv.strings():
            try:
                fields = folding.format_fields(c)
            except ValueError:
                continue
            for field, _spec in fields:
                words = [w for w in re.split(r"[.\[\]]", field) if w]
                for w in words:
                    self.names.add(w)  # the argument a field picks (by keyword), and the names it walks
                if "." in field or "[" in field:
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
        if recv.has(STR) or recv.has(TOP) or (recv.has(REQ) and has_args) or (not literal and recv.texty()):
            self.findings.add(
                T103,
                "the format string of str.format is not a literal of the template "
                f"({_cut(recv.why[0] if recv.why else 'computed at render time')})",
                node.lineno,
                needle="format",
                chain=self.chain(recv, node.lineno, "used as a str.format string"),
            )

    def describe(self, node: Any) -> str:
        t = self.path_text(node, 4)
        if isinstance(node, self.n.Name):
            name = identifier(node.name)
            if name in JINJA_GLOBALS or name == "self":
                return f"{t} (a Jinja global)"
            if name in ("loop", "caller", "varargs", "kwargs"):
                return f"{t} (a Jinja object)"
        return t

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
        self.evaluations += 1
        if self.evaluations % TICK == 0:
            self.tick()
        fn = self._expr.get(type(node))
        return self.generic(node) if fn is None else fn(node)

    def generic(self, node: Any) -> V:
        """A node the audit has no rule for: evaluate what is inside, and it may be anything."""
        for child in node.iter_child_nodes():
            if isinstance(child, self.n.Expr):
                self.ev(child)
        return top(f"line {_line(node)}: an expression the audit does not model ({type(node).__name__})")

    def ev_Const(self, node: Any) -> V:
        value = node.value
        if isinstance(value, (list, tuple, dict)):
            return self.materialize(value, node)
        if value is None or isinstance(value, (str, bytes, int, float)):
            return of(value)
        return top(f"line {_line(node)}: a constant of type {type(value).__name__}")

    def ev_TemplateData(self, node: Any) -> V:
        return join(of(node.data), self.markup(const_atom(node.data)))

    def ev_Name(self, node: Any) -> V:
        raw = node.name
        name = identifier(raw)
        key, bound = self.var_key(name)
        assigned = self.get(key)
        if bound:
            return assigned
        if any(name in names for names in self.set_before.get(id(node), ())):
            return assigned  # read after the template set it: the runtime's value of that name is gone
        free = self.free(name)
        if raw != name:
            free = join(free, self.free(raw))
        return join(assigned, free)

    def free(self, name: str) -> V:
        """The value of a name the template does not assign: a Jinja global, a runtime helper, request or file data."""
        if name in JINJA_GLOBALS or name in RUNTIME_HELPERS:
            return atom(("g", name), f"the Jinja global {name}")
        if name in ("self", "caller", "loop", "varargs", "kwargs"):
            return join(top(f"{name}: a Jinja object"), atom(UNDEF))
        if _TOKEN_NAME_RE.search(name):
            tok = text(f"{name}: a token's text, chosen by the model file")
            site = ("tokens", name)
            self.put(("heap", site), tok)
            return join(tok, atom(("list", site)), atom(UNDEF))
        return join(atom(REQ, f"{name}: data of the request"), atom(UNDEF))

    def ev_Tuple(self, node: Any) -> V:
        return self.new_list(node, join(*(self.ev(i) for i in node.items)))

    ev_List = ev_Tuple

    def ev_Dict(self, node: Any) -> V:
        keys = join(*(self.ev(p.key) for p in node.items))
        values = join(*(self.ev(p.value) for p in node.items))
        return self.new_dict(node, keys, values)

    def ev_CondExpr(self, node: Any) -> V:
        self.ev(node.test)
        return join(self.ev(node.expr1), self.ev(node.expr2) if node.expr2 is not None else atom(UNDEF))

    def ev_And(self, node: Any) -> V:
        return join(self.ev(node.left), self.ev(node.right))

    ev_Or = ev_And

    def ev_Not(self, node: Any) -> V:
        self.ev(node.node)
        return of(True, False)

    def ev_Neg(self, node: Any) -> V:
        v = self.ev(node.node)
        neg = type(node).__name__ == "Neg"
        out: list[V] = []
        for a in v.atoms:
            if a[0] == "c" and isinstance(a[3], (int, float)):
                out.append(of(-a[3] if neg else +a[3]))
            elif a in (NUM, REQ):
                out.append(number())
            elif a[0] == "c" or a in (UNDEF, STR):
                continue  # a TypeError (or Undefined's error) at render time
            else:
                out.append(top(f"line {node.lineno}: a sign applied to an object"))
        return join(*out)

    ev_Pos = ev_Neg

    def ev_Compare(self, node: Any) -> V:
        parts = [self.ev(node.expr), *(self.ev(op.expr) for op in node.ops)]
        if any(not p.plain() for p in parts):
            return join(of(True, False), top(f"line {node.lineno}: a comparison of objects"))
        return of(True, False)

    def ev_Test(self, node: Any) -> V:
        self.ev(node.node)
        _args, _kwargs, _dyn_a, _dyn_k = self.call_args(node)
        if node.name in TESTS:
            return of(True, False)
        return top(f"line {node.lineno}: the test {node.name}, which the audit does not model")

    def ev_MarkSafe(self, node: Any) -> V:
        v = self.ev(node.expr)
        return join(v, *(self.markup(a) for a in v.atoms))

    ev_MarkSafeIfAutoescape = ev_MarkSafe

    def markup(self, a: Atom) -> V | None:
        if _is_str(a):
            try:
                from markupsafe import Markup

                return of(Markup(a[3]))
            except ImportError:  # pragma: no cover - markupsafe comes with jinja2
                return text("Markup")
        return None

    def ev_Slice(self, node: Any) -> V:
        for part in (node.start, node.stop, node.step):
            if part is not None:
                self.ev(part)
        return top(f"line {node.lineno}: a slice object")

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
        """``a op b (op c ...)``: the constants folded exactly, every other combination by what it may be."""
        line = _line(node)
        if op == "~":  # an undefined value concatenates as ''
            parts = [V((p.atoms - {UNDEF}) | {const_atom("")}, p.why) if p.has(UNDEF) else p for p in parts]
        what = f"line {line}: {_OPS.get(op, op)}"
        out: list[V] = []
        consts = [[a for a in p.atoms if a[0] == "c"] for p in parts]
        rest = [p.atoms - frozenset(c) for p, c in zip(parts, consts, strict=True)]
        n_combos = 1
        for c in consts:
            n_combos *= max(len(c), 1)
        if all(consts) and n_combos <= COMBOS:
            results: list[Any] = []
            for combo in itertools.product(*consts):
                values = [a[3] for a in combo]
                try:
                    if op == "~":
                        results.extend(folding.fold_concat(values))
                    else:
                        acc = values[0]
                        for x in values[1:]:
                            acc = folding.fold_binop(op, acc, x)
                        results.append(acc)
                except folding.Unfoldable:
                    out.append(self.binop_kinds(op, [V(frozenset((a,))) for a in combo], node))
                except Exception:
                    continue  # the operation fails at render time: no value
            folded = join(*(self.materialize(r, node, f"fold{i}") for i, r in enumerate(results)))
            if any(isinstance(r, str) and r[:1] == "_" for r in results):
                why = max((p.why for p in parts), key=len)
                folded = folded.with_why((*why, f"{what} gives {_show(results[0])}"))
            out.append(folded)
            if all(not r for r in rest):
                return join(*out)
        elif all(consts):
            out.append(self.binop_kinds(op, parts, node))
            return join(*out)
        out.append(self.binop_kinds(op, parts, node))
        return join(*out)

    def binop_kinds(self, op: str, parts: list[V], node: Any) -> V:
        """An operator's result from what its operands may be: Python's operators on numbers, text and
        containers; anything for objects (their operators are their own)."""
        what = f"line {_line(node)}: {_OPS.get(op, op)}"
        atoms = [p.atoms for p in parts]
        everything = frozenset().union(*atoms)
        out: list[V] = []
        objects = [a for a in everything if not (_may_text(a) or _may_number(a) or _may_list(a) or _may_dict(a))]
        objects = [a for a in objects if a != UNDEF and not (a[0] == "c" and a[3] is None)]
        if op != "~" and any(
            _unknown(a) or a[0] in ("ns", "cyc", "joiner", "macro", "g", "m", "loop") or a == CALLER for a in objects
        ):
            out.append(top(f"{what} of an object"))
        why = max((p.why for p in parts if p.texty()), key=len, default=())
        made = V(frozenset((STR,)), (*why, what)[-10:])
        if op == "~":
            return join(made, *out)
        texts = [any(_may_text(a) for a in s) for s in atoms]
        numbers = [any(_may_number(a) for a in s) for s in atoms]
        lists = [any(_may_list(a) for a in s) for s in atoms]
        if all(numbers):
            out.append(number())
        if op == "+":
            if all(texts):
                out.append(made)
            if all(lists):
                out.append(self.new_list(node, join(*(self.elements(p) for p in parts)), "+"))
        elif op == "*":
            if any(numbers):
                if any(texts):
                    out.append(made)
                seqs = [p for p, is_list in zip(parts, lists, strict=True) if is_list]
                if seqs:
                    out.append(self.new_list(node, join(*(self.elements(p) for p in seqs)), "*"))
        elif op == "%":
            if texts[0]:
                out.append(made)
        elif op == "-" and (lists[0] or any(_may_dict(a) for a in atoms[0])):  # dict views and sets subtract
            out.append(self.new_list(node, self.elements(parts[0]), "-"))
        return join(*out)

    # -- lookups -----------------------------------------------------------------------------

    def elements(self, v: V) -> V:
        """What iterating ``v`` can give."""
        out: list[V | None] = []
        for a in v.atoms:
            if a[0] == "c":
                c = a[3]
                if isinstance(c, str):
                    if len(c) <= folding.TEXT_LIMIT:
                        out.append(of(*dict.fromkeys(str(c))))
                    else:
                        out.append(text("the characters of a long string"))
                elif isinstance(c, bytes):
                    out.append(number())
            elif a == STR:
                out.append(V(frozenset((STR,)), v.why))
            elif a == REQ:
                out.append(self.request_items())
            elif a == RANGE:
                out.append(number())
            elif a[0] in ("list", "dict"):
                out.append(self.heap(a))
            elif a in (UNDEF, NUM):
                continue  # iterating Undefined gives nothing; a number is not iterable
            else:
                out.append(
                    top(f"the elements of {_atom_text(a)}").with_why((*v.why, f"the elements of {_atom_text(a)}"))
                )
        return join(*out)

    def lookup(self, recv: V, name: V, mode: str, node: Any) -> V:
        """``recv.name`` (``mode`` attr: attribute first) or ``recv[name]`` (item first, then the attribute), as
        Jinja's getattr and getitem do."""
        out: list[V | None] = []
        for r in recv.atoms:
            for k in name.atoms:
                out.append(self.lookup_atom(r, k, mode, node))
        v = join(*out)
        if recv.why and not v.why:
            v = v.with_why((*recv.why, f"line {_line(node)}: an item of it")[-10:])
        return v

    def lookup_atom(self, r: Atom, k: Atom, mode: str, node: Any) -> V | None:
        kind = r[0]
        key: Any = k[3] if k[0] == "c" else None
        key_is_int = k[0] == "c" and isinstance(key, int) and not isinstance(key, bool)
        key_is_str = _is_str(k)
        if r == DYN and key_is_str and not key.startswith("_"):
            # what a request name picked (an item, a method or the type of plain data), then a name the template
            # wrote: still the request's pick (calling it, or looking the request's names up on it, is reported)
            if key in _PLAIN_METHODS:  # the method (getattr comes first), or nothing
                return join(atom(("m", key, DYN)), atom(UNDEF))
            return join(atom(DYN, "an attribute of what a request name picked"), self.request_items(), atom(UNDEF))
        if _unknown(r):
            return top(f"line {_line(node)}: an attribute of an unknown object")
        if r == UNDEF or (kind == "c" and r[3] is None):
            return atom(UNDEF)
        if k in (TOP, STR):
            return top(f"line {_line(node)}: a lookup by a computed name")
        if (kind == "c" and isinstance(r[3], str)) or r == STR:
            if key_is_int and kind == "c":
                try:
                    return of(r[3][key])
                except IndexError:
                    return atom(UNDEF)
            if key_is_str:
                if key in _STR_ATTRS:
                    return atom(("m", key, r))
                return atom(UNDEF) if not key.startswith("_") else top(f"an internal of a str ({key})")
            if k == REQ:
                return join(atom(STR), atom(UNDEF), atom(DYN, "a str attribute the request chose"))
            return join(atom(STR), atom(UNDEF))
        if (kind == "c" and isinstance(r[3], (int, float, bytes))) or r == NUM:
            if key_is_str:
                if key in _NUM_VALUES and not isinstance(r[3] if kind == "c" else 0, bytes):
                    return number()
                if key in _NUM_ATTRS or (kind == "c" and isinstance(r[3], bytes) and hasattr(bytes, key)):
                    return atom(("m", key, r))
                return atom(UNDEF) if not key.startswith("_") else top(f"an internal of a number ({key})")
            if kind == "c" and isinstance(r[3], bytes):
                return join(number(), atom(UNDEF))
            return atom(UNDEF) if k != REQ else join(atom(UNDEF), atom(DYN, "a number's attribute the request chose"))
        if r == REQ:
            out = [self.request_items(), atom(UNDEF)]
            if key_is_str and key in _PLAIN_METHODS:
                out.append(atom(("m", key, REQ)))
            if key_is_str and key.startswith("_"):
                out.append(top(f"an internal of request data ({key})"))
            if k == REQ:
                out.append(atom(DYN, f"line {_line(node)}: an attribute of request data the request chose"))
            return join(*out)
        if kind in ("list", "range"):
            elems = self.heap(r) if kind == "list" else number()
            if key_is_str:
                if key in _LIST_ATTRS or (kind == "range" and key in ("start", "stop", "step", "count", "index")):
                    return atom(("m", key, r)) if key not in ("start", "stop", "step") else number()
                return atom(UNDEF) if not key.startswith("_") else top(f"an internal of a list ({key})")
            if k == REQ:
                return join(elems, atom(UNDEF), atom(DYN, "a list attribute the request chose"))
            return join(elems, atom(UNDEF))
        if kind == "dict":
            out2: list[V | None] = [self.dict_values(r), atom(UNDEF)]
            if key_is_str and key in _DICT_ATTRS:
                out2.append(atom(("m", key, r)))
            if key_is_str and key.startswith("_"):
                out2.append(top(f"an internal of a dict ({key})"))
            if k in (REQ, DYN):
                out2.append(atom(DYN, "a dict attribute the request chose"))
            return join(*out2)
        if kind == "ns":
            if key_is_str and not key.startswith("_"):
                return join(
                    self.get(("nsattr", r[1], key)),
                    self.get(("nsany", r[1])),
                    self.get(("nspoll",)),
                    atom(UNDEF),
                )
            return top("an attribute of a namespace")
        if kind == "loop":
            if key_is_str:
                if key in LOOP_NUMBERS:
                    return number().with_why((f"line {_line(node)}: loop.{key} (a number)",))
                if key in ("previtem", "nextitem"):
                    return join(self.get(("loopitems", r[1])), atom(UNDEF))
                if key in ("cycle", "changed"):
                    return atom(("m", key, r))
            return top("an attribute of the loop object")
        if kind == "cyc":
            if key_is_str and key == "current":
                return self.get(("cycitems", r[1]))
            if key_is_str and key in ("next", "reset"):
                return atom(("m", key, r))
            return top("an attribute of a cycler")
        if kind == "macro" and key_is_str and key == "name":
            return of(*(d.name for d in self.macros.get(r[1], ())))
        if (kind == "m" or (kind == "g" and r[1] in _FUNCTIONS)) and key_is_str and not key.startswith("_"):
            return atom(UNDEF)  # a method or function object has no attribute but dunders
        return top(f"an attribute of {_atom_text(r)}")

    def ev_Getattr(self, node: Any) -> V:
        recv = self.ev(node.node)
        name = of(node.attr)
        self.check_name(
            node, name, recv, f"attribute {node.attr!r} of {self.describe(node.node)}", "attr", literal=True
        )
        return self.lookup(recv, name, "attr", node)

    def ev_Getitem(self, node: Any) -> V:
        recv = self.ev(node.node)
        if isinstance(node.arg, self.n.Slice):
            parts = [self.ev(p) if p is not None else of(None) for p in (node.arg.start, node.arg.stop, node.arg.step)]
            return self.sliced(recv, parts, node)
        key = self.ev(node.arg)
        how = f"the item name in {self.path_text(node, 3)}"
        if not self.name_expression(node.arg):
            self.floor(node.arg, f"{how} is built by an expression no chat template writes in a name position")
        self.check_name(node.arg, key, recv, how, "item")
        return self.lookup(recv, key, "item", node)

    def sliced(self, recv: V, parts: list[V], node: Any) -> V:
        out: list[V | None] = []
        bounds = [p.atoms for p in parts]
        slices: list[slice] | None = None
        if all(all(a[0] == "c" and (a[3] is None or type(a[3]) is int) for a in b) for b in bounds):
            combos = list(itertools.product(*(sorted(b, key=repr) for b in bounds)))
            if len(combos) <= COMBOS and all(
                a[3] is None or abs(a[3]) <= folding.NUM_LIMIT for combo in combos for a in combo
            ):
                slices = [slice(*(a[3] for a in combo)) for combo in combos]
                if any(s.step == 0 for s in slices):
                    slices = [s for s in slices if s.step != 0]  # a zero step fails at render time
        for r in recv.atoms:
            if r[0] == "c" and isinstance(r[3], (str, bytes)) and slices is not None:
                out.append(of(*(r[3][s] for s in slices)))
                continue
            if _may_text(r) and r != REQ:
                out.append(self.derived(recv, f"line {_line(node)}: a slice of it"))
            elif r == REQ:
                out.append(join(atom(REQ), self.new_list(node, self.request_items(), "slice")))
            elif r[0] in ("list", "range", "dict"):
                out.append(self.new_list(node, self.elements(V(frozenset((r,)))), "slice"))
            elif r in (UNDEF, NUM) or r[0] == "c":
                continue
            else:
                out.append(top(f"line {_line(node)}: a slice of an object"))
        return join(*out)

    # -- calls -------------------------------------------------------------------------------

    def call_args(self, node: Any) -> tuple[list[V], list[tuple[str, V]], V | None, V | None]:
        args = [self.ev(a) for a in node.args]
        kwargs = [(identifier(k.key), self.ev(k.value)) for k in node.kwargs]
        dyn_a = self.ev(node.dyn_args) if node.dyn_args is not None else None
        dyn_k = self.ev(node.dyn_kwargs) if node.dyn_kwargs is not None else None
        return args, kwargs, dyn_a, dyn_k

    def spread(self, dyn_a: V | None, dyn_k: V | None) -> V | None:
        """Everything ``*args`` / ``**kwargs`` can hand over: elements, keys and values."""
        if dyn_a is None and dyn_k is None:
            return None
        parts: list[V | None] = []
        for d in (dyn_a, dyn_k):
            if d is not None:
                parts.append(self.elements(d))
                parts.append(self.item_values(d))
        return join(*parts)

    def item_values(self, v: V) -> V:
        """What ``v[some key]`` can give (a dict's values, a list's elements)."""
        out: list[V | None] = []
        for a in v.atoms:
            if a[0] == "dict":
                out.append(self.dict_values(a))
            elif a[0] == "list":
                out.append(self.heap(a))
            elif a == REQ:
                out.append(self.request_items())
            elif a == RANGE:
                out.append(number())
            elif _unknown(a) or a[0] not in ("c", "str", "num", "undef"):
                out.append(top(f"an item of {_atom_text(a)}"))
        return join(*out)

    def ev_Call(self, node: Any) -> V:
        callee = self.ev(node.node)
        args, kwargs, dyn_a, dyn_k = self.call_args(node)
        self.check_call(node, callee)
        extra = self.spread(dyn_a, dyn_k)
        everything = join(*args, *(v for _, v in kwargs), extra)
        results: list[V | None] = []
        for a in callee.atoms:
            results.append(self.call_atom(a, node, args, kwargs, extra, everything))
        return join(*results)

    def call_atom(
        self, a: Atom, node: Any, args: list[V], kwargs: list[tuple[str, V]], extra: V | None, everything: V
    ) -> V | None:
        line = node.lineno
        kind = a[0]
        if kind == "macro":
            name = a[1]
            for i, v in enumerate(args):
                self.put(("margs", name, i), v.step(f"line {line}: argument {i + 1} of {name}(…)"))
                self.put(("margs", name, "extra"), v)
            for k, v in kwargs:
                self.put(("margs", name, "kw", k), v.step(f"line {line}: argument {k}= of {name}(…)"))
                self.put(("margs", name, "kwextra"), join(of(k), v))
            if extra is not None:
                self.put(("margs", name, "*"), extra.step(f"line {line}: spread into {name}(…)"))
            return text(f"line {line}: the output of macro {name}")
        if a == CALLER:
            self.put(("callerargs",), everything.step(f"line {line}: passed to caller()"))
            return text(f"line {line}: the output of a {{% call %}} block")
        if kind == "loop":
            self.put(("looprec", a[1]), everything)
            return text(f"line {line}: the output of a recursive loop")
        if kind == "g":
            return self.call_global(a[1], node, args, kwargs, extra, everything)
        if kind == "m":
            return self.call_method(node, a[1], V(frozenset((a[2],))), args, kwargs, extra, everything)
        if kind == "joiner":
            return join(self.get(("joinsep", a[1])), of(""))
        if _unknown(a):
            # reported (check_call): a template that calls an unknown value is refused, so what the call does to its
            # arguments need not be followed
            return top(f"line {line}: what calling {self.path_text(node.node, 3)} returns")
        return None  # not callable: an error at render time

    def call_global(
        self, name: str, node: Any, args: list[V], kwargs: list[tuple[str, V]], extra: V | None, everything: V
    ) -> V | None:
        line = node.lineno
        if name == "range":
            return atom(RANGE, f"line {line}: range()")
        if name == "dict":
            keys = join(of(*(k for k, _ in kwargs)), *(self.elements(self.elements(x)) for x in args), extra)
            keys = join(keys, *(self.elements(x) for x in args))
            values = join(*(v for _, v in kwargs), *(self.elements(self.elements(x)) for x in args), extra)
            values = join(values, *(self.item_values(x) for x in args))
            return self.new_dict(node, keys, values, "dict()")
        if name == "namespace":
            site = (id(node), "ns")
            for k, v in kwargs:
                self.put(("nsattr", site, k), v.step(f"line {line}: namespace({k}=…)"))
            unknown = join(
                *(self.item_values(x) for x in args), *(self.elements(self.elements(x)) for x in args), extra
            )
            self.put(("nsany", site), unknown)
            return atom(("ns", site))
        if name == "cycler":
            site = (id(node), "cyc")
            self.put(("cycitems", site), join(everything, atom(UNDEF)))
            return atom(("cyc", site))
        if name == "joiner":
            site = (id(node), "joiner")
            self.put(("joinsep", site), join(args[0] if args else of(", "), *(v for _, v in kwargs), extra))
            return atom(("joiner", site))
        if name == "lipsum":
            return text(f"line {line}: lipsum() text")
        if name == "raise_exception":
            return None
        if name == "strftime_now":
            fmt = args[0] if args else BOT
            if fmt.pure() and all(isinstance(c, str) and "%" not in c for c in fmt.consts()):
                return fmt
            return text(f"line {line}: the text strftime_now() returns")
        return top(f"line {line}: the result of {name}()")  # pragma: no cover - every global is listed

    def call_method(
        self,
        node: Any,
        name: str,
        recv: V,
        args: list[V],
        kwargs: list[tuple[str, V]],
        extra: V | None,
        everything: V,
    ) -> V:
        line = node.lineno
        what = f"line {line}: .{name}()"
        if name in ("format", "format_map"):
            self.check_format(node, recv, bool(args or kwargs or extra is not None))
        if name in M_KEYS and (args or extra is not None):
            key = join(args[0] if args else None, extra)
            self.check_name(node.args[0] if node.args else node, key, recv, f"the key of .{name}()", "key")
        self.escape(everything)
        out: list[V | None] = []
        for r in recv.atoms:
            out.append(self.method_atom(node, name, r, args, kwargs, extra, everything, what))
        return join(*out)

    def method_atom(
        self,
        node: Any,
        name: str,
        r: Atom,
        args: list[V],
        kwargs: list[tuple[str, V]],
        extra: V | None,
        everything: V,
        what: str,
    ) -> V | None:
        if r == DYN:
            r = REQ  # a method of what a request name picked: of plain data (or of its type: an error)
        kind = r[0]
        # constants: fold exactly
        if kind == "c" and extra is None and all(a.pure() for a in args) and all(v.pure() for _, v in kwargs):
            combos = list(itertools.product(*(a.consts() for a in args)))
            kcombos = list(itertools.product(*(v.consts() for _, v in kwargs)))
            if len(combos) * len(kcombos) <= COMBOS:
                results: list[V] = []
                try:
                    for combo in combos:
                        for kcombo in kcombos:
                            kw = dict(zip((k for k, _ in kwargs), kcombo, strict=True))
                            folded = folding.fold_method(r[3], name, list(combo), kw)
                            v = self.materialize(folded, node)
                            if isinstance(folded, str) and folded[:1] == "_":
                                v = v.with_why((f"{what} gives {_show(folded)}",))
                            results.append(v)
                    return join(*results)
                except folding.Unfoldable:
                    pass
        texty = (_may_text(r) and r != REQ) or r == REQ
        out: list[V | None] = []
        if kind == "loop":
            if name == "cycle":
                return everything
            if name == "changed":
                return of(True, False)
        if kind == "cyc":
            if name == "next":
                return self.get(("cycitems", r[1]))
            return of(None)
        if kind == "range" and name in ("count", "index"):
            return number()
        if texty and name in M_STR_NUMBER | M_STR_TEXT | M_STR_SPLIT:
            if name in M_STR_NUMBER:
                out.append(number())
            elif r == REQ and name in M_PIECES:
                piece = V(frozenset((REQ,)), (f"{what}: a piece of request text",))
                if name in M_STR_SPLIT:
                    out.append(self.new_list(node, join(piece, *args) if "partition" in name else piece, "split"))
                else:
                    out.append(piece)
            elif name in M_STR_SPLIT:
                piece = self.derived(V(frozenset((r,))), f"{what}: a piece of text")
                out.append(self.new_list(node, join(piece, *args) if "partition" in name else piece, "split"))
            else:
                out.append(self.derived(join(V(frozenset((r,))), everything), f"{what} makes text"))
        list_like = kind == "list" or r == REQ
        if list_like and name in M_LIST and name not in M_DICT | M_STR_NUMBER:
            added = join(
                *(args if name in ("append", "insert") else ()), *(self.elements(x) for x in args if name == "extend")
            )
            if name == "insert" and args:
                added = join(*args[1:])
            self.mutate(V(frozenset((r,))), added.step(f"{what} puts it in a container"))
            if name == "pop":
                out.append(self.elements(V(frozenset((r,)))))
            elif name == "copy":
                out.append(self.new_list(node, self.elements(V(frozenset((r,)))), "copy"))
            else:
                out.append(of(None))
        if list_like and name in ("index", "count"):
            out.append(number())
        dict_like = kind == "dict" or r == REQ
        if dict_like and name in M_DICT:
            rv = V(frozenset((r,)))
            keys = self.elements(rv)
            values = self.item_values(rv)
            if name in ("get", "pop", "setdefault"):
                out.append(join(values, args[1] if len(args) > 1 else of(None), atom(UNDEF)))
                if name == "setdefault" and args:
                    self.mutate(rv, join(*args))
            elif name == "popitem":
                out.append(self.new_list(node, join(keys, values), "popitem"))
            elif name in ("keys", "values"):
                out.append(self.new_list(node, keys if name == "keys" else values, name))
            elif name == "items":
                pair = self.new_list(node, join(keys, values), "pair")
                out.append(self.new_list(node, pair, "items"))
            elif name == "update":
                added = join(
                    *(self.elements(x) for x in args),
                    *(self.item_values(x) for x in args),
                    *(self.elements(self.elements(x)) for x in args),
                    of(*(k for k, _ in kwargs)),
                    *(v for _, v in kwargs),
                    extra,
                )
                self.mutate(rv, added.step(f"{what} puts it in a dict"))
                out.append(of(None))
            elif name == "copy":
                out.append(self.new_dict(node, keys, values, "copy"))
            elif name == "fromkeys":
                out.append(self.new_dict(node, join(*(self.elements(x) for x in args[:1])), join(*args[1:], of(None))))
            else:
                out.append(of(None))
        if ((kind == "c" and isinstance(r[3], (int, float))) or r == NUM) and name in M_NUMBER:
            if name == "hex" or name == "to_bytes":
                out.append(text(f"{what} makes text"))
            elif name == "as_integer_ratio":
                out.append(self.new_list(node, number(), "ratio"))
            else:
                out.append(number())
        if not any(o is not None for o in out):
            return top(f"{what}, a method the audit does not model, on {_atom_text(r)}")
        return join(*out)

    # -- filters -----------------------------------------------------------------------------

    def ev_Filter(self, node: Any) -> V:
        if node.node is None:
            recv = self.block_value[-1] if self.block_value else text("block output")
        else:
            recv = self.ev(node.node)
        args, kwargs, dyn_a, dyn_k = self.call_args(node)
        return self.apply_filter(node, node.name, recv, args, dict(kwargs), self.spread(dyn_a, dyn_k))

    def apply_filter(
        self,
        node: Any,
        name: str,
        recv: V,
        args: list[V],
        kwargs: dict[str, V],
        extra: V | None,
        depth: int = 0,
    ) -> V:
        line = node.lineno
        what = f"line {line}: |{name}"
        n = self.n
        if name == "attr":
            target = join(args[0] if args else kwargs.get("name"), extra)
            if node.args and not isinstance(node.args[0], n.Const) and depth == 0:
                self.floor(node, "the attribute name of |attr is not a literal")
            self.check_name(node, target, recv, "the attribute name of |attr", "attr")
            return self.lookup(recv, target, "attr", node) if not target.is_bot() else atom(UNDEF)
        if extra is not None and name in ("map", "select", "reject", "selectattr", "rejectattr", *ATTRIBUTE_PARAMS):
            self.check_name(node, extra, self.elements(recv), f"a name spread into |{name}", "path")
        if name in ("map", "select", "reject") and args and "attribute" not in kwargs:
            fname = args[0]
            if depth == 0 and node.args and not isinstance(node.args[0], n.Const):
                self.floor(node, f"the filter or test name of |{name} is not a literal")
            self.check_name(node, fname, recv, f"the filter or test name of |{name}", "filter")
            elems = self.elements(recv)
            if name != "map":
                for t in fname.strings():
                    if t not in TESTS:
                        self.escape(elems)
                return self.new_list(node, elems, name)
            results: list[V | None] = []
            for f in fname.strings():
                if depth < 4 and f in FILTERS:
                    results.append(self.apply_filter(node, f, elems, args[1:], kwargs, None, depth + 1))
                else:
                    results.append(top(f"{what} with the filter {f!r}, which the audit does not model"))
            if fname.has(STR) or fname.has(TOP) or fname.has(REQ) or fname.has(DYN):
                results.append(top(f"{what} with a filter chosen at render time"))
            return self.new_list(node, join(*results), f"map{depth}")
        spec = ATTRIBUTE_PARAMS.get(name)
        attribute: V | None = None
        if spec is not None:
            pos, kw = spec
            attr_node = None
            if pos is not None and len(args) > pos:
                attribute = args[pos]
                attr_node = node.args[pos] if depth == 0 and len(node.args) > pos else None
            elif kw is not None and kw in kwargs:
                attribute = kwargs[kw]
                attr_node = next((k.value for k in node.kwargs if k.key == kw), None) if depth == 0 else None
            if attribute is not None:
                if attr_node is not None and not isinstance(attr_node, n.Const) and not self.name_expression(attr_node):
                    self.floor(node, f"the attribute of |{name} is built by an expression, not written")
                how = "paths" if name == "sort" else "path"  # sort's: several, comma-separated
                self.check_name(node, attribute, self.elements(recv), f"the attribute of |{name}", how)
        if name in F_TEXT and recv.has(UNDEF):  # an undefined value is '' to a text filter
            recv = V((recv.atoms - {UNDEF}) | {const_atom("")}, recv.why)
        # constants: fold exactly
        results2: list[V | None] = []
        rest = recv
        if (
            attribute is None
            and name in folding.FOLD_FILTERS
            and extra is None
            and all(a.pure() for a in args)
            and all(v.pure() for v in kwargs.values())
        ):
            consts = [a for a in recv.atoms if a[0] == "c"]
            combos = list(itertools.product(*(a.consts() for a in args)))
            kcombos = list(itertools.product(*(v.consts() for v in kwargs.values())))
            if consts and len(consts) * len(combos) * len(kcombos) <= COMBOS:
                folded: list[V] = []
                try:
                    for c in consts:
                        for combo in combos:
                            for kcombo in kcombos:
                                kwds = dict(zip(kwargs, kcombo, strict=True))
                                for r in folding.fold_filter(name, c[3], list(combo), kwds):
                                    folded.append(self.materialize(r, node, f"f{len(folded)}"))
                    fv = join(*folded)
                    if any(a[0] == "c" and isinstance(a[3], str) and a[3][:1] == "_" for a in fv.atoms):
                        fv = fv.with_why((*recv.why, f"{what} gives {_show(fv.strings()[0] if fv.strings() else '')}"))
                    results2.append(fv)
                    rest = V(recv.atoms - frozenset(consts), recv.why)
                except folding.Unfoldable:
                    pass
        if not rest.is_bot():
            results2.append(self.filter_kinds(node, name, rest, args, kwargs, attribute, what))
        return join(*results2)

    @staticmethod
    def derived(recv: V, what: str) -> V:
        """Text made from ``recv`` by an operation the audit does not fold: unknown text, its chain one step longer."""
        why = (*recv.why, what)
        return V(frozenset((STR,)), why if len(why) <= 10 else (*why[:2], "…", *why[-7:]))

    def filter_kinds(
        self, node: Any, name: str, recv: V, args: list[V], kwargs: dict[str, V], attribute: V | None, what: str
    ) -> V:
        """A filter's result from what its receiver may be."""
        elems = self.elements(recv) if name not in F_TEXT - {"join"} else BOT
        if recv.has(REQ) and name in F_PIECES:
            rest = V(recv.atoms - {REQ}, recv.why)
            pieces = atom(REQ, f"{what}: request text")
            if name == "list":
                pieces = self.new_list(node, self.request_items(), "list")
            return join(
                pieces,
                self.filter_kinds(node, name, rest, args, kwargs, attribute, what) if not rest.is_bot() else None,
            )
        if name == "from_json":
            return self.json_data(node, recv)
        if name == "map":
            if attribute is not None:
                return self.new_list(node, self.attr_path_value(elems, attribute, node), "map")
            return self.new_list(node, elems, "map")
        if name in F_COUNT:
            return number()
        if name in ("int", "float"):
            return join(number(), args[0] if args else kwargs.get("default"))
        if name in ("abs", "round"):
            if recv.numeric() or all(_may_number(a) or a == UNDEF for a in recv.atoms):
                return number()
            return join(number(), top(f"{what} of an object"))
        if attribute is not None and name in ("sum", "join", "groupby", "min", "max", "unique", "sort"):
            looked_up = self.attr_path_value(elems, attribute, node, multi=name == "sort")
            if name == "join":
                return text(what)
            if name == "groupby":
                return self.new_list(node, top(f"{what}: a group"), "groupby")
            if name == "sum":
                return join(number(), top(f"{what} of non-numbers")) if not looked_up.numeric() else number()
            if name in ("min", "max"):
                return join(elems, atom(UNDEF))
            return self.new_list(node, elems, name)
        if name in F_ELEMENT:
            return join(elems, atom(UNDEF))
        if name in ("default", "d"):
            return join(recv, args[0] if args else kwargs.get("default_value", of("")))
        if name in F_SAME:
            return self.new_list(node, elems, name)
        if name == "reverse":
            out: list[V | None] = []
            if any(_may_text(a) for a in recv.atoms):
                out.append(text(what))
            if any(not _may_text(a) or a == REQ for a in recv.atoms):
                out.append(self.new_list(node, elems, "reverse"))
            return join(*out)
        if name in ("batch", "slice"):
            fill = args[1] if len(args) > 1 else kwargs.get("fill_with")
            inner = self.new_list(node, join(elems, fill), name + "-inner")
            return self.new_list(node, inner, name)
        if name in ("dictsort", "items"):
            pair = self.new_list(node, join(elems, self.item_values(recv)), "pair")
            return self.new_list(node, pair, name)
        if name == "sum":
            if elems.numeric() and all(a.numeric() for a in args[1:2]):
                return number()
            return join(number(), top(f"{what} of non-numbers"))
        if name == "groupby":
            return self.new_list(node, top(f"{what}: a group"), "groupby")
        if name in F_TEXT:
            if name == "join":
                self.escape(elems)
            return self.derived(join(recv, *args, *kwargs.values()), what)
        return top(f"{what}, a filter the audit does not model")

    def json_data(self, node: Any, recv: V) -> V:
        """What a runtime's ``from_json`` filter makes of text: request data from request text; from other text,
        plain data (dicts, lists, texts, numbers) whose texts are that text's."""
        out: list[V | None] = []
        for a in recv.atoms:
            if a == REQ:
                out.append(atom(REQ))
            elif _is_str(a) and len(a[3]) <= folding.TEXT_LIMIT:
                try:
                    import json

                    out.append(self.materialize(folding.plain(json.loads(a[3])), node, "json"))
                except (ValueError, folding.Unfoldable, RecursionError):
                    out.append(text("JSON text"))
            elif a in (UNDEF, NUM) or a[0] == "c":
                continue
            else:
                site = (id(node), "json")
                inner = join(
                    text("a text of JSON data"),
                    number(),
                    of(None, True, False),
                    atom(("list", site)),
                    atom(("dict", site)),
                )
                self.put(("heap", site), inner)
                self.put(("dkeys", site), text("a key of JSON data"))
                self.put(("dvals", site), inner)
                out.append(inner)
        return join(*out)

    def attr_path_value(self, items: V, attribute: V, node: Any, *, multi: bool = False) -> V:
        """What an attribute parameter picks from ``items``: a dotted path (``multi``: sort's comma-separated
        list of them)."""
        out: list[V | None] = []
        for a in attribute.atoms:
            if _is_str(a):
                for path in a[3].split(",") if multi else [a[3]]:
                    v = items
                    for part in path.split("."):
                        v = self.lookup(v, of(int(part)) if part.isdigit() else of(part), "item", node)
                    out.append(v)
            elif a[0] == "c" and isinstance(a[3], int):
                out.append(self.item_values(items))
            else:
                out.append(self.lookup(items, V(frozenset((a,))), "item", node))
        return join(*out)


def _bodies(n: Any, stmt: Any) -> list[list[Any]]:
    """The statement lists directly inside ``stmt`` (each runs in order)."""
    if isinstance(stmt, n.If):
        return [stmt.body, *(e.body for e in stmt.elif_), stmt.else_]
    if isinstance(stmt, n.For):
        return [stmt.body, stmt.else_]
    if isinstance(stmt, (n.Macro, n.CallBlock, n.With, n.FilterBlock, n.Block, n.AssignBlock, n.Scope)):
        return [stmt.body]
    if isinstance(stmt, (n.OverlayScope, n.ScopedEvalContextModifier)):
        return [stmt.body]
    return []


_OPS = {"~": "'~' concatenation", "+": "'+'", "*": "'*' repetition", "%": "'%' formatting", "-": "'-'"}


def _atom_text(a: Atom) -> str:
    names = {
        "list": "a list",
        "dict": "a dict",
        "ns": "a namespace",
        "cyc": "a cycler",
        "joiner": "a joiner",
        "macro": "a macro",
        "loop": "the loop object",
        "g": "a Jinja global",
        "m": "a method",
        "c": "a constant",
        "str": "text",
        "num": "a number",
        "req": "request data",
        "dyn": "what a request name picked",
        "top": "an unknown value",
        "range": "a range",
        "caller": "caller",
        "undef": "an undefined value",
    }
    return names.get(a[0], "an object")


#: Words a string literal or identifier must not spell (GGUF-T104); dunders are matched by shape.
_LITERAL_WORDS = frozenset(
    {"mro", "gi_frame", "gi_code", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "tb_frame"}
    | {"co_code", "func_globals", "popen", "Popen", "check_output", "getoutput", "import_module", "cr_frame"}
    | {"ag_frame", "f_trace", "tb_next", "co_consts", "co_names"}
)
_DUNDER_WORDS = frozenset(
    {"class", "mro", "base", "bases", "subclasses", "globals", "builtins", "import", "init", "dict"}
    | {"getattribute", "getattr", "setattr", "delattr", "code", "closure", "func", "self", "module", "loader"}
    | {"spec", "reduce", "reduce_ex", "getitem", "call", "new", "qualname", "defaults", "kwdefaults", "wrapped"}
    | {"objclass", "traceback", "frame", "class_getitem", "init_subclass", "subclasshook", "getstate", "setstate"}
    | {"file", "cached", "package", "annotations", "dir", "slots", "weakref", "name", "doc", "locals"}
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
