"""Importance matrices: llama.cpp's imatrix files, as the per-column weights ``llama-quantize`` uses.

``llama-imatrix`` records, for every weight matrix a model multiplies activations with, the
sum of the squared activations seen by each input column, and how many activations it summed.
``llama-quantize --imatrix FILE`` turns those into one weight per column and hands them to
ggml's quantizers (``ggml_quantize_chunk``'s ``imatrix``), which :func:`load_imatrix` repeats:
its weights passed to :func:`gguf_schema.tensors.quantize` give ``llama-quantize``'s bytes.

Two file forms are read:

* **GGUF** (llama.cpp's current format; first bytes ``GGUF``): for each weight tensor NAME a
  float32 tensor ``NAME.in_sum2`` (the sums of squares, ``ne[0]`` columns times one row per
  matrix: 1 for a 2-D weight, one per expert for a 3-D one) and a float32 tensor
  ``NAME.counts`` (the number of activations summed, one per row of ``NAME.in_sum2``, or one
  for all of them). Required metadata, as ``llama-quantize`` requires it: ``imatrix.datasets``,
  ``imatrix.chunk_count`` and ``imatrix.chunk_size``. Each count is rounded to the nearest
  integer (halves away from zero), as llama.cpp reads it; the weight of column i of row j is
  ``in_sum2[j, i] / counts[j]`` in float32, or 1.0 where the count is not positive (a matrix
  that saw no input, e.g. an expert never routed to). Other tensors (``NAME.in_sum``, the
  activation sums newer versions add) are ignored.
* **legacy binary** ``.dat`` (any other first bytes), all little-endian: int32 entry count,
  then per entry int32 name length, the name (UTF-8), int32 ``ncall``, int32 value count,
  that many float32 values; then optionally int32 chunk count, int32 length and the dataset
  name. The weights are the values divided by ``ncall`` (float32) when ``ncall`` is positive,
  else the values. A later entry of the same name replaces an earlier one, as in
  ``llama-quantize``. A file that is neither (a text file, say) is refused as such.

:func:`read_imatrix` returns the weights with what ``llama-quantize`` records of the file in the
model it writes (the datasets, the chunk count); :func:`load_imatrix` the weights alone.

The result maps each weight tensor's name to a flat float32 array: ``cols`` weights for a 2-D
tensor of numpy shape ``(rows, cols)``, ``n_expert * cols`` for a 3-D one of shape
``(n_expert, rows, cols)``, where expert e uses weights ``[e * cols, (e + 1) * cols)``
(:func:`tensor_weights` checks the size as ``llama-quantize`` does and splits it).

>>> import io, numpy as np, gguf_schema
>>> from gguf_schema.tensors import quantize
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.type": "imatrix", "imatrix.datasets": ["wiki.txt"],
...                        "imatrix.chunk_count": np.uint32(1), "imatrix.chunk_size": np.uint32(512)},
...                  {"w.in_sum2": np.full((1, 256), 1024.0, np.float32),
...                   "w.counts": np.full((1, 1), 512.0, np.float32)})
>>> weights = load_imatrix(buf.getvalue())
>>> weights["w"][:3]
array([2., 2., 2.], dtype=float32)
>>> rows = np.linspace(-1, 1, 512, dtype=np.float32).reshape(2, 256)
>>> quantize(rows, "Q4_K", imatrix=tensor_weights(weights["w"], rows.shape)).shape
(2, 144)
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from ..errors import GGUFFormatError, GGUFTruncatedError
from ..format.limits import Limits
from ..format.types import GGMLType, ValueType
from ..format.values import GGUFArray
from ..io.opening import open_source
from ..model import GGUFFile, Tensor
from ..reader import read as gguf_open

__all__ = ["REQUIRED_KEYS", "Imatrix", "load_imatrix", "read_imatrix", "tensor_weights"]

F32 = np.float32
ImatrixSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]

REQUIRED_KEYS = ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size")
"""Metadata ``llama-quantize`` requires in a GGUF imatrix file."""
_SUMS, _COUNTS = ".in_sum2", ".counts"


@dataclass
class Imatrix:
    """An importance matrix file as ``llama-quantize`` reads it.

    Attributes:
        weights: weight tensor name -> flat float32 per-column weights, sorted by name.
        datasets: the names of the texts it was computed on (``imatrix.datasets``; the legacy
            form's one dataset name).
        chunk_count: how many chunks of text it saw (0 when the file does not say).
        chunk_size: tokens per chunk (0 for the legacy form).
        legacy: the file is in the legacy ``.dat`` form.
    """

    weights: dict[str, np.ndarray]
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0
    legacy: bool = False


def read_imatrix(source: ImatrixSource, *, limits: Limits | None = None, mmap: bool = True) -> Imatrix:
    """Read an importance matrix file (GGUF or legacy ``.dat``, see the module docstring): the
    weights, and the datasets and chunk count it records. Arguments and errors as :func:`load_imatrix`.

    >>> m = read_imatrix(b"\\x01\\x00\\x00\\x00" b"\\x01\\x00\\x00\\x00w" b"\\x02\\x00\\x00\\x00\\x01\\x00\\x00\\x00"
    ...                  b"\\x00\\x00\\x80\\x40" b"\\x07\\x00\\x00\\x00" b"\\x04\\x00\\x00\\x00wiki")
    >>> m.weights, m.datasets, m.chunk_count, m.legacy
    ({'w': array([2.], dtype=float32)}, ['wiki'], 7, True)
    """
    if not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        raise TypeError(f"read_imatrix takes a path or the file's bytes, got {type(source).__name__}")
    with open_source(source, mmap=mmap) as src:
        if bytes(src.view(0, min(4, src.size))) != b"GGUF":
            return _load_legacy(bytes(src.view(0, src.size)), src.name)
    with gguf_open(source, limits=limits, mmap=mmap) as f:
        return _load_gguf(f)


def load_imatrix(source: ImatrixSource, *, limits: Limits | None = None, mmap: bool = True) -> dict[str, np.ndarray]:
    """Read an importance matrix file (GGUF or legacy ``.dat``, see the module docstring).

    Args:
        source: a path, or the file's bytes.
        limits: resource limits for reading a GGUF imatrix, as in :func:`gguf_schema.open`.
        mmap: map a local file (default) or read it with positioned reads (``False``).

    Returns:
        dict weight tensor name -> flat float32 array of per-column weights, sorted by name.

    Raises:
        GGUFFormatError: a malformed file: a GGUF imatrix without the required metadata or
            entries, a ``.in_sum2`` without its ``.counts`` (or the reverse), a tensor that is
            not F32, counts that do not divide the sums; a ``.dat`` with a bad count or name
            (:class:`~gguf_schema.errors.GGUFTruncatedError` where it ends early). Messages
            carry the offset and the entry.
        TypeError: ``source`` of the wrong kind.

    >>> load_imatrix(b"\\x00\\x00\\x00\\x00")
    Traceback (most recent call last):
    gguf_schema.errors.GGUFFormatError: imatrix file holds no entries (count 0) (at offset 0, in <bytes>: imatrix entry count)
    >>> load_imatrix(b"blk.0.attn_q.weight 0.5 0.25\\n")
    Traceback (most recent call last):
    gguf_schema.errors.GGUFFormatError: not an importance matrix file: neither GGUF nor llama-imatrix's legacy form (it starts with 'blk.0.attn_q.weight 0.5 0.25\\n', a text?) (at offset 0, in <bytes>: imatrix entry count)
    """
    if not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        raise TypeError(f"load_imatrix takes a path or the file's bytes, got {type(source).__name__}")
    return read_imatrix(source, limits=limits, mmap=mmap).weights


def tensor_weights(weights: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The importance weights of one tensor of numpy ``shape``, checked as ``llama-quantize``
    checks them: ``cols`` weights for a 1-D or 2-D tensor (returned as they are), ``n * cols``
    for a 3-D tensor of ``n`` matrices (experts), returned as ``(n, cols)``: row e is for
    matrix e (``quantize(x[e], t, imatrix=w[e])``).

    >>> tensor_weights(np.arange(6, dtype=np.float32), (2, 5, 3))
    array([[0., 1., 2.],
           [3., 4., 5.]], dtype=float32)
    >>> tensor_weights(np.ones(4, np.float32), (8, 3))
    Traceback (most recent call last):
    ValueError: imatrix of 4 weights does not fit a tensor of shape (8, 3): it needs 3 (columns x matrices)
    """
    shape = tuple(int(s) for s in shape)
    if not 1 <= len(shape) <= 3:
        raise ValueError(f"importance weights go with 1-D to 3-D tensors, got shape {shape}")
    w = np.asarray(weights)
    cols, n = shape[-1], shape[0] if len(shape) == 3 else 1
    if w.ndim != 1 or w.size != cols * n:
        raise ValueError(
            f"imatrix of {w.size} weights does not fit a tensor of shape {shape}: "
            f"it needs {cols * n} (columns x matrices)"
        )
    return w.reshape(n, cols) if len(shape) == 3 else w


def _load_gguf(f: GGUFFile) -> Imatrix:
    where = f.name or "<bytes>"
    if not f.tensor_list:
        raise GGUFFormatError("imatrix file holds no tensors", offset=f.data_offset, path=where)
    missing = [k for k in REQUIRED_KEYS if k not in f.fields]
    if missing:
        raise GGUFFormatError(
            f"not an imatrix file: metadata {', '.join(missing)} missing "
            f"(llama-quantize requires {', '.join(REQUIRED_KEYS)})",
            path=where,
        )
    pairs: dict[str, dict[str, Tensor]] = {}
    for t in f.tensor_list:
        for suffix in (_SUMS, _COUNTS):
            if t.name.endswith(suffix) and t.name != suffix:
                pairs.setdefault(t.name[: -len(suffix)], {})[suffix] = t
                break
    if not pairs:
        raise GGUFFormatError(f"imatrix file has no {_SUMS} / {_COUNTS} tensors", path=where)
    out: dict[str, np.ndarray] = {}
    for name in sorted(pairs):
        pair = pairs[name]
        if len(pair) != 2:
            have = next(iter(pair))
            lacking = _COUNTS if have == _SUMS else _SUMS
            raise GGUFFormatError(
                f"{name}{have} has no {name}{lacking}",
                path=f"{where}: tensor {name}{have!s}",
                offset=pair[have].info_offset,
            )
        sums, counts = (_f32_values(pair[s], where) for s in (_SUMS, _COUNTS))
        if counts.size == 0 or sums.size % counts.size:
            raise GGUFFormatError(
                f"{name}: {sums.size} sums do not split into {counts.size} counts",
                path=f"{where}: tensor {name}{_COUNTS}",
                value=counts.size,
                offset=pair[_COUNTS].info_offset,
            )
        per = sums.reshape(counts.size, -1)
        with np.errstate(invalid="ignore"):
            c = _lround(counts)[:, None]  # llama.cpp rounds the counts to integers (std::lround)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[name] = np.where(c > 0, per / np.where(c > 0, c, F32(1)), F32(1)).astype(F32).reshape(-1)
    datasets = f.fields["imatrix.datasets"].value  # used when it is an array of strings, as llama.cpp does
    strings = isinstance(datasets, GGUFArray) and datasets.type == ValueType.STRING
    names = [str(d) for d in datasets] if strings else []
    return Imatrix(out, names, _count(f, "imatrix.chunk_count"), _count(f, "imatrix.chunk_size"))


def _lround(counts: np.ndarray) -> np.ndarray:
    """``std::lround`` of float32 counts (halves away from zero), as float32 again."""
    r = np.floor(np.abs(counts.astype(np.float64)) + 0.5) * np.sign(counts)
    return r.astype(F32)


def _count(f: GGUFFile, key: str) -> int:
    v = f.fields[key].value
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < 2**32:
        raise GGUFFormatError(f"{key} must be a UINT32, got {v!r}", path=f"{f.name or '<bytes>'}: {key}", value=v)
    return int(v)


def _f32_values(t: Tensor, where: str) -> np.ndarray:
    """A tensor's values as float32 in native order (it must be F32, as llama.cpp writes them)."""
    if t.type != GGMLType.F32:
        tname = t.type.name if isinstance(t.type, GGMLType) else str(t.type)
        raise GGUFFormatError(
            f"{t.name} is {tname}: imatrix tensors are F32",
            offset=t.info_offset,
            path=f"{where}: tensor {t.name}",
            value=tname,
        )
    return np.asarray(t.data, dtype=F32).reshape(-1)


def _is_text(head: str) -> bool:
    return all(c.isprintable() or c in "\t\r\n" for c in head)


def _not_imatrix(data: bytes, where: str) -> GGUFFormatError:
    head = data[:32].decode("utf-8", "replace")
    text = ", a text?" if _is_text(head) else ""
    return GGUFFormatError(
        f"not an importance matrix file: neither GGUF nor llama-imatrix's legacy form (it starts with {head!r}{text})",
        offset=0,
        path=f"{where}: imatrix entry count",
        value=data[:4],
    )


_MIN_ENTRY = 12
"""The fewest bytes a legacy entry takes: its name length, call count and value count."""


def _load_legacy(data: bytes, name: str | None) -> Imatrix:
    where = name or "<bytes>"
    pos = 0

    def need(n: int, what: str) -> int:
        nonlocal pos
        if pos + n > len(data):
            raise GGUFTruncatedError(
                f"{what} needs {n} bytes, {len(data) - pos} left", offset=pos, path=f"{where}: {what}"
            )
        start = pos
        pos += n
        return start

    def int32(what: str) -> int:
        return struct.unpack_from("<i", data, need(4, what))[0]

    n_entries = int32("imatrix entry count")
    if n_entries < 1:
        raise GGUFFormatError(
            f"imatrix file holds no entries (count {n_entries})",
            offset=0,
            path=f"{where}: imatrix entry count",
            value=n_entries,
        )
    if n_entries > len(data) or (
        n_entries * _MIN_ENTRY > len(data) - 4 and _is_text(data[:32].decode("utf-8", "replace"))
    ):
        raise _not_imatrix(data, where)  # more entries than the file could hold: not this format
    out: dict[str, np.ndarray] = {}
    for i in range(n_entries):
        entry = f"imatrix entry {i}"
        length = int32(f"{entry} name length")
        if i == 0 and length > len(data) - pos:
            raise _not_imatrix(data, where)
        if length < 0:
            raise GGUFFormatError(
                f"{entry}: negative name length {length}",
                offset=pos - 4,
                path=f"{where}: {entry} name length",
                value=length,
            )
        start = need(length, f"{entry} name")
        try:
            key = data[start : start + length].decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFFormatError(
                f"{entry}: name is not UTF-8 ({e.reason})",
                offset=start + e.start,
                path=f"{where}: {entry} name",
                value=data[start : start + length],
            ) from None
        entry = f"imatrix entry {i} {key!r}"
        ncall = int32(f"{entry} ncall")
        nval = int32(f"{entry} value count")
        if nval < 1:
            raise GGUFFormatError(
                f"{entry}: value count {nval}, at least 1 expected",
                offset=pos - 4,
                path=f"{where}: {entry} value count",
                value=nval,
            )
        start = need(4 * nval, f"{entry} values")
        values = np.frombuffer(data, "<f4", nval, start).astype(F32)
        if ncall > 0:
            values = values / F32(ncall)
        out[key] = values
    # then, optionally, the chunk count and the dataset's name (a shorter tail is ignored, as llama.cpp does)
    chunks, datasets = 0, []
    if len(data) - pos >= 4:
        chunks = max(0, int32("imatrix chunk count"))
        if len(data) - pos >= 4:
            length = int32("imatrix dataset name length")
            if 0 < length <= len(data) - pos:
                datasets.append(data[pos : pos + length].split(b"\0")[0].decode("utf-8", "replace"))
    return Imatrix(dict(sorted(out.items())), datasets, chunks, 0, legacy=True)
