"""The ``estimate`` command: the memory llama.cpp needs to run a model, printed.

``estimate`` prints the estimate of :mod:`gguf_schema.tools.estimate` as a table by part and
device, with the formula behind each figure; ``--json`` prints
:meth:`~gguf_schema.tools.estimate.Estimate.to_dict`. A first shard stands for its split model.
Exit codes (:mod:`.conventions`): ``EXIT_OK``; ``EXIT_ERROR`` for an unreadable input or a bad
argument (printed as ``gguf-schema: error: ...``); ``EXIT_TRUNCATED`` when the model's tensor data
runs past the end of a file (the estimate printed: it would not load). Results go to stdout,
notes to stderr.

>>> [c.name for c in COMMANDS]
['estimate']
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from .. import GGMLType
from .. import open as open_gguf
from ..tools.estimate import CACHE_TYPES, CPU_ISAS, LLAMA_CPP_VERSION, MAX_SEQUENCES, Estimate, estimate
from .command import Family, Trait, arg
from .conventions import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_TRUNCATED,
    error,
    mib,
    open_options,
    warn_truncated,
    write,
    write_json,
)

__all__ = ["COMMANDS", "estimate_text", "token_count"]

COMMANDS = Family()


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
        + (", kv_unified" if s["kv_unified"] else "")
        + f", CPU {s['cpu_isa']}",
        f"formulas:  follow {LLAMA_CPP_VERSION}",
        "",
    ]
    rows: list[tuple[str, int, int]] = [("weights", e.weights_cpu, e.weights_gpu)]
    if e.repacked:
        rows.append(("repacked weights", e.repacked, 0))
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
    if e.compute:
        rows.append(("compute buffer", e.compute_on("CPU"), e.compute_on("GPU")))
    rows.append(("total", e.total_cpu, e.total_gpu))
    lines.append(f"{'part':18} {'CPU':>14} {'GPU':>14} {'total':>14}")
    for i, (name, cpu, gpu) in enumerate(rows):
        if i == len(rows) - 1:
            lines.append("-" * 63)
        lines.append(f"{name:18} {mib(cpu):>14} {mib(gpu):>14} {mib(cpu + gpu):>14}")
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


def token_count(text: str) -> int:
    """``--ctx``: a number of tokens, ``8192``, or with a suffix as context sizes are quoted,
    ``8k`` (K = 1024: "an 8k context" is 8,192 tokens), ``128K``, ``1M``; ``8Ki`` is read the same.
    0 means the model's own context length.

    >>> token_count("8k"), token_count("128K"), token_count("1M"), token_count("4096"), token_count("0")
    (8192, 131072, 1048576, 4096, 0)
    >>> token_count("8.5k")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: needs a whole number of tokens (4096, 8k = 8192, 128K, 1M), got '8.5k'
    """
    m = re.fullmatch(r"\s*(\d+)\s*([kKmM]i?)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"needs a whole number of tokens (4096, 8k = 8192, 128K, 1M), got {text!r}")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[(m.group(2) or "")[:1].lower()]
    return int(m.group(1)) * scale


def _cache_type_arg(text: str) -> str:
    if text.strip().lower() not in CACHE_TYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a cache type llama.cpp accepts: {', '.join(CACHE_TYPES)}")
    return text.strip().lower()


@COMMANDS.command(
    "estimate",
    "memory llama.cpp needs to run a model: weights by device, KV cache, recurrent state, compute buffers",
    arg("file", metavar="FILE"),
    arg(
        "--ctx",
        type=token_count,
        metavar="N",
        help="context size in tokens: 4096, or 8k (= 8192), 32K, 1M (default, or 0: the model's context_length)",
    ),
    arg("--batch", type=_int_at_least(1), default=512, metavar="N", help="logical batch size (default 512)"),
    arg("--ubatch", type=_int_at_least(1), default=512, metavar="N", help="physical batch size (default 512)"),
    arg(
        "--cache-type-k",
        type=_cache_type_arg,
        default="f16",
        metavar="T",
        help=f"K cache type: {', '.join(CACHE_TYPES)} (default f16)",
    ),
    arg("--cache-type-v", type=_cache_type_arg, default="f16", metavar="T", help="V cache type (default f16)"),
    arg(
        "--gpu-layers",
        type=_int_at_least(-1),
        default=0,
        metavar="N",
        help="layers offloaded to the GPU, the output layer first (llama.cpp's -ngl; -1: all; default 0)",
    ),
    arg(
        "--parallel",
        type=_int_at_least(1, MAX_SEQUENCES),
        default=1,
        metavar="N",
        help=f"sequences decoded in parallel (default 1, at most {MAX_SEQUENCES})",
    ),
    arg("--no-flash-attn", action="store_true", help="size the cache for attention without flash attention"),
    arg("--swa-full", action="store_true", help="full-size cache for sliding-window layers"),
    arg("--kv-unified", action="store_true", help="one KV stream shared by all sequences"),
    arg(
        "--cpu-isa",
        choices=CPU_ISAS,
        default="avx2",
        help="the CPU's instruction set, which decides the weights llama.cpp repacks (default avx2; none: no repacking)",
    ),
    arg("--json", action="store_true", help="print the estimate as JSON"),
    description="Estimate the memory llama.cpp needs to run FILE: weights on the CPU and the GPU (--gpu-layers), "
    "the KV cache (K and V, per layer, sliding-window layers and quantized cache types included), the "
    "recurrent state of mamba/rwkv models, the output buffer, the compute buffer per device (ggml's graph "
    "allocator over llama.cpp's worst-case graph) and the weights llama.cpp repacks for the CPU, with the formula "
    "behind each figure. Driver overhead is not estimated. A first shard stands for its split model.",
    traits=Trait.READS | Trait.ARGUMENT_ERRORS,
)
def _cmd_estimate(args: argparse.Namespace) -> int:
    if args.no_flash_attn and GGMLType.of(args.cache_type_v).quantized:
        error(
            f"--cache-type-v {args.cache_type_v} is a quantized cache type, which llama.cpp allows only with flash "
            "attention: leave out --no-flash-attn, or choose f32, f16 or bf16"
        )
        return EXIT_ERROR
    model = open_gguf(args.file, lazy=True, split=True, **open_options(args))
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
            cpu_isa=args.cpu_isa,
        )
        if args.json:
            write_json(e.to_dict())
        else:
            write(estimate_text(e, args.file))
        # the weights are sized from the tensor infos; a file without all their bytes would not load
        return EXIT_TRUNCATED if warn_truncated(model, args.file) else EXIT_OK
    finally:
        model.close()
