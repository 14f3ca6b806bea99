"""Chat templates: what a GGUF file's Jinja programs could reach and what rendering them can cost, found by reading them.

A GGUF file carries programs. ``tokenizer.chat_template`` (and the named variants
``tokenizer.chat_template.<name>``) is Jinja source that inference runtimes render, and some
render it without a sandbox: there a template reaches Python internals through attribute lookups
(``cycler.__init__.__globals__.os``) and runs commands. Scanners that grep the source for
``__class__`` are bypassed by names built at render time (``'__cla' ~ 'ss__'``,
``'%c%c' | format(95, 95)``, ``dict(__class__=1) | first``, numbers turned to text and edited...).
This package audits one template, by concern:

* :mod:`.interpreter` parses nothing itself: it interprets Jinja's own syntax tree abstractly
  over :mod:`.values` (what each value is PROVEN to be), folding constants with :mod:`.folding`.
  Every attribute or item lookup, ``.get()`` key and attribute parameter of a filter is accepted
  only when its name is proven safe; everything else is a finding with the chain of steps that
  made the name (``GGUF-T101``, ``T102``, ``T103``, ``T106``);
* :mod:`.cost` bounds what a render can cost (loop trips, string growth, macro recursion and
  fan-out) on a representative request (``GGUF-T504``);
* :mod:`.sandbox` renders sample conversations in Jinja's sandbox under each loader's configuration, in a
  child process (:mod:`.worker`) with time, memory, output and work bounds (``GGUF-T501``, ``T502``,
  ``T503``): part of every file audit, optional here (:func:`audit_template`'s ``render``);
* :mod:`.hidden` finds invisible and direction-changing characters (``GGUF-T301``, ``T302``);
* :mod:`.jinja` holds the environments (parsing, folding, the runtime-like sandbox);
* :mod:`.rules` the rule table and findings.

Jinja2 is an optional dependency (``pip install 'gguf-schema[audit]'``); only
:func:`audit_template` needs it.

>>> findings = audit_template("{{ cycler.__init__.__globals__.os.popen('id').read() }}")
>>> [(f.rule, f.severity, f.line) for f in findings]  # three internal names; two calls of what they reach
[('GGUF-T101', 'error', 1), ('GGUF-T101', 'error', 1), ('GGUF-T101', 'error', 1), ('GGUF-T102', 'error', 1), ('GGUF-T102', 'error', 1), ('GGUF-T504', 'error', 1)]
>>> print(findings[0].message)
attribute '__init__' of cycler (a Jinja global) is a Python internal
>>> audit_template("{% for m in messages %}{{ m['role'] ~ ': ' ~ m['content'] }}{% endfor %}")
[]
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Mapping
from types import MappingProxyType

from ...format import keys as K
from . import cost, sandbox
from .budget import OutOfBudget, cpu_deadline
from .hidden import T301, HiddenCharacter, count_runs, excerpt, hidden_characters, report_hidden, split_lines
from .interpreter import T104, Analysis, AnalysisOverBudget, alarm_words
from .jinja import ParseOverBudget, escaped_ascii, parse, require_jinja
from .rules import AuditRule, Findings, Severity, TemplateFinding, capped, declared, rule

__all__ = [
    "MAX_ANALYSED",
    "RULES",
    "AuditRule",
    "HiddenCharacter",
    "Prediction",
    "Severity",
    "TemplateFinding",
    "audit_template",
    "hidden_characters",
    "predict",
]

T105 = rule(
    "GGUF-T105",
    "warning",
    "escaped-literal",
    "A string literal writes plain ASCII characters with escape sequences (\\x5f, \\u005f, octal, \\N{...}): a way "
    "to hide names from text searches.",
)
T401 = rule(
    "GGUF-T401", "warning", "syntax-error", "Jinja cannot parse the template (the runtime cannot render it either)."
)
T402 = rule(
    "GGUF-T402",
    "error",
    "not-analysed",
    "The template was not analysed, or not rendered in full (it is larger than the audit analyses, it nests too "
    "deeply, or its analysis or sandboxed render ran past the audit's time budget for the file), so nothing can be "
    "said about what it reaches or costs: treat it as hostile. Real chat templates are a few kilobytes.",
)

#: Every rule of the template audit, by id.
RULES: Mapping[str, AuditRule] = MappingProxyType(declared())

#: The longest template (in characters) the audit parses and analyses; a longer one is GGUF-T402 (real chat
#: templates are under 20,000 characters; Jinja's own parser needs about a second for 1 MiB).
MAX_ANALYSED = 256 * 1024
#: CPU seconds (of the auditing thread) the lexing, parsing and analyses of a file's templates may take together
#: before what is left is reported as not analysed: five times what the costliest real template takes (0.12 s),
#: so a machine slowed by other work does not turn a real template into GGUF-T402.
ANALYSIS_SECONDS = 0.6
#: The most tokens the audit lexes and parses in one template (the largest real chat template has under 4,000).
MAX_TOKENS = 50_000
_HARD_STOP = 0.03  # CPU seconds past the budget before a timer stops an analysis between two clock readings
MAX_PER_RULE = 100
_MORE_RUNS = 100_000  # hidden-character runs counted past the cap


def _lexical(lines: list[str], findings: Findings, where: str) -> None:
    """What a text search can still say of a template that is not analysed: the internal words it spells."""
    n = 0
    for i, text in enumerate(lines, 1):
        for w in dict.fromkeys(alarm_words(text)):
            n += 1
            if n > MAX_PER_RULE:
                findings.more(T104, 1)
                continue
            findings.add(T104, f"{where} spells {w!r}, a Python internal or command runner", i, needle=w)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """What the static analysis says a render of one template can do.

    Attributes:
        findings: the static findings (what ``audit_template(source, render=False)`` returns).
        flagged: some finding is at error severity: the audit refuses the template, and says nothing more of it.
        names: every text the analysis proved may be looked up as a name (an attribute, an item, an attribute
            parameter of a filter, a filter or test name handed to ``map``/``select``/``reject``, a field of a
            ``str.format`` string, a key of ``.get``/``.pop``/``.setdefault``). For a template that is not flagged,
            a render looks up no other text, except (when ``request_names``) text of the request (its strings, or
            pieces of them in any case: split, stripped, sliced), as items of plain data.
        request_names: a name the request chose may be looked up (only ever on plain data, unless flagged).
        bound: the render-cost bound (:class:`.cost.RenderBound`) of a template that is not flagged.

    >>> p = predict("{% for m in messages %}{{ m['role'] ~ m.content }}{% endfor %}")
    >>> p.flagged, sorted(p.names), p.request_names
    (False, ['content', 'role'], False)
    >>> predict("{{ cycler.__init__ }}").flagged
    True
    """

    findings: tuple[TemplateFinding, ...]
    flagged: bool
    names: frozenset[str]
    request_names: bool
    bound: object | None = None


def predict(source: str) -> Prediction:
    """The static analysis of ``source`` as a :class:`Prediction`, with the render-cost bound
    (:func:`.cost.bound`) of a template the audit does not refuse."""
    if not isinstance(source, str):
        raise TypeError(f"predict needs the template as str, not {type(source).__name__}")
    require_jinja()
    p = _static(source)
    if p.bound is None and not p.flagged:  # the render-cost bound, for the oracle (the audit needs only T504)
        p = dataclasses.replace(p, bound=cost.bound(parse(source, "")[0]))
        if source in _CACHE:
            _CACHE[source] = p
    return p


def analyse(source: str, name: str, seconds: float = ANALYSIS_SECONDS) -> list[TemplateFinding]:
    """Every static finding of one template (no render), within ``seconds`` of CPU for the analysis."""
    return list(_analyse(source, name, seconds).findings)


def _analyse(source: str, name: str, seconds: float = ANALYSIS_SECONDS) -> Prediction:
    """The static analysis of one template, within ``seconds`` of CPU."""
    require_jinja()
    lines = split_lines(source)
    findings = Findings(lines, name, excerpt)
    report_hidden(source, lines, findings, MAX_PER_RULE)
    if len(findings) > MAX_PER_RULE:
        findings.more(T301, count_runs(source, MAX_PER_RULE + 1, _MORE_RUNS))
    if len(source) > MAX_ANALYSED:
        findings.add(
            T402,
            f"the template is {len(source):,} characters long, more than the {MAX_ANALYSED:,} the audit analyses",
        )
        _lexical(lines, findings, "the unanalysed source")
        return _prediction(findings, None)
    # the cyclic garbage collector stays off while the budget runs: the analysis makes no cycles worth collecting, and
    # a full collection of a large process's heap (a host holding a model's metadata) would spend the budget
    collecting = gc.isenabled()
    gc.disable()
    try:  # one budget for lexing, parsing and both analyses: read as they go, and a hard stop just past it
        with cpu_deadline(seconds + _HARD_STOP):
            return _analysed(source, name, seconds, lines, findings)
    except OutOfBudget:
        findings.add(
            T402, f"the analysis ran past its budget of {seconds:g} s of CPU; nothing is known about what it reaches"
        )
        _lexical(lines, findings, "the source")
        return _prediction(findings, None)
    finally:
        if collecting:
            gc.enable()


def _analysed(source: str, name: str, seconds: float, lines: list[str], findings: Findings) -> Prediction:
    jinja2 = require_jinja()
    deadline = time.thread_time() + seconds
    try:
        tree, strings = parse(source, name, deadline, MAX_TOKENS)
    except ParseOverBudget as e:
        findings.add(T402, f"the template was not parsed within the audit's budget ({e})")
        _lexical(lines, findings, "the unparsed source")
        return _prediction(findings, None)
    except jinja2.TemplateSyntaxError as e:
        line = e.lineno if e.lineno and 0 < e.lineno <= len(lines) else None
        findings.add(T401, f"Jinja cannot parse the template: {str(e.message)[:200]}", line)
        _lexical(lines, findings, "the unparsed source")
        return _prediction(findings, None)
    except RecursionError:
        findings.add(T402, "the template nests too deeply for Jinja's parser")
        _lexical(lines, findings, "the unparsed source")
        return _prediction(findings, None)

    for line, raw in strings:
        hidden = escaped_ascii(raw)
        if hidden:
            findings.add(T105, f"string literal writes {hidden[:40]!r} with escape sequences", line, needle="\\")

    from jinja2 import nodes

    analysis = Analysis(nodes, findings, deadline)
    try:
        analysis.run(tree)
    except RecursionError:
        findings.add(
            T402, "the template nests too deeply for the audit to follow; nothing is known about what it reaches"
        )
        _lexical(lines, findings, "the source")
        return _prediction(findings, None)
    except AnalysisOverBudget:
        findings.add(
            T402, f"the analysis ran past its budget of {seconds:g} s of CPU; nothing is known about what it reaches"
        )
        _lexical(lines, findings, "the source")
        return _prediction(findings, None)
    bound = None
    try:
        bound = cost.check(tree, findings, nodes, deadline)  # one budget for both analyses
    except (RecursionError, cost.CostOverBudget):
        findings.add(T402, "the render cost of the template could not be bounded within the audit's budget")
    return _prediction(findings, analysis, bound)


def _prediction(findings: Findings, analysis: Analysis | None, bound: cost.RenderBound | None = None) -> Prediction:
    result = tuple(findings.result(MAX_PER_RULE))
    flagged = any(f.severity == "error" for f in result) or analysis is None
    return Prediction(
        findings=result,
        flagged=flagged,
        names=frozenset(analysis.names) if analysis is not None else frozenset(),
        request_names=analysis.request_names if analysis is not None else True,
        bound=None if flagged else bound,  # the cost check's own walk: predict() need not walk again
    )


_CACHE: dict[str, Prediction] = {}
_CACHE_CHARS = 8 << 20  # characters of template source the cache may hold
_cached_chars = 0


def _static(source: str, seconds: float = ANALYSIS_SECONDS) -> Prediction:
    """Everything but the render, by source (cached, least recently used first out: models, and the named
    templates of one file, repeat templates; the key a template came from is set on the findings afterwards).
    An analysis given less than the whole budget is not cached when it ran out of it."""
    global _cached_chars
    hit = _CACHE.pop(source, None)
    if hit is None:
        hit = _analyse(source, "", min(seconds, ANALYSIS_SECONDS))
        if seconds < ANALYSIS_SECONDS and any(f.rule == T402.id for f in hit.findings):
            return hit
        _cached_chars += len(source)
    _CACHE[source] = hit
    while _cached_chars > _CACHE_CHARS and len(_CACHE) > 1:
        oldest = next(iter(_CACHE))
        _cached_chars -= len(oldest)
        del _CACHE[oldest]
    return hit


def is_cached(source: str) -> bool:
    """Whether the static findings of ``source`` are at hand (auditing it again costs nothing)."""
    return source in _CACHE


def clear_cache() -> None:
    """Forget the findings of the templates audited so far (benchmarks time cold audits)."""
    global _cached_chars
    _CACHE.clear()
    _cached_chars = 0


def audit_template(
    source: str,
    *,
    name: str = K.TOKENIZER_CHAT_TEMPLATE,
    render: bool = False,
    render_timeout: float = 5.0,
    render_max_output: int = 1 << 20,
    render_memory: int = 1 << 30,
    seconds: float = ANALYSIS_SECONDS,
) -> list[TemplateFinding]:
    """Audit one chat template (Jinja source) for ways to reach Python internals and for render cost, without
    running it.

    Args:
        source: the template text (e.g. ``metadata["tokenizer.chat_template"]``).
        name: the metadata key it came from; copied into each finding.
        render: also render sample conversations (one message and several, tools present and absent, the
            generation prompt on and off, a thinking turn) in Jinja's ``ImmutableSandboxedEnvironment`` with
            the helpers runtimes provide, in a child process bounded by ``render_timeout`` seconds for each
            conversation, ``render_memory`` bytes of address space and ``render_max_output`` characters of
            output. The sandbox's refusals (``GGUF-T501``) and any render past a bound or stopped by one of the
            sandbox's own limits (``GGUF-T502``) are findings; ordinary errors such as missing variables are
            not. This adds a child process: a few tenths of a second.
        seconds: CPU seconds (of the calling thread) the static analysis may take, lexing and parsing included;
            at most :data:`ANALYSIS_SECONDS`. Past it the template is ``GGUF-T402`` (not analysed).

    Returns:
        The findings in rule order, then line order (at most 100 of one rule, then one finding that counts
        the rest); empty for a clean template.

    Raises:
        ImportError: Jinja2 is not installed (``pip install 'gguf-schema[audit]'``).
        TypeError: ``source`` is not a str.

    >>> [f.rule for f in audit_template("{% set n = '__cla' ~ 'ss__' %}{{ messages[n] }}")]
    ['GGUF-T101']
    >>> [f.message for f in audit_template("{{ x[(lipsum|string)[18] * 2 ~ 'class' ~ (lipsum|string)[18] * 2] }}")]
    ['the item name in x[…] is built by an expression no chat template writes in a name position', 'the item name in x[…] is computed at render time (the Jinja global lipsum); it cannot be proven harmless']
    >>> [(f.rule, f.line) for f in audit_template("{% if x %}\\n{{ y }\\n")]
    [('GGUF-T401', 2)]
    """
    if isinstance(source, (bytes, bytearray)):
        raise TypeError("audit_template needs the template as str; decode the bytes as UTF-8 first")
    if not isinstance(source, str):
        raise TypeError(f"audit_template needs the template as str, not {type(source).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    require_jinja()
    findings = [dataclasses.replace(f, template=name) for f in _static(source, seconds).findings]
    if render:
        findings = capped(
            findings
            + sandbox.render(source, split_lines(source), name, render_timeout, render_max_output, render_memory),
            name,
            MAX_PER_RULE,
        )
    return findings
