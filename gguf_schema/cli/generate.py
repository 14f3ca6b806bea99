"""The ``demo`` and ``generate`` commands: an example model proven to round-trip, and fixture files with their manifest.

``gguf-schema generate OUT_DIR [--only KIND ...] [--seed N] [--small]`` writes the fixtures of
:mod:`gguf_schema.testing.fixtures` (families ``arch``, ``types``, ``edge``, ``malformed``)
and ``OUT_DIR/manifest.jsonl``, one JSON line per file with its expected verdict per profile.
This module needs neither hypothesis nor pytest.

>>> import argparse, tempfile, os, contextlib, io
>>> parser = argparse.ArgumentParser(); sub = parser.add_subparsers()
>>> COMMANDS.add_to(sub)
>>> with tempfile.TemporaryDirectory() as d:
...     args = parser.parse_args(["generate", d, "--only", "types"])
...     with contextlib.redirect_stdout(io.StringIO()) as out:
...         code = args.func(args)
...     code, "type_Q4_K.gguf" in os.listdir(d)
(0, True)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import tempfile
import warnings
from collections import Counter
from typing import Any

import numpy as np

from .. import GGUFArray, GGUFWarning, RawTensor, save
from .. import open as open_gguf
from ..check import check
from ..testing.demo import example_metadata, example_tensors
from ..testing.fixtures import KINDS, generate
from .command import Family, arg
from .conventions import EXIT_FINDINGS, EXIT_OK

__all__ = ["COMMANDS"]

COMMANDS = Family()


@COMMANDS.command(
    "demo",
    "write a small example model, read it back and prove the round trip",
    arg(
        "-o",
        "--output",
        default=None,
        metavar="PATH",
        help="where to write the example (default: demo.gguf in a new temporary folder)",
    ),
    description="Write demo.gguf, a small llama-style model with all 13 metadata value types and F32, F16, I32 "
    "and Q8_0 tensors (by default in a new folder of the system's temporary space; the first line printed "
    "says where), read it back, print what it holds, prove the round trip (the rebuilt bytes identical, "
    "every value and tensor equal) and check it under the spec, ggml and lenient validation profiles. "
    "Exit 0 when all of that holds, 1 otherwise. Reads no file of yours.",
)
def _cmd_demo(args: argparse.Namespace) -> int:
    # by default a new folder of the system's temporary space: run from a clone, the demo leaves
    # nothing in the working tree; the first line says where the file is
    path = (
        args.output
        if args.output is not None
        else os.path.join(tempfile.mkdtemp(prefix="gguf-schema-demo-"), "demo.gguf")
    )
    metadata, tensors = example_metadata(nested=False), example_tensors()
    save(path, metadata, tensors)
    with open(path, "rb") as fh:
        written = fh.read()
    print(f"wrote {path}: {len(written):,} bytes, sha256 {hashlib.sha256(written).hexdigest()[:16]}…")
    with open_gguf(path) as f:
        print(f"GGUF v{f.version}, {f.byte_order}-endian, alignment {f.alignment}, data at offset {f.data_offset}")
        print(f"{len(f.fields)} metadata keys:")
        for key, field in f.fields.items():
            et = f"[{field.element_type.name}]" if field.element_type is not None else ""
            value = repr(field.plain())
            print(f"  {key:42} {field.type.name + et:16} {value[:60] + ('…' if len(value) > 60 else '')}")
        print(f"{len(f.tensors)} tensors:")
        for t in f.tensors.values():
            print(
                f"  {t.name:26} {t.type_name:5} shape {t.shape!s:10} dims {t.dims!s:10} {t.nbytes:6,} bytes at {t.offset}"
            )
        rebuilt = io.BytesIO()
        f.save(rebuilt)
        same_bytes = rebuilt.getvalue() == written
        values_ok = all(_same(f.fields[k].plain(), _plainify(v)) for k, v in metadata.items())
        tensors_ok = all(
            np.array_equal(
                f.tensors[n].data.reshape(-1).view(np.uint8),
                np.frombuffer(np.ascontiguousarray(t.data if isinstance(t, RawTensor) else t).tobytes(), np.uint8),
            )
            for n, t in tensors.items()
        )
    print(
        f"round trip: rebuilt bytes identical: {same_bytes}; values equal: {values_ok}; tensor bytes equal: {tensors_ok}"
    )
    verdicts = {profile: check(path, profile) for profile in ("spec", "ggml", "lenient")}
    print(
        "validation: " + ", ".join(f"{p} {'clean' if r.ok else f'{len(r.errors)} errors'}" for p, r in verdicts.items())
    )
    proven = same_bytes and values_ok and tensors_ok and all(r.ok for r in verdicts.values())
    return EXIT_OK if proven else EXIT_FINDINGS


def _plainify(v: Any) -> Any:
    if isinstance(v, GGUFArray):
        return v.plain()
    if hasattr(v, "dtype") and getattr(v, "shape", None) == ():
        return v.item()
    return v


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, float) or isinstance(b, float):
        return (
            float(np.float32(a)) == float(np.float32(b))
            if isinstance(b, np.float32) or isinstance(a, np.float32)
            else a == b
        )
    return a == b


@COMMANDS.command(
    "generate",
    "write fixture GGUF files (valid, edge-case, malformed) with a manifest",
    arg("out_dir", metavar="OUT_DIR", help="folder to write into (created if missing)"),
    arg(
        "--only",
        nargs="+",
        choices=KINDS,
        metavar="KIND",
        help=f"write only these families: {', '.join(KINDS)} (default: all)",
    ),
    arg("--seed", type=int, default=0, help="seed of the random tensor data (default 0; same seed, same bytes)"),
    arg("--small", action="store_true", help="a 30k-token vocabulary instead of 300k for the huge-vocabulary file"),
    description="Write fixture GGUF files and OUT_DIR/manifest.jsonl (file, kind, description, "
    "expected verdict per profile spec/ggml/lenient, size, sha256).",
)
def _cmd_generate(args: argparse.Namespace) -> int:
    with warnings.catch_warnings():  # edge-case fixtures break rules on purpose: no warning for each
        warnings.simplefilter("ignore", GGUFWarning)
        records = generate(args.out_dir, kinds=args.only or KINDS, seed=args.seed, small=args.small)
    kinds = Counter(r["kind"] for r in records)
    total = sum(r["size"] for r in records)
    print(
        f"wrote {len(records)} files ({total:,} bytes) and manifest.jsonl to {args.out_dir}: "
        + ", ".join(f"{n} {k}" for k, n in kinds.items())
    )
    return EXIT_OK
