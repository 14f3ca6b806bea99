"""Malformed (and edge-case valid) GGUF files, one for each class ggml's reader is tested against.

This module owns :func:`malformed_cases`: small files generated with the library's own writer,
then broken by overwriting bytes at offsets the reader reports (``Field.offset``,
``Tensor.info_offset``) — no second parser. Each :class:`MalformedCase` says what the three
validation profiles of :mod:`gguf_schema.check.validate` decide about it: ``ggml`` is the verdict of
ggml's C reader (the classes are those of ``../shared/reference/ggml-reader-rules.md``), ``spec``
the verdict of the spec text, ``lenient`` whether the file and its tensors can be read at all.

Files are deterministic (fixed seeds). Unless a case is about them, every file carries a
spec-complete ``gpt2`` header and its tensor data, so each case breaks one thing.

>>> cases = {c.name: c for c in malformed_cases()}
>>> cases["data_alignment_1"].expected
{'spec': 'reject', 'ggml': 'accept', 'lenient': 'accept'}
>>> cases["header_bad_magic"].data[:4]
b'GGUX'
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..format.types import GGMLType, ValueType
from ..format.values import BoolByte, Field, GGUFArray, make_field
from ..model import GGUFFile, Tensor
from ..reader import read as gguf_open
from ..writer import RawTensor, save

__all__ = ["MalformedCase", "base_metadata", "malformed_cases"]

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
        "general.architecture": "gpt2",
        "gpt2.context_length": np.uint32(64),
        "gpt2.embedding_length": np.uint32(8),
        "gpt2.block_count": np.uint32(1),
        "gpt2.attention.head_count": np.uint32(2),
        "gpt2.attention.layer_norm_epsilon": np.float32(1e-5),
    }
    if quantized:
        md["general.quantization_version"] = np.uint32(2)
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


def _located(data: bytes, fn: Callable[[GGUFFile], Any]) -> Any:
    """Open ``data`` with the reader and ask ``fn`` for offsets (the reader is the only parser)."""
    with gguf_open(data) as f:
        return fn(f)


def _value_offset(f: GGUFFile, key: str) -> int:
    fld = f.fields[key]
    return fld.offset + 8 + len(key.encode()) + 4


def _type_offset(f: GGUFFile, key: str) -> int:
    return f.fields[key].offset + 8 + len(key.encode())


def _name_len(t: Tensor) -> int:
    return len(t.name.encode("utf-8", "surrogateescape"))


def _dim_offset(t: Tensor, j: int) -> int:
    return t.info_offset + 8 + _name_len(t) + 4 + 8 * j


def _ttype_offset(t: Tensor) -> int:
    return _dim_offset(t, len(t.dims))


def _toffset_offset(t: Tensor) -> int:
    return _ttype_offset(t) + 4


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
    add("header_n_tensors_max", "tensor_count is 2^64-1", _patch(plain, 8, _u64(2**64 - 1)), ALL_REJECT)
    add("header_n_kv_max", "metadata_kv_count is 2^64-1", _patch(plain, 16, _u64(2**64 - 1)), ALL_REJECT)
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
    at = _located(md, lambda f: f.fields["gpt2.context_length"].offset)
    add("kv_key_length_max", "a key's length is 2^64-1", _patch(md, at, _u64(2**64 - 1)), ALL_REJECT)
    add(
        "kv_empty_key",
        "a key is the empty string",
        _save([*_fields(base), make_field("", np.uint32(1))]),
        _verdict(REJECT, REJECT, ACCEPT),
    )
    at = _located(md, lambda f: _type_offset(f, "gpt2.block_count"))
    add("kv_value_type_13", "a value type is 13 (valid: 0..12)", _patch(md, at, _u32(13)), ALL_REJECT)
    add(
        "kv_duplicate_key",
        "general.name appears twice (the spec does not forbid it: a warning)",
        _save([*_fields(base), make_field("general.name", "a"), make_field("general.name", "b")]),
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
        _save([*_fields(base), make_field("general.alignment", 32, ValueType.INT32)]),
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
        _save([*_fields(base), make_field("general.name", "bad\udcffname")]),
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

    at = _located(plain, lambda f: _dim_offset(first(f), 1))
    add(
        "tensor_dim_negative",
        "a dimension is 2^64-1 (-1 as int64): its data cannot be in the file",
        _patch(plain, at, _u64(2**64 - 1)),
        ALL_REJECT,
    )
    at = _located(plain, lambda f: _dim_offset(first(f), 0))
    add(
        "tensor_element_count_overflow",
        "dimensions 2^32 x 2^32: the element count reaches INT64_MAX",
        _patch(plain, at, _u64(2**32) + _u64(2**32)),
        ALL_REJECT,
    )
    f64 = _save(base, {"t": np.zeros(4, np.float64)})
    at = _located(f64, lambda f: _dim_offset(first(f), 0))
    add(
        "tensor_byte_size_overflow",
        "an F64 tensor of 2^62 elements: its byte size overflows size_t",
        _patch(f64, at, _u64(2**62)),
        ALL_REJECT,
    )
    at = _located(plain, lambda f: _ttype_offset(first(f)))
    add("tensor_type_43", "a tensor type is 43 (valid: 0..42)", _patch(plain, at, _u32(43)), ALL_REJECT)
    at = _located(plain, lambda f: _toffset_offset(first(f)))
    add("tensor_offset_max", "a tensor offset is 2^64-1", _patch(plain, at, _u64(2**64 - 1)), ALL_REJECT)
    two = _save(base, {"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)})
    at = _located(two, lambda f: f.tensors["b"].info_offset + 8)
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
    at = _located(aligned32, lambda f: _value_offset(f, "general.alignment"))
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
    at = _located(aligned64, lambda f: _value_offset(f, "general.alignment"))
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
        lambda f: (_dim_offset(f.tensors["a"], 0), _dim_offset(f.tensors["b"], 0), _toffset_offset(f.tensors["b"])),
    )
    big = _patch(_patch(_patch(f64x2, a_dim, _u64(2**60)), b_dim, _u64(2**60)), b_off, _u64(2**63))
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
