"""The ``audit`` command: the audit of untrusted GGUF files (:mod:`gguf_schema.check.audit`), printed as text, JSON or SARIF.

Exit codes (:mod:`.conventions`): ``EXIT_OK`` no finding at warning severity or above,
``EXIT_FINDINGS`` such findings, ``EXIT_ERROR`` a file could not be read (or none was given).

>>> [c.name for c in COMMANDS]
['audit']
"""

from __future__ import annotations

import argparse
import json

from .. import GGUFError, open_split
from .. import open as open_gguf
from ..check import AUDIT_RULES, AuditResult, audit, to_sarif
from ..check.validate import split_place
from .command import Family, Trait, arg
from .conventions import EXIT_ERROR, EXIT_OK, error, open_options, plural, write_json

__all__ = ["COMMANDS"]

COMMANDS = Family()


def _audit(args: argparse.Namespace, src: str) -> list[AuditResult]:
    """The audit of ``src`` opened as the global options say (limits, mmap, storage options): one report,
    or, for the first shard of a split model (which stands for its model: a loader reads every shard),
    one per shard; a set that cannot be assembled adds an unreadable report saying why."""
    try:
        f = open_gguf(src, lazy=True, **open_options(args))
    except GGUFError as e:
        return [AuditResult(src, readable=False, error=str(e))]
    with f:
        result = audit(f, render=args.render, read_gaps=True if args.read_gaps else None)
        result.source = src
        place = split_place(f)
    if place is None or place[0] != 0:
        return [result]
    try:
        model = open_split(src, lazy=True, **open_options(args))
    except GGUFError as e:
        return [result, AuditResult(src, readable=False, error=f"the split model it starts cannot be read: {e}")]
    with model:
        results = [result]
        for shard, shard_path in zip(model.shards[1:], model.paths[1:], strict=True):
            later = audit(shard, render=args.render, read_gaps=True if args.read_gaps else None)
            later.source = shard_path
            results.append(later)
        return results


@COMMANDS.command(
    "audit",
    "audit untrusted GGUF files: shadowed keys, chat templates, hidden characters, unread bytes",
    arg("files", nargs="*", metavar="FILE_OR_URL"),
    arg("--json", action="store_true", help="print the reports as JSON (same as --format json)"),
    arg("--format", choices=("text", "json", "sarif"), default="text", help="output format (default text)"),
    arg("--sarif", metavar="OUT", default=None, help="also write a SARIF 2.1.0 log to OUT ('-': stdout)"),
    arg(
        "--render",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="render every template in Jinja's sandbox, in one child process per file (the default); --no-render "
        "leaves only the static analysis, which is weaker",
    ),
    arg(
        "--read-gaps",
        action="store_true",
        help="for URLs too, fetch the small padding and gap ranges to check their contents (local files: always)",
    ),
    arg("--rules", action="store_true", help="list the audit's rules and exit"),
    description="Audit GGUF files (paths or URLs; of a URL only the header is fetched) for what their loader will "
    "run and what hides from other tools. The first shard of a split model stands for its model: every shard "
    "is audited. Exit status: 0 nothing at warning or above, 1 findings, 2 a file could not be read.",
    traits=Trait.READS,
)
def _cmd_audit(args: argparse.Namespace) -> int:
    if args.rules:
        for rule in AUDIT_RULES.values():
            print(f"{rule.id} {rule.severity:7} {rule.title}: {rule.description}")
        return EXIT_OK
    if not args.files:
        error("audit: give at least one FILE_OR_URL (or --rules)")
        return EXIT_ERROR
    reports: list[AuditResult] = []
    for src in args.files:
        done = {r.source for r in reports if r.readable}
        if src not in done:  # a shard already audited with its first shard
            reports += [r for r in _audit(args, src) if r.source not in done]
    fmt = "json" if args.json else args.format
    if args.sarif is not None:
        if args.sarif == "-":
            write_json(to_sarif(reports), indent=2)
        else:
            with open(args.sarif, "w", encoding="utf-8") as out:
                out.write(json.dumps(to_sarif(reports), indent=2, ensure_ascii=False) + "\n")
    if fmt == "json":
        write_json({"reports": [r.to_dict() for r in reports]}, indent=2)
    elif fmt == "sarif":
        if args.sarif != "-":
            write_json(to_sarif(reports), indent=2)
    elif args.sarif != "-":
        for r in reports:
            name = r.source or "<input>"
            if not r.readable:
                print(f"{name}: unreadable: {r.error}")
                continue
            counts = {s: sum(f.severity == s for f in r.findings) for s in ("error", "warning", "info")}
            verdict = "flagged" if r.flagged else "clean"
            fetched = f"; {r.bytes_read:,} bytes fetched" if r.bytes_read is not None else ""
            print(
                f"{name}: {verdict} ({plural(counts['error'], 'error')}, {plural(counts['warning'], 'warning')}, "
                f"{plural(counts['info'], 'note')}{fetched})"
            )
            for f in r.findings:
                print(f"  {f}")
                if f.chain:
                    print("    chain: " + " > ".join(f.chain))
            for note in r.notes:
                print(f"  note: {note}")
    codes = [r.exit_code for r in reports]
    return EXIT_ERROR if EXIT_ERROR in codes else max(codes, default=EXIT_OK)
