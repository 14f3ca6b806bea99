"""The ``check``, ``rules`` and ``audit-spec`` commands: validation and the spec audit, printed.

Exit codes (:mod:`.conventions`): ``check`` ``EXIT_OK`` clean, ``EXIT_FINDINGS`` error findings,
``EXIT_ERROR`` a file could not be read; ``audit-spec`` ``EXIT_OK`` no differences,
``EXIT_FINDINGS`` differences, ``EXIT_ERROR`` an unreadable document or one that states no part
of the spec.

>>> [c.name for c in COMMANDS]
['check', 'rules', 'audit-spec']
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .. import GGUFError, open_split
from .. import open as open_gguf
from ..check import PROFILES, RULES, Finding, Report, audit_spec, validate
from ..check.validate import split_place
from .command import Family, Trait, arg
from .conventions import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, error, open_options, plural, write, write_json

__all__ = ["COMMANDS"]

COMMANDS = Family()


def _validate(args: argparse.Namespace, path: str) -> list[Report]:
    """The reports of ``path`` opened as the global options say (limits, mmap, storage options): one,
    or, for the first shard of a split model (which stands for its model), one per shard, the first
    checked with the model's tensors; a set that cannot be assembled adds a report saying why."""
    try:
        f = open_gguf(
            path, lazy=True, **open_options(args)
        )  # strings are checked in their stored bytes, never all decoded
    except GGUFError as e:
        found = Finding("GGUF-E001", "error", e.offset, e.path, None, f"cannot read the file: {e}")
        return [Report(path, args.profile, [found], readable=False)]
    with f:
        place = split_place(f)
        if place is None or place[0] != 0:
            report = validate(f, args.profile)
            report.path = path
            return [report]
        try:
            model = open_split(path, lazy=True, **open_options(args))
        except GGUFError as e:
            alone = validate(f, args.profile)
            alone.path = path
            why = Finding(
                "GGUF-E001", "error", e.offset, e.path, None, f"the split model it starts cannot be read: {e}"
            )
            return [alone, Report(path, args.profile, [why], readable=False)]
    with model:
        reports = []
        for i, (shard, shard_path) in enumerate(zip(model.shards, model.paths, strict=True)):
            report = validate(shard, args.profile, model=model if i == 0 else None)
            report.path = shard_path
            reports.append(report)
        return reports


#: findings of one rule shown one by one before the rest are counted (``--verbose`` shows all)
SHOWN_PER_RULE = 3


def finding_lines(findings: list[Finding], *, every: bool = False) -> list[str]:
    """The findings as printed: grouped by rule (in the order the rules first appear); a rule with
    more than :data:`SHOWN_PER_RULE` findings shows its first ones and counts the rest in one line
    (a truncated file breaks one rule once per tensor), unless ``every``.

    >>> f = [Finding("GGUF-E002", "error", 10 * i, f"t{i}", None, "runs past the end") for i in range(5)]
    >>> for line in finding_lines([Finding("GGUF-W001", "warning", None, None, None, "odd"), *f]):
    ...     print(line)
    @- GGUF-W001 warning: odd
    @0 GGUF-E002 error [t0]: runs past the end
    @10 GGUF-E002 error [t1]: runs past the end
    ... and 3 more GGUF-E002 errors like these (5 in all; --verbose lists them)
    """
    groups: dict[str, list[Finding]] = {}
    for finding in findings:
        groups.setdefault(finding.rule, []).append(finding)
    lines = []
    for rule, group in groups.items():
        if every or len(group) <= SHOWN_PER_RULE:
            lines += [str(x) for x in group]
            continue
        shown = SHOWN_PER_RULE - 1
        lines += [str(x) for x in group[:shown]]
        lines.append(
            f"... and {len(group) - shown} more {rule} {group[0].severity}s like these "
            f"({len(group)} in all; --verbose lists them)"
        )
    return lines


@COMMANDS.command(
    "check",
    "check GGUF files against the spec, ggml's reader, or readability",
    arg(
        "--profile",
        choices=PROFILES,
        default="ggml",
        help="which rules to apply: ggml (the default: will llama.cpp's reader load it?), spec (the "
        "specification's letter too: architectures and keys it names, ...), lenient (can it be read at all?)",
    ),
    arg("--json", action="store_true", help="print the reports as JSON"),
    arg(
        "--verbose",
        "-v",
        action="store_true",
        help=f"list every finding (by default a rule broken more than {SHOWN_PER_RULE} times shows its first "
        "findings and a count of the rest)",
    ),
    arg("files", nargs="+", metavar="FILE"),
    description="Check GGUF files. The first shard of a split model stands for its model: every shard is "
    "checked, the rules about the model's metadata and tensors on the first, each later shard as a shard. "
    "Exit status: 0 clean, 1 error findings, 2 a file could not be read.",
    traits=Trait.READS,
)
def _cmd_check(args: argparse.Namespace) -> int:
    reports: list[Report] = []
    for path in args.files:
        done = {os.path.abspath(r.path) for r in reports if r.path is not None and r.readable}
        if os.path.abspath(path) not in done:  # a shard already checked with its first shard
            reports += [r for r in _validate(args, path) if r.path is None or os.path.abspath(r.path) not in done]
    if args.json:
        write_json({"profile": args.profile, "reports": [r.to_dict() for r in reports]}, indent=2)
    else:
        for r in reports:
            verdict = "unreadable" if not r.readable else ("ok" if r.ok else "rejected")
            print(
                f"{r.path}: {verdict} under profile {r.profile} ({plural(len(r.errors), 'error')}, "
                f"{plural(len(r.warnings), 'warning')})"
            )
            for line in finding_lines(r.findings, every=args.verbose):
                write(f"  {line}\n")
    if any(not r.readable for r in reports):
        return EXIT_ERROR
    return EXIT_FINDINGS if any(not r.ok for r in reports) else EXIT_OK


@COMMANDS.command(
    "rules",
    "list the validation rules",
    arg("--profile", choices=PROFILES, default=None, help="only the rules of this profile"),
    arg("--json", action="store_true", help="print [{id, severity, profiles, statement, source}]"),
)
def _cmd_rules(args: argparse.Namespace) -> int:
    rules = [r for r in RULES.values() if args.profile is None or args.profile in r.profiles]
    if args.json:
        write_json(
            [
                {
                    "id": r.id,
                    "severity": r.severity,
                    "profiles": [p for p in PROFILES if p in r.profiles],
                    "statement": r.statement,
                    "source": r.source,
                }
                for r in rules
            ]
        )
        return EXIT_OK
    for r in rules:
        print(f"{r.id} {r.severity:7} [{','.join(p for p in PROFILES if p in r.profiles)}] {r.statement}")
        print(f"          source: {r.source}")
    return EXIT_OK


@COMMANDS.command(
    "audit-spec",
    "compare a GGUF spec document with the spec transcription (spec/gguf.json) and the schema",
    arg("spec", metavar="SPEC.md"),
    arg("--json", action="store_true", help="print the report as JSON"),
    description="Exit status: 0 no differences, 1 differences, 2 unreadable document or one that states "
    "no part of the spec (nothing to audit).",
)
def _cmd_audit_spec(args: argparse.Namespace) -> int:
    try:
        text = Path(args.spec).read_text(encoding="utf-8")
    except OSError as e:
        error(f"{e.strerror or e}: {args.spec}")
        return EXIT_ERROR
    except UnicodeDecodeError as e:
        error(f"{args.spec} is not UTF-8 text ({e.reason} at byte {e.start})")
        return EXIT_ERROR
    report = audit_spec(text)
    if args.json:
        write_json({"document": args.spec, **report.to_dict()}, indent=2)
    else:
        print(
            f"{args.spec}: {len(report.differences)} differences"
            + (f"; not covered: {', '.join(report.not_covered)}" if report.not_covered else "")
        )
        for d in report.differences:
            print(f"  {d}")
    return EXIT_OK if report.ok else EXIT_FINDINGS
