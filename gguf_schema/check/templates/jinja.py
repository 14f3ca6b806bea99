"""The Jinja environments of the audit: the parser's, the folding sandbox, and the runtime-like sandbox of a render.

This module imports nothing of gguf-schema: the render's child process loads it by path
(:mod:`.worker`), without importing the package. Jinja2 is an optional dependency
(``pip install 'gguf-schema[audit]'``).

* :func:`parse` lexes once and parses with Jinja's own parser (the extensions runtimes enable:
  loop controls, ``do``, transformers' ``{% generation %}``), returning the syntax tree and the
  string tokens as written (for escapes, :func:`escaped_ascii`).
* :func:`fold_environment` is where the audit runs a filter on constants: an immutable sandbox.
* :func:`runtime_environment` is what a loader renders with (:data:`FLAVOURS`): transformers' and
  llama-cpp-python's immutable sandbox with ``trim_blocks``/``lstrip_blocks``, their ``tojson``,
  ``raise_exception`` and ``strftime_now``; or plain jinja2's defaults (autoescape off or on).
* :func:`identifier` is how Python sees a name: Jinja compiles variable names to Python
  identifiers, which Python normalises (NFKC), so a fullwidth ``n`` (U+FF4E) and ``n`` are one variable.
"""

from __future__ import annotations

import datetime
import json
import re
import time
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = [
    "FLAVOURS",
    "INSTALL_HINT",
    "escaped_ascii",
    "fold_environment",
    "generation_extension",
    "identifier",
    "parse",
    "require_jinja",
    "runtime_environment",
]

INSTALL_HINT = "pip install 'gguf-schema[audit]'"

_cache: dict[str, Any] = {}


def require_jinja() -> Any:
    try:
        import jinja2
    except ImportError as e:
        raise ImportError(f"auditing chat templates needs Jinja2, which is not installed: {INSTALL_HINT}") from e
    return jinja2


def identifier(name: str) -> str:
    """``name`` as a Python identifier (NFKC), which is how compiled templates name variables and keywords."""
    return name if name.isascii() else unicodedata.normalize("NFKC", name)


def target_names(nodes: Any, target: Any) -> list[str]:
    """The names an assignment or loop target binds (``a``, ``a, b``, ``[a, (b, c)]``) as identifiers;
    ``nodes`` is ``jinja2.nodes``."""
    if isinstance(target, nodes.Name):
        return [identifier(target.name)]
    if isinstance(target, (nodes.Tuple, nodes.List)):
        return [name for item in target.items for name in target_names(nodes, item)]
    return []


def generation_extension() -> type:
    """transformers' ``{% generation %}...{% endgeneration %}`` tag, as a no-op that keeps its body."""
    ext = _cache.get("generation")
    if ext is None:
        import jinja2.ext

        class GenerationTag(jinja2.ext.Extension):
            tags = {"generation"}  # noqa: RUF012 - the attribute Jinja reads, declared by its base class

            def parse(self, parser: Any) -> Any:
                next(parser.stream)
                return parser.parse_statements(("name:endgeneration",), drop_needle=True)

        ext = _cache["generation"] = GenerationTag
    return ext


EXTENSIONS = ("jinja2.ext.loopcontrols", "jinja2.ext.do")


def _parse_environment() -> Any:
    env = _cache.get("parse")
    if env is None:
        jinja2 = require_jinja()
        env = _cache["parse"] = jinja2.Environment(extensions=[*EXTENSIONS, generation_extension()])
    return env


class ParseOverBudget(Exception):
    """Lexing and parsing the template went past its CPU deadline or its count of tokens."""


def _clocked(tokens: Iterable[Any], deadline: float | None, max_tokens: int | None) -> Iterator[Any]:
    """``tokens``, with the CPU clock read every 64 of them (Jinja's lexer and parser do a bounded amount of work
    per token, so the parse stops within a few milliseconds of ``deadline``) and at most ``max_tokens``."""
    for i, token in enumerate(tokens):
        if i & 63 == 0:
            if deadline is not None and time.thread_time() > deadline:
                raise ParseOverBudget("past its CPU deadline")
            if max_tokens is not None and i > max_tokens:
                raise ParseOverBudget(f"more than {max_tokens:,} tokens")
        yield token


def parse(
    source: str, name: str, deadline: float | None = None, max_tokens: int | None = None
) -> tuple[Any, list[tuple[int, str]]]:
    """The template's syntax tree and its string tokens ``(line, raw text)``, lexed once.

    Raises Jinja's ``TemplateSyntaxError`` for a template Jinja cannot parse, :class:`ParseOverBudget` when
    lexing and parsing pass the CPU time ``deadline`` (``time.thread_time()``) or ``max_tokens`` tokens.
    """
    from jinja2 import nodes
    from jinja2.lexer import TokenStream
    from jinja2.parser import Parser

    env = _parse_environment()
    raw = list(_clocked(env.lexer.tokeniter(source, name), deadline, max_tokens))
    parser = Parser(env, source, name)
    parser.stream = TokenStream(env.lexer.wrap(_clocked(raw, deadline, None), name), name, None)
    strings = [(line, value) for line, token, value in raw if token == "string"]
    # Parser.parse() also binds every node to the environment (for constant folding at compile
    # time), a walk the audit does not need.
    return nodes.Template(parser.subparse(), lineno=1), strings


def fold_environment() -> Any:
    """Where constant filters run while folding: a sandbox, so a folded ``attr`` cannot escape."""
    env = _cache.get("fold")
    if env is None:
        require_jinja()
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = _cache["fold"] = ImmutableSandboxedEnvironment()
    return env


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


#: The Jinja configurations loaders render with: ``transformers`` (and llama-cpp-python since it copied it):
#: trim_blocks, lstrip_blocks, a ``tojson`` that keeps key order and escapes nothing; ``jinja2``: Jinja's
#: defaults (its own ``tojson`` sorts keys and escapes HTML characters, no block trimming); ``jinja2-autoescape``:
#: the same with autoescape on (output and ``~`` give Markup, escaped).
FLAVOURS = ("transformers", "jinja2", "jinja2-autoescape")


def runtime_environment(sandboxed: bool = True, flavour: str = "transformers") -> Any:
    """A fresh environment like the one a loader renders chat templates with (``flavour``, one of :data:`FLAVOURS`).

    ``sandboxed=False`` gives the same environment without the sandbox: what an unsandboxed
    runtime runs (tests and the fuzzer prove payloads live with it, in a child process).
    """
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {FLAVOURS}, not {flavour!r}")
    jinja2 = require_jinja()
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment, modifies_known_mutable

    # transformers renders in the immutable sandbox; a loader on plain jinja2 lets templates change lists and
    # dicts, so its configurations render in the sandbox that allows that (and refuses the same internals)
    base = ImmutableSandboxedEnvironment if flavour == "transformers" else SandboxedEnvironment

    class Sandbox(base):  # type: ignore[valid-type,misc]
        def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
            error = SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")
            # refused only because it changes a list, dict or set (the immutable sandbox's rule): on a value the
            # template made, the template fails to render there and reaches nothing (``mutation`` and ``receiver``
            # tell the render's child so); on the request's data it changes the caller's objects
            mutation = modifies_known_mutable(obj, attribute) and SandboxedEnvironment.is_safe_attribute(
                self, obj, attribute, getattr(obj, attribute, None)
            )
            # attributes SecurityError does not declare: the render's child reads them
            setattr(error, "mutation", mutation)  # noqa: B010
            setattr(error, "receiver", id(obj))  # noqa: B010
            raise error

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return datetime.datetime(2025, 1, 1, 12, 0, 0).strftime(fmt)

    cls = Sandbox if sandboxed else jinja2.Environment
    extensions = [*EXTENSIONS, generation_extension()]
    if flavour == "transformers":
        env = cls(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
        env.filters["tojson"] = _tojson
    else:
        env = cls(autoescape=flavour == "jinja2-autoescape", extensions=extensions)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_ESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[0-7]{1,3}|.)", re.S)


def escaped_ascii(raw: str) -> str:
    """The printable ASCII characters a string token writes with escape sequences (``\\x5f``, ``\\137``...)."""
    out = []
    for m in _ESCAPE_RE.finditer(raw):
        code = m.group(1)
        ch = None
        if code[0] in "xuU":
            ch = chr(int(code[1:], 16))
        elif code[0] == "N":
            try:
                ch = unicodedata.lookup(code[2:-1])
            except KeyError:
                ch = None
        elif code[0] in "01234567":
            ch = chr(int(code, 8))
        if ch is not None and 0x21 <= ord(ch) <= 0x7E:
            out.append(ch)
    return "".join(out)
