"""Loader views (gguf_schema.check.loaders): a template key is audited as each loader extracts and rewrites it.

Each test builds a file where one loader renders another template than a dictionary reader shows
(gguf-py's ``fields``), PROVES the loader's text live (an unsandboxed render reads the environment
value the test planted), checks that the stored text alone gets no error (so an audit of the
stored value misses it, the sandboxed render included), and checks that the file audit reports it
at error severity, attributed to that loader. The loader's extraction is re-derived here
independently where a real primitive exists: C's ``snprintf`` into a 1,024-byte ``ctypes`` buffer
for llama-cpp-python, a C string for llama.cpp.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFArray, ValueType, make_field
from gguf_schema.check.audit import AUDIT_RULES, audit
from gguf_schema.check.loaders import LOADERS, distinct, template_views
from gguf_schema.check.templates import audit_template
from gguf_schema.testing.malformed import base_metadata
from tests.oracle.live import LiveRenderer

jinja2 = pytest.importorskip("jinja2")

TEMPLATE = "tokenizer.chat_template"
BENIGN = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
# reads the variable the live renderer planted: live when rendered without a sandbox
PAYLOAD = BENIGN + "{{ cycler.__init__.__globals__.os.environ['GGUF_AUDIT_MARK'] }}"
CONTEXT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def live():
    if os.name != "posix":
        pytest.skip("live renders fork (POSIX)")
    with LiveRenderer(env={"GGUF_AUDIT_MARK": "seen-by-test"}) as renderer:
        yield renderer


def save(*fields: Any) -> bytes:
    buf = io.BytesIO()
    base = [make_field(k, v) for k, v in base_metadata().items() if k not in {f.key for f in fields}]
    gguf_schema.save(buf, base + list(fields), {"w": np.zeros(4, np.float32)})
    return buf.getvalue()


def views_of(data: bytes, loader: str) -> list[str]:
    with gguf_schema.open(data) as f:
        return [v.text for v in template_views(f) if v.loader == loader]


def dictionary_view(data: bytes, tmp_path: Path) -> str:
    """What a dictionary reader shows: gguf-py's fields, the whole key."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "dictionary.gguf"
    path.write_bytes(data)
    return str(gguf.GGUFReader(path).fields[TEMPLATE].contents())


def assert_live(live: LiveRenderer, text: str) -> None:
    result = live.render(text, CONTEXT)
    assert result.kind == "ok" and "seen-by-test" in result.output, result


def assert_stored_text_is_missed(text: str) -> None:
    """The stored text alone gets no error finding, rendered or not (it does not even compile)."""
    found = audit_template(text, render=True)
    assert not [f for f in found if f.severity == "error"], [str(f) for f in found]


def errors_by_loader(data: bytes) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in audit(data).findings:
        if f.severity == "error" and f.rule.startswith("GGUF-T"):
            for loader in f.loaders:
                out.setdefault(loader, set()).add(f.rule)
    return out


def snprintf(value: bytes, size: int) -> bytes:
    """C's snprintf(buf, size, "%s", value) into a ctypes buffer, as llama_model_meta_val_str_by_index copies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    buf = ctypes.create_string_buffer(size)
    libc.snprintf(buf, ctypes.c_size_t(size), b"%s", ctypes.c_char_p(value))
    return buf.value


def padded(payload: str, size: int, tail: str) -> str:
    """``payload``, spaces, then ``tail``: ``size`` bytes of UTF-8 in all."""
    pad = size - len(payload.encode()) - len(tail.encode())
    assert pad > 0
    return payload + " " * pad + tail


# --------------------------------------------------------------------------- llama-cpp-python: the 1,024-byte buffer


def test_a_value_the_size_of_the_buffer_loses_its_last_byte(live):
    # a template of exactly 1,024 bytes ending in '{{': the stored text does not compile (a dictionary reader, the
    # static analysis and the sandboxed render of it see nothing); llama-cpp-python drops the last '{' and renders
    # the payload
    stored = padded(PAYLOAD, 1024, "{{")
    data = save(make_field(TEMPLATE, stored))
    seen = views_of(data, "llama-cpp-python")
    assert snprintf(stored.encode(), 1024).decode() in seen and stored[:-1] in seen
    assert_live(live, stored[:-1])
    assert_stored_text_is_missed(stored)
    errors = errors_by_loader(data)
    assert "GGUF-T101" in errors["llama-cpp-python"] and "llama.cpp" not in errors and "transformers" not in errors
    a106 = [f for f in audit(data).findings if f.rule == "GGUF-A106"]
    assert len(a106) == 1 and a106[0].loaders == ("llama-cpp-python",) and "last byte dropped" in a106[0].message


def test_the_buffer_grown_by_a_longer_value_cuts_a_value_one_byte_longer(live):
    # the buffer grows to n + 1 for a value of n > 1,024 bytes (here general.description, 2,000 bytes); a template
    # of 2,001 bytes copied after it is cut to 2,000
    stored = padded(PAYLOAD, 2001, "{{")
    data = save(make_field("general.description", "d" * 2000), make_field(TEMPLATE, stored))
    assert snprintf(stored.encode(), 2001).decode() == stored[:-1] in views_of(data, "llama-cpp-python")
    assert_live(live, stored[:-1])
    assert_stored_text_is_missed(stored)
    assert "GGUF-T101" in errors_by_loader(data)["llama-cpp-python"]
    # without the longer value the buffer never has that size: the template is read whole
    alone = save(make_field(TEMPLATE, stored))
    assert views_of(alone, "llama-cpp-python") == [stored] and "llama-cpp-python" not in errors_by_loader(alone)


def test_a_cut_inside_a_character_fails_the_load():
    # llama-cpp-python decodes the buffer as strict UTF-8: a cut through a character raises, no template is rendered
    stored = padded(PAYLOAD, 1022, "") + "\u00e9"  # 1,024 bytes, the last two one character
    data = save(make_field(TEMPLATE, stored))
    with pytest.raises(UnicodeDecodeError):
        snprintf(stored.encode(), 1024).decode()
    assert views_of(data, "llama-cpp-python") == [stored]


# --------------------------------------------------------------------------- llama.cpp: C strings, ARRAYs skipped


def test_llama_cpp_renders_the_value_up_to_its_nul(live, tmp_path):
    stored = PAYLOAD + "\0{{"  # the suffix makes the stored text a syntax error
    data = save(make_field(TEMPLATE, stored))
    assert ctypes.c_char_p(stored.encode()).value.decode() == PAYLOAD
    assert views_of(data, "llama.cpp") == [PAYLOAD] == views_of(data, "llama-cpp-python")
    assert views_of(data, "gguf-py") == [stored] and dictionary_view(data, tmp_path) == stored
    assert_live(live, PAYLOAD)
    assert_stored_text_is_missed(stored)
    errors = errors_by_loader(data)
    assert "GGUF-T101" in errors["llama.cpp"] and "GGUF-T101" in errors["llama-cpp-python"]
    assert "transformers" not in errors and "gguf-py" not in errors


def test_llama_cpp_skips_an_array_stored_first(live):
    # an ARRAY of one string under the real key (gguf-py and transformers read it: one value is unwrapped), then a
    # STRING under the key + NUL: llama.cpp's metadata map skips ARRAYs, so the later pair is its template
    hidden = PAYLOAD + "\0{{"
    data = save(
        make_field(TEMPLATE, GGUFArray(ValueType.STRING, [BENIGN])),
        make_field(TEMPLATE + "\0", hidden),
    )
    assert views_of(data, "transformers") == [BENIGN]
    assert views_of(data, "llama.cpp") == [PAYLOAD]
    assert_live(live, PAYLOAD)
    assert_stored_text_is_missed(hidden)
    errors = errors_by_loader(data)
    assert "GGUF-T101" in errors["llama.cpp"] and "transformers" not in errors
    a101 = next(f for f in audit(data).findings if f.rule == "GGUF-A101")
    assert "skips ARRAY" in a101.message


# --------------------------------------------------------------------------- transformers: the architecture rewritten


@pytest.mark.parametrize(
    ("architecture", "name", "replaced_by"),
    [("{#llama", "mistral", "mistral"), ("{#qwen2moe", "x", "qwen2_moe"), ("{#t5", "x", "t5")],
)
def test_transformers_rewrites_the_architecture_inside_the_template(live, architecture, name, replaced_by):
    # the architecture name is the file's text: here it opens a comment around the payload, and transformers
    # replaces it by its own architecture name, which deletes the comment's opening
    stored = BENIGN + architecture + " " + PAYLOAD + " #}"
    data = save(
        make_field("general.architecture", architecture),
        make_field("general.name", name),
        make_field(TEMPLATE, stored),
    )
    (view,) = views_of(data, "transformers")
    assert view == stored.replace(architecture, replaced_by)
    assert_live(live, view)
    assert live.render(stored, CONTEXT).output == "<|user|>hi"  # stored: a comment, inert
    assert audit_template(stored, render=True) == []  # and clean to the audit of the stored text
    errors = errors_by_loader(data)
    assert "GGUF-T101" in errors["transformers"] and "llama.cpp" not in errors


def test_a_plain_architecture_is_left_alone():
    stored = "{# llama 3 #}" + BENIGN
    data = save(
        make_field("general.architecture", "llama"), make_field("general.name", "x"), make_field(TEMPLATE, stored)
    )
    assert views_of(data, "transformers") == [stored]
    # with general.name 'mistral' transformers renames llama: the comment changes, nothing else
    data = save(
        make_field("general.architecture", "llama"), make_field("general.name", "mistral"), make_field(TEMPLATE, stored)
    )
    assert views_of(data, "transformers") == ["{# mistral 3 #}" + BENIGN]
    r = audit(data)
    assert [f.rule for f in r.findings] == ["GGUF-A106"] and r.findings[0].loaders == ("transformers",)


# --------------------------------------------------------------------------- the model of the loaders


def test_every_view_is_analysed_once_and_ordinary_files_have_one_text():
    data = save(make_field(TEMPLATE, BENIGN), make_field(TEMPLATE + ".tool_use", BENIGN))
    with gguf_schema.open(data) as f:
        views = template_views(f)
    assert {v.loader for v in views} == {li.name for li in LOADERS}
    assert list(distinct(views)) == [BENIGN]
    assert audit(data).findings == []
    assert "GGUF-A106" in AUDIT_RULES


def test_gguf_py_refuses_a_duplicate_whole_key(tmp_path):
    gguf = pytest.importorskip("gguf")
    data = save(make_field(TEMPLATE, BENIGN))
    with gguf_schema.open(data) as f:
        records = list(f.fields.records)
    # two pairs with the same whole key: gguf-py raises, and the model gives no gguf-py or transformers view
    from gguf_schema.format.values import Field

    dup = [*records, Field(TEMPLATE, ValueType.STRING, PAYLOAD)]
    buf = io.BytesIO()
    gguf_schema.save(buf, dup, {"w": np.zeros(4, np.float32)}, strict=None)
    path = tmp_path / "dup.gguf"
    path.write_bytes(buf.getvalue())
    with pytest.raises(KeyError):
        gguf.GGUFReader(path)
    assert views_of(buf.getvalue(), "gguf-py") == [] == views_of(buf.getvalue(), "transformers")
