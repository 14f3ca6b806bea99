"""The ``scan`` command: the header of many files (paths, folders, globs, URLs), one line or record each.

Exit codes: 0 every file was read, 2 a file could not be read (its record says why) or no file
matched. Verdicts are data here, not failures (``check`` fails on them).

>>> import argparse
>>> sub = argparse.ArgumentParser(prog="gguf-schema").add_subparsers()
>>> register_cli(sub)
>>> sorted(sub.choices)
['scan']
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..check import PROFILES
from ..errors import GGUFError
from ..tools.scan import THREADS, ScanRecord, expand, scan, write_parquet
from .conventions import open_options, positive_int, write_json

__all__ = ["register_cli"]


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _line(r: ScanRecord) -> str:
    if r.error is not None:
        return f"{r.path}: unreadable: {r.error_type}: {r.error}"
    verdicts = " ".join(f"{p}:{'ok' if ok else 'rejected'}" for p, ok in r.verdicts.items())
    types = ",".join(f"{t}x{n}" for t, n in r.type_histogram.items()) or "-"
    shard = f" shard {r.split_no + 1} of {r.split_count}," if r.split_no is not None else ""
    return (
        f"{r.path}: {r.size:,} bytes, v{r.version} {r.byte_order},{shard} {r.architecture or '-'}"
        f" {repr(r.name) if r.name is not None else '-'}, file type {r.file_type or '-'}, {r.tensor_count} tensors ({types}),"
        f" {_human(r.parameter_count)} parameters, vocabulary {r.vocab_size if r.vocab_size is not None else '-'},"
        f" {verdicts}"
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
        print(f"wrote {args.parquet} ({len(records)} records)", file=sys.stderr)
    elif args.json:
        write_json([r.to_dict() for r in records])
    else:
        sys.stdout.write("".join(_line(r) + "\n" for r in records))
    unreadable = sum(not r.readable for r in records)
    print(f"{len(records)} files, {unreadable} unreadable", file=sys.stderr)
    return 2 if unreadable else 0


def register_cli(subparsers: Any) -> None:
    """Add ``scan`` to the ``gguf-schema`` command line."""
    p = subparsers.add_parser(
        "scan",
        help="summarise the headers of many files or URLs (size, model, types, vocabulary, verdicts)",
        description="Read the header of every file matched (local globs with **, folders: every *.gguf under "
        "them, URLs, URL globs through fsspec) a few at a time, and print one line per file: size, version, "
        "architecture, name, file type, tensors by type, parameters, vocabulary size and the verdict of each "
        "validation profile. A file that cannot be read is reported and the scan goes on. "
        "Exit 0 when every file was read, 2 otherwise.",
    )
    p.add_argument("patterns", nargs="+", metavar="PATTERN_OR_URL")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print a JSON list of records")
    out.add_argument("--parquet", metavar="OUT", help="write the records to a Parquet file (needs pyarrow)")
    p.add_argument(
        "--profile", choices=PROFILES, action="append", help="validation profile to report (repeatable; default: all)"
    )
    p.add_argument(
        "--threads", type=positive_int, default=THREADS, metavar="N", help=f"files read at once (default {THREADS})"
    )
    p.set_defaults(func=_cmd_scan)
