"""What a render does, recorded: every name looked up, every callable called, and the render's work.

An instrumented Jinja environment only records; it changes no result. :func:`observing_environment`
takes the environment a loader renders with (plain ``jinja2.Environment`` or an
``ImmutableSandboxedEnvironment``, with that loader's ``tojson``, escaping and globals) and returns a
copy (:meth:`jinja2.Environment.overlay`) whose class adds :class:`ObservingMixin`. Its renders note:

* **lookups**: each ``x.name`` and ``x[name]``, the ``attr`` filter, the dotted attribute paths of
  ``map``/``selectattr``/``sort``/``groupby``/``sum``/``join``/``unique``/``min``/``max`` (they go
  through the environment's ``getitem``), the filter and test names ``map``/``select``/``reject``
  look up, and the fields of ``str.format``/``format_map`` format strings: the name (its Python type
  kept apart, so ``x['0']`` and ``x[0]`` differ), the receiver's type, and how it resolved (``item``,
  ``attribute``, ``undefined``, ``unsafe``: refused by the sandbox, ``format``: a format field);
* **calls**: each callable called, by what it is: ``macro``, ``caller``, ``global`` (``range``,
  ``namespace``..., by name), ``filter``, ``test``, ``method`` (``str.upper``, ``LoopContext.cycle``...),
  ``loop`` (a recursive loop's ``loop(...)``), ``type`` (a class called), ``uncallable`` (a value that is
  not callable: the call raises), ``other``; a call the sandbox refuses is noted with ``refused`` in its kind;
* **work**, in the units of the static cost bound (:mod:`.cost`): a **step** is one pass of a loop,
  one call (a macro, a global, a method, a filter or a test applied), or 64 characters of output.
  ``work = iterations + calls + ceil(output_chars / 64)``. Loop passes are counted by rewriting the
  parsed template before compiling it: every ``{% for %}``'s iterable goes through a counting filter
  (the passes of a recursive loop's inner levels are counted as the ``loop(...)`` calls that start them,
  one step each, not pass by pass). Characters made inside values (``'x' * n`` never written out) are
  not steps here; they show in the peak memory, measured with :mod:`tracemalloc` when asked (Python's
  allocations during the render, in bytes; it slows the render by about two).

This module imports only the standard library and Jinja2 (the render's child process may load it by
path, without gguf-schema).

>>> import jinja2
>>> env = observing_environment(jinja2.Environment())
>>> seen = observe(env, "{% for m in messages %}{{ m.role|upper }}{% endfor %}", {"messages": [{"role": "user"}] * 3})
>>> seen.output, seen.iterations, seen.calls, seen.work
('USERUSERUSER', 3, 3, 7)
>>> sorted({(x.name, x.receiver, x.how) for x in seen.lookups})
[('role', 'dict', 'item')]
"""

from __future__ import annotations

import math
import re
import string
import tracemalloc
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import update_wrapper
from typing import Any

__all__ = [
    "COUNT_FILTER",
    "MAX_DISTINCT",
    "STEP_CHARACTERS",
    "Call",
    "Lookup",
    "Observation",
    "ObservingMixin",
    "compile_observed",
    "observe",
    "observing_environment",
]

#: Characters of output that count as one step of work (as in :mod:`.cost`).
STEP_CHARACTERS = 64
#: Distinct lookups (and distinct calls) an observation keeps; past that they are only counted.
MAX_DISTINCT = 4096
#: The filter the rewritten template sends every loop's iterable through (it counts the passes).
COUNT_FILTER = "gguf_schema_observed_loop"

_NATIVE = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Lookup:
    """One distinct name looked up: ``name`` (a str, int, float, bool or None as written; anything else as its
    ``repr``), ``name_type`` (the Python type of the name: ``str``, ``int``, ``Markup``, ``slice``...),
    ``receiver`` (the type of the object looked into), ``how`` it resolved."""

    name: str | int | float | bool | None
    name_type: str
    receiver: str
    how: str

    @property
    def is_text(self) -> bool:
        """The name is text (a ``str`` or a subclass such as ``Markup``): a name an attribute could have."""
        return isinstance(self.name, str) and self.name_type not in ("slice", "tuple", "other")


@dataclass(frozen=True)
class Call:
    """One distinct callable called: ``kind`` (see the module) and ``what`` (its name, or type and name)."""

    kind: str
    what: str


@dataclass
class Observation:
    """What renders in one observing environment did (reset by :func:`observe`)."""

    lookup_counts: dict[Lookup, int] = field(default_factory=dict)
    call_counts: dict[Call, int] = field(default_factory=dict)
    fields: set[str] = field(default_factory=set)  # format-string fields as written ("0.x", "name[1]")
    iterations: int = 0
    calls: int = 0
    output_chars: int = 0
    peak_memory: int | None = None  # bytes, with tracemalloc
    dropped: int = 0  # distinct entries not kept (past MAX_DISTINCT)
    output: str = ""  # the first characters of the output (``keep``)
    error: str | None = None  # ``Type: message`` of an exception that ended the render

    @property
    def lookups(self) -> list[Lookup]:
        return list(self.lookup_counts)

    @property
    def work(self) -> int:
        """Steps: loop passes, calls, and one per 64 characters of output (see the module)."""
        return self.iterations + self.calls + math.ceil(self.output_chars / STEP_CHARACTERS)

    def text_names(self) -> set[str]:
        """Every text name looked up (resolved or not)."""
        return {str(x.name) for x in self.lookup_counts if x.is_text}

    def note_lookup(self, name: Any, receiver: str, how: str) -> None:
        """Count one lookup of ``name`` in an object of type ``receiver`` (a type's name)."""
        if isinstance(name, _NATIVE):
            key = Lookup(name if type(name) in _NATIVE else str(name), type(name).__name__, receiver, how)
        else:
            key = Lookup(repr(name)[:200], type(name).__name__, receiver, how)
        self._count(self.lookup_counts, key)

    def note_call(self, kind: str, what: str) -> None:
        self.calls += 1
        self._count(self.call_counts, Call(kind, what))

    def _count(self, table: dict[Any, int], key: Any) -> None:
        n = table.get(key)
        if n is not None:
            table[key] = n + 1
        elif len(table) < MAX_DISTINCT:
            table[key] = 1
        else:
            self.dropped += 1

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (:meth:`from_json` reads it back)."""
        return {
            "lookups": [[k.name, k.name_type, k.receiver, k.how, n] for k, n in self.lookup_counts.items()],
            "calls": [[k.kind, k.what, n] for k, n in self.call_counts.items()],
            "fields": sorted(self.fields),
            "iterations": self.iterations,
            "calls_made": self.calls,
            "output_chars": self.output_chars,
            "peak_memory": self.peak_memory,
            "dropped": self.dropped,
            "output": self.output,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Observation:
        return cls(
            {Lookup(a, b, c, d): n for a, b, c, d, n in data["lookups"]},
            {Call(a, b): n for a, b, n in data["calls"]},
            set(data["fields"]),
            data["iterations"],
            data["calls_made"],
            data["output_chars"],
            data["peak_memory"],
            data["dropped"],
            data["output"],
            data["error"],
        )


def _type(obj: Any) -> str:
    return type(obj).__name__


_FIELD_PART = re.compile(r"^[^.\[]*|\.[^.\[]*|\[[^\]]*\]")


def _format_names(fmt: str) -> Iterator[tuple[str, Any]]:
    """(field as written, each name its lookups use) of a ``str.format`` string, nested fields included."""
    for _, name, spec, _ in string.Formatter().parse(fmt):
        if not name:
            if spec and "{" in spec:
                yield from _format_names(spec)
            continue
        for i, key in enumerate(_FIELD_PART.findall(name)):
            text = key[1:] if key[:1] == "." else key[1:-1] if key[:1] == "[" else key
            if i == 0 and not text:  # an automatically numbered argument
                continue
            # as str.format reads them: the argument and [index] are numbers when all digits, .attr never
            yield name, int(text) if text.isdigit() and (i == 0 or key[:1] == "[") else text
        if spec and "{" in spec:
            yield from _format_names(spec)


class ObservingMixin:
    """The hooks of an observing environment (mixed in before the environment's own class)."""

    observation: Observation

    def _note_format(self, method: Any) -> None:
        fmt = getattr(method, "__self__", None)
        if not isinstance(fmt, str):
            return
        try:
            for whole, name in _format_names(fmt):
                self.observation.fields.add(whole)
                self.observation.note_lookup(name, "format-argument", "format")
        except ValueError:  # the format string is malformed: str.format raises too
            pass

    def getitem(self, obj: Any, argument: Any) -> Any:
        seen = self.observation
        try:
            value = obj[argument]  # what both Environment.getitem and the sandbox's try first
        except (AttributeError, TypeError, LookupError):
            pass
        else:
            seen.note_lookup(argument, _type(obj), "item")
            return value
        try:
            value = super().getitem(obj, argument)  # type: ignore[misc]
        except Exception as e:
            seen.note_lookup(argument, _type(obj), "unsafe" if type(e).__name__ == "SecurityError" else "undefined")
            raise
        seen.note_lookup(argument, _type(obj), _resolved(self, value, "attribute"))
        return value

    def getattr(self, obj: Any, attribute: str) -> Any:
        seen = self.observation
        try:
            getattr(obj, attribute)  # what both Environment.getattr and the sandbox's try first
        except AttributeError:
            how = "item"
        except Exception:
            how = "attribute"
        else:
            how = "attribute"
        try:
            value = super().getattr(obj, attribute)  # type: ignore[misc]
        except Exception as e:
            seen.note_lookup(attribute, _type(obj), "unsafe" if type(e).__name__ == "SecurityError" else how)
            raise
        seen.note_lookup(attribute, _type(obj), _resolved(self, value, how))
        return value

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """The sandbox's call (plain environments call through the context, :class:`ObservingContext`)."""
        if not __self.is_safe_callable(__obj):  # type: ignore[attr-defined]
            kind, what = _classify(__self, __obj)
            __self.observation.note_call(kind + " refused", what)
        return super().call(__context, __obj, *args, **kwargs)  # type: ignore[misc]

    def call_filter(self, name: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        self.observation.note_lookup(name, "filters", "item" if name in self.filters else "undefined")  # type: ignore[attr-defined]
        return super().call_filter(name, value, *args, **kwargs)  # type: ignore[misc]

    def call_test(self, name: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        self.observation.note_lookup(name, "tests", "item" if name in self.tests else "undefined")  # type: ignore[attr-defined]
        return super().call_test(name, value, *args, **kwargs)  # type: ignore[misc]


def _resolved(env: Any, value: Any, how: str) -> str:
    if not isinstance(value, env.undefined):
        return how
    refused = getattr(value, "_undefined_exception", None)  # the sandbox's unsafe_undefined
    return "unsafe" if getattr(refused, "__name__", "") == "SecurityError" else "undefined"


def _classify(env: Any, obj: Any) -> tuple[str, str]:
    """What a called object is: (kind, what)."""
    from jinja2.runtime import LoopContext, Macro

    if not callable(obj):
        return "uncallable", type(obj).__name__  # calling it raises at once
    wrapped = getattr(obj, "__wrapped__", None)  # the sandbox wraps str.format and format_map
    if wrapped is not None and getattr(wrapped, "__name__", "") in ("format", "format_map"):
        obj = wrapped
    if isinstance(obj, Macro):
        return ("caller", "caller") if obj.name in (None, "caller") else ("macro", obj.name)
    if isinstance(obj, LoopContext):
        return "loop", "loop()"
    for name, value in env.globals.items():
        if value is obj:
            return "global", name
    if isinstance(obj, type):
        return "type", obj.__name__
    if isinstance(obj, (types.MethodType, types.BuiltinMethodType, types.MethodWrapperType)):
        owner = getattr(obj, "__self__", None)
        name = getattr(obj, "__name__", "?")
        if isinstance(owner, types.ModuleType):
            return "other", f"{owner.__name__}.{name}"
        if isinstance(owner, type):
            return "method", f"{owner.__name__}.{name} (of the class)"
        return "method", f"{type(owner).__name__}.{name}"
    if isinstance(obj, types.FunctionType):
        return "other", f"function {obj.__module__}.{obj.__qualname__}"
    return "other", type(obj).__name__


def _context_class(base: type) -> type:
    class ObservingContext(base):
        def call(__self, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            env = __self.environment
            kind, what = _classify(env, __obj)
            env.observation.note_call(kind, what)
            if kind == "method" and what.endswith((".format", ".format_map")):
                wrapped = getattr(__obj, "__wrapped__", __obj)
                env._note_format(wrapped if getattr(wrapped, "__name__", "") in ("format", "format_map") else __obj)
            return super().call(__obj, *args, **kwargs)

    return ObservingContext


def _wrap(kind: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    from jinja2.utils import _PassArg

    pass_arg = _PassArg.from_obj(fn)

    def find_env(args: tuple[Any, ...]) -> Any:
        first = args[0]
        if pass_arg is _PassArg.context:
            return first.environment
        if pass_arg is _PassArg.eval_context:
            return first.environment
        return first

    if pass_arg is None:
        # the function does not get the environment: a context-passing wrapper hands it over (a filter or test
        # that takes no context may be folded at compile time; this one is not, which only moves its work from
        # the compile to the render)
        from jinja2 import pass_context

        @pass_context
        def plain(context: Any, *args: Any, **kwargs: Any) -> Any:
            context.environment.observation.note_call(kind, name)
            return fn(*args, **kwargs)

        return update_wrapper(plain, fn, assigned=("__name__", "__doc__"), updated=())

    def passing(*args: Any, **kwargs: Any) -> Any:
        env = find_env(args)
        env.observation.note_call(kind, name)
        if name == "attr" and kind == "filter" and len(args) >= 3:
            value = fn(*args, **kwargs)
            env.observation.note_lookup(args[2], _type(args[1]), _resolved(env, value, "attribute"))
            return value
        return fn(*args, **kwargs)

    update_wrapper(passing, fn, assigned=("__name__", "__doc__"), updated=())
    passing.jinja_pass_arg = pass_arg  # type: ignore[attr-defined]
    return passing


_CLASSES: dict[type, type] = {}


def _count_loop(context: Any, iterable: Any) -> Iterator[Any]:
    seen = context.environment.observation
    for item in iterable:
        seen.iterations += 1
        yield item


def observing_environment(base: Any) -> Any:
    """A copy of ``base`` (a Jinja environment, sandboxed or not, configured as a loader configures it) that
    records what its renders do in ``.observation`` (render with :func:`observe`)."""
    from jinja2 import pass_context

    cls = _CLASSES.get(type(base))
    if cls is None:
        cls = _CLASSES[type(base)] = type(
            f"Observing{type(base).__name__}",
            (ObservingMixin, type(base)),
            {"context_class": _context_class(base.context_class)},
        )
    env = base.overlay(cache_size=0)
    env.__class__ = cls
    env.filters = {name: _wrap("filter", name, fn) for name, fn in base.filters.items()}
    env.filters[COUNT_FILTER] = pass_context(_count_loop)
    env.tests = {name: _wrap("test", name, fn) for name, fn in base.tests.items()}
    env.observation = Observation()
    return env


def _counted(env: Any, source: str) -> Any:
    """The parsed template with every loop's iterable sent through the counting filter."""
    from jinja2 import nodes

    tree = env.parse(source)
    for loop in tree.find_all(nodes.For):
        loop.iter = nodes.Filter(loop.iter, COUNT_FILTER, [], [], None, None, lineno=loop.lineno)
    tree.set_environment(env)
    return tree


def compile_observed(env: Any, source: str) -> Any:
    """``source`` compiled in ``env`` (from :func:`observing_environment`) with its loops counted, or None when
    Jinja cannot compile it (the error is in ``env.observation.error``); what compiling did (Jinja folds
    constant expressions, lookups included) is in a fresh ``env.observation``."""
    seen = env.observation = Observation()
    try:
        return env.from_string(_counted(env, source))
    except (MemoryError, RecursionError):
        raise
    except Exception as e:
        seen.error = f"{type(e).__name__}: {str(e)[:300]}"
        return None


def observe(
    env: Any,
    source: str | Any,
    context: dict[str, Any],
    *,
    keep: int = 4096,
    max_output: int | None = None,
    memory: bool = False,
) -> Observation:
    """Compile ``source`` in ``env`` (from :func:`observing_environment`) and render it with ``context``,
    recording what the compile and the render do (``source`` may be a template from :func:`compile_observed`:
    then only the render is recorded) (a fresh :class:`Observation`, also left in
    ``env.observation``). An exception the template raises ends the render and is noted in ``error``
    (``Type: message``); ``BaseException``s that are not ``Exception``s (an alarm, ``KeyboardInterrupt``) and
    ``MemoryError``/``RecursionError`` propagate with the observation so far in ``env.observation``.
    ``keep``: characters of output kept; ``max_output``: stop the render past that many characters (the
    error is then ``OutputBound``); ``memory``: measure the peak of Python's allocations (tracemalloc).
    """
    seen = env.observation = Observation()
    started = False
    if memory:
        if tracemalloc.is_tracing():
            tracemalloc.reset_peak()
        else:
            tracemalloc.start()
            started = True
    kept: list[str] = []
    try:
        template = env.from_string(_counted(env, source)) if isinstance(source, str) else source
        for chunk in template.generate(**context):
            seen.output_chars += len(chunk)
            if sum(map(len, kept)) < keep:
                kept.append(chunk)
            if max_output is not None and seen.output_chars > max_output:
                seen.error = f"OutputBound: the output passed {max_output:,} characters"
                break
    except (MemoryError, RecursionError):
        raise
    except Exception as e:
        seen.error = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        seen.output = "".join(kept)[:keep]
        if memory:
            seen.peak_memory = tracemalloc.get_traced_memory()[1]
            if started:
                tracemalloc.stop()
    return seen
