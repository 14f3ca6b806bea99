"""A mutation fuzzer for GGUF readers: hostile inputs, one oracle, reproducible runs.

This module owns the robustness harness. It takes seed files (real or generated), mutates them
with a seeded :class:`random.Random` and feeds each mutant to :func:`check_input`, which opens it
with both schema variants (the schema as shipped, accelerated by :mod:`gguf_schema.format.fast`, and the plain schema it accelerates, called "reference" below),
touches every field and tensor (``plain()``, ``nbytes``, ``data``, ``raw()``) and saves it again.
The oracle is narrow and strict:

* only :class:`~gguf_schema.errors.GGUFError` or success -- any other exception is a crash;
* an unedited file that opens saves back byte for byte;
* both variants agree: the same values, or both raise a ``GGUFError``;
* each input finishes within a time budget (a ``SIGALRM`` timer; a hang is a finding);
* traced peak memory stays below ``base + factor * len(input)``, so nothing is allocated in
  proportion to a *claimed* count or length.

Mutations know the file's layout (:func:`layout`): besides bit flips, byte sets, truncations,
splices and chunk duplication they patch the integers at known offsets -- counts, string and
array lengths, dimensions, value type and ggml type ids, tensor offsets -- with huge or edge values,
and they build arrays nested thousands deep.

No third-party fuzzing engine is needed (``benchmarks/fuzz.py`` can also drive this oracle with
atheris when it is installed).

>>> import io, gguf_schema
>>> from gguf_schema.testing.demo import example_metadata, example_tensors
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, example_metadata(), example_tensors())
>>> check_input(buf.getvalue()) is None   # a valid file: no finding
True
>>> check_input(b"GGUF\\x03\\x00\\x00\\x00" + b"\\xff" * 16) is None  # rejected with a GGUFError
True
>>> report = fuzz([buf.getvalue()], executions=50, seed=1)
>>> report.executions, report.crash_classes()
(50, [])
"""

from __future__ import annotations

import io
import os
import random
import re
import signal
import struct
import threading
import time
import traceback
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import GGUFError, GGUFInternalError
from ..format.limits import Limits
from ..format.schema import gguf_schema
from ..format.types import ValueType
from ..format.values import GGUFArray
from ..format.variant import Variant
from ..reader import read as gguf_open
from ..reader import read_with
from .fixtures import fixture_files

__all__ = [
    "FuzzFinding",
    "FuzzReport",
    "Mutator",
    "Slot",
    "check_input",
    "default_corpus",
    "exercise",
    "fuzz",
    "layout",
    "nested_array_file",
    "trimmed_copy",
]

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class InputTimeout(BaseException):
    """Raised inside a slow execution by the timer (a ``BaseException`` so no ``except Exception`` swallows it)."""


@dataclass
class FuzzFinding:
    """Something an input made the library do that it must not.

    Attributes:
        kind: ``"exception"`` (not a GGUFError), ``"timeout"``, ``"memory"``, ``"roundtrip"``
            (an unedited file did not save back byte for byte) or ``"differential"`` (the two
            schema variants disagree).
        signature: a short stable description used to group findings into crash classes, e.g.
            ``"exception ValueError at reader.py:data: array is too big (fast)"``.
        detail: the message, traceback or numbers behind it.
        data: the input bytes that trigger it.
    """

    kind: str
    signature: str
    detail: str
    data: bytes = b""

    def __str__(self) -> str:
        return f"{self.signature}: {self.detail.strip().splitlines()[-1] if self.detail.strip() else ''}"


def _what(exc: BaseException) -> str:
    """The exception's message with numbers blanked, first 60 characters: tells apart two bugs in one function."""
    return re.sub(r"\d+", "N", str(exc).split("\n", 1)[0])[:60]


def _where(exc: BaseException) -> str:
    """The innermost frame inside gguf_schema (else the innermost frame) as ``file:function``."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [
        f for f in frames if os.path.abspath(f.filename).startswith(_PKG_DIR + os.sep) and "testing" not in f.filename
    ]
    f = (ours or frames)[-1] if (ours or frames) else None
    if f is None:
        return "?"
    return f"{os.path.basename(f.filename)}:{f.name}"


def exercise(data: bytes, *, fast: bool = True, limits: Limits | None = None, resave: bool = True) -> tuple | None:
    """Open ``data``, touch everything a user can touch, save it again; return a summary of the values.

    Returns None when opening raises a :class:`GGUFError`; any other exception propagates. A
    ``GGUFError`` from a single tensor's ``nbytes``/``data`` (unknown type, data past the end) is
    expected and skipped. The summary (fields, tensor records, layout numbers) lets two schema
    variants be compared. Raises :class:`AssertionError` when an unedited file does not save
    back to the same bytes.

    >>> exercise(b"GGUF\\x03\\x00\\x00\\x00" + bytes(16))[:3]
    (3, 'little', 32)
    """
    try:
        f = gguf_open(data, limits=limits) if fast else read_with(gguf_schema, data, limits=limits)
    except GGUFInternalError:
        raise  # the fast layer and the declared structs disagree: a finding, never a rejected file
    except GGUFError:
        return None
    with f:
        touched: list = []  # every property is read: a crash in any of them is a finding
        for fld in f.fields.records:
            touched += [fld.plain(), repr(fld), fld.element_type]
        touched += [dict(f.metadata), repr(f)]
        tensors = []
        for t in f.tensor_list:
            touched += [repr(t), t.shape, t.n_elements]
            try:
                touched.append(t.nbytes)
                arr = t.data
                raw = t.raw()
                touched += [arr.shape, raw.nbytes]
                del arr, raw
            except GGUFError:
                pass
            tensors.append((t.name, int(t.type), t.dims, t.stored_offset, t.offset))
        del touched
        summary = (
            f.version,
            f.byte_order,
            f.alignment,
            f.data_offset,
            f.metadata_end,
            f.padding,
            f.data_section,
            f.file_size,
            f.fields.records,
            tensors,
        )
        if resave:
            out = io.BytesIO()
            try:
                f.save(out)
            except GGUFError:
                pass
            else:
                if out.getvalue() != bytes(data):
                    raise AssertionError(
                        f"unedited file saved back to different bytes ({len(out.getvalue())} vs {len(data)})"
                    )
    return summary


def _summaries_equal(a: tuple | None, b: tuple | None) -> bool:
    if a is None or b is None:
        return a is b
    return (
        a[:-2] == b[:-2]
        and a[-1] == b[-1]
        and len(a[-2]) == len(b[-2])
        and all(x == y for x, y in zip(a[-2], b[-2], strict=False))
    )


class _Timer:
    """A per-input deadline via ``SIGALRM`` (main thread on Unix only; elsewhere a no-op)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.active = (
            seconds > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        )

    def __enter__(self):
        if self.active:
            self.old = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    @staticmethod
    def _fire(signum, frame):
        raise InputTimeout()

    def __exit__(self, *exc):
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
        return False


def check_input(
    data: bytes,
    *,
    limits: Limits | None = None,
    timeout: float = 5.0,
    memory_base: int = 16 * 2**20,
    memory_factor: int = 24,
    differential: bool = True,
    resave: bool = True,
    stats: dict[str, int] | None = None,
) -> FuzzFinding | None:
    """Run the oracle on one input; return the first :class:`FuzzFinding`, or None when the library behaved.

    Memory is checked only while :mod:`tracemalloc` is tracing (start it once around many calls:
    :func:`fuzz` does); the budget is ``memory_base + memory_factor * len(data)`` bytes of traced peak.
    ``stats``, when given, counts ``accepted`` (opened) and ``rejected`` (GGUFError) inputs.
    """
    data = bytes(data)
    tracing = tracemalloc.is_tracing()
    results = []
    for fast in (True, False) if differential else (True,):
        variant = "fast" if fast else "reference"
        if tracing:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        try:
            with _Timer(timeout):
                results.append(exercise(data, fast=fast, limits=limits, resave=resave))
        except InputTimeout:
            return FuzzFinding("timeout", f"timeout ({variant})", f"input took more than {timeout} s", data)
        except AssertionError as e:
            return FuzzFinding("roundtrip", f"roundtrip ({variant})", str(e), data)
        except RecursionError as e:
            return FuzzFinding(
                "exception", f"exception RecursionError at {_where(e)} ({variant})", traceback.format_exc(), data
            )
        except Exception as e:
            return FuzzFinding(
                "exception",
                f"exception {type(e).__name__} at {_where(e)}: {_what(e)} ({variant})",
                traceback.format_exc(),
                data,
            )
        elapsed = time.perf_counter() - start
        if tracing:
            peak = tracemalloc.get_traced_memory()[1] - before
            budget = memory_base + memory_factor * len(data)
            if peak > budget:
                return FuzzFinding(
                    "memory",
                    f"memory ({variant})",
                    f"traced peak {peak:,} bytes > budget {budget:,} for a {len(data):,}-byte input ({elapsed:.2f} s)",
                    data,
                )
    if stats is not None:
        k = "accepted" if results[0] is not None else "rejected"
        stats[k] = stats.get(k, 0) + 1
    if differential and not _summaries_equal(results[0], results[1]):
        which = (
            "only fast parses"
            if results[1] is None
            else "only reference parses"
            if results[0] is None
            else "values differ"
        )
        return FuzzFinding("differential", f"differential: {which}", _diff_detail(results[0], results[1]), data)
    return None


def _diff_detail(a: tuple | None, b: tuple | None) -> str:
    if a is None or b is None:
        return f"fast={'ok' if a is not None else 'GGUFError'} reference={'ok' if b is not None else 'GGUFError'}"
    names = (
        "version",
        "byte_order",
        "alignment",
        "data_offset",
        "metadata_end",
        "padding",
        "data_section",
        "file_size",
        "fields",
        "tensors",
    )
    return "; ".join(
        f"{n}: {x!r:.120} != {y!r:.120}"
        for n, x, y in zip(names, a, b, strict=False)
        if not (x == y if n != "fields" else _summaries_equal((x, []), (y, [])))
    )


# --------------------------------------------------------------------------- layout of a file


@dataclass(frozen=True)
class Slot:
    """An integer at a known offset of a file: what a targeted mutation patches.

    ``kind`` is one of ``version``, ``count`` (tensor/kv count, array length), ``length``
    (string length), ``vtype`` (metadata value type), ``ndims``, ``dim``, ``ggml_type``,
    ``toffset`` (tensor data offset), ``bool``.
    """

    offset: int
    size: int
    kind: str


def layout(data: bytes) -> list[Slot]:
    """Every integer slot of a readable GGUF file, derived from its parsed values (empty if it does not open).

    >>> import io, gguf_schema
    >>> buf = io.BytesIO(); gguf_schema.save(buf, {"a": "hi"})
    >>> [(s.offset, s.kind) for s in layout(buf.getvalue())]
    [(4, 'version'), (8, 'count'), (16, 'count'), (24, 'length'), (33, 'vtype'), (37, 'length')]
    """
    try:
        f = gguf_open(data)
    except GGUFError:
        return []
    with f:
        ls = f.variant.size_t
        slots = [Slot(4, 4, "version"), Slot(8, ls, "count"), Slot(8 + ls, ls, "count")]
        for fld in f.fields.records:
            o = fld.offset
            if o is None:  # read from a file: every record has its offset
                raise GGUFInternalError("o is not None does not hold")
            klen = len(fld.key.encode("utf-8", "surrogateescape"))
            slots.append(Slot(o, ls, "length"))
            slots.append(Slot(o + ls + klen, 4, "vtype"))
            _walk(fld.type, fld.value, o + ls + klen + 4, ls, slots)
        for t in f.tensor_list:
            o = t.info_offset
            nlen = len(t.name.encode("utf-8", "surrogateescape"))
            slots.append(Slot(o, ls, "length"))
            p = o + ls + nlen
            slots.append(Slot(p, 4, "ndims"))
            p += 4
            for _ in t.dims:
                slots.append(Slot(p, ls, "dim"))
                p += ls
            slots.append(Slot(p, 4, "ggml_type"))
            slots.append(Slot(p + 4, 8, "toffset"))
    return slots


def _walk(vt: ValueType, value: Any, pos: int, ls: int, slots: list[Slot], budget: int = 64) -> int:
    """Append the slots of one value at ``pos``; return where it ends. Only the first ``budget`` items of an array get slots."""
    if vt == ValueType.STRING:
        slots.append(Slot(pos, ls, "length"))
        return pos + ls + len(value.encode("utf-8", "surrogateescape"))
    if vt == ValueType.BOOL:
        slots.append(Slot(pos, 1, "bool"))
        return pos + 1
    if vt != ValueType.ARRAY:
        return pos + vt.itemsize
    if not isinstance(value, GGUFArray):
        raise GGUFInternalError("isinstance(value, GGUFArray) does not hold")
    slots.append(Slot(pos, 4, "vtype"))
    slots.append(Slot(pos + 4, ls, "count"))
    pos += 4 + ls
    et = value.type
    if et.is_numeric:
        if et == ValueType.BOOL:
            slots.extend(Slot(pos + i, 1, "bool") for i in range(min(budget, len(value.items))))
        return pos + et.itemsize * len(value.items)
    for i, item in enumerate(value.items):
        if i < budget:
            pos = _walk(et, item, pos, ls, slots, budget)
        elif et == ValueType.STRING:
            pos += ls + len(item.encode("utf-8", "surrogateescape"))
        else:
            pos = _walk(et, item, pos, ls, [], budget)
    return pos


# --------------------------------------------------------------------------- mutations


def nested_array_file(depth: int, *, byte_order: str = "little", version: int = 3, inner_count: int = 1) -> bytes:
    """A file with one key ``deep`` whose value is ``depth`` arrays nested in each other (the innermost
    an empty UINT8 array; depth 1 is that array alone), as :class:`~gguf_schema.format.limits.Limits`
    counts ``max_depth``. Each level holds ``inner_count`` items by its count field (only the
    first is present when it is more than 1: the file is then truncated by design).

    Built by hand so that it can be deeper than any writer would go.

    >>> import gguf_schema
    >>> with gguf_schema.open(nested_array_file(3)) as f:
    ...     f.metadata["deep"]
    [[array([], dtype=uint8)]]
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    v = Variant.of(byte_order, version)
    e, L = v.endian, v.size_code
    key = b"deep"
    head = b"GGUF" + struct.pack(e + "I", version) + struct.pack(e + L + L, 0, 1) + struct.pack(e + L, len(key)) + key
    level = struct.pack(e + "I" + L, int(ValueType.ARRAY), inner_count)
    body = (
        struct.pack(e + "I", int(ValueType.ARRAY))
        + level * (depth - 1)
        + struct.pack(e + "I" + L, int(ValueType.UINT8), 0)
    )
    return head + body


_HUGE = (2**64 - 1, 2**63, 2**63 - 1, 2**62, 2**60, 2**40, 2**32, 2**32 - 1, 2**31, 2**30 + 1, 2**16, 65535, 4096, 0, 1)


class Mutator:
    """Seeded mutations of GGUF bytes. ``mutate(data)`` returns ``(mutant, description)``.

    >>> m = Mutator(seed=3)
    >>> mutant, what = m.mutate(b"GGUF\\x03\\x00\\x00\\x00" + bytes(16))
    >>> isinstance(mutant, bytes), isinstance(what, str)
    (True, True)
    """

    def __init__(self, seed: int = 0, corpus: Sequence[bytes] = ()):
        self.rng = random.Random(seed)
        self.corpus = list(corpus)
        self._layouts: dict[int, list[Slot]] = {}
        self._orders: dict[int, Literal["little", "big"]] = {}
        self.ops: list[tuple[Callable[[bytearray, int], str], int]] = [
            (self.bit_flips, 3),
            (self.byte_sets, 3),
            (self.truncate, 2),
            (self.inflate, 6),
            (self.swap_type, 4),
            (self.patch_slot, 3),
            (self.delete_chunk, 1),
            (self.insert_chunk, 1),
            (self.duplicate_chunk, 1),
            (self.splice, 1),
        ]
        self._weights = [w for _, w in self.ops]

    def slots(self, data: bytes, key: int) -> list[Slot]:
        if key not in self._layouts:
            self._layouts[key] = layout(data)
            self._orders[key] = "big" if data[4:6] == b"\x00\x00" and data[6:8] != b"\x00\x00" else "little"
        return self._layouts[key]

    def mutate(self, data: bytes, key: int | None = None, rounds: int | None = None) -> tuple[bytes, str]:
        """Apply 1-3 mutations (``rounds``) to ``data``. ``key`` caches the layout of a seed between calls."""
        buf = bytearray(data)
        key = key if key is not None else id(data)
        self.slots(data, key)
        done = []
        for _ in range(rounds or self.rng.choice((1, 1, 1, 2, 3))):
            op = self.rng.choices(self.ops, self._weights)[0][0]
            done.append(op(buf, key))
        return bytes(buf), "; ".join(done)

    def _pos(self, buf: bytearray) -> int:
        # bias toward the header and metadata, where the structure is
        n = len(buf)
        if n == 0:
            return 0
        return (
            min(n - 1, int(self.rng.paretovariate(1.2) * 16) - 16) if self.rng.random() < 0.5 else self.rng.randrange(n)
        )

    def bit_flips(self, buf: bytearray, key: int) -> str:
        if not buf:
            return "bit_flips(empty)"
        at = []
        for _ in range(self.rng.randint(1, 8)):
            p = self._pos(buf)
            buf[p] ^= 1 << self.rng.randrange(8)
            at.append(p)
        return f"bit_flips{at}"

    def byte_sets(self, buf: bytearray, key: int) -> str:
        if not buf:
            return "byte_sets(empty)"
        at = []
        for _ in range(self.rng.randint(1, 4)):
            p = self._pos(buf)
            buf[p] = self.rng.choice((0, 0xFF, 0x7F, 0x80, 1, 2, 9, 13, self.rng.randrange(256)))
            at.append(p)
        return f"byte_sets{at}"

    def truncate(self, buf: bytearray, key: int) -> str:
        n = self.rng.randrange(len(buf) + 1)
        del buf[n:]
        return f"truncate({n})"

    def _slot(self, key: int, kinds: tuple[str, ...], buf: bytearray) -> Slot | None:
        slots = [s for s in self._layouts.get(key, ()) if s.kind in kinds and s.offset + s.size <= len(buf)]
        return self.rng.choice(slots) if slots else None

    def _put(self, buf: bytearray, key: int, slot: Slot, value: int) -> None:
        order = self._orders.get(key, "little")
        value &= (1 << (8 * slot.size)) - 1
        buf[slot.offset : slot.offset + slot.size] = value.to_bytes(slot.size, order)

    def inflate(self, buf: bytearray, key: int) -> str:
        s = self._slot(key, ("count", "length", "dim", "ndims", "toffset"), buf)
        if s is None:
            return self.byte_sets(buf, key)
        value = self.rng.choice(_HUGE)
        if self.rng.random() < 0.3:
            old = int.from_bytes(buf[s.offset : s.offset + s.size], self._orders.get(key, "little"))
            value = old + self.rng.choice((1, -1, 2, 8, 32, 1 << 20))
        self._put(buf, key, s, value)
        return f"inflate({s.kind}@{s.offset}={value})"

    def swap_type(self, buf: bytearray, key: int) -> str:
        s = self._slot(key, ("vtype", "ggml_type"), buf)
        if s is None:
            return self.bit_flips(buf, key)
        if s.kind == "vtype":
            value = self.rng.choice([*list(range(13)), 13, 255, 2**31, 2**32 - 1])
        else:
            value = self.rng.choice([*list(range(43)), 43, 255, 2**32 - 1])
        self._put(buf, key, s, value)
        return f"swap_type({s.kind}@{s.offset}={value})"

    def patch_slot(self, buf: bytearray, key: int) -> str:
        s = self._slot(key, ("version", "bool", "ndims", "dim", "toffset", "count", "length"), buf)
        if s is None:
            return self.truncate(buf, key)
        value = self.rng.choice(
            (0, 1, 2, 3, 4, 5, 7, 31, 32, 63, 64, 65, 255, 2**31 - 1, self.rng.getrandbits(8 * s.size))
        )
        self._put(buf, key, s, value)
        return f"patch({s.kind}@{s.offset}={value})"

    def delete_chunk(self, buf: bytearray, key: int) -> str:
        if not buf:
            return "delete(empty)"
        a = self._pos(buf)
        n = self.rng.randint(1, 16)
        del buf[a : a + n]
        return f"delete({a},{n})"

    def insert_chunk(self, buf: bytearray, key: int) -> str:
        a = self._pos(buf) if buf else 0
        chunk = bytes(self.rng.choice((0, 0xFF, self.rng.randrange(256))) for _ in range(self.rng.randint(1, 16)))
        buf[a:a] = chunk
        return f"insert({a},{len(chunk)})"

    def duplicate_chunk(self, buf: bytearray, key: int) -> str:
        if len(buf) < 2:
            return "duplicate(short)"
        a = self._pos(buf)
        n = self.rng.randint(1, 64)
        buf[a:a] = buf[a : a + n]
        return f"duplicate({a},{n})"

    def splice(self, buf: bytearray, key: int) -> str:
        if not self.corpus:
            return self.truncate(buf, key)
        other = self.rng.choice(self.corpus)
        a = self._pos(buf) if buf else 0
        b = self.rng.randrange(len(other) + 1)
        buf[a:] = other[b : b + self.rng.randint(1, 256)]
        return f"splice({a},{b})"


# --------------------------------------------------------------------------- the loop


@dataclass
class FuzzReport:
    """What a :func:`fuzz` run did.

    Attributes:
        executions: inputs checked.
        seconds: wall time.
        findings: the first finding of each distinct signature (crash class).
        counts: how often each signature was hit.
        peak_memory: the highest traced peak of a single execution, bytes.
        accepted: inputs that opened; rejected: inputs refused with a GGUFError.
    """

    executions: int = 0
    seconds: float = 0.0
    findings: dict[str, FuzzFinding] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    peak_memory: int = 0
    accepted: int = 0
    rejected: int = 0
    slowest: float = 0.0

    def crash_classes(self) -> list[str]:
        """The distinct finding signatures, sorted."""
        return sorted(self.findings)


def default_corpus(include_vocab: Iterable[str] = (), trim: int | None = 64) -> list[bytes]:
    """Seed files: the demo model in every byte order and version, nested arrays, and the edge-case
    and per-type fixtures of :mod:`gguf_schema.testing.fixtures`, plus the given real files (paths),
    their arrays cut to ``trim`` items (:func:`trimmed_copy`; None keeps them whole)."""
    from ..writer import save
    from .demo import example_metadata, example_tensors

    seeds = []
    for order in ("little", "big"):
        for version in (1, 2, 3):
            buf = io.BytesIO()
            save(buf, example_metadata(), example_tensors(), byte_order=order, version=version)
            seeds.append(buf.getvalue())
        seeds.append(nested_array_file(5, byte_order=order, inner_count=2))
    for fx in fixture_files(kinds=("types", "edge"), seed=0, small=True):  # generated files are seeds too
        if len(fx.data) <= 1 << 16:
            seeds.append(fx.data)
    for p in include_vocab:
        seeds.append(trimmed_copy(p, max_items=trim) if trim else Path(p).read_bytes())
    return seeds


def trimmed_copy(path: str | os.PathLike[str], max_items: int = 64) -> bytes:
    """A real file with every metadata array cut to ``max_items`` items: its structure and
    kinds of values, small enough to mutate thousands of times a second.

    >>> import io, gguf_schema
    >>> buf = io.BytesIO(); gguf_schema.save(buf, {"tokenizer.ggml.tokens": [str(i) for i in range(1000)]})
    >>> with gguf_schema.open(trimmed_copy(io.BytesIO(buf.getvalue()), 3)) as f:
    ...     f.metadata["tokenizer.ggml.tokens"]
    ['0', '1', '2']
    """
    from ..format.values import Field
    from ..writer import save

    with gguf_open(path) as f:
        records = [
            Field(x.key, x.type, GGUFArray(x.value.type, x.value.items[:max_items])) if x.type == ValueType.ARRAY else x
            for x in f.fields.records
        ]
        out = io.BytesIO()
        save(out, records, {t.name: t for t in f.tensor_list}, version=f.version, byte_order=f.byte_order)
    return out.getvalue()


def fuzz(
    corpus: Sequence[bytes],
    *,
    executions: int = 1000,
    seed: int = 0,
    limits: Limits | None = None,
    timeout: float = 5.0,
    trace_memory: bool = True,
    differential: bool = True,
    deep_nesting: float = 0.01,
    time_limit: float | None = None,
    on_finding: Callable[[FuzzFinding], None] | None = None,
    progress: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Mutate ``corpus`` ``executions`` times with a seeded RNG and check each mutant.

    The same ``seed`` and corpus give the same inputs. ``deep_nesting`` is the share of inputs
    that are hand-built arrays nested 50..100,000 deep. ``time_limit`` (seconds) stops early.
    """
    corpus = [bytes(c) for c in corpus if c]
    mut = Mutator(seed, corpus)
    report = FuzzReport()
    started_tracing = False
    if trace_memory and not tracemalloc.is_tracing():
        tracemalloc.start()
        started_tracing = True
    t0 = time.perf_counter()
    try:
        for _i in range(executions):
            if mut.rng.random() < deep_nesting:
                depth = mut.rng.choice((63, 64, 65, 100, 999, 1000, 5000, 100_000))
                data = nested_array_file(
                    depth, byte_order=mut.rng.choice(("little", "big")), inner_count=mut.rng.choice((1, 1, 2, 2**60))
                )
            else:
                k = mut.rng.randrange(len(corpus))
                data, _ = mut.mutate(corpus[k], key=k)
            if trace_memory:
                tracemalloc.reset_peak()
            s = time.perf_counter()
            stats: dict[str, int] = {}
            finding = check_input(data, limits=limits, timeout=timeout, differential=differential, stats=stats)
            report.accepted += stats.get("accepted", 0)
            report.rejected += stats.get("rejected", 0)
            took = time.perf_counter() - s
            report.slowest = max(report.slowest, took)
            if trace_memory:
                report.peak_memory = max(report.peak_memory, tracemalloc.get_traced_memory()[1])
            report.executions += 1
            if finding is not None:
                report.counts[finding.signature] = report.counts.get(finding.signature, 0) + 1
                if finding.signature not in report.findings:
                    report.findings[finding.signature] = finding
                    if on_finding:
                        on_finding(finding)
            if progress and report.executions % 1000 == 0:
                report.seconds = time.perf_counter() - t0
                progress(report)
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                break
    finally:
        report.seconds = time.perf_counter() - t0
        if started_tracing:
            tracemalloc.stop()
    return report
