"""The fuzz harness: a short smoke run finds nothing, the oracle catches what it must, and every crash
class the long runs found stays fixed (one regression test per class)."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFError, GGUFTruncatedError, Limits
from gguf_schema.testing.fuzz import Mutator, check_input, default_corpus, exercise, fuzz, layout, nested_array_file

from .conftest import VOCAB_FILES, demo_bytes


@pytest.fixture(scope="module")
def corpus() -> list[bytes]:
    return default_corpus(include_vocab=[str(p) for p in VOCAB_FILES[:3]], trim=32)


def test_smoke_run_finds_nothing(corpus):
    # deep nesting has its own tests below (one is an open core bug); mutants here are kept to the seeds' structure
    report = fuzz(corpus, executions=800, seed=20260101, timeout=10, time_limit=150, deep_nesting=0.0)
    assert report.executions >= 400  # the time limit only guards a very slow machine (benchmarks/fuzz.py runs long)
    assert report.crash_classes() == [], "\n".join(
        f"{s}\n{f.detail}\ninput: {f.data.hex()}" for s, f in report.findings.items()
    )
    assert report.accepted > 0 and report.rejected > 0  # mutants both open and fail
    assert report.accepted + report.rejected == report.executions
    assert report.peak_memory < 64 * 2**20


def test_mutations_are_reproducible(corpus):
    a, b = Mutator(7, corpus), Mutator(7, corpus)
    for i in range(200):
        k = i % len(corpus)
        assert a.mutate(corpus[k], key=k) == b.mutate(corpus[k], key=k)


def test_layout_finds_every_count_length_and_type_field():
    buf = io.BytesIO()
    gguf_schema.save(buf, {"a": "hi", "b": [1, 2]}, {"w": np.ones((2, 4), np.float32)})
    kinds = [s.kind for s in layout(buf.getvalue())]
    assert kinds == [
        "version",
        "count",
        "count",
        "length",
        "vtype",
        "length",
        "length",
        "vtype",
        "vtype",
        "count",
        "length",
        "ndims",
        "dim",
        "dim",
        "ggml_type",
        "toffset",
    ]


# ----------------------------------------------------------------------- the oracle itself


def test_oracle_reports_a_crash_that_is_not_a_gguf_error():
    assert check_input(b"GGUF\x03\x00\x00\x00" + bytes(16)) is None  # a valid empty file
    assert exercise(b"not gguf") is None  # a GGUFError is a clean refusal
    finding = check_input(demo_bytes(), limits=object())  # not a Limits: a TypeError, which is not a GGUFError
    assert finding is not None and finding.kind == "exception"
    assert finding.signature.startswith("exception TypeError at reader.py:read_with") and finding.signature.endswith(
        "(fast)"
    )


def test_oracle_flags_an_input_over_its_time_budget():
    # 200k nested levels with a raised limit is slow for the pure-construct variant only; a tiny budget catches it
    data = nested_array_file(3000)
    finding = check_input(data, limits=Limits(max_depth=10**6), timeout=0.001)
    assert finding is not None and finding.kind == "timeout"


def test_oracle_flags_an_allocation_over_its_budget():
    import tracemalloc

    buf = io.BytesIO()
    gguf_schema.save(buf, {"tokens": ["x" * 10] * 20000})
    tracemalloc.start()
    try:
        finding = check_input(buf.getvalue(), memory_base=0, memory_factor=1)
    finally:
        tracemalloc.stop()
    assert finding is not None and finding.kind == "memory"


# ----------------------------------------------------------------------- regressions: one per crash class found


def _zero_element_tensor_with_dim(dim: int, order: str = "little") -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, {"general.architecture": "llama"}, {"t": np.zeros((0, 4), np.float32)}, byte_order=order)
    data = bytearray(buf.getvalue())
    slot = next(s for s in layout(bytes(data)) if s.kind == "dim")
    data[slot.offset : slot.offset + 8] = dim.to_bytes(8, order)
    return bytes(data)


@pytest.mark.parametrize("dim", [2**63, 2**64 - 1])
@pytest.mark.parametrize("order", ["little", "big"])
def test_regression_zero_element_tensor_with_huge_dim(dim, order):
    """Class `exception ValueError at reader.py:data`: dims (2**63, 0) made numpy's reshape raise ValueError."""
    data = _zero_element_tensor_with_dim(dim, order)
    assert check_input(data) is None
    with gguf_schema.open(data) as f:
        t = f.tensor_list[0]
        assert t.dims == (dim, 0) and t.n_elements == 0 and t.nbytes == 0
        with pytest.raises(GGUFError):
            t.data


@pytest.mark.parametrize("order", ["little", "big"])
def test_regression_zero_element_tensor_whose_bytes_per_row_overflow(order):
    data = _zero_element_tensor_with_dim(2**62, order)  # F32: 2**62 elements x 4 bytes per row > 2**63 - 1
    assert check_input(data) is None


def test_regression_quantized_zero_element_tensor_with_huge_dim():
    buf = io.BytesIO()
    gguf_schema.save(
        buf,
        {"general.quantization_version": np.uint32(2)},
        {"q": gguf_schema.RawTensor(gguf_schema.GGMLType.Q8_0, (0, 32), b"")},
    )
    data = bytearray(buf.getvalue())
    slot = next(s for s in layout(bytes(data)) if s.kind == "dim")
    data[slot.offset : slot.offset + 8] = (2**63 - 32 * 2**20).to_bytes(8, "little")  # a multiple of 32 below 2**63
    assert check_input(bytes(data)) is None


def test_regression_reference_variant_applies_the_depth_limit():
    """Class `differential: only reference parses`: nested_array_file(65) opened with fast=False only."""
    for depth in (65, 66, 1000):
        assert check_input(nested_array_file(depth)) is None


def _from_a_deep_stack(frames: int, fn):
    return fn() if frames == 0 else _from_a_deep_stack(frames - 1, fn)


def test_regression_reference_variant_opens_the_default_depth_from_a_deep_stack():
    """Class `differential: only fast parses` (found by the smoke run under pytest)."""
    finding = _from_a_deep_stack(150, lambda: check_input(nested_array_file(64)))
    assert finding is None


def test_regression_string_array_cut_inside_a_length():
    """A STRING array whose second item's 8-byte length is cut by the end of the file (struct.error once)."""
    data = (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", 1)
        + b"k"
        + struct.pack("<IIQ", 9, 8, 2)
        + struct.pack("<Q", 10)
        + b"0123456789"
        + b"\x05\x00\x00\x00\x00\x00"
    )
    assert check_input(data) is None
    with pytest.raises(GGUFTruncatedError):
        gguf_schema.open(data)


@pytest.mark.parametrize("depth", [1, 5, 65, 100, 5000])
@pytest.mark.parametrize("count", [1, 2, 2**60])
def test_deep_nesting_with_any_claimed_count_is_clean(depth, count):
    for order in ("little", "big"):
        assert check_input(nested_array_file(depth, byte_order=order, inner_count=count)) is None
