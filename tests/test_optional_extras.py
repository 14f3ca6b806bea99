"""Without an optional extra, what needs it says which extra to install, and an audit that could not
look is not a pass.

Each case runs in a fresh process in which the extra's package cannot be imported
(``sys.modules[NAME] = None`` before anything imports it: ``import NAME`` then raises
ImportError, as on a machine without it), on real files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import gguf_schema

CLI = "import sys\nfor m in sys.argv[1].split(','):\n    sys.modules[m] = None\nfrom gguf_schema.cli import main\nsys.exit(main(sys.argv[2:]))"


def run_without(modules: str, *argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, modules, *map(str, argv)], capture_output=True, text=True, timeout=120
    )


def test_an_audit_without_jinja2_is_an_error_naming_the_extra(tmp_path: Path) -> None:
    p = tmp_path / "t.gguf"
    template = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
    gguf_schema.save(
        p, {"general.architecture": "llama", "tokenizer.chat_template": template}, {"w": np.ones(4, np.float32)}
    )
    r = run_without("jinja2", "audit", "--format", "json", p)
    assert r.returncode == 1, r.stderr  # flagged: not a pass
    (finding,) = json.loads(r.stdout)["reports"][0]["findings"]
    assert finding["rule"] == "GGUF-A501" and finding["severity"] == "error"
    assert finding["message"] == (
        "template tokenizer.chat_template not analysed: Jinja2 is not installed, so only its characters were "
        "checked (pip install 'gguf-schema[audit]')"
    )
    text = run_without("jinja2", "audit", p)
    assert text.returncode == 1 and text.stdout.splitlines()[0] == f"{p}: flagged (1 error, 0 warnings, 0 notes)"
    from gguf_schema.check import AUDIT_RULES  # the rule table says so too

    assert AUDIT_RULES["GGUF-A501"].severity == "error"
    assert "pip install 'gguf-schema[audit]'" in AUDIT_RULES["GGUF-A501"].description


def test_the_other_extras_are_named_where_they_are_missing(tmp_path: Path) -> None:
    p = tmp_path / "m.gguf"
    gguf_schema.save(p, {"general.architecture": "llama"}, {"w": np.ones(4, np.float32)})
    r = run_without("pyarrow,pyarrow.parquet", "scan", p, "--parquet", tmp_path / "c.parquet")
    assert r.returncode == 2 and "pip install 'gguf-schema[parquet]'" in r.stderr, r.stderr
    r = run_without("fsspec", "info", "http://127.0.0.1:9/m.gguf")
    assert r.returncode == 2 and "pip install 'gguf-schema[remote]'" in r.stderr, r.stderr
    r = run_without("aiohttp", "info", "http://127.0.0.1:9/m.gguf")
    assert r.returncode == 2 and "pip install 'gguf-schema[remote]'" in r.stderr, r.stderr
