"""``python -m gguf_schema``: the ``gguf-schema`` command line (see :mod:`gguf_schema.cli`)."""

import sys

from .cli import main

sys.exit(main())
