"""Python started in the root of a clone imports the clone's own ``gguf_schema`` folder (the current
folder comes first on the import path), not the installed copy: everything must work the same there.

The spec data (``gguf_schema.spec``) is the clone's top-level ``spec/`` folder, which only an
install (or an editable install's import hook) maps in. Here Python runs with ``-S`` (no site
packages processed, so no editable install's hook) and the environment's site-packages on
``PYTHONPATH`` for numpy and construct: the clone as it is after a plain ``pip install .``.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from .conftest import demo_bytes

REPO = Path(__file__).resolve().parents[1]


def test_the_command_line_run_from_the_clone_finds_the_spec_data(tmp_path: Path) -> None:
    model = tmp_path / "demo.gguf"
    model.write_bytes(demo_bytes())
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    env = {"PYTHONPATH": ":".join(site), "PATH": "/usr/bin:/bin", "GGUF_SCHEMA_PROGRESS": "0"}
    for argv in (["check", "--profile", "spec", str(model)], ["check", "--profile", "spec", "--json", str(model)]):
        r = subprocess.run(
            [sys.executable, "-S", "-m", "gguf_schema", *argv],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in r.stderr, r.stderr
        assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(
        [sys.executable, "-S", "-c", "import gguf_schema.check.spec_audit as s; print(s.__file__, len(s.load_spec()))"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    path, n = r.stdout.split()
    assert path == str(REPO / "gguf_schema" / "check" / "spec_audit.py") and int(n) > 0
