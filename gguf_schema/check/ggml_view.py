"""ggml's view of a parsed file: the keys, alignment, data offset and tensors that ggml and llama.cpp actually see.

A GGUF file can mean one thing to a reader that follows the spec (keys are whole strings, a
dictionary of them) and another to the C code that finally loads it. ggml's reader
(``gguf_init_from_file``) rejects duplicate keys by comparing their stored bytes, but every lookup
(``gguf_find_key``, and llama.cpp's loader on top of it) compares keys as C strings and takes the
first match: a key ``tokenizer.chat_template`` + NUL + anything answers to ``tokenizer.chat_template``
and, stored first, shadows the real one. The same holds for ``general.alignment``, which decides where
ggml looks for the tensor data.

This module owns that view, computed from an opened :class:`~gguf_schema.model.GGUFFile` and the
offsets the reader recorded (no second parser):

* :class:`GGMLView` -- keys as C strings (:meth:`GGMLView.find`, :attr:`GGMLView.shadows`),
  the alignment ggml reads and whether it accepts it, the offset where ggml's data section starts,
  and each tensor as ggml describes it (:class:`GGMLTensor`: name cut at its first NUL, the four
  int64 dimensions, the element count and byte size in ggml's own wrapping arithmetic);
* :class:`TensorColumns` -- every tensor info at once as numpy columns, with the tensors whose
  sizes are small enough for exact int64 arithmetic marked: the checks run on the columns and
  build a :class:`GGMLTensor` only for the others (a file of 100,000 tensors costs no per-tensor
  Python work beyond reading the columns).

The ``ggml`` validation profile (:mod:`.validate`) and the file audit (:mod:`.audit`) both use it.

>>> import io, gguf_schema
>>> from gguf_schema.format.types import ValueType
>>> from gguf_schema.format.values import make_field
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, [make_field("general.alignment\\0x", 64, ValueType.UINT32),
...                        make_field("general.alignment", 32, ValueType.UINT32)])
>>> with gguf_schema.open(buf.getvalue()) as f:
...     view = GGMLView(f)
...     print(f.alignment, view.alignment, repr(view.alignment_field.key), len(view.shadows))
32 64 'general.alignment\\x00x' 1
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np

from ..errors import GGUFInternalError
from ..format import keys as K
from ..format.nodes import align_offset
from ..format.types import GGML_TYPE_COUNT, GGMLType, ValueType
from ..format.values import Field
from ..model import GGUFFile, Tensor

__all__ = [
    "ALIGNMENT_KEY",
    "DEFAULT_ALIGNMENT",
    "GGML_MAX_DIMS",
    "GGML_MAX_NAME",
    "GGMLTensor",
    "GGMLView",
    "Shadow",
    "TensorColumns",
    "c_string",
    "ggml_pad",
    "wrap_int64",
]

#: the key ggml reads its alignment from, and the alignment without it
ALIGNMENT_KEY = K.GENERAL_ALIGNMENT
DEFAULT_ALIGNMENT = 32
#: ggml's bounds: a tensor name holds at most 63 bytes (and its NUL); a tensor has at most 4 dimensions
GGML_MAX_NAME = 64
GGML_MAX_DIMS = 4

INT64_MAX = 2**63 - 1
SIZE_MAX = 2**64 - 1

#: (block size, type size) of each type ggml knows, looked up once
_SIZES: dict[GGMLType, tuple[int, int]] = {t: (t.block_size, t.type_size) for t in GGMLType if not t.removed}
#: the same by type id, for the columns (0 for an id ggml does not know or has removed)
_BLOCK_SIZES = np.array([_SIZES.get(GGMLType(i), (0, 0))[0] for i in range(GGML_TYPE_COUNT)], np.int64)
_TYPE_SIZES = np.array([_SIZES.get(GGMLType(i), (0, 0))[1] for i in range(GGML_TYPE_COUNT)], np.int64)
#: a tensor is "small" when the float64 product of its dimensions is below this: the exact product is then
#: below 2**53, and every size computed from it (times a type size of a few hundred bytes) fits in int64
SMALL_ELEMENTS = float(2**52)


def c_string(text: str) -> str:
    """``text`` as C code sees it: up to its first NUL.

    >>> c_string("tokenizer.chat_template\\0evil"), c_string("plain")
    ('tokenizer.chat_template', 'plain')
    """
    i = text.find("\0")
    return text if i < 0 else text[:i]


def wrap_int64(x: int) -> int:
    """``x`` as a two's-complement int64 holds it (what a C product of int64 values gives on every ggml target).

    >>> wrap_int64(4 * 2**62), wrap_int64(2**63), wrap_int64(-1)
    (0, -9223372036854775808, -1)
    """
    x &= SIZE_MAX
    return x - 2**64 if x > INT64_MAX else x


def ggml_pad(x: int, n: int) -> int:
    """``GGML_PAD(x, n)`` in size_t arithmetic (wraps at 2**64), for a power of two ``n``.

    >>> ggml_pad(100, 32), ggml_pad(96, 32), ggml_pad(2**64 - 1, 32)
    (128, 96, 0)
    """
    return align_offset(x, n) & SIZE_MAX


@dataclass(frozen=True)
class Shadow:
    """Several stored keys that answer to one name when read as C strings: the first is the one ggml reads.

    Attributes:
        key: the name they answer to (the stored key up to its first NUL).
        read: the record a lookup returns (the first of them in file order).
        hidden: the later records, which no lookup ever returns.
    """

    key: str
    read: Field
    hidden: tuple[Field, ...]


@dataclass(frozen=True)
class GGMLTensor:
    """One tensor info as ggml's reader describes it.

    Attributes:
        tensor: the tensor as read.
        name: the name ggml gives it: the stored bytes up to the first NUL (a name of 64 stored bytes or
            more is rejected before that).
        stored_length: the stored name's length in bytes, NULs included (what ggml bounds).
        ne: the four dimensions as ggml reads them (int64; missing dimensions are 1).
        nelements: ``ggml_nelements``: the int64 product of ``ne``, wrapped as the C product wraps.
        ggml_type: the type when it is one ggml knows and has not removed, else None.
    """

    tensor: Tensor
    name: str
    stored_length: int
    ne: tuple[int, int, int, int]
    nelements: int
    ggml_type: GGMLType | None

    @property
    def true_elements(self) -> int:
        """The exact element count (no wrapping); negative when a dimension is negative as int64."""
        ne0, ne1, ne2, ne3 = self.ne
        return ne0 * ne1 * ne2 * ne3

    @property
    def count_check_fails(self) -> bool:
        """ggml's element-count check (``total number of elements ... is >= INT64_MAX``) rejects the tensor.

        ggml runs it only when ``nelements`` is positive: a count that wraps to 0 or below skips it.
        """
        ne0, ne1, ne2, ne3 = self.ne
        if self.nelements <= 0:
            return False
        if self.nelements == self.true_elements < 2**62:
            return False  # every partial product is below 2**62, so each INT64_MAX // ne[j] exceeds it
        return (
            INT64_MAX // ne1 <= ne0
            or INT64_MAX // ne2 <= wrap_int64(ne0 * ne1)
            or INT64_MAX // ne3 <= wrap_int64(ne0 * ne1 * ne2)
        )

    @property
    def count_wraps(self) -> bool:
        """The exact element count does not fit in int64 while ggml's check is skipped (it wrapped to 0 or below)."""
        return self.nelements <= 0 and self.true_elements > INT64_MAX

    @property
    def size_check_fails(self) -> bool:
        """ggml's byte-size check (``has a size in bytes > SIZE_MAX``) rejects the tensor (type known, row whole blocks)."""
        t = self.ggml_type
        if t is None:
            raise GGUFInternalError("t is not None does not hold")
        q = abs(self.nelements) // t.block_size * (1 if self.nelements >= 0 else -1)  # C division truncates
        return (q & SIZE_MAX) > SIZE_MAX // t.type_size

    @property
    def strides(self) -> tuple[int, int, int, int]:
        """``nb``: the byte strides ggml computes, in size_t arithmetic."""
        t = self.ggml_type
        if t is None:
            raise GGUFInternalError("t is not None does not hold")
        ne = [d & SIZE_MAX for d in self.ne]
        nb = [t.type_size, t.type_size * (self.ne[0] // t.block_size) & SIZE_MAX]
        nb.append(nb[1] * ne[1] & SIZE_MAX)
        nb.append(nb[2] * ne[2] & SIZE_MAX)
        return nb[0], nb[1], nb[2], nb[3]

    @property
    def nbytes(self) -> int:
        """``ggml_nbytes``: the tensor's byte size as ggml computes it in size_t (0 when a dimension is 0)."""
        t = self.ggml_type
        if t is None:
            raise GGUFInternalError("t is not None does not hold")
        ne0, ne1, ne2, ne3 = self.ne
        if ne0 <= 0 or ne1 <= 0 or ne2 <= 0 or ne3 <= 0:
            return 0
        bs, ts = _SIZES[t]
        exact = ts * (ne0 // bs) * ne1 * ne2 * ne3
        if exact <= SIZE_MAX:  # no partial sum wraps: ggml's sum of strides is this product
            return exact
        nb = self.strides
        if t.block_size == 1:
            total = t.type_size + sum((self.ne[i] - 1) * nb[i] for i in range(4))
        else:
            total = ((self.ne[0] * nb[0]) & SIZE_MAX) // t.block_size
            total += sum((self.ne[i] - 1) * nb[i] for i in range(1, 4))
        return total & SIZE_MAX


@dataclass(frozen=True)
class TensorColumns:
    """Every tensor info of a file as numpy columns (row ``i`` is tensor ``i`` of ``tensor_list``).

    Attributes:
        n_dims: the stored number of dimensions (int64).
        ne: the first four stored dimensions as unsigned 64-bit integers, 1 where a tensor has fewer.
        type_id: the stored type id (int64).
        block_size: elements per block of the type, 0 for an id ggml does not know or has removed (int64).
        type_size: bytes per block, 0 likewise (int64).
        small: at most four dimensions, each below 2**63 (not negative as int64), and their product
            below 2**52 (exact: :data:`SMALL_ELEMENTS`). For these rows ``elements`` and ``nbytes``
            are exact, and none of ggml's element-count or byte-size checks can fail.
        elements: the exact element count where ``small`` (0 elsewhere).
        nbytes: the exact byte size where ``small``, the type live and the row whole blocks: ggml's
            ``ggml_nbytes`` and the spec's size alike (0 elsewhere, and for an empty tensor).
        sized: the rows where ``nbytes`` is that size (``small``, a live type, whole blocks per row).
        stored_offset: the offset as stored, relative to the data section (uint64).

    >>> import io, gguf_schema, numpy as np
    >>> buf = io.BytesIO()
    >>> gguf_schema.save(buf, {}, {"a": np.zeros((3, 2), np.float32), "b": np.zeros(5, np.float16)})
    >>> with gguf_schema.open(buf.getvalue()) as f:
    ...     c = TensorColumns.of(f.tensor_list)
    >>> c.ne.tolist(), c.elements.tolist(), c.nbytes.tolist(), c.sized.tolist()
    ([[2, 3, 1, 1], [5, 1, 1, 1]], [6, 5], [24, 10], [True, True])
    """

    n_dims: np.ndarray
    ne: np.ndarray
    type_id: np.ndarray
    block_size: np.ndarray
    type_size: np.ndarray
    small: np.ndarray
    elements: np.ndarray
    nbytes: np.ndarray
    sized: np.ndarray
    stored_offset: np.ndarray

    @classmethod
    def of(cls, tensors: list[Tensor]) -> TensorColumns:
        """The columns of ``tensors`` (one pass over them in Python, the rest in numpy)."""
        n = len(tensors)
        dims = [t.dims for t in tensors]
        n_dims = np.fromiter(map(len, dims), np.int64, n)
        flat = np.fromiter(chain.from_iterable(dims), np.uint64, int(n_dims.sum()))  # every dim is a uint64
        ne = np.ones((n, GGML_MAX_DIMS), np.uint64)
        first = np.cumsum(n_dims) - n_dims
        for j in range(GGML_MAX_DIMS):
            has = n_dims > j
            ne[has, j] = flat[first[has] + j]
        type_id = np.fromiter((int(t.type) for t in tensors), np.int64, n)
        known = type_id < GGML_TYPE_COUNT  # ids are uint32: never negative
        index = np.where(known, type_id, 0)
        block_size = np.where(known, _BLOCK_SIZES[index], 0)
        type_size = np.where(known, _TYPE_SIZES[index], 0)
        small = (
            (n_dims <= GGML_MAX_DIMS)
            & (ne <= INT64_MAX).all(axis=1)
            & (ne.astype(np.float64).prod(axis=1) < SMALL_ELEMENTS)
        )
        signed = np.where(small[:, None], ne, np.uint64(0)).astype(np.int64)  # small rows: every dim below 2**63
        with np.errstate(over="ignore"):  # a row with a 0 dimension may wrap on the way; its product is 0 all the same
            elements = np.where(small, signed.prod(axis=1), 0)
            live = block_size > 0
            per_row = np.where(live, signed[:, 0] // np.maximum(block_size, 1), 0)
            sized = small & live & (signed[:, 0] % np.maximum(block_size, 1) == 0)
            nbytes = np.where(sized, per_row * type_size * signed[:, 1:].prod(axis=1), 0)
        stored_offset = np.fromiter((t.stored_offset for t in tensors), np.uint64, n)
        return cls(n_dims, ne, type_id, block_size, type_size, small, elements, nbytes, sized, stored_offset)


class GGMLView:
    """What ggml's reader (and llama.cpp's loader above it) sees in an opened file.

    Built from the records and offsets the reader kept; nothing is parsed again and no tensor data
    is read. Properties are computed on first use.

    Args:
        f: the opened file.
    """

    def __init__(self, f: GGUFFile):
        self.file = f
        self._fields = f.fields
        self.records: list[Field] = self._fields.records
        self._tensor_list: list[Tensor] = f.tensor_list
        #: indexes of the records whose key holds a NUL (the only ones that can shadow or be shadowed by another)
        keys = [fld.key for fld in self.records]
        self._nul: list[int] = [i for i, k in enumerate(keys) if "\0" in k] if "\0" in "".join(keys) else []
        #: the first record of each key read as a C string; without a NUL in any key that is the file's own
        #: index of keys (``Fields.position``), so no second map of every key is built
        self._first: dict[str, int] | None = None
        if self._nul:
            first = self._first = {}
            for i, fld in enumerate(self.records):
                first.setdefault(c_string(fld.key), i)

    # ---------------------------------------------------------------- keys

    def find(self, key: str) -> Field | None:
        """The record ggml's ``gguf_find_key(key)`` returns: the first whose stored key, read up to its first NUL, is ``key``."""
        if self._first is None:
            return self._fields.get(key)
        i = self._first.get(key)
        return None if i is None else self.records[i]

    def find_all(self, key: str) -> list[Field]:
        """Every record that answers to ``key`` as a C string, in file order (the first is the one read)."""
        return [fld for fld in self.records if c_string(fld.key) == key]

    @cached_property
    def shadows(self) -> list[Shadow]:
        """Names that more than one stored key answers to. ggml rejects exact duplicates; these it accepts,
        and every lookup returns the first."""
        if not self._nul:
            return []
        names = {c_string(self.records[i].key) for i in self._nul}
        groups: dict[str, list[Field]] = {}
        for fld in self.records:
            name = c_string(fld.key)
            if name in names:
                groups.setdefault(name, []).append(fld)
        out = []
        for key, fields in groups.items():
            if len(fields) > 1 and len({f.key for f in fields}) > 1:
                out.append(Shadow(key, fields[0], tuple(fields[1:])))
        return out

    # ---------------------------------------------------------------- alignment and data offset

    @cached_property
    def alignment_field(self) -> Field | None:
        """The record ggml reads its alignment from (the first answering to ``general.alignment``)."""
        return self.find(ALIGNMENT_KEY)

    @cached_property
    def alignment_problem(self) -> str | None:
        """Why ggml refuses the alignment (``"type"``: not UINT32; ``"value"``: not a power of two), or None."""
        fld = self.alignment_field
        if fld is None:
            return None
        if fld.type != ValueType.UINT32:
            return "type"
        v = int(fld.value)
        return "value" if v == 0 or v & (v - 1) else None

    @cached_property
    def alignment(self) -> int | None:
        """ALIGNMENT as ggml reads it (32 without the key); None when ggml refuses the key."""
        if self.alignment_problem is not None:
            return None
        fld = self.alignment_field
        return DEFAULT_ALIGNMENT if fld is None else int(fld.value)

    @cached_property
    def data_offset(self) -> int | None:
        """Where ggml's data section starts: the end of the tensor infos padded to its alignment, or that end
        unpadded in a file without tensors. None when ggml refuses the alignment."""
        a = self.alignment
        if a is None:
            return None
        end = self.file.metadata_end
        return ggml_pad(end, a) if self.file.tensor_list else end

    @property
    def reaches_data(self) -> bool:
        """The file reaches ggml's data offset (ggml fails 'to seek to beginning of data section' otherwise)."""
        return self.data_offset is not None and self.data_offset <= self.file.file_size

    # ---------------------------------------------------------------- tensors

    @cached_property
    def tensors(self) -> list[GGMLTensor]:
        """Every tensor info, in file order, as ggml describes it."""
        return [self.tensor(i) for i in range(len(self._tensor_list))]

    def tensor(self, i: int) -> GGMLTensor:
        """Tensor info ``i`` as ggml describes it (built on demand: the checks ask only for the unusual ones)."""
        t = self._tensor_list[i]
        raw = t.name.encode("utf-8", "surrogateescape")
        dims = t.dims
        pad = (1, 1, 1, 1)
        if len(dims) <= GGML_MAX_DIMS and all(0 <= d <= INT64_MAX for d in dims):
            ne = (*dims, *pad[len(dims) :])
        else:
            ne = (*(wrap_int64(d) for d in dims[:GGML_MAX_DIMS]), *pad[min(len(dims), GGML_MAX_DIMS) :])
        n = ne[0] * ne[1] * ne[2] * ne[3]
        if not 0 <= n <= INT64_MAX:
            n = wrap_int64(wrap_int64(wrap_int64(ne[0] * ne[1]) * ne[2]) * ne[3])
        known = GGMLType(t.type) if t.type in _SIZES else None
        name = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape") if b"\0" in raw else t.name
        return GGMLTensor(t, name, len(raw), (ne[0], ne[1], ne[2], ne[3]), n, known)

    @cached_property
    def columns(self) -> TensorColumns:
        """Every tensor info as numpy columns (:class:`TensorColumns`)."""
        return TensorColumns.of(self._tensor_list)

    def layout(self) -> tuple[list[int], int]:
        """The offset ggml requires of each tensor (each the sum of the padded sizes before it) and the padded total.

        Needs an accepted alignment and known types. The sizes add up in size_t and wrap like ggml's
        (ggml stops at an overflow: see the ``ggml`` profile's GGUF-E039).
        """
        a = self.alignment
        if a is None:
            raise GGUFInternalError("a is not None does not hold")
        offsets, size = [], 0
        for g in self.tensors:
            offsets.append(size)
            size = (size + ggml_pad(g.nbytes, a)) & SIZE_MAX
        return offsets, size
