"""Metadata values: nested arrays (ggml), bools stored as other bytes, strings that are not UTF-8 (the spec)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...format.types import ValueType
from ...format.values import BoolByte, Field, GGUFArray, LazyStrings
from .core import GGML, SPEC, SURROGATES, Checker, encoded, reports, rule

__all__ = ["value_encoding"]


E024 = rule(
    "GGUF-E024",
    "no array holds arrays",
    "ggml: an array whose element type is ARRAY is rejected (the spec allows nesting)",
    [GGML],
)
E025 = rule(
    "GGUF-E025",
    "each bool is stored as the byte 0 or 1",
    "spec: '1-byte value where 0 is false and 1 is true. Anything else is invalid'",
    [SPEC],
)
E026 = rule(
    "GGUF-E026",
    "each string (keys, values, tensor names) is valid UTF-8",
    "spec: 'The string as a UTF-8 non-null-terminated string'",
    [SPEC],
)


@reports(E024, E025, E026)
def value_encoding(c: Checker) -> None:
    """Nested arrays (``ggml``); bools stored as other bytes and strings that are not UTF-8 (``spec``)."""
    ruled = (ValueType.ARRAY, ValueType.BOOL, ValueType.STRING) if c.profile == SPEC else (ValueType.ARRAY,)
    for fld in [fld for fld in c.f.fields.records if fld.type in ruled]:  # the only values with a rule
        if fld.type == ValueType.ARRAY:
            array_value(c, fld, fld.value, c.value_offset(fld), fld.key, top=True)
        else:
            scalar_value(c, fld)


def scalar_value(c: Checker, fld: Field) -> None:
    if fld.type == ValueType.BOOL and isinstance(fld.value, BoolByte):
        c.add(E025, c.value_offset(fld), fld.key, int(fld.value), f"bool stored as byte {int(fld.value)}")
    elif fld.type == ValueType.STRING and SURROGATES.search(fld.value):
        c.add(E026, c.value_offset(fld), fld.key, encoded(fld.value), "string value is not valid UTF-8")


def array_value(c: Checker, fld: Field, arr: GGUFArray, offset: int, name: str, top: bool) -> None:
    if arr.type == ValueType.ARRAY:
        if c.profile == GGML:
            c.add(E024, offset, name, "ARRAY", "array of arrays: ggml rejects nested arrays")
            return
        for i, inner in enumerate(
            arr.items
        ):  # offsets of nested items are not tracked: the array's own offset is given
            array_value(c, fld, inner, offset, f"{name}[{i}]", top=False)
        return
    if c.profile != SPEC:
        return
    if arr.type == ValueType.BOOL:
        raw = np.asarray(arr.items).view(np.uint8)
        bad = np.flatnonzero(raw > 1)
        if bad.size:
            i = int(bad[0])
            at = c.item_offset(fld, i) if top else offset
            c.add(
                E025,
                at,
                f"{name}[{i}]",
                int(raw[i]),
                f"bool array item stored as byte {int(raw[i])} ({bad.size} such items)",
            )
    elif arr.type == ValueType.STRING and (bad_items := _invalid_strings(arr.items)):
        i = bad_items[0]
        at = c.item_offset(fld, i) if top else offset
        c.add(
            E026,
            at,
            f"{name}[{i}]",
            encoded(arr.items[i]),
            f"string array item is not valid UTF-8 ({len(bad_items)} such items)",
        )


def _invalid_strings(items: Any) -> list[int]:
    """The indices of the strings of an array that are not valid UTF-8; an undecoded (lazy) array is
    checked in its stored bytes, without making a Python string of each item."""
    if isinstance(items, LazyStrings):
        return items.invalid_utf8()
    if not items or not SURROGATES.search("".join(items)):
        return []
    return [i for i, s in enumerate(items) if SURROGATES.search(s)]
