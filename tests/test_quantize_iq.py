"""Quantizers of the IQ lattice types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S).

Against ggml's own bytes (the golden vectors in tests/data/golden, with and without an
importance matrix), both engines; the engines against each other on rows the golden set lacks;
the rows ggml aborts on; and the lattices' neighbour lists against their definition.
"""

from __future__ import annotations

import numpy as np
import pytest

from gguf_schema.format.types import GGMLType
from gguf_schema.tensors import COMPILED_QUANTIZE, dequantize, engine, quantize
from gguf_schema.tensors import lattice as lat_mod
from gguf_schema.tensors.registry import CODECS

from .helpers import GOLDEN, golden_vectors

T = GGMLType
LATTICE_TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M]
NEEDS_IMATRIX = {T.IQ2_XXS, T.IQ2_XS, T.IQ1_S}


def engines_for(t: GGMLType) -> list[str]:
    return ["numpy"] + (["compiled"] if t in COMPILED_QUANTIZE else [])


def both(types=LATTICE_TYPES) -> list:
    return [pytest.param(t, e, id=f"{t.name}-{e}") for t in types for e in ("numpy", "compiled")]


def need_engine(t: GGMLType, eng: str) -> None:
    if eng not in engines_for(t):
        pytest.skip("gguf_schema.tensors._kernels is not built here")


def weights(n: int, seed: int = 0) -> np.ndarray:
    return (np.abs(np.random.default_rng(seed).normal(size=n)) + 0.05).astype(np.float32)


def outcome(x: np.ndarray, t: GGMLType, imatrix: np.ndarray | None, eng: str, threads: int = 1):
    """The bytes, or the ValueError's message."""
    try:
        return quantize(x, t, imatrix=imatrix, engine=eng, threads=threads)
    except ValueError as e:
        return str(e)


# ---------------------------------------------------------------------------- ggml's bytes


@pytest.mark.parametrize("t, eng", both())
def test_golden_vectors_give_ggmls_bytes(t, eng):
    need_engine(t, eng)
    g = golden_vectors(t.name)
    if "q" in g:
        got = quantize(g["x"], t, engine=eng)
        assert np.array_equal(got, g["q"]), f"q: rows {np.flatnonzero((got != g['q']).any(1)).tolist()}"
        assert np.array_equal(g["q_ref"] if "q_ref" in g else g["q"], g["q"])  # ggml's *_ref: the same quantizer
    else:
        assert t in NEEDS_IMATRIX
    got = quantize(g["x"], t, imatrix=g["imatrix"], engine=eng)
    assert np.array_equal(got, g["q_imatrix"]), (
        f"q_imatrix: rows {np.flatnonzero((got != g['q_imatrix']).any(1)).tolist()}"
    )


# ---------------------------------------------------------------------------- the engines agree


def varied_rows(n: int, seed: int) -> np.ndarray:
    """Normal rows at several scales, zero sub-blocks (IQ3_S's slots), values on IQ levels
    (ties in the rounding and among neighbours), repeated values (ties in IQ1's sort),
    subnormal and large finite values."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(12, n)) * 10.0 ** rng.uniform(-3, 3, (12, 1))
    x[1].reshape(-1, 32)[::3] = 0
    x[2].reshape(-1, 16)[1::4] = 0
    x[3] = rng.integers(-4, 5, n) * 0.25
    x[4] = (2 * rng.integers(0, 8, n) + 1) * rng.choice([-1, 1], n) * 0.01
    x[5] = rng.choice(rng.normal(size=3), n)
    x[6] = rng.normal(size=n) * 1e-41
    x[7] = rng.normal(size=n) * 1e11
    x[8, ::2] = -0.0
    x[9] = np.abs(x[9])
    return x.astype(np.float32)


@pytest.mark.parametrize("t", LATTICE_TYPES, ids=lambda t: t.name)
def test_engines_agree_on_varied_rows(t):
    need_engine(t, "compiled")
    x = varied_rows(512, int(t))
    for imatrix in [weights(512, int(t))] if t in NEEDS_IMATRIX else [None, weights(512, int(t))]:
        a = quantize(x, t, imatrix=imatrix, engine="numpy")
        assert np.array_equal(quantize(x, t, imatrix=imatrix, engine="compiled"), a)


@pytest.mark.parametrize("t", LATTICE_TYPES, ids=lambda t: t.name)
def test_compiled_rows_do_not_depend_on_threads_or_chunks(t):
    need_engine(t, "compiled")
    x = np.random.default_rng(1).standard_t(3, size=(600, 256)).astype(np.float32)  # 3 chunks of rows
    w = weights(256, 1)
    one = quantize(x, t, imatrix=w, engine="compiled", threads=1)
    assert np.array_equal(quantize(x, t, imatrix=w, engine="compiled", threads=2), one)
    assert np.array_equal(quantize(x[:7], t, imatrix=w, engine="numpy"), one[:7])


@pytest.mark.parametrize("t", LATTICE_TYPES, ids=lambda t: t.name)
def test_round_trip_error_is_bounded(t):
    x = np.random.default_rng(2).normal(size=(8, 1024)).astype(np.float32)
    w = weights(1024, 2)
    y = dequantize(quantize(x, t, imatrix=w), t, x.shape)
    rel = float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x**2)))
    bits_per_value = 8 * t.type_size / t.block_size
    bound = {
        T.IQ1_S: 0.62,
        T.IQ1_M: 0.55,
        T.IQ2_XXS: 0.45,
        T.IQ2_XS: 0.40,
        T.IQ2_S: 0.36,
        T.IQ3_XXS: 0.26,
        T.IQ3_S: 0.22,
    }[t]
    assert 0.05 < rel < bound, (bits_per_value, rel)


@pytest.mark.parametrize("t", LATTICE_TYPES, ids=lambda t: t.name)
def test_calls_with_nothing_to_search_give_zero_blocks(t):
    # every sub-block below the type's threshold (ggml's golden row of zeros quantizes to zero bytes)
    w = weights(512)
    for x in (np.zeros((2, 512), np.float32), np.full((1, 512), -0.0, np.float32)):
        for eng in engines_for(t):
            assert not quantize(x, t, imatrix=w, engine=eng).any()
    tiny = np.random.default_rng(5).normal(size=(2, 512)).astype(np.float32) * np.float32(1e-30)
    got = [quantize(tiny, t, imatrix=w, engine=eng) for eng in engines_for(t)]
    assert all(np.array_equal(g, got[0]) for g in got)


def test_iq3_s_writes_sub_blocks_after_a_zero_one_into_earlier_slots():
    # ggml's IQ3_S advances its qs/signs slots only past non-zero sub-blocks: with sub-block 0
    # all zero, sub-block 1 lands in slot 0 and the last slot stays empty; qh keeps its place.
    x = np.random.default_rng(3).normal(size=(1, 256)).astype(np.float32)
    x[0, :32] = 0
    for eng in engines_for(T.IQ3_S):
        q = quantize(x, T.IQ3_S, engine=eng)[0]
        qs, qh, signs = q[2:66].reshape(8, 8), q[66:74], q[74:106].reshape(8, 4)
        assert qh[0] == 0 and not qs[7].any() and not signs[7].any()
        shifted = x.copy()
        shifted[0, :224], shifted[0, 224:] = x[0, 32:], 0  # the same sub-blocks, zero one last
        q2 = quantize(shifted, T.IQ3_S, engine=eng)[0]
        assert np.array_equal(q2[2:66].reshape(8, 8)[:7], qs[:7])
        assert np.array_equal(q2[74:106].reshape(8, 4)[:7], signs[:7])


# ---------------------------------------------------------------------------- where ggml aborts


def hostile_rows() -> np.ndarray:
    """Rows of huge magnitudes: normal values times 1e16 (cubes in the weighted distances
    overflow float32), values near FLT_MAX, a single 3e20 among normal values."""
    x = np.random.default_rng(3).normal(size=(3, 512)).astype(np.float32)
    x[0] *= np.float32(1e16)
    x[1] = np.sign(x[1]) * np.float32(3e38)
    x[2, 300] = 3e20
    return x


# The hostile rows ggml's build aborts on (GGML_ASSERT), by type and importance matrix (with W
# below), as found by running ggml's ggml_quantize_chunk on each row in a subprocess while
# writing these tests; ggml quantizes the other rows.
ABORTS = {
    (T.IQ2_XXS, True): {0, 1},
    (T.IQ2_XS, True): {0, 1, 2},
    (T.IQ2_S, False): {0, 2},
    (T.IQ2_S, True): {0, 2},
    (T.IQ3_XXS, False): {0, 1, 2},
    (T.IQ3_XXS, True): {0, 1, 2},
    (T.IQ3_S, False): {0, 1, 2},
    (T.IQ3_S, True): {0, 1, 2},
    (T.IQ1_S, True): set(),
    (T.IQ1_M, False): {2},  # (ggml before llama.cpp PR #28706's prefix sums aborted on rows 0 to 2,
    (T.IQ1_M, True): set(),  # and 1, 2 with weights: its sums overflowed where these do not)
}
W = np.linspace(0.5, 2.0, 512, dtype=np.float32)


@pytest.mark.parametrize("t", LATTICE_TYPES, ids=lambda t: t.name)
def test_rows_ggml_aborts_on_raise_the_same_value_error_in_both_engines(t):
    x = hostile_rows()
    for with_imatrix in [True] if t in NEEDS_IMATRIX else [False, True]:
        imatrix = W if with_imatrix else None
        for i in range(len(x)):
            got = [outcome(x[i : i + 1], t, imatrix, eng) for eng in engines_for(t)]
            if i in ABORTS[t, with_imatrix]:
                assert all(g == got[0] for g in got), got  # the same message in both engines
                assert isinstance(got[0], str), (i, with_imatrix)
                assert got[0].startswith(
                    f"ggml's {t.name} quantizer aborts on a block of 256 values (magnitudes up to "
                )
                assert ("importance up to " in got[0]) == with_imatrix
            else:  # rows ggml quantizes: bytes, alike
                assert not isinstance(got[0], str), got[0]
                assert all(np.array_equal(g, got[0]) for g in got)
    bad = min(ABORTS[t, True], default=None)
    if bad is not None:  # one hostile row among ordinary ones: the whole call fails
        mixed = np.concatenate([np.random.default_rng(4).normal(size=(5, 512)).astype(np.float32), x[bad : bad + 1]])
        with pytest.raises(ValueError, match=f"ggml's {t.name} quantizer aborts"):
            quantize(mixed, t, imatrix=W)


@pytest.mark.parametrize("t", sorted(NEEDS_IMATRIX), ids=lambda t: t.name)
def test_types_ggml_quantizes_only_with_an_importance_matrix(t):
    assert CODECS[t].needs_imatrix
    x = np.ones((1, 256), np.float32)
    for eng in engines_for(t):
        with pytest.raises(ValueError, match=f"ggml quantizes {t.name} only with an importance matrix"):
            quantize(x, t, engine=eng)
    out = np.zeros((1, t.type_size), np.uint8)
    with pytest.raises(ValueError, match=f"ggml quantizes {t.name} only with an importance matrix"):
        CODECS[t].quantize_rows(x, out, None)
    if t in COMPILED_QUANTIZE:
        with pytest.raises(ValueError, match=f"ggml quantizes {t.name} only with an importance matrix"):
            engine.compiled_kernels.quantize_rows(int(t), x, out, 256, None)
    assert not any(CODECS[u].needs_imatrix for u in set(LATTICE_TYPES) - NEEDS_IMATRIX)


# ---------------------------------------------------------------------------- lattices


@pytest.mark.parametrize(
    "name, nwant", [("IQ2XXS", 2), ("IQ2XS", 2), ("IQ2S", 1), ("IQ1S", 3), ("IQ3XXS", 2), ("IQ3S", 3)]
)
def test_neighbour_lists_are_the_nearest_grid_points_by_distance_then_index(name, nwant):
    lat = lat_mod.lattice(name)
    points, dim = lat.levels.shape
    top = 2 if dim == 8 else 7
    assert np.array_equal(lat.code[lat.key(lat.levels.T)], np.arange(points))  # every point maps to itself
    rng = np.random.default_rng(len(name))
    for _ in range(25):
        lv = rng.integers(0, top + 1, dim)
        d = ((lat.levels.astype(int) - lv) ** 2).sum(axis=1)
        if d.min() == 0:
            assert lat.neighbours_of(lv.tolist()) == []
            continue
        limit = np.unique(d)[:nwant].max()
        expected = sorted(np.flatnonzero(d <= limit).tolist(), key=lambda p: (d[p], p))
        assert lat.neighbours_of(lv.tolist()) == expected
    reachable = (top + 1) ** dim
    assert len(lat.offsets) - 1 == reachable - points  # one list per key a search can produce off the grid


@pytest.mark.parametrize("eng", ["numpy", "compiled"])
def test_iq1_m_follows_ggmls_prefix_sum_search(eng):
    """Rows on which ggml's IQ1_M search before and after llama.cpp PR #28706 give other bytes:
    both engines give the newer ggml's (tests/data/golden/SOURCES.md)."""
    need_engine(T.IQ1_M, eng)
    with np.load(GOLDEN / "IQ1_M.npz") as z:
        g = {k: z[k] for k in z.files}
    got = quantize(g["search_x_plain"], T.IQ1_M, engine=eng)
    assert np.array_equal(got, g["search_q_plain"])
    got = quantize(g["search_x_imatrix"], T.IQ1_M, imatrix=g["search_imatrix"], engine=eng)
    assert np.array_equal(got, g["search_q_imatrix"])
    deq = dequantize(got, T.IQ1_M, g["search_x_imatrix"].shape)
    assert np.array_equal(deq.view(np.uint32), g["search_deq_imatrix"].view(np.uint32))
