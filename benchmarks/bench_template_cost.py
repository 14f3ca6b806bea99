"""What the template audit itself costs on the nastiest inputs: the whole ``gguf-schema audit`` process, as a user sees it.

Run: ``python benchmarks/bench_template_cost.py [--out FILE]``

Each input is written as a GGUF file, then ``python -m gguf_schema audit --json FILE`` runs under
``/usr/bin/time -v`` (wall time, user + system CPU, maximum resident set size of the process).
The inputs are those issue 29 lists (ten and twenty thousand macros defined and called, five million
zero-width spaces, a payload line repeated 100,000 times, a template stored as an array of a million
strings, 2,000 named templates, 8 MiB of real template code) and a few more that aim at the
analysis itself (nested loops, a long chain of assignments in reverse order, the largest template
the audit analyses), and those of issue 34 (the parse inside the budget: 256 KiB literal lists, filter chains,
nesting; the most tokens the audit parses, in shapes that cost the analyses most). Target: at most 1 s of CPU
and 200 MB each. The machine is shared: the load is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
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
from gguf_schema.check.templates import MAX_ANALYSED, MAX_TOKENS  # noqa: E402

PAYLOAD = "{{ cycler.__init__.__globals__.os.popen('true').read() }}\n"
KEY = "tokenizer.chat_template"


def real_code(limit: int) -> str:
    parts, n = [], 0
    texts = [p.read_bytes().decode("utf-8") for p in sorted((ROOT / "tests/data/templates/real").glob("*.jinja"))]
    while n < limit:
        for t in texts:
            if n + len(t) + 1 > limit:
                return "\n".join(parts)
            parts.append(t)
            n += len(t) + 1
    return "\n".join(parts)


def largest_real(count: int) -> list[str]:
    """The ``count`` largest real templates of the corpora (tests/data/templates/real, real2)."""
    paths = [
        *(ROOT / "tests/data/templates/real").glob("*.jinja"),
        *(ROOT / "tests/data/templates/real2").glob("*.jinja"),
    ]
    paths.sort(key=lambda p: p.stat().st_size)
    return [p.read_bytes().decode("utf-8") for p in paths[-count:]]


def inputs() -> dict[str, list]:
    """name -> the fields of the file (besides general.architecture)."""
    out: dict[str, list] = {}
    out["benign template (startup cost)"] = [make_field(KEY, "{% for m in messages %}{{ m.content }}{% endfor %}")]
    (big,) = largest_real(1)
    out[f"the largest real template ({len(big):,} characters)"] = [make_field(KEY, big)]
    three = largest_real(3)
    keys = [KEY, KEY + ".tool_use", KEY + ".rag"]
    out["the three largest real templates in one file"] = [make_field(k, t) for k, t in zip(keys, three, strict=True)]
    out["10k macros defined and called"] = [make_field(KEY, "{% macro m() %}x{% endmacro %}{{ m() }}\n" * 10_000)]
    out["20k macros defined and called"] = [make_field(KEY, "{% macro m() %}x{% endmacro %}{{ m() }}\n" * 20_000)]
    distinct = "".join(
        f"{{% macro m{i}(a) %}}{{{{ a }}}}{{% endmacro %}}{{{{ m{i}(messages) }}}}\n" for i in range(5000)
    )
    out["5k distinct macros, each called (200 KB)"] = [make_field(KEY, distinct)]
    out["5M zero-width spaces"] = [make_field(KEY, "{{ messages }}" + "\u200b" * 5_000_000)]
    out["2.5M zero-width spaces between letters"] = [make_field(KEY, "a\u200b" * 2_500_000)]
    out["payload line repeated 100k times (5.3 MB)"] = [make_field(KEY, PAYLOAD * 100_000)]
    pieces = [PAYLOAD[i % len(PAYLOAD)] * 5 for i in range(1_000_000)]
    out["template as an array of 1M strings"] = [make_field(KEY, GGUFArray(ValueType.STRING, pieces))]
    out["2,000 named templates, distinct"] = [
        make_field(f"{KEY}.t{i}", PAYLOAD.replace("true", f"true {i}") + f"{{{{ messages[{i}] }}}}")
        for i in range(2000)
    ]
    out["2,000 named templates, identical"] = [make_field(f"{KEY}.t{i}", PAYLOAD) for i in range(2000)]
    out["8 MiB of real template code"] = [make_field(KEY, real_code(8 << 20))]
    out[f"real template code just under the analysed size ({MAX_ANALYSED // 1024} KiB)"] = [
        make_field(KEY, real_code(MAX_ANALYSED - 1))
    ]
    nested = "".join(f"{{% for x{i} in messages %}}" for i in range(40)) + "{{ x39 }}" + "{% endfor %}" * 40
    out["40 nested loops"] = [make_field(KEY, nested)]
    chain = (
        "".join(f"{{% set v{i} = v{i + 1} %}}" for i in range(5000)) + "{% set v5000 = '__cla' ~ 'ss__' %}{{ x[v0] }}"
    )
    out["5,000 assignments in reverse order"] = [make_field(KEY, chain)]
    grow = "{% macro f(n) %}{{ f(n ~ n) }}{% endmacro %}{{ f('x') }}" * 2000
    out["2,000 recursive macros"] = [make_field(KEY, grow)]
    # issue 34: the parse inside the budget, and what the analyses do with the most tokens they accept
    near = MAX_ANALYSED - 64
    out["256 KiB literal list [1,1,...]"] = [make_field(KEY, "{{ [" + "1," * (near // 2) + "1] }}")]
    out["256 KiB filter chain x\\|e\\|e\\|..."] = [make_field(KEY, "{{ x" + "|e" * (near // 2) + " }}")]
    out["40,000 nested parentheses"] = [make_field(KEY, "{{ " + "(" * 40_000 + "1" + ")" * 40_000 + " }}")]
    out["8,000 nested ifs"] = [make_field(KEY, "{% if x %}" * 8000 + "y" + "{% endif %}" * 8000)]
    units = {
        "list of lists": ("{{ [", "[1],", "1] }}"),
        "dict literal": ("{{ {", "'a':1,", "'b':2} }}"),
        "filters with keywords": ("", "{{ x|indent(width=4)|center(width=3) }}", ""),
        "loops over a literal": ("{% set l = [1,2,3] %}", "{% for a in l %}{{ a }}{% endfor %}", ""),
        "appends in a loop": (
            "{% set ns = namespace(l=[]) %}{% for m in messages %}",
            "{% set _ = ns.l.append(m) %}",
            "{% endfor %}{{ ns.l|length }}",
        ),
    }
    for what, (pre, unit, suf) in units.items():
        per = len(list(_lexer().tokeniter(pre + unit * 100 + suf, "t"))) - len(list(_lexer().tokeniter(pre + suf, "t")))
        k = int((MAX_TOKENS - 1000) / (per / 100))
        out[f"{what}, {MAX_TOKENS - 1000:,} tokens"] = [make_field(KEY, pre + unit * k + suf)]
    return out


def _lexer():
    from gguf_schema.check.templates.jinja import _parse_environment

    return _parse_environment().lexer


_TIME_RE = {
    "wall": re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (.+)"),
    "user": re.compile(r"User time \(seconds\): ([\d.]+)"),
    "sys": re.compile(r"System time \(seconds\): ([\d.]+)"),
    "rss": re.compile(r"Maximum resident set size \(kbytes\): (\d+)"),
}


def _seconds(text: str) -> float:
    parts = [float(p) for p in text.strip().split(":")]
    return sum(p * 60**i for i, p in enumerate(reversed(parts)))


def measure(path: Path) -> dict:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "gguf_schema", "audit", "--json", str(path)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    stats = {k: r.search(p.stderr) for k, r in _TIME_RE.items()}
    rules: dict[str, int] = {}
    try:
        report = json.loads(p.stdout)["reports"][0]
        for f in report["findings"]:
            rules[f["rule"]] = rules.get(f["rule"], 0) + 1
    except (ValueError, KeyError, IndexError):
        pass
    return {
        "exit": p.returncode,
        "wall": _seconds(stats["wall"].group(1)) if stats["wall"] else float("nan"),
        "cpu": float(stats["user"].group(1)) + float(stats["sys"].group(1)) if stats["user"] else float("nan"),
        "rss": int(stats["rss"].group(1)) / 1024 if stats["rss"] else float("nan"),
        "rules": rules,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "template_cost.md")
    args = ap.parse_args(argv)
    # the package's bytecode compiled first, as an installed copy has it (this machine sets PYTHONDONTWRITEBYTECODE,
    # so without it every run would compile the modules whose sources changed: tens of milliseconds)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "gguf_schema")], check=True)
    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fields in inputs().items():
            path = Path(tmp) / "input.gguf"
            gguf_schema.save(
                path, [make_field("general.architecture", "llama"), *fields], {"w": np.zeros(64, np.float32)}
            )
            r = measure(path)
            r["size"] = path.stat().st_size
            rows.append((name, r))
            print(name, r, flush=True)
    load1 = os.getloadavg()
    lines = [
        "# What the template audit costs on the nastiest inputs",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python {platform.python_version()}; "
        f"`python benchmarks/bench_template_cost.py`; {os.cpu_count()} cores (shared); load average "
        f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end.",
        "",
        "Each row: one GGUF file, audited by a fresh `python -m gguf_schema audit --json FILE` under `/usr/bin/time -v` "
        "(interpreter start and imports included: about the first row's cost; the package's bytecode compiled first, "
        "as an installed copy has it). The CPU column counts the audit's sandboxed render child too (the default "
        "audit renders). Target (issue 34): at most 1 s of CPU and 200 MB.",
        "",
        "| input | file | wall | CPU (user+sys) | max RSS | exit | findings by rule |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        rules = ", ".join(f"{k} {v}" for k, v in sorted(r["rules"].items())) or "none"
        lines.append(
            f"| {name} | {r['size'] / 1e6:.1f} MB | {r['wall']:.2f} s | {r['cpu']:.2f} s | {r['rss']:.0f} MB "
            f"| {r['exit']} | {rules} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
