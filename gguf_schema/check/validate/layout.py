"""The data section as ggml lays it out (tensor offsets, size overflow, the data present) and the padding
after the tensor infos (the spec)."""

from __future__ import annotations

import numpy as np

from ...errors import GGUFInternalError
from ...model import Tensor
from ..ggml_view import ggml_pad
from .alignment import E027, E028
from .core import GGML, SPEC, Checker, reports, rule
from .tensors import E003, E004, E005, E030, E032, E033, E034, E035, E036

__all__ = ["ggml_layout", "padding"]

_SIZE_MAX = 2**64 - 1
#: the rules after which ggml stops before it lays out the data
_STOPPING = frozenset(r.id for r in (E027, E028, E030, E032, E033, E034, E035, E036, E003, E004, E005))


E038 = rule(
    "GGUF-E038",
    "tensor offsets are contiguous: each equals the padded sizes of the tensors before it",
    "ggml: 'tensor has offset X, expected Y' is rejected (sizes padded to the alignment ggml reads: GGUF-E027)",
    [GGML],
)
E039 = rule(
    "GGUF-E039",
    "the total padded data size fits in size_t",
    "ggml: 'size overflow, cannot accumulate size' is rejected",
    [GGML],
)
E040 = rule(
    "GGUF-E040",
    "the data section holds every tensor's padded size, padding after the last tensor included",
    "ggml: a full load reads the sum of the padded sizes from its data offset and fails when the file ends first",
    [GGML],
)
E041 = rule(
    "GGUF-E041",
    "a file with tensors reaches the start of its data section (the end of the tensor infos padded to ALIGNMENT)",
    "ggml: 'failed to seek to beginning of data section' is rejected, even when every tensor has zero bytes; "
    "without tensors the data offset is the unpadded end of the metadata",
    [GGML],
)
W003 = rule(
    "GGUF-W003",
    "the padding after the tensor infos is 0x00 bytes",
    "spec: 'Where required, the file is padded with `0x00` bytes'",
    [SPEC],
)


@reports(E038, E039, E040, E041)
def ggml_layout(c: Checker) -> None:
    """Offsets exactly as ggml computes them, the size overflow check, and the data present."""
    f = c.f
    if any(x.rule in _STOPPING for x in c.findings):
        return  # ggml stops before it lays out the data
    view = c.view
    a, data_offset = view.alignment, view.data_offset
    if a is None or data_offset is None:  # ggml has no layout without an alignment: E027/E028 said so, above
        raise GGUFInternalError("ggml's view has no alignment, yet no GGUF-E027/E028 finding")
    if not view.reaches_data:
        c.add(
            E041,
            f.metadata_end,
            None,
            data_offset,
            f"the file ends at {c.size}, before the data section starts at {data_offset} "
            f"(the end of the tensor infos, {f.metadata_end}, padded to ALIGNMENT {a})",
        )
        return
    size = ggml_offsets(c, a)
    if size is None:
        return
    if f.tensor_list and data_offset + size > c.size:
        c.add(
            E040,
            data_offset,
            None,
            size,
            f"data section needs {size} bytes from offset {data_offset}, the file has {max(0, c.size - data_offset)}",
        )


def ggml_offsets(c: Checker, a: int) -> int | None:
    """Each tensor's offset against the sum of the padded sizes before it (GGUF-E038) and that sum's overflow
    (GGUF-E039): the padded total, or None after a finding. In numpy when every tensor is sized and the
    total is far below 2**63; else tensor by tensor in size_t arithmetic."""
    cols = c.view.columns
    padded = (cols.nbytes + (a - 1)) // a * a  # below 2**62 + a for a sized tensor
    if cols.sized.all() and float(padded.sum(dtype=np.float64)) < 2.0**62:
        ends = np.cumsum(padded)
        expected = ends - padded
        wrong = np.flatnonzero(cols.stored_offset != expected.astype(np.uint64))
        if not wrong.size:
            return int(ends[-1]) if ends.size else 0
        i = int(wrong[0])
        misplaced(c, c.f.tensor_list[i], int(expected[i]))
        return None
    size = 0
    for g in c.view.tensors:
        t = g.tensor
        if t.stored_offset != size:
            misplaced(c, t, size)
            return None
        padded_size = ggml_pad(g.nbytes, a)
        if _SIZE_MAX - size < padded_size:
            c.add(
                E039,
                c.offset_offset(t),
                t.name,
                padded_size,
                f"data size {size} + {padded_size} overflows size_t",
            )
            return None
        size += padded_size
    return size


def misplaced(c: Checker, t: Tensor, expected: int) -> None:
    """GGUF-E038: tensor ``t`` is not at the offset ggml computes for it."""
    c.add(
        E038,
        c.offset_offset(t),
        t.name,
        t.stored_offset,
        f"offset {t.stored_offset}, ggml expects {expected}",
    )


@reports(W003)
def padding(c: Checker) -> None:
    """The padding after the tensor infos: 0x00 bytes (``spec``)."""
    pad = c.f.padding
    if pad.strip(b"\0"):
        i = next(i for i, b in enumerate(pad) if b)
        c.add(W003, c.f.metadata_end + i, None, pad[i], f"padding byte {i} is 0x{pad[i]:02x}")
