"""The ``gguf-schema`` command line.

Each subcommand is a thin layer over the library: it parses arguments, calls the public API
and prints. Exit codes: 0 success, 1 findings or differences, 2 unreadable input or usage error.
"""

from __future__ import annotations

import argparse
import importlib
import hashlib
import io
import sys
from typing import Sequence

from ..reader import open as gguf_open
from ..writer import save
from ..errors import GGUFError

__all__ = ["main"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..testing.demo import example_metadata, example_tensors

    path = args.output
    metadata, tensors = example_metadata(nested=False), example_tensors()
    save(path, metadata, tensors)
    written = open(path, "rb").read()
    print(f"wrote {path}: {len(written):,} bytes, sha256 {hashlib.sha256(written).hexdigest()[:16]}…")
    with gguf_open(path) as f:
        print(f"GGUF v{f.version}, {f.byte_order}-endian, alignment {f.alignment}, data at offset {f.data_offset}")
        print(f"{len(f.fields)} metadata keys:")
        for key, field in f.fields.items():
            et = f"[{field.element_type.name}]" if field.element_type is not None else ""
            value = repr(field.plain())
            print(f"  {key:42} {field.type.name + et:16} {value[:60] + ('…' if len(value) > 60 else '')}")
        print(f"{len(f.tensors)} tensors:")
        for t in f.tensors.values():
            print(f"  {t.name:26} {t.type.name:5} shape {str(t.shape):10} dims {str(t.dims):10} {t.nbytes:6,} bytes at {t.offset}")
        rebuilt = io.BytesIO()
        f.save(rebuilt)
        same_bytes = rebuilt.getvalue() == written
        import numpy as np

        from ..writer import RawTensor

        values_ok = all(_same(f.fields[k].plain(), _plainify(v)) for k, v in metadata.items())
        tensors_ok = all(
            np.array_equal(f.tensors[n].data.reshape(-1).view(np.uint8),
                           np.frombuffer(np.ascontiguousarray(t.data if isinstance(t, RawTensor) else t).tobytes(), np.uint8))
            for n, t in tensors.items()
        )
    print(f"round trip: rebuilt bytes identical: {same_bytes}; values equal: {values_ok}; tensor bytes equal: {tensors_ok}")
    from ..check.validate import check

    verdicts = {profile: check(path, profile) for profile in ("spec", "ggml", "lenient")}
    print("validation: " + ", ".join(f"{p} {'clean' if r.ok else f'{len(r.errors)} errors'}" for p, r in verdicts.items()))
    return 0 if same_bytes and values_ok and tensors_ok and all(r.ok for r in verdicts.values()) else 1


def _plainify(v):
    from ..format.values import GGUFArray

    if isinstance(v, GGUFArray):
        return v.plain()
    if hasattr(v, "dtype") and getattr(v, "shape", None) == ():
        return v.item()
    return v


def _same(a, b) -> bool:
    import numpy as np

    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, float) or isinstance(b, float):
        return float(np.float32(a)) == float(np.float32(b)) if isinstance(b, np.float32) or isinstance(a, np.float32) else a == b
    return a == b


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gguf-schema", description="Inspect, check, edit and convert GGUF model files.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("demo", help="write a small example model, read it back and prove the round trip")
    p.add_argument("-o", "--output", default="demo.gguf", help="where to write the example (default: demo.gguf)")
    p.set_defaults(func=_cmd_demo)
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"gguf_schema.{name}")
        except ModuleNotFoundError as e:  # an optional part not installed: its commands are absent
            if e.name and (e.name == f"gguf_schema.{name}" or f"gguf_schema.{name}".startswith(e.name + ".")):
                continue
            raise
        module.register_cli(sub)
    return parser


#: modules that own subcommands: each has ``register_cli(subparsers)`` adding its parsers,
#: each parser with ``set_defaults(func=handler)`` where ``handler(args) -> int`` is the exit code.
_COMMAND_MODULES = ("cli.commands", "check.validate", "check.spec_audit", "cli.generate", "cli.model_commands")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except GGUFError as e:
        print(f"gguf-schema: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"gguf-schema: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
