"""The conventions every ``gguf-schema`` command shares: how text, numbers and JSON are written, how
files are opened (``--limit``, ``--no-mmap``, ``--storage-option`` turned into the keyword arguments of
:func:`gguf_schema.open`), how library warnings and truncated files are reported, and the exit codes.

Exit codes (all commands; handlers return them only by these names, ``EXIT_*``):

====  ======================================================================================
0     success
1     findings or differences (``check``, ``diff``, ``audit-spec``, ``tensors --filter`` no match)
2     unreadable input, a refused write (``--strict``) or a usage error
3     the file was read but is truncated: its tensor data runs past the end of the file
      (``info``, ``dump``, ``tensors``, ``get``: the output is printed, and a warning on stderr
      names the bytes missing and the tensors affected)
130   interrupted (Ctrl-C): one line on stderr says what became of each file being written
====  ======================================================================================

Output encoding: results go to stdout, notes, warnings and progress to stderr. Text that the
output cannot carry never stops a command: bytes of a name or value that are not valid UTF-8
(Python keeps them as surrogate escapes) are shown as ``\\xNN``, and characters the output's
encoding lacks (an ``ascii`` terminal) as Python backslash escapes (``\\u00e9``), whatever
``PYTHONIOENCODING`` says. JSON output is always valid JSON: non-UTF-8 text becomes
``{"hex": "..."}`` (the stored bytes, lossless, as in :mod:`gguf_schema.tools.jsonio`), and
characters the output's encoding lacks become ``\\uXXXX`` escapes.

>>> visible("caf\\xe9 \\udcff", "ascii")
'caf\\\\xe9 \\\\xff'
>>> to_json({"name": "\\udcff", "type": __import__("gguf_schema").GGMLType.Q4_K, "n": 3})
'{"name": {"hex": "ff"}, "type": "Q4_K", "n": 3}'
>>> parse_limit("max_keys=1e6"), parse_limit("max_string_length=64M")
(('max_keys', 1000000), ('max_string_length', 64000000))
>>> parse_storage_option('client_kwargs={"region_name": "eu-west-1"}'), parse_storage_option("token=hf_x")
(('client_kwargs', {'region_name': 'eu-west-1'}), ('token', 'hf_x'))
>>> count(1234567), human_count(7_241_732_096), mib(3 * 2**30)
('1,234,567', '7.2B', '3,072.00 MiB')
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import enum
import io
import json
import math
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from .. import GGUFBuildError, GGUFWarning, Limits

__all__ = [
    "EPILOG",
    "ESCAPE_ERRORS",
    "EXIT_ERROR",
    "EXIT_FINDINGS",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TRUNCATED",
    "add_open_options",
    "add_quiet_option",
    "count",
    "error",
    "human_count",
    "is_quiet",
    "library_warnings",
    "mib",
    "note",
    "open_options",
    "output_streams",
    "parse_limit",
    "parse_storage_option",
    "plural",
    "positive_int",
    "quiet",
    "read_options",
    "status",
    "to_json",
    "truncation",
    "visible",
    "warn",
    "warn_truncated",
    "write",
    "write_json",
]

#: success
EXIT_OK = 0
#: findings or differences (``check``, ``diff``, ``audit``, ``audit-spec``, ``tensors --filter``)
EXIT_FINDINGS = 1
#: unreadable input, a refused write (``--strict``) or a usage error
EXIT_ERROR = 2
#: the file was read but is truncated (the output is printed, and a warning)
EXIT_TRUNCATED = 3
#: the exit status after Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED = 130

#: the end of every command's ``--help``
EPILOG = """\
exit status: 0 success; 1 findings or differences (check, audit, diff, audit-spec,
tensors --filter); 2 unreadable input, a refused write (--strict) or a usage error;
3 the file is truncated (info, dump, tensors, get: output printed, a warning names the missing
bytes and tensors); 130 interrupted (a line on stderr says what became of each file written).
Results go to stdout; notes, warnings ("gguf-schema: warning: [RULE] ...") and progress to stderr."""

#: the name of the codec error handler that shows what an output cannot carry (registered on import)
ESCAPE_ERRORS = "gguf-schema-visible"


def _visible_errors(e: UnicodeError) -> tuple[str, int]:
    if not isinstance(e, UnicodeEncodeError):
        raise e
    out = []
    for ch in e.object[e.start : e.end]:
        c = ord(ch)
        if 0xDC80 <= c <= 0xDCFF:  # a byte that was not valid UTF-8, kept by surrogateescape
            out.append(f"\\x{c - 0xDC00:02x}")
        elif c <= 0xFF:
            out.append(f"\\x{c:02x}")
        elif c <= 0xFFFF:
            out.append(f"\\u{c:04x}")
        else:
            out.append(f"\\U{c:08x}")
    return "".join(out), e.end


codecs.register_error(ESCAPE_ERRORS, _visible_errors)


def visible(text: str, encoding: str = "utf-8") -> str:
    """``text`` as it is printed on an output of ``encoding``: what it cannot carry escaped."""
    return text.encode(encoding, ESCAPE_ERRORS).decode(encoding)


@contextlib.contextmanager
def output_streams() -> Iterator[None]:
    """While a command runs, stdout and stderr escape what they cannot encode (never raise)."""
    saved = []
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            saved.append((stream, stream.errors))
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors=ESCAPE_ERRORS)
    try:
        yield
    finally:
        for stream, errors in saved:
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors=errors)


def write(text: str, stream: TextIO | None = None) -> None:
    """Print ``text`` (results: stdout by default) under the escaping policy of this module."""
    stream = sys.stdout if stream is None else stream
    encoding = getattr(stream, "encoding", None) or "utf-8"
    stream.write(visible(text, encoding))


# --------------------------------------------------------------------------- numbers


def count(n: int) -> str:
    """A count or a size in bytes, its thousands separated: ``1,234,567``."""
    return f"{n:,}"


def human_count(n: int) -> str:
    """A large count in a few characters: ``7.2B`` parameters, ``262.1K`` tokens."""
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def plural(n: int, word: str) -> str:
    """A count and its noun, singular for one: ``1 error``, ``2 errors``, ``1,234 bytes``.

    >>> plural(1, "header byte"), plural(3, "header byte"), plural(0, "error")
    ('1 header byte', '3 header bytes', '0 errors')
    """
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def mib(n: int) -> str:
    """A size in mebibytes, two decimals: ``3,072.00 MiB``."""
    return f"{n / 2**20:,.2f} MiB"


# --------------------------------------------------------------------------- JSON


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return {"hex": obj.encode("utf-8", "surrogateescape").hex()}
        return obj
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, bool) or obj is None or isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {visible(str(k)): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"hex": bytes(obj).hex()}
    np = sys.modules.get("numpy")  # a numpy value exists only where numpy was imported
    if np is not None and isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if np is not None and isinstance(obj, np.generic):
        return _jsonable(obj.item())
    return str(obj)


def to_json(obj: Any, *, indent: int | None = None, stream: TextIO | None = None) -> str:
    """The one JSON encoder of the command line: enums by name, numpy values as numbers,
    bytes and non-UTF-8 text as ``{"hex": ...}``, non-finite floats as strings; ``ensure_ascii``
    when ``stream`` (if given) cannot carry all of Unicode."""
    encoding = (getattr(stream, "encoding", None) or "utf-8") if stream is not None else "utf-8"
    ascii_only = codecs.lookup(encoding).name not in ("utf-8", "utf-16", "utf-32", "utf-8-sig")
    return json.dumps(_jsonable(obj), indent=indent, ensure_ascii=ascii_only, allow_nan=False)


def write_json(obj: Any, *, indent: int | None = 1) -> None:
    """Print ``obj`` as JSON on stdout (one document, newline-terminated)."""
    write(to_json(obj, indent=indent, stream=sys.stdout) + "\n")


# --------------------------------------------------------------------------- opening files


def parse_limit(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` of ``--limit``: NAME a :class:`~gguf_schema.format.limits.Limits` field,
    VALUE an integer (``1000``, ``1e6``) or a size (``64M``, ``1GiB``)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    names = Limits.names()
    if not sep or name not in names:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {', '.join(names)}; got {text!r}")
    value = value.strip().replace("_", "")
    try:
        number = float(value)
    except ValueError:
        from ..tools.split import parse_size

        try:
            return name, parse_size(value)
        except GGUFBuildError:
            raise argparse.ArgumentTypeError(
                f"{name} needs a count or a size (1000, 1e6, 64M, 1GiB), got {value!r}"
            ) from None
    if not math.isfinite(number) or number < 0 or number != int(number):
        raise argparse.ArgumentTypeError(f"{name} needs a whole number >= 0, got {value!r}")
    return name, int(number)


def positive_int(text: str) -> int:
    """An argparse ``type`` for counts (threads, tensors per shard): a whole number of at least 1.

    >>> positive_int("4")
    4
    >>> positive_int("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: needs a positive integer, got '0'
    """
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"needs a positive integer, got {text!r}")
    return n


def parse_storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--storage-option`` -> ``(KEY, VALUE)``, VALUE read as JSON when it parses as
    JSON, else kept as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def add_open_options(parser: argparse.ArgumentParser, *, after_command: bool = False) -> None:
    """The reading options, ``--limit NAME=VALUE`` (repeatable), ``--no-mmap`` and
    ``--storage-option KEY=VALUE`` (repeatable): on the main parser (before the command) and, with
    ``after_command``, on the parser of a command that reads files (each kept apart, both read by
    :func:`open_options`)."""
    unset: Any = argparse.SUPPRESS  # given after the command only when given there
    parser.add_argument(
        "--limit",
        dest="limit_after" if after_command else "limit_before",
        action="append",
        type=parse_limit,
        default=unset if after_command else None,
        metavar="NAME=VALUE",
        help=f"a resource limit for reading files, repeatable (NAME: {', '.join(Limits.names())}; "
        "VALUE: 1000, 1e6, 64M, 1GiB)",
    )
    parser.add_argument(
        "--no-mmap",
        dest="no_mmap_after" if after_command else "no_mmap",
        action="store_true",
        default=unset if after_command else False,
        help="read files with positioned reads instead of mapping them",
    )
    parser.add_argument(
        "--storage-option",
        dest="storage_after" if after_command else "storage_before",
        action="append",
        type=parse_storage_option,
        default=unset if after_command else None,
        metavar="KEY=VALUE",
        help="option for the fsspec backend of URLs (credentials, endpoints), repeatable: "
        "VALUE is JSON when it parses as JSON, else text (e.g. anon=true, token=hf_xxx)",
    )


def add_quiet_option(parser: argparse.ArgumentParser, *, after_command: bool = False) -> None:
    """``-q/--quiet``, on the main parser (before the command) and on every command's (after it)."""
    parser.add_argument(
        "-q",
        "--quiet",
        dest="quiet_after" if after_command else "quiet_before",
        action="store_true",
        default=argparse.SUPPRESS if after_command else False,
        help="print results, warnings and errors only: no notes, status lines, progress bars or summaries of writes",
    )


def read_options(args: argparse.Namespace) -> dict[str, Any]:
    """``limits`` and ``mmap`` as the command line asks (``--limit``, ``--no-mmap``): the keyword
    arguments every library function that reads a local GGUF file takes (edits)."""
    limits = (getattr(args, "limit_before", None) or []) + (getattr(args, "limit_after", None) or [])
    return {
        "limits": Limits(**dict(limits)) if limits else None,
        "mmap": not (getattr(args, "no_mmap", False) or getattr(args, "no_mmap_after", False)),
    }


def open_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`gguf_schema.open` the command line asks for:
    :func:`read_options` and ``storage_options`` (``--storage-option``). Every command opens its
    files with them, ``gguf_schema.open(path, **open_options(args))``, or passes them to the
    library function that reads its files (``tools``, ``audit``), which takes the same keywords."""
    return {**read_options(args), "storage_options": getattr(args, "storage_options", None)}


# --------------------------------------------------------------------------- reporting


def error(message: str) -> None:
    """An error line on stderr: ``gguf-schema: error: ...``, the one prefix of every command's errors
    (usage errors included)."""
    write(f"gguf-schema: error: {message}\n", sys.stderr)


_quiet: list[bool] = [False]


@contextlib.contextmanager
def quiet(enabled: bool) -> Iterator[None]:
    """While a command runs with ``-q/--quiet``: no notes, status lines or progress bars (warnings,
    errors and results still print)."""
    saved = _quiet[0]
    _quiet[0] = enabled
    try:
        yield
    finally:
        _quiet[0] = saved


def is_quiet() -> bool:
    """Whether the running command was given ``-q/--quiet``."""
    return _quiet[0]


def note(message: str) -> None:
    """A note on stderr, ``gguf-schema: note: ...`` (what was done on the way; not under ``--quiet``)."""
    if not _quiet[0]:
        _to_stderr(f"gguf-schema: note: {message}")


def status(message: str) -> None:
    """A status line on stderr (``wrote FILE ...``, ``set KEY: FILE ...``; not under ``--quiet``)."""
    if not _quiet[0]:
        _to_stderr(message)


def _to_stderr(line: str) -> None:
    """One line on stderr, above a progress bar being drawn."""
    tqdm = sys.modules.get("tqdm")
    if tqdm is not None and getattr(tqdm.tqdm, "_instances", None):
        tqdm.tqdm.write(visible(line, getattr(sys.stderr, "encoding", None) or "utf-8"), file=sys.stderr)
    else:
        write(line + "\n", sys.stderr)


def warn(message: str) -> None:
    """A warning line on stderr: ``gguf-schema: warning: ...`` (above a progress bar being drawn)."""
    _to_stderr(f"gguf-schema: warning: {message}")


@contextlib.contextmanager
def library_warnings() -> Iterator[None]:
    """Every :class:`~gguf_schema.errors.GGUFWarning` raised meanwhile printed as a warning line
    (``gguf-schema: warning: [RULE] ...``); other warnings are shown as Python shows them."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", GGUFWarning)
        python_show = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
            if issubclass(category, GGUFWarning):
                warn(str(message))
            else:
                python_show(message, category, *args, **kw)

        warnings.showwarning = show
        yield


def truncation(f: Any) -> tuple[int, list[str]]:
    """``(bytes missing, names of the tensors whose data runs past the end)`` of an open file, or of
    every shard of a split model."""
    shards = getattr(f, "shards", None)
    if shards is None:
        missing, cut = f.truncation()
        return int(missing), list(cut)
    parts = [s.truncation() for s in shards]
    return sum(m for m, _ in parts), [name for _, names in parts for name in names]


def warn_truncated(f: Any, path: str) -> bool:
    """Warn (on stderr) when ``f`` (an open file, or a split model) is truncated; returns whether it is."""
    missing, cut = truncation(f)
    if not cut:
        return False
    names = ", ".join(cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
    warn(
        f"{path} is truncated: {missing:,} bytes of tensor data are missing; "
        f"{len(cut)} of {len(f.tensor_list)} tensors affected ({names})"
    )
    return True
