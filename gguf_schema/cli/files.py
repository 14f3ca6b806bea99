"""The commands that write whole files: ``build``, ``convert``, ``split``, ``merge``, ``export``.

``build`` writes a GGUF file from the JSON form (:mod:`gguf_schema.tools.jsonio`), ``convert``
changes byte order or version (:mod:`gguf_schema.tools.convert`), ``split`` and ``merge`` cut a
model into shards and join them (:mod:`gguf_schema.tools.split`), ``export`` writes the tensors,
dequantized, as safetensors (:mod:`gguf_schema.tools.export`). Every output is written atomically
(never over an input); the output file may be given as ``-o OUT`` in place of the positional.
Progress bars and the ``wrote ...`` line go to stderr. Exit codes (:mod:`.conventions`):
``EXIT_OK``; ``EXIT_ERROR`` for an unreadable input, a refused write or a bad argument.

>>> [c.name for c in COMMANDS]
['build', 'convert', 'split', 'merge', 'export']
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import GGUFBuildError, durable
from .. import open as open_gguf
from ..io.source import is_url
from ..tools import convert as convert_mod
from ..tools import jsonio
from ..tools import split as split_mod
from ..tools.export import DTYPES, export_safetensors
from .command import Family, Trait, arg, exclusive, output, output_file
from .conventions import EXIT_ERROR, EXIT_OK, count, error, open_options, positive_int, status, warn, write, write_json
from .progress import Progress, file_size

__all__ = ["COMMANDS"]

COMMANDS = Family()


def _wrote(path: str) -> None:
    """The last line of a command that wrote ``path``, on stderr."""
    status(f"wrote {path} ({count(os.path.getsize(path))} bytes)")


@COMMANDS.command(
    "build",
    "write a GGUF file from the JSON form (dump --json)",
    arg("json_file", metavar="FROM.json"),
    output("OUT.gguf"),
    arg("--tensors-from", metavar="FILE", help="GGUF file to take tensor data from"),
    description="Write a GGUF file from the JSON form printed by `dump --json` (FROM.json may be - for stdin). "
    "Tensor data comes from --tensors-from FILE: copied verbatim when its tensor infos match the JSON "
    "(the original file comes back byte for byte), else tensor by tensor by name.",
    traits=Trait.READS | Trait.WRITES,
    targets=output_file,
)
def _cmd_build(args: argparse.Namespace) -> int:
    durable.refuse_overwriting_inputs([args.output], [args.json_file, args.tensors_from], command="build")
    if args.json_file == "-":
        raw = sys.stdin.buffer.read()
    else:
        with open(args.json_file, "rb") as fh:
            raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GGUFBuildError(f"the JSON file is not UTF-8: {e.reason}", offset=e.start, path=args.json_file) from None
    model = jsonio.loads(text)
    with Progress(file_size(args.tensors_from), "build") as bar:
        jsonio.build(
            model,
            args.output,
            tensors_from=args.tensors_from,
            progress=bar.update,
            strict=args.strict,
            **open_options(args),
        )
    _wrote(args.output)
    return EXIT_OK


@COMMANDS.command(
    "convert",
    "convert a file to another byte order and/or GGUF version",
    arg("file", metavar="FILE"),
    output("OUT"),
    arg("--byte-order", choices=("little", "big"), help="target byte order (default: unchanged)"),
    arg("--version", type=int, choices=(2, 3), help="target GGUF version (default: unchanged)"),
    arg("--json", action="store_true", help='print the result as JSON: {"command", "path", "bytes"}'),
    description="Write FILE to OUT in another byte order (every tensor type converted, quantized blocks field by "
    "field) and/or format version. A conversion that would change nothing (no option, or FILE is in that byte "
    "order and version already) is refused: exit 2, nothing written.",
    traits=Trait.READS | Trait.WRITES,
    targets=output_file,
)
def _cmd_convert(args: argparse.Namespace) -> int:
    durable.refuse_overwriting_inputs([args.output], [args.file], command="convert")
    if args.byte_order is None and args.version is None:
        error("convert: nothing to change: give --byte-order and/or --version (nothing was written)")
        return EXIT_ERROR
    with open_gguf(args.file, lazy=True, **open_options(args)) as f:
        now = (f.byte_order, f.version)
    if (args.byte_order or now[0], args.version or now[1]) == now:
        error(
            f"convert: {args.file} is {now[0]}-endian GGUF v{now[1]} already: nothing to change (nothing was written; "
            "`cp` makes a copy)"
        )
        return EXIT_ERROR
    with Progress(file_size(args.file), "convert") as bar:
        convert_mod.convert(
            args.file,
            args.output,
            byte_order=args.byte_order,
            version=args.version,
            progress=bar.update,
            strict=args.strict,
            **open_options(args),
        )
    if args.json:
        write_json({"command": "convert", "path": args.output, "bytes": os.path.getsize(args.output)}, indent=None)
    else:
        _wrote(args.output)
    return EXIT_OK


def _size(text: str) -> int:
    try:
        return split_mod.parse_size(text)
    except GGUFBuildError as e:
        raise argparse.ArgumentTypeError(e.reason) from None


@COMMANDS.command(
    "split",
    "split a model into shards OUT_PREFIX-00001-of-0000N.gguf",
    arg("file", metavar="FILE"),
    output("OUT_PREFIX"),
    exclusive(
        arg("--max-size", type=_size, metavar="SIZE", help="largest shard file size"),
        arg("--max-tensors", type=positive_int, metavar="N", help="most tensors per shard"),
        required=True,
    ),
    arg(
        "--no-tensor-first-split",
        action="store_true",
        help="the first shard holds the metadata only, the tensors start in the second (as llama.cpp's gguf-split)",
    ),
    arg(
        "--llama-layout",
        action="store_true",
        help="the shards exactly as llama-gguf-split writes them (no split.id, its key order and size rule)",
    ),
    arg("--dry-run", action="store_true", help="print the plan (shards, tensors, sizes); write nothing"),
    arg(
        "--json",
        action="store_true",
        help='print the plan as JSON: {"dry_run", "split_id", "shards": [{"path", "tensors", "size"}], "warnings"}',
    ),
    description="Split FILE into shards named OUT_PREFIX-00001-of-0000N.gguf, with llama.cpp's split.no / "
    "split.count / split.tensors.count keys (and split.id, the identity of the set); the full metadata goes in the "
    "first shard. The shards are written as a set: all to temporary files first, then renamed. Prints each shard's "
    "path, tensors and size. SIZE: 500M, 2G (powers of 1000), 512MiB, 2GiB (powers of 1024) or bytes.",
    traits=Trait.READS | Trait.WRITES,
)
def _cmd_split(args: argparse.Namespace) -> int:
    with Progress(0 if args.dry_run else file_size(args.file), "split") as bar:
        plan = split_mod.split_plan(
            args.file,
            args.output,
            max_size=args.max_size,
            max_tensors=args.max_tensors,
            no_tensor_first_split=args.no_tensor_first_split,
            llama_layout=args.llama_layout,
            dry_run=args.dry_run,
            progress=bar.update,
            strict=args.strict,
            **open_options(args),
        )
    for w in plan.warnings:
        warn(str(w))
    if args.json:
        write_json({"dry_run": args.dry_run, **plan.to_json()})
        return EXIT_OK
    for shard in plan.shards:
        write(f"{shard.path}: {len(shard.tensors)} tensors, {count(shard.size)} bytes\n")
    if args.dry_run:
        status(f"dry run: {len(plan.shards)} shards planned, nothing written")
    return EXIT_OK


@COMMANDS.command(
    "merge",
    "merge the shards of a split model into one file",
    arg("first_shard", metavar="FIRST_SHARD"),
    output("OUT"),
    traits=Trait.READS | Trait.WRITES,
    targets=output_file,
)
def _cmd_merge(args: argparse.Namespace) -> int:
    out = args.output
    local = not is_url(args.first_shard)  # a progress total for local shards (URLs: the bar has none)
    if local:
        durable.refuse_overwriting_inputs([out], [args.first_shard], command="merge")
    options = open_options(args)
    total = sum(file_size(p) for p in split_mod.shard_paths(args.first_shard, **options)) if local else 0
    with Progress(total, "merge") as bar:
        split_mod.merge(args.first_shard, out, progress=bar.update, strict=args.strict, **options)
    _wrote(out)
    return EXIT_OK


@COMMANDS.command(
    "export",
    "write the tensors, dequantized, as a safetensors file",
    arg("file", metavar="FILE"),
    output("OUT.safetensors"),
    arg("--dtype", choices=tuple(DTYPES), default="f32", help="type of the float tensors (default f32)"),
    arg("--tensors", metavar="REGEX", help="only tensors whose name matches REGEX (re.search)"),
    description="Write the tensors of FILE (every ggml type, dequantized) to OUT.safetensors as f32, f16 or bf16, "
    "with every GGUF metadata key in the safetensors metadata (JSON with its GGUF type). Integer "
    "tensors keep their type. Written through a temporary file; never over FILE.",
    traits=Trait.READS | Trait.ARGUMENT_ERRORS,
    targets=output_file,
)
def _cmd_export(args: argparse.Namespace) -> int:
    bar = Progress(0, "export")

    def progress(done: int, total: int) -> None:
        bar.set_total(total)
        bar.update(done - bar.done)

    try:
        result = export_safetensors(
            args.file, args.output, dtype=args.dtype, tensors=args.tensors, progress=progress, **open_options(args)
        )
    finally:
        bar.close()
    status(f"wrote {result.path}: {result.tensors} tensors as {args.dtype} ({result.file_bytes:,} bytes)")
    return EXIT_OK
