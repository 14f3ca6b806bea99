"""The observing environment (check/templates/observe.py): it records what a render does and changes nothing.

Each test renders a real template in an observing copy of a loader's environment and compares what was
recorded with what the template does by construction (counted by hand from the template and its request),
and the output with the same render in the environment it copies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")

from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

from gguf_schema.check.templates.jinja import runtime_environment  # noqa: E402
from gguf_schema.check.templates.observe import (  # noqa: E402
    Call,
    Lookup,
    Observation,
    observe,
    observing_environment,
)

REAL = Path(__file__).parent / "data" / "templates" / "real"
CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi"},
    ],
    "add_generation_prompt": True,
    "bos_token": "<s>",
    "eos_token": "</s>",
}


def environments():
    yield "plain", runtime_environment(sandboxed=False)
    yield "sandbox", runtime_environment(sandboxed=True)
    yield "stock-sandbox", ImmutableSandboxedEnvironment()
    yield "stock-autoescape", jinja2.Environment(autoescape=True)


@pytest.mark.parametrize("label", [label for label, _ in environments()])
def test_output_is_unchanged_on_real_templates(label):
    base = dict(environments())[label]
    env = observing_environment(base)
    paths = sorted(REAL.glob("*.jinja"))[::6]
    assert len(paths) >= 20
    for path in paths:
        source = path.read_text(encoding="utf-8")
        try:
            expected = base.from_string(source).render(**CHAT)
        except Exception as e:
            expected = f"{type(e).__name__}: {str(e)[:300]}"
        seen = observe(env, source, CHAT, keep=1 << 20)
        got = seen.output if seen.error is None else seen.error
        assert got == expected, path.name
        assert seen.output_chars == (len(expected) if seen.error is None else seen.output_chars)


def test_loop_passes_calls_and_work():
    env = observing_environment(runtime_environment(sandboxed=False))
    source = (
        "{% for m in messages %}{% for c in m.content %}{{ c|upper }}{% endfor %}{% endfor %}"
        "{% for i in range(n) if i is odd %}{{ i }}{% endfor %}"
    )
    seen = observe(env, source, {"messages": [{"content": "ab"}, {"content": "cde"}], "n": 7})
    assert seen.output == "ABCDE135"
    # 2 messages + 5 characters + 7 numbers; 5 upper + range + 7 odd tests
    assert seen.iterations == 14
    assert seen.calls == 13
    assert seen.work == 14 + 13 + 1
    assert seen.call_counts[Call("filter", "upper")] == 5
    assert seen.call_counts[Call("test", "odd")] == 7
    assert seen.call_counts[Call("global", "range")] == 1


def test_work_counts_output_in_64_character_steps():
    env = observing_environment(jinja2.Environment())
    seen = observe(env, "{{ 'x' * n }}", {"n": 64 * 10 + 1})
    assert (seen.output_chars, seen.iterations, seen.calls, seen.work) == (641, 0, 0, 11)


@pytest.mark.parametrize("sandboxed", [False, True])
def test_lookups_are_recorded_with_receiver_and_resolution(sandboxed):
    env = observing_environment(runtime_environment(sandboxed=sandboxed))
    source = (
        "{{ messages[0].role }}{{ messages[0]['content'] }}{{ messages[0].missing }}{{ ns.a }}"
        "{{ messages|map(attribute='role')|join }}{{ messages[0]|attr('items') is defined }}"
        "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
    )
    seen = observe(env, source, {"messages": [{"role": "user", "content": "c"}], "ns": {"a": 1}})
    assert seen.error is None, seen.error
    assert seen.output == "userc1userTrue1"
    got = set(seen.lookups)
    assert {
        Lookup(0, "int", "list", "item"),
        Lookup("role", "str", "dict", "item"),
        Lookup("content", "str", "dict", "item"),
        Lookup("missing", "str", "dict", "undefined"),
        Lookup("a", "str", "dict", "item"),
        Lookup("items", "str", "dict", "attribute"),
        Lookup("equalto", "str", "tests", "item"),
    } <= got
    assert seen.text_names() == {"role", "content", "missing", "a", "items", "equalto"}


def test_internal_names_are_recorded_and_the_sandbox_refusal_noted():
    source = "{{ cycler.__init__.__globals__ }}"
    plain = observe(observing_environment(runtime_environment(sandboxed=False)), source, {})
    assert plain.error is None and "os" in plain.output
    assert {x.name for x in plain.lookups} == {"__init__", "__globals__"}
    assert Lookup("__globals__", "str", "function", "attribute") in plain.lookup_counts
    boxed = observe(observing_environment(ImmutableSandboxedEnvironment()), source, {})
    assert boxed.error is not None and boxed.error.startswith("SecurityError")
    assert Lookup("__init__", "str", "type", "unsafe") in boxed.lookup_counts


@pytest.mark.parametrize("sandboxed", [False, True])
def test_format_fields_and_callables(sandboxed):
    env = observing_environment(runtime_environment(sandboxed=sandboxed))
    source = (
        "{% macro m(x) %}[{{ x }}{{ caller() if caller is defined else '' }}]{% endmacro %}"
        "{% call m(1) %}c{% endcall %}{{ m(2) }}{{ '{0.real}:{k[z]}'.format(5, k={'z': 'w'}) }}"
        "{% for x in [1, 2] %}{{ loop.cycle('a', 'b') }}{% endfor %}{{ namespace(a=1).a }}{{ 'q'.upper() }}"
    )
    seen = observe(env, source, {})
    assert seen.error is None, seen.error
    assert seen.output == "[1c][2]5:wab1Q"
    assert seen.fields == {"0.real", "k[z]"}
    assert {Lookup("real", "str", "format-argument", "format"), Lookup("z", "str", "format-argument", "format")} <= set(
        seen.lookups
    )
    calls = set(seen.call_counts)
    assert {
        Call("macro", "m"),
        Call("caller", "caller"),
        Call("method", "str.format"),
        Call("method", "LoopContext.cycle"),
        Call("global", "namespace"),
        Call("method", "str.upper"),
    } <= calls


def test_recursive_loops_count_their_calls():
    env = observing_environment(jinja2.Environment())
    seen = observe(
        env, "{% for x in t recursive %}{{ x if x is number else loop(x) }}{% endfor %}", {"t": [1, [2, [3]]]}
    )
    assert seen.output == "123"
    assert seen.iterations == 2  # the top level; the two inner levels are the two loop() calls
    assert seen.call_counts[Call("loop", "loop()")] == 2


def test_peak_memory_and_output_bound():
    env = observing_environment(jinja2.Environment())
    small = observe(env, "{{ 'x' }}", {}, memory=True)
    big = observe(env, "{% set s = 'x' * 5000000 %}{{ s|length }}", {}, memory=True)
    assert small.peak_memory is not None and big.peak_memory is not None
    assert big.peak_memory > 5_000_000 > small.peak_memory
    bounded = observe(env, "{% for i in range(100) %}{{ 'y' * 100 }}{% endfor %}", {}, max_output=1000)
    assert bounded.error is not None and bounded.error.startswith("OutputBound")
    assert 1000 < bounded.output_chars <= 1100


def test_observation_round_trips_through_json():
    env = observing_environment(runtime_environment(sandboxed=False))
    seen = observe(env, "{{ m[0].role ~ m[1:]|length }}{{ '{x}'.format(x=1) }}", {"m": [{"role": "r"}]})
    again = Observation.from_json(seen.to_json())
    assert again == seen
    assert Lookup(0, "int", "list", "item") in again.lookup_counts
    assert again.output == "r01" and again.fields == {"x"}


def test_calls_of_values_that_are_not_callable_are_told_apart():
    env = observing_environment(jinja2.Environment())
    seen = observe(env, "{{ (0).real() }}", {})
    assert seen.error is not None and seen.error.startswith("TypeError")
    assert Call("uncallable", "int") in seen.call_counts
