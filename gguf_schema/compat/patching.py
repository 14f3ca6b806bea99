"""``patch()`` and ``unpatch()``: our reader, writer and kernels swapped into the installed ``gguf`` package.

The way ``sklearnex.patch_sklearn()`` enters code it does not own: the ``gguf`` package stays
installed and imported, and only the names of what we replace are pointed at our objects:

=======================  ==========================================================================
module                   names
=======================  ==========================================================================
``gguf``                 ``GGUFReader``, ``ReaderField``, ``ReaderTensor``, ``GGUFWriter``,
                         ``WriterState``, ``TensorInfo``, ``GGUFValue``, ``quantize``,
                         ``dequantize``, ``QuantError``, ``quant_shape_to_byte_shape``,
                         ``quant_shape_from_byte_shape``
``gguf.gguf_reader``     ``GGUFReader``, ``ReaderField``, ``ReaderTensor``
``gguf.gguf_writer``     ``GGUFWriter``, ``WriterState``, ``TensorInfo``, ``GGUFValue``
``gguf.quants``          ``quantize``, ``dequantize``, ``QuantError``, the two shape functions
=======================  ==========================================================================

Everything else is gguf-py's own and stays so: the code tables and key names
(``gguf.constants``), the architectures and tensor-name maps, the vocabulary and metadata
helpers, and the typed ``add_*`` helpers of the writer (our ``GGUFWriter`` runs gguf-py's own
helpers, which call our primitives).

Which code sees the swap:

* code that reaches the names through the module when it runs (``gguf.GGUFReader(path)``,
  ``gguf.quants.dequantize(...)``, or ``from gguf import GGUFReader`` inside a function, as
  transformers does): always, whether ``gguf`` was imported before ``patch()`` or after;
* modules that did ``from gguf import GGUFReader`` at their top before ``patch()`` (gguf-py's
  own scripts do): ``patch()`` also rebinds those names in every module already imported
  (it looks through ``sys.modules`` once), and ``unpatch()`` puts them back;
* not covered: a reference kept anywhere else before ``patch()`` (an attribute of an object,
  a default argument, a closure, a dict or list): such code keeps gguf-py's objects.

``patch()`` imports ``gguf`` (a :class:`~gguf_schema.errors.GGUFDependencyError` if it is not
installed). It returns a handle usable as a context manager: ``with patch(): ...`` restores
everything on exit. A second ``patch()`` while patched changes nothing.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from ..errors import GGUFDependencyError
from . import quants as _quants
from . import reader as _reader
from . import writer as _writer
from .originals import LOCK, originals

__all__ = ["Patch", "is_patched", "patch", "unpatch"]

_OURS: dict[str, Any] = {
    "GGUFReader": _reader.GGUFReader,
    "ReaderField": _reader.ReaderField,
    "ReaderTensor": _reader.ReaderTensor,
    "GGUFWriter": _writer.GGUFWriter,
    "WriterState": _writer.WriterState,
    "TensorInfo": _writer.TensorInfo,
    "GGUFValue": _writer.GGUFValue,
    "quantize": _quants.quantize,
    "dequantize": _quants.dequantize,
    "QuantError": _quants.QuantError,
    "quant_shape_to_byte_shape": _quants.quant_shape_to_byte_shape,
    "quant_shape_from_byte_shape": _quants.quant_shape_from_byte_shape,
}

#: module -> the names swapped in it (the module that defines each, and the package that re-exports all)
TARGETS: dict[str, tuple[str, ...]] = {
    "gguf": tuple(_OURS),
    "gguf.gguf_reader": ("GGUFReader", "ReaderField", "ReaderTensor"),
    "gguf.gguf_writer": ("GGUFWriter", "WriterState", "TensorInfo", "GGUFValue"),
    "gguf.quants": ("quantize", "dequantize", "QuantError", "quant_shape_to_byte_shape", "quant_shape_from_byte_shape"),
}

_saved: list[tuple[ModuleType, str, Any]] = []  # (module, name, what it held) for every name rebound


class Patch:
    """What :func:`patch` returns: leaving a ``with`` block on it undoes the patch it applied."""

    def __init__(self, applied: bool):
        self.applied = applied

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.applied:
            unpatch()


def _import_gguf() -> dict[str, ModuleType]:
    try:
        return {name: importlib.import_module(name) for name in TARGETS}
    except ImportError as e:
        raise GGUFDependencyError(
            "gguf_schema.compat.patch() needs the gguf package installed (pip install gguf): it keeps gguf-py's "
            f"tables and helpers and swaps in only the reader, writer and kernels ({e})"
        ) from None


def patch() -> Patch:
    """Swap our ``GGUFReader``, ``GGUFWriter`` and quants into the installed ``gguf`` package (see the module docstring).

    >>> import gguf, gguf_schema.compat as compat
    >>> with compat.patch():
    ...     gguf.GGUFReader is compat.GGUFReader, gguf.quants.dequantize is compat.quants.dequantize
    (True, True)
    >>> gguf.GGUFReader is compat.GGUFReader
    False
    """
    with LOCK:
        if _saved:
            return Patch(applied=False)
        modules = _import_gguf()
        for name in _OURS:
            originals.setdefault(name, getattr(modules["gguf"], name, None))
        by_id = {id(obj): _OURS[name] for name, obj in originals.items() if obj is not None}
        for module_name, names in TARGETS.items():
            module = modules[module_name]
            for name in names:
                if hasattr(module, name):
                    _saved.append((module, name, getattr(module, name)))
                    setattr(module, name, _OURS[name])
        _rebind_imported(by_id, set(TARGETS))
        return Patch(applied=True)


def _rebind_imported(by_id: dict[int, Any], skip: set[str]) -> None:
    """Point names that modules imported earlier bound to gguf-py's objects at ours."""
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name in skip or module_name.startswith("gguf_schema"):
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for name, value in list(namespace.items()):
            ours = by_id.get(id(value))
            if ours is not None and value is not ours:
                _saved.append((module, name, value))
                namespace[name] = ours


def unpatch() -> None:
    """Put gguf-py's objects back wherever :func:`patch` put ours."""
    with LOCK:
        while _saved:
            module, name, value = _saved.pop()
            setattr(module, name, value)


def is_patched() -> bool:
    """True while :func:`patch` is in effect."""
    return bool(_saved)
