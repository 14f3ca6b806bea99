"""The ``gguf-schema`` command line: argparse and printing, and nothing else.

Each subcommand is a thin layer over the library: it parses arguments, calls the public API and
prints (results on stdout, notes and progress on stderr). The library never prints; its long
operations take a progress callback, which the commands supply (:mod:`.progress`).

Exit codes: 0 success, 1 findings or differences, 2 unreadable input, a refused write or a usage
error, 3 a truncated file (``info``, ``dump``, ``tensors``, ``get`` print what they can, with a
warning naming the missing bytes and the tensors affected). A closed output pipe
(``gguf-schema dump f | head``) ends any command quietly. Output encoding, JSON and the reading
options (``--limit NAME=VALUE``, ``--no-mmap``) are the conventions of :mod:`.conventions`;
library warnings (:class:`~gguf_schema.errors.GGUFWarning`) print as
``gguf-schema: warning: [RULE] ...`` on stderr.

Modules: :mod:`.commands` (inspect, edit, convert, split, merge, diff, build),
:mod:`.model_commands` (estimate, export), :mod:`.check` (check, rules, audit-spec), :mod:`.generate` (generate, demo),
:mod:`.scan` (scan), :mod:`.quantize` (quantize), :mod:`.audit` (audit), :mod:`.text_values` (typed values from command-line text), :mod:`.progress` (the progress bar),
:mod:`.conventions` (output encoding, the JSON encoder, reading options, warnings, exit codes).

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
from typing import Any, NoReturn

from .. import __version__
from ..check.validate import PROFILES
from ..errors import GGUFError
from ..writer import strict_writes
from . import audit, check, commands, generate, model_commands, quantize, scan
from .conventions import EXIT_ERROR, add_open_options, error, library_warnings, output_streams

__all__ = ["build_parser", "main", "parse_storage_option"]

#: modules that own subcommands: each has ``register_cli(subparsers)`` adding its parsers,
#: each parser with ``set_defaults(func=handler)`` where ``handler(args) -> int`` is the exit code.
COMMAND_MODULES = (generate, commands, model_commands, check, scan, quantize, audit)

#: commands that write GGUF files: they take ``--strict PROFILE``
WRITING_COMMANDS = ("build", "set", "set-file", "delete", "rename", "convert", "split", "merge", "quantize")
#: commands whose output file is positional: ``-o/--output`` is accepted in its place
POSITIONAL_OUTPUT = ("build", "convert", "merge", "split", "export")
#: commands that read no GGUF file of the user's: the reading options (``--limit``, ``--no-mmap``,
#: ``--storage-option``) are not offered by them, and given before them are a usage error
NO_GGUF_INPUT = ("demo", "generate", "rules", "audit-spec")

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


EPILOG = """\
exit status: 0 success; 1 findings or differences (check, diff, audit-spec, tensors --filter);
2 unreadable input, a refused write (--strict) or a usage error; 3 the file is truncated (info,
dump, tensors, get: output printed, a warning names the missing bytes and tensors).
Results go to stdout; notes, warnings ("gguf-schema: warning: [RULE] ...") and progress to stderr."""


class _Parser(argparse.ArgumentParser):
    """argparse with the one error prefix of the command line: usage errors print the usage, then
    ``gguf-schema: error: ...``, and exit 2 (argparse's own would say ``gguf-schema set: error:``)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        error(message)
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gguf-schema",
        description="Inspect, check, edit and convert GGUF model files.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gguf-schema {__version__}")
    add_open_options(parser)
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
    for name, command in sub.choices.items():
        if command.epilog is None:
            command.epilog = EPILOG
            command.formatter_class = argparse.RawDescriptionHelpFormatter
        if name in NO_GGUF_INPUT:
            continue
        add_open_options(command, suppress=True)  # also accepted after the command
        command.add_argument(
            "--storage-option",
            dest="storage_after",
            action="append",
            type=parse_storage_option,
            default=argparse.SUPPRESS,
            metavar="KEY=VALUE",
            help=_STORAGE_HELP,
        )
    for name in WRITING_COMMANDS:
        if name in sub.choices and not any("--strict" in a.option_strings for a in sub.choices[name]._actions):
            sub.choices[name].add_argument(
                "--strict",
                choices=PROFILES,
                metavar="PROFILE",
                help=f"refuse to write a file that breaks an error rule of PROFILE ({', '.join(PROFILES)}); "
                "without it, broken rules are warnings",
            )
    for name in POSITIONAL_OUTPUT:
        if name in sub.choices:
            _optional_output(sub.choices[name])
    return parser


def _optional_output(p: argparse.ArgumentParser) -> None:
    """Let ``-o/--output OUT`` stand for a command's positional output (both forms work)."""
    for action in p._actions:
        if action.dest == "output" and not action.option_strings:
            action.nargs = "?"
            action.default = None
            p.add_argument("-o", "--output", dest="output_option", metavar=action.metavar, help="the output file")
            return


def _resolve_output(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not hasattr(args, "output_option"):
        return
    given = [x for x in (args.output, args.output_option) if x is not None]
    if len(given) == 2 and given[0] != given[1]:
        parser.error(f"{args.command}: the output is given twice ({given[0]} and -o {given[1]})")
    if not given:
        parser.error(f"{args.command}: the output file is required (OUT or -o OUT)")
    args.output = given[0]


class _NoteHandler(logging.Handler):
    """Prints what the library notes while a command runs (e.g. a server without range requests) on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"gguf-schema: note: {record.getMessage()}", file=sys.stderr)


def _error(message: str) -> None:
    with output_streams():
        error(message)


def _reading_options_apply(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The reading options given before a command that reads no GGUF file are a usage error."""
    if args.command not in NO_GGUF_INPUT:
        return
    given = [
        flag
        for flag, present in (
            ("--limit", args.limit_before),
            ("--no-mmap", args.no_mmap),
            ("--storage-option", args.storage_before),
        )
        if present
    ]
    if given:
        names = given[0] if len(given) == 1 else ", ".join(given[:-1]) + " and " + given[-1]
        parser.error(f"{args.command} reads no GGUF file, so {names} {'does' if len(given) == 1 else 'do'} not apply")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _resolve_output(parser, args)
    _reading_options_apply(parser, args)
    options = (args.storage_before or []) + getattr(args, "storage_after", [])
    args.storage_options = dict(options) or None
    library_log = logging.getLogger("gguf_schema")
    notes, level = _NoteHandler(logging.INFO), library_log.level
    library_log.addHandler(notes)
    library_log.setLevel(logging.INFO)
    try:
        with output_streams(), library_warnings(), strict_writes(getattr(args, "strict", None)):
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
        _error(str(e))
        return EXIT_ERROR
    except OSError as e:
        _error(f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))
        return EXIT_ERROR
    finally:
        library_log.removeHandler(notes)
        library_log.setLevel(level)
