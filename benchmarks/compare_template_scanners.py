"""The template audit beside other scanners of GGUF chat templates, on the same files: detections, false alarms, time.

Run: ``nice python benchmarks/compare_template_scanners.py [--out FILE]`` with each peer installed in its own
virtual environment under /work (a benchmark only, never a dependency of gguf-schema)::

    python3 -m venv /work/venv-scan-modelaudit && /work/venv-scan-modelaudit/bin/pip install modelaudit
    (the same for aisbom-cli, c4nary, glyphhound, pillar-gguf-scanner)

The corpus is written here as small GGUF files (one template each, key ``tokenizer.chat_template``):

* malicious: every trick of the test-suite (tests/test_templates.py's payloads, tests/test_template_tricks.py's
  tricks and costly renders, the corpus of tests/data/templates/tricks), each PROVEN live there by an unsandboxed
  render; the command they run is ``true`` (the corpus's: ``touch "$GGUF_TRICK_MARKER"``, unset here);
* benign: the real chat templates of tests/data/templates/real and real2 and our fixtures in
  tests/data/templates/benign.

A scanner "flags" a file when its own verdict says so: ``gguf-schema audit`` a finding at warning or above (its
exit status 1); modelaudit an issue of severity warning or above; aisbom a CRITICAL risk (exit 2); c4nary a FAIL (exit
2, its default policy); glyphhound a gating finding (exit 1); pillar-gguf-scanner a verdict other than
``clean``. Time is the wall time of the scanner's processes over the whole corpus (one process for all the files for
the scanners that take several files or a directory: gguf-schema, modelaudit, aisbom; one process per file
for the others), on a shared machine: the load is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import gguf_schema  # noqa: E402
from gguf_schema import make_field  # noqa: E402

VENVS = Path("/work")
ENV = {
    **os.environ,
    "AISBOM_NO_TELEMETRY": "1",
    "AISBOM_OFFLINE": "1",
    "NO_COLOR": "1",
    "HF_HUB_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
}


def corpus() -> dict[str, tuple[str, bool]]:
    """name -> (template, malicious)."""
    from tests import test_template_tricks as tricks
    from tests import test_templates as payloads

    out: dict[str, tuple[str, bool]] = {}
    for name, p in payloads.P.items():
        src = p.source.replace("{CMD}", "'true'").replace("{MARKFILE}", "'/dev/null'").replace("{MARK}", "HOME")
        out[f"payload-{name}"] = (src, True)
    for name, t in {**tricks.T, **tricks.DOS}.items():
        out[f"trick-{name}"] = (t.source.replace("{CMD}", "'true'"), True)
    tricks_dir = ROOT / "tests" / "data" / "templates" / "tricks"
    for path in sorted(tricks_dir.glob("*.jinja")):  # the corpus of live tricks (tests/test_trick_corpus.py)
        out[f"corpus-{path.stem}"] = (path.read_bytes().decode("utf-8"), True)
    for d in ("real", "real2", "benign"):
        for path in sorted((ROOT / "tests" / "data" / "templates" / d).glob("*.jinja")):
            out[f"{d}-{path.stem}"] = (path.read_bytes().decode("utf-8"), False)
    return out


def write(directory: Path, name: str, template: str) -> Path:
    path = directory / f"{name[:120]}.gguf"
    fields = [make_field("general.architecture", "llama"), make_field("tokenizer.chat_template", template)]
    gguf_schema.save(path, fields, {"w": np.zeros(64, np.float32)})
    return path


def run(cmd: list[str], timeout: float = 600, stdout_only: bool = False) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV, cwd=tempfile.gettempdir())
        return p.returncode, p.stdout if stdout_only else p.stdout + p.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return -9, "timeout", time.perf_counter() - t0


def per_file(files: dict[str, Path], argv: list[str], flagged) -> tuple[dict[str, bool | None], float, str]:
    results: dict[str, bool | None] = {}
    total = 0.0
    note = ""
    for name, path in files.items():
        code, out, seconds = run([*argv, str(path)], timeout=120)
        total += seconds
        verdict = flagged(code, out)
        if verdict is None and not note:
            note = f"no verdict for {name}: exit {code}: {out.strip()[-200:]}"
        results[name] = verdict
    return results, total, note


def scanners() -> dict[str, dict]:
    py = sys.executable

    def modelaudit(files: dict[str, Path], directory: Path) -> tuple[dict[str, bool | None], float, str]:
        code, out, seconds = run(
            [str(VENVS / "venv-scan-modelaudit/bin/modelaudit"), "scan", "--format", "json", str(directory)],
            timeout=3600,
            stdout_only=True,  # its analytics client warns on stderr
        )
        try:
            data, _ = json.JSONDecoder().raw_decode(out[out.index("{") :])
        except ValueError:
            return dict.fromkeys(files), seconds, f"unreadable output (exit {code}): {out[-200:]}"
        hit = set()
        for issue in data.get("issues", []):
            if issue.get("severity") in ("warning", "critical", "error", "high"):
                hit.add(Path(str(issue.get("location", "")).split(":")[0]).name)
        return {n: p.name in hit for n, p in files.items()}, seconds, ""

    def aisbom(files: dict[str, Path], directory: Path) -> tuple[dict[str, bool | None], float, str]:
        report = directory.parent / "aisbom.json"
        code, out, seconds = run(
            [
                str(VENVS / "venv-scan-aisbom-cli/bin/aisbom"),
                "scan",
                str(directory),
                "--format",
                "json",
                "--output",
                str(report),
                "--no-fail-on-risk",
            ],
            timeout=3600,
        )
        try:
            data = json.loads(report.read_text())
        except (OSError, ValueError):
            return dict.fromkeys(files), seconds, f"no report (exit {code}): {out[-300:]}"
        text = json.dumps(data)
        hit = set()
        for comp in data.get("components", []):
            blob = json.dumps(comp)
            if "CRITICAL" in blob:
                hit.add(comp.get("name", ""))
        return {n: p.name in hit for n, p in files.items()}, seconds, "" if text else "empty report"

    def audit(*options: str):
        def ours(files: dict[str, Path], directory: Path) -> tuple[dict[str, bool | None], float, str]:
            args = [py, "-m", "gguf_schema", "audit", *options, "--json", *map(str, files.values())]
            code, out, seconds = run(args, 3600, True)
            try:
                reports = json.loads(out)["reports"]
            except (ValueError, KeyError):
                return dict.fromkeys(files), seconds, f"unreadable output (exit {code}): {out[-200:]}"
            flagged = {Path(r["source"]).name: r["flagged"] for r in reports}
            return {n: flagged.get(p.name) for n, p in files.items()}, seconds, ""

        return ours

    return {
        "gguf-schema audit": {"dir": audit()},
        "gguf-schema audit --no-render": {"dir": audit("--no-render")},
        "modelaudit": {"dir": modelaudit, "venv": "venv-scan-modelaudit"},
        "aisbom-cli": {"dir": aisbom, "venv": "venv-scan-aisbom-cli"},
        "c4nary": {
            "venv": "venv-scan-c4nary",
            "files": (
                [str(VENVS / "venv-scan-c4nary/bin/c4nary"), "scan", "--json"],
                lambda code, out: {0: False, 2: True, 1: True}.get(code),
            ),
        },
        "glyphhound": {
            "venv": "venv-scan-glyphhound",
            "files": (
                [str(VENVS / "venv-scan-glyphhound/bin/glyphhound"), "scan", "--format", "json"],
                lambda code, out: {0: False, 1: True}.get(code),
            ),
        },
        "pillar-gguf-scanner": {
            "venv": "venv-scan-pillar-gguf-scanner",
            "files": (
                [str(VENVS / "venv-scan-pillar-gguf-scanner/bin/python"), "-m", "pillar_gguf_scanner.cli"],
                lambda code, out: None if "Verdict:" not in out else "Verdict: clean" not in out,
            ),
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "template_scanners.md")
    ap.add_argument("--only", nargs="*", help="scanners to run (default: all)")
    args = ap.parse_args(argv)

    items = corpus()
    work = Path(tempfile.mkdtemp(prefix="scanners-"))
    directory = work / "files"
    directory.mkdir()
    files = {name: write(directory, name, src) for name, (src, _) in items.items()}
    malicious = {n for n, (_, m) in items.items() if m}
    load0 = os.getloadavg()
    rows = []
    details: dict[str, dict[str, bool | None]] = {}
    raw = args.out.with_suffix(".json")
    previous = json.loads(raw.read_text()) if args.only and raw.is_file() else {}
    for name, spec in scanners().items():
        if args.only and name not in args.only:
            if name in previous:  # kept from the last full run
                rows.append(tuple(previous[name]["row"]))
                details[name] = previous[name]["results"]
            continue
        venv = spec.get("venv")
        if venv and not (VENVS / venv).is_dir():
            rows.append((name, None, None, None, None, f"not installed (no {VENVS / venv})"))
            continue
        if "dir" in spec:
            results, seconds, note = spec["dir"](files, directory)
        else:
            argv_, flagged = spec["files"]
            results, seconds, note = per_file(files, argv_, flagged)
        details[name] = results
        hits = sum(1 for n in malicious if results.get(n))
        false = sum(1 for n in files if n not in malicious and results.get(n))
        unknown = sum(1 for n in files if results.get(n) is None)
        rows.append((name, hits, false, unknown, seconds, note))
        print(name, hits, false, unknown, f"{seconds:.1f} s", note, flush=True)
    load1 = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    kept: dict[str, Any] = {r[0]: {"row": list(r), "results": details.get(r[0], {})} for r in rows}
    kept["_when"] = previous.get("_when", "") if args.only else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    raw.write_text(json.dumps(kept, indent=1))

    n_bad, n_good = len(malicious), len(files) - len(malicious)
    lines = [
        "# Chat-template scanners side by side",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python {platform.python_version()}; "
        f"`nice python benchmarks/compare_template_scanners.py`; {os.cpu_count()} cores (shared); load average "
        f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end."
        + (
            f" This run: {', '.join(args.only)}; the other rows are kept from the last full run "
            f"({previous.get('_when', 'earlier')})."
            if args.only
            else ""
        ),
        "",
        f"Corpus: {n_bad} malicious templates (every trick of the test-suite, each proven live there by an "
        f"unsandboxed render) and {n_good} benign ones (real chat templates and our fixtures), one GGUF file each.",
        "",
        "| scanner | malicious flagged | benign flagged (false alarms) | no verdict | wall time, whole corpus | note |",
        "|---|---|---|---|---|---|",
    ]
    for name, hits, false, unknown, seconds, note in rows:
        if hits is None:
            lines.append(f"| {name} | - | - | - | - | {note} |")
        else:
            lines.append(
                f"| {name} | {hits}/{n_bad} | {false}/{n_good} | {unknown} | {seconds:.1f} s | {note.replace('|', '/')[:160]} |"
            )
    lines += ["", "Malicious templates each scanner missed:", ""]
    for name, results in details.items():
        missed = sorted(n for n in malicious if not results.get(n))
        lines.append(f"- {name} ({len(missed)}): {', '.join(missed) if missed else 'none'}")
    lines += ["", "Benign templates each scanner flagged:", ""]
    for name, results in details.items():
        false_alarms = sorted(n for n in files if n not in malicious and results.get(n))
        shown = ", ".join(false_alarms[:25]) + (f" and {len(false_alarms) - 25} more" if len(false_alarms) > 25 else "")
        lines.append(f"- {name} ({len(false_alarms)}): {shown if false_alarms else 'none'}")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
