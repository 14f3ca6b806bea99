"""Validation: every rule a GGUF file can break, checked under a strictness profile.

This package owns the rules, the checks behind them, the :class:`Report` they produce, and
:func:`require` (what ``gguf_schema.open(..., strict=PROFILE)`` runs). Each rule is declared once,
beside the check that reports it, in the module of its concern: :mod:`.header`, :mod:`.keys`,
:mod:`.values`, :mod:`.alignment`, :mod:`.tensors`, :mod:`.layout` (ggml's data layout, the
padding), :mod:`.standard` (the spec's standardized keys); :mod:`.core` holds what a rule, a check,
a finding and a report are, and the :class:`~.core.Checker` the checks run on. The rule table
:data:`RULES` is gathered from the checks' declarations (:data:`CHECKS`). The ``gguf-schema check`` and ``rules`` commands print them (:mod:`gguf_schema.cli`).
Each rule has an id (``GGUF-E0nn`` for errors, ``GGUF-W0nn`` for warnings), a one-line
statement, the spec sentence or ggml behaviour it comes from, and the profiles it belongs to:

``spec``
    what the GGUF specification text requires (``spec/gguf.json`` at the top of the repository holds its facts).
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
from collections.abc import Mapping
from typing import Any

from ...errors import GGUFError, GGUFValidationError
from ...model import GGUFFile
from ...reader import read
from .alignment import alignment_key
from .core import E001, GGML, PROFILES, SPEC, Check, Checker, Finding, Report, Rule, split_place, unreadable
from .header import version_and_order
from .keys import key_names
from .layout import ggml_layout, padding
from .standard import file_type, key_types, standard_keys, tokenizer
from .tensors import offsets_aligned, tensor_bounds, tensor_infos, tensor_types
from .values import value_encoding

__all__ = [
    "CHECKS",
    "PROFILES",
    "RULES",
    "Finding",
    "Report",
    "Rule",
    "check",
    "checks_for",
    "require",
    "run",
    "split_place",
    "validate",
]

#: Every check, in the order a profile runs them.
CHECKS: tuple[Check, ...] = (
    version_and_order,
    key_names,
    value_encoding,
    alignment_key,
    tensor_infos,
    tensor_types,
    tensor_bounds,
    ggml_layout,
    offsets_aligned,
    key_types,
    standard_keys,
    tokenizer,
    file_type,
    padding,
)

#: The rule table: every rule the validator knows, keyed by id, in id order (gathered from :data:`CHECKS`).
RULES: dict[str, Rule] = {r.id: r for r in sorted({E001, *(r for c in CHECKS for r in c.rules)}, key=lambda r: r.id)}


def checks_for(c: Checker) -> list[Check]:
    """The checks ``c``'s profile runs on its file, in order."""
    p = c.profile
    out: list[Check] = []
    if p in (SPEC, GGML):
        out += [version_and_order, key_names, value_encoding, alignment_key, tensor_infos]
    out += [tensor_types, tensor_bounds]
    if p == GGML:
        out.append(ggml_layout)
    if p == SPEC:
        out.append(offsets_aligned)
        if c.shard is not None and c.shard[0] > 0:  # a later shard: the model's metadata is in the first
            out.append(key_types)
        else:
            out += [standard_keys, tokenizer, file_type]
        out.append(padding)
    return out


def run(f: GGUFFile, profile: str, model: Any = None) -> Report:
    """The report of ``profile``'s checks over the open file ``f`` (``model`` as for :func:`validate`)."""
    c = Checker(f, profile, model)
    for each in checks_for(c):
        c.run(each)
    return Report(f.name, profile, c.findings)


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
        return run(file_or_path, profile, model)
    path = (
        os.fspath(file_or_path) if isinstance(file_or_path, (str, os.PathLike)) else getattr(file_or_path, "name", None)
    )
    path = path if isinstance(path, str) else None
    try:
        f = read(file_or_path, storage_options=storage_options, lazy=True)  # strings checked in their bytes
    except GGUFError as e:
        return unreadable(path, profile, e.offset, e.path, e.value, str(e))
    with f:
        report = run(f, profile, model)
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
        report = run(f, profile)
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
