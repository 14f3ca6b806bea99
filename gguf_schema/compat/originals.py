"""gguf-py's own objects, kept while :func:`~gguf_schema.compat.patch` has ours in their place.

:mod:`.patching` records them here when it swaps ours in; :mod:`.writer` asks for gguf-py's own
``GGUFWriter`` (whose typed ``add_*`` helpers it runs). Both import this module; neither imports
the other for it.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

__all__ = ["LOCK", "original", "originals"]

#: held by every change of what the ``gguf`` package's names point at, and by :func:`original`
LOCK = threading.RLock()
#: name -> gguf-py's object, from the first patch() on
originals: dict[str, Any] = {}


def original(name: str) -> Any:
    """gguf-py's own object of that name (``"GGUFWriter"`` ...), patched or not; None without the ``gguf`` package."""
    with LOCK:
        if name in originals:
            return originals[name]
        module = sys.modules.get("gguf")
        if module is None:
            try:
                module = importlib.import_module("gguf")
            except ImportError:
                return None
        return getattr(module, name, None)
