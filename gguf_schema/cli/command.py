"""How a ``gguf-schema`` command is declared: once, beside its handler, with its traits.

Every command module holds one :class:`Family` and declares each of its commands with the
:meth:`Family.command` decorator on the handler: the name, the help line (and a longer
description), the arguments (:func:`arg`, :func:`exclusive`, :func:`output`), the
:class:`Trait` flags, and the files it writes (for the Ctrl-C report). The traits add what every
command of their kind shares, so no command spells it again and nothing edits argparse's
internals afterwards (and every command takes ``-q/--quiet``, as the main parser does):

- :attr:`Trait.READS`: it reads a GGUF file of the user's, so the reading options (``--limit``,
  ``--no-mmap``, ``--storage-option``) are accepted after the command too (before it they are
  the global options; given before a command without the trait they are a usage error);
- :attr:`Trait.WRITES`: it writes a GGUF file, so it takes ``--strict PROFILE`` (the checks
  before every write refuse instead of warning), which its handler passes to the library
  function that writes, as ``strict=args.strict``;
- :attr:`Trait.EDITS`: it changes the file it is given, so after Ctrl-C the report says whether
  "the edit had committed";
- :attr:`Trait.ARGUMENT_ERRORS`: a ``ValueError`` of the library (an argument value it refused,
  not a bad file) is a usage error: printed as ``gguf-schema: error: ...``, exit 2.

>>> import argparse
>>> from gguf_schema.cli.conventions import EXIT_OK
>>> family = Family()
>>> @family.command(
...     "hello", "greet a file", arg("file", metavar="FILE"), output("OUT"), traits=Trait.READS, targets=output_file
... )
... def _hello(args: argparse.Namespace) -> int:
...     return EXIT_OK
>>> sub = argparse.ArgumentParser(prog="gguf-schema").add_subparsers()
>>> family.add_to(sub)
>>> sorted(a.option_strings[-1] for a in sub.choices["hello"]._actions if a.option_strings)
['--help', '--limit', '--no-mmap', '--output', '--quiet', '--storage-option']
>>> [c.name for c in family], family["hello"].targets(argparse.Namespace(output="o.gguf"))
(['hello'], ['o.gguf'])
"""

from __future__ import annotations

import argparse
import enum
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import GGUFError
from .conventions import (
    EPILOG,
    EXIT_ERROR,
    add_open_options,
    add_quiet_option,
    error,
)

__all__ = [
    "Arg",
    "Command",
    "Exclusive",
    "Family",
    "Handler",
    "HelpFormatter",
    "Output",
    "Trait",
    "arg",
    "edited_file",
    "exclusive",
    "output",
    "output_file",
]

#: a command's handler: the parsed arguments in, the exit code out (one of ``conventions.EXIT_*``)
Handler = Callable[[argparse.Namespace], int]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help layout, but text laid out in lines already (the exit status epilog) is kept
    as it is; a description of one paragraph is wrapped to the terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class Trait(enum.Flag):
    """What a command shares with the other commands of its kind (see the module docstring)."""

    NONE = 0
    READS = enum.auto()
    WRITES = enum.auto()
    EDITS = enum.auto()
    ARGUMENT_ERRORS = enum.auto()


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call: its flags (or positional name) and keyword arguments."""

    flags: tuple[str, ...]
    options: dict[str, Any]

    def add_to(self, parser: Any) -> None:
        parser.add_argument(*self.flags, **self.options)


@dataclass(frozen=True)
class Exclusive:
    """Arguments of which at most one (exactly one when ``required``) may be given."""

    args: tuple[Arg, ...]
    required: bool = False

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_mutually_exclusive_group(required=self.required)
        for a in self.args:
            a.add_to(group)


@dataclass(frozen=True)
class Output:
    """The output file as a positional argument, which ``-o/--output`` may stand for (both forms
    work; ``gguf_schema.cli`` refuses two different ones and requires one)."""

    metavar: str

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("output", metavar=self.metavar, nargs="?", default=None)
        parser.add_argument(
            "-o", "--output", dest="output_option", metavar=self.metavar, help=f"{self.metavar} given as an option"
        )


def arg(*flags: str, **options: Any) -> Arg:
    """An argument, spelled as ``ArgumentParser.add_argument`` takes it."""
    return Arg(flags, options)


def exclusive(*args: Arg, required: bool = False) -> Exclusive:
    """A mutually exclusive group of arguments."""
    return Exclusive(args, required)


def output(metavar: str) -> Output:
    """The positional output file, also accepted as ``-o/--output``."""
    return Output(metavar)


def no_files(args: argparse.Namespace) -> list[str]:
    """What a command that writes no file of the user's writes: nothing."""
    return []


def output_file(args: argparse.Namespace) -> list[str]:
    """The file named by the command's output argument."""
    out = getattr(args, "output", None)
    return [out] if isinstance(out, str) else []


def edited_file(args: argparse.Namespace) -> list[str]:
    """The file an edit changes: ``-o OUT`` when given, else ``FILE`` itself."""
    return [getattr(args, "output", None) or args.file]


@dataclass(frozen=True)
class Command:
    """One subcommand, as declared (see :meth:`Family.command`)."""

    name: str
    handler: Handler
    help: str
    description: str | None = None
    arguments: tuple[Arg | Exclusive | Output, ...] = ()
    traits: Trait = Trait.NONE
    #: the files the command would write, as its arguments name them (what Ctrl-C reports on
    #: before any write began)
    targets: Callable[[argparse.Namespace], list[str]] = no_files

    def add_to(self, subparsers: Any) -> argparse.ArgumentParser:
        """Add this command's parser (its arguments, then what its traits bring) to ``subparsers``."""
        p = subparsers.add_parser(self.name, help=self.help, epilog=EPILOG, formatter_class=HelpFormatter)
        self.fill(p)
        return p

    def fill(self, p: argparse.ArgumentParser) -> None:
        """Give ``p``, this command's parser, its description, arguments (then what its traits bring) and handler."""
        p.description = self.description or self.help[0].upper() + self.help[1:] + "."
        for a in self.arguments:
            a.add_to(p)
        add_quiet_option(p, after_command=True)  # every command: -q before or after it
        if Trait.READS in self.traits:
            add_open_options(p, after_command=True)  # the global reading options, also accepted after the command
        if Trait.WRITES in self.traits:
            from ..check import PROFILES

            p.add_argument(
                "--strict",
                choices=PROFILES,
                metavar="PROFILE",
                help=f"refuse to write a file that breaks an error rule of PROFILE ({', '.join(PROFILES)}); "
                "without it, broken rules are warnings",
            )
        handler = _argument_errors(self.handler) if Trait.ARGUMENT_ERRORS in self.traits else self.handler
        p.set_defaults(func=handler)


def _argument_errors(fn: Handler) -> Handler:
    """A ValueError (an argument value the library refused) reported as a usage error, exit 2."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except ValueError as e:
            if isinstance(e, GGUFError):  # a bad file: main prints it
                raise
            error(str(e))
            return EXIT_ERROR

    return run


@dataclass
class Family:
    """The commands of one module, in the order ``gguf-schema --help`` lists them."""

    commands: list[Command] = field(default_factory=list)

    def command(
        self,
        name: str,
        help: str,
        *arguments: Arg | Exclusive | Output,
        description: str | None = None,
        traits: Trait = Trait.NONE,
        targets: Callable[[argparse.Namespace], list[str]] = no_files,
    ) -> Callable[[Handler], Handler]:
        """Declare the decorated handler as the command ``name`` (``description`` defaults to
        ``help`` as a sentence)."""

        def declare(handler: Handler) -> Handler:
            if any(c.name == name for c in self.commands):
                raise ValueError(f"command {name!r} is declared twice")
            self.commands.append(Command(name, handler, help, description, tuple(arguments), traits, targets))
            return handler

        return declare

    def add_to(self, subparsers: Any) -> None:
        """Add every command of the family to ``subparsers``."""
        for c in self.commands:
            c.add_to(subparsers)

    def __iter__(self) -> Iterator[Command]:
        return iter(self.commands)

    def __getitem__(self, name: str) -> Command:
        for c in self.commands:
            if c.name == name:
                return c
        raise KeyError(name)

    @staticmethod
    def index(families: Sequence[Family]) -> dict[str, Command]:
        """Every command of ``families`` by name."""
        return {c.name: c for family in families for c in family}
