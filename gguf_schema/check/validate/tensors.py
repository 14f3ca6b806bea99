"""Tensor infos: names, dimensions, types, offsets, and each tensor's data inside the file."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import shorten
from ...format.types import GGML_TYPE_COUNT, GGMLType, tensor_nbytes
from ...model import Tensor
from ..ggml_view import GGML_MAX_NAME
from .core import ALL, GGML, SPEC, SURROGATES, Checker, reports, rule
from .values import E026

__all__ = ["offsets_aligned", "tensor_bounds", "tensor_infos", "tensor_types"]


E002 = rule(
    "GGUF-E002",
    "each tensor's data lies inside the file",
    "spec: 'Each tensor's data must be stored within this array'; ggml/llama.cpp mmap loader: offset + nbytes <= file size",
    ALL,
)
E003 = rule(
    "GGUF-E003",
    "each tensor type is a ggml_type id (0 <= type < 43)",
    "spec: 'ggml_type type'; ggml: type must be in [0, GGML_TYPE_COUNT)",
    ALL,
)
E004 = rule(
    "GGUF-E004",
    "no tensor uses a removed ggml type",
    "spec: '// GGML_TYPE_Q4_2 = 4, support has been removed'; ggml: block size 0 is rejected",
    ALL,
)
E005 = rule(
    "GGUF-E005",
    "each tensor's rows are whole blocks: its first dimension (1 for n_dims 0) is a multiple of its type's block size",
    "ggml: 'ne[0] % block_size != 0' is rejected, and n_dims 0 reads as ne = [1, 1, 1, 1]; the bytes of a partial block cannot be located",
    ALL,
)
E030 = rule(
    "GGUF-E030",
    "each tensor name is stored in fewer than 64 bytes (NULs included)",
    "ggml: a stored name of GGML_MAX_NAME (64) bytes or more is rejected ('tensor name ... is too long'), "
    "before the name is cut at its first NUL",
    [GGML],
)
E031 = rule(
    "GGUF-E031", "each tensor name is at most 64 bytes long", "spec: 'it must be at most 64 bytes long'", [SPEC]
)
E032 = rule(
    "GGUF-E032",
    "no two tensor names are equal (up to their first NUL)",
    "ggml: names are cut at the first NUL, then duplicates are rejected",
    [GGML],
)
E033 = rule(
    "GGUF-E033",
    "each tensor has at most 4 dimensions",
    "spec: 'Currently at most 4'; ggml: n_dims > GGML_MAX_DIMS is rejected",
    [SPEC, GGML],
)
E034 = rule(
    "GGUF-E034",
    "no dimension is negative when read as int64",
    "ggml: dimensions are read as int64_t and negative ones are rejected",
    [GGML],
)
E035 = rule(
    "GGUF-E035",
    "each tensor's element count is below INT64_MAX",
    "ggml: 'total number of elements ... is >= INT64_MAX' is rejected; a zero-element tensor is exempt "
    "(whatever its other dimensions). ggml also skips the check when the int64 product of the dimensions "
    "wraps to 0 or below: this profile rejects those (docs/ggml-profile.md)",
    [GGML],
)
E036 = rule(
    "GGUF-E036",
    "each tensor's byte size fits in size_t",
    "ggml: '... has a size in bytes > SIZE_MAX' is rejected (elements / block size > SIZE_MAX / type size)",
    [GGML],
)
E037 = rule(
    "GGUF-E037",
    "each tensor offset is a multiple of ALIGNMENT",
    "spec: 'Must be a multiple of `ALIGNMENT`. That is, `align_offset(offset) == offset`'",
    [SPEC],
)
W005 = rule(
    "GGUF-W005",
    "no two tensors have the same name",
    "spec: tensors are 'located through its tensor_infos entry'; a repeated name is ambiguous (the spec does not forbid it)",
    [SPEC],
)


@reports(E026, E030, E031, E032, E033, E034, E035, E036, W005)
def tensor_infos(c: Checker) -> None:
    """Each tensor info's name and dimensions, as the profile reads them."""
    seen: dict[bytes, str] = {}
    # ggml's count and size checks cannot fail for a small tensor (TensorColumns.small): only the others are asked
    small = c.view.columns.small.tolist() if c.profile == GGML else []
    for i, t in enumerate(c.f.tensor_list):
        raw = c.name_bytes(t)
        cut = raw.split(b"\0", 1)[0]
        if c.profile == GGML:
            if len(raw) >= GGML_MAX_NAME:
                c.add(
                    E030,
                    t.info_offset,
                    t.name,
                    len(raw),
                    f"tensor name stored in {len(raw)} bytes: ggml allows at most {GGML_MAX_NAME - 1}"
                    + (f" (NULs included; its text is {len(cut)} bytes)" if len(cut) < len(raw) else ""),
                )
                continue  # ggml stops at a name too long
            if cut in seen:
                c.add(
                    E032,
                    t.info_offset,
                    t.name,
                    cut.decode("utf-8", "surrogateescape"),
                    f"tensor name {shorten(cut)} repeats tensor {shorten(seen[cut])}"
                    if seen[cut] != t.name
                    else f"tensor name {shorten(t.name)} appears twice",
                )
            else:
                seen[cut] = t.name
        else:
            if len(raw) > 64:
                c.add(
                    E031,
                    t.info_offset,
                    t.name,
                    len(raw),
                    f"tensor name of {len(raw)} bytes is longer than 64",
                )
            if SURROGATES.search(t.name):
                c.add(E026, t.info_offset, t.name, raw, "tensor name is not valid UTF-8")
            if raw in seen:
                c.add(W005, t.info_offset, t.name, t.name, f"tensor name {shorten(t.name)} appears twice")
            else:
                seen[raw] = t.name
        if len(t.dims) > 4:
            c.add(
                E033,
                c.ndims_offset(t),
                t.name,
                len(t.dims),
                f"{len(t.dims)} dimensions, at most 4 allowed",
            )
        elif c.profile == GGML and not small[i]:
            ggml_shape(c, i)


def ggml_shape(c: Checker, i: int) -> None:
    g = c.view.tensor(i)
    t = g.tensor
    n, gt = g.nelements, g.ggml_type
    if 0 < n < 2**62 and n == g.true_elements and min(g.ne) > 0 and gt is not None and n * gt.type_size < 2**64:
        return  # the common case: no check of ggml's can fail (row blocks are E005's)
    for j, d in enumerate(g.ne[: len(t.dims)]):
        if d < 0:
            c.add(E034, c.dim_offset(t, j), t.name, d, f"dimension {j} is {d} when read as int64")
            return
    if g.count_check_fails:
        c.add(
            E035,
            c.dim_offset(t, 0),
            t.name,
            tuple(t.dims),
            f"element count of dims {tuple(t.dims)} reaches INT64_MAX",
        )
        return
    if g.count_wraps:  # ggml skips its check here: a ggml bug this profile does not follow (docs/ggml-profile.md)
        c.add(
            E035,
            c.dim_offset(t, 0),
            t.name,
            tuple(t.dims),
            f"element count of dims {tuple(t.dims)} does not fit in int64 (ggml's product wraps to {g.nelements} "
            "and skips its check; this profile rejects it)",
        )
        return
    gt = g.ggml_type
    if gt is None or g.ne[0] % gt.block_size:
        return  # E003/E004/E005 say why
    if g.size_check_fails:
        c.add(
            E036,
            c.dim_offset(t, 0),
            t.name,
            tuple(t.dims),
            f"byte size of dims {tuple(t.dims)} ({gt.name}) does not fit in size_t",
        )


@reports(E003, E004, E005)
def tensor_types(c: Checker) -> None:
    """Each tensor's type: a ggml type, not removed, its rows whole blocks (every profile)."""
    cols = c.view.columns
    whole = cols.ne[:, 0] % np.maximum(cols.block_size, 1).astype(np.uint64) == 0  # dims[0], or 1 without dims
    for t in c.suspects((cols.block_size > 0) & whole):
        if not isinstance(t.type, GGMLType):
            c.add(
                E003,
                c.type_offset(t),
                t.name,
                int(t.type),
                f"type {int(t.type)} is not a ggml type (0..{GGML_TYPE_COUNT - 1})",
            )
        elif t.type.removed:
            c.add(
                E004,
                c.type_offset(t),
                t.name,
                int(t.type),
                f"type {t.type.name} ({int(t.type)}) has been removed from ggml",
            )
        elif (t.dims[0] if t.dims else 1) % t.type.block_size:
            row = t.dims[0] if t.dims else 1
            c.add(
                E005,
                c.dim_offset(t, 0) if t.dims else c.ndims_offset(t),
                t.name,
                row,
                f"{row} elements per row{' (n_dims 0: one element)' if not t.dims else ''} is not a multiple "
                f"of the {t.type.name} block size {t.type.block_size}",
            )


@reports(E002)
def tensor_bounds(c: Checker) -> None:
    """Each tensor's data inside the file (every profile; from ggml's own data offset under ``ggml``)."""
    # ggml's own data offset in the ggml profile (it may read general.alignment from another key)
    base = c.view.data_offset if c.profile == GGML else None
    cols, tensors = c.view.columns, c.f.tensor_list
    # where each tensor's data starts, cleared only below 2**63 (no sum below wraps in uint64)
    if base is None:
        try:
            starts = np.fromiter((t.offset for t in tensors), np.uint64, len(tensors))
        except OverflowError:  # an offset past 2**64: every tensor is visited
            starts = np.full(len(tensors), 2**64 - 1, np.uint64)
    else:
        low = (cols.stored_offset < np.uint64(2**62)) & (base < 2**62)
        starts = np.where(low, cols.stored_offset + np.uint64(base % 2**62), np.uint64(2**63))
    fine = cols.sized & (starts < np.uint64(2**63)) & (starts + cols.nbytes.astype(np.uint64) <= np.uint64(c.size))
    for t in c.suspects(fine):
        nbytes = _nbytes(t)
        if nbytes is None:
            continue
        start = t.offset if base is None else base + t.stored_offset
        if start + nbytes > c.size:
            c.add(
                E002,
                start,
                t.name,
                nbytes,
                f"data [{start}, {start + nbytes}) runs past the end of the file ({c.size} bytes)",
            )


@reports(E037)
def offsets_aligned(c: Checker) -> None:
    """Each tensor offset a multiple of ALIGNMENT (``spec``)."""
    a = c.f.alignment
    cols = c.view.columns
    fine = cols.stored_offset % np.uint64(a) == 0 if 0 < a < 2**64 else np.zeros(len(cols.stored_offset), bool)
    for t in c.suspects(fine):
        if t.stored_offset % a:
            c.add(
                E037,
                c.offset_offset(t),
                t.name,
                t.stored_offset,
                f"offset {t.stored_offset} is not a multiple of ALIGNMENT {a}",
            )


def _known(t: Any) -> GGMLType | None:
    return t if isinstance(t, GGMLType) and not t.removed else None


def _nbytes(t: Tensor) -> int | None:
    """Bytes of a tensor's data (exact integer), None when the type does not say."""
    gt = _known(t.type)
    if gt is None:
        return None
    try:
        return tensor_nbytes(gt, t.dims)
    except ValueError:
        return None
