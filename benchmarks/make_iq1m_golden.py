"""IQ1_M golden vectors from current ggml (llama.cpp PR #28706's prefix-sum search): tests/data/golden/IQ1_M.npz.

Run: python benchmarks/make_iq1m_golden.py --oracle-dir DIR [--rows ROWS.npz] [--out tests/data/golden/IQ1_M.npz]

``DIR`` holds ``oracle.py`` and ``liboracle.so``: the golden program of ``../shared/golden/tools``,
its ``oracle.c`` compiled against the ``ggml-base`` library of the ggml to record (see
tests/data/golden/SOURCES.md for the commit and the commands). The inputs are those of
the golden set (``tests/data/golden/quants/inputs.npz``: 48 rows of 512 and the importance matrix), and rows of 256
on which ggml's old and new IQ1_M searches differ (``search_x_plain`` without, ``search_x_imatrix``
with ``search_imatrix``), taken from the existing output file unless ``--rows`` gives others.
Each input goes through ggml's ``ggml_quantize_chunk`` and its decoder.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GGML_IQ1_M = 29


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--oracle-dir", required=True, type=Path)
    ap.add_argument("--golden", type=Path, default=ROOT / "tests" / "data" / "golden" / "quants" / "inputs.npz")
    ap.add_argument("--rows", type=Path, help="an .npz with search_x_plain, search_x_imatrix, search_imatrix")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "golden" / "IQ1_M.npz")
    args = ap.parse_args()
    sys.path.insert(0, str(args.oracle_dir))
    import oracle  # type: ignore[import-not-found]

    with np.load(args.golden) as g:
        x, imatrix = g["x"], g["imatrix"]
    with np.load(args.rows or args.out) as r:
        rows = {k: r[k] for k in ("search_x_plain", "search_x_imatrix", "search_imatrix")}
    out: dict[str, np.ndarray] = {"x": x, "imatrix": imatrix, **rows}
    for name, xs, w in (
        ("", x, None),
        ("_imatrix", x, imatrix),
        ("search_plain", rows["search_x_plain"], None),
        ("search_imatrix", rows["search_x_imatrix"], rows["search_imatrix"]),
    ):
        q = oracle.quantize(GGML_IQ1_M, xs, w)
        d = oracle.dequantize(GGML_IQ1_M, q, xs.size).reshape(xs.shape)
        assert np.isfinite(d).all()
        if name.startswith("search"):  # (the decoder is unchanged: the 48 rows' floats are in ../shared/golden)
            out[f"{name.replace('search', 'search_q')}"] = q
            out[f"{name.replace('search', 'search_deq')}"] = d
        else:
            out[f"q{name}"] = q
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **out)
    print(args.out, hashlib.sha256(args.out.read_bytes()).hexdigest(), sorted(out))


if __name__ == "__main__":
    main()
