"""The one error hierarchy of gguf-schema.

Every failure caused by a file's content, by a file that cannot be read, or by a value that
cannot be stored surfaces as a :class:`GGUFError`. Subclasses also inherit the builtin a Python
user would reach for first, so ``except EOFError``, ``except KeyError`` or ``except
FileNotFoundError`` keep working. Each error carries structured facts (``offset``, ``path``,
``value``) and says them in its message.

Messages are bounded whatever the file claims: a name or value is shown by at most a few
hundred characters, with its full length (:func:`shorten`), so a hostile 200 MB "name" gives a
message of a few hundred bytes.

What is written but breaks a validation rule is a :class:`GGUFWarning` (a ``UserWarning``
carrying the rule id), not an error, unless the writer is asked to be strict.

Argument mistakes (a bad engine name, a negative thread count, a wrong shape) are the caller's,
not the file's: they raise plain ``ValueError`` or ``TypeError``, never a :class:`GGUFError`.

>>> err = GGUFTruncatedError("string length 40 needs 40 bytes, 3 left", offset=24, path="metadata_kv[0].key")
>>> print(err)
string length 40 needs 40 bytes, 3 left (at offset 24, in metadata_kv[0].key)
>>> isinstance(err, EOFError), isinstance(err, GGUFError)
(True, True)
>>> shorten("x" * 1000)
"'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (1,000 characters)"
"""

from __future__ import annotations

import errno as _errno
from typing import Any

__all__ = [
    "GGUFBuildError",
    "GGUFChangedError",
    "GGUFConnectionError",
    "GGUFDependencyError",
    "GGUFDocumentError",
    "GGUFError",
    "GGUFFileNotFoundError",
    "GGUFFormatError",
    "GGUFIOError",
    "GGUFInstallWarning",
    "GGUFInternalError",
    "GGUFKeyError",
    "GGUFLimitError",
    "GGUFPermissionError",
    "GGUFRemoteError",
    "GGUFRoundTripError",
    "GGUFTimeoutError",
    "GGUFTruncatedError",
    "GGUFValidationError",
    "GGUFWarning",
    "os_error",
    "shorten",
]

_UNSET: Any = object()

#: characters of a name or value an error message shows at most
SHOWN = 60


def shorten(value: Any, limit: int = SHOWN) -> str:
    """``repr(value)``, cut to about ``limit`` characters with the full length said, for messages.

    Only the shown part is ever converted, so this costs the same for a value of any size.

    >>> print(shorten("general.name"), shorten(b"ab" * 500, 8))
    'general.name' b'abababab'... (1,000 bytes)
    """
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        n = len(value)
        if n <= limit:
            return repr(bytes(value) if isinstance(value, (bytearray, memoryview)) else value)
        head = value[:limit]
        unit = "characters" if isinstance(value, str) else "bytes"
        shown = repr(head if isinstance(head, (str, bytes)) else bytes(head))
        return f"{shown[:-1]}...{shown[-1]} ({n:,} {unit})" if isinstance(value, str) else f"{shown}... ({n:,} {unit})"
    text = repr(value)
    return text if len(text) <= 4 * limit else text[: 4 * limit] + f"... ({len(text):,} characters)"


class GGUFError(Exception):
    """Root of every error raised by gguf-schema.

    Attributes:
        reason: what is wrong, in words.
        offset: byte offset in the file where it went wrong (None when not about a file position).
        path: schema path of the offending item, e.g. ``metadata_kv[3] 'general.name' -> value``.
        value: the offending value, when there is one (kept whole; the message shows it shortened).
    """

    def __init__(self, reason: str, *, offset: int | None = None, path: str | None = None, value: Any = _UNSET):
        self.reason = reason
        self.offset = offset
        self.path = path
        self.has_value = value is not _UNSET
        self.value = value if self.has_value else None
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.offset is not None:
            where.append(f"at offset {self.offset}")
        if self.path:
            where.append(f"in {self.path}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def __str__(self) -> str:
        return self._message()

    def replace(self, **changes: Any) -> GGUFError:
        """A copy of this error with some of ``reason``, ``offset``, ``path``, ``value`` changed."""
        fields: dict[str, Any] = {
            "reason": self.reason,
            "offset": self.offset,
            "path": self.path,
            "value": self.value if self.has_value else _UNSET,
        }
        fields.update(changes)
        return _rebuild(type(self), fields["reason"], fields["offset"], fields["path"], fields["value"])

    def __reduce__(self) -> tuple[Any, ...]:  # keep pickling (multiprocessing) working with keyword-only fields
        return (_rebuild, (type(self), self.reason, self.offset, self.path, self.value if self.has_value else _UNSET))


def _rebuild(cls: type[GGUFError], reason: str, offset: int | None, path: str | None, value: Any) -> GGUFError:
    return cls(reason, offset=offset, path=path, value=value)


class GGUFFormatError(GGUFError, ValueError):
    """The bytes are not a valid GGUF file (bad magic, unknown type id, inconsistent sizes...)."""


class GGUFTruncatedError(GGUFFormatError, EOFError):
    """The file ends before a field the format requires (also an ``EOFError``)."""


class GGUFLimitError(GGUFFormatError):
    """A declared length, count or nesting depth exceeds a configured resource limit."""


class GGUFBuildError(GGUFError, ValueError):
    """A value cannot be written as GGUF (wrong type, out of range, inconsistent tensor)."""


class GGUFRoundTripError(GGUFError, ValueError):
    """A file cannot be rebuilt byte for byte (and the caller asked for exactness)."""


class GGUFInternalError(GGUFError, RuntimeError):
    """A bug in gguf-schema itself (a state its own code should never reach), never the file's or
    the caller's fault: please report it."""


class GGUFKeyError(GGUFError, KeyError):
    """A metadata key or tensor name that is not there (also a ``KeyError``)."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return self._message()


class GGUFValidationError(GGUFFormatError):
    """A file breaks a rule of the validation profile it was opened or checked under.

    Attributes:
        finding: the first error-severity finding (rule id, offset, name, value, message).
        report: the whole report, when there is one.
    """

    def __init__(
        self,
        reason: str,
        *,
        finding: Any = None,
        report: Any = None,
        offset: int | None = None,
        path: str | None = None,
        value: Any = _UNSET,
    ):
        self.finding = finding
        self.report = report
        super().__init__(reason, offset=offset, path=path, value=value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_validation,
            (self.reason, self.finding, self.report, self.offset, self.path, self.value if self.has_value else _UNSET),
        )


def _rebuild_validation(
    reason: str, finding: Any, report: Any, offset: int | None, path: str | None, value: Any
) -> GGUFValidationError:
    return GGUFValidationError(reason, finding=finding, report=report, offset=offset, path=path, value=value)


class GGUFIOError(GGUFError, OSError):
    """The file cannot be opened, read or written (also the matching ``OSError``).

    ``errno``, ``strerror`` and ``filename`` are those of the operating system's error; for a
    remote file ``path`` and ``filename`` are its URL, and ``offset`` where a ranged read failed.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str | None = None,
        errno: int | None = None,
        offset: int | None = None,
        value: Any = _UNSET,
    ):
        super().__init__(reason, offset=offset, path=path, value=value)
        self.errno = errno
        self.strerror = reason
        self.filename = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_io, (type(self), self.reason, self.path, self.errno, self.offset))


def _rebuild_io(
    cls: type[GGUFIOError], reason: str, path: str | None, errno: int | None, offset: int | None = None
) -> GGUFIOError:
    return cls(reason, path=path, errno=errno, offset=offset)


class GGUFFileNotFoundError(GGUFIOError, FileNotFoundError):
    """There is no file at the path or URL (also a ``FileNotFoundError``; HTTP 404 and 410)."""


class GGUFPermissionError(GGUFIOError, PermissionError):
    """The operating system or the server refuses access (also a ``PermissionError``; HTTP 401 and 403)."""


class GGUFChangedError(GGUFIOError):
    """The file changed under an operation (replaced, truncated or edited by another process;
    a remote file that became shorter than when it was opened)."""


class GGUFConnectionError(GGUFIOError, ConnectionError):
    """The server of a remote file cannot be reached, or it dropped the connection (also a ``ConnectionError``)."""


class GGUFTimeoutError(GGUFIOError, TimeoutError):
    """The server of a remote file did not answer in the time allowed (also a ``TimeoutError``)."""


class GGUFRemoteError(GGUFIOError):
    """The server of a remote file answered with an error (``status``: the HTTP status, when there is one).

    >>> e = GGUFRemoteError("the server answered HTTP 503", path="https://example.org/m.gguf", status=503)
    >>> e.status, str(e)
    (503, 'the server answered HTTP 503 (in https://example.org/m.gguf)')
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str | None = None,
        status: int | None = None,
        errno: int | None = None,
        offset: int | None = None,
        value: Any = _UNSET,
    ):
        super().__init__(reason, path=path, errno=errno, offset=offset, value=value)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_remote, (self.reason, self.path, self.status, self.offset))


def _rebuild_remote(reason: str, path: str | None, status: int | None, offset: int | None) -> GGUFRemoteError:
    return GGUFRemoteError(reason, path=path, status=status, offset=offset)


class GGUFDependencyError(GGUFError, ImportError):
    """An optional package a feature needs is not installed (also an ``ImportError``); the message
    says which extra to install, e.g. ``pip install 'gguf-schema[remote]'``.

    Attributes:
        name: the missing module (as ``ImportError.name``).
    """

    def __init__(self, reason: str, *, name: str | None = None):
        super().__init__(reason)
        self.name = name
        self.path = None  # ImportError's own ``path`` slot: not a file's

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_dependency, (self.reason, self.name))


def _rebuild_dependency(reason: str, name: str | None) -> GGUFDependencyError:
    return GGUFDependencyError(reason, name=name)


_OS_CLASSES: dict[int, type[GGUFIOError]] = {
    _errno.ENOENT: GGUFFileNotFoundError,
    _errno.EACCES: GGUFPermissionError,
    _errno.EPERM: GGUFPermissionError,
}


def os_error(e: OSError, path: str | None = None) -> GGUFIOError:
    """The :class:`GGUFIOError` subclass for an operating-system error (``FileNotFoundError`` ->
    :class:`GGUFFileNotFoundError` ...), keeping its errno, words and file name.

    >>> e = os_error(FileNotFoundError(2, "No such file or directory", "m.gguf"))
    >>> isinstance(e, FileNotFoundError), str(e)
    (True, 'No such file or directory (in m.gguf)')
    """
    if isinstance(e, GGUFIOError):
        return e
    cls = _OS_CLASSES.get(e.errno or 0, GGUFIOError)
    where = path if path is not None else (str(e.filename) if e.filename is not None else None)
    return cls(e.strerror or str(e), path=where, errno=e.errno)


class GGUFDocumentError(GGUFError, ValueError):
    """A document given as the GGUF specification states none of its structure (no enum, struct,
    key list, architecture or rule): there is nothing to audit."""


class GGUFInstallWarning(UserWarning):
    """The installation is not what it seems: e.g. ``gguf_schema`` was imported from a source tree
    without its compiled kernels while an installed copy has them (Python started in a clone's root
    after ``pip install .`` puts the clone first on its path). Results are the same, only slower;
    the message says where each copy is and what to do."""


class GGUFWarning(UserWarning):
    """What is being written breaks a validation rule (:data:`gguf_schema.check.RULES`): the file is
    written anyway; ``strict=PROFILE`` refuses it instead (a :class:`GGUFValidationError`).

    Attributes:
        rule: the rule id, e.g. ``GGUF-E033``.
        reason: what is wrong, in words.
        name: the metadata key or tensor name involved, if any.
        finding: the validator's finding (rule, severity, name, value, message).

    >>> w = GGUFWarning("GGUF-E033", "5 dimensions, at most 4 allowed", name="t")
    >>> print(w)
    [GGUF-E033] 't': 5 dimensions, at most 4 allowed
    >>> isinstance(w, UserWarning), w.rule
    (True, 'GGUF-E033')
    """

    def __init__(self, rule: str, reason: str, *, name: str | None = None, finding: Any = None):
        self.rule = rule
        self.reason = reason
        self.name = name
        self.finding = finding
        where = shorten(name) if name is not None else None
        text = f"[{rule}] {where}: {reason}" if where is not None and where not in reason else f"[{rule}] {reason}"
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_warning, (self.rule, self.reason, self.name))


def _rebuild_warning(rule: str, reason: str, name: str | None) -> GGUFWarning:
    return GGUFWarning(rule, reason, name=name)
