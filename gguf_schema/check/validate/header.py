"""The file header: its version and byte order."""

from __future__ import annotations

from .core import GGML, SPEC, Checker, reports, rule

__all__ = ["version_and_order"]


E010 = rule(
    "GGUF-E010",
    "the version is 2 or 3",
    "ggml: version 0 and 1 ('no longer supported') and versions above 3 are rejected",
    [GGML],
)
E011 = rule(
    "GGUF-E011",
    "the file is little-endian",
    "ggml: 'version & 0xFFFF == 0' is reported as an endianness mismatch; the C reader never byte-swaps",
    [GGML],
)
E012 = rule("GGUF-E012", "the version is 3", "spec: 'Must be `3` for version described in this spec'", [SPEC])


@reports(E010, E011, E012)
def version_and_order(c: Checker) -> None:
    """The version and byte order: those ggml reads (``ggml``), or the spec's version 3 (``spec``)."""
    f = c.f
    if c.profile == GGML:
        if f.version not in (2, 3):
            c.add(E010, 4, None, f.version, f"GGUF version {f.version}: ggml reads versions 2 and 3 only")
        if f.byte_order != "little":
            c.add(E011, 4, None, f.byte_order, "big-endian file: ggml rejects it on a little-endian host")
    elif f.version != 3:
        c.add(E012, 4, None, f.version, f"GGUF version {f.version}: the spec describes version 3")
