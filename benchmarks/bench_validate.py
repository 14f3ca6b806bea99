"""What validation costs: the three profiles over real files, many tensors, and many findings.

CPU time (``time.process_time``, the best of ``--repeat`` runs) of :func:`gguf_schema.check.validate.validate`:

* ``vocabularies``: the ``spec``, ``ggml`` and ``lenient`` profiles over the first six
  ``ggml-vocab-*.gguf`` files of ``../shared/testdata/vocab`` (large string arrays);
* ``20,000 tensors``: the three profiles over :func:`gguf_schema.testing.malformed.many_tensors_file`;
* ``100,000 findings``: the ``spec`` profile over a file of 100,000 keys that break ``GGUF-E020``
  (what a finding itself costs).

To compare two trees, run it with each on ``PYTHONPATH`` in turn, in one session (the figures of
one run are comparable; load from other processes is printed with them).

    python benchmarks/bench_validate.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import gguf_schema
from gguf_schema.check.validate import validate
from gguf_schema.testing.malformed import many_tensors_file

VOCAB = Path(__file__).resolve().parent.parent.parent / "shared" / "testdata" / "vocab"


def best_cpu(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm the page cache and the imports
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    vocabs = sorted(VOCAB.glob("ggml-vocab-*.gguf"))[:6]
    many = many_tensors_file(20000)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gguf_schema.save(buf, {f"Bad Key {i}": i for i in range(100000)})
    bad_keys = buf.getvalue()
    cases: list[tuple[str, Callable[[], object]]] = [
        ("vocabularies", lambda: [validate(p, prof) for p in vocabs for prof in ("spec", "ggml", "lenient")]),
        ("20,000 tensors", lambda: [validate(many, prof) for prof in ("spec", "ggml", "lenient")]),
        ("100,000 findings", lambda: validate(bad_keys, "spec")),
    ]
    print(f"load average before: {os.getloadavg()}")
    for label, fn in cases:
        print(f"{label:18s} {best_cpu(fn, args.repeat):7.3f} s CPU")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
