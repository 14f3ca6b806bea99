"""The containment check: what a render did must be within what the audit said a render may do.

A template the audit flags (an error-severity finding) is left alone: the audit said "do not render
this". For every other template, each observed render (:meth:`LiveRenderer.observe
<tests.oracle.live.LiveRenderer.observe>`) is judged at two levels.

Level ``audit`` (the audit as it is, with a safety predicate of its own):

* ``name:internal-attribute``: an internal name (an underscore name, a frame or code attribute,
  ``mro``, ``popen``...: the names ``live`` traces) resolved as an attribute, or refused by
  the sandbox; ``name:internal-lookup``: an internal name resolved any other way (an item of something
  that is not plain data, a format field); an item of a dict or list the template or the request made
  is data, and a lookup that resolved to nothing (or was asked of an Undefined) reached nothing (``predict``
  holds those to the names); a name the request chose, looked up on plain data, is the audit's documented
  contract (:func:`picked`: Jinja may resolve it to an attribute of the dict or str, whose further use the
  analysis refuses, which these checks verify on the next lookup or call);
* ``call:<kind>``: a call outside the allowlist (macros, ``caller``, ``loop``, the Jinja globals,
  ``raise_exception``/``strftime_now``, filters, tests, the public methods of str/list/dict/tuple/
  Markup, ``loop.cycle``/``changed``, a cycler's ``next``/``reset``, a joiner);
  ``call:format-field``: ``str.format``/``format_map`` with an attribute or index in a field;
* ``sandbox:refused``: the sandboxed render was refused (the audit's own render would say GGUF-T501),
  a refusal of a public mutating method of a list or dict (``append``: the immutable sandbox is
  stricter than the loaders without it) and of a request-chosen name on plain data excepted;
* ``cost:timeout``, ``cost:memory``, ``cost:recursion``, ``cost:crash``, ``cost:output``: a render on an
  ordinary request (at most :data:`ORDINARY_REQUEST` characters of JSON: a few short messages) went past its CPU time,
  memory, recursion or output bound, and the audit's own sandboxed render (on by default) does not report the
  template either (:func:`settle`; when it does, the class is the note ``note:rendered-*``); ``cost:work``: its work passed the absolute envelope
  ``WORK_LIMIT + PER_REQUEST_WORK * n`` of :mod:`gguf_schema.check.templates.cost`. On a larger request
  the audit's polynomial allows any render, so a bound exceeded there is a ``note:large-request-*``
  (reported, not a failure) until ``predict()`` gives a bound at that size.

Level ``predict`` (when :func:`gguf_schema.check.templates.predict` exists): every text name
looked up is in ``Prediction.names``, or (``request_names``) occurs as a string of the request and was
looked up in plain data (``predict:name``); the work is within ``Prediction.bound`` at the request's
size (``predict:work``).
"""

from __future__ import annotations

import importlib
import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from gguf_schema.check.templates import audit_template, cost
from gguf_schema.check.templates.observe import Observation

from .requests import request_size, request_strings

INTERNAL_WORDS = frozenset(
    {
        "mro",
        "gi_frame",
        "gi_code",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "tb_frame",
        "co_code",
        "popen",
        "Popen",
        "check_output",
        "getoutput",
        "import_module",
        "cr_frame",
        "ag_frame",
    }
)
PLAIN = frozenset({"dict", "list", "str", "int", "float", "bool", "NoneType", "tuple", "Markup"})
ALLOWED_GLOBALS = frozenset(
    {"range", "dict", "lipsum", "cycler", "joiner", "namespace", "raise_exception", "strftime_now"}
)
METHOD_OWNERS = frozenset({"str", "list", "dict", "tuple", "Markup"})
OTHER_METHODS = frozenset(
    {"LoopContext.cycle", "LoopContext.changed", "Cycler.next", "Cycler.reset", "Cycler.__call__"}
)
OTHER_OBJECTS = frozenset({"Joiner", "Cycler"})
#: Configurations a template is rendered in: (sandboxed, tojson, autoescape).
CONFIGS = (
    (False, "transformers", False),
    (False, "jinja2", False),
    (False, "jinja2", True),
    (False, "transformers", True),
    (True, "transformers", False),
    (True, "jinja2", False),
    (True, "jinja2", True),
    (True, "transformers", True),
)


#: The largest request (in characters of JSON) the cost classes of the audit level hold renders to.
ORDINARY_REQUEST = 300
#: Receivers of lookups that are not held to the predicted names (see check_render).
HELD_APART = frozenset({"filters", "tests", "format-arguments"})
#: Predicted work (steps) that a render does in well under the oracle's second of CPU.
QUICK_WORK = 1e5
#: Classes that are reported but are not containment failures.
NOTES = ("note:",)


def is_failure(cls: str) -> bool:
    return not cls.startswith(NOTES)


def internal(name: object) -> bool:
    return isinstance(name, str) and ((len(name) > 1 and name[0] == "_") or name in INTERNAL_WORDS)


@dataclass(frozen=True)
class Failure:
    """One containment failure: its class, what was observed, on which render."""

    cls: str
    detail: str
    config: tuple[bool, str, bool] = (False, "transformers", False)
    context: int = -1


@dataclass
class Judgement:
    """What the audit says of one template: flagged or not, and the prediction when there is one."""

    flagged: bool
    rules: tuple[str, ...]
    prediction: Any = None


def judge(source: str) -> Judgement:
    findings = audit_template(source)
    errors = tuple(sorted({f.rule for f in findings if f.severity == "error"}))
    prediction = None
    from gguf_schema.check import templates

    predict = getattr(templates, "predict", None)
    if predict is not None:
        prediction = predict(source)
        flagged = bool(errors) or bool(prediction.flagged)
    else:
        flagged = bool(errors)
    return Judgement(flagged, errors, prediction)


#: methods of numbers the analysis allows (gguf_schema.check.templates.interpreter.M_NUMBER)
NUMBER_METHODS = frozenset(
    {"bit_length", "bit_count", "conjugate", "is_integer", "hex", "as_integer_ratio", "to_bytes"}
)


def from_request(name: str, request: set[str]) -> bool:
    """``name`` is text of the request: one of its strings (or the text of one of its containers), or a piece of
    one, in any case, possibly reversed (what the analysis calls request text: split, stripped, sliced, reversed or
    case-mapped request text adds no character of the template)."""
    if name in request:
        return True
    folded = name.casefold()
    backwards = folded[::-1]
    return any(folded in r.casefold() or backwards in r.casefold() for r in request)


def _allowed_call(kind: str, what: str) -> bool:
    if kind in ("macro", "caller", "loop", "filter", "test", "uncallable"):
        return True
    if kind == "global":
        return what in ALLOWED_GLOBALS
    if kind == "method":
        owner, _, name = what.partition(".")
        if what in OTHER_METHODS:
            return True
        if owner in ("int", "float", "bool") and name in NUMBER_METHODS:
            return True  # the analysis's number methods (interpreter.M_NUMBER): they make a number or its text
        return owner in METHOD_OWNERS and not name.startswith("_") and "(of the class)" not in name
    if kind == "other":
        return what in OTHER_OBJECTS or what.endswith("Undefined")  # calling an Undefined raises at once
    return False


_MUTATION = re.compile(r"access to attribute '(\w+)' of '(list|dict|set|deque)' object is unsafe")


def _mutation_refused(error: str) -> bool:
    """The immutable sandbox refused a public mutating method (``append``, ``update``...): stricter than a
    loader without it, not a name the analysis let through."""
    m = _MUTATION.search(error)
    return m is not None and not internal(m.group(1))


def picked(prediction: Any, name: str, receiver: str, request: set[str]) -> bool:
    """The documented contract (docs/audit.md, "Why the name analysis is sound"): a name the request chose, looked up
    on plain data. Jinja's item lookup falls back to an attribute, so a role of ``'__init__'`` in
    ``{'user': 1}[message.role]`` resolves ``dict.__init__``; the analysis allows that one step and holds what it picked
    (any lookup on it, any call of it is GGUF-T106), which the checks of the next lookup verify."""
    return (
        prediction is not None and bool(prediction.request_names) and receiver in PLAIN and from_request(name, request)
    )


def nothing_reached(receiver: str, how: str) -> bool:
    """A lookup on an Undefined reaches nothing: it answers every name with an Undefined or an error (Python finds
    a dunder name on its class, which ``observe`` records as an ``attribute``, still held)."""
    return receiver.endswith("Undefined") and how in ("item", "undefined")


_REFUSED = re.compile(r"access to attribute '([^']*)' of '(\w+)' object is unsafe")


def _picked_refused(error: str, prediction: Any, request: set[str]) -> bool:
    """The sandbox refused the attribute a request-chosen name resolved to on plain data (see :func:`picked`)."""
    m = _REFUSED.search(error)
    return m is not None and picked(prediction, m.group(1), m.group(2), request)


def envelope(n: int) -> float:
    """The absolute work envelope at request size ``n`` (the limits of :mod:`gguf_schema.check.templates.cost`)."""
    return cost.WORK_LIMIT + cost.PER_REQUEST_WORK * n


def _work(bound: Any, n: int) -> float:
    """The predicted work at size ``n``: ``cost.RenderBound.work_at`` (a polynomial whose output term is a fraction of
    a step, where an observation counts whole steps: its ceiling), or a callable ``work``."""
    at = getattr(bound, "work_at", None)
    if at is None:
        return float(bound.work(n))
    w = float(at(n))
    return float(math.ceil(w)) if math.isfinite(w) else w


def _output(bound: Any, n: int) -> float | None:
    at = getattr(bound, "output_at", None)
    if at is not None:
        return float(at(n))
    output = getattr(bound, "output", None)
    return float(output(n)) if callable(output) else None


def check_render(
    result: dict[str, Any],
    config: tuple[bool, str, bool],
    index: int,
    context: dict[str, Any],
    judgement: Judgement,
) -> list[Failure]:
    """The failures of one observed render (empty: contained)."""
    out: list[Failure] = []

    def fail(cls: str, detail: str) -> None:
        out.append(Failure(cls, detail, config, index))

    kind = result["kind"]
    n = request_size(context)
    # an ordinary request: the audit's cost claim is about renders on these; past it the polynomial the audit
    # allows (coefficients up to a million per power of n) exceeds any render, so only predict() can be held
    ordinary = n <= ORDINARY_REQUEST
    if kind in ("timeout", "memory", "recursion", "crash"):
        fail(f"cost:{kind}" if ordinary else f"note:large-request-{kind}", f"the render ended by {kind} at n={n}")
    seen: list[Observation] = []
    for part in ("compile", "observation"):
        if result.get(part):
            seen.append(Observation.from_json(result[part]))
    request = request_strings(context)
    prediction = judgement.prediction
    for obs in seen:
        for x in obs.lookup_counts:
            if not x.is_text:
                continue
            name = str(x.name)
            if internal(name) and x.receiver != "format-arguments" and not nothing_reached(x.receiver, x.how):
                if picked(prediction, name, x.receiver, request):
                    pass  # the contract: one name the request chose, on plain data (its result confined: T106)
                elif x.how in ("attribute", "unsafe"):
                    fail("name:internal-attribute", f"{name!r} of a {x.receiver} ({x.how})")
                elif x.how != "undefined" and not (x.how == "item" and x.receiver in PLAIN):
                    fail("name:internal-lookup", f"{name!r} of a {x.receiver} ({x.how})")
            # a filter or test name (map('upper'), selectattr('role', 'equalto')) picks one of Jinja's registered
            # functions, never an attribute: it is not held to the predicted names
            # so is the argument a format field picks ('{x}'.format(x=...)): a keyword of the call, not an attribute
            if (
                prediction is not None
                and name not in prediction.names
                and x.receiver not in HELD_APART
                and not picked(prediction, name, x.receiver, request)
            ):
                fail("predict:name", f"{name!r} of a {x.receiver} ({x.how}) is not a predicted name")
        for c in obs.call_counts:
            if not _allowed_call(c.kind, c.what):
                fail(f"call:{c.kind}", f"{c.kind} {c.what}")
            if c.kind == "method" and c.what.split(".")[-1] in ("format", "format_map"):
                fields = [f for f in obs.fields if "." in f or "[" in f]
                if fields:
                    fail("call:format-field", f"{c.what} with fields {sorted(fields)[:3]}")
        if (
            obs.error
            and obs.error.startswith("SecurityError")
            and not _mutation_refused(obs.error)
            and not _picked_refused(obs.error, prediction, request)
        ):
            fail("sandbox:refused", obs.error[:200])
        if obs.error and obs.error.startswith("OutputBound"):
            fail("cost:output" if ordinary else "note:large-request-output", f"{obs.error} at n={n}")
        if obs.work > envelope(n):
            fail("cost:work", f"work {obs.work:,} > envelope {envelope(n):,.0f} at n={n}")
        bound = getattr(prediction, "bound", None) if prediction is not None else None
        if bound is not None:
            limit = _work(bound, n)
            if obs.work > limit:
                fail("predict:work", f"work {obs.work:,} > predicted {limit:,.0f} at n={n}")
            output = _output(bound, n)
            if output is not None and obs.output_chars > output:
                fail("predict:output", f"output {obs.output_chars:,} > predicted {output:,.0f} at n={n}")
    bound = getattr(prediction, "bound", None) if prediction is not None else None
    if bound is not None and kind in ("timeout", "memory") and _work(bound, n) < QUICK_WORK:
        # a bound this small is a render of well under a second: past the CPU or memory limit contradicts it
        fail(f"predict:{kind}", f"the render ended by {kind} at n={n}; predicted work {_work(bound, n):,.0f}")
    return out


#: Classes of a render the harness cut (its CPU, memory, recursion or output cap) on an ordinary request. The static
#: bound allows such a render (its limits are of work, not of one second: see GGUF-T504); the audit as shipped also
#: renders every template in its sandbox (GGUF-T502), so these are failures only when that render lets it through.
CAPPED = frozenset({"cost:timeout", "cost:memory", "cost:recursion", "cost:crash", "cost:output"})


def shipped_render_flags(source: str) -> bool:
    """Whether the audit's own sandboxed render (its conversations, bounds and configurations) reports ``source``."""
    from gguf_schema.check.templates import sandbox

    file_audit = importlib.import_module("gguf_schema.check.audit")  # the module (the package exports a function)

    found = sandbox.render_many([source], file_audit.RENDER_SECONDS, memory=file_audit.RENDER_MEMORY)
    return any(f.severity == "error" for f in found.get(source, []))


def settle(source: str, failures: list[Failure]) -> list[Failure]:
    """``failures`` with the :data:`CAPPED` ones the audit's own render reports turned into notes
    (``note:rendered-timeout``...): the audit as shipped refuses the template."""
    if not any(f.cls in CAPPED for f in failures) or not shipped_render_flags(source):
        return failures
    return [replace(f, cls="note:rendered-" + f.cls.partition(":")[2]) if f.cls in CAPPED else f for f in failures]


@dataclass
class Outcome:
    """One template against many requests: pairs rendered and the failures (empty when contained)."""

    source: str
    flagged: bool
    pairs: int = 0
    renders: int = 0
    failures: list[Failure] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)  # renders by how they ended

    def classes(self) -> set[str]:
        return {f.cls for f in self.failures}

    @property
    def real_failures(self) -> list[Failure]:
        """The failures that are containment failures (notes excepted)."""
        return [f for f in self.failures if is_failure(f.cls)]


def run_template(
    live: Any,
    source: str,
    contexts: list[tuple[int, dict[str, Any]]],
    configs: list[tuple[bool, str, bool]],
    *,
    timeout: float = 1.0,
    memory: int = 1 << 30,
    max_output: int = 1 << 20,
) -> Outcome:
    """Judge ``source``; when not flagged, render it on each context under each configuration (observed, in a
    forked child) and check containment. A flagged template counts its pairs (the audit answered them)."""
    judgement = judge(source)
    outcome = Outcome(source, judgement.flagged, pairs=len(contexts))
    if judgement.flagged:
        return outcome
    renders = [(config, ctx) for _, ctx in contexts for config in configs]
    labels = [(config, i, ctx) for i, ctx in contexts for config in configs]
    results = live.observe(source, renders, timeout=timeout, memory=memory, max_output=max_output)
    outcome.renders = len(results)
    for result, (config, i, ctx) in zip(results, labels, strict=False):
        outcome.kinds[result["kind"]] = outcome.kinds.get(result["kind"], 0) + 1
        outcome.failures.extend(check_render(result, tuple(config), i, ctx, judgement))
    outcome.failures = settle(source, outcome.failures)
    return outcome


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else f"{text[: n // 2]} ...[{len(text) - n:,} characters]... {text[-n // 2 :]}"


def describe(outcome: Outcome, failure: Failure) -> str:
    """A counter-example as text: the class, the template, the request, what was observed."""
    from .requests import CONTEXTS

    ctx = CONTEXTS[failure.context] if 0 <= failure.context < len(CONTEXTS) else {}
    sandboxed, tojson, autoescape = failure.config
    return (
        f"class {failure.cls}: {failure.detail}\n"
        f"  template: {_cut(repr(outcome.source), 3000)}\n"
        f"  request: CONTEXTS[{failure.context}] = {json.dumps(ctx, ensure_ascii=False)[:300]}\n"
        f"  environment: {'ImmutableSandboxedEnvironment' if sandboxed else 'Environment'}, tojson {tojson}, "
        f"autoescape {'on' if autoescape else 'off'}"
    )
