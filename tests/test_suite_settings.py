"""The test-suite's own settings (pyproject.toml's ``[tool.pytest.ini_options]``, conftest.py), tried on a tiny suite.

A run must not leave its temporary files behind (the gemma copies are 253 MB each; the doctests'
examples make their files with ``tempfile.mkdtemp()``, as a user would), and ``-q`` must still say why
tests were skipped. One pytest process runs, under the project's settings, a tiny suite (a test that
passes, one that fails and one that skips, each writing into ``tmp_path``) and the doctests of
``gguf_schema/tools/edit.py``, with the system's temporary folder pointed at an empty folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SUITE = """
import pytest

def test_passes(tmp_path):
    (tmp_path / "big.bin").write_bytes(b"x" * 1000)

def test_fails(tmp_path):
    (tmp_path / "kept.bin").write_bytes(b"y")
    assert False

def test_skips():
    pytest.skip("the reason of this skip")
"""


def test_only_failed_tests_keep_temporary_files_and_skips_say_why(tmp_path: Path) -> None:
    suite, base, system_tmp = tmp_path / "suite", tmp_path / "base", tmp_path / "tmp"
    suite.mkdir()
    system_tmp.mkdir()
    (suite / "test_tiny.py").write_text(SUITE, encoding="utf-8")
    r = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--basetemp", str(base),
            str(suite / "test_tiny.py"), "gguf_schema/tools/edit.py",
        ],
        cwd=REPO, env={**os.environ, "TMPDIR": str(system_tmp)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr  # test_fails
    assert "1 failed, " in r.stdout and " passed, 1 skipped" in r.stdout
    assert "test_tiny.py:12: the reason of this skip" in r.stdout  # -rs in addopts: the reason, under -q
    left = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
    assert left == ["test_fails0/kept.bin"]
    assert os.listdir(system_tmp) == []  # the doctests' mkdtemp() folders went with their tmp_path
