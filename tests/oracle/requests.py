"""Request contexts for the oracle: what loaders pass a chat template, from nothing to many long messages.

:data:`CONTEXTS` is a fixed list, simplest first (Hypothesis shrinks an index towards 0, so a
minimized counter-example uses the simplest request that still shows it). It is made once from a
fixed seed: messages of every role (system, user, assistant with and without ``tool_calls``,
``tool``, ``ipython``, an unknown role), tools present and absent, documents, ``add_generation_prompt``
both ways, ``enable_thinking``, 0 to 200 messages, contents up to 20,000 characters, content given as
a list of parts, and odd strings (underscore and dunder-like words, format strings, markup, numbers as
text, non-ASCII) in every place a request has text. The special tokens (``bos_token``,
``eos_token``...) are the file's: their text is chosen among ordinary tokens and odd strings too.
"""

from __future__ import annotations

import json
import random
from typing import Any

ODD = (
    "",
    "_",
    "__",
    "a_b",
    "_x",
    "x_",
    "__class__",
    "__init__",
    "__globals__",
    "__builtins__",
    "mro",
    "popen",
    "os",
    "environ",
    "gi_frame",
    "items",
    "keys",
    "get",
    "append",
    "format",
    "role",
    "content",
    "{0.__class__}",
    "{x}",
    "%s",
    "%(role)s",
    "%999s",
    "{{ x }}",
    "{% if %}",
    "<|im_end|>",
    "<script>&'\"</script>",
    "0",
    "-1",
    "1e9",
    "9" * 30,
    "True",
    "None",
    "null",
    "é",
    "你好",
    "\u200b",
    "\n\t",
    "\\x5f\\x5f",
)
ORDINARY = ("Hello", "What is 2+2?", "Paris", "Name three primes.", "ok", "Let me think.", "Sure!")
TOKENS = ("<s>", "</s>", "<|endoftext|>", "<|im_end|>", "<unk>", "<pad>", "[INST]", "<bos>", "<eos>", "")
ROLES = ("system", "user", "assistant", "tool", "ipython", "developer", "function", "observer")


def _text(rnd: random.Random, odd: float, long: float = 0.0) -> str:
    if rnd.random() < long:
        return rnd.choice(ORDINARY) * rnd.choice((100, 1000, 3000))
    return rnd.choice(ODD) if rnd.random() < odd else rnd.choice(ORDINARY)


def _tool(rnd: random.Random, odd: float) -> dict[str, Any]:
    name = _text(rnd, odd) or "get_weather"
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": _text(rnd, odd),
            "parameters": {
                "type": "object",
                "properties": {
                    _text(rnd, odd) or "city": {"type": "string", "description": _text(rnd, odd)},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                    "nested": {"type": "object", "properties": {"depth": {"type": "integer"}}},
                },
                "required": ["city"],
            },
        },
    }


def _message(rnd: random.Random, i: int, odd: float, long: float) -> dict[str, Any]:
    role = rnd.choice(ROLES) if rnd.random() < 0.3 else ("user" if i % 2 == 0 else "assistant")
    if rnd.random() < odd / 3:
        role = rnd.choice(ODD)
    m: dict[str, Any] = {"role": role, "content": _text(rnd, odd, long)}
    if role == "assistant" and rnd.random() < 0.3:
        m["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": _text(rnd, odd) or "f", "arguments": {_text(rnd, odd) or "k": _text(rnd, odd)}},
            }
            for _ in range(rnd.randint(1, 3))
        ]
        if rnd.random() < 0.5:
            m["content"] = None if rnd.random() < 0.5 else ""
    if role == "assistant" and rnd.random() < 0.2:
        m["reasoning_content"] = _text(rnd, odd, long)
    if role == "tool":
        m["tool_call_id"] = f"call_{i}"
        m["name"] = _text(rnd, odd) or "f"
    if rnd.random() < 0.1:
        m["content"] = [{"type": "text", "text": _text(rnd, odd)}, {"type": "image"}]
    if rnd.random() < odd / 4:
        m[_text(rnd, 1.0) or "_"] = _text(rnd, odd)
    return m


def _context(rnd: random.Random, size: int, odd: float, long: float) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "messages": [_message(rnd, i, odd, long) for i in range(size)],
        "add_generation_prompt": rnd.random() < 0.6,
    }
    if rnd.random() < 0.3:
        ctx["tools"] = [_tool(rnd, odd) for _ in range(rnd.randint(1, 3))]
    if rnd.random() < 0.15:
        ctx["documents"] = [{"title": _text(rnd, odd), "text": _text(rnd, odd, long)} for _ in range(rnd.randint(1, 3))]
    if rnd.random() < 0.3:
        ctx["enable_thinking"] = rnd.random() < 0.5
    if rnd.random() < 0.1:
        ctx[_text(rnd, 1.0) or "extra"] = _text(rnd, odd)
    for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
        if rnd.random() < 0.9:
            ctx[name] = rnd.choice(ODD) if rnd.random() < odd else rnd.choice(TOKENS)
    return ctx


def _contexts() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {},
        {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True, "bos_token": "<s>"},
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi"},
                {"role": "user", "content": "Name three primes."},
            ],
            "add_generation_prompt": True,
            "bos_token": "<s>",
            "eos_token": "</s>",
        },
        {"messages": [], "add_generation_prompt": False, "bos_token": "", "eos_token": ""},
        {
            "messages": [{"role": "user", "content": "__init__"}, {"role": "assistant", "content": "__globals__"}],
            "add_generation_prompt": False,
            "bos_token": "__init__",
            "eos_token": "__globals__",
        },
    ]
    rnd = random.Random(34)
    for size, odd, long in [(1, 0.0, 0.0), (3, 0.2, 0.0), (6, 0.5, 0.1), (12, 0.3, 0.0), (1, 1.0, 0.0)] * 4 + [
        (40, 0.1, 0.05),
        (200, 0.05, 0.0),
        (5, 0.0, 1.0),
        (80, 0.5, 0.02),
    ]:
        out.append(_context(rnd, size, odd, long))
    return out


#: The request contexts (special tokens included), simplest first.
CONTEXTS: tuple[dict[str, Any], ...] = tuple(_contexts())
#: The variables a loader sets from the file, not from the request.
FILE_VARIABLES = frozenset({"bos_token", "eos_token", "unk_token", "pad_token"})


def request_strings(context: dict[str, Any]) -> set[str]:
    """Every string of the request part of ``context`` (keys and values, the file's tokens excepted)."""
    out: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, str):
            out.add(x)
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk({k: v for k, v in context.items() if k not in FILE_VARIABLES})
    return out


def request_size(context: dict[str, Any]) -> int:
    """The size n of the request that cost bounds are functions of: ``cost.request_size`` when the audit has
    it, else the length of the request's JSON (the file's tokens excepted)."""
    from gguf_schema.check.templates import cost

    measure = getattr(cost, "request_size", None)
    if measure is not None:
        return int(measure(context))
    return len(json.dumps({k: v for k, v in context.items() if k not in FILE_VARIABLES}, ensure_ascii=False))
