"""The searching quantizers: Q2_K..Q6_K, IQ4_NL, IQ4_XS and the importance paths of Q4_0..Q5_1.

ggml's own bytes for them (with and without an importance matrix) are checked in
test_golden.py; here: the two engines against each other on hostile rows, across chunk and
thread splits; IQ4_NL's reference quantizer against ggml's bytes; the rules quantize() follows
for non-finite input and importance matrices.
"""

from __future__ import annotations

import numpy as np
import pytest

from gguf_schema.format.types import GGMLType
from gguf_schema.tensors import CODECS, COMPILED_QUANTIZE, engine, quantize
from gguf_schema.tensors.iquants import quantize_iq4_nl_ref

from .test_golden import golden

T = GGMLType
SEARCHING = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
compiled_only = pytest.mark.skipif(not COMPILED_QUANTIZE, reason="gguf_schema.tensors._kernels is not built here")


def hostile_rows(cols: int = 512, seed: int = 0) -> np.ndarray:
    """Rows of float32 that reach every branch of the searches: ordinary values at many scales,
    subnormals, values near float32's limits (sums of squares overflow), zeros of both signs,
    constants, exact halves and ties, a lone outlier, and blocks mixing them."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    rows = [n(cols) * 10.0**e for e in (-3, 0, 2, 5)]
    rows += [
        n(cols) * 1e-40,
        n(cols) * 1e-20,
        n(cols) * 3e37,
        rng.uniform(-3.4e38, 3.4e38, cols),
        rng.uniform(2e38, 3.4e38, cols),
        np.zeros(cols),
        np.full(cols, -0.0),
        np.full(cols, 0.375),
        rng.integers(-16, 16, cols) + 0.5,
        rng.integers(-8, 8, cols).astype(float),
    ]
    ties = n(cols)
    ties[1::2] = -ties[::2]
    outlier = n(cols)
    outlier[cols // 3] = 1e6
    mixed = n(cols)
    mixed[::3] *= 1e-40
    mixed[1::7] = 0.0
    mixed[:32] = 3e38
    rows += [ties, outlier, mixed, np.abs(n(cols)), -np.abs(n(cols))]
    return np.array(rows, dtype=np.float32)


def importance(cols: int = 512, seed: int = 1) -> list[np.ndarray]:
    """Weights as imatrix files hold them, with zero weights, and tiny and huge ones."""
    rng = np.random.default_rng(seed)
    w = (np.abs(rng.standard_normal(cols)) + 0.05).astype(np.float32)
    zeros = w.copy()
    zeros[::5] = 0
    extreme = (w * np.where(np.arange(cols) % 2, 1e30, 1e-30)).astype(np.float32)
    return [w, zeros, extreme]


@compiled_only
@pytest.mark.parametrize("t", SEARCHING, ids=lambda t: t.name)
def test_engines_agree_on_hostile_rows_across_chunks_and_threads(t, monkeypatch):
    # small chunks: every call is split into many pieces, handed to 1 or 2 threads
    monkeypatch.setattr(engine, "_QUANTIZE_CHUNK_ELEMENTS", 2048)
    monkeypatch.setattr(engine, "_COMPILED_QUANTIZE_CHUNK_ELEMENTS", 4096)
    x = hostile_rows()
    for w in [None, *importance()]:
        ref = quantize(x, t, imatrix=w, engine="numpy", threads=1)
        assert ref.shape == (len(x), t.row_nbytes(512))
        assert np.array_equal(quantize(x, t, imatrix=w, engine="numpy", threads=2), ref)
        for threads in (1, 2):
            got = quantize(x, t, imatrix=w, engine="compiled", threads=threads)
            assert np.array_equal(got, ref), (
                f"{t.name} imatrix={w is not None} threads={threads}: rows "
                f"{np.flatnonzero((got != ref).any(1)).tolist()} differ"
            )


@pytest.mark.parametrize("t", SEARCHING, ids=lambda t: t.name)
def test_row_quantizer_without_weights_writes_the_block_quantizers_bytes(t):
    # ggml_quantize_chunk without an imatrix is the block quantizer, in both entry points
    x = hostile_rows(256, seed=3)
    want = quantize(x, t, engine="numpy")
    out = np.zeros_like(want)
    with np.errstate(all="ignore"):
        CODECS[t].quantize_rows(x, out, None)
    assert np.array_equal(out, want)
    if t in engine._COMPILED_ROWS:
        out[:] = 0
        engine.compiled_kernels.quantize_rows(int(t), x, out, 256, None)
        assert np.array_equal(out, want)


def test_iq4_nl_reference_quantizer_gives_ggmls_bytes():
    # ggml's quantize_row_iq4_nl_ref over all 48 rows in one call: it differs from what
    # ggml_quantize_chunk writes (no trial scales; an all-zero block, row 36 here, keeps the
    # levels of the block before it)
    g = golden("IQ4_NL")
    got = quantize_iq4_nl_ref(g["x"]).reshape(len(g["x"]), -1)
    assert np.array_equal(got, g["q_ref"])
    assert not np.array_equal(got, g["q"])
    zero = g["x"][36].reshape(-1, 32)
    assert not zero.any() and np.array_equal(got[36, -16:], got[35, -16:])


def test_all_zero_super_blocks_follow_ggml():
    # Q6_K writes an all-zero block; IQ4_XS stores d = -0.0 (f16 0x8000) with every level at
    # index 8 (value 1, nearest to 0); Q4_K a zero scale and minimum
    x = np.zeros((1, 256), np.float32)
    for eng in ("numpy", "auto"):
        assert not quantize(x, T.Q6_K, engine=eng).any()
        xs = quantize(x, T.IQ4_XS, engine=eng)[0]
        assert xs[:2].tolist() == [0x00, 0x80] and (xs[8:] == 0x88).all()
        assert not quantize(x, T.Q4_K, engine=eng)[0, :16].any()


@pytest.mark.parametrize("engine_name", ["numpy", "auto"])
@pytest.mark.parametrize("t", [T.Q4_K, T.IQ4_XS, T.Q4_0, T.Q8_0, T.MXFP4], ids=lambda t: t.name)
def test_nan_and_infinity_are_refused_naming_the_first(t, engine_name):
    x = np.zeros((3, 512), np.float32)
    x[2, 300] = np.inf
    x[1, 7] = np.nan
    with pytest.raises(ValueError, match=rf"non-finite values to {t.name}: row 1, column 7 is nan"):
        quantize(x, t, engine=engine_name)
    if CODECS[t].quantize_rows is not None:
        with pytest.raises(ValueError, match="row 1, column 7 is nan"):
            quantize(x, t, imatrix=np.ones(512, np.float32), engine=engine_name)
    x[1, 7] = 0
    with pytest.raises(ValueError, match="row 2, column 300 is inf"):
        quantize(x, t, engine=engine_name)
    with pytest.raises(ValueError, match=r"element \(2, 1, 44\) \(row 5, column 44 of the rows\) is inf"):
        quantize(x.reshape(3, 2, 256), t, engine=engine_name)


def test_float64_beyond_float32_is_refused_and_plain_types_keep_nan():
    x = np.zeros(64)
    x[5] = 1e39
    with pytest.raises(ValueError, match=r"row 0, column 5 is 1e\+39, inf as float32"):
        quantize(x, T.Q8_0)
    nan = np.array([np.nan, 1.0], np.float32)
    assert quantize(nan, T.F16).view("<u2").tolist() == [[0x7E00, 0x3C00]]
    assert np.isnan(quantize(nan, T.F32).view("<f4")[0, 0])


def test_importance_matrix_argument_is_checked():
    x = np.zeros((2, 256), np.float32)
    with pytest.raises(TypeError, match="imatrix must be a numpy array of 256 float32 weights, got list"):
        quantize(x, T.Q4_K, imatrix=[1.0] * 256)
    with pytest.raises(TypeError, match="got a complex64 array"):
        quantize(x, T.Q4_K, imatrix=np.ones(256, np.complex64))
    with pytest.raises(ValueError, match=r"one weight per column: 256 for these Q4_K rows, got shape \(512,\)"):
        quantize(x, T.Q4_K, imatrix=np.ones(512, np.float32))
    with pytest.raises(ValueError, match=r"got shape \(2, 256\)"):
        quantize(x, T.Q4_K, imatrix=np.ones((2, 256), np.float32))
    w = np.ones(256, np.float32)
    w[9] = np.inf
    with pytest.raises(ValueError, match="imatrix must be finite: weight 9 is inf"):
        quantize(x, T.Q4_K, imatrix=w)
    # float64 and integer weights are taken as float32
    ones = quantize(x + 1, T.Q4_K, imatrix=np.ones(256, np.float32))
    assert np.array_equal(quantize(x + 1, T.Q4_K, imatrix=np.ones(256)), ones)
    assert np.array_equal(quantize(x + 1, T.Q4_K, imatrix=np.ones(256, np.int32)), ones)


def test_importance_changes_the_bytes_where_ggml_uses_it():
    # a heavily weighted column is reproduced more closely: the weighted search is really used
    from gguf_schema.tensors import dequantize

    x = np.random.default_rng(7).standard_normal((64, 256)).astype(np.float32)
    w = np.full(256, 0.01, np.float32)
    w[::16] = 100.0
    for t in (T.Q3_K, T.Q4_K, T.IQ4_XS, T.Q4_0):
        plain = dequantize(quantize(x, t), t, x.shape)
        weighted = dequantize(quantize(x, t, imatrix=w), t, x.shape)
        err = lambda y: float(np.abs(y - x)[:, ::16].mean())  # noqa: E731
        assert err(weighted) < 0.8 * err(plain), t.name
