"""The ``quantize`` command: requantize a model file (:func:`gguf_schema.tools.requantize.requantize`), printed.

The plan's notes (fallbacks, tensors without importance weights) go to stderr before the write
starts, the progress bar to stderr while it runs, and the per-tensor table (types, bytes, RMS
error against the input) to stdout at the end (``--json``: the same as one JSON record).
Exit codes: 0 written (or planned, with ``--dry-run``), 2 bad input (nothing written).

>>> import argparse
>>> sub = argparse.ArgumentParser(prog="gguf-schema").add_subparsers()
>>> register_cli(sub)
>>> sorted(sub.choices)
['quantize']
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..errors import GGUFError
from ..format.types import GGMLType
from ..tensors import CODECS, QUANTIZE_TYPES
from ..tools.requantize import RequantizeResult, TensorReport, parse_tensor_type, requantize
from .conventions import EXIT_ERROR, open_options, positive_int, write, write_json
from .progress import Progress

__all__ = ["register_cli"]


def _type_arg(text: str) -> GGMLType:
    try:
        t = GGMLType.of(text.strip().upper())
    except (ValueError, TypeError):
        t = None
    if t is None or t not in QUANTIZE_TYPES:
        raise argparse.ArgumentTypeError(f"cannot quantize to {text!r} (types: {_type_names()})")
    return t


def _tensor_type_arg(text: str) -> tuple[str, GGMLType]:
    try:
        return parse_tensor_type(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _type_names() -> str:
    return ", ".join(t.name for t in sorted(QUANTIZE_TYPES, key=int))


def _needs_imatrix() -> str:
    return ", ".join(t.name for t in sorted(QUANTIZE_TYPES, key=int) if CODECS[t].needs_imatrix) or "no type"


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def _error(r: TensorReport) -> str:
    if r.rms_error is None:
        return "-"
    rel = r.relative_error
    rel_text = "-" if rel is None else f"{rel * 100:.3f}%"
    return f"{r.rms_error:.3e} ({rel_text})"


def _table(result: RequantizeResult) -> str:
    rows = [("tensor", "shape", "type", "bytes", "RMS error (relative)")]
    for r in result.tensors:
        types = r.old_type.name if r.new_type == r.old_type else f"{r.old_type.name} -> {r.new_type.name}"
        rows.append((r.name, _shape(r.shape), types, f"{r.nbytes:,}", _error(r)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i in (0, 1, 2) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    planned = " (dry run: nothing written)" if result.dry_run else ""
    ftype = result.file_type.name if result.file_type is not None else "none"
    n = sum(r.requantized for r in result.tensors)
    lines.append(
        f"{n} of {len(result.tensors)} tensors requantized to {result.type.name} ({len(result.fallbacks)} fell back); "
        f"tensor data {_mib(result.input_bytes)} -> {_mib(result.output_bytes)}{planned}; file type {ftype}"
    )
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _cmd_quantize(args: argparse.Namespace) -> int:
    bars: list[Progress] = []  # made once the plan gives the total

    def planned(result: RequantizeResult) -> None:
        for r in result.tensors:
            if r.requested is not None and r.new_type != r.requested:
                print(f"gguf-schema: {r.name}: {r.reason}", file=sys.stderr)
        for note in result.notes:
            print(f"gguf-schema: note: {note}", file=sys.stderr)
        if not result.dry_run:
            bars.append(Progress(result.header_bytes + result.output_bytes, "quantize"))

    def progress(n: int) -> None:
        if bars:
            bars[0].update(n)

    try:
        result = requantize(
            args.input,
            args.output,
            args.type,
            imatrix=args.imatrix,
            tensor_types=args.tensor_type or (),
            keep_1d=args.keep_1d,
            threads=args.threads,
            dry_run=args.dry_run,
            progress=progress,
            on_plan=planned,
            **open_options(args),
        )
    except ValueError as e:
        if isinstance(e, GGUFError):  # bad input files: reported by main
            raise
        print(f"gguf-schema: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        for bar in bars:
            bar.close()
    if args.json:
        write_json(result.to_dict())
    else:
        write(_table(result))
    if not args.dry_run:
        print(f"gguf-schema: wrote {os.fspath(args.output)}", file=sys.stderr)
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``quantize`` to the ``gguf-schema`` command line."""
    p = subparsers.add_parser(
        "quantize",
        help="requantize a model file to another ggml type (streamed, atomic)",
        description="Decode every weight matrix of IN (any type) and encode it as TYPE into the new file OUT, "
        "tensor by tensor in chunks of rows (memory stays bounded), written atomically. Which tensors are "
        "requantized follows llama-quantize: names ending in 'weight' with two or more dimensions, norms, "
        "routers and position embeddings excepted. Rows that are not whole blocks of TYPE fall back as in "
        "llama.cpp (Q4_K -> Q5_0, Q6_K -> Q8_0, IQ/Q2_K/Q3_K -> IQ4_NL ..., then F16). Prints one line per "
        "tensor with the RMS error of its values against the input. general.file_type and "
        "general.quantization_version are set.",
    )
    p.add_argument("input", metavar="IN", help="the model: a path, a URL, or the first shard of a split model")
    p.add_argument("output", metavar="OUT", help="the new file (never the input)")
    p.add_argument("--type", "-t", required=True, type=_type_arg, metavar="TYPE", help=f"ggml type: {_type_names()}")
    p.add_argument(
        "--imatrix",
        metavar="FILE",
        help=f"importance matrix from llama-imatrix (GGUF or legacy .dat); required for {_needs_imatrix()}",
    )
    p.add_argument(
        "--tensor-type",
        action="append",
        type=_tensor_type_arg,
        metavar="REGEX=TYPE",
        help="type for the requantized tensors whose name REGEX is found in (repeatable, first match wins)",
    )
    p.add_argument(
        "--keep-1d",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep 1-D tensors (norms, biases) as they are (default; --no-keep-1d requantizes 1-D weights too)",
    )
    p.add_argument("--threads", type=positive_int, metavar="N", help="worker threads (default: the CPUs, at most 8)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (types and sizes), write nothing")
    p.add_argument("--json", action="store_true", help="print the per-tensor table as JSON")
    p.set_defaults(func=_cmd_quantize)
