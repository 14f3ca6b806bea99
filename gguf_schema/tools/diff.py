"""Differences between two GGUF files: header, metadata by key and type, tensors by content.

:func:`diff` compares

* the header: version, byte order, alignment, key and tensor counts;
* metadata, key by key: keys only in one file, a changed stored type, a changed value (floats
  compared bit for bit), a key stored more than once in one file, and the key order when the
  same keys appear in another order;
* tensors by name: added, removed, a changed type or shape, changed data (SHA-256 of the bytes
  in little-endian order, so a file and its big-endian conversion compare equal), and the
  tensor order.

>>> import io, numpy as np, gguf_schema
>>> a, b = io.BytesIO(), io.BytesIO()
>>> gguf_schema.save(a, {"n": 1, "s": "x"}, {"w": np.zeros(4, np.float32)})
>>> gguf_schema.save(b, {"n": 2, "t": "y"}, {"w": np.ones(4, np.float32)})
>>> for d in diff(gguf_schema.open(a.getvalue()), gguf_schema.open(b.getvalue())):
...     print(d)
metadata ~ n: UINT32 1 -> UINT32 2
metadata - s: STRING 'x'
metadata + t: STRING 'y'
tensor ~ w: data differs (sha256 374708fff7719dd5... -> f6bb1294da2f78cd...)
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..format.types import ValueType
from ..format.values import Field
from ..model import GGUFFile, Tensor
from ..tensors import byteswap
from ..writer import CHUNK, Progress
from .jsonio import value_text

__all__ = ["Difference", "describe_value", "diff", "tensor_sha256"]

AnyModel = GGUFFile | Any  # GGUFFile or split.SplitModel: both have fields, tensor_list, version ...


@dataclass(frozen=True)
class Difference:
    """One difference.

    Attributes:
        section: ``"header"``, ``"metadata"`` or ``"tensor"``.
        kind: ``"+"`` only in B, ``"-"`` only in A, ``"~"`` changed.
        name: the header field, key or tensor name.
        detail: what changed, in words.
    """

    section: str
    kind: str
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.section} {self.kind} {self.name}: {self.detail}"


def describe_value(f: Field, limit: int = 60) -> str:
    """A field's type and value in one short line, as ``dump`` shows them (:func:`~.jsonio.value_text`:
    BOOL as ``true``, floats as their shortest decimals; long arrays and strings abbreviated).

    >>> from gguf_schema import make_field
    >>> describe_value(make_field("k", list(range(100))))
    'ARRAY[UINT32] (100 items) [0, 1, 2, 3, 4, 5, 6, 7, ...]'
    >>> describe_value(make_field("b", True))
    'BOOL true'
    """
    name = f"ARRAY[{f.value.type.name}]" if f.type == ValueType.ARRAY else f.type.name
    return f"{name} {value_text(f, chars=limit)}"


def tensor_sha256(t: Tensor, progress: Progress | None = None) -> str:
    """SHA-256 of a tensor's bytes in little-endian order (big-endian data is swapped first), read a
    piece at a time (:meth:`~gguf_schema.model.Tensor.chunks`: memory stays flat whatever the size)."""
    gt = t.known_type()
    h = hashlib.sha256()
    for piece in t.chunks(CHUNK):
        h.update(byteswap(np.frombuffer(piece, np.uint8), gt, "big", "little").data if t.byte_order == "big" else piece)
        if progress is not None:
            progress(len(piece) if isinstance(piece, bytes) else memoryview(piece).nbytes)
    return h.hexdigest()


def diff(a: AnyModel, b: AnyModel, *, data: bool = True, progress: Progress | None = None) -> list[Difference]:
    """Every difference between ``a`` and ``b`` (open files, or split models), in a stable order.

    ``data=False`` skips hashing tensor data (types and shapes are still compared).
    """
    out: list[Difference] = []
    for name, x, y in (
        ("version", a.version, b.version),
        ("byte_order", a.byte_order, b.byte_order),
        ("alignment", a.alignment, b.alignment),
        ("metadata keys", len(a.fields.records), len(b.fields.records)),
        ("tensors", len(a.tensor_list), len(b.tensor_list)),
    ):
        if x != y:
            out.append(Difference("header", "~", name, f"{x} -> {y}"))
    out.extend(_metadata(a, b))
    out.extend(_tensors(a, b, data, progress))
    return out


def _metadata(a: AnyModel, b: AnyModel) -> list[Difference]:
    out = []
    ka, kb = list(a.fields), list(b.fields)
    for key in ka:
        fa = a.fields[key]
        if key not in b.fields:
            out.append(Difference("metadata", "-", key, describe_value(fa)))
            continue
        fb = b.fields[key]
        if fa.type != fb.type or fa.element_type != fb.element_type:
            out.append(
                Difference(
                    "metadata",
                    "~",
                    key,
                    f"type {_type_name(fa)} -> {_type_name(fb)}: {describe_value(fa)} -> {describe_value(fb)}",
                )
            )
        elif fa != fb:
            out.append(Difference("metadata", "~", key, f"{describe_value(fa)} -> {describe_value(fb)}"))
    for key in kb:
        if key not in a.fields:
            out.append(Difference("metadata", "+", key, describe_value(b.fields[key])))
    for which, m in (("A", a), ("B", b)):
        seen: dict[str, int] = {}
        for r in m.fields.records:
            seen[r.key] = seen.get(r.key, 0) + 1
        for key, n in seen.items():
            if n > 1:
                out.append(Difference("metadata", "~", key, f"stored {n} times in {which}"))
    common_a = [k for k in ka if k in b.fields]
    common_b = [k for k in kb if k in a.fields]
    if common_a != common_b:
        first = next(i for i, (x, y) in enumerate(zip(common_a, common_b, strict=False)) if x != y)
        out.append(Difference("metadata", "~", "(order)", f"keys in another order from {common_a[first]!r} on"))
    return out


def _type_name(f: Field) -> str:
    return f"ARRAY[{f.element_type.name}]" if f.element_type is not None else f.type.name


def _tensors(a: AnyModel, b: AnyModel, data: bool, progress: Progress | None) -> list[Difference]:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gguf-diff") as other:
        return _tensor_differences(a, b, data, progress, other)


def _tensor_differences(
    a: AnyModel, b: AnyModel, data: bool, progress: Progress | None, other: ThreadPoolExecutor
) -> list[Difference]:
    out = []
    ta, tb = a.tensors, b.tensors
    for name, x in ta.items():
        y = tb.get(name)
        if y is None:
            out.append(Difference("tensor", "-", name, f"{x.type_name} {list(x.shape)}"))
            continue
        if x.type != y.type or x.dims != y.dims:
            out.append(
                Difference("tensor", "~", name, f"{x.type_name} {list(x.shape)} -> {y.type_name} {list(y.shape)}")
            )
            continue
        if data:  # the two tensors hashed at once (hashlib lets go of the GIL): two cores, half the time
            pending = other.submit(tensor_sha256, x, progress)
            hb = tensor_sha256(y, progress)
            ha = pending.result()
            if ha != hb:
                out.append(Difference("tensor", "~", name, f"data differs (sha256 {ha[:16]}... -> {hb[:16]}...)"))
    for name, y in tb.items():
        if name not in ta:
            out.append(Difference("tensor", "+", name, f"{y.type_name} {list(y.shape)}"))
    common_a = [n for n in ta if n in tb]
    common_b = [n for n in tb if n in ta]
    if common_a != common_b:
        first = next(i for i, (x, y) in enumerate(zip(common_a, common_b, strict=False)) if x != y)
        out.append(Difference("tensor", "~", "(order)", f"tensors in another order from {common_a[first]!r} on"))
    return out
