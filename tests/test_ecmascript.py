"""--tensor-type expressions: gguf_schema.tools.ecmascript against libstdc++'s std::regex (ECMAScript, as
llama-quantize compiles them), recorded over generated expressions and names (tests/data/ecmascript_regex):
every expression is matched exactly as std::regex matches it, or refused; never one std::regex refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.tools.ecmascript import compile_ecmascript
from gguf_schema.tools.requantize import parse_tensor_type, requantize

from .helpers import run_cli

DATA = json.loads((Path(__file__).parent / "data" / "ecmascript_regex" / "cases.json").read_text())


def test_same_matches_as_std_regex_or_refused():
    names = [n.encode("utf-8") for n in DATA["names"]]
    accepted = refused = 0
    for case in DATA["cases"]:
        e = case["expression"]
        try:
            rx = compile_ecmascript(e)
        except ValueError:
            assert not case.get("usual"), f"{e!r}: made of the usual constructs only, yet refused"
            refused += "matches" in case
            continue
        assert "error" not in case, f"{e!r}: std::regex refuses it (error {case.get('error')}), we accept it"
        ours = "".join("1" if rx.search(n) else "0" for n in names)
        assert ours == case["matches"], (e, ours, case["matches"])
        accepted += 1
    std_accepted = sum("matches" in c for c in DATA["cases"])
    assert accepted + refused == std_accepted
    assert sum(bool(c.get("usual")) for c in DATA["cases"]) > 600  # most of what was generated: all accepted


def test_posix_class_plans_as_llama_quantize(tmp_path):
    """[[:digit:]] is a class of digits to llama-quantize's engine: the layers it names get the type."""
    rng = np.random.default_rng(0)
    tensors = {f"blk.{i}.ffn_up.weight": rng.standard_normal((4, 256)).astype(np.float32) for i in range(12)}
    src = tmp_path / "m.gguf"
    gguf_schema.save(src, {"general.architecture": "llama", "llama.block_count": np.uint32(12)}, tensors)
    plan = requantize(src, tmp_path / "o.gguf", "Q4_0", tensor_types=[r"blk\.1[[:digit:]]\.=q8_0"], dry_run=True)
    got = {r.name: r.new_type.name for r in plan.tensors}
    assert got == {n: "Q8_0" if n.startswith(("blk.10.", "blk.11.")) else "Q4_0" for n in tensors}


@pytest.mark.parametrize("expr", [r"(a)\1", "[]a]", "attn_v*+", r"\Aattn", "(?i)attn", "[[=a=]]"])
def test_what_cannot_be_matched_the_same_is_refused(tmp_path, expr):
    with pytest.raises(
        ValueError, match=r"is not a regular expression matched as llama-quantize matches it \(at \d+\): "
    ):
        parse_tensor_type(f"{expr}=q8_0")
    src = tmp_path / "m.gguf"
    gguf_schema.save(src, {"general.architecture": "llama"}, {"blk.0.attn_v.weight": np.zeros((2, 256), np.float32)})
    r = run_cli("quantize", str(src), str(tmp_path / "o.gguf"), "--type", "Q4_0", "--tensor-type", f"{expr}=q8_0")
    assert (
        r.returncode == 2
        and b"matched as llama-quantize matches it (at " in r.stderr
        and not (tmp_path / "o.gguf").exists()
    )
