"""The command line's surface: every command, and each command's options and arguments, as recorded.

``tests/data/cli_surface.json`` records what ``gguf-schema --help`` and each ``gguf-schema COMMAND
--help`` offer (the global options under ``""``): for each argument its flags (or, for a positional,
none), metavar, nargs, choices, default, whether it is required and whether ``--help`` shows it. A
command or option that disappears, or changes what it takes, fails here; help wording is free to
improve. After a deliberate change, regenerate the record with
``python tests/test_cli_surface.py > tests/data/cli_surface.json`` and say why in the commit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gguf_schema.cli import COMMANDS, build_parser
from gguf_schema.cli.command import Trait

RECORD = Path(__file__).parent / "data" / "cli_surface.json"


def _argument(a: argparse.Action) -> dict[str, Any]:
    default = a.default if a.default is None or isinstance(a.default, (bool, int, str)) else repr(a.default)
    return {
        "flags": sorted(a.option_strings) or None,
        "metavar": a.metavar if a.metavar is None or isinstance(a.metavar, str) else list(a.metavar),
        "nargs": a.nargs,
        "choices": None if a.choices is None else sorted(map(str, a.choices)),
        "default": default,
        "required": a.required,
        "shown": a.help != argparse.SUPPRESS,
    }


def _arguments(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    skip = (argparse._HelpAction, argparse._SubParsersAction)
    found = [_argument(a) for a in parser._actions if not isinstance(a, skip)]
    return sorted(found, key=lambda r: json.dumps(r, sort_keys=True))


def surface() -> dict[str, list[dict[str, Any]]]:
    """What the parser offers now: the global options under ``""``, then each command's."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"": _arguments(parser), **{name: _arguments(p) for name, p in sub.choices.items()}}


@pytest.fixture(scope="module")
def recorded() -> dict[str, list[dict[str, Any]]]:
    return json.loads(RECORD.read_text(encoding="utf-8"))


def test_the_commands_are_those_recorded(recorded: dict[str, list[dict[str, Any]]]) -> None:
    assert set(surface()) - {""} == set(recorded) - {""} == set(COMMANDS)
    assert len(recorded) == 25  # the global options and 24 commands


def test_each_command_takes_the_options_and_arguments_recorded(recorded: dict[str, list[dict[str, Any]]]) -> None:
    now = surface()
    for command, arguments in recorded.items():
        assert now[command] == arguments, command or "the global options"


def test_the_traits_bring_their_options() -> None:
    """Reading options after exactly the commands that read files, --strict on exactly those that write GGUF."""
    now = surface()
    for name, command in COMMANDS.items():
        flags = {f for a in now[name] for f in a["flags"] or ()}
        assert ({"--limit", "--no-mmap", "--storage-option"} <= flags) == (Trait.READS in command.traits), name
        assert ("--strict" in flags) == (Trait.WRITES in command.traits), name
    reading_none = {n for n, c in COMMANDS.items() if Trait.READS not in c.traits}
    assert reading_none == {"demo", "generate", "rules", "audit-spec"}
    writing = {n for n, c in COMMANDS.items() if Trait.WRITES in c.traits}
    assert writing == {"build", "set", "set-file", "delete", "rename", "convert", "split", "merge", "quantize"}


def test_every_help_page_renders_with_the_exit_status_epilog() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "exit status: 0 success" in parser.format_help()
    for name, p in sub.choices.items():
        text = p.format_help()
        assert text.startswith(f"usage: gguf-schema {name} ") and "exit status: 0 success" in text, name


if __name__ == "__main__":
    json.dump(surface(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


def test_each_writing_command_names_the_files_it_writes() -> None:
    """What Ctrl-C reports on before a write began: the files as the arguments name them."""
    parser = build_parser()
    for argv, files in (
        (["set", "m.gguf", "k", "1"], ["m.gguf"]),
        (["set", "m.gguf", "k", "1", "-o", "n.gguf"], ["n.gguf"]),
        (["delete", "m.gguf", "k"], ["m.gguf"]),
        (["rename", "m.gguf", "a", "b", "-o", "n.gguf"], ["n.gguf"]),
        (["set-file", "m.gguf", "k", "t.txt"], ["m.gguf"]),
        (["recover", "a.gguf", "b.gguf"], ["a.gguf", "b.gguf"]),
        (["convert", "m.gguf", "be.gguf"], ["be.gguf"]),
        (["build", "m.json", "m.gguf"], ["m.gguf"]),
        (["merge", "m-00001-of-00002.gguf", "m.gguf"], ["m.gguf"]),
        (["export", "m.gguf", "m.safetensors"], ["m.safetensors"]),
        (["quantize", "m.gguf", "q.gguf", "Q4_K_M"], ["q.gguf"]),
        (["split", "m.gguf", "part", "--max-tensors", "2"], []),  # a prefix: the shards are named by the plan
        (["info", "m.gguf"], []),
        (["demo", "-o", "d.gguf"], []),
    ):
        args = parser.parse_args(argv)
        assert COMMANDS[args.command].targets(args) == files, argv
    edits = {n for n, c in COMMANDS.items() if Trait.EDITS in c.traits}
    assert edits == {"set", "set-file", "delete", "rename", "recover"}
