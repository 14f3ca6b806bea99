"""The containment oracle of the template audit at scale: template x request pairs, failures by class, minimized.

Run: ``nice python benchmarks/template_oracle.py [--pairs N] [--workers W] [--batch B] [--contexts K]
[--state FILE] [--out FILE]``

Each worker process draws templates with Hypothesis (tests/oracle/grammar.py: random templates over the
whole of Jinja with computed names and sizes, 50%; mutants and splices of the real templates and the
known tricks, 20%; tests/oracle/launder.py: internal names and huge sizes sent through random compositions
of value-preserving rewrites, 20%; the known templates as they are, 10%) in batches of ``B`` examples, each batch under
its own seed. Every template is judged by the audit; an unflagged one is rendered, observed, on ``K/2``
to ``K`` requests of tests/oracle/requests.py (each pair twice: unsandboxed and in the immutable sandbox,
the ``tojson`` and autoescape settings drawn), in a forked child with limits, and each render is checked
for containment (tests/oracle/containment.py). A flagged template's pairs count as answered.

A batch that finds a failure of a class not minimized yet is run again under the same seed with
Hypothesis's shrinking, its property failing on that class only: the smallest failing example seen is the
minimized counter-example. The state file (JSON) holds the finished batches, so a stopped run resumes
where it was; the report (``benchmarks/results/template_oracle.md``) gives pairs, pairs/s, the machine's
load average, and the failures by class with their minimized examples.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

RESULTS = HERE / "results"
SHRINK_SECONDS = 180.0  # for the minimization of one class


class _Found(Exception):
    """The property found a failure of the class being minimized."""


def _strategy() -> Any:
    from hypothesis import strategies as st

    from tests.oracle.containment import CONFIGS
    from tests.oracle.grammar import known, mutants, templates
    from tests.oracle.launder import reaches

    return st.one_of(
        templates(),
        templates(),
        templates(),
        templates(),
        templates(),
        mutants(),
        mutants(),
        reaches(),
        reaches(),
        st.sampled_from([s for _, s in known()]),
    ), CONFIGS


def run_batch(seed: int, batch: int, contexts: int, minimize: str | None, live: Any) -> dict[str, Any]:
    """One batch of ``batch`` examples under ``seed``: counts, failures by class, and (when ``minimize`` names
    a class) the smallest example of that class found while Hypothesis shrinks."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from tests.oracle.containment import describe, run_template
    from tests.oracle.requests import CONTEXTS

    sources, configs = _strategy()
    stats: dict[str, int] = {"templates": 0, "flagged": 0, "pairs": 0, "pairs_rendered": 0, "renders": 0}
    kinds: dict[str, int] = {}
    failures: dict[str, int] = {}
    examples: dict[str, str] = {}
    smallest: dict[str, tuple[int, str]] = {}
    give_up = time.perf_counter() + SHRINK_SECONDS

    @hseed(seed)
    @settings(
        max_examples=batch,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink] if minimize else [Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(
        source=sources,
        picks=st.lists(
            st.integers(0, len(CONTEXTS) - 1), min_size=max(1, contexts // 2), max_size=contexts, unique=True
        ),
        plain=st.sampled_from(configs[:4]),
        boxed=st.sampled_from(configs[4:]),
    )
    def prop(source: str, picks: list[int], plain: Any, boxed: Any) -> None:
        if minimize and time.perf_counter() > give_up:
            return  # shrinking has had its time: nothing more is interesting, so Hypothesis stops
        outcome = run_template(live, source, [(i, CONTEXTS[i]) for i in picks], [plain, boxed])
        if minimize:
            hit = [f for f in outcome.failures if f.cls == minimize]  # the class being minimized
            if hit:
                size = len(source) + 100 * len(picks)
                if minimize not in smallest or size < smallest[minimize][0]:
                    smallest[minimize] = (size, describe(outcome, hit[0]))
                raise _Found(minimize)
            return
        stats["templates"] += 1
        stats["flagged"] += outcome.flagged
        stats["pairs"] += outcome.pairs
        stats["pairs_rendered"] += 0 if outcome.flagged else outcome.pairs
        stats["renders"] += outcome.renders
        for k, v in outcome.kinds.items():
            kinds[k] = kinds.get(k, 0) + v
        for cls in outcome.classes():
            failures[cls] = failures.get(cls, 0) + 1
            if cls not in examples:
                examples[cls] = describe(outcome, next(f for f in outcome.failures if f.cls == cls))

    try:
        prop()
    except _Found:
        pass
    except Exception as e:  # a Hypothesis error (flaky, unsatisfiable): reported, the batch counts as done
        failures["oracle:error"] = failures.get("oracle:error", 0) + 1
        examples.setdefault("oracle:error", f"{type(e).__name__}: {str(e)[:500]}")
    return {
        "seed": seed,
        "stats": stats,
        "kinds": kinds,
        "failures": failures,
        "examples": examples,
        "minimized": {k: v[1] for k, v in smallest.items()},
    }


def worker(args: tuple[int, list[int], int, int, int, str]) -> None:
    """Run the batches ``seeds``, appending each result as one JSON line to the state file."""
    index, seeds, batch, contexts, nice, state = args
    os.nice(nice)
    from tests.oracle.containment import is_failure
    from tests.oracle.live import LiveRenderer

    # a class minimized by an earlier run (the state) or by this worker is not minimized again
    minimized: set[str] = {k for r in read_state(Path(state)) for k in r["minimized"]}
    with LiveRenderer() as live:
        for seed in seeds:
            t0 = time.perf_counter()
            result = run_batch(seed, batch, contexts, None, live)
            result["generate_seconds"] = time.perf_counter() - t0
            for cls in result["failures"]:
                if cls not in minimized and is_failure(cls) and cls != "oracle:error":
                    minimized.add(cls)
                    again = run_batch(seed, batch, contexts, cls, live)
                    result["minimized"].update(again["minimized"])
            result["seconds"] = time.perf_counter() - t0
            result["worker"] = index
            with open(state, "a", encoding="utf-8") as f:
                f.write(json.dumps(result) + "\n")


def read_state(state: Path) -> list[dict[str, Any]]:
    if not state.exists():
        return []
    out = []
    for line in state.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by a stopped run
            continue
    return out


def report(results: list[dict[str, Any]], wall: float, load: tuple[float, ...], args: argparse.Namespace) -> str:
    total: dict[str, int] = {}
    kinds: dict[str, int] = {}
    failures: dict[str, int] = {}
    examples: dict[str, str] = {}
    minimized: dict[str, str] = {}
    seconds = 0.0
    generate = 0.0
    for r in results:
        for k, v in r["stats"].items():
            total[k] = total.get(k, 0) + v
        for k, v in r["kinds"].items():
            kinds[k] = kinds.get(k, 0) + v
        for k, v in r["failures"].items():
            failures[k] = failures.get(k, 0) + v
        for k, v in r["examples"].items():
            examples.setdefault(k, v)
        for k, v in r["minimized"].items():
            if k not in minimized or len(v) < len(minimized[k]):
                minimized[k] = v
        seconds += r.get("seconds", 0.0)
        generate += r.get("generate_seconds", r.get("seconds", 0.0))
    pairs = total.get("pairs", 0)
    import jinja2

    from gguf_schema.check import templates
    from tests.oracle.containment import is_failure

    lines = [
        "# Template containment oracle",
        "",
        f"Run: `nice python benchmarks/template_oracle.py --pairs {args.pairs} --workers {args.workers} "
        f"--batch {args.batch} --contexts {args.contexts}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"Python {platform.python_version()}, Jinja2 {jinja2.__version__}, "
        f"level: {'predict() and audit' if hasattr(templates, 'predict') else 'audit (predict() not on this branch yet)'}.",
        f"Machine: {os.cpu_count()} cores, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the start "
        f"and {os.getloadavg()[0]:.2f} at the end (shared with other workers).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| batches (Hypothesis seeds) | {len(results):,} |",
        f"| templates | {total.get('templates', 0):,} |",
        f"| of which flagged by the audit (error finding) | {total.get('flagged', 0):,} |",
        f"| template x request pairs | {pairs:,} |",
        f"| of which rendered (unflagged templates) | {total.get('pairs_rendered', 0):,} |",
        f"| observed renders (each pair unsandboxed and sandboxed) | {total.get('renders', 0):,} |",
        f"| wall time of this invocation | {wall:,.0f} s |",
        f"| pairs/s, shrinking included (pairs / worker-seconds x {args.workers} workers) | "
        f"{pairs / max(seconds / max(args.workers, 1), 1e-9):,.0f} |",
        f"| pairs/s, generating and checking only | {pairs / max(generate / max(args.workers, 1), 1e-9):,.0f} |",
        f"| containment failures | {sum(v for k, v in failures.items() if is_failure(k)):,} "
        "(templates with a failure; by class below) |",
        "",
        "Renders by how they ended: " + ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items())) + ". "
        "Each render: 1 s of CPU, 1 GiB of address space, 1 MiB of output, in a forked child "
        "(`LiveRenderer.observe`); `error` is the template raising (most random templates do, part way).",
        "",
        "## Failures by class",
        "",
    ]
    if not failures:
        lines.append("None.")
    for cls in sorted(failures, key=lambda c: (not is_failure(c), c)):
        what = "" if is_failure(cls) else " (a note, not a containment failure)"
        lines += [
            f"### {cls}: {failures[cls]:,} templates{what}",
            "",
            "Minimized:" if cls in minimized else "First seen:",
            "",
        ]
        lines += ["```", minimized.get(cls, examples.get(cls, "")), "```", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs to reach (with what the state holds)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100, help="examples (templates) per Hypothesis batch")
    parser.add_argument("--contexts", type=int, default=12, help="requests per template (at most)")
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--state", type=Path, default=RESULTS / "template_oracle.state.jsonl")
    parser.add_argument("--out", type=Path, default=RESULTS / "template_oracle.md")
    args = parser.parse_args()
    load = os.getloadavg()
    done = read_state(args.state)
    have = sum(r["stats"]["pairs"] for r in done)
    seen = {r["seed"] for r in done}
    per_batch = args.batch * (args.contexts * 3 // 4)  # expected pairs of a batch
    need = max(0, -(-(args.pairs - have) // max(per_batch, 1)))
    seeds = [s for s in range(1, 10**7) if s not in seen][:need]
    t0 = time.perf_counter()
    if seeds:
        jobs = [
            (i, seeds[i :: args.workers], args.batch, args.contexts, args.nice, str(args.state))
            for i in range(args.workers)
        ]
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            pool.map(worker, jobs)
    wall = time.perf_counter() - t0
    text = report(read_state(args.state), wall, load, args)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
