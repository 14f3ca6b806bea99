"""Test material for gguf-schema: generated GGUF files, valid and malformed, for the test-suite and for users' own tests.

Each module of this package owns one kind of material (for example :mod:`gguf_schema.testing.malformed`:
one file for each class of malformed file ggml's reader is tested against, with the verdict each
validation profile gives it).
"""
