"""Hypothesis strategies for GGUF: metadata values, keys, tensors and whole files.

This module owns the property-based generators. It needs ``hypothesis`` (in the ``test``
extra: ``pip install 'gguf-schema[test]'``); nothing else in gguf-schema imports it. Use it to
test your own GGUF code against files that cover the whole format:

* :func:`metadata_values` -- ``(ValueType, value)`` pairs of all 13 types: integers at their
  extremes, float32/float64 with NaN payloads, -0.0, infinities and subnormals, BOOL bytes other
  than 0/1 (:class:`~gguf_schema.format.values.BoolByte`), empty and non-ASCII strings, strings with
  invalid UTF-8 (kept as surrogate escapes), empty arrays and arrays nested several deep;
* :func:`keys`, :func:`fields`, :func:`metadata` -- keys (spec-style or any string) and
  :class:`~gguf_schema.format.values.Field` lists;
* :func:`ggml_types`, :func:`tensor_shapes`, :func:`tensors` -- tensor infos of every ggml type
  with n_dims 0..4, zero-size dimensions, row lengths that are multiples of the block size;
* :func:`gguf_files` -- :class:`GGUFSpec` objects (metadata + tensors + version 1-3 + byte order)
  that you ``save()`` or turn ``to_bytes()``.

Values are in the canonical form the reader returns (numpy float scalars, read-only numpy
arrays, :class:`~gguf_schema.format.values.GGUFArray`), so ``Field`` equality after a round trip
compares every bit.

>>> from hypothesis import given, settings
>>> import gguf_schema
>>> @settings(max_examples=5, database=None)
... @given(gguf_files())
... def test_round_trip(spec):
...     data = spec.to_bytes()
...     with gguf_schema.open(data) as f:
...         assert f.fields.records == spec.fields
>>> test_round_trip()
"""

from __future__ import annotations

import io
import os
import string
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any

import numpy as np

try:
    from hypothesis import strategies as st
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("gguf_schema.testing.strategies needs hypothesis: pip install 'gguf-schema[test]'") from e

from ..format import keys as K
from ..format.types import GGMLType, ValueType
from ..format.values import BoolByte, Field, GGUFArray, make_field
from ..writer import RawTensor, save

__all__ = [
    "GGUFSpec",
    "alignments",
    "array_values",
    "fields",
    "float32s",
    "float64s",
    "ggml_types",
    "gguf_files",
    "keys",
    "metadata",
    "metadata_values",
    "raw_tensors",
    "scalar_values",
    "strings",
    "tensor_names",
    "tensor_shapes",
    "tensors",
    "value_types",
]

_INT_BOUNDS = {
    vt: (int(np.iinfo(vt.numpy_dtype()).min), int(np.iinfo(vt.numpy_dtype()).max)) for vt in ValueType if vt.is_integer
}


def value_types(*, arrays: bool = True) -> st.SearchStrategy[ValueType]:
    """Any of the 13 metadata value types (without ARRAY when ``arrays`` is false)."""
    return st.sampled_from([vt for vt in ValueType if arrays or vt != ValueType.ARRAY])


def strings(*, max_size: int = 24) -> st.SearchStrategy[str]:
    """Strings as the reader returns them: empty, ASCII, any Unicode (no lone surrogates), or decoded
    from arbitrary bytes with ``surrogateescape`` (invalid UTF-8 survives as ``\\udc80``..``\\udcff``).
    """
    return st.one_of(
        st.sampled_from(["", "a", "é", "日本語", "🦙", "\x00", "tab\there", "▁the"]),
        st.text(string.ascii_letters + string.digits + "._- ", max_size=max_size),
        st.text(st.characters(exclude_categories=["Cs"]), max_size=max_size),
        st.binary(max_size=max_size).map(lambda b: b.decode("utf-8", "surrogateescape")),
    )


def keys(*, style: str = "any") -> st.SearchStrategy[str]:
    """Metadata keys. ``style="spec"``: ASCII ``lower_snake_case`` segments joined by dots (what the
    spec requires); ``"any"``: those or any string, non-ASCII and empty included.
    """
    segment = st.text(string.ascii_lowercase + string.digits + "_", min_size=1, max_size=12)
    spec = st.lists(segment, min_size=1, max_size=4).map(".".join)
    if style == "spec":
        return spec
    if style != "any":
        raise ValueError(f"style must be 'spec' or 'any', got {style!r}")
    return st.one_of(spec, spec, strings(max_size=40))


def _float_bits(dtype: Any, bits: int) -> st.SearchStrategy[Any]:
    u = np.dtype(f"u{bits // 8}")
    return st.integers(0, 2**bits - 1).map(lambda b: np.array(b, u).view(dtype)[()])


def float32s() -> st.SearchStrategy[np.float32]:
    """``numpy.float32`` scalars: ordinary values, specials (NaN, -0.0, +-inf, max, tiny,
    subnormals) and arbitrary bit patterns (NaN payloads, signalling NaNs)."""
    fi = np.finfo(np.float32)
    specials = [np.nan, -0.0, 0.0, np.inf, -np.inf, fi.max, -fi.max, fi.tiny, 1e-45, 1.0, -1.5]
    return st.one_of(
        st.sampled_from([np.float32(x) for x in specials]),
        st.floats(width=32, allow_nan=True).map(np.float32),
        _float_bits(np.float32, 32),
    )


def float64s() -> st.SearchStrategy[np.float64]:
    """``numpy.float64`` scalars: ordinary, special and arbitrary bit patterns (see :func:`float32s`)."""
    fi = np.finfo(np.float64)
    specials = [np.nan, -0.0, 0.0, np.inf, -np.inf, fi.max, fi.tiny, 5e-324, np.pi]
    return st.one_of(
        st.sampled_from([np.float64(x) for x in specials]),
        st.floats(allow_nan=True).map(np.float64),
        _float_bits(np.float64, 64),
    )


def scalar_values(vt: ValueType) -> st.SearchStrategy[Any]:
    """Values of one scalar type in canonical form (``int``, numpy float, ``bool``/BoolByte, ``str``)."""
    vt = ValueType(vt)
    if vt.is_integer:
        lo, hi = _INT_BOUNDS[vt]
        return st.one_of(st.sampled_from([lo, hi, 0, 1]), st.integers(lo, hi))
    if vt == ValueType.FLOAT32:
        return float32s()
    if vt == ValueType.FLOAT64:
        return float64s()
    if vt == ValueType.BOOL:
        return st.one_of(st.booleans(), st.booleans(), st.integers(2, 255).map(BoolByte))
    if vt == ValueType.STRING:
        return strings()
    raise ValueError(f"{vt.name} is not a scalar type")


def _numeric_items(et: ValueType, max_len: int) -> st.SearchStrategy[np.ndarray]:
    dtype = et.numpy_dtype("little").newbyteorder("=")
    raw = st.tuples(st.integers(0, max_len), st.integers(0, 2**32 - 1)).map(
        lambda a: np.random.default_rng(a[1]).integers(0, 256, a[0] * dtype.itemsize, dtype=np.uint8).view(dtype)
    )
    if et == ValueType.BOOL:
        nice = st.lists(st.booleans(), max_size=max_len).map(lambda xs: np.array(xs, np.bool_))
    elif et.is_integer:
        nice = st.lists(scalar_values(et), max_size=max_len).map(
            lambda xs: np.array(xs, dtype=dtype) if xs else np.empty(0, dtype)
        )
    else:
        nice = st.lists(scalar_values(et), max_size=max_len).map(
            lambda xs: np.array(xs, dtype=dtype) if xs else np.empty(0, dtype)
        )
    return st.one_of(nice, raw)


def array_values(
    *, max_depth: int = 2, max_len: int = 6, element_types: Sequence[ValueType] | None = None
) -> st.SearchStrategy[GGUFArray]:
    """:class:`GGUFArray` values: every element type, empty arrays, arrays nested up to ``max_depth``
    levels (each inner array with its own element type).
    """
    types = (
        [ValueType(t) for t in element_types] if element_types else [vt for vt in ValueType if vt != ValueType.ARRAY]
    )

    def of(et: ValueType) -> st.SearchStrategy[GGUFArray]:
        items = _numeric_items(et, max_len) if et.is_numeric else st.lists(strings(), max_size=max_len)
        return items.map(lambda xs: GGUFArray(et, xs))

    flat = st.sampled_from(types).flatmap(of)
    if max_depth <= 1:
        return flat
    nested = st.lists(
        array_values(max_depth=max_depth - 1, max_len=max(1, max_len // 2), element_types=element_types),
        max_size=max(1, max_len // 2),
    ).map(lambda xs: GGUFArray(ValueType.ARRAY, xs))
    return st.one_of(flat, flat, nested)


def metadata_values(*, max_depth: int = 2) -> st.SearchStrategy[tuple[ValueType, Any]]:
    """``(value type, value)`` pairs over all 13 types (arrays nested up to ``max_depth``)."""

    def of(vt: ValueType) -> st.SearchStrategy[tuple[ValueType, Any]]:
        values = array_values(max_depth=max_depth) if vt == ValueType.ARRAY else scalar_values(vt)
        return values.map(lambda v: (vt, v))

    return value_types(arrays=max_depth > 0).flatmap(of)


def fields(*, key: st.SearchStrategy[str] | None = None, max_depth: int = 2) -> st.SearchStrategy[Field]:
    """:class:`Field` records (``general.alignment`` is never generated here: see :func:`gguf_files`)."""
    key = (key or keys()).filter(lambda k: k != K.GENERAL_ALIGNMENT)
    return st.builds(lambda k, tv: make_field(k, tv[1], tv[0]), key, metadata_values(max_depth=max_depth))


def metadata(
    *,
    min_size: int = 0,
    max_size: int = 8,
    unique: bool = True,
    key: st.SearchStrategy[str] | None = None,
    max_depth: int = 2,
) -> st.SearchStrategy[list[Field]]:
    """Lists of fields; keys unique unless ``unique=False`` (duplicates are legal to store and ggml rejects them)."""
    inner = fields(key=key, max_depth=max_depth)
    if unique:
        return st.lists(inner, min_size=min_size, max_size=max_size, unique_by=lambda f: f.key)
    return st.lists(inner, min_size=min_size, max_size=max_size)


def ggml_types(*, removed: bool = False, quantized: bool | None = None) -> st.SearchStrategy[GGMLType]:
    """ggml tensor types; removed ids only when ``removed``; ``quantized`` True/False narrows to block types or plain types."""
    pool = [
        t
        for t in GGMLType
        if (removed or not t.removed) and (quantized is None or (not t.removed and t.quantized == quantized))
    ]
    return st.sampled_from(pool)


def tensor_shapes(
    t: GGMLType, *, max_dims: int = 4, max_side: int = 4, max_blocks: int = 2
) -> st.SearchStrategy[tuple[int, ...]]:
    """numpy shapes (outermost first) valid for type ``t``: 0..``max_dims`` dimensions (0 only for
    plain types), the innermost a multiple of the block size, zero-size dimensions included.
    """
    t = GGMLType(t)
    inner = st.integers(0, max_blocks).map(lambda k: k * t.block_size) if t.quantized else st.integers(0, max_side * 2)
    lo = 1 if t.quantized else 0

    def build(n: int) -> st.SearchStrategy[tuple[int, ...]]:
        if n == 0:
            return st.just(())
        return st.tuples(st.lists(st.integers(0, max_side), min_size=n - 1, max_size=n - 1), inner).map(
            lambda a: (*a[0], a[1])
        )

    return st.integers(lo, max_dims).flatmap(build)


def tensor_names(*, max_bytes: int = 63) -> st.SearchStrategy[str]:
    """Tensor names of at most ``max_bytes`` UTF-8 bytes (63: what ggml accepts), spec-style or any."""
    styled = st.builds(
        lambda n, part: f"blk.{n}.{part}.weight",
        st.integers(0, 99),
        st.sampled_from(["attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down", "attn_norm"]),
    )
    return st.one_of(styled, strings(max_size=max_bytes), st.just("n" * max_bytes)).filter(
        lambda s: len(s.encode("utf-8", "surrogateescape")) <= max_bytes
    )


def raw_tensors(t: GGMLType | None = None, **shape_kw: Any) -> st.SearchStrategy[RawTensor]:
    """:class:`~gguf_schema.writer.RawTensor` of type ``t`` (any non-removed type when None) with random bytes.

    The bytes are arbitrary (any bit pattern: NaN floats, infinite scales), which is what a
    reader must cope with; use :func:`gguf_schema.testing.fixtures.random_tensor` for data that
    dequantizes to finite numbers.
    """
    types = st.just(GGMLType(t)) if t is not None else ggml_types()

    def build(gt: GGMLType) -> st.SearchStrategy[RawTensor]:
        def make(shape: tuple[int, ...], seed: int) -> RawTensor:
            n = int(np.prod(shape, dtype=np.int64)) if shape else 1
            nbytes = n // gt.block_size * gt.type_size
            return RawTensor(gt, shape, np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes())

        return st.builds(make, tensor_shapes(gt, **shape_kw), st.integers(0, 2**32 - 1))

    return types.flatmap(build)


def tensors(*, max_count: int = 4, max_name_bytes: int = 63) -> st.SearchStrategy[dict[str, RawTensor]]:
    """Mappings name -> RawTensor (unique names; any types and shapes)."""
    return st.dictionaries(tensor_names(max_bytes=max_name_bytes), raw_tensors(), max_size=max_count)


def alignments() -> st.SearchStrategy[int | None]:
    """``general.alignment`` values (UINT32 powers of two from 1, or None for no key: 32 applies)."""
    return st.sampled_from([None, None, 1, 2, 4, 8, 16, 32, 64, 128, 256, 4096])


@dataclass
class GGUFSpec:
    """A whole GGUF file as data: write it with :meth:`save` or :meth:`to_bytes`.

    Attributes:
        version: 1, 2 or 3.
        byte_order: "little" or "big".
        fields: metadata records in file order (``general.alignment`` among them when set).
        tensors: name -> RawTensor, in file order (each RawTensor's ``byte_order`` is the file's: written verbatim).

    >>> spec = GGUFSpec(3, "little", [make_field("a", 1)], {})
    >>> spec.to_bytes()[:4], spec.alignment
    (b'GGUF', 32)
    """

    version: int
    byte_order: str
    fields: list[Field] = field(default_factory=list)
    tensors: dict[str, RawTensor] = field(default_factory=dict)

    @property
    def alignment(self) -> int:
        """ALIGNMENT of the file (``general.alignment`` or 32)."""
        for f in self.fields:
            if f.key == K.GENERAL_ALIGNMENT:
                return int(f.value)
        return 32

    def save(self, target: str | os.PathLike[str] | IO[bytes]) -> None:
        """Write the file (atomically when ``target`` is a path) with :func:`gguf_schema.save`."""
        save(target, self.fields, self.tensors, version=self.version, byte_order=self.byte_order)

    def to_bytes(self) -> bytes:
        """The file's bytes."""
        buf = io.BytesIO()
        self.save(buf)
        return buf.getvalue()


def gguf_files(
    *,
    byte_orders: Sequence[str] = ("little", "big"),
    versions: Sequence[int] = (1, 2, 3),
    max_fields: int = 6,
    max_tensors: int = 3,
    max_depth: int = 2,
    key: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[GGUFSpec]:
    """Whole files: metadata of every value type, tensors of every type and shape, an optional
    ``general.alignment`` (placed at a random position), any of the given byte orders and versions.
    """

    def build(
        order: str, version: int, fs: list[Field], align: int | None, at: int, ts: dict[str, RawTensor]
    ) -> GGUFSpec:
        fs = list(fs)
        if align is not None:
            fs.insert(min(at, len(fs)), make_field(K.GENERAL_ALIGNMENT, align, ValueType.UINT32))
        # random bytes stand for data already in the file's order: written verbatim, read back as they are
        return GGUFSpec(version, order, fs, {n: replace(r, byte_order=order) for n, r in ts.items()})

    return st.builds(
        build,
        st.sampled_from(list(byte_orders)),
        st.sampled_from(list(versions)),
        metadata(max_size=max_fields, key=key, max_depth=max_depth),
        alignments(),
        st.integers(0, max_fields),
        tensors(max_count=max_tensors),
    )
