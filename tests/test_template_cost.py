"""The render-cost bound: sound by construction, and each class of trick that got past it, proven live and caught.

Every trick here takes past half a second of CPU or 256 MB when rendered WITHOUT a sandbox on a one-message
conversation (:mod:`tests.oracle.live` renders it in a forked child with limits), and the audit,
which never renders, reports ``GGUF-T504`` at error severity. The classes are those issue 34 names: ``range``
under another name, keyword arguments, the degree of the bound, structures sharing their children, ``slice`` and
``batch`` counts, nesting depth, numbers from methods that are not modelled, growth in place, and the text of
the model file.

Then the bound itself (:func:`cost.bound`) against renders: what a render of the real templates does stays below
the bound at the render's own size (:func:`cost.request_size`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from gguf_schema.check.templates import audit_template, cost
from gguf_schema.check.templates.builtins import BUILTINS, lookup
from tests.oracle.live import LiveRenderer

jinja2 = pytest.importorskip("jinja2")
posix = pytest.mark.skipif(os.name != "posix", reason="live renders fork (POSIX)")

ONE_MESSAGE = {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True}
LOOP = "{% for i in X %}{% endfor %}"


@dataclass(frozen=True)
class Costly:
    source: str
    words: tuple[str, ...] = ()  # what the finding must say
    context: tuple[tuple[str, object], ...] = ()


def big_loop(expr: str) -> str:
    return LOOP.replace("X", expr)


TRICKS = {
    # range under another name
    "range-renamed": Costly("{% set r = range %}" + big_loop("r(10 ** 10)"), ("range()",)),
    "range-in-a-list": Costly("{% set l = [range] %}" + big_loop("l[0](10 ** 10)"), ("range()",)),
    "range-in-a-dict": Costly("{% set d = {'r': range} %}" + big_loop("d.r(10 ** 10)"), ("range()",)),
    "range-in-a-namespace": Costly("{% set ns = namespace(r=range) %}" + big_loop("ns.r(10 ** 10)"), ("range()",)),
    "range-as-a-macro-argument": Costly(
        "{% macro f(g) %}" + big_loop("g(10 ** 10)") + "{% endmacro %}{{ f(range) }}", ("range()",)
    ),
    "range-from-a-conditional": Costly(big_loop("(range if messages else lipsum)(10 ** 10)")),
    "range-through-a-filter": Costly(big_loop("([range]|first)(10 ** 10)"), ("range()",)),
    # keyword arguments
    "center-width-keyword": Costly("{{ 'x'|center(width=10 ** 10) }}", ("|center",)),
    "lipsum-n-keyword": Costly("{{ lipsum(n=10 ** 6, html=False) }}", ("lipsum",)),
    "expandtabs-tabsize-keyword": Costly("{{ '\\t\\t'.expandtabs(tabsize=10 ** 9) }}", ("expandtabs",)),
    "indent-width-keyword": Costly("{{ 'a\\nb\\nc'|indent(width=10 ** 9) }}", ("|indent",)),
    "zfill-width": Costly("{{ 'x'.zfill(10 ** 10) }}", (".zfill()",)),
    "ljust-width": Costly("{{ 'x'.ljust(10 ** 10) }}", (".ljust()",)),
    "wordwrap-wrapstring-keyword": Costly(
        "{{ ('a ' * 2000)|wordwrap(width=1, wrapstring='x' * 10 ** 6) }}", ("|wordwrap",)
    ),
    "printf-star-width": Costly("{{ '%*s'|format(10 ** 10, 'x') }}", ("|format",)),
    "format-nested-width": Costly("{{ '{:>{}}'.format('x', 10 ** 10) }}", (".format()",)),
    "tojson-indent-keyword": Costly(
        "{% set ns = namespace(x=1) %}{% for i in range(12) %}{% set ns.x = [ns.x, 1] %}{% endfor %}"
        "{{ ns.x|tojson(indent=10 ** 8) }}",
        ("tojson",),
    ),
    "map-filter-arguments": Costly("{{ ['x']|map('center', 10 ** 10)|list }}", ("|center",)),
    # a field named twice writes its value twice
    "printf-repeated-field": Costly(
        "{% set s = 'x' * 10 ** 6 %}{{ '" + "%(a)s" * 1000 + "' % {'a': s} }}", ("'%' formatting",)
    ),
    "format-repeated-field": Costly(
        "{% set s = 'x' * 10 ** 6 %}{{ '" + "{0}" * 1000 + "'.format(s) }}", (".format()",)
    ),
    # a bound past the highest degree tracked is unbounded, not clamped to it
    "degree-past-the-cap": Costly(
        "{% set c = messages[0].content %}" + "{% for a in c %}" * 13 + "{% endfor %}" * 13, ("unbounded",)
    ),
    # structures that share their children: sizes are those of the unfolding
    "shared-children-printed": Costly(
        "{% set ns = namespace(x=[1]) %}{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}",
        ("grown in the loop",),
    ),
    "shared-children-walked": Costly(
        "{% set ns = namespace(x=[1]) %}{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}"
        "{% for y in ns.x|list recursive %}{% if y is iterable %}{{ loop(y) }}{% endif %}{% endfor %}",
        ("grown in the loop",),
    ),
    # batch and slice counts
    "batch-filled": Costly("{{ [1]|batch(10 ** 10, 'x')|list }}", ("|batch",)),
    "slice-count": Costly("{{ [1]|slice(10 ** 9)|list|length }}", ("|slice",)),
    # a number from a method that is not modelled
    "number-method": Costly(big_loop("range((10 ** 10).conjugate())"), ("range() makes a value this large",)),
    "text-read-as-a-number": Costly("{{ 'x' * ('1' ~ '0' * 10)|int }}", ("repetition count",)),
    # in-place growth
    "extend-itself": Costly(
        "{% set l = [1] %}{% for i in range(40) %}{% set _ = l.extend(l) %}{% endfor %}{{ l|length }}", ("l",)
    ),
    "extend-through-an-alias": Costly(
        "{% set a = [1] %}{% set b = a %}{% for i in range(40) %}{% set _ = b.extend(a) %}{% endfor %}{{ a|length }}",
    ),
    "append-to-the-list-looped-over": Costly(
        "{% set l = [1] %}{% for x in l %}{% set _ = l.append(x) %}{% endfor %}", ("never end",)
    ),
    "update-a-namespace-list": Costly(
        "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set _ = ns.l.extend(ns.l) %}{% endfor %}"
        "{{ ns.l|length }}",
    ),
    "grow-request-data": Costly(
        "{% for m in messages %}{% set _ = messages.append(m) %}{% endfor %}", ("request's own data",)
    ),
    "grow-inside-a-macro": Costly(
        "{% macro g(l) %}{% set _ = l.extend(l) %}{% endmacro %}{% set l = [1] %}"
        "{% for i in range(40) %}{{ g(l) }}{% endfor %}{{ l|length }}",
    ),
    # macros reached by keyword or as keys
    "caller-keyword": Costly(
        "{% macro big() %}" + big_loop("range(10 ** 10)") + "{% endmacro %}"
        "{% macro f() %}{{ caller() }}{% endmacro %}{{ f(caller=big) }}",
        ("range()",),
    ),
    "sort-key-macro": Costly(
        "{% macro k(x) %}" + big_loop("range(10 ** 10)") + "{% endmacro %}{% set l = [1, 2] %}"
        "{% set _ = l.sort(key=k) %}",
        ("range()",),
    ),
    "star-arguments": Costly(big_loop("range(*[10 ** 10])"), ("*args",)),
    # text the model file supplies is not the request's
    "file-token-cubed": Costly(
        "{% for a in bos_token %}{% for b in bos_token %}{% for c in bos_token %}{% endfor %}{% endfor %}{% endfor %}",
        ("unbounded",),
        (("bos_token", "<s>" * 1000),),
    ),
    "file-token-amplified": Costly("{{ bos_token * 10 ** 6 }}", ("F",), (("bos_token", "<s>" * 3000),)),
    # numbers read back out of pairs
    "number-from-items": Costly(big_loop("range(dict(a=10 ** 10).items()|first|last)"), ("range()",)),
    "number-through-dictsort": Costly(big_loop("range({'a': 10 ** 10}|dictsort|first|last)"), ("range()",)),
    # a recursion counted by a number, once per message at each level: n**depth calls
    "counted-recursion-per-message": Costly(
        "{% macro f(d) %}{% for m in messages %}{% if d > 0 %}{{ f(d - 1) }}{% else %}.{% endif %}{% endfor %}"
        "{% endmacro %}{{ f(7) }}",
        ("calls itself",),
        (("messages", [{"role": "user", "content": "a"}] * 20),),
    ),
    "file-token-repeated-by-the-file": Costly(
        "{{ eos_token * (eos_token|length) * (eos_token|length) }}", (), (("eos_token", "x" * 5000),)
    ),
}


@pytest.fixture(scope="module")
def live():
    with LiveRenderer() as renderer:
        yield renderer


@posix
@pytest.mark.parametrize("name", list(TRICKS))
def test_costly_render_is_live_and_caught(name, live):
    trick = TRICKS[name]
    context = {**ONE_MESSAGE, **dict(trick.context)}
    result = live.render(trick.source, context, timeout=0.5, memory=256 << 20)
    assert result.exceeded, result
    findings = [f for f in audit_template(trick.source) if f.rule == "GGUF-T504"]
    assert findings and findings[0].severity == "error", audit_template(trick.source)
    for words in trick.words:
        assert words in findings[0].message, findings[0].message
    # the exported bound says as much, at this render's size: past the limits, or unbounded
    b, n = cost.bound(_tree(trick.source), seconds=30.0), cost.request_size(context)
    assert b.work_at(n) > cost.WORK_LIMIT or b.size_at(n) > cost.SIZE_LIMIT or "file" in name, str(b)


def _tree(source: str):
    from gguf_schema.check.templates.jinja import parse

    return parse(source, "t")[0]


# ---------------------------------------------------------------------------------------------
# What is modelled is one table; everything else is unbounded
# ---------------------------------------------------------------------------------------------


def test_every_jinja_builtin_has_a_rule():
    from jinja2.defaults import DEFAULT_FILTERS, DEFAULT_NAMESPACE, DEFAULT_TESTS

    for name in DEFAULT_FILTERS:
        assert lookup("filter", name) is not None, name
    for name in DEFAULT_TESTS:
        assert lookup("test", name) is not None, name
    for name in DEFAULT_NAMESPACE:
        assert lookup("global", name) is not None, name
    for b in BUILTINS.values():  # each rule the table names is implemented
        assert callable(getattr(cost._Cost, "r_" + b.rule, None)), b


def test_the_str_list_dict_methods_not_in_the_table_are_unbounded():
    absent = set()
    for t in (str, list, dict):
        absent |= {m for m in dir(t) if not m.startswith("_") and lookup("method", m) is None}
    assert absent == {"fromkeys", "maketrans", "translate"}  # what is left out, on purpose: unbounded
    for m in sorted(absent):
        b = cost.bound(_tree(f"{{{{ x.{m}('a') }}}}"))
        assert not b.bounded and f".{m}()" in (b.why or ""), b


def test_a_keyword_a_builtin_does_not_take_is_unbounded():
    assert not cost.bound(_tree("{{ 'x'|center(widht=3) }}")).bounded
    assert cost.bound(_tree("{{ 'x'|center(width=3) }}")).bounded


def test_the_degree_of_a_bound_is_never_clamped():
    a = cost.poly(0.0, 1.0)
    p = a
    for _ in range(cost.DEG - 1):
        p = cost.pmul(p, a)
    assert p[cost.DEG] == 1.0 and not cost.pbig(p)
    assert cost.pbig(cost.pmul(p, a))  # N**(DEG+1): unbounded
    assert cost.pbig(cost.pmul(cost.FSIZE, cost.FSIZE))  # F**2: unbounded
    assert not cost.pbig(cost.pmul(cost.FSIZE, a))  # F·N is tracked


def test_file_text_is_sized_by_the_file_when_it_is_known():
    source = "{% for a in bos_token %}{% for b in bos_token %}{% endfor %}{% endfor %}"
    assert not cost.bound(_tree(source)).bounded  # F**2: the file could make it anything
    assert cost.bound(_tree(source), file_text=5).bounded  # a file whose tokens are at most 5 characters
    assert audit_template("{{ bos_token }}{% for m in messages %}{{ eos_token }}{{ m.content }}{% endfor %}") == []


# ---------------------------------------------------------------------------------------------
# The bound against renders of the real templates (a bounded sample; the oracle runs it at scale)
# ---------------------------------------------------------------------------------------------


def _contexts():
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    for k in (1, 4):
        messages = [{"role": "system", "content": "Be brief."}]
        for i in range(k):
            messages.append({"role": "user", "content": f"Question {i} " * (1 + 7 * i)})
            messages.append({"role": "assistant", "content": f"Answer {i} " * (1 + 5 * i)})
        yield {"messages": messages, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
        yield {"messages": messages[1:], "tools": [tool], "bos_token": "<s>", "eos_token": "</s>"}


def test_real_templates_render_within_their_bound():
    from pathlib import Path

    from gguf_schema.check.templates.jinja import runtime_environment

    env = runtime_environment(sandboxed=True)
    real = sorted((Path(__file__).parent / "data" / "templates" / "real").glob("*.jinja"))
    checked = 0
    for path in real[::6]:  # a sample: the oracle renders them all
        source = path.read_text(encoding="utf-8")
        b = cost.bound(_tree(source), seconds=30.0)  # (the suite runs beside other work: CPU time varies)
        assert b.bounded, (path.name, b.why)
        template = env.from_string(source)
        for ctx in _contexts():
            try:
                out = template.render(**ctx)
            except Exception:  # a template that refuses a conversation (roles must alternate...)
                continue
            n = cost.request_size(ctx)
            assert len(out) <= b.output_at(n), (path.name, len(out), n, str(b))
            checked += 1
    assert checked >= 20


# ---------------------------------------------------------------------------------------------
# The audit's own budget: lexing and parsing inside it, a hard stop past it (figures: benchmarks/)
# ---------------------------------------------------------------------------------------------


def test_a_template_of_too_many_tokens_is_not_parsed():
    from gguf_schema.check.templates import MAX_TOKENS, analyse

    source = "{{ [" + "1," * MAX_TOKENS + "1] }}"
    findings = analyse(source, "t")
    assert [f.rule for f in findings] == ["GGUF-T402"]
    assert f"more than {MAX_TOKENS:,} tokens" in findings[0].message


def test_parsing_is_inside_the_budget():
    from gguf_schema.check.templates import analyse

    findings = analyse("{% for m in messages %}{{ m.content }}{% endfor %}", "t", seconds=-1.0)  # spent already
    assert [f.rule for f in findings] == ["GGUF-T402"]
    assert "not parsed within the audit's budget" in findings[0].message


@posix
def test_the_hard_stop_interrupts_work_that_reads_no_clock_and_restores_the_handler():
    import subprocess
    import sys

    # in a fresh single-threaded interpreter (the timer counts the whole process; the suite's workers have threads)
    program = """
import signal
from gguf_schema.check.templates.budget import OutOfBudget, cpu_deadline
before = signal.getsignal(signal.SIGPROF)
try:
    with cpu_deadline(0.05):
        while True:
            pass
except OutOfBudget:
    print("stopped")
print(signal.getsignal(signal.SIGPROF) == before, signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0))
with cpu_deadline(5.0):
    sum(range(1000))
print(signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0))
"""
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["stopped", "True", "True", "True"], out
