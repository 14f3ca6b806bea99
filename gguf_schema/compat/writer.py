"""gguf-py's ``GGUFWriter`` over our one assembler: the same calls, the same bytes, written atomically.

:class:`GGUFWriter` keeps gguf-py's state machine (``NO_FILE`` -> ``EMPTY`` -> ``HEADER`` ->
``KV_DATA`` -> ``TI_DATA`` -> ``WEIGHTS``), its records (``kv_data``: key -> :class:`GGUFValue`,
``tensors``: name -> :class:`TensorInfo`, one dict per shard) and its splitting rules, and writes
the bytes gguf-py writes for the same calls. What differs is underneath:

* the header (keys and tensor infos) is built by :func:`gguf_schema.writer.header_bytes` from
  :class:`~gguf_schema.format.values.Field` records, and the tensor data is laid out by the
  writer's own data section (:class:`gguf_schema.writer.TensorStream`); each write call writes
  its slice of those bytes, so nothing assembles a file but :mod:`gguf_schema.writer`;
* tensors are streamed to the file one at a time, each evaluated (a lazy tensor of gguf-py's
  converters) only when its turn comes and dropped after: memory holds one tensor, whatever
  the model's size;
* the files are written to temporaries beside their targets and renamed into place only when
  complete (:class:`gguf_schema.durable.PendingFiles`): a failed or killed write leaves the old
  files as they were, and :meth:`GGUFWriter.close` on a file whose tensor data was not all
  written refuses to publish a truncated file;
* ``dry_run`` logs the plan (logger ``gguf_schema.compat``) instead of printing it, then stops the
  program with ``SystemExit`` as gguf-py does: the library never prints.

The typed helpers (``add_block_count``, ``add_token_list``, ``add_chat_template`` ...: hundreds of
them, with the key names of every architecture) are gguf-py's own: when the ``gguf`` package is
installed, any ``add_*`` method this class does not define is taken from gguf-py's ``GGUFWriter``
and runs on this object, calling the primitives here. Nothing of those tables is copied.

>>> import io, os, tempfile, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "w.gguf")
>>> w = GGUFWriter(path, "llama")
>>> w.add_uint32("llama.block_count", 2)
>>> w.add_tensor("w", np.arange(4, dtype=np.float32))
>>> w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
>>> import gguf_schema
>>> with gguf_schema.open(path) as f:
...     f.metadata["llama.block_count"], f.tensors["w"].data.tolist()
(2, [0.0, 1.0, 2.0, 3.0])
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, auto
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..durable import PendingFiles
from ..errors import GGUFBuildError, GGUFInternalError
from ..format import keys as K
from ..format.nodes import align_offset
from ..format.schema import alignment_of
from ..format.types import GGMLType, ValueType
from ..format.values import Field, GGUFArray, make_field
from ..shards import shard_name
from ..tools.split import SPLIT_KEYS
from ..writer import CHUNK, PlannedTensor, TensorRecord, TensorStream, check_header, encoded_size, header_bytes
from .constants import GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFEndian, GGUFValueType
from .originals import original
from .quants import quant_shape_from_byte_shape

__all__ = ["GGUFValue", "GGUFWriter", "TensorInfo", "WriterState"]

log = logging.getLogger("gguf_schema.compat")

_SPLIT_NO, _SPLIT_COUNT, _SPLIT_TENSORS_COUNT = SPLIT_KEYS[:3]

#: the ggml type of each numpy dtype gguf-py's writer accepts without ``raw_dtype``
_DTYPE_TYPES: tuple[tuple[type[np.generic], GGMLType], ...] = (
    (np.float16, GGMLType.F16),
    (np.float32, GGMLType.F32),
    (np.float64, GGMLType.F64),
    (np.int8, GGMLType.I8),
    (np.int16, GGMLType.I16),
    (np.int32, GGMLType.I32),
    (np.int64, GGMLType.I64),
)


@dataclass
class TensorInfo:
    """A tensor planned for a file: numpy shape (outermost first), ggml type, bytes, and the data
    (None once written, or when it waits in the temporary file of ``use_temp_file``)."""

    shape: Sequence[int]
    dtype: Any
    nbytes: int
    tensor: Any = None


@dataclass
class GGUFValue:
    """A metadata value as added: the value, its value type, and for an array its element type."""

    value: Any
    type: Any
    sub_type: Any = None


class WriterState(Enum):
    NO_FILE = auto()
    EMPTY = auto()
    HEADER = auto()
    KV_DATA = auto()
    TI_DATA = auto()
    WEIGHTS = auto()


class GGUFWriter:
    """gguf-py's ``GGUFWriter`` (see the module docstring).

    Args:
        path: the output file (the shards are named from it); None to give it to
            :meth:`write_header_to_file` or :meth:`open_output_file` later.
        arch: the model's architecture (written as ``general.architecture``).
        use_temp_file: spool tensor data to a temporary file as tensors are added (in memory up to
            256 MiB), instead of keeping the arrays until they are written.
        endianess: the byte order of the file (:class:`~gguf_schema.compat.constants.GGUFEndian`).
        split_max_tensors, split_max_size: start a new shard when the current one holds that many
            tensors, or would pass that many bytes of tensor data (0: no limit).
        dry_run: log the files that would be written and exit.
        small_first_shard: put only the metadata in the first shard.
        strict: ours, not gguf-py's (keyword only): a validation profile ("spec", "ggml",
            "lenient"); a shard header that breaks an error rule of it is refused with a
            :class:`~gguf_schema.errors.GGUFValidationError` before anything is written. Without
            it, each broken rule is a :class:`~gguf_schema.errors.GGUFWarning`, as for every writer.
    """

    def __init__(
        self,
        path: os.PathLike[str] | str | None,
        arch: str,
        use_temp_file: bool = False,
        endianess: Any = GGUFEndian.LITTLE,
        split_max_tensors: int = 0,
        split_max_size: int = 0,
        dry_run: bool = False,
        small_first_shard: bool = False,
        *,
        strict: str | None = None,
    ):
        self.fout: list[IO[bytes]] | None = None
        self.path = Path(path) if path else None
        self.arch = arch
        self.endianess = endianess
        self.data_alignment = GGUF_DEFAULT_ALIGNMENT
        self.use_temp_file = use_temp_file
        self.temp_file: Any = None
        self.tensors: list[dict[str, TensorInfo]] = [{}]
        self.kv_data: list[dict[str, GGUFValue]] = [{}]
        self.split_max_tensors = split_max_tensors
        self.split_max_size = split_max_size
        self.dry_run = dry_run
        self.small_first_shard = small_first_shard
        self.strict = strict
        self.state = WriterState.NO_FILE
        self._pending: PendingFiles | None = None
        self._header: list[tuple[bytes, bytes, bytes]] = []  # per shard: header, keys, tensor infos
        self._plans: list[list[PlannedTensor]] = []  # per shard: tensors still to write
        self._spooled: dict[str, tuple[int, int]] = {}  # name -> (offset, nbytes) in the temporary file
        log.info("gguf: This GGUF file is for %s Endian only", "Big" if self._big else "Little")
        if self.small_first_shard:
            self.tensors.append({})
        self.add_architecture()

    @property
    def _big(self) -> bool:
        return int(self.endianess) == int(GGUFEndian.BIG)

    @property
    def _byte_order(self) -> str:
        return "big" if self._big else "little"

    # ------------------------------------------------------------------ gguf-py's typed helpers

    def __getattr__(self, name: str) -> Any:
        """An ``add_*`` helper (or another method) of gguf-py's ``GGUFWriter`` that this class does not
        define, bound to this writer: it calls the primitives here. Needs the ``gguf`` package."""
        if name.startswith("_"):
            raise AttributeError(name)
        theirs = _gguf_writer_class()
        fn = getattr(theirs, name, None) if theirs is not None else None
        if fn is None or not callable(fn):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return fn.__get__(self, type(self))

    def add_architecture(self) -> None:
        self.add_string(K.GENERAL_ARCHITECTURE, self.arch)

    def add_custom_alignment(self, alignment: int) -> None:
        if alignment <= 0 or (alignment & (alignment - 1)) != 0:
            raise ValueError("Invalid alignment: must be a non-zero power of two")
        self.data_alignment = alignment
        self.add_uint32(K.GENERAL_ALIGNMENT, alignment)

    # ------------------------------------------------------------------ primitives

    def add_key_value(self, key: str, val: Any, vtype: Any, sub_type: Any = None) -> None:
        if self.state not in (WriterState.NO_FILE, WriterState.EMPTY):
            raise ValueError(f"keys must be added before the header is written (state {self.state}); {key!r} was not")
        if any(key in kv_data for kv_data in self.kv_data):
            name = getattr(vtype, "name", vtype)
            log.warning("Duplicated key name %r, overwriting it with new value %r of type %s", key, val, name)
        self.kv_data[0][key] = GGUFValue(value=val, type=vtype, sub_type=sub_type)

    def add_uint8(self, key: str, val: int) -> None:
        self.add_key_value(key, val, GGUFValueType.UINT8)

    def add_int8(self, key: str, val: int) -> None:
        self.add_key_value(key, val, GGUFValueType.INT8)

    def add_uint16(self, key: str, val: int) -> None:
        self.add_key_value(key, val, GGUFValueType.UINT16)

    def add_int16(self, key: str, val: int) -> None:
        self.add_key_value(key, val, GGUFValueType.INT16)

    def add_uint32(self, key: str, val: int) -> None:
        self.add_key_value(key, val, GGUFValueType.UINT32)

    def add_int32(self, key: str, val: int) -> None:
        self.add_key_value(key, val, GGUFValueType.INT32)

    def add_float32(self, key: str, val: float) -> None:
        self.add_key_value(key, val, GGUFValueType.FLOAT32)

    def add_uint64(self, key: str, val: int) -> None:
        self.add_key_value(key, val, GGUFValueType.UINT64)

    def add_int64(self, key: str, val: int) -> None:
        self.add_key_value(key, val, GGUFValueType.INT64)

    def add_float64(self, key: str, val: float) -> None:
        self.add_key_value(key, val, GGUFValueType.FLOAT64)

    def add_bool(self, key: str, val: bool) -> None:
        self.add_key_value(key, val, GGUFValueType.BOOL)

    def add_string(self, key: str, val: str) -> None:
        if not val:
            return
        self.add_key_value(key, val, GGUFValueType.STRING)

    def add_array(self, key: str, val: Sequence[Any]) -> None:
        if len(val) == 0:
            return
        self.add_key_value(key, val, GGUFValueType.ARRAY)

    # ------------------------------------------------------------------ tensors

    @staticmethod
    def ggml_pad(x: int, n: int) -> int:
        return align_offset(x, n)

    def add_tensor_info(
        self,
        name: str,
        tensor_shape: Sequence[int],
        tensor_dtype: Any,
        tensor_nbytes: int,
        raw_dtype: Any = None,
    ) -> None:
        if self.state is not WriterState.NO_FILE:
            raise ValueError(f"Expected output file to be not yet opened, got {self.state}")
        if any(name in tensors for tensors in self.tensors):
            raise ValueError(f"Duplicated tensor name {name!r}")
        if raw_dtype is None:
            for np_type, gt in _DTYPE_TYPES:
                if tensor_dtype == np_type:
                    dtype = GGMLQuantizationType(int(gt))
                    break
            else:
                raise ValueError("Only F16, F32, F64, I8, I16, I32, I64 tensors are supported for now")
        else:
            dtype = raw_dtype
            if tensor_dtype == np.uint8:
                tensor_shape = quant_shape_from_byte_shape(tensor_shape, raw_dtype)
        if len(self.tensors[-1]) > 0 and (
            (self.split_max_tensors != 0 and len(self.tensors[-1]) >= self.split_max_tensors)
            or (
                self.split_max_size != 0
                and sum(ti.nbytes for ti in self.tensors[-1].values()) + tensor_nbytes > self.split_max_size
            )
        ):
            self.tensors.append({})
        self.tensors[-1][name] = TensorInfo(shape=tensor_shape, dtype=dtype, nbytes=tensor_nbytes)

    def add_tensor(
        self,
        name: str,
        tensor: Any,
        raw_shape: Sequence[int] | None = None,
        raw_dtype: Any = None,
        tensor_endianess: Any = None,
    ) -> None:
        if tensor_endianess is None:
            tensor_endianess = GGUFEndian.BIG if sys.byteorder == "big" else GGUFEndian.LITTLE
        if int(tensor_endianess) != int(self.endianess):
            tensor = tensor.byteswap(inplace=False)  # not in place: a lazy tensor cannot be
        if self.use_temp_file and self.temp_file is None:
            # kept open across calls, closed by write_tensors_to_file (as gguf-py's)
            self.temp_file = tempfile.SpooledTemporaryFile(mode="w+b", max_size=256 * 1024 * 1024)  # noqa: SIM115
        shape: Sequence[int] = raw_shape if raw_shape is not None else tensor.shape
        self.add_tensor_info(name, shape, tensor.dtype, tensor.nbytes, raw_dtype=raw_dtype)
        if self.temp_file is None:
            self.tensors[-1][name].tensor = tensor
            return
        at = self.temp_file.tell()
        nbytes = self.tensors[-1][name].nbytes
        if _writes_itself(tensor):
            _write_itself(tensor, self.temp_file, nbytes, name)
        else:
            for chunk in _chunks(tensor, nbytes, name):
                self.temp_file.write(chunk)
        self._spooled[name] = (at, self.temp_file.tell() - at)

    def write_padding(self, fp: IO[bytes], n: int, align: int | None = None) -> None:
        pad = self.ggml_pad(n, align if align is not None else self.data_alignment) - n
        if pad != 0:
            fp.write(bytes(pad))

    # ------------------------------------------------------------------ files

    def format_shard_names(self, path: Path) -> list[Path]:
        if len(self.tensors) == 1:
            return [path]
        n = len(self.tensors)
        return [Path(shard_name(str(path.with_suffix("")), i, n)) for i in range(n)]

    def open_output_file(self, path: Path | None = None) -> None:
        if self.state is WriterState.EMPTY and self.fout is not None and (path is None or path == self.path):
            return  # may be called again with the same path
        if self.state is not WriterState.NO_FILE:
            raise ValueError(f"Expected output file to be not yet opened, got {self.state}")
        if path is not None:
            self.path = Path(path)
        if self.path is not None:
            filenames = self.print_plan()
            self._pending = PendingFiles(filenames)
            self.fout = [self._pending.open(i) for i in range(len(filenames))]
            self.state = WriterState.EMPTY

    def print_plan(self) -> list[Path]:
        """The files to write, logged (logger ``gguf_schema.compat``); with ``dry_run``, exits after logging them."""
        if self.path is None:
            raise ValueError("the writer has no path")
        filenames = self.format_shard_names(self.path)
        if len(filenames) != len(self.tensors):
            raise GGUFInternalError(f"{len(filenames)} shard names for {len(self.tensors)} shards")
        log.info("Writing the following files:")
        for name, tensors in zip(filenames, self.tensors, strict=True):
            total = self.format_n_bytes_to_str(sum(ti.nbytes for ti in tensors.values()))
            log.info("%s: n_tensors = %d, total_size = %s", name, len(tensors), total)
        if self.dry_run:
            log.info("Dry run, not writing files")
            for name in filenames:
                log.info("%s", name)
            raise SystemExit
        return filenames

    def add_shard_kv_data(self) -> None:
        if len(self.tensors) == 1:
            return
        total_tensors = sum(len(t) for t in self.tensors)
        if self.fout is None:
            raise ValueError("no output file is open (call open_output_file or write_header_to_file first)")
        total_splits = len(self.fout)
        self.kv_data.extend({} for _ in range(len(self.kv_data), total_splits))
        if self.data_alignment != GGUF_DEFAULT_ALIGNMENT:
            # each shard lays its data out at data_alignment, so each must say so (gguf-py leaves it out
            # of the later shards, which readers then cannot read)
            for kv_data in self.kv_data[1:]:
                kv_data[K.GENERAL_ALIGNMENT] = GGUFValue(self.data_alignment, GGUFValueType.UINT32)
        for i, kv_data in enumerate(self.kv_data):
            kv_data[_SPLIT_NO] = GGUFValue(i, GGUFValueType.UINT16)
            kv_data[_SPLIT_COUNT] = GGUFValue(total_splits, GGUFValueType.UINT16)
            kv_data[_SPLIT_TENSORS_COUNT] = GGUFValue(total_tensors, GGUFValueType.INT32)

    def write_header_to_file(self, path: Path | None = None) -> None:
        """Write the header of every shard; its keys and tensor infos are fixed from here on."""
        if len(self.tensors) == 1 and (self.split_max_tensors != 0 or self.split_max_size != 0):
            log.warning("Model fails split requirements, not splitting")
        self.open_output_file(path)
        if self.state is not WriterState.EMPTY:
            raise ValueError(f"Expected output file to be empty, got {self.state}")
        if not (self.fout is not None and len(self.fout) == len(self.tensors) and len(self.kv_data) == 1):
            raise GGUFInternalError(
                "self.fout is not None and len(self.fout) == len(self.tensors) and len(self.kv_data) == 1 does not hold"
            )
        self.add_shard_kv_data()
        self._header = [self._build_header(kv, tensors) for kv, tensors in zip(self.kv_data, self.tensors, strict=True)]
        for fout, parts in zip(self.fout, self._header, strict=True):
            fout.write(parts[0])
        self.state = WriterState.HEADER

    def write_kv_data_to_file(self) -> None:
        if self.state is not WriterState.HEADER:
            raise ValueError(f"Expected output file to contain the header, got {self.state}")
        if self.fout is None:
            raise ValueError("no output file is open (call open_output_file or write_header_to_file first)")
        for fout, parts in zip(self.fout, self._header, strict=True):
            fout.write(parts[1])
        self.state = WriterState.KV_DATA

    def write_ti_data_to_file(self) -> None:
        if self.state is not WriterState.KV_DATA:
            raise ValueError(f"Expected output file to contain KV data, got {self.state}")
        if self.fout is None:
            raise ValueError("no output file is open (call open_output_file or write_header_to_file first)")
        for fout, parts in zip(self.fout, self._header, strict=True):
            fout.write(parts[2])
        self.state = WriterState.TI_DATA

    def write_tensor_data(self, tensor: Any, tensor_endianess: Any = None) -> None:
        """Write the data of the next tensor whose info was written (streaming one tensor at a time)."""
        if self.state is not WriterState.TI_DATA and self.state is not WriterState.WEIGHTS:
            raise ValueError(f"Expected output file to contain tensor info or weights, got {self.state}")
        if self.fout is None:
            raise ValueError("no output file is open (call open_output_file or write_header_to_file first)")
        if tensor_endianess is None:
            tensor_endianess = GGUFEndian.BIG if sys.byteorder == "big" else GGUFEndian.LITTLE
        if int(tensor_endianess) != int(self.endianess):
            tensor = tensor.byteswap(inplace=False)
        file_id = next((i for i, tensors in enumerate(self.tensors) if len(tensors) > 0), -1)
        if file_id < 0:
            raise ValueError("every tensor whose info was written has its data written already")
        fout = self.fout[file_id]
        name = next(iter(self.tensors[file_id]))
        ti = self.tensors[file_id].pop(name)
        if ti.nbytes != tensor.nbytes:
            raise ValueError(f"tensor {name!r}: {tensor.nbytes} bytes given, its info says {ti.nbytes}")
        self.write_padding(fout, fout.tell())
        self._stream(fout, [(name, ti, tensor)])
        self.state = WriterState.WEIGHTS
        self._publish_if_complete()

    def write_tensors_to_file(self, *, progress: bool = False) -> None:
        """Write the tensor infos (if not yet) and every tensor's data, one tensor at a time; then the
        files are complete and take their names. ``progress`` draws tqdm bars, as gguf-py does."""
        self.write_ti_data_to_file()
        if self.fout is None:
            raise ValueError("no output file is open (call open_output_file or write_header_to_file first)")
        for fout in self.fout:
            self.write_padding(fout, fout.tell())
        bar = shard_bar = None
        if progress:
            from tqdm import tqdm

            total_bytes = sum(ti.nbytes for t in self.tensors for ti in t.values())
            if len(self.fout) > 1:
                shard_bar = tqdm(desc=f"Shard (0/{len(self.fout)})", total=None, unit="byte", unit_scale=True)
            bar = tqdm(desc="Writing", total=total_bytes, unit="byte", unit_scale=True)
        for i, (fout, tensors) in enumerate(zip(self.fout, self.tensors, strict=True)):
            if shard_bar is not None:
                shard_bar.set_description(f"Shard ({i + 1}/{len(self.fout)})")
                total = sum(ti.nbytes for ti in tensors.values())
                shard_bar.reset(total=(total if total > 0 else None))
            self._stream(
                fout, [(name, ti, ti.tensor) for name, ti in tensors.items()], *(b for b in (shard_bar, bar) if b)
            )
            for ti in tensors.values():
                ti.tensor = None
        if self.temp_file is not None:
            self.temp_file.close()
        self.state = WriterState.WEIGHTS
        self._publish()

    def flush(self) -> None:
        if self.fout is None:
            raise ValueError("no output file is open (call open_output_file or write_header_to_file first)")
        for fout in self.fout:
            if not fout.closed:  # a complete file was published already
                fout.flush()

    def close(self) -> None:
        """Finish the files: they take their names now if they are complete. A file some of whose tensor
        data was never written is not published (``ValueError``): gguf-py would leave it truncated."""
        if self.fout is None:
            return
        try:
            if self._pending is None or self._pending.committed or self.state is WriterState.EMPTY:
                return  # published already, or nothing was written: no file to publish
            missing = sum(len(t) for t in self.tensors)
            if missing:
                raise ValueError(
                    f"the files are incomplete ({missing} tensors declared but not written): nothing was written "
                    f"to {self.path}"
                )
            self._publish()
        finally:
            if self._pending is not None and not self._pending.committed:
                self._pending.discard()
            self.fout = None

    @staticmethod
    def format_n_bytes_to_str(num: int) -> str:
        if num == 0:
            return "negligible - metadata only"
        fnum = float(num)
        for unit in ("", "K", "M", "G"):
            if abs(fnum) < 1000.0:
                return f"{fnum:3.1f}{unit}"
            fnum /= 1000.0
        return f"{fnum:.1f}T - over 1TB, split recommended"

    # ------------------------------------------------------------------ underneath

    def _build_header(
        self, kv_data: Mapping[str, GGUFValue], tensors: Mapping[str, TensorInfo]
    ) -> tuple[bytes, bytes, bytes]:
        """The shard's header, keys and tensor infos as bytes, built by the one assembler."""
        fields = [_field(key, v) for key, v in kv_data.items()]
        if alignment_of(fields) != self.data_alignment:
            raise ValueError(
                f"data_alignment is {self.data_alignment} but the keys give ALIGNMENT {alignment_of(fields)}: "
                "readers would not find the tensors (use add_custom_alignment)"
            )
        infos, offset = [], 0
        for name, ti in tensors.items():
            infos.append(TensorRecord(name, int(ti.dtype), tuple(int(d) for d in reversed(ti.shape)), offset))
            offset += self.ggml_pad(ti.nbytes, self.data_alignment)
        head = header_bytes(fields, infos, version=3, byte_order=self._byte_order, padding=b"", data_size=0)
        check_header(head, self.strict)
        ti_size = encoded_size((), infos, version=3, byte_order=self._byte_order)
        return head[:24], head[24 : len(head) - ti_size], head[len(head) - ti_size :]

    def _planned(self, name: str, ti: TensorInfo, tensor: Any) -> PlannedTensor:
        dims = tuple(int(d) for d in reversed(ti.shape))
        spooled = self._spooled.pop(name, None)
        if spooled is not None:
            temp, (at, n) = self.temp_file, spooled

            def chunks() -> Iterator[Any]:
                temp.seek(at)
                for a in range(0, n, CHUNK):
                    yield temp.read(min(CHUNK, n - a))

        else:
            if tensor is None:
                raise ValueError(f"tensor {name!r} has no data to write (can only iterate once over the tensors)")

            def chunks() -> Iterator[Any]:
                return _chunks(tensor, ti.nbytes, name)

        return PlannedTensor(name, int(ti.dtype), dims, ti.nbytes, chunks)

    def _stream(self, fout: IO[bytes], tensors: list[tuple[str, TensorInfo, Any]], *bars: Any) -> None:
        """Tensor data through the writer's data section (each tensor aligned, zero padding after).

        A numpy array (or a lazy tensor of gguf-py's converters, or an array-like) goes through our
        data section in chunks; any other object with a ``tofile`` (gguf-py's ``LazyChunkedTensor``,
        whatever the installed gguf-py gives) writes itself into the file with its own ``tofile``, as
        gguf-py's writer has it do, and must write exactly the bytes its info says."""
        out: Any = fout if not bars else _Progress(fout, bars)
        for name, ti, tensor in tensors:
            if name in self._spooled or not _writes_itself(tensor):
                TensorStream([self._planned(name, ti, tensor)], self.data_alignment).write_to(out)
                continue
            _write_itself(tensor, fout, ti.nbytes, name)
            for b in bars:
                b.update(ti.nbytes)
            self.write_padding(out, ti.nbytes)

    def _publish_if_complete(self) -> None:
        if not any(self.tensors):
            self._publish()

    def _publish(self) -> None:
        if self._pending is not None and not self._pending.committed:
            self._pending.commit()


def _gguf_writer_class() -> Any:
    """gguf-py's own ``GGUFWriter`` (as installed, even while :func:`gguf_schema.compat.patch` is in effect), or None."""
    return original("GGUFWriter")


def _eager(tensor: Any) -> np.ndarray:
    """A tensor as a numpy array: a lazy tensor of gguf-py's converters is evaluated now."""
    cls = type(tensor)
    if not isinstance(tensor, np.ndarray) and hasattr(cls, "to_eager"):
        tensor = cls.to_eager(tensor)
    return np.asarray(tensor)


def _writes_itself(tensor: Any) -> bool:
    """True for a tensor that is not an array and writes itself (``tofile``) without becoming one: gguf-py's
    ``LazyChunkedTensor`` and its kin. gguf-py's lazy numpy tensors become arrays (``to_eager``)."""
    return not isinstance(tensor, np.ndarray) and not hasattr(type(tensor), "to_eager") and hasattr(tensor, "tofile")


def _write_itself(tensor: Any, fout: IO[bytes], nbytes: int, name: str) -> None:
    """``tensor.tofile(fout)``, checking that it wrote the ``nbytes`` its info says."""
    fout.flush()
    at = fout.tell()
    tensor.tofile(fout)
    written = fout.tell() - at
    if written != nbytes:
        raise GGUFBuildError(
            f"tensor data gave {written} bytes, {nbytes} expected", path=f"tensor {name!r}", value=written
        )


def _chunks(tensor: Any, nbytes: int, name: str) -> Iterator[Any]:
    """The bytes of a tensor as ``tofile`` writes them (C order, its own byte order), in chunks."""
    arr = np.ascontiguousarray(_eager(tensor))
    if arr.nbytes != nbytes:
        raise ValueError(f"tensor {name!r}: {arr.nbytes} bytes, its info says {nbytes}")
    raw = arr.reshape(-1).view(np.uint8).data
    for a in range(0, nbytes, CHUNK):
        yield raw[a : a + CHUNK]


class _Progress:
    """Passes writes on and advances tqdm bars by the bytes written."""

    def __init__(self, stream: IO[bytes], bars: tuple[Any, ...]):
        self.stream, self.bars = stream, bars

    def write(self, b: Any) -> int:
        n = self.stream.write(b)
        size = b.nbytes if isinstance(b, memoryview) else len(b)
        for bar in self.bars:
            bar.update(size)
        return n


# ---------------------------------------------------------------------- values, as gguf-py packs them

_INT_TYPES = frozenset(vt for vt in ValueType if vt.is_integer)


def _field(key: str, v: GGUFValue) -> Field:
    """The record of one key as gguf-py's writer would pack ``v``: what ``struct.pack`` accepts for the
    type (integers by ``__index__``, floats by ``__float__``, any truth value for BOOL, bytes for STRING),
    array element types inferred from the first item as gguf-py infers them; our checks of range."""
    try:
        vt = ValueType(int(v.type))
        return make_field(key, _convert(v.value, vt, v.sub_type), vt)
    except (TypeError, AttributeError) as e:
        raise GGUFBuildError(f"{e}", path=f"key {key!r}", value=v.value) from None


def _convert(val: Any, vt: ValueType, sub_type: Any) -> Any:
    if vt in _INT_TYPES:
        return val.__index__()
    if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
        return float(val)
    if vt == ValueType.BOOL:
        return bool(val)
    if vt == ValueType.STRING:
        return bytes(val).decode("utf-8", "surrogateescape") if isinstance(val, (bytes, bytearray)) else val
    if vt == ValueType.ARRAY:
        return _array(val, sub_type)
    raise GGUFBuildError("Invalid GGUF metadata value type or value", value=vt)


def _array(val: Any, sub_type: Any) -> GGUFArray:
    if not isinstance(val, Sequence):
        raise GGUFBuildError("Invalid GGUF metadata array, expecting sequence", value=type(val).__name__)
    if len(val) == 0:
        raise GGUFBuildError("Invalid GGUF metadata array. Empty array", value=val)
    if sub_type is not None:
        et = ValueType(int(sub_type))
    elif isinstance(val, bytes):
        et = ValueType.UINT8
    else:
        et = ValueType(int(GGUFValueType.get_type(val[0])))
        if not all(int(GGUFValueType.get_type(i)) == et for i in val[1:]):
            raise GGUFBuildError("All items in a GGUF array should be of the same type", value=list(val[:8]))
    return GGUFArray(et, [_convert(item, et, None) for item in val])
