"""Export: a GGUF model's tensors, dequantized, as a safetensors file.

This module owns :func:`export_safetensors`, which writes the safetensors format itself (no
dependency), and :func:`gguf_metadata`, which reads the GGUF metadata back out of such a file.
The layout written:

* 8 bytes: the header's length N (unsigned, little-endian);
* N bytes: a JSON object, padded with spaces to a multiple of 8 bytes: ``"__metadata__"``
  first, then one entry per tensor ``{"dtype", "shape", "data_offsets": [begin, end]}`` with
  offsets relative to the data that follows. Shapes are numpy order, outermost first
  (``Tensor.shape``: the GGUF dims reversed);
* the tensors' bytes, little-endian, back to back in file order, except that tensors of
  smaller elements (kept integer tensors) come after the wider ones so every tensor starts
  aligned to its element size.

Float and quantized tensors are dequantized (:meth:`~gguf_schema.reader.Tensor.dequantize`) and
converted to ``dtype``: ``"f32"`` as decoded, ``"f16"`` and ``"bf16"`` rounded to nearest even as
:func:`gguf_schema.tensors.quantize` rounds them; a tensor already stored in ``dtype`` is copied
bit for bit. Integer tensors (I8..I64) keep their type, so no value is lost.

Every GGUF metadata key goes into ``__metadata__`` (strings to strings, as safetensors wants):
its value is the JSON text ``{"type": ..., ["element_type": ...,] "value": ...}`` of
:mod:`gguf_schema.tools.jsonio`, which keeps the stored type and the exact value.

Memory stays bounded: the header is computed from the tensor infos first, then each tensor is
decoded in chunks of rows (about 4 M values), converted, written and dropped. The output goes to a
temporary file beside the target and replaces it only when complete.

>>> import io, json, os, tempfile, numpy as np, gguf_schema
>>> d = tempfile.mkdtemp()
>>> src, out = os.path.join(d, "m.gguf"), os.path.join(d, "m.safetensors")
>>> gguf_schema.save(src, {"general.architecture": "llama"}, {"w": np.arange(6, dtype=np.float16).reshape(2, 3)})
>>> result = export_safetensors(src, out, dtype="f32")
>>> raw = open(out, "rb").read()
>>> n = int.from_bytes(raw[:8], "little"); header = json.loads(raw[8:8 + n])
>>> header["w"], result.tensors
({'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [0, 24]}, 1)
>>> np.frombuffer(raw[8 + n:], "<f4").tolist(), gguf_metadata(header["__metadata__"])[0].value
([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 'llama')
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ..durable import atomic_replace
from ..errors import GGUFBuildError, GGUFFormatError
from ..format.limits import Limits
from ..format.types import GGMLType, ValueType
from ..format.values import Field
from ..format.variant import Variant
from ..io import PathLike
from ..shards import open_model
from ..tensors import quantize
from .jsonio import decode_value, field_json

__all__ = ["DTYPES", "MAX_HEADER", "ExportResult", "export_safetensors", "gguf_metadata"]

#: output dtypes: ``dtype`` argument -> (safetensors name, ggml type of the same encoding)
DTYPES = {"f32": ("F32", GGMLType.F32), "f16": ("F16", GGMLType.F16), "bf16": ("BF16", GGMLType.BF16)}

#: the largest header safetensors' reader accepts (bytes)
MAX_HEADER = 100_000_000

_INTEGER_TYPES = {GGMLType.I8: "I8", GGMLType.I16: "I16", GGMLType.I32: "I32", GGMLType.I64: "I64"}
_CHUNK_ELEMENTS = 1 << 22
"""Values decoded and converted per step (16 MiB as float32)."""
_HEX_KEY = "gguf_schema.hex:"
"""Prefix of a ``__metadata__`` key standing for a GGUF key that is not valid UTF-8 (its bytes in hex)."""


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_safetensors` wrote: the path, the number of tensors, and the byte counts."""

    path: str
    tensors: int
    header_bytes: int
    data_bytes: int

    @property
    def file_bytes(self) -> int:
        return 8 + self.header_bytes + self.data_bytes


@dataclass
class _Planned:
    tensor: Any
    dtype: str  # safetensors dtype name
    itemsize: int
    nbytes: int
    copy: bool  # the stored bytes already are the output encoding (or an integer type kept)
    offset: int = 0


def export_safetensors(
    source: Any,
    target: PathLike,
    *,
    dtype: str = "f32",
    tensors: str | re.Pattern[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    sync: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> ExportResult:
    """Write the tensors of ``source`` as a safetensors file ``target`` (see the module docstring).

    Args:
        source: a GGUF path (the first shard of a split model stands for the model), or an open
            :class:`~gguf_schema.reader.GGUFFile` or split model.
        target: the safetensors file to write; never the source itself.
        dtype: ``"f32"``, ``"f16"`` or ``"bf16"``: the type of every float or quantized tensor.
        tensors: a regular expression: only tensors whose name it matches (``re.search``) are written.
        progress: called as ``progress(done_bytes, total_bytes)`` of tensor data after each chunk.
        sync: fsync the new file before it replaces ``target``.
        storage_options, limits, mmap: how a ``source`` given by path or URL is read, as in
            :func:`gguf_schema.open` (ignored for an open model).

    Returns:
        An :class:`ExportResult`.

    Raises:
        GGUFFormatError: a tensor of an unknown or removed type, or two tensors of one name.
        ValueError: a bad ``dtype`` or regular expression, no tensor matching it, ``target``
            being the source, or a header too large for safetensors readers.
        OSError: the target cannot be written (the old file, if any, is left as it was).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(map(repr, DTYPES))}, got {dtype!r}")
    pattern = _pattern(tensors)
    if isinstance(source, (str, os.PathLike)):
        _refuse_overwrite([source], target)
        with open_model(source, storage_options=storage_options, limits=limits, mmap=mmap) as model:
            _refuse_overwrite(getattr(model, "paths", [source]), target)
            return _export(model, target, dtype, pattern, progress, sync)
    if not hasattr(source, "tensor_list") or not hasattr(source, "fields"):
        raise TypeError(f"source must be a path or an open GGUF model, got {type(source).__name__}")
    paths = list(getattr(source, "paths", None) or [getattr(source, "name", None)])
    _refuse_overwrite([p for p in paths if isinstance(p, (str, os.PathLike))], target)
    return _export(source, target, dtype, pattern, progress, sync)


def _pattern(tensors: Any) -> re.Pattern[str] | None:
    if tensors is None or isinstance(tensors, re.Pattern):
        return tensors
    if not isinstance(tensors, str):
        raise TypeError(f"tensors must be a regular expression (str), got {type(tensors).__name__}")
    try:
        return re.compile(tensors)
    except re.error as e:
        raise ValueError(f"tensors: not a regular expression: {tensors!r} ({e})") from None


def _refuse_overwrite(sources: list[Any], target: PathLike) -> None:
    t = os.fspath(target)
    for s in sources:
        s = os.fspath(s)
        same = os.path.abspath(s) == os.path.abspath(t)
        if not same and os.path.exists(t) and os.path.exists(s):
            same = os.path.samefile(s, t)
        if same:
            raise ValueError(f"refusing to write the export over its source {s!r}: choose another target")


def _export(
    model: Any,
    target: PathLike,
    dtype: str,
    pattern: re.Pattern[str] | None,
    progress: Callable[[int, int], None] | None,
    sync: bool,
) -> ExportResult:
    st_name, out_type = DTYPES[dtype]
    for shard in getattr(model, "shards", None) or [model]:
        if hasattr(shard, "require_whole"):
            shard.require_whole("the export")
    chosen = [t for t in model.tensor_list if pattern is None or pattern.search(t.name)]
    if pattern is not None and not chosen:
        raise ValueError(f"no tensor name matches {pattern.pattern!r}")
    planned = _plan(chosen, st_name, out_type)
    metadata = _metadata_strings(model.fields.records)
    header = _header(planned, metadata)
    total = sum(p.nbytes for p in planned)

    def write(stream: IO[bytes]) -> None:
        stream.write(len(header).to_bytes(8, "little"))
        stream.write(header)
        done = 0
        for p in planned:
            for chunk in _chunks(p, out_type):
                stream.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
        if done != total:  # pragma: no cover - the plan and the chunks are computed from the same shapes
            raise GGUFBuildError(f"wrote {done} bytes of tensor data, {total} planned")

    atomic_replace(target, write, sync=sync)
    return ExportResult(os.fspath(target), len(planned), len(header), total)


def _plan(chosen: list[Any], st_name: str, out_type: GGMLType) -> list[_Planned]:
    seen: set[str] = set()
    planned = []
    for t in chosen:
        if t.name in seen:
            raise GGUFFormatError(
                f"tensor name {t.name!r} appears twice: a safetensors file needs unique names",
                path=f"tensor {t.name!r}",
                value=t.name,
            )
        seen.add(t.name)
        nbytes = t.nbytes  # raises GGUFFormatError for an unknown or removed type
        gt = GGMLType(t.type)
        if gt in _INTEGER_TYPES:
            planned.append(_Planned(t, _INTEGER_TYPES[gt], gt.type_size, nbytes, True))
        else:
            itemsize = out_type.type_size
            planned.append(_Planned(t, st_name, itemsize, t.n_elements * itemsize, gt == out_type))
    planned.sort(key=lambda p: -p.itemsize)  # stable: file order within each element size
    offset = 0
    for p in planned:
        p.offset = offset
        offset += p.nbytes
    return planned


def _metadata_strings(records: list[Field]) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in records:
        rec = field_json(f)
        key = rec.pop("key")
        if isinstance(key, dict):  # not valid UTF-8: named by its bytes
            key = _HEX_KEY + key["hex"]
        out.setdefault(key, json.dumps(rec, ensure_ascii=False, allow_nan=False, separators=(",", ":")))
    return out


def _header(planned: list[_Planned], metadata: dict[str, str]) -> bytes:
    doc: dict[str, Any] = {"__metadata__": metadata}
    for p in planned:
        doc[p.tensor.name] = {
            "dtype": p.dtype,
            "shape": list(p.tensor.shape),
            "data_offsets": [p.offset, p.offset + p.nbytes],
        }
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogateescape")
    text += b" " * (-len(text) % 8)
    if len(text) > MAX_HEADER:
        raise ValueError(
            f"the safetensors header would take {len(text):,} bytes; readers refuse more than {MAX_HEADER:,} "
            "(the metadata is too large: export fewer keys' worth, e.g. with another tool)"
        )
    return text


def _chunks(p: _Planned, out_type: GGMLType) -> Iterator[memoryview]:
    """The output bytes of one tensor, a run of rows at a time."""
    t = p.tensor
    if p.nbytes == 0:
        return
    shape = t.shape
    if not shape:  # n_dims 0: one value
        yield _encode(t.dequantize().reshape(1), out_type) if not p.copy else _le(np.asarray(t.data).reshape(1))
        return
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    step = max(1, _CHUNK_ELEMENTS // max(cols, 1))
    row_bytes = t.nbytes // rows if rows else 0
    if p.copy:  # stored as it goes out: the bytes, a run of rows at a time (pages released behind)
        gt = t.known_type()
        dtype = gt.numpy_dtype.newbyteorder(Variant.endian_of(t.byte_order))
        for piece in t.chunks(max(1, step * row_bytes)):
            yield _le(np.frombuffer(piece, dtype))
        return
    for a in range(0, rows, step):
        yield _encode(t.dequantize(rows=slice(a, a + step)), out_type)
        t.release_pages(a * row_bytes, min(step, rows - a) * row_bytes)  # behind the cursor: resident memory stays flat


def _le(a: np.ndarray) -> memoryview:
    """Stored values in little-endian bytes (swapped from a big-endian file)."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).reshape(-1).view(np.uint8).data


def _encode(x: np.ndarray, out_type: GGMLType) -> memoryview:
    if out_type == GGMLType.F32:
        return np.ascontiguousarray(x, dtype="<f4").reshape(-1).view(np.uint8).data
    return quantize(x, out_type).reshape(-1).data


def gguf_metadata(metadata: Mapping[str, str]) -> list[Field]:
    """The GGUF metadata records stored in a safetensors ``__metadata__`` by :func:`export_safetensors`.

    Entries that are not such records (keys other tools added) are skipped.

    >>> gguf_metadata({"general.name": '{"type":"STRING","value":"tiny"}', "format": "pt"})
    [Field('general.name', STRING, 'tiny')]
    """
    out = []
    for key, text in metadata.items():
        try:
            rec = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(rec, dict) or "type" not in rec or "value" not in rec:
            continue
        if key.startswith(_HEX_KEY):
            key = bytes.fromhex(key[len(_HEX_KEY) :]).decode("utf-8", "surrogateescape")
        try:
            vt = ValueType[rec["type"]]
        except (KeyError, TypeError):
            continue
        out.append(Field(key, vt, decode_value(vt, rec["value"], rec.get("element_type"), where=key)))
    return out
