"""Requantizing a model file: every weight matrix decoded to float32 and encoded again as another ggml type, streamed.

:func:`requantize` reads a model (a file, a URL, or the first shard of a split model), decides
a type for every tensor, and writes a new file through the one assembler
(:func:`gguf_schema.writer.write_file`, atomic for a path). It works in two steps:

1. **Planning** (:func:`plan_requantize`), before anything is written: every tensor's new
   type, the fallback for each tensor whose rows do not split into the type's blocks, the
   importance weights of each tensor. Bad input (a type that cannot be written, a row length
   no fallback fits, an importance matrix that lacks a tensor a type needs it for or does not
   fit it, an override pattern that is not a regular expression) fails here, and the target
   is never touched.
2. **Streaming**: each tensor to requantize is decoded a few MiB of rows at a time
   (:meth:`gguf_schema.model.Tensor.dequantize` with ``rows``), encoded
   (:func:`gguf_schema.tensors.quantize`, with the tensor's importance weights), decoded again
   to measure the error, and handed to the writer; memory stays around one chunk per thread,
   whatever the size of the tensor. Other tensors are copied as they are.

Which tensors are requantized follows ``llama-quantize`` (llama.cpp ``src/llama-quant.cpp``):
a tensor is requantized when its name ends in ``weight``, it has two or more dimensions (see
``keep_1d``), it holds numbers of a float or quantized type, and its name contains none of
:data:`KEEP_NAMES` (norms, expert routers, position embeddings, token types, a few small
per-architecture matrices). A tensor already of the chosen type is copied, not re-encoded.

A row (``shape[-1]`` elements) that is not a whole number of the type's blocks falls back as
llama.cpp falls back (:data:`FALLBACK`): the 256-element K-quants and IQ types to a 32-element
type of similar size (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K/IQ* -> IQ4_NL,
TQ1_0/TQ2_0 -> Q4_0), and that to F16 if it does not fit either. Types llama.cpp has no
fallback for (Q4_0, Q8_0, MXFP4 ...) refuse such a row: choose a type for that tensor with
``tensor_types``.

The new file keeps the input's metadata (the split keys removed), with
``general.quantization_version`` = 2 and ``general.file_type`` the :class:`FileType` of the
type (:func:`file_type_of`; removed when there is none, e.g. for Q8_K). It is little-endian,
GGUF version 3, its alignment the input's.

>>> import os, tempfile, numpy as np, gguf_schema
>>> d = tempfile.mkdtemp()
>>> rng = np.random.default_rng(0)
>>> gguf_schema.save(os.path.join(d, "in.gguf"), {"general.architecture": "llama"},
...                  {"blk.0.ffn_up.weight": rng.standard_normal((8, 256)).astype(np.float32),
...                   "blk.0.ffn_down.weight": rng.standard_normal((8, 96)).astype(np.float32),
...                   "blk.0.ffn_norm.weight": np.ones(256, np.float32)})
>>> result = requantize(os.path.join(d, "in.gguf"), os.path.join(d, "out.gguf"), "Q4_K")
>>> [(r.name, r.new_type.name, r.reason) for r in result.tensors]  # doctest: +NORMALIZE_WHITESPACE
[('blk.0.ffn_up.weight', 'Q4_K', None),
 ('blk.0.ffn_down.weight', 'Q5_0', 'row of 96 is not a multiple of the Q4_K block (256): fallback Q5_0'),
 ('blk.0.ffn_norm.weight', 'F32', 'kept: 1-D')]
>>> round(result.tensors[0].relative_error, 2), result.file_type.name
(0.07, 'MOSTLY_Q4_K_M')
>>> with gguf_schema.open(os.path.join(d, "out.gguf")) as f:
...     f.metadata["general.file_type"], f.tensors["blk.0.ffn_up.weight"].type.name
(15, 'Q4_K')
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from ..durable import refuse_overwriting_inputs
from ..errors import GGUFBuildError
from ..format.limits import Limits
from ..format.source import is_url
from ..format.types import FileType, GGMLType, ValueType, tensor_nbytes
from ..format.values import Field, make_field
from ..model import GGUFFile, Tensor
from ..reader import read
from ..tensors import CODECS, QUANTIZE_TYPES, dequantize, quantize
from ..writer import PlannedTensor, Progress, plan_tensor, write_file
from .imatrix import load_imatrix, tensor_weights
from .split import SPLIT_KEYS, SplitModel, open_model

__all__ = [
    "FALLBACK",
    "KEEP_NAMES",
    "QUANTIZATION_VERSION",
    "RequantizeResult",
    "TensorReport",
    "file_type_of",
    "parse_tensor_type",
    "plan_requantize",
    "requantize",
]

PathLike = Union[str, "os.PathLike[str]"]
Model = GGUFFile | SplitModel
ImatrixArg = Union[str, "os.PathLike[str]", bytes, Mapping[str, np.ndarray], None]

QUANTIZATION_VERSION = 2
"""``general.quantization_version`` of the files written (ggml's ``GGML_QNT_VERSION``)."""

T = GGMLType
FALLBACK: dict[GGMLType, GGMLType] = {
    **{t: T.Q4_0 for t in (T.TQ1_0, T.TQ2_0)},
    **{
        t: T.IQ4_NL
        for t in (T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M, T.Q2_K, T.Q3_K, T.IQ4_XS)
    },
    T.Q4_K: T.Q5_0,
    T.Q5_K: T.Q5_1,
    T.Q6_K: T.Q8_0,
}
"""The type a tensor falls back to when its rows are not whole blocks of the chosen type (llama.cpp's
choice); when that does not fit either, F16. Types not listed have no fallback."""

KEEP_NAMES = (
    "_norm.weight",
    "ffn_gate_inp.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "position_embd.weight",
    "pos_embd.weight",
    "token_types.weight",
    "ssm_conv1d.weight",
    "shortconv.conv.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
)
"""Name parts of tensors that are never requantized, as ``llama-quantize`` keeps them: norms, MoE
routers, Gemma-3n's small AltUp/Laurel/per-layer matrices, position embeddings and BERT token
types, Mamba/LFM2 convolutions, RWKV's small time-mix matrices, T5's relative position bias."""

_FILE_TYPES: dict[GGMLType, FileType] = {
    T.F32: FileType.ALL_F32,
    T.F16: FileType.MOSTLY_F16,
    T.Q3_K: FileType.MOSTLY_Q3_K_M,
    T.Q4_K: FileType.MOSTLY_Q4_K_M,
    T.Q5_K: FileType.MOSTLY_Q5_K_M,
    T.MXFP4: FileType.MOSTLY_MXFP4_MOE,
}
del T

_CHUNK_BYTES = 4 * 2**20
"""Float32 bytes decoded and encoded per step and thread: the working set of a tensor's stream."""


def file_type_of(t: GGMLType | int | str) -> FileType | None:
    """The ``general.file_type`` of a file whose tensors are mostly of type ``t``, as llama.cpp's
    loader names it (K-quants as their _M mixes), or None where llama.cpp has none.

    >>> file_type_of("Q4_K").name, file_type_of("Q8_0").name, file_type_of("Q8_K")
    ('MOSTLY_Q4_K_M', 'MOSTLY_Q8_0', None)
    """
    gt = GGMLType.of(t)
    if gt in _FILE_TYPES:
        return _FILE_TYPES[gt]
    return FileType.__members__.get(f"MOSTLY_{gt.name}")


def parse_tensor_type(text: str) -> tuple[str, GGMLType]:
    """``REGEX=TYPE`` (as ``llama-quantize --tensor-type`` takes it) -> ``(REGEX, GGMLType)``.

    The regular expression is searched for anywhere in a tensor's name (``attn_v`` matches
    ``blk.0.attn_v.weight``); the last ``=`` separates the type. Raises ``ValueError`` for a
    missing ``=``, a bad expression or a type that cannot be written.

    >>> parse_tensor_type(r"blk\\.[0-3]\\.ffn_down=q6_k")
    ('blk\\\\.[0-3]\\\\.ffn_down', <GGMLType.Q6_K: 14>)
    """
    pattern, sep, name = text.rpartition("=")
    if not sep or not pattern:
        raise ValueError(f"a tensor type is REGEX=TYPE, got {text!r}")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{pattern!r} is not a regular expression: {e}") from None
    return pattern, _writable_type(name)


def _writable_type(t: GGMLType | int | str) -> GGMLType:
    try:
        gt = GGMLType.of(t.strip().upper() if isinstance(t, str) else t)
    except (ValueError, TypeError):
        gt = None
    if gt is None or gt not in QUANTIZE_TYPES:
        names = ", ".join(x.name for x in sorted(QUANTIZE_TYPES, key=int))
        raise ValueError(f"cannot requantize to {t!r}: the types are {names}")
    return gt


@dataclass
class TensorReport:
    """One tensor of a requantization: its plan, then what writing it measured.

    Attributes:
        name, shape: the tensor's name and numpy shape (outermost first).
        old_type: its type in the input.
        new_type: its type in the output.
        requested: the type chosen for it before any fallback (None for a tensor kept as it is).
        reason: why it is kept, or why it fell back (None when it simply became ``requested``).
        imatrix: whether importance weights went into its quantizer.
        nbytes: bytes of its data in the output.
        rms_error: root mean square of (output decoded - input decoded) over the tensor, in
            float32 terms (0.0 for a tensor copied as it is; None until written).
        rms_input: root mean square of the input's values (None until written).
    """

    name: str
    shape: tuple[int, ...]
    old_type: GGMLType
    new_type: GGMLType
    requested: GGMLType | None
    reason: str | None
    imatrix: bool
    nbytes: int
    rms_error: float | None = None
    rms_input: float | None = None

    @property
    def requantized(self) -> bool:
        """Whether the tensor is decoded and encoded again (else copied byte for byte)."""
        return self.requested is not None and self.new_type != self.old_type

    @property
    def relative_error(self) -> float | None:
        """``rms_error / rms_input`` (0.0 for an all-zero input copied exactly; None until written)."""
        if self.rms_error is None or self.rms_input is None:
            return None
        if self.rms_input == 0:
            return 0.0 if self.rms_error == 0 else math.inf
        return self.rms_error / self.rms_input

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "old_type": self.old_type.name,
            "new_type": self.new_type.name,
            "requested": self.requested.name if self.requested is not None else None,
            "reason": self.reason,
            "imatrix": self.imatrix,
            "bytes": self.nbytes,
            "rms_error": self.rms_error,
            "rms_input": self.rms_input,
            "relative_error": self.relative_error,
        }


@dataclass
class RequantizeResult:
    """What :func:`requantize` did (or, with ``dry_run``, would do).

    Attributes:
        type: the type asked for.
        file_type: the ``general.file_type`` written (None: the key was removed).
        tensors: one :class:`TensorReport` per tensor, in file order.
        notes: things worth saying that are not errors (an override pattern that matched
            nothing, a tensor without importance weights, a removed file type).
        input_bytes: the size of the input's tensor data.
        header_bytes: the size of the input's header (metadata and tensor infos, up to its data
            section): the output's is about the same.
        dry_run: True when nothing was written.
    """

    type: GGMLType
    file_type: FileType | None
    tensors: list[TensorReport]
    notes: list[str] = field(default_factory=list)
    input_bytes: int = 0
    header_bytes: int = 0
    dry_run: bool = False

    @property
    def output_bytes(self) -> int:
        """The size of the output's tensor data (without alignment padding)."""
        return sum(r.nbytes for r in self.tensors)

    @property
    def fallbacks(self) -> list[TensorReport]:
        """The tensors that got another type than the one chosen for them."""
        return [r for r in self.tensors if r.requested is not None and r.new_type != r.requested]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {
            "type": self.type.name,
            "file_type": self.file_type.name if self.file_type is not None else None,
            "dry_run": self.dry_run,
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "notes": list(self.notes),
            "tensors": [r.to_dict() for r in self.tensors],
        }


# --------------------------------------------------------------------------- planning


def _is_float_data(t: GGMLType) -> bool:
    return t.quantized or t in (GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.F64)


def _keep_reason(t: Tensor, keep_1d: bool) -> str | None:
    """Why a tensor stays as it is (None: it is requantized)."""
    gt = t.known_type()
    if not _is_float_data(gt):
        return f"kept: {gt.name} data"
    if len(t.dims) == 0:
        return "kept: a scalar"
    if len(t.dims) == 1 and keep_1d:
        return "kept: 1-D"
    if not t.name.endswith("weight"):
        return "kept: not a weight"
    for part in KEEP_NAMES:
        if part in t.name:
            return f"kept: {part}"
    return None


def _fitting_type(t: Tensor, want: GGMLType) -> tuple[GGMLType, str | None]:
    """The type a tensor gets when ``want`` is chosen for it, with the reason for a fallback."""
    row = t.dims[0] if t.dims else 1
    if row % want.block_size == 0:
        return want, None
    why = f"row of {row} is not a multiple of the {want.name} block ({want.block_size})"
    fallback = FALLBACK.get(want)
    if fallback is None:
        raise GGUFBuildError(
            f"{why}, and llama.cpp has no fallback for {want.name}: choose a type for it with "
            f"--tensor-type / tensor_types (F16, BF16 and F32 fit any row)",
            path=f"tensor {t.name!r}",
            value=row,
        )
    if row % fallback.block_size == 0:
        return fallback, f"{why}: fallback {fallback.name}"
    return GGMLType.F16, f"{why}, nor of {fallback.name}'s ({fallback.block_size}): fallback F16"


def _load_weights(imatrix: ImatrixArg, reading: dict[str, Any]) -> Mapping[str, np.ndarray] | None:
    if imatrix is None:
        return None
    if isinstance(imatrix, Mapping):
        return imatrix
    return load_imatrix(imatrix, **reading)


def plan_requantize(
    model: Model,
    type: GGMLType | int | str,
    *,
    imatrix: Mapping[str, np.ndarray] | None = None,
    tensor_types: Iterable[tuple[str, GGMLType | int | str] | str] = (),
    keep_1d: bool = True,
) -> tuple[RequantizeResult, dict[str, np.ndarray]]:
    """Decide every tensor's type for :func:`requantize`, writing nothing.

    Args:
        model: an open file or split model.
        type, tensor_types, keep_1d: as in :func:`requantize`.
        imatrix: importance weights by tensor name (:func:`gguf_schema.tools.imatrix.load_imatrix`).

    Returns:
        The result (without errors measured) and the importance weights of each tensor that gets them.

    Raises:
        ValueError: a type that cannot be written, a bad override.
        GGUFBuildError: a row no type fits, a type that needs an importance matrix without one
            (or without an entry for the tensor), importance weights that do not fit a tensor.
        GGUFFormatError: a tensor of an unknown or removed type.
    """
    target = _writable_type(type)
    overrides = [parse_tensor_type(o) if isinstance(o, str) else (o[0], _writable_type(o[1])) for o in tensor_types]
    compiled = [(re.compile(p), p, t) for p, t in overrides]
    matched: set[str] = set()
    reports: list[TensorReport] = []
    weights: dict[str, np.ndarray] = {}
    notes: list[str] = []
    input_bytes = 0
    for t in model.tensor_list:
        old = t.known_type()
        input_bytes += t.nbytes
        keep = _keep_reason(t, keep_1d)
        if keep is not None:
            reports.append(TensorReport(t.name, t.shape, old, old, None, keep, False, t.nbytes))
            continue
        want = target
        for rx, pattern, over in compiled:
            if rx.search(t.name):
                want = over
                matched.add(pattern)
                break
        new, reason = _fitting_type(t, want)
        if new == old:
            reason = f"kept: already {old.name}" if reason is None else f"{reason}; kept: already {old.name}"
        codec = CODECS[new]
        uses_weights = new != old and codec.quantize_rows is not None
        w = imatrix.get(t.name) if imatrix is not None and uses_weights else None
        if new != old and codec.needs_imatrix and w is None:
            has = "has no entry for it" if imatrix is not None else "was not given (--imatrix)"
            raise GGUFBuildError(
                f"{new.name} needs an importance matrix, and the importance matrix {has}",
                path=f"tensor {t.name!r}",
                value=new.name,
            )
        if imatrix is not None and uses_weights and w is None:
            notes.append(f"{t.name}: no importance weights in the imatrix: quantized to {new.name} without them")
        if w is not None:
            try:
                weights[t.name] = tensor_weights(w, t.shape)
            except ValueError as e:
                raise GGUFBuildError(str(e), path=f"tensor {t.name!r}", value=int(np.asarray(w).size)) from None
        nbytes = tensor_nbytes(new, t.dims)
        reports.append(TensorReport(t.name, t.shape, old, new, want, reason, w is not None, nbytes))
    for _rx, pattern, _t in compiled:
        if pattern not in matched:
            notes.append(f"--tensor-type {pattern!r} matched no tensor that is requantized")
    ftype = file_type_of(target)
    if ftype is None:
        notes.append(f"llama.cpp has no file type for {target.name}: general.file_type removed")
    head = model.shards[0] if isinstance(model, SplitModel) else model
    return RequantizeResult(target, ftype, reports, notes, input_bytes, head.data_offset), weights


# --------------------------------------------------------------------------- streaming


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _stream(t: Tensor, report: TensorReport, weights: np.ndarray | None, threads: int) -> Iterator[Any]:
    """The requantized bytes of tensor ``t`` in chunks of rows, measuring the error as they go."""
    new = report.new_type
    cols = t.dims[0]
    rows = math.prod(t.dims[1:])
    experts = weights is not None and weights.ndim == 2 and t.shape[0] > 0
    per_matrix = rows // t.shape[0] if experts else rows
    step = max(1, _CHUNK_BYTES * threads // (4 * max(cols, 1)))
    err = total = 0.0
    for start in range(0, rows, per_matrix or 1):
        w = weights[start // per_matrix] if experts and weights is not None else weights
        for a in range(start, start + per_matrix, step):
            b = min(a + step, start + per_matrix)
            x = t.dequantize(rows=slice(a, b), threads=threads)
            try:
                q = quantize(x, new, imatrix=w, threads=threads)
            except ValueError as e:
                raise GGUFBuildError(str(e), path=f"tensor {t.name!r}", value=new.name) from None
            y = dequantize(q, new, x.shape, threads=threads)
            with np.errstate(over="ignore", invalid="ignore"):
                d = (y - x).reshape(-1).astype(np.float64)
                err += float(d @ d)
                d = x.reshape(-1).astype(np.float64, copy=False)
                total += float(d @ d)
            yield q.reshape(-1).data
    n = max(1, t.n_elements)
    report.rms_error = math.sqrt(err / n)
    report.rms_input = math.sqrt(total / n)


def _copied(t: Tensor, report: TensorReport) -> PlannedTensor:
    planned = plan_tensor(t.name, t, "little")
    chunks = planned.chunks

    def measured() -> Iterator[Any]:
        yield from chunks()
        report.rms_error = 0.0
        report.rms_input = _rms_of(t)

    planned.chunks = measured
    return planned


def _rms_of(t: Tensor) -> float | None:
    """RMS of a copied tensor's values (None for integer data, which is not a number in this sense)."""
    gt = t.known_type()
    if not _is_float_data(gt) or t.n_elements == 0:
        return None if not _is_float_data(gt) else 0.0
    total = 0.0
    rows = math.prod(t.dims[1:]) if t.dims else 1
    step = max(1, _CHUNK_BYTES // (4 * max(t.dims[0] if t.dims else 1, 1)))
    for a in range(0, rows, step):
        x = t.dequantize(rows=slice(a, min(rows, a + step))).reshape(-1).astype(np.float64)
        total += float(np.dot(x, x))
    return math.sqrt(total / t.n_elements)


def _fields(model: Model, result: RequantizeResult) -> list[Field]:
    replaced = {"general.quantization_version", "general.file_type", *SPLIT_KEYS}
    fields = [f for f in model.fields.records if f.key not in replaced]
    fields.append(make_field("general.quantization_version", QUANTIZATION_VERSION, ValueType.UINT32))
    if result.file_type is not None:
        fields.append(make_field("general.file_type", int(result.file_type), ValueType.UINT32))
    return fields


def _refuse_input_as_output(model: Model, target: PathLike) -> None:
    """The output must be a new file: never one of the input's files (the check every writing command shares)."""
    paths = model.paths if isinstance(model, SplitModel) else [model.name]
    refuse_overwriting_inputs([target], [p for p in paths if p is not None], command="quantize")


def _open(src: PathLike, storage_options: Mapping[str, Any] | None, reading: dict[str, Any]) -> Model:
    """The model, a single local file read with positioned reads rather than mapped: a mapped file's
    pages stay resident as they are read, so the process would grow by the whole input; read this
    way each chunk of rows is read when it is needed and dropped after. Split models are mapped
    (unless ``reading`` says ``mmap=False``). Vocabularies stay undecoded (``lazy``): the writer
    copies records it does not change as stored. ``reading``: ``limits`` and ``mmap``, for every read."""
    if is_url(os.fspath(src)):
        return open_model(src, lazy=True, storage_options=storage_options, **reading)
    probe = open_model(src, lazy=True, **reading)
    if isinstance(probe, SplitModel):
        return probe
    probe.close()
    return read(src, lazy=True, limits=reading["limits"], mmap=False)


def requantize(
    src: PathLike,
    dst: PathLike,
    type: GGMLType | int | str,
    *,
    imatrix: ImatrixArg = None,
    tensor_types: Iterable[tuple[str, GGMLType | int | str] | str] = (),
    keep_1d: bool = True,
    threads: int | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    storage_options: Mapping[str, Any] | None = None,
    on_plan: Callable[[RequantizeResult], None] | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
) -> RequantizeResult:
    """Write ``src`` requantized to ``type`` as ``dst`` (see the module docstring for the rules).

    Args:
        src: the model: a path, a URL (read through fsspec with ``storage_options``), or the
            first shard of a split model (all shards are read; the output is one file).
        dst: the path of the new file, written atomically (a failed run leaves whatever was
            there untouched). It may not be the input.
        type: the ggml type of the requantized tensors: any of
            :data:`~gguf_schema.tensors.QUANTIZE_TYPES` (a :class:`GGMLType`, id or name).
        imatrix: importance weights: an imatrix file (GGUF or legacy ``.dat``, a path or its
            bytes) or a mapping tensor name -> weights as
            :func:`~gguf_schema.tools.imatrix.load_imatrix` returns it. Each tensor whose
            quantizer uses weights gets its entry; a tensor without one is quantized without
            (a note), unless its type needs one (IQ1_S, IQ2_XXS, IQ2_XS: ``Codec.needs_imatrix``):
            then it is an error.
        tensor_types: overrides ``(REGEX, TYPE)`` or ``"REGEX=TYPE"``: a tensor requantized
            whose name the first matching expression is found in gets that type instead
            (then its fallback, if its rows do not fit).
        keep_1d: keep 1-D tensors as they are (default, as llama.cpp does: norms and biases
            stay F32). False requantizes 1-D weights too, under the same name rules (norms are
            still kept by name).
        threads: worker threads for decoding and encoding (default: the CPUs, at most 8);
            each works on its own chunk of rows, so memory grows by about 4 MiB per thread.
        dry_run: plan only: check everything and return the plan, writing nothing.
        progress: called with the number of bytes written, as they are written.
        storage_options: fsspec options for a URL.
        on_plan: called with the plan once it is complete, before anything is written (the
            command line prints fallbacks and sizes the progress bar there).
        limits: resource limits for reading the model and a GGUF imatrix file, as in
            :func:`gguf_schema.open`.
        mmap: ``False``: nothing is mapped (a split model's shards and an imatrix file are read
            with positioned reads too; a single local model file always is).

    Returns:
        A :class:`RequantizeResult`; after a write, each tensor's RMS error against its input.

    Raises:
        ValueError: an unknown type or bad override, bad ``threads``.
        GGUFBuildError: input the plan refuses (see :func:`plan_requantize`), output = input,
            data that cannot be stored in the type (NaN or infinity in a block type, values
            out of an integer type's range): the target is left as it was.
        GGUFFormatError, GGUFIOError: an unreadable model or imatrix file.
    """
    if threads is None:
        workers = min(_cpu_count(), 8)
    elif isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    else:
        workers = threads
    target = _writable_type(type)
    if is_url(os.fspath(dst)):
        raise ValueError(f"the output must be a local path, got the URL {os.fspath(dst)!r}")
    reading: dict[str, Any] = {"limits": limits, "mmap": mmap}
    weights_by_name = _load_weights(imatrix, reading)
    model = _open(src, storage_options, reading)
    try:
        _refuse_input_as_output(model, dst)
        result, weights = plan_requantize(
            model, target, imatrix=weights_by_name, tensor_types=tensor_types, keep_1d=keep_1d
        )
        result.dry_run = dry_run
        if on_plan is not None:
            on_plan(result)
        if dry_run:
            return result
        planned: list[PlannedTensor] = []
        for t, report in zip(model.tensor_list, result.tensors, strict=True):
            if report.requantized:
                planned.append(
                    PlannedTensor(
                        t.name,
                        int(report.new_type),
                        tuple(t.dims),
                        report.nbytes,
                        functools.partial(_stream, t, report, weights.get(t.name), workers),
                    )
                )
            else:
                planned.append(_copied(t, report))
        source = model.shards[0] if isinstance(model, SplitModel) else model
        write_file(
            dst, _fields(model, result), planned, version=3, byte_order="little", progress=progress, source=source
        )
        return result
    finally:
        model.close()
