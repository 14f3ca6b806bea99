"""The template audit against a red team: each trick a template PROVEN live, then caught with a useful chain.

Every template here runs a harmless command (it creates a marker file), reads an environment
variable the test planted, or exceeds a time or memory bound, when rendered WITHOUT a sandbox, as a
vulnerable runtime renders it: that render happens in a forked child with limits
(:mod:`tests.oracle.live`), so a hang or a huge allocation cannot stop the suite.
Then the audit, which never renders, must report it at error severity, and its chain must go from
where the name (or the cost) comes from to the line of the access.

The classes are those the held-out red team of issue 29 used: attribute names laundered through
numbers, booleans and loop indices (string methods and filters applied to non-strings), through
set and list operations and dict methods that remove or pop items, through the text a
``{% set %}`` block captures, through ``caller()`` and macro keyword arguments, through chains
that only converge after several rounds; identifiers in other Unicode forms (NFKC); names built
from the tokenizer's own data; and renders that cost unbounded time or memory on a one-message
conversation. Each trick here is our own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from gguf_schema.check.templates import audit_template
from tests.oracle.live import LiveRenderer

jinja2 = pytest.importorskip("jinja2")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="live renders fork (POSIX) and the payloads run 'touch'")

ONE_MESSAGE = {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True}
SUFFIX = ".os.popen({CMD}).read()"


@pytest.fixture(scope="module")
def live():
    with LiveRenderer(env={"GGUF_AUDIT_MARK": "seen-by-test"}) as renderer:
        yield renderer


@dataclass(frozen=True)
class Trick:
    """``source`` reaches ``cycler[A][B]`` + SUFFIX (or reads {MARK}); ``rule``: what the audit must say;
    ``chain``: words the chain of that finding must hold (where the name comes from)."""

    source: str
    rule: str
    chain: tuple[str, ...] = ()
    proof: str = "marker"  # "marker", "env", or "bound" (the render exceeds its time or memory bound)
    context: tuple[tuple[str, object], ...] = ()


def fw(text: str) -> str:
    """``text`` in fullwidth letters (NFKC makes them ASCII again)."""
    return "".join(chr(ord(c) + 0xFEE0) for c in text)


def reach(a: str, b: str) -> str:
    return "{{ cycler[" + a + "][" + b + "]" + SUFFIX + " }}"


T = {
    # -- names laundered through numbers, booleans and loop indices --------------------------------------------
    "loop-index-replace": Trick(
        "{% set ns = namespace(a='', b='') %}{% for m in messages %}"
        "{% set ns.a = (loop.index|string)|replace('1', '__init__') %}"
        "{% set ns.b = (loop.index0|string).replace('0', '__globals__') %}{% endfor %}" + reach("ns.a", "ns.b"),
        "GGUF-T102",
        ("loop", "|replace"),
    ),
    "boolean-text": Trick(
        "{% set t = (messages is defined)|string %}"
        + reach("t|replace('True', '__init__')", "(t ~ '')|replace('True', '__globals__')"),
        "GGUF-T101",
        ("|replace",),
    ),
    "number-indent": Trick(
        "{% for m in messages %}"
        + reach("(loop.length|string|indent('__init__', true))[:-1]", "(loop.index ~ '__globals__')[1:]")
        + "{% endfor %}",
        "GGUF-T102",
        ("|indent",),
    ),
    "number-truncate": Trick(
        "{% for m in messages %}{% set n = (loop.index * 1000) ~ '__init__' %}"
        + reach("n|replace(loop.index * 1000, '')", "'__globals__xyz'|truncate(11, true, '', 0)")
        + "{% endfor %}",
        "GGUF-T101",
        ("|truncate gives '__globals__'",),
    ),
    "int-to-bytes": Trick(
        reach(
            "(0x5f5f696e69745f5f).to_bytes(8, 'big').decode()",
            "(0x5f5f676c6f62616c735f5f).to_bytes(11, 'big').decode()",
        ),
        "GGUF-T101",
        (".decode() gives '__init__'",),
    ),
    "numbers-from-the-request-edited": Trick(
        "{% set k = messages|length %}"
        + reach("k|string|center(5)|replace(' ', '_')|replace(k|string, 'init')", "'__globals__'"),
        "GGUF-T102",
        ("|replace",),
    ),
    # -- set and list operations, dict methods that remove or pop ----------------------------------------------
    "list-remove": Trick(
        "{% set l = ['x', '__init__', 'y', '__globals__'] %}{% do l.remove('x') %}{% do l.remove('y') %}"
        + reach("l[0]", "l[1]"),
        "GGUF-T101",
        ("set l",),
    ),
    "list-pop": Trick(
        "{% set l = ['__init__', '__globals__', 'z'] %}{% set _ = l.pop() %}" + reach("l.pop(0)", "l[-1]"),
        "GGUF-T101",
    ),
    "dict-pop-and-popitem": Trick(
        "{% set d = {'a': '__init__', 'b': '__globals__'} %}" + reach("d.pop('a')", "(d.popitem())[1]"),
        "GGUF-T101",
    ),
    "dict-keys-minus": Trick(
        reach("({'__init__': 1, 'q': 2}.keys() - ['q'])|first", "({'__globals__': 0}.keys() - [])|list|last"),
        "GGUF-T101",
    ),
    "insert-then-index": Trick(
        "{% set l = ['a', 'b'] %}{% do l.insert(0, '__globals__') %}{% do l.insert(0, '__init__') %}"
        + reach("l[0]", "l[1]"),
        "GGUF-T101",
    ),
    "sorted-reversed": Trick(
        "{% set l = ['zz', '__init__'] %}{% do l.sort() %}{% set g = ['__globals__', 'a'] %}{% do g.reverse() %}"
        + reach("l[0]", "g[-1]"),
        "GGUF-T101",
    ),
    "setdefault-nested": Trick(
        "{% set d = {'x': {'y': 'safe'}} %}{% do d.x.update({'y': '__init__'}) %}{% do d.setdefault('g', '__globals__') %}"
        + reach("d.x.y", "d.g"),
        "GGUF-T101",
    ),
    # -- captured text, caller(), macro keyword arguments ----------------------------------------------------
    "set-block-capture": Trick(
        "{% set a %}__init__{% endset %}{% set b | trim %} __globals__ {% endset %}" + reach("a", "b"),
        "GGUF-T102",
        ("the text a {% set %} block captures",),
    ),
    "caller-arguments-kwargs": Trick(
        "{% macro m() %}{{ caller(a='__init__', b='__globals__') }}{% endmacro %}"
        "{% call(a, b) m() %}" + reach("a", "b") + "{% endcall %}",
        "GGUF-T101",
        ("passed to caller()",),
    ),
    "macro-kwargs-catchall": Trick(
        "{% macro m() %}"
        + reach("kwargs.first", "varargs[0]")
        + "{% endmacro %}{{ m('__globals__', first='__init__') }}",
        "GGUF-T101",
    ),
    "macro-kwargs-spread": Trick(
        "{% macro m(a, b) %}" + reach("a", "b") + "{% endmacro %}{{ m(**{'a': '__init__', 'b': '__globals__'}) }}",
        "GGUF-T101",
    ),
    # -- chains that converge only after several rounds --------------------------------------------------------
    "four-round-chain": Trick(
        "{% set ns = namespace(a='x', b='x', c='x', d='x') %}{% for i in range(4) %}"
        "{% set ns.d = ns.c %}{% set ns.c = ns.b %}{% set ns.b = ns.a %}{% set ns.a = '__init__' %}{% endfor %}"
        + reach("ns.d", "'__glo' ~ 'bals__'"),
        "GGUF-T101",
        ("set ns.d",),
    ),
    "macros-in-reverse-order": Trick(
        "{% macro m3(x) %}" + reach("x", "'__globals__'") + "{% endmacro %}"
        "{% macro m2(x) %}{{ m3(x) }}{% endmacro %}{% macro m1(x) %}{{ m2(x) }}{% endmacro %}{{ m1('__init__') }}",
        "GGUF-T101",
        ("argument 1 of m1", "parameter x of macro m3"),
    ),
    "growing-suffix": Trick(
        "{% set ns = namespace(s='') %}{% for i in range(2) %}{% set ns.s = ns.s ~ '_' %}{% endfor %}"
        + reach("ns.s ~ 'init' ~ ns.s", "ns.s ~ 'globals' ~ ns.s"),
        "GGUF-T102",
    ),
    # -- identifiers in other Unicode forms (Python normalises them: NFKC) -------------------------------------
    "nfkc-variable": Trick(
        "{% set " + fw("n") + " = '__init__' %}{% set " + fw("g") + " = '__globals__' %}" + reach("n", "g"),
        "GGUF-T101",
        ("set " + fw("n"),),
    ),
    "nfkc-global": Trick(
        "{{ (" + fw("cycler") + "|attr(messages[0].content)|attr(messages[1].content)).os.popen(messages[2].content)"
        ".read() }}"
        "{{ cycler }}",  # both names are one Python variable: the later lookup, of the global, wins
        "GGUF-T106",
        ("data of the request",),
        context=(("messages", ({"content": "__init__"}, {"content": "__globals__"}, {"content": "{CMDTEXT}"})),),
    ),
    "nfkc-keyword": Trick(
        reach("dict(__" + fw("init") + "__=1)|first", "dict(__" + fw("globals") + "__=1)|list|last"), "GGUF-T101"
    ),
    # -- names built from the tokenizer's own data (the file author chose the vocabulary) ----------------------
    "special-token-text": Trick(
        reach("bos_token", "eos_token"),
        "GGUF-T102",
        ("a token's text",),
        context=(("bos_token", "__init__"), ("eos_token", "__globals__")),
    ),
    "token-text-sliced": Trick(
        reach("(bos_token ~ eos_token)[3:11]", "additional_special_tokens[0]"),
        "GGUF-T102",
        ("a token's text",),
        context=(("bos_token", "<s>__init__"), ("eos_token", "</s>"), ("additional_special_tokens", ("__globals__",))),
    ),
    # -- reads of the environment without running anything -------------------------------------------------------
    "env-through-laundered-name": Trick(
        "{% for m in messages %}{% set k = (loop.index|string)|replace('1', '__init__') %}"
        "{{ (cycler|attr(k)).__globals__.os.environ['GGUF_AUDIT_MARK'] }}{% endfor %}",
        "GGUF-T102",
        proof="env",
    ),
}

#: renders that cost unbounded time or memory on a one-message conversation
DOS = {
    "huge-range": Trick("{% for i in range(10 ** 10) %}.{% endfor %}", "GGUF-T504", ("range()",), proof="bound"),
    "nested-ranges": Trick(
        "{% for m in messages %}{% for i in range(60000) %}{% for j in range(60000) %}{% endfor %}{% endfor %}"
        "{% endfor %}",
        "GGUF-T504",
        proof="bound",
    ),
    "doubling-string": Trick(
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "GGUF-T504",
        proof="bound",
    ),
    "doubling-over-messages": Trick(
        "{% set ns = namespace(s='ab' * 1000000) %}{% for m in messages * 40 %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
        "{{ ns.s|length }}",
        "GGUF-T504",
        ("grows geometrically",),
        proof="bound",
    ),
    "macro-fan-out": Trick(
        "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(messages) }}",
        "GGUF-T504",
        ("calls itself",),
        proof="bound",
    ),
    "caller-fan-out": Trick(
        "{% macro twice() %}{{ caller() }}{{ caller() }}{% endmacro %}"
        "{% macro f() %}{% call twice() %}{{ f() }}{% endcall %}{% endmacro %}{{ f() }}",
        "GGUF-T504",
        proof="bound",
    ),
    "big-literal-list": Trick(
        "{% set l = [" + ", ".join(["0"] * 3000) + "] %}"
        "{% for a in l %}{% for b in l %}{% for c in l %}{% endfor %}{% endfor %}{% endfor %}",
        "GGUF-T504",
        ("the loop",),
        proof="bound",
    ),
    "repetition": Trick("{{ messages[0].content * 10 ** 10 }}", "GGUF-T504", ("repetition",), proof="bound"),
    "width": Trick("{{ '%1000000000s' % messages[0].content }}{{ 'x'|center(10 ** 10) }}", "GGUF-T504", proof="bound"),
    "replace-growth": Trick(
        "{% set ns = namespace(s='aa') %}{% for i in range(40) %}{% set ns.s = ns.s|replace('a', 'aa') %}{% endfor %}"
        "{{ ns.s|length }}",
        "GGUF-T504",
        proof="bound",
    ),
    "power": Trick("{{ (7 ** (10 ** 8)) % 10 }}", "GGUF-T504", ("power",), proof="bound"),
    # found by the differential fuzzer: a macro defined inside another of the same name is another macro
    "shadowing-macro": Trick(
        "{% macro w() %}{% macro w() %}{% for i in range(60000) %}{% for j in range(60000) %}{% endfor %}"
        "{% endfor %}{% endmacro %}{{ w() }}{% endmacro %}{{ w() }}",
        "GGUF-T504",
        proof="bound",
    ),
    "aliased-macro": Trick(
        "{% macro f() %}{% for i in range(10 ** 10) %}{% endfor %}{% endmacro %}{% set g = [f] %}{{ g[0]() }}",
        "GGUF-T504",
        proof="bound",
    ),
    "block-rendered-again": Trick(
        "{% block b %}{% for i in range(60000) %}.{% endfor %}{% endblock %}"
        "{% for i in range(60000) %}{{ self.b() }}{% endfor %}",
        "GGUF-T504",
        proof="bound",
    ),
    "recursive-loop-doubling": Trick(
        "{% for x in [1] recursive %}{{ loop([x, x]) }}{% endfor %}", "GGUF-T504", ("recursive loop",), proof="bound"
    ),
}


def materialize(text: str, marker: Path) -> str:
    return text.replace("{CMD}", repr(f"touch '{marker}'"))


def context_of(trick: Trick, marker: Path) -> dict[str, object]:
    def fill(v: object) -> object:
        if isinstance(v, str):
            return v.replace("{CMDTEXT}", f"touch '{marker}'")
        if isinstance(v, tuple):
            return [fill(x) for x in v]
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v

    return {**ONE_MESSAGE, **{k: fill(v) for k, v in trick.context}}


def check(trick: Trick, live: LiveRenderer, tmp_path: Path) -> None:
    marker = tmp_path / "payload-ran"
    source = materialize(trick.source, marker)
    # 1. live: an unsandboxed runtime runs it (or runs out of time or memory on one message)
    bound = trick.proof == "bound"  # far past half a second on one message: real templates take a millisecond
    result = live.render(
        source, context_of(trick, marker), timeout=0.5 if bound else 5.0, memory=(256 if bound else 768) << 20
    )
    if trick.proof == "marker":
        assert result.kind == "ok" and marker.exists(), result
    elif trick.proof == "env":
        assert result.kind == "ok" and "seen-by-test" in result.output, result
    else:
        assert result.exceeded, result
    # 2. caught, at error severity, with a chain from the source of the name (or of the cost) to the access
    findings = audit_template(source)
    found = [f for f in findings if f.rule == trick.rule]
    assert found and found[0].severity == "error", [(f.rule, f.message) for f in findings]
    text = " / ".join(" / ".join((f.message, *f.chain)) for f in found)
    for words in trick.chain:
        assert words in text, text
    assert all(f.line is not None for f in found)


@pytest.mark.parametrize("name", list(T))
def test_trick_is_live_and_caught(name, live, tmp_path):
    check(T[name], live, tmp_path)


@pytest.mark.parametrize("name", list(DOS))
def test_costly_render_is_live_and_caught(name, live, tmp_path):
    check(DOS[name], live, tmp_path)


def test_chain_names_each_step_with_its_line():
    source = (
        "{% set base = '__cla' %}\n{% macro pick(part) %}{{ messages[part ~ 'ss__'] }}{% endmacro %}\n{{ pick(base) }}"
    )
    # the name is built in a name position, which the syntactic floor reports too (GGUF-T102)
    assert [x.rule for x in audit_template(source)] == ["GGUF-T101", "GGUF-T102"]
    (f,) = [x for x in audit_template(source) if x.rule == "GGUF-T101"]
    assert (f.rule, f.line) == ("GGUF-T101", 2)
    assert f.chain == (
        "line 1: set base",
        "line 3: argument 1 of pick(…)",
        "line 2: parameter part of macro pick",
        "line 2: '~' concatenation gives '__class__'",
        "line 2: the item name in messages[…]",
    )


def test_names_the_request_picks_stay_allowed_where_they_are_items():
    # real templates look request names up on request data, and loop over the keys of request dicts
    source = (
        "{% for tool in tools %}{% set props = tool.function.parameters.properties %}"
        "{% for name, spec in props.items() %}{{ name }}: {{ props[name].type }} {{ spec.get('_internal_note') }}"
        "{% endfor %}{% for name in tool.function.parameters.required %}{{ props[name] }}{% endfor %}{% endfor %}"
        "{{ {'user': 'U', 'assistant': 'A'}[messages[0].role] }}"
    )
    assert audit_template(source) == []


def test_an_unknown_filter_or_method_makes_the_audit_cautious_not_blind():
    # nothing is known of what a runtime's own filter returns: as a name it is not proven safe
    for source in (
        "{{ cycler[messages[0].content|runtime_specific_filter] }}",
        "{{ cycler[messages[0].content.maketrans('a', 'b')] }}",
        "{{ x[y|some_filter] }}",
    ):
        assert "GGUF-T102" in {f.rule for f in audit_template(source)}, source
