"""Validation: every rule a GGUF file can break, in one table, checked under a strictness profile.

This module owns the rule table :data:`RULES`, the checks behind each rule, the
:class:`Report` they produce, and :func:`require` (what ``gguf_schema.open(..., strict=PROFILE)``
runs). The ``gguf-schema check`` and ``rules`` commands print them (:mod:`gguf_schema.cli`).
Each rule has an id (``GGUF-E0nn`` for errors, ``GGUF-W0nn`` for warnings), a one-line
statement, the spec sentence or ggml behaviour it comes from, and the profiles it belongs to:

``spec``
    what the GGUF specification text requires (``check/spec/gguf.json`` holds its facts).
``ggml``
    the accept/reject verdict of ggml's C reader (``gguf_init_from_file``).
``lenient``
    only what stops the file or a tensor from being read at all.

Files a profile rejects still open: :func:`gguf_schema.open` is tolerant, and the checks
work on the opened :class:`~gguf_schema.model.GGUFFile`. A file that cannot be opened gives
one ``GGUF-E001`` finding carrying the :class:`~gguf_schema.errors.GGUFError` details.

>>> import io, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.architecture": "gpt2", "Bad Key": 1}, alignment=1)
>>> r = check(buf.getvalue(), "ggml")
>>> r.ok
True
>>> r = check(buf.getvalue(), "spec")
>>> [(f.rule, f.name) for f in r.errors][:2]
[('GGUF-E020', 'Bad Key'), ('GGUF-E029', 'general.alignment')]
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import GGUFError, GGUFValidationError, shorten
from ..format.types import GGML_TYPE_COUNT, FileType, GGMLType, ValueType, tensor_nbytes
from ..format.values import BoolByte, Field, GGUFArray, LazyStrings
from ..model import GGUFFile, Tensor
from ..reader import read
from .ggml_view import GGML_MAX_NAME, GGMLView
from .spec_audit import load_spec

__all__ = [
    "PROFILES",
    "RULES",
    "Finding",
    "Report",
    "Rule",
    "check",
    "require",
    "split_place",
    "validate",
]

PROFILES = ("spec", "ggml", "lenient")
SPEC, GGML, LENIENT = "spec", "ggml", "lenient"
ALL = frozenset(PROFILES)

_SIZE_MAX = 2**64 - 1
_SURROGATES = re.compile("[\udc80-\udcff]")
_KEY_SEGMENT = r"[a-z0-9]+(?:_[a-z0-9]+)*"
_KEY_SYNTAX = re.compile(rf"{_KEY_SEGMENT}(?:\.{_KEY_SEGMENT})*")
_KEY_CHARS = b"abcdefghijklmnopqrstuvwxyz0123456789_."
_SEPARATORS = bytes.maketrans(b"_\n", b"..")


def _joined_keys(keys: list[str]) -> str | None:
    """The keys joined by newlines, one per line (None if a key holds a newline itself): rules over
    800,000 keys are checked on this one string, at C speed, instead of key by key."""
    text = "\n".join(keys)
    return text if text.count("\n") == len(keys) - 1 else None


def _keys_all_well_formed(keys: list[str], text: str | None) -> bool:
    """True when every key matches :data:`_KEY_SYNTAX` and is at most 65535 bytes (then no key rule of
    the spec is broken), found at once over ``text`` (:func:`_joined_keys`): a key matches exactly when
    it is made of ``a-z 0-9 _ .``, is not empty, and no ``_`` or ``.`` stands at its ends or beside
    another. False means: check the keys one by one.

    >>> ok = lambda keys: _keys_all_well_formed(keys, _joined_keys(keys))
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


_ARCH_SYNTAX = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Rule:
    """One entry of the rule table.

    Attributes:
        id: ``GGUF-E0nn`` (error) or ``GGUF-W0nn`` (warning).
        severity: ``"error"`` or ``"warning"``.
        statement: what a file must do, in one line.
        source: the spec sentence or ggml behaviour the rule comes from.
        profiles: the profiles that check it.
    """

    id: str
    severity: str
    statement: str
    source: str
    profiles: frozenset[str]


def _rule(id: str, statement: str, source: str, profiles: Iterable[str]) -> Rule:
    return Rule(id, "error" if id.startswith("GGUF-E") else "warning", statement, source, frozenset(profiles))


#: The rule table: every rule the validator knows, keyed by id.
RULES: dict[str, Rule] = {
    r.id: r
    for r in [
        # ---------------------------------------------------------------- reading at all
        _rule(
            "GGUF-E001",
            "the file can be opened and parsed",
            "every profile: a file the reader cannot parse (bad magic, unsupported version, truncated field, unknown value type, count past EOF, limit exceeded)",
            ALL,
        ),
        _rule(
            "GGUF-E002",
            "each tensor's data lies inside the file",
            "spec: 'Each tensor's data must be stored within this array'; ggml/llama.cpp mmap loader: offset + nbytes <= file size",
            ALL,
        ),
        _rule(
            "GGUF-E003",
            "each tensor type is a ggml_type id (0 <= type < 43)",
            "spec: 'ggml_type type'; ggml: type must be in [0, GGML_TYPE_COUNT)",
            ALL,
        ),
        _rule(
            "GGUF-E004",
            "no tensor uses a removed ggml type",
            "spec: '// GGML_TYPE_Q4_2 = 4, support has been removed'; ggml: block size 0 is rejected",
            ALL,
        ),
        _rule(
            "GGUF-E005",
            "each tensor's rows are whole blocks: its first dimension (1 for n_dims 0) is a multiple of its type's block size",
            "ggml: 'ne[0] % block_size != 0' is rejected, and n_dims 0 reads as ne = [1, 1, 1, 1]; the bytes of a partial block cannot be located",
            ALL,
        ),
        # ---------------------------------------------------------------- header
        _rule(
            "GGUF-E010",
            "the version is 2 or 3",
            "ggml: version 0 and 1 ('no longer supported') and versions above 3 are rejected",
            [GGML],
        ),
        _rule(
            "GGUF-E011",
            "the file is little-endian",
            "ggml: 'version & 0xFFFF == 0' is reported as an endianness mismatch; the C reader never byte-swaps",
            [GGML],
        ),
        _rule("GGUF-E012", "the version is 3", "spec: 'Must be `3` for version described in this spec'", [SPEC]),
        # ---------------------------------------------------------------- metadata
        _rule(
            "GGUF-E020",
            "each key is ASCII lower_snake_case segments separated by '.'",
            "spec: 'It must be a valid ASCII string. It must be a hierarchical key, where each segment is `lower_snake_case` and separated by a `.`'",
            [SPEC],
        ),
        _rule(
            "GGUF-E021",
            "each key is at most 65535 bytes long",
            "spec: 'It must be at most 2^16-1/65535 bytes long'",
            [SPEC],
        ),
        _rule("GGUF-E022", "no key is empty", "ggml: empty keys are rejected", [GGML]),
        _rule("GGUF-E023", "no key appears twice", "ggml: duplicate keys are rejected (exact byte comparison)", [GGML]),
        _rule(
            "GGUF-E024",
            "no array holds arrays",
            "ggml: an array whose element type is ARRAY is rejected (the spec allows nesting)",
            [GGML],
        ),
        _rule(
            "GGUF-E025",
            "each bool is stored as the byte 0 or 1",
            "spec: '1-byte value where 0 is false and 1 is true. Anything else is invalid'",
            [SPEC],
        ),
        _rule(
            "GGUF-E026",
            "each string (keys, values, tensor names) is valid UTF-8",
            "spec: 'The string as a UTF-8 non-null-terminated string'",
            [SPEC],
        ),
        _rule(
            "GGUF-E027",
            "the key ggml reads as general.alignment, if any, is a UINT32",
            "ggml: the alignment is the first key equal to 'general.alignment' as a C string (up to its first NUL: "
            "gguf_find_key), read with gguf_get_val_u32; another type is rejected",
            [GGML],
        ),
        _rule(
            "GGUF-E028",
            "the key ggml reads as general.alignment, if any, is a non-zero power of two",
            "ggml: 'alignment %zu is not a power of 2' is rejected (1 is accepted); the key is found as for GGUF-E027",
            [GGML],
        ),
        _rule(
            "GGUF-E029",
            "general.alignment, if present, is a positive multiple of 8",
            "spec: 'it must be a multiple of 8'",
            [SPEC],
        ),
        # ---------------------------------------------------------------- tensor infos
        _rule(
            "GGUF-E030",
            "each tensor name is stored in fewer than 64 bytes (NULs included)",
            "ggml: a stored name of GGML_MAX_NAME (64) bytes or more is rejected ('tensor name ... is too long'), "
            "before the name is cut at its first NUL",
            [GGML],
        ),
        _rule(
            "GGUF-E031", "each tensor name is at most 64 bytes long", "spec: 'it must be at most 64 bytes long'", [SPEC]
        ),
        _rule(
            "GGUF-E032",
            "no two tensor names are equal (up to their first NUL)",
            "ggml: names are cut at the first NUL, then duplicates are rejected",
            [GGML],
        ),
        _rule(
            "GGUF-E033",
            "each tensor has at most 4 dimensions",
            "spec: 'Currently at most 4'; ggml: n_dims > GGML_MAX_DIMS is rejected",
            [SPEC, GGML],
        ),
        _rule(
            "GGUF-E034",
            "no dimension is negative when read as int64",
            "ggml: dimensions are read as int64_t and negative ones are rejected",
            [GGML],
        ),
        _rule(
            "GGUF-E035",
            "each tensor's element count is below INT64_MAX",
            "ggml: 'total number of elements ... is >= INT64_MAX' is rejected; a zero-element tensor is exempt "
            "(whatever its other dimensions). ggml also skips the check when the int64 product of the dimensions "
            "wraps to 0 or below: this profile rejects those (docs/ggml-profile.md)",
            [GGML],
        ),
        _rule(
            "GGUF-E036",
            "each tensor's byte size fits in size_t",
            "ggml: '... has a size in bytes > SIZE_MAX' is rejected (elements / block size > SIZE_MAX / type size)",
            [GGML],
        ),
        _rule(
            "GGUF-E037",
            "each tensor offset is a multiple of ALIGNMENT",
            "spec: 'Must be a multiple of `ALIGNMENT`. That is, `align_offset(offset) == offset`'",
            [SPEC],
        ),
        _rule(
            "GGUF-E038",
            "tensor offsets are contiguous: each equals the padded sizes of the tensors before it",
            "ggml: 'tensor has offset X, expected Y' is rejected (sizes padded to the alignment ggml reads: GGUF-E027)",
            [GGML],
        ),
        _rule(
            "GGUF-E039",
            "the total padded data size fits in size_t",
            "ggml: 'size overflow, cannot accumulate size' is rejected",
            [GGML],
        ),
        _rule(
            "GGUF-E040",
            "the data section holds every tensor's padded size, padding after the last tensor included",
            "ggml: a full load reads the sum of the padded sizes from its data offset and fails when the file ends first",
            [GGML],
        ),
        _rule(
            "GGUF-E041",
            "a file with tensors reaches the start of its data section (the end of the tensor infos padded to ALIGNMENT)",
            "ggml: 'failed to seek to beginning of data section' is rejected, even when every tensor has zero bytes; "
            "without tensors the data offset is the unpadded end of the metadata",
            [GGML],
        ),
        # ---------------------------------------------------------------- standardized keys (spec)
        _rule(
            "GGUF-E050",
            "general.architecture is present",
            "spec: '**general.architecture: string**' is bolded, i.e. required",
            [SPEC],
        ),
        _rule(
            "GGUF-E051",
            "general.architecture is lowercase ASCII [a-z0-9]+",
            "spec: 'All lowercase ASCII, with only `[a-z0-9]+` characters allowed'",
            [SPEC],
        ),
        _rule(
            "GGUF-E052",
            "general.quantization_version is present when any tensor is quantized",
            "spec: 'If any tensors are quantized, this _must_ be present'",
            [SPEC],
        ),
        _rule(
            "GGUF-E053",
            "each standardized key has its specified type (uint32 accepted where uint64 is named)",
            "spec: the typed key lists; 'Some models may use `uint32` for their values; it is recommended that readers support both'",
            [SPEC],
        ),
        _rule(
            "GGUF-E054",
            "every key the architecture's section lists is present",
            "spec: 'The following sections describe the metadata for each model architecture. Each key specified _must_ be present.'",
            [SPEC],
        ),
        _rule(
            "GGUF-E055",
            "tokenizer.ggml.scores and tokenizer.ggml.token_type have as many items as tokenizer.ggml.tokens",
            "spec: 'If present, it must have the same length and index as `tokens`'",
            [SPEC],
        ),
        _rule(
            "GGUF-E056",
            "special token ids index into tokenizer.ggml.tokens",
            "spec: 'tokenizer.ggml.tokens: A list of tokens indexed by the token ID used by the model'",
            [SPEC],
        ),
        _rule(
            "GGUF-E057",
            "general.file_type names a tensor type that some tensor has",
            "spec: 'general.file_type: An enumerated value describing the type of the majority of the tensors in the file'",
            [SPEC],
        ),
        # ---------------------------------------------------------------- warnings (spec)
        _rule(
            "GGUF-W001",
            "general.architecture is one of the architectures the spec names",
            "spec: 'Known values include: llama, mpt, gptneox, gptj, gpt2, bloom, falcon, rwkv'",
            [SPEC],
        ),
        _rule(
            "GGUF-W002",
            "general.file_type is a value of the spec's table (0-18, 5 and 6 removed)",
            "spec: the general.file_type list stops at MOSTLY_Q6_K = 18; 'MOSTLY_Q4_2 = 5 (support removed)'",
            [SPEC],
        ),
        _rule(
            "GGUF-W003",
            "the padding after the tensor infos is 0x00 bytes",
            "spec: 'Where required, the file is padded with `0x00` bytes'",
            [SPEC],
        ),
        _rule(
            "GGUF-W004",
            "no key appears twice",
            "spec: keys name values; a repeated key makes a lookup ambiguous (the spec does not forbid it)",
            [SPEC],
        ),
        _rule(
            "GGUF-W005",
            "no two tensors have the same name",
            "spec: tensors are 'located through its tensor_infos entry'; a repeated name is ambiguous (the spec does not forbid it)",
            [SPEC],
        ),
        _rule(
            "GGUF-W010",
            "ggml reads the data section at the offset a whole-key reader does",
            "ggml takes its alignment from the first key equal to 'general.alignment' up to its first NUL; when that "
            "is another key than the exact one, ggml reads every tensor at other bytes than the spec's reading",
            [GGML],
        ),
        _rule(
            "GGUF-W011",
            "no key is shadowed: no two stored keys are equal up to their first NUL",
            "ggml rejects duplicate keys by their stored bytes, but gguf_find_key (and llama.cpp's loader) compares "
            "keys as C strings and returns the first match: the later key is never read",
            [GGML],
        ),
    ]
}


@dataclass(frozen=True)
class Finding:
    """One broken rule at one place in a file.

    Attributes:
        rule: the rule id (a key of :data:`RULES`).
        severity: ``"error"`` or ``"warning"``.
        offset: byte offset of the offending item (None when the rule is about something absent).
        name: the metadata key or tensor name involved (array items as ``key[i]``), if any.
        value: the offending value (None when absent).
        message: what is wrong, in words.
    """

    rule: str
    severity: str
    offset: int | None
    name: str | None
    value: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "offset": self.offset,
            "name": self.name,
            "value": _jsonable(self.value),
            "message": self.message,
        }

    def __str__(self) -> str:
        at = f"@{self.offset}" if self.offset is not None else "@-"
        name = f" [{self.name}]" if self.name is not None else ""
        return f"{at} {self.rule} {self.severity}{name}: {self.message}"


@dataclass
class Report:
    """The findings of one file under one profile.

    Attributes:
        path: the file's path (None for a buffer).
        profile: the profile used.
        findings: every finding, in the order the checks ran.
        readable: False when the file could not be opened at all.
    """

    path: str | None
    profile: str
    findings: list[Finding] = field(default_factory=list)
    readable: bool = True

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when no finding has error severity (warnings do not fail a file)."""
        return not self.errors

    @property
    def rules(self) -> list[str]:
        """The ids of the broken rules, each once, in order of first finding."""
        return list(dict.fromkeys(f.rule for f in self.findings))

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "path": self.path,
            "profile": self.profile,
            "ok": self.ok,
            "readable": self.readable,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "findings": [f.to_dict() for f in self.findings],
        }


# --------------------------------------------------------------------------- entry points


def validate(
    file_or_path: Any,
    profile: str = "spec",
    *,
    storage_options: Mapping[str, Any] | None = None,
    model: Any = None,
) -> Report:
    """Check a GGUF file against a profile's rules and return every finding.

    Args:
        file_or_path: an open :class:`~gguf_schema.model.GGUFFile`, a path, a URL, bytes, or a binary file object.
        profile: ``"spec"``, ``"ggml"`` or ``"lenient"``.
        storage_options: for a URL, the options of its fsspec backend (credentials, endpoints).
        model: when the file is the first shard of a split model, that model
            (:func:`gguf_schema.open_split`, or anything with a ``tensor_list``): the rules about the
            model's tensors (``GGUF-E052`` quantization version, ``GGUF-E057`` file type) then look at
            every shard's.

    A shard of a split model (``split.count`` > 1) is checked as a shard: a later shard holds only
    the split keys, so the rules about the model's metadata (architecture, required keys,
    tokenizer, file type) are not asked of it (its first shard holds that metadata); the first
    shard is checked for them, and for the rules about the model's tensors only with ``model``
    (without it ``GGUF-E057`` cannot be known and is not reported).

    Never raises for a bad file: a file that cannot be opened gives a ``GGUF-E001`` finding.

    >>> import io, gguf_schema, numpy as np
    >>> buf = io.BytesIO()
    >>> gguf_schema.save(buf, {"general.architecture": "gpt2"}, {"w": np.zeros(3, np.float32)})
    >>> r = validate(buf.getvalue()[:-30], "lenient")
    >>> r.ok, r.findings[0].rule, r.findings[0].name
    (False, 'GGUF-E002', 'w')
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (choose from {', '.join(PROFILES)})")
    if isinstance(file_or_path, GGUFFile):
        return _Checker(file_or_path, profile, model).run()
    path = (
        os.fspath(file_or_path) if isinstance(file_or_path, (str, os.PathLike)) else getattr(file_or_path, "name", None)
    )
    path = path if isinstance(path, str) else None
    try:
        f = read(file_or_path, storage_options=storage_options, lazy=True)  # strings checked in their bytes
    except GGUFError as e:
        return _unreadable(path, profile, e.offset, e.path, e.value, str(e))
    with f:
        report = _Checker(f, profile, model).run()
        report.path = path
        return report


def check(path_or_bytes: Any, profile: str = "spec", *, model: Any = None) -> Report:
    """Same as :func:`validate`: the name the ``check`` command uses.

    >>> check(b"GGUF\\x09\\x00\\x00\\x00", "lenient").findings[0].rule
    'GGUF-E001'
    """
    return validate(path_or_bytes, profile, model=model)


def require(f: GGUFFile, profile: str) -> GGUFFile:
    """Return ``f`` if it breaks no error rule of ``profile``; else close it and raise
    :class:`~gguf_schema.errors.GGUFValidationError` carrying the first error-severity finding
    (and the whole report). ``gguf_schema.open(src, strict=profile)`` is ``require(read(src), profile)``.

    >>> import io, gguf_schema
    >>> buf = io.BytesIO()
    >>> gguf_schema.save(buf, {"general.architecture": "gpt2"}, alignment=13)
    >>> gguf_schema.open(buf.getvalue(), strict="lenient").alignment
    13
    >>> gguf_schema.open(buf.getvalue(), strict="ggml")
    Traceback (most recent call last):
    ...
    gguf_schema.errors.GGUFValidationError: GGUF-E028: general.alignment 13 is not a power of two (at offset ..., in general.alignment)
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (choose from {', '.join(PROFILES)})")
    try:
        report = _Checker(f, profile).run()
    except BaseException:
        f.close()
        raise
    if report.errors:
        f.close()
        first = report.errors[0]
        raise GGUFValidationError(
            f"{first.rule}: {first.message}",
            finding=first,
            report=report,
            offset=first.offset,
            path=first.name,
            value=first.value,
        )
    return f


def _unreadable(
    path: str | None, profile: str, offset: int | None, name: str | None, value: Any, message: str
) -> Report:
    f = Finding("GGUF-E001", "error", offset, name, value, f"cannot read the file: {message}")
    return Report(path, profile, [f], readable=False)


# --------------------------------------------------------------------------- the checks


def split_place(f: GGUFFile) -> tuple[int, int] | None:
    """``(split.no, split.count)`` of a shard of a split model (llama.cpp's ``gguf-split`` keys, with
    ``split.count`` > 1); None for a file that is not one.

    >>> import io, gguf_schema
    >>> buf = io.BytesIO()
    >>> gguf_schema.save(buf, {"split.no": 1, "split.count": 3})
    >>> split_place(gguf_schema.open(buf.getvalue()))
    (1, 3)
    """
    no, count = f.fields.get("split.no"), f.fields.get("split.count")
    if count is None or not count.type.is_integer or count.value < 2:
        return None
    if no is not None and not no.type.is_integer:
        return None
    return (int(no.value) if no is not None else 0), int(count.value)


def _invalid_strings(items: Any) -> list[int]:
    """The indices of the strings of an array that are not valid UTF-8; an undecoded (lazy) array is
    checked in its stored bytes, without making a Python string of each item."""
    if isinstance(items, LazyStrings):
        return items.invalid_utf8()
    if not items or not _SURROGATES.search("".join(items)):
        return []
    return [i for i, s in enumerate(items) if _SURROGATES.search(s)]


class _Checker:
    """Runs the checks of one profile over one open file and collects findings."""

    def __init__(self, f: GGUFFile, profile: str, model: Any = None):
        self.f = f
        self.profile = profile
        self.findings: list[Finding] = []
        self.ls = 4 if f.version == 1 else 8  # bytes of a stored length/count
        self.size = f.file_size
        self.view = GGMLView(f)
        self.shard = split_place(f)
        # the tensors of the model this file stands for: its own, every shard's (a first shard with its
        # model), or None (a first shard alone: the model's tensors are not known)
        self.model_tensors: list[Tensor] | None = (
            f.tensor_list if self.shard is None else (list(model.tensor_list) if model is not None else None)
        )

    @cached_property
    def key_list(self) -> list[str]:
        return [fld.key for fld in self.f.fields.records]

    @cached_property
    def key_text(self) -> str | None:
        return _joined_keys(self.key_list)

    def run(self) -> Report:
        p = self.profile
        if p in (SPEC, GGML):
            self.header()
            self.keys()
            self.values()
            self.alignment()
            self.tensor_infos()
        self.tensor_types()
        self.tensor_bounds()
        if p == GGML:
            self.ggml_layout()
        if p == SPEC:
            self.offsets_aligned()
            if self.shard is not None and self.shard[0] > 0:  # a later shard: the model's metadata is in the first
                self.key_types()
            else:
                self.standard_keys()
                self.tokenizer()
                self.file_type()
            self.padding()
        return Report(self.f.name, p, self.findings)

    def add(self, rule: str, offset: int | None, name: str | None, value: Any, message: str) -> None:
        r = RULES[rule]
        assert self.profile in r.profiles, (rule, self.profile)
        self.findings.append(Finding(rule, r.severity, offset, _clip(name), _bounded(value), _clip(message, 400) or ""))

    # ---------------------------------------------------------------- offsets of stored items

    def key_bytes(self, fld: Field) -> bytes:
        return fld.key.encode("utf-8", "surrogateescape")

    def value_offset(self, fld: Field) -> Any:
        if fld.offset is None:  # a field set in memory has no place in the file yet
            return None
        return fld.offset + self.ls + len(self.key_bytes(fld)) + 4  # key string, value type

    def item_offset(self, fld: Field, index: int) -> Any:
        """Offset of item ``index`` of a (non-nested) array value."""
        if fld.offset is None:
            return None
        base = self.value_offset(fld) + 4 + self.ls  # element type, count
        arr: GGUFArray = fld.value
        if arr.type == ValueType.STRING:
            return base + sum(self.ls + len(s.encode("utf-8", "surrogateescape")) for s in arr.items[:index])
        return base + index * arr.type.itemsize

    def name_bytes(self, t: Tensor) -> bytes:
        return t.name.encode("utf-8", "surrogateescape")

    def ndims_offset(self, t: Tensor) -> int:
        return t.info_offset + self.ls + len(self.name_bytes(t))

    def dim_offset(self, t: Tensor, j: int) -> int:
        return self.ndims_offset(t) + 4 + j * self.ls

    def type_offset(self, t: Tensor) -> int:
        return self.dim_offset(t, len(t.dims))

    def offset_offset(self, t: Tensor) -> int:
        return self.type_offset(t) + 4

    # ---------------------------------------------------------------- header

    def header(self) -> None:
        f = self.f
        if self.profile == GGML:
            if f.version not in (2, 3):
                self.add("GGUF-E010", 4, None, f.version, f"GGUF version {f.version}: ggml reads versions 2 and 3 only")
            if f.byte_order != "little":
                self.add("GGUF-E011", 4, None, f.byte_order, "big-endian file: ggml rejects it on a little-endian host")
        elif f.version != 3:
            self.add("GGUF-E012", 4, None, f.version, f"GGUF version {f.version}: the spec describes version 3")

    # ---------------------------------------------------------------- keys and values

    def keys(self) -> None:
        fields = self.f.fields
        records = fields.records
        repeats = len(fields) != len(records)  # some key is stored twice: Fields.position names the first
        if (
            not repeats
            and "" not in fields
            and (self.profile != SPEC or _keys_all_well_formed(self.key_list, self.key_text))
        ):
            records = []  # no key rule can be broken: nothing to look at one by one
        for i, fld in enumerate(records):
            key = fld.key
            if self.profile == SPEC:
                raw = self.key_bytes(fld)
                if not _KEY_SYNTAX.fullmatch(key):
                    self.add(
                        "GGUF-E020",
                        fld.offset,
                        key,
                        key,
                        f"key {shorten(key)} is not ASCII lower_snake_case segments separated by '.'",
                    )
                if len(raw) > 65535:
                    self.add("GGUF-E021", fld.offset, key, len(raw), f"key of {len(raw)} bytes is longer than 65535")
                if _SURROGATES.search(key):
                    self.add("GGUF-E026", fld.offset, key, raw, "key is not valid UTF-8")
            elif key == "":
                self.add("GGUF-E022", fld.offset, key, key, "empty key")
            first = fields.position(key) if repeats else i
            if first is not None and first != i:
                at = records[first].offset
                if self.profile == GGML:
                    self.add(
                        "GGUF-E023",
                        fld.offset,
                        key,
                        key,
                        f"key {shorten(key)} appears again (first at offset {at})",
                    )
                else:
                    self.add(
                        "GGUF-W004",
                        fld.offset,
                        key,
                        key,
                        f"key {shorten(key)} appears again (first at offset {at})",
                    )
        if self.profile == GGML:
            for sh in self.view.shadows:
                for fld in sh.hidden:
                    if fld.key != sh.read.key:
                        self.add(
                            "GGUF-W011",
                            fld.offset,
                            fld.key,
                            fld.key,
                            f"key {shorten(fld.key)} reads as {shorten(sh.key)} in C, and ggml returns the key "
                            f"{shorten(sh.read.key)} at offset {sh.read.offset} for it: this one is never read",
                        )

    def values(self) -> None:
        ruled = (ValueType.ARRAY, ValueType.BOOL, ValueType.STRING) if self.profile == SPEC else (ValueType.ARRAY,)
        for fld in [fld for fld in self.f.fields.records if fld.type in ruled]:  # the only values with a rule
            if fld.type == ValueType.ARRAY:
                self.array_value(fld, fld.value, self.value_offset(fld), fld.key, top=True)
            else:
                self.scalar_value(fld)

    def scalar_value(self, fld: Field) -> None:
        if fld.type == ValueType.BOOL and isinstance(fld.value, BoolByte):
            self.add(
                "GGUF-E025", self.value_offset(fld), fld.key, int(fld.value), f"bool stored as byte {int(fld.value)}"
            )
        elif fld.type == ValueType.STRING and _SURROGATES.search(fld.value):
            self.add("GGUF-E026", self.value_offset(fld), fld.key, _raw(fld.value), "string value is not valid UTF-8")

    def array_value(self, fld: Field, arr: GGUFArray, offset: int, name: str, top: bool) -> None:
        if arr.type == ValueType.ARRAY:
            if self.profile == GGML:
                self.add("GGUF-E024", offset, name, "ARRAY", "array of arrays: ggml rejects nested arrays")
                return
            for i, inner in enumerate(
                arr.items
            ):  # offsets of nested items are not tracked: the array's own offset is given
                self.array_value(fld, inner, offset, f"{name}[{i}]", top=False)
            return
        if self.profile != SPEC:
            return
        if arr.type == ValueType.BOOL:
            raw = np.asarray(arr.items).view(np.uint8)
            bad = np.flatnonzero(raw > 1)
            if bad.size:
                i = int(bad[0])
                at = self.item_offset(fld, i) if top else offset
                self.add(
                    "GGUF-E025",
                    at,
                    f"{name}[{i}]",
                    int(raw[i]),
                    f"bool array item stored as byte {int(raw[i])} ({bad.size} such items)",
                )
        elif arr.type == ValueType.STRING and (bad_items := _invalid_strings(arr.items)):
            i = bad_items[0]
            at = self.item_offset(fld, i) if top else offset
            self.add(
                "GGUF-E026",
                at,
                f"{name}[{i}]",
                _raw(arr.items[i]),
                f"string array item is not valid UTF-8 ({len(bad_items)} such items)",
            )

    # ---------------------------------------------------------------- alignment

    def alignment(self) -> None:
        if self.profile == GGML:
            self.ggml_alignment()
            return
        fld = self.f.fields.get("general.alignment")
        if fld is None:
            return
        at, v = self.value_offset(fld), fld.value
        if fld.type.is_integer and (v <= 0 or v % 8):
            self.add("GGUF-E029", at, fld.key, v, f"general.alignment {v} is not a positive multiple of 8")

    def ggml_alignment(self) -> None:
        """The alignment ggml reads (the first key equal to ``general.alignment`` as a C string) and where that puts the data."""
        view, f = self.view, self.f
        fld = view.alignment_field
        if fld is None:
            return
        at, v = self.value_offset(fld), fld.value
        named = (
            "general.alignment"
            if fld.key == "general.alignment"
            else f"the key {shorten(fld.key)} (general.alignment for ggml)"
        )
        if view.alignment_problem == "type":
            self.add("GGUF-E027", at, fld.key, fld.type.name, f"{named} is {fld.type.name}, ggml reads UINT32")
        elif view.alignment_problem == "value":
            self.add("GGUF-E028", at, fld.key, v, f"{named} {v} is not a power of two")
        elif f.tensor_list and view.data_offset != f.data_offset:
            self.add(
                "GGUF-W010",
                at,
                fld.key,
                v,
                f"ggml takes ALIGNMENT {v} from {named} and reads the data section at offset {view.data_offset}; "
                f"a reader of whole keys takes ALIGNMENT {f.alignment} and reads it at offset {f.data_offset}",
            )

    # ---------------------------------------------------------------- tensor infos

    def tensor_infos(self) -> None:
        seen: dict[bytes, str] = {}
        # ggml's count and size checks cannot fail for a small tensor (TensorColumns.small): only the others are asked
        small = self.view.columns.small.tolist() if self.profile == GGML else []
        for i, t in enumerate(self.f.tensor_list):
            raw = self.name_bytes(t)
            cut = raw.split(b"\0", 1)[0]
            if self.profile == GGML:
                if len(raw) >= GGML_MAX_NAME:
                    self.add(
                        "GGUF-E030",
                        t.info_offset,
                        t.name,
                        len(raw),
                        f"tensor name stored in {len(raw)} bytes: ggml allows at most {GGML_MAX_NAME - 1}"
                        + (f" (NULs included; its text is {len(cut)} bytes)" if len(cut) < len(raw) else ""),
                    )
                    continue  # ggml stops at a name too long
                if cut in seen:
                    self.add(
                        "GGUF-E032",
                        t.info_offset,
                        t.name,
                        cut.decode("utf-8", "surrogateescape"),
                        f"tensor name {shorten(cut)} repeats tensor {shorten(seen[cut])}"
                        if seen[cut] != t.name
                        else f"tensor name {shorten(t.name)} appears twice",
                    )
                else:
                    seen[cut] = t.name
            else:
                if len(raw) > 64:
                    self.add(
                        "GGUF-E031",
                        t.info_offset,
                        t.name,
                        len(raw),
                        f"tensor name of {len(raw)} bytes is longer than 64",
                    )
                if _SURROGATES.search(t.name):
                    self.add("GGUF-E026", t.info_offset, t.name, raw, "tensor name is not valid UTF-8")
                if raw in seen:
                    self.add("GGUF-W005", t.info_offset, t.name, t.name, f"tensor name {shorten(t.name)} appears twice")
                else:
                    seen[raw] = t.name
            if len(t.dims) > 4:
                self.add(
                    "GGUF-E033",
                    self.ndims_offset(t),
                    t.name,
                    len(t.dims),
                    f"{len(t.dims)} dimensions, at most 4 allowed",
                )
            elif self.profile == GGML and not small[i]:
                self.ggml_shape(i)

    def ggml_shape(self, i: int) -> None:
        g = self.view.tensor(i)
        t = g.tensor
        n, gt = g.nelements, g.ggml_type
        if 0 < n < 2**62 and n == g.true_elements and min(g.ne) > 0 and gt is not None and n * gt.type_size < 2**64:
            return  # the common case: no check of ggml's can fail (row blocks are E005's)
        for j, d in enumerate(g.ne[: len(t.dims)]):
            if d < 0:
                self.add("GGUF-E034", self.dim_offset(t, j), t.name, d, f"dimension {j} is {d} when read as int64")
                return
        if g.count_check_fails:
            self.add(
                "GGUF-E035",
                self.dim_offset(t, 0),
                t.name,
                tuple(t.dims),
                f"element count of dims {tuple(t.dims)} reaches INT64_MAX",
            )
            return
        if g.count_wraps:  # ggml skips its check here: a ggml bug this profile does not follow (docs/ggml-profile.md)
            self.add(
                "GGUF-E035",
                self.dim_offset(t, 0),
                t.name,
                tuple(t.dims),
                f"element count of dims {tuple(t.dims)} does not fit in int64 (ggml's product wraps to {g.nelements} "
                "and skips its check; this profile rejects it)",
            )
            return
        gt = g.ggml_type
        if gt is None or g.ne[0] % gt.block_size:
            return  # E003/E004/E005 say why
        if g.size_check_fails:
            self.add(
                "GGUF-E036",
                self.dim_offset(t, 0),
                t.name,
                tuple(t.dims),
                f"byte size of dims {tuple(t.dims)} ({gt.name}) does not fit in size_t",
            )

    def suspects(self, fine: np.ndarray) -> list[Tensor]:
        """The tensors, in file order, that a check's columns do not clear (``fine`` False): the only ones it visits."""
        tensors = self.f.tensor_list
        return [tensors[i] for i in np.flatnonzero(~fine).tolist()]

    def tensor_types(self) -> None:
        c = self.view.columns
        whole = c.ne[:, 0] % np.maximum(c.block_size, 1).astype(np.uint64) == 0  # dims[0], or 1 without dims
        for t in self.suspects((c.block_size > 0) & whole):
            if not isinstance(t.type, GGMLType):
                self.add(
                    "GGUF-E003",
                    self.type_offset(t),
                    t.name,
                    int(t.type),
                    f"type {int(t.type)} is not a ggml type (0..{GGML_TYPE_COUNT - 1})",
                )
            elif t.type.removed:
                self.add(
                    "GGUF-E004",
                    self.type_offset(t),
                    t.name,
                    int(t.type),
                    f"type {t.type.name} ({int(t.type)}) has been removed from ggml",
                )
            elif (t.dims[0] if t.dims else 1) % t.type.block_size:
                row = t.dims[0] if t.dims else 1
                self.add(
                    "GGUF-E005",
                    self.dim_offset(t, 0) if t.dims else self.ndims_offset(t),
                    t.name,
                    row,
                    f"{row} elements per row{' (n_dims 0: one element)' if not t.dims else ''} is not a multiple "
                    f"of the {t.type.name} block size {t.type.block_size}",
                )

    def tensor_bounds(self) -> None:
        # ggml's own data offset in the ggml profile (it may read general.alignment from another key)
        base = self.view.data_offset if self.profile == GGML else None
        c, tensors = self.view.columns, self.f.tensor_list
        # where each tensor's data starts, cleared only below 2**63 (no sum below wraps in uint64)
        if base is None:
            try:
                starts = np.fromiter((t.offset for t in tensors), np.uint64, len(tensors))
            except OverflowError:  # an offset past 2**64: every tensor is visited
                starts = np.full(len(tensors), 2**64 - 1, np.uint64)
        else:
            low = (c.stored_offset < np.uint64(2**62)) & (base < 2**62)
            starts = np.where(low, c.stored_offset + np.uint64(base % 2**62), np.uint64(2**63))
        fine = c.sized & (starts < np.uint64(2**63)) & (starts + c.nbytes.astype(np.uint64) <= np.uint64(self.size))
        for t in self.suspects(fine):
            nbytes = _nbytes(t)
            if nbytes is None:
                continue
            start = t.offset if base is None else base + t.stored_offset
            if start + nbytes > self.size:
                self.add(
                    "GGUF-E002",
                    start,
                    t.name,
                    nbytes,
                    f"data [{start}, {start + nbytes}) runs past the end of the file ({self.size} bytes)",
                )

    def offsets_aligned(self) -> None:
        a = self.f.alignment
        c = self.view.columns
        fine = c.stored_offset % np.uint64(a) == 0 if 0 < a < 2**64 else np.zeros(len(c.stored_offset), bool)
        for t in self.suspects(fine):
            if t.stored_offset % a:
                self.add(
                    "GGUF-E037",
                    self.offset_offset(t),
                    t.name,
                    t.stored_offset,
                    f"offset {t.stored_offset} is not a multiple of ALIGNMENT {a}",
                )

    # ---------------------------------------------------------------- ggml's data layout

    def ggml_layout(self) -> None:
        """Offsets exactly as ggml computes them, the size overflow check, and the data present."""
        f = self.f
        if any(
            r.rule
            in (
                "GGUF-E027",
                "GGUF-E028",
                "GGUF-E030",
                "GGUF-E032",
                "GGUF-E033",
                "GGUF-E034",
                "GGUF-E035",
                "GGUF-E036",
                "GGUF-E003",
                "GGUF-E004",
                "GGUF-E005",
            )
            for r in self.findings
        ):
            return  # ggml stops before it lays out the data
        view = self.view
        a, data_offset = view.alignment, view.data_offset
        assert a is not None and data_offset is not None  # else GGUF-E027/E028
        if not view.reaches_data:
            self.add(
                "GGUF-E041",
                f.metadata_end,
                None,
                data_offset,
                f"the file ends at {self.size}, before the data section starts at {data_offset} "
                f"(the end of the tensor infos, {f.metadata_end}, padded to ALIGNMENT {a})",
            )
            return
        size = self.ggml_offsets(a)
        if size is None:
            return
        if f.tensor_list and data_offset + size > self.size:
            self.add(
                "GGUF-E040",
                data_offset,
                None,
                size,
                f"data section needs {size} bytes from offset {data_offset}, the file has {max(0, self.size - data_offset)}",
            )

    def ggml_offsets(self, a: int) -> int | None:
        """Each tensor's offset against the sum of the padded sizes before it (GGUF-E038) and that sum's overflow
        (GGUF-E039): the padded total, or None after a finding. In numpy when every tensor is sized and the
        total is far below 2**63; else tensor by tensor in size_t arithmetic."""
        c = self.view.columns
        padded = (c.nbytes + (a - 1)) // a * a  # below 2**62 + a for a sized tensor
        if c.sized.all() and float(padded.sum(dtype=np.float64)) < 2.0**62:
            ends = np.cumsum(padded)
            expected = ends - padded
            wrong = np.flatnonzero(c.stored_offset != expected.astype(np.uint64))
            if not wrong.size:
                return int(ends[-1]) if ends.size else 0
            i = int(wrong[0])
            self.misplaced(self.f.tensor_list[i], int(expected[i]))
            return None
        size = 0
        for g in self.view.tensors:
            t = g.tensor
            if t.stored_offset != size:
                self.misplaced(t, size)
                return None
            padded_size = _pad(g.nbytes, a)
            if _SIZE_MAX - size < padded_size:
                self.add(
                    "GGUF-E039",
                    self.offset_offset(t),
                    t.name,
                    padded_size,
                    f"data size {size} + {padded_size} overflows size_t",
                )
                return None
            size += padded_size
        return size

    def misplaced(self, t: Tensor, expected: int) -> None:
        """GGUF-E038: tensor ``t`` is not at the offset ggml computes for it."""
        self.add(
            "GGUF-E038",
            self.offset_offset(t),
            t.name,
            t.stored_offset,
            f"offset {t.stored_offset}, ggml expects {expected}",
        )

    # ---------------------------------------------------------------- standardized keys (spec)

    def standard_keys(self) -> None:
        spec = load_spec()
        fields = self.f.fields
        arch_fld = fields.get("general.architecture")
        arch = arch_fld.value if arch_fld is not None and arch_fld.type == ValueType.STRING else None
        if arch_fld is None:
            self.add("GGUF-E050", None, "general.architecture", None, "general.architecture is missing")
        elif arch is not None:
            if not _ARCH_SYNTAX.fullmatch(arch):
                self.add(
                    "GGUF-E051",
                    self.value_offset(arch_fld),
                    arch_fld.key,
                    arch,
                    f"architecture {shorten(arch)} is not [a-z0-9]+",
                )
            elif arch not in known_architectures(spec):
                self.add(
                    "GGUF-W001",
                    self.value_offset(arch_fld),
                    arch_fld.key,
                    arch,
                    f"architecture {shorten(arch)} is not one the spec names",
                )
        tensors = self.model_tensors if self.model_tensors is not None else self.f.tensor_list
        quantized = [t for t in tensors if isinstance(t.type, GGMLType) and t.type.quantized]
        if quantized and "general.quantization_version" not in fields:
            self.add(
                "GGUF-E052",
                None,
                "general.quantization_version",
                None,
                f"general.quantization_version is missing but tensor {shorten(quantized[0].name)} is {quantized[0].type_name}",
            )
        self.key_types()
        if arch is not None:
            for key in required_keys(spec).get(arch, []):
                if key not in fields:
                    self.add(
                        "GGUF-E054", None, key, None, f"{key} is missing (required for architecture {shorten(arch)})"
                    )

    def key_types(self) -> None:
        """GGUF-E053: each standardized key the file holds has its specified type."""
        fields = self.f.fields
        types = key_types(load_spec())
        templates = {k[len(_LLM) :]: v for k, v in types.items() if k.startswith(_LLM)}
        typed = _typed_keys(self.key_text, types, templates, fields)
        for fld in fields.records:
            if typed is not None and fld.key not in typed:
                continue
            want = _key_type(fld.key, types, templates)
            if want is not None and not _type_matches(fld, want):
                have = fld.type.name + (f"[{fld.element_type.name}]" if fld.element_type is not None else "")
                self.add(
                    "GGUF-E053", self.value_offset(fld), fld.key, have, f"{fld.key} is {have}, the spec says {want}"
                )

    def tokenizer(self) -> None:
        fields = self.f.fields
        tokens = fields.get("tokenizer.ggml.tokens")
        if tokens is None or tokens.type != ValueType.ARRAY:
            return
        n = len(tokens.value)
        for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            fld = fields.get(key)
            if fld is not None and fld.type == ValueType.ARRAY and len(fld.value) != n:
                at = self.value_offset(fld)
                self.add(
                    "GGUF-E055",
                    at + 4 if at is not None else None,
                    key,
                    len(fld.value),
                    f"{key} has {len(fld.value)} items, tokenizer.ggml.tokens has {n}",
                )
        for fld in fields.records:
            if (
                fld.key.startswith("tokenizer.ggml.")
                and fld.key.endswith("_token_id")
                and fld.type.is_integer
                and not 0 <= fld.value < n
            ):
                self.add(
                    "GGUF-E056",
                    self.value_offset(fld),
                    fld.key,
                    fld.value,
                    f"token id {fld.value} is outside the {n} tokens",
                )

    def file_type(self) -> None:
        fld = self.f.fields.get("general.file_type")
        if fld is None or not fld.type.is_integer:
            return
        v, at = fld.value, self.value_offset(fld)
        spec_values = load_spec()["enums"]["general.file_type"]["values"]
        if v not in spec_values.values():
            self.add("GGUF-W002", at, fld.key, v, f"general.file_type {v} is not in the spec's table")
        main = FILE_TYPE_MAIN.get(v)
        tensors = self.model_tensors  # None: a first shard alone, whose model's tensors are not known
        present = {t.type for t in tensors or ()}
        if main is not None and tensors and main not in present:
            names = ", ".join(sorted(x.name if isinstance(x, GGMLType) else str(x) for x in present))
            self.add(
                "GGUF-E057",
                at,
                fld.key,
                v,
                f"general.file_type {v} ({FileType(v).name}) means mostly {main.name}, but the tensors are {names}",
            )

    def padding(self) -> None:
        pad = self.f.padding
        if pad.strip(b"\0"):
            i = next(i for i, b in enumerate(pad) if b)
            self.add("GGUF-W003", self.f.metadata_end + i, None, pad[i], f"padding byte {i} is 0x{pad[i]:02x}")


#: The tensor type each ``general.file_type`` says most tensors have (llama.cpp's choice for the "mostly" type).
FILE_TYPE_MAIN: dict[int, GGMLType] = {
    FileType.ALL_F32: GGMLType.F32,
    FileType.MOSTLY_F16: GGMLType.F16,
    FileType.MOSTLY_Q4_0: GGMLType.Q4_0,
    FileType.MOSTLY_Q4_1: GGMLType.Q4_1,
    FileType.MOSTLY_Q4_1_SOME_F16: GGMLType.Q4_1,
    FileType.MOSTLY_Q8_0: GGMLType.Q8_0,
    FileType.MOSTLY_Q5_0: GGMLType.Q5_0,
    FileType.MOSTLY_Q5_1: GGMLType.Q5_1,
    FileType.MOSTLY_Q2_K: GGMLType.Q2_K,
    FileType.MOSTLY_Q3_K_S: GGMLType.Q3_K,
    FileType.MOSTLY_Q3_K_M: GGMLType.Q3_K,
    FileType.MOSTLY_Q3_K_L: GGMLType.Q3_K,
    FileType.MOSTLY_Q4_K_S: GGMLType.Q4_K,
    FileType.MOSTLY_Q4_K_M: GGMLType.Q4_K,
    FileType.MOSTLY_Q5_K_S: GGMLType.Q5_K,
    FileType.MOSTLY_Q5_K_M: GGMLType.Q5_K,
    FileType.MOSTLY_Q6_K: GGMLType.Q6_K,
    FileType.MOSTLY_IQ2_XXS: GGMLType.IQ2_XXS,
    FileType.MOSTLY_IQ2_XS: GGMLType.IQ2_XS,
    FileType.MOSTLY_Q2_K_S: GGMLType.Q2_K,
    FileType.MOSTLY_IQ3_XS: GGMLType.IQ3_S,
    FileType.MOSTLY_IQ3_XXS: GGMLType.IQ3_XXS,
    FileType.MOSTLY_IQ1_S: GGMLType.IQ1_S,
    FileType.MOSTLY_IQ4_NL: GGMLType.IQ4_NL,
    FileType.MOSTLY_IQ3_S: GGMLType.IQ3_S,
    FileType.MOSTLY_IQ3_M: GGMLType.IQ3_S,
    FileType.MOSTLY_IQ2_S: GGMLType.IQ2_S,
    FileType.MOSTLY_IQ2_M: GGMLType.IQ2_S,
    FileType.MOSTLY_IQ4_XS: GGMLType.IQ4_XS,
    FileType.MOSTLY_IQ1_M: GGMLType.IQ1_M,
    FileType.MOSTLY_BF16: GGMLType.BF16,
    FileType.MOSTLY_TQ1_0: GGMLType.TQ1_0,
    FileType.MOSTLY_TQ2_0: GGMLType.TQ2_0,
    FileType.MOSTLY_MXFP4_MOE: GGMLType.MXFP4,
    FileType.MOSTLY_NVFP4: GGMLType.NVFP4,
    FileType.MOSTLY_Q1_0: GGMLType.Q1_0,
    FileType.MOSTLY_Q2_0: GGMLType.Q2_0,
}


# --------------------------------------------------------------------------- spec tables


def known_architectures(spec: dict[str, Any]) -> list[str]:
    """The architectures spec/ names: the document's list plus the recorded additions."""
    return list(spec["known_architectures"]) + list(spec.get("additions", {}).get("known_architectures", []))


def required_keys(spec: dict[str, Any]) -> dict[str, list[str]]:
    """Architecture -> the keys its section requires (document and additions)."""
    archs = dict(spec["architectures"])
    archs.update(spec.get("additions", {}).get("architectures", {}))
    return {a: list(v["required"]) for a, v in archs.items()}


def key_types(spec: dict[str, Any]) -> dict[str, str]:
    """Standardized key (``[llm].`` templates included) -> its spec type, for keys that have one."""
    keys = dict(spec["keys"])
    keys.update(spec.get("additions", {}).get("keys", {}))
    return {k: v for k, v in keys.items() if v}


_NOT_ARCH = ("general.", "tokenizer.", "split.")
_LLM = "[llm]."


def _typed_keys(
    text: str | None, types: dict[str, str], templates: dict[str, str], fields: Mapping[str, Any]
) -> set[str] | None:
    """A superset of the keys that :func:`_key_type` gives a type, found at once over ``text`` (the
    keys, one per line: :func:`_joined_keys`): the keys named in ``types``, and the lines ending in
    ``.X`` for a template ``X``. None (look at every key) when there is no such text.

    >>> sorted(_typed_keys("k.1\\nllama.context_length\\ngeneral.name", {"general.name": "string"},
    ...                    {"context_length": "uint64"}, {"general.name": 1}))
    ['general.name', 'llama.context_length']
    """
    if text is None:
        return None
    found = {k for k in types if k in fields}
    if templates:
        ends = re.compile(r"\.(?:" + "|".join(map(re.escape, sorted(templates))) + r")$", re.MULTILINE)
        for m in ends.finditer(text):
            found.add(text[text.rfind("\n", 0, m.start()) + 1 : m.end()])
    return found


def _key_type(key: str, types: dict[str, str], templates: dict[str, str]) -> str | None:
    """The spec type of ``key``: ``types`` by name, else the ``[llm].X`` template (``templates``: X ->
    type) for ``<arch>.X``; whisper's keys add an encoder/decoder segment (``whisper.encoder.X``).

    >>> _key_type("llama.context_length", {}, {"context_length": "uint64"})
    'uint64'
    >>> _key_type("whisper.encoder.context_length", {}, {"context_length": "uint64"})
    'uint64'
    >>> _key_type("general.context_length", {}, {"context_length": "uint64"}) is None
    True
    """
    t = types.get(key)
    if t is not None or key.startswith(_NOT_ARCH):
        return t
    dot = key.find(".")
    if dot < 0:
        return None
    t = templates.get(key[dot + 1 :])
    if t is None and key.startswith("whisper."):
        second = key.find(".", dot + 1)
        if second >= 0:
            t = templates.get(key[second + 1 :])
    return t


_SPEC_TYPES = {
    "uint8": "UINT8",
    "int8": "INT8",
    "uint16": "UINT16",
    "int16": "INT16",
    "uint32": "UINT32",
    "int32": "INT32",
    "float32": "FLOAT32",
    "bool": "BOOL",
    "string": "STRING",
    "uint64": "UINT64",
    "int64": "INT64",
    "float64": "FLOAT64",
}


def _type_matches(fld: Field, want: str) -> bool:
    m = re.fullmatch(r"array\[(\w+)\]", want)
    if m:
        return (
            fld.type == ValueType.ARRAY
            and fld.element_type is not None
            and fld.element_type.name == _SPEC_TYPES[m.group(1)]
        )
    if want == "uint64":
        return fld.type in (ValueType.UINT64, ValueType.UINT32)
    return fld.type.name == _SPEC_TYPES[want]


# --------------------------------------------------------------------------- helpers


def _known(t: Any) -> GGMLType | None:
    return t if isinstance(t, GGMLType) and not t.removed else None


def _pad(x: int, n: int) -> int:
    return ((x + n - 1) // n * n) % 2**64  # GGML_PAD in size_t arithmetic (wraps)


def _nbytes(t: Tensor) -> int | None:
    """Bytes of a tensor's data (exact integer), None when the type does not say."""
    gt = _known(t.type)
    if gt is None:
        return None
    try:
        return tensor_nbytes(gt, t.dims)
    except ValueError:
        return None


def _raw(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return int(v) if isinstance(v, BoolByte) else v
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return repr(v)


def _clip(text: str | None, limit: int = 120) -> str | None:
    """A name or message cut to ``limit`` characters, its full length said: findings stay small whatever the file holds."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def _bounded(value: Any) -> Any:
    """A finding's value kept as is when small; long strings, bytes and sequences as a short description."""
    if isinstance(value, (str, bytes, bytearray)) and len(value) > 120:
        return shorten(value, 120)
    if isinstance(value, (list, tuple)) and len(value) > 16:
        return shorten(value, 120)
    return value
