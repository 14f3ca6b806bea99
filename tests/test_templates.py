"""Chat-template audit (gguf_schema.check.templates).

Benign templates (our fixtures, written to exercise what real chat templates do; the corpus of real
chat templates in tests/data/templates/real, listed with origins and checksums in its SOURCES file;
the real template of a GGUF file in tests/data/vocab) give no finding. Every class of bypass is written here
as a payload that runs a harmless command (it creates a marker file in tmp_path) or reads a marker
the test planted: each payload is first PROVED live by an unsandboxed render (in a forked child with
limits: tests.oracle.live), then the audit must report it at error severity. The
red team of the newer classes (laundering, captures, NFKC, tokens, render cost) is in
tests/test_template_tricks.py.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gguf_schema
from gguf_schema.check.templates import RULES, TemplateFinding, audit_template, hidden_characters, sandbox
from gguf_schema.check.templates.jinja import generation_extension
from tests.oracle.live import LiveRenderer

from .conftest import VOCAB_DIR

jinja2 = pytest.importorskip("jinja2")

BENIGN_DIR = Path(__file__).parent / "data" / "templates" / "benign"
BENIGN = sorted(BENIGN_DIR.glob("*.jinja"))
REAL_DIR = Path(__file__).parent / "data" / "templates" / "real"
SYSPATH_MARKER = "/nonexistent/gguf-audit-syspath-marker"


def read_template(path: Path) -> str:
    return path.read_bytes().decode("utf-8")  # bytes: keep CRLF line ends as they are


@pytest.fixture(scope="module")
def live():
    """What an unsandboxed runtime does (SGLang before CVE-2026-5760, llama-cpp-python before CVE-2024-34359),
    in a forked child per render, with the marker variable and a marker on sys.path."""
    if os.name != "posix":
        pytest.skip("live renders fork (POSIX)")
    with LiveRenderer(env={"GGUF_AUDIT_MARK": "seen-by-test", "PYTHONPATH": SYSPATH_MARKER}) as renderer:
        yield renderer


def sandbox_environment() -> jinja2.Environment:
    """What transformers renders with: the immutable sandbox, loop controls, tojson, the helpers."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", generation_extension()]
    )
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2025, 1, 1).strftime(fmt)
    return env


def rules_of(findings: list[TemplateFinding], severity: str | None = None) -> set[str]:
    return {f.rule for f in findings if severity is None or f.severity == severity}


# ---------------------------------------------------------------------------------------------
# The rule table
# ---------------------------------------------------------------------------------------------


def test_rule_table_has_stable_ids_and_known_severities():
    assert list(RULES) == sorted(RULES)
    for rule_id, rule in RULES.items():
        assert re.fullmatch(r"GGUF-T\d{3}", rule_id) and rule.id == rule_id
        assert rule.severity in ("error", "warning", "info")
        assert rule.title and len(rule.description) > 40
    assert RULES["GGUF-T101"].severity == "error"
    assert RULES["GGUF-T301"].severity == "warning"
    assert RULES["GGUF-T504"].severity == RULES["GGUF-T502"].severity == "error"  # a render that hangs a server
    with pytest.raises(TypeError):
        RULES["GGUF-T999"] = RULES["GGUF-T101"]  # read-only


# ---------------------------------------------------------------------------------------------
# Benign templates: no warnings
# ---------------------------------------------------------------------------------------------


def test_benign_corpus_covers_the_constructs_of_real_templates():
    assert len(BENIGN) >= 12
    corpus = {p.name: read_template(p) for p in BENIGN}
    everything = "\n".join(corpus.values())
    for construct in (
        "{%- break -%}",
        "{%- continue -%}",
        "{%- macro ",
        "namespace(",
        "raise_exception(",
        "tool_calls",
        "reasoning_content",
        "</think>",
        "{% generation %}",
        "strftime_now(",
        "tojson",
        "{%- call ",
        "caller()",
        "{% filter ",
        "{%- set header -%}",
        "| groupby(",
        "loop.cycle(",
        "cycler(",
        "joiner(",
        "selectattr(",
        "map(attribute=",
        "dictsort",
        ".items()",
        "['format'",
        "enable_thinking",
    ):
        assert construct in everything, construct
    assert any(
        "\r\n" in text for text in corpus.values()
    )  # CRLF line ends survive (tests/data/templates/.gitattributes)
    assert any(re.search(r"[\u4e00-\u9fff]", text) for text in corpus.values())  # CJK text
    assert any("\u200c" in text and "\u200d" in text and "\ufe0f" in text for text in corpus.values())


@pytest.mark.parametrize("path", BENIGN, ids=[p.stem for p in BENIGN])
def test_benign_template_gives_no_findings(path):
    assert audit_template(read_template(path)) == []


@pytest.mark.parametrize("path", BENIGN, ids=[p.stem for p in BENIGN])
def test_benign_fixture_is_a_working_template(path):
    """The fixtures are real templates: the transformers-style sandbox renders a chat with them."""
    context = {**sandbox.COMMON_CONTEXT, **dict(sandbox.CONVERSATIONS)["chat"]}
    out = sandbox_environment().from_string(read_template(path)).render(**context)
    assert "Name three primes." in out


def test_benign_templates_render_clean_in_the_sandboxed_check():
    for name in ("thinking_tool_calls.jinja", "jinja_builtins_showcase.jinja", "assistant_mask_generation.jinja"):
        assert audit_template(read_template(BENIGN_DIR / name), render=True) == []


def test_names_from_the_conversation_are_not_flagged():
    source = (
        "{% for tool in tools %}{% for key, value in tool.function.items() %}{{ tool.function[key] }}{% endfor %}"
        "{% set props = tool.function.parameters.properties %}"
        "{% for name in props %}{{ props[name]['type'] }}{{ props[name].get('description', '') }}{% endfor %}"
        "{% endfor %}{% set field = 'content' if x else 'reasoning_content' %}{{ messages[0][field] }}"
        "{{ mapping[messages[0].role | lower] }}{{ messages[loop_index + 1] }}"
    )
    assert audit_template(source) == []


def test_a_request_name_on_what_a_request_name_picked_is_not_proven():
    # a JSON-pointer walk: the first name is an item of request data; if the request names no key there, Jinja
    # falls back to an attribute (a method, a type), and the next request name is looked up on that
    walk = (
        "{% set ns = namespace(node=schema) %}{% for part in ref.split('/') %}{% set ns.node = ns.node[part] %}"
        "{% endfor %}{{ ns.node.type }}"
    )
    assert [(f.rule, f.chain[-3:]) for f in audit_template(walk)] == [
        (
            "GGUF-T106",
            ("line 1: a loop variable over ref.split(…)", "line 1: set part", "line 1: the item name in ns.node[…]"),
        )
    ]


def test_real_template_of_a_gguf_file_is_clean():
    path = VOCAB_DIR / "ggml-vocab-phi-3.gguf"
    source = gguf_schema.open(path).metadata["tokenizer.chat_template"]
    assert "message['role']" in source
    assert audit_template(source) == []


def _sources() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in (REAL_DIR / "SOURCES").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, digest, origin = line.split("\t")
            rows[name] = (digest, origin)
    return rows


def test_real_corpus_is_what_its_sources_file_says():
    rows = _sources()
    files = sorted(p.name for p in REAL_DIR.glob("*.jinja"))
    assert files == sorted(rows) and len(files) >= 150
    for name in files:
        assert hashlib.sha256((REAL_DIR / name).read_bytes()).hexdigest() == rows[name][0], name
    origins = " ".join(origin for _, origin in rows.values())
    for source in (
        "ggml-org/llama.cpp models/templates",
        "tests/test-chat-template.cpp",
        "google/minja",
        "huggingface/huggingface.js",
        "chujiezheng/chat_templates",
        "llama_cpp_python",
        ".gguf",
    ):
        assert source in origins, source


def test_real_chat_templates_give_no_findings():
    """Every real template collected (llama.cpp's and minja's, GGUF files', packages'): no finding at all."""
    flagged = {}
    for path in sorted(REAL_DIR.glob("*.jinja")):
        findings = audit_template(read_template(path))
        if findings:
            flagged[path.name] = [(f.rule, f.line, f.message) for f in findings]
    assert flagged == {}


def test_a_dict_key_lookup_on_request_data_is_not_an_attribute_access():
    # Kimi-K3's real template reads message.get('_xtml_json_block'): an item of a dict, never an attribute
    source = "{{ msg.get('_private') }}{{ msg['_x'] }}{{ msg._y }}{{ tools[0].get('__meta__', {}).get('_z') }}"
    assert audit_template(source) == []
    assert rules_of(audit_template("{{ msg['__class__'] }}")) == {"GGUF-T101"}  # a dunder is an attribute anywhere
    assert rules_of(audit_template("{{ loop._after }}{{ cycler._x }}")) == {"GGUF-T101"}  # objects' private names


# ---------------------------------------------------------------------------------------------
# The malicious corpus: each payload proved live, then caught
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Payload:
    """``source`` uses {CMD} (a shell command creating the marker file) and {MARK} (an env var the test sets)."""

    source: str
    rule: str
    proof: str = "marker"  # "marker": the file appears; "env": the output shows the env var; "text:<x>": output has x
    context: tuple[tuple[str, object], ...] = ()


P = {
    # attribute walks from each Jinja global and object
    "cycler": Payload("{{ cycler.__init__.__globals__.os.popen({CMD}).read() }}", "GGUF-T101"),
    "joiner": Payload("{{ joiner.__init__.__globals__.os.popen({CMD}).read() }}", "GGUF-T101"),
    "namespace": Payload("{{ namespace.__init__.__globals__.os.popen({CMD}).read() }}", "GGUF-T101"),
    "lipsum": Payload("{{ lipsum.__globals__['os'].popen({CMD}).read() }}", "GGUF-T101"),
    "self": Payload("{{ self.__init__.__globals__.__builtins__.__import__('os').popen({CMD}).read() }}", "GGUF-T101"),
    "self-private-context": Payload(
        "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.popen({CMD}).read() }}", "GGUF-T101"
    ),
    "range-subclasses": Payload(
        "{% for c in range.__mro__[-1].__subclasses__() if c.__name__ == 'Popen' %}{{ c(['touch', {MARKFILE}]).wait() }}"
        "{% endfor %}",
        "GGUF-T101",
    ),
    "dict-mro": Payload(
        "{% for c in dict.mro()[-1].__subclasses__() if c.__name__ == 'Popen' %}{{ c(['touch', {MARKFILE}]).wait() }}"
        "{% endfor %}",
        "GGUF-T101",
    ),
    "loop": Payload(
        "{% for x in [1] %}{{ loop.__init__.__globals__['__builtins__']['__import__']('os')"
        ".popen({CMD}).read() }}{% endfor %}",
        "GGUF-T101",
    ),
    "caller": Payload(
        "{% macro m() %}{{ caller._func.__globals__['__builtins__']['__import__']('os')"
        ".popen({CMD}).read() }}{% endmacro %}{% call m() %}x{% endcall %}",
        "GGUF-T101",
    ),
    "varargs": Payload(
        "{% macro m() %}{% for c in varargs.__class__.__mro__[1].__subclasses__() "
        "if c.__name__ == 'Popen' %}{{ c(['touch', {MARKFILE}]).wait() }}{% endfor %}{% endmacro %}"
        "{{ m(1) }}",
        "GGUF-T101",
    ),
    "kwargs": Payload(
        "{% macro m() %}{% for c in kwargs.__class__.__base__.__subclasses__() "
        "if c.__name__ == 'Popen' %}{{ c(['touch', {MARKFILE}]).wait() }}{% endfor %}{% endmacro %}"
        "{{ m(a=1) }}",
        "GGUF-T101",
    ),
    "generator-frame": Payload(
        "{{ ([1] | map('string')).gi_frame.f_globals['__builtins__']['__import__']('os').popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "get-method-keys": Payload(
        "{{ ([1] | map('string')).gi_frame.f_globals.get('__builtins__').get('__import__')('os')"
        ".popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    # names given as items, escapes, and built at render time from constants
    "item-access": Payload("{{ cycler['__init__']['__globals__']['os'].popen({CMD}).read() }}", "GGUF-T101"),
    "hex-escapes": Payload(
        "{{ cycler['\\x5f\\x5finit\\x5f\\x5f']['\\x5f\\x5fglobals\\x5f\\x5f'].os.popen({CMD}).read() }}", "GGUF-T101"
    ),
    "unicode-octal-named-escapes": Payload(
        "{{ cycler['\\u005f\\u005finit\\U0000005f\\U0000005f']"
        "['\\137\\137globals\\N{LOW LINE}\\N{LOW LINE}'].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "tilde-concat": Payload("{{ cycler['__in' ~ 'it__']['__glo' ~ 'bals__'].os.popen({CMD}).read() }}", "GGUF-T101"),
    "plus-concat": Payload("{{ cycler['__in' + 'it__']['__glo' + 'bals__'].os.popen({CMD}).read() }}", "GGUF-T101"),
    "repeat": Payload(
        "{{ cycler['_' * 2 ~ 'init' ~ '_' * 2]['_' * 2 ~ 'globals' ~ '_' * 2].os.popen({CMD}).read() }}", "GGUF-T101"
    ),
    "join-filter": Payload(
        "{{ cycler[['__', 'init', '__'] | join][['__glo', 'bals__'] | join('')].os.popen({CMD}).read() }}", "GGUF-T101"
    ),
    "join-method": Payload(
        "{{ cycler['_'.join(['', '', 'init', '', ''])]['__'.join(['', 'globals', ''])].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "format-filter": Payload(
        "{{ cycler['%sinit%s' | format('__', '__')]['%sglobals%s' | format('__', '__')].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "percent-operator": Payload(
        "{{ cycler['%sinit%s' % ('__', '__')]['%sglobals%s' % ('__', '__')].os.popen({CMD}).read() }}", "GGUF-T101"
    ),
    "char-codes": Payload(
        "{{ cycler['%c%cinit%c%c' | format(95, 95, 95, 95)]['%c%cglobals%c%c' % (95, 95, 95, 95)].os"
        ".popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "str-format-method": Payload(
        "{{ cycler['{0}{0}init{0}{0}'.format('_')]['{0}{0}globals{0}{0}'.format('_')].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "replace": Payload(
        "{{ cycler['xxinitxx' | replace('x', '_')]['--globals--'.replace('-', '_')].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "reverse": Payload("{{ cycler['__tini__' | reverse]['__slabolg__'[::-1]].os.popen({CMD}).read() }}", "GGUF-T101"),
    "slicing": Payload("{{ cycler['a__init__b'[1:-1]]['xx__globals__'[2:]].os.popen({CMD}).read() }}", "GGUF-T101"),
    "case-change": Payload(
        "{{ cycler['__INIT__' | lower]['__GLOBALS__'.lower()].os.popen({CMD}).read() }}", "GGUF-T101"
    ),
    "conditional-pieces": Payload(
        "{{ cycler[('__in' if x else 'zz') ~ 'it__'][('__glo' if x else 'y') ~ 'bals__'].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    # names carried by variables, namespaces, macros, keywords, loops and mutation
    "set-variable": Payload(
        "{% set n = '__in' ~ 'it__' %}{% set g = ['__glo', 'bals__'] | join %}"
        "{{ cycler[n][g].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "namespace-attribute": Payload(
        "{% set ns = namespace(a='x') %}{% set ns.a = '__init__' %}"
        "{% set ns2 = namespace(b='__glo' ~ 'bals__') %}"
        "{{ cycler[ns.a][ns2.b].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "macro-arguments": Payload(
        "{% macro run(a, b) %}{{ cycler[a][b].os.popen({CMD}).read() }}{% endmacro %}"
        "{{ run('__in' ~ 'it__', b='__globals__') }}",
        "GGUF-T101",
    ),
    "macro-defaults": Payload(
        "{% macro run(a='__init__', b='__glo' ~ 'bals__') %}{{ cycler[a][b].os"
        ".popen({CMD}).read() }}{% endmacro %}{{ run() }}",
        "GGUF-T101",
    ),
    "dict-keyword-names": Payload(
        "{{ cycler[dict(__init__=1) | first][(dict(__globals__=1).keys() | list)[0]].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "kwargs-names": Payload(
        "{% macro m() %}{{ cycler[kwargs | first][varargs[0]].os.popen({CMD}).read() }}"
        "{% endmacro %}{{ m('__globals__', __init__=1) }}",
        "GGUF-T101",
    ),
    "for-loop-variable": Payload(
        "{% for a, b in [('__init__', '__globals__')] %}{{ cycler[a][b].os.popen({CMD}).read() }}{% endfor %}",
        "GGUF-T101",
    ),
    "loop-cycle": Payload(
        "{% for x in [1] %}{{ cycler[loop.cycle('__init__')][loop.cycle('__globals__', 'b')].os"
        ".popen({CMD}).read() }}{% endfor %}",
        "GGUF-T101",
    ),
    "with-block": Payload(
        "{% with a='__init__', b='__globals__' %}{{ cycler[a][b].os.popen({CMD}).read() }}{% endwith %}", "GGUF-T101"
    ),
    "call-block-arguments": Payload(
        "{% macro m() %}{{ caller('__init__', '__globals__') }}{% endmacro %}"
        "{% call(a, b) m() %}{{ cycler[a][b].os.popen({CMD}).read() }}{% endcall %}",
        "GGUF-T101",
    ),
    "list-append": Payload(
        "{% set l = [] %}{% set _ = l.append('__init__') %}{% do l.append('__globals__') %}"
        "{{ cycler[l[0]][l[1]].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "aliased-mutation": Payload(
        "{% set l = [] %}{% set m = l %}{% set d = {} %}{% set _ = m.extend(['__init__']) %}"
        "{% do d.update({'k': '__globals__'}) %}{{ cycler[l[0]][d.k].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "loop-previtem": Payload(
        "{% for k in ['__init__', '__globals__', 'z'] %}{% if loop.last %}"
        "{{ cycler[loop.previtem[:0] ~ '__init__'][loop.previtem].os.popen({CMD}).read() }}"
        "{% endif %}{% endfor %}",
        "GGUF-T101",
    ),
    "dictsort-pairs": Payload(
        "{% for k, v in {'__init__': '__globals__'} | dictsort %}{{ cycler[k][v].os.popen({CMD}).read() }}{% endfor %}",
        "GGUF-T101",
    ),
    "batch-nesting": Payload(
        "{% set b = ['__init__', '__globals__'] | batch(1) | list %}"
        "{{ cycler[b[0] | first][b[1][0]].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "setdefault-then-attribute": Payload(
        "{% set d = {} %}{% do d.setdefault('a', '__init__') %}"
        "{% do d.setdefault('b', '__globals__') %}{{ cycler[d.a][d.b].os"
        ".popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "strip-of-mixed-value": Payload(
        "{{ cycler[(x and ' __init__ ').strip()][(x and 'x__globals__').lstrip('x')].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "list-pop": Payload(
        "{% set l = ['__globals__', '__init__'] %}{{ cycler[l.pop()][l.pop()].os.popen({CMD}).read() }}", "GGUF-T101"
    ),
    "block-output-via-self": Payload(
        "{% block a %}__init__{% endblock %}{% block b %}__globals__{% endblock %}"
        "{{ cycler[self.a()][self.b()].os.popen({CMD}).read() }}",
        "GGUF-T102",
    ),
    # filters that look names up
    "attr-filter": Payload(
        "{{ (cycler | attr('__init__') | attr('__globals__'))['os'].popen({CMD}).read() }}", "GGUF-T101"
    ),
    "attr-filter-computed": Payload(
        "{% set a = '__in' ~ 'it__' %}{{ (cycler | attr(a) | attr('__glo' ~ 'bals__')).os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "map-attribute": Payload(
        "{{ ([cycler] | map(attribute='__init__.__globals__.os') | first).popen({CMD}).read() }}", "GGUF-T101"
    ),
    "map-attr-filter": Payload(
        "{{ (([[cycler] | map('attr', '__init__') | first] | map('attr', '__globals__') | first)"
        "['os']).popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "map-spread-args": Payload(
        "{% set how = ['attr', '__init__'] %}{{ (([cycler] | map(*how) | first).__globals__.os).popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "groupby": Payload(
        "{% for g in [cycler] | groupby('__init__.__globals__.os') %}{{ g.grouper.popen({CMD}).read() }}{% endfor %}",
        "GGUF-T101",
    ),
    "sum-attribute": Payload(
        "{{ [cycler] | sum(attribute='__init__.__globals__.os.sys.path', start=[]) }}", "GGUF-T101", proof="syspath"
    ),
    "selectattr": Payload(
        "{{ [cycler] | selectattr('__init__.__globals__.os.environ.{MARK}', 'equalto', 'seen-by-test')"
        " | list | length }}",
        "GGUF-T101",
        proof="text:1",
    ),
    "rejectattr": Payload(
        "{{ [cycler] | rejectattr('__init__.__globals__.os.environ.{MARK}', 'equalto', 'seen-by-test')"
        " | list | length }}",
        "GGUF-T101",
        proof="text:0",
    ),
    "join-attribute": Payload(
        "{{ [cycler] | join(attribute='__init__.__globals__.os.environ.{MARK}') }}", "GGUF-T101", proof="env"
    ),
    "sort-attribute": Payload(
        "{{ ([joiner, cycler] | sort(attribute='__init__.__qualname__') | first).__name__ }}",
        "GGUF-T101",
        proof="text:Cycler",
    ),
    "min-attribute": Payload(
        "{{ [joiner, cycler] | min(attribute='__init__.__qualname__') }}", "GGUF-T101", proof="text:Cycler"
    ),
    "unique-attribute": Payload(
        "{{ [1, 2, 'a'] | unique(attribute='__class__') | list | length }}", "GGUF-T101", proof="text:2"
    ),
    "filter-block": Payload(
        "{% filter attr('__class__') | string %}text{% endfilter %}", "GGUF-T101", proof="text:<class 'str'>"
    ),
    # str.format walks attributes
    "format-fields": Payload(
        "{{ '{0.__init__.__globals__[os].environ[{MARK}]}'.format(cycler) }}", "GGUF-T103", proof="env"
    ),
    "format-via-attr-filter": Payload(
        "{{ ('{0.__init__.__globals__[os].environ[{MARK}]}' | attr('format'))(cycler) }}", "GGUF-T103", proof="env"
    ),
    "format-map": Payload(
        "{{ '{x.__init__.__globals__[os].environ[{MARK}]}'.format_map({'x': cycler}) }}", "GGUF-T103", proof="env"
    ),
    "format-string-built": Payload(
        "{{ ('{0.__in' ~ 'it__.__glo' ~ 'bals__[os].environ[{MARK}]}').format(cycler) }}", "GGUF-T103", proof="env"
    ),
    # names assembled from text the audit cannot fold
    "stringified-object": Payload(
        "{% set u = (lipsum | string)[18] %}"
        "{{ cycler[u * 2 ~ 'init' ~ u * 2][u * 2 ~ 'globals' ~ u * 2].os.popen({CMD}).read() }}",
        "GGUF-T102",
    ),
    "special-token-text": Payload(
        "{{ cycler[bos_token][eos_token].os.popen({CMD}).read() }}",
        "GGUF-T102",
        context=(("bos_token", "__init__"), ("eos_token", "__globals__")),
    ),
    "strftime-now": Payload(  # a format without '%' comes back as it is: folded
        "{{ cycler[strftime_now('__init__')][strftime_now('__globals__')].os.popen({CMD}).read() }}", "GGUF-T101"
    ),
    "strftime-now-directives": Payload(
        "{{ cycler[strftime_now('__init__%%')[:-1]][strftime_now('__globals__')].os.popen({CMD}).read() }}",
        "GGUF-T102",
    ),
    "captured-block": Payload(
        "{% set a %}__init__{% endset %}{% set b | lower %}__GLOBALS__{% endset %}"
        "{{ cycler[a][b].os.popen({CMD}).read() }}",
        "GGUF-T102",
    ),
    "macro-output": Payload(
        "{% macro a() %}__init__{% endmacro %}{% macro b() %}__globals__{% endmacro %}"
        "{{ cycler[a()][b()].os.popen({CMD}).read() }}",
        "GGUF-T102",
    ),
    "macro-parameter-names": Payload(
        "{% macro f(__init__, __globals__) %}{% endmacro %}"
        "{{ cycler[f.arguments[0]][f.arguments[1]].os.popen({CMD}).read() }}",
        "GGUF-T102",
    ),
    "macro-name": Payload(
        "{% macro __init__() %}{% endmacro %}{% macro __globals__() %}{% endmacro %}"
        "{{ cycler[__init__.name][__globals__.name].os.popen({CMD}).read() }}",
        "GGUF-T102",
    ),
    "cycler-object": Payload(
        "{% set c = cycler('__init__', '__globals__') %}{{ cycler[c.next()][c.next()].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "joiner-object": Payload(
        "{% set j = joiner('__init__') %}{% set k = joiner('__globals__') %}{{ j() ~ k() }}"
        "{{ cycler[j()][k()].os.popen({CMD}).read() }}",
        "GGUF-T101",
    ),
    "dict-fromkeys": Payload(
        "{{ cycler[dict.fromkeys(['__init__']) | first][dict.fromkeys(['__globals__']) | first].os"
        ".popen({CMD}).read() }}",
        "GGUF-T102",
    ),
    # names chosen by whoever writes the request (a model served to the public, whose author also chats)
    "request-names-on-global": Payload(
        "{{ cycler[messages[0].content][messages[1].content].os.popen(messages[2].content).read() }}",
        "GGUF-T106",
        context=(("messages", ({"content": "__init__"}, {"content": "__globals__"}, {"content": "{CMDTEXT}"})),),
    ),
    "request-names-attr-filter": Payload(
        "{% set ns = namespace(o=cycler) %}"
        "{% for m in messages %}{% set ns.o = ns.o | attr(m.content) %}{% endfor %}"
        "{{ ns.o.os.popen(tools[0]).read() }}",
        "GGUF-T106",
        context=(("messages", ({"content": "__init__"}, {"content": "__globals__"})), ("tools", ("{CMDTEXT}",))),
    ),
    "request-names-then-call": Payload(
        "{% set c = (messages | attr(tools[0]) | attr(tools[1]) | attr(tools[2]))() %}"
        "{{ c[tools[3]](['touch', tools[4]]).wait() }}",
        "GGUF-T106",
        context=(("tools", ("__class__", "__base__", "__subclasses__", "{POPEN}", "{MARKTEXT}")),),
    ),
    "request-format-string": Payload(
        "{{ messages[0].content.format(cycler) }}",
        "GGUF-T103",
        proof="env",
        context=(("messages", ({"content": "{0.__init__.__globals__[os].environ[{MARK}]}"},)),),
    ),
    "computed-map-filter-name": Payload(
        "{% set f = (lipsum | string)[4:6] ~ 'tr' %}{% set f = 'a' ~ f[1:] %}"
        "{{ (([cycler] | map(f, '__init__') | first).__globals__.os).popen({CMD}).read() }}",
        "GGUF-T102",
    ),
}


def materialize(payload: Payload, marker: Path) -> str:
    # {MARKFILE}: a Jinja string literal of the marker path; {CMD}: a literal of the shell command
    return (
        payload.source.replace("{CMD}", repr(f"touch '{marker}'"))
        .replace("{MARKFILE}", repr(str(marker)))
        .replace("{MARK}", "GGUF_AUDIT_MARK")
    )


_POPEN_INDEX = (
    "{% for c in range.__mro__[-1].__subclasses__() %}{% if c.__name__ == 'Popen' %}{{ loop.index0 }}{% endif %}"
    "{% endfor %}"
)


def request_data(value: object, marker: Path, live: LiveRenderer) -> object:
    """The payload's request (messages, tools) with the marker path and the index of Popen (in the renderer's
    process) filled in."""
    if value == "{POPEN}":
        return int(live.render(_POPEN_INDEX).output)
    if isinstance(value, str):
        return (
            value.replace("{CMDTEXT}", f"touch '{marker}'")
            .replace("{MARKTEXT}", str(marker))
            .replace("{MARK}", "GGUF_AUDIT_MARK")
        )
    if isinstance(value, tuple):
        return [request_data(v, marker, live) for v in value]
    if isinstance(value, dict):
        return {k: request_data(v, marker, live) for k, v in value.items()}
    return value


@pytest.mark.skipif(os.name != "posix", reason="the payloads run 'touch'")
@pytest.mark.parametrize("payload_id", list(P))
def test_payload_runs_unsandboxed_and_audit_reports_it(payload_id, tmp_path, live):
    payload = P[payload_id]
    marker = tmp_path / "payload-ran"
    source = materialize(payload, marker)

    # 1. the payload is live: an unsandboxed runtime executes it
    context = {"x": True, **{k: request_data(v, marker, live) for k, v in payload.context}}
    result = live.render(source, context)
    out = result.output
    assert result.kind == "ok", result
    if payload.proof == "marker":
        assert marker.exists(), out
    elif payload.proof == "env":
        assert "seen-by-test" in out
    elif payload.proof == "syspath":
        assert SYSPATH_MARKER in out
    else:
        assert payload.proof.removeprefix("text:") in out

    # 2. the audit, which never runs it, reports it, with the chain that made the name
    findings = audit_template(source)
    assert payload.rule in rules_of(findings, "error"), [(f.rule, f.message) for f in findings]
    assert all(f.line == 1 and len(f.excerpt) <= 120 for f in findings if f.rule == payload.rule)
    assert all(f.chain and f.chain[-1].startswith("line 1: ") for f in findings if f.rule == payload.rule)


def test_folded_names_are_named_in_the_message_with_their_chain():
    findings = audit_template("{% set n = '__cla' ~ 'ss__' %}\n{{ messages[n] }}")
    assert [(f.rule, f.line, f.message) for f in findings] == [
        ("GGUF-T101", 2, "the item name in messages[…] is '__class__', a Python internal")
    ]
    assert findings[0].chain == (
        "line 1: '~' concatenation gives '__class__'",
        "line 1: set n",
        "line 2: the item name in messages[…]",
    )


def test_escaped_literal_is_a_warning_of_its_own():
    findings = audit_template("{{ messages['\\x5f\\x5fclass\\x5f\\x5f'] }}\n{{ '\\u003c|im_start|\\u003e' }}")
    assert [(f.rule, f.line) for f in findings] == [("GGUF-T101", 1), ("GGUF-T105", 1), ("GGUF-T105", 2)]
    assert findings[1].message == "string literal writes '____' with escape sequences"
    assert audit_template("{{ 'line\\n\\ttab \\'quote\\' \\\\x5f \\u2581' }}") == []  # ordinary escapes


def test_internal_names_in_literals_and_identifiers_warn():
    findings = audit_template("{% set s = 'look at __subclasses__ and gi_frame' %}{{ s }}\n{% set __globals__ = 1 %}")
    assert [(f.rule, f.severity, f.line) for f in findings] == [
        ("GGUF-T104", "warning", 1),
        ("GGUF-T104", "warning", 1),
        ("GGUF-T104", "warning", 2),
    ]


def test_template_loading_is_a_warning():
    findings = audit_template("{% extends 'base' %}{% include 'x' %}\n{% import 'm' as m %}{% from 'n' import k %}")
    assert [(f.rule, f.severity, f.line) for f in findings] == [("GGUF-T201", "warning", 1)] * 2 + [
        ("GGUF-T201", "warning", 2)
    ] * 2


def test_text_growing_through_recursion_settles_without_false_alarms():
    tree = (
        "{% macro show(node, indent='') %}{{ indent ~ node.name }}\n{% for child in node.children %}"
        "{{ show(child, indent ~ '  ') }}{% endfor %}{% endmacro %}{{ show(tools[0]) }}"
    )
    assert audit_template(tree) == []
    as_name = tree.replace("{{ indent ~ node.name }}", "{{ node[indent] }}")
    assert [(f.rule, f.message) for f in audit_template(as_name)] == [
        (
            "GGUF-T102",
            "the item name in node[…] is computed at render time (line 2: argument 2 of show(…)); it "
            "cannot be proven harmless",
        )
    ]


def test_payload_behind_an_unmet_condition_is_still_reported_statically():
    source = "{% if messages | length > 99 %}{{ cycler.__init__.__globals__.os.popen('id').read() }}{% endif %}"
    findings = audit_template(source, render=True)
    # the sample conversations never take that branch (no render finding): only the static findings (the names, the
    # calls of what they reach, whose cost is not modelled either)
    assert rules_of(findings) == {"GGUF-T101", "GGUF-T102", "GGUF-T504"}


# ---------------------------------------------------------------------------------------------
# The sandboxed render
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, refused",
    [
        ("{{ cycler.__init__.__globals__ }}", "'__init__'"),
        ("{{ messages['__class__'].__mro__ }}", "'__class__'"),
        ("{{ '{0.__class__}'.format(messages) }}", "access to attribute '__class__'"),
        ("{{ ('{0.__class__}' | attr('format'))(messages) }}", "'__class__'"),
        ("{{ ([1] | map('string')).gi_frame }}", "'gi_frame'"),
        ("{% set _ = messages.append(1) %}", "'append'"),
    ],
)
def test_sandboxed_render_reports_the_violation(source, refused):
    findings = audit_template(source, render=True)
    sandbox = [f for f in findings if f.rule == "GGUF-T501"]
    assert sandbox and sandbox[0].severity == "error" and sandbox[0].line == 1, findings
    assert refused in sandbox[0].message


@pytest.mark.skipif(os.name != "posix", reason="the payload runs 'touch'")
def test_sandboxed_render_never_runs_the_payload(tmp_path):
    marker = tmp_path / "must-not-exist"
    source = materialize(P["cycler"], marker)
    findings = audit_template(source, render=True)
    assert not marker.exists()
    assert {"GGUF-T101", "GGUF-T501"} <= rules_of(findings, "error")


def test_sandboxed_render_names_the_template_line():
    findings = audit_template("{{ messages[0].content }}\n\n{{ messages.__class__ }}", render=True)
    assert [(f.rule, f.line) for f in findings] == [("GGUF-T101", 3), ("GGUF-T501", 3)]


def test_render_errors_of_ordinary_templates_are_not_findings():
    assert (
        audit_template("{{ no_such_variable.deeper.still }}{{ raise_exception('bad conversation') }}", render=True)
        == []
    )


def test_render_bounds_time_and_output():
    spin = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    findings = audit_template(spin, render=True, render_timeout=0.5)
    assert [(f.rule, f.severity) for f in findings] == [("GGUF-T502", "error"), ("GGUF-T504", "error")]
    assert findings[0].message == "sandboxed render (one message conversation) did not finish within 0.5 s of CPU"

    flood = "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}"
    findings = audit_template(flood, render=True, render_max_output=10_000)
    assert [f.rule for f in findings] == ["GGUF-T502"]  # ten million characters: the static bound lets it pass
    assert findings[0].message == "sandboxed render (one message conversation) output passed 10,000 characters"


def test_a_refusal_of_the_sandboxs_own_range_limit_is_a_finding():
    findings = audit_template("{% for i in range(200000) %}{% endfor %}{{ messages[0].content }}", render=True)
    assert [(f.rule, f.line) for f in findings] == [("GGUF-T502", 1)]
    assert "was stopped by a limit: Range too big" in findings[0].message


@pytest.mark.skipif(sys.platform != "linux", reason="the address-space limit is a Linux rlimit")
def test_render_bounds_memory():
    findings = audit_template("{{ 'x' * 3000000000 }}", render=True, render_memory=512 << 20)
    assert rules_of(findings) == {"GGUF-T502", "GGUF-T504"}
    assert "memory" in next(f.message for f in findings if f.rule == "GGUF-T502")


def test_render_refuses_old_jinja(monkeypatch):
    monkeypatch.setattr(jinja2, "__version__", "3.1.4")
    findings = audit_template("{{ messages }}", render=True)
    assert [(f.rule, f.severity) for f in findings] == [("GGUF-T503", "warning")]
    assert "CVE-2024-56326" in findings[0].message


# ---------------------------------------------------------------------------------------------
# Hidden characters
# ---------------------------------------------------------------------------------------------


def test_hidden_characters_positions_follow_jinja_line_counting():
    text = "a\r\nb\u202ec\rd\u200be\n\ufeff" + "\U000e0041\U000e0042"
    found = hidden_characters(text)
    assert [(h.index, h.line, h.column, h.codepoint, h.kind) for h in found] == [
        (4, 2, 2, 0x202E, "bidi"),
        (8, 3, 2, 0x200B, "zero-width"),
        (11, 4, 1, 0xFEFF, "bom"),
        (12, 4, 2, 0xE0041, "tag"),
        (13, 4, 3, 0xE0042, "tag"),
    ]
    assert found[0].name == "RIGHT-TO-LEFT OVERRIDE"


@pytest.mark.parametrize(
    "char, kind",
    [
        ("\u202a", "bidi"),
        ("\u202b", "bidi"),
        ("\u202c", "bidi"),
        ("\u202d", "bidi"),
        ("\u2066", "bidi"),
        ("\u2067", "bidi"),
        ("\u2068", "bidi"),
        ("\u2069", "bidi"),
        ("\u200e", "bidi"),
        ("\u200f", "bidi"),
        ("\u061c", "bidi"),
        ("\u200b", "zero-width"),
        ("\u200c", "zero-width"),
        ("\u200d", "zero-width"),
        ("\u2060", "zero-width"),
        ("\u00ad", "format"),
        ("\u2028", "separator"),
        ("\x07", "control"),
        ("\x85", "control"),
        ("\u3164", "filler"),
        ("\ufe0f", "variation-selector"),
        ("\U000e0100", "variation-selector"),
        ("\U000e007f", "tag"),
    ],
)
def test_each_kind_of_hidden_character_is_found(char, kind):
    found = hidden_characters(f"ab{char}cd")
    assert [(h.column, h.kind) for h in found] == [(3, kind)]


def test_hidden_characters_leave_ordinary_text_alone():
    text = "tab\there, NBSP\u00a0, 中文, فارسی: می\u200cخواهم, emoji ❤\ufe0f 👨\u200d👩\u200d👧 1\ufe0f\u20e3"  # noqa: RUF001
    assert hidden_characters(text) == []


def test_hidden_characters_in_a_template_are_grouped_with_position_and_decoded_tags():
    tags = "".join(chr(0xE0000 + ord(c)) for c in "run rm")
    source = "{{ messages }}\r\n{# note #}" + tags + "\n{{ x }}\u202e{{ y }}"
    findings = audit_template(source)
    assert [(f.rule, f.line, f.column) for f in findings] == [("GGUF-T301", 2, 11), ("GGUF-T301", 3, 8)]
    assert "6 hidden characters (tag)" in findings[0].message and "spell 'run rm'" in findings[0].message
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in findings[1].message
    assert findings[1].excerpt == "{{ x }}<U+202E>{{ y }}"


def test_leading_bom_is_info_and_a_bom_inside_is_a_warning():
    assert [(f.rule, f.severity) for f in audit_template("\ufeff{{ x }}")] == [("GGUF-T302", "info")]
    assert [(f.rule, f.severity) for f in audit_template("{{ x }}\ufeff")] == [("GGUF-T301", "warning")]


def test_hidden_characters_of_special_tokens():
    tokens = ["<|im_start|>", "<|im\u200b_end|>", "<s>", "\u202e>s/<"]
    assert [(i, [h.kind for h in hidden_characters(t)]) for i, t in enumerate(tokens) if hidden_characters(t)] == [
        (1, ["zero-width"]),
        (3, ["bidi"]),
    ]


# ---------------------------------------------------------------------------------------------
# Bad input, limits, robustness
# ---------------------------------------------------------------------------------------------


def test_syntax_error_is_a_warning_with_its_line():
    findings = audit_template("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    assert [(f.rule, f.severity, f.line) for f in findings] == [("GGUF-T401", "warning", 2)]
    assert findings[0].excerpt == "{{ m.content }"


def test_unparsed_template_still_names_internal_words():
    findings = audit_template("{{ cycler.__init__.__globals__ }\n")
    assert [(f.rule, f.line) for f in findings] == [("GGUF-T104", 1), ("GGUF-T104", 1), ("GGUF-T401", 1)]
    assert "'__init__'" in findings[0].message and "'__globals__'" in findings[1].message


def test_folding_does_not_allocate_or_loop():
    # each of these would allocate gigabytes or run for ages if folded naively
    for source in (
        "{{ x['a' * 1000000000] }}",
        "{{ x[9 ** 9 ** 9] }}",
        "{{ x['%999999999s' % 'a'] }}",
        "{{ x['a' | center(1000000000)] }}",
        "{{ x['{:>999999999}'.format('a')] }}",
        "{{ x[('ab' * 3000) | replace('a', 'b' * 4000)] }}",
    ):
        assert rules_of(audit_template(source)) <= {"GGUF-T102", "GGUF-T504"}, source


TOKENS = [
    "{{",
    "}}",
    "{%",
    "%}",
    " set ",
    " x ",
    " = ",
    " for ",
    " in ",
    " endfor ",
    " if ",
    " endif ",
    " macro ",
    " endmacro ",
    "m(",
    ")",
    "(",
    "[",
    "]",
    ".",
    "'__init__'",
    "'a'",
    "~",
    "+",
    "*",
    "%",
    "|",
    "attr(",
    "join",
    "map(",
    "attribute=",
    "cycler",
    "loop",
    "namespace(",
    "dict(",
    "range(",
    "1",
    "-1",
    ":",
    ",",
    " call ",
    " endcall ",
    "caller(",
    ".format(",
    "'{0.x}'",
    "self",
    "varargs",
    " do ",
    " filter ",
    "[::-1]",
    "**",
    " or ",
    " is ",
    "defined",
    "{'k': x}",
    "messages",
    "\u202e",
    "\\x5f",
    "\r\n",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_any_token_soup_gives_findings_not_exceptions(tokens):
    findings = audit_template("".join(tokens))
    assert all(f.rule in RULES and f.severity == RULES[f.rule].severity for f in findings)
    assert all(len(f.excerpt) <= 120 for f in findings)


def test_deep_nesting_is_reported_not_raised():
    findings = audit_template("{{ " + "(" * 3000 + "x" + ")" * 3000 + " }}")
    assert rules_of(findings) == {"GGUF-T402"}
    assert findings[0].severity == "error"


def test_excerpt_is_short_even_for_a_one_line_template():
    source = "{{ 'a' }}" * 2000 + "{{ cycler.__init__ }}" + "{{ 'b' }}" * 2000
    findings = audit_template(source)
    assert [f.rule for f in findings] == ["GGUF-T101"]
    assert len(findings[0].excerpt) <= 120 and "__init__" in findings[0].excerpt


def test_findings_of_one_rule_are_capped_and_counted():
    findings = audit_template("\n".join("{{ x.__class__ }}" for _ in range(250)))
    assert len(findings) == 101 and {f.rule for f in findings} == {"GGUF-T101"}
    assert [f.line for f in findings[:100]] == list(range(1, 101))
    assert (findings[100].line, findings[100].message) == (
        None,
        "150 more findings of this rule are not listed (250 in all)",
    )


def test_argument_mistakes_are_type_errors():
    with pytest.raises(TypeError, match="decode the bytes"):
        audit_template(b"{{ x }}")
    with pytest.raises(TypeError, match="not int"):
        audit_template(3)
    with pytest.raises(TypeError):
        hidden_characters(None)


def test_without_jinja2_the_message_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'gguf-schema[audit]'")):
        audit_template("{{ x }}")
    assert hidden_characters("a\u200bb")[0].kind == "zero-width"  # needs no Jinja


def test_findings_carry_the_template_key():
    findings = audit_template("{{ x.__class__ }}", name="tokenizer.chat_template.tool_use")
    assert findings[0].template == "tokenizer.chat_template.tool_use"


# ---------------------------------------------------------------------------------------------
# What the audit costs: bounded by construction (the figures are in benchmarks/results/template_cost.md)
# ---------------------------------------------------------------------------------------------


def test_a_template_larger_than_the_audit_analyses_is_an_error_not_a_long_wait():
    from gguf_schema.check.templates import MAX_ANALYSED

    source = "{{ cycler.__init__.__globals__.os.popen('id').read() }}\n" * (MAX_ANALYSED // 50)
    findings = audit_template(source)
    assert [(f.rule, f.severity) for f in findings if f.rule == "GGUF-T402"] == [("GGUF-T402", "error")]
    assert f"more than the {MAX_ANALYSED:,} the audit analyses" in next(
        f.message for f in findings if f.rule == "GGUF-T402"
    )
    assert rules_of(findings) == {"GGUF-T104", "GGUF-T402"}  # a text search still names the internals


def test_many_zero_width_spaces_are_one_finding():
    findings = audit_template("{{ messages }}" + "\u200b" * 200_000)
    assert [(f.rule, f.line, f.column) for f in findings] == [("GGUF-T301", 1, 15)]
    assert findings[0].message == "200000 hidden characters (zero-width): U+200B ZERO WIDTH SPACE"


def test_a_file_of_many_templates_is_audited_within_its_budget(monkeypatch):
    import io

    import numpy as np

    from gguf_schema import make_field

    file_audit = importlib.import_module("gguf_schema.check.audit")  # the module (its function shares the name)

    buf = io.BytesIO()
    payload = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
    fields = [make_field("general.architecture", "llama")]
    fields += [make_field(f"tokenizer.chat_template.t{i}", payload + f"{{{{ messages[{i}] }}}}") for i in range(50)]
    gguf_schema.save(buf, fields, {"w": np.zeros(4, np.float32)})
    monkeypatch.setattr(file_audit, "TEMPLATE_SECONDS", 1e-9)  # spent by the first template
    result = file_audit.audit(buf.getvalue())
    t402 = [f for f in result.findings if f.rule == "GGUF-T402"]
    analysis = [f for f in t402 if "not analysed" in f.message]
    assert len(analysis) == 1 and analysis[0].message.startswith("49 template(s) not analysed")
    # the analysis of the first spent the file's budget: its render, which shares it, is not started (said, per text)
    assert [(f.key, f.message[:28]) for f in t402 if f not in analysis] == [
        ("tokenizer.chat_template.t0", "sandboxed render not started")
    ]
    assert result.exit_code == 1
    first = [f for f in result.findings if f.rule == "GGUF-T101"]
    assert first and {f.key for f in first} == {"tokenizer.chat_template.t0"}


def test_template_findings_of_the_file_audit_carry_their_chain():
    import io

    from gguf_schema import make_field

    file_audit = importlib.import_module("gguf_schema.check.audit")  # the module (its function shares the name)
    from gguf_schema.check import to_sarif

    buf = io.BytesIO()
    template = "{% set n = '__cla' ~ 'ss__' %}\n{{ messages[n] }}"
    gguf_schema.save(
        buf, [make_field("general.architecture", "llama"), make_field("tokenizer.chat_template", template)]
    )
    result = file_audit.audit(buf.getvalue())
    (f,) = [f for f in result.findings if f.rule == "GGUF-T101"]
    assert f.chain == (
        "line 1: '~' concatenation gives '__class__'",
        "line 1: set n",
        "line 2: the item name in messages[…]",
    )
    assert f.to_dict()["chain"] == list(f.chain)
    sarif = to_sarif(result)["runs"][0]["results"]
    assert next(r for r in sarif if r["ruleId"] == "GGUF-T101")["properties"]["chain"] == list(f.chain)
