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
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .. import __version__, durable
from ..check.validate import PROFILES
from ..errors import GGUFError
from ..writer import strict_writes
from . import audit, check, commands, generate, model_commands, quantize, scan
from .conventions import EXIT_ERROR, EXIT_INTERRUPTED, add_open_options, error, library_warnings, output_streams, write

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
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Ctrl-C (``KeyboardInterrupt``) at any moment ends the command with one line on stderr that
    says what became of each file it was writing, and exit status 130: ``gguf-schema: interrupted;
    FILE unchanged`` (or ``FILE not written``, or ``FILE changed: the edit had committed`` when the
    interrupt came after the commit). The writes record each commit in the same uninterruptible
    step as the commit itself (:func:`gguf_schema.durable.recording`), so the line is always true.
    """
    given: list[argparse.Namespace] = []
    with durable.recording() as writes:
        try:
            return _main(argv, given)
        except KeyboardInterrupt:
            _interrupted(given[0] if given else None, writes)
            return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None, given: list[argparse.Namespace]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    given.append(args)
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


# --------------------------------------------------------------------------- Ctrl-C

#: commands that change the file they are given (an interrupted one "had committed" its edit)
EDIT_COMMANDS = ("set", "set-file", "delete", "rename", "recover")


def _interrupted(args: argparse.Namespace | None, writes: list[durable.WriteRecord]) -> None:
    """The one line printed after Ctrl-C (a second Ctrl-C meanwhile cannot cut it short)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):  # not the main thread: signals go elsewhere anyway
        previous = None
    try:
        with contextlib.suppress(Exception):  # nothing may turn the report into a traceback
            sys.stdout.flush()
        with contextlib.suppress(Exception), output_streams():
            write(interrupted_line(args, writes) + "\n", sys.stderr)
            sys.stderr.flush()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def interrupted_line(args: argparse.Namespace | None, writes: Sequence[durable.WriteRecord]) -> str:
    """What became of the files a command was writing when it was interrupted, in one line.

    >>> from gguf_schema.durable import WriteRecord
    >>> ns = argparse.Namespace(command="set", file="m.gguf", output=None)
    >>> interrupted_line(ns, [WriteRecord(os.path.realpath("m.gguf"), True, False)])
    'gguf-schema: interrupted; m.gguf unchanged'
    >>> interrupted_line(ns, [WriteRecord(os.path.realpath("m.gguf"), True, True)])
    'gguf-schema: interrupted; m.gguf changed: the edit had committed'
    >>> interrupted_line(argparse.Namespace(command="info", file="m.gguf"), [])
    'gguf-schema: interrupted; nothing was written'
    """
    command = getattr(args, "command", None)
    spelled = _paths_as_given(args)
    states: dict[str, tuple[bool, bool]] = {}  # path -> (existed, committed), in order
    for w in writes:
        existed, committed = states.get(w.path, (w.existed, False))
        states[w.path] = (existed, committed or w.committed)
    if not states:
        for path in _declared_targets(args):
            states[os.path.realpath(path)] = (os.path.exists(path), False)
    if not states:
        return "gguf-schema: interrupted; nothing was written"
    what = "edit" if command in EDIT_COMMANDS else "write"
    words = {
        (True, True): f"changed: the {what} had committed",
        (False, True): "written: the write had committed",
        (True, False): "unchanged",
        (False, False): "not written",
    }
    groups: dict[tuple[bool, bool], list[str]] = {}
    for path, state in states.items():
        groups.setdefault(state, []).append(spelled.get(path, path))
    parts = []
    for state, names in groups.items():
        shown = ", ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} other files"
        parts.append(f"{shown} {words[state]}")
    return "gguf-schema: interrupted; " + "; ".join(parts)


def _paths_as_given(args: argparse.Namespace | None) -> dict[str, str]:
    """Real path (symbolic links resolved, as writes record them) -> the path as the user typed it, for
    the files named on the command line."""
    out: dict[str, str] = {}
    for name in ("file", "output", "first_shard", "files"):
        value = getattr(args, name, None)
        for p in value if isinstance(value, list) else [value]:
            if isinstance(p, str) and p and "://" not in p:
                out.setdefault(os.path.realpath(p), p)
    return out


def _declared_targets(args: argparse.Namespace | None) -> list[str]:
    """The file a command would write, as its arguments name it (before any write began)."""
    if args is None or args.command in NO_GGUF_INPUT or args.command == "split":
        return []
    if args.command in EDIT_COMMANDS:
        return [getattr(args, "output", None) or args.file] if args.command != "recover" else list(args.files)
    output = getattr(args, "output", None)
    return [output] if isinstance(output, str) else []
