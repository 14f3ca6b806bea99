"""The ``quantize`` command: quantize a model file as ``llama-quantize`` does (:func:`gguf_schema.tools.requantize.requantize`), printed.

``gguf-schema quantize IN OUT --type PRESET`` (or ``IN OUT PRESET [THREADS]``, as
``llama-quantize`` takes them) with ``llama-quantize``'s options; ``IN OUTDIR -t A -t B ...`` writes
every preset in one pass (:func:`gguf_schema.tools.onepass.requantize_many`) as ``OUTDIR/<stem>-<PRESET>.gguf``;
with ``--dask ADDRESS`` the work goes to the workers of that Dask scheduler
(:mod:`gguf_schema.tools.quantcluster`; OUT is then a folder, even for one preset). The plan's notes (the fallbacks
counted in one line, tensors without importance weights) go to stderr before the write starts,
the progress bar to stderr while it runs, and a one-line summary to stdout at the end. The
per-tensor table (types, why, bytes, RMS error against the input) and one line per fallback come
with ``--verbose`` (and with ``--measure`` and ``--dry-run``, whose point they are); ``--json``
prints the same as one JSON record; ``-q`` prints nothing but warnings and errors. Exit codes (:mod:`.conventions`): ``EXIT_OK`` written (or planned,
with ``--dry-run``), ``EXIT_ERROR`` bad input or a refused argument (nothing written).

>>> [c.name for c in COMMANDS]
['quantize']
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from .. import GGMLType
from ..errors import GGUFDependencyError, shorten
from ..tensors import QUANTIZE_TYPES
from ..tools.onepass import JobProgress, ManyResult, requantize_many
from ..tools.quantplan import PRESETS, preset
from ..tools.requantize import RequantizeResult, TensorReport, parse_override_kv, parse_tensor_type, requantize
from .command import Family, Trait, arg, exclusive, output_file
from .conventions import EXIT_OK, is_quiet, mib, note, open_options, positive_int, status, write, write_json
from .progress import Progress

__all__ = ["COMMANDS", "fallbacks_line", "progress_line", "summary"]

COMMANDS = Family()


def _preset_arg(text: str) -> str:
    try:
        return preset(text, single_types=QUANTIZE_TYPES).name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _type_arg(text: str) -> GGMLType:
    try:
        t = GGMLType.of(text.strip().upper())
    except (ValueError, TypeError):
        t = None
    if t is None or t not in QUANTIZE_TYPES:
        names = ", ".join(t.name for t in sorted(QUANTIZE_TYPES, key=int))
        raise argparse.ArgumentTypeError(f"cannot quantize to {text!r} (types: {names})")
    return t


def _tensor_type_arg(text: str) -> tuple[str, GGMLType]:
    pattern, sep, name = text.partition("=")
    try:
        return parse_tensor_type(pattern.lower() + sep + name)  # llama-quantize lowercases the expression
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _override_arg(text: str) -> str:
    try:
        parse_override_kv(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _tensor_types(args: argparse.Namespace) -> list[tuple[str, GGMLType]]:
    out = list(args.tensor_type or [])
    for path in args.tensor_type_file or []:
        try:
            with open(path, encoding="utf-8") as f:
                words = f.read().split()
        except OSError as e:
            raise ValueError(f"cannot read --tensor-type-file {path!r}: {e.strerror}") from None
        for word in words:
            try:
                out.append(_tensor_type_arg(word))
            except argparse.ArgumentTypeError as e:
                raise ValueError(f"{path}: {e}") from None
    return out


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def _error(r: TensorReport) -> str:
    if r.rms_error is None:
        return "-"
    rel = r.relative_error
    rel_text = "-" if rel is None else f"{rel * 100:.3f}%"
    return f"{r.rms_error:.3e} ({rel_text})"


def _table(result: RequantizeResult) -> str:
    rows = [("tensor", "shape", "type", "bytes", "RMS error (relative)", "why")]
    for r in result.tensors:
        types = r.old_type.name if r.new_type == r.old_type else f"{r.old_type.name} -> {r.new_type.name}"
        rows.append((r.name, _shape(r.shape), types, f"{r.nbytes:,}", _error(r), r.why))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.rjust(w) if i in (3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]
    return "\n".join(line.rstrip() for line in lines) + "\n" + summary(result) + "\n"


def summary(result: RequantizeResult) -> str:
    """The last line: what was quantized to what, what was kept, and what chose the types."""
    quantized = [r for r in result.tensors if r.requantized]
    counts = ", ".join(f"{t} {n}" for t, n in sorted(result.counts().items(), key=lambda kv: -kv[1]))
    chosen = []
    for label, test in (
        ("fell back", lambda r: r.fell_back),
        ("set by --tensor-type", lambda r: r.pattern is not None),
        ("set by --output-tensor-type", lambda r: r.why.startswith("--output-tensor-type")),
        ("set by --token-embedding-type", lambda r: r.why.startswith("--token-embedding-type")),
    ):
        n = sum(1 for r in quantized if test(r))
        if n:
            chosen.append(f"{n} {label}")
    kept = len(result.tensors) - len(quantized)
    planned = " (dry run: nothing written)" if result.dry_run else ""
    return (
        f"{result.preset}: {len(quantized)} of {len(result.tensors)} tensors quantized"
        f"{f' ({counts})' if counts else ''}{'; ' + ', '.join(chosen) if chosen else ''}; {kept} copied as they are; "
        f"tensor data {mib(result.input_bytes)} -> {mib(result.output_bytes)}; "
        f"file type {result.file_type_name or 'none'}{planned}"
    )


def fallbacks_line(result: RequantizeResult) -> str:
    """The tensors that fell back to another type, counted in one line (``--verbose`` lists them)."""
    to = Counter(r.new_type.name for r in result.fallbacks)
    n = len(result.fallbacks)
    return (
        f"{n} tensor{'s' if n != 1 else ''} fell back to another type (rows that are not whole blocks of the type "
        f"chosen, as llama-quantize does): {', '.join(f'{t} {k}' for t, k in to.most_common())}; --verbose lists them"
    )


_PRESET_NAMES = ", ".join(p.name for p in PRESETS)


@COMMANDS.command(
    "quantize",
    "quantize a model file as llama-quantize does (presets Q4_K_M, IQ4_XS ...; streamed, atomic)",
    arg("input", metavar="IN", help="the model: a path, a URL, or the first shard of a split model"),
    arg("output", metavar="OUT", help="the new file (never the input); with --keep-split the shards' prefix"),
    arg("preset", metavar="PRESET", nargs="?", type=_preset_arg, help=argparse.SUPPRESS),
    arg("nthreads", metavar="THREADS", nargs="?", type=positive_int, help=argparse.SUPPRESS),
    arg(
        "--type",
        "-t",
        type=_preset_arg,
        action="append",
        metavar="PRESET",
        help=f"a llama-quantize preset ({_PRESET_NAMES}) or its file type number; or any other ggml type "
        "the library writes (Q8_K, F64 ...): every quantized tensor that type. Repeated: every preset in one "
        "pass over IN, OUT a folder of OUT/<stem>-<PRESET>.gguf",
    ),
    arg("--overwrite", action="store_true", help="with several --type: replace outputs that exist (else refused)"),
    arg(
        "--dask",
        metavar="ADDRESS",
        help="send the work to the workers of this Dask scheduler (tcp://HOST:8786; the dask extra): IN and OUT "
        "must be reachable by every worker under the same names (a shared filesystem, or IN a URL); OUT is a "
        "folder of OUT/<stem>-<PRESET>.gguf, as with several --type",
    ),
    arg("--imatrix", metavar="FILE", help="importance matrix from llama-imatrix (GGUF or legacy .dat)"),
    exclusive(
        arg(
            "--include-weights",
            action="append",
            metavar="NAME",
            help="use only the imatrix entries whose name contains NAME",
        ),
        arg(
            "--exclude-weights",
            action="append",
            metavar="NAME",
            help="do not use the imatrix entries whose name contains NAME",
        ),
    ),
    arg(
        "--tensor-type",
        action="append",
        type=_tensor_type_arg,
        metavar="REGEX=TYPE",
        help="the type of the quantized tensors whose name REGEX (lowercased, as llama-quantize does) is found in "
        "(repeatable, the first match wins)",
    ),
    arg("--tensor-type-file", action="append", metavar="FILE", help="REGEX=TYPE entries separated by white space"),
    arg("--output-tensor-type", type=_type_arg, metavar="TYPE", help="the type of output.weight"),
    arg("--token-embedding-type", type=_type_arg, metavar="TYPE", help="the type of the token embeddings"),
    arg("--pure", action="store_true", help="no mix: every quantized tensor the preset's default type"),
    arg("--leave-output-tensor", action="store_true", help="copy output.weight as it is"),
    arg(
        "--allow-requantize",
        action="store_true",
        help="quantize tensors that are quantized already (quality suffers; decoding to F32/F16/BF16 is always allowed)",
    ),
    arg("--keep-split", action="store_true", help="a split model in, a split model out (the same shards)"),
    arg(
        "--override-kv",
        action="append",
        type=_override_arg,
        metavar="KEY=TYPE:VALUE",
        help="set metadata in the output (TYPE int, float, bool, str; repeatable), as llama-quantize does",
    ),
    arg(
        "--keep-1d",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep 1-D tensors (norms, biases) as they are (default, as llama.cpp; --no-keep-1d quantizes 1-D weights too)",
    ),
    arg("--threads", type=positive_int, metavar="N", help="worker threads (default: the CPUs, at most 8)"),
    arg(
        "--measure",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also measure each tensor's RMS error against the input (about a quarter more time for the fastest types)",
    ),
    arg("--dry-run", action="store_true", help="print the plan (name, from, to, why, bytes), write nothing"),
    arg(
        "--verbose",
        "-v",
        action="store_true",
        help="print the table of every tensor (types, why, bytes, RMS error) and each fallback, not only the summary",
    ),
    arg("--json", action="store_true", help="print the plan and results as JSON"),
    description="Quantize IN into the new file OUT under a llama-quantize preset (Q4_K_M, Q5_K_S, IQ3_XS, "
    "Q8_0 ...), choosing each tensor's type by llama.cpp's rules (layer, role, experts, GQA, output and "
    "token embeddings, fallbacks for rows that are not whole blocks), with llama-quantize's options: the "
    "file is llama-quantize's byte for byte. Streamed tensor by tensor in chunks of rows (memory stays "
    "bounded), written atomically. Also as llama-quantize takes them: IN OUT PRESET [THREADS].",
    traits=Trait.READS | Trait.WRITES | Trait.ARGUMENT_ERRORS,  # a refused option value is a usage error
    targets=output_file,
)
def _cmd_quantize(args: argparse.Namespace) -> int:
    if (args.type and len(args.type) > 1) or args.dask:
        return _quantize_many(args)
    if args.overwrite:
        raise ValueError("--overwrite is for several --type (one pass, a folder of outputs); one output is replaced")
    bars: list[Progress] = []  # made once the plan gives the total

    def planned(result: RequantizeResult) -> None:
        if args.verbose:
            for r in result.fallbacks:
                status(f"gguf-schema: {r.name}: {r.why}")
        elif result.fallbacks:
            note(fallbacks_line(result))
        for text in result.notes:
            note(text)
        if not result.dry_run:
            bars.append(Progress(result.header_bytes + result.output_bytes, "quantize"))

    def progress(n: int) -> None:
        if bars:
            bars[0].update(n)

    try:
        name, threads = _positional(args)
        result = requantize(
            args.input,
            args.output,
            name,
            imatrix=args.imatrix,
            include_weights=args.include_weights or (),
            exclude_weights=args.exclude_weights or (),
            tensor_types=_tensor_types(args),
            pure=args.pure,
            output_tensor_type=args.output_tensor_type,
            token_embedding_type=args.token_embedding_type,
            leave_output_tensor=args.leave_output_tensor,
            allow_requantize=args.allow_requantize,
            keep_split=args.keep_split,
            override_kv=args.override_kv or (),
            keep_1d=args.keep_1d,
            threads=threads,
            measure=args.measure,
            dry_run=args.dry_run,
            progress=progress,
            on_plan=planned,
            strict=args.strict,
            **open_options(args),
        )
    finally:
        for bar in bars:
            bar.close()
    if args.json:
        write_json(result.to_dict())
    elif args.verbose or args.measure or args.dry_run:
        write(_table(result))
    elif not is_quiet():
        write(summary(result) + "\n")
    if not args.dry_run:
        for path in result.paths:
            status(f"gguf-schema: wrote {path}")
    return EXIT_OK


def _common(args: argparse.Namespace) -> dict[str, Any]:
    """The options every preset of a run shares, as :func:`requantize` takes them."""
    return {
        "imatrix": args.imatrix,
        "include_weights": args.include_weights or (),
        "exclude_weights": args.exclude_weights or (),
        "tensor_types": _tensor_types(args),
        "pure": args.pure,
        "output_tensor_type": args.output_tensor_type,
        "token_embedding_type": args.token_embedding_type,
        "leave_output_tensor": args.leave_output_tensor,
        "allow_requantize": args.allow_requantize,
        "keep_split": args.keep_split,
        "override_kv": args.override_kv or (),
        "keep_1d": args.keep_1d,
        "measure": args.measure,
        "dry_run": args.dry_run,
        "strict": args.strict,
    }


def _quantize_many(args: argparse.Namespace) -> int:
    """Several --type (or --dask): every preset in one pass, OUT a folder."""
    if args.preset is not None:
        raise ValueError("several --type and a positional PRESET: give the presets with --type only")
    if not args.type:
        raise ValueError(f"no type given (--type PRESET); the presets are {', '.join(p.name for p in PRESETS)}")
    threads = args.threads if args.nthreads is None else args.nthreads
    bars: list[Progress] = []

    def planned(job: ManyResult) -> None:
        for result in job.results:
            if args.verbose:
                for r in result.fallbacks:
                    status(f"gguf-schema: {result.preset}: {r.name}: {r.why}")
            elif result.fallbacks:
                note(f"{result.preset}: {fallbacks_line(result)}")
            for text in result.notes:
                note(f"{result.preset}: {text}")
        if not job.dry_run:
            total = sum(r.output_bytes for r in job.results)
            where = f", on {args.dask}" if args.dask else ""
            bars.append(Progress(total, f"quantize ({len(job.results)} presets, one pass{where})"))

    def on_progress(p: JobProgress) -> None:
        if bars:
            bars[0].update(p.bytes_done - bars[0].done)
            done = p.tensors_done == p.tensors
            bars[0].describe(progress_line(p), refresh=done)  # the last state drawn, however fast the job

    client = _client(args.dask) if args.dask and not args.dry_run else None
    try:
        job = requantize_many(
            args.input,
            args.output,
            args.type,
            threads=threads,
            overwrite=args.overwrite,
            on_plan=planned,
            on_progress=on_progress,
            client=client,
            **_common(args),
            **open_options(args),
        )
    finally:
        for bar in bars:
            bar.close()
        if client is not None:
            client.close()
    if args.json:
        write_json(job.to_dict())
    elif args.verbose or args.measure or args.dry_run:
        write("".join(_table(r) for r in job.results) + _sharing_line(job) + "\n")
    elif not is_quiet():
        write("".join(summary(r) + "\n" for r in job.results) + _sharing_line(job) + "\n")
    if not args.dry_run:
        for path in job.paths:
            status(f"gguf-schema: wrote {path}")
    return EXIT_OK


def progress_line(p: JobProgress) -> str:
    """The job's progress in words: tensors done of the total, then each output's share of its bytes.

    >>> from gguf_schema.tools.onepass import OutputProgress
    >>> progress_line(JobProgress([OutputProgress("Q4_K_M", 3, 10, 250, 1000), OutputProgress("COPY", 10, 10, 0, 0)]))
    'tensors 13/20; Q4_K_M 3/10 25%; COPY 10/10 100%'
    """
    parts = [f"tensors {p.tensors_done}/{p.tensors}"]
    for o in p.outputs:
        share = o.bytes_done / o.bytes if o.bytes else (1.0 if o.tensors_done == o.tensors else 0.0)
        parts.append(f"{o.preset} {o.tensors_done}/{o.tensors} {share:.0%}")
    return "; ".join(parts)


def _client(address: str) -> Any:
    """A ``distributed.Client`` connected to the scheduler at ``address``."""
    try:
        from distributed import Client
    except ImportError as e:
        why = "" if isinstance(e, ModuleNotFoundError) or not str(e) else f" ({shorten(str(e), 200)})"
        raise GGUFDependencyError(
            f"--dask needs dask.distributed{why}: pip install 'gguf-schema[dask]'", name="distributed"
        ) from None
    try:
        return Client(address)  # waits as long as Dask's distributed.comm.timeouts.connect (30 s by default)
    except (OSError, TimeoutError, ValueError) as e:
        raise ValueError(f"--dask {address}: cannot reach the scheduler: {e}") from None


def _sharing_line(job: ManyResult) -> str:
    read = f"; {mib(job.source_bytes)} of tensor data read once" if not job.dry_run else ""
    return (
        f"{len(job.results)} presets in one pass: {job.results_written} tensors written from "
        f"{job.results_computed} distinct results{read}"
    )


def _positional(args: argparse.Namespace) -> tuple[str, int | None]:
    """The preset and thread count, from the options or ``llama-quantize``'s positional TYPE [THREADS]."""
    name = args.type[0] if args.type else None
    if args.preset is not None:
        if name is not None and name != args.preset:
            raise ValueError(f"two types given: --type {name} and {args.preset}")
        name = args.preset
    if name is None:
        raise ValueError(f"no type given (--type PRESET); the presets are {', '.join(p.name for p in PRESETS)}")
    threads = args.threads
    if args.nthreads is not None:
        if threads is not None and threads != args.nthreads:
            raise ValueError(f"two thread counts given: --threads {threads} and {args.nthreads}")
        threads = args.nthreads
    return name, threads
