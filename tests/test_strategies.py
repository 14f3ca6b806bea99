"""Property tests over generated files: build -> parse -> build is byte-identical and values survive exactly.

Every file comes from :func:`gguf_schema.testing.strategies.gguf_files` (all 13 value types,
nested arrays, NaN payloads, BOOL bytes, invalid UTF-8, every ggml type and shape, v1-v3, both
byte orders) and is checked with both schema variants.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gguf_schema
from gguf_schema.format.schema import align_offset
from gguf_schema.format.types import GGMLType, ValueType
from gguf_schema.format.values import BoolByte, GGUFArray
from gguf_schema.testing import strategies as gst

from .helpers import open_variant

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def _tensor_bytes(t) -> bytes:
    return bytes(t.raw()) if t.nbytes else b""


def _check_file(spec: gst.GGUFSpec, data: bytes, fast: bool) -> tuple:
    with open_variant(data, fast=fast) as f:
        assert (f.version, f.byte_order) == (spec.version, spec.byte_order)
        assert f.alignment == spec.alignment
        assert f.fields.records == spec.fields
        assert [t.name for t in f.tensor_list] == list(spec.tensors)
        for t, (name, raw) in zip(f.tensor_list, spec.tensors.items(), strict=False):
            assert t.type == raw.type and t.shape == tuple(raw.shape), name
            assert t.stored_offset % spec.alignment == 0
            assert _tensor_bytes(t) == raw.data
        again = io.BytesIO()
        f.save(again)
        assert again.getvalue() == data
        # the high-level way back: records and open tensors into a new file
        rebuilt = io.BytesIO()
        gguf_schema.save(
            rebuilt, f.fields.records, {t.name: t for t in f.tensor_list}, version=f.version, byte_order=f.byte_order
        )
        assert rebuilt.getvalue() == data
        return f.fields.records, [(t.name, int(t.type), t.dims, t.stored_offset) for t in f.tensor_list], f.data_offset


@SETTINGS
@given(gst.gguf_files())
def test_generated_file_round_trips_byte_identical_in_both_variants(spec):
    data = spec.to_bytes()
    fast = _check_file(spec, data, fast=True)
    reference = _check_file(spec, data, fast=False)
    assert fast == reference


@SETTINGS
@given(gst.gguf_files(max_tensors=0, max_fields=10, max_depth=3))
def test_metadata_only_files_round_trip(spec):
    data = spec.to_bytes()
    _check_file(spec, data, fast=True)
    _check_file(spec, data, fast=False)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(gst.gguf_files(byte_orders=["little"], versions=[3]), st.sampled_from(["big"]))
def test_byte_order_conversion_keeps_every_value(spec, other):
    """A file converted to the other byte order and back is the original (values via the reader, bytes via the writer)."""
    data = spec.to_bytes()
    with gguf_schema.open(data) as f:
        swapped = io.BytesIO()
        try:
            f.save(swapped, byte_order=other)
        except gguf_schema.GGUFError as e:  # only block types without a byte-swap layout may refuse
            pytest.skip(f"conversion refused: {e}")
    with gguf_schema.open(swapped.getvalue()) as g:
        assert g.byte_order == other
        assert g.fields.records == spec.fields
        back = io.BytesIO()
        g.save(back, byte_order="little")
    assert back.getvalue() == data


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(gst.metadata_values(max_depth=3), st.sampled_from(["little", "big"]), st.sampled_from([1, 2, 3]))
def test_every_value_parses_to_the_same_bits(tv, order, version):
    vt, value = tv
    field = gguf_schema.make_field("k", value, vt)
    buf = io.BytesIO()
    gguf_schema.save(buf, [field], byte_order=order, version=version)
    for fast in (True, False):
        with open_variant(buf.getvalue(), fast=fast) as f:
            got = f.fields["k"]
            assert got == field
            assert got.type == vt


# ----------------------------------------------------------------------- the strategies cover what they promise


def _collect(strategy, n=300):
    seen = []

    @settings(max_examples=n, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(x):
        seen.append(x)

    run()
    return seen


def test_metadata_values_cover_every_type_and_the_awkward_values():
    seen = _collect(gst.metadata_values(max_depth=3), 600)
    types = {vt for vt, _ in seen}
    assert types == set(ValueType)
    floats = [v for vt, v in seen if vt == ValueType.FLOAT32]
    assert any(np.isnan(v) for v in floats)
    assert any(v == 0 and np.signbit(v) for v in floats)
    assert any(isinstance(v, BoolByte) for vt, v in seen if vt == ValueType.BOOL)
    strings = [v for vt, v in seen if vt == ValueType.STRING]
    assert "" in strings and any(not s.isascii() for s in strings)
    arrays = [v for vt, v in seen if vt == ValueType.ARRAY]
    assert any(len(a) == 0 for a in arrays)
    assert any(a.type == ValueType.ARRAY and any(inner.type == ValueType.ARRAY for inner in a.items) for a in arrays)


def test_nan_payloads_are_generated_and_kept():
    payloads = {np.asarray(v).view(np.uint32).item() for v in _collect(gst.float32s(), 400) if np.isnan(v)}
    assert len(payloads) > 1  # not just the one quiet NaN


def test_tensor_strategies_cover_every_type_and_unusual_shapes():
    seen = _collect(gst.raw_tensors(), 600)
    assert {r.type for r in seen} == {t for t in GGMLType if not t.removed}
    assert any(r.shape == () for r in seen)
    assert any(0 in r.shape for r in seen)
    assert any(len(r.shape) == 4 for r in seen)
    for r in seen:
        assert len(r.data) == (int(np.prod(r.shape)) if r.shape else 1) // r.type.block_size * r.type.type_size


def test_whole_files_cover_both_orders_all_versions_and_alignments():
    seen = _collect(gst.gguf_files(), 300)
    assert {(s.byte_order, s.version) for s in seen} == {(o, v) for o in ("little", "big") for v in (1, 2, 3)}
    assert {s.alignment for s in seen} >= {1, 32}
    assert any(s.tensors for s in seen)


def test_spec_style_keys_follow_the_spec_rule():
    import re

    for k in _collect(gst.keys(style="spec"), 200):
        assert re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_]+)*", k), k


def test_tensor_offsets_follow_the_alignment():
    spec = gst.GGUFSpec(
        3,
        "little",
        [gguf_schema.make_field("general.alignment", 64, ValueType.UINT32)],
        {
            "a": gguf_schema.RawTensor(GGMLType.I8, (3,), b"abc"),
            "b": gguf_schema.RawTensor(GGMLType.F16, (2,), b"\x00<\x00<"),
        },
    )
    with gguf_schema.open(spec.to_bytes()) as f:
        assert [t.stored_offset for t in f.tensor_list] == [0, 64]
        assert f.data_offset == align_offset(f.metadata_end, 64)
        assert f.tensors["b"].data.tolist() == [1.0, 1.0]


def test_strategies_module_is_the_only_one_needing_hypothesis():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "import gguf_schema, gguf_schema.testing.fixtures, gguf_schema.testing.fuzz, gguf_schema.cli.generate\n"
        "try:\n    import gguf_schema.testing.strategies\nexcept ImportError as e:\n    print('needs hypothesis:', 'hypothesis' in str(e))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "needs hypothesis: True"


def test_gguf_array_nesting_keeps_inner_types():
    a = GGUFArray(
        ValueType.ARRAY, [GGUFArray(ValueType.INT8, np.array([-1], np.int8)), GGUFArray(ValueType.STRING, ["x"])]
    )
    spec = gst.GGUFSpec(2, "big", [gguf_schema.make_field("n", a)], {})
    with open_variant(spec.to_bytes(), fast=False) as f:
        assert [x.type for x in f.fields["n"].value.items] == [ValueType.INT8, ValueType.STRING]
