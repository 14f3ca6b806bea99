"""Render cost: an upper bound of what rendering the template costs on a representative request.

:func:`check` walks the template in order, abstractly: every value is bounded by a :class:`C` (its
length as text, its item count as a container, the size of a number as a count of bits), and
every statement by the work it does (loop iterations, macro calls, characters made). Request
data is bounded by a representative request (:data:`DATA_ITEMS` items per list, :data:`DATA_CHARS`
characters per string); numbers the request gives (``x|int``) are unbounded. Then:

* a loop runs ``trips`` times, ``trips`` from its range (``range(10**9)``), its literal, or the
  data; a variable the body changes grows linearly (``s = s ~ x``: ``trips`` times ``x``) or, when a
  second pass over the body shows it growing faster (``s = s ~ s``, ``a = a ~ b; b = a``),
  geometrically: computed for a constant count, unbounded for one the data gives;
* a macro is summed up once per size of its arguments; one that calls itself is bounded by the
  request's size when each call passes a part of a parameter down (a walk of a JSON schema), by
  Python's recursion limit when it calls itself at most once per call, and unbounded when it calls
  itself several times per call (fan-out: exponential);
* repetition (``'x' * n``), powers, widths (``center``, ``%9999999s``, ``{:>n}``), ``replace`` and
  ``join`` size what they make.

A bound past :data:`WORK_LIMIT` steps or :data:`SIZE_LIMIT` characters is ``GGUF-T504``, with
the line and the reason. The bound is an over-approximation of one render; real chat templates
stay several orders of magnitude below it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from .folding import format_fields
from .jinja import identifier
from .rules import Findings, rule

__all__ = ["T504", "Budget", "check"]

T504 = rule(
    "GGUF-T504",
    "error",
    "render-cost",
    "Rendering the template can take time or memory out of proportion to the request: a loop over a huge range or "
    "literal, text that doubles in a loop or a recursion, a macro that calls itself more than once per call, a "
    "huge repetition, power, width or replacement. The bound is computed for a representative request (a few dozen "
    "messages and tools of a few kilobytes each, numbers from the request unbounded): the render exceeds it on an "
    "ordinary request, or the request alone chooses how long it runs.",
)

DATA_ITEMS = 8  # items of a list or dict of the request
DATA_CHARS = 1024  # characters of a string of the request
DATA_TEXT = 16384  # characters of the request as text (any part of it, printed or as JSON)
DATA_NODES = 1024  # values in the whole request (the bound of a walk over it)
RECURSION = 1000  # calls deep Python lets a recursion go (its default limit)
WORK_LIMIT = 2e7  # steps (a loop iteration, a macro call, 64 characters made): a few seconds of a render
SIZE_LIMIT = float(1 << 27)  # characters of one value, or of the output
BITS_LIMIT = float(1 << 22)  # bits of one number (a power computed past that takes seconds)
INF = math.inf
_SIMULATE = 64  # iterations of a geometric loop computed one by one


class Budget(Exception):
    """The bound took longer to compute than the audit allows."""


class _Exceeded(Exception):
    def __init__(self, line: int | None, why: str):
        super().__init__(why)
        self.line = line
        self.why = why


@dataclass(frozen=True)
class C:
    """Bounds of a value: ``chars`` as text, ``items`` as a container, ``bits`` as a number (``None``: it is not
    one), ``elem`` the bounds of its items; ``data`` when the request sizes it; ``part`` the macro parameters
    (``macro/param``) it is a part of."""

    chars: float = 0.0
    items: float | None = None
    bits: float | None = None
    elem: C | None = None
    data: bool = False
    part: frozenset[str] = frozenset()

    def text(self) -> float:
        """Its length as text: a container's length is its items' text and separators."""
        t = self.chars
        if self.items is not None:
            e = self.elem.text() if self.elem is not None else 8.0
            t = max(t, self.items * (e + 4))
        if self.bits is not None and math.isfinite(self.bits):
            t = max(t, self.bits * 0.31 + 2)
        return min(t, DATA_TEXT) if self.data and self.elem is not None and self.elem.data else t

    def count(self) -> float:
        """How many times iterating it loops (characters of a text, items of a container)."""
        n = self.items if self.items is not None else 0.0
        return max(n, self.chars)


def _jn(*cs: C | None) -> C:
    """The least bound of any of ``cs``."""
    xs = [c for c in cs if c is not None]
    if not xs:
        return C()
    if len(xs) == 1:
        return xs[0]
    items = [c.items for c in xs if c.items is not None]
    bits = [c.bits for c in xs if c.bits is not None]
    elems = [c.elem for c in xs if c.elem is not None]
    return C(
        max(c.chars for c in xs),
        max(items) if items else None,
        max(bits) if bits else None,
        _jn(*elems) if elems else None,
        any(c.data for c in xs),
        frozenset().union(*(c.part for c in xs)),
    )


def _num(value: float) -> C:
    return C(chars=len(str(value)) if math.isfinite(value) else 24, bits=max(1.0, math.log2(abs(value) + 1)))


def _const(v: Any, depth: int = 0) -> C:
    if isinstance(v, bool) or v is None:
        return C(chars=5, bits=1)
    if isinstance(v, (int, float)):
        return _num(float(v) if math.isfinite(float(v)) else 1e300)
    if isinstance(v, str):
        return C(chars=len(v))
    if isinstance(v, (list, tuple)):
        if depth > 3 or len(v) > 4096:
            return C(items=len(v), elem=C(chars=64, items=64))
        return C(items=len(v), elem=_jn(*(_const(x, depth + 1) for x in v)) if v else None)
    if isinstance(v, dict):
        if depth > 3 or len(v) > 4096:
            return C(items=len(v), elem=C(chars=64, items=64))
        return C(items=len(v), elem=_jn(*(_const(x, depth + 1) for x in [*v.keys(), *v.values()])) if v else None)
    return C(chars=64)


#: a value of the request: a string, a number, or a list or dict of such (nested)
_DATA = C(chars=DATA_CHARS, items=DATA_ITEMS, bits=INF, data=True)
_DATA = replace(_DATA, elem=_DATA)
_NUMBER = C(chars=24, bits=64)
_BOOL = C(chars=5, bits=1)
_SMALL = C(chars=64)


def _mag(c: C) -> float:
    """An upper bound of the number's absolute value (inf when unbounded)."""
    if c.bits is None:
        return 0.0
    if c.bits >= 1000:
        return INF
    return 2.0**c.bits


_PRINTF_RE = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")


class _Cost:
    def __init__(self, nodes: Any, deadline: float):
        self.n = nodes
        self.deadline = deadline
        self.env: dict[str, C] = {}
        self.ns: dict[str, C] = {}
        self.work = 0.0
        self.output = 0.0
        self.mult = 1.0
        self.counting = True
        self.macros: dict[str, Any] = {}
        self.summaries: dict[tuple[Any, ...], tuple[float, float]] = {}
        self.stack: list[dict[str, Any]] = []
        self.callers: list[Any] = []
        self.cyclic = False
        self.ticks = 0

    # -- accounting -------------------------------------------------------------------------------

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks % 512 == 0 and time.process_time() > self.deadline:
            raise Budget

    def spend(self, steps: float, line: int | None, why: str) -> None:
        if not self.counting:
            return
        self.work += self.mult * steps
        if self.work > WORK_LIMIT:
            raise _Exceeded(line, why)

    def made(self, c: C, line: int | None, what: str) -> C:
        """A value just made: its size is checked and its making counted."""
        size = max(c.chars, c.items or 0.0)
        if size > SIZE_LIMIT or (c.items is not None and c.text() > 64 * SIZE_LIMIT):
            raise _Exceeded(line, f"{what} can make a value of {_fmt(size)} characters or items")
        if c.bits is not None and c.bits > BITS_LIMIT and not (c.data and not math.isfinite(c.bits)):
            raise _Exceeded(line, f"{what} can make a number of {_fmt(c.bits)} bits")
        self.spend(1 + size / 64, line, f"{what} costs too much")
        return c

    def emit(self, c: C, line: int | None) -> None:
        if not self.counting:
            return
        self.output += self.mult * c.text()
        if self.output > SIZE_LIMIT:
            raise _Exceeded(line, f"the output can reach {_fmt(self.output)} characters")
        self.spend(c.text() / 64, line, "writing the output costs too much")

    # -- statements -------------------------------------------------------------------------------

    def walk(self, body: Iterable[Any]) -> None:
        n = self.n
        for node in body:
            self.tick()
            if isinstance(node, n.Output):
                for child in node.nodes:
                    self.emit(self.ev(child), getattr(child, "lineno", node.lineno))
            elif isinstance(node, n.If):
                self.ev(node.test)
                self.branches([node.body, *[[e] for e in node.elif_], node.else_])
            elif isinstance(node, n.For):
                self.loop(node)
            elif isinstance(node, n.Macro):
                self.macros[identifier(node.name)] = node
                self.env[identifier(node.name)] = C(chars=16)
            elif isinstance(node, n.CallBlock):
                self.callers.append(node)
                try:
                    self.ev(node.call)
                finally:
                    self.callers.pop()
            elif isinstance(node, n.Assign):
                self.assign(node.target, self.ev(node.node))
            elif isinstance(node, n.AssignBlock):
                before = self.output
                self.walk(node.body)
                self.assign(node.target, C(chars=max(0.0, self.output - before) / max(self.mult, 1.0)))
            elif isinstance(node, n.With):
                for t, v in zip(node.targets, node.values):
                    self.assign(t, self.ev(v))
                self.walk(node.body)
            elif isinstance(node, n.ExprStmt):
                self.ev(node.node)
            elif isinstance(node, (n.FilterBlock, n.Block, n.Scope, n.OverlayScope, n.ScopedEvalContextModifier)):
                self.walk(node.body)
            elif isinstance(node, (n.Include, n.Import, n.FromImport, n.Extends)):
                pass  # another template: not seen (GGUF-T201)
            elif isinstance(node, n.Expr):
                self.ev(node)
            elif isinstance(node, n.Node):
                for child in node.iter_child_nodes():
                    if isinstance(child, n.Expr):
                        self.ev(child)
                    else:
                        self.walk([child])

    def branches(self, bodies: list[list[Any]]) -> None:
        """Each branch from the same state; after them, the larger bound of each variable; the work of all."""
        start_env, start_ns = dict(self.env), dict(self.ns)
        ends = []
        for body in bodies:
            self.env, self.ns = dict(start_env), dict(start_ns)
            self.walk(body)
            ends.append((self.env, self.ns))
        self.env = _merge([e for e, _ in ends])
        self.ns = _merge([s for _, s in ends])

    def assign(self, target: Any, value: C) -> None:
        n = self.n
        if isinstance(target, n.Name):
            self.env[identifier(target.name)] = value
        elif isinstance(target, n.NSRef):
            self.ns[target.attr] = value
        elif isinstance(target, (n.Tuple, n.List)):
            elem = value.elem or value
            for item in target.items:
                self.assign(item, elem)

    def loop(self, node: Any) -> None:
        it = self.ev(node.iter)
        line = node.lineno
        trips = it.count()
        if it.bits is not None and it.items is None and it.chars <= 24:
            trips = 0.0  # a number is not iterable
        if node.recursive:
            trips = INF if self.cyclic else max(trips, DATA_NODES)
        if not math.isfinite(trips):
            raise _Exceeded(line, f"the loop over {self.path(node.iter)} has no bound the audit can see")
        elem = it.elem or (C(chars=1) if it.items is None else _SMALL)
        if it.chars and it.items is None:
            elem = C(chars=1, data=it.data)
        targets = self.names(node.target)
        saved = {t: self.env.get(t) for t in (*targets, "loop")}
        self.assign(node.target, elem)
        self.env["loop"] = C(chars=16, bits=math.log2(trips + 2))
        self.iterate(node.body, trips, it.data, line, f"the loop over {self.path(node.iter)}", node.test)
        for t, v in saved.items():
            if v is None:
                self.env.pop(t, None)
            else:
                self.env[t] = v
        self.walk(node.else_)

    def iterate(self, body: list[Any], trips: float, data: bool, line: int | None, what: str, test: Any = None) -> None:
        """``body`` run ``trips`` times: variables that grow in it, and its work."""
        if trips <= 0:
            return
        counting, mult = self.counting, self.mult
        self.counting = False
        env0, ns0 = dict(self.env), dict(self.ns)
        try:
            self.once(body, test)
            env1, ns1 = dict(self.env), dict(self.ns)
            self.once(body, test)
            env2, ns2 = dict(self.env), dict(self.ns)
        finally:
            self.counting = counting
        grow = _growth(env0, env1, env2) + _growth(ns0, ns1, ns2)
        geometric = [k for k, kind_ in grow if kind_ == "geometric"]
        if geometric:
            if data or trips > _SIMULATE:
                raise _Exceeded(
                    line, f"{geometric[0]} grows geometrically (it at least doubles) in each pass of {what}"
                )
            self.env, self.ns = env0, ns0
            self.counting = False
            try:
                for _ in range(int(trips) - 1):
                    self.once(body, test)
                    for table in (self.env, self.ns):
                        for k in geometric:
                            c = table.get(k)
                            if c is not None:
                                self.made(c, line, f"{k}, doubled in {what},")
            finally:
                self.counting = counting
            self.mult = mult * max(1.0, trips)
            try:
                self.once(body, test)
            finally:
                self.mult = mult
            return
        # linear growth: after ``trips`` passes, each grown bound is its start plus ``trips`` steps
        for table, t0, t1 in ((self.env, env0, env1), (self.ns, ns0, ns1)):
            for k, c1 in t1.items():
                c0 = t0.get(k)
                if c0 is not None and c1 != c0:
                    table[k] = self.made(_extend(c0, c1, trips), line, f"{k}, grown in {what},")
                else:
                    table[k] = c1
        self.mult = mult * trips
        try:
            self.spend(1, line, f"{what} runs too many times")
            self.once(body, test)
        finally:
            self.mult = mult

    def once(self, body: list[Any], test: Any) -> None:
        if test is not None:
            self.ev(test)
        self.walk(body)

    def names(self, target: Any) -> list[str]:
        if isinstance(target, self.n.Name):
            return [identifier(target.name)]
        if isinstance(target, (self.n.Tuple, self.n.List)):
            return [x for item in target.items for x in self.names(item)]
        return []

    # -- expressions ------------------------------------------------------------------------------

    def ev(self, node: Any) -> C:
        n = self.n
        self.tick()
        line = getattr(node, "lineno", None)
        if isinstance(node, n.Const):
            return _const(node.value)
        if isinstance(node, n.TemplateData):
            return C(chars=len(node.data))
        if isinstance(node, n.Name):
            name = identifier(node.name)
            if name in self.env:
                return self.env[name]
            if name in ("range", "dict", "lipsum", "cycler", "joiner", "namespace", "caller", "self", "loop"):
                return C(chars=16)
            return _DATA
        if isinstance(node, (n.Tuple, n.List)):
            items = [self.ev(i) for i in node.items]
            return self.made(C(items=len(items), elem=_jn(*items) if items else None), line, "a literal list")
        if isinstance(node, n.Dict):
            parts = [self.ev(x) for p in node.items for x in (p.key, p.value)]
            return self.made(C(items=len(node.items), elem=_jn(*parts) if parts else None), line, "a literal dict")
        if isinstance(node, n.CondExpr):
            self.ev(node.test)
            return _jn(self.ev(node.expr1), self.ev(node.expr2) if node.expr2 is not None else None)
        if isinstance(node, (n.And, n.Or)):
            return _jn(self.ev(node.left), self.ev(node.right))
        if isinstance(node, (n.Not, n.Compare, n.Test)):
            for child in node.iter_child_nodes():
                if isinstance(child, n.Expr):
                    self.ev(child)
                elif isinstance(child, n.Operand):
                    self.ev(child.expr)
            return _BOOL
        if isinstance(node, (n.Neg, n.Pos)):
            return self.ev(node.node)
        if isinstance(node, (n.MarkSafe, n.MarkSafeIfAutoescape)):
            return self.ev(node.expr)
        if isinstance(node, n.Concat):
            parts = [self.ev(x) for x in node.nodes]
            return self.made(C(chars=sum(p.text() for p in parts), data=any(p.data for p in parts)), line, "'~'")
        if isinstance(node, n.BinExpr):
            a, b = self.ev(node.left), self.ev(node.right)
            widths = 0.0
            if node.operator == "%":
                widths = self.printf_widths(node.left, [b.elem or b] if b.items is not None else [b])
            return self.binop(node.operator, a, b, line, widths)
        if isinstance(node, n.Getattr):
            return self.part(self.ev(node.node), node.attr)
        if isinstance(node, n.Getitem):
            recv = self.ev(node.node)
            if isinstance(node.arg, n.Slice):
                for p in (node.arg.start, node.arg.stop, node.arg.step):
                    if p is not None:
                        self.ev(p)
                return recv
            self.ev(node.arg)
            return self.part(recv, None)
        if isinstance(node, n.Call):
            return self.call(node)
        if isinstance(node, n.Filter):
            return self.filter(node)
        if isinstance(node, n.Slice):
            return _NUMBER
        for child in node.iter_child_nodes():
            if isinstance(child, n.Expr):
                self.ev(child)
        return _DATA

    def part(self, recv: C, name: str | None) -> C:
        """An attribute or item of ``recv``: a part of whatever it is a part of."""
        if name is not None and recv.items is None and recv.bits is None and recv.chars <= 16:
            return _jn(self.ns.get(name), C(chars=16))  # an attribute of a Jinja object or a namespace
        if recv.bits is not None and recv.items is None and not recv.data:
            return recv  # loop.index, a number's parts: as large as it
        e = recv.elem if recv.elem is not None else (C(chars=1) if recv.items is None else _SMALL)
        if recv.data:
            e = _DATA
        out = replace(e, part=e.part | recv.part | self.params_of(recv))
        if name is not None:
            out = _jn(out, self.ns.get(name))
        return out

    def params_of(self, recv: C) -> frozenset[str]:
        return frozenset(p for p in recv.part if p.startswith("param:"))

    def binop(self, op: str, a: C, b: C, line: int | None, widths: float = 0.0) -> C:
        data = a.data or b.data
        if op in ("add", "+"):
            op = "+"
        if op == "+":
            items = a.items + b.items if a.items is not None and b.items is not None else None
            bits = _bits_add(a.bits, b.bits) if a.bits is not None and b.bits is not None else None
            return self.made(
                C(a.chars + b.chars, items, bits, _jn(a.elem, b.elem) if items is not None else None, data), line, "'+'"
            )
        if op == "*":
            out = []
            for x, y in ((a, b), (b, a)):
                times = _mag(y)
                if y.bits is not None and (x.chars > 0 or x.items is not None):
                    out.append(
                        C(x.chars * times, x.items * times if x.items is not None else None, None, x.elem, data)
                    )
            if a.bits is not None and b.bits is not None:
                out.append(C(24, None, a.bits + b.bits, None, data))
            return self.made(_jn(*out), line, "'*' repetition")
        if op == "**":
            if a.bits is not None and b.bits is not None:
                bits = a.bits * _mag(b) if a.bits > 1 else 1.0
                return self.made(C(24, None, bits, None, data), line, "'**' power")
            return _NUMBER
        if op in ("-", "/", "//"):
            bits = _bits_add(a.bits or 1, b.bits or 1) if op == "-" else (a.bits or 1) + (64 if op == "/" else 0)
            return C(24, a.items, bits, a.elem, data)
        if op == "%":
            if a.bits is not None and a.chars <= 24 and a.items is None:
                return C(24, None, b.bits or a.bits, None, data)
            return self.made(C(a.chars + b.text() + widths, None, None, None, data), line, "'%' formatting")
        return _NUMBER

    # -- calls ------------------------------------------------------------------------------------

    def args(self, node: Any) -> tuple[list[C], dict[str, C]]:
        args = [self.ev(a) for a in node.args]
        kwargs = {identifier(k.key): self.ev(k.value) for k in node.kwargs}
        if node.dyn_args is not None:
            args.append(self.ev(node.dyn_args))
        if node.dyn_kwargs is not None:
            kwargs["**"] = self.ev(node.dyn_kwargs)
        return args, kwargs

    def call(self, node: Any) -> C:
        n = self.n
        line = node.lineno
        args, kwargs = self.args(node)
        callee = node.node
        if isinstance(callee, n.Name):
            name = identifier(callee.name)
            if name == "range" and name not in self.env:
                lo, hi, step = (C(bits=0), args[0], None) if len(args) == 1 else (*args[:2], args[2] if len(args) > 2 else None)
                span = _mag(hi) + _mag(lo) if args else 0.0
                if step is not None and step.bits is not None and step.bits < 1:
                    span = INF
                if not math.isfinite(span):
                    raise _Exceeded(line, "range() with a bound the audit cannot see (a number the request or the template computes)")
                return self.made(C(items=span, elem=_num(span), data=hi.data or lo.data), line, "range()")
            if name == "lipsum" and name not in self.env:
                count = _mag(args[0]) if args else 5.0
                words = _mag(args[3]) if len(args) > 3 else 100.0
                return self.made(C(chars=count * words * 12), line, "lipsum()")
            if name in ("cycler", "joiner", "namespace", "dict"):
                return self.made(
                    C(chars=16, items=float(len(args) + len(kwargs)), elem=_jn(*args, *kwargs.values())), line, name
                )
            if name == "caller" and self.callers:
                return self.run_caller(args, line)
            if name in self.macros:
                return self.macro_call(name, args, kwargs, line)
        if isinstance(callee, n.Getattr):
            recv = self.ev(callee.node)
            return self.method(callee.attr, recv, args, kwargs, line, callee.node)
        self.ev(callee)
        return _jn(_DATA if any(a.data for a in args) else None, _SMALL)

    def run_caller(self, args: list[C], line: int | None) -> C:
        block = self.callers.pop()
        try:
            before = self.output
            saved = dict(self.env)
            for a, c in zip(block.args, args):
                self.env[identifier(a.name)] = c
            self.walk(block.body)
            self.env = saved
            return C(chars=max(0.0, self.output - before) / max(self.mult, 1.0))
        finally:
            self.callers.append(block)

    def macro_call(self, name: str, args: list[C], kwargs: dict[str, C], line: int | None) -> C:
        node = self.macros[name]
        self.spend(5, line, f"calls of macro {node.name} cost too much")
        active = next((f for f in self.stack if f["name"] == name), None)
        params = [identifier(a.name) for a in node.args]
        bound = {p: kwargs.get(p, args[i] if i < len(args) else C(chars=16)) for i, p in enumerate(params)}
        if active is not None:  # a recursive call: note how it recurses, and what it passes down
            active["fanout"] += self.mult / active["mult"]
            mine = {f"param:{name}/{p}" for p in params}
            if not any(mine & c.part for c in bound.values()):
                active["structural"] = False
            for p, c in bound.items():
                was = active["params"].get(p)
                if was is not None and c.text() > was.text() + 1:
                    active["grows"] = max(active["grows"], c.text() / max(was.text(), 1.0))
            return C(chars=0.0)
        key = (name, *(_bucket(bound[p]) for p in params))
        summary = self.summaries.get(key)
        if summary is None:
            summary = self.summarise(node, name, params, bound, line)
            self.summaries[key] = summary
        work, out = summary
        self.spend(work, line, f"calls of macro {node.name} cost too much")
        return self.made(C(chars=out), line, f"macro {node.name}")

    def summarise(self, node: Any, name: str, params: list[str], bound: dict[str, C], line: int | None) -> tuple[float, float]:
        """The work and output of one call of a macro, recursion included."""
        frame = {"name": name, "mult": 1.0, "fanout": 0.0, "structural": True, "grows": 0.0, "params": bound}
        saved_env, saved_work, saved_out, saved_mult, saved_counting = dict(self.env), self.work, self.output, self.mult, self.counting
        self.stack.append(frame)
        self.mult = 1.0
        self.counting = True
        self.work = 0.0
        self.output = 0.0
        try:
            for p, c in bound.items():
                self.env[p] = replace(c, part=c.part | {f"param:{name}/{p}"})
            for p, d in zip(params[len(params) - len(node.defaults) :], node.defaults):
                if p not in bound or bound[p] == C(chars=16):
                    self.env[p] = replace(self.ev(d), part=frozenset({f"param:{name}/{p}"}))
            self.walk(node.body)
            work, out = self.work, self.output
        finally:
            self.stack.pop()
            self.env, self.mult, self.counting = saved_env, saved_mult, saved_counting
            self.work, self.output = saved_work, saved_out
        if frame["fanout"] > 0:
            if frame["structural"] and not self.cyclic:
                calls = float(DATA_NODES)
            elif frame["fanout"] <= 1.0:
                calls = float(RECURSION)
                if frame["grows"] >= 2.0:
                    raise _Exceeded(line, f"macro {node.name} passes itself an argument that at least doubles at each call")
                if frame["grows"] > 0:
                    out = out + calls * frame["grows"] * 64
            else:
                raise _Exceeded(
                    line,
                    f"macro {node.name} calls itself {_fmt(frame['fanout'])} times per call: its calls multiply "
                    "with each level (up to Python's recursion limit)",
                )
            work, out = work * calls, out * calls
            if out > SIZE_LIMIT or work > WORK_LIMIT:
                raise _Exceeded(line, f"macro {node.name} recurses past the bound ({_fmt(calls)} calls)")
        return work + 5, out

    def method(self, name: str, recv: C, args: list[C], kwargs: dict[str, C], line: int | None, node: Any) -> C:
        size = recv.text()
        if name in ("center", "ljust", "rjust", "zfill"):
            width = _mag(args[0]) if args else 0.0
            return self.made(C(chars=max(recv.chars, width), data=recv.data), line, f".{name}()")
        if name == "expandtabs":
            tab = _mag(args[0]) if args else 8.0
            return self.made(C(chars=recv.chars * max(tab, 1.0), data=recv.data), line, ".expandtabs()")
        if name == "replace":
            new = args[1].text() if len(args) > 1 else 0.0
            return self.made(C(chars=recv.chars + (recv.chars + 1) * new, data=recv.data), line, ".replace()")
        if name == "join":
            items = args[0] if args else C()
            return self.made(
                C(chars=items.count() * (recv.chars + (items.elem.text() if items.elem else 8.0)), data=items.data),
                line,
                ".join()",
            )
        if name in ("format", "format_map"):
            return self.made(
                C(chars=recv.chars + sum(a.text() for a in args) + sum(k.text() for k in kwargs.values())
                  + self.format_widths(node, args, kwargs)),
                line,
                ".format()",
            )
        if name in ("split", "rsplit", "splitlines", "partition", "rpartition", "keys", "values", "items"):
            return self.made(C(items=max(recv.count(), 1.0) + 1, elem=recv.elem or C(chars=recv.chars, data=recv.data), data=recv.data), line, f".{name}()")
        if name in ("append", "extend", "insert", "update", "setdefault", "add"):
            if any(a.items is not None for a in args) or any(k.items is not None for k in kwargs.values()):
                self.cyclic = True
            return C(chars=4)
        if name in ("pop", "get", "popitem"):
            return _jn(recv.elem, *(args[1:2]))
        if name in ("count", "find", "index", "rfind", "rindex", "startswith", "endswith") or name.startswith("is"):
            self.spend(size / 64, line, f".{name}()")
            return _NUMBER
        if name in ("upper", "lower", "strip", "lstrip", "rstrip", "title", "capitalize", "casefold", "swapcase",
                    "removeprefix", "removesuffix", "encode", "decode", "copy"):
            return self.made(replace(recv, part=frozenset()), line, f".{name}()")
        if name in ("cycle",):
            return _jn(*args) if args else _SMALL
        return _jn(_SMALL, recv.elem, _DATA if recv.data else None)

    def format_widths(self, fmt: Any, args: list[C], kwargs: dict[str, C]) -> float:
        """Widths a str.format string asks for: constant ones are read; computed ones (``{:>{}}``, or a format
        string not known in advance) are bounded by the arguments' values."""
        numbers = sum(_mag(a) for a in [*args, *kwargs.values()] if a.bits is not None)
        if isinstance(fmt, self.n.Const) and isinstance(fmt.value, str):
            try:
                fields = format_fields(fmt.value)
            except ValueError:
                return 0.0
            total = 0.0
            for _field, spec in fields:
                if "{" in spec:
                    return numbers + sum(float(d) for d in re.findall(r"\d+", spec))
                total += sum(float(d) for d in re.findall(r"\d+", spec))
            return total
        return numbers
    # -- filters ----------------------------------------------------------------------------------

    def filter(self, node: Any) -> C:
        line = node.lineno
        recv = self.ev(node.node) if node.node is not None else C(chars=SIZE_LIMIT / 2 ** 10)
        args, kwargs = self.args(node)
        name = node.name
        size = recv.text()
        elem = recv.elem or (C(chars=1) if recv.items is None else _SMALL)
        if recv.data:
            elem = _DATA
        count = recv.count()
        self.spend(count / 16, line, f"|{name} costs too much")
        if name in ("length", "count", "wordcount", "int", "float", "abs", "round", "bool"):
            if name in ("int", "float", "abs", "round"):
                return C(24, None, INF if recv.data or recv.bits is None else recv.bits, None, recv.data)
            return C(24, None, math.log2(max(count, size) + 2), None, recv.data)
        if name in ("first", "last", "random", "min", "max"):
            return elem
        if name in ("list", "sort", "unique", "reverse", "select", "reject", "selectattr", "rejectattr", "map",
                    "dictsort", "items", "groupby"):
            if recv.items is None and recv.chars:
                return self.made(C(items=recv.chars, elem=C(chars=1), data=recv.data), line, f"|{name}")
            return self.made(C(items=count, elem=elem, data=recv.data), line, f"|{name}")
        if name in ("batch", "slice"):
            return self.made(C(items=count, elem=C(items=count, elem=elem), data=recv.data), line, f"|{name}")
        if name == "join":
            sep = args[0].text() if args else 0.0
            return self.made(C(chars=count * (elem.text() + sep), data=recv.data), line, "|join")
        if name == "sum":
            start = args[1] if len(args) > 1 else kwargs.get("start")
            if start is not None and start.items is not None:
                return self.made(C(items=count * (elem.items or 1.0), elem=elem.elem, data=recv.data), line, "|sum")
            return C(24, None, (elem.bits or 1) + math.log2(count + 2), None, recv.data)
        if name in ("default", "d"):
            return _jn(recv, args[0] if args else kwargs.get("default_value"))
        if name in ("center",):
            width = _mag(args[0]) if args else 80.0
            return self.made(C(chars=max(size, width), data=recv.data), line, "|center")
        if name == "indent":
            width = args[0] if args else kwargs.get("width", C(bits=3))
            w = width.chars if width.bits is None else _mag(width)
            return self.made(C(chars=size + (size + 1) * w, data=recv.data), line, "|indent")
        if name == "wordwrap":
            wrap = args[2].text() if len(args) > 2 else 1.0
            return self.made(C(chars=size * (1 + wrap), data=recv.data), line, "|wordwrap")
        if name == "truncate":
            end = args[2].text() if len(args) > 2 else 3.0
            return self.made(C(chars=size + end, data=recv.data), line, "|truncate")
        if name == "replace":
            new = args[1].text() if len(args) > 1 else 0.0
            return self.made(C(chars=size + (size + 1) * new, data=recv.data), line, "|replace")
        if name == "format":
            return self.made(
                C(chars=size + sum(a.text() for a in args) + self.printf_widths(node.node, args), data=recv.data),
                line,
                "|format",
            )
        if name in ("tojson", "pprint", "string", "e", "escape", "forceescape", "urlencode", "urlize", "xmlattr",
                    "safe", "trim", "striptags", "lower", "upper", "title", "capitalize", "filesizeformat"):
            indent = _mag(kwargs.get("indent") or (args[0] if args and name == "tojson" else C(bits=0)))
            factor = 6.0 if name in ("e", "escape", "forceescape", "urlencode", "urlize", "xmlattr") else 1.0
            return self.made(C(chars=size * factor * (1 + indent), data=recv.data), line, f"|{name}")
        if name == "from_json":
            return _DATA
        if name == "attr":
            return _jn(_SMALL, elem)
        return _jn(C(chars=size), _DATA if recv.data else None)

    def printf_widths(self, fmt: Any, args: list[C]) -> float:
        """Widths and precisions a %-format asks for (``%9999s``, ``%*s``)."""
        if isinstance(fmt, self.n.Const) and isinstance(fmt.value, str):
            total = 0.0
            star = 0
            for width, precision in ((m.group(1), m.group(2)) for m in _PRINTF_RE.finditer(fmt.value)):
                for g in (width, precision):
                    if g == "*":
                        total += _mag(args[star]) if star < len(args) else 0.0
                        star += 1
                    elif g:
                        total += float(g)
            return total
        return sum(_mag(a) for a in args if a.bits is not None)

    @staticmethod
    def path(node: Any) -> str:
        return type(node).__name__ if not hasattr(node, "name") else str(node.name)[:30]


def _merge(tables: list[dict[str, C]]) -> dict[str, C]:
    out: dict[str, C] = {}
    for t in tables:
        for k, v in t.items():
            out[k] = _jn(out.get(k), v)
    return out


def _growth(t0: dict[str, C], t1: dict[str, C], t2: dict[str, C]) -> list[tuple[str, str]]:
    """Which bounds grew in the first pass and the second, and whether faster the second time (geometric)."""
    out = []
    for k, c2 in t2.items():
        c0, c1 = t0.get(k), t1.get(k)
        if c0 is None or c1 is None:
            continue
        kind_ = None
        for f in (lambda c: c.chars, lambda c: c.items or 0.0):
            g1, g2 = f(c1) - f(c0), f(c2) - f(c1)
            if g1 > 0 or g2 > 0:
                kind_ = "geometric" if g2 > g1 * 1.01 + 1e-9 else "linear"
                break
        # a number's size in bits: a counter adds ever fewer bits; half a bit or more each pass is a factor
        g1, g2 = (c1.bits or 0.0) - (c0.bits or 0.0), (c2.bits or 0.0) - (c1.bits or 0.0)
        if g1 >= 0.5 or g2 >= 0.5:
            kind_ = "geometric"
        elif kind_ is None and (g1 > 0 or g2 > 0):
            kind_ = "linear"
        if kind_:
            out.append((k, kind_))
    return out


def _extend(c0: C, c1: C, trips: float) -> C:
    """The bound after ``trips`` passes that each add what the first pass added."""
    items = (
        c0.items + trips * (c1.items - c0.items) if c0.items is not None and c1.items is not None else c1.items
    )
    bits = c1.bits
    if c0.bits is not None and c1.bits is not None and math.isfinite(c0.bits) and math.isfinite(c1.bits):
        # a counter: the start plus ``trips`` increments
        step = 2.0 ** min(c1.bits, 1000) - 2.0 ** min(c0.bits, 1000)
        bits = max(c1.bits, math.log2(2.0 ** min(c0.bits, 1000) + trips * max(step, 1.0) + 1))
    return C(
        c0.chars + trips * max(0.0, c1.chars - c0.chars),
        items,
        bits,
        _jn(c0.elem, c1.elem) if c0.elem is not None or c1.elem is not None else None,
        c0.data or c1.data,
        c0.part | c1.part,
    )


def _bucket(c: C) -> tuple[Any, ...]:
    def b(x: float | None) -> Any:
        return None if x is None else (INF if not math.isfinite(x) else round(math.log2(x + 1)))

    return (b(c.chars), b(c.items), b(c.bits), c.data, bool(c.part))


def _bits_add(a: float, b: float) -> float:
    """Bits of the sum of two numbers of ``a`` and ``b`` bits."""
    hi, lo = max(a, b), min(a, b)
    return hi + math.log2(1 + 2.0 ** max(lo - hi, -60))


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "unbounded"
    return f"{x:,.0f}" if x < 1e15 else f"{x:.1e}"


def check(tree: Any, findings: Findings, nodes: Any, deadline: float) -> None:
    """Report (GGUF-T504) when the bound of a render of ``tree`` passes the limits."""
    cost = _Cost(nodes, deadline)
    cost.cyclic = _may_make_cycles(tree, nodes)
    try:
        cost.walk(tree.body)
    except _Exceeded as e:
        findings.add(T504, f"rendering can cost too much: {e.why}", e.line)
    except (ArithmeticError, ValueError):  # an arithmetic overflow of the bound itself: unbounded
        findings.add(T504, "rendering can cost too much: a bound of the render overflows")


def _may_make_cycles(tree: Any, nodes: Any) -> bool:
    """Whether the template can put a container into a container (so a walk over it may never end)."""
    for call in tree.find_all(nodes.Call):
        if isinstance(call.node, nodes.Getattr) and call.node.attr in (
            "append", "extend", "insert", "update", "setdefault", "add", "__setitem__"
        ):
            if any(not isinstance(a, nodes.Const) for a in [*call.args, *(k.value for k in call.kwargs)]):
                return True
    return False

