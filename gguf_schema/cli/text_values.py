"""Command-line text to typed metadata values: what ``gguf-schema set KEY VALUE`` stores.

Owns the reading of value types from their names (:func:`parse_type`), their printed names
(:func:`type_label`) and the reading of values from text for a type (:func:`parse_value_text`). Integers are decimal, or ``0x``/``0b``/``0o``
prefixed; a leading zero is allowed (``007`` is 7), as people type numbers.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from .. import Field, GGUFArray, GGUFBuildError, ValueType
from ..format.values import coerce_value

__all__ = ["parse_type", "parse_value_text", "type_label"]

_ARRAY_RE = re.compile(r"^array\s*(?:\[\s*([A-Za-z0-9_]+)\s*\]|:\s*([A-Za-z0-9_]+))?$", re.IGNORECASE)


def parse_type(text: str) -> tuple[ValueType, ValueType | None]:
    """A value type from its name (case-insensitive): ``uint32``, ``string``, ``ARRAY[STRING]`` ...

    >>> parse_type("uint8")
    (<ValueType.UINT8: 0>, None)
    >>> parse_type("array[float32]")
    (<ValueType.ARRAY: 9>, <ValueType.FLOAT32: 6>)
    """
    m = _ARRAY_RE.match(text.strip())
    if m:
        inner = m.group(1) or m.group(2)
        return ValueType.ARRAY, (_scalar_type(inner) if inner else None)
    return _scalar_type(text), None


def type_label(f: Field) -> str:
    """A field's stored type as :func:`parse_type` reads it back: ``UINT32``, ``ARRAY[STRING]``."""
    return f"ARRAY[{f.element_type.name}]" if f.element_type is not None else f.type.name


def _scalar_type(text: str) -> ValueType:
    """A scalar value type by its exact name (any case): ``FLOAT`` or ``int`` are not types, and are
    refused with the valid names (a guess would store a width the user did not choose).

    >>> _scalar_type("FLOAT")
    Traceback (most recent call last):
    ...
    gguf_schema.errors.GGUFBuildError: unknown value type 'FLOAT' (did you mean float32 or float64?); the value types are uint8, int8, uint16, int16, uint32, int32, float32, bool, string, uint64, int64, float64, and arrays as array[TYPE]
    """
    name = text.strip().upper()
    if name in ValueType.__members__ and name != "ARRAY":
        return ValueType[name]
    names = [t.name.lower() for t in ValueType if t != ValueType.ARRAY]
    near = sorted(difflib.get_close_matches(text.strip().lower(), names, n=2, cutoff=0.6), key=names.index)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    raise GGUFBuildError(
        f"unknown value type {text!r}{hint}; the value types are {', '.join(names)}, and arrays as array[TYPE]",
        value=text,
    )


_NUMBER_RE = re.compile(r"^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)$")
_INT_RE = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO][0-7]+|\d+)$")


def _int(text: str) -> int:
    """An integer as people type it: decimal with any leading zeros (``007``), or 0x/0b/0o prefixed."""
    s = text.strip()
    digits = s.lstrip("+-")
    return int(s, 0) if digits[:2].lower() in ("0x", "0b", "0o") else int(s, 10)


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_value_text(
    text: str, vt: ValueType | None = None, et: ValueType | None = None
) -> tuple[ValueType | None, Any]:
    """Turn command-line text into a value, for type ``vt`` (and array element type ``et``).

    Without ``vt`` the type is guessed: ``true``/``false`` -> BOOL, an integer -> the
    smallest fitting of UINT32/INT32/UINT64/INT64, a decimal number -> FLOAT32, a JSON list
    -> ARRAY, anything else -> STRING. Returns ``(type or None when guessed, value)``.

    >>> parse_value_text("4096")
    (None, 4096)
    >>> parse_value_text("0x10", ValueType.UINT8)
    (<ValueType.UINT8: 0>, 16)
    >>> parse_value_text('["a", "b"]', ValueType.ARRAY, ValueType.STRING)
    (<ValueType.ARRAY: 9>, GGUFArray(STRING, ['a', 'b']))
    """
    if vt is None:
        low = text.strip().lower()
        if low in ("true", "false"):
            return None, low == "true"
        if _INT_RE.match(text.strip()):
            return None, _int(text)
        if _NUMBER_RE.match(text.strip()):
            return None, float(text)
        if text.strip().startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError:
                return None, text
            return None, items
        return None, text
    if vt == ValueType.STRING:
        return vt, text
    if vt == ValueType.ARRAY:
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise GGUFBuildError(f'an ARRAY value is a JSON list, e.g. [1, 2] or ["a"]: {e.msg}', value=text) from None
        if not isinstance(items, list):
            raise GGUFBuildError("an ARRAY value is a JSON list", value=text)
        if et is None:
            return vt, items
        return vt, GGUFArray(et, _typed_items(items, et))
    return vt, _scalar_from_text(text, vt)


def _typed_items(items: list, et: ValueType) -> Any:
    if et == ValueType.STRING:
        return [x if isinstance(x, str) else json.dumps(x) for x in items]
    if et == ValueType.ARRAY:
        raise GGUFBuildError(
            "nested arrays cannot be given on the command line: use dump --json / build", value=et.name
        )
    vals = [_scalar_from_text(x, et) if isinstance(x, str) else x for x in items]
    return coerce_value(vals, ValueType.ARRAY, et)[1].items


def _scalar_from_text(text: Any, vt: ValueType) -> Any:
    s = str(text).strip()
    if vt == ValueType.BOOL:
        if s.lower() in _TRUE:
            return True
        if s.lower() in _FALSE:
            return False
        raise GGUFBuildError(f"BOOL needs true or false, got {s!r}", value=s)
    if vt.is_integer:
        if not _INT_RE.match(s):
            raise GGUFBuildError(f"{vt.name} needs an integer, got {s!r}", value=s)
        return _int(s)
    if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
        try:
            v = float(s)
        except ValueError:
            raise GGUFBuildError(f"{vt.name} needs a number, got {s!r}", value=s) from None
        return v
    return s  # pragma: no cover - STRING handled by the caller
