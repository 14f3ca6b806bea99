"""Where each field of a stored record lies: the offsets of ``gguf_metadata_kv_t`` and ``gguf_tensor_info_t``.

The parse records where every record starts (``Field.offset``, ``Tensor.info_offset``: the
arrays of records note each start as they read it). The fields inside a record follow from that
start, the variant (:class:`~gguf_schema.format.variant.Variant`: the size of a stored length)
and what the parse read (the key's or name's stored length, the number of dimensions), exactly as
:mod:`~gguf_schema.format.schema` declares them; this module is the one place that says so, so that
no check computes the layout again by hand. The model hands these out
(:meth:`~gguf_schema.model.GGUFFile.pair_offsets`, :meth:`~gguf_schema.model.GGUFFile.info_offsets`).

>>> from gguf_schema.format.variant import Variant
>>> p = PairOffsets.of(Variant.of("little", 3), 24, "general.name")
>>> p.key, p.value_type, p.value, p.items
(32, 44, 48, 60)
>>> t = InfoOffsets.of(Variant.of("little", 1), 100, "w", 2)
>>> t.n_dimensions, t.dimension(1), t.type, t.offset
(105, 113, 117, 121)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .types import ValueType
from .variant import Variant

__all__ = ["InfoOffsets", "PairOffsets"]


def _stored_length(text: str) -> int:
    """The bytes a key or name takes as stored (invalid UTF-8 was read as surrogate escapes)."""
    return len(text.encode("utf-8", "surrogateescape"))


@dataclass(frozen=True, slots=True)
class PairOffsets:
    """The offsets of one ``gguf_metadata_kv_t``: ``start`` (the key's length), ``key`` (its bytes),
    ``value_type``, ``value`` (the value, or an array's item type) and ``items`` (an array's first item)."""

    start: int
    key: int
    value_type: int
    value: int
    items: int
    size_t: int

    @staticmethod
    def of(variant: Variant, start: int, key: str) -> PairOffsets:
        """The offsets of the pair with key ``key`` stored at ``start``."""
        n = variant.size_t
        value = start + n + _stored_length(key) + 4
        return PairOffsets(start, start + n, value - 4, value, value + 4 + n, n)

    def item(self, array: Any, index: int) -> int:
        """Where item ``index`` of ``array`` (this pair's :class:`~gguf_schema.format.values.GGUFArray`
        value, not an array of arrays) starts."""
        if array.type == ValueType.STRING:
            return self.items + sum(self.size_t + _stored_length(s) for s in array.items[:index])
        return self.items + index * int(array.type.itemsize)


@dataclass(frozen=True, slots=True)
class InfoOffsets:
    """The offsets of one ``gguf_tensor_info_t``: ``start`` (the name's length), ``name``,
    ``n_dimensions``, the ``dimensions`` (:meth:`dimension`), ``type`` and ``offset``."""

    start: int
    name: int
    n_dimensions: int
    dimensions: int
    type: int
    offset: int
    size_t: int

    @staticmethod
    def of(variant: Variant, start: int, name: str, n_dimensions: int) -> InfoOffsets:
        """The offsets of the tensor info named ``name`` with ``n_dimensions`` dimensions stored at ``start``."""
        n = variant.size_t
        nd = start + n + _stored_length(name)
        dims = nd + 4
        type_at = dims + n_dimensions * n
        return InfoOffsets(start, start + n, nd, dims, type_at, type_at + 4, n)

    def dimension(self, j: int) -> int:
        """Where dimension ``j`` is stored."""
        return self.dimensions + j * self.size_t
