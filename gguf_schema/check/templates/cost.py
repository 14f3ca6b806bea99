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
import operator
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from .builtins import Builtin, lookup
from .folding import format_fields
from .jinja import identifier, target_names
from .rules import Findings, rule

__all__ = ["T504", "CostOverBudget", "RenderBound", "bound", "check", "is_file_supplied", "request_size"]

T504 = rule(
    "GGUF-T504",
    "error",
    "render-cost",
    "Rendering the template can take time or memory out of proportion to the request: a loop over a huge range or "
    "literal, a huge repetition, power, width or replacement, text that doubles in a loop or a recursion, a macro "
    "that calls itself more than once per call, or a count the request's numbers choose. The bound is a polynomial "
    "in the size of the request; a finding says which part of it is too large and where.",
)

DEG = 12  # highest power of N tracked: a bound of a higher degree is unbounded (never clamped to N**5)
WORK_LIMIT = 2e7  # steps (a loop pass, a call, 64 characters made) a render may take whatever the request
SIZE_LIMIT = float(1 << 27)  # characters (or items) of one value or of the output, whatever the request
PER_REQUEST_WORK = 1e6  # steps per character of request, for each power of N
PER_REQUEST_SIZE = 1e6  # characters per character of request, for each power of N
PER_FILE = 1e3  # steps or characters per character of the file's token text, for each power of N (real
# templates write a special token a few times per message; a file's tokens are a few characters)
BITS_LIMIT = 1 << 22  # bits of a number computed (a power past that takes seconds)
GEOMETRIC_TRIPS = 64  # passes of a loop whose variables grow geometrically computed one by one
RECURSION = 1000.0  # calls deep Python lets a recursion go
INF = math.inf
ITEM_BYTES = 8.0  # bytes an item of a container takes at least, against SIZE_LIMIT's characters
AUTOESCAPE = 5.0  # the longest HTML entity autoescape writes for one character ('&#39;', '&#34;', '&amp;')
_W = DEG + 1  # coefficients of N**0 .. N**DEG, then of F*N**0 .. F*N**DEG

P = tuple[float, ...]  # coefficients of N**0 .. N**DEG, then F * N**0 .. F * N**DEG


def poly(c0: float = 0.0, c1: float = 0.0) -> P:
    return (c0, c1) + (0.0,) * (2 * _W - 2)


ZERO = poly()
ONE = poly(1.0)
NSIZE = poly(0.0, 1.0)  # the size of the request
FSIZE = (0.0,) * _W + (1.0,) + (0.0,) * DEG  # the size of the text the model file supplies (bos_token...)
UNBOUNDED = (INF,) + (0.0,) * (2 * _W - 1)


def padd(a: P, b: P) -> P:
    if b is ZERO:
        return a
    if a is ZERO:
        return b
    return tuple(map(operator.add, a, b))


def _max2(x: float, y: float) -> float:
    return x if x >= y else y


def pmax(a: P, b: P) -> P:
    if a is b or b is ZERO:
        return a
    return tuple(map(_max2, a, b))


def pmul(a: P, b: P) -> P:
    """The product; a term past N**DEG, or with F twice, makes it unbounded (sound: never clamped)."""
    out = [0.0] * (2 * _W)
    for i, x in enumerate(a):
        if x == 0:
            continue
        for j, y in enumerate(b):
            if y == 0:
                continue
            f = i // _W + j // _W
            d = i % _W + j % _W
            if f > 1 or d > DEG:
                out[0] = INF
            else:
                out[f * _W + d] += x * y
    return tuple(0.0 if math.isnan(v) else v for v in out)


def pscale(a: P, k: float) -> P:
    return tuple(0.0 if x == 0 else x * k for x in a)


def pbig(a: P) -> bool:
    return not all(math.isfinite(x) for x in a)


def pconst(a: P) -> bool:
    """Whether ``a`` does not depend on the request or the file."""
    return all(x == 0 for x in a[1:])


def pgt(a: P, b: P) -> bool:
    """Some coefficient of ``a`` is larger than ``b``'s."""
    return any(x > y * 1.01 + 1e-9 for x, y in zip(a, b, strict=True))


def peval(a: P, n: float, f: float | None = None) -> float:
    """The value of ``a`` at a request of size ``n`` and file text of size ``f`` (``n`` when not given)."""
    n = float(n)
    f = n if f is None else float(f)
    total = 0.0
    for i, x in enumerate(a):
        if x:
            try:
                total += x * (n ** (i % _W)) * (f if i >= _W else 1.0)
            except OverflowError:  # a request of 10**30 characters, to the 12th power
                return INF
    return total


def pfmt(a: P) -> str:
    if pbig(a):
        return "unbounded"
    terms = []
    for i, x in enumerate(a):
        if x:
            k = _fmt(x)
            d, f = i % _W, "·F" if i >= _W else ""
            n = "" if d == 0 else "·N" if d == 1 else f"·N^{d}"
            terms.append(k + f + n)
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
    shown: P = ZERO  # at least this long when written out, whatever its other bounds say (never a count)

    def text(self) -> P:
        """Its length as text (a container's: its items' text and separators; a callable's: its repr, up to 256
        characters: "<function strftime_now at 0x...>", "<built-in method index of str object at 0x...>")."""
        if self.fns:
            return pmax(replace(self, fns=frozenset()).text(), poly(256.0))
        if self.shown != ZERO:
            return pmax(replace(self, shown=ZERO).text(), self.shown)
        if self.data:
            return pmax(self.chars, NSIZE)
        t = self.chars
        if self.items is not None:  # its repr: brackets, and per item quotes, ': ', ', ' and 'Undefined' at most
            e = self.elem.text() if self.elem is not None else poly(8.0)
            t = pmax(t, padd(pmul(self.items, padd(e, poly(16.0))), poly(2.0)))
        if self.mag is not None:  # Python writes an int of at most 4,300 digits (it refuses longer ones)
            t = pmax(t, poly(24.0) if pconst(self.mag) and self.mag[0] < 1e22 else poly(4400.0))
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
    numbers = any(c.mag is not None and c.items is None and not c.data for c in xs)
    if numbers and any(c.mag is None and c.items is None and c.chars != ZERO and not c.data for c in xs):
        chars = pmax(chars, poly(25.0))  # a number or a text: never taken for a number alone (_is_number)
    if any(c.data for c in xs):  # request data's text is its chars (at most N): a value it joins counts as its text
        for c in xs:
            if not c.data and c.items is not None:
                chars = pmax(chars, c.text())
    return C(
        chars,
        out_items,
        out_mag,
        _jn(*elems) if elems else None,
        any(c.data for c in xs),
        frozenset().union(*(c.part for c in xs)),
        frozenset().union(*(c.sites for c in xs)),
        frozenset().union(*(c.fns for c in xs)),
        shown=_pmax_all([c.shown for c in xs]),
    )


def _pmax_all(ps: list[P]) -> P:
    out = ZERO
    for p in ps:
        if p != ZERO:
            out = p if out == ZERO else pmax(out, p)
    return out


#: Names of the methods of plain data and of Jinja's runtime objects: such an attribute may be a bound method, which
#: writes its repr ("<built-in method index of str object at 0x7f...>")
def _methods(*types: type) -> frozenset[str]:
    return frozenset(name for t in types for name in dir(t) if callable(getattr(t, name, None)))


_TEXT_METHODS = _methods(str)
_CONTAINER_METHODS = _methods(list, dict, tuple)
_NUMBER_METHODS = _methods(int, float, bool)
_JINJA_METHODS = frozenset({"cycle", "changed", "next", "reset"})  # of the loop and of a cycler
_REPR = C(fns=frozenset({"repr"}))  # a bound method or an iterator: its repr when written, never a count
#: Filters whose result is an iterator (a generator): written out, it is its repr ("<generator object ... at 0x...>")
_LAZY_FILTERS = frozenset({"batch", "slice", "map", "select", "reject", "selectattr", "rejectattr", "unique", "items"})
_LAZY_FILTERS |= {"reverse"}  # of anything but text: reversed(), an iterator


def _may_be_method(recv: C, name: Any) -> bool:
    """Whether attribute ``name`` of ``recv`` may be a bound method (written out, its repr)."""
    if not isinstance(name, str):
        return False
    if name in _JINJA_METHODS:  # of the loop, a cycler: whatever else the value may be
        return True
    if recv.data:  # the request's: text, numbers, lists, dicts
        return name in _TEXT_METHODS or name in _CONTAINER_METHODS or name in _NUMBER_METHODS
    if recv.items is not None and name in _CONTAINER_METHODS:
        return True
    if recv.mag is not None and (name in _NUMBER_METHODS or name in _JINJA_METHODS):  # a number, or the loop
        return True
    # text, or a Jinja object
    return recv.items is None and recv.mag is None and (name in _TEXT_METHODS or name in _JINJA_METHODS)


#: Tests that look at a value's type, identity or parity only: one step whatever the value's size
_TYPE_TESTS = frozenset(
    {
        "defined",
        "undefined",
        "none",
        "string",
        "number",
        "integer",
        "float",
        "mapping",
        "iterable",
        "sequence",
        "callable",
        "boolean",
        "true",
        "false",
        "odd",
        "even",
        "divisibleby",
        "sameas",
        "escaped",
        "filter",
        "test",
    }
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
_JINJA = C(chars=poly(16.0), fns=frozenset({"repr"}))  # a Jinja object (a global, a macro, caller): written, its repr
_NONE = C(chars=poly(4.0))
_PRINTF_RE = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
_JINJA_NAMES = frozenset({"caller", "self", "loop", "super", "varargs", "kwargs"})
#: variables a loader fills from the model file, not from the request (transformers passes the special tokens
#: map: bos_token, eos_token, unk_token, pad_token, ..., additional_special_tokens; llama.cpp bos/eos_token)
_FILE_NAME = re.compile(r"(^|_)token$|^additional_special_tokens$|^special_tokens_map$")


def is_file_supplied(name: str) -> bool:
    """Whether a loader fills the variable ``name`` from the model file (``bos_token``), not from the request."""
    return bool(_FILE_NAME.search(name))


class _Cost:
    def __init__(self, nodes: Any, deadline: float, file_text: int | None = None, judge: bool = True):
        self.n = nodes
        self.deadline = deadline
        self.judge = judge  # report a bound past the limits (check); bound() only wants the bound
        self.fsize = FSIZE if file_text is None else poly(float(file_text))
        self.file = C(chars=self.fsize)  # a token's text (bos_token): a size of its own, not the request's
        self.files = C(items=self.fsize, elem=self.file)  # a list of them (additional_special_tokens)
        self.env: dict[str, C] = {}
        self.ns: dict[tuple[int, str], C] = {}  # (namespace() call, attribute) -> bound
        self.work = ZERO
        self.output = ZERO
        self.size = ZERO  # the largest value made
        self.mult = ONE
        self.counting = True
        self.macros: dict[str, Any] = {}
        self.summaries: dict[tuple[Any, ...], tuple[P, P, dict[int, C]]] = {}
        self.stack: list[dict[str, Any]] = []
        self.callers: list[Any] = []
        self.recursive: list[int] = []
        self.fn_nodes: dict[int, Any] = {}
        self.blocks: dict[str, Any] = {}
        self.cyclic = False
        self.ticks = 0
        self.purity: dict[int, bool] = {}
        self.iterating: list[frozenset[int]] = []  # the containers (sites) the loops around are walking
        self.grown: list[tuple[frozenset[int], C]] = []  # in-place growth, in order (macros replay theirs)

    # -- accounting -------------------------------------------------------------------------------

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks & 15 == 0 and time.thread_time() > self.deadline:
            raise CostOverBudget

    def limit(self, p: P, limit: float, line: int | None, why: str) -> None:
        per_request = PER_REQUEST_WORK if limit == WORK_LIMIT else PER_REQUEST_SIZE
        over = p[0] > limit or any(x > per_request for x in p[1:_W]) or any(x > PER_FILE for x in p[_W:])
        if pbig(p) or (self.judge and over):
            raise _Exceeded(line, f"{why}: {pfmt(p)} (N: the size of the request, F: of the file's token text)")

    def unbounded(self, line: int | None, what: str) -> NoReturn:
        raise _Exceeded(line, f"{what}: the cost analysis does not model it, so its cost is unbounded")

    def spend(self, steps: P, line: int | None, why: str) -> None:
        if not self.counting:
            return
        self.work = padd(self.work, pmul(self.mult, steps))
        self.limit(self.work, WORK_LIMIT, line, why)

    def made(self, c: C, line: int | None, what: str) -> C:
        """A value just made: its size is checked and its making counted."""
        # an item of a list costs at least a pointer (8 bytes) where a character of text costs one
        size = pmax(c.chars, pscale(c.items, ITEM_BYTES) if c.items is not None else ZERO)
        self.limit(size, SIZE_LIMIT, line, f"{what} makes a value this large")
        self.size = pmax(self.size, size)
        self.spend(padd(ONE, pscale(size, 1 / 64)), line, f"{what} costs this many steps")
        return c

    def emit(self, c: C, line: int | None) -> None:
        if not self.counting:
            return
        text = c.text()  # a macro, global or bound method written out: its repr
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
                # written out, its repr: "<Macro 'name'>" (the name as long as the template makes it)
                named = poly(float(max(16, len(node.name) + 10)))
                self.env[identifier(node.name)] = replace(_JINJA, chars=named, fns=frozenset({id(node)}))
                for d in node.defaults:  # Jinja folds constant defaults when it compiles, called or not
                    self.ev(d)
            elif isinstance(node, n.CallBlock):  # {% call m() %}: m's output is written
                self.callers.append(node)
                try:
                    self.emit(self.ev(node.call), node.lineno)
                finally:
                    self.callers.pop()
            elif isinstance(node, n.Assign):
                self.assign(node.target, self.ev(node.node))
            elif isinstance(node, n.AssignBlock):
                before = self.output
                self.walk(node.body)
                value = C(chars=_diff(self.output, before))
                if node.filter is not None:  # {% set x | f %}: f of the block's text (bounded by all output so far)
                    value = _jn(value, self.ev(node.filter))
                self.assign(node.target, value)
            elif isinstance(node, n.FilterBlock):  # the block's text is written, then its filtered text
                self.walk(node.body)
                self.emit(self.ev(node.filter), node.lineno)
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

    def pure(self, node: Any) -> bool:
        """Whether walking ``node`` can change no variable, namespace or container (no assignment, no call):
        a trial pass (counting nothing) can skip it."""
        hit = self.purity.get(id(node))
        if hit is None:
            n = self.n
            kinds = (n.Assign, n.AssignBlock, n.Macro, n.CallBlock, n.Call, n.With, n.ExprStmt)
            hit = self.purity[id(node)] = not any(True for _ in node.find_all(kinds))
        return hit

    def loop(self, node: Any) -> None:
        if not self.counting and self.pure(node):
            return  # a trial pass of a loop around it: this loop changes nothing, and costs are not counted
        it = self.ev(node.iter)
        line = node.lineno
        trips = it.count()  # (a number is not iterable; a value that may be a number or a text is, as the text)
        if node.recursive:  # loop() is checked to walk down the items: a walk of the value, unfolded
            trips = padd(padd(trips, NSIZE), it.text())
        if pbig(trips):
            raise _Exceeded(line, "a loop with no bound the audit can see")
        elem = it.elem if it.elem is not None else (C(chars=ONE) if it.items is None else _SMALL)
        if it.data:
            elem = replace(_DATA, part=elem.part, sites=elem.sites)
        elem = _with_part(elem, it.part)
        if node.recursive:
            elem = replace(elem, part=elem.part | {f"self:loop@{id(node)}"})
            self.recursive.append(id(node))
        targets = target_names(self.n, node.target)
        saved = {t: self.env.get(t) for t in (*targets, "loop")}
        self.assign(node.target, elem)
        self.env["loop"] = C(chars=poly(16.0), mag=padd(trips, ONE), elem=elem)
        fresh = {t: self.env[t] for t in (*targets, "loop") if t in self.env}
        self.iterating.append(it.sites)
        try:
            self.iterate(node.body, trips, line, "the loop", node.test, fresh)
        finally:
            self.iterating.pop()
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
        resolved: dict[Any, C] = {}
        if geometric:  # growing faster, but perhaps only because another variable grows (x = x + y; y = y + [1])
            try:
                geometric, resolved = self.settle(body, test, fresh, trips, geometric, passes, (env0, ns0))
            finally:
                self.counting = counting
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
                                self.limit(c.text(), SIZE_LIMIT, line, f"{_label(k)}, grown in {what}")
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
                    if k in resolved:
                        table[k] = resolved[k]
                        self.made(table[k], line, f"{_label(k)}, grown in {what},")
                        continue
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

    def settle(
        self,
        body: list[Any],
        test: Any,
        fresh: dict[str, C],
        trips: P,
        geometric: list[Any],
        passes: list[tuple[dict[Any, C], dict[Any, C]]],
        start: tuple[dict[Any, C], dict[Any, C]],
    ) -> tuple[list[Any], dict[Any, C]]:
        """Of the variables whose second pass added more than their first, those still growing faster when every
        other variable is already at its bound after the loop (``x = x ~ x``), and the bounds of the others
        (``x = x + y`` while ``y`` grows by one each pass: each pass adds at most the last ``y``)."""
        (env1, ns1), (env2, ns2), (env3, ns3) = passes
        env0, ns0 = start
        base_env, base_ns = dict(env3), dict(ns3)
        for base, t0, t1, t2, t3 in ((base_env, env0, env1, env2, env3), (base_ns, ns0, ns1, ns2, ns3)):
            for k, c3 in t3.items():
                c1, c2 = t1.get(k), t2.get(k)
                if k in geometric or k in fresh or c1 is None or c2 is None or c1 == c2 == c3:
                    continue
                base[k] = _jn(t0.get(k), _extend(c1, c2, c3, trips))  # the others, at their bound after the loop
        self.counting = False
        resolved: dict[Any, C] = {}
        while True:  # what one round resolves is at its bound in the next (text_parts, then chunks made of it)
            still, more = self.probe(body, test, fresh, trips, geometric, base_env, base_ns, (env0, ns0))
            resolved.update(more)
            if not more or not still:
                return still, resolved
            for k, c in more.items():
                (base_env if isinstance(k, str) else base_ns)[k] = c
            geometric = still

    def probe(
        self,
        body: list[Any],
        test: Any,
        fresh: dict[str, C],
        trips: P,
        geometric: list[Any],
        base_env: dict[Any, C],
        base_ns: dict[Any, C],
        start: tuple[dict[Any, C], dict[Any, C]],
    ) -> tuple[list[Any], dict[Any, C]]:
        """Three passes from ``base`` with the ``geometric`` candidates grown as far as the last pass: those still
        growing faster, and the bounds of the others."""
        env0, ns0 = start
        probes: list[tuple[dict[Any, C], dict[Any, C]]] = []
        for _ in range(3):
            self.env, self.ns = dict(base_env), dict(base_ns)
            for k in geometric if probes else ():  # the same start, the candidates grown as far as the last probe
                table = self.env if isinstance(k, str) else self.ns
                table[k] = probes[-1][0 if isinstance(k, str) else 1][k]
            self.env.update(fresh)
            self.once(body, test)
            probes.append((dict(self.env), dict(self.ns)))
        still, resolved = [], {}
        for k in geometric:
            i = 0 if isinstance(k, str) else 1
            b, c, d = (probes[j][i].get(k) for j in range(3))
            if b is None or c is None or d is None or _growth({k: b}, {k: c}, {k: d}) == [(k, "geometric")]:
                still.append(k)
                continue
            out = _extend(b, c, d, trips)
            grew = pmax(_diff(c.text(), b.text()), _diff(d.text(), c.text()))
            if pgt(padd(d.text(), pmul(trips, grew)), out.text()):  # growth of nesting: not a sum of increments
                still.append(k)
                continue
            t0 = (env0, ns0)[i]
            resolved[k] = _jn(t0.get(k), out)
        return still, resolved

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
            if lookup("global", name) is not None:  # range, lipsum...: a callable, under whatever name it goes
                return replace(_JINJA, fns=frozenset({f"global:{name}"}))
            if name in _JINJA_NAMES:
                return _JINJA
            if is_file_supplied(name):
                return self.files if name.endswith("s") else self.file
            return _DATA
        if isinstance(node, (n.Tuple, n.List)):
            items = [self.ev(i) for i in node.items]
            site = frozenset({id(node)}) if isinstance(node, n.List) else frozenset()  # a list can grow in place
            made = C(items=poly(float(len(items))), elem=_jn(*items) if items else None, sites=site)
            return self.made(made, line, "a literal")
        if isinstance(node, n.Dict):
            parts = [self.ev(x) for p in node.items for x in (p.key, p.value)]
            made = C(
                items=poly(float(len(node.items))), elem=_jn(*parts) if parts else None, sites=frozenset({id(node)})
            )
            return self.made(made, line, "a literal")
        if isinstance(node, n.CondExpr):
            self.ev(node.test)
            return _jn(self.ev(node.expr1), self.ev(node.expr2) if node.expr2 is not None else None)
        if isinstance(node, (n.And, n.Or)):
            return _jn(self.ev(node.left), self.ev(node.right))
        if isinstance(node, n.Test):
            return self.test(node)
        if isinstance(node, (n.Not, n.Compare)):
            size = ZERO  # comparing or searching text and lists reads them, unfolded: as long as they print
            for child in node.iter_child_nodes():
                if isinstance(child, n.Operand):
                    size = padd(size, self.ev(child.expr).text())
                elif isinstance(child, n.Expr):
                    size = padd(size, self.ev(child).text())
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
            widths = ZERO
            if node.operator == "%" and not _is_number(a):  # text formatting, not a remainder
                # a tuple's items are the values; any other container (a list, an iterator) is one value, itself
                widths = self.printf_widths(node.left, [_jn(self.parts(b), b)] if b.items is not None else [b], line)
            return self.binop(node.operator, a, b, line, widths)
        if isinstance(node, n.Getattr):
            recv = self.ev(node.node)
            out = self.part(recv, node.attr)
            kept = any((site, node.attr) in self.ns for site in recv.sites)  # a namespace's own attribute
            return _jn(out, _REPR) if not kept and _may_be_method(recv, node.attr) else out
        if isinstance(node, n.Getitem):
            recv = self.ev(node.node)
            if isinstance(node.arg, n.Slice):
                for p in (node.arg.start, node.arg.stop, node.arg.step):
                    if p is not None:
                        self.ev(p)
                return self.made(replace(recv, part=frozenset()), line, "a slice")  # a copy
            self.ev(node.arg)
            out = self.part(recv, None)
            if isinstance(node.arg, n.Const) and _may_be_method(recv, node.arg.value):  # a missing key falls back
                out = _jn(out, _REPR)
            return out
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
        if name is not None and recv.sites and all((site, name) in self.ns for site in recv.sites):
            return _jn(*(self.ns[(site, name)] for site in recv.sites))  # a namespace attribute, as last set
        if recv.data:
            e = _DATA
        elif name in ("previtem", "nextitem") and recv.elem is not None and recv.mag is not None:
            e = recv.elem  # the loop's items
        elif recv.items is None and recv.mag is not None:
            e = recv  # loop.index, a number's parts: as large as it
        elif recv.items is None and (recv.chars == _JINJA.chars or recv.fns):
            e = replace(_JINJA, chars=pmax(recv.chars, _JINJA.chars))  # an attribute of a Jinja object (m.name)
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
                text = x.mag is None or x.data or not _is_number(x)  # (what may be a text repeats as one)
                if y.mag is not None and (x.chars != ZERO or x.items is not None) and text:
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
            if _is_number(a) and (b.mag is not None or op != "%"):
                if op == "%":
                    return C(poly(24.0), None, b.mag, None, data)
                if op == "-" and a.mag is not None:
                    return C(poly(24.0), None, padd(a.mag, b.mag or UNBOUNDED), None, data)
                return C(poly(24.0), None, UNBOUNDED, None, data)  # dividing by a fraction makes a number larger
            if op == "%":  # the widths count the values
                return self.made(C(padd(a.chars, widths), None, None, None, data), line, "'%' formatting")
            mag = None  # request data may be a number: its difference, quotient
            if a.mag is not None:
                mag = padd(a.mag, b.mag) if op == "-" and b.mag is not None else UNBOUNDED
            return C(pmax(a.chars, poly(24.0)), a.items, mag, a.elem, data)  # sets and dict views: at most the left
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
        if isinstance(callee, n.Name) and identifier(callee.name) == "caller" and "caller" not in self.env:
            if self.callers:
                return self.run_caller(args, line)
            return _SMALL  # a macro not called by {% call %}: caller is undefined, calling it stops the render
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            target = self.ev(callee)
            if not target.fns or not all(isinstance(f, int) for f in target.fns):
                self.unbounded(line, "a call with *args or **kwargs of something other than a macro")
            # a macro given *args / **kwargs: each parameter may be any of their items
            spread = _jn(*(self.parts(a) for a in args[len(node.args) :]), *(self.parts(v) for v in kwargs.values()))
            width = max(len(getattr(self.fn_nodes[f], "args", ())) for f in target.fns)
            return self.call_fns(target.fns, [*args[: len(node.args)], *[spread] * width], {}, line, node)
        if isinstance(callee, n.Getattr):
            recv = self.ev(callee.node)
            target = self.part(recv, callee.attr)
            if target.fns:  # a macro or block kept in a namespace, dict or list, or self.block
                return self.call_fns(target.fns, args, kwargs, line, node)
            return self.method(callee.attr, recv, args, kwargs, line, node)
        target = self.ev(callee)
        if target.fns:  # a macro or global under another name, in a list, returned by an expression...
            return self.call_fns(target.fns, args, kwargs, line, node)
        if target.data or target.chars == self.fsize:
            self.spend(ONE, line, "a call")  # tried, then the render stops: request data or file text is not callable
            return _SMALL
        self.unbounded(line, "a call of a value that is not a known macro or builtin")

    def call_fns(self, fns: frozenset[Any], args: list[C], kwargs: dict[str, C], line: int | None, call: Any) -> C:
        """A call of any of these macros, blocks or builtins: the most costly of them."""
        out = []
        for fn in fns:
            if isinstance(fn, str) and fn.startswith("block:"):
                block = self.blocks.get(fn[6:])
                if block is not None:
                    out.append(self.macro_call_node(block, [], {}, line))
            elif isinstance(fn, str) and fn.startswith("global:"):
                out.append(self.builtin(lookup("global", fn[7:]), None, args, kwargs, line, call))
            elif isinstance(fn, str) and fn.startswith("joiner:"):
                out.append(self.ns.get((int(fn[7:]), "sep"), _SMALL))
            elif fn in self.fn_nodes:
                out.append(self.macro_call_node(self.fn_nodes[fn], args, kwargs, line))
            elif fn == "repr":
                self.unbounded(line, "a call of a bound method or an iterator kept in a value")
        return _jn(*out) if out else _SMALL

    def run_caller(self, args: list[C], line: int | None) -> C:
        block = self.callers.pop()
        try:
            before = self.output
            saved = dict(self.env)
            grown = len(self.grown)
            for a, c in zip(block.args, args, strict=False):
                self.env[identifier(a.name)] = c
            self.walk(block.body)
            views = self.site_views(s for sites, _ in self.grown[grown:] for s in sites)
            self.env = saved
            self.restore_growth(views)
            return C(chars=_diff(self.output, before))
        finally:
            self.callers.append(block)

    def macro_call_node(self, node: Any, args: list[C], kwargs: dict[str, C], line: int | None) -> C:
        name = identifier(node.name)
        params = [identifier(a.name) for a in getattr(node, "args", ())]  # a block has none
        bound = {p: kwargs.get(p, args[i] if i < len(args) else _SMALL) for i, p in enumerate(params)}
        if "caller" in kwargs:  # caller= given by keyword: caller() calls it
            bound["caller"] = kwargs["caller"]
            params = [*params, "caller"]
        rest = [*args[len(params) :], *(v for k, v in kwargs.items() if k not in bound)]
        bound["varargs"] = C(items=poly(float(len(rest))), elem=_jn(*rest) if rest else None)  # and kwargs
        # the macro of that name here (one defined inside another shadows it): by identity, not by name
        active = next((f for f in self.stack if f["node"] is node), None)
        tag = f"{name}@{id(node)}"
        if active is not None:  # a recursive call: how often, and what it passes down
            if self.counting:  # (a loop's trial passes are not calls)
                active["fanout"] = padd(active["fanout"], self.mult)
            mine = {f"param:{tag}/{p}" for p in params}
            if not any(mine & c.part for c in bound.values()):
                active["structural"] = False
                if not any(_mentions(c, mine) for c in bound.values()) and any(_is_number(c) for c in bound.values()):
                    active["unfounded"] = True  # a count (f(d - 1)), no part of its parameters: no walk of data
            for p, c in bound.items():
                active["args"][p] = _jn(active["args"].get(p), c)
                was = active["params"].get(p)
                if was is not None and pgt(c.text(), was.text()):
                    active["grows"] = True
            return C()
        key = (id(node), *(_bucket(bound[p]) for p in [*params, "varargs"]))
        summary = self.summaries.get(key)
        if summary is None:
            summary = self.summarise(node, name, params, bound, line)
            if not summary[2]:  # a macro that grows containers in place is walked again at each call
                self.summaries[key] = summary
        else:
            self.restore_growth(summary[2])
        work, out, _grown = summary
        self.spend(work, line, f"calls of macro {node.name} cost this many steps")
        return self.made(C(chars=out), line, f"macro {node.name}")

    def summarise(
        self, node: Any, name: str, params: list[str], bound: dict[str, C], line: int | None
    ) -> tuple[P, P, dict[int, C]]:
        """The work and output of one call of a macro, its recursion included, and the containers it grew."""
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
        grown = len(self.grown)
        views: dict[int, C] = {}
        self.stack.append(frame)
        self.mult, self.counting, self.work, self.output = ONE, True, ZERO, ZERO
        try:
            for p, c in bound.items():
                self.env[p] = replace(c, part=c.part | {f"self:{tag}/{p}"})
            self.env["kwargs"] = self.env["varargs"]
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
            views = self.site_views(s for sites, _ in self.grown[grown:] for s in sites)
        finally:
            self.stack.pop()
            self.env, self.work, self.output, self.mult, self.counting, self.macros = saved  # its own macros are gone
        self.restore_growth(views)  # what it grew in place stays grown
        fanout = frame["fanout"]
        if fanout != ZERO:
            if frame.get("doubles"):
                raise _Exceeded(
                    line, f"macro {node.name} passes itself {frame['doubles']} grown faster at each level (it doubles)"
                )
            if frame["structural"] and not self.cyclic:
                calls = NSIZE  # a walk down its argument, unfolded: at most one call per value of it
                for c in bound.values():
                    calls = padd(calls, c.text())
            elif fanout[0] <= 1.0 and not pconst(fanout) and not frame.get("unfounded"):
                # NOT PROVEN (docs/audit.md, "render cost"): a recursion per item of the request on values built
                # from its parameter (JSON-schema walkers) is taken to walk the request
                calls = NSIZE
            elif fanout[0] <= 1.0 and pconst(fanout):
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
        return padd(work, poly(5.0)), out, views

    # -- builtins: one table (builtins.py) says what is modelled; anything else is unbounded ----------------

    def method(self, name: str, recv: C, args: list[C], kwargs: dict[str, C], line: int | None, call: Any) -> C:
        b = lookup("method", name) or lookup("jinja-method", name)
        if b is None:
            self.unbounded(line, f"the method .{name}()")
        return self.builtin(b, recv, args, kwargs, line, call)

    def filter(self, node: Any) -> C:
        line = node.lineno
        recv = self.ev(node.node) if node.node is not None else C(chars=self.output)
        args, kwargs = self.args(node)
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            self.unbounded(line, f"|{node.name} with *args or **kwargs")
        b = lookup("filter", node.name)
        if b is None:
            # no loader the audit models (transformers, llama-cpp-python, plain jinja2) has this filter: Jinja raises
            # where it is reached and the render stops there (a runtime that adds filters is outside the bound)
            return C()
        return self.builtin(b, recv, args, kwargs, line, node)

    def test(self, node: Any) -> C:
        line = node.lineno
        if lookup("test", node.name) is None:
            return C()  # as for an unknown filter: the render stops where it is reached
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            self.unbounded(line, f"'is {node.name}' with *args or **kwargs")
        size = self.ev(node.node).text()
        for a in [*node.args, *(k.value for k in node.kwargs)]:
            size = padd(size, self.ev(a).text())
        if node.name in _TYPE_TESTS:  # a look at the value's type, identity or parity: one step, whatever its size
            size = ZERO
        self.spend(padd(ONE, pscale(size, 1 / 64)), line, "tests cost this many steps")
        return _BOOL

    def builtin(
        self, b: Builtin | None, recv: C | None, args: list[C], kwargs: dict[str, C], line: int | None, call: Any
    ) -> C:
        """A call of builtin ``b``: its arguments bound to its parameters by position or keyword, then its rule."""
        if b is None:
            self.unbounded(line, "a call")
        params: dict[str, C] = {}
        extra: list[C] = []
        for i, a in enumerate(args):
            if i < len(b.params):
                params[b.params[i]] = a
            elif b.star:
                extra.append(a)
            else:  # too many arguments: the call is made, a TypeError stops the render there
                self.spend(ONE, line, "a call")
                return _SMALL
        extra_kw: dict[str, C] = {}
        for k, v in kwargs.items():
            if k in b.params:
                params[k] = v
            elif b.starstar:
                extra_kw[k] = v
            else:  # a keyword the builtin does not take here; a runtime's own version might
                self.unbounded(line, f"{b.name}() with the keyword argument {k}=")
        what = f"|{b.name}" if b.kind == "filter" else f"{b.name}()" if b.kind == "global" else f".{b.name}()"
        r = recv if recv is not None else C()
        self.spend(padd(ONE, pscale(r.count(), 1 / 16)), line, f"{what} costs this many steps")
        rule = getattr(self, "r_" + b.rule)
        out: C = rule(b, r, params, extra, extra_kw, line, call, what)
        if b.kind == "filter" and b.name in _LAZY_FILTERS:
            out = replace(out, fns=out.fns | _REPR.fns)
        return out

    def attribute_values(self, e: C, call: Any, b: Builtin, param: str = "attribute") -> C:
        """What an ``attribute=`` parameter (groupby's first) picks from an item ``e``: a part of it, or, where the
        name may be a method's ("split"; or is computed), the method, written as its repr."""
        node = self.arg_node(call, b, param) if param in b.params else None
        if node is None:
            node = next((k.value for k in call.kwargs if identifier(k.key) == param), None)
        if node is None:
            return e
        out = self.part(e, None)
        if isinstance(node, self.n.Const) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
            steps = str(node.value).split(".")  # Jinja's attribute paths: 'a.b', '0'
            return _jn(out, _REPR) if any(_may_be_method(e, step) for step in steps) else out
        return _jn(out, _REPR)

    def arg_node(self, call: Any, b: Builtin, param: str) -> Any:
        """The syntax node given for ``param`` (by position or keyword), or None."""
        i = b.params.index(param)
        if i < len(call.args):
            return call.args[i]
        return next((k.value for k in call.kwargs if identifier(k.key) == param), None)

    def number(self, c: C | None, line: int | None, what: str, default: float) -> P:
        """A width, count or size given as a number (bounded), or the default when not given."""
        if c is None:
            return poly(default)
        if c.mag is None:
            return ZERO  # not a number: a TypeError stops the render
        return self.count(c, line, what)

    @staticmethod
    def parts(recv: C) -> C:
        """The bound of an item of ``recv`` (a character of a text)."""
        if recv.data:
            e = _DATA
        elif recv.elem is not None:
            e = recv.elem
        else:
            e = C(chars=ONE) if recv.items is None else _SMALL
        return _with_part(e, recv.part)

    # numbers

    def r_number_same(self, b: Builtin, r: C, p: dict[str, C], *_: Any) -> C:
        return C(chars=poly(24.0), mag=r.mag if r.mag is not None else UNBOUNDED)

    def r_round(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        # Jinja's round multiplies its value by 10**precision: a text (or a list) is repeated that many times, and
        # a number's floor or ceiling computes 10**precision, a number of that many digits
        precision = p.get("precision")
        if precision is not None:
            digits = precision.mag if precision.mag is not None else UNBOUNDED
            self.made(C(chars=digits), line, f"{what} with this precision")
        number = r.mag is not None and r.items is None and not r.data and pconst(r.chars) and r.chars[0] <= 24
        if precision is not None and not number:
            mag = precision.mag
            times = poly(10.0 ** min(mag[0], 400.0)) if mag is not None and pconst(mag) else UNBOUNDED
            self.made(C(chars=pmul(r.text(), times)), line, what)
        return self.r_number_same(b, r, p)

    def r_to_number(self, b: Builtin, r: C, p: dict[str, C], *_: Any) -> C:
        number = r.mag is not None and r.items is None and r.chars == poly(24.0)
        # the request's numbers, and its texts read in base 10, count as their value; other text: any magnitude
        mag = r.mag if number and r.mag is not None else UNBOUNDED
        if r.data and "base" not in p:
            mag = NSIZE
        d = p.get("default")
        # a value it cannot read gives the default back, whatever it is (|int(default=messages) writes the list)
        return _jn(C(chars=poly(24.0), mag=mag), d)

    def r_length(self, b: Builtin, r: C, *_: Any) -> C:
        # a container's length is at most its items, a text's its characters; of anything else, at most its text
        size = r.count() if r.items is not None and not r.data else pmax(r.count(), r.text())
        return C(chars=poly(24.0), mag=pmax(size, NSIZE) if r.data else size)

    def r_search(
        self, b: Builtin, r: C, p: dict[str, C], extra: list[C], kw: dict[str, C], line: int | None, *_: Any
    ) -> C:
        size = r.text()
        for a in p.values():
            size = padd(size, a.text())
        self.spend(pscale(size, 1 / 64), line, f".{b.name}() reads this much")
        return C(chars=poly(24.0), mag=padd(size, ONE))

    def r_test(self, *_: Any) -> C:
        return _BOOL

    def r_changed(self, *_: Any) -> C:
        return _BOOL

    # text

    def r_text_same(self, b: Builtin, r: C, *rest: Any) -> C:
        # trimming, stripping and tags removed shorten a text; string and safe give the value's own text
        return self.made(C(chars=r.text()), rest[-3], rest[-1])

    def r_case(self, b: Builtin, r: C, *rest: Any) -> C:
        # a case mapping writes at most three characters for one ('ΐ'.upper())
        return self.made(C(chars=pscale(r.text(), 3.0)), rest[-3], rest[-1])

    def r_escape(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        # HTML entities (&#34;: 5), URL quoting (4 UTF-8 bytes as %XX: 12) and attribute quoting stay below 12 a character
        return self.made(C(chars=pscale(padd(r.text(), ONE), 12.0)), line, what)

    def r_encode(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        # up to 4 bytes a character, each written '\\xNN' (4), and the repr's b'' (3)
        return self.made(C(chars=padd(pscale(r.text(), 16.0), poly(3.0))), line, what)

    def r_urlize(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        attrs = poly(64.0)
        for a in p.values():
            attrs = padd(attrs, a.text())
        size = r.text()
        return self.made(C(chars=padd(pscale(size, 14.0), pmul(padd(size, ONE), attrs))), line, what)

    def r_short_text(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        return self.made(C(chars=poly(32.0)), line, what)

    def r_strftime(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        fmt = p.get("format")
        return self.made(C(chars=pscale(padd(fmt.text() if fmt else ZERO, ONE), 32.0)), line, what)

    def r_center(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        width = self.number(p.get("width"), line, f"the width of {what}", 80.0)
        return self.made(C(chars=pmax(r.text(), width)), line, what)

    def r_expandtabs(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        tab = self.number(p.get("tabsize"), line, "the tab size of .expandtabs()", 8.0)
        return self.made(C(chars=pmul(r.text(), pmax(tab, ONE))), line, what)

    def r_indent(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        by = p.get("width")
        w = poly(4.0) if by is None else by.text() if by.mag is None else self.count(by, line, "the width of |indent")
        size = r.text()
        return self.made(C(chars=padd(size, pmul(padd(size, ONE), w))), line, what)

    def r_wordwrap(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        size = r.text()
        wrap = p.get("wrapstring")
        if "width" in p:
            self.number(p["width"], line, "the width of |wordwrap", 79.0)
        # textwrap cuts a long word one line at a time, copying the rest each time: time up to size**2
        self.spend(pscale(pmul(size, size), 1 / 64), line, "|wordwrap's line breaking costs this many steps")
        return self.made(C(chars=padd(size, pmul(padd(size, ONE), wrap.text() if wrap else ONE))), line, what)

    def r_truncate(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        end = p.get("end")
        # a text cut (and its end added), or, when short enough, the value itself, whatever it is (a list too)
        return self.made(_jn(C(chars=padd(r.text(), end.text() if end else poly(3.0))), r), line, what)

    def r_replace(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        size = r.text()
        new = p.get("new")
        old_len = _const_len(self.arg_node(call, b, "old"))
        hits = pscale(padd(size, ONE), 1 / max(1.0, old_len))  # an empty old text matches between characters too
        return self.made(C(chars=padd(size, pmul(hits, new.text() if new else ZERO))), line, what)

    def r_printf(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        total = padd(r.text(), self.printf_widths(call.node, [*extra, *kw.values()], line))
        return self.made(C(chars=total), line, what)

    def r_str_format(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        values = [*p.values(), *extra, *kw.values()]
        total = padd(r.text(), self.format_widths(call.node.node, values, line))
        return self.made(C(chars=total), line, what)

    def r_str_join(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        items = p.get("iterable", C())
        e = self.parts(items).text()
        return self.made(C(chars=pmul(items.count(), padd(r.text(), e))), line, what)

    def r_join(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        sep = p.get("d")
        e = self.attribute_values(self.parts(r), call, b).text()
        return self.made(C(chars=pmul(r.count(), padd(e, sep.text() if sep else ZERO))), line, what)

    def r_split(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        piece = _with_part(_DATA if r.data else C(chars=r.text()), r.part)
        made = C(items=padd(r.text(), poly(2.0)), elem=piece, data=r.data, sites=frozenset({id(call)}))
        return self.made(made, line, what)

    def r_tojson(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        size = r.text()
        by = p.get("indent")
        indent = ONE if b.name == "pprint" else ZERO
        if by is not None:  # a number of spaces, or a text, before each line, once per level (depth <= size)
            indent = by.text() if by.mag is None else pmax(by.text(), self.count(by, line, f"the indent of {what}"))
        sep = p.get("separators")
        per_item = padd(poly(12.0), sep.text() if sep is not None else ZERO)
        # and what an empty or atomic value writes: quotes ("''", '""'), 'None', 'null', 'Undefined', '{}'
        chars = padd(poly(16.0), padd(pmul(size, per_item), pmul(size, pmul(indent, size))))
        return self.made(C(chars=chars), line, what)

    def r_from_json(self, b: Builtin, r: C, *_: Any) -> C:
        return _DATA if r.data else C(chars=r.chars, items=r.chars, elem=C(chars=r.chars))

    # items and containers

    def r_pick(self, b: Builtin, r: C, *_: Any) -> C:
        return self.parts(r)

    def r_attr(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        name = self.arg_node(call, b, "name")
        if isinstance(name, self.n.Const) and isinstance(name.value, str):
            out = self.part(r, name.value)
            kept = any((site, name.value) in self.ns for site in r.sites)  # a namespace's own attribute
            return _jn(out, _REPR) if not kept and _may_be_method(r, name.value) else out  # |attr('split'): a method
        return _jn(self.part(r, None), _REPR, *(v for (s, _k), v in self.ns.items() if s in r.sites))

    def r_default(self, b: Builtin, r: C, p: dict[str, C], *_: Any) -> C:
        return _jn(r, p.get("default_value"))

    def r_sequence(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        count = r.count()
        self.spend(count, line, f"{what} reads this many items")
        if r.items is None and not r.data:  # a text: its characters
            return self.made(C(items=r.text(), elem=C(chars=ONE), sites=frozenset({id(call)})), line, what)
        e = self.parts(r)
        if b.name in ("dictsort", "items") and not r.data:  # (key, value) pairs (the request's parts are all N)
            e = C(items=poly(2.0), elem=e, part=e.part)
        # the request's text made a list of its characters ('ab'|list: "['a', 'b']") writes five times its text
        shown = pscale(r.text(), 6.0) if r.data and b.name in ("list", "sort", "unique") else ZERO
        return self.made(C(items=count, elem=e, data=r.data, sites=frozenset({id(call)}), shown=shown), line, what)

    def r_groupby(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        e = self.parts(r)
        key = self.attribute_values(e, call, b)  # the grouper: what the attribute picks
        group = C(items=poly(2.0), elem=_jn(key, C(items=r.count(), elem=e), p.get("default")))
        # (grouper, list) pairs: each group's key written again beside its items, not the request's text
        return self.made(C(items=r.count(), elem=group), line, what)

    def r_batch(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        count = r.count()
        per = count
        fill = p.get("fill_with")
        if fill is not None:  # the last batch is filled up to linecount items
            per = padd(count, self.number(p.get("linecount"), line, "the batch size of |batch", 1.0))
        self.spend(per, line, f"{what} makes this many items")
        batch = C(items=per, elem=_jn(self.parts(r), fill))
        # lists the filter makes (brackets, the fill): not the request's text, whatever they hold
        return self.made(C(items=padd(count, ONE), elem=batch), line, what)

    def r_slice(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        slices = self.number(p.get("slices"), line, "the count of |slice", 1.0)  # it loops that many times
        count = r.count()
        self.spend(padd(slices, count), line, f"{what} makes this many slices and items")
        part = C(items=padd(count, ONE), elem=_jn(self.parts(r), p.get("fill_with")))
        return self.made(C(items=slices, elem=part), line, what)  # lists it makes: not the request's text

    def r_sum(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        count = r.count()
        e = self.parts(r)
        start = p.get("start")
        self.spend(count, line, f"{what} adds this many items")
        if start is not None and (start.items is not None or start.mag is None):  # lists (or texts) added up
            return self.made(
                C(items=padd(start.count(), pmul(count, e.count())), elem=_jn(start.elem, e.elem)), line, what
            )
        mag = UNBOUNDED if e.mag is None else pmul(count, e.mag)
        return C(chars=poly(24.0), mag=padd(mag, start.mag) if start is not None and start.mag is not None else mag)

    def r_map(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        count = r.count()
        e = self.parts(r)
        if b.name != "map":  # select, reject, selectattr, rejectattr: a test on each item, the items kept
            size = e.text()
            for a in [*extra, *kw.values()]:
                size = padd(size, a.text())
            first = (
                call.args[1 if b.name.endswith("attr") else 0]
                if len(call.args) > (1 if b.name.endswith("attr") else 0)
                else None
            )
            if first is not None and not (isinstance(first, self.n.Const) and lookup("test", first.value) is not None):
                self.unbounded(line, f"{what} with a test that is not a known one")
            self.spend(pmul(count, padd(ONE, pscale(size, 1 / 64))), line, f"{what} costs this many steps")
            return self.made(C(items=count, elem=e, data=r.data, sites=frozenset({id(call)})), line, what)
        if not call.args:  # map(attribute=..., default=...)
            picked = self.attribute_values(e, call, b)
            data = r.data and not picked.fns  # methods picked from the request's items are not its text
            return self.made(C(items=count, elem=_jn(picked, kw.get("default")), data=data), line, what)
        name = call.args[0]
        if not (isinstance(name, self.n.Const) and isinstance(name.value, str)):
            self.unbounded(line, f"{what} with a filter name computed at render time")
        inner = lookup("filter", name.value)
        mult = self.mult
        self.mult = pmul(mult, padd(count, ONE))  # the filter runs once for each item
        try:
            sub = _Sub(name.value, call.args[1:], call.kwargs)
            out = self.builtin(inner, e, extra[1:], kw, line, sub)
        finally:
            self.mult = mult
        return self.made(C(items=count, elem=out, sites=frozenset({id(call)})), line, what)

    def r_view(self, b: Builtin, r: C, *rest: Any) -> C:
        e = self.parts(r)
        if b.name == "items" and not r.data:  # (key, value) pairs (the request's parts are all N)
            e = C(items=poly(2.0), elem=e, part=e.part)
        return C(items=r.count(), elem=e, data=r.data, fns=_REPR.fns)  # written out: 'dict_items([...])'

    def r_get(self, b: Builtin, r: C, p: dict[str, C], *_: Any) -> C:
        return _jn(self.parts(r), p.get("default"))

    def r_copy(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        return self.made(replace(r, part=frozenset()), line, what)  # keeps its sites: growing the copy grows it

    def r_append(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        self.grow(r, ONE, p.get("object"), line, what)
        return _NONE

    r_insert = r_append  # one more item, the object, wherever it goes

    def r_setdefault(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        self.grow(r, ONE, _jn(p.get("key"), p.get("default")), line, what)
        return _jn(self.parts(r), p.get("default"))

    def r_extend(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        it = p.get("iterable", C())
        self.spend(it.count(), line, f"{what} adds this many items")
        self.grow(r, it.count(), self.parts(it), line, what)
        return _NONE

    def r_update(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        other = p.get("other", C())
        added = padd(other.count(), poly(float(len(kw))))
        self.spend(added, line, f"{what} adds this many items")
        self.grow(r, added, _jn(self.parts(other) if "other" in p else None, *kw.values()), line, what)
        return _NONE

    def r_shrink(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        self.spend(r.count(), line, f"{what} costs this many steps")
        return _NONE

    def r_list_sort(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        count = r.count()
        self.spend(count, line, f"{what} costs this many steps")
        key = p.get("key")
        if key is not None:
            if not key.fns:
                self.unbounded(line, f"{what} with a key that is not a known macro")
            mult = self.mult
            self.mult = pmul(mult, padd(count, ONE))  # the key runs once for each item
            try:
                self.call_fns(key.fns, [self.parts(r)], {}, line, call)
            finally:
                self.mult = mult
        return _NONE

    # globals and Jinja's objects

    def r_range(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        ends = [self.count(p[k], line, "a bound of range()") for k in ("start", "stop") if k in p]
        span = ZERO
        for e in ends:
            span = padd(span, e)  # |stop - start| <= |start| + |stop|
        # an int step is 0 (an error) or at least 1 in size: never more passes than |start| + |stop|; written out, a
        # range is its repr ('range(0, 100000000000000000000)', whatever its length)
        return self.made(C(items=span, elem=C(chars=poly(24.0), mag=span), fns=_REPR.fns), line, what)

    def r_lipsum(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        paragraphs = self.number(p.get("n"), line, "lipsum's count", 5.0)
        words = self.number(p.get("max"), line, "lipsum's word count", 100.0)
        self.spend(pmul(paragraphs, padd(words, ONE)), line, f"{what} costs this many steps")
        return self.made(C(chars=pscale(pmul(paragraphs, padd(words, poly(4.0))), 16.0)), line, what)

    def r_dict(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        items = poly(float(len(kw)))
        for a in extra:
            items = padd(items, a.count())
        elem = _jn(*(self.parts(a) for a in extra), *kw.values()) if extra or kw else None
        return self.made(C(items=items, elem=elem, sites=frozenset({id(call)})), line, what)

    def r_namespace(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        site = id(call)
        for k, v in kw.items():
            self.ns[(site, k)] = v
        items = poly(float(len(kw)))
        for a in extra:  # namespace(mapping): any attribute, as large as its values
            items = padd(items, a.count())
            for key in [k for k in self.ns if k[0] == site]:
                self.ns[key] = _jn(self.ns[key], self.parts(a))
        elem = _jn(*(self.parts(a) for a in extra), *kw.values()) if extra or kw else None
        return self.made(C(chars=_JINJA.chars, items=items, elem=elem, sites=frozenset({site})), line, what)

    def r_cycler(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        return self.made(
            C(chars=_JINJA.chars, items=poly(float(len(extra))), elem=_jn(*extra) if extra else None), line, what
        )

    def r_cycler_next(self, b: Builtin, r: C, *_: Any) -> C:
        return r.elem if r.elem is not None else _SMALL

    def r_cycle(self, b: Builtin, r: C, p: dict[str, C], extra: list[C], *_: Any) -> C:
        return _jn(*extra) if extra else _SMALL

    def r_joiner(
        self,
        b: Builtin,
        r: C,
        p: dict[str, C],
        extra: list[C],
        kw: dict[str, C],
        line: int | None,
        call: Any,
        what: str,
    ) -> C:
        self.ns[(id(call), "sep")] = p.get("sep") or C(chars=poly(2.0))
        return replace(_JINJA, fns=frozenset({f"joiner:{id(call)}"}))

    def r_raise(self, *_: Any) -> C:
        return C()  # the render stops

    def printf_widths(self, fmt: Any, args: list[C], line: int | None = None) -> P:
        """What a %-format adds to its format string: each field's width and precision (``%9999s``, ``%*s``), and
        each field's value (a field may name the same value again: ``%(a)s%(a)s``)."""
        line = getattr(fmt, "lineno", None) or line
        if not (isinstance(fmt, self.n.Const) and isinstance(fmt.value, str)):
            self.unbounded(line, "a %-format whose format text is computed at render time")
        total = ZERO
        star = 0
        fields = 0
        for m in _PRINTF_RE.finditer(fmt.value):
            fields += m.group(0) != "%%"
            for g in (m.group(1), m.group(2)):
                if g == "*":
                    a = args[star] if star < len(args) else _NUMBER
                    total = padd(total, self.count(a, line, "a '*' width"))
                    star += 1
                elif g:
                    total = padd(total, poly(float(g)))
        values = ZERO
        for a in args:
            values = padd(values, a.text())
        return padd(total, pmul(poly(float(max(fields, 1))), values))

    def format_widths(self, fmt: Any, values: list[C], line: int | None) -> P:
        """What a str.format string adds to itself: each field's width (constant, or ``{:>{}}`` from an argument)
        and each field's value (``{0}{0}`` writes it twice)."""
        if not (isinstance(fmt, self.n.Const) and isinstance(fmt.value, str)):
            self.unbounded(line, "a .format() whose format text is computed at render time")
        try:
            fields = format_fields(fmt.value)
        except ValueError:
            return ZERO  # the render stops with an error
        total = ZERO
        for _field, spec in fields:
            if "{" in spec:  # a nested field: a width from an argument
                for a in values:
                    if a.mag is not None and a.items is None:
                        total = padd(total, self.count(a, line, "a width of .format()"))
            total = padd(total, poly(sum(float(d) for d in re.findall(r"\d+", spec))))
        text = ZERO
        for a in values:
            text = padd(text, a.text())
        return padd(total, pmul(poly(float(max(len(fields), 1))), text))

    # in-place growth

    def grow(self, recv: C, items: P, elem: C | None, line: int | None, what: str) -> None:
        """``recv`` grows in place by ``items`` items like ``elem``: every value that may be it (aliases, items of
        other containers, namespace attributes) grows with it."""
        if recv.data:
            self.unbounded(line, f"{what} grows the request's own data in place")
        if not recv.sites:
            self.unbounded(line, f"{what} grows a container the analysis does not track")
        if any(recv.sites & walking for walking in self.iterating):
            raise _Exceeded(line, f"{what} grows a list that a loop around it walks: the loop may never end")
        delta = C(items=items, elem=elem)
        self.apply_growth(recv.sites, delta)
        self.grown.append((recv.sites, delta))

    def apply_growth(self, sites: frozenset[int], delta: C, add: bool = True) -> None:
        memo: dict[int, C] = {}
        for table in (self.env, self.ns):
            for k, v in list(table.items()):
                w = _regrow(v, sites, delta, memo, add)
                if w is not v:
                    table[k] = w  # type: ignore[index]

    def site_views(self, sites: Iterable[int]) -> dict[int, C]:
        """Each site's largest bound in the current tables (what a macro left a container it grew as)."""
        out: dict[int, C] = {}
        seen: set[int] = set()

        def visit(c: C | None) -> None:
            while c is not None and id(c) not in seen:
                seen.add(id(c))
                for s in c.sites:
                    if s in wanted:
                        out[s] = _jn(out.get(s), c)
                c = c.elem

        wanted = set(sites)
        for table in (self.env, self.ns):
            for v in table.values():
                visit(v)
        return out

    def restore_growth(self, views: dict[int, C]) -> None:
        """Containers a macro (or caller block) grew, seen again after its own variables are gone."""
        for s, view in views.items():
            self.apply_growth(frozenset({s}), replace(view, sites=frozenset(), chars=ZERO, mag=None), add=False)


class _Sub:
    """The arguments of a filter that ``map`` applies (``map('center', 10**9)``): a call node of its own."""

    def __init__(self, name: str, args: list[Any], kwargs: list[Any]):
        self.name = name
        self.args = args
        self.kwargs = kwargs
        self.node = None
        self.lineno = None


def _mentions(c: C, parts: set[str], depth: int = 0) -> bool:
    """Whether ``c`` holds a part of one of ``parts`` (itself, or an item of it, a few levels down)."""
    while c is not None and depth < 6:
        if parts & c.part:
            return True
        c, depth = c.elem, depth + 1  # type: ignore[assignment]
    return False


def _is_number(c: C) -> bool:
    """Whether ``c`` is surely a number (a template's or Jinja's: loop.index), not text or request data."""
    return c.mag is not None and c.items is None and not c.data and c.chars in (poly(24.0), _JINJA.chars)


def _regrow(c: C, sites: frozenset[int], delta: C, memo: dict[int, C], add: bool = True) -> C:
    """``c`` with the containers of ``sites`` in it grown by ``delta`` (``add``) or to at least ``delta``."""
    hit = memo.get(id(c))
    if hit is not None:
        return hit
    e = c.elem
    e2 = _regrow(e, sites, delta, memo, add) if e is not None else None
    out = c
    if c.sites & sites:
        mine, more = c.items or ZERO, delta.items or ZERO
        out = replace(c, items=padd(mine, more) if add else pmax(mine, more), elem=_jn(e2, delta.elem))
    elif e2 is not e:
        out = replace(c, elem=e2)
    memo[id(c)] = out
    return out


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


def _sub0(a: float, b: float) -> float:
    return a - b if a > b else 0.0


def _diff(after: P, before: P) -> P:
    return after if before is ZERO else tuple(map(_sub0, after, before))


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
        if c0 is None or c1 is None or c0.data or (c0 == c1 == c2):
            continue
        kind_ = None
        for f in (lambda c: c.chars, lambda c: c.items or ZERO, lambda c: c.mag or ZERO, C.text):
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
        shown=grow(c1.shown, c2.shown, c3.shown) or ZERO,
    )


def _bucket(c: C) -> tuple[Any, ...]:
    def b(p: P | None) -> Any:
        if p is None:
            return None
        return tuple(INF if not math.isfinite(x) else round(math.log2(x + 1)) for x in p)

    return (b(c.chars), b(c.items), b(c.mag), c.data, bool(c.part))


def _compiled(tree: Any, nodes: Any) -> None:
    """What Jinja computes when it compiles, wherever it stands (a macro never called, a branch never taken): it folds
    an operator of two constants. A power or a repetition of constants past the limits is a finding."""
    for node in tree.find_all((nodes.Pow, nodes.Mul)):
        left, right = node.left, node.right
        if not (isinstance(left, nodes.Const) and isinstance(right, nodes.Const)):
            continue
        a, b = left.value, right.value
        line = getattr(node, "lineno", None)
        numbers = isinstance(a, (int, float)) and isinstance(b, (int, float))
        if isinstance(node, nodes.Pow) and numbers and abs(a) > 1 and b > 0 and b * math.log2(abs(a)) > BITS_LIMIT:
            raise _Exceeded(line, f"Jinja computes the constant power {a!r} ** {b!r} when it compiles")
        if isinstance(node, nodes.Pow):
            continue
        for text, times in ((a, b), (b, a)):
            if (
                isinstance(text, (str, bytes, list, tuple)) and isinstance(times, int) and not isinstance(times, bool)
            ) and len(text) * times > SIZE_LIMIT:
                raise _Exceeded(
                    line, f"Jinja computes a constant repetition {len(text) * times:,} long when it compiles"
                )


def _constants(tree: Any, nodes: Any) -> list[tuple[Any, int]]:
    """The largest expressions of ``tree`` made of constants alone (no variable, no context), each with how many
    times compiling may compute it: Jinja's optimizer tries to fold every expression, its children first, wherever it
    stands (a macro never called), and a child that fails to fold (``1e3|min``) is computed again by each expression
    around it, and once more when written out: at most its depth of expressions around, its own height, and 2.
    One walk, children before parents (linear in the tree)."""
    variable = (nodes.Name, nodes.ContextReference, nodes.DerivedContextReference, nodes.NSRef, nodes.InternalName)
    found: list[tuple[Any, int]] = []
    info: dict[int, tuple[bool, int]] = {}  # id -> (holds a variable, height in expressions)
    stack: list[tuple[Any, int, bool]] = [(tree, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        children = list(node.iter_child_nodes())
        if not done:
            stack.append((node, depth, True))
            inner = depth + 1 if isinstance(node, nodes.Expr) else depth
            stack.extend((c, inner, False) for c in children)
            continue
        held = [info[id(c)] for c in children]
        varies = isinstance(node, variable) or any(v for v, _ in held)
        height = (1 if isinstance(node, nodes.Expr) else 0) + max((h for _, h in held), default=0)
        info[id(node)] = (varies, height)
    # the largest constant expressions, top down
    todo: list[tuple[Any, int]] = [(tree, 0)]
    while todo:
        node, depth = todo.pop()
        varies, height = info[id(node)]
        if (
            isinstance(node, nodes.Expr)
            and not isinstance(node, (nodes.Const, nodes.TemplateData))
            and not (isinstance(node, nodes.Filter) and node.node is None)  # a {% filter %} block's: not folded
            and not varies
        ):
            found.append((node, depth + height + 2))
            continue
        inner = depth + 1 if isinstance(node, nodes.Expr) else depth
        todo.extend((c, inner) for c in node.iter_child_nodes())
    return found


def _run(tree: Any, nodes: Any, deadline: float, file_text: int | None, judge: bool) -> _Cost:
    _compiled(tree, nodes)
    cost = _Cost(nodes, deadline, file_text, judge)
    cost.cyclic = _may_make_cycles(tree, nodes)
    for block in tree.find_all(nodes.Block):  # self.<name>() renders a block again
        cost.blocks.setdefault(block.name, block)
    cost.walk(tree.body)
    # what compiling computes, once, wherever it stands (a macro never called): its work is the compile's
    for node, times in _constants(tree, nodes):
        cost.mult = poly(float(times))
        cost.ev(node)
    cost.mult = ONE
    return cost


def check(
    tree: Any, findings: Findings, nodes: Any, deadline: float, file_text: int | None = None
) -> RenderBound | None:
    """Report (GGUF-T504) when the bound of a render of ``tree`` passes the limits; the bound when it does not (the
    same walk :func:`bound` makes: the limits only ever stop it). ``file_text``: the length of the longest text
    the model file supplies (its special tokens), when the file is known."""
    try:
        return _bound_of(_run(tree, nodes, deadline, file_text, judge=True))
    except _Exceeded as e:
        findings.add(T504, f"rendering can cost too much: {e.why}", e.line)
    except (ArithmeticError, ValueError):  # the bound itself overflows: unbounded
        findings.add(T504, "rendering can cost too much: a bound of the render overflows")
    return None


@dataclass(frozen=True)
class RenderBound:
    """Upper bounds of what one render of a template costs, as polynomials in ``N``, the size of the render's
    variables (:func:`request_size`), and ``F``, the size of the text the model file supplies (at most ``N``
    when the file's variables are among those measured, as :func:`request_size` does).

    Attributes:
        work: steps (1 for each loop pass, each call of a macro, filter, test, global or method, and each
            64 characters of output or of a value made).
        output: characters of output.
        size: characters (or items) of the largest value made, the output included.
        why: None when the bound is finite; else why it is not (then every ``*_at`` is infinite).
        line: the line of the construct that made it unbounded.
    """

    work: P
    output: P
    size: P
    why: str | None = None
    line: int | None = None

    @property
    def bounded(self) -> bool:
        return self.why is None

    def work_at(self, n: float, f: float | None = None) -> float:
        """The bound of the work of a render whose :func:`request_size` is ``n`` (and file text ``f``, ``n``
        when not given)."""
        return INF if self.why is not None else peval(self.work, n, f)

    def output_at(self, n: float, f: float | None = None) -> float:
        return INF if self.why is not None else peval(self.output, n, f)

    def size_at(self, n: float, f: float | None = None) -> float:
        return INF if self.why is not None else peval(self.size, n, f)

    def __str__(self) -> str:
        if self.why is not None:
            return f"unbounded: {self.why}"
        return f"work {pfmt(self.work)}; output {pfmt(self.output)}; size {pfmt(self.size)}"


def bound(tree: Any, *, file_text: int | None = None, seconds: float = 1.0) -> RenderBound:
    """The render-cost bound of a parsed template (``jinja.parse(source, name)[0]``), within ``seconds`` of CPU.

    >>> from gguf_schema.check.templates.jinja import parse
    >>> b = bound(parse("{% for m in messages %}{{ m.content }}{% endfor %}", "t")[0])
    >>> b.bounded, b.output_at(100) >= 100
    (True, True)
    >>> bound(parse("{% set r = range %}{% for i in r(10 ** 10) %}{% endfor %}", "t")[0]).bounded
    True
    >>> str(bound(parse("{{ x.frobnicate() }}", "t")[0]))
    'unbounded: the method .frobnicate(): the cost analysis does not model it, so its cost is unbounded'
    """
    from jinja2 import nodes

    try:
        cost = _run(tree, nodes, time.thread_time() + seconds, file_text, judge=False)
    except _Exceeded as e:
        return RenderBound(UNBOUNDED, UNBOUNDED, UNBOUNDED, e.why, e.line)
    except CostOverBudget:
        return RenderBound(UNBOUNDED, UNBOUNDED, UNBOUNDED, f"not computed within {seconds:g} s of CPU")
    except (ArithmeticError, ValueError, RecursionError):
        return RenderBound(UNBOUNDED, UNBOUNDED, UNBOUNDED, "the bound itself overflows")
    return _bound_of(cost)


def _bound_of(cost: _Cost) -> RenderBound:
    # under autoescape (a loader may render with it on) every character an expression writes may become an entity
    # of up to 5: the bound of what a render does covers that, the judgement (T504) is on the text itself
    output = pscale(cost.output, AUTOESCAPE)
    work = padd(cost.work, pscale(cost.output, (AUTOESCAPE - 1) / 64))
    return RenderBound(work, output, pmax(cost.size, output))


def request_size(variables: Mapping[str, Any]) -> float:
    """``N`` for one render: the size of every variable passed to it (the request's and the file's alike), as
    the text Python writes for it: so the text of any part of the request, written out, is at most ``N``.

    A text counts the length of its ``repr`` (quotes and escapes), plus its value when it reads as a number
    (``'1e9'|int`` is a number of the request); a number its magnitude (at least 1) and the length of its
    ``repr``; True, False and None 6; a list, tuple or set 2 (its brackets) plus its items, a mapping 2 plus 2
    a key (``': '``) plus its keys and values; each item 2 more (``', '``); anything else the length of its
    ``repr``. A value met twice counts twice (the size unfolded). At least 1.

    >>> request = {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True}
    >>> request_size(request), sum(len(repr(v)) for v in request.values())  # at least what writing it out takes
    (54.0, 42)
    """
    total = 0.0
    stack: list[Any] = list(variables.values())  # the variables' names are not data the template reads
    visits = 0
    while stack:
        v = stack.pop()
        visits += 1
        if visits > 50_000_000:  # a cycle, or more than anyone renders
            return INF
        total += 2.0  # the separator written after it in a container (', ' or ': ')
        if isinstance(v, bool) or v is None:
            total += 4
        elif isinstance(v, (int, float)):
            size = abs(float(v))
            total += max(1.0, size) + len(repr(v)) if math.isfinite(size) else INF
        elif isinstance(v, str):
            total += len(repr(v)) + _as_number(v)
        elif isinstance(v, Mapping):
            total += 2 + 2 * len(v)
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 2
            stack.extend(v)
        else:
            total += len(repr(v))
    return max(total, 1.0)


def _as_number(text: str) -> float:
    """The magnitude ``|int`` or ``|float`` reads from ``text`` (0 when it reads none)."""
    try:
        return abs(float(int(text)))  # Python reads at most 4,300 digits
    except OverflowError:
        return INF
    except ValueError:
        pass
    try:
        x = abs(float(text))
    except ValueError:
        return 0.0
    return x if math.isfinite(x) else 0.0


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
