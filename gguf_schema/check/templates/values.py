"""Abstract values: every concrete value an expression of a template can have, covered.

The analysis is sound by construction when every abstract value covers every concrete value the
render can produce. Covering is easy to keep when the default is "anything": an abstract value
here is a set of **atoms**, each standing for a set of concrete values, and an operation that the
interpreter does not model exactly gives :data:`TOP`, the atom that stands for every value. Nothing
is ever "empty because unknown".

The atoms:

==================  ===================================================================================
``("c", t, k, v)``  the constant ``v`` of type name ``t`` (str, Markup, int, float, bool, NoneType,
                    bytes); ``k`` is its identity (``repr`` for floats, so ``-0.0`` and ``0.0`` stay
                    apart; NaN is never a constant)
``STR``             any text (a str or Markup the audit cannot fold, or text the model file chose)
``NUM``             any int, float or bool (never a str: as a subscript it never falls back to an
                    attribute)
``UNDEF``           Jinja's Undefined
``REQ``             any request data: a JSON value (dict, list, str, number, bool, None) the caller
                    passed; as a name, text the request chose
``DYN``             an attribute of plain data picked by a name the request chose (a method, a type)
``TOP``             anything at all: any Python object
``("list", s)``     a list or tuple the template made at site ``s`` (its elements: the heap)
``("dict", s)``     a dict the template made at site ``s``
``("ns", s)``       a ``namespace()`` made at site ``s``
``("cyc", s)``      a ``cycler()`` made at site ``s``;  ``("joiner", s)``: a ``joiner()``
``RANGE``           a ``range`` object (its elements are numbers)
``("macro", n)``    the macro(s) named ``n``;  ``CALLER``: a ``{% call %}`` block's body
``("loop", i)``     the loop object of the for loop ``i``
``("g", n)``        a Jinja global or runtime helper (range, dict, namespace, cycler, joiner, lipsum,
                    raise_exception, strftime_now)
``("m", n, r)``     the bound method ``n`` of the receiver atoms ``r``
==================  ===================================================================================

:class:`V` carries the atoms and ``why``, how its most suspicious part came to be (the chain of a
finding; never part of its identity). This module also says what a name reaches
(:func:`is_internal`, :func:`is_plain_internal`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "BOT",
    "CALLER",
    "DYN",
    "NUM",
    "RANGE",
    "REQ",
    "STR",
    "TOP",
    "UNDEF",
    "V",
    "const_atom",
    "is_internal",
    "is_plain_internal",
    "join",
    "strip_strings",
]

Atom = tuple[Any, ...]

STR: Atom = ("str",)
NUM: Atom = ("num",)
UNDEF: Atom = ("undef",)
REQ: Atom = ("req",)
DYN: Atom = ("dyn",)
TOP: Atom = ("top",)
RANGE: Atom = ("range",)
CALLER: Atom = ("caller",)

CAP = 48  # constants one value holds before they are widened to STR / NUM
SUSPECTS = 8  # texts beginning with '_' kept beside STR (they make the finding precise), at most
WHY = 10  # steps of a chain kept

#: atoms a name can be text through: a constant str (checked by name), or one of these (not proven)
_TEXTY = frozenset({STR, TOP, REQ, DYN})
#: atoms of plain data: a name the request chose, looked up on them, is an item lookup (or a method of plain data)
_PLAIN_KINDS = frozenset({"c", "str", "num", "undef", "req", "list", "dict", "range"})


def const_atom(value: Any) -> Atom:
    """The atom of one scalar constant (NaN is not a constant: it is a number)."""
    t = type(value).__name__
    if isinstance(value, float):
        if math.isnan(value):
            return NUM
        return ("c", t, repr(value), value)
    return ("c", t, value, value)


def _suspicion(atoms: frozenset[Atom]) -> int:
    if TOP in atoms:
        return 5
    if STR in atoms:
        return 4
    if any(a[0] == "c" and isinstance(a[3], str) and a[3][:1] == "_" for a in atoms):
        return 3
    if DYN in atoms:
        return 2
    return 1 if REQ in atoms else 0


class V:
    """One abstract value: a set of atoms (see the module docstring). Immutable; build with :func:`join`."""

    __slots__ = ("atoms", "why")

    def __init__(self, atoms: Iterable[Atom] = (), why: tuple[str, ...] = ()):
        self.atoms = atoms if isinstance(atoms, frozenset) else frozenset(atoms)
        self.why = why

    # -- shape -------------------------------------------------------------------------------

    def is_bot(self) -> bool:
        return not self.atoms

    def consts(self) -> list[Any]:
        """The constants it may be."""
        return [a[3] for a in self.atoms if a[0] == "c"]

    def strings(self) -> list[str]:
        """The constant texts (str and Markup) it may be."""
        return [a[3] for a in self.atoms if a[0] == "c" and isinstance(a[3], str)]

    def pure(self) -> bool:
        """Only constants: known exactly."""
        return bool(self.atoms) and all(a[0] == "c" for a in self.atoms)

    def kinds(self) -> frozenset[str]:
        return frozenset(a[0] for a in self.atoms)

    def plain(self) -> bool:
        """Proven plain data (text, numbers, request data, the template's lists and dicts): a name the request
        chose, looked up on it, is an item (or a method of plain data), never an object's attribute."""
        return all(a[0] in _PLAIN_KINDS for a in self.atoms)

    def texty(self) -> bool:
        """May be text that is not a known constant (unknown text, anything, request text)."""
        return bool(self.atoms & _TEXTY)

    def has(self, atom: Atom) -> bool:
        return atom in self.atoms

    def of_kind(self, *kinds: str) -> list[Atom]:
        return [a for a in self.atoms if a[0] in kinds]

    def numeric(self) -> bool:
        """Only numbers, booleans and None."""
        return bool(self.atoms) and all(
            a is NUM or a == NUM or (a[0] == "c" and (a[3] is None or isinstance(a[3], (int, float))))
            for a in self.atoms
        )

    # -- derived -----------------------------------------------------------------------------

    def step(self, text: str) -> V:
        """The same value, its chain one step longer."""
        why = (*self.why, text)
        if len(why) > WHY:
            why = (*why[:2], "…", *why[-(WHY - 3) :])
        return V(self.atoms, why)

    def with_why(self, why: tuple[str, ...]) -> V:
        return V(self.atoms, why)

    def sig(self) -> frozenset[Atom]:
        """The value's identity (what the fixpoint compares), without its chain."""
        return self.atoms

    def __repr__(self) -> str:  # for debugging and test failures
        shown = sorted(
            (repr(a[3]) if a[0] == "c" else ":".join(str(x) for x in a if not isinstance(x, frozenset)))
            for a in self.atoms
        )
        return f"V({', '.join(shown)})"


BOT = V()


def atoms_of(*vals: V | None) -> frozenset[Atom]:
    out: set[Atom] = set()
    for v in vals:
        if v is not None:
            out |= v.atoms
    return frozenset(out)


def join(*vals: V | None) -> V:
    """Everything any of ``vals`` may be; the chain of the most suspicious one."""
    present = [v for v in vals if v is not None and not v.is_bot()]
    if not present:
        return BOT
    if len(present) == 1:
        return present[0]
    atoms = frozenset().union(*(v.atoms for v in present))
    told = [v for v in present if v.why]
    if len(told) > 1 and any(v.why != told[0].why for v in told):
        why = max(told, key=lambda v: _suspicion(v.atoms)).why
    else:
        why = told[0].why if told else ()
    return V(widen(atoms), why)


def _text_const(a: Atom) -> bool:
    return a[0] == "c" and isinstance(a[3], (str, bytes))


def _number_const(a: Atom) -> bool:
    return a[0] == "c" and isinstance(a[3], (int, float)) and not isinstance(a[3], bool)


def widen(atoms: frozenset[Atom]) -> frozenset[Atom]:
    """The canonical form of a set of atoms (what :func:`join` keeps): STR covers the constant texts (but the
    few beginning with '_' stay, for a precise finding), NUM covers the constant numbers; more than :data:`CAP`
    constant texts or numbers become STR or NUM."""
    if len(atoms) <= CAP and STR not in atoms and NUM not in atoms:
        return atoms
    texts = sum(1 for a in atoms if _text_const(a))
    numbers = sum(1 for a in atoms if _number_const(a))
    if texts > CAP:
        atoms = atoms | {STR}
    if numbers > CAP:
        atoms = atoms | {NUM}
    if STR in atoms and texts:
        keep = [a for a in atoms if _text_const(a) and isinstance(a[3], str) and a[3][:1] == "_"]
        atoms = frozenset(a for a in atoms if not _text_const(a)) | (
            frozenset(keep) if len(keep) <= SUSPECTS else frozenset()
        )
    if NUM in atoms and numbers:
        atoms = frozenset(a for a in atoms if not _number_const(a))
    return atoms


def strip_strings(atoms: frozenset[Atom]) -> frozenset[Atom]:
    """``atoms`` with every constant text replaced by STR."""
    return frozenset(a for a in atoms if not _text_const(a)) | {STR}


def of(*values: Any, why: tuple[str, ...] = ()) -> V:
    """The constants ``values``."""
    return V(frozenset(const_atom(x) for x in values), why)


def atom(a: Atom, why: str = "") -> V:
    return V(frozenset((a,)), (why,) if why else ())


def top(why: str) -> V:
    """Anything at all, and why."""
    return V(frozenset((TOP,)), (why,))


def text(why: str) -> V:
    """Some text the audit cannot fold, and why."""
    return V(frozenset((STR,)), (why,))


def number() -> V:
    return V(frozenset((NUM,)))


# ---------------------------------------------------------------------------------------------- names

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

    kinds: list[type] = [str, int, float, bool, type(None), list, dict, tuple, bytes, range]
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
