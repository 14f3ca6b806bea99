"""Checking files, one module or package per concern: validation profiles (:mod:`.validate`: its rules declared
beside their checks, by concern), the check before every write (:mod:`.writing`, which the package root hands to
the writer), the audit of untrusted files (:mod:`.audit`, over ggml's view of a file: :mod:`.ggml_view`), chat
templates (:mod:`.templates`) and the audit of the spec text against the schema (:mod:`.spec_audit`).

>>> import io, gguf_schema
>>> buf = io.BytesIO()
>>> gguf_schema.save(buf, {"general.architecture": "gpt2"})
>>> check(buf.getvalue(), "ggml").ok
True
"""

from .audit import AUDIT_RULES, AuditFinding, AuditResult, audit, to_sarif
from .spec_audit import SpecAuditReport, audit_spec, load_spec
from .validate import PROFILES, RULES, Finding, Report, Rule, check, require, validate

__all__ = [
    "AUDIT_RULES",
    "PROFILES",
    "RULES",
    "AuditFinding",
    "AuditResult",
    "Finding",
    "Report",
    "Rule",
    "SpecAuditReport",
    "audit",
    "audit_spec",
    "check",
    "load_spec",
    "require",
    "to_sarif",
    "validate",
]
