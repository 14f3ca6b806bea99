"""The ``gguf-schema generate`` command: write fixture files and their manifest.

``gguf-schema generate OUT_DIR [--only KIND ...] [--seed N] [--small]`` writes the fixtures of
:mod:`gguf_schema.testing.fixtures` (families ``arch``, ``types``, ``edge``, ``malformed``)
and ``OUT_DIR/manifest.jsonl``, one JSON line per file with its expected verdict per profile.
This module needs neither hypothesis nor pytest.

>>> import argparse, tempfile, os, contextlib, io
>>> parser = argparse.ArgumentParser(); sub = parser.add_subparsers()
>>> register_cli(sub)
>>> with tempfile.TemporaryDirectory() as d:
...     args = parser.parse_args(["generate", d, "--only", "types"])
...     with contextlib.redirect_stdout(io.StringIO()) as out:
...         code = args.func(args)
...     code, "type_Q4_K.gguf" in os.listdir(d)
(0, True)
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from ..testing.fixtures import KINDS, generate

__all__ = ["register_cli"]


def _cmd_generate(args: argparse.Namespace) -> int:
    records = generate(args.out_dir, kinds=args.only or KINDS, seed=args.seed, small=args.small)
    kinds = Counter(r["kind"] for r in records)
    total = sum(r["size"] for r in records)
    print(f"wrote {len(records)} files ({total:,} bytes) and manifest.jsonl to {args.out_dir}: "
          + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    if args.only and "malformed" in args.only and not kinds.get("malformed"):
        print("note: gguf_schema.testing.malformed is not available: no malformed files written")
    return 0


def register_cli(subparsers: Any) -> None:
    """Add the ``generate`` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("generate", help="write fixture GGUF files (valid, edge-case, malformed) with a manifest",
                              description="Write fixture GGUF files and OUT_DIR/manifest.jsonl (file, kind, description, "
                                          "expected verdict per profile spec/ggml/lenient, size, sha256).")
    p.add_argument("out_dir", metavar="OUT_DIR", help="folder to write into (created if missing)")
    p.add_argument("--only", nargs="+", choices=KINDS, metavar="KIND",
                   help=f"write only these families: {', '.join(KINDS)} (default: all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random tensor data (default 0; same seed, same bytes)")
    p.add_argument("--small", action="store_true", help="a 30k-token vocabulary instead of 300k for the huge-vocabulary file")
    p.set_defaults(func=_cmd_generate)
