"""The GGUF specification transcribed: ``gguf.json`` (see README.md here), as package data.

This folder sits at the top of the repository and is installed as ``gguf_schema.spec`` (setup.py maps
it): one copy, read with ``importlib.resources`` by ``gguf_schema.check.spec_audit.load_spec``.
It holds no code.
"""
