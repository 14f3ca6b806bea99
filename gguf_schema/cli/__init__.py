"""The ``gguf-schema`` command line: argparse and printing, and nothing else.

Each subcommand is a thin layer over the library: it parses arguments, calls the public API and
prints (results on stdout, notes and progress on stderr). The library never prints; its long
operations take a progress callback, which the commands supply (:mod:`.progress`).

Exit codes: 0 success, 1 findings or differences, 2 unreadable input or usage error. A closed
output pipe (``gguf-schema dump f | head``) ends a command quietly.

Modules: :mod:`.commands` (inspect, edit, convert, split, merge, diff, build),
:mod:`.model_commands` (estimate, export), :mod:`.check` (check, rules, audit-spec), :mod:`.generate` (generate, demo),
:mod:`.scan` (scan), :mod:`.text_values` (typed values from command-line text), :mod:`.progress` (the progress bar).

Remote files: every command that reads a file takes a URL too (``https://``, ``hf://``, ``s3://``
...; writing stays local), and ``--storage-option KEY=VALUE`` (repeatable, before or after the
command) passes options to the URL's fsspec backend: VALUE is read as JSON when it parses as JSON
(``anon=true``, ``headers={"Authorization": "Bearer ..."}``), else as text. What the library notes
about how a remote file is read (a server without range requests) is printed on stderr.

>>> parse_storage_option('client_kwargs={"region_name": "eu-west-1"}'), parse_storage_option("token=hf_x")
(('client_kwargs', {'region_name': 'eu-west-1'}), ('token', 'hf_x'))
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import GGUFError
from . import audit, check, commands, generate, model_commands, scan

__all__ = ["build_parser", "main", "parse_storage_option"]

#: modules that own subcommands: each has ``register_cli(subparsers)`` adding its parsers,
#: each parser with ``set_defaults(func=handler)`` where ``handler(args) -> int`` is the exit code.
COMMAND_MODULES = (generate, commands, model_commands, check, scan, audit)

_STORAGE_HELP = (
    "option for the fsspec backend of URLs (credentials, endpoints), repeatable: "
    "VALUE is JSON when it parses as JSON, else text (e.g. anon=true, token=hf_xxx)"
)


def parse_storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> ``(KEY, VALUE)``, VALUE read as JSON when it parses as JSON, else kept as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gguf-schema", description="Inspect, check, edit and convert GGUF model files."
    )
    parser.add_argument(
        "--storage-option",
        dest="storage_before",
        action="append",
        type=parse_storage_option,
        metavar="KEY=VALUE",
        help=_STORAGE_HELP,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register_cli(sub)
    for command in sub.choices.values():  # also accepted after the command
        command.add_argument(
            "--storage-option",
            dest="storage_after",
            action="append",
            type=parse_storage_option,
            default=argparse.SUPPRESS,
            metavar="KEY=VALUE",
            help=_STORAGE_HELP,
        )
    return parser


class _NoteHandler(logging.Handler):
    """Prints what the library notes while a command runs (e.g. a server without range requests) on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"gguf-schema: note: {record.getMessage()}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    options = (args.storage_before or []) + getattr(args, "storage_after", [])
    args.storage_options = dict(options) or None
    library_log = logging.getLogger("gguf_schema")
    notes, level = _NoteHandler(logging.INFO), library_log.level
    library_log.addHandler(notes)
    library_log.setLevel(logging.INFO)
    try:
        rc = args.func(args)
        sys.stdout.flush()
        return int(rc)
    except BrokenPipeError:
        # the reader of our output went away (`| head`): stop quietly, and keep Python's own
        # flush at exit from failing on the closed pipe again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except GGUFError as e:
        print(f"gguf-schema: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"gguf-schema: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    finally:
        library_log.removeHandler(notes)
        library_log.setLevel(level)
