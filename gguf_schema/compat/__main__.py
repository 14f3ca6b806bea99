"""``python -m gguf_schema.compat SCRIPT [ARGS...]``: run one of gguf-py's own scripts on our engine.

The ``gguf`` package installs console scripts (``gguf-dump``, ``gguf-set-metadata``,
``gguf-new-metadata``, ``gguf-convert-endian``, ...). This runner finds the one named SCRIPT among the
console scripts the installed ``gguf`` package declares, applies :func:`gguf_schema.compat.patch`
(our reader, writer and kernels in the ``gguf`` package) and runs it with ARGS, as its own command
would: the same options, the same output and files, at the cost of our open. No wrapper to write::

    python -m gguf_schema.compat gguf-dump --json model.gguf
    python -m gguf_schema.compat gguf-set-metadata model.gguf general.name "new name"

Without SCRIPT (or with ``-h``) it lists the scripts installed. Exit status: the script's own; 2 for
an unknown script, or when the ``gguf`` package is not installed (``pip install gguf``). Errors in a
file are then ours: :class:`~gguf_schema.errors.GGUFError`, naming offset, schema path and value,
printed as ``gguf-schema: error: ...``. Like ``gguf-schema`` (:func:`gguf_schema.cli.console`), the runner
asks OpenBLAS for one thread unless the user chose a count: gguf-py's scripts do no linear algebra, and
the threads OpenBLAS starts when numpy loads cost CPU time for nothing.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Sequence

from ..errors import GGUFError

__all__ = ["main", "scripts"]


def scripts() -> dict[str, importlib.metadata.EntryPoint]:
    """gguf-py's console scripts, by name, as the installed ``gguf`` package declares them (empty
    when it is not installed)."""
    try:
        points = importlib.metadata.distribution("gguf").entry_points
    except importlib.metadata.PackageNotFoundError:
        return {}
    return {ep.name: ep for ep in points if ep.group == "console_scripts"}


def _usage(found: dict[str, importlib.metadata.EntryPoint]) -> str:
    listed = ", ".join(sorted(found)) if found else "none: the gguf package is not installed (pip install gguf)"
    return (
        "usage: python -m gguf_schema.compat SCRIPT [ARGS...]\n\n"
        "Run one of gguf-py's scripts with gguf_schema.compat.patch() applied: gguf-py's options and output, "
        "on gguf-schema's reader, writer and kernels.\n\n"
        f"scripts installed: {listed}\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``SCRIPT ARGS...`` (default: ``sys.argv[1:]``) under :func:`~gguf_schema.compat.patch`; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    found = scripts()
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_usage(found))
        return 0
    name, rest = args[0], args[1:]
    if name not in found:
        known = ", ".join(sorted(found)) if found else "none (pip install gguf)"
        sys.stderr.write(f"gguf-schema: error: {name!r} is not one of gguf-py's scripts installed here: {known}\n")
        return 2
    from .patching import patch  # (here: run as a program, numpy must load after the thread count is set)

    saved = sys.argv
    try:
        with patch():
            run = found[name].load()  # imported under the patch: its `from gguf import ...` get ours
            sys.argv = [name, *rest]
            try:
                code = run()
            except SystemExit as e:  # the script's own exit (argparse, sys.exit(1))
                code = e.code
    except GGUFError as e:
        sys.stderr.write(f"gguf-schema: error: {e}\n")
        return 2
    finally:
        sys.argv = saved
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


if __name__ == "__main__":
    # a program of its own, as `gguf-schema` is (gguf_schema.cli.console): gguf-py's scripts do no linear
    # algebra, so OpenBLAS is asked for one thread unless the user chose a count
    if not any(v in os.environ for v in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    sys.exit(main())
