"""The sandboxed render, part of every audit: one child per file, each loader's Jinja configuration, bounds.

Real and benign templates render clean under every configuration (no false alarm); what only one
configuration does (plain jinja2's sorted ``tojson``, autoescape's Markup, transformers' immutable
sandbox) is reached; the render's findings sit beside the static ones in one report; ``render=False``
(``--no-render``) leaves them out; the bounds are of the child's CPU time and its work.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema import make_field
from gguf_schema.check.audit import RENDER_MAX_TEMPLATES, audit, to_sarif
from gguf_schema.check.templates import sandbox
from gguf_schema.check.templates.jinja import FLAVOURS, runtime_environment
from gguf_schema.testing.malformed import base_metadata

from .helpers import run_cli

jinja2 = pytest.importorskip("jinja2")

TEMPLATE = "tokenizer.chat_template"
DATA = Path(__file__).parent / "data" / "templates"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}


def save(*fields: Any) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(
        buf, [make_field(k, v) for k, v in base_metadata().items()] + list(fields), {"w": np.zeros(4, np.float32)}
    )
    return buf.getvalue()


def test_real_and_benign_templates_render_clean_in_every_configuration():
    # a sample of the real corpus (every twelfth file: the whole corpus is the same code, run on demand) and every
    # benign fixture, in one child, as a file audit renders its templates
    paths = sorted((DATA / "real").glob("*.jinja"))[::12] + sorted((DATA / "benign").glob("*.jinja"))
    sources = [p.read_bytes().decode("utf-8") for p in paths]
    for source in sources:  # analysed first, as the audit does: the render is then checked against it (GGUF-T505)
        gguf_schema.check.templates.audit_template(source)
    observed: dict[str, sandbox.Observed] = {}
    found = sandbox.render_many(sources, timeout=5.0, observed=observed)
    assert {s: f for s, f in found.items() if f} == {}
    assert set(observed) == set(sources)  # every template was rendered and observed
    assert all(o.work > 0 for o in observed.values())
    assert any("content" in o.names for o in observed.values())


def test_each_configuration_is_rendered():
    # what differs between the loaders' configurations, shown on real environments first
    probe = "{{ messages | tojson }}|{{ '<' }}"
    out = {f: runtime_environment(sandboxed=True, flavour=f).from_string(probe).render(**CHAT) for f in FLAVOURS}
    assert out["transformers"] == '[{"role": "user", "content": "hi"}]|<'  # key order kept, nothing escaped
    assert out["jinja2"] == '[{"content": "hi", "role": "user"}]|<'  # keys sorted
    assert out["jinja2-autoescape"].endswith("|&lt;")  # Markup escaping
    # a template that reaches an internal only where keys are sorted, and one only under autoescape
    sorted_only = "{% if (messages | tojson).startswith('[{\"content\"') %}{{ messages.__class__ }}{% endif %}"
    escaped_only = "{% set s %}{{ '<' }}{% endset %}{% if s == '&lt;' %}{{ messages.__class__ }}{% endif %}"
    never = "{% if false %}{{ messages.__class__ }}{% endif %}"
    found = sandbox.render_many([sorted_only, escaped_only, never])
    for source in (sorted_only, escaped_only):
        assert [f.rule for f in found[source]] == ["GGUF-T501"], source
        assert "'__class__' of 'list'" in found[source][0].message
    assert found.get(never, []) == []
    # transformers' immutable sandbox refuses list.append: on a list the template made, the template fails there
    # and reaches nothing; on the request's messages it changes the caller's data
    made, request = "{% set x = [] %}{% do x.append(1) %}{{ x }}", "{% do messages.append(1) %}"
    found = sandbox.render_many([made, request])
    assert found[made] == [] and [f.rule for f in found[request]] == ["GGUF-T501"]


def test_the_render_is_part_of_every_audit_and_no_render_leaves_it_out(tmp_path):
    payload = "{{ messages[0]['content'] }}{{ cycler.__init__.__globals__ }}"
    data = save(make_field(TEMPLATE, payload))
    default = audit(data)
    static = audit(data, render=False)
    rules = [f.rule for f in default.findings]
    assert "GGUF-T501" in rules and "GGUF-T101" in rules  # side by side, one report
    assert "GGUF-T501" not in [f.rule for f in static.findings]
    assert [f for f in default.findings if f.rule != "GGUF-T501"] == static.findings
    t501 = next(f for f in default.findings if f.rule == "GGUF-T501")
    assert t501.key == TEMPLATE and t501.loaders == ("llama.cpp", "llama-cpp-python", "transformers", "gguf-py")
    sarif = to_sarif(default)["runs"][0]["results"]
    assert "GGUF-T501" in [r["ruleId"] for r in sarif]
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    doc = json.loads(run_cli("audit", "--json", str(path)).stdout)
    assert "GGUF-T501" in [f["rule"] for f in doc["reports"][0]["findings"]]
    doc = json.loads(run_cli("audit", "--json", "--no-render", str(path)).stdout)
    assert "GGUF-T501" not in [f["rule"] for f in doc["reports"][0]["findings"]]


def test_one_child_renders_every_template_of_a_file():
    # three templates, each refused on a different name, and a text only llama.cpp renders: all in one report
    names = ["__class__", "__init__", "__reduce__"]
    fields = [make_field(TEMPLATE, "{{ messages." + names[0] + " }}")]
    fields += [make_field(f"{TEMPLATE}.t{i}", "{{ messages." + n + " }}") for i, n in enumerate(names[1:])]
    fields.append(make_field(f"{TEMPLATE}.cut", "{{ messages.__doc__ }}\0{{"))
    r = audit(save(*fields))
    refused = {f.key: f.message for f in r.findings if f.rule == "GGUF-T501"}
    assert len(refused) == 4
    assert all(f"'{n}'" in " ".join(refused.values()) for n in [*names, "__doc__"])
    cut = next(f for f in r.findings if f.rule == "GGUF-T501" and "__doc__" in f.message)
    assert cut.loaders == ("llama.cpp", "llama-cpp-python") and cut.message.startswith("as llama.cpp and")


def test_render_bounds_are_cpu_time_and_work():
    spin = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    (f,) = sandbox.render_many([spin], timeout=0.5)[spin]
    assert f.rule == "GGUF-T502" and "did not finish within 0.5 s of CPU" in f.message
    # work counted in steps, whatever the machine's speed: 3 x 99,999 loop passes is over the bound
    busy = "{% for i in range(3) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    found = sandbox.render_many([busy], timeout=10.0)[busy]
    assert [f.rule for f in found] == ["GGUF-T502"]
    assert f"steps of work, more than {sandbox.MAX_WORK:,}" in found[0].message
    # a template that is not slow gets no finding, and the next template of the same child still renders
    after = "{{ messages.__class__ }}"
    found = sandbox.render_many([spin, after], timeout=0.5)
    assert [f.rule for f in found[after]] == ["GGUF-T501"]


def test_a_budget_bounds_the_whole_child_and_what_it_cuts_is_not_analysed():
    # each template alone is under its own bound (5 s); together they are past the child's budget (0.4 s, the
    # child's start included): the one the budget cuts, and those it never reaches, are GGUF-T402, not T502
    spin = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    after = "{{ messages.__class__ }}"
    found = sandbox.render_many([spin, after], timeout=5.0, budget=0.4)
    assert [f.rule for f in found[spin]] == ["GGUF-T402"]
    assert "not finished within the 0.40 s of CPU the audit had left" in found[spin][0].message
    assert [(f.rule, f.message[:28]) for f in found[after]] == [("GGUF-T402", "sandboxed render not started")]
    # too little budget to start a child: nothing rendered, each text said
    found = sandbox.render_many([after], timeout=5.0, budget=sandbox.MIN_BUDGET / 2)
    assert [f.rule for f in found[after]] == ["GGUF-T402"]
    # a budget that suffices changes nothing
    assert [f.rule for f in sandbox.render_many([after], timeout=5.0, budget=5.0)[after]] == ["GGUF-T501"]


def test_what_a_render_does_is_checked_against_the_analysis():
    # every audit is a containment check: the render's names and work against predict() (GGUF-T505 when they
    # disagree, which a sound analysis never lets happen: shown here with observations no render of it made)
    source = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    gguf_schema.check.templates.audit_template(source)  # analysed (the check reads the analysis of the audit)
    fine = sandbox.Observed(("content",), 10, "one message conversation")
    assert sandbox.contradictions(source, fine) == []
    odd = sandbox.Observed(("content", "__globals__"), 10, "one message conversation")
    assert sandbox.contradictions(source, odd) == ["looked up '__globals__', which the analysis did not predict"]
    busy = sandbox.Observed(("content",), 10**9, "a long message conversation")
    (why,) = sandbox.contradictions(source, busy)
    assert why.startswith(
        "(a long message conversation) did 1,000,000,000 steps of work, more than the analysis's bound"
    )
    # a request's own text is a name the request may choose (the analysis allows it where it says request_names)
    chosen = "{% for m in messages %}{{ {'user': 1}[m['role']] }}{% endfor %}"
    gguf_schema.check.templates.audit_template(chosen)
    assert sandbox.contradictions(chosen, sandbox.Observed(("role", "user", "assistant"), 10, "")) == []
    # and real renders agree with the analysis (the test above checks a sample of the real corpus)
    found = sandbox.render_many([source, chosen], timeout=5.0)
    assert not [f for fs in found.values() for f in fs if f.rule == "GGUF-T505"]


def test_a_file_renders_at_most_so_many_texts():
    fields = [make_field(f"{TEMPLATE}.n{i}", f"{{{{ messages[{i}] }}}}") for i in range(RENDER_MAX_TEMPLATES + 2)]
    r = audit(save(*fields))
    (t503,) = [f for f in r.findings if f.rule == "GGUF-T503"]
    assert t503.severity == "warning" and t503.message.startswith(f"2 of the file's {RENDER_MAX_TEMPLATES + 2:,}")
