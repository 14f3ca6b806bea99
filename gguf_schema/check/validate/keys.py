"""Metadata keys: their syntax and length (the spec), empty and repeated keys (ggml), and keys that ggml's
C-string lookup never reads (shadowed)."""

from __future__ import annotations

import re

from ...errors import shorten
from .core import GGML, SPEC, SURROGATES, Checker, reports, rule
from .values import E026

__all__ = ["key_names"]


E020 = rule(
    "GGUF-E020",
    "each key is ASCII lower_snake_case segments separated by '.'",
    "spec: 'It must be a valid ASCII string. It must be a hierarchical key, where each segment is `lower_snake_case` and separated by a `.`'",
    [SPEC],
)
E021 = rule(
    "GGUF-E021",
    "each key is at most 65535 bytes long",
    "spec: 'It must be at most 2^16-1/65535 bytes long'",
    [SPEC],
)
E022 = rule("GGUF-E022", "no key is empty", "ggml: empty keys are rejected", [GGML])
E023 = rule("GGUF-E023", "no key appears twice", "ggml: duplicate keys are rejected (exact byte comparison)", [GGML])
W004 = rule(
    "GGUF-W004",
    "no key appears twice",
    "spec: keys name values; a repeated key makes a lookup ambiguous (the spec does not forbid it)",
    [SPEC],
)
W011 = rule(
    "GGUF-W011",
    "no key is shadowed: no two stored keys are equal up to their first NUL",
    "ggml rejects duplicate keys by their stored bytes, but gguf_find_key (and llama.cpp's loader) compares "
    "keys as C strings and returns the first match: the later key is never read",
    [GGML],
)


_KEY_SEGMENT = r"[a-z0-9]+(?:_[a-z0-9]+)*"
_KEY_SYNTAX = re.compile(rf"{_KEY_SEGMENT}(?:\.{_KEY_SEGMENT})*")
_KEY_CHARS = b"abcdefghijklmnopqrstuvwxyz0123456789_."
_SEPARATORS = bytes.maketrans(b"_\n", b"..")


def _keys_all_well_formed(keys: list[str], text: str | None) -> bool:
    """True when every key matches :data:`_KEY_SYNTAX` and is at most 65535 bytes (then no key rule of
    the spec is broken), found at once over ``text`` (:func:`.core.joined_keys`): a key matches exactly when
    it is made of ``a-z 0-9 _ .``, is not empty, and no ``_`` or ``.`` stands at its ends or beside
    another. False means: check the keys one by one.

    >>> from gguf_schema.check.validate.core import joined_keys
    >>> ok = lambda keys: _keys_all_well_formed(keys, joined_keys(keys))
    >>> ok(["general.name", "llama.rope.freq_base"]), ok(["a..b"]), ok(["a", ""]), ok(["a_", "b"]), ok(["A"])
    (True, False, False, False, False)
    """
    if not keys:
        return True
    if text is None or not text.isascii() or max(map(len, keys)) > 65535:
        return False
    data = text.encode("ascii")
    if data.translate(None, _KEY_CHARS + b"\n"):
        return False
    # separators (_ . and the newline between keys) all as ".": none may start, end or follow another
    marked = data.translate(_SEPARATORS)
    return not (marked.startswith(b".") or marked.endswith(b".") or b".." in marked)


@reports(E020, E021, E022, E023, E026, W004, W011)
def key_names(c: Checker) -> None:
    """Each key's syntax, length and encoding (``spec``); empty, repeated and shadowed keys (``ggml``; repeats are a warning under ``spec``)."""
    fields = c.f.fields
    records = fields.records
    repeats = len(fields) != len(records)  # some key is stored twice: Fields.position names the first
    if not repeats and "" not in fields and (c.profile != SPEC or _keys_all_well_formed(c.key_list, c.key_text)):
        records = []  # no key rule can be broken: nothing to look at one by one
    for i, fld in enumerate(records):
        key = fld.key
        if c.profile == SPEC:
            raw = c.key_bytes(fld)
            if not _KEY_SYNTAX.fullmatch(key):
                c.add(
                    E020,
                    fld.offset,
                    key,
                    key,
                    f"key {shorten(key)} is not ASCII lower_snake_case segments separated by '.'",
                )
            if len(raw) > 65535:
                c.add(E021, fld.offset, key, len(raw), f"key of {len(raw)} bytes is longer than 65535")
            if SURROGATES.search(key):
                c.add(E026, fld.offset, key, raw, "key is not valid UTF-8")
        elif key == "":
            c.add(E022, fld.offset, key, key, "empty key")
        first = fields.position(key) if repeats else i
        if first is not None and first != i:
            at = records[first].offset
            if c.profile == GGML:
                c.add(
                    E023,
                    fld.offset,
                    key,
                    key,
                    f"key {shorten(key)} appears again (first at offset {at})",
                )
            else:
                c.add(
                    W004,
                    fld.offset,
                    key,
                    key,
                    f"key {shorten(key)} appears again (first at offset {at})",
                )
    if c.profile == GGML:
        for sh in c.view.shadows:
            for fld in sh.hidden:
                if fld.key != sh.read.key:
                    c.add(
                        W011,
                        fld.offset,
                        fld.key,
                        fld.key,
                        f"key {shorten(fld.key)} reads as {shorten(sh.key)} in C, and ggml returns the key "
                        f"{shorten(sh.read.key)} at offset {sh.read.offset} for it: this one is never read",
                    )
