"""The bulk harness of the containment oracle (benchmarks/template_oracle_bulk.py) on a few dozen pairs.

The scaled run is the benchmark; here: its generator, persistent children and check agree with the
oracle on a small seeded sample (0 containment failures), and the check can fail: a prediction made
unsound on purpose (no names at all) is caught on a real template.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("jinja2")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="persistent children with rlimits (POSIX)")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bulk():
    spec = importlib.util.spec_from_file_location(
        "template_oracle_bulk", ROOT / "benchmarks" / "template_oracle_bulk.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pool(bulk):
    p = bulk.Pool(1)
    yield p
    p.close()


def test_a_seeded_sample_is_contained(bulk, pool):
    tally = bulk.run_chunk(pool, 2, 8, 8)
    real = {k: v for k, v in tally.failures.items() if bulk.is_failure(k)}
    assert not real, "\n\n".join(tally.examples[k] for k in real)
    assert tally.templates == 8
    assert tally.pairs >= 40
    assert tally.pairs_rendered > 0
    assert tally.renders == 2 * tally.pairs_rendered  # each rendered pair: unsandboxed and sandboxed
    assert tally.kinds.get("ok", 0) > 0


def test_an_unsound_prediction_is_caught(bulk, pool):
    source = (ROOT / "tests" / "data" / "templates" / "real" / "chujiezheng__chatml.jinja").read_text(encoding="utf-8")
    case = bulk.Case("test", source, [1, 4], bulk.CONFIGS[0], bulk.CONFIGS[4])
    assert not bulk.judgement(source).flagged
    assert not [f for f in bulk.run_case(pool, case) if bulk.is_failure(f.cls)]
    caught = bulk.run_case(pool, case, unsound=True)
    names = {f.detail.split("'")[1] for f in caught if f.cls == "predict:name"}
    assert {"role", "content"} <= names
    assert {f.config for f in caught} == {bulk.CONFIGS[0], bulk.CONFIGS[4]}  # in both environments


def test_the_generator_is_the_oracle_grammar_and_seeded(bulk):
    a = [bulk.draw_case(bulk.Draws(7), 6).source for _ in range(1)]
    b = [bulk.draw_case(bulk.Draws(7), 6).source for _ in range(1)]
    assert a == b
    draw = bulk.Draws(11)
    origins = {bulk.draw_case(draw, 6).origin for _ in range(60)}
    assert origins == {"random", "mutant", "laundered", "known"}


def test_a_failure_is_minimized(bulk, pool):
    source = "{% for m in messages %}{{ m['role'] }}{{ 'x' ~ 'y' }}{% endfor %}{{ bos_token }}"
    small, shown = bulk.shrink(pool, source, "predict:name", bulk.CONFIGS[0], 1, 20.0, True)
    assert shown is not None and shown.cls == "predict:name"
    assert len(small) < len(source)
    assert "role" in small  # the lookup that fails is kept
