"""The containment oracle of the template audit in bulk: the same check as ``template_oracle.py``, a faster harness.

Run: ``nice python benchmarks/template_oracle_bulk.py [--pairs N] [--workers W] [--chunk C] [--contexts K]
[--state FILE] [--out FILE] [--seconds S]``

What is the same as ``benchmarks/template_oracle.py``: the templates come from the oracle's own grammar
(``tests/oracle/grammar.py``: random templates over the whole of Jinja with computed names and sizes;
mutants and splices of known templates) and laundering rewrites (``tests/oracle/launder.py``), the
requests are ``tests/oracle/requests.CONTEXTS``, a render is observed by
``gguf_schema.check.templates.observe`` in the environments ``LiveRenderer`` builds (plain ``Environment``
unsandboxed, ``ImmutableSandboxedEnvironment`` sandboxed, ``tojson`` of transformers or of Jinja,
autoescape off or on; each pair rendered once unsandboxed and once sandboxed, the settings drawn), with
the same functions refused (``guard``), and judged by ``tests.oracle.containment.check_render`` against
``predict()``.

What differs (throughput):

* generation draws from the grammar's functions with a seeded ``random.Random`` standing in for
  Hypothesis (the grammar only uses ``sampled_from``/``integers``/``booleans``: a private copy of the
  module is loaded with a plain-random stand-in), so no per-example Hypothesis overhead; the mutant pool
  adds ``tests/data/templates/{real,real2,tricks}`` to the grammar's known templates;
* ``predict()`` runs once per distinct template, in the parent (cached); a flagged template is not rendered
  (its pairs count as answered, as in the oracle);
* renders run in ``--workers`` PERSISTENT child processes (no fork per template): each child starts with a
  clean environment in a temporary folder, sets its address-space (1 GiB) and total-CPU limits once, and
  renders each (template, request, configuration) under its own 1 s CPU alarm (``ITIMER_PROF``);
  ``MemoryError``/``RecursionError`` are caught. A child whose render was cut by a limit, which died, which
  passed its wall-clock deadline (then killed), or whose template failed the check is replaced (a render
  can change the process it runs in: a fresh child keeps the next ones clean).

A template that calls a command unsandboxed is a containment failure by definition (it looked up or
called what no prediction allows); the child's ``guard`` refuses process and file-changing functions, so
the payload cannot do more than the template itself.

The first failure of each class is minimized (delta debugging on the template's tokens, the request and
configuration kept, for at most ``--shrink-seconds``). The state file (JSON lines, one per finished
chunk of ``C`` templates under its own seed) makes a stopped run resume where it was; the report gives
pairs, pairs/s, the load average, and the failures by class with their minimized examples.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import random
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from gguf_schema.check.templates import predict  # noqa: E402
from tests.oracle import live as live_templates  # noqa: E402
from tests.oracle.containment import CONFIGS, Failure, Judgement, check_render, describe, is_failure, settle  # noqa: E402
from tests.oracle.requests import CONTEXTS  # noqa: E402

RESULTS = HERE / "results"
DATA = ROOT / "tests" / "data" / "templates"
FINDINGS = RESULTS / "template_oracle_bulk_findings.md"  # each new class, as first found and minimized

TIMEOUT = 1.0  # CPU seconds of one render (the oracle's)
MEMORY = 1 << 30  # address space of a child
PARENT_MEMORY = 4 << 30  # address space of the parent (predict() runs in it)
MAX_OUTPUT = 1 << 20  # characters of one render's output
KEEP = 256  # characters of output kept in an observation
CHILD_CPU = 900  # a child's whole CPU limit (RLIMIT_CPU); it is replaced well before (RECYCLE_CPU)
RECYCLE_CPU = 600.0
RECYCLE_JOBS = 4000
LIMITS = ("timeout", "memory", "recursion")


# ---------------------------------------------------------------------------------------------- generation


class _Strategies:
    """What the grammar uses of ``hypothesis.strategies``, as plain descriptions a seeded draw interprets."""

    @staticmethod
    def sampled_from(elements: Any) -> tuple[str, Any]:
        return ("s", elements)

    @staticmethod
    def integers(lo: int, hi: int) -> tuple[str, int, int]:
        return ("i", lo, hi)

    @staticmethod
    def booleans() -> tuple[str]:
        return ("b",)

    @staticmethod
    def composite(f: Callable[..., Any]) -> Callable[..., Any]:
        return f


def _private(name: str, path: Path) -> types.ModuleType:
    """A copy of an oracle module whose ``st`` is :class:`_Strategies` (the Hypothesis import taken out)."""
    text = path.read_text(encoding="utf-8")
    line = "from hypothesis import strategies as st\n"
    if line not in text:
        raise RuntimeError(f"{path}: the grammar no longer imports Hypothesis as this runner expects")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__dict__["st"] = _Strategies
    sys.modules[name] = module
    exec(compile(text.replace(line, "st = st\n"), str(path), "exec"), module.__dict__)
    return module


GRAMMAR = _private("_bulk_grammar", ROOT / "tests" / "oracle" / "grammar.py")
LAUNDER = _private("_bulk_launder", ROOT / "tests" / "oracle" / "launder.py")
_POOL: list[tuple[str, str]] = []


def pool() -> list[tuple[str, str]]:
    """(label, source): the grammar's known templates (real, payloads, tricks) and real2/tricks of the data."""
    if not _POOL:
        from tests.oracle.grammar import known

        seen = set()
        for label, source in known():
            seen.add(source)
            _POOL.append((label, source))
        for folder in ("real", "real2", "tricks"):
            for p in sorted((DATA / folder).glob("*.jinja")):
                text = p.read_bytes().decode("utf-8")
                if text not in seen:
                    seen.add(text)
                    _POOL.append((f"{folder}:{p.stem}", text))
    return _POOL


GRAMMAR.known = pool  # the grammar's mutants draw from the larger pool


class Draws:
    """A seeded stand-in for Hypothesis's ``draw``."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def __call__(self, strategy: tuple[Any, ...]) -> Any:
        kind = strategy[0]
        if kind == "s":
            return self.rnd.choice(strategy[1])
        if kind == "i":
            return self.rnd.randint(strategy[1], strategy[2])
        return self.rnd.random() < 0.5


def draw_template(draw: Draws) -> tuple[str, str]:
    """(origin, source): the oracle's mix (random 50%, mutants 20%, laundered 20%, known as they are 10%)."""
    r = draw.rnd.random()
    if r < 0.5:
        return "random", GRAMMAR.templates(draw)
    if r < 0.7:
        return "mutant", GRAMMAR.mutants(draw)
    if r < 0.9:
        return "laundered", LAUNDER.reaches(draw)
    return "known", draw.rnd.choice(pool())[1]


@dataclasses.dataclass
class Case:
    """One template with the requests and the two configurations it is rendered on."""

    origin: str
    source: str
    contexts: list[int]
    plain: tuple[bool, str, bool]
    boxed: tuple[bool, str, bool]

    @property
    def renders(self) -> list[tuple[tuple[bool, str, bool], int]]:
        return [(config, i) for i in self.contexts for config in (self.plain, self.boxed)]


def draw_case(draw: Draws, contexts: int) -> Case:
    origin, source = draw_template(draw)
    k = draw.rnd.randint(max(1, contexts // 2), contexts)
    picks = draw.rnd.sample(range(len(CONTEXTS)), min(k, len(CONTEXTS)))
    return Case(origin, source, picks, draw.rnd.choice(CONFIGS[:4]), draw.rnd.choice(CONFIGS[4:]))


# ---------------------------------------------------------------------------------------------- the judgement


class _Bound:
    """``Prediction.bound`` (:class:`cost.RenderBound`: polynomials, evaluated by ``work_at``/``output_at``) in
    the shape the oracle's check reads: ``work(n)`` and ``output(n)``, the file's text taken as ``n`` (its
    default: ``cost.request_size`` counts the file's tokens of the request too)."""

    def __init__(self, bound: Any) -> None:
        self.bound = bound

    def work(self, n: float) -> float:
        # observe.py counts ceil(output / 64) steps of output, the model output / 64 (a fraction): as the loop
        # passes and calls are whole, observed <= ceil(predicted) is exactly "within the bound"
        return float(math.ceil(self.bound.work_at(n))) if math.isfinite(self.bound.work_at(n)) else math.inf

    def output(self, n: float) -> float:
        return float(self.bound.output_at(n))


_JUDGED: dict[str, Judgement] = {}
_JUDGED_MAX = 20_000


def judgement(source: str, unsound: bool = False) -> Judgement:
    """``predict(source)`` as the oracle's :class:`Judgement` (flagged: an error finding), cached.

    ``unsound`` (for the self-test): the prediction with no names, so that any name a render looks up fails."""
    j = _JUDGED.get(source)
    if j is None:
        p = predict(source)
        rules = tuple(sorted({f.rule for f in p.findings if f.severity == "error"}))
        if p.bound is not None and not callable(getattr(p.bound, "work", None)):
            p = dataclasses.replace(p, bound=_Bound(p.bound))
        j = Judgement(bool(rules) or bool(p.flagged), rules, p)
        if len(_JUDGED) >= _JUDGED_MAX:
            _JUDGED.clear()
        _JUDGED[source] = j
    if unsound and j.prediction is not None:
        return Judgement(j.flagged, j.rules, dataclasses.replace(j.prediction, names=frozenset(), request_names=False))
    return j


# ---------------------------------------------------------------------------------------------- the children

_MARK = "\nfor line in sys.stdin:"
_CHILD = r"""
sys.path.insert(0, sys.argv[3])
from tests.oracle.requests import CONTEXTS
CONTEXT_TEXT = [json.dumps(c) for c in CONTEXTS]  # each render gets a fresh copy (a template may mutate it)
LIMIT = json.loads(sys.argv[4])
for c in LIMIT["configs"]:
    configured(c)
resource.setrlimit(resource.RLIMIT_AS, (LIMIT["memory"], LIMIT["memory"]))
resource.setrlimit(resource.RLIMIT_CPU, (LIMIT["cpu"], LIMIT["cpu"] + 5))
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
# a name that is not text (a class, a function: ``x[cycler]``) is recorded by observe.py as its repr under its
# type's name, which ``Lookup.is_text`` then takes for text; it is recorded under ``other`` (not text) instead:
# an item lookup with a key that is not a str never falls back to an attribute
_note_lookup = OBSERVE.Observation.note_lookup
def note_lookup(self, name, receiver, how):
    if isinstance(name, OBSERVE._NATIVE):
        return _note_lookup(self, name, receiver, how)
    self._count(self.lookup_counts, OBSERVE.Lookup(repr(name)[:200], "repr:other", receiver, how))
OBSERVE.Observation.note_lookup = note_lookup
guard()
signal.signal(signal.SIGPROF, ring)
write = os.write
OUT = sys.stdout.fileno()

def render_one(templates, config, index, source):
    env = configured(config)
    kind = "ok"
    compiled = None
    try:
        signal.setitimer(signal.ITIMER_PROF, LIMIT["timeout"])
        try:
            context = json.loads(CONTEXT_TEXT[index])
            template = templates.get(tuple(config), False)
            if template is False:
                template = templates[tuple(config)] = OBSERVE.compile_observed(env, source)
                compiled = env.observation.to_json()
                if template is None:
                    kind = "error"
            if template is not None:
                seen = OBSERVE.observe(env, template, context, keep=LIMIT["keep"], max_output=LIMIT["max_output"])
                kind = "ok" if seen.error is None else "error"
        except Alarm:
            kind = "timeout"
        except MemoryError:
            kind = "memory"
        except RecursionError:
            kind = "recursion"
        except BaseException as e:
            env.observation.error = f"{type(e).__name__}: {str(e)[:300]}"
            kind = "error"
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
    except Alarm:  # the alarm rang between the render and its disarming
        kind = "timeout"
    out = {"kind": kind, "observation": env.observation.to_json()}
    if compiled is not None:
        out["compile"] = compiled
    return out

for line in sys.stdin:
    job = json.loads(line)
    templates = {}
    cut = False
    for config, index in job["renders"]:
        try:
            out = render_one(templates, config, index, job["source"])
        except Alarm:
            out = {"kind": "timeout", "observation": None}
        except MemoryError:
            out = {"kind": "memory", "observation": None}
        data = (json.dumps(out) + "\n").encode()
        while data:
            data = data[write(OUT, data):]
        if out["kind"] in ("timeout", "memory", "recursion"):
            cut = True
            break  # one bound exceeded is enough; the rest are not rendered (and this child is replaced)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    data = (json.dumps({"done": True, "cut": cut, "cpu": usage.ru_utime + usage.ru_stime}) + "\n").encode()
    while data:
        data = data[write(OUT, data):]
    if cut:
        break
"""


def _child_source() -> str:
    server = live_templates._SERVER
    if _MARK not in server:
        raise RuntimeError("live_templates._SERVER changed: the child's prelude cannot be taken from it")
    return server.split(_MARK)[0] + "\n" + _CHILD


class Child:
    """One persistent rendering process (see the module): a job is one template on its (configuration, request)
    renders; the answer is one JSON line per render then a ``done`` line."""

    def __init__(self, folder: str, nice: int = 0) -> None:
        self.folder = tempfile.mkdtemp(prefix="child-", dir=folder)
        limits = {
            "configs": [list(c) for c in CONFIGS],
            "memory": MEMORY,
            "cpu": CHILD_CPU,
            "timeout": TIMEOUT,
            "keep": KEEP,
            "max_output": MAX_OUTPUT,
        }
        clean = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": self.folder, "TMPDIR": self.folder}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _child_source(),
                live_templates._JINJA_MODULE,
                live_templates._OBSERVE_MODULE,
                str(ROOT),
                json.dumps(limits),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self.folder,
            env=clean,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,
        )
        self.buffer = b""
        self.job: Any = None
        self.results: list[dict[str, Any]] = []
        self.deadline = 0.0
        self.jobs = 0
        self.cpu = 0.0
        self.dead = False

    def fileno(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def send(self, job: Any, source: str, renders: list[tuple[tuple[bool, str, bool], int]]) -> None:
        assert self.proc.stdin is not None
        self.job, self.results = job, []
        self.deadline = time.monotonic() + 4 * TIMEOUT * (len(renders) + 1) + 5
        line = json.dumps({"source": source, "renders": [[list(c), i] for c, i in renders]}) + "\n"
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.dead = True
        self.jobs += 1

    def pump(self) -> bool:
        """Read what is there; True when the job is finished (or the child is gone)."""
        data = os.read(self.fileno(), 1 << 20)
        if not data:
            self._ended(killed=False)
            return True
        self.buffer += data
        while b"\n" in self.buffer:
            row, self.buffer = self.buffer.split(b"\n", 1)
            item = json.loads(row)
            if item.get("done"):
                self.cpu = item["cpu"]
                if item["cut"]:
                    self.dead = True
                return True
            self.results.append(item)
        return False

    def expire(self) -> None:
        """Past its wall-clock deadline: killed, the render it was on counted as a timeout."""
        self.proc.kill()
        self._ended(killed=True)

    def _ended(self, killed: bool) -> None:
        self.dead = True
        status = self.proc.wait()
        if not (self.results and self.results[-1]["kind"] in LIMITS):
            # the child's CPU limit (SIGXCPU) or a kill is a timeout; any other death a crash (as the oracle says)
            timed = killed or status in (-signal.SIGXCPU, -signal.SIGKILL)
            self.results.append({"kind": "timeout" if timed else "crash", "observation": None, "status": status})

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        shutil.rmtree(self.folder, ignore_errors=True)


class Pool:
    """``n`` persistent children; jobs go to an idle child, answers come back in the order they finish."""

    def __init__(self, n: int, nice: int = 0) -> None:
        self.folder = tempfile.mkdtemp(prefix="gguf-oracle-bulk-")
        self.nice = nice
        self.children = [Child(self.folder, nice) for _ in range(n)]
        self.idle = list(self.children)
        self.replaced = 0

    def _replace(self, child: Child) -> Child:
        child.close()
        fresh = Child(self.folder, self.nice)
        self.children[self.children.index(child)] = fresh
        self.replaced += 1
        return fresh

    def submit(self, job: Any, source: str, renders: list[tuple[tuple[bool, str, bool], int]]) -> None:
        child = self.idle.pop()
        child.send(job, source, renders)

    def wait(self, timeout: float | None = None) -> list[tuple[Any, list[dict[str, Any]], Child]]:
        """Finished jobs: (job, results, child). The caller hands the child back with :meth:`release`."""
        busy = [c for c in self.children if c not in self.idle]
        if not busy:
            return []
        left = min(c.deadline for c in busy) - time.monotonic()
        if timeout is not None:
            left = min(left, timeout)
        ready, _, _ = select.select(busy, [], [], max(0.0, left))
        done = []
        for child in ready:
            if child.pump():
                done.append((child.job, child.results, child))
        now = time.monotonic()
        for child in busy:
            if child not in ready and now > child.deadline:
                child.expire()
                done.append((child.job, child.results, child))
        return done

    def release(self, child: Child, replace: bool = False) -> None:
        if replace or child.dead or child.cpu > RECYCLE_CPU or child.jobs >= RECYCLE_JOBS:
            child = self._replace(child)
        self.idle.append(child)

    def run(self, source: str, renders: list[tuple[tuple[bool, str, bool], int]]) -> list[dict[str, Any]]:
        """One job, waited for (the minimizer's way)."""
        self.submit(None, source, renders)
        while True:
            for _, results, child in self.wait():
                self.release(child)  # replaced when a limit cut the render or it died (minimizing keeps its child)
                return results

    def cpu(self) -> float:
        """CPU seconds of this process and its children so far (the reaped ones, and what the live ones said)."""
        me = resource.getrusage(resource.RUSAGE_SELF)
        gone = resource.getrusage(resource.RUSAGE_CHILDREN)
        live = sum(c.cpu for c in self.children)
        return me.ru_utime + me.ru_stime + gone.ru_utime + gone.ru_stime + live

    def close(self) -> None:
        for c in self.children:
            c.close()
        shutil.rmtree(self.folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- checking


def check_case(case: Case, results: list[dict[str, Any]], judged: Judgement) -> tuple[list[Failure], dict[str, int]]:
    """The oracle's check of each observed render of ``case``; also the renders by how they ended."""
    failures: list[Failure] = []
    kinds: dict[str, int] = {}
    for result, (config, i) in zip(results, case.renders, strict=False):
        kinds[result["kind"]] = kinds.get(result["kind"], 0) + 1
        failures.extend(check_render(result, tuple(config), i, CONTEXTS[i], judged))
    return settle(case.source, failures), kinds


def _short(f: Failure) -> Failure:
    """The failure with its detail cut (a name looked up can be as long as the template makes it)."""
    return f if len(f.detail) <= 1000 else dataclasses.replace(f, detail=f.detail[:1000] + "...")


def run_case(pool: Pool, case: Case, unsound: bool = False) -> list[Failure]:
    """One case judged, rendered (when not flagged) and checked, waited for: its failures (notes included)."""
    judged = judgement(case.source, unsound)
    if judged.flagged:
        return []
    failures, _ = check_case(case, pool.run(case.source, case.renders), judged)
    return failures


_TOKENS = re.compile(r"\{\{-?|-?\}\}|\{%-?|-?%\}|\w+|\s+|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|.", re.S)


def shrink(
    pool: Pool, source: str, cls: str, config: tuple[bool, str, bool], index: int, seconds: float, unsound: bool
) -> tuple[str, Failure | None]:
    """A smaller template that still fails with ``cls`` on the same request and configuration (delta debugging
    over the template's tokens: chunks removed, halving the chunk size, while the failure stays), with the failure
    it shows."""
    stop = time.monotonic() + seconds
    last: list[Failure] = []

    def fails(text: str) -> bool:
        try:
            j = judgement(text, unsound)
        except Exception:
            return False
        if j.flagged:
            return False
        results = pool.run(text, [(config, index)])
        failures, _ = check_case(Case("shrink", text, [index], config, config), results, j)
        hit = [f for f in failures if f.cls == cls]
        if hit:
            last[:] = hit[:1]
        return bool(hit)

    tokens = _TOKENS.findall(source)
    if not fails(source):
        return source, None
    n = 2
    while len(tokens) >= 2 and time.monotonic() < stop:
        size = max(1, len(tokens) // n)
        removed = False
        start = 0
        while start < len(tokens) and time.monotonic() < stop:
            candidate = tokens[:start] + tokens[start + size :]
            if candidate and fails("".join(candidate)):
                tokens = candidate
                removed = True
            else:
                start += size
        if not removed:
            if size == 1:
                break
            n = min(len(tokens), n * 2)
    return "".join(tokens), (last[0] if last else None)


# ---------------------------------------------------------------------------------------------- the run


@dataclasses.dataclass
class Tally:
    """Counts of a chunk (or a whole run)."""

    templates: int = 0
    flagged: int = 0
    pairs: int = 0
    pairs_rendered: int = 0
    renders: int = 0
    predict_seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds of the whole harness (parent and children), for a whole run
    kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    origins: dict[str, int] = dataclasses.field(default_factory=dict)
    failures: dict[str, int] = dataclasses.field(default_factory=dict)  # templates with a failure, by class
    examples: dict[str, str] = dataclasses.field(default_factory=dict)
    minimized: dict[str, str] = dataclasses.field(default_factory=dict)


def run_chunk(
    pool: Pool,
    seed: int,
    templates: int,
    contexts: int,
    *,
    unsound: bool = False,
    minimize: set[str] | None = None,
    shrink_seconds: float = 60.0,
    on_new: Callable[[str, str], None] | None = None,
) -> Tally:
    """``templates`` cases drawn under ``seed``, judged, the unflagged ones rendered in ``pool`` and checked.

    ``minimize``: the classes already minimized (a new failing class is minimized and added)."""
    draw = Draws(seed)
    tally = Tally()
    shrinker: list[Pool] = []  # a child of its own for minimizing, made when first needed
    cases = (draw_case(draw, contexts) for _ in range(templates))

    def finish(job: tuple[Case, Judgement], results: list[dict[str, Any]], child: Child) -> None:
        case, judged = job
        failures, kinds = check_case(case, results, judged)
        for k, v in kinds.items():
            tally.kinds[k] = tally.kinds.get(k, 0) + v
        tally.renders += len(results)
        real = [f for f in failures if is_failure(f.cls)]
        pool.release(child, replace=bool(real))
        for cls in sorted({f.cls for f in failures}):
            tally.failures[cls] = tally.failures.get(cls, 0) + 1
            if cls in tally.examples:
                continue
            first = next(f for f in failures if f.cls == cls)
            outcome = types.SimpleNamespace(source=case.source)
            tally.examples[cls] = f"origin {case.origin}\n" + describe(outcome, _short(first))  # type: ignore[arg-type]
            if minimize is not None and cls not in minimize and is_failure(cls):
                minimize.add(cls)
                if not shrinker:
                    shrinker.append(Pool(1, pool.nice))
                small, shown = shrink(
                    shrinker[0], case.source, cls, first.config, first.context, shrink_seconds, unsound
                )
                outcome.source = small
                tally.minimized[cls] = describe(outcome, _short(shown or first))  # type: ignore[arg-type]
                if on_new is not None:
                    on_new(
                        cls,
                        tally.minimized[cls] + f"\n  (origin {case.origin}; unminimized {len(case.source):,} "
                        f"characters, minimized {len(small):,})",
                    )

    for case in cases:
        tally.templates += 1
        tally.origins[case.origin] = tally.origins.get(case.origin, 0) + 1
        tally.pairs += len(case.contexts)
        t0 = time.perf_counter()
        try:
            judged = judgement(case.source, unsound)
        except Exception as e:  # predict() itself failing is a finding of its own
            tally.failures["oracle:predict-error"] = tally.failures.get("oracle:predict-error", 0) + 1
            tally.examples.setdefault("oracle:predict-error", f"{type(e).__name__}: {e}\n{case.source[:2000]!r}")
            continue
        finally:
            tally.predict_seconds += time.perf_counter() - t0
        if judged.flagged:
            tally.flagged += 1
            continue
        tally.pairs_rendered += len(case.contexts)
        while not pool.idle:
            for job, results, child in pool.wait():
                finish(job, results, child)
        pool.submit((case, judged), case.source, case.renders)
    while len(pool.idle) < len(pool.children):
        for job, results, child in pool.wait():
            finish(job, results, child)
    for p in shrinker:
        p.close()
    return tally


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


def merge(rows: list[dict[str, Any]]) -> tuple[Tally, float]:
    total = Tally()
    seconds = 0.0
    cpu = 0.0
    for r in rows:
        t = r["tally"]
        for k in ("templates", "flagged", "pairs", "pairs_rendered", "renders"):
            setattr(total, k, getattr(total, k) + t[k])
        total.predict_seconds += t["predict_seconds"]
        for name in ("kinds", "origins", "failures"):
            table = getattr(total, name)
            for k, v in t[name].items():
                table[k] = table.get(k, 0) + v
        for k, v in t["examples"].items():
            total.examples.setdefault(k, v)
        for k, v in t["minimized"].items():
            if k not in total.minimized or len(v) < len(total.minimized[k]):
                total.minimized[k] = v
        seconds += r["seconds"]
        cpu += r.get("cpu", 0.0)
    total.cpu = cpu
    return total, seconds


def report(rows: list[dict[str, Any]], args: argparse.Namespace, complete: bool) -> str:
    import jinja2

    total, seconds = merge(rows)
    loads = [r["load"] for r in rows if "load" in r]
    failing = sum(v for k, v in total.failures.items() if is_failure(k))
    first = min((r["started"] for r in rows), default=time.time())
    last = max((r["ended"] for r in rows), default=time.time())
    lines = [
        "# Template containment oracle, bulk harness",
        "",
        f"Run: `nice python benchmarks/template_oracle_bulk.py --pairs {args.pairs:,} --workers {args.workers} "
        f"--chunk {args.chunk} --contexts {args.contexts}`, chunks from "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(first))} to {time.strftime('%H:%M UTC', time.gmtime(last))}, "
        f"Python {platform.python_version()}, Jinja2 {jinja2.__version__}, level: predict() (names and bound).",
        f"Machine: {os.cpu_count()} cores shared with other workers; load average (1 min) per chunk: "
        + (
            f"min {min(x[0] for x in loads):.2f}, mean {sum(x[0] for x in loads) / len(loads):.2f}, "
            f"max {max(x[0] for x in loads):.2f}"
            if loads
            else "n/a"
        )
        + ".",
        "",
        f"**{'Complete' if complete else 'Not complete'}**: {total.pairs:,} of the {args.pairs:,} pairs aimed at"
        + ("." if complete else " (the run was stopped at the deadline; the state file resumes it)."),
        "",
        "| figure | value |",
        "|---|---|",
        f"| chunks (seeds) | {len(rows):,} |",
        f"| templates | {total.templates:,} |",
        f"| of which flagged by predict() (not rendered) | {total.flagged:,} |",
        f"| template x request pairs | {total.pairs:,} |",
        f"| of which rendered (unflagged templates) | {total.pairs_rendered:,} |",
        f"| observed renders (each pair unsandboxed and sandboxed) | {total.renders:,} |",
        f"| seconds of running (sum over chunks, minimizing included) | {seconds:,.0f} |",
        f"| pairs/s (all pairs) | {total.pairs / max(seconds, 1e-9):,.0f} |",
        f"| rendered pairs/s | {total.pairs_rendered / max(seconds, 1e-9):,.0f} |",
        f"| predict() time in the parent (wall) | {total.predict_seconds:,.0f} s |",
        f"| CPU of the harness (parent and children) | {total.cpu:,.0f} s |",
        f"| pairs per CPU-second (independent of the machine's load) | {total.pairs / max(total.cpu, 1e-9):,.0f} |",
        f"| containment failures | {failing:,} (templates with a failure; by class below) |",
        "",
        "Templates by origin: " + ", ".join(f"{k} {v:,}" for k, v in sorted(total.origins.items())) + ". "
        "Renders by how they ended: " + ", ".join(f"{k} {v:,}" for k, v in sorted(total.kinds.items())) + ". "
        f"Each render: {TIMEOUT:g} s of CPU (ITIMER_PROF), {MEMORY >> 20} MiB of address space for the child, "
        f"{MAX_OUTPUT >> 20} MiB of output, in one of {args.workers} persistent children; `error` is the template "
        "raising (most random templates do, part way).",
        "",
        "A flagged template's pairs count as answered, as in `template_oracle.py` (the audit refuses it: nothing of it "
        "is rendered); the rendered pairs are the ones the check held to the prediction. Two adaptations of the "
        "harness (docs/template_oracle_bulk.md): the observed work is held to the ceiling of `RenderBound.work_at(n)` "
        "(observations count whole steps of output), and a lookup whose key is not text (a class, a function) is "
        "not a name. New classes, with their reading, are in the run's findings notes; `oracle:predict-error` is "
        "`predict()` itself raising.",
        "",
        "## Failures by class",
        "",
    ]
    if not total.failures:
        lines.append("None.")
    for cls in sorted(total.failures, key=lambda c: (not is_failure(c), c)):
        what = "" if is_failure(cls) else " (a note, not a containment failure)"
        lines += [f"### {cls}: {total.failures[cls]:,} templates{what}", ""]
        if cls in total.minimized:
            lines += ["Minimized:", "", "```", total.minimized[cls], "```", ""]
        lines += ["First seen:", "", "```", total.examples.get(cls, ""), "```", ""]
    return "\n".join(lines) + "\n"


def note_finding(cls: str, text: str) -> None:
    """A new failure class, appended to the findings notes for the lead (when that folder exists)."""
    if not FINDINGS.parent.is_dir():
        return
    stamp = time.strftime("%H:%M UTC", time.gmtime())
    with open(FINDINGS, "a", encoding="utf-8") as f:
        f.write(f"\n## {cls} (bulk oracle, {stamp})\n\n```\n{text}\n```\n")


def seeds(done: set[int], first: int = 1) -> Iterator[int]:
    s = first
    while True:
        if s not in done:
            yield s
        s += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000, help="pairs to reach (with what the state holds)")
    parser.add_argument("--workers", type=int, default=2, help="persistent rendering children")
    parser.add_argument("--chunk", type=int, default=200, help="templates per chunk (one seed, one state line)")
    parser.add_argument("--contexts", type=int, default=12, help="requests per template (at most)")
    parser.add_argument(
        "--first-seed", type=int, default=1, help="the first chunk's seed (a new run on new templates: a new range)"
    )
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=0.0, help="stop starting chunks after this long (0: never)")
    parser.add_argument("--shrink-seconds", type=float, default=60.0)
    parser.add_argument("--state", type=Path, default=RESULTS / "template_oracle_bulk.state.jsonl")
    parser.add_argument("--out", type=Path, default=RESULTS / "template_oracle_bulk.md")
    parser.add_argument("--report-only", action="store_true", help="write the report of the state file and stop")
    args = parser.parse_args()
    if args.report_only:
        rows = read_state(args.state)
        done = sum(r["tally"]["pairs"] for r in rows) >= args.pairs
        args.out.write_text(report(rows, args, done), encoding="utf-8")
        return
    os.nice(args.nice)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # predict() runs here: an analysis that allocates without end is a MemoryError (an oracle:predict-error with its
    # template), not the machine's memory (a first run's parent was killed by the kernel at 19 GB)
    resource.setrlimit(resource.RLIMIT_AS, (PARENT_MEMORY, PARENT_MEMORY))
    rows = read_state(args.state)
    minimized = {k for r in rows for k in r["tally"]["minimized"]}
    have = sum(r["tally"]["pairs"] for r in rows)
    started = time.monotonic()
    pool = Pool(args.workers)
    try:
        for seed in seeds({r["seed"] for r in rows}, args.first_seed):
            if have >= args.pairs or (args.seconds and time.monotonic() - started > args.seconds):
                break
            t0, wall0, cpu0 = time.perf_counter(), time.time(), pool.cpu()
            tally = run_chunk(
                pool,
                seed,
                args.chunk,
                args.contexts,
                minimize=minimized,
                shrink_seconds=args.shrink_seconds,
                on_new=note_finding,
            )
            row = {
                "seed": seed,
                "tally": dataclasses.asdict(tally),
                "seconds": time.perf_counter() - t0,
                "cpu": pool.cpu() - cpu0,
                "started": wall0,
                "ended": time.time(),
                "load": os.getloadavg(),
                "replaced": pool.replaced,
            }
            with open(args.state, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            rows.append(row)
            have += tally.pairs
            args.out.write_text(report(rows, args, have >= args.pairs), encoding="utf-8")
    finally:
        pool.close()
    text = report(rows, args, have >= args.pairs)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
