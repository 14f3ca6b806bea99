"""Chat-template audit speed: gguf-schema's audit_template side by side with what Jinja itself does.

Run: ``python benchmarks/bench_templates.py [--corpus DIR] [--repeat N] [--out FILE]``

For each template (our benign fixtures in tests/data/templates/benign, the real template of
the phi-3 vocabulary of tests/data/vocab, a ~10 kB template made by joining fixtures, and every
``*.jinja`` file of ``--corpus``), it times, best of ``--repeat`` runs, each cold (the audit's
cache cleared):

* Jinja's parse alone (``Environment.parse`` with the extensions the audit enables): the floor
  for any audit that uses Jinja's own parser;
* what a runtime does when it loads the template: ``ImmutableSandboxedEnvironment.from_string``
  (lex, parse, compile to Python);
* ``audit_template`` (hidden characters, escapes, parse, the abstract interpretation).

It also counts the findings (warnings and errors; a benign corpus should have none) and times one
``render=True`` audit (the sandboxed render runs in a child process). The machine's load average
is printed, since the measurement machine is shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import jinja2  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

from gguf_schema.check import templates  # noqa: E402
from gguf_schema.check.templates.jinja import generation_extension  # noqa: E402

BENIGN = ROOT / "tests" / "data" / "templates" / "benign"
PHI3 = ROOT / "tests" / "data" / "vocab" / "ggml-vocab-phi-3.gguf"


def best_ms(fn, repeat: int, clock=time.perf_counter) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best * 1000


def cpu_ms(fn, repeat: int) -> float:
    """Best CPU time of this thread: on a shared, loaded machine it leaves out the time spent waiting for a core."""
    return best_ms(fn, repeat, time.thread_time)


def measure(source: str, repeat: int) -> dict:
    parse_env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do", generation_extension()])
    runtime_env = ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols", generation_extension()])

    def audit() -> list:
        templates.clear_cache()
        return templates.audit_template(source)

    findings = audit()
    return {
        "chars": len(source),
        "parse": cpu_ms(lambda: parse_env.parse(source), repeat),
        "compile": cpu_ms(lambda: runtime_env.from_string(source), repeat),
        "audit": cpu_ms(audit, repeat),
        "audit_wall": best_ms(audit, repeat),
        "warnings": sum(f.severity != "info" for f in findings),
    }


def load() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, help="a directory of *.jinja templates to audit as well")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", type=Path, help="write the markdown report here too")
    args = ap.parse_args(argv)

    rows: list[tuple[str, dict]] = []
    fixtures = sorted(BENIGN.glob("*.jinja"))
    for path in fixtures:
        rows.append((f"fixture {path.stem}", measure(path.read_bytes().decode("utf-8"), args.repeat)))
    if PHI3.is_file():
        import gguf_schema

        rows.append(
            ("phi-3 (tests/data)", measure(gguf_schema.open(PHI3).metadata["tokenizer.chat_template"], args.repeat))
        )
    joined = ""
    for path in fixtures:
        if len(joined) >= 10_000:
            break
        joined += path.read_bytes().decode("utf-8") + "\n"
    rows.append((f"fixtures joined ({len(joined):,} chars)", measure(joined, args.repeat)))

    corpus_rows: list[tuple[str, dict]] = []
    if args.corpus:
        for path in sorted(args.corpus.glob("*.jinja")):
            corpus_rows.append((path.name, measure(path.read_bytes().decode("utf-8"), args.repeat)))

    render_source = (BENIGN / "thinking_tool_calls.jinja").read_bytes().decode("utf-8")
    render_ms = best_ms(lambda: templates.audit_template(render_source, render=True), 3)  # wall: a child process

    lines = [
        "# Chat-template audit benchmark",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python {platform.python_version()}, "
        f"Jinja2 {jinja2.__version__}, {os.cpu_count()} cores; best of {args.repeat} cold runs each "
        f"(the audit's cache cleared); load average at start: {load()}.",
        "",
        "Times are this thread's CPU time (`time.thread_time`), best of the runs: the machine is shared, and wall "
        "time also counts waiting for a core (the audit's best wall time is listed too). `parse`: Jinja's own "
        "parser, the floor for an audit built on it. `runtime load`: `ImmutableSandboxedEnvironment.from_string` "
        "(lex, parse, compile), what a runtime does once per model. `audit`: `audit_template` (hidden "
        "characters, escapes, parse, analysis).",
        "",
        "| template | chars | parse | runtime load | audit | audit - parse | audit / runtime load | audit, wall "
        "| warnings+errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows:
        lines.append(
            f"| {label} | {r['chars']:,} | {r['parse']:.2f} ms | {r['compile']:.2f} ms | {r['audit']:.2f} ms "
            f"| {r['audit'] - r['parse']:.2f} ms | {r['audit'] / r['compile']:.2f}x "
            f"| {r['audit_wall']:.2f} ms | {r['warnings']} |"
        )
    if corpus_rows:
        audits = [r["audit"] for _, r in corpus_rows]
        per_kb = [r["audit"] / (r["chars"] / 1000) for _, r in corpus_rows]
        ratio = [r["audit"] / r["compile"] for _, r in corpus_rows]
        near10k = [(name, r) for name, r in corpus_rows if 8_000 <= r["chars"] <= 12_000]
        flagged = [(name, r["warnings"]) for name, r in corpus_rows if r["warnings"]]
        lines += [
            "",
            f"## Corpus: {len(corpus_rows)} templates from `{args.corpus}`",
            "",
            f"- audit time: median {statistics.median(audits):.2f} ms, max {max(audits):.2f} ms; "
            f"median {statistics.median(per_kb):.2f} ms per 1,000 chars",
            f"- audit minus Jinja's parse: median {statistics.median(a - r['parse'] for a, (_, r) in zip(audits, corpus_rows, strict=True)):.2f} ms, "
            f"max {max(a - r['parse'] for a, (_, r) in zip(audits, corpus_rows, strict=True)):.2f} ms",
            f"- audit / runtime load: median {statistics.median(ratio):.2f}x, max {max(ratio):.2f}x",
            f"- templates with a warning or an error: {len(flagged)} {flagged if flagged else ''}".rstrip(),
            "",
            "Templates of 8,000-12,000 characters:",
            "",
            "| template | chars | parse | runtime load | audit | audit - parse |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in near10k:
            lines.append(
                f"| {name} | {r['chars']:,} | {r['parse']:.2f} ms | {r['compile']:.2f} ms | {r['audit']:.2f} ms "
                f"| {r['audit'] - r['parse']:.2f} ms |"
            )
    lines += [
        "",
        f"`audit_template(..., render=True)` on `thinking_tool_calls.jinja` (4 sample conversations rendered in a "
        f"sandboxed child process): {render_ms:.0f} ms wall, best of 3.",
        "",
        f"Load average at the end: {load()}.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
