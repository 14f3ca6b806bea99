"""Quantizing a model file as ``llama-quantize`` does: its presets, options and files, streamed.

:func:`requantize` reads a model (a file, a URL, or the first shard of a split model), chooses a
type for every tensor by llama.cpp's rules for the preset asked (``Q4_K_M``, ``IQ4_XS``,
``Q8_0`` ...: :mod:`gguf_schema.tools.quantplan` holds the rules), and writes the new file (or,
with ``keep_split``, one shard per input shard) through the one assembler
(:func:`gguf_schema.writer.write_file`, atomic). Given the same input and options, the file is
``llama-quantize``'s byte for byte: the same tensors in the same order (by layer, then name),
the same bytes in each (ggml's quantizers, repeated bit for bit), the same metadata in the same
order (``general.quantization_version``, ``general.file_type``, the ``--override-kv`` keys and
the ``quantize.imatrix.*`` keys appended). It works in two steps:

1. **Planning** (:func:`plan_requantize`), before anything is read of the tensors' data: every
   tensor's type and why, its importance weights. Bad input (an unknown preset, a row no type
   fits, a preset that needs an importance matrix without one, an importance matrix for another
   model or of the wrong size, a tensor already quantized without ``allow_requantize``) fails
   here, and the target is never touched.
2. **Streaming**: each tensor to quantize is decoded a few MiB of rows at a time
   (:meth:`gguf_schema.model.Tensor.dequantize` with ``rows``), encoded
   (:func:`gguf_schema.tensors.quantize`, with the tensor's importance weights), and handed to
   the writer; memory stays around one chunk per thread, whatever the size of the tensor. With
   ``measure=True`` the RMS error against the input is measured on the way. Other tensors are
   copied as they are.

A single ggml type that is not one of ``llama-quantize``'s names (``Q8_K``, ``F64``, ``I8`` ...)
or given as a :class:`GGMLType` is this library's extension: every quantized tensor that type, as
``--pure`` does (no ``general.file_type`` where llama.cpp has none).

>>> import os, tempfile, numpy as np, gguf_schema
>>> d = tempfile.mkdtemp()
>>> rng = np.random.default_rng(0)
>>> gguf_schema.save(os.path.join(d, "in.gguf"), {"general.architecture": "llama", "llama.block_count": np.uint32(1)},
...                  {"blk.0.ffn_up.weight": rng.standard_normal((8, 256)).astype(np.float32),
...                   "blk.0.ffn_down.weight": rng.standard_normal((8, 96)).astype(np.float32),
...                   "blk.0.ffn_norm.weight": np.ones(256, np.float32)})
>>> result = requantize(os.path.join(d, "in.gguf"), os.path.join(d, "out.gguf"), "Q4_K_M", measure=True)
>>> [(r.name, r.new_type.name, r.why) for r in result.tensors]  # doctest: +NORMALIZE_WHITESPACE
[('blk.0.ffn_down.weight', 'Q8_0', 'Q4_K_M: ffn_down: Q6_K in the first and last eighth of the layers and every third
   between; rows of 96 are not whole Q6_K blocks (256): fallback Q8_0'),
 ('blk.0.ffn_norm.weight', 'F32', 'kept: 1-D'),
 ('blk.0.ffn_up.weight', 'Q4_K', 'Q4_K_M: the default type')]
>>> round(result.tensors[2].relative_error, 2), result.file_type_name
(0.07, 'MOSTLY_Q4_K_M')
>>> with gguf_schema.open(os.path.join(d, "out.gguf")) as f:
...     f.metadata["general.file_type"], f.tensors["blk.0.ffn_up.weight"].type.name
(15, 'Q4_K')
"""

from __future__ import annotations

import collections
import functools
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from ..durable import atomic_replace_set, refuse_overwriting_inputs
from ..errors import GGUFBuildError
from ..format import keys as K
from ..format.limits import Limits
from ..format.types import FileType, GGMLType, ValueType, tensor_nbytes
from ..format.values import Field, make_field
from ..io import PathLike
from ..io.source import is_url
from ..model import GGUFFile, Tensor
from ..reader import read
from ..shards import SplitModel, open_model, shard_name
from ..tensors import CODECS, QUANTIZE_TYPES, quantize
from ..tensors.engine import error_sums
from ..writer import PlannedTensor, Progress, ggml_dims, plan_tensor, write_file
from . import quantplan
from .ecmascript import compile_ecmascript
from .imatrix import Imatrix, read_imatrix, tensor_weights
from .quantplan import FALLBACK, PlanOptions, Preset
from .split import SPLIT_KEYS

__all__ = [
    "FALLBACK",
    "QUANTIZATION_VERSION",
    "RequantizeResult",
    "TensorReport",
    "file_type_of",
    "parse_override_kv",
    "parse_tensor_type",
    "plan_requantize",
    "requantize",
]

Model = GGUFFile | SplitModel
ImatrixArg = Union[str, "os.PathLike[str]", bytes, Imatrix, Mapping[str, np.ndarray], None]
TypeArg = GGMLType | FileType | int | str
Override = str | tuple[str, ValueType, Any]

QUANTIZATION_VERSION = 2
"""``general.quantization_version`` of the files written (ggml's ``GGML_QNT_VERSION``)."""

IMATRIX_KEYS = (
    "quantize.imatrix.file",
    "quantize.imatrix.dataset",
    "quantize.imatrix.entries_count",
    "quantize.imatrix.chunks_count",
)
"""The keys ``llama-quantize`` adds when it uses an importance matrix: its path (as given), its
first dataset, how many entries were used, how many chunks of text it saw."""

_LLAMA_STRING = 127
"""The most bytes ``llama-quantize`` keeps of a string it writes (its ``kv_override`` buffer)."""

_CHUNK_BYTES = 4 * 2**20
"""Float32 bytes decoded and encoded per step and thread: the working set of a tensor's stream."""

_DEFAULT_ALIGNMENT = 32


def file_type_of(t: GGMLType | int | str) -> FileType | None:
    """The ``general.file_type`` of a file of type ``t`` written by ``llama-quantize`` under the
    preset of that name, or for a type without one, llama.cpp's file type of that name (None
    where llama.cpp has none).

    >>> file_type_of("Q4_K").name, file_type_of("Q8_0").name, file_type_of("Q8_K")
    ('MOSTLY_Q4_K_M', 'MOSTLY_Q8_0', None)
    """
    return quantplan.preset(GGMLType.of(t)).file_type


def parse_tensor_type(text: str) -> tuple[str, GGMLType]:
    """``REGEX=TYPE`` (as ``llama-quantize --tensor-type`` takes it) -> ``(REGEX, GGMLType)``.

    The regular expression is searched for anywhere in a tensor's name (``attn_v`` matches
    ``blk.0.attn_v.weight``); the first ``=`` separates the type, as in ``llama-quantize``.
    Raises ``ValueError`` for a missing ``=``, a bad expression or a type that cannot be written.
    (``llama-quantize`` lowercases the expression first; the command line does too.)

    >>> parse_tensor_type(r"blk\\.[0-3]\\.ffn_down=q6_k")
    ('blk\\\\.[0-3]\\\\.ffn_down', <GGMLType.Q6_K: 14>)
    """
    pattern, sep, name = text.partition("=")
    if not sep or not pattern or not name:
        raise ValueError(f"a tensor type is REGEX=TYPE, got {text!r}")
    compile_ecmascript(pattern)  # as llama-quantize reads it, or refused
    return pattern, _writable_type(name)


def _writable_type(t: GGMLType | int | str) -> GGMLType:
    try:
        gt = GGMLType.of(t.strip().upper() if isinstance(t, str) else t)
    except (ValueError, TypeError):
        gt = None
    if gt is None or gt not in QUANTIZE_TYPES:
        names = ", ".join(x.name for x in sorted(QUANTIZE_TYPES, key=int))
        raise ValueError(f"cannot quantize to {t!r}: the types are {names}")
    return gt


def parse_override_kv(text: str) -> tuple[str, ValueType, Any]:
    """``KEY=TYPE:VALUE`` (as ``llama-quantize --override-kv`` takes it, TYPE ``int``, ``float``,
    ``bool`` or ``str``) -> ``(key, value type, value)`` as ``llama-quantize`` writes it: an int as
    a UINT32 of its absolute value, a float as FLOAT32, a string of at most 127 bytes.

    >>> parse_override_kv("general.name=str:tiny"), parse_override_kv("llama.expert_count=int:-8")
    (('general.name', <ValueType.STRING: 8>, 'tiny'), ('llama.expert_count', <ValueType.UINT32: 4>, 8))
    >>> parse_override_kv("a.b=bool:yes")
    Traceback (most recent call last):
    ValueError: a metadata override is KEY=TYPE:VALUE with TYPE int, float, bool (true or false) or str, got 'a.b=bool:yes'
    """
    key, sep, rest = text.partition("=")
    kind, colon, value = rest.partition(":")
    bad = ValueError(
        f"a metadata override is KEY=TYPE:VALUE with TYPE int, float, bool (true or false) or str, got {text!r}"
    )
    if not sep or not colon or not key or len(key.encode()) >= 128:
        raise bad
    if kind == "int":
        m = re.match(r"\s*([+-]?\d+)", value)  # C's atol: the leading integer, 0 without one
        n = int(m.group(1)) if m else 0
        return key, ValueType.UINT32, abs(max(min(n, 2**63 - 1), -(2**63 - 1))) & 0xFFFFFFFF
    if kind == "float":
        m = re.match(r"\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf(inity)?|nan)", value, re.I)
        return key, ValueType.FLOAT32, float(np.float32(float(m.group(0)) if m else 0.0))
    if kind == "bool" and value in ("true", "false"):
        return key, ValueType.BOOL, value == "true"
    if kind == "str" and len(value.encode("utf-8", "surrogateescape")) <= _LLAMA_STRING:
        return key, ValueType.STRING, value
    raise bad


@dataclass
class TensorReport:
    """One tensor of a quantization: its plan, then what writing it measured.

    Attributes:
        name, shape: the tensor's name and numpy shape (outermost first).
        old_type: its type in the input.
        new_type: its type in the output.
        requested: the type chosen for it before any fallback (None for a tensor kept as it is).
        why: why it gets ``new_type`` (the rule, the option, the fallback).
        imatrix: whether importance weights went into its quantizer.
        nbytes: bytes of its data in the output.
        shard: the output file it is in (0 unless ``keep_split``).
        pattern: the ``tensor_types`` expression that chose its type (None: none did).
        rms_error: root mean square of (output decoded - input decoded) over the tensor, in
            float32 terms (0.0 for a tensor copied as it is; None until written, or not measured).
        rms_input: root mean square of the input's values (None until written, or not measured).
    """

    name: str
    shape: tuple[int, ...]
    old_type: GGMLType
    new_type: GGMLType
    requested: GGMLType | None
    why: str
    imatrix: bool
    nbytes: int
    shard: int = 0
    pattern: str | None = None
    rms_error: float | None = None
    rms_input: float | None = None

    @property
    def requantized(self) -> bool:
        """Whether the tensor is decoded and encoded again (else copied byte for byte)."""
        return self.requested is not None and self.new_type != self.old_type

    @property
    def fell_back(self) -> bool:
        """Whether the tensor got another type than the one chosen for it (its rows did not fit)."""
        return self.requested is not None and self.new_type != self.requested

    @property
    def relative_error(self) -> float | None:
        """``rms_error / rms_input`` (0.0 for an all-zero input copied exactly; None until written)."""
        if self.rms_error is None or self.rms_input is None:
            return None
        if self.rms_input == 0:
            return 0.0 if self.rms_error == 0 else math.inf
        return self.rms_error / self.rms_input

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record: ``name``, ``from``, ``to``, ``why`` first."""
        return {
            "name": self.name,
            "from": self.old_type.name,
            "to": self.new_type.name,
            "why": self.why,
            "shape": list(self.shape),
            "requested": self.requested.name if self.requested is not None else None,
            "requantized": self.requantized,
            "imatrix": self.imatrix,
            "bytes": self.nbytes,
            "shard": self.shard,
            "rms_error": self.rms_error,
            "rms_input": self.rms_input,
            "relative_error": self.relative_error,
        }


@dataclass
class RequantizeResult:
    """What :func:`requantize` did (or, with ``dry_run``, would do).

    Attributes:
        preset: the preset's name (``Q4_K_M``; a single type's name for a single-type run).
        type: the preset's default tensor type.
        file_type: the ``general.file_type`` written (None: the key was removed). ``COPY`` of a
            file without one writes llama.cpp's guess, with the GUESSED flag (1024) set.
        tensors: one :class:`TensorReport` per tensor, in the order written.
        notes: things worth saying that are not errors (an override pattern that matched
            nothing, tensors without importance weights, a removed file type).
        input_bytes: the size of the input's tensor data.
        header_bytes: the size of the input's header (metadata and tensor infos, up to its data
            section): the output's is about the same.
        dry_run: True when nothing was written.
        paths: the files written (or to be written), one per shard.
        metadata: the keys set on top of the input's (quantization version, file type,
            overrides, importance matrix), in the order written.
        key_types: the value type of each of ``metadata`` (UINT32 where not given).
    """

    preset: str
    type: GGMLType
    file_type: int | None
    tensors: list[TensorReport]
    notes: list[str] = field(default_factory=list)
    input_bytes: int = 0
    header_bytes: int = 0
    dry_run: bool = False
    paths: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    key_types: dict[str, ValueType] = field(default_factory=dict)

    @property
    def output_bytes(self) -> int:
        """The size of the output's tensor data (without alignment padding)."""
        return sum(r.nbytes for r in self.tensors)

    @property
    def fallbacks(self) -> list[TensorReport]:
        """The tensors that got another type than the one chosen for them."""
        return [r for r in self.tensors if r.fell_back]

    @property
    def file_type_name(self) -> str | None:
        """``general.file_type`` by name (``MOSTLY_Q4_K_M``; ``MOSTLY_F16|GUESSED`` for a guess)."""
        if self.file_type is None:
            return None
        guessed = self.file_type & int(FileType.GUESSED)
        base = self.file_type & ~int(FileType.GUESSED)
        name = FileType(base).name if base in FileType._value2member_map_ else str(base)
        return f"{name}|GUESSED" if guessed else name

    def counts(self) -> dict[str, int]:
        """How many tensors of each output type are quantized (decoded and encoded again)."""
        return dict(collections.Counter(r.new_type.name for r in self.tensors if r.requantized))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {
            "preset": self.preset,
            "type": self.type.name,
            "file_type": self.file_type,
            "file_type_name": self.file_type_name,
            "dry_run": self.dry_run,
            "paths": list(self.paths),
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "metadata": {k: v for k, v in self.metadata.items()},
            "notes": list(self.notes),
            "tensors": [r.to_dict() for r in self.tensors],
        }


# --------------------------------------------------------------------------- importance matrices


@dataclass
class _Weights:
    """The importance matrix a run uses: the entries left after ``include``/``exclude`` and the keys it records."""

    by_name: dict[str, np.ndarray]
    keys: list[tuple[str, ValueType, Any]]


def _clip(text: str) -> str:
    """At most 127 bytes of ``text``, as ``llama-quantize`` keeps them (never half a character)."""
    raw = text.encode("utf-8", "surrogateescape")[:_LLAMA_STRING]
    return raw.decode("utf-8", "ignore")


def _imatrix(
    imatrix: ImatrixArg,
    include: Sequence[str],
    exclude: Sequence[str],
    reading: dict[str, Any],
) -> _Weights | None:
    if imatrix is None:
        return None
    if include and exclude:
        raise ValueError("include_weights and exclude_weights cannot be used together (as in llama-quantize)")
    path = os.fspath(imatrix) if isinstance(imatrix, (str, os.PathLike)) else None
    if isinstance(imatrix, Imatrix):
        m = imatrix
    elif isinstance(imatrix, Mapping):
        m = Imatrix(dict(imatrix))
    elif isinstance(imatrix, (str, os.PathLike, bytes, bytearray, memoryview)):
        m = read_imatrix(imatrix, **reading)
    else:
        raise TypeError(
            f"imatrix must be a path, the file's bytes, an Imatrix or a mapping, got {type(imatrix).__name__}"
        )
    weights = {k: np.asarray(v, dtype=np.float32) for k, v in m.weights.items()}
    weights = {k: v for k, v in weights.items() if not any(x in k for x in exclude)}
    if include:
        weights = {k: v for k, v in weights.items() if any(x in k for x in include)}
    for name, w in weights.items():
        bad = np.flatnonzero(~np.isfinite(w))
        if bad.size:
            raise GGUFBuildError(
                f"the importance matrix holds a non-finite value for {name} (weight {bad[0]} is {w[bad[0]]})",
                path=f"imatrix entry {name!r}",
                value=float(w[bad[0]]),
            )
    if not weights:
        return _Weights({}, [])
    keys: list[tuple[str, ValueType, Any]] = []
    if path is not None:
        keys.append((IMATRIX_KEYS[0], ValueType.STRING, _clip(path)))
    if m.datasets:
        keys.append((IMATRIX_KEYS[1], ValueType.STRING, _clip(m.datasets[0])))
    keys.append((IMATRIX_KEYS[2], ValueType.UINT32, len(weights)))
    if m.chunk_count > 0:
        keys.append((IMATRIX_KEYS[3], ValueType.UINT32, m.chunk_count))
    return _Weights(weights, keys)


# --------------------------------------------------------------------------- planning


def _order(model: Model, keep_split: bool) -> list[tuple[Tensor, int]]:
    """The tensors in the order ``llama-quantize`` processes and writes them, with the shard each goes to."""
    if keep_split and isinstance(model, SplitModel):
        return [(t, i) for i, s in enumerate(model.shards) for t in sorted(s.tensor_list, key=lambda t: t.offset)]
    by_name: dict[str, Tensor] = {}
    for t in model.tensor_list:
        if t.name in by_name:  # llama.cpp's loader refuses such a model too
            raise GGUFBuildError(f"tensor {t.name!r} occurs twice", path=f"tensor {t.name!r}", value=t.name)
        by_name[t.name] = t
    return [(by_name[n], 0) for n in quantplan.llama_order(by_name)]


def _metadata_view(model: Model, overrides: Sequence[tuple[str, ValueType, Any]]) -> Mapping[str, Any]:
    """The metadata llama.cpp's loader sees: the model's, with the overrides on top."""
    return collections.ChainMap({k: v for k, _, v in overrides}, model.metadata)  # type: ignore[arg-type]


def _overrides(override_kv: Iterable[Override]) -> list[tuple[str, ValueType, Any]]:
    out = []
    for o in override_kv:
        if isinstance(o, str):
            out.append(parse_override_kv(o))
        else:
            key, vt, value = o
            out.append((key, ValueType(vt), make_field(key, value, vt).value))
    return out


def plan_requantize(
    model: Model,
    type: TypeArg,
    *,
    imatrix: Imatrix | Mapping[str, np.ndarray] | None = None,
    tensor_types: Iterable[tuple[str, GGMLType | int | str] | str] = (),
    pure: bool = False,
    output_tensor_type: GGMLType | int | str | None = None,
    token_embedding_type: GGMLType | int | str | None = None,
    leave_output_tensor: bool = False,
    allow_requantize: bool = False,
    keep_split: bool = False,
    override_kv: Iterable[Override] = (),
    include_weights: Sequence[str] = (),
    exclude_weights: Sequence[str] = (),
    keep_1d: bool = True,
    dry_run: bool = False,
) -> tuple[RequantizeResult, dict[str, np.ndarray]]:
    """Decide every tensor's type for :func:`requantize`, reading no tensor data.

    Args:
        model: an open file or split model.
        type, tensor_types, pure, output_tensor_type, token_embedding_type, leave_output_tensor,
            allow_requantize, keep_split, override_kv, include_weights, exclude_weights, keep_1d:
            as in :func:`requantize`.
        imatrix: an :class:`~gguf_schema.tools.imatrix.Imatrix`, or importance weights by tensor name.
        dry_run: a missing importance matrix is a note, not an error (as ``llama-quantize --dry-run``).

    Returns:
        The result (without errors measured; ``paths`` empty) and the importance weights of each
        tensor that gets them.

    Raises:
        ValueError: an unknown preset or type, a bad override.
        GGUFBuildError: see :func:`requantize`.
        GGUFFormatError: a tensor of an unknown or removed type.
    """
    p = _preset(type)
    weights = _imatrix(imatrix, include_weights, exclude_weights, {})
    return _plan(
        model,
        p,
        weights,
        _options(tensor_types, pure, output_tensor_type, token_embedding_type, leave_output_tensor, keep_1d, weights),
        allow_requantize=allow_requantize,
        keep_split=keep_split,
        overrides=_overrides(override_kv),
        dry_run=dry_run,
    )


def _preset(type: TypeArg) -> Preset:
    if isinstance(type, GGMLType):
        _writable_type(type)
    return quantplan.preset(type, single_types=QUANTIZE_TYPES)


def _options(
    tensor_types: Iterable[tuple[str, GGMLType | int | str] | str],
    pure: bool,
    output_tensor_type: GGMLType | int | str | None,
    token_embedding_type: GGMLType | int | str | None,
    leave_output_tensor: bool,
    keep_1d: bool,
    weights: _Weights | None,
) -> PlanOptions:
    overrides = tuple(
        parse_tensor_type(o) if isinstance(o, str) else (o[0], _writable_type(o[1])) for o in tensor_types
    )
    for pattern, _ in overrides:
        compile_ecmascript(pattern)  # ECMAScript's meaning exactly, or a ValueError saying what differs
    return PlanOptions(
        pure=pure,
        output_tensor_type=_writable_type(output_tensor_type) if output_tensor_type is not None else None,
        token_embedding_type=_writable_type(token_embedding_type) if token_embedding_type is not None else None,
        tensor_types=overrides,
        leave_output_tensor=leave_output_tensor,
        has_imatrix=weights is not None and bool(weights.by_name),
        keep_1d=keep_1d,
    )


def _plan(
    model: Model,
    p: Preset,
    weights: _Weights | None,
    options: PlanOptions,
    *,
    allow_requantize: bool,
    keep_split: bool,
    overrides: list[tuple[str, ValueType, Any]],
    dry_run: bool,
) -> tuple[RequantizeResult, dict[str, np.ndarray]]:
    order = _order(model, keep_split)
    for t, _ in order:
        t.known_type()  # an unknown or removed type is an error here
    metadata = _metadata_view(model, overrides)
    facts, notes = quantplan.ModelFacts.of(metadata, (t.name for t, _ in order))
    choices = quantplan.plan_types(((t.name, t.dims, t.known_type()) for t, _ in order), p, facts, options)
    by_name = weights.by_name if weights is not None and weights.by_name else None
    reports: list[TensorReport] = []
    used: dict[str, np.ndarray] = {}
    lacking: list[str] = []
    needs: list[TensorReport] = []
    for (t, shard), c in zip(order, choices, strict=True):
        old = t.known_type()
        r = TensorReport(
            t.name, t.shape, old, c.type, c.requested, c.why, False, tensor_nbytes(c.type, t.dims), shard, c.pattern
        )
        reports.append(r)
        if c.requested is not None and old == c.type:
            r.why += f"; already {old.name}: copied"
        codec = CODECS[c.type]
        needed = c.requested is not None and (quantplan.requires_imatrix(t.name, c.type, p) or codec.needs_imatrix)
        if needed and (by_name is None or (r.requantized and t.name not in by_name)):
            needs.append(r)
        if not r.requantized or codec.quantize_rows is None or by_name is None:
            continue
        w = by_name.get(t.name)
        if w is None:
            lacking.append(t.name)
            continue
        try:
            used[t.name] = tensor_weights(w, t.shape if len(t.shape) <= 3 else t.shape[-1:])
        except ValueError as e:
            if quantplan.role_of(t.name) == quantplan.Role.TOKEN_EMBD:  # llama-quantize quantizes it without
                notes.append(f"{t.name}: {e}: quantized without importance weights")
                continue
            raise GGUFBuildError(
                f"{e} (an importance matrix for another model?)", path=f"tensor {t.name!r}", value=int(w.size)
            ) from None
        r.imatrix = True
    if by_name is not None and lacking and not any(t.name in by_name for t, _ in order):
        raise GGUFBuildError(
            f"the importance matrix is not for this model: it names none of its tensors, and has no entry for "
            f"the {len(lacking)} it would be used for ({_names(lacking)}); its entries are {_names(sorted(by_name))}",
            value=len(lacking),
        )
    _check_imatrix_needs(needs, p, by_name is not None, dry_run, notes)
    _check_requantize(reports, allow_requantize, dry_run, notes)
    if lacking:
        notes.append(f"no importance weights for {len(lacking)} tensors, quantized without: {_names(lacking)}")
    for pattern, _ in options.tensor_types:
        if not any(r.pattern == pattern for r in reports):
            notes.append(f"--tensor-type {pattern!r} matched no tensor that is quantized")
    if weights is not None and not weights.by_name:
        notes.append("the importance matrix has no entries left (include/exclude): not used")
    file_type = _file_type(p, metadata, [r.old_type for r in reports])
    if file_type is None:
        notes.append(f"llama.cpp has no file type for {p.name}: general.file_type removed")
    keys: dict[str, Any] = {K.GENERAL_QUANTIZATION_VERSION: QUANTIZATION_VERSION}
    if file_type is not None:
        keys[K.GENERAL_FILE_TYPE] = file_type
    for k, _, v in overrides + (weights.keys if weights is not None else []):
        keys.pop(k, None)
        keys[k] = v
    head = model.shards[0] if isinstance(model, SplitModel) else model
    input_bytes = sum(t.nbytes for t, _ in order)
    types = {k: vt for k, vt, _ in overrides + (weights.keys if weights is not None else [])}
    result = RequantizeResult(
        p.name, p.default, file_type, reports, notes, input_bytes, head.data_offset, metadata=keys, key_types=types
    )
    return result, used


def _names(names: Sequence[str], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _check_imatrix_needs(needs: list[TensorReport], p: Preset, given: bool, dry_run: bool, notes: list[str]) -> None:
    if not needs:
        return
    what = "has no entry for" if given else "was not given, and is needed for"
    text = (
        f"{p.name} needs an importance matrix (--imatrix): it {what} {len(needs)} tensors "
        f"({_names([f'{r.name} -> {r.new_type.name}' for r in needs])})"
    )
    if dry_run:  # as llama-quantize --dry-run: the plan, and a warning
        notes.append(text + ": the quantization itself will refuse to run")
        return
    raise GGUFBuildError(text, path=f"tensor {needs[0].name!r}", value=needs[0].new_type.name)


def _check_requantize(reports: list[TensorReport], allow: bool, dry_run: bool, notes: list[str]) -> None:
    if allow:
        return
    quantized = [r for r in reports if r.requantized and r.old_type.quantized and r.new_type.quantized]
    if not quantized:
        return
    text = (
        f"{len(quantized)} tensors are quantized already ({_names([f'{r.name}: {r.old_type.name}' for r in quantized])}): "
        "quantizing them again loses quality; allow it with --allow-requantize (allow_requantize=True), "
        "or start from a float model"
    )
    if dry_run:  # as llama-quantize --dry-run: the plan (the quantization itself refuses)
        notes.append(text)
        return
    raise GGUFBuildError(text, path=f"tensor {quantized[0].name!r}", value=quantized[0].old_type.name)


def _file_type(p: Preset, metadata: Mapping[str, Any], types: Sequence[GGMLType]) -> int | None:
    if p.copy:
        stored: Any = metadata.get(K.GENERAL_FILE_TYPE)
        ok = isinstance(stored, (int, np.integer)) and not isinstance(stored, bool) and 0 <= int(stored) < 2**32
        return quantplan.guessed_file_type(types, int(stored) if ok else None)
    return int(p.file_type) if p.file_type is not None else None


# --------------------------------------------------------------------------- streaming


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _stream(t: Tensor, report: TensorReport, weights: np.ndarray | None, threads: int, measure: bool) -> Iterator[Any]:
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
            if measure:
                chunk_err, chunk_total = error_sums(q, new, x)
                err, total = err + chunk_err, total + chunk_total
            yield q.reshape(-1).data
    if measure:
        n = max(1, t.n_elements)
        report.rms_error = math.sqrt(err / n)
        report.rms_input = math.sqrt(total / n)


def _copied(t: Tensor, report: TensorReport, measure: bool) -> PlannedTensor:
    """A tensor copied as it is: a little-endian one read a few MiB of rows at a time (a
    big-endian one converted by the writer, whole)."""
    planned = plan_tensor(t.name, t, "little")
    planned.dims = ggml_dims(planned.dims)  # llama-quantize rewrites every tensor's info, copied ones too
    if t.byte_order == "little" and t.dims:
        rows = math.prod(t.dims[1:])
        step = max(1, _CHUNK_BYTES // max(1, t.nbytes // rows)) if rows else 1

        def chunks() -> Iterator[Any]:
            for a in range(0, rows, step):
                yield t.raw(rows=slice(a, min(rows, a + step)))

        planned.chunks = chunks
    stream = planned.chunks

    def measured() -> Iterator[Any]:
        yield from stream()
        if measure:
            report.rms_error = 0.0
            report.rms_input = _rms_of(t)

    planned.chunks = measured
    return planned


def _rms_of(t: Tensor) -> float | None:
    """RMS of a copied tensor's values (None for integer data, which is not a number in this sense)."""
    gt = t.known_type()
    numbers = gt.quantized or gt in (GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.F64)
    if not numbers:
        return None
    if t.n_elements == 0:
        return 0.0
    total = 0.0
    rows = math.prod(t.dims[1:]) if t.dims else 1
    step = max(1, _CHUNK_BYTES // (4 * max(t.dims[0] if t.dims else 1, 1)))
    for a in range(0, rows, step):
        x = t.dequantize(rows=slice(a, min(rows, a + step)))
        total += error_sums(x, GGMLType.F32, x)[1]
    return math.sqrt(total / t.n_elements)


_LLAMA_SPLIT_KEYS = (K.SPLIT_NO, K.SPLIT_COUNT, K.SPLIT_TENSORS_COUNT)


def _fields(model: Model, result: RequantizeResult) -> list[Field]:
    """The output's metadata: the input's (the split keys removed), then each key set, removed
    first where the input has it (as ggml's ``gguf_set_val_*`` does: the key moves to the end)."""
    types = result.key_types
    set_keys = set(result.metadata) | {K.GENERAL_FILE_TYPE}  # removed when there is none
    fields = [f for f in model.fields.records if f.key not in set_keys and f.key not in SPLIT_KEYS]
    for key, value in result.metadata.items():
        vt = types.get(key, ValueType.UINT32)
        fields.append(make_field(key, value, vt))
    return fields


def _split_fields(no: int, count: int, total: int) -> list[Field]:
    if count < 2:
        return []
    return [
        make_field(K.SPLIT_NO, no, ValueType.UINT16),
        make_field(K.SPLIT_COUNT, count, ValueType.UINT16),
        make_field(K.SPLIT_TENSORS_COUNT, total, ValueType.INT32),
    ]


def _outputs(dst: PathLike, n_split: int, keep_split: bool) -> list[str]:
    """The output paths: ``dst``, or with ``keep_split`` (as ``llama-quantize``) the shard names of
    ``dst`` without its ``.gguf`` (one shard too is named ``-00001-of-00001.gguf``)."""
    path = os.fspath(dst)
    if not keep_split:
        return [path]
    prefix = path[: -len(".gguf")] if path.endswith(".gguf") else path
    return [shard_name(prefix, i, n_split) for i in range(n_split)]


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
    type: TypeArg,
    *,
    imatrix: ImatrixArg = None,
    tensor_types: Iterable[tuple[str, GGMLType | int | str] | str] = (),
    pure: bool = False,
    output_tensor_type: GGMLType | int | str | None = None,
    token_embedding_type: GGMLType | int | str | None = None,
    leave_output_tensor: bool = False,
    allow_requantize: bool = False,
    keep_split: bool = False,
    override_kv: Iterable[Override] = (),
    include_weights: Sequence[str] = (),
    exclude_weights: Sequence[str] = (),
    keep_1d: bool = True,
    threads: int | None = None,
    measure: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    storage_options: Mapping[str, Any] | None = None,
    on_plan: Callable[[RequantizeResult], None] | None = None,
    limits: Limits | None = None,
    mmap: bool = True,
    sync: bool = True,
    strict: str | None = None,
) -> RequantizeResult:
    """Write ``src`` quantized under preset ``type`` as ``dst``, as ``llama-quantize`` does (see the module docstring).

    Args:
        src: the model: a path, a URL (read through fsspec with ``storage_options``), or the
            first shard of a split model (all shards are read).
        dst: the path of the new file, written atomically (a failed run leaves whatever was
            there untouched). It may not be the input. With ``keep_split``, the shards'
            prefix (``dst`` without ``.gguf``).
        type: a preset name as ``llama-quantize`` takes it (``"Q4_K_M"``, ``"IQ3_XS"``,
            ``"Q8_0"``, ``"COPY"`` ..., any case: :data:`~gguf_schema.tools.quantplan.PRESETS`),
            its file type number, or a single ggml type (a :class:`GGMLType`, or the name of one
            that is not a preset: every quantized tensor that type).
        imatrix: importance weights: an imatrix file (GGUF or legacy ``.dat``, a path or its
            bytes), an :class:`~gguf_schema.tools.imatrix.Imatrix`, or a mapping tensor name ->
            weights. Entries are used as ``llama-quantize`` uses them; a path is recorded in
            ``quantize.imatrix.file`` as given.
        tensor_types: ``(REGEX, TYPE)`` or ``"REGEX=TYPE"`` (``--tensor-type``): a quantized tensor
            whose name the first matching expression is found in gets that type (then its
            fallback, if its rows do not fit).
        pure: no mix: every quantized tensor the preset's default type (``--pure``).
        output_tensor_type: the type of ``output.weight`` (and of tied token embeddings).
        token_embedding_type: the type of the token embeddings.
        leave_output_tensor: copy ``output.weight`` as it is.
        allow_requantize: quantize tensors that are quantized already (else refused, as
            ``llama-quantize`` refuses; decoding them to F32, F16 or BF16 is always allowed).
        keep_split: a split model in, a split model out: each output shard holds the tensors of
            the input shard of the same number (``--keep-split``).
        override_kv: ``"KEY=TYPE:VALUE"`` strings (``--override-kv``) or ``(key, ValueType,
            value)``: metadata set in the output (and seen by the rules: a changed head count
            changes the plan, as in ``llama-quantize``).
        include_weights, exclude_weights: use only the imatrix entries whose name contains one
            of these, or all but those (not both).
        keep_1d: keep 1-D tensors as they are (llama.cpp always does); False quantizes 1-D
            weights too, under the same name rules.
        threads: worker threads for decoding and encoding (default: the CPUs, at most 8);
            each works on its own chunk of rows, so memory grows by about 4 MiB per thread.
            ``threads=1`` uses one CPU.
        measure: also measure each tensor's RMS error against its input (decodes each chunk
            once more, in one pass with the comparison: about a quarter more time for the
            fastest types; off by default, as ``llama-quantize`` measures nothing).
        dry_run: plan only: check everything and return the plan, writing nothing (a missing
            importance matrix is then a note, as in ``llama-quantize --dry-run``).
        progress: called with the number of bytes written, as they are written.
        storage_options: fsspec options for a URL.
        on_plan: called with the plan once it is complete, before anything is written.
        limits: resource limits for reading the model and a GGUF imatrix file, as in
            :func:`gguf_schema.open`.
        mmap: ``False``: nothing is mapped (a split model's shards and an imatrix file are read
            with positioned reads too; a single local model file always is).
        sync: fsync the new file(s) before they replace the old ones (as :func:`gguf_schema.save`);
            False is faster, and a power cut right after may leave an incomplete file.
        strict: a validation profile ("spec", "ggml", "lenient"): refuse (a
            :class:`~gguf_schema.errors.GGUFValidationError`, nothing written) an output header that
            breaks an error rule of it; without it, each broken rule is a
            :class:`~gguf_schema.errors.GGUFWarning`.

    Returns:
        A :class:`RequantizeResult`; after a write, each tensor's RMS error against its input.

    Raises:
        ValueError: an unknown preset or type (the message lists the presets), a bad override,
            bad ``threads``, ``include_weights`` with ``exclude_weights``.
        GGUFBuildError: input the plan refuses: a row no type fits, a preset that needs an
            importance matrix without one (or without an entry for a tensor), an importance
            matrix for another model or of the wrong size, tensors quantized already without
            ``allow_requantize``, output = input; data that cannot be stored in the type (NaN or
            infinity in a block type): the target is left as it was.
        GGUFFormatError, GGUFIOError: an unreadable model or imatrix file.
    """
    if threads is None:
        workers = min(_cpu_count(), 8)
    elif isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    else:
        workers = threads
    p = _preset(type)
    if is_url(os.fspath(dst)):
        raise ValueError(f"the output must be a local path, got the URL {os.fspath(dst)!r}")
    reading: dict[str, Any] = {"limits": limits, "mmap": mmap}
    weights = _imatrix(imatrix, include_weights, exclude_weights, reading)
    options = _options(
        tensor_types, pure, output_tensor_type, token_embedding_type, leave_output_tensor, keep_1d, weights
    )
    overrides = _overrides(override_kv)
    model = _open(src, storage_options, reading)
    try:
        inputs = [x for x in (model.paths if isinstance(model, SplitModel) else [model.name]) if x is not None]
        if not keep_split:
            refuse_overwriting_inputs([os.fspath(dst)], inputs, command="quantize")
        result, used = _plan(
            model,
            p,
            weights,
            options,
            allow_requantize=allow_requantize,
            keep_split=keep_split,
            overrides=overrides,
            dry_run=dry_run,
        )
        n_split = max((r.shard for r in result.tensors), default=0) + 1 if keep_split else 1
        if keep_split and isinstance(model, SplitModel):
            n_split = max(n_split, len(model.shards))
        result.paths = _outputs(dst, n_split, keep_split)
        result.dry_run = dry_run
        refuse_overwriting_inputs(result.paths, inputs, command="quantize")
        if on_plan is not None:
            on_plan(result)
        if dry_run:
            return result
        _write(model, result, used, workers, measure, progress, sync, strict)
        return result
    finally:
        model.close()


def _write(
    model: Model,
    result: RequantizeResult,
    used: dict[str, np.ndarray],
    workers: int,
    measure: bool,
    progress: Progress | None,
    sync: bool,
    strict: str | None,
) -> None:
    tensors = {t.name: t for t in model.tensor_list}
    n = len(result.paths)
    shards: list[list[PlannedTensor]] = [[] for _ in range(n)]
    for report in result.tensors:
        t = tensors[report.name]
        if report.requantized:
            planned = PlannedTensor(
                t.name,
                int(report.new_type),
                ggml_dims(t.dims),  # as llama-quantize stores them: a [256, 1] matrix with one dimension
                report.nbytes,
                functools.partial(_stream, t, report, used.get(t.name), workers, measure),
            )
        else:
            planned = _copied(t, report, measure)
        shards[report.shard].append(planned)
    head = model.shards[0] if isinstance(model, SplitModel) else model
    fields = _fields(model, result)
    per_shard = _shard_fields(fields, n, len(result.tensors))

    def writer(i: int) -> Callable[[Any], None]:
        def write(stream: Any) -> None:
            write_file(
                stream,
                per_shard[i],
                shards[i],
                version=3,
                byte_order="little",
                progress=progress,
                source=head if i == 0 else None,
                strict=strict,
            )

        return write

    if n == 1:
        write_file(
            result.paths[0],
            per_shard[0],
            shards[0],
            version=3,
            byte_order="little",
            progress=progress,
            source=head,
            sync=sync,
            strict=strict,
        )
    else:
        atomic_replace_set([(path, writer(i)) for i, path in enumerate(result.paths)], sync=sync)


def _shard_fields(fields: list[Field], n: int, total: int) -> list[list[Field]]:
    """The metadata of each of the ``n`` output shards: the first the whole of it, the others
    ``general.alignment`` (where it is not 32) and the split keys (none for a single file)."""
    alignment = [f for f in fields if f.key == K.GENERAL_ALIGNMENT][:1]
    if alignment and _alignment_value(alignment[0]) == _DEFAULT_ALIGNMENT:
        alignment = []  # llama-quantize writes no key in the other shards; 32 is the default
    return [(fields if i == 0 else alignment) + _split_fields(i, n, total) for i in range(n)]


def _alignment_value(f: Field) -> int | None:
    v = f.value
    return int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else None
