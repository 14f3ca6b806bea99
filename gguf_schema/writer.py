"""Writing: build GGUF files from fields and tensors, streamed, atomic, byte-exact.

The bytes come from the same schema that parses them (:mod:`gguf_schema.format.schema`): the writer
only turns API objects back into the schema's records, computes tensor offsets, and supplies
the data section as a stream so tensor bytes go from their source to the file in chunks.
A write to a path goes to a temporary file in the same folder first and replaces the target
only when complete: a failed write leaves the old file as it was.

>>> import io, numpy as np
>>> buf = io.BytesIO()
>>> save(buf, {"general.architecture": "llama", "llama.block_count": 2}, {"t": np.zeros((2, 8), np.float16)})
>>> data = buf.getvalue()
>>> data[:4], len(data) % 32
(b'GGUF', 0)
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator, Union

import numpy as np
from construct import ConstructError, Container

from .errors import GGUFBuildError, GGUFError
from .format.schema import DataSection, align_offset, alignment_of, gguf_schema, recursion_headroom
from .format.types import GGMLType, ValueType
from .format.values import Field, make_field

__all__ = ["save", "save_file", "RawTensor", "atomic_write", "CHUNK"]

#: bytes copied per write when streaming tensor data
CHUNK = 16 * 2**20

_DTYPE_TYPES = {
    np.dtype("float32"): GGMLType.F32,
    np.dtype("float16"): GGMLType.F16,
    np.dtype("float64"): GGMLType.F64,
    np.dtype("int8"): GGMLType.I8,
    np.dtype("int16"): GGMLType.I16,
    np.dtype("int32"): GGMLType.I32,
    np.dtype("int64"): GGMLType.I64,
}


@dataclass(frozen=True)
class RawTensor:
    """Tensor bytes with an explicit ggml type: quantized blocks, BF16 bits, or any type.

    Attributes:
        type: the ggml type.
        shape: numpy shape, outermost first (``shape[-1]`` must be a multiple of the block size).
        data: the bytes (bytes-like or numpy array).
        byte_order: the byte order ``data`` is in (default little, as ggml and quantizers write
            blocks); a file of the other order gets every block's multi-byte fields swapped.
    """

    type: GGMLType
    shape: tuple[int, ...]
    data: Any
    byte_order: str = "little"


@dataclass
class _Planned:
    """A tensor on its way into a file: its info record and where its bytes come from."""

    name: str
    type: int
    dims: tuple[int, ...]
    nbytes: int
    chunks: Callable[[], Iterator[Any]]
    offset: int = 0


TensorLike = Union[np.ndarray, RawTensor, Any]


def save(target: Union[str, "os.PathLike[str]", IO[bytes]], metadata: Mapping[str, Any] | Iterable[Field] | None = None,
         tensors: Mapping[str, TensorLike] | None = None, *, version: int = 3, byte_order: str = "little",
         alignment: int | None = None, sync: bool = True) -> None:
    """Write a new GGUF file.

    Args:
        target: a path (written atomically) or a writable binary file object.
        metadata: mapping key -> value (types inferred, see :func:`gguf_schema.format.values.infer_type`;
            use numpy scalars or :class:`~gguf_schema.format.values.GGUFArray` to choose), or :class:`Field` records.
        tensors: mapping name -> numpy array (F32, F16, F64, I8..I64 from its dtype),
            :class:`RawTensor`, or a :class:`~gguf_schema.reader.Tensor` of an open file.
        version: 1, 2 or 3.
        byte_order: "little" or "big".
        alignment: sets ``general.alignment`` (UINT32) when given.
        sync: fsync the new file before it replaces the old one (a path target only). False is
            faster; a power cut right after the write may then leave an incomplete file.

    Tensors are laid out in order, each at an offset aligned to ALIGNMENT and padded after, as
    ggml writes them. n_dims is the array's ``ndim``.
    """
    fields = _fields_from(metadata)
    if alignment is not None:
        if not isinstance(alignment, int) or alignment <= 0:
            raise GGUFBuildError(f"alignment must be a positive integer, got {alignment!r}", value=alignment)
        fields = [f for f in fields if f.key != "general.alignment"] + [make_field("general.alignment", alignment, ValueType.UINT32)]
    planned = [_plan(name, t, byte_order) for name, t in (tensors or {}).items()]
    _write(target, fields, planned, version=version, byte_order=byte_order, padding=None, blob=None, sync=sync)


def save_file(f: Any, target: Any, *, version: int | None = None, byte_order: str | None = None, sync: bool = True) -> None:
    """Write a :class:`~gguf_schema.reader.GGUFFile` back out (see :meth:`GGUFFile.save`).

    With the byte order and alignment unchanged the data section is copied verbatim (so an
    unedited file comes out byte-identical, padding and trailing bytes included) and the
    stored padding after the tensor infos is kept where it still fits. Otherwise tensors are
    laid out afresh, contiguous and aligned.
    """
    version = version or f.version
    byte_order = byte_order or f.byte_order
    fields = f.fields.records
    alignment = alignment_of(fields)
    tensors = f.tensor_list
    if byte_order == f.byte_order and alignment == f._read_alignment:
        planned = [_Planned(t.name, int(t.type), t.dims, 0, _no_chunks, t.stored_offset) for t in tensors]
        section = f.data_section
        blob = _BlobCopy(f, section)
        _write(target, fields, planned, version=version, byte_order=byte_order, padding=f.padding, blob=blob, sync=sync)
    else:
        planned = [_plan(t.name, t, byte_order) for t in tensors]
        # the padding as read is kept where it still fits (a file with no data may end before it is complete)
        _write(target, fields, planned, version=version, byte_order=byte_order, padding=f.padding, blob=None, sync=sync)


def _no_chunks() -> Iterator[Any]:
    return iter(())


def _fields_from(metadata: Mapping[str, Any] | Iterable[Field] | None) -> list[Field]:
    if metadata is None:
        return []
    if isinstance(metadata, Mapping):
        return [v if isinstance(v, Field) and v.key == k else make_field(k, v) for k, v in metadata.items()]
    out = []
    for f in metadata:
        if not isinstance(f, Field):
            raise GGUFBuildError(f"metadata records must be Field objects, got {type(f).__name__}", value=f)
        out.append(f)
    return out


def _plan(name: str, t: TensorLike, byte_order: str) -> _Planned:
    from .reader import Tensor

    if not isinstance(name, str):
        raise GGUFBuildError(f"a tensor name must be a str, got {type(name).__name__}", value=name)
    if isinstance(t, Tensor):
        return _plan_from_file(name, t, byte_order)
    if isinstance(t, RawTensor):
        try:
            gt = GGMLType(t.type)
        except ValueError:
            raise GGUFBuildError(f"unknown ggml type {t.type}", path=f"tensor {name!r}", value=t.type) from None
        shape = tuple(int(d) for d in t.shape)
        nbytes = _nbytes(name, gt, shape)
        raw = np.frombuffer(t.data, np.uint8) if not isinstance(t.data, np.ndarray) else t.data.reshape(-1).view(np.uint8)
        if raw.size != nbytes:
            raise GGUFBuildError(f"{gt.name} tensor of shape {shape} takes {nbytes} bytes, {raw.size} given", path=f"tensor {name!r}", value=raw.size)
        if t.byte_order != byte_order and gt.type_size > 1:
            from .tensors import byteswap

            raw = byteswap(raw, gt, t.byte_order, byte_order)
        return _Planned(name, int(gt), tuple(reversed(shape)), nbytes, lambda: _chunks_of(raw))
    if isinstance(t, np.ndarray):
        gt = _DTYPE_TYPES.get(t.dtype.newbyteorder("="))
        if gt is None:
            raise GGUFBuildError(f"no ggml type for numpy dtype {t.dtype}: convert it, or pass RawTensor(type, shape, data)",
                                 path=f"tensor {name!r}", value=str(t.dtype))
        arr = t if t.flags.c_contiguous else t.copy(order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        target = arr.dtype.newbyteorder("<" if byte_order == "little" else ">")
        return _Planned(name, int(gt), tuple(reversed(arr.shape)), arr.nbytes, lambda: _array_chunks(arr, target))
    raise GGUFBuildError(f"a tensor must be a numpy array, RawTensor or Tensor, got {type(t).__name__}", path=f"tensor {name!r}", value=type(t).__name__)


def _plan_from_file(name: str, t: Any, byte_order: str) -> _Planned:
    gt = t._known_type()
    nbytes = t.nbytes
    src_order = t._file.byte_order

    def chunks() -> Iterator[Any]:
        data = t.data
        if src_order == byte_order or gt.type_size == 1:
            yield from _chunks_of(data.reshape(-1).view(np.uint8))
        elif not gt.quantized:
            yield from _array_chunks(data, data.dtype.newbyteorder("<" if byte_order == "little" else ">"))
        else:
            try:
                from .tensors import byteswap
            except ImportError:  # pragma: no cover - blocks ships with the package
                raise GGUFBuildError(f"cannot change the byte order of {gt.name} blocks", path=f"tensor {name!r}") from None
            yield from _chunks_of(byteswap(data.reshape(-1), gt, src_order, byte_order).reshape(-1))

    return _Planned(name, int(gt), tuple(t.dims), nbytes, chunks)


def _nbytes(name: str, gt: GGMLType, shape: tuple[int, ...]) -> int:
    if gt.removed:
        raise GGUFBuildError(f"ggml type {gt.name} has been removed", path=f"tensor {name!r}", value=int(gt))
    if any(d < 0 for d in shape):
        raise GGUFBuildError(f"negative dimension in shape {shape}", path=f"tensor {name!r}", value=shape)
    row = shape[-1] if shape else 1
    if row % gt.block_size:
        raise GGUFBuildError(f"{gt.name} rows must be a multiple of {gt.block_size} elements, shape {shape} has {row}",
                             path=f"tensor {name!r}", value=shape)
    return math.prod(shape) // gt.block_size * gt.type_size


def _chunks_of(raw: np.ndarray) -> Iterator[memoryview]:
    mv = memoryview(np.ascontiguousarray(raw).reshape(-1).view(np.uint8))
    for a in range(0, len(mv), CHUNK):
        yield mv[a:a + CHUNK]


def _array_chunks(arr: np.ndarray, target: np.dtype) -> Iterator[Any]:
    flat = arr.reshape(-1)
    if flat.dtype == target:
        yield from _chunks_of(flat)
        return
    step = max(1, CHUNK // max(1, flat.itemsize))
    for a in range(0, flat.size, step):
        yield flat[a:a + step].astype(target).tobytes()


class _BlobCopy:
    """Copies a source file's data section verbatim (tensor bytes, gaps, trailing bytes)."""

    def __init__(self, f: Any, section: DataSection):
        self.f = f
        self.section = section
        self.size = section.size

    def write_to(self, stream: Any) -> None:
        start, size = self.section.offset, self.section.size
        src = self.f._source.fileno() if self.f._source is not None else None
        if src is not None and isinstance(stream, _Positioned) and stream.copy_from(src, start, size):
            return
        buf = memoryview(self.f._buffer())
        for a in range(start, start + size, CHUNK):
            stream.write(buf[a:min(a + CHUNK, start + size)])


class _TensorStream:
    """Writes planned tensors at their offsets, zero padding between and after them."""

    def __init__(self, planned: list[_Planned], alignment: int):
        self.planned = planned
        self.alignment = alignment
        end = planned[-1].offset + planned[-1].nbytes if planned else 0
        self.size = align_offset(end, alignment) if planned else 0

    def write_to(self, stream: IO[bytes]) -> None:
        pos = 0
        for p in self.planned:
            stream.write(bytes(p.offset - pos))
            written = 0
            for chunk in p.chunks():
                stream.write(chunk)
                written += len(chunk) if not isinstance(chunk, memoryview) else chunk.nbytes
            if written != p.nbytes:
                raise GGUFBuildError(f"tensor data gave {written} bytes, {p.nbytes} expected", path=f"tensor {p.name!r}", value=written)
            pos = p.offset + p.nbytes
        stream.write(bytes(self.size - pos))


def _write(target: Any, fields: list[Field], planned: list[_Planned], *, version: int, byte_order: str,
           padding: bytes | None, blob: _BlobCopy | None, sync: bool = True) -> None:
    schema = gguf_schema(byte_order, version)
    alignment = alignment_of(fields)
    if blob is None:
        offset = 0
        for p in planned:
            p.offset = align_offset(offset, alignment)
            offset = p.offset + p.nbytes
        data: Any = _TensorStream(planned, alignment)
    else:
        data = blob
    obj = Container(
        header=Container(metadata_kv=[Container(key=f.key, value_type=f.type, value=f.value) for f in fields]),
        tensor_infos=[Container(name=p.name, dimensions=list(p.dims), type=p.type, offset=p.offset) for p in planned],
        _padding=padding,
        tensor_data=data,
    )

    depth = max((_nesting(f.value) for f in fields if f.type == ValueType.ARRAY), default=0)

    def build(stream: IO[bytes]) -> None:
        out = _Positioned(stream)
        try:
            with recursion_headroom(depth):
                schema.gguf_file_t._build(obj, out, _build_context(), "gguf_file_t")
        except GGUFError:
            raise
        except RecursionError:
            raise GGUFBuildError(f"arrays nested {depth} deep are too deep to write", value=depth) from None
        except ConstructError as e:
            if out.error is not None:  # the target's own failure (disk full, closed file): surface it as it is
                raise out.error from None
            msg = str(e).split("\n", 1)[-1]
            raise GGUFBuildError(f"cannot build: {msg}", path=(e.path or "").replace("gguf_file_t -> ", "") or None) from None
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
            raise GGUFBuildError(f"cannot build: {type(e).__name__}: {e}") from None

    if isinstance(target, (str, os.PathLike)):
        atomic_write(target, build, sync=sync)
    else:
        build(target)


def _nesting(a: Any) -> int:
    """How deep arrays nest in a GGUFArray (1 for an array of scalars)."""
    depth, level = 1, a
    while level.type == ValueType.ARRAY and len(level.items):
        level = max(level.items, key=_nesting) if len(level.items) > 1 else level.items[0]
        depth += 1
    return depth


def _build_context() -> Container:
    ctx = Container(_parsing=False, _building=True, _sizing=False)
    ctx._params = ctx
    return ctx


class _Positioned:
    """A write-only stream wrapper that counts bytes, so the padding node knows its position."""

    __slots__ = ("stream", "pos", "error")

    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.pos = 0
        self.error: BaseException | None = None

    def write(self, b: Any) -> int:
        try:
            n = self.stream.write(b)
        except Exception as e:
            self.error = e
            raise
        self.pos += len(b) if not isinstance(b, memoryview) else b.nbytes
        return n

    def tell(self) -> int:
        return self.pos

    def copy_from(self, fd: int, offset: int, count: int) -> bool:
        """Copy ``count`` bytes of file ``fd`` from ``offset`` inside the kernel, if both ends allow it."""
        try:
            out = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            return False
        copy = getattr(os, "copy_file_range", None)
        if copy is None:
            return False
        self.stream.flush()
        done = 0
        try:
            while done < count:
                n = copy(fd, out, count - done, offset + done)
                if n == 0:
                    break
                done += n
        except OSError:
            if done:
                raise
            return False
        if done != count:
            raise GGUFBuildError(f"source ended after {done} of {count} bytes of tensor data", value=done)
        self.stream.seek(0, os.SEEK_END)
        self.pos += count
        return True


def atomic_write(path: Union[str, "os.PathLike[str]"], write: Callable[[IO[bytes]], None], *, sync: bool = True) -> None:
    """Call ``write(stream)`` on a temporary file beside ``path``, then rename it over ``path``.

    If ``write`` raises (or the process dies), ``path`` is untouched and the temporary file is removed.
    The new file keeps the old file's permission bits.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            if sync:
                os.fsync(out.fileno())
        try:
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        except FileNotFoundError:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
