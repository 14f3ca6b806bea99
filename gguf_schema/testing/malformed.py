"""Malformed (and edge-case valid) GGUF files, one for each class ggml's reader is tested against.

This module owns :func:`malformed_cases`: small files generated with the library's own writer,
then broken by overwriting bytes at offsets the reader reports (``GGUFFile.pair_offsets``,
``GGUFFile.info_offsets``: the layout of :mod:`gguf_schema.format.layout`) — no second parser; files
built byte by byte take the size of a stored count from the variant (:data:`_V3`). Each :class:`MalformedCase` says what the three
validation profiles of :mod:`gguf_schema.check.validate` decide about it: ``ggml`` is the verdict of
ggml's C reader (the classes are the checks of ``gguf_init_from_file_impl`` in ggml's ``src/gguf.cpp``), ``spec``
the verdict of the spec text, ``lenient`` whether the file and its tensors can be read at all.

Files are deterministic (fixed seeds). Unless a case is about them, every file carries a
spec-complete ``gpt2`` header and its tensor data, so each case breaks one thing.

>>> cases = {c.name: c for c in malformed_cases()}
>>> cases["data_alignment_1"].expected
{'spec': 'reject', 'ggml': 'accept', 'lenient': 'accept'}
>>> cases["header_bad_magic"].data[:4]
b'GGUX'

:func:`ggml_edge_cases` (also as the list ``GGML_EDGE_CASES``, built on first use) holds the classes
found by ``benchmarks/ggml_diff.py``, the differential harness against ggml's own reader: files where
the profiles disagree with ggml today, and small files that cost a reader far more than their size.
Their ``ggml`` verdicts are the real ggml's; the ``ggml`` validation profile gives the same verdict on
each, except on the cases of :data:`GGML_PROFILE_DIFFERS` (each with its reason; ``docs/ggml-profile.md``).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GGUFInternalError
from ..format import keys as K
from ..format.layout import PairOffsets
from ..format.nodes import align_offset
from ..format.types import GGMLType, ValueType
from ..format.values import BoolByte, Field, GGUFArray, make_field
from ..format.variant import Variant
from ..model import GGUFFile, Tensor
from ..reader import read as gguf_open
from ..writer import RawTensor, save

__all__ = [
    "GGML_PROFILE_DIFFERS",
    "MalformedCase",
    "alignment_key_renamed_file",
    "alignment_nul_key_file",
    "base_metadata",
    "big_key_bad_type_file",
    "big_name_bad_dims_file",
    "ggml_edge_cases",
    "malformed_cases",
    "many_dims_file",
    "many_empty_strings_file",
    "many_keys_file",
    "many_tensors_file",
    "name_nul_padded_file",
    "ndims_shift_file",
    "ndims_zero_file",
    "nested_empty_arrays_file",
    "no_tensors_unpadded_file",
    "wrapped_dims_file",
    "zero_bytes_short_file",
    "zero_elements_huge_dims_file",
]

ACCEPT, REJECT = "accept", "reject"


@dataclass(frozen=True)
class MalformedCase:
    """One generated file and the verdict each profile gives it.

    Attributes:
        name: short identifier, ``<section>_<defect>`` (sections: header, kv, tensor, data).
        description: what is wrong (or, for accepted edge cases, what is unusual).
        data: the file's bytes.
        expected: profile (``"spec"``, ``"ggml"``, ``"lenient"``) -> ``"accept"`` or ``"reject"``.
    """

    name: str
    description: str
    data: bytes
    expected: dict[str, str]

    @property
    def section(self) -> str:
        return self.name.split("_", 1)[0]


def base_metadata(quantized: bool = False) -> dict[str, Any]:
    """A spec-complete header: ``general.architecture`` gpt2 and the keys the spec requires for it.

    >>> sorted(base_metadata())[:2]
    ['general.architecture', 'gpt2.attention.head_count']
    """
    md: dict[str, Any] = {
        K.GENERAL_ARCHITECTURE: "gpt2",
        "gpt2.context_length": np.uint32(64),
        "gpt2.embedding_length": np.uint32(8),
        "gpt2.block_count": np.uint32(1),
        "gpt2.attention.head_count": np.uint32(2),
        "gpt2.attention.layer_norm_epsilon": np.float32(1e-5),
    }
    if quantized:
        md[K.GENERAL_QUANTIZATION_VERSION] = np.uint32(2)
    return md


# --------------------------------------------------------------------------- building blocks


def _save(metadata: Any = None, tensors: dict[str, Any] | None = None, **kw: Any) -> bytes:
    buf = io.BytesIO()
    save(buf, metadata, tensors, **kw)
    return buf.getvalue()


def _patch(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


def _u32(v: int) -> bytes:
    return int(v).to_bytes(4, "little")


def _u64(v: int) -> bytes:
    return int(v).to_bytes(8, "little")


#: the variant :func:`_save` writes (little-endian, version 3) and the files built by hand are in
_V3 = Variant.of("little", 3)
_SIZE = _V3.struct("N")
#: where the header's ``tensor_count`` and ``metadata_kv_count`` are stored
_N_TENSORS_AT = 8
_N_KV_AT = _N_TENSORS_AT + _V3.size_t


def _size(v: int) -> bytes:
    """``v`` as a stored count, length or dimension (``size_t`` of :data:`_V3`)."""
    return _SIZE.pack(v)


def _located(data: bytes, fn: Callable[[GGUFFile], Any]) -> Any:
    """Open ``data`` with the reader and ask ``fn`` for offsets (the reader is the only parser)."""
    with gguf_open(data) as f:
        return fn(f)


def _pair(f: GGUFFile, key: str) -> PairOffsets:
    """Where the parts of the pair ``key`` of the parsed ``f`` are stored."""
    offsets = f.pair_offsets(f.fields[key])
    if offsets is None:
        raise GGUFInternalError(f"the parsed pair {key!r} has no offset")
    return offsets


def _tensors() -> dict[str, Any]:
    """Three small tensors; the last one is 32 bytes, so the file ends with no padding after it."""
    return {
        "token_embd.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "blk.0.attn_norm.weight": np.ones(4, np.float16),
        "output_norm.weight": np.full(8, 0.5, np.float32),
    }


def _q8_0(rows: int, cols: int, rng: np.random.Generator) -> RawTensor:
    scales = np.full((rows, cols // 32, 1), 0.25, np.float16).view(np.uint8)
    quants = rng.integers(-127, 128, size=(rows, cols // 32, 32), dtype=np.int8).view(np.uint8)
    return RawTensor(GGMLType.Q8_0, (rows, cols), np.concatenate([scales, quants], axis=-1).reshape(-1))


def _verdict(spec: str, ggml: str, lenient: str) -> dict[str, str]:
    return {"spec": spec, "ggml": ggml, "lenient": lenient}


ALL_REJECT = _verdict(REJECT, REJECT, REJECT)
ALL_ACCEPT = _verdict(ACCEPT, ACCEPT, ACCEPT)


# --------------------------------------------------------------------------- random content


def _random_fields(rng: np.random.Generator, per_type: int = 8) -> list[Field]:
    """About 100 values of every type: scalars of all 12 non-array types and arrays of each."""
    alphabet = list("abcdefghijklmnopqrstuvwxyz0123456789 _-.,!?éü日本語▁\n\t")
    fields: list[Field] = []

    def text() -> str:
        return "".join(rng.choice(alphabet, size=int(rng.integers(0, 24))))

    def scalar(vt: ValueType) -> Any:
        if vt == ValueType.STRING:
            return text()
        if vt == ValueType.BOOL:
            return bool(rng.integers(0, 2))
        if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
            return vt.numpy_dtype().type(rng.standard_normal() * 10 ** int(rng.integers(-5, 6)))
        info = np.iinfo(vt.numpy_dtype())
        return int(rng.integers(info.min, info.max, endpoint=True, dtype=vt.numpy_dtype().newbyteorder("=").type))

    for vt in ValueType:
        if vt == ValueType.ARRAY:
            continue
        for i in range(per_type):
            fields.append(make_field(f"random.{vt.name.lower()}.value_{i}", scalar(vt), vt))
        n = int(rng.integers(0, 9))
        if vt == ValueType.STRING:
            items: Any = [text() for _ in range(n)]
        elif vt == ValueType.BOOL:
            items = rng.integers(0, 2, n).astype(bool)
        elif vt in (ValueType.FLOAT32, ValueType.FLOAT64):
            items = rng.standard_normal(n).astype(vt.numpy_dtype().newbyteorder("="))
        else:
            info = np.iinfo(vt.numpy_dtype())
            items = rng.integers(info.min, info.max, n, endpoint=True, dtype=vt.numpy_dtype().newbyteorder("="))
        fields.append(make_field(f"random.{vt.name.lower()}.array", GGUFArray(vt, items), ValueType.ARRAY))
    return fields


def _random_tensors(rng: np.random.Generator, count: int = 8) -> dict[str, RawTensor]:
    usable = [t for t in GGMLType if not t.removed]
    out = {}
    for i in range(count):
        t = usable[int(rng.integers(0, len(usable)))]
        rows = int(rng.integers(1, 4))
        cols = t.block_size * int(rng.integers(1, 3))
        nbytes = rows * cols // t.block_size * t.type_size
        out[f"blk.{i}.ffn_up.weight"] = RawTensor(t, (rows, cols), rng.integers(0, 256, nbytes, dtype=np.uint8))
    return out


# --------------------------------------------------------------------------- the cases


def malformed_cases() -> list[MalformedCase]:
    """One file per class of malformed (or edge-case valid) file, with each profile's verdict.

    The classes are those of ggml's own reader tests (``ggml-reader-rules.md``), plus a few
    where the profiles disagree (nested arrays, bool bytes, invalid UTF-8, big-endian, NUL in
    tensor names). Building all of them takes well under a second.

    >>> len(malformed_cases()) >= 30
    True
    """
    rng = np.random.default_rng(20240601)
    cases: list[MalformedCase] = []

    def add(name: str, description: str, data: bytes, expected: dict[str, str]) -> None:
        cases.append(MalformedCase(name, description, data, expected))

    base = base_metadata()
    plain = _save(base, _tensors())

    # ---------------------------------------------------------------- header
    add("header_bad_magic", "the magic is b'GGUX' instead of b'GGUF'", _patch(plain, 0, b"GGUX"), ALL_REJECT)
    add("header_version_0", "the version is 0", _patch(plain, 4, _u32(0)), ALL_REJECT)
    add(
        "header_version_1",
        "a GGUF v1 file (uint32 counts and lengths): ggml no longer reads it, the spec describes v3",
        _save(base, _tensors(), version=1),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add("header_version_future", "the version is 4", _patch(plain, 4, _u32(4)), ALL_REJECT)
    add("header_n_tensors_max", "tensor_count is 2^64-1", _patch(plain, _N_TENSORS_AT, _size(2**64 - 1)), ALL_REJECT)
    add("header_n_kv_max", "metadata_kv_count is 2^64-1", _patch(plain, _N_KV_AT, _size(2**64 - 1)), ALL_REJECT)
    add(
        "header_empty",
        "no metadata and no tensors (the spec requires general.architecture)",
        _save(),
        _verdict(REJECT, ACCEPT, ACCEPT),
    )
    add(
        "header_big_endian",
        "a big-endian v3 file: ggml does not byte-swap",
        _save(base, _tensors(), byte_order="big"),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )

    # ---------------------------------------------------------------- metadata
    md = _save(base)
    at = _located(md, lambda f: _pair(f, "gpt2.context_length").start)
    add("kv_key_length_max", "a key's length is 2^64-1", _patch(md, at, _size(2**64 - 1)), ALL_REJECT)
    add(
        "kv_empty_key",
        "a key is the empty string",
        _save([*_fields(base), make_field("", np.uint32(1))]),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    at = _located(md, lambda f: _pair(f, "gpt2.block_count").value_type)
    add("kv_value_type_13", "a value type is 13 (valid: 0..12)", _patch(md, at, _u32(13)), ALL_REJECT)
    add(
        "kv_duplicate_key",
        "general.name appears twice (the spec does not forbid it: a warning)",
        _save([*_fields(base), make_field(K.GENERAL_NAME, "a"), make_field(K.GENERAL_NAME, "b")]),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )
    add(
        "kv_alignment_13",
        "general.alignment is 13: not a power of two, not a multiple of 8",
        _save(base, alignment=13),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add(
        "kv_alignment_int32",
        "general.alignment is stored as INT32 32",
        _save([*_fields(base), make_field(K.GENERAL_ALIGNMENT, 32, ValueType.INT32)]),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add(
        "kv_random_values",
        "about 100 random values of every type, arrays included (valid)",
        _save([*_fields(base), *_random_fields(rng)]),
        ALL_ACCEPT,
    )
    add(
        "kv_nested_array",
        "an array of arrays: the spec allows it, ggml rejects it",
        _save(
            [
                *_fields(base),
                make_field(
                    "demo.nested", GGUFArray(ValueType.ARRAY, [GGUFArray(ValueType.UINT8, np.array([1, 2], np.uint8))])
                ),
            ]
        ),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )
    add(
        "kv_bool_byte_2",
        "a BOOL stored as the byte 2: invalid for the spec, true for ggml",
        _save([*_fields(base), make_field("demo.flag", BoolByte(2), ValueType.BOOL)]),
        _verdict(REJECT, ACCEPT, ACCEPT),
    )
    add(
        "kv_invalid_utf8",
        "a string value holding the byte 0xff: the spec requires UTF-8, ggml does not check",
        _save([*_fields(base), make_field(K.GENERAL_NAME, "bad\udcffname")]),
        _verdict(REJECT, ACCEPT, ACCEPT),
    )

    # ---------------------------------------------------------------- tensor infos
    add(
        "tensor_name_64_bytes",
        "a tensor name of 64 bytes: the spec allows 64, ggml at most 63",
        _save(base, {"a" * 64: np.zeros(4, np.float32)}),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )
    add(
        "tensor_n_dims_5",
        "a tensor with 5 dimensions",
        _save(base, {"t": np.zeros((1, 1, 2, 2, 2), np.float32)}),
        _verdict(REJECT, REJECT, ACCEPT),
    )

    def first(f: GGUFFile) -> Tensor:
        return f.tensor_list[0]

    at = _located(plain, lambda f: f.info_offsets(first(f)).dimension(1))
    add(
        "tensor_dim_negative",
        "a dimension is 2^64-1 (-1 as int64): its data cannot be in the file",
        _patch(plain, at, _size(2**64 - 1)),
        ALL_REJECT,
    )
    at = _located(plain, lambda f: f.info_offsets(first(f)).dimension(0))
    add(
        "tensor_element_count_overflow",
        "dimensions 2^32 x 2^32: the element count reaches INT64_MAX",
        _patch(plain, at, _size(2**32) + _size(2**32)),
        ALL_REJECT,
    )
    f64 = _save(base, {"t": np.zeros(4, np.float64)})
    at = _located(f64, lambda f: f.info_offsets(first(f)).dimension(0))
    add(
        "tensor_byte_size_overflow",
        "an F64 tensor of 2^62 elements: its byte size overflows size_t",
        _patch(f64, at, _size(2**62)),
        ALL_REJECT,
    )
    at = _located(plain, lambda f: f.info_offsets(first(f)).type)
    add("tensor_type_43", "a tensor type is 43 (valid: 0..42)", _patch(plain, at, _u32(43)), ALL_REJECT)
    at = _located(plain, lambda f: f.info_offsets(first(f)).offset)
    add("tensor_offset_max", "a tensor offset is 2^64-1", _patch(plain, at, _u64(2**64 - 1)), ALL_REJECT)
    two = _save(base, {"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)})
    at = _located(two, lambda f: f.info_offsets(f.tensors["b"]).name)
    add(
        "tensor_duplicate_names",
        "two tensors are named 'a' (the spec does not forbid it: a warning)",
        _patch(two, at, b"a"),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )
    add(
        "tensor_duplicate_names_after_nul",
        "tensors 'a\\0x' and 'a\\0y': equal once ggml cuts names at the NUL",
        _save(base, {"a\0x": np.zeros(4, np.float32), "a\0y": np.ones(4, np.float32)}),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )
    add(
        "tensor_alignment_13",
        "general.alignment is 13, tensors laid out for it",
        _save(base, _tensors(), alignment=13),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    aligned32 = _save(base, {"a": np.zeros(6, np.float32), "b": np.ones(6, np.float32)}, alignment=32)
    at = _located(aligned32, lambda f: _pair(f, K.GENERAL_ALIGNMENT).value)
    add(
        "tensor_offsets_other_alignment",
        "general.alignment says 64, the offsets were computed for 32 (64 bytes of tail keep the data in the file)",
        _patch(aligned32, at, _u32(64)) + bytes(64),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add(
        "tensor_zero_size_dim",
        "a tensor of shape (4, 0): zero elements, zero bytes",
        _save(base, {"empty": np.zeros((4, 0), np.float32), "after": np.ones(4, np.float32)}),
        ALL_ACCEPT,
    )
    add(
        "tensor_random_valid",
        "eight tensors of random non-removed types and shapes with random bytes (valid)",
        _save(base_metadata(quantized=True), _random_tensors(rng)),
        ALL_ACCEPT,
    )
    add(
        "tensor_alignment_1",
        "general.alignment is 1: a power of two (ggml), not a multiple of 8 (spec)",
        _save(base, {"a": np.zeros(3, np.float32), "b": np.ones(5, np.float16)}, alignment=1),
        _verdict(REJECT, ACCEPT, ACCEPT),
    )

    # ---------------------------------------------------------------- data section
    add("data_one_byte_short", "the file ends one byte before the last tensor's data does", plain[:-1], ALL_REJECT)
    add(
        "data_alignment_13",
        "general.alignment is 13 with tensor data laid out for it",
        _save(base_metadata(quantized=True), {"q": _q8_0(2, 64, rng), "n": np.ones(7, np.float32)}, alignment=13),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    aligned64 = _save(base, {"a": np.zeros(8, np.float32), "b": np.ones(8, np.float32)}, alignment=64)
    at = _located(aligned64, lambda f: _pair(f, K.GENERAL_ALIGNMENT).value)
    add(
        "data_inconsistent_alignment",
        "general.alignment says 32, the data was laid out for 64: offsets are multiples of 32 "
        "(the spec is satisfied) but not the ones ggml computes",
        _patch(aligned64, at, _u32(32)),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )
    f64x2 = _save(base, {"a": np.zeros(4, np.float64), "b": np.zeros(4, np.float64)})
    a_dim, b_dim, b_off = _located(
        f64x2,
        lambda f: (
            f.info_offsets(f.tensors["a"]).dimension(0),
            f.info_offsets(f.tensors["b"]).dimension(0),
            f.info_offsets(f.tensors["b"]).offset,
        ),
    )
    big = _patch(_patch(_patch(f64x2, a_dim, _size(2**60)), b_dim, _size(2**60)), b_off, _u64(2**63))
    add(
        "data_memory_size_overflow",
        "two F64 tensors of 2^60 elements at offsets 0 and 2^63: the total size overflows size_t",
        big,
        ALL_REJECT,
    )
    add(
        "data_correct",
        "F32, F16, I32 and Q8_0 tensors with their data (valid)",
        _save(
            base_metadata(quantized=True),
            {**_tensors(), "blk.0.ffn_up.weight": _q8_0(4, 64, rng), "pos": np.arange(6, dtype=np.int32)},
        ),
        ALL_ACCEPT,
    )
    add(
        "data_alignment_1",
        "general.alignment is 1 with tensor data packed without padding",
        _save(
            base_metadata(quantized=True),
            {"q": _q8_0(1, 32, rng), "h": np.ones(3, np.float16), "f": np.ones(3, np.float32)},
            alignment=1,
        ),
        _verdict(REJECT, ACCEPT, ACCEPT),
    )
    return cases


def _fields(md: dict[str, Any]) -> list[Field]:
    return [make_field(k, v) for k, v in md.items()]


# --------------------------------------------------------------------------- edge classes, built to a size
#
# Each builder makes one file of a class where ggml's reader and ours part ways, or where a small
# file can cost a reader far more than its size. ``benchmarks/ggml_diff.py`` builds them large to
# measure; :func:`ggml_edge_cases` builds them small, with ggml's verdict as the real ggml gives it.


def _str(raw: bytes) -> bytes:
    return _size(len(raw)) + raw


def _head(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + _u32(_V3.version) + _size(n_tensors) + _size(n_kv)


def _kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return _str(key) + _u32(vtype) + payload


def big_key_bad_type_file(key_bytes: int) -> bytes:
    """One metadata key of ``key_bytes`` bytes whose value type is 13 (invalid): an error about it must not carry the key.

    >>> len(big_key_bad_type_file(100))
    144
    """
    return _head(0, 1) + _kv(b"k" * key_bytes, 13, bytes(8))


def big_name_bad_dims_file(name_bytes: int) -> bytes:
    """One tensor info whose name is ``name_bytes`` bytes and whose n_dims is 99.

    >>> len(big_name_bad_dims_file(10))
    54
    """
    return _head(1, 0) + _str(b"t" * name_bytes) + _u32(99) + bytes(8)


def many_dims_file(n_dims: int) -> bytes:
    """One F32 tensor info with ``n_dims`` dimensions of 1 (8 bytes each), then its one element.

    >>> len(many_dims_file(5))
    100
    """
    info = _str(b"t") + _u32(n_dims) + _size(1) * n_dims + _u32(int(GGMLType.F32)) + _u64(0)
    body = _head(1, 0) + info
    return body + bytes(align_offset(len(body), 32) - len(body)) + np.float32(1).tobytes()


def nested_empty_arrays_file(count: int) -> bytes:
    """One key whose value is an array of ``count`` empty UINT8 arrays (12 bytes each).

    >>> len(nested_empty_arrays_file(2))
    78
    """
    inner = _u32(int(ValueType.UINT8)) + _size(0)
    return _head(0, 1) + _kv(b"nested", int(ValueType.ARRAY), _u32(int(ValueType.ARRAY)) + _size(count) + inner * count)


def many_keys_file(count: int) -> bytes:
    """``count`` distinct keys ``k.<i>``, each a UINT8 (a legal file).

    >>> with gguf_open(many_keys_file(3)) as f:
    ...     list(f.metadata.items())
    [('k.0', 1), ('k.1', 1), ('k.2', 1)]
    """
    value = _u32(int(ValueType.UINT8)) + b"\x01"
    return _head(0, count) + b"".join(_str(b"k.%d" % i) + value for i in range(count))


def many_tensors_file(count: int) -> bytes:
    """``count`` F32 tensors ``t.<i>`` of one element each, laid out as ggml lays them (a legal file).

    >>> with gguf_open(many_tensors_file(3)) as f:
    ...     [(t.name, t.stored_offset) for t in f.tensor_list]
    [('t.0', 0), ('t.1', 32), ('t.2', 64)]
    """
    infos = b"".join(
        _str(b"t.%d" % i) + _u32(1) + _size(1) + _u32(int(GGMLType.F32)) + _u64(32 * i) for i in range(count)
    )
    body = _head(count, 0) + infos
    return body + bytes(align_offset(len(body), 32) - len(body)) + (np.float32(1).tobytes() + bytes(28)) * count


def many_empty_strings_file(count: int) -> bytes:
    """One key whose value is an array of ``count`` empty strings (8 bytes each; a legal file).

    >>> with gguf_open(many_empty_strings_file(2)) as f:
    ...     f.metadata["strings"]
    ['', '']
    """
    return _head(0, 1) + _kv(
        b"strings", int(ValueType.ARRAY), _u32(int(ValueType.STRING)) + _size(count) + _size(0) * count
    )


def ndims_shift_file(data_bytes: int = 1 << 20) -> bytes:
    """Three F32 tensors, the first of ``data_bytes`` bytes of 0xff, and n_dims of the second set from 1 to 0.

    A reader that takes the 0 reads the second tensor's dimension as its type and offset, then the
    second tensor's offset (``data_bytes``) as the length of the third tensor's name: the name runs
    over the tensor data, and the n_dims after it is 0xffffffff. ggml stops at the type (4 is a
    removed type); an error message must not carry the megabyte name.

    >>> from gguf_schema.errors import GGUFError
    >>> try:
    ...     gguf_open(ndims_shift_file(1024))
    ... except GGUFError as e:
    ...     print(type(e).__name__, len(str(e)) < 1024)
    GGUFTruncatedError True
    """
    tensors = {
        "big": np.frombuffer(b"\xff" * data_bytes, np.float32),
        "a": np.ones(4, np.float32),
        "b": np.ones(4, np.float32),
    }
    plain = _save(base_metadata(), tensors)
    at = _located(plain, lambda f: f.info_offsets(f.tensors["a"]).n_dimensions)
    return _patch(plain, at, _u32(0))


def name_nul_padded_file(text_len: int, stored_len: int) -> bytes:
    """One F32 tensor whose stored name is ``text_len`` letters then NULs up to ``stored_len`` bytes.

    ggml caps the stored length (at most 63 bytes, NULs included) before it cuts the name at the NUL.

    >>> name = _located(name_nul_padded_file(3, 67), lambda f: f.tensor_list[0].name)
    >>> len(name), name.rstrip("\\0")
    (67, 'xxx')
    """
    return _save(base_metadata(), {"x" * text_len + "\0" * (stored_len - text_len): np.zeros(4, np.float32)})


def _filler_for(fields: list[Field], tensors: dict[str, Any], fits: Callable[[int], bool]) -> list[Field]:
    """``fields`` plus a ``demo.filler`` string sized so that ``fits(metadata end)`` holds (tensor infos included)."""
    for n in range(128):
        candidate = [*fields, make_field("demo.filler", "f" * n)]
        end = _located(_save(candidate, tensors), lambda f: f.metadata_end)
        if fits(end):
            return candidate
    raise AssertionError("no filler length fits")  # pragma: no cover - 128 lengths cover every residue


def alignment_nul_key_file(
    value: int, suffix: str = "\0x", value_type: ValueType = ValueType.UINT32, real: int | None = None
) -> bytes:
    """A key ``general.alignment`` + ``suffix`` of ``value``; two F32 tensors of 128 bytes laid out for ALIGNMENT 32.

    ggml finds keys by C-string comparison, so for ggml this key *is* the alignment. ``real``
    adds the exact key ``general.alignment`` after it (the file is then laid out for ``real``,
    ggml still takes the first). A filler key puts the end of the tensor infos 1..32 bytes past
    a multiple of 64, so ALIGNMENT 64 starts the data 32 bytes later than 32 does; 256 bytes
    after the data keep a shifted data section inside the file.

    >>> _located(alignment_nul_key_file(64), lambda f: (f.alignment, f.data_offset % 64))
    (32, 32)
    """
    tensors = {"a": np.zeros(32, np.float32), "b": np.ones(32, np.float32)}
    fields = [*_fields(base_metadata()), make_field(K.GENERAL_ALIGNMENT + suffix, value, value_type)]
    fields = _filler_for(fields, tensors, lambda end: 0 < end % 64 <= 32)
    if real is not None:
        fields.append(make_field(K.GENERAL_ALIGNMENT, real, ValueType.UINT32))
    return _save(fields, tensors) + bytes(256)


def _with_head(data: bytes, head: Callable[[GGUFFile, bytes], bytes]) -> bytes:
    """``data`` with everything before the padding replaced by ``head(file, old head)``, the data section re-padded
    to the file's ALIGNMENT after it (tensor offsets stay right)."""
    old, align, data_offset = _located(data, lambda f: (head(f, data[: f.metadata_end]), f.alignment, f.data_offset))
    return old + bytes(align_offset(len(old), align) - len(old)) + data[data_offset:]


def alignment_key_renamed_file(value: int, suffix: str = "\0x") -> bytes:
    """Two tensors laid out for ``general.alignment`` = ``value``, then that key renamed ``general.alignment`` + ``suffix``.

    For ggml, which finds keys as C strings, the file is consistent; a reader that compares whole
    keys lays the data out for the default ALIGNMENT 32 instead.

    >>> _located(alignment_key_renamed_file(1), lambda f: (f.fields.records[-1].key, f.alignment))
    ('general.alignment\\x00x', 32)
    """
    data = _save(base_metadata(), {"a": np.zeros(3, np.float32), "b": np.ones(5, np.float16)}, alignment=value)
    return _rename_key(data, K.GENERAL_ALIGNMENT, (K.GENERAL_ALIGNMENT + suffix).encode())


def _drop_dims(data: bytes, name: str) -> bytes:
    """``data`` with tensor ``name`` stored with n_dims 0 (its dimensions cut out)."""

    def cut(f: GGUFFile, head: bytes) -> bytes:
        at = f.info_offsets(f.tensors[name])
        return head[: at.n_dimensions] + _u32(0) + head[at.type :]

    return _with_head(data, cut)


def _rename_key(data: bytes, key: str, new: bytes) -> bytes:
    """``data`` with metadata key ``key`` stored as the bytes ``new``."""

    def rename(f: GGUFFile, head: bytes) -> bytes:
        at = _pair(f, key)
        return head[: at.start] + _str(new) + head[at.value_type :]

    return _with_head(data, rename)


def ndims_zero_file(ggml_type: GGMLType | str) -> bytes:
    """One tensor of one block of ``ggml_type``, stored with n_dims 0: ggml reads that as dims [1, 1, 1, 1].

    >>> _located(ndims_zero_file("Q8_0"), lambda f: (f.tensor_list[0].type.name, f.tensor_list[0].dims))
    ('Q8_0', ())
    """
    t = GGMLType.of(ggml_type)
    md = base_metadata(quantized=t.quantized)
    return _drop_dims(_save(md, {"w": RawTensor(t, (t.block_size,), np.zeros(t.type_size, np.uint8))}), "w")


def zero_bytes_short_file(cut: int = 0) -> bytes:
    """Two tensors of zero elements, and the file ends ``cut`` bytes after the tensor infos, before the aligned data start.

    >>> data = zero_bytes_short_file()
    >>> _located(data, lambda f: len(data) == f.metadata_end), len(data) % 32 != 0
    (True, True)
    """
    tensors = {"e": np.zeros((4, 0), np.float32), "f": np.zeros(0, np.float32)}
    fields = _filler_for(_fields(base_metadata()), tensors, lambda end: end % 32 not in (0, 31))
    data = _save(fields, tensors)
    end = _located(data, lambda f: f.metadata_end)
    if not 0 <= cut < len(data) - end:
        raise ValueError(f"cut must be in [0, {len(data) - end}), got {cut}")
    return data[: end + cut]


def no_tensors_unpadded_file() -> bytes:
    """Metadata only (no tensors), and the file ends right after the last key, not at a multiple of ALIGNMENT.

    ggml accepts it and puts the data section at that end, unpadded.

    >>> data = no_tensors_unpadded_file()
    >>> len(data) % 32 != 0
    True
    """
    fields = _filler_for(_fields(base_metadata()), {}, lambda end: end % 32 != 0)
    data = _save(fields)
    return data[: _located(data, lambda f: f.metadata_end)]


def zero_elements_huge_dims_file(dims: tuple[int, ...], ggml_type: GGMLType | str = "F32") -> bytes:
    """A tensor of ``ggml_type`` with stored dimensions ``dims`` (one of them 0: no elements, no bytes), then an F32 tensor.

    >>> _located(zero_elements_huge_dims_file((2**62, 0)), lambda f: f.tensor_list[0].dims)
    (4611686018427387904, 0)
    """
    t = GGMLType.of(ggml_type)
    if 0 not in dims:
        raise ValueError(f"dims must hold a 0, got {dims}")
    plain = _save(
        base_metadata(quantized=t.quantized),
        {"z": RawTensor(t, (0,) * len(dims), b""), "after": np.ones(4, np.float32)},
    )
    ats = _located(plain, lambda f: [f.info_offsets(f.tensors["z"]).dimension(j) for j in range(len(dims))])
    for at, d in zip(ats, dims, strict=False):
        plain = _patch(plain, at, _size(d))
    return plain


def wrapped_dims_file(dims: tuple[int, ...], ggml_type: GGMLType | str = "F32") -> bytes:
    """An F32 tensor, then last a tensor of ``ggml_type`` with stored dimensions ``dims`` and the bytes of one block.

    With dims whose product wraps to 0 in int64 (``[4, 2**62]``), ggml's element-count check is skipped
    (it guards on a positive count) and its byte size wraps to 0 too, so the tensor fits any file.

    >>> _located(wrapped_dims_file((4, 2**62)), lambda f: f.tensor_list[-1].dims)
    (4, 4611686018427387904)
    """
    t = GGMLType.of(ggml_type)
    shape = (1,) * (len(dims) - 1) + (t.block_size,)
    tensors = {"before": np.ones(4, np.float32), "w": RawTensor(t, shape, np.zeros(t.type_size, np.uint8))}
    plain = _save(base_metadata(quantized=t.quantized), tensors)
    ats = _located(plain, lambda f: [f.info_offsets(f.tensors["w"]).dimension(j) for j in range(len(dims))])
    for at, d in zip(ats, dims, strict=False):
        plain = _patch(plain, at, _size(d))
    return plain


#: Edge cases where the ``ggml`` profile deliberately rejects a file ggml accepts: case name -> the reason.
GGML_PROFILE_DIFFERS: dict[str, str] = {
    "tensor_element_count_wraps_to_0": "ggml's element-count check runs only when the int64 product of the dimensions "
    "is positive; [4, 2^62] wraps to 0, the check is skipped and the byte size wraps to 0 too, so ggml accepts a tensor "
    "of 2^64 elements whose data no file can hold (a ggml bug: the profile rejects it with GGUF-E035)",
}


def ggml_edge_cases() -> list[MalformedCase]:
    """The edge classes of ``benchmarks/ggml_diff.py``, each with the verdict every profile should give.

    ``ggml`` is what ggml's reader does (``gguf_init_from_file``, full load; an abort counts as a
    rejection), checked against the real library by ``python benchmarks/ggml_diff.py --cases-only``;
    the harness's report (``benchmarks/results/ggml_diff.md``) lists where a profile decides otherwise
    today. ``spec`` and ``lenient`` are this table's reading of the spec text and of "the file and its
    tensors can be read". Files built by hand without ``general.architecture`` fail the spec on that
    alone (GGUF-E050).

    The cost cases are sized so the cost shows: up to 8 MB, about a second to build them all.

    >>> cases = {c.name: c for c in ggml_edge_cases()}
    >>> cases["tensor_name_67_bytes_nul_padded"].expected
    {'spec': 'reject', 'ggml': 'reject', 'lenient': 'accept'}
    >>> sorted({c.section for c in cases.values()})
    ['data', 'kv', 'tensor']
    """
    cases: list[MalformedCase] = []

    def add(name: str, description: str, data: bytes, expected: dict[str, str]) -> None:
        cases.append(MalformedCase(name, description, data, expected))

    # ---------------------------------------------------------------- where ggml's verdict is subtle
    add(
        "tensor_name_64_bytes_nul_padded",
        "a tensor name of 10 letters and 54 NULs: ggml caps the stored length (63) "
        "before it cuts the name at the first NUL",
        name_nul_padded_file(10, 64),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )
    add(
        "tensor_name_67_bytes_nul_padded",
        "a tensor name of 3 letters and 64 NULs (67 bytes stored)",
        name_nul_padded_file(3, 67),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add(
        "kv_alignment_nul_key_3",
        "a key 'general.alignment\\0x' = 3: ggml finds keys as C strings, so this is its ALIGNMENT",
        alignment_nul_key_file(3),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add(
        "kv_alignment_nul_key_uint8",
        "a key 'general.alignment\\0x' stored as UINT8 32: ggml requires its alignment as UINT32",
        alignment_nul_key_file(32, value_type=ValueType.UINT8),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add(
        "kv_alignment_nul_key_shadows",
        "'general.alignment\\0x' = 3 before 'general.alignment' = 32: ggml takes the first match",
        alignment_nul_key_file(3, real=32),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add(
        "kv_alignment_nul_key_64",
        "a key 'general.alignment\\0x' = 64, data laid out for 32: ggml accepts and reads the data "
        "section 32 bytes after the offset gguf_schema reads it at",
        alignment_nul_key_file(64),
        _verdict(REJECT, ACCEPT, ACCEPT),
    )
    add(
        "kv_alignment_key_renamed_1",
        "tensors laid out for ALIGNMENT 1, the key stored as 'general.alignment\\0x' = 1: ggml "
        "reads it as its alignment and the file as consistent; for a whole-key lookup ALIGNMENT is 32 and the data runs "
        "past the end",
        alignment_key_renamed_file(1),
        _verdict(REJECT, ACCEPT, REJECT),
    )
    add(
        "tensor_n_dims_0_q8_0",
        "a Q8_0 tensor stored with n_dims 0: ggml reads dims [1, 1, 1, 1], one element, not a multiple "
        "of the block size 32 (the tensor has no byte size)",
        ndims_zero_file(GGMLType.Q8_0),
        ALL_REJECT,
    )
    add(
        "data_zero_byte_tensors_before_aligned_start",
        "two zero-byte tensors, and the file ends right after the tensor infos, "
        "before the aligned start of the data section: ggml fails to seek there",
        zero_bytes_short_file(0),
        _verdict(ACCEPT, REJECT, ACCEPT),
    )
    add(
        "data_no_tensors_unpadded",
        "no tensors, and the file ends right after the metadata, unpadded (as llama.cpp writes "
        "vocabulary-only files): ggml's data offset is that end",
        no_tensors_unpadded_file(),
        ALL_ACCEPT,
    )
    add(
        "tensor_zero_elements_dims_2_62_by_0",
        "an F32 tensor of dims [2^62, 0]: no elements, no bytes (ggml skips the "
        "overflow checks for a zero-element tensor; numpy cannot shape it)",
        zero_elements_huge_dims_file((2**62, 0)),
        ALL_ACCEPT,
    )
    add(
        "tensor_zero_elements_dims_2_32_squared",
        "an F32 tensor of dims [2^32, 2^32, 0]: no elements, no bytes",
        zero_elements_huge_dims_file((2**32, 2**32, 0)),
        ALL_ACCEPT,
    )
    add(
        "tensor_element_count_wraps_to_0",
        "the last tensor is F32 of dims [4, 2^62]: 2^64 elements, which wrap to 0 in "
        "int64, so ggml skips its element-count check, and its byte size wraps to 0 too: ggml accepts a tensor whose data "
        "cannot be in any file",
        wrapped_dims_file((4, 2**62)),
        _verdict(REJECT, ACCEPT, REJECT),
    )
    add(
        "tensor_element_count_wraps_full_load_aborts",
        "the last tensor is Q8_0 of dims [32, 2^59]: the element count wraps "
        "to 0, the byte size to 2^60; ggml's metadata load accepts, its full load aborts allocating 2^60 bytes (GGML_ASSERT)",
        wrapped_dims_file((32, 2**59), GGMLType.Q8_0),
        ALL_REJECT,
    )
    add(
        "tensor_name_invalid_utf8_too_long",
        "a tensor name of 68 bytes holding the byte 0xff: every profile's finding names "
        "the tensor, and printing that name to a stdout whose error handler is strict (a UTF-8 locale other than C.UTF-8, "
        "PYTHONIOENCODING=utf-8) raises UnicodeEncodeError in 'gguf-schema check'",
        _save(base_metadata(), {"bad\udcffname" + "x" * 60: np.zeros(4, np.float32)}),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    # ---------------------------------------------------------------- small files that cost far more than their size
    add(
        "tensor_n_dims_0_misparse",
        "n_dims of the second of three tensors set from 1 to 0: the third name's length is read "
        "from the second offset (1 MiB) and the name runs over the tensor data; ggml stops at the type (4, removed)",
        ndims_shift_file(1 << 20),
        ALL_REJECT,
    )
    add(
        "kv_key_1_mib_bad_type",
        "a key of 1 MiB with value type 13 (no general.architecture)",
        big_key_bad_type_file(1 << 20),
        ALL_REJECT,
    )
    add(
        "tensor_name_1_mib_bad_dims",
        "a tensor name of 1 MiB with n_dims 99 (no general.architecture)",
        big_name_bad_dims_file(1 << 20),
        ALL_REJECT,
    )
    add(
        "tensor_1m_dims",
        "one tensor info with 1,000,000 dimensions of 1, 7.6 MiB (no general.architecture): numpy cannot "
        "shape more than 64",
        many_dims_file(1_000_000),
        ALL_REJECT,
    )
    add(
        "kv_100k_nested_empty_arrays",
        "an array of 100,000 empty arrays, 1.1 MiB (no general.architecture)",
        nested_empty_arrays_file(100_000),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    add(
        "kv_50k_keys",
        "50,000 small keys, 0.9 MiB (no general.architecture; legal otherwise; ggml's duplicate-key check "
        "is quadratic)",
        many_keys_file(50_000),
        _verdict(REJECT, ACCEPT, ACCEPT),
    )
    add(
        "tensor_30k_tensors",
        "30,000 one-element F32 tensors, 2 MiB (no general.architecture; legal otherwise; ggml's "
        "duplicate-name check is quadratic)",
        many_tensors_file(30_000),
        _verdict(REJECT, ACCEPT, ACCEPT),
    )
    return cases


def __getattr__(name: str) -> Any:
    if name == "GGML_EDGE_CASES":  # built on first use: a few MB, about a second
        value = globals()[name] = ggml_edge_cases()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
