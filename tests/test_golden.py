"""Tensor data against ggml's own outputs: the golden vectors in tests/data/golden (origins in its SOURCES).

Each file holds input rows built to hit the edge cases (zeros, constants, subnormals, outliers,
signed zeros, heavy tails, values on a grid), and what ggml's C code made of them: quantized
bytes without an importance matrix (``q``), from the reference quantizer (``q_ref``), with
the file's importance matrix (``q_imatrix``), and the decoded floats (``deq``). Every
comparison is bit for bit, with each engine.
"""

from __future__ import annotations

import numpy as np
import pytest

from gguf_schema.format.types import GGMLType
from gguf_schema.tensors import CODECS, COMPILED_DEQUANTIZE, COMPILED_QUANTIZE, QUANTIZE_TYPES, dequantize, quantize
from gguf_schema.tensors.engine import _COMPILED_ROWS

from .helpers import GOLDEN_MANIFEST as MANIFEST
from .helpers import ggml_golden, golden_vectors


def golden(name: str, newer: bool = True) -> dict[str, np.ndarray]:
    """The golden vectors of a type; ``newer``: with the quantized bytes of a newer ggml where it
    changed the quantizer (tests/data/golden/IQ1_M.npz), else ggml d99724f2b's own (the decoders did not change)."""
    return golden_vectors(name) if newer else ggml_golden(name)


def engines(types: list[str], compiled: frozenset[GGMLType]) -> list:
    return [pytest.param(t, "numpy", id=f"{t}-numpy") for t in types] + [
        pytest.param(t, "compiled", id=f"{t}-compiled") for t in types if GGMLType[t] in compiled
    ]


TYPES = sorted(MANIFEST)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_manifest_covers_the_types_we_expect():
    assert len(MANIFEST) == 28
    for name, entry in MANIFEST.items():
        t = GGMLType[name]
        assert int(t) == entry["id"]
        assert t.row_nbytes(512) == entry["row_bytes"]


@pytest.mark.parametrize("name, engine", engines(TYPES, COMPILED_DEQUANTIZE))
def test_dequantize_gives_ggmls_floats(name, engine):
    g = golden(name, newer=False)
    t = GGMLType[name]
    for q, deq in (("q", "deq"), ("q_imatrix", "deq_imatrix")):
        if q not in g:
            continue
        if deq not in g:  # deq was decoded from q_ref where there is no q
            continue
        got = dequantize(g[q], t, g["x"].shape, engine=engine)
        assert np.array_equal(bits(got), bits(g[deq])), (
            f"{name} {q}: rows differ: {np.flatnonzero((bits(got) != bits(g[deq])).any(1))}"
        )
    if "q" not in g and "q_ref" in g and "deq" in g:
        got = dequantize(g["q_ref"], t, g["x"].shape, engine=engine)
        assert np.array_equal(bits(got), bits(g["deq"]))


QUANT_TYPES = [n for n in TYPES if GGMLType[n] in QUANTIZE_TYPES and not CODECS[GGMLType[n]].needs_imatrix]
# (IQ2_XXS, IQ2_XS, IQ1_S have only q_imatrix: test_quantize_iq.py)


REF_DIFFERS = {"IQ4_NL"}
"""Types whose ggml reference quantizer writes other bytes than ggml_quantize_chunk (what
quantize() matches); test_quantize_k.py checks IQ4_NL's reference on its own."""


def same_rows(got: np.ndarray, want: np.ndarray, what: str) -> None:
    same = (got == want).all(axis=1)
    assert same.all(), f"{what}: rows {np.flatnonzero(~same).tolist()} differ"


@pytest.mark.parametrize("name, engine", engines(QUANT_TYPES, COMPILED_QUANTIZE))
def test_quantize_gives_ggmls_bytes(name, engine):
    g = golden(name)
    got = quantize(g["x"], GGMLType[name], engine=engine)
    checked = 0
    for key in ("q", "q_ref"):
        if key in g and not (key == "q_ref" and name in REF_DIFFERS):
            same_rows(got, g[key], f"{name} vs ggml's {key}")
            checked += 1
    assert checked


IMATRIX_TYPES = [n for n in QUANT_TYPES if "q_imatrix" in MANIFEST[n]["arrays"]]


def imatrix_engines() -> list:
    """numpy for every type; compiled where the path the imatrix takes is compiled."""
    cases = []
    for name in IMATRIX_TYPES:
        t = GGMLType[name]
        cases.append(pytest.param(name, "numpy", id=f"{name}-numpy"))
        rows = CODECS[t].quantize_rows is not None
        if (t in _COMPILED_ROWS) if rows else (t in COMPILED_QUANTIZE):
            cases.append(pytest.param(name, "compiled", id=f"{name}-compiled"))
    return cases


@pytest.mark.parametrize("name, engine", imatrix_engines())
def test_quantize_with_importance_matrix_gives_ggmls_bytes(name, engine):
    # every type ggml_quantize_chunk takes an imatrix for: the weighted searches where ggml has
    # them (K-quants, Q4_0..Q5_1, IQ), the unweighted bytes where ggml ignores the weights
    g = golden(name)
    got = quantize(g["x"], GGMLType[name], imatrix=g["imatrix"], engine=engine)
    same_rows(got, g["q_imatrix"], f"{name} vs ggml's q_imatrix")


def test_subnormal_rows_quantize_to_ggmls_zero_blocks():
    # 1/d overflows to infinity for a block of ~1e-40 values: ggml's casts then give level 0
    # (Q4_0/Q5_0) or an all-zero block (Q2_0); both engines must write the same bytes.
    g = golden("Q2_0")
    row = g["x"][41:42]
    assert np.abs(row).max() < 1e-38 and np.abs(row).max() > 0
    for engine in ("numpy", "auto"):
        assert not quantize(row, GGMLType.Q2_0, engine=engine).any()
        q4 = quantize(row, GGMLType.Q4_0, engine=engine).reshape(-1, 18)
        assert (q4[:, 2:] == 0).all()


def test_packed_iq1_m_vectors_are_the_older_ggmls():
    """The golden set's IQ1_M bytes come from ggml d99724f2b, before llama.cpp PR #28706 changed
    IQ1_M's search; we follow the newer ggml (tests/data/golden/IQ1_M.npz): our bytes are the old
    ones on every row but those where the two ggmls differ (one without, one with an imatrix)."""
    old, new = golden("IQ1_M", newer=False), golden("IQ1_M")
    for key, imatrix in (("q", None), ("q_imatrix", old["imatrix"])):
        changed = np.flatnonzero((old[key] != new[key]).any(axis=1))
        assert len(changed) == 1, (key, changed)
        got = quantize(old["x"], GGMLType.IQ1_M, imatrix=imatrix)
        assert np.array_equal(got, new[key])
        assert np.flatnonzero((got != old[key]).any(axis=1)).tolist() == changed.tolist()
