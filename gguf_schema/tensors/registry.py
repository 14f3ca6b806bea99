"""The one registry of tensor types: for every ggml type, the numpy kernels that decode and encode it.

Each live :class:`~gguf_schema.format.types.GGMLType` has exactly one :class:`Codec` entry in
:data:`CODECS`. The entry names the family module that holds its kernels; block geometry
(block size, bytes per block) comes from :mod:`gguf_schema.format.types` and the block's
fields from :mod:`.layouts`, so an entry is all a new type needs here (see the package
docstring for the whole checklist). The compiled engine has its own table (``csrc``); the
engine uses a compiled kernel only where its geometry agrees with this registry.

>>> CODECS[GGMLType.Q4_K].family, CODECS[GGMLType.Q4_K].quantize_rows.__name__
('kquants', 'qr_q4_k')
>>> GGMLType.Q4_K in QUANTIZE_TYPES, GGMLType.Q8_K in QUANTIZE_TYPES
(True, True)
>>> CODECS[GGMLType.IQ2_XS].quantize_rows.__name__, CODECS[GGMLType.IQ2_XS].needs_imatrix
('q_iq2_xs', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..format.types import GGMLType
from . import iquants, kquants, lattice, legacy, lowbit, plain

__all__ = ["CODECS", "DEQUANTIZE_TYPES", "QUANTIZE_TYPES", "Codec"]

DecodeKernel = Callable[[np.ndarray, np.ndarray], None]
"""``decode(blocks, out)``: little-endian blocks ``(n, type_size)`` uint8 -> ``out`` ``(n, block_size)`` float32."""
QuantizeKernel = Callable[[np.ndarray, np.ndarray], None]
"""``quantize(x, blocks)``: float32 ``(n, block_size)`` -> structured little-endian blocks ``(n,)`` (zeroed)."""
RowQuantizeKernel = Callable[[np.ndarray, np.ndarray, "np.ndarray | None"], None]
"""``quantize_rows(x, out, imatrix)``: float32 rows ``(n, n_per_row)`` -> ``out`` ``(n, row_bytes)`` uint8
(zeroed), with importance weights ``imatrix`` ``(n_per_row,)`` float32 or None: ggml's ``quantize_<type>``
as ``ggml_quantize_chunk`` calls it."""


@dataclass(frozen=True)
class Codec:
    """The numpy kernels of one ggml type.

    Attributes:
        type: the ggml type.
        family: the module of :mod:`gguf_schema.tensors` that holds the kernels.
        decode: the decoder (every live type has one).
        quantize: the block quantizer: what ``ggml_quantize_chunk`` writes without an
            importance matrix, block by block (ggml's ``quantize_row_*_ref`` for every type
            but IQ4_NL, whose chunk quantizer searches further), or None where this library
            does not encode the type block by block (plain types are encoded element-wise by
            :mod:`.plain`, not through this slot).
        quantize_rows: the row quantizer with optional importance weights (ggml's
            ``quantize_<type>``), for types whose ggml quantizer weighs elements by an
            importance matrix or searches per row; None where ggml ignores the imatrix.
            Given None for the weights it writes what ``quantize`` writes.
        needs_imatrix: ggml refuses to quantize the type without an importance matrix.
    """

    type: GGMLType
    family: str
    decode: DecodeKernel
    quantize: QuantizeKernel | None = None
    quantize_rows: RowQuantizeKernel | None = None
    needs_imatrix: bool = False


def _codec(
    t: GGMLType,
    decode: DecodeKernel,
    quantize: QuantizeKernel | None = None,
    quantize_rows: RowQuantizeKernel | None = None,
    needs_imatrix: bool = False,
) -> Codec:
    return Codec(t, decode.__module__.rsplit(".", 1)[-1], decode, quantize, quantize_rows, needs_imatrix)


T = GGMLType
CODECS: dict[GGMLType, Codec] = {
    c.type: c
    for c in (
        # plain element types
        _codec(T.F32, plain.dq_f32),
        _codec(T.F16, plain.dq_f16),
        _codec(T.BF16, plain.dq_bf16),
        _codec(T.F64, plain.dq_f64),
        _codec(T.I8, plain.dq_i8),
        _codec(T.I16, plain.dq_i16),
        _codec(T.I32, plain.dq_i32),
        _codec(T.I64, plain.dq_i64),
        # legacy quants
        _codec(T.Q4_0, legacy.dq_q4_0, legacy.q_q4_0, legacy.qr_q4_0),
        _codec(T.Q4_1, legacy.dq_q4_1, legacy.q_q4_1, legacy.qr_q4_1),
        _codec(T.Q5_0, legacy.dq_q5_0, legacy.q_q5_0, legacy.qr_q5_0),
        _codec(T.Q5_1, legacy.dq_q5_1, legacy.q_q5_1, legacy.qr_q5_1),
        _codec(T.Q8_0, legacy.dq_q8_0, legacy.q_q8_0),
        _codec(T.Q8_1, legacy.dq_q8_1, legacy.q_q8_1),
        # K-quants
        _codec(T.Q2_K, kquants.dq_q2_k, kquants.q_q2_k, kquants.qr_q2_k),
        _codec(T.Q3_K, kquants.dq_q3_k, kquants.q_q3_k, kquants.qr_q3_k),
        _codec(T.Q4_K, kquants.dq_q4_k, kquants.q_q4_k, kquants.qr_q4_k),
        _codec(T.Q5_K, kquants.dq_q5_k, kquants.q_q5_k, kquants.qr_q5_k),
        _codec(T.Q6_K, kquants.dq_q6_k, kquants.q_q6_k, kquants.qr_q6_k),
        _codec(T.Q8_K, kquants.dq_q8_k, kquants.q_q8_k),
        # IQ
        _codec(T.IQ2_XXS, iquants.dq_iq2_xxs, quantize_rows=lattice.q_iq2_xxs, needs_imatrix=True),
        _codec(T.IQ2_XS, iquants.dq_iq2_xs, quantize_rows=lattice.q_iq2_xs, needs_imatrix=True),
        _codec(T.IQ2_S, iquants.dq_iq2_s, quantize_rows=lattice.q_iq2_s),
        _codec(T.IQ3_XXS, iquants.dq_iq3_xxs, quantize_rows=lattice.q_iq3_xxs),
        _codec(T.IQ3_S, iquants.dq_iq3_s, quantize_rows=lattice.q_iq3_s),
        _codec(T.IQ1_S, iquants.dq_iq1_s, quantize_rows=lattice.q_iq1_s, needs_imatrix=True),
        _codec(T.IQ1_M, iquants.dq_iq1_m, quantize_rows=lattice.q_iq1_m),
        _codec(T.IQ4_NL, iquants.dq_iq4_nl, iquants.q_iq4_nl, iquants.qr_iq4_nl),
        _codec(T.IQ4_XS, iquants.dq_iq4_xs, iquants.q_iq4_xs, iquants.qr_iq4_xs),
        # FP4, ternary and 1-2 bit
        _codec(T.TQ1_0, lowbit.dq_tq1_0, lowbit.q_tq1_0),
        _codec(T.TQ2_0, lowbit.dq_tq2_0, lowbit.q_tq2_0),
        _codec(T.MXFP4, lowbit.dq_mxfp4, lowbit.q_mxfp4),
        _codec(T.NVFP4, lowbit.dq_nvfp4, lowbit.q_nvfp4),
        _codec(T.Q1_0, lowbit.dq_q1_0, lowbit.q_q1_0),
        _codec(T.Q2_0, lowbit.dq_q2_0, lowbit.q_q2_0),
    )
}
del T

DEQUANTIZE_TYPES: frozenset[GGMLType] = frozenset(CODECS)
"""Every type :func:`~gguf_schema.tensors.dequantize` reads: all the live ggml types."""
QUANTIZE_TYPES: frozenset[GGMLType] = frozenset(
    t for t, c in CODECS.items() if c.quantize is not None or c.quantize_rows is not None or not t.quantized
)
"""Every type :func:`~gguf_schema.tensors.quantize` writes."""
