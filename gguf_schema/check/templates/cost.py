"""Render cost (placeholder while the bound is written)."""

from __future__ import annotations

from typing import Any

from .rules import Findings, rule

T504 = rule(
    "GGUF-T504",
    "error",
    "render-cost",
    "Rendering the template can take time or memory out of proportion to the request: a loop over a huge range or "
    "literal, text that doubles in a loop or a recursion, macros that call themselves more than once per call, a "
    "huge repetition, power or width. The bound is computed for a representative request (a few dozen messages "
    "and tools of a few kilobytes each); the render would exceed it whatever the request.",
)


class Budget(Exception):
    pass


def check(tree: Any, findings: Findings, nodes: Any, deadline: float) -> None:
    return None
