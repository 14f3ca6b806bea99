"""Spec audit: our transcription of the GGUF spec (``spec/``) against a spec document and the schema.

PLACEHOLDER (being written).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

_REPO_SPEC = Path(__file__).resolve().parent.parent / "spec" / "gguf.json"
_PACKAGED_SPEC = Path(__file__).resolve().parent / "spec_data.json"


@functools.lru_cache(maxsize=None)
def load_spec() -> dict[str, Any]:
    path = _REPO_SPEC if _REPO_SPEC.is_file() else _PACKAGED_SPEC
    return json.loads(path.read_text(encoding="utf-8"))
