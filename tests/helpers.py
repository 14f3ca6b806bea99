"""Helpers shared by the test modules (imported explicitly, not through conftest)."""

from __future__ import annotations

from typing import Any

import gguf_schema
from gguf_schema.format.schema import GGUFSchema
from gguf_schema.format.schema import gguf_schema as fast_schema
from gguf_schema.testing.reference import read_reference, reference_schema

VARIANT_IDS = ["fast", "reference"]


def open_variant(source: Any, fast: bool = True, **kw: Any) -> gguf_schema.GGUFFile:
    """Open with the schema as shipped (``fast``) or with its reference variant (construct's plain ``Array``)."""
    return gguf_schema.open(source, **kw) if fast else read_reference(source, **kw)


def schema_variant(order: str, version: int, fast: bool = True) -> GGUFSchema:
    """The schema of a (byte order, version), shipped or reference variant."""
    return fast_schema(order, version) if fast else reference_schema(order, version)
