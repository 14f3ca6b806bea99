"""``general.alignment``: what the spec asks of it, and the key and value ggml actually reads."""

from __future__ import annotations

from ...errors import shorten
from .core import GGML, SPEC, Checker, reports, rule

__all__ = ["alignment_key"]


E027 = rule(
    "GGUF-E027",
    "the key ggml reads as general.alignment, if any, is a UINT32",
    "ggml: the alignment is the first key equal to 'general.alignment' as a C string (up to its first NUL: "
    "gguf_find_key), read with gguf_get_val_u32; another type is rejected",
    [GGML],
)
E028 = rule(
    "GGUF-E028",
    "the key ggml reads as general.alignment, if any, is a non-zero power of two",
    "ggml: 'alignment %zu is not a power of 2' is rejected (1 is accepted); the key is found as for GGUF-E027",
    [GGML],
)
E029 = rule(
    "GGUF-E029",
    "general.alignment, if present, is a positive multiple of 8",
    "spec: 'it must be a multiple of 8'",
    [SPEC],
)
W010 = rule(
    "GGUF-W010",
    "ggml reads the data section at the offset a whole-key reader does",
    "ggml takes its alignment from the first key equal to 'general.alignment' up to its first NUL; when that "
    "is another key than the exact one, ggml reads every tensor at other bytes than the spec's reading",
    [GGML],
)


@reports(E027, E028, E029, W010)
def alignment_key(c: Checker) -> None:
    """``general.alignment``: a positive multiple of 8 (``spec``), or the key and value ggml reads (``ggml``)."""
    if c.profile == GGML:
        ggml_alignment(c)
        return
    fld = c.f.fields.get("general.alignment")
    if fld is None:
        return
    at, v = c.value_offset(fld), fld.value
    if fld.type.is_integer and (v <= 0 or v % 8):
        c.add(E029, at, fld.key, v, f"general.alignment {v} is not a positive multiple of 8")


def ggml_alignment(c: Checker) -> None:
    """The alignment ggml reads (the first key equal to ``general.alignment`` as a C string) and where that puts the data."""
    view, f = c.view, c.f
    fld = view.alignment_field
    if fld is None:
        return
    at, v = c.value_offset(fld), fld.value
    named = (
        "general.alignment"
        if fld.key == "general.alignment"
        else f"the key {shorten(fld.key)} (general.alignment for ggml)"
    )
    if view.alignment_problem == "type":
        c.add(E027, at, fld.key, fld.type.name, f"{named} is {fld.type.name}, ggml reads UINT32")
    elif view.alignment_problem == "value":
        c.add(E028, at, fld.key, v, f"{named} {v} is not a power of two")
    elif f.tensor_list and view.data_offset != f.data_offset:
        c.add(
            W010,
            at,
            fld.key,
            v,
            f"ggml takes ALIGNMENT {v} from {named} and reads the data section at offset {view.data_offset}; "
            f"a reader of whole keys takes ALIGNMENT {f.alignment} and reads it at offset {f.data_offset}",
        )
