"""Abstract values: what an expression of a template is PROVEN to be, over every way the template can run.

A :class:`V` is a set of possible runtime values, described by:

* ``consts``: constants it may be, known exactly (strings, numbers, lists, dicts...);
* ``kinds``: what else it may be, as bit flags:

  ``REQ``   data of the request (messages, tools...: JSON values), or text the request chose;
  ``NUM``   a number, boolean or None (its text is digits: it never names an attribute);
  ``TEXT``  text the template or the model file made that the audit cannot fold (unknown text);
  ``OBJ``   a Jinja or Python object (a global, a macro, a method, what an unknown call returns);
  ``DYN``   picked out of plain data by a name the request chose: it may be an attribute of a
            str/dict/list (a method, a type) rather than an item;
  ``NS``    a ``namespace()``;   ``LOOP``  the loop object;

* ``elems``: what its elements may be (a container made of non-constants), ``flat`` when nested
  deeper than tracked (its elements are like itself);
* ``calls``: what calling it does (``macro:<name>``, ``range``, ``caller``...; ``*``: anything);
* ``methods``: bound methods ``(name, receiver)``;
* ``why``: how its most suspicious part came to be, step by step (for the chain of a finding;
  never part of its identity).

Unknown is top: every flag set. A name is safe only when proven: a constant that is not an
internal, or request text looked up on plain data. Everything else the interpreter reports.
This module also holds what a name reaches (:func:`is_internal`, :func:`is_plain_internal`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ALL",
    "BOT",
    "DYN",
    "NS",
    "NUM",
    "OBJ",
    "REQ",
    "TEXT",
    "V",
    "is_internal",
    "is_plain_internal",
    "join",
]

REQ, NUM, TEXT, OBJ, DYN, NS, LOOP = 1, 2, 4, 8, 16, 32, 64
ALL = REQ | NUM | TEXT | OBJ | DYN | NS | LOOP
#: kinds that are plain Python data (a str, a number, a JSON value): request names on them are item lookups
PLAIN = REQ | NUM | TEXT
#: kinds that may be an object whose attributes lead somewhere
OBJECTISH = OBJ | DYN | NS | LOOP

CAP = 64  # constants tracked per value (more: unknown text)
NUMBERS = 8  # numbers tracked per value (more: "a number")
DEPTH = 3  # nesting of containers tracked
SITES = 8  # places a container may have been made, tracked per value (more: anywhere)
WHY = 12  # steps of a chain kept


def ckey(c: Any) -> tuple[str, Any]:
    """A hashable identity for a constant (``True`` and ``1`` stay apart)."""
    if c is None or isinstance(c, (str, int, float)):
        return type(c).__name__, c
    return type(c).__name__, repr(c)


def _suspicion(v: V) -> int:
    """How alarming a value is as a name: which of two chains to keep when joining."""
    if v.kinds & (TEXT | OBJ):
        return 3
    if any(isinstance(c, str) and c[:1] == "_" for c in v.consts):
        return 4
    if v.kinds & DYN:
        return 2
    return 1 if v.kinds & REQ else 0


class V:
    """One abstract value (see the module docstring). Immutable; build with the constructor or :func:`join`."""

    __slots__ = ("_sig", "calls", "consts", "elems", "flat", "kinds", "methods", "sites", "why")

    def __init__(
        self,
        consts: tuple[Any, ...] = (),
        kinds: int = 0,
        *,
        elems: V | None = None,
        flat: bool = False,
        calls: frozenset[str] = frozenset(),
        methods: tuple[tuple[str, V], ...] = (),
        why: tuple[str, ...] = (),
        sites: frozenset[Any] = frozenset(),
    ):
        self.sites = sites
        self.consts = consts
        self.kinds = kinds
        self.elems = elems
        self.flat = flat
        self.calls = calls
        self.methods = methods
        self.why = why
        self._sig: tuple[Any, ...] | None = None

    def sig(self) -> tuple[Any, ...]:
        """The value's identity (what the fixpoint compares), without its chain."""
        if self._sig is None:
            self._sig = (
                frozenset(ckey(c) for c in self.consts),
                self.kinds,
                self.flat,
                self.calls,
                frozenset((n, r.sig()) for n, r in self.methods),
                self.elems.sig() if self.elems is not None else None,
                self.sites,
            )
        return self._sig

    # -- shape --------------------------------------------------------------------------------

    def pure(self) -> bool:
        """Only constants: fully known."""
        return bool(self.consts) and not (self.kinds or self.elems is not None or self.calls or self.methods)

    def is_bot(self) -> bool:
        return not (self.consts or self.kinds or self.elems is not None or self.calls or self.methods)

    def numeric(self) -> bool:
        """Only numbers, booleans and None (known or not)."""
        return (
            not self.is_bot()
            and not (self.kinds & ~NUM or self.elems is not None or self.calls or self.methods)
            and all(c is None or isinstance(c, (int, float)) for c in self.consts)
        )

    def plain(self) -> bool:
        """Proven plain data (str, number, JSON container): request names on it are item lookups."""
        return not (self.kinds & OBJECTISH or self.calls or self.methods)

    def material(self) -> bool:
        """Carries text the template (or the model file) chose: constant text, unknown text or objects."""
        return bool(
            self.kinds & (TEXT | OBJ)
            or self.calls
            or self.methods
            or any(not (c is None or isinstance(c, (int, float))) for c in self.consts)
            or (self.elems is not None and self.elems.material())
        )

    def strings(self) -> list[str]:
        return [c for c in self.consts if isinstance(c, str)]

    # -- derived values -----------------------------------------------------------------------

    def but(
        self, *, kinds: int | None = None, consts: tuple[Any, ...] | None = None, why: tuple[str, ...] | None = None
    ) -> V:
        return V(
            self.consts if consts is None else consts,
            self.kinds if kinds is None else kinds,
            elems=self.elems,
            flat=self.flat,
            calls=self.calls,
            methods=self.methods,
            why=self.why if why is None else why,
            sites=self.sites,
        )

    def step(self, text: str) -> V:
        """The same value, its chain one step longer."""
        why = (*self.why, text)
        if len(why) > WHY:
            why = (*why[:2], "…", *why[-(WHY - 3) :])
        return self.but(why=why)

    def split(self) -> tuple[V, V]:
        """(its constants alone, everything else): to fold the known part of a mixed value."""
        return V(self.consts, why=self.why, sites=self.sites), V(
            (),
            self.kinds,
            elems=self.elems,
            flat=self.flat,
            calls=self.calls,
            methods=self.methods,
            why=self.why,
            sites=self.sites,
        )

    def __repr__(self) -> str:  # for debugging and test failures
        flags = [
            n
            for n, b in (
                ("REQ", REQ),
                ("NUM", NUM),
                ("TEXT", TEXT),
                ("OBJ", OBJ),
                ("DYN", DYN),
                ("NS", NS),
                ("LOOP", LOOP),
            )
            if self.kinds & b
        ]
        parts = [repr(c)[:40] for c in self.consts[:6]] + flags
        if self.elems is not None:
            parts.append(f"elems={self.elems!r}")
        if self.flat:
            parts.append("flat")
        if self.calls:
            parts.append(f"calls={sorted(self.calls)}")
        if self.methods:
            parts.append(f"methods={[n for n, _ in self.methods]}")
        return "V(" + ", ".join(parts) + ")"


BOT = V()


def const(*values: Any, why: tuple[str, ...] = ()) -> V:
    return V(tuple(values), why=why)


def kind(k: int, why: str = "") -> V:
    return V((), k, why=(why,) if why else ())


def top(why: str = "") -> V:
    """Anything at all."""
    return V((), ALL, flat=True, calls=frozenset({"*"}), why=(why,) if why else ())


def text(why: str, *, obj: bool = False) -> V:
    """Unknown text (and an object, with ``obj``) the template or the file made."""
    return V((), TEXT | (OBJ if obj else 0), why=(why,))


def candidates(values: Iterable[Any], why: str) -> V:
    """Any one of ``values`` (unknown text when there are more than the audit tracks)."""
    unique = {ckey(c): c for c in values}
    if len(unique) <= CAP:
        return V(tuple(unique.values()))
    return V(tuple(c for c in unique.values() if not isinstance(c, str))[:NUMBERS], TEXT | NUM, why=(why,))


def depth(v: V) -> int:
    d = 0
    e: V | None = v
    while e is not None and e.elems is not None:
        d += 1
        e = e.elems
    return d


def _flatten(v: V) -> V:
    """``v`` with every nesting level merged into one value that is also its own element."""
    levels = []
    level: V | None = v
    while level is not None:
        levels.append(
            V(level.consts, level.kinds, calls=level.calls, methods=level.methods, why=level.why, sites=level.sites)
        )
        level = level.elems
    flat = join(*levels)
    return V(flat.consts, flat.kinds, flat=True, calls=flat.calls, methods=flat.methods, why=flat.why, sites=flat.sites)


def container(elems: V, why: tuple[str, ...] = ()) -> V:
    """A list/dict made of non-constant parts: only its elements are tracked."""
    v = V(elems=None if elems.is_bot() else elems, why=why or elems.why)
    return _flatten(v) if depth(v) > DEPTH else v


def with_sites(v: V, sites: frozenset[Any]) -> V:
    """``v``, made (also) where ``sites`` say."""
    if not sites or sites <= v.sites:
        return v
    return V(
        v.consts,
        v.kinds,
        elems=v.elems,
        flat=v.flat,
        calls=v.calls,
        methods=v.methods,
        why=v.why,
        sites=v.sites | sites,
    )


def sub_sites(v: V, step: str) -> frozenset[Any]:
    """Where the parts of ``v`` were made: its places, one step deeper (``req:tools/*/function``)."""
    out = set()
    for s in v.sites:
        if s.startswith("key:"):
            continue
        out.add(s if s.endswith("/…") or s == "*" else s.split("/")[0] + "/…" if s.count("/") >= 5 else f"{s}/{step}")
    return frozenset(out)


def key_sites(v: V) -> frozenset[Any]:
    """A key of one of the dicts ``v`` may be (so looking it up there finds an item, not an attribute)."""
    return frozenset(f"key:{s}" for s in v.sites if not (s.startswith("key:") or s.endswith("…") or s == "*"))


def may_be_container(v: V) -> bool:
    return (
        bool(v.kinds & (REQ | OBJ | DYN | TEXT))
        or v.elems is not None
        or v.flat
        or any(isinstance(c, (list, tuple, dict)) for c in v.consts)
    )


def join(*vals: V | None) -> V:
    """What any one of ``vals`` can be (the least upper bound)."""
    vs = [v for v in vals if v is not None and not v.is_bot()]
    if not vs:
        return BOT
    first = vs[0]
    if len(vs) == 1:
        return first
    sig = first.sig()
    if all(v is first or v.sig() == sig for v in vs):
        return first
    consts: dict[Any, Any] = {}
    kinds = 0
    flat = False
    sites: frozenset[Any] = frozenset()
    calls: frozenset[str] = frozenset()
    methods: dict[str, list[V]] = {}
    elems: list[V] = []
    why = first.why
    worst = -1
    for v in vs:
        for c in v.consts:
            consts.setdefault(ckey(c), c)
        kinds |= v.kinds
        flat |= v.flat
        if v.sites:
            sites |= v.sites
        if v.calls:
            calls |= v.calls
        for n, r in v.methods:
            methods.setdefault(n, []).append(r)
        if v.elems is not None:
            elems.append(v.elems)
        if v.why:
            s = _suspicion(v)
            if s > worst:
                worst, why = s, v.why
    values = list(consts.values())
    numbers = [c for c in values if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if len(numbers) > NUMBERS:  # numbers are never names: a counter need not be tracked value by value
        values = [c for c in values if not (isinstance(c, (int, float)) and not isinstance(c, bool))]
        kinds |= NUM
    if len(values) > CAP:
        kept = [c for c in values if c is None or isinstance(c, (int, float))][:NUMBERS]
        kinds |= TEXT | (OBJ if any(isinstance(c, (list, tuple, dict)) for c in values) else 0)
        nested = [element_consts(c) for c in values if isinstance(c, (list, tuple, dict))]
        if nested:
            elems.append(join(*nested))
        values = kept
        why = (*why, "more candidate values than the audit tracks")[-WHY:]
    out = V(
        tuple(values),
        kinds,
        elems=join(*elems) if elems else None,
        flat=flat,
        calls=frozenset({"*"}) if len(calls) > CAP else calls,
        methods=tuple((n, join(*rs)) for n, rs in sorted(methods.items())),
        why=why,
        sites=frozenset({"*"}) if len(sites) > SITES else sites,
    )
    if out.elems is not None and depth(out) > DEPTH:
        out = _flatten(out)
    return out


def element_consts(c: Any) -> V:
    """The elements (and for a dict its keys and values) of a constant container."""
    if isinstance(c, dict):
        return candidates([*c.keys(), *c.values()], "a large constant dict")
    return candidates(c, "a long constant list")


def widen(new: V, old: V, *, widen_consts: bool = True) -> V:
    """A value above ``new`` (which grew from ``old``) from which few further changes are possible: each part
    that changed jumps to the top of its kind. New text constants become unknown text, new numbers a number,
    new containers and deeper nesting a flat container, new places a container was made their roots
    (``req:tools/…``), new callables "anything", new methods keep their names but not their receivers."""
    kinds = new.kinds
    old_keys = {ckey(c) for c in old.consts}
    consts: list[Any] = []
    elems = [new.elems] if new.elems is not None else []
    flat = new.flat
    for c in new.consts:
        if ckey(c) in old_keys or not widen_consts:
            consts.append(c)
        elif isinstance(c, (str, bytes)):
            kinds |= TEXT
        elif isinstance(c, (list, tuple, dict)):
            elems.append(element_consts(c))
            flat = True
        else:  # numbers, None, undefined
            kinds |= NUM
    flat_elems = join(*elems)
    if new.elems is not None and (old.elems is None or new.elems.sig() != old.elems.sig()):
        flat = True
    if flat and not flat_elems.is_bot():
        flat_elems = _flatten(V(elems=flat_elems))
        kinds |= flat_elems.kinds
        consts += [c for c in flat_elems.consts if ckey(c) not in {ckey(x) for x in consts}][: CAP - len(consts)]
        flat_elems = BOT
    sites = new.sites
    if sites != old.sites:
        sites = frozenset(s if s == "*" else s.split("/")[0] + "/…" for s in sites if not s.startswith("key:"))
    return V(
        tuple(consts),
        kinds,
        elems=None if flat or flat_elems.is_bot() else flat_elems,
        flat=flat,
        sites=sites,
        calls=new.calls if new.calls == old.calls else frozenset({"*"}),
        methods=new.methods
        if new.methods == old.methods
        else tuple((n, top("a receiver the audit widened")) for n, _ in new.methods),
        why=(*new.why, "a value that kept changing, widened")[-WHY:],
    )


def site_root(s: str) -> str:
    """The root of a place a container was made: the request variable or the template expression."""
    return s.split("/")[0]


# --------------------------------------------------------------------------------------------
# What a name reaches
# --------------------------------------------------------------------------------------------

#: Attribute names without underscores that still lead into the interpreter.
INTERNAL_NAMES = frozenset(
    {
        "mro",
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "gi_running",
        "gi_suspended",
        "cr_frame",
        "cr_code",
        "cr_await",
        "cr_origin",
        "ag_frame",
        "ag_code",
        "ag_await",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "f_trace",
        "tb_frame",
        "tb_next",
        "co_code",
        "co_consts",
        "co_names",
        "func_globals",
        "func_code",
        "func_closure",
        "func_defaults",
        "func_dict",
        "im_func",
        "im_self",
        "im_class",
    }
)
#: Functions that run commands or load code (reached after an internal walk).
RUNNER_NAMES = frozenset(
    {
        "popen",
        "Popen",
        "check_output",
        "check_call",
        "getoutput",
        "getstatusoutput",
        "import_module",
        "execv",
        "execve",
        "execvp",
        "execvpe",
        "execl",
        "execle",
        "execlp",
        "spawnv",
        "spawnve",
        "spawnl",
        "spawnle",
        "posix_spawn",
        "posix_spawnp",
        "startfile",
    }
)


def is_internal(name: str) -> bool:
    """True when looking ``name`` up on an object (any object) can lead to Python internals."""
    return (len(name) > 1 and name[0] == "_") or name in INTERNAL_NAMES or name in RUNNER_NAMES


def _private_attributes() -> frozenset[str]:
    """Underscore attributes of what plain data can be at render time: str, numbers, JSON containers, Markup,
    and Jinja's Undefined (a missing item); a dunder of any object is added by shape."""
    import jinja2.runtime

    kinds: list[type] = [str, int, float, bool, type(None), list, dict, tuple, bytes]
    kinds += [jinja2.runtime.Undefined, jinja2.runtime.StrictUndefined, jinja2.runtime.ChainableUndefined]
    kinds += [jinja2.runtime.DebugUndefined]
    try:
        from markupsafe import Markup

        kinds.append(Markup)
    except ImportError:  # pragma: no cover - markupsafe comes with jinja2
        pass
    return frozenset(n for k in kinds for n in dir(k) if n.startswith("_"))


_PLAIN_PRIVATE: frozenset[str] | None = None
_DUNDER_RE = re.compile(r"^__.+__$", re.S)


def is_plain_internal(name: str) -> bool:
    """True when looking ``name`` up on plain data (a str, a number, a JSON container, an undefined item) can
    lead to Python internals: a dunder, a private attribute those types have, a frame or runner name.
    ``'_some_key'`` on a dict is an item, not an attribute."""
    global _PLAIN_PRIVATE
    if name in INTERNAL_NAMES or name in RUNNER_NAMES or _DUNDER_RE.match(name):
        return True
    if name[:1] != "_":
        return False
    if _PLAIN_PRIVATE is None:
        _PLAIN_PRIVATE = _private_attributes()
    return name in _PLAIN_PRIVATE


def finite(x: float) -> bool:
    return not (math.isinf(x) or math.isnan(x))
