"""The commands that change a file's metadata: ``set``, ``set-file``, ``delete``, ``rename``, and ``recover``.

Each edit goes through :mod:`gguf_schema.tools.edit` (tensor data is never loaded: the file is
changed in place when its header keeps its size, else rewritten through a temporary file; a
journal makes an in-place edit undoable, which ``recover`` does after a crash). The status line
goes to stderr (``--json``: the result as data on stdout). Exit codes (:mod:`.conventions`):
``EXIT_OK``; ``EXIT_ERROR`` for a refused edit or an unreadable file (printed by
:func:`gguf_schema.cli.main`); ``EXIT_TRUNCATED`` when the file is truncated (the edit was made;
the file is as incomplete as before).

>>> [c.name for c in COMMANDS]
['set', 'set-file', 'delete', 'rename', 'recover']
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from .. import GGUFBuildError, GGUFError, GGUFFile, GGUFKeyError, ValueType, durable
from .. import open as open_gguf
from ..tools.edit import EditResult, delete_key, edit_file, rename_key
from .command import Family, Trait, arg, edited_file
from .conventions import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_TRUNCATED,
    error,
    note,
    open_options,
    plural,
    read_options,
    status,
    visible,
    warn,
    warn_truncated,
    write,
    write_json,
)
from .progress import Progress, file_size
from .text_values import parse_type, parse_value_text, type_label

__all__ = ["COMMANDS"]

COMMANDS = Family()

#: what every edit of FILE is: it reads FILE, writes a GGUF file, and changes FILE (or writes -o OUT)
_EDIT = Trait.READS | Trait.WRITES | Trait.EDITS

#: the options every edit takes: where the result goes, and how it is reported
_EDIT_OUTPUT = (
    arg("-o", "--output", metavar="OUT", help="write the edited file to OUT instead of changing FILE"),
    arg(
        "--json",
        action="store_true",
        help="print the result as JSON: {command, key..., path, in_place, cloned, bytes_written}",
    ),
    arg(
        "--no-in-place",
        dest="in_place",
        action="store_const",
        const=False,
        default=None,
        help="never change FILE's bytes where they are: write a new file (a clone where the filesystem "
        "makes them, else a full copy) and rename it over FILE, so that programs reading FILE meanwhile "
        "see the old or the new file, never a torn header (the default where the filesystem clones files)",
    ),
)

_ADD = arg(
    "--add",
    action="store_true",
    help="KEY is a new key: add it (without --add a key that is not in FILE is refused, naming the keys it may "
    "have meant; on a terminal you are asked)",
)

_TYPES = ", ".join(t.name.lower() for t in ValueType if t != ValueType.ARRAY) + ", array[TYPE]"


def _recover_first(args: argparse.Namespace) -> None:
    """Undo an interrupted earlier edit of FILE before anything reads it (a note on stderr says what
    was done), as every edit does: ``set`` reads FILE before the edit starts (is KEY new?)."""
    done = durable.recover(args.file)
    if done is not None:
        note(f"{args.file}: {done}")


def _edit(args: argparse.Namespace, operation: Callable[..., EditResult], *operands: Any) -> EditResult:
    """``operation(FILE, *operands)`` (an edit of :mod:`gguf_schema.tools.edit`) as the edit options
    say (``-o``, ``--no-in-place``, ``--strict``, the reading options), with a progress bar. An
    interrupted earlier edit of FILE is undone first (:func:`_recover_first`)."""
    _recover_first(args)
    with Progress(file_size(args.file), "write") as bar:
        return operation(
            args.file,
            *operands,
            output=args.output,
            progress=bar.update,
            in_place=args.in_place,
            strict=args.strict,
            **read_options(args),
        )


def _report_edit(what: str, result: EditResult, args: argparse.Namespace | None = None, **data: Any) -> int:
    """The status line of an edit on stderr; with ``--json`` the result as data on stdout."""
    if args is not None and getattr(args, "json", False):
        write_json(
            {
                "command": args.command,
                **data,
                "path": result.path,
                "in_place": result.in_place,
                "cloned": result.cloned,
                "bytes_written": result.bytes_written,
            },
            indent=None,
        )
        return _edited_truncated(result)
    if result.in_place:
        how = f"in place, {plural(result.bytes_written, 'header byte')} changed"
    elif result.cloned:
        how = f"a clone renamed over it, {plural(result.bytes_written, 'header byte')} changed"
    else:
        how = f"rewritten, {plural(result.bytes_written, 'byte')}"
    status(f"{what}: {result.path} ({how})")
    return _edited_truncated(result)


def _edited_truncated(result: EditResult) -> int:
    """An edit does not repair a truncated file: say so, exit 3 (the edit itself was made)."""
    if not result.missing_bytes:
        return EXIT_OK
    warn(
        f"{result.path} is truncated: {result.missing_bytes:,} bytes of tensor data are missing (the edit was made; "
        "the file is as incomplete as before)"
    )
    return EXIT_TRUNCATED


def _new_key_allowed(args: argparse.Namespace) -> bool:
    """Whether ``set``/``set-file`` may add ``args.key`` as a new key: yes with ``--add``; for a key
    that is not in the file, on a terminal the user is asked; otherwise the edit is refused (a typo
    in a key must not silently add one and rewrite the file)."""
    if args.add:
        return True
    _recover_first(args)
    with open_gguf(args.file, lazy=True, **open_options(args)) as f:
        if args.key in f.fields:
            return False  # not new: nothing to allow (a key deleted meanwhile is refused by the edit)
        near = f.fields.near(args.key)
    hint = f" (did you mean {' or '.join(repr(k) for k in near)}?)" if near else ""
    if _interactive():
        sys.stderr.write(
            visible(f"gguf-schema: {args.file} has no key {args.key!r}{hint}; add it as a new key? [y/N] ")
        )
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer in ("y", "yes"):
            return True
    raise GGUFKeyError(
        f"no metadata key {args.key!r}{hint}: nothing was written (pass --add to add it as a new key)",
        path=args.file,
        value=args.key,
    )


def _interactive() -> bool:
    """Whether the user can be asked a question: standard input and standard error are terminals."""
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _refuse_new_key(f: GGUFFile, args: argparse.Namespace, allowed: bool, added: list[bool]) -> None:
    """Inside the edit (under the lock): a key that is not there may only be added when allowed
    (``added`` records whether it was new)."""
    added[:] = [args.key not in f.fields]
    if added[0] and not allowed:
        raise f.fields.missing(args.key).replace(
            reason=f"no metadata key {args.key!r}: nothing was written (pass --add to add it as a new key)",
            path=args.file,
        )


def _value_for(key: str, text: str, vt: ValueType | None, et: ValueType | None) -> Any:
    """``text`` read as a value of type ``vt`` for ``key``; an error names the key."""
    try:
        return parse_value_text(text, vt, et)[1]
    except GGUFBuildError as e:
        raise e.replace(path=f"key {key!r}") from None


@COMMANDS.command(
    "set",
    "set a metadata key (tensor data is never loaded)",
    arg("file", metavar="FILE"),
    arg("key", metavar="KEY"),
    arg("value", metavar="VALUE"),
    arg("--type", metavar="T", help=f"value type: {_TYPES}"),
    _ADD,
    *_EDIT_OUTPUT,
    description="Set metadata KEY to VALUE. An existing key keeps its stored type unless --type is given. A key that "
    "is not in FILE is added only with --add (or when you say so on a terminal): a typo is refused, with the keys "
    "it may have meant; a new key's type is guessed (true/false, integer, decimal number, JSON list, else "
    "string). Arrays are JSON lists. "
    "The file is changed in place when its header keeps its size, else rewritten through a temporary "
    "file; tensor bytes are copied unchanged.",
    traits=_EDIT,
    targets=edited_file,
)
def _cmd_set(args: argparse.Namespace) -> int:
    vt, et = parse_type(args.type) if args.type else (None, None)
    allowed, added = _new_key_allowed(args), [False]

    def apply(f: GGUFFile) -> None:
        _refuse_new_key(f, args, allowed, added)
        t, e = vt, et
        if t is None and args.key in f.fields:
            old = f.fields[args.key]
            t, e = old.type, old.element_type
        f.set(args.key, _value_for(args.key, args.value, t, e), t, e)

    result = _edit(args, edit_file, apply)
    return _report_edit(f"set {args.key}" + (" (a new key)" if added[0] else ""), result, args, key=args.key)


@COMMANDS.command(
    "set-file",
    "set a key to the contents of a file (e.g. a chat template)",
    arg("file", metavar="FILE"),
    arg("key", metavar="KEY"),
    arg("path", metavar="PATH"),
    _ADD,
    *_EDIT_OUTPUT,
    description="Set metadata KEY to the contents of PATH (a key that is not in FILE only with --add, as `set`). A new "
    "key or a STRING key stores the bytes exactly as a "
    "STRING; a key of another type keeps its type, the text read as `set` reads a value (a number for "
    "UINT32, a JSON list for an ARRAY), or the edit is refused.",
    traits=_EDIT,
    targets=edited_file,
)
def _cmd_set_file(args: argparse.Namespace) -> int:
    with open(args.path, "rb") as fh:
        text = fh.read().decode("utf-8", "surrogateescape")  # the bytes kept exactly
    allowed, added = _new_key_allowed(args), [False]

    def apply(f: GGUFFile) -> None:
        _refuse_new_key(f, args, allowed, added)
        old = f.fields.get(args.key)
        if old is None or old.type == ValueType.STRING:
            f.set(args.key, text, ValueType.STRING)
            return
        try:  # a key of another type keeps it: the text is read as `set` reads a value
            _, value = parse_value_text(text.strip(), old.type, old.element_type)
        except GGUFBuildError as e:
            raise GGUFBuildError(
                f"{args.key} is stored as {type_label(old)}, and the contents of {args.path} are not such a value: "
                f"{e.reason} (delete the key first to store the text as a STRING)",
                path=args.key,
            ) from None
        f.set(args.key, value, old.type, old.element_type)

    result = _edit(args, edit_file, apply)
    return _report_edit(
        f"set {args.key} from {args.path}" + (" (a new key)" if added[0] else ""), result, args, key=args.key
    )


@COMMANDS.command(
    "delete",
    "remove a metadata key",
    arg("file", metavar="FILE"),
    arg("key", metavar="KEY"),
    *_EDIT_OUTPUT,
    traits=_EDIT,
    targets=edited_file,
)
def _cmd_delete(args: argparse.Namespace) -> int:
    result = _edit(args, delete_key, args.key)
    return _report_edit(f"deleted {args.key}", result, args, key=args.key)


@COMMANDS.command(
    "rename",
    "rename a metadata key (position, type and value kept)",
    arg("file", metavar="FILE"),
    arg("old", metavar="OLD"),
    arg("new", metavar="NEW"),
    *_EDIT_OUTPUT,
    traits=_EDIT,
    targets=edited_file,
)
def _cmd_rename(args: argparse.Namespace) -> int:
    result = _edit(args, rename_key, args.old, args.new)
    return _report_edit(f"renamed {args.old} to {args.new}", result, args, old=args.old, new=args.new)


def _recovered_files(args: argparse.Namespace) -> list[str]:
    """What ``recover`` writes: each FILE."""
    return list(args.files)


@COMMANDS.command(
    "recover",
    "undo the interrupted in-place edit of each FILE (its journal FILE-journal)",
    arg("files", metavar="FILE", nargs="+"),
    description="Undo an in-place edit that was interrupted (killed, power cut): the bytes saved in FILE-journal are "
    "written back and the journal removed; an incomplete journal (the file was not touched yet) is just "
    "removed; a journal that does not fit the file (it was replaced since) is never applied nor deleted, "
    "but kept aside as FILE-journal.orphan-TIME. FILE may be a symbolic link (the journal is beside the "
    "real file). Waits for an edit still under way. Prints what was done for each FILE; exit 0 when every "
    "FILE reads afterwards, 2 otherwise.",
    traits=Trait.READS | Trait.EDITS,
    targets=_recovered_files,
)
def _cmd_recover(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for path in args.files:
        try:
            done = durable.recover(path)
            with open_gguf(path, lazy=True, **open_options(args)) as f:  # it must read again
                state = f"it reads: {len(f.fields)} keys, {len(f.tensor_list)} tensors"
                cut = warn_truncated(f, path)
        except GGUFError as e:
            error(f"{path}: {e}")
            status = EXIT_ERROR
            continue
        write(f"{path}: {done or 'no interrupted edit to recover'}; {state}\n")
        if cut and status == EXIT_OK:
            status = EXIT_TRUNCATED
    return status
