"""The engine: runs the codecs of :mod:`.registry` over whole tensors, in chunks, on threads.

This module owns the public conversions :func:`dequantize` and :func:`quantize`: argument
checks, byte order (big-endian blocks are swapped to little-endian before a kernel sees them),
working in chunks of bounded size, threads, and the choice between the two engines:

* the numpy kernels of :mod:`.registry` (every type, the reference);
* the optional compiled module ``gguf_schema.tensors._kernels`` (built from ``csrc/`` when a
  C compiler works): the same float32 operations in compiled loops that release the GIL, for
  the types in :data:`COMPILED_DEQUANTIZE` and :data:`COMPILED_QUANTIZE`.

Both give the same bits; ``engine="auto"`` (the default) takes the compiled kernel where
there is one. Argument mistakes raise ``ValueError`` or ``TypeError``: nothing here reads a
file, so nothing here is a "bad file" error.

>>> import numpy as np
>>> x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
>>> raw = quantize(x, "Q8_0")
>>> raw.shape
(2, 34)
>>> y = dequantize(raw, GGMLType.Q8_0, (2, 32))
>>> float(abs(y - x).max()) < 0.005
True
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import GGUFInternalError
from ..format.types import GGMLType
from . import plain
from .layouts import as_uint8, block_dtype, byteswap, checked_type
from .registry import CODECS, QUANTIZE_TYPES

try:
    from . import _kernels as compiled_kernels
except ImportError:  # built without a C compiler (or GGUF_SCHEMA_NO_KERNELS=1): numpy does all the work
    compiled_kernels = None  # type: ignore[assignment]
#: the one switch for every compiled module: set at install it skips building them, at run time it
#: turns off those that were built (this one and the string walk, gguf_schema.format._scan)
KERNELS_OFF = os.environ.get("GGUF_SCHEMA_NO_KERNELS") == "1"
if KERNELS_OFF:
    compiled_kernels = None  # type: ignore[assignment]

__all__ = [
    "COMPILED_DEQUANTIZE",
    "COMPILED_QUANTIZE",
    "ENGINES",
    "compiled_elsewhere",
    "compiled_modules",
    "dequantize",
    "error_sums",
    "quantize",
]

F32 = np.float32
_CHUNK_ELEMENTS = 1 << 18
"""Elements dequantized per step: the working set stays in the CPU's L2 cache."""
_QUANTIZE_CHUNK_ELEMENTS = 1 << 16
"""Elements quantized per step by the numpy kernels (their temporaries stay in cache)."""
_COMPILED_QUANTIZE_CHUNK_ELEMENTS = 1 << 18
"""Elements quantized per step by the compiled kernels (fewer steps: less Python per element)."""


def _compiled_types(direction: int) -> frozenset[GGMLType]:
    """Types the compiled module handles in one direction (2: decode, 3: encode blocks, 4: encode
    rows), keeping only those whose block geometry agrees with :mod:`gguf_schema.format.types`."""
    if compiled_kernels is None:
        return frozenset()
    found = []
    for tid, entry in compiled_kernels.layouts().items():
        t = GGMLType(tid)
        if entry[direction] and (entry[0], entry[1]) == (t.block_size, t.type_size):
            found.append(t)
    return frozenset(found)


COMPILED_DEQUANTIZE: frozenset[GGMLType] = _compiled_types(2)
"""Types whose decoder is compiled in this installation (empty if ``_kernels`` was not built)."""
_COMPILED_BLOCKS: frozenset[GGMLType] = _compiled_types(3)
_COMPILED_ROWS: frozenset[GGMLType] = _compiled_types(4)
COMPILED_QUANTIZE: frozenset[GGMLType] = _COMPILED_BLOCKS | _COMPILED_ROWS
"""Types whose quantizer is compiled in this installation (empty if ``_kernels`` was not built)."""


def compiled_modules() -> dict[str, str]:
    """Each optional compiled module of the package and its state here: ``"active"``, ``"off"``
    (built, but ``GGUF_SCHEMA_NO_KERNELS=1`` turned it off for this process) or ``"not built"``
    (no C compiler at install, or the install was told to skip it). ``gguf-schema --version``
    prints them.

    >>> sorted(compiled_modules())
    ['gguf_schema.format._scan', 'gguf_schema.tensors._kernels']
    """
    import importlib.util

    from ..format.values import compiled_scan

    states = {}
    for name, loaded in (
        ("gguf_schema.tensors._kernels", compiled_kernels),
        ("gguf_schema.format._scan", compiled_scan),
    ):
        if loaded is not None:
            states[name] = "active"
        else:
            try:
                built = importlib.util.find_spec(name) is not None
            except ImportError:
                built = False
            states[name] = "off" if built and KERNELS_OFF else "not built"
    return states


def compiled_elsewhere() -> str | None:
    """Where another copy of ``gguf_schema`` with the compiled kernels is, when this copy has none
    because it was imported from a source tree: Python started in a clone's root after
    ``pip install .`` imports the clone's folder (first on the import path), not the installed copy.
    None in every other case (kernels present, not a source tree, ``GGUF_SCHEMA_NO_KERNELS=1``,
    no other copy). :mod:`gguf_schema` warns with :class:`~gguf_schema.errors.GGUFInstallWarning`
    when this is not None; the numpy kernels give the same results, more slowly."""
    import importlib.machinery
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../gguf_schema
    source_tree = os.path.isfile(os.path.join(os.path.dirname(here), "setup.py"))
    if compiled_kernels is not None or not source_tree or os.environ.get("GGUF_SCHEMA_NO_KERNELS") == "1":
        return None
    root = os.path.dirname(here)
    for finder in sys.meta_path:
        try:
            if finder is importlib.machinery.PathFinder:
                others = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
                spec = importlib.machinery.PathFinder.find_spec("gguf_schema", others)
            else:
                spec = finder.find_spec("gguf_schema", None)
        except Exception:  # an odd finder must not stop the import of this package
            continue
        folders = [] if spec is None else list(spec.submodule_search_locations or [])
        for folder in folders:
            if os.path.abspath(folder) == here:
                continue
            kernels = os.path.join(folder, "tensors")
            if any(
                os.path.isfile(os.path.join(kernels, "_kernels" + suffix))
                for suffix in importlib.machinery.EXTENSION_SUFFIXES
            ):
                return os.path.abspath(folder)
    return None


ENGINES = ("auto", "numpy", "compiled")
"""Values of the ``engine`` argument: compiled kernels where built, numpy only, compiled only."""


def _use_compiled(t: GGMLType, engine: str, available: frozenset[GGMLType]) -> bool:
    if engine == "auto":
        return t in available
    if engine == "numpy":
        return False
    if engine == "compiled":
        if t not in available:
            built = (
                "not built in this installation"
                if compiled_kernels is None
                else f"built for {', '.join(sorted(x.name for x in available))}"
            )
            raise ValueError(f"no compiled kernel for {t.name} (the compiled kernels are {built})")
        return True
    raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")


# ---------------------------------------------------------------------------- threads

_PARALLEL_MIN_ELEMENTS = 1 << 22
"""With ``threads=None``, tensors smaller than this (16 MiB of float32) run on the calling thread:
below it, handing work to threads cost more than it gained (benchmarks/bench_threads.py)."""
_MAX_AUTO_THREADS = 8
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_PAGE = 4096
_TASK_CHUNKS = 4
"""Chunks per pool task when the calling thread faults the result in ahead of the workers."""


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _thread_count(threads: int | None, elements: int = 0, compiled: bool = False) -> int:
    """The number of worker threads: ``threads`` itself, or for ``None`` the CPU count when
    the compiled kernels run a large tensor (numpy holds the GIL too often to gain), else 1."""
    if threads is None:
        if not compiled or elements < _PARALLEL_MIN_ELEMENTS:
            return 1
        return max(1, min(_cpu_count(), _MAX_AUTO_THREADS))
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be a positive int or None, got {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    return threads


def _run_chunks(
    starts: range, fn: Callable[[int], None], threads: int, fresh: np.ndarray | None = None, per_chunk: int = 0
) -> None:
    """Call ``fn(start)`` for every chunk start; with threads > 1 the chunks go to a shared
    pool (each chunk writes its own slice of the output: same result).

    ``fresh``: the result array when it is newly allocated, ``per_chunk`` its elements per
    chunk (chunk k writes elements from k * per_chunk on). Then this thread touches each page
    of the result just before the chunks that write it are handed out, so that only one thread
    ever takes page faults: two threads each faulting their own half of a new array stalled for
    long stretches on the development VM (benchmarks/bench_threads.py, results/threads.md).
    """
    global _POOL
    threads = min(threads, len(starts))
    if threads <= 1:
        for i in starts:
            fn(i)
        return
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < threads:
            _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gguf_schema.tensors")
        pool = _POOL
    # contiguous runs of chunks per task: one run per thread, or short runs faulted in ahead
    per = _TASK_CHUNKS if fresh is not None else -(-len(starts) // threads)
    nbytes = per_chunk * fresh.itemsize if fresh is not None else 0  # bytes of result per chunk
    flat = fresh.reshape(-1).view(np.uint8) if fresh is not None else None

    def run_group(group: range) -> None:
        for i in group:
            fn(i)

    futures = []
    for k in range(0, len(starts), per):
        if flat is not None:
            flat[k * nbytes : (k + per) * nbytes : _PAGE] = 0
        futures.append(pool.submit(run_group, starts[k : k + per]))
    for f in futures:
        f.result()


# ---------------------------------------------------------------------------- arguments


def _check_shape(shape: Any, t: GGMLType) -> tuple[int, int]:
    """(rows, columns) of a tensor shape (numpy order: the last axis is the row)."""
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"shape must be a tuple of ints, got {shape!r}") from None
    if not shape or any(s < 0 for s in shape):
        raise ValueError(f"invalid {t.name} tensor shape {shape}: need one or more non-negative dims")
    cols = shape[-1]
    if cols % t.block_size:
        raise ValueError(
            f"{t.name} tensor shape {shape}: the last dimension {cols} is not a multiple of "
            f"the {t.name} block size {t.block_size}"
        )
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return rows, cols


def _result_buffer(out: np.ndarray | None, n: int) -> np.ndarray:
    """A flat float32 array of n elements: new, or a view of the caller's ``out`` once checked."""
    if out is None:
        return np.empty(n, dtype=F32)
    ok = (
        isinstance(out, np.ndarray)
        and out.dtype == F32
        and out.dtype.isnative
        and out.flags.c_contiguous
        and out.flags.writeable
        and out.size == n
    )
    if not ok:
        got = f"{out.dtype} array of shape {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise ValueError(f"out must be a writable C-contiguous float32 array of {n} elements, got {got}")
    return out.reshape(-1)


def _row_range(rows: slice | None, n_rows: int) -> tuple[int, int]:
    if rows is None:
        return 0, n_rows
    if not isinstance(rows, slice):
        raise TypeError(f"rows must be a slice, got {rows!r}")
    start, stop, step = rows.indices(n_rows)
    if step != 1:
        raise ValueError(f"rows must be a contiguous slice (step 1), got step {step}")
    return start, max(start, stop)


# ---------------------------------------------------------------------------- conversions


def dequantize(
    raw: np.ndarray | bytes | bytearray | memoryview,
    t: GGMLType | int | str,
    shape: tuple[int, ...],
    byte_order: str = "little",
    rows: slice | None = None,
    threads: int | None = None,
    engine: str = "auto",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Decode the raw bytes of a tensor of ggml type ``t`` into float32.

    Args:
        raw: the tensor's bytes (``bytes``, ``memoryview``, ``mmap`` slice or any numpy
            array, viewed as bytes), exactly ``rows * t.row_nbytes(shape[-1])`` long.
        t: the ggml type: a :class:`GGMLType`, its id or its name (``"Q4_K"``).
        shape: the numpy shape, outermost first (GGUF stores dims innermost first: reverse them).
        byte_order: ``"little"`` (almost every file) or ``"big"``.
        rows: a contiguous ``slice`` of the rows (the tensor seen as ``(-1, shape[-1])``) to
            decode; then only those rows are read and the result is ``(len, shape[-1])``.
        threads: worker threads, each decoding its own run of chunks (the result does not
            depend on it). ``None`` (the default): one per CPU (at most 8) when a compiled
            kernel decodes a tensor of 4 M elements or more, else one.
        engine: ``"auto"`` (compiled kernel if this installation has one for ``t``, see
            :data:`COMPILED_DEQUANTIZE`), ``"numpy"``, or ``"compiled"`` (an error if there
            is none). Both engines give the same bits.
        out: a writable C-contiguous float32 array with exactly as many elements as the
            result, to decode into instead of allocating (for example one buffer reused
            across tensors); the result is then a view of it.

    Returns:
        A new C-contiguous float32 array (a view of ``out`` if given). Work proceeds in
        chunks of about 256k elements, so memory beyond the result stays bounded (a few MiB).

    Raises:
        ValueError: unknown or removed type, a last dimension that is not a whole number of
            blocks, a byte length that does not match the shape, or a bad ``byte_order``,
            ``rows``, ``threads``, ``engine`` or ``out``.
        TypeError: an argument of the wrong kind.

    >>> raw = bytes.fromhex("0040") + bytes([0x98] * 16)   # Q4_0: d = 2.0, nibbles 8 and 9
    >>> dequantize(raw, GGMLType.Q4_0, (32,))[[0, 16]].tolist()
    [0.0, 2.0]
    >>> dequantize(np.arange(6, dtype="<f2").view(np.uint8), "F16", (2, 3), rows=slice(1, 2))
    array([[3., 4., 5.]], dtype=float32)
    """
    t = checked_type(t)
    if tuple(shape) == () and rows is None:  # an n_dims 0 tensor: one element
        return dequantize(raw, t, (1,), byte_order, None, threads, engine, out).reshape(())
    n_rows, cols = _check_shape(shape, t)
    data = as_uint8(raw)
    row_bytes = cols // t.block_size * t.type_size
    if data.size != n_rows * row_bytes:
        raise ValueError(
            f"{t.name} tensor of shape {tuple(shape)} needs {n_rows * row_bytes} bytes "
            f"({n_rows} rows of {row_bytes}), got {data.size}"
        )
    if byte_order not in ("little", "big"):
        raise ValueError(f"byte order must be 'little' or 'big', got {byte_order!r}")
    start, stop = _row_range(rows, n_rows)
    data = data[start * row_bytes : stop * row_bytes]
    given = out
    result = _result_buffer(out, (stop - start) * cols)
    compiled = _use_compiled(t, engine, COMPILED_DEQUANTIZE)
    workers = _thread_count(threads, result.size, compiled)
    fresh = result if given is None else None  # memory no one has written yet
    kernel = CODECS[t].decode
    blocks = data.reshape(-1, t.type_size)
    out_blocks = result.reshape(-1, t.block_size)
    step = max(1, _CHUNK_ELEMENTS // t.block_size)

    def run(i: int) -> None:
        q = blocks[i : i + step]
        if byte_order == "big" and t.type_size > 1:
            q = byteswap(q, t, "big", "little").reshape(-1, t.type_size)
        if compiled:
            compiled_kernels.decode(t, q, out_blocks[i : i + step])
            return
        with np.errstate(all="ignore"):  # inf/nan scales decode to inf/nan, as in ggml
            kernel(q, out_blocks[i : i + step])

    _run_chunks(range(0, len(blocks), step), run, workers, fresh, step * t.block_size)
    if rows is None:
        return result.reshape(tuple(int(s) for s in shape))
    return result.reshape(stop - start, cols)


def quantize(
    array: np.ndarray,
    t: GGMLType | int | str,
    *,
    imatrix: np.ndarray | None = None,
    threads: int | None = None,
    engine: str = "auto",
) -> np.ndarray:
    """Encode a numeric array as the raw bytes of a tensor of ggml type ``t``.

    The bytes are those ggml's ``ggml_quantize_chunk`` writes for the same rows, which is
    what ``llama-quantize`` writes: without an importance matrix ggml's reference quantizer
    ``quantize_row_*_ref`` for most types (IQ4_NL: ggml's ``quantize_iq4_nl``, which searches
    further than its reference), with one the importance-weighted searches (the K-quants,
    Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS; other types ignore it, as ggml does). The IQ
    lattice types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) have only ggml's
    searching quantizer; IQ1_S, IQ2_XXS and IQ2_XS need an importance matrix, as in ggml.
    Integer types need integer values in range. The array's last axis is the row.

    Args:
        array: any numeric array (its last dimension a multiple of ``t.block_size``).
        t: one of :data:`~gguf_schema.tensors.QUANTIZE_TYPES` (a :class:`GGMLType`, id or name).
        imatrix: importance weights, one finite float per column (as llama-quantize derives
            them from an imatrix file: see :func:`gguf_schema.tools.imatrix.load_imatrix`),
            for the types whose ggml quantizer uses them; other types ignore it, as ggml does.
        threads: worker threads, as in :func:`dequantize` (the bytes do not depend on it).
        engine: as in :func:`dequantize`, with :data:`COMPILED_QUANTIZE` (F16 from float32
            input only: numpy converts other float widths in one rounding step).

    Returns:
        uint8 array of shape ``(rows, bytes_per_row)`` (rows = product of the leading dims,
        1 for a 1-D array).

    Raises:
        ValueError: type not quantizable here, row length not a whole number of blocks,
            integer values out of range, NaN or infinity in the input of a block-quantized type
            (the message names the first such row and column; F32, F16 and BF16 store them),
            an importance matrix of the wrong length, not finite, or missing for a type that
            needs one, a super-block ggml aborts on (the IQ lattice searches overflow float32
            for values or weights near 1e30: ggml writes nothing then), or a bad ``threads``
            or ``engine``.
        TypeError: an argument of the wrong kind.

    >>> quantize(np.array([1.0, -2.0], dtype=np.float32), GGMLType.F16).tobytes().hex()
    '003c00c0'
    >>> raw = quantize(np.full(32, 0.5, dtype=np.float32), "Q4_0")
    >>> raw.shape, dequantize(raw, GGMLType.Q4_0, (32,))[:2].tolist()
    ((1, 18), [0.5, 0.5])
    >>> x = np.linspace(-1, 1, 512, dtype=np.float32).reshape(2, 256)
    >>> quantize(x, "Q4_K", imatrix=np.ones(256, np.float32)).shape
    (2, 144)
    >>> quantize(np.array([[0.0] * 31 + [np.nan]], np.float32), "Q8_0")
    Traceback (most recent call last):
    ValueError: cannot quantize non-finite values to Q8_0: row 0, column 31 is nan (block-quantized types need finite input)
    """
    t = checked_type(t)
    a = np.asarray(array)
    if a.ndim == 0 or a.dtype.kind not in "fiub":
        raise ValueError(f"cannot quantize a {a.dtype} array of shape {a.shape} to {t.name}")
    n_rows, cols = _check_shape(a.shape, t)
    if t not in QUANTIZE_TYPES:
        raise ValueError(
            f"quantizing to {t.name} is not supported (supported: {', '.join(sorted(x.name for x in QUANTIZE_TYPES))})"
        )
    codec = CODECS[t]
    weights = _importance(imatrix, cols, t)
    rows2d = a.reshape(n_rows, cols)
    if not t.quantized:
        return _quantize_plain(rows2d, t, threads, _use_compiled(t, engine, COMPILED_QUANTIZE))
    by_rows = codec.quantize_rows is not None and (weights is not None or codec.quantize is None)
    if by_rows and codec.needs_imatrix and weights is None:
        raise ValueError(f"ggml quantizes {t.name} only with an importance matrix: pass imatrix=")
    compiled = _use_compiled(t, engine, _COMPILED_ROWS if by_rows else _COMPILED_BLOCKS)
    with np.errstate(over="ignore"):  # float64 beyond float32's range: inf, refused below
        x = np.ascontiguousarray(rows2d, dtype=F32)
    try:
        if by_rows:
            return _quantize_rows(x, t, weights, threads, compiled)
        return _quantize_blocks(x, t, threads, compiled)
    except _NotFinite:
        raise _not_finite_error(x, rows2d, t, a.shape) from None


class _NotFinite(Exception):
    """A chunk of quantizer input holds NaN or an infinity (turned into a ValueError by quantize)."""


def error_sums(q: np.ndarray, t: GGMLType | int | str, x: np.ndarray) -> tuple[float, float]:
    """``(sum((decoded q - x)**2), sum(x**2))`` in float64, for ``q`` the bytes of ``x`` (float32,
    whole blocks) quantized to ``t``: what a quantization's RMS error is measured from. One pass,
    decoding in small runs, in the compiled module where it has ``t``'s decoder (no BLAS, so no
    threads of its own); else decoded whole and summed with numpy.

    >>> x = np.array([[1.0] * 30 + [0.5, 4.0]], np.float32)
    >>> error_sums(quantize(x, "Q8_0"), "Q8_0", x)
    (0.0018463730812072754, 46.25)
    """
    gt = GGMLType.of(t)
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    raw = np.ascontiguousarray(q).reshape(-1).view(np.uint8)
    if compiled_kernels is not None and (gt == GGMLType.F32 or gt in COMPILED_DEQUANTIZE):
        return compiled_kernels.error_sums(int(gt), raw, x)
    y = dequantize(raw, gt, (x.size,)).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        d = y - x
        return float(np.einsum("i,i->", d, d)), float(np.einsum("i,i->", x, x, dtype=np.float64))


def _check_finite(x: np.ndarray) -> None:
    """Raise _NotFinite if the float32 chunk ``x`` holds a NaN or an infinity.

    ggml's quantizers have no defined result for such input (what they write depends on the
    order of their comparisons), so every block-quantized type refuses it, with either engine.
    The compiled kernels check each run of their input just before quantizing it; for the
    numpy kernels this is one more pass over the chunk (in C where the module is built).
    """
    if compiled_kernels is not None:
        if compiled_kernels.first_nonfinite(x) >= 0:
            raise _NotFinite
    elif not np.isfinite(x).all():
        raise _NotFinite


def _not_finite_error(
    x: np.ndarray, original: np.ndarray, t: GGMLType, shape: tuple[int, ...] | None = None
) -> ValueError:
    """The ValueError for non-finite input, naming its first bad element."""
    flat = int(np.flatnonzero(~np.isfinite(x.reshape(-1)))[0])
    row, col = divmod(flat, x.shape[1])
    value, source = float(x.reshape(-1)[flat]), float(original.reshape(-1)[flat])
    what = f"{value}" if not np.isfinite(source) else f"{source!r}, {value} as float32"
    where = f"row {row}, column {col}"
    if shape is not None and len(shape) > 2:
        where = f"element {tuple(int(i) for i in np.unravel_index(flat, shape))} ({where} of the rows)"
    return ValueError(
        f"cannot quantize non-finite values to {t.name}: {where} is {what} (block-quantized types need finite input)"
    )


def _chunk_elements(compiled: bool) -> int:
    return _COMPILED_QUANTIZE_CHUNK_ELEMENTS if compiled else _QUANTIZE_CHUNK_ELEMENTS


def _quantize_blocks(x: np.ndarray, t: GGMLType, threads: int | None, compiled: bool) -> np.ndarray:
    """Float32 rows through the codec's block quantizer, in chunks of blocks."""
    n_rows = len(x)
    blocks = np.zeros(x.size // t.block_size, dtype=block_dtype(t))
    xb = x.reshape(-1, t.block_size)
    step = max(1, _chunk_elements(compiled) // t.block_size)
    quantizer = CODECS[t].quantize
    if quantizer is None:
        raise GGUFInternalError("quantizer is not None does not hold")
    raw = blocks.view(np.uint8).reshape(len(blocks), -1)

    def run(i: int) -> None:
        if compiled:  # the compiled check runs just ahead of the quantizer, in cache
            if compiled_kernels.encode(t, xb[i : i + step], raw[i : i + step], True) >= 0:
                raise _NotFinite
            return
        _check_finite(xb[i : i + step])
        with np.errstate(all="ignore"):
            quantizer(xb[i : i + step], blocks[i : i + step])

    _run_chunks(range(0, len(xb), step), run, _thread_count(threads, xb.size, compiled))
    return raw.reshape(n_rows, -1)


def _importance(imatrix: Any, cols: int, t: GGMLType) -> np.ndarray | None:
    """The importance weights as a contiguous float32 array of one weight per column."""
    if imatrix is None:
        return None
    if not isinstance(imatrix, np.ndarray) or imatrix.dtype.kind not in "fiu":
        got = f"a {imatrix.dtype} array" if isinstance(imatrix, np.ndarray) else type(imatrix).__name__
        raise TypeError(f"imatrix must be a numpy array of {cols} float32 weights, got {got}")
    if imatrix.shape != (cols,):
        raise ValueError(
            f"imatrix must hold one weight per column: {cols} for these {t.name} rows, got shape {imatrix.shape}"
        )
    w = np.ascontiguousarray(imatrix, dtype=F32)
    if not np.isfinite(w).all():
        bad = int(np.flatnonzero(~np.isfinite(w))[0])
        raise ValueError(f"imatrix must be finite: weight {bad} is {w[bad]}")
    return w


def _quantize_rows(
    x: np.ndarray, t: GGMLType, weights: np.ndarray | None, threads: int | None, compiled: bool
) -> np.ndarray:
    """Whole float32 rows through the codec's row quantizer (ggml's ``quantize_<type>``), in chunks of rows."""
    n_rows, cols = x.shape
    out = np.zeros((n_rows, t.row_nbytes(cols)), dtype=np.uint8)
    step = max(1, _chunk_elements(compiled) // max(cols, 1))
    kernel = CODECS[t].quantize_rows
    if kernel is None:
        raise GGUFInternalError("kernel is not None does not hold")

    def run(i: int) -> None:
        if compiled:
            if compiled_kernels.quantize_rows(t, x[i : i + step], out[i : i + step], cols, weights, True) >= 0:
                raise _NotFinite
            return
        _check_finite(x[i : i + step])
        with np.errstate(all="ignore"):
            kernel(x[i : i + step], out[i : i + step], weights)

    _run_chunks(range(0, n_rows, step), run, _thread_count(threads, x.size, compiled))
    return out


def _quantize_plain(rows2d: np.ndarray, t: GGMLType, threads: int | None, compiled: bool) -> np.ndarray:
    """F32, F16, BF16, F64 (float conversion, chunked) and the integer types (checked)."""
    n_rows = len(rows2d)
    if t not in (GGMLType.BF16, GGMLType.F32, GGMLType.F16, GGMLType.F64):
        _thread_count(threads)  # checked, though integer types need no workers
        return np.ascontiguousarray(plain.to_int(rows2d, t)).view(np.uint8).reshape(n_rows, -1)
    flat = np.ascontiguousarray(rows2d, dtype=F32 if t == GGMLType.BF16 else None).reshape(-1)
    compiled = compiled and flat.dtype == F32
    res = np.empty(flat.size, dtype=np.uint16 if t == GGMLType.BF16 else t.numpy_dtype)
    c = _CHUNK_ELEMENTS

    def convert(i: int) -> None:
        if compiled:
            compiled_kernels.encode(t, flat[i : i + c], res[i : i + c].view(np.uint8))
        elif t == GGMLType.BF16:
            plain.to_bf16(flat[i : i + c], res[i : i + c])
        else:
            with np.errstate(over="ignore"):  # beyond the F16 range: inf, as in ggml
                np.copyto(res[i : i + c], flat[i : i + c], casting="unsafe")

    _run_chunks(range(0, flat.size, c), convert, _thread_count(threads, flat.size, compiled))
    return res.astype(res.dtype.newbyteorder("<"), copy=False).view(np.uint8).reshape(n_rows, -1)
