"""Tensor data: ggml's block layouts, and conversions between raw tensor bytes and float32.

This package owns the arithmetic of ggml's (de)quantizers and nothing else: it never reads
file structure (the reader hands it a tensor's bytes, type and shape).

* :func:`dequantize` -- raw bytes of a tensor (any live ggml type, either byte order) to a
  float32 array, optionally for a range of rows only, in bounded working memory.
* :func:`quantize` -- a float array to the raw bytes of a tensor, bit-exact with ggml, for
  the types in :data:`QUANTIZE_TYPES`.
* :func:`block_dtype`, :func:`block_struct`, :func:`byteswap` -- block layouts and byte order.

Every computation is the same float32 operation, in the same order, as ggml's C code
(``ggml-quants.c``), so results are identical to ggml's, bit for bit; the test-suite checks
them against ggml's own outputs (``tests/data/golden``, with their sources).

Modules, from the bottom up: :mod:`.layouts` (one table of block fields, as
``ggml-common.h`` names them), :mod:`.grids` (the IQ lattices and value tables), :mod:`.ops`
(the numpy building blocks), one module of kernels per family (:mod:`.plain`,
:mod:`.legacy`, :mod:`.kquants`, :mod:`.iquants`, :mod:`.lowbit`; the IQ lattice searches in
:mod:`.lattice`), :mod:`.registry` (one entry per type), :mod:`.engine` (chunks, threads, the
compiled kernels in ``csrc/``).

Adding a ggml type:

1. its id, block size and bytes per block in :class:`~gguf_schema.format.types.GGMLType`;
2. its block fields in ``layouts.LAYOUTS`` (names and order of ``ggml-common.h``);
3. its numpy decoder (and quantizer) in the family module, following ggml's C line by line;
4. one :class:`~.registry.Codec` entry in ``registry.CODECS``;
5. optionally, a compiled kernel in ``csrc/`` and one row in its ``KERNELS`` table
   (the engine uses it only where its block geometry agrees with ``GGMLType``);
6. golden vectors from ggml (made by ggml's own program, packed into ``tests/data/golden`` by
   ``benchmarks/pack_golden.py``) and the tests pick it up.

>>> import numpy as np
>>> raw = quantize(np.linspace(-1, 1, 32, dtype=np.float32), "Q8_0")
>>> raw.shape, round(float(dequantize(raw, "Q8_0", (32,))[-1]), 3)
((1, 34), 1.0)
"""

from .engine import (
    COMPILED_DEQUANTIZE,
    COMPILED_QUANTIZE,
    ENGINES,
    dequantize,
    quantize,
)
from .layouts import LAYOUTS, block_dtype, block_struct, byteswap
from .registry import CODECS, DEQUANTIZE_TYPES, QUANTIZE_TYPES, Codec

__all__ = [
    "CODECS",
    "COMPILED_DEQUANTIZE",
    "COMPILED_QUANTIZE",
    "DEQUANTIZE_TYPES",
    "ENGINES",
    "LAYOUTS",
    "QUANTIZE_TYPES",
    "Codec",
    "block_dtype",
    "block_struct",
    "byteswap",
    "dequantize",
    "quantize",
]
