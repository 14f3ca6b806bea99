"""The reference variant of the schema: the same spec structs with construct's plain ``Array`` as array bodies.

The schema (:mod:`gguf_schema.format.schema`) reads a metadata array's items with one fast node
(:class:`~gguf_schema.format.nodes.ArrayItems`: numpy for numbers, a tight loop for strings), and
the arrays of records (metadata pairs, tensor infos) with one loop each. This module swaps those
nodes for the literal spec reading: ``gguf_metadata_value_t array[len]`` as construct's ``Array``
of the value union, and construct's array of each declared struct, under the same limits. It is slow (seconds for a
real vocabulary) and exists to prove the fast node right: the test-suite checks that both
variants give identical values and identical bytes on every real and generated file.

>>> import io, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"tokens": ["a", "bc"], "scores": [0.5, 1.5]})
>>> with read_reference(buf.getvalue()) as f:
...     f.metadata["tokens"], f.metadata["scores"].tolist()
(['a', 'bc'], [0.5, 1.5])
"""

from __future__ import annotations

from typing import Any

import numpy as np
from construct import Adapter, Construct, evaluate

from ..errors import GGUFLimitError
from ..format.limits import Limits
from ..format.nodes import IndexedArray, _check_count, limits_of, min_value_size, nested, numeric_bytes, where
from ..format.schema import GGUFSchema, declared_records, gguf_schema
from ..format.source import SourceLike
from ..format.types import ValueType
from ..model import GGUFFile
from ..reader import read_with

__all__ = ["read_reference", "reference_schema"]


class ValueItems(IndexedArray):
    """construct's ``Array`` of the value union, under the same count checks and limits as the fast node."""

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        n, limits = evaluate(self.count, context), limits_of(context)
        _check_count(stream, n, evaluate(self.min_size, context), path)
        if n > limits.max_array_length:
            raise GGUFLimitError(
                f"array of {n} elements exceeds the limit of {limits.max_array_length}",
                offset=stream.tell(),
                path=where(path),
                value=n,
            )
        if context.type != ValueType.ARRAY:
            return super()._parse(stream, context, path)
        with nested(context, limits, stream.tell(), path):
            return super()._parse(stream, context, path)


class ItemsList(Adapter):
    """construct's list of elements <-> the fast node's form (read-only numpy arrays for numbers)."""

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        vt = context.type
        if vt.is_numeric:
            if vt == ValueType.BOOL:
                arr = np.array([int(x) for x in obj], dtype=np.uint8).view(np.bool_)
            else:
                arr = np.array(list(obj), dtype=vt.numpy_dtype("little").newbyteorder("="))
            arr.flags.writeable = False
            return arr
        return list(obj)

    def _encode(self, obj: Any, context: Any, path: str) -> Any:
        vt = context.type
        if vt == ValueType.BOOL:
            return np.asarray(obj).view(np.uint8).tolist()
        if vt.is_numeric:
            numeric_bytes(obj, vt, "little", path)  # same type rules as the fast node
            return list(np.asarray(obj)) if vt in (ValueType.FLOAT32, ValueType.FLOAT64) else np.asarray(obj).tolist()
        return list(obj)


def reference_array_body(
    *, item_type: Any, count: Any, byte_order: str, version: int, value: Any, array: Construct
) -> Construct:
    """``gguf_metadata_value_t array[len]``, literally."""
    size_t = 4 if version == 1 else 8
    return ItemsList(ValueItems(count, value(item_type), min_size=lambda ctx: min_value_size(ctx.type, size_t)))


def reference_schema(byte_order: str = "little", version: int = 3) -> GGUFSchema:
    """The reference variant of :func:`gguf_schema.format.schema.gguf_schema`."""
    return gguf_schema(byte_order, version, array_body=reference_array_body, records=declared_records)


def read_reference(source: SourceLike, *, limits: Limits | None = None) -> GGUFFile:
    """:func:`gguf_schema.read` through the reference variant of the schema."""
    return read_with(reference_schema, source, limits=limits)
