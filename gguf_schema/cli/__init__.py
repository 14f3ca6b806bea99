"""The ``gguf-schema`` command line: argparse and printing, and nothing else.

Each subcommand is a thin layer over the library: it parses arguments, calls the public API and
prints (results on stdout, notes and progress on stderr). The library never prints; its long
operations take a progress callback, which the commands supply (:mod:`.progress`).

Exit codes: 0 success, 1 findings or differences, 2 unreadable input or usage error. A closed
output pipe (``gguf-schema dump f | head``) ends a command quietly.

Modules: :mod:`.commands` (inspect, edit, convert, split, merge, diff, build),
:mod:`.model_commands` (estimate, export), :mod:`.check` (check, rules, audit-spec), :mod:`.generate` (generate, demo), :mod:`.text_values` (typed values
from command-line text), :mod:`.progress` (the progress bar).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import GGUFError
from . import check, commands, generate, model_commands

__all__ = ["build_parser", "main"]

#: modules that own subcommands: each has ``register_cli(subparsers)`` adding its parsers,
#: each parser with ``set_defaults(func=handler)`` where ``handler(args) -> int`` is the exit code.
COMMAND_MODULES = (generate, commands, model_commands, check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gguf-schema", description="Inspect, check, edit and convert GGUF model files."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
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
