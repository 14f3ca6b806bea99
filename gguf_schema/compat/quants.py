"""gguf-py's ``gguf.quants`` functions on our kernels: ``quantize``, ``dequantize`` and the shape rules.

gguf-py's conventions are kept: data moves as arrays whose last axis is bytes (quantized types,
and BF16) or elements (F32, F16), leading axes untouched.

* :func:`dequantize` takes an array of bytes of shape ``(..., bytes per row)`` and gives float32
  of shape ``(..., elements per row)``; F32 is a view, F16 a conversion, as in gguf-py.
* :func:`quantize` takes floats of shape ``(..., elements per row)`` and gives ``uint8`` of
  shape ``(..., bytes per row)``; F32 and F16 give float arrays (``astype``), as in gguf-py.
* A row that is not whole blocks is a :class:`QuantError`, as in gguf-py.

The bytes and floats are ggml's (the kernels of :mod:`gguf_schema.tensors`), for every type our
engine knows, a superset of gguf-py's (gguf-py quantizes neither K-quants nor IQ types, and
dequantizes neither Q8_1, Q8_K nor the integer types); where gguf-py implements a type, both
agree bit for bit (the tests check it). Lazy tensors of gguf-py's converters (anything with
gguf-py's ``LazyBase`` interface) are wrapped the way gguf-py wraps them: the work is done when
the tensor is evaluated.

>>> import numpy as np
>>> x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
>>> q = quantize(x, GGMLQuantizationType.Q8_0)
>>> q.dtype, q.shape, dequantize(q, GGMLQuantizationType.Q8_0).shape
(dtype('uint8'), (2, 34), (2, 32))
>>> quantize(np.ones((3, 33), np.float32), GGMLQuantizationType.Q4_0)
Traceback (most recent call last):
...
gguf_schema.compat.quants.QuantError: Can't quantize tensor with shape (3, 33) to Q4_0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..format.types import GGMLType
from .constants import GGML_QUANT_SIZES, QK_K, GGMLQuantizationType, GGUFValueType, LlamaFileType

__all__ = [
    "GGML_QUANT_SIZES",
    "QK_K",
    "GGMLQuantizationType",
    "GGUFValueType",
    "LlamaFileType",
    "QuantError",
    "dequantize",
    "quant_shape_from_byte_shape",
    "quant_shape_to_byte_shape",
    "quantize",
]


class QuantError(Exception):
    """A tensor cannot be quantized to a type (its rows are not whole blocks), as gguf-py's ``QuantError``."""


def quant_shape_to_byte_shape(shape: Sequence[int], quant_type: Any) -> tuple[int, ...]:
    """The byte shape of a tensor of ``shape`` (elements, last axis the row) in ``quant_type``.

    >>> quant_shape_to_byte_shape((4, 256), GGMLQuantizationType.Q4_K)
    (4, 144)
    """
    block_size, type_size = GGML_QUANT_SIZES[quant_type]
    if shape[-1] % block_size != 0:
        raise ValueError(
            f"Quantized tensor row size ({shape[-1]}) is not a multiple of {_name(quant_type)} block size ({block_size})"
        )
    return (*shape[:-1], shape[-1] // block_size * type_size)


def quant_shape_from_byte_shape(shape: Sequence[int], quant_type: Any) -> tuple[int, ...]:
    """The element shape of a tensor of byte shape ``shape`` in ``quant_type``.

    >>> quant_shape_from_byte_shape((4, 144), GGMLQuantizationType.Q4_K)
    (4, 256)
    """
    block_size, type_size = GGML_QUANT_SIZES[quant_type]
    if shape[-1] % type_size != 0:
        raise ValueError(
            f"Quantized tensor bytes per row ({shape[-1]}) is not a multiple of {_name(quant_type)} type size ({type_size})"
        )
    return (*shape[:-1], shape[-1] // type_size * block_size)


def _name(quant_type: Any) -> str:
    return GGMLType(int(quant_type)).name


def _lazy(data: Any) -> Any:
    """gguf-py's lazy tensor class if ``data`` is one of its lazy tensors (duck-typed: gguf-py is not imported)."""
    cls = type(data)
    if isinstance(data, np.ndarray) or not (hasattr(cls, "_wrap_fn") and hasattr(cls, "to_eager")):
        return None
    return cls


def quantize(data: np.ndarray, qtype: Any) -> np.ndarray:
    """Quantize ``data`` (last axis the row) to ``qtype``: ``uint8`` of shape ``(..., bytes per row)``;
    F32 and F16 give float arrays (``data.astype``, no copy when already so)."""
    t = GGMLType(int(qtype))
    if t == GGMLType.F32:
        return data.astype(np.float32, copy=False)
    if t == GGMLType.F16:
        return data.astype(np.float16, copy=False)
    if data.shape[-1] % t.block_size != 0:
        raise QuantError(f"Can't quantize tensor with shape {data.shape} to {t.name}")
    lazy = _lazy(data)
    if lazy is not None:
        return lazy._wrap_fn(_quantize_array(t), meta_noop=(np.uint8, _shapes(t, True)))(data)
    return _quantize_array(t)(data)


def dequantize(data: np.ndarray, qtype: Any) -> np.ndarray:
    """Dequantize ``data`` (last axis the bytes of a row; F32 and F16 as themselves or as bytes) to float32
    of shape ``(..., elements per row)``. F32 is a view of ``data``, as in gguf-py."""
    t = GGMLType(int(qtype))
    if t == GGMLType.F32:
        return data.view(np.float32)
    if t == GGMLType.F16:
        return data.view(np.float16).astype(np.float32)
    lazy = _lazy(data)
    if lazy is not None:
        return lazy._wrap_fn(_dequantize_array(t), meta_noop=(np.float32, _shapes(t, False)))(data)
    return _dequantize_array(t)(data)


def _shapes(t: GGMLType, to_bytes: bool) -> Callable[[Sequence[int]], tuple[int, ...]]:
    qt = GGMLQuantizationType(int(t))
    return (lambda s: quant_shape_to_byte_shape(s, qt)) if to_bytes else (lambda s: quant_shape_from_byte_shape(s, qt))


def _quantize_array(t: GGMLType) -> Callable[[np.ndarray], np.ndarray]:
    def run(data: np.ndarray) -> np.ndarray:
        out_shape = quant_shape_to_byte_shape(data.shape, GGMLQuantizationType(int(t)))
        from ..tensors import quantize  # (the kernels are imported when first used: patch() stays cheap)

        return quantize(np.asarray(data, dtype=np.float32), t).reshape(out_shape)

    return run


def _dequantize_array(t: GGMLType) -> Callable[[np.ndarray], np.ndarray]:
    def run(data: np.ndarray) -> np.ndarray:
        raw = np.ascontiguousarray(data).view(np.uint8)
        shape = quant_shape_from_byte_shape(raw.shape, GGMLQuantizationType(int(t)))
        from ..tensors import dequantize

        return dequantize(raw, t, shape)

    return run
