"""The spec: GGUF's byte layout as a ``construct`` schema, and nothing but the format.

Read :mod:`~gguf_schema.format.schema` beside the spec: its structs, in the spec's order, are
what parses a file. The rest of this package is what the schema is made of or needs:

| module | owns |
|---|---|
| ``variant.py`` | ``Variant``: byte order and version, and what the layout derives from them (once) |
| ``keys.py`` | the metadata keys the library itself uses, each named once |
| ``layout.py`` | where each part of a stored record lies (from the record starts the parse records) |
| ``types.py`` | the code tables: ``ValueType``, ``GGMLType``, ``FileType`` |
| ``schema.py`` | the spec's structs (the plain schema, which reads every file by itself) |
| ``nodes.py`` | our plain construct nodes: bounded reads that raise our errors |
| ``values.py`` | ``Field``, ``GGUFArray``, ``LazyStrings``: what a parse produces |
| ``boundary.py`` | the one place the schema runs (``parse``, ``build``) |
| ``limits.py`` | ``Limits``: what a file may claim before it is refused |
| ``fast/`` | the fast layer: ``accelerate(schema)`` swaps faster nodes into the schema |

Bytes come from :mod:`gguf_schema.io`, below this package; the model objects are built above it.
"""
