"""The sandboxed render: sample conversations rendered in Jinja's immutable sandbox, in a child process with bounds.

:func:`render` starts :mod:`.worker` (``python -I``, loaded by path: no gguf-schema import in the
child), hands it the template and :data:`CONVERSATIONS` (one message and many, tools present and
absent, the generation prompt on and off, a thinking turn) and reads one line per conversation.
A refusal of the sandbox is ``GGUF-T501``; a render past the time, memory or output bound, or
stopped by one of the sandbox's own limits (its ``range`` refuses more than 100,000 items), is
``GGUF-T502``: a template that can hang or exhaust a server on an ordinary request.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

from .hidden import excerpt
from .jinja import require_jinja
from .rules import Findings, TemplateFinding, rule

__all__ = ["CONVERSATIONS", "T501", "T502", "T503", "render"]

T501 = rule(
    "GGUF-T501",
    "error",
    "sandbox-violation",
    "Rendering sample conversations in Jinja's immutable sandbox raised a SecurityError: the template tried to "
    "reach an unsafe attribute, call, format string or mutation.",
)
T502 = rule(
    "GGUF-T502",
    "error",
    "render-bound",
    "Rendering a sample conversation in the sandbox exceeded the time, memory or output bound, recursed past "
    "Python's limit, or was stopped by one of the sandbox's own limits (its range() refuses more than 100,000 "
    "items): the template can hang or exhaust a server on an ordinary request.",
)
T503 = rule(
    "GGUF-T503",
    "warning",
    "render-unavailable",
    "The sandboxed render was asked for but could not run (for example Jinja2 older than 3.1.6, whose sandbox has "
    "known escapes).",
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
)
COMMON_CONTEXT = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "01 Jan 2025"}

_BOOT = (
    "import importlib.util, sys\n"
    "sys.dont_write_bytecode = True\n"
    "spec = importlib.util.spec_from_file_location('_gguf_template_worker', sys.argv[1])\n"
    "mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "mod.main()\n"
)
_HERE = os.path.dirname(os.path.abspath(__file__))


def render(
    source: str, lines: list[str], name: str, timeout: float, max_output: int, memory: int
) -> list[TemplateFinding]:
    """Render :data:`CONVERSATIONS` in the sandbox of a child process; the findings of that."""
    jinja2 = require_jinja()
    findings = Findings(lines, name, excerpt)
    version = tuple(int(p) for p in re.findall(r"\d+", jinja2.__version__)[:3])
    if version < (3, 1, 6):
        findings.add(
            T503,
            f"sandboxed render skipped: Jinja2 {jinja2.__version__} is older than 3.1.6, "
            "whose sandbox has known escapes (CVE-2024-56326, CVE-2025-27516)",
        )
        return findings.result(1 << 30)
    job = json.dumps(
        {
            "source": source,
            "conversations": [[label, {**COMMON_CONTEXT, **ctx}] for label, ctx in CONVERSATIONS],
            "timeout": timeout,
            "max_output": max_output,
            "memory": memory,
            "path": sys.path,
            "jinja": os.path.join(_HERE, "jinja.py"),
        }
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _BOOT, os.path.join(_HERE, "worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )
    except OSError as e:
        findings.add(T503, f"sandboxed render could not start a process: {e}")
        return findings.result(1 << 30)
    timed_out = False
    try:
        out, _ = proc.communicate(job, timeout=timeout + 3.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        timed_out = True
    bounded = False
    done: set[str] = set()
    for row in out.splitlines():
        try:
            event = json.loads(row)
        except ValueError:
            continue
        kind, label = event.get("kind"), event.get("conversation", "")
        done.add(label)
        if kind == "security":
            findings.add(T501, f"sandboxed render refused: {event['message']}", event.get("line"))
        elif kind == "bound":
            bounded = True
            findings.add(T502, f"sandboxed render ({label} conversation) {event['message']}", event.get("line"))
    if not bounded and (timed_out or (proc.returncode not in (0, None) and len(done) < len(CONVERSATIONS))):
        why = f"did not finish within {timeout:g} s" if timed_out else f"stopped (exit status {proc.returncode})"
        findings.add(T502, f"sandboxed render {why}; the memory bound is {memory >> 20} MiB")
    return findings.result(1 << 30)
