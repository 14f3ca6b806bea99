"""Helpers shared by the test modules (imported explicitly, not through conftest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

import gguf_schema
from gguf_schema.format.fast import fast_schema
from gguf_schema.format.limits import Limits
from gguf_schema.format.schema import GGUFSchema
from gguf_schema.format.schema import gguf_schema as reference_schema
from gguf_schema.format.types import GGMLType
from gguf_schema.reader import read_with

VARIANT_IDS = ["fast", "reference"]

IQ_LATTICE = frozenset(
    {
        GGMLType.IQ2_XXS,
        GGMLType.IQ2_XS,
        GGMLType.IQ2_S,
        GGMLType.IQ3_XXS,
        GGMLType.IQ3_S,
        GGMLType.IQ1_S,
        GGMLType.IQ1_M,
    }
)
"""The IQ types quantized on a lattice (row quantizers only, importance matrices; tested in test_quantize_iq.py)."""


GOLDEN = Path(__file__).parent / "data" / "golden"
"""ggml's golden vectors (origins and checksums in its SOURCES): ``quants/`` as ggml d99724f2b made them, each
distinct array stored once (``quants/manifest.json`` says how to put each type's file back together), and
``IQ1_M.npz``: the bytes of a newer ggml, which changed that quantizer (SOURCES.md there)."""
GOLDEN_MANIFEST: dict[str, dict[str, Any]] = json.loads((GOLDEN / "quants" / "manifest.json").read_text("utf-8"))
"""Per ggml type name: ``id``, ``row_bytes``, ``arrays`` (names), each array's ``sha256``/``dtype``/``shape``, ``same_as``."""


def ggml_golden(name: str) -> dict[str, np.ndarray]:
    """Type ``name``'s golden vectors exactly as ggml d99724f2b made them (``x``, ``imatrix``, ``q``, ``q_ref``,
    ``q_imatrix``, ``deq``, ``deq_imatrix`` where ggml has them), put back together from the packed set."""
    with np.load(GOLDEN / "quants" / "inputs.npz") as z:
        g = {k: z[k] for k in z.files}
    with np.load(GOLDEN / "quants" / f"{name}.npz") as z:
        g.update({k: z[k] for k in z.files})
    for key, twin in GOLDEN_MANIFEST[name]["same_as"].items():
        g[key] = g[twin].copy()
    return g


def golden_vectors(name: str) -> dict[str, np.ndarray]:
    """The golden vectors of type ``name``: ggml d99724f2b's (:func:`ggml_golden`), with the quantized bytes of
    a newer ggml (``q``, ``q_imatrix``) in their place where ggml has changed that quantizer."""
    g = ggml_golden(name)
    newer = GOLDEN / f"{name}.npz"
    if newer.is_file():
        with np.load(newer) as z:
            assert np.array_equal(z["x"], g["x"]) and np.array_equal(z["imatrix"], g["imatrix"])
            g.update({k: z[k] for k in ("q", "q_imatrix")})
            g.pop("q_ref", None)  # the packed reference bytes are the older ggml's
    return g


def read_reference(source: Any, *, limits: Limits | None = None) -> gguf_schema.GGUFFile:
    """Open with the plain schema (the spec's nodes alone, without the fast layer)."""
    return read_with(reference_schema, source, limits=limits)


def open_variant(source: Any, fast: bool = True, **kw: Any) -> gguf_schema.GGUFFile:
    """Open with the schema as shipped (``fast``: accelerated) or with the plain schema (construct's ``Array``)."""
    return gguf_schema.open(source, **kw) if fast else read_reference(source, **kw)


def schema_variant(order: str, version: int, fast: bool = True) -> GGUFSchema:
    """The schema of a (byte order, version), accelerated (as shipped) or plain."""
    return fast_schema(order, version) if fast else reference_schema(order, version)


def bits(a: np.ndarray) -> np.ndarray:
    """Float32 values as their bit patterns: compare floats exactly (NaN payloads and signed zeros included)."""
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


class CLIResult:
    """What a command printed and returned: ``returncode``, ``stdout`` and ``stderr`` as bytes."""

    def __init__(self, returncode: int, stdout: bytes, stderr: bytes):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __repr__(self) -> str:
        return f"CLIResult({self.returncode}, stdout={self.stdout[:200]!r}, stderr={self.stderr[:200]!r})"


def run_cli(*args: Any, stdin: bytes | None = None, env: dict[str, str] | None = None) -> CLIResult:
    """Run ``gguf-schema ARGS`` in this process (as ``main`` runs it), capturing its output as bytes.

    The progress bar is left to its default (off: stderr is not a terminal here). A few tests also
    run the real command in a subprocess, for what only a process shows (pipes, exit status, -m).
    """
    import contextlib
    import io
    import os
    import sys

    from gguf_schema.cli import main

    out, err = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", errors="surrogateescape", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    stdin_stream = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    old_in = sys.stdin
    sys.stdin = stdin_stream
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:  # argparse: usage errors and --help
                code = e.code if isinstance(e.code, int) else 2
    finally:
        sys.stdin = old_in
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return CLIResult(code, out.getvalue(), err.getvalue())
