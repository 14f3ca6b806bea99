"""Block layouts, byte order, dequantization and quantization of ggml tensor data."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gguf_schema.format.types import GGMLType
from gguf_schema.tensors import (
    COMPILED_DEQUANTIZE,
    COMPILED_QUANTIZE,
    DEQUANTIZE_TYPES,
    LAYOUTS,
    QUANTIZE_TYPES,
    block_dtype,
    block_struct,
    byteswap,
    dequantize,
    quantize,
)

from .helpers import IQ_LATTICE, bits

ALL_TYPES = [t for t in GGMLType if not t.removed]
QUANTIZED = [t for t in ALL_TYPES if t.quantized]


def random_blocks(t: GGMLType, n: int, seed: int = 0) -> np.ndarray:
    """n random blocks of t as (n, type_size) uint8, every ggml_half field a finite value."""
    rng = np.random.default_rng(seed + int(t))
    raw = rng.integers(0, 256, (n, t.type_size), dtype=np.uint8)
    dt = block_dtype(t)
    for name in dt.names:
        sub, off = dt.fields[name][:2]
        if sub.base == np.dtype("<f2"):
            vals = rng.uniform(-2, 2, (n, sub.itemsize // 2)).astype("<f2")
            raw[:, off : off + sub.itemsize] = vals.view(np.uint8).reshape(n, -1)
    if t == GGMLType.MXFP4:
        raw[:, 0] = rng.integers(100, 150, n)  # keep 2**(e-128) scales finite
    if t == GGMLType.Q8_K:
        raw[:, :4] = rng.uniform(-2, 2, (n, 1)).astype("<f4").view(np.uint8)
    if t == GGMLType.IQ1_M:  # the f16 scale is spread over the top nibbles of 4 uint16s
        d = rng.uniform(0.1, 2, n).astype("<f2").view("<u2")
        sc = raw[:, 48:56].copy().view("<u2") & 0x0FFF
        for k in range(4):
            sc[:, k] |= ((d >> (4 * k)) & 0xF) << 12
        raw[:, 48:56] = sc.view(np.uint8)
    return raw


def as_shape(t: GGMLType, n_blocks: int) -> tuple[int, int]:
    return 4, n_blocks // 4 * t.block_size


# ---------------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("t", QUANTIZED, ids=lambda t: t.name)
def test_block_layout_size_matches_type_size(t):
    assert block_dtype(t).itemsize == t.type_size
    assert block_dtype(t, "big").itemsize == t.type_size
    assert block_struct(t).sizeof() == t.type_size
    assert block_struct(t).sizeof() == sum(np.dtype(k).itemsize * c for _, k, c in LAYOUTS[t])


def test_layouts_cover_every_quantized_type():
    assert set(LAYOUTS) == set(QUANTIZED)
    assert set(ALL_TYPES) == DEQUANTIZE_TYPES


def test_block_field_names_follow_ggml():
    assert block_dtype(GGMLType.Q4_K).names == ("d", "dmin", "scales", "qs")
    assert block_dtype(GGMLType.Q6_K).names == ("ql", "qh", "scales", "d")
    assert block_dtype(GGMLType.Q8_K).names == ("d", "qs", "bsums")
    assert block_dtype(GGMLType.MXFP4).names == ("e", "qs")
    assert block_dtype(GGMLType.Q6_K)["scales"].base == np.dtype("i1")


def test_block_struct_parses_like_the_dtype():
    raw = random_blocks(GGMLType.Q4_K, 1)[0].tobytes()
    parsed = block_struct(GGMLType.Q4_K).parse(raw)
    view = np.frombuffer(raw, dtype=block_dtype(GGMLType.Q4_K))[0]
    assert parsed.d == float(view["d"]) and parsed.dmin == float(view["dmin"])
    assert list(parsed.scales) == view["scales"].tolist()
    assert block_struct(GGMLType.Q4_K).build(parsed) == raw


# ------------------------------------------------------------------------------- byte order


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_byteswap_round_trip_and_big_endian_dequantize(t):
    if t.quantized:
        raw = random_blocks(t, 8).reshape(-1)
        shape = (2, 4 * t.block_size)
    else:
        raw = (np.arange(64) * 997 - 20000).astype(t.numpy_dtype).view(np.uint8)
        shape = (4, 16)
    big = byteswap(raw, t, "little", "big")
    assert np.array_equal(byteswap(big, t, "big", "little"), raw)
    little_values = dequantize(raw, t, shape)
    assert np.array_equal(bits(dequantize(big, t, shape, byte_order="big")), bits(little_values))


def test_byteswap_swaps_multibyte_fields_only():
    raw = np.arange(292, dtype=np.uint16).astype(np.uint8)  # one Q8_K block
    big = byteswap(raw, GGMLType.Q8_K, "little", "big")
    assert big[:4].tolist() == [3, 2, 1, 0]  # float d
    assert big[4:8].tolist() == [4, 5, 6, 7]  # int8 qs
    assert big[260:264].tolist() == [5, 4, 7, 6]  # int16 bsums (260, 261, 262, 263 mod 256)


def test_byteswap_rejects_partial_block():
    with pytest.raises(ValueError, match="Q4_0 data of 19 bytes is not a whole number of 18-byte blocks"):
        byteswap(bytes(19), GGMLType.Q4_0, "little", "big")


# ----------------------------------------------------------------------- against the oracle

ORACLE_DEQUANT = [t for t in QUANTIZED if t not in (GGMLType.Q8_1, GGMLType.Q8_K, GGMLType.Q1_0, GGMLType.Q2_0)]


def with_engines(types: list[GGMLType], compiled: frozenset[GGMLType]) -> list:
    """(type, engine) cases: every type with the numpy kernels, and again with the compiled
    kernel where this installation has one."""
    return [pytest.param(t, "numpy", id=f"{t.name}-numpy") for t in types] + [
        pytest.param(t, "compiled", id=f"{t.name}-compiled") for t in types if t in compiled
    ]


@pytest.mark.parametrize("t, engine", with_engines(ORACLE_DEQUANT, COMPILED_DEQUANTIZE))
def test_dequantize_matches_gguf_package_bit_for_bit(t, engine):
    gq = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType

    raw = random_blocks(t, 512)
    shape = as_shape(t, 512)
    expected = gq.dequantize(raw.reshape(shape[0], -1), GGMLQuantizationType(int(t)))
    got = dequantize(raw, t, shape, engine=engine)
    assert got.shape == shape and got.dtype == np.float32
    assert np.array_equal(bits(got), bits(expected))


@pytest.mark.parametrize("t, engine", with_engines([GGMLType.F32, GGMLType.F16, GGMLType.BF16], COMPILED_DEQUANTIZE))
def test_plain_dequantize_matches_gguf_package(t, engine):
    gq = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType

    x = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
    raw = quantize(x, t, engine="numpy")
    expected = gq.dequantize(
        raw.view(np.uint8) if t != GGMLType.F16 else raw.view(np.float16), GGMLQuantizationType(int(t))
    )
    got = dequantize(raw, t, x.shape, engine=engine)
    assert np.array_equal(bits(got), bits(np.asarray(expected).reshape(x.shape)))


def quantize_input(seed: int = 5) -> np.ndarray:
    """Generic rows at scales 0.01..10: no exact ties, zeros or halves, whose handling the
    package does not specify (those edge cases are checked against ggml's golden bytes in
    test_golden.py and as rules below)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((16, 1024)) * rng.uniform(0.01, 10, (16, 1))).astype(np.float32)


ORACLE_QUANT = [
    GGMLType.F16,
    GGMLType.BF16,
    GGMLType.Q4_0,
    GGMLType.Q4_1,
    GGMLType.Q5_0,
    GGMLType.Q5_1,
    GGMLType.Q8_0,
    GGMLType.TQ1_0,
    GGMLType.TQ2_0,
    GGMLType.MXFP4,
]


@pytest.mark.parametrize("t, engine", with_engines(ORACLE_QUANT, COMPILED_QUANTIZE))
def test_quantize_matches_gguf_package_bit_for_bit(t, engine):
    gq = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType

    x = quantize_input()
    expected = np.ascontiguousarray(gq.quantize(x, GGMLQuantizationType(int(t)))).view(np.uint8)
    assert np.array_equal(quantize(x, t, engine=engine), expected.reshape(16, -1))


def tricky_input(seed: int = 11) -> np.ndarray:
    """Rows that stress the block statistics: sign ties of the largest magnitude in either
    order, negative-only and positive-only blocks, signed zeros, exact .5 fractions."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    x[0::8, 7] = 5.0
    x[0::8, 9] = -5.0  # +max first
    x[1::8, 3] = -6.0
    x[1::8, 30] = 6.0  # -max first
    x[2::8] = -np.abs(x[2::8])
    x[3::8] = np.abs(x[3::8])
    x[4::8, :64] = -0.0
    x[4::8, 64:96] = 0.0
    x[5::8] = np.round(x[5::8] * 8) / 8
    x[6::8] = np.round(x[6::8] * 127) / 127
    return x


@pytest.mark.parametrize("t", [t for t in ORACLE_QUANT if t in COMPILED_QUANTIZE], ids=lambda t: t.name)
def test_engines_agree_on_tricky_blocks(t):
    x = tricky_input()
    assert np.array_equal(quantize(x, t, engine="compiled"), quantize(x, t, engine="numpy"))


@pytest.mark.parametrize("t, engine", with_engines([GGMLType.Q4_0, GGMLType.Q5_0], COMPILED_QUANTIZE))
def test_largest_magnitude_tie_takes_the_first_sign(t, engine):
    # ggml keeps the first value of largest magnitude (`amax < fabsf(v)`): d = max / -8 (-16)
    x = tricky_input()
    levels = 8 if t == GGMLType.Q4_0 else 16
    d = quantize(x, t, engine=engine)[:, :2].copy().view("<f2")[:, 0].astype(np.float32)
    assert d[0::8].tolist() == [5 / -levels] * 8  # +5 at column 7 before -5 at column 9: max = +5
    assert d[1::8].tolist() == [-6 / -levels] * 8  # -6 at column 3 before +6 at column 30: max = -6


@pytest.mark.parametrize("t, engine", with_engines([GGMLType.Q4_0, GGMLType.Q5_0], COMPILED_QUANTIZE))
def test_block_of_zeros_gets_a_negative_zero_scale(t, engine):
    # ggml starts from max = 0.0f and keeps it for a block of zeros, so d = 0.0f / -8 = -0.0
    # (f16 0x8000) whatever the zeros' signs
    x = np.zeros((2, 64), np.float32)
    x[1] = -0.0
    q = quantize(x, t, engine=engine).reshape(4, -1)
    assert q[:, :2].copy().view("<u2").ravel().tolist() == [0x8000] * 4


@pytest.mark.parametrize(
    "t, engine", with_engines([GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.IQ2_XS], COMPILED_DEQUANTIZE)
)
def test_threads_do_not_change_results_across_chunks(t, engine):
    gq = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType

    n_blocks = 17 * (1 << 18) // t.block_size + 5  # many work chunks and a partial one
    raw = random_blocks(t, n_blocks)
    shape = (n_blocks, t.block_size)
    one = dequantize(raw, t, shape, threads=1, engine=engine)
    expected = gq.dequantize(raw, GGMLQuantizationType(int(t)))  # random finite blocks: plain arithmetic
    assert np.array_equal(bits(one), bits(expected))
    for threads in (2, 3, None):  # None: automatic (4.5 M elements: one thread per CPU)
        assert np.array_equal(bits(dequantize(raw, t, shape, threads=threads, engine=engine)), bits(one))


def test_large_results_are_ordinary_writable_arrays():
    # a result of 2 M elements is decoded by several threads by default: same values, an ordinary array
    gq = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType

    raw = random_blocks(GGMLType.Q8_0, 65536 + 3)  # 2.1 M elements: 8.4 MB of float32
    y = dequantize(raw, GGMLType.Q8_0, (len(raw), 32))
    assert y.flags.c_contiguous and y.flags.writeable and y.dtype == np.float32 and y.shape == (65539, 32)
    assert np.array_equal(bits(y), bits(gq.dequantize(raw, GGMLQuantizationType.Q8_0)))
    y[0, 0] = 7.0
    assert y[0, 0] == 7.0
    x = np.concatenate([y[:65536], -y[:65536]], axis=1)  # 4.2 M float32
    h = quantize(x, GGMLType.F16)  # 8.4 MB result
    assert np.array_equal(h, x.astype("<f2").view(np.uint8).reshape(len(x), -1))
    q = quantize(x, GGMLType.Q8_0)  # 4.5 MB
    assert np.array_equal(q, quantize(x, GGMLType.Q8_0, threads=1, engine="numpy"))
    assert np.array_equal(bits(dequantize(quantize(x, GGMLType.F32), GGMLType.F32, x.shape)), bits(x))


def test_threaded_quantize_matches_one_thread_across_chunks():
    # one thread of the numpy engine is checked against ggml's bytes in test_golden.py
    x = np.tile(tricky_input(), (5, 1))[:, :480]  # 320 x 480: three 64k-element chunks and a part
    for t in (GGMLType.Q8_0, GGMLType.Q4_1):
        expected = quantize(x, t, threads=1, engine="numpy")
        for engine in ("numpy", "auto"):
            assert np.array_equal(quantize(x, t, threads=2, engine=engine), expected)


def test_threads_argument_is_checked():
    with pytest.raises(ValueError, match="threads must be a positive int or None, got 0"):
        dequantize(bytes(18), GGMLType.Q4_0, (32,), threads=0)
    with pytest.raises(TypeError, match="threads must be a positive int or None, got 'two'"):
        quantize(np.zeros(32, np.float32), GGMLType.Q8_0, threads="two")


# --------------------------------------------------------------- hand-built blocks, exact


def test_q8_1_block_by_hand():
    block = bytes.fromhex("00380040") + np.arange(-3, 29, dtype=np.int8).tobytes()  # d=0.5, s=2
    assert dequantize(block, GGMLType.Q8_1, (32,)).tolist() == [0.5 * v for v in range(-3, 29)]


def test_q8_k_block_by_hand():
    qs = np.arange(-128, 128, dtype=np.int8)
    block = np.float32(0.25).tobytes() + qs.tobytes() + bytes(32)
    assert dequantize(block, GGMLType.Q8_K, (256,)).tolist() == [0.25 * v for v in range(-128, 128)]


def test_q1_0_block_by_hand():
    block = bytes.fromhex("003e") + bytes([0b00000101]) + bytes(14) + bytes([0x80])  # d = 1.5
    y = dequantize(block, GGMLType.Q1_0, (128,))
    assert y[:4].tolist() == [1.5, -1.5, 1.5, -1.5]
    assert y[127] == 1.5 and (y[3:127] == -1.5).all()


def test_q2_0_block_by_hand():
    block = bytes.fromhex("0040") + bytes([0b11100100, 0x55]) + bytes(14)  # d = 2, crumbs 0 1 2 3
    y = dequantize(block, GGMLType.Q2_0, (64,))
    assert y[:8].tolist() == [-2.0, 0.0, 2.0, 4.0, 0.0, 0.0, 0.0, 0.0]
    assert (y[8:] == -2.0).all()


def test_nvfp4_block_by_hand():
    # scales: 0x38 = 2**0 * 0.5; 0x00 and 0x7F decode to 0; 0x39 = 1.125 * 0.5
    block = bytes([0x38, 0x00, 0x7F, 0x39]) + bytes([0x71]) + bytes(23) + bytes([0xF9]) + bytes(7)
    y = dequantize(block, GGMLType.NVFP4, (64,))
    assert y[0] == 0.5 and y[8] == 6.0  # code 1 -> 1, code 7 -> 12, times 0.5
    assert (y[16:48] == 0).all()
    assert y[48] == -1 * 0.5625 and y[56] == -12 * 0.5625  # codes 9 -> -1, 15 -> -12
    assert y[1] == 0.0


def test_q8_1_and_q8_k_quantize_by_hand():
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    q81 = quantize(x, GGMLType.Q8_1).view(block_dtype(GGMLType.Q8_1)).reshape(-1)
    d = np.float32(1) / np.float32(127)
    assert q81["d"][0] == np.float16(d)
    assert q81["qs"][0].tolist()[:3] == [-127, -126, -125]  # x * 127 rounded half away from 0
    assert q81["s"][0] == np.float16(np.float32(q81["qs"][0].astype(int).sum()) * d)
    q8k = quantize(x, GGMLType.Q8_K).view(block_dtype(GGMLType.Q8_K)).reshape(-1)
    assert q8k["d"][0] == np.float32(1) / (np.float32(-127) / np.float32(-1))
    assert q8k["qs"][0][[0, 255]].tolist() == [-127, 127]
    assert q8k["bsums"][0].tolist() == q8k["qs"][0].reshape(16, 16).astype(int).sum(axis=1).tolist()


def test_q1_0_and_q2_0_quantize_by_hand():
    x = np.where(np.arange(128) % 2, 1.0, -3.0).astype(np.float32)
    q = quantize(x, GGMLType.Q1_0).view(block_dtype(GGMLType.Q1_0)).reshape(-1)
    assert q["d"][0] == np.float16(2.0)  # mean |x|
    assert q["qs"][0].tolist() == [0xAA] * 16  # odd elements non-negative
    q = quantize(x[:64], GGMLType.Q2_0).view(block_dtype(GGMLType.Q2_0)).reshape(-1)
    assert q["d"][0] == np.float16(3.0)  # max |x|
    assert q["qs"][0].tolist() == [0b01000100] * 16  # -3 -> -1 -> 0b00; 1/3 rounds to 0 -> 0b01


@pytest.mark.parametrize("t", sorted(QUANTIZE_TYPES - IQ_LATTICE), ids=lambda t: t.name)
def test_quantize_then_dequantize_error_is_bounded(t):
    x = quantize_input(7)[4:]
    if t.name.startswith("I"):
        x = np.round(x)
    y = dequantize(quantize(x, t), t, x.shape)
    amax = np.abs(x.reshape(-1, t.block_size)).max(axis=1, keepdims=True)
    rel = np.abs(y - x).reshape(-1, t.block_size) / np.where(amax > 0, amax, 1)
    bound = {
        GGMLType.F32: 0,
        GGMLType.F64: 0,
        GGMLType.I8: 0,
        GGMLType.I16: 0,
        GGMLType.I32: 0,
        GGMLType.I64: 0,
        GGMLType.F16: 1e-3,
        GGMLType.BF16: 4e-3,
        GGMLType.Q8_0: 5e-3,
        GGMLType.Q8_1: 5e-3,
        GGMLType.Q8_K: 5e-3,
        GGMLType.Q5_0: 0.063,
        GGMLType.Q5_1: 0.04,
        GGMLType.Q4_0: 0.126,
        GGMLType.Q4_1: 0.07,
        GGMLType.MXFP4: 0.26,
        GGMLType.NVFP4: 0.26,
        GGMLType.TQ1_0: 0.5,
        GGMLType.TQ2_0: 0.5,
        GGMLType.Q2_0: 0.501,
        GGMLType.Q1_0: 1.0,
        # searched scales: no closed-form bound; the worst seen on this input, rounded up
        GGMLType.Q2_K: 0.35,
        GGMLType.Q3_K: 0.2,
        GGMLType.Q4_K: 0.08,
        GGMLType.Q5_K: 0.04,
        GGMLType.Q6_K: 0.02,
        GGMLType.IQ4_NL: 0.11,
        GGMLType.IQ4_XS: 0.1,
    }[t]
    # (Q4_0/Q5_0 put -8/-16 at the largest magnitude, so the other side reaches only 7/8, 15/16)
    assert rel.max() <= bound + 1e-6


# ----------------------------------------------------------------------- rows and chunks


def test_row_range_equals_slice_of_full_result():
    t = GGMLType.Q4_K
    raw = random_blocks(t, 600)
    full = dequantize(raw, t, (300, 512))
    part = dequantize(raw, t, (300, 512), rows=slice(37, 290))
    assert part.shape == (253, 512)
    assert np.array_equal(bits(part), bits(full[37:290]))
    assert dequantize(raw, t, (300, 512), rows=slice(-1, None)).shape == (1, 512)


def test_three_dimensional_shape_and_memoryview_input():
    raw = random_blocks(GGMLType.Q8_0, 12)
    y = dequantize(memoryview(raw.tobytes()), GGMLType.Q8_0, (2, 3, 64))
    assert y.shape == (2, 3, 64)
    assert np.array_equal(bits(y.reshape(6, 64)), bits(dequantize(raw, GGMLType.Q8_0, (6, 64))))


def test_integer_and_f64_dequantize_values():
    assert dequantize(np.array([-5, 7], dtype="<i4").view(np.uint8), GGMLType.I32, (2,)).tolist() == [-5.0, 7.0]
    assert dequantize(np.array([0.5], dtype="<f8").tobytes(), 28, (1,)).tolist() == [0.5]
    assert dequantize(np.array([-1, 2], dtype=">i2").tobytes(), GGMLType.I16, (2,), "big").tolist() == [-1.0, 2.0]


# ----------------------------------------------------------------------------- errors


def test_wrong_byte_count_names_type_shape_and_sizes():
    with pytest.raises(ValueError, match=r"Q4_0 tensor of shape \(2, 32\) needs 36 bytes \(2 rows of 18\), got 35"):
        dequantize(bytes(35), GGMLType.Q4_0, (2, 32))


def test_row_not_whole_blocks():
    msg = r"Q4_K tensor shape \(4, 300\): the last dimension 300 is not a multiple of the Q4_K block size 256"
    with pytest.raises(ValueError, match=msg):
        dequantize(bytes(10), GGMLType.Q4_K, (4, 300))
    with pytest.raises(ValueError, match="the last dimension 33 is not a multiple of the Q8_0 block size 32"):
        quantize(np.zeros(33, np.float32), GGMLType.Q8_0)


def test_removed_and_unknown_types():
    with pytest.raises(ValueError, match=r"tensor type Q4_2 \(id 4\) has been removed from ggml"):
        dequantize(bytes(18), 4, (32,))
    with pytest.raises(ValueError, match="unknown ggml type id 99"):
        dequantize(bytes(18), 99, (32,))
    with pytest.raises(ValueError, match="unknown ggml type id 43"):
        block_dtype(43)
    with pytest.raises(ValueError, match="unknown ggml type name 'Q9_9'"):
        quantize(np.zeros(32, np.float32), "Q9_9")
    with pytest.raises(TypeError, match="a ggml type is a GGMLType, an int id or a name, got float 8.0"):
        dequantize(bytes(34), 8.0, (32,))


def test_type_names_are_accepted_wherever_a_type_goes():
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    assert np.array_equal(quantize(x, "q8_0"), quantize(x, GGMLType.Q8_0))
    assert np.array_equal(dequantize(quantize(x, "Q4_0"), "Q4_0", (64,)), dequantize(quantize(x, 2), 2, (64,)))
    assert block_dtype("Q6_K") == block_dtype(GGMLType.Q6_K)


def test_argument_mistakes_are_not_bad_file_errors():
    # a bad argument is the caller's mistake: a ValueError/TypeError, never a GGUFError ("bad file")
    from gguf_schema.errors import GGUFError

    for call in (
        lambda: dequantize(bytes(35), GGMLType.Q4_0, (2, 32)),
        lambda: dequantize(bytes(18), GGMLType.Q4_0, (32,), engine="gpu"),
        lambda: dequantize(bytes(18), GGMLType.Q4_0, (32,), threads=0),
        lambda: quantize(np.zeros(33, np.float32), GGMLType.Q8_0),
        lambda: dequantize(bytes(18), GGMLType.Q4_0, (32,), out=np.empty(3, np.float32)),
    ):
        with pytest.raises((ValueError, TypeError)) as info:
            call()
        assert not isinstance(info.value, GGUFError)


def test_unsupported_quantize_type_and_bad_arguments():
    with pytest.raises(ValueError, match="ggml quantizes IQ2_XXS only with an importance matrix: pass imatrix="):
        quantize(np.zeros(256, np.float32), GGMLType.IQ2_XXS)
    with pytest.raises(ValueError, match="I8 needs integer values, got 0.5"):
        quantize(np.array([0.5], np.float32), GGMLType.I8)
    with pytest.raises(ValueError, match=r"values out of the I8 range \[-128, 127\]"):
        quantize(np.array([300]), GGMLType.I8)
    with pytest.raises(ValueError, match="rows must be a contiguous slice \\(step 1\\), got step 2"):
        dequantize(bytes(36), GGMLType.Q4_0, (2, 32), rows=slice(0, 2, 2))
    with pytest.raises(ValueError, match="byte order must be 'little' or 'big', got 'middle'"):
        dequantize(bytes(18), GGMLType.Q4_0, (32,), byte_order="middle")
    with pytest.raises(ValueError):
        dequantize(bytes(1), GGMLType.F32, (1,))


# ------------------------------------------------------------------------- a real file


@pytest.fixture(scope="module")
def gemma_tensors(gemma_reader):
    wanted: dict[str, object] = {}
    for info in gemma_reader.tensors:
        name = info.tensor_type.name
        if name in ("F32", "Q5_0", "Q8_0", "Q4_K", "Q6_K") and name not in wanted:
            wanted[name] = info
    return wanted


@pytest.mark.parametrize("type_name", ["F32", "Q5_0", "Q8_0", "Q4_K", "Q6_K"])
def test_gemma_tensor_matches_gguf_package(gemma_tensors, type_name):
    from gguf.quants import dequantize as oracle

    if type_name not in gemma_tensors:
        pytest.skip(f"no {type_name} tensor in the file")
    info = gemma_tensors[type_name]
    t = GGMLType[type_name]
    shape = tuple(int(s) for s in reversed(info.shape.tolist()))  # GGUF dims are innermost first
    raw = np.asarray(info.data).view(np.uint8).reshape(-1)
    n_rows = int(np.prod(shape[:-1]))
    rows = slice(0, min(n_rows, 256))
    got = dequantize(raw, t, shape, rows=rows)
    row_bytes = t.row_nbytes(shape[-1])
    expected = oracle(raw[: rows.stop * row_bytes].reshape(rows.stop, row_bytes), info.tensor_type)
    assert np.array_equal(bits(got), bits(np.asarray(expected).reshape(got.shape)))
    assert np.isfinite(got).all() and got.std() > 0


@pytest.mark.parametrize("engine", ["numpy", "auto"])
@pytest.mark.parametrize("t", [GGMLType.Q4_1, GGMLType.Q5_1], ids=lambda t: t.name)
def test_zero_minimum_keeps_the_sign_of_the_first_zero(t, engine):
    # ggml scans in order with `v < min`: of +0.0 and -0.0 the first one stays the minimum
    x = np.abs(np.random.default_rng(0).standard_normal((2, 32))).astype(np.float32) + 1
    x[0, 3], x[0, 7] = 0.0, -0.0
    x[1, 3], x[1, 7] = -0.0, 0.0
    q = quantize(x, t, engine=engine)
    assert q[0, 2:4].tobytes() == b"\x00\x00" and q[1, 2:4].tobytes() == b"\x00\x80"  # m = +0.0, -0.0


@pytest.mark.parametrize("engine", ["numpy", "auto"])
def test_dequantize_into_a_callers_buffer(engine):
    raw = random_blocks(GGMLType.Q4_K, 40)
    expected = dequantize(raw, GGMLType.Q4_K, (10, 1024), engine="numpy")
    buf = np.full(10 * 1024, np.nan, dtype=np.float32)
    got = dequantize(raw, GGMLType.Q4_K, (10, 1024), engine=engine, out=buf)
    assert got.shape == (10, 1024) and np.shares_memory(got, buf)
    assert np.array_equal(bits(buf.reshape(10, 1024)), bits(expected))
    part = dequantize(raw, GGMLType.Q4_K, (10, 1024), rows=slice(2, 4), engine=engine, out=buf[:2048])
    assert np.array_equal(bits(part), bits(expected[2:4]))
    big = random_blocks(GGMLType.Q8_0, 3 * 8192 + 7)  # several chunks, on 2 threads
    ref = dequantize(big, GGMLType.Q8_0, (len(big), 32), engine="numpy")
    into = np.empty(len(big) * 32, np.float32)
    got = dequantize(big, GGMLType.Q8_0, (len(big), 32), engine=engine, threads=2, out=into)
    assert np.array_equal(bits(got), bits(ref)) and np.shares_memory(got, into)


def test_out_buffer_is_checked():
    raw = random_blocks(GGMLType.Q8_0, 4)
    for bad, got in [
        (np.empty(127, np.float32), "float32 array of shape (127,)"),
        (np.empty(128, np.float64), "float64 array of shape (128,)"),
        (np.empty((2, 128), np.float32)[:, ::2], "float32 array of shape (2, 64)"),
        (np.empty(128, ">f4"), ">f4 array of shape (128,)"),
        ([0.0] * 128, "list"),
    ]:
        with pytest.raises(
            ValueError, match=re.escape(f"out must be a writable C-contiguous float32 array of 128 elements, got {got}")
        ):
            dequantize(raw, GGMLType.Q8_0, (128,), out=bad)
    frozen = np.empty(128, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out must be a writable"):
        dequantize(raw, GGMLType.Q8_0, (128,), out=frozen)
