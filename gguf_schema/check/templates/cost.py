"""Render cost: a bound of what rendering the template costs, as a polynomial in the size of the request.

:func:`check` walks the template in order, abstractly. Every quantity (a loop's trip count, the
length of a text, the items of a list, the size of a number, the work done) is bounded by a
polynomial in ``N``, the size of the request (``3 + 2N``: three, plus twice the request). The
request's own values are of size ``N``; a number the request gives (``x|int``) is unbounded; a
constant is its value. A render is in proportion to its request when its bound has small
coefficients; ``GGUF-T504`` reports when it has not:

* a constant part past :data:`WORK_LIMIT` steps or :data:`SIZE_LIMIT` characters: the render
  costs that on a one-message request (``range(10**9)``, ``'x' * 10**9``, a literal of a million
  items looped over three times, ``'%999999999s'``, ``9 ** 9 ** 9``);
* a part in ``N`` past :data:`PER_REQUEST_WORK` steps or :data:`PER_REQUEST_SIZE` characters per character of
  request: an amplification
  (``content * 10**6``);
* growth that is not polynomial: a variable that a loop's body grows faster on its second pass
  than on its first (``s = s ~ s``, ``a = a ~ b; b = a``, ``x = x * 2``) over a count the
  request gives or past :data:`GEOMETRIC_TRIPS` passes; a macro that calls itself more than
  once per call, or passes itself an argument that doubles (bounded only by Python's recursion
  limit); a count or size the request chooses by a number (``range(x|int)``).

A macro that calls itself on a part of its parameter (walking a JSON schema) is bounded by the
request's size. The bound is sound for the constructs modelled and over-approximates the rest;
real chat templates have coefficients in the hundreds.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from .folding import format_fields
from .jinja import identifier, target_names
from .rules import Findings, rule

__all__ = ["T504", "CostOverBudget", "check"]

T504 = rule(
    "GGUF-T504",
    "error",
    "render-cost",
    "Rendering the template can take time or memory out of proportion to the request: a loop over a huge range or "
    "literal, a huge repetition, power, width or replacement, text that doubles in a loop or a recursion, a macro "
    "that calls itself more than once per call, or a count the request's numbers choose. The bound is a polynomial "
    "in the size of the request; a finding says which part of it is too large and where.",
)

DEG = 5  # highest power of N tracked (higher ones count as N**5)
WORK_LIMIT = 2e7  # steps (a loop pass, a call, 64 characters made) a render may take whatever the request
SIZE_LIMIT = float(1 << 27)  # characters (or items) of one value or of the output, whatever the request
PER_REQUEST_WORK = 1e6  # steps per character of request, for each power of N
PER_REQUEST_SIZE = 1e6  # characters per character of request, for each power of N
BITS_LIMIT = 1 << 22  # bits of a number computed (a power past that takes seconds)
GEOMETRIC_TRIPS = 64  # passes of a loop whose variables grow geometrically computed one by one
RECURSION = 1000.0  # calls deep Python lets a recursion go
INF = math.inf

P = tuple[float, ...]  # coefficients of N**0 .. N**DEG


def poly(c0: float = 0.0, c1: float = 0.0) -> P:
    return (c0, c1) + (0.0,) * (DEG - 1)


ZERO = poly()
ONE = poly(1.0)
NSIZE = poly(0.0, 1.0)  # the size of the request
UNBOUNDED = (INF,) + (0.0,) * DEG


def padd(a: P, b: P) -> P:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def pmax(a: P, b: P) -> P:
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def pmul(a: P, b: P) -> P:
    out = [0.0] * (DEG + 1)
    for i, x in enumerate(a):
        if x == 0:
            continue
        for j, y in enumerate(b):
            if y == 0:
                continue
            out[min(i + j, DEG)] += x * y
    return tuple(0.0 if math.isnan(v) else v for v in out)


def pscale(a: P, k: float) -> P:
    return tuple(0.0 if x == 0 else x * k for x in a)


def pbig(a: P) -> bool:
    return not all(math.isfinite(x) for x in a)


def pgt(a: P, b: P) -> bool:
    """Some coefficient of ``a`` is larger than ``b``'s."""
    return any(x > y * 1.01 + 1e-9 for x, y in zip(a, b, strict=True))


def pfmt(a: P) -> str:
    terms = []
    for i, x in enumerate(a):
        if x:
            k = _fmt(x)
            terms.append(k if i == 0 else f"{k}·N" if i == 1 else f"{k}·N^{i}")
    return " + ".join(terms) or "0"


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "unbounded"
    return f"{x:,.0f}" if x < 1e12 else f"{x:.1e}"


class CostOverBudget(Exception):
    """The bound took longer to compute than the audit allows."""


class _Exceeded(Exception):
    def __init__(self, line: int | None, why: str):
        super().__init__(why)
        self.line = line
        self.why = why


@dataclass(frozen=True)
class C:
    """Bounds of a value: ``chars`` as text, ``items`` as a container, ``mag`` its absolute value as a number
    (``None``: it is not one), ``elem`` the bounds of its items; ``data`` when it is (part of) the request;
    ``part`` the macro parameters (``macro/param``) it is a part of."""

    chars: P = ZERO
    items: P | None = None
    mag: P | None = None
    elem: C | None = None
    data: bool = False
    part: frozenset[str] = frozenset()
    sites: frozenset[int] = frozenset()  # the namespace() calls that made it, if it is a namespace
    fns: frozenset[Any] = frozenset()  # the macros (ids of their nodes) or blocks ("block:name") it may be

    def text(self) -> P:
        """Its length as text (a container's: its items' text and separators)."""
        if self.data:
            return pmax(self.chars, NSIZE)
        t = self.chars
        if self.items is not None:
            e = self.elem.text() if self.elem is not None else poly(8.0)
            t = pmax(t, pmul(self.items, padd(e, poly(4.0))))
        if self.mag is not None:
            t = pmax(t, poly(24.0))
        return t

    def count(self) -> P:
        """How many passes iterating it makes (characters of a text, items of a container)."""
        return pmax(self.items if self.items is not None else ZERO, self.chars)


def _jn(*cs: C | None) -> C:
    xs = [c for c in cs if c is not None]
    if not xs:
        return C()
    first = xs[0]
    if all(c is first for c in xs):
        return first
    items = [c.items for c in xs if c.items is not None]
    mags = [c.mag for c in xs if c.mag is not None]
    elems = [c.elem for c in xs if c.elem is not None]
    out_items = items[0] if items else None
    for i in items[1:]:
        out_items = pmax(out_items, i)  # type: ignore[arg-type]
    out_mag = mags[0] if mags else None
    for m in mags[1:]:
        out_mag = pmax(out_mag, m)  # type: ignore[arg-type]
    chars = xs[0].chars
    for c in xs[1:]:
        chars = pmax(chars, c.chars)
    return C(
        chars,
        out_items,
        out_mag,
        _jn(*elems) if elems else None,
        any(c.data for c in xs),
        frozenset().union(*(c.part for c in xs)),
        frozenset().union(*(c.sites for c in xs)),
        frozenset().union(*(c.fns for c in xs)),
    )


def _number(value: float) -> C:
    return C(chars=poly(24.0), mag=poly(abs(value) if math.isfinite(value) else INF))


def _const(v: Any, depth: int = 0) -> C:
    if isinstance(v, bool) or v is None:
        return C(chars=poly(5.0), mag=ONE)
    if isinstance(v, (int, float)):
        if isinstance(v, int) and v.bit_length() > 1000:
            return C(chars=poly(v.bit_length() * 0.31), mag=UNBOUNDED)
        return _number(float(v))
    if isinstance(v, str):
        return C(chars=poly(float(len(v))))
    if isinstance(v, (list, tuple, dict)):
        values = [*v.keys(), *v.values()] if isinstance(v, dict) else list(v)
        if depth > 3 or len(values) > 4096:
            return C(items=poly(float(len(v))), elem=C(chars=poly(64.0), items=poly(64.0)))
        return C(items=poly(float(len(v))), elem=_jn(*(_const(x, depth + 1) for x in values)) if values else None)
    return C(chars=poly(64.0))


_DATA0 = C(chars=NSIZE, items=NSIZE, mag=NSIZE, data=True)  # a number of the request counts as its size
_DATA = replace(_DATA0, elem=_DATA0)
_SMALL = C(chars=poly(64.0))
_BOOL = C(chars=poly(5.0), mag=ONE)
_NUMBER = C(chars=poly(24.0), mag=UNBOUNDED)
_JINJA = C(chars=poly(16.0))  # a Jinja object (a global, a macro, the loop)
_PRINTF_RE = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
_GLOBALS = frozenset({"range", "dict", "lipsum", "cycler", "joiner", "namespace", "caller", "self", "loop"})


class _Cost:
    def __init__(self, nodes: Any, deadline: float):
        self.n = nodes
        self.deadline = deadline
        self.env: dict[str, C] = {}
        self.ns: dict[tuple[int, str], C] = {}  # (namespace() call, attribute) -> bound
        self.work = ZERO
        self.output = ZERO
        self.mult = ONE
        self.counting = True
        self.macros: dict[str, Any] = {}
        self.summaries: dict[tuple[Any, ...], tuple[P, P]] = {}
        self.stack: list[dict[str, Any]] = []
        self.callers: list[Any] = []
        self.recursive: list[int] = []
        self.fn_nodes: dict[int, Any] = {}
        self.blocks: dict[str, Any] = {}
        self.cyclic = False
        self.ticks = 0

    # -- accounting -------------------------------------------------------------------------------

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks % 256 == 0 and time.thread_time() > self.deadline:
            raise CostOverBudget

    def limit(self, p: P, limit: float, line: int | None, why: str) -> None:
        per_request = PER_REQUEST_WORK if limit == WORK_LIMIT else PER_REQUEST_SIZE
        if p[0] > limit or any(x > per_request for x in p[1:]) or pbig(p):
            raise _Exceeded(line, f"{why}: {pfmt(p)} (N: the size of the request)")

    def spend(self, steps: P, line: int | None, why: str) -> None:
        if not self.counting:
            return
        self.work = padd(self.work, pmul(self.mult, steps))
        self.limit(self.work, WORK_LIMIT, line, why)

    def made(self, c: C, line: int | None, what: str) -> C:
        """A value just made: its size is checked and its making counted."""
        size = pmax(c.chars, c.items if c.items is not None else ZERO)
        self.limit(size, SIZE_LIMIT, line, f"{what} makes a value this large")
        self.spend(padd(ONE, pscale(size, 1 / 64)), line, f"{what} costs this many steps")
        return c

    def emit(self, c: C, line: int | None) -> None:
        if not self.counting:
            return
        text = c.text()
        self.output = padd(self.output, pmul(self.mult, text))
        self.limit(self.output, SIZE_LIMIT, line, "the output can reach this many characters")
        self.spend(pscale(text, 1 / 64), line, "writing the output costs this many steps")

    def count(self, c: C, line: int | None, what: str) -> P:
        """A trip count or repetition: a number's value must be bounded."""
        if c.mag is not None and pbig(c.mag):
            raise _Exceeded(
                line, f"{what} is a number the audit cannot bound (the request or the template computes it)"
            )
        return c.mag if c.mag is not None else ZERO

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
                self.fn_nodes[id(node)] = node
                self.env[identifier(node.name)] = replace(_JINJA, fns=frozenset({id(node)}))
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
                self.assign(node.target, C(chars=_diff(self.output, before)))
            elif isinstance(node, n.With):
                for t, v in zip(node.targets, node.values, strict=True):
                    self.assign(t, self.ev(v))
                self.walk(node.body)
            elif isinstance(node, n.ExprStmt):
                self.ev(node.node)
            elif isinstance(node, (n.Include, n.Import, n.FromImport, n.Extends)):
                pass  # another template: not seen (GGUF-T201)
            elif isinstance(node, n.Expr):
                self.ev(node)
            elif isinstance(node, n.Node):  # blocks, scopes, filter blocks, extensions
                for child in node.iter_child_nodes():
                    if isinstance(child, n.Expr):
                        self.ev(child)
                    else:
                        self.walk([child])

    def branches(self, bodies: list[list[Any]]) -> None:
        """Each branch from the same state; after them, the larger bound of each variable; a recursion's calls
        counted as those of the branch that makes the most."""
        start_env, start_ns = dict(self.env), dict(self.ns)
        frames = [(f, f["fanout"]) for f in self.stack]
        ends = []
        most = [ZERO for _ in frames]
        for body in bodies:
            self.env, self.ns = dict(start_env), dict(start_ns)
            for f, before in frames:
                f["fanout"] = before
            self.walk(body)
            ends.append((self.env, self.ns))
            most = [pmax(m, _diff(f["fanout"], before)) for m, (f, before) in zip(most, frames, strict=True)]
        for m, (f, before) in zip(most, frames, strict=True):
            f["fanout"] = padd(before, m)
        self.env = _merge([e for e, _ in ends])
        self.ns = _merge([s for _, s in ends])

    def assign(self, target: Any, value: C) -> None:
        n = self.n
        if isinstance(target, n.Name):
            self.env[identifier(target.name)] = value
        elif isinstance(target, n.NSRef):
            sites = self.env.get(identifier(target.name), C()).sites or frozenset(s for s, _ in self.ns)
            strong = len(sites) == 1 and not self.stack  # one namespace, set in order: its new value
            for site in sites:
                key = (site, target.attr)
                self.ns[key] = value if strong else _jn(self.ns.get(key), value)
        elif isinstance(target, (n.Tuple, n.List)):
            elem = _with_part(value.elem or value, value.part) if value.elem is not None else value
            for item in target.items:
                self.assign(item, elem)

    def loop(self, node: Any) -> None:
        it = self.ev(node.iter)
        line = node.lineno
        number = it.items is None and it.mag is not None and it.chars == poly(24.0)
        trips = ZERO if number else it.count()  # a number is not iterable
        if node.recursive:  # loop() is checked to walk down the items: a walk of at most the request
            trips = padd(trips, NSIZE)
        if pbig(trips):
            raise _Exceeded(line, "a loop with no bound the audit can see")
        elem = it.elem if it.elem is not None else (C(chars=ONE) if it.items is None else _SMALL)
        if it.data:
            elem = replace(_DATA, part=elem.part)
        elem = _with_part(elem, it.part)
        if node.recursive:
            elem = replace(elem, part=elem.part | {f"self:loop@{id(node)}"})
            self.recursive.append(id(node))
        targets = target_names(self.n, node.target)
        saved = {t: self.env.get(t) for t in (*targets, "loop")}
        self.assign(node.target, elem)
        self.env["loop"] = C(chars=poly(16.0), mag=padd(trips, ONE))
        fresh = {t: self.env[t] for t in (*targets, "loop") if t in self.env}
        self.iterate(node.body, trips, line, "the loop", node.test, fresh)
        if node.recursive:
            self.recursive.pop()
        for t, v in saved.items():
            if v is None:
                self.env.pop(t, None)
            else:
                self.env[t] = v
        self.walk(node.else_)

    def iterate(
        self,
        body: list[Any],
        trips: P,
        line: int | None,
        what: str,
        test: Any = None,
        fresh: dict[str, C] | None = None,
    ) -> None:
        """``body`` run ``trips`` times: the bounds of the variables it grows, and its work. ``fresh``: what the
        loop sets anew at each pass (its variables)."""
        if trips == ZERO:
            return
        fresh = fresh or {}
        counting, mult = self.counting, self.mult
        self.counting = False
        env0, ns0 = dict(self.env), dict(self.ns)
        passes = []
        try:
            for _ in range(3):  # the first pass may only settle the variables; the next two show how they grow
                self.env.update(fresh)
                self.once(body, test)
                passes.append((dict(self.env), dict(self.ns)))
                if len(passes) == 1 and _same(env0, passes[0][0], fresh) and ns0 == passes[0][1]:
                    passes *= 3  # the body changes nothing outside itself: no more trial passes needed
                    break
        finally:
            self.counting = counting
        (env1, ns1), (env2, ns2), (env3, ns3) = passes
        for t in fresh:
            env1[t] = env2[t] = env3[t] = env0[t]
        grown = _growth(env1, env2, env3) + _growth(ns1, ns2, ns3)
        geometric = [k for k, kind_ in grown if kind_ == "geometric"]
        if geometric:
            n = trips[0] if all(x == 0 for x in trips[1:]) else INF
            if n > GEOMETRIC_TRIPS:
                raise _Exceeded(
                    line,
                    f"{_label(geometric[0])} grows geometrically in {what} (its second pass adds more than its first) over "
                    + (f"{_fmt(n)} passes" if math.isfinite(n) else "a count the request sets"),
                )
            self.env, self.ns = env0, ns0
            self.counting = False
            try:
                for _ in range(int(n) - 1):
                    self.env.update(fresh)
                    self.once(body, test)
                    for table in (self.env, self.ns):
                        for k in geometric:
                            if k in table:
                                c = table[k]
                                self.limit(
                                    pmax(c.chars, c.items or ZERO), SIZE_LIMIT, line, f"{_label(k)}, grown in {what}"
                                )
                                if c.mag is not None and c.mag[0] > 2.0**BITS_LIMIT / 2:
                                    raise _Exceeded(
                                        line, f"{_label(k)}, grown in {what}, becomes a number too large to compute"
                                    )
            finally:
                self.counting = counting
        else:  # each pass adds at most what the second and third added: after ``trips`` passes, that many times
            tables: list[tuple[dict[Any, C], ...]] = [(self.env, env0, env1, env2, env3), (self.ns, ns0, ns1, ns2, ns3)]
            for table, t0, t1, t2, t3 in tables:
                for k, c3 in t3.items():
                    c1, c2 = t1.get(k), t2.get(k)
                    if c1 is None or c2 is None or (c1 == c2 == c3):
                        table[k] = _jn(t0.get(k), c3)
                        continue
                    table[k] = _jn(t0.get(k), _extend(c1, c2, c3, trips))
                    self.made(table[k], line, f"{_label(k)}, grown in {what},")
        self.env.update(fresh)
        self.mult = pmul(mult, trips)
        try:
            self.spend(ONE, line, f"{what} runs this many passes")
            self.once(body, test)
        finally:
            self.mult = mult

    def once(self, body: list[Any], test: Any) -> None:
        if test is not None:
            self.ev(test)
        self.walk(body)

    # -- expressions ------------------------------------------------------------------------------

    def ev(self, node: Any) -> C:
        n = self.n
        self.tick()
        line = getattr(node, "lineno", None)
        if isinstance(node, n.Const):
            return _const(node.value)
        if isinstance(node, n.TemplateData):
            return C(chars=poly(float(len(node.data))))
        if isinstance(node, n.Name):
            name = identifier(node.name)
            if name in self.env:
                return self.env[name]
            if name == "self":
                return replace(_JINJA, fns=frozenset({"self"}))
            return _JINJA if name in _GLOBALS else _DATA
        if isinstance(node, (n.Tuple, n.List)):
            items = [self.ev(i) for i in node.items]
            return self.made(C(items=poly(float(len(items))), elem=_jn(*items) if items else None), line, "a literal")
        if isinstance(node, n.Dict):
            parts = [self.ev(x) for p in node.items for x in (p.key, p.value)]
            return self.made(
                C(items=poly(float(len(node.items))), elem=_jn(*parts) if parts else None), line, "a literal"
            )
        if isinstance(node, n.CondExpr):
            self.ev(node.test)
            return _jn(self.ev(node.expr1), self.ev(node.expr2) if node.expr2 is not None else None)
        if isinstance(node, (n.And, n.Or)):
            return _jn(self.ev(node.left), self.ev(node.right))
        if isinstance(node, (n.Not, n.Compare, n.Test)):
            size = ZERO  # comparing or searching text and lists reads them: as long as they are
            for child in node.iter_child_nodes():
                if isinstance(child, n.Operand):
                    size = padd(size, self.ev(child.expr).count())
                elif isinstance(child, n.Expr):
                    size = padd(size, self.ev(child).count())
            self.spend(padd(ONE, pscale(size, 1 / 64)), line, "comparisons cost this many steps")
            return _BOOL
        if isinstance(node, (n.Neg, n.Pos)):
            return self.ev(node.node)
        if isinstance(node, (n.MarkSafe, n.MarkSafeIfAutoescape)):
            return self.ev(node.expr)
        if isinstance(node, n.Concat):
            parts = [self.ev(x) for x in node.nodes]
            total = ZERO
            for p in parts:
                total = padd(total, p.text())
            return self.made(C(chars=total, data=False), line, "'~'")
        if isinstance(node, n.BinExpr):
            a, b = self.ev(node.left), self.ev(node.right)
            widths = (
                self.printf_widths(node.left, [b.elem or b] if b.items is not None else [b])
                if node.operator == "%"
                else ZERO
            )
            return self.binop(node.operator, a, b, line, widths)
        if isinstance(node, n.Getattr):
            return self.part(self.ev(node.node), node.attr)
        if isinstance(node, n.Getitem):
            recv = self.ev(node.node)
            if isinstance(node.arg, n.Slice):
                for p in (node.arg.start, node.arg.stop, node.arg.step):
                    if p is not None:
                        self.ev(p)
                return self.made(replace(recv, part=frozenset()), line, "a slice")  # a copy
            self.ev(node.arg)
            return self.part(recv, None)
        if isinstance(node, n.Call):
            return self.call(node)
        if isinstance(node, n.Filter):
            return self.filter(node)
        for child in node.iter_child_nodes():
            if isinstance(child, n.Expr):
                self.ev(child)
        return _DATA

    def part(self, recv: C, name: str | None) -> C:
        """An attribute or item of ``recv``: a part of whatever it is a part of."""
        if name is not None and "self" in recv.fns:
            return replace(_JINJA, fns=frozenset({f"block:{name}"}))  # self.name: a block, to call
        if recv.data:
            e = _DATA
        elif recv.items is None and recv.mag is not None:
            e = recv  # loop.index, a number's parts: as large as it
        elif recv.items is None and recv.chars == _JINJA.chars:
            e = _JINJA  # an attribute of a Jinja object
        else:
            e = recv.elem if recv.elem is not None else (C(chars=ONE) if recv.items is None else _SMALL)
        out = _with_part(e, recv.part)
        if name is not None and recv.sites:
            out = _jn(out, *(self.ns.get((site, name)) for site in recv.sites))
        return out

    def binop(self, op: str, a: C, b: C, line: int | None, widths: P = ZERO) -> C:
        data = a.data or b.data
        if op == "+":
            items = padd(a.items, b.items) if a.items is not None and b.items is not None else None
            mag = padd(a.mag, b.mag) if a.mag is not None and b.mag is not None else None
            chars = padd(a.chars, b.chars) if a.mag is None or b.mag is None else poly(24.0)
            elem = _jn(a.elem, b.elem) if items is not None else None
            return self.made(C(chars, items, mag, elem, data), line, "'+'")
        if op == "*":
            out = []
            for x, y in ((a, b), (b, a)):
                if y.mag is not None and (x.chars != ZERO or x.items is not None) and (x.mag is None or x.data):
                    times = self.count(y, line, "a repetition count")
                    out.append(
                        C(
                            pmul(x.chars, times),
                            pmul(x.items, times) if x.items is not None else None,
                            None,
                            x.elem,
                            data,
                        )
                    )
            if a.mag is not None and b.mag is not None:
                out.append(C(poly(24.0), None, pmul(a.mag, b.mag), None, data))
            return self.made(_jn(*out), line, "'*' repetition")
        if op == "**":
            if a.mag is not None and b.mag is not None:
                if pbig(b.mag) or b.mag[1:] != ZERO[1:]:
                    raise _Exceeded(line, "a power whose exponent the audit cannot bound")
                base = a.mag[0] if a.mag[1:] == ZERO[1:] else INF
                if math.isfinite(base) and base > 1 and b.mag[0] * math.log2(base) > BITS_LIMIT:
                    raise _Exceeded(line, f"a power of {_fmt(b.mag[0] * math.log2(base))} bits")
                try:
                    value = base ** b.mag[0] if math.isfinite(base) else INF
                except OverflowError:
                    value = INF
                return C(poly(24.0), None, poly(value), None, data)
            return _NUMBER
        if op in ("-", "/", "//", "%"):
            if a.mag is not None and (b.mag is not None or op != "%") and a.items is None and a.chars == poly(24.0):
                if op == "%":
                    return C(poly(24.0), None, b.mag, None, data)
                if op == "-":
                    return C(poly(24.0), None, padd(a.mag, b.mag or ZERO), None, data)
                return C(poly(24.0), None, a.mag if op == "//" else UNBOUNDED, None, data)
            if op == "%":
                return self.made(
                    C(padd(padd(a.chars, b.text()), widths), None, None, None, data), line, "'%' formatting"
                )
            return C(poly(24.0), a.items, a.mag, a.elem, data)  # dict views and sets subtract: at most the left
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
        if isinstance(callee, n.Name) and identifier(callee.name) == "loop" and self.recursive:
            mine = f"param:loop@{self.recursive[-1]}"
            if self.cyclic or not args or not all(mine in a.part for a in args[:1]):
                raise _Exceeded(
                    line,
                    "a recursive loop calls loop() on something that is not a part of its item: it can recurse, and "
                    "multiply, up to Python's recursion limit",
                )
            return _SMALL
        if isinstance(callee, n.Name) and identifier(callee.name) not in self.env:
            name = identifier(callee.name)
            if name == "range":
                bounds = [self.count(a, line, "a bound of range()") for a in args[:2]]
                span = bounds[0] if len(bounds) == 1 else padd(bounds[0], bounds[1]) if bounds else ZERO
                if len(args) > 2:
                    step = args[2].mag
                    if step is not None and not pbig(step) and step[0] < 1 and step[1:] == ZERO[1:]:
                        span = UNBOUNDED
                return self.made(C(items=span, elem=C(chars=poly(24.0), mag=span)), line, "range()")
            if name == "lipsum":
                paragraphs = self.count(args[0], line, "lipsum's count") if args else poly(5.0)
                words = self.count(args[3], line, "lipsum's word count") if len(args) > 3 else poly(100.0)
                return self.made(C(chars=pscale(pmul(paragraphs, words), 12.0)), line, "lipsum()")
            if name in ("cycler", "joiner", "namespace", "dict"):
                items = poly(float(len(args) + len(kwargs)))
                for a in args:
                    items = padd(items, a.count())
                sites: frozenset[int] = frozenset()
                if name == "namespace":  # a new namespace: its attributes start as given
                    sites = frozenset({id(node)})
                    for k, v in kwargs.items():
                        self.ns[(id(node), k)] = v
                    for a in args:
                        for key in [k for k in self.ns if k[0] == id(node)]:
                            self.ns[key] = _jn(self.ns[key], a.elem)
                made = C(chars=_JINJA.chars, items=items, elem=_jn(*args, *kwargs.values()), sites=sites)
                return self.made(made, line, name)
            if name == "caller" and self.callers:
                return self.run_caller(args, line)
        if isinstance(callee, n.Getattr):
            recv = self.ev(callee.node)
            target = self.part(recv, callee.attr)
            if target.fns:  # a macro or block kept in a namespace, dict or list, or self.block
                return self.call_fns(target.fns, args, kwargs, line)
            return self.method(callee.attr, recv, args, kwargs, line, callee.node, node)
        target = self.ev(callee)
        if target.fns:  # a macro under another name, in a list, returned by an expression...
            return self.call_fns(target.fns, args, kwargs, line)
        return _jn(_DATA if any(a.data for a in args) else None, _SMALL)

    def call_fns(self, fns: frozenset[Any], args: list[C], kwargs: dict[str, C], line: int | None) -> C:
        """A call of any of these macros or blocks: the most costly of them."""
        out = []
        for fn in fns:
            if isinstance(fn, str) and fn.startswith("block:"):
                block = self.blocks.get(fn[6:])
                if block is not None:
                    out.append(self.macro_call_node(block, [], {}, line))
            elif fn in self.fn_nodes:
                out.append(self.macro_call_node(self.fn_nodes[fn], args, kwargs, line))
        return _jn(*out) if out else _SMALL

    def run_caller(self, args: list[C], line: int | None) -> C:
        block = self.callers.pop()
        try:
            before = self.output
            saved = dict(self.env)
            for a, c in zip(block.args, args, strict=False):
                self.env[identifier(a.name)] = c
            self.walk(block.body)
            self.env = saved
            return C(chars=_diff(self.output, before))
        finally:
            self.callers.append(block)

    def macro_call_node(self, node: Any, args: list[C], kwargs: dict[str, C], line: int | None) -> C:
        name = identifier(node.name)
        params = [identifier(a.name) for a in getattr(node, "args", ())]  # a block has none
        bound = {p: kwargs.get(p, args[i] if i < len(args) else _SMALL) for i, p in enumerate(params)}
        # the macro of that name here (one defined inside another shadows it): by identity, not by name
        active = next((f for f in self.stack if f["node"] is node), None)
        tag = f"{name}@{id(node)}"
        if active is not None:  # a recursive call: how often, and what it passes down
            if self.counting:  # (a loop's trial passes are not calls)
                active["fanout"] = padd(active["fanout"], self.mult)
            mine = {f"param:{tag}/{p}" for p in params}
            if not any(mine & c.part for c in bound.values()):
                active["structural"] = False
            for p, c in bound.items():
                active["args"][p] = _jn(active["args"].get(p), c)
                was = active["params"].get(p)
                if was is not None and pgt(c.text(), was.text()):
                    active["grows"] = True
            return C()
        key = (id(node), *(_bucket(bound[p]) for p in params))
        summary = self.summaries.get(key)
        if summary is None:
            summary = self.summaries[key] = self.summarise(node, name, params, bound, line)
        work, out = summary
        self.spend(work, line, f"calls of macro {node.name} cost this many steps")
        return self.made(C(chars=out), line, f"macro {node.name}")

    def summarise(self, node: Any, name: str, params: list[str], bound: dict[str, C], line: int | None) -> tuple[P, P]:
        """The work and output of one call of a macro, its recursion included."""
        tag = f"{name}@{id(node)}"
        frame: dict[str, Any] = {
            "name": name,
            "node": node,
            "fanout": ZERO,
            "structural": True,
            "grows": False,
            "params": bound,
            "args": {},
        }
        saved = (dict(self.env), self.work, self.output, self.mult, self.counting, dict(self.macros))
        self.stack.append(frame)
        self.mult, self.counting, self.work, self.output = ONE, True, ZERO, ZERO
        try:
            for p, c in bound.items():
                self.env[p] = replace(c, part=c.part | {f"self:{tag}/{p}"})
            defaults = getattr(node, "defaults", [])
            for p, d in zip(params[len(params) - len(defaults) :], defaults, strict=True):
                if bound.get(p) is _SMALL:
                    self.env[p] = replace(self.ev(d), part=frozenset({f"self:{tag}/{p}"}))
            self.walk(node.body)
            work, out = self.work, self.output
            if frame["grows"]:  # a second level: does what it passes down grow faster there (it doubles)?
                probe: dict[str, Any] = {**frame, "fanout": ZERO, "grows": False, "args": {}, "params": frame["args"]}
                self.stack[-1] = probe
                self.counting = False
                for p, c in frame["args"].items():
                    self.env[p] = replace(c, part=c.part | {f"self:{tag}/{p}"})
                self.walk(node.body)
                for p, c2 in probe["args"].items():
                    c0, c1 = bound.get(p), frame["args"].get(p)
                    if (
                        c0 is not None
                        and c1 is not None
                        and pgt(_diff(c2.text(), c1.text()), _diff(c1.text(), c0.text()))
                    ):
                        frame["doubles"] = p
        finally:
            self.stack.pop()
            self.env, self.work, self.output, self.mult, self.counting, self.macros = saved  # its own macros are gone
        fanout = frame["fanout"]
        if fanout != ZERO:
            if frame.get("doubles"):
                raise _Exceeded(
                    line, f"macro {node.name} passes itself {frame['doubles']} grown faster at each level (it doubles)"
                )
            if frame["structural"] and not self.cyclic:
                calls = NSIZE  # a walk down the request: at most one call per value of it
            elif fanout[0] <= 1.0 and fanout[1:] != ZERO[1:]:
                calls = NSIZE  # as many calls per level as the request has items: a walk of the request
            elif fanout[0] <= 1.0:
                calls = poly(RECURSION)  # one call per level, as deep as Python lets it go
            else:
                raise _Exceeded(
                    line,
                    f"macro {node.name} calls itself {pfmt(fanout)} times per call: its calls multiply with each "
                    "level, up to Python's recursion limit",
                )
            work, out = pmul(work, calls), pmul(out, calls)
            self.limit(work, WORK_LIMIT, line, f"macro {node.name}, recursing, costs this many steps")
            self.limit(out, SIZE_LIMIT, line, f"macro {node.name}, recursing, writes this many characters")
        return padd(work, poly(5.0)), out

    def method(
        self, name: str, recv: C, args: list[C], kwargs: dict[str, C], line: int | None, node: Any, call: Any
    ) -> C:
        size = recv.text()
        data = recv.data
        inner = _with_part(_DATA if data else recv.elem or _SMALL, recv.part)  # its items: parts of it
        if name in ("center", "ljust", "rjust", "zfill"):
            width = self.count(args[0], line, f"the width of .{name}()") if args else ZERO
            return self.made(C(chars=pmax(recv.chars, width)), line, f".{name}()")
        if name == "expandtabs":
            tab = self.count(args[0], line, "the tab size of .expandtabs()") if args else poly(8.0)
            return self.made(C(chars=pmul(recv.chars, pmax(tab, ONE))), line, ".expandtabs()")
        if name == "replace":
            new = args[1].text() if len(args) > 1 else ZERO
            hits = pscale(padd(recv.chars, ONE), 1 / max(1.0, _const_len(call.args[0] if call.args else None)))
            return self.made(C(chars=padd(recv.chars, pmul(hits, new))), line, ".replace()")
        if name == "join":
            items = args[0] if args else C()
            e = items.elem.text() if items.elem is not None else poly(8.0)
            return self.made(C(chars=pmul(items.count(), padd(recv.chars, e))), line, ".join()")
        if name in ("format", "format_map"):
            total = padd(recv.chars, self.format_widths(node, args, kwargs, line))
            for a in [*args, *kwargs.values()]:
                total = padd(total, a.text())
            return self.made(C(chars=total), line, ".format()")
        if name in ("split", "rsplit", "splitlines", "partition", "rpartition"):
            piece = _with_part(_DATA if data else C(chars=recv.chars), recv.part)
            return self.made(C(items=padd(recv.count(), ONE), elem=piece, data=data), line, f".{name}()")
        if name in ("keys", "values", "items"):
            return C(items=recv.count(), elem=inner, data=data)
        if name in ("append", "extend", "insert", "update", "setdefault", "add"):
            return C(chars=poly(4.0))
        if name in ("pop", "get", "popitem"):
            return _jn(inner, *(args[1:2]))
        if name in ("count", "find", "index", "rfind", "rindex", "startswith", "endswith") or name.startswith("is"):
            self.spend(pscale(size, 1 / 64), line, f".{name}()")
            return C(chars=poly(24.0), mag=size)
        if name in (
            "upper",
            "lower",
            "strip",
            "lstrip",
            "rstrip",
            "title",
            "capitalize",
            "casefold",
            "swapcase",
            "removeprefix",
            "removesuffix",
            "encode",
            "decode",
            "copy",
        ):
            return self.made(replace(recv, part=frozenset()), line, f".{name}()")
        if name == "cycle":
            return _jn(*args) if args else _SMALL
        return _jn(_SMALL, recv.elem, _DATA if data else None)

    def format_widths(self, fmt: Any, args: list[C], kwargs: dict[str, C], line: int | None) -> P:
        """Widths a str.format string asks for: constant ones read, computed ones (``{:>{}}``, or a format string
        not known in advance) bounded by the arguments that are numbers."""
        numbers = ZERO
        for a in [*args, *kwargs.values()]:
            if a.mag is not None and a.items is None:
                numbers = padd(numbers, self.count(a, line, "a width of .format()"))
        if isinstance(fmt, self.n.Const) and isinstance(fmt.value, str):
            try:
                fields = format_fields(fmt.value)
            except ValueError:
                return ZERO
            total = 0.0
            computed = False
            for _field, spec in fields:
                computed |= "{" in spec
                total += sum(float(d) for d in re.findall(r"\d+", spec))
            return padd(poly(total), numbers) if computed else poly(total)
        return numbers

    # -- filters ----------------------------------------------------------------------------------

    def filter(self, node: Any) -> C:
        line = node.lineno
        recv = self.ev(node.node) if node.node is not None else C(chars=self.output)
        args, kwargs = self.args(node)
        name = node.name
        size = recv.text()
        data = recv.data
        elem = (
            _DATA if data else recv.elem if recv.elem is not None else (C(chars=ONE) if recv.items is None else _SMALL)
        )
        elem = _with_part(elem, recv.part)  # its items: parts of it
        count = recv.count()
        self.spend(pscale(count, 1 / 16), line, f"|{name} costs this many steps")
        if name in ("length", "count", "wordcount"):
            return C(chars=poly(24.0), mag=pmax(count, size) if not data else NSIZE)
        if name in ("int", "float", "abs", "round"):
            if data:
                return C(chars=poly(24.0), mag=NSIZE)  # a number of the request: counted as its size
            return C(chars=poly(24.0), mag=UNBOUNDED if recv.mag is None else recv.mag)
        if name == "bool":
            return _BOOL
        if name in ("first", "last", "random", "min", "max"):
            return elem
        if name in (
            "list",
            "sort",
            "unique",
            "reverse",
            "select",
            "reject",
            "selectattr",
            "rejectattr",
            "map",
            "dictsort",
            "items",
            "groupby",
        ):
            if recv.items is None and recv.mag is None:
                return self.made(C(items=recv.chars, elem=C(chars=ONE), data=data), line, f"|{name}")
            return self.made(C(items=count, elem=elem, data=data), line, f"|{name}")
        if name in ("batch", "slice"):
            return self.made(C(items=count, elem=C(items=count, elem=elem), data=data), line, f"|{name}")
        if name == "join":
            sep = args[0].text() if args else ZERO
            return self.made(C(chars=pmul(count, padd(elem.text(), sep))), line, "|join")
        if name == "sum":
            start = args[1] if len(args) > 1 else kwargs.get("start")
            if start is not None and start.items is not None:
                return self.made(C(items=pmul(count, elem.items or ONE), elem=elem.elem), line, "|sum")
            return C(chars=poly(24.0), mag=UNBOUNDED if data else pmul(count, elem.mag or ONE))
        if name in ("default", "d"):
            return _jn(recv, args[0] if args else kwargs.get("default_value"))
        if name == "center":
            width = self.count(args[0], line, "the width of |center") if args else poly(80.0)
            return self.made(C(chars=pmax(size, width)), line, "|center")
        if name == "indent":
            by = args[0] if args else kwargs.get("width", C(mag=poly(4.0)))
            w = by.chars if by.mag is None else self.count(by, line, "the width of |indent")
            return self.made(C(chars=padd(size, pmul(padd(size, ONE), w))), line, "|indent")
        if name == "wordwrap":
            wrap = args[2].text() if len(args) > 2 else ONE
            return self.made(C(chars=pmul(size, padd(ONE, wrap))), line, "|wordwrap")
        if name == "truncate":
            end = args[2].text() if len(args) > 2 else poly(3.0)
            return self.made(C(chars=padd(size, end)), line, "|truncate")
        if name == "replace":
            new = args[1].text() if len(args) > 1 else ZERO
            hits = pscale(padd(size, ONE), 1 / max(1.0, _const_len(node.args[0] if node.args else None)))
            return self.made(C(chars=padd(size, pmul(hits, new))), line, "|replace")
        if name == "format":
            total = padd(size, self.printf_widths(node.node, args))
            for a in args:
                total = padd(total, a.text())
            return self.made(C(chars=total), line, "|format")
        if name in (
            "tojson",
            "pprint",
            "string",
            "e",
            "escape",
            "forceescape",
            "urlencode",
            "urlize",
            "xmlattr",
            "safe",
            "trim",
            "striptags",
            "lower",
            "upper",
            "title",
            "capitalize",
            "filesizeformat",
        ):
            indent_arg = kwargs.get("indent") or (args[0] if args and name == "tojson" else None)
            indent = self.count(indent_arg, line, "the indent of |tojson") if indent_arg is not None else ZERO
            factor = 6.0 if name in ("e", "escape", "forceescape", "urlencode", "urlize", "xmlattr") else 1.0
            depth = poly(8.0)  # nesting: each level indents again
            return self.made(C(chars=pscale(pmul(size, padd(ONE, pmul(indent, depth))), factor)), line, f"|{name}")
        if name == "from_json":
            return _DATA if data else C(chars=recv.chars, items=recv.chars, elem=C(chars=recv.chars))
        if name == "attr":
            return _jn(_SMALL, elem)
        return _jn(C(chars=size), _DATA if data else None)

    def printf_widths(self, fmt: Any, args: list[C]) -> P:
        """Widths and precisions a %-format asks for (``%9999s``, ``%*s``)."""
        if isinstance(fmt, self.n.Const) and isinstance(fmt.value, str):
            total = ZERO
            star = 0
            for m in _PRINTF_RE.finditer(fmt.value):
                for g in (m.group(1), m.group(2)):
                    if g == "*":
                        a = args[star] if star < len(args) else _NUMBER
                        total = padd(total, self.count(a, getattr(fmt, "lineno", None), "a '*' width"))
                        star += 1
                    elif g:
                        total = padd(total, poly(float(g)))
            return total
        total = ZERO
        for a in args:
            if a.mag is not None and a.items is None:
                total = padd(total, self.count(a, getattr(fmt, "lineno", None), "a width of a computed format"))
        return total


def _same(env0: dict[str, C], env1: dict[str, C], fresh: dict[str, C]) -> bool:
    return (
        all(env1.get(k) == v for k, v in env0.items() if k not in fresh) and env1.keys() <= env0.keys() | fresh.keys()
    )


def _label(k: Any) -> str:
    return k if isinstance(k, str) else f"namespace attribute {k[1]}"


def _with_part(c: C, part: frozenset[str]) -> C:
    """``c``, a strict part of a value marked with ``part``: a parameter itself (``self:``) gives parts of it
    (``param:``)."""
    params = frozenset("param:" + p.split(":", 1)[1] for p in part if p.startswith(("param:", "self:")))
    return c if params <= c.part else replace(c, part=c.part | params)


def _const_len(node: Any) -> float:
    value = getattr(node, "value", None)
    return float(len(value)) if isinstance(value, str) else 1.0


def _diff(after: P, before: P) -> P:
    return tuple(max(0.0, a - b) for a, b in zip(after, before, strict=True))


def _merge(tables: list[dict[Any, C]]) -> dict[Any, C]:
    """The larger bound of each variable over ``tables`` (most are the same object in all of them)."""
    out = dict(tables[0])
    for t in tables[1:]:
        for k, v in t.items():
            w = out.get(k)
            if w is not v:
                out[k] = v if w is None else _jn(w, v)
    return out


def _growth(t0: dict[Any, C], t1: dict[Any, C], t2: dict[Any, C]) -> list[tuple[Any, str]]:
    """Which bounds grew in the first pass or the second, and whether more the second time (geometric)."""
    out = []
    for k, c2 in t2.items():
        c0, c1 = t0.get(k), t1.get(k)
        if c0 is None or c1 is None or c0.data:
            continue
        kind_ = None
        for f in (lambda c: c.chars, lambda c: c.items or ZERO, lambda c: c.mag or ZERO):
            a, b, c = f(c0), f(c1), f(c2)
            if pbig(b) or pbig(c):
                if not pbig(a):
                    kind_ = "geometric"
                continue
            g1, g2 = _diff(b, a), _diff(c, b)
            if g1 != ZERO or g2 != ZERO:
                kind_ = "geometric" if pgt(g2, g1) or kind_ == "geometric" else "linear"
        if kind_:
            out.append((k, kind_))
    return out


def _extend(c1: C, c2: C, c3: C, trips: P) -> C:
    """The bound after ``trips`` passes that each add what the second or third pass added."""

    def grow(a: P | None, b: P | None, c: P | None) -> P | None:
        if a is None or b is None or c is None:
            return c
        return padd(c, pmul(trips, pmax(_diff(b, a), _diff(c, b))))

    return C(
        grow(c1.chars, c2.chars, c3.chars) or ZERO,
        grow(c1.items, c2.items, c3.items),
        grow(c1.mag, c2.mag, c3.mag),
        _jn(c1.elem, c2.elem, c3.elem),
        c1.data or c2.data or c3.data,
        c1.part | c2.part | c3.part,
    )


def _bucket(c: C) -> tuple[Any, ...]:
    def b(p: P | None) -> Any:
        if p is None:
            return None
        return tuple(INF if not math.isfinite(x) else round(math.log2(x + 1)) for x in p)

    return (b(c.chars), b(c.items), b(c.mag), c.data, bool(c.part))


def check(tree: Any, findings: Findings, nodes: Any, deadline: float) -> None:
    """Report (GGUF-T504) when the bound of a render of ``tree`` passes the limits."""
    cost = _Cost(nodes, deadline)
    cost.cyclic = _may_make_cycles(tree, nodes)
    for block in tree.find_all(nodes.Block):  # self.<name>() renders a block again
        cost.blocks.setdefault(block.name, block)
    try:
        cost.walk(tree.body)
    except _Exceeded as e:
        findings.add(T504, f"rendering can cost too much: {e.why}", e.line)
    except (ArithmeticError, ValueError):  # the bound itself overflows: unbounded
        findings.add(T504, "rendering can cost too much: a bound of the render overflows")


def _may_make_cycles(tree: Any, nodes: Any) -> bool:
    """Whether the template can put a container into a container (so a walk over it may never end)."""
    for call in tree.find_all(nodes.Call):
        if (
            isinstance(call.node, nodes.Getattr)
            and call.node.attr
            in (
                "append",
                "extend",
                "insert",
                "update",
                "setdefault",
                "add",
            )
            and any(not isinstance(a, nodes.Const) for a in [*call.args, *(k.value for k in call.kwargs)])
        ):
            return True
    return False
