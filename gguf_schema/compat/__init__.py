"""The ``gguf`` package's API (gguf-py's) with gguf-py's semantics, on our reader, writer and kernels.

Every large Python consumer of GGUF (transformers, diffusers, vLLM, ComfyUI-GGUF, llama.cpp's
converters and gguf-py's own scripts) reads and writes through gguf-py's API. This package speaks
that API:

* :class:`GGUFReader` (:mod:`.reader`): ``fields``, ``parts``, ``tensors`` as gguf-py lays them
  out, at the cost of our open (gemma-3-270m: milliseconds instead of seconds);
* :class:`GGUFWriter` (:mod:`.writer`): gguf-py's calls, gguf-py's bytes, written atomically and
  one tensor at a time;
* :mod:`.quants`: ``quantize`` / ``dequantize`` with gguf-py's shapes on ggml-exact kernels;
* :mod:`.constants`: the code tables clients import, with gguf-py's names and values;
* :func:`patch` / :func:`unpatch` (:mod:`.patching`): swap all of that into the installed
  ``gguf`` package, so that code written for gguf-py runs on us unchanged. The one line, after
  its import::

      import gguf_schema.compat

      gguf_schema.compat.patch()

>>> import gguf, gguf_schema.compat as compat
>>> with compat.patch():
...     print(gguf.GGUFReader.__module__)
gguf_schema.compat.reader

What differs from gguf-py on purpose is listed in ``docs/compat.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import quants
    from .constants import (
        GGML_QUANT_SIZES,
        GGUF_DEFAULT_ALIGNMENT,
        GGUF_MAGIC,
        GGUF_VERSION,
        GGMLQuantizationType,
        GGUFEndian,
        GGUFValueType,
        LlamaFileType,
    )
    from .patching import is_patched, patch, unpatch
    from .quants import QuantError, dequantize, quant_shape_from_byte_shape, quant_shape_to_byte_shape, quantize
    from .reader import GGUFReader, ReaderField, ReaderTensor
    from .writer import GGUFValue, GGUFWriter, TensorInfo, WriterState

#: the public names, each imported from its module on first use (PEP 562), as the package's own are:
#: ``python -m gguf_schema.compat`` sets what it sets before numpy is imported, and code that uses one
#: name does not import the others' modules
_LAZY = {
    **dict.fromkeys(
        (
            "GGML_QUANT_SIZES",
            "GGUF_DEFAULT_ALIGNMENT",
            "GGUF_MAGIC",
            "GGUF_VERSION",
            "GGMLQuantizationType",
            "GGUFEndian",
            "GGUFValueType",
            "LlamaFileType",
        ),
        "constants",
    ),
    **dict.fromkeys(("is_patched", "patch", "unpatch"), "patching"),
    **dict.fromkeys(
        ("QuantError", "dequantize", "quant_shape_from_byte_shape", "quant_shape_to_byte_shape", "quantize"), "quants"
    ),
    **dict.fromkeys(("GGUFReader", "ReaderField", "ReaderTensor"), "reader"),
    **dict.fromkeys(("GGUFValue", "GGUFWriter", "TensorInfo", "WriterState"), "writer"),
}
_SUBMODULES = frozenset({"constants", "errors", "originals", "patching", "quants", "reader", "writer"})


def __getattr__(name: str) -> Any:
    from gguf_schema.lazy import attribute

    return attribute(__name__, name, _LAZY, _SUBMODULES, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


__all__ = [
    "GGML_QUANT_SIZES",
    "GGUF_DEFAULT_ALIGNMENT",
    "GGUF_MAGIC",
    "GGUF_VERSION",
    "GGMLQuantizationType",
    "GGUFEndian",
    "GGUFReader",
    "GGUFValue",
    "GGUFValueType",
    "GGUFWriter",
    "LlamaFileType",
    "QuantError",
    "ReaderField",
    "ReaderTensor",
    "TensorInfo",
    "WriterState",
    "dequantize",
    "is_patched",
    "patch",
    "quant_shape_from_byte_shape",
    "quant_shape_to_byte_shape",
    "quantize",
    "quants",
    "unpatch",
]
