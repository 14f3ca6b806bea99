"""The ``scan`` command: the header of many files (paths, folders, globs, URLs), one line or record each.

Exit codes (:mod:`.conventions`): ``EXIT_OK`` every file was read, ``EXIT_ERROR`` a file could not
be read (its record says why) or no file matched. Verdicts are data here, not failures (``check``
fails on them).

>>> [c.name for c in COMMANDS]
['scan']
"""

from __future__ import annotations

import argparse
import sys

from .. import GGUFError, ScanRecord, scan
from ..check import PROFILES
from ..tools.scan import THREADS, expand, write_parquet
from .command import Family, Trait, arg, exclusive
from .conventions import EXIT_ERROR, EXIT_OK, human_count, open_options, positive_int, status, write_json

__all__ = ["COMMANDS"]

COMMANDS = Family()


def _line(r: ScanRecord) -> str:
    if r.error is not None:
        return f"{r.path}: unreadable: {r.error_type}: {r.error}"
    verdicts = " ".join(f"{p}:{'ok' if ok else 'rejected'}" for p, ok in r.verdicts.items())
    types = ",".join(f"{t}x{n}" for t, n in r.type_histogram.items()) or "-"
    shard = f" shard {r.split_no + 1} of {r.split_count}," if r.split_no is not None else ""
    return (
        f"{r.path}: {r.size:,} bytes, v{r.version} {r.byte_order},{shard} {r.architecture or '-'}"
        f" {repr(r.name) if r.name is not None else '-'}, file type {r.file_type or '-'}, {r.tensor_count} tensors ({types}),"
        f" {'?' if r.parameter_count is None else human_count(r.parameter_count)} parameters, vocabulary {r.vocab_size if r.vocab_size is not None else '-'},"
        f" {verdicts}"
    )


@COMMANDS.command(
    "scan",
    "summarise the headers of many files or URLs (size, model, types, vocabulary, verdicts)",
    arg("patterns", nargs="+", metavar="PATTERN_OR_URL"),
    exclusive(
        arg("--json", action="store_true", help="print a JSON list of records"),
        arg("--parquet", metavar="OUT", help="write the records to a Parquet file (needs pyarrow)"),
    ),
    arg("--profile", choices=PROFILES, action="append", help="validation profile to report (repeatable; default: all)"),
    arg("--threads", type=positive_int, default=THREADS, metavar="N", help=f"files read at once (default {THREADS})"),
    description="Read the header of every file matched (local globs with **, folders: every *.gguf under "
    "them, URLs, URL globs through fsspec) a few at a time, and print one line per file: size, version, "
    "architecture, name, file type, tensors by type, parameters, vocabulary size and the verdict of each "
    "validation profile. A file that cannot be read is reported and the scan goes on. "
    "Exit 0 when every file was read, 2 otherwise.",
    traits=Trait.READS,
)
def _cmd_scan(args: argparse.Namespace) -> int:
    options = getattr(args, "storage_options", None)
    paths = expand(args.patterns, storage_options=options)
    if not paths:
        raise GGUFError(f"no file matches {' '.join(args.patterns)}")
    profiles = tuple(args.profile) if args.profile else PROFILES
    records = scan(paths, profiles=profiles, threads=args.threads, **open_options(args))
    if args.parquet:
        write_parquet(records, args.parquet)
        status(f"wrote {args.parquet} ({len(records)} records)")
    elif args.json:
        write_json([r.to_dict() for r in records])
    else:
        sys.stdout.write("".join(_line(r) + "\n" for r in records))
    unreadable = sum(not r.readable for r in records)
    status(f"{len(records)} files, {unreadable} unreadable")
    return EXIT_ERROR if unreadable else EXIT_OK
