"""The two places where a lower layer runs code of a higher one: slots that the package fills.

The model does no I/O and sits below the writer, yet :meth:`GGUFFile.save <gguf_schema.model.GGUFFile.save>`
writes; the writer sits below ``check/``, yet every header it writes is checked first. Neither may
import the layer above it, so the package (``gguf_schema/__init__.py``) lends them the functions,
explicitly and only there, by filling the two slots of this module when it is imported. The
functions it lends import the writer and the checks on their first call, so importing the package
imports neither (nor numpy, nor construct): a process pays for the layers it uses.

This module imports nothing, sits at the bottom of the layers, and owns only the two slots:

- :data:`save_file`: what ``GGUFFile.save`` runs (:func:`gguf_schema.writer.save_file`);
- :data:`header_check`: the check run on every header before it is written
  (:func:`gguf_schema.check.writing.check_before_write`); ``None`` writes headers unchecked
  (for measuring the check's cost, as ``benchmarks/bench_write_check.py`` does).

>>> import gguf_schema, gguf_schema.wiring as wiring
>>> wiring.save_file is not None and wiring.header_check is not None
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

__all__ = ["HeaderCheck", "SaveFunction", "header_check", "save_file"]

#: ``save_file(gguf_file, target, *, version, byte_order, sync, strict)``
SaveFunction = Callable[..., None]
#: ``check(header, strict_profile)``: warns for each broken rule, or raises when strict
HeaderCheck = Callable[[bytes | memoryview | IO[bytes], str | None], None]

save_file: SaveFunction | None = None
header_check: HeaderCheck | None = None
