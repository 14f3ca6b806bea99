"""The second corpus of real chat templates (tests/data/templates/real2, gathered for issue 34): each renders an
ordinary conversation in Jinja's sandbox, and the audit says nothing about any of them (no false alarm).

Its files and their checksums are checked with the other listed data (tests/test_data.py). The corpus comes
from projects the first one (tests/data/templates/real) did not draw on: axolotl, trl, ollama's template index
and its renderer tests, functionary, unsloth, mistral-common, node-llama-cpp, gpt4all, Hermes-Function-Calling and
the royallab collection; its SOURCES file names each origin and license, and lists the templates that were dropped
and why.
"""

from __future__ import annotations

import pytest

from gguf_schema.check.templates import audit_template

from .conftest import DATA

jinja2 = pytest.importorskip("jinja2")

FOLDER = DATA / "templates" / "real2"
TEMPLATES = sorted(FOLDER.glob("*.jinja"))
CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True},
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "How are you?"},
        ],
        "add_generation_prompt": True,
    },
    {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}], "add_generation_prompt": True},
]


def test_corpus_is_large_and_from_many_projects():
    assert len(TEMPLATES) >= 100
    origins = (FOLDER / "SOURCES").read_text(encoding="utf-8")
    for project in (
        "axolotl-ai-cloud/axolotl",
        "huggingface/trl",
        "ollama/ollama",
        "MeetKai/functionary",
        "unslothai/unsloth",
    ):
        assert project in origins, project


@pytest.fixture(scope="module")
def sandbox():
    from gguf_schema.check.templates.jinja import runtime_environment

    return runtime_environment(sandboxed=True)


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_renders_an_ordinary_conversation_in_the_sandbox(path, sandbox):
    template = sandbox.from_string(path.read_text(encoding="utf-8"))
    errors = []
    for conversation in CONVERSATIONS:
        try:
            text = template.render(**conversation, bos_token="<s>", eos_token="</s>")
        except Exception as e:  # a real template may raise anything for a conversation it does not expect
            errors.append(f"{type(e).__name__}: {e}")
        else:
            shown = ("Hello", "Be brief.")  # a message's text (a multimodal template needs content parts)
            if any(t in text for t in shown):
                return
            errors.append(f"the message is not in {text[:100]!r}")
    pytest.fail(f"no conversation renders with its message: {errors}")


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_real_template_gives_no_findings(path):
    findings = audit_template(path.read_text(encoding="utf-8"))
    assert [(f.rule, f.line, f.message) for f in findings] == []
