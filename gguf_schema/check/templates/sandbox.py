"""The sandboxed render: sample conversations rendered in Jinja's immutable sandbox, in a child process with bounds.

:func:`render_many` starts one :mod:`.worker` for all the templates of a file (``python -I`` with an
empty environment, in a temporary working folder that is removed afterwards; loaded by path: no
gguf-schema import in the child), hands it the templates, the Jinja configurations of the loaders
(:data:`CONFIGURATIONS`) and :data:`CONVERSATIONS` (one message and many, no system message, tools
present and absent, the generation prompt on and off, thinking on and off, a long message), and reads
one line per render. The child limits its own address space, CPU time, file writes and processes
before it compiles anything. Each template has ``timeout`` seconds for all its renders; a template
that goes past a bound is not rendered further, and a child that dies is replaced for the templates
after the one it was rendering. The time bound is of CPU time (a timer of the child's own time), so a loaded
machine does not make a template look slow.

A refusal of the sandbox is ``GGUF-T501``; a render past the time, memory or output bound, or stopped
by one of the sandbox's own limits (its ``range`` refuses more than 100,000 items), is ``GGUF-T502``:
a template that can hang or exhaust a server on an ordinary request. Jinja2 older than 3.1.6 is
refused (``GGUF-T503``): its sandbox has known escapes (CVE-2024-56201, CVE-2024-56326, CVE-2025-27516).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from .hidden import excerpt, split_lines
from .jinja import require_jinja
from .rules import Findings, TemplateFinding, rule

__all__ = [
    "CONFIGURATIONS",
    "CONVERSATIONS",
    "MAX_WORK",
    "MIN_JINJA",
    "T501",
    "T502",
    "T503",
    "T505",
    "Observed",
    "render",
    "render_many",
]

T501 = rule(
    "GGUF-T501",
    "error",
    "sandbox-violation",
    "Rendering sample conversations in Jinja's sandbox (under each loader's configuration) raised a SecurityError: "
    "the template tried to reach an unsafe attribute, call or format string, or to change the request's data.",
)
T502 = rule(
    "GGUF-T502",
    "error",
    "render-bound",
    "Rendering a sample conversation in the sandbox exceeded the CPU time, memory, output or work bound, recursed "
    "past Python's limit, or was stopped by one of the sandbox's own limits (its range() refuses more than 100,000 "
    "items): the template can hang or exhaust a server on an ordinary request.",
)
T505 = rule(
    "GGUF-T505",
    "error",
    "render-contradicts-analysis",
    "The sandboxed render did what the static analysis said no render can do: it looked up a name outside the names "
    "the analysis proved (and not text of the request), or did more work than the analysis's bound at the "
    "conversation's size. The analysis is wrong about this template: treat it as hostile (and report it: every such "
    "case is a defect of the audit).",
)
T503 = rule(
    "GGUF-T503",
    "warning",
    "render-unavailable",
    "The sandboxed render could not run (Jinja2 older than 3.1.6, whose sandbox has known escapes: CVE-2024-56201, "
    "CVE-2024-56326, CVE-2025-27516; or no child process could be started): only the static analysis ran.",
)

_SYSTEM = {"role": "system", "content": "You are a careful assistant."}
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    }
]


def _turns(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"Question {i // 2 + 1}: name a prime."}
        if i % 2 == 0
        else {"role": "assistant", "content": f"{[2, 3, 5, 7, 11][i // 2 % 5]}"}
        for i in range(n)
    ]


#: Sample conversations rendered when ``render=True``: (label, context).
CONVERSATIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("one message", {"add_generation_prompt": True, "messages": [{"role": "user", "content": "Hello! 你好"}]}),
    (
        "chat",
        {
            "add_generation_prompt": True,
            "messages": [
                _SYSTEM,
                {"role": "user", "content": "Hello! Wie geht's? 你好"},
                {"role": "assistant", "content": "Hi, how can I help?"},
                {"role": "user", "content": "Name three primes."},
            ],
        },
    ),
    ("no prompt", {"add_generation_prompt": False, "messages": _turns(4)}),
    (
        "tools",
        {
            "add_generation_prompt": True,
            "tools": _TOOLS,
            "messages": [
                {"role": "system", "content": "Use tools when useful."},
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temp": 21}'},
            ],
        },
    ),
    ("tools, one message", {"add_generation_prompt": True, "tools": _TOOLS, "messages": _turns(1)}),
    (
        "thinking",
        {
            "add_generation_prompt": True,
            "enable_thinking": True,
            "messages": [
                {"role": "user", "content": "Is 91 prime?"},
                {
                    "role": "assistant",
                    "reasoning_content": "91 = 7 * 13.",
                    "content": "<think>91 = 7 * 13.</think>No, 91 = 7 * 13.",
                },
                {"role": "user", "content": "And 97?"},
            ],
        },
    ),
    ("32 messages", {"add_generation_prompt": True, "messages": [_SYSTEM, *_turns(31)]}),
    (
        "no thinking, long content",
        {
            "add_generation_prompt": False,
            "enable_thinking": False,
            "messages": [_SYSTEM, {"role": "user", "content": "Summarise: " + "lorem ipsum dolor sit amet " * 160}],
        },
    ),
)
COMMON_CONTEXT = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "01 Jan 2025"}
#: The Jinja configurations of the loaders, each rendered (all in Jinja's immutable sandbox): transformers' and
#: llama-cpp-python's (trim_blocks, lstrip_blocks, a ``tojson`` that keeps key order and does not escape HTML),
#: plain jinja2's defaults (``tojson`` sorts keys and escapes ``<>&'``, no block trimming), and the same with
#: autoescape on (Markup escaping changes the text, and so the names built from it).
CONFIGURATIONS = ("transformers", "jinja2", "jinja2-autoescape")
#: The oldest Jinja2 whose sandbox has the fixes of its known escapes (CVE-2024-56201, CVE-2024-56326: 3.1.5;
#: CVE-2025-27516, the |attr filter: 3.1.6).
MIN_JINJA = (3, 1, 6)
#: Steps of work (:mod:`.observe`: loop passes, calls, 64 characters of output) one render of a sample
#: conversation may do: the conversations are a few kilobytes, and the 186 real and benign templates of the
#: test data do at most 8,794 steps on them (28 times less).
MAX_WORK = 250_000
#: Distinct names looked up that the child reports per template.
MAX_NAMES = 2000


@dataclass(frozen=True)
class Observed:
    """What the renders of one template did: the text names looked up (at most :data:`MAX_NAMES`), the most work
    one render did, and which render that was."""

    names: tuple[str, ...]
    work: int
    where: str


_BOOT = (
    "import importlib.util, sys\n"
    "sys.dont_write_bytecode = True\n"
    "spec = importlib.util.spec_from_file_location('_gguf_template_worker', sys.argv[1])\n"
    "mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "mod.main()\n"
)
_HERE = os.path.dirname(os.path.abspath(__file__))


#: The least CPU (seconds) a render child is started with: its own start (Python, Jinja) takes about 0.07 s.
MIN_BUDGET = 0.1


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's children that have ended."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX: no children's times; each child's own timer still holds
        return 0.0
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _T402() -> Any:
    """The package's GGUF-T402 (not decided within the audit's budget), declared where the budget is."""
    from . import T402

    return T402


def jinja_version_refused(version: str) -> bool:
    """Whether a Jinja2 version predates the fixes of its sandbox's known escapes (:data:`MIN_JINJA`).

    >>> jinja_version_refused("3.1.5"), jinja_version_refused("3.1.6"), jinja_version_refused("3.2.0.dev1")
    (True, False, False)
    """
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    return parts < MIN_JINJA


def render(
    source: str, lines: list[str], name: str, timeout: float, max_output: int, memory: int
) -> list[TemplateFinding]:
    """Render :data:`CONVERSATIONS` in the sandbox of a child process; the findings of that."""
    return render_many([source], timeout, max_output, memory, names={source: name}).get(source, [])


def render_many(
    sources: list[str],
    timeout: float = 5.0,
    max_output: int = 1 << 20,
    memory: int = 1 << 30,
    *,
    names: dict[str, str] | None = None,
    observed: dict[str, Observed] | None = None,
    budget: float | None = None,
) -> dict[str, list[TemplateFinding]]:
    """The sandboxed render of several templates (those of one file) in one child process (another one only
    after a child dies): the findings of each by source (``GGUF-T501``, ``T502``, ``T503``; a source without
    findings may be absent).

    Every template is rendered under each loader's Jinja configuration (:data:`CONFIGURATIONS`) on
    :data:`CONVERSATIONS`, within ``timeout`` seconds of CPU of its own, ``memory`` bytes of address space for the
    child and ``max_output`` characters of output per render. The renders are observed (:mod:`.observe`): a
    render past :data:`MAX_WORK` steps of work is ``GGUF-T502``, and ``observed``, when given, is filled with the
    names each template looked up and the most work one render did (:class:`Observed`). ``names``: the key
    each source came from, copied into its findings. ``budget``: CPU seconds for the whole child (its start
    included); a template it cuts short or never reaches is ``GGUF-T402`` (not decided within the audit's budget).

    Raises:
        ImportError: Jinja2 is not installed.
    """
    jinja2 = require_jinja()
    sources = list(dict.fromkeys(sources))
    names = names or {}
    found = {src: Findings(split_lines(src), names.get(src, ""), excerpt) for src in sources}
    if jinja_version_refused(jinja2.__version__):
        for f in found.values():
            f.add(
                T503,
                f"sandboxed render skipped: Jinja2 {jinja2.__version__} is older than 3.1.6, whose sandbox has known "
                "escapes (CVE-2024-56201, CVE-2024-56326, CVE-2025-27516)",
            )
        return {src: f.result(1 << 30) for src, f in found.items()}
    observed = {} if observed is None else observed
    todo = list(range(len(sources)))
    spent = _children_cpu()
    while todo:
        left = None if budget is None else budget - (_children_cpu() - spent)
        if left is not None and left < MIN_BUDGET:  # a child that died used the budget: the rest is not rendered
            for i in todo:
                found[sources[i]].add(
                    _T402(), f"sandboxed render not started: the {budget:.2f} s of CPU for the renders were used"
                )
            break
        todo = _run_child([sources[i] for i in todo], todo, sources, found, timeout, max_output, memory, observed, left)
    for src, seen in observed.items():
        for why in contradictions(src, seen):
            found[src].add(T505, f"sandboxed render {why}")
    return {src: f.result(1 << 30) for src, f in found.items()}


def _conversation_texts() -> list[str]:
    """Every text of the sample conversations (what a request name may be, and its pieces)."""
    out: list[str] = []
    todo: list[Any] = [COMMON_CONTEXT, *(ctx for _, ctx in CONVERSATIONS)]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
        elif isinstance(v, str):
            out.append(v.casefold())
    return out


def contradictions(source: str, seen: Observed) -> list[str]:
    """What the renders of ``source`` did that its static analysis (when it ran to the end: cached) said no render
    does: names looked up outside ``predict(source).names`` that are not text of the conversations, and work past
    the bound at the largest conversation. Empty when they agree (always, if the analysis is sound)."""
    from . import cost, is_cached, predict

    if not is_cached(source):
        return []
    p = predict(source)
    if p.flagged:
        return []  # refused already: what its render did adds nothing
    texts = _conversation_texts() if p.request_names else []
    out = []
    odd = [
        n
        for n in seen.names
        if n not in p.names and not any(n.casefold() in t or n.casefold()[::-1] in t for t in texts)
    ]
    if odd:
        out.append(f"looked up {', '.join(repr(n[:40]) for n in odd[:3])}, which the analysis did not predict")
    if isinstance(p.bound, cost.RenderBound) and p.bound.bounded:
        n = max(cost.request_size({**COMMON_CONTEXT, **ctx}) for _, ctx in CONVERSATIONS)
        limit = math.ceil(p.bound.work_at(n))  # observations count whole steps
        if seen.work > limit:
            out.append(
                f"({seen.where}) did {seen.work:,} steps of work, more than the analysis's bound of {limit:,.0f} at "
                f"N={n:,.0f}"
            )
    return out


def _run_child(
    batch: list[str],
    index: list[int],
    sources: list[str],
    found: dict[str, Findings],
    timeout: float,
    max_output: int,
    memory: int,
    observed: dict[str, Observed] | None,
    budget: float | None = None,
) -> list[int]:
    """One child for ``batch``; the indices (into ``sources``) still to render when it died early."""
    job = json.dumps(
        {
            "templates": batch,
            "configurations": list(CONFIGURATIONS),
            "conversations": [[label, {**COMMON_CONTEXT, **ctx}] for label, ctx in CONVERSATIONS],
            "timeout": timeout,
            "max_output": max_output,
            "memory": memory,
            "budget": budget,
            "max_work": MAX_WORK,
            "max_names": MAX_NAMES,
            "path": [p for p in sys.path if p],
            "jinja": os.path.join(_HERE, "jinja.py"),
            "observe": os.path.join(_HERE, "observe.py"),
        }
    )
    folder = tempfile.mkdtemp(prefix="gguf-render-")
    try:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOT, os.path.join(_HERE, "worker.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                encoding="utf-8",
                env={},  # nothing inherited: no secrets in os.environ for a template to find
                cwd=folder,
                close_fds=True,
            )
        except OSError as e:
            for i in index:
                found[sources[i]].add(T503, f"sandboxed render could not start a process: {e}")
            return []
        timed_out = False
        # the child's own timers count its CPU time (it cannot block: no files, no processes); this only ends a
        # child the machine gives no CPU (a loaded machine gives it a fraction of a core, and stalls on memory)
        wall = len(batch) * 10 * timeout + 60.0
        try:
            out, _ = proc.communicate(job, timeout=wall)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            timed_out = True
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    finished: set[int] = set()
    current: int | None = None
    for row in out.splitlines():
        try:
            event = json.loads(row)
        except ValueError:
            continue
        if not isinstance(event, dict) or not isinstance(event.get("template"), int):
            continue
        t = event["template"]
        if not 0 <= t < len(batch):
            continue
        kind, label = event.get("kind"), event.get("conversation", "")
        configuration = event.get("configuration", CONFIGURATIONS[0])
        where = f"{label} conversation" + ("" if configuration == CONFIGURATIONS[0] else f", {configuration}")
        findings = found[batch[t]]
        if kind == "start":
            current = t
        elif kind == "end":
            finished.add(t)
        elif kind == "observed" and observed is not None:
            names = event.get("names")
            observed[batch[t]] = Observed(
                tuple(str(n) for n in names) if isinstance(names, list) else (),
                int(event.get("work", 0)),
                str(event.get("where", "")),
            )
        elif kind == "security":
            findings.add(T501, f"sandboxed render refused: {event.get('message', '')}", event.get("line"))
        elif kind == "bound":
            findings.add(T502, f"sandboxed render ({where}) {event.get('message', '')}", event.get("line"))
        elif kind == "budget":
            findings.add(_T402(), f"sandboxed render {event.get('message', '')}")
    if current is None or current in finished:
        if len(finished) == len(batch):
            return []
        current = next(i for i in range(len(batch)) if i not in finished)
    why = f"did not finish within {wall:g} s" if timed_out else f"stopped (exit status {proc.returncode})"
    found[batch[current]].add(T502, f"sandboxed render {why}; the memory bound is {memory >> 20} MiB")
    return [index[i] for i in range(current + 1, len(batch)) if i not in finished]
