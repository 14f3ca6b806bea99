"""The check of what is about to be written: the validation rules run on a header before the
writer (:mod:`gguf_schema.writer`) puts it on disk.

Every write (``save``, ``GGUFFile.save``, metadata edits, convert, split, merge, build) passes
the header it is about to write through :func:`check_before_write`, which the package
(``gguf_schema/__init__.py``) hands to the writer through the slot :data:`gguf_schema.wiring.header_check`.
The header is read back and checked with the rules of :mod:`.validate` (not a copy):

* by default, each error of the ``ggml`` profile (what llama.cpp's loader would refuse: empty or
  repeated keys, nested arrays, names of 64 bytes or more, more than 4 dimensions ...) and of the
  spec's key rules (``GGUF-E020``/``E021``/``E026``: keys that are not lower_snake_case segments,
  too long, not UTF-8) is a :class:`~gguf_schema.errors.GGUFWarning` carrying the rule id, and
  the file is written;
* with a strict profile (``strict=PROFILE``, a keyword argument of every function that writes a
  GGUF file, passed down to this check), the first error of that profile refuses the write: a
  :class:`~gguf_schema.errors.GGUFValidationError`, nothing written.

Rules about the data section (``GGUF-E002``, ``GGUF-E040``, ``GGUF-E041``) are left out, since it is not written
yet; so are, for the warnings only, the version and byte order the caller chose (``GGUF-E010``,
``E011``, ``E012``).

>>> import io, warnings, numpy as np, gguf_schema
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     gguf_schema.save(io.BytesIO(), {"ok": 0, "bad\\nkey": 2}, {"t": np.zeros((1, 1, 1, 1, 2), np.float32)})
>>> for w in caught:
...     print(w.message)
[GGUF-E033] 't': 5 dimensions, at most 4 allowed
[GGUF-E020] key 'bad\\nkey' is not ASCII lower_snake_case segments separated by '.'
>>> caught[0].message.rule, caught[0].category.__name__
('GGUF-E033', 'GGUFWarning')
>>> gguf_schema.save(io.BytesIO(), {"": 1}, strict="ggml")
Traceback (most recent call last):
...
gguf_schema.errors.GGUFValidationError: GGUF-E022: empty key (at offset 24)
"""

from __future__ import annotations

import sys
import warnings
from typing import IO

from ..errors import GGUFError, GGUFValidationError, GGUFWarning
from ..reader import read
from .validate import run
from .validate.core import E001, GGML, PROFILES, SPEC, Checker, Finding, Report
from .validate.header import E010, E011, E012
from .validate.keys import key_names
from .validate.layout import E040, E041
from .validate.tensors import E002

__all__ = ["DATA_RULES", "VARIANT_RULES", "check_before_write", "findings_before_write"]

#: rules about the data section, which is not written when the header is checked
DATA_RULES = frozenset(r.id for r in (E002, E040, E041))
#: rules about the version and byte order, which the caller chose: never warned about
VARIANT_RULES = frozenset(r.id for r in (E010, E011, E012))


def findings_before_write(header: bytes | memoryview | IO[bytes], profile: str | None = None) -> list[Finding]:
    """The error findings of a header about to be written: under ``profile``, or (None) the
    default set that is warned about (``ggml`` errors and the spec's key rules)."""
    if profile is not None and profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (choose from {', '.join(PROFILES)})")
    try:
        f = read(header, lazy=True)
    except GGUFError as e:
        return [Finding(E001.id, E001.severity, e.offset, e.path, None, f"the header would not read back: {e}")]
    with f:
        if profile is not None:
            found = run(f, profile).findings
        else:
            found = run(f, GGML).findings
            spec_keys = Checker(f, SPEC)
            spec_keys.run(key_names)
            found += spec_keys.findings
            found = [x for x in found if x.rule not in VARIANT_RULES]
    seen: set[tuple[str, str | None]] = set()
    out = []
    for x in found:
        if x.severity == "error" and x.rule not in DATA_RULES and (x.rule, x.name) not in seen:
            seen.add((x.rule, x.name))
            out.append(x)
    return out


def check_before_write(header: bytes | memoryview | IO[bytes], strict: str | None = None) -> None:
    """Refuse (``strict``) or warn about a header about to be written (see the module docstring)."""
    if strict is not None:
        errors = findings_before_write(header, strict)
        if errors:
            first = errors[0]
            raise GGUFValidationError(
                f"{first.rule}: {first.message}",
                finding=first,
                report=Report(None, strict, errors),
                offset=first.offset,
                path=first.name,
                value=first.value,
            )
    for x in findings_before_write(header):
        warnings.warn(GGUFWarning(x.rule, x.message, name=x.name, finding=x), stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside this package."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("gguf_schema."):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
