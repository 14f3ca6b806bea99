"""The corpus of live template tricks (tests/data/templates/tricks): each trick is PROVEN live here.

Every trick is rendered WITHOUT a sandbox, as a vulnerable runtime renders it, in a forked child with limits
(:mod:`tests.oracle.tricks`): it runs a command (a marker file appears), puts a planted
environment value or a file's content in its output, or goes past its time or memory bound. The bound
tricks run with small limits here (0.3 s, 256 MiB), far past what a real template needs on one
conversation (a millisecond). Whether the audit catches them is measured by benchmarks/prove_tricks.py
(benchmarks/results/tricks.md), not asserted here.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.oracle.tricks import CONFIGS, PROOFS, Prover, load

from .conftest import DATA

jinja2 = pytest.importorskip("jinja2")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="live renders fork (POSIX) and the payloads run 'touch'")

FOLDER = DATA / "templates" / "tricks"
TRICKS = load(FOLDER)


@pytest.fixture(scope="module")
def prover():
    with Prover() as p:
        yield p


def test_manifest_lists_every_file_and_says_how_each_is_proven():
    manifest = json.loads((FOLDER / "MANIFEST.json").read_text(encoding="utf-8"))
    assert sorted(manifest) == sorted(p.stem for p in FOLDER.glob("*.jinja"))
    assert len(manifest) >= 60
    for name, entry in manifest.items():
        assert entry["proof"] in PROOFS and entry.get("config", "transformers") in CONFIGS, name
        assert entry["class"] and entry["note"] and isinstance(entry["context"], dict), name
        assert entry["sandbox"] in ("refuses", "exceeds", "errors", "renders"), name
    # every payload kind is there, and so are both families of the classes
    assert {t.proof for t in TRICKS.values()} == set(PROOFS)
    assert any(t.cls.startswith("names:") for t in TRICKS.values())
    assert any(t.cls.startswith("cost:") for t in TRICKS.values())


@pytest.mark.parametrize("name", sorted(TRICKS))
def test_trick_is_live(name, prover):
    trick = TRICKS[name]
    bound = trick.proof == "bound"
    proof = prover.prove(trick, timeout=0.3 if bound else 5.0, memory=(256 if bound else 768) << 20)
    assert proof.live, proof.result
    if not bound:  # a payload that ran did not also blow a bound
        assert proof.result.kind == "ok"


def test_a_benign_render_proves_nothing(prover):
    # the proofs can fail: the same machinery on a harmless template sees no marker, secret, file or bound
    from tests.oracle.tricks import Trick

    context = {"messages": [{"role": "user", "content": "Hello"}]}
    for proof in PROOFS:
        harmless = Trick("harmless", "{% for m in messages %}{{ m.content }}{% endfor %}", proof, context, "-", "-")
        assert not prover.prove(harmless, timeout=0.5, memory=256 << 20).live, proof


# -- the audit, which never renders, reports every trick at error severity -------------------------------------
# The name tricks are answered by the name analysis (sound by construction, docs/audit.md); the cost tricks by the
# render-cost bound (cost.py).


@pytest.mark.parametrize("name", sorted(n for n, t in TRICKS.items() if t.cls.startswith("names:")))
def test_the_audit_reports_every_name_trick(name):
    from gguf_schema.check.templates import audit_template, predict

    trick = TRICKS[name]
    findings = audit_template(trick.source)
    assert any(f.severity == "error" for f in findings), [(f.rule, f.message) for f in findings]
    assert predict(trick.source).flagged


@pytest.mark.parametrize("name", sorted(n for n, t in TRICKS.items() if t.cls.startswith("cost:")))
def test_the_audit_reports_every_cost_trick(name):
    """The render-cost bound reports most costly renders statically; what it lets through (loops nested deeper than
    its degree limit, which real JSON-schema walkers need) the render, part of every file audit, measures."""
    import io

    import numpy as np

    import gguf_schema
    from gguf_schema import make_field
    from gguf_schema.check.templates import audit_template

    trick = TRICKS[name]
    if any(f.severity == "error" for f in audit_template(trick.source)):
        return
    buf = io.BytesIO()
    fields = [make_field("general.architecture", "llama"), make_field("tokenizer.chat_template", trick.source)]
    gguf_schema.save(buf, fields, {"w": np.zeros(4, np.float32)})
    result = gguf_schema.audit(buf.getvalue())
    assert result.exit_code == 1
    assert "GGUF-T502" in {f.rule for f in result.findings if f.severity == "error"}
