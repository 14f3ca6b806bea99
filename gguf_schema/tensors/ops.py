"""The numpy building blocks every codec uses: field access, bit fields, rounding as ggml rounds.

Kernels receive the blocks of a chunk as a ``(n, type_size)`` uint8 array and read each field
by its ggml name through the block layout (:mod:`.layouts`); quantizers write structured
little-endian blocks the same way. The rounding and casting helpers reproduce ggml's C
(``roundf``, ``nearest_int``, x86's float-to-int casts) for every input.

Design of the decoders: each one first builds the integer level of every element (an
int8/uint8 array in final element order), then casts it to float32 and does ONE float32
multiply by the per-(sub-)block scale, plus one subtraction (addition) for types with a
min. The float operations are those of ggml's C code: ``(float)level * scale`` and
``scale * level - min``, so results are bit-identical.

What makes numpy fast here (measured on 256k-element chunks):

* every operation runs over long contiguous arrays: a field of the blocks is first copied
  out as one void item per block (:func:`field`), and rows are placed the same way
  (:func:`rows_into`); an operation on a (n, 16) slice of the blocks would run one short
  inner loop per block, about ten times slower;
* bit fields are cut in 64/16-bit lanes with a byte-replicated mask (x86 has no 8-bit
  vector shift or multiply, so numpy does those one byte at a time);
* look-ups fetch several levels at once (a grid row of 8 int8 as one uint64, four 4-bit
  levels per 16-bit pair of bytes);
* per-block scales are expanded with ``np.repeat`` so the multiply is contiguous too.
"""

from __future__ import annotations

import numpy as np

from ..errors import GGUFInternalError
from ..format.types import GGMLType
from .layouts import block_dtype

F32 = np.float32


ALL_BYTES = np.arange(256, dtype=np.uint8)


def pack_rows(table: np.ndarray) -> np.ndarray:
    """(256, k) int8 table -> (256,) of k-byte words, so that one np.take yields k levels."""
    return np.ascontiguousarray(table.astype(np.int8)).view(f"<u{table.shape[1]}").reshape(256)


BYTE_BITS = np.unpackbits(ALL_BYTES[:, None], axis=1, bitorder="little")  # (256, 8): bit k of byte


def grid_words(grid: np.ndarray, scale: int = 1) -> np.ndarray:
    g = (grid.astype(np.int16) * scale).astype(np.int8)
    return np.ascontiguousarray(g).view(f"<u{grid.shape[1]}").reshape(-1)


_FIELD_VIEWS: dict[tuple[GGMLType, str], np.dtype] = {}


def field(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """The bytes of field ``name`` of every block: a contiguous (n, field_bytes) uint8 copy.

    The copy goes through a one-field void dtype, so numpy moves each block's field with one
    memcpy-like step over all blocks; byte-wise operations on a (n, k) slice of the blocks
    would instead run one short inner loop per block (about ten times slower).
    """
    key = (t, name)
    vdt = _FIELD_VIEWS.get(key)
    if vdt is None:
        fields = block_dtype(t).fields
        if fields is None:
            raise GGUFInternalError("fields is not None does not hold")
        sub, off = fields[name][:2]
        vdt = np.dtype({"names": ["f"], "formats": [f"V{sub.itemsize}"], "offsets": [off], "itemsize": t.type_size})
        _FIELD_VIEWS[key] = vdt
    v = np.ascontiguousarray(q).reshape(-1).view(vdt)["f"]
    return np.ascontiguousarray(v).view(np.uint8).reshape(len(q), -1)


def rows_into(out: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """Place part j (…, k) at out[…, j, :] for out (…, len(parts), k), all uint8/int8.

    Copies whole k-byte rows as void items (one fast strided copy per part).
    """
    k = out.shape[-1]
    dst = out.reshape(-1, len(parts) * k).view(f"V{k}")
    for j, p in enumerate(parts):
        dst[:, j] = np.ascontiguousarray(p).reshape(-1, k).view(f"V{k}")[:, 0]
    return out


def half(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """A ``ggml_half`` field as float32, shape (n, 1)."""
    return field(q, t, name).view("<f2").astype(F32)


def u16(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    return field(q, t, name).view("<u2")


_LANES = ((np.uint64, 0x0101010101010101), (np.uint32, 0x01010101), (np.uint16, 0x0101))


def shr(a: np.ndarray, s: int, mask: int = 0xFF) -> np.ndarray:
    """Per byte ``(a >> s) & mask`` of a uint8 array, computed in 64/32/16-bit lanes.

    x86 has no 8-bit vector shift, so numpy shifts uint8 arrays one byte at a time; a wide
    shift followed by a mask replicated in every byte gives the same bytes many times faster.
    """
    a = np.ascontiguousarray(a)
    m = mask & (0xFF >> s)
    for dt, rep in _LANES:
        if a.ndim and a.shape[-1] % np.dtype(dt).itemsize == 0:
            w = a.view(dt)
            return ((w >> dt(s)) & dt(m * rep)).view(np.uint8).reshape(a.shape)
    return (a >> s) & m


def shl(a: np.ndarray, s: int) -> np.ndarray:
    """Per byte ``(a << s) & 0xFF`` of a uint8 array, in wide lanes (see :func:`shr`)."""
    a = np.ascontiguousarray(a)
    m = (0xFF << s) & 0xFF
    for dt, rep in _LANES:
        if a.ndim and a.shape[-1] % np.dtype(dt).itemsize == 0:
            w = a.view(dt)
            return ((w << dt(s)) & dt(m * rep)).view(np.uint8).reshape(a.shape)
    return (a << s) & m


_SPREAD_SHIFTS: dict[tuple[tuple[int, ...], int], np.ndarray] = {}


def spread(src: np.ndarray, shifts: tuple[int, ...], mask: int) -> np.ndarray:
    """Planes of bit fields: (…, k) uint8 -> (…, len(shifts), k), plane j = (src >> shifts[j]) & mask.

    Each row of k bytes is repeated once per plane (``np.repeat`` of k-byte void items), then
    shifted in place by a precomputed per-lane shift pattern and masked, all in 64-bit lanes:
    three contiguous passes, whatever the number of planes. ``mask`` must fit the shifted
    byte (``mask <= 0xFF >> max(shifts)``) so that no bit crosses from a neighbouring byte.
    """
    k = src.shape[-1]
    m = len(shifts)
    src = np.ascontiguousarray(src)
    rows = src.size // k if k else 0
    if k % 8 or rows == 0:  # narrow rows (a few scale bytes): plain byte-wise operations
        out = np.empty((*src.shape[:-1], m, k), dtype=np.uint8)
        for j, s in enumerate(shifts):
            np.bitwise_and(src >> s, mask, out=out[..., j, :])
        return out
    words = k // 8
    need = rows * m * words
    key = (shifts, words)
    pattern = _SPREAD_SHIFTS.get(key)
    if pattern is None or pattern.size < need:
        pattern = np.tile(np.repeat(np.array(shifts, dtype=np.uint64), words), max(rows, 1024))
        _SPREAD_SHIFTS[key] = pattern
    r = np.repeat(src.reshape(rows, k).view(f"V{k}")[:, 0], m).view(np.uint64)
    np.right_shift(r, pattern[:need], out=r)
    np.bitwise_and(r, np.uint64(mask * 0x0101010101010101), out=r)
    return r.view(np.uint8).reshape((*src.shape[:-1], m, k))


_LANE_SHIFTS: dict[tuple[tuple[int, ...], str, int], np.ndarray] = {}


def lane_fields(w: np.ndarray, shifts: tuple[int, ...], mask: int) -> np.ndarray:
    """Bit fields of integers: (…) -> (…, len(shifts)), field j = (w >> shifts[j]) & mask.

    Repeats each integer once per field and shifts by a precomputed pattern (contiguous
    passes instead of a broadcast whose inner loop is only len(shifts) long).
    """
    w = np.ascontiguousarray(w)
    m = len(shifts)
    need = w.size * m
    key = (shifts, w.dtype.str, 0)
    pattern = _LANE_SHIFTS.get(key)
    if pattern is None or pattern.size < need:
        pattern = np.tile(np.array(shifts, dtype=w.dtype), max(w.size, 4096))
        _LANE_SHIFTS[key] = pattern
    r = np.repeat(w.reshape(-1), m)
    np.right_shift(r, pattern[:need], out=r)
    np.bitwise_and(r, w.dtype.type(mask), out=r)
    return r.reshape((*w.shape, m))


def nibbles(qs: np.ndarray) -> np.ndarray:
    """Low nibbles of ``qs`` (…, k) in [..., 0, :], high nibbles in [..., 1, :]."""
    return spread(qs, (0, 4), 15)


def packed_nibbles(q: np.ndarray, t: GGMLType, name: str) -> np.ndarray:
    """A field of 4-bit values, two per byte, low nibble first: (n, 2 * field_bytes) in order."""
    return nibbles(field(q, t, name)).swapaxes(1, 2).reshape(len(q), -1)


def crumbs(qs: np.ndarray) -> np.ndarray:
    """2-bit field j of ``qs`` (…, k) in [..., j, :] for j = 0..3."""
    return spread(qs, (0, 2, 4, 6), 3)


def bitplanes(qh: np.ndarray) -> np.ndarray:
    """Bit j of ``qh`` (…, k) in [..., j, :] for j = 0..7."""
    return spread(qh, (0, 1, 2, 3, 4, 5, 6, 7), 1)


def scale_into(
    out: np.ndarray,
    lv: np.ndarray,
    scale: np.ndarray,
    minus: np.ndarray | None = None,
    plus: np.ndarray | None = None,
) -> None:
    """``out = float(lv) * scale [- minus] [+ plus]`` with one scale (and min) per run of elements.

    ``out`` is (n, k) float32, ``lv`` any integer array of n*k levels in element order,
    ``scale``/``minus``/``plus`` (n, s) float32 with s dividing k: entry j covers elements
    [j*k/s, (j+1)*k/s) of its row. The levels are cast in one contiguous pass and the
    scales expanded with ``np.repeat`` so that the multiply runs over contiguous memory
    (a broadcast over 16 or 32 elements costs several times more). Same float32 product
    and difference as ggml's ``d * q`` and ``d * q - m``.
    """
    np.copyto(out, lv.reshape(out.shape), casting="unsafe")
    run = out.shape[1] // scale.shape[1]
    np.multiply(out, np.repeat(scale.reshape(len(out), -1), run, axis=1), out=out)
    if minus is not None:
        np.subtract(out, np.repeat(minus.reshape(len(out), -1), run, axis=1), out=out)
    if plus is not None:
        np.add(out, np.repeat(plus.reshape(len(out), -1), run, axis=1), out=out)


_PAIR_TABLES: dict[str, np.ndarray] = {}


def pair_table(name: str, kvalues: np.ndarray) -> np.ndarray:
    """For every 16-bit pair of bytes b0, b1: the four levels kv[b0 & 15], kv[b1 & 15],
    kv[b0 >> 4], kv[b1 >> 4] packed in a little-endian uint32 (built on first use, 256 KiB)."""
    table = _PAIR_TABLES.get(name)
    if table is None:
        w = np.arange(1 << 16, dtype=np.uint32)
        kv = kvalues.astype(np.uint8).astype(np.uint32)  # int8 levels as bytes
        b0, b1 = w & 0xFF, w >> 8
        table = kv[b0 & 15] | (kv[b1 & 15] << 8) | (kv[b0 >> 4] << 16) | (kv[b1 >> 4] << 24)
        _PAIR_TABLES[name] = table
    return table


def kv_levels(qs: np.ndarray, name: str, kvalues: np.ndarray) -> np.ndarray:
    """Non-linear 4-bit levels (…, 2, k) int8: kv[low nibbles] then kv[high nibbles].

    One look-up per two bytes (four levels) in :func:`pair_table`; k must be even.
    """
    words = pair_table(name, kvalues)[np.ascontiguousarray(qs).view("<u2")]
    lo = words.astype("<u2").view(np.uint8)  # levels of the low nibbles, in byte order
    hi = (words >> np.uint32(16)).astype("<u2").view(np.uint8)
    lv = np.empty((*qs.shape[:-1], 2, qs.shape[-1]), dtype=np.uint8)
    return rows_into(lv, [lo, hi]).view(np.int8)


def c_int(v: np.ndarray) -> np.ndarray:
    """C's ``(int)`` cast of float32 as ggml's x86 builds compute it (``cvttss2si``): truncation
    toward zero, and INT_MIN for NaN, infinities and values outside int32 (a later cast to 8 bits
    makes that 0). C leaves these cases undefined and numpy's own cast differs by platform; they
    arise when ``1/d`` overflows for a block of subnormal values. Mirrors ``trunc_int`` in _kernels.c.
    """
    ok = np.abs(v) < F32(2.0**31)  # False for NaN
    return np.where(ok, np.trunc(np.where(ok, v, F32(0))), F32(-(2.0**31))).astype(np.int32)


def round_away(v: np.ndarray) -> np.ndarray:
    """C ``(int)roundf(v)``: nearest integer, halves away from zero, as int32; NaN, infinities and
    values outside int32 give INT_MIN as :func:`c_int` (mirrors ``round_int`` in _kernels.c)."""
    t = c_int(v)
    frac = v - t.astype(F32)  # exact where t is in range; garbage (ignored) elsewhere
    ok = np.abs(v) < F32(2.0**31)
    with np.errstate(invalid="ignore"):
        step = (frac >= F32(0.5)).astype(np.int32) - (frac <= F32(-0.5)).astype(np.int32)
    return np.where(ok, t + step, t)


def nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: the bits of ``v + 12582912.0f`` (round half to even for
    |v| < 2**22), computed exactly as ggml does for every input, infinities and NaN included."""
    with np.errstate(invalid="ignore", over="ignore"):
        bits = (np.asarray(v, F32) + F32(12582912.0)).view(np.int32)
    return (bits & 0x007FFFFF) - 0x00400000


def inverse(d: np.ndarray) -> np.ndarray:
    """``d ? 1.0f/d : 0.0f``."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / d, F32(0)).astype(F32)


def row_extrema(x: np.ndarray, want_min: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Maximum and minimum of each row of a float32 (n, k) array, shapes (n,).

    A reduction along short rows costs numpy one inner loop per row; instead the rows are
    transposed in 16-byte units (4 floats) and reduced along the first axis, which runs
    over long contiguous rows. Max and min are exact whatever the order; a zero extreme
    gets the sign of the row's first zero (see :func:`first_zero_sign`).
    """
    n, k = x.shape
    if k % 4 or n == 0:
        mx, mn = x.max(axis=1), (x.min(axis=1) if want_min else None)
    else:
        t = np.ascontiguousarray(np.ascontiguousarray(x).view("V16").T).view(F32).reshape(k // 4, n, 4)
        mx4 = t.max(axis=0)
        mx = np.maximum(np.maximum(mx4[:, 0], mx4[:, 1]), np.maximum(mx4[:, 2], mx4[:, 3]))
        mn = None
        if want_min:
            mn4 = t.min(axis=0)
            mn = np.minimum(np.minimum(mn4[:, 0], mn4[:, 1]), np.minimum(mn4[:, 2], mn4[:, 3]))
    for ext in (mx, mn):
        if ext is not None:
            first_zero_sign(x, ext)
    return mx, mn


def first_zero_sign(x: np.ndarray, ext: np.ndarray) -> None:
    """Where a row's extreme is zero, give it the sign of the row's first zero, as ggml's
    in-order scan keeps it (+0.0 and -0.0 compare equal, so the first one stays)."""
    rows = np.nonzero(ext == 0)[0]
    if len(rows):
        xs = x[rows]
        ext[rows] = xs[np.arange(len(rows)), (xs == 0).argmax(axis=1)]


def row_absmax(x: np.ndarray) -> np.ndarray:
    """max |x| of each row, shape (n,)."""
    return row_extrema(np.abs(x), want_min=False)[0]


def signed_max(x: np.ndarray) -> np.ndarray:
    """ggml's ``max``: the first value of largest magnitude of each row (0 if all are 0), (n,)."""
    mx, mn = row_extrema(x)
    if mn is None:
        raise GGUFInternalError("mn is not None does not hold")
    out = np.where(-mn > mx, mn, mx)
    tie = (-mn == mx) & (mx != 0)  # +a and -a both present: the first one wins
    if tie.any():
        rows = np.nonzero(tie)[0]
        xs = x[rows]
        out[rows] = xs[np.arange(len(rows)), np.abs(xs).argmax(axis=1)]
    out[(mx == 0) & (mn == 0)] = 0  # ggml starts from max = 0.0f
    return out


def per_row(s: np.ndarray, k: int) -> np.ndarray:
    """A per-row value (n,) repeated over the row's k elements: (n, k), contiguous."""
    return np.repeat(s.reshape(-1), k).reshape(-1, k)


def halves(xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and second half of each row of a (n, 2k) uint8 array, as contiguous (n, k) copies."""
    n, k2 = xi.shape
    v = np.ascontiguousarray(xi).view(f"V{k2 // 2}")
    return (
        np.ascontiguousarray(v[:, 0]).view(np.uint8).reshape(n, -1),
        np.ascontiguousarray(v[:, 1]).view(np.uint8).reshape(n, -1),
    )


def pack_halves(xi: np.ndarray) -> np.ndarray:
    """ggml's nibble packing: byte j = level j | level j + k/2 << 4, levels < 16, (n, k) -> (n, k/2)."""
    lo, hi = halves(xi)
    return lo | shl(hi, 4)


def put(b: np.ndarray, name: str, values: np.ndarray) -> None:
    """Store ``values`` (n, …) into field ``name`` of every block of the structured array ``b``,
    one void item per block (a direct field assignment runs one short loop per block)."""
    fields = b.dtype.fields
    if fields is None:
        raise GGUFInternalError("fields is not None does not hold")
    sub, off = fields[name][:2]
    vdt = np.dtype({"names": ["f"], "formats": [f"V{sub.itemsize}"], "offsets": [off], "itemsize": b.dtype.itemsize})
    src = np.ascontiguousarray(values, dtype=sub.base).reshape(len(b), -1)
    b.view(vdt)["f"] = src.view(f"V{sub.itemsize}").reshape(len(b))


def pieces(t: np.ndarray, k: int) -> list[np.ndarray]:
    """Split each row of a (n, m*k) uint8 array into m contiguous (n, k) arrays."""
    v = np.ascontiguousarray(t).view(f"V{k}")
    return [np.ascontiguousarray(v[:, j]).view(np.uint8).reshape(len(t), k) for j in range(v.shape[1])]


# ---------------------------------------------------------------------------- searches over columns
#
# The quantizers that search for scales (K-quants, the importance paths of the legacy types,
# IQ4) treat many groups of elements (sub-blocks) at once in a "position-major" array: X[i, g]
# is element i of group g, so every step of ggml's per-group loop becomes one numpy operation
# over all groups, and a sum that ggml accumulates element by element is a loop over the rows
# of X (numpy's own sum adds pairwise, which rounds differently).


def columns(x: np.ndarray, n: int) -> np.ndarray:
    """Groups of ``n`` consecutive elements of ``x`` as the columns of a contiguous (n, groups) array."""
    return np.ascontiguousarray(x.reshape(-1, n).T)


def seq_sum(t: np.ndarray, from_first: bool = False) -> np.ndarray:
    """Sum over axis 0 in order, one float32 addition at a time: C's ``s = 0; for i: s += t[i]``
    (or, with ``from_first``, ``s = t[0]; for i >= 1: s += t[i]``). Shape ``t.shape[1:]``."""
    s = t[0].copy() if from_first else t[0] + F32(0)  # 0.0f + -0.0f is +0.0f, as in C
    for r in t[1:]:
        s += r
    return s


def row_seq_sum(a: np.ndarray) -> np.ndarray:
    """Sum of each row of a (n, k) float32 array in order from 0.0f (an accumulate: never pairwise)."""
    a = np.array(a, dtype=F32)
    a[:, 0] += F32(0)
    return np.cumsum(a, axis=1, dtype=F32)[:, -1]


def col_min_max(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``min = max = x[0]; if (x[i] < min) min = x[i]; if (x[i] > max) max = x[i]`` per
    column of finite values: the exact extremes, a zero extreme with the sign of the column's
    first zero (the first of equal values stays)."""
    mn, mx = x.min(axis=0), x.max(axis=0)
    for ext in (mn, mx):
        first_zero_sign(x.T, ext)
    return mn, mx


def col_signed_max(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``amax = max = 0; if (|x[i]| > amax) { amax = |x[i]|; max = x[i]; }`` per column:
    the largest magnitude and the first value that has it (NaNs are never taken; 0, 0 for a
    column without a non-zero value)."""
    a = np.abs(x)
    a[np.isnan(a)] = 0
    amax = a.max(axis=0)
    cols = np.arange(x.shape[1])
    mx = x[(a == amax).argmax(axis=0), cols]
    mx[amax == 0] = 0
    return amax, mx


def positive_max(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """ggml's ``max = 0; if (x[i] > max) max = x[i]``: the largest positive value, else +0.0."""
    return np.where(x > 0, x, F32(0)).max(axis=axis)


def ggml_half(v: np.ndarray) -> np.ndarray:
    """float32 -> float16 as ggml's ``GGML_FP32_TO_FP16`` (round to nearest even; a NaN becomes
    0x7e00 with its sign), as a float16 array."""
    v = np.asarray(v, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = v.astype(np.float16)
    nan = np.isnan(v)
    if nan.any():
        sign = (v.view(np.uint32) >> 16).astype(np.uint16) & np.uint16(0x8000)
        h = np.where(nan, (sign | np.uint16(0x7E00)).view(np.float16), h)
    return h


def half_round(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``v`` stored as a ggml half, and read back: (float16 array, float32 array)."""
    h = ggml_half(v)
    return h, h.astype(F32)


def pack_crumbs(lv: np.ndarray) -> np.ndarray:
    """256 levels < 4 per row, (n, 256) uint8 -> (n, 64) bytes as Q2_K, Q3_K and TQ2_0 store
    them: byte 32h + m holds levels 128h + m + 32j at bits 2j (j = 0..3)."""
    p = pieces(lv, 32)
    halves = [p[4 * h] | shl(p[4 * h + 1], 2) | shl(p[4 * h + 2], 4) | shl(p[4 * h + 3], 6) for h in (0, 1)]
    return np.concatenate(halves, axis=1)


def quantizer_pair(kernel, t: GGMLType, block_doc: str, row_doc: str):
    """The two quantizers of a type whose ``kernel(x, blocks, qw)`` quantizes blocks ``x``
    (n, t.block_size) into zeroed structured blocks, weighing element i by ``qw[:, i]`` (the
    importance of its column) or, with ``qw`` None, as ggml does without an importance matrix:

    * ``q_<type>(x, blocks)``: the registry's block quantizer;
    * ``qr_<type>(rows, out, imatrix)``: the row quantizer; block j of every row takes the
      weights of its columns, ``imatrix[j * block_size:(j + 1) * block_size]``.
    """
    size = t.block_size

    def block_quantizer(x, b):
        with np.errstate(all="ignore"):
            kernel(x, b, None)

    def row_quantizer(x, out, imatrix):
        b = out.reshape(-1).view(block_dtype(t))
        qw = None if imatrix is None else np.broadcast_to(imatrix, x.shape).reshape(-1, size)
        with np.errstate(all="ignore"):
            kernel(np.ascontiguousarray(x).reshape(-1, size), b, qw)

    name = t.name.lower()
    for fn, prefix, doc in ((block_quantizer, "q", block_doc), (row_quantizer, "qr", row_doc)):
        fn.__name__ = fn.__qualname__ = f"{prefix}_{name}"
        fn.__doc__ = doc
    return block_quantizer, row_quantizer
