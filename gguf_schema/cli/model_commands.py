"""The ``gguf-schema`` subcommands about running and converting a model: ``estimate`` and ``export``.

``estimate`` prints the memory llama.cpp needs to run a model (:mod:`gguf_schema.tools.estimate`)
as a table by part and device, with the formula behind each figure; ``--json`` prints
:meth:`~gguf_schema.tools.estimate.Estimate.to_dict`. ``export`` writes the tensors, dequantized,
as a safetensors file (:mod:`gguf_schema.tools.export`). Exit codes are those of
:mod:`gguf_schema.cli`: 0 success, 2 unreadable input or a bad argument (printed as
``gguf-schema: error: ...``). Results go to stdout, progress and notes to stderr.

>>> import argparse
>>> sub = argparse.ArgumentParser(prog="gguf-schema").add_subparsers()
>>> register_cli(sub)
>>> sorted(sub.choices)
['estimate', 'export']
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

from ..errors import GGUFError
from ..format.types import GGMLType
from ..shards import open_model
from ..tools.estimate import CACHE_TYPES, MAX_SEQUENCES, Estimate, estimate
from ..tools.export import DTYPES, export_safetensors
from .conventions import EXIT_ERROR, EXIT_TRUNCATED, error, open_options, warn_truncated, write, write_json
from .progress import Progress

__all__ = ["register_cli"]

Handler = Callable[[argparse.Namespace], int]


def _argument_errors(fn: Handler) -> Handler:
    """Report a ValueError (a bad argument value the library refused) as a usage error, exit 2."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except ValueError as e:
            if isinstance(e, GGUFError):  # a bad file: main prints it
                raise
            error(str(e))
            return EXIT_ERROR

    return run


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


def _runs(layers: list[int]) -> str:
    """``[0, 1, 2, 4]`` -> ``"0-2, 4"``."""
    runs: list[list[int]] = []
    for il in layers:
        if runs and il == runs[-1][1] + 1:
            runs[-1][1] = il
        else:
            runs.append([il, il])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def estimate_text(e: Estimate, path: str) -> str:
    """The readable report of an estimate (what ``gguf-schema estimate`` prints)."""
    s = e.settings
    lines = [
        f"model:     {path} ({e.architecture}, {s['block_count']} layers)",
        f"settings:  ctx {s['n_ctx']} ({s['n_ctx_seq']} cells x {s['n_stream']} stream(s), {s['n_seq']} sequence(s)), "
        f"batch {s['n_batch']}, ubatch {s['n_ubatch']}, cache K {s['cache_type_k']} V {s['cache_type_v']}, "
        f"gpu layers {s['gpu_layers']} of {s['block_count'] + 1}, flash attention {'on' if s['flash_attn'] else 'off'}"
        + (", swa_full" if s["swa_full"] else "")
        + (", kv_unified" if s["kv_unified"] else ""),
        "",
    ]
    rows: list[tuple[str, int, int]] = [("weights", e.weights_cpu, e.weights_gpu)]
    if e.kv_layers:
        rows.append(
            (
                "KV cache K",
                sum(x.k_bytes for x in e.kv_layers if x.device == "CPU"),
                sum(x.k_bytes for x in e.kv_layers if x.device == "GPU"),
            )
        )
        rows.append(
            (
                "KV cache V",
                sum(x.v_bytes for x in e.kv_layers if x.device == "CPU"),
                sum(x.v_bytes for x in e.kv_layers if x.device == "GPU"),
            )
        )
    if e.recurrent_layers:
        rows.append(("recurrent state", e.cache_on("CPU"), e.cache_on("GPU")))
    rows.append(("output buffer", e.output_buffer, 0))
    rows.append(("total", e.total_cpu, e.total_gpu))
    lines.append(f"{'part':18} {'CPU':>14} {'GPU':>14} {'total':>14}")
    for i, (name, cpu, gpu) in enumerate(rows):
        if i == len(rows) - 1:
            lines.append("-" * 63)
        lines.append(f"{name:18} {_mib(cpu):>14} {_mib(gpu):>14} {_mib(cpu + gpu):>14}")
    lines.append("")
    by_kind: dict[str, list[int]] = {}
    for x in e.kv_layers:
        by_kind.setdefault(
            f"{'sliding-window' if x.kind == 'swa' else 'full-attention'} layers, {x.cells} cells", []
        ).append(x.layer)
    if by_kind:
        lines.append("KV cache layers:")
        lines += [f"  {label}: {_runs(ils)}" for label, ils in by_kind.items()]
    lines.append("how:")
    lines += [f"  {part}: {text}" for part, text in e.formulas]
    lines.append("not estimated:")
    lines += [f"  - {x}" for x in e.not_estimated]
    if e.notes:
        lines.append("notes:")
        lines += [f"  - {x}" for x in e.notes]
    return "\n".join(lines) + "\n"


def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``[low, high]``, refused in the flag's own words."""

    def parse(text: str) -> int:
        try:
            n = int(text, 10)
        except ValueError:
            n = None
        if n is None or n < low or (high is not None and n > high):
            bound = f"a whole number >= {low}" if high is None else f"a whole number from {low} to {high}"
            raise argparse.ArgumentTypeError(f"needs {bound}, got {text!r}")
        return n

    return parse


def _cache_type_arg(text: str) -> str:
    if text.strip().lower() not in CACHE_TYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a cache type llama.cpp accepts: {', '.join(CACHE_TYPES)}")
    return text.strip().lower()


@_argument_errors
def _cmd_estimate(args: argparse.Namespace) -> int:
    if args.no_flash_attn and GGMLType.of(args.cache_type_v).quantized:
        error(
            f"--cache-type-v {args.cache_type_v} is a quantized cache type, which llama.cpp allows only with flash "
            "attention: leave out --no-flash-attn, or choose f32, f16 or bf16"
        )
        return EXIT_ERROR
    model = open_model(args.file, lazy=True, **open_options(args))
    try:
        e = estimate(
            model,
            ctx=args.ctx,
            batch=args.batch,
            ubatch=args.ubatch,
            cache_type_k=args.cache_type_k,
            cache_type_v=args.cache_type_v,
            gpu_layers=args.gpu_layers,
            parallel=args.parallel,
            flash_attn=not args.no_flash_attn,
            swa_full=args.swa_full,
            kv_unified=args.kv_unified,
        )
        if args.json:
            write_json(e.to_dict())
        else:
            write(estimate_text(e, args.file))
        # the weights are sized from the tensor infos; a file without all their bytes would not load
        return EXIT_TRUNCATED if warn_truncated(model, args.file) else 0
    finally:
        model.close()


@_argument_errors
def _cmd_export(args: argparse.Namespace) -> int:
    bar = Progress(0, "export")

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.done)

    try:
        result = export_safetensors(
            args.file, args.output, dtype=args.dtype, tensors=args.tensors, progress=progress, **open_options(args)
        )
    finally:
        bar.close()
    print(
        f"wrote {result.path}: {result.tensors} tensors as {args.dtype} ({result.file_bytes:,} bytes)", file=sys.stderr
    )
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``estimate`` and ``export`` to the ``gguf-schema`` parser (called by :mod:`gguf_schema.cli`)."""
    p = subparsers.add_parser(
        "estimate",
        help="memory llama.cpp needs to run a model: weights by device, KV cache, recurrent state",
        description="Estimate the memory llama.cpp needs to run FILE: weights on the CPU and the GPU (--gpu-layers), "
        "the KV cache (K and V, per layer, sliding-window layers and quantized cache types included), the "
        "recurrent state of mamba/rwkv models and the output buffer, with the formula behind each figure. "
        "Compute buffers and driver overhead are not estimated. A first shard stands for its split model.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--ctx",
        type=_int_at_least(0),
        metavar="N",
        help="context size in tokens (default, or 0: the model's context_length)",
    )
    p.add_argument("--batch", type=_int_at_least(1), default=512, metavar="N", help="logical batch size (default 512)")
    p.add_argument(
        "--ubatch", type=_int_at_least(1), default=512, metavar="N", help="physical batch size (default 512)"
    )
    p.add_argument(
        "--cache-type-k",
        type=_cache_type_arg,
        default="f16",
        metavar="T",
        help=f"K cache type: {', '.join(CACHE_TYPES)} (default f16)",
    )
    p.add_argument(
        "--cache-type-v", type=_cache_type_arg, default="f16", metavar="T", help="V cache type (default f16)"
    )
    p.add_argument(
        "--gpu-layers",
        type=_int_at_least(-1),
        default=0,
        metavar="N",
        help="layers offloaded to the GPU, the output layer first (llama.cpp's -ngl; -1: all; default 0)",
    )
    p.add_argument(
        "--parallel",
        type=_int_at_least(1, MAX_SEQUENCES),
        default=1,
        metavar="N",
        help=f"sequences decoded in parallel (default 1, at most {MAX_SEQUENCES})",
    )
    p.add_argument("--no-flash-attn", action="store_true", help="size the cache for attention without flash attention")
    p.add_argument("--swa-full", action="store_true", help="full-size cache for sliding-window layers")
    p.add_argument("--kv-unified", action="store_true", help="one KV stream shared by all sequences")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.set_defaults(func=_cmd_estimate)

    p = subparsers.add_parser(
        "export",
        help="write the tensors, dequantized, as a safetensors file",
        description="Write the tensors of FILE (every ggml type, dequantized) to OUT.safetensors as f32, f16 or bf16, "
        "with every GGUF metadata key in the safetensors metadata (JSON with its GGUF type). Integer "
        "tensors keep their type. Written through a temporary file; never over FILE.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("output", metavar="OUT.safetensors")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="f32", help="type of the float tensors (default f32)")
    p.add_argument("--tensors", metavar="REGEX", help="only tensors whose name matches REGEX (re.search)")
    p.set_defaults(func=_cmd_export)
