"""Checking files: validation profiles (:mod:`.validate`) and the audit of the spec text against the schema (:mod:`.spec_audit`).

>>> import io, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.architecture": "gpt2"})
>>> check(buf.getvalue(), "ggml").ok
True
"""

from . import writing  # noqa: F401  (registers the check the writer runs before every write)
from .spec_audit import AuditReport, audit_spec, load_spec
from .validate import PROFILES, RULES, Finding, Report, Rule, check, require, validate

__all__ = [
    "PROFILES",
    "RULES",
    "AuditReport",
    "Finding",
    "Report",
    "Rule",
    "audit_spec",
    "check",
    "load_spec",
    "require",
    "validate",
]
