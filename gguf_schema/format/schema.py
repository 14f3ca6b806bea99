"""The GGUF file layout as ``construct`` declarations: the spec, transcribed.

Read this module next to the spec (``docs/gguf.md`` in ggml's repository,
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md; ``spec/gguf.json`` (top level) holds our
copy of its facts). Each spec struct appears in the spec's order under the spec's name and field names:
``gguf_string_t``, ``gguf_metadata_value_type``, ``gguf_metadata_value_t`` (a ``Switch`` on the
value type) with its ``array`` member, ``gguf_metadata_kv_t``, ``gguf_header_t``,
``gguf_tensor_info_t``, ``gguf_file_t``. The nodes they are made of live in
:mod:`~gguf_schema.format.nodes`; this module holds only the declarations, the two rules the
spec states in prose (``ALIGNMENT`` and the byte-order convention), and the one entry point
that parses with them.

This schema is what parses. By itself it reads every file (slowly: construct's ``Array`` of the
value union reads a 262k-token vocabulary one element at a time), and the tests run it on every
real and generated file. Speed is a named layer, :mod:`gguf_schema.format.fast`: its one function
``accelerate(schema)`` swaps three nodes (the array body, the array of metadata pairs, the array of
tensor infos; the hooks ``array_body`` and ``records`` below) for faster nodes that read the same
bytes into the same values, and the reader uses the schema so accelerated. The tests prove that
both give the same values, errors and bytes.

One factory, :func:`gguf_schema`, builds the structs for a (byte order, version) pair
(:class:`~gguf_schema.format.variant.Variant`): little or big endian; version 1 (uint32 counts,
lengths and dimensions) or 2/3 (uint64). Arrays recurse through ``LazyBound``.

>>> s = gguf_schema("little", 3)
>>> s.gguf_string_t.build("hi")
b'\\x02\\x00\\x00\\x00\\x00\\x00\\x00\\x00hi'
>>> gguf_schema("big", 3).gguf_string_t.parse(b"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02hi")
'hi'
>>> gguf_schema("little", 1).gguf_string_t.build("hi")
b'\\x02\\x00\\x00\\x00hi'
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from construct import Computed, Const, Construct, Container, LazyBound, Rebuild, Struct, Switch, len_, this

from ..errors import GGUFFormatError, GGUFTruncatedError
from . import keys as K
from .limits import DEFAULT_LIMITS, Limits
from .nodes import (
    AlignmentPadding,
    ArrayValue,
    BoolValue,
    DataSection,
    FloatValue,
    IndexedArray,
    StringBytes,
    StringValue,
    TensorData,
    ValueArray,
    ValueTypeField,
    align_offset,
    numbers,
)
from .types import ValueType
from .variant import Variant

__all__ = ["DEFAULT_ALIGNMENT", "DataSection", "GGUFSchema", "align_offset", "alignment_of", "gguf_schema", "sniff"]

#: ``general.alignment`` when the key is absent.
DEFAULT_ALIGNMENT = 32


def sniff(head: bytes) -> tuple[str, int]:
    """Byte order and version of a GGUF file from its first 8 bytes.

    The magic is the bytes ``GGUF`` in both byte orders; a version whose low 16 bits are zero
    when read little-endian means the file is big-endian (the ecosystem's convention).

    >>> sniff(b"GGUF\\x03\\x00\\x00\\x00"), sniff(b"GGUF\\x00\\x00\\x00\\x03")
    (('little', 3), ('big', 3))
    """
    if len(head) < 4 or head[:4] != b"GGUF":
        if len(head) < 4 and b"GGUF".startswith(bytes(head)):
            raise GGUFTruncatedError(
                f"file ends inside the magic ({len(head)} bytes)", offset=0, path="header.magic", value=bytes(head)
            )
        raise GGUFFormatError(
            f"not a GGUF file: magic {bytes(head[:4])!r}, expected b'GGUF'",
            offset=0,
            path="header.magic",
            value=bytes(head[:4]),
        )
    if len(head) < 8:
        raise GGUFTruncatedError(
            f"file ends inside the version ({len(head)} bytes)", offset=4, path="header.version", value=bytes(head)
        )
    version = int.from_bytes(head[4:8], "little")
    order = "little"
    if version & 0xFFFF == 0 and version:
        version = int.from_bytes(head[4:8], "big")
        order = "big"
    if version not in (1, 2, 3):
        raise GGUFFormatError(
            f"unsupported GGUF version {version} (this library reads 1, 2 and 3)",
            offset=4,
            path="header.version",
            value=version,
        )
    return order, version


def alignment_of(metadata_kv: Iterable[Any]) -> int:
    """ALIGNMENT: the first ``general.alignment`` if it is a positive integer, else 32.

    Takes parsed ``gguf_metadata_kv_t`` records or :class:`~gguf_schema.format.values.Field` objects.
    """
    key = K.GENERAL_ALIGNMENT  # a local: this loop runs over every pair of the file
    for kv in metadata_kv:
        if kv.key == key:
            # a parsed record names its type value_type, a Field names it type (UINT8 is 0: no `or`)
            vt = kv.value_type if hasattr(kv, "value_type") else kv.type
            value = kv.value
            if vt.is_integer and value > 0:
                return int(value)
            return DEFAULT_ALIGNMENT
    return DEFAULT_ALIGNMENT


ArrayBody = Callable[..., Construct]
"""Makes the node for the items of a metadata array (``gguf_metadata_value_t array[len]``):
called with ``item_type``, ``count``, ``variant``, ``value`` (the value union for one item type)
and ``array`` (the array member, for items that are arrays). :func:`value_array` here (the spec's
``Array``); the fast layer passes its own."""


RecordsNode = Callable[..., Construct]
"""Makes the node for an array of records (``metadata_kv``, ``tensor_infos``): called with ``kind``
("metadata_kv" or "tensor_infos"), ``count``, ``record`` (the declared struct), ``min_size``,
``limit``, ``items`` (the array body node) and ``variant``. :func:`declared_records` here; the fast
layer passes its own (one loop per array)."""


def declared_records(
    *, kind: str, count: Any, record: Construct, min_size: int, limit: str, items: Any, variant: Variant
) -> Construct:
    """construct's array of the declared struct (with our count checks and error paths)."""
    return IndexedArray(count, record, min_size=min_size, limit=limit, named=True)


def value_array(*, item_type: Any, count: Any, variant: Variant, value: Any, array: Construct) -> Construct:
    """``gguf_metadata_value_t array[len]``, literally: construct's ``Array`` of the value union."""
    return ValueArray(count, value(item_type), variant.size_t)


@dataclass(frozen=True)
class GGUFSchema:
    """The structs of the spec for one (byte order, version), and the entry point that parses with them."""

    variant: Variant
    accelerated: bool
    byte_order: str
    version: int
    gguf_string_t: Construct
    gguf_metadata_value_type: Construct
    gguf_metadata_value_t: Callable[[Any], Construct]
    gguf_array_t: Construct
    gguf_metadata_kv_t: Construct
    gguf_header_t: Construct
    ggml_type: Construct
    gguf_tensor_info_t: Construct
    gguf_file_t: Construct
    size_t: int

    def parse_stream(self, stream: Any, *, limits: Limits | None = None, lazy: bool = False) -> Container:
        """Parse a whole file (construct's ``parse_stream``) under ``limits``; ``lazy`` leaves
        string arrays undecoded. Raises our errors only for malformed input (see
        :mod:`gguf_schema.format.boundary` for the translation of anything else)."""
        limits = limits or DEFAULT_LIMITS
        # _root=None: construct's outermost struct would otherwise keep itself as its context's root,
        # a cycle through every parsed value, so a file dropped would wait for the cyclic GC
        return self.gguf_file_t.parse_stream(
            stream, limits=limits, lazy=lazy, byte_order=self.byte_order, size_t=self.size_t, _depth=1, _root=None
        )


@functools.cache
def gguf_schema(
    byte_order: str = "little",
    version: int = 3,
    *,
    array_body: ArrayBody = value_array,
    records: RecordsNode = declared_records,
) -> GGUFSchema:
    """The GGUF schema for ``byte_order`` ("little" or "big") and ``version`` (1, 2 or 3).

    ``array_body`` and ``records`` make the nodes the fast layer replaces
    (:func:`gguf_schema.format.fast.accelerate` passes its own); the defaults are the spec's.
    Results are cached: each variant is built once.
    """
    v = Variant.of(byte_order, version)
    I = numbers(v)  # noqa: E741 - the integer fields of this byte order
    # v1 stored counts, lengths and dimensions as uint32; v2 widened them to uint64.
    length = I.u32 if v.size_t == 4 else I.u64
    size_t = v.size_t

    def gguf_string(limit: str) -> Construct:
        # struct gguf_string_t { uint64_t len; char string[len]; }
        return StringValue(
            Struct(
                "len" / Rebuild(length, len_(this.string)),
                "string" / StringBytes(this.len, size_t, limit),
            )
        )

    gguf_string_t = gguf_string("max_string_length")

    # enum gguf_metadata_value_type: uint32_t { UINT8 = 0, ... FLOAT64 = 12 }
    gguf_metadata_value_type = ValueTypeField(I.u32)

    # union gguf_metadata_value_t, selected by the value type
    cases: dict[int, Construct] = {
        ValueType.UINT8: I.u8,
        ValueType.INT8: I.i8,
        ValueType.UINT16: I.u16,
        ValueType.INT16: I.i16,
        ValueType.UINT32: I.u32,
        ValueType.INT32: I.i32,
        ValueType.FLOAT32: FloatValue(v.dtype("f4")),
        ValueType.BOOL: BoolValue(I.u8),
        ValueType.STRING: gguf_string_t,
        ValueType.ARRAY: LazyBound(lambda: gguf_array_t),
        ValueType.UINT64: I.u64,
        ValueType.INT64: I.i64,
        ValueType.FLOAT64: FloatValue(v.dtype("f8")),
    }

    def gguf_metadata_value_t(value_type: Any) -> Construct:
        return Switch(value_type, cases)

    # the `array` member of the union:
    # { gguf_metadata_value_type type; uint64_t len; gguf_metadata_value_t array[len]; }
    items = array_body(
        item_type=this.type,
        count=this.len,
        variant=v,
        value=gguf_metadata_value_t,
        array=LazyBound(lambda: gguf_array_t),
    )
    gguf_array_t: Construct = ArrayValue(
        Struct(
            "type" / gguf_metadata_value_type,
            "len" / Rebuild(length, len_(this.array)),
            "array" / items,
        )
    )
    nodes = {"items": items, "variant": v}

    # struct gguf_metadata_kv_t { gguf_string_t key; gguf_metadata_value_type value_type; gguf_metadata_value_t value; }
    gguf_metadata_kv_t = Struct(
        "key" / gguf_string("max_key_length"),
        "value_type" / gguf_metadata_value_type,
        "value" / gguf_metadata_value_t(this.value_type),
    )

    # struct gguf_header_t
    gguf_header_t = Struct(
        "magic" / Const(b"GGUF"),
        "version" / Const(version, I.u32),
        "tensor_count" / Rebuild(length, len_(this._.tensor_infos)),
        "metadata_kv_count" / Rebuild(length, len_(this.metadata_kv)),
        "metadata_kv"
        / records(
            kind="metadata_kv",
            count=this.metadata_kv_count,
            record=gguf_metadata_kv_t,
            min_size=size_t + 4 + 1,
            limit="max_keys",
            **nodes,
        ),
    )

    # enum ggml_type: uint32_t (kept as the stored integer; format.types.GGMLType names it)
    ggml_type = I.u32

    # struct gguf_tensor_info_t
    gguf_tensor_info_t = Struct(
        "name" / gguf_string("max_tensor_name_length"),
        "n_dimensions" / Rebuild(I.u32, len_(this.dimensions)),
        "dimensions" / IndexedArray(this.n_dimensions, length, min_size=size_t, limit="max_dims"),
        "type" / ggml_type,
        "offset" / I.u64,
    )

    # struct gguf_file_t
    gguf_file_t = Struct(
        "header" / gguf_header_t,
        "tensor_infos"
        / records(
            kind="tensor_infos",
            count=this.header.tensor_count,
            record=gguf_tensor_info_t,
            min_size=size_t + 4 + 4 + 8,
            limit="max_tensors",
            **nodes,
        ),
        # ALIGNMENT: general.alignment, 32 by default
        "alignment" / Computed(lambda ctx: alignment_of(ctx.header.metadata_kv)),
        "_padding" / AlignmentPadding(this.alignment),
        "tensor_data" / TensorData(),
    )

    return GGUFSchema(
        variant=v,
        accelerated=array_body is not value_array,
        byte_order=byte_order,
        version=version,
        gguf_string_t=gguf_string_t,
        gguf_metadata_value_type=gguf_metadata_value_type,
        gguf_metadata_value_t=gguf_metadata_value_t,
        gguf_array_t=gguf_array_t,
        gguf_metadata_kv_t=gguf_metadata_kv_t,
        gguf_header_t=gguf_header_t,
        ggml_type=ggml_type,
        gguf_tensor_info_t=gguf_tensor_info_t,
        gguf_file_t=gguf_file_t,
        size_t=size_t,
    )
