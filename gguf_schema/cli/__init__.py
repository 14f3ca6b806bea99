"""The ``gguf-schema`` command line: argparse and printing, and nothing else.

Each subcommand is a thin layer over the library: it parses arguments, opens files with the
library's public :func:`gguf_schema.open` (``split=True``, or :func:`gguf_schema.open_split`, for a split model), calls
the public API and prints (results on stdout, notes and progress on stderr). The library never
prints; its long operations take a progress callback, which the commands supply (:mod:`.progress`).

Exit codes: 0 success, 1 findings or differences, 2 unreadable input, a refused write or a usage
error, 3 a truncated file (``info``, ``dump``, ``tensors``, ``get`` print what they can, with a
warning naming the missing bytes and the tensors affected), 130 interrupted. A closed output pipe
(``gguf-schema dump f | head``) ends any command quietly. Output encoding, numbers, JSON, the
reading options (``--limit NAME=VALUE``, ``--no-mmap``) and the exit codes' names
(``EXIT_*``) are the conventions of :mod:`.conventions`; library warnings
(:class:`~gguf_schema.errors.GGUFWarning`) print as ``gguf-schema: warning: [RULE] ...`` on stderr.

One module per command family, each declaring its commands once (:mod:`.command`: name, handler,
help, arguments, traits), the handler beside its arguments; :data:`TABLE` names every command with its
family and help line, so that the parser lists them all and imports only the family of the command
that runs (a command's arguments are added when it is parsed or its help is asked for):

====================  ===============================================================
:mod:`.generate`      ``demo``, ``generate`` (an example model; fixture files)
:mod:`.inspect`       ``info``, ``dump``, ``tensors``, ``get``, ``diff`` (reading, printing)
:mod:`.edit`          ``set``, ``set-file``, ``delete``, ``rename``, ``recover`` (metadata edits)
:mod:`.files`         ``build``, ``convert``, ``split``, ``merge``, ``export`` (whole files written)
:mod:`.quantize`      ``quantize``
:mod:`.estimate`      ``estimate``
:mod:`.check`         ``check``, ``rules``, ``audit-spec``
:mod:`.audit`         ``audit``
:mod:`.scan`          ``scan``
====================  ===============================================================

Beside them: :mod:`.command` (how a command is declared and what its traits add),
:mod:`.conventions`, :mod:`.text_values` (typed values from command-line text) and
:mod:`.progress` (the progress bar). This module assembles the parser from the families and runs
a command (:func:`main`: output streams, library notes and warnings, errors, a closed pipe, Ctrl-C).

Remote files: every command that reads a file takes a URL too (``https://``, ``hf://``, ``s3://``
...; writing stays local), and ``--storage-option KEY=VALUE`` (repeatable, before or after the
command) passes options to the URL's fsspec backend: VALUE is read as JSON when it parses as JSON
(``anon=true``, ``headers={"Authorization": "Bearer ..."}``), else as text. What the library notes
about how a remote file is read (a server without range requests) is printed on stderr.

>>> sorted(COMMANDS)[:6]
['audit', 'audit-spec', 'build', 'check', 'convert', 'delete']
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

from .. import GGUFError, __version__, durable
from .command import Command, HelpFormatter, Trait
from .conventions import (
    EPILOG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    add_open_options,
    add_quiet_option,
    error,
    library_warnings,
    note,
    output_streams,
    parse_storage_option,
    quiet,
    write,
)

__all__ = ["COMMANDS", "TABLE", "build_parser", "console", "main", "parse_storage_option"]

#: every command, in the order ``gguf-schema --help`` lists them: (name, its family's module in this
#: package, its help line). The families declare each command beside its handler; this table names
#: them so that ``--help`` lists every command and a run imports only the family of the command that
#: runs (as pip's table of commands does). tests/test_startup.py holds it to the declarations.
TABLE: tuple[tuple[str, str, str], ...] = (
    ("demo", "generate", "write a small example model, read it back and prove the round trip"),
    ("generate", "generate", "write fixture GGUF files (valid, edge-case, malformed) with a manifest"),
    ("info", "inspect", "summarise a file: format, model, tensor types, parameters, size breakdown"),
    ("dump", "inspect", "list every metadata key with its stored type, and the tensor infos"),
    ("tensors", "inspect", "list tensors: name, type, shape, elements, bytes, offset"),
    ("get", "inspect", "print one metadata value"),
    (
        "diff",
        "inspect",
        "compare two files: header, metadata by key and type, tensors by content (exit 1 if different)",
    ),
    ("set", "edit", "set a metadata key (tensor data is never loaded)"),
    ("set-file", "edit", "set a key to the contents of a file (e.g. a chat template)"),
    ("delete", "edit", "remove a metadata key"),
    ("rename", "edit", "rename a metadata key (position, type and value kept)"),
    ("recover", "edit", "undo the interrupted in-place edit of each FILE (its journal FILE-journal)"),
    ("build", "files", "write a GGUF file from the JSON form (dump --json)"),
    ("convert", "files", "convert a file to another byte order and/or GGUF version"),
    ("split", "files", "split a model into shards OUT_PREFIX-00001-of-0000N.gguf"),
    ("merge", "files", "merge the shards of a split model into one file"),
    ("export", "files", "write the tensors, dequantized, as a safetensors file"),
    (
        "quantize",
        "quantize",
        "quantize a model file as llama-quantize does (presets Q4_K_M, IQ4_XS ...; streamed, atomic)",
    ),
    (
        "estimate",
        "estimate",
        "memory llama.cpp needs to run a model: weights by device, KV cache, recurrent state, compute buffers",
    ),
    ("check", "check", "check GGUF files against the spec, ggml's reader, or readability"),
    ("rules", "check", "list the validation rules"),
    ("audit-spec", "check", "compare a GGUF spec document with the spec transcription (spec/gguf.json) and the schema"),
    ("audit", "audit", "audit untrusted GGUF files: shadowed keys, chat templates, hidden characters, unread bytes"),
    ("scan", "scan", "summarise the headers of many files or URLs (size, model, types, vocabulary, verdicts)"),
)

_FAMILY_OF = {name: family for name, family, _ in TABLE}


def declared(name: str) -> Command:
    """The command ``name`` as its family declares it (the family's module imported now, if not yet)."""
    import importlib

    family = _FAMILY_OF[name]  # KeyError for a name that is no command
    return importlib.import_module(f".{family}", __name__).COMMANDS[name]


class _Commands(Mapping[str, Command]):
    """Every command by name, in ``--help``'s order; a command's family is imported when it is looked up."""

    def __getitem__(self, name: str) -> Command:
        return declared(name)

    def __iter__(self) -> Iterator[str]:
        return iter(_FAMILY_OF)

    def __len__(self) -> int:
        return len(_FAMILY_OF)

    def __contains__(self, name: object) -> bool:
        return name in _FAMILY_OF


#: every command by name (``COMMANDS[name]`` imports the family that declares it)
COMMANDS: Mapping[str, Command] = _Commands()


class _Parser(argparse.ArgumentParser):
    """argparse with the one error prefix of the command line: usage errors print the usage, then
    ``gguf-schema: error: ...``, and exit 2 (argparse's own would say ``gguf-schema set: error:``)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        error(message)
        raise SystemExit(EXIT_ERROR)


def version_text() -> str:
    """What ``gguf-schema --version`` prints: the version, then each compiled module and its state
    (active; off, by ``GGUF_SCHEMA_NO_KERNELS=1``; not built, so the numpy kernels and Python loops
    do its work: the same results, more slowly)."""
    from ..tensors.engine import compiled_modules

    lines = [f"gguf-schema {__version__}"]
    hints = {
        "off": "off (GGUF_SCHEMA_NO_KERNELS=1)",
        "not built": "not built (no C compiler at install: the numpy kernels give the same results, more slowly; "
        "reinstall with a C compiler to build it)",
    }
    for name, state in compiled_modules().items():
        lines.append(f"{name}: {hints.get(state, state)}")
    return "\n".join(lines)


class _Version(argparse.Action):
    """``--version``: argparse's, with the text made when it is asked for (it imports the kernels)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        parser._print_message(version_text() + "\n", sys.stdout)
        parser.exit()


class _CommandParser(_Parser):
    """A command's parser whose arguments are added when it is first used: parsed, or its help or
    usage printed. Until then it holds only its name and help line (from :data:`TABLE`), so building
    the whole parser imports no command's family."""

    def __init__(self, *args: Any, command: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unfilled = command

    def fill(self) -> None:
        """Add the command's arguments, description and handler (importing its family), once."""
        if self._unfilled is not None:
            name, self._unfilled = self._unfilled, None
            declared(name).fill(self)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.fill()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self.fill()
        return super().format_usage()

    def format_help(self) -> str:
        self.fill()
        return super().format_help()


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """The ``gguf-schema`` parser: the global options, then every command.

    Each command's parser has its arguments at once; with ``lazy=True`` (what :func:`main` uses) a
    command's arguments are added, and its family imported, only when that command is parsed or its
    help asked for: the same parser, built without importing every command.
    """
    parser = _Parser(
        prog="gguf-schema",
        description="Inspect, check, edit and convert GGUF model files.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="show the version and the compiled modules, and exit")
    add_quiet_option(parser)
    add_open_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser)
    for name, _family, help in TABLE:
        p = sub.add_parser(name, help=help, epilog=EPILOG, formatter_class=HelpFormatter, command=name)
        if not lazy:
            p.fill()
    return parser


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
        note(record.getMessage())


def _error(message: str) -> None:
    with output_streams():
        error(message)


def _reading_options_apply(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The reading options given before a command that reads no GGUF file are a usage error."""
    if Trait.READS in COMMANDS[args.command].traits:
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


#: the variables by which a user chooses how many threads OpenBLAS (numpy's BLAS) starts
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def console() -> NoReturn:
    """The ``gguf-schema`` program (its console script, and ``python -m gguf_schema``): :func:`main` as a
    process of its own, which exits with its code.

    The command line does no linear algebra, so, unless the user chose a count (one of
    :data:`BLAS_THREAD_VARIABLES` is set), the process asks OpenBLAS, the BLAS of numpy's wheels, for one
    thread (``OPENBLAS_NUM_THREADS=1``) before numpy is imported: OpenBLAS otherwise starts a thread per
    core when numpy loads, and their start took ``gguf-schema info`` on a small file from 0.125 s to 0.179 s
    of CPU time on 2 cores (more on more cores; benchmarks/results/startup.md). Child processes inherit
    the setting. :func:`main` itself, when a program calls it, leaves the environment alone.
    """
    if "numpy" not in sys.modules and not any(v in os.environ for v in BLAS_THREAD_VARIABLES):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    sys.exit(main())


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
    parser = build_parser(lazy=True)
    if not (sys.argv[1:] if argv is None else argv):  # bare `gguf-schema`: the help, as --help prints it
        parser.print_help(sys.stdout)
        return EXIT_OK
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
        with output_streams(), library_warnings(), quiet(args.quiet_before or getattr(args, "quiet_after", False)):
            rc = args.func(args)
            sys.stdout.flush()
        return int(rc)
    except BrokenPipeError:
        # the reader of our output went away (`| head`): stop quietly, and keep Python's own
        # flush at exit from failing on the closed pipe again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
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
    declared = COMMANDS.get(command) if isinstance(command, str) else None
    what = "edit" if declared is not None and Trait.EDITS in declared.traits else "write"
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
    """The files a command would write, as its arguments name them (before any write began)."""
    declared = COMMANDS.get(getattr(args, "command", None) or "")
    return [] if args is None or declared is None else declared.targets(args)
