"""A JSON form of a GGUF file's header that rebuilds the file byte for byte.

:func:`to_json` turns everything before the data section into JSON: version, byte order, every
metadata record in file order (duplicates included) with its stored type, the tensor infos with
their stored offsets, and the padding bytes. :func:`build` writes a GGUF file from that JSON;
the tensor data comes from another GGUF file (``tensors_from``), copied verbatim when its tensor
layout is the one the JSON describes, so ``dump --json`` followed by ``build`` reproduces the
original file exactly.

Values are written so that nothing is lost:

==============  ==========================================================================
stored type     JSON
==============  ==========================================================================
integers        numbers (UINT64 beyond 2**53 included: Python's JSON keeps integers exact)
FLOAT32/64      numbers, the shortest decimal that rebuilds the same bits; ``"nan"``,
                ``"inf"``, ``"-inf"`` for the standard encodings; ``"0x7fc00001"`` (the bits in
                hex) for any other NaN
BOOL            ``true`` / ``false``; an integer for a stored byte other than 0 or 1
STRING          a string; ``{"hex": "..."}`` when the bytes are not valid UTF-8 (keys and
                tensor names too)
ARRAY           ``"element_type"`` next to ``"type": "ARRAY"`` and a list; an array of arrays
                holds ``{"element_type": ..., "value": [...]}`` objects
==============  ==========================================================================

>>> import io, numpy as np, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.name": "tiny", "eps": np.float32(1e-6)})
>>> doc = to_json(gguf_schema.open(buf.getvalue()))
>>> doc["metadata"][1]
{'key': 'eps', 'type': 'FLOAT32', 'value': 1e-06}
>>> out = io.BytesIO(); build(doc, out); out.getvalue() == buf.getvalue()
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any, Union

import numpy as np

from ..durable import refuse_overwriting_inputs
from ..errors import GGUFBuildError
from ..format.limits import Limits
from ..format.types import GGMLType, ValueType, type_name
from ..format.values import BoolByte, Field, GGUFArray, make_field
from ..model import GGUFFile
from ..reader import read
from ..writer import DataCopy, PlannedTensor, Progress, TensorRecord, plan_tensor, write_file

__all__ = [
    "FORMAT",
    "JSONModel",
    "build",
    "decode_value",
    "dumps",
    "encode_value",
    "field_json",
    "from_json",
    "loads",
    "to_json",
    "value_text",
]

#: the value of the ``"gguf_schema_json"`` member: the version of this JSON form
FORMAT = 1

_FLOAT_BITS = {ValueType.FLOAT32: (np.float32, np.uint32, 8), ValueType.FLOAT64: (np.float64, np.uint64, 16)}


# --------------------------------------------------------------------------- encoding


def _text(s: str) -> Any:
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return {"hex": s.encode("utf-8", "surrogateescape").hex()}


def _float_json(x: Any, vt: ValueType) -> Any:
    ftype, itype, digits = _FLOAT_BITS[vt]
    x = ftype(x)
    bits = int(np.asarray(x).view(itype))
    if not np.isfinite(x):
        if np.isinf(x):
            return "inf" if x > 0 else "-inf"
        if bits == int(np.asarray(ftype(np.nan)).view(itype)):
            return "nan"
        return f"0x{bits:0{digits}x}"
    short = float(str(x))  # numpy prints the shortest decimal that identifies the value
    if int(np.asarray(ftype(short)).view(itype)) == bits:
        return short
    return float(x)  # pragma: no cover - the exact double always rebuilds the bits


def _float_items_json(items: np.ndarray, vt: ValueType) -> list:
    _ftype, _itype, _ = _FLOAT_BITS[vt]
    if vt == ValueType.FLOAT64:
        out = items.tolist()  # repr of a double round-trips
    else:
        out = [float(str(v)) for v in items]
        rebuilt = np.array(out, np.float64).astype(np.float32)
        bad = np.flatnonzero((rebuilt.view(np.uint32) != items.view(np.uint32)) | ~np.isfinite(items))
        for i in bad:  # non-finite values, or (never seen) a decimal that rounds twice
            out[i] = _float_json(items[i], vt)
        return out
    bad = np.flatnonzero(~np.isfinite(items))
    for i in bad:
        out[i] = _float_json(items[i], vt)
    return out


def encode_value(vt: ValueType, value: Any) -> Any:
    """A stored value (canonical form, see :mod:`gguf_schema.format.values`) as JSON-ready data.

    >>> encode_value(ValueType.FLOAT32, np.float32(0.1)), encode_value(ValueType.BOOL, BoolByte(2))
    (0.1, 2)
    >>> encode_value(ValueType.STRING, b"\\xff".decode("utf-8", "surrogateescape"))
    {'hex': 'ff'}
    """
    vt = ValueType(vt)
    if vt.is_integer:
        return int(value)
    if vt in _FLOAT_BITS:
        return _float_json(value, vt)
    if vt == ValueType.BOOL:
        return int(value) if isinstance(value, BoolByte) else bool(value)
    if vt == ValueType.STRING:
        return _text(value)
    return _array_json(value)["value"]


def _array_json(arr: GGUFArray) -> dict:
    et = arr.type
    items = arr.items
    if et == ValueType.STRING:
        body: list = [_text(s) for s in items]
    elif et == ValueType.ARRAY:
        body = [_array_json(a) for a in items]
    elif et == ValueType.BOOL:
        raw = np.asarray(items).view(np.uint8)
        body = [bool(b) if b <= 1 else int(b) for b in raw.tolist()]
    elif et in _FLOAT_BITS:
        body = _float_items_json(np.asarray(items), et)
    else:
        body = np.asarray(items).tolist()
    return {"element_type": et.name, "value": body}


def field_json(f: Field) -> dict:
    """One metadata record as JSON-ready data: ``{"key", "type", ["element_type",] "value"}``.

    >>> from gguf_schema import make_field
    >>> field_json(make_field("ids", [1, 2]))
    {'key': 'ids', 'type': 'ARRAY', 'element_type': 'UINT32', 'value': [1, 2]}
    """
    rec: dict[str, Any] = {"key": _text(f.key), "type": f.type.name}
    if f.type == ValueType.ARRAY:
        rec.update(_array_json(f.value))
    else:
        rec["value"] = encode_value(f.type, f.value)
    return rec


#: characters other than "\n" that some tools treat as line breaks: escaped in a value's one-line text
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def value_text(f: Field, *, full: bool = False, items: int = 8, chars: int = 200) -> str:
    """A field's value in one line, as ``dump`` and ``diff`` show it: numbers, BOOL and arrays as
    their JSON (``true``, the shortest decimal of a float32), strings as Python literals. Unless
    ``full``, an array shows its first ``items`` items (whole, never cut inside one) and a count, and
    a string longer than ``chars`` its beginning and its length.

    >>> from gguf_schema import make_field
    >>> import numpy as np
    >>> value_text(make_field("b", True)), value_text(make_field("f", np.float32(0.1)))
    ('true', '0.1')
    >>> value_text(make_field("a", np.linspace(0, 1, 10, dtype=np.float32)), items=3)
    '(10 items) [0.0, 0.11111111, 0.22222222, ...]'
    """
    if f.type == ValueType.ARRAY:
        arr = f.value
        n = len(arr.items)
        shown = arr if full or n <= items else GGUFArray(arr.type, arr.items[:items])
        body = json.dumps(encode_value(ValueType.ARRAY, shown), ensure_ascii=False).translate(_LINE_BREAKS)
        if len(shown.items) < n:
            body = body[:-1] + ", ...]"
        return f"({n:,} items) {body}"
    if f.type == ValueType.STRING:
        text = repr(f.value)
        if not full and len(text) > chars:
            text = text[: chars - 3] + "...'" + f" ({len(f.value):,} chars)"
        return text
    return json.dumps(encode_value(f.type, f.value))


def to_json(f: GGUFFile, *, tensors: bool = True) -> dict:
    """The JSON form (a dict) of an open file's header; ``tensors=False`` leaves out the tensor infos.

    >>> import io, gguf_schema
    >>> buf = io.BytesIO(); gguf_schema.save(buf, {"a": True})
    >>> d = to_json(gguf_schema.open(buf.getvalue()))
    >>> d["version"], d["byte_order"], d["metadata"], d["tensors"]
    (3, 'little', [{'key': 'a', 'type': 'BOOL', 'value': True}], [])
    """
    doc: dict[str, Any] = {
        "gguf_schema_json": FORMAT,
        "version": f.version,
        "byte_order": f.byte_order,
        "alignment": f.alignment,
        "metadata": [field_json(x) for x in f.fields.records],
    }
    if tensors:
        doc["tensors"] = [
            {
                "name": _text(t.name),
                "type": t.type.name if isinstance(t.type, GGMLType) else int(t.type),
                "dims": list(t.dims),
                "offset": t.stored_offset,
            }
            for t in f.tensor_list
        ]
    doc["padding"] = f.padding.hex()
    doc["data"] = {"offset": f.data_offset, "size": f.data_section.size}
    return doc


def dumps(f: GGUFFile, *, tensors: bool = True, indent: int | None = 1) -> str:
    """:func:`to_json` as JSON text (UTF-8 characters kept readable)."""
    return json.dumps(to_json(f, tensors=tensors), ensure_ascii=False, indent=indent, allow_nan=False)


# --------------------------------------------------------------------------- decoding


def _untext(j: Any, where: str) -> str:
    if isinstance(j, str):
        return j
    if isinstance(j, Mapping) and set(j) == {"hex"} and isinstance(j["hex"], str):
        try:
            return bytes.fromhex(j["hex"]).decode("utf-8", "surrogateescape")
        except ValueError:
            raise GGUFBuildError(f"not hex: {j['hex'][:40]!r}", path=where, value=j["hex"]) from None
    raise GGUFBuildError(f'expected a string or {{"hex": ...}}, got {type(j).__name__}', path=where, value=j)


def _vtype(j: Any, where: str) -> ValueType:
    if isinstance(j, str):
        try:
            return ValueType[j.upper()]
        except KeyError:
            pass
    elif isinstance(j, int) and not isinstance(j, bool):
        try:
            return ValueType(j)
        except ValueError:
            pass
    raise GGUFBuildError(f"unknown value type {j!r}", path=where, value=j)


def _float_from_json(j: Any, vt: ValueType, where: str) -> Any:
    ftype, itype, _ = _FLOAT_BITS[vt]
    if isinstance(j, bool):
        raise GGUFBuildError(f"{vt.name} needs a number, got {j!r}", path=where, value=j)
    if isinstance(j, (int, float)):
        with np.errstate(over="ignore"):
            out = ftype(j)
        if np.isinf(out) and np.isfinite(j):
            raise GGUFBuildError(f"{j!r} overflows {vt.name}", path=where, value=j)
        return out
    if isinstance(j, str):
        low = j.strip().lower()
        if low in ("nan", "inf", "-inf", "+inf"):
            return ftype(float(low))
        if low.startswith("0x"):
            try:
                bits = int(low, 16)
                return np.asarray(bits, itype).view(ftype)[()]
            except (ValueError, OverflowError):
                pass
    raise GGUFBuildError(f"{vt.name} needs a number, 'nan', 'inf', '-inf' or hex bits, got {j!r}", path=where, value=j)


def decode_value(vt: ValueType, j: Any, element_type: Any = None, where: str = "value") -> Any:
    """JSON data back to a stored value of type ``vt`` (the inverse of :func:`encode_value`).

    >>> int(decode_value(ValueType.FLOAT32, "0x7fc00001").view(np.uint32)) == 0x7fc00001
    True
    >>> decode_value(ValueType.BOOL, 2)
    BoolByte(2)
    """
    vt = ValueType(vt)
    if vt in _FLOAT_BITS:
        return _float_from_json(j, vt, where)
    if vt == ValueType.BOOL:
        if isinstance(j, bool):
            return j
        if isinstance(j, int) and 0 <= j <= 255:
            return j == 1 if j <= 1 else BoolByte(j)
        raise GGUFBuildError(f"BOOL needs true, false or a byte 0..255, got {j!r}", path=where, value=j)
    if vt == ValueType.STRING:
        return _untext(j, where)
    if vt == ValueType.ARRAY:
        return _array_from_json(element_type, j, where)
    if isinstance(j, bool) or not isinstance(j, int):
        raise GGUFBuildError(f"{vt.name} needs an integer, got {j!r}", path=where, value=j)
    return j


def _array_from_json(et_j: Any, items: Any, where: str) -> GGUFArray:
    et = _vtype(et_j, f"{where}.element_type")
    if not isinstance(items, list):
        raise GGUFBuildError(f"an ARRAY value is a list, got {type(items).__name__}", path=where, value=items)
    if et == ValueType.STRING:
        return GGUFArray(et, [_untext(x, f"{where}[{i}]") for i, x in enumerate(items)])
    if et == ValueType.ARRAY:
        out = []
        for i, x in enumerate(items):
            if not isinstance(x, Mapping) or "element_type" not in x or "value" not in x:
                raise GGUFBuildError(
                    'an item of an array of arrays is {"element_type": ..., "value": [...]}',
                    path=f"{where}[{i}]",
                    value=x,
                )
            out.append(_array_from_json(x["element_type"], x["value"], f"{where}[{i}]"))
        return GGUFArray(et, out)
    if et == ValueType.BOOL:
        raw = [int(decode_value(et, x, where=f"{where}[{i}]")) for i, x in enumerate(items)]
        arr = np.array(raw, np.uint8).view(np.bool_)
    elif et in _FLOAT_BITS:
        dtype = _FLOAT_BITS[et][0]
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
            with np.errstate(over="ignore"):
                arr = np.array(items, np.float64).astype(dtype)
            if (np.isinf(arr) & np.isfinite(np.array(items, np.float64))).any():
                raise GGUFBuildError(f"a value overflows {et.name}", path=where)
        else:
            arr = np.array([_float_from_json(x, et, f"{where}[{i}]") for i, x in enumerate(items)], dtype)
    else:
        for i, x in enumerate(items):
            if isinstance(x, bool) or not isinstance(x, int):
                raise GGUFBuildError(f"{et.name} needs an integer, got {x!r}", path=f"{where}[{i}]", value=x)
        lo_hi = (min(items), max(items)) if items else (0, 0)
        info = np.iinfo(et.numpy_dtype("little"))
        if lo_hi[0] < info.min or lo_hi[1] > info.max:
            raise GGUFBuildError(f"values {lo_hi[0]}..{lo_hi[1]} do not fit in {et.name}", path=where, value=lo_hi)
        arr = np.array(items, et.numpy_dtype("little").newbyteorder("="))
    arr.flags.writeable = False
    return GGUFArray(et, arr)


@dataclass
class JSONModel:
    """A decoded JSON document: what goes before the data section, and what the data section should be.

    ``offsets_given`` is False when a tensor lacks ``"offset"``: the tensors are then laid out afresh.
    """

    version: int
    byte_order: str
    fields: list[Field]
    tensors: list[TensorRecord]
    offsets_given: bool
    padding: bytes | None
    data_size: int | None


def _int(j: Any, where: str, lo: int = 0) -> int:
    if isinstance(j, bool) or not isinstance(j, int) or j < lo:
        raise GGUFBuildError(f"expected an integer >= {lo}, got {j!r}", path=where, value=j)
    return j


def from_json(doc: Mapping[str, Any]) -> JSONModel:
    """Check and decode a JSON document (a dict from :func:`to_json` or a hand-written one).

    Only ``"metadata"`` is required; ``"version"`` defaults to 3, ``"byte_order"`` to little.
    Raises :class:`~gguf_schema.errors.GGUFBuildError` naming the offending member.

    >>> m = from_json({"metadata": [{"key": "n", "type": "UINT16", "value": 7}]})
    >>> m.version, m.fields
    (3, [Field('n', UINT16, 7)])
    """
    if not isinstance(doc, Mapping):
        raise GGUFBuildError(f"the JSON document must be an object, got {type(doc).__name__}", value=type(doc).__name__)
    fmt = doc.get("gguf_schema_json", FORMAT)
    if fmt != FORMAT:
        raise GGUFBuildError(
            f"unsupported gguf_schema_json format {fmt!r} (this version reads {FORMAT})",
            path="gguf_schema_json",
            value=fmt,
        )
    version = doc.get("version", 3)
    if version not in (1, 2, 3) or isinstance(version, bool):
        raise GGUFBuildError(f"version must be 1, 2 or 3, got {version!r}", path="version", value=version)
    order = doc.get("byte_order", "little")
    if order not in ("little", "big"):
        raise GGUFBuildError(f"byte_order must be 'little' or 'big', got {order!r}", path="byte_order", value=order)
    records = doc.get("metadata", [])
    if not isinstance(records, list):
        raise GGUFBuildError(
            "metadata must be a list of {key, type, value} records", path="metadata", value=type(records).__name__
        )
    fields = []
    for i, rec in enumerate(records):
        where = f"metadata[{i}]"
        if not isinstance(rec, Mapping) or not {"key", "type", "value"} <= set(rec):
            raise GGUFBuildError('a metadata record is {"key": ..., "type": ..., "value": ...}', path=where, value=rec)
        key = _untext(rec["key"], f"{where}.key")
        where = f"metadata[{i}] {key!r}"
        vt = _vtype(rec["type"], f"{where}.type")
        if vt == ValueType.ARRAY and "element_type" not in rec:
            raise GGUFBuildError('an ARRAY record needs "element_type"', path=where, value=rec.get("type"))
        value = decode_value(vt, rec["value"], rec.get("element_type"), f"{where}.value")
        try:
            fields.append(make_field(key, value, vt))
        except GGUFBuildError as e:
            raise GGUFBuildError(e.reason, path=where, value=e.value) from None
    tensors, offsets_given = [], True
    for i, t in enumerate(doc.get("tensors", []) or []):
        where = f"tensors[{i}]"
        if not isinstance(t, Mapping) or not {"name", "type", "dims"} <= set(t):
            raise GGUFBuildError(
                'a tensor record is {"name": ..., "type": ..., "dims": [...], "offset": ...}', path=where, value=t
            )
        name = _untext(t["name"], f"{where}.name")
        ty = t["type"]
        if isinstance(ty, str):
            try:
                ty = int(GGMLType[ty.upper()])
            except KeyError:
                raise GGUFBuildError(f"unknown ggml type {ty!r}", path=f"{where}.type", value=ty) from None
        ty = _int(ty, f"{where}.type")
        if not isinstance(t["dims"], list):
            raise GGUFBuildError("dims must be a list of integers", path=f"{where}.dims", value=t["dims"])
        dims = tuple(_int(d, f"{where}.dims[{k}]") for k, d in enumerate(t["dims"]))
        if "offset" in t:
            off = _int(t["offset"], f"{where}.offset")
        else:
            off, offsets_given = 0, False
        tensors.append(TensorRecord(name, ty, dims, off))
    padding = doc.get("padding")
    if padding is not None:
        try:
            padding = bytes.fromhex(padding)
        except (TypeError, ValueError):
            raise GGUFBuildError("padding must be a hex string", path="padding", value=padding) from None
    data = doc.get("data") or {}
    size = data.get("size") if isinstance(data, Mapping) else None
    return JSONModel(
        version, order, fields, tensors, offsets_given, padding, None if size is None else _int(size, "data.size")
    )


def loads(text: str) -> JSONModel:
    """:func:`from_json` of JSON text; malformed JSON raises :class:`GGUFBuildError` with its line and column."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise GGUFBuildError(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}", offset=e.pos) from None
    return from_json(doc)


# --------------------------------------------------------------------------- building

Target = Union[str, "os.PathLike[str]", IO[bytes]]


def build(
    doc: Mapping[str, Any] | JSONModel,
    target: Target,
    *,
    tensors_from: Any = None,
    progress: Progress | None = None,
    sync: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
    strict: str | None = None,
) -> None:
    """Write the GGUF file a JSON document describes to ``target`` (a path, written atomically, or a stream).

    Tensor data comes from ``tensors_from`` (a path or open :class:`GGUFFile`): when its tensor
    infos and byte order are the document's, its whole data section is copied verbatim (the
    original file comes back byte for byte); otherwise each tensor is taken by name (type and
    dims must match; byte order converted) and written at the document's offsets, or at
    fresh contiguous offsets when the document gives none. ``target`` may not be ``tensors_from``
    (refused before anything is written: an input is never overwritten). A ``tensors_from``
    given by path or URL is read as ``storage_options``, ``limits`` and ``mmap`` say (as in
    :func:`gguf_schema.open`). ``strict``: a validation profile; a header that breaks an error rule
    of it is refused (:class:`~gguf_schema.errors.GGUFValidationError`, nothing written), else each
    broken rule is a :class:`~gguf_schema.errors.GGUFWarning`.
    """
    model = doc if isinstance(doc, JSONModel) else from_json(doc)
    refuse_overwriting_inputs(
        [target], [tensors_from.name if isinstance(tensors_from, GGUFFile) else tensors_from], command="build"
    )
    own = tensors_from is not None and not isinstance(tensors_from, GGUFFile)
    src = read(tensors_from, storage_options=storage_options, limits=limits, mmap=mmap) if own else tensors_from
    if src is not None:
        try:
            src.require_whole("the built file")
        except BaseException:
            if own:
                src.close()
            raise
    variant: dict[str, Any] = {
        "version": model.version,
        "byte_order": model.byte_order,
        "padding": model.padding,
        "sync": sync,
        "progress": progress,
        "strict": strict,
    }
    try:
        if src is None:
            if model.tensors:
                raise GGUFBuildError(
                    f"the JSON lists {len(model.tensors)} tensors: give --tensors-from FILE for their data",
                    path="tensors",
                )
            if model.data_size:
                raise GGUFBuildError(
                    f"the original data section held {model.data_size} bytes: give --tensors-from FILE",
                    path="data.size",
                )
            write_file(target, model.fields, [], **variant)
        elif (
            model.offsets_given
            and src.byte_order == model.byte_order
            and [TensorRecord.of(t) for t in src.tensor_list] == model.tensors
        ):
            write_file(target, model.fields, model.tensors, data=DataCopy(src, src.data_section), **variant)
        else:
            write_file(target, model.fields, _planned(model, src), **variant)
    finally:
        if own:
            src.close()


def _planned(model: JSONModel, src: GGUFFile) -> list[PlannedTensor]:
    """The document's tensors, each taken by name from ``src``, at the document's offsets if it gives them."""
    out = []
    for i, info in enumerate(model.tensors):
        t = src.tensors.get(info.name)
        where = f"tensors[{i}] {info.name!r}"
        if t is None:
            raise GGUFBuildError(
                f"tensor {info.name!r} is not in {src.name or 'the tensor source'}", path=where, value=info.name
            )
        if int(t.type) != info.type or tuple(t.dims) != info.dims:
            raise GGUFBuildError(
                f"tensor {info.name!r} is {t.type_name} {list(t.dims)} in the source, "
                f"{type_name(info.type)} {list(info.dims)} in the JSON",
                path=where,
                value=info.name,
            )
        out.append(plan_tensor(info.name, t, model.byte_order, info.offset if model.offsets_given else None))
    return out
