"""Pack ggml's golden vectors (``../shared/golden/quants``) into ``tests/data/golden/quants`` without repeats.

Run: python benchmarks/pack_golden.py [--golden ../shared/golden/quants] [--out tests/data/golden/quants]

Every upstream ``TYPE.npz`` carries the same input rows ``x`` and importance matrix ``imatrix``, and
many carry the same bytes twice (``q_ref`` equal to ``q`` for most types; ``q_imatrix`` and
``deq_imatrix`` equal to ``q`` and ``deq`` for the types that ignore an importance matrix). The
packed set stores each distinct array once: ``inputs.npz`` (``x``, ``imatrix``), one ``TYPE.npz``
per type with only its distinct arrays, and ``manifest.json``: upstream's fields (type id, array
names, bytes per row) plus, for every upstream array, the SHA-256 of its bytes and, for a repeat,
the array it equals. ``tests/helpers.py: golden_vectors`` puts each upstream file back together,
and ``tests/test_data.py`` proves every array is upstream's, byte for byte. The file checksums go
into ``tests/data/golden/quants/SOURCES`` (printed here; the prose there is written by hand).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ("x", "imatrix")


def digest(a: np.ndarray) -> str:
    """SHA-256 of an array's bytes in C order (its dtype and shape are recorded beside it)."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golden", type=Path, default=ROOT.parent / "shared" / "golden" / "quants")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "golden" / "quants")
    args = ap.parse_args()
    upstream = json.loads((args.golden / "manifest.json").read_text(encoding="utf-8"))
    args.out.mkdir(parents=True, exist_ok=True)
    inputs: dict[str, np.ndarray] = {}
    manifest: dict[str, dict] = {}
    for name, entry in upstream.items():
        with np.load(args.golden / f"{name}.npz") as z:
            arrays = {k: z[k] for k in z.files}
        assert sorted(arrays) == sorted(entry["arrays"]), name
        for k in INPUTS:  # the same input in every file: stored once
            inputs.setdefault(k, arrays[k])
            assert same(arrays[k], inputs[k]), (name, k)
        stored: dict[str, np.ndarray] = {}
        same_as: dict[str, str] = {}
        for k in sorted(set(arrays) - set(INPUTS)):
            twin = next((s for s in stored if same(arrays[k], stored[s])), None)
            if twin is None:
                stored[k] = arrays[k]
            else:
                same_as[k] = twin
        np.savez_compressed(args.out / f"{name}.npz", **stored)
        manifest[name] = {
            **entry,
            "sha256": {k: digest(a) for k, a in sorted(arrays.items())},
            "dtype": {k: a.dtype.str for k, a in sorted(arrays.items())},
            "shape": {k: list(a.shape) for k, a in sorted(arrays.items())},
            "same_as": same_as,
        }
    np.savez_compressed(args.out / "inputs.npz", **inputs)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for p in sorted(args.out.iterdir()):
        if p.suffix in (".npz", ".json"):
            print(f"{p.name}\t{hashlib.sha256(p.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()
