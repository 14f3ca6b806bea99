"""``python -m gguf_schema``: the ``gguf-schema`` command line (see :mod:`gguf_schema.cli`)."""

from .cli import console

console()
