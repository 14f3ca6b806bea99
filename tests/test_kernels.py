"""The optional compiled kernels (gguf_schema.tensors._kernels) against the numpy kernels, bit for bit.

The oracle tests in test_quants.py run both engines against the `gguf` package; here the
two engines are compared on inputs the package cannot take: random bytes in every field
(NaN, infinite and subnormal scales), Q8_1 and Q8_K, and float edge cases of F16 and BF16.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.format.types import GGMLType
from gguf_schema.tensors import COMPILED_DEQUANTIZE, COMPILED_QUANTIZE, dequantize, engine, quantize

from .helpers import IQ_LATTICE, bits

compiled_only = pytest.mark.skipif(not COMPILED_DEQUANTIZE, reason="gguf_schema.tensors._kernels is not built here")


def compiler_available() -> bool:
    cc = (sysconfig.get_config_var("CC") or "").split()
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    return bool(cc) and shutil.which(cc[0]) is not None and os.path.exists(headers)


def test_kernels_are_built_where_a_c_compiler_exists():
    if os.environ.get("GGUF_SCHEMA_NO_KERNELS") == "1" or not compiler_available():
        pytest.skip("no C compiler here (or the build was told to skip the kernels)")
    assert engine.compiled_kernels is not None, (
        "gguf_schema.tensors._kernels failed to build although a compiler exists"
    )
    expected = {
        GGMLType.F16,
        GGMLType.BF16,
        GGMLType.Q4_0,
        GGMLType.Q4_1,
        GGMLType.Q5_0,
        GGMLType.Q5_1,
        GGMLType.Q8_0,
        GGMLType.Q8_1,
        GGMLType.Q2_K,
        GGMLType.Q3_K,
        GGMLType.Q4_K,
        GGMLType.Q5_K,
        GGMLType.Q6_K,
        GGMLType.Q8_K,
        GGMLType.TQ1_0,
        GGMLType.TQ2_0,
        GGMLType.IQ4_NL,
        GGMLType.IQ4_XS,
        GGMLType.Q2_0,
    }
    assert expected == COMPILED_DEQUANTIZE
    assert (expected - {GGMLType.Q8_K}) | IQ_LATTICE == COMPILED_QUANTIZE
    features = engine.compiled_kernels.features()
    assert set(features) == {"sse2", "avx2_copies", "f16c"} and all(isinstance(v, bool) for v in features.values())


@compiled_only
def test_compiled_block_geometry_agrees_with_the_type_table():
    layouts = engine.compiled_kernels.layouts()
    assert set(layouts) == {int(t) for t in COMPILED_DEQUANTIZE | COMPILED_QUANTIZE}  # nothing dropped for a mismatch
    for tid, (block_size, type_size, decodes, encodes, encodes_rows) in layouts.items():
        t = GGMLType(tid)
        assert (block_size, type_size) == (t.block_size, t.type_size)
        assert decodes == (t in COMPILED_DEQUANTIZE) and (encodes or encodes_rows) == (t in COMPILED_QUANTIZE)


def same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bits, except that NaNs only need to be NaN in both (which NaN operand's payload
    survives a sum of two NaNs is up to the compiler's operand order)."""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(bits(a)[~nan], bits(b)[~nan]))


@compiled_only
@pytest.mark.parametrize("t", sorted(COMPILED_DEQUANTIZE), ids=lambda t: t.name)
def test_compiled_decoder_equals_numpy_on_random_bytes(t):
    n_blocks = 3000 if t.quantized else 1 << 16
    raw = np.random.default_rng(int(t)).integers(0, 256, n_blocks * t.type_size, dtype=np.uint8)
    shape = (n_blocks // 8, 8 * t.block_size)
    ref = dequantize(raw, t, shape, engine="numpy")
    got = dequantize(raw, t, shape, engine="compiled")
    assert same_floats(got, ref)
    assert np.isfinite(ref).mean() > 0.5  # mostly ordinary values, plus NaN/inf scales


@compiled_only
@pytest.mark.parametrize("t", sorted(t for t in COMPILED_DEQUANTIZE if t.quantized), ids=lambda t: t.name)
def test_compiled_decoder_reads_big_endian_and_row_ranges(t):
    raw = np.random.default_rng(7).integers(0, 256, 40 * t.type_size, dtype=np.uint8)
    shape = (10, 4 * t.block_size)
    from gguf_schema.tensors import byteswap

    swapped = byteswap(raw, t, "little", "big")
    ref = dequantize(raw, t, shape, rows=slice(3, 8), engine="numpy")
    assert same_floats(dequantize(swapped, t, shape, byte_order="big", rows=slice(3, 8), engine="compiled"), ref)


def quantizer_input(t: GGMLType) -> np.ndarray:
    """Finite float32 rows: normal, tiny (subnormal results), huge, zero and constant blocks,
    exact ties of the rounding steps."""
    rng = np.random.default_rng(100 + int(t))
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    x[1] *= np.float32(1e-7)
    x[2] *= np.float32(1e30)
    x[3] = 0
    x[4] = -2.5
    x[5] = np.round(x[5] * 4) / 4
    x[6, ::2] = -x[6, 1::2]
    x[7] = np.float32(1e-42)
    return x


@compiled_only
@pytest.mark.parametrize("t", sorted(COMPILED_QUANTIZE - IQ_LATTICE), ids=lambda t: t.name)
def test_compiled_quantizer_equals_numpy(t):
    x = quantizer_input(t)
    assert np.array_equal(quantize(x, t, engine="compiled"), quantize(x, t, engine="numpy"))


@compiled_only
@pytest.mark.parametrize("t", [GGMLType.F16, GGMLType.BF16], ids=lambda t: t.name)
def test_compiled_float_conversions_on_every_kind_of_float(t):
    edges = np.array(
        [
            np.inf,
            -np.inf,
            np.nan,
            -np.nan,
            65504,
            65519.996,
            65520,
            -65520,
            1e-8,
            2.0**-25,
            3 * 2.0**-26,
            2.0**-24,
            -0.0,
            1e-40,
            2.0**-14,
            2.0**-14 * (1 - 2.0**-11),
            1 + 2.0**-11,
            1 + 3 * 2.0**-11,
            3.4e38,
        ],
        dtype=np.float32,
    )
    noise = np.random.default_rng(1).integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([edges, noise.view(np.float32)])  # every exponent, NaN payloads included
    got = quantize(x, t, engine="compiled")
    assert np.array_equal(got, quantize(x, t, engine="numpy"))
    if t == GGMLType.F16:
        with np.errstate(over="ignore"):
            assert np.array_equal(got.view("<u2"), x.astype("<f2").view("<u2").reshape(1, -1))
    # and back: every 16-bit pattern
    every = np.arange(1 << 16, dtype="<u2").view(np.uint8)
    assert np.array_equal(
        bits(dequantize(every, t, (1 << 16,), engine="compiled")),
        bits(dequantize(every, t, (1 << 16,), engine="numpy")),
    )


@compiled_only
def test_compiled_quantizer_keeps_float64_input_on_numpy_for_f16():
    # f64 -> f16 must round once; through float32 it would round twice
    x = np.array([1 + 2.0**-11 + 2.0**-40], dtype=np.float64)  # just above a tie
    assert quantize(x, GGMLType.F16, engine="compiled").view("<f2")[0, 0] == np.float16(1 + 2.0**-10)


def test_engine_argument_is_checked():
    with pytest.raises(ValueError, match="engine must be one of 'auto', 'numpy', 'compiled', got 'gpu'"):
        dequantize(bytes(18), GGMLType.Q4_0, (32,), engine="gpu")
    with pytest.raises(ValueError, match="no compiled kernel for IQ2_XS"):
        dequantize(bytes(74), GGMLType.IQ2_XS, (256,), engine="compiled")
    with pytest.raises(ValueError, match="no compiled kernel for MXFP4"):
        quantize(np.zeros(32, np.float32), GGMLType.MXFP4, engine="compiled")


@compiled_only
def test_compiled_module_rejects_partial_blocks():
    with pytest.raises(ValueError, match="not whole blocks"):
        engine.compiled_kernels.decode(int(GGMLType.Q8_0), bytes(35), np.empty(32, np.float32))
    with pytest.raises(ValueError, match="no compiled quantizer for ggml type 15"):
        engine.compiled_kernels.encode(int(GGMLType.Q8_K), np.zeros(256, np.float32), np.empty(292, np.uint8))


@compiled_only
def test_gemma_tensors_decode_alike_with_both_engines(gemma):
    with gguf_schema.open(gemma) as f:
        seen = set()
        for tensor in f.tensors.values():
            t = GGMLType(tensor.type)
            if t in COMPILED_DEQUANTIZE and t not in seen:
                seen.add(t)
                rows = slice(0, 64)
                a = tensor.dequantize(rows=rows, engine="compiled")
                b = tensor.dequantize(rows=rows, engine="numpy")
                assert np.array_equal(bits(a), bits(b)) and a.std() > 0
    assert {GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K} <= seen


def build_portable_variant(tmp_path):
    """Compile the kernels (csrc/*.c) with -DGGUF_SCHEMA_PORTABLE (no SSE2, no AVX2 copies) as a separate module."""
    import importlib.util
    import subprocess

    csrc = os.path.join(os.path.dirname(engine.__file__), "csrc")
    if not os.path.isdir(csrc):
        pytest.skip("the C sources are not installed next to the package")
    sources = sorted(os.path.join(csrc, n) for n in os.listdir(csrc) if n.endswith(".c"))
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = tmp_path / f"_kernels{suffix}"
    cmd = [
        *cc,
        "-O2",
        "-ffp-contract=off",
        "-fno-trapping-math",
        "-shared",
        "-fPIC",
        "-DGGUF_SCHEMA_PORTABLE",
        "-I",
        sysconfig.get_paths()["include"],
        "-I",
        csrc,
        *sources,
        "-o",
        str(target),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    spec = importlib.util.spec_from_file_location("_kernels", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@compiled_only
@pytest.mark.skipif(not compiler_available() or os.name != "posix", reason="needs a C compiler (POSIX flags)")
def test_portable_c_paths_equal_numpy(tmp_path):
    portable = build_portable_variant(tmp_path)
    assert portable.layouts() == engine.compiled_kernels.layouts()
    for t in sorted(COMPILED_DEQUANTIZE):
        raw = np.random.default_rng(int(t)).integers(0, 256, 500 * t.type_size, dtype=np.uint8)
        ref = dequantize(raw, t, (500 * t.block_size,), engine="numpy")
        out = np.empty(500 * t.block_size, np.float32)
        portable.decode(int(t), raw, out)
        assert same_floats(out, ref), t.name
    for t in sorted(IQ_LATTICE & COMPILED_QUANTIZE):  # row quantizers only
        x = np.random.default_rng(int(t)).standard_normal((8, 512)).astype(np.float32)
        w = np.linspace(0.5, 2, 512, dtype=np.float32)
        out = np.zeros((8, t.row_nbytes(512)), np.uint8)
        portable.quantize_rows(int(t), x, out, 512, w)
        assert np.array_equal(out, quantize(x, t, imatrix=w, engine="numpy")), t.name
    for t in sorted(COMPILED_QUANTIZE - IQ_LATTICE):
        x = quantizer_input(t)[:, :512]
        out = np.empty(x.size // t.block_size * t.type_size, np.uint8)
        portable.encode(int(t), np.ascontiguousarray(x), out)
        assert np.array_equal(out.reshape(len(x), -1), quantize(x, t, engine="numpy")), t.name
    imatrix = np.abs(np.random.default_rng(2).standard_normal(512)).astype(np.float32)
    for t in sorted(engine._COMPILED_ROWS - IQ_LATTICE):  # the other importance-weighted row quantizers
        x = np.ascontiguousarray(quantizer_input(t)[:, :512])
        out = np.zeros((len(x), t.row_nbytes(512)), np.uint8)
        portable.quantize_rows(int(t), x, out, 512, imatrix)
        assert np.array_equal(out, quantize(x, t, imatrix=imatrix, engine="numpy")), t.name


def _copy_package(to: Path, with_kernels: bool) -> None:
    src = Path(gguf_schema.__file__).parent
    ignore = shutil.ignore_patterns("__pycache__", *([] if with_kernels else ["*.so", "*.pyd"]))
    shutil.copytree(src, to / "gguf_schema", ignore=ignore)


@pytest.mark.skipif(not COMPILED_DEQUANTIZE, reason="no compiled kernels in this installation")
def test_a_source_tree_without_kernels_that_hides_the_installed_copy_warns_once(tmp_path: Path) -> None:
    # issue 28: `pip install .` in a clone, then Python started in the clone's root imports the clone's own
    # folder (first on the path), which has no compiled kernels: silently slower. Here: a clone (sources and
    # setup.py, no kernels) and an installed copy with kernels on PYTHONPATH, as site-packages would be.
    clone, site = tmp_path / "clone", tmp_path / "site"
    _copy_package(clone, with_kernels=False)
    (clone / "setup.py").write_text("# the clone's build script\n")
    _copy_package(site, with_kernels=True)
    code = (
        "import warnings; warnings.simplefilter('default')\n"
        "import gguf_schema, gguf_schema.tensors.engine as e\n"
        "print(gguf_schema.__file__, e.compiled_kernels is None)\n"
        "import importlib; importlib.import_module('gguf_schema.tensors')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("GGUF_SCHEMA_NO_KERNELS", None)
    r = subprocess.run([sys.executable, "-c", code], cwd=clone, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(clone / "gguf_schema" / "__init__.py"), "True"]
    warned = [line for line in r.stderr.splitlines() if "GGUFInstallWarning" in line]
    assert len(warned) == 1
    assert (
        f"GGUFInstallWarning: gguf_schema was imported from the source tree {clone / 'gguf_schema'}, which has no "
        f"compiled kernels, not from the installed copy {site / 'gguf_schema'}, which has them" in warned[0]
    )
    # started elsewhere, the installed copy is imported: no warning; nor with the kernels switched off on purpose
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.split()[1] == "False" and "GGUFInstallWarning" not in r.stderr
    env["GGUF_SCHEMA_NO_KERNELS"] = "1"
    r = subprocess.run([sys.executable, "-c", code], cwd=clone, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "GGUFInstallWarning" not in r.stderr
