"""Differential fuzzer of the template audit: mutants of real templates and known tricks, rendered unsandboxed.

Run: ``nice python benchmarks/fuzz_templates.py [--mutants N] [--workers W] [--seed S] [--out FILE]``

Each mutant is made from a seed (the real chat templates of tests/data/templates/real, and every
trick of the test-suite: tests/test_templates.py's payloads, tests/test_template_tricks.py's tricks
and costly renders) by one to three random mutations that keep what the template does:

* ``launder``: a string literal becomes an expression of the same value (``'a' ~ 'b'``, ``|join``,
  ``[::-1][::-1]``, ``|format``, ``%``, ``replace`` on a number's text, ``dict(k=...).k``, ``pop()``,
  ``keys() - []``, a ``{% set %}`` capture, ``namespace``, ``|first``, a macro argument...);
* ``token``: a literal ``'__init__'`` or ``'__globals__'`` becomes the text of a special token (the
  render's ``bos_token``/``eos_token`` hold them: the file author chose the vocabulary);
* ``rename``: a variable the template sets gets another name; ``fullwidth``: an identifier is written
  in fullwidth letters (NFKC makes it the same Python variable);
* ``wrap``: the template is wrapped in a loop over the messages, or a condition;
* ``grow``: a number literal is multiplied by a power of ten (the cost side).

The audit (static, no render) judges each mutant first; a mutant with an error-severity finding is
detected. Every mutant the audit does not flag is rendered WITHOUT a sandbox (a forked child with
time and memory limits: tests.oracle.live), on a one-message conversation with
tools, in a tracing environment. A miss is an unflagged mutant whose render ran the payload (its
marker file appeared), printed the planted environment variable, reached an internal name through
a lookup (the trace), or exceeded the time or memory bound. The target is 0 misses.

Workers are processes, each with its own live renderer (a server that forks per render), at the
niceness given. Results: ``benchmarks/results/fuzz_templates.md`` (and a JSONL of misses, if any).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from gguf_schema.check.templates import audit_template, clear_cache  # noqa: E402
from tests.oracle.live import LiveRenderer  # noqa: E402

REAL = ROOT / "tests" / "data" / "templates" / "real"
SECRET = "fuzz-secret-7c1e"
TIMEOUT = 10.0
MEMORY = 1 << 30
CONTEXT = {
    "messages": [{"role": "user", "content": "Hello"}],
    "add_generation_prompt": True,
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ],
    "bos_token": "__init__",
    "eos_token": "__globals__",
    "x": True,
}


def seeds() -> list[tuple[str, str]]:
    """(label, template) of every seed: tricks with ``{CMD}``/``{MARKFILE}``/``{MARK}`` placeholders, real templates."""
    sys.path.insert(0, str(ROOT))
    from tests import test_template_tricks as tricks
    from tests import test_templates as payloads

    out: list[tuple[str, str]] = []
    for name, p in payloads.P.items():
        if not p.context:
            out.append((f"payload:{name}", p.source))
    for name, t in {**tricks.T, **tricks.DOS}.items():
        if not t.context:
            out.append((f"trick:{name}", t.source))
    out.append(("trick:tokens", tricks.reach("bos_token", "eos_token")))
    for path in sorted(REAL.glob("*.jinja")):
        out.append((f"real:{path.stem}", path.read_bytes().decode("utf-8")))
    return out


# ------------------------------------------------------------------------------------------------- mutations

_CODE_RE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
_STRING_RE = re.compile(r"'([A-Za-z_][A-Za-z0-9_]{0,30})'")
_SET_RE = re.compile(r"\{%-?\s*set\s+([a-z_][a-z0-9_]*)\s*=")
_WORD_RE = re.compile(r"\b(cycler|joiner|namespace|lipsum|messages|loop)\b")


def _code_spans(src: str) -> list[tuple[int, int]]:
    return [m.span() for m in _CODE_RE.finditer(src)]


def _in_code(spans: list[tuple[int, int]], i: int) -> bool:
    return any(a <= i < b for a, b in spans)


def _fw(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _laundered(s: str, rnd: random.Random) -> tuple[str, str]:
    """An expression equal to the string ``s``, and a statement to put before the template (or '')."""
    k = rnd.randrange(1 << 30)
    half = max(1, len(s) // 2)
    a, b = s[:half], s[half:]
    n = rnd.randrange(10, 10**6)
    forms = [
        (f"('{a}' ~ '{b}')", ""),
        (f"(['{a}', '{b}']|join)", ""),
        (f"('{s}'[::-1][::-1])", ""),
        (f"('%s%s'|format('{a}', '{b}'))", ""),
        (f"('%s%s' % ('{a}', '{b}'))", ""),
        (f"(({n}|string)|replace('{n}', '{s}'))", ""),
        (f"((({n} > 0)|string)|replace('True', '{s}'))", ""),
        (f"(('{s}'|list)|join)", ""),
        (f"(dict(k{k}='{s}').k{k})", ""),
        (f"(['z', '{s}'].pop())", ""),
        (f"({{'a': '{s}'}}.pop('a'))", ""),
        (f"(({{'{s}': 1}}.keys() - [])|first)", ""),
        (f"(namespace(v='{s}').v)", ""),
        (f"(['{s}']|first)", ""),
        (f"(('x{s}')[1:])", ""),
        (f"('{s}'.upper().lower())" if s.islower() or not any(c.isalpha() for c in s) else f"('{s}')", ""),
        (f"('{{0}}{{1}}'.format('{a}', '{b}'))", ""),
        (f"(['q', '{a}']|last ~ '{b}')", ""),
        (f"v{k}", f"{{% set v{k} %}}{s}{{% endset %}}"),
        (f"(v{k}|trim)", f"{{% set v{k} %}} {s} {{% endset %}}"),
        (f"m{k}('{a}', b='{b}')", f"{{% macro m{k}(a, b) %}}{{{{ a ~ b }}}}{{% endmacro %}}"),
        (f"(l{k}[0])", f"{{% set l{k} = ['q', '{s}'] %}}{{% do l{k}.remove('q') %}}"),
        (f"(ns{k}.v)", f"{{% set ns{k} = namespace(v='q') %}}{{% set ns{k}.v = '{s}' %}}"),
    ]
    return rnd.choice(forms)


def mutate(src: str, rnd: random.Random) -> tuple[str, list[str]]:
    """One to three mutations of ``src`` (see the module docstring); the names of those applied."""
    applied: list[str] = []
    prelude: list[str] = []
    for _ in range(rnd.randint(1, 3)):
        op = rnd.choice(["launder", "launder", "launder", "token", "rename", "fullwidth", "wrap", "grow"])
        spans = _code_spans(src)
        if op in ("launder", "token"):
            hits = [m for m in _STRING_RE.finditer(src) if _in_code(spans, m.start())]
            if op == "token":
                hits = [m for m in hits if m.group(1) in ("__init__", "__globals__")]
            if not hits:
                continue
            m = rnd.choice(hits)
            if op == "token":
                expr, pre = ("bos_token" if m.group(1) == "__init__" else "eos_token"), ""
            else:
                expr, pre = _laundered(m.group(1), rnd)
            src = src[: m.start()] + expr + src[m.end() :]
            if pre:
                prelude.append(pre)
        elif op == "rename":
            names = list(dict.fromkeys(_SET_RE.findall(src)))
            if not names:
                continue
            old = rnd.choice(names)
            src = re.sub(rf"\b{re.escape(old)}\b", f"r{rnd.randrange(1 << 20)}_{old}", src)
        elif op == "fullwidth":
            hits = [m for m in _WORD_RE.finditer(src) if _in_code(spans, m.start())]
            if not hits:
                continue
            m = rnd.choice(hits)
            src = src[: m.start()] + _fw(m.group(1)) + src[m.end() :]
        elif op == "wrap":
            src = rnd.choice(
                [
                    "{% for _m in messages %}" + src + "{% endfor %}",
                    "{% if messages %}" + src + "{% endif %}",
                    "{% macro _w() %}" + src + "{% endmacro %}{{ _w() }}",
                ]
            )
        elif op == "grow":
            hits = [m for m in re.finditer(r"(?<![\w.])(\d{1,3})(?![\w.])", src) if _in_code(spans, m.start())]
            if not hits:
                continue
            m = rnd.choice(hits)
            src = src[: m.start()] + f"({m.group(1)} * 10 ** {rnd.randint(1, 4)})" + src[m.end() :]
        applied.append(op)
    return "".join(prelude) + src, applied


# ------------------------------------------------------------------------------------------------- workers

_live: LiveRenderer | None = None
_tmp: str = ""


def _init(nice: int) -> None:
    global _live, _tmp
    os.nice(nice)
    _tmp = tempfile.mkdtemp(prefix="fuzz-templates-")
    _live = LiveRenderer(env={"GGUF_AUDIT_MARK": SECRET})


def _judge(job: tuple[int, int, str, str]) -> dict:
    i, seed, label, source = job
    rnd = random.Random(seed * 1_000_003 + i)
    mutant, ops = mutate(source, rnd)
    marker = Path(_tmp) / f"m{i}"
    mutant = (
        mutant.replace("{CMD}", repr(f"touch '{marker}'"))
        .replace("{MARKFILE}", repr(str(marker)))
        .replace("{MARK}", "GGUF_AUDIT_MARK")
    )
    t0 = time.process_time()
    clear_cache()
    findings = audit_template(mutant)
    audit_s = time.process_time() - t0
    errors = sorted({f.rule for f in findings if f.severity == "error"})
    row = {"i": i, "seed": label, "ops": ops, "errors": errors, "audit_s": audit_s}
    if errors:
        return row
    assert _live is not None
    result = _live.render(mutant, CONTEXT, timeout=TIMEOUT, memory=MEMORY, trace=True)
    reasons = []
    if marker.exists():
        reasons.append("ran the payload")
        marker.unlink()
    if SECRET in result.output:
        reasons.append("read the environment")
    if result.internals:
        reasons.append("reached " + ", ".join(result.internals[:3]))
    if result.exceeded:
        reasons.append(f"render {result.kind}")
    row.update(rendered=True, kind=result.kind, miss=reasons)
    if reasons:
        row["template"] = mutant[:20000]
    return row


def combine(parts: list[Path], out: Path) -> int:
    """One report from the reports of several runs (shards with different seeds): their tables added up."""
    row_re = re.compile(r"^\| (?:\*\*)?(of trick seeds|of real seeds|all)(?:\*\*)? \| (.*)$", re.M)
    totals: dict[str, list[int]] = {}
    headers = []
    for part in parts:
        text = part.read_text(encoding="utf-8")
        headers.append(text.splitlines()[2])
        for name, rest in row_re.findall(text):
            cells = [int(c.strip(" *").replace(",", "")) for c in rest.strip(" |").split("|")]
            totals[name] = [a + b for a, b in zip(totals.get(name, [0] * len(cells)), cells, strict=True)]
    lines = [
        "# Differential fuzzing of the template audit",
        "",
        f"{len(parts)} runs with different seeds, added up; each run's own line:",
        "",
        *[f"- {h}" for h in headers],
        "",
        "| | mutants | flagged (error) | not flagged, rendered | misses |",
        "|---|---|---|---|---|",
    ]
    for name in ("of trick seeds", "of real seeds", "all"):
        cells = totals.get(name, [0, 0, 0, 0])
        bold = "**" if name == "all" else ""
        lines.append(f"| {bold}{name}{bold} | " + " | ".join(f"{bold}{c:,}{bold}" for c in cells) + " |")
    first = parts[0].read_text(encoding="utf-8").split("\n\n")
    lines += ["", *[p for p in first if p.startswith(("Seeds:", "A miss:"))]]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(out.read_text(encoding="utf-8"))
    return 1 if totals.get("all", [0, 0, 0, 0])[3] else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--combine", nargs="+", type=Path, help="add up the reports of several runs into --out")
    ap.add_argument("--mutants", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fuzz_templates.md")
    args = ap.parse_args(argv)
    if args.combine:
        return combine(args.combine, args.out)

    pool_seeds = seeds()
    tricks = [s for s in pool_seeds if not s[0].startswith("real:")]
    real = [s for s in pool_seeds if s[0].startswith("real:")]
    rnd = random.Random(args.seed)
    jobs = []
    for i in range(args.mutants):  # four mutants of a trick for each of a real template
        label, source = rnd.choice(tricks) if i % 5 else rnd.choice(real)
        jobs.append((i, args.seed, label, source))
    load0 = os.getloadavg()
    started = time.time()
    rows = []
    misses = []
    miss_file = args.out.with_suffix(".misses.jsonl")
    miss_file.unlink(missing_ok=True)
    with multiprocessing.get_context("fork").Pool(args.workers, _init, (args.nice,)) as pool:
        for n, row in enumerate(pool.imap_unordered(_judge, jobs, chunksize=16), 1):
            rows.append({k: v for k, v in row.items() if k != "template"})
            if row.get("miss"):
                misses.append(row)
                with open(miss_file, "a", encoding="utf-8") as fh:  # as they come: a long run can be looked into
                    fh.write(json.dumps(row) + "\n")
            if n % 5000 == 0:
                print(f"{n:,} mutants, {len(misses)} misses, {time.time() - started:.0f} s", flush=True)
    wall = time.time() - started
    load1 = os.getloadavg()

    detected = [r for r in rows if r["errors"]]
    rendered = [r for r in rows if r.get("rendered")]
    by_seed_kind = {
        "trick": [r for r in rows if not r["seed"].startswith("real:")],
        "real": [r for r in rows if r["seed"].startswith("real:")],
    }
    kinds: dict[str, int] = {}
    for r in rendered:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    rules: dict[str, int] = {}
    for r in detected:
        for rule in r["errors"]:
            rules[rule] = rules.get(rule, 0) + 1
    audit_times = sorted(r["audit_s"] for r in rows)
    lines = [
        "# Differential fuzzing of the template audit",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python {platform.python_version()}; "
        f"`nice -n {args.nice} python benchmarks/fuzz_templates.py --mutants {args.mutants} --workers {args.workers} "
        f"--seed {args.seed}`; {os.cpu_count()} cores (shared); load average {load0[0]:.2f} at the start, "
        f"{load1[0]:.2f} at the end; {wall:.0f} s wall.",
        "",
        f"Seeds: {len(tricks)} tricks (the test-suite's payloads, tricks and costly renders) and {len(real)} real "
        "templates; one to three mutations each (see the script's docstring). Every mutant the audit does not flag "
        f"at error severity is rendered unsandboxed (a forked child, {TIMEOUT:g} s, {MEMORY >> 20} MiB) on a "
        "one-message conversation with tools, the special tokens holding `__init__` and `__globals__`, in an "
        "environment that traces every internal name a lookup reaches.",
        "",
        "| | mutants | flagged (error) | not flagged, rendered | misses |",
        "|---|---|---|---|---|",
    ]
    for name, group in by_seed_kind.items():
        g_missed = sum(1 for r in group if r.get("miss"))
        lines.append(
            f"| of {name} seeds | {len(group):,} | {sum(1 for r in group if r['errors']):,} | "
            f"{sum(1 for r in group if r.get('rendered')):,} | {g_missed} |"
        )
    lines += [
        f"| **all** | **{len(rows):,}** | **{len(detected):,}** | **{len(rendered):,}** | **{len(misses)}** |",
        "",
        "A miss: a mutant the audit did not flag whose unsandboxed render ran the payload, read the environment, "
        "reached an internal name, or exceeded the time or memory bound.",
        "",
        f"Renders of unflagged mutants, by outcome: {json.dumps(dict(sorted(kinds.items())))}.",
        f"Rules of the flagged mutants (a mutant may have several): {json.dumps(dict(sorted(rules.items())))}.",
        f"Audit CPU time per mutant (cold, the cache cleared): median {audit_times[len(audit_times) // 2] * 1000:.1f} ms, "
        f"99th percentile {audit_times[int(len(audit_times) * 0.99)] * 1000:.1f} ms, max {audit_times[-1] * 1000:.1f} ms.",
    ]
    if misses:
        lines += ["", f"Misses are in `{miss_file.name}`."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text, encoding="utf-8")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
