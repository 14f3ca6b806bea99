"""Names of a package imported from their modules on first use (PEP 562), for the package and for compat.

A package lists its public names by module and its submodules; its ``__getattr__`` hands them to
:func:`attribute`, which imports the module, keeps the value in the package's namespace (the next
access is an ordinary one) and returns it. Importing the package so imports none of them.

>>> import gguf_schema
>>> gguf_schema.GGUFFile is gguf_schema.__dict__["GGUFFile"]  # imported on first use, then kept
True
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["attribute"]


def attribute(
    package: str, name: str, names: Mapping[str, str], submodules: frozenset[str], namespace: MutableMapping[str, Any]
) -> Any:
    """``package.name``: from the module ``names[name]`` says, or the submodule of that name; kept in the
    package's ``namespace``. Raises AttributeError for any other name, as a module does."""
    module = names.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", package), name)
    elif name in submodules:
        value = importlib.import_module(f".{name}", package)
    else:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    namespace[name] = value
    return value
