"""The fast layer: faster nodes swapped into the spec's schema, and the one function that swaps them.

:mod:`gguf_schema.format.schema` is the spec and parses every file by itself. This layer replaces
three of its nodes with nodes that read the same bytes into the same values, the same errors and
the same bytes back, only faster:

| module | replaces | with |
|---|---|---|
| ``arrays.py`` | the array body (``gguf_metadata_value_t array[len]``, construct's ``Array``) | ``ArrayItems``: one ``numpy.frombuffer`` for numbers, one walk for strings, one loop for arrays of arrays |
| ``records.py`` | the arrays of ``gguf_metadata_kv_t`` and ``gguf_tensor_info_t`` (one declared struct per record) | ``KeyValueArray``, ``TensorInfoArray``: one loop per array; ``Verbatim`` records written back as their bytes |
| ``walk.py`` | | the binding of the compiled walk (``format/csrc/scan.c`` as ``gguf_schema.format._scan``) and its Python fallbacks |

:func:`accelerate` is the only way in: the reader and the writer use ``accelerate(gguf_schema(...))``.
Where a fast node cannot read a record it hands it back to the declared struct, which names the
error; if the struct reads what the fast node did not, the two disagree: a
:class:`~gguf_schema.errors.GGUFInternalError` (our bug), never a bad-file error. The tests run
the plain and the accelerated schema on every real and generated file and compare them.

>>> from gguf_schema.format.schema import gguf_schema
>>> plain = gguf_schema("little", 3)
>>> fast = accelerate(plain)
>>> plain.accelerated, fast.accelerated, accelerate(fast) is fast
(False, True, True)
>>> fast.gguf_string_t.build("hi") == plain.gguf_string_t.build("hi")
True
"""

from __future__ import annotations

from ..schema import GGUFSchema, gguf_schema
from .arrays import fast_array_body
from .records import Verbatim, fast_records

__all__ = ["Verbatim", "accelerate", "fast_schema"]


def accelerate(schema: GGUFSchema) -> GGUFSchema:
    """``schema`` with the fast nodes swapped in (the array body and the two arrays of records); cached."""
    return gguf_schema(schema.byte_order, schema.version, array_body=fast_array_body, records=fast_records)


def fast_schema(byte_order: str = "little", version: int = 3) -> GGUFSchema:
    """``accelerate(gguf_schema(byte_order, version))``: the schema the reader and the writer use."""
    return accelerate(gguf_schema(byte_order, version))
