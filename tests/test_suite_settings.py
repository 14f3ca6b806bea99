"""The test-suite's own settings (pyproject.toml's ``[tool.pytest.ini_options]``), tried on a tiny suite.

A run must not leave its temporary files behind (the gemma copies are 253 MB each), and ``-q``
must still say why tests were skipped. A small suite is run in a subprocess under the project's
settings: one test that passes, one that fails and one that skips, each writing into ``tmp_path``.
"""

from __future__ import annotations

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


def test_temporary_files_are_kept_for_failed_tests_only_and_skips_say_why(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_tiny.py").write_text(SUITE, encoding="utf-8")
    base = tmp_path / "base"
    r = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
            "-c", str(REPO / "pyproject.toml"), "--rootdir", str(suite), "--basetemp", str(base),
            "-o", "addopts=" + _addopts_without_doctests(), str(suite / "test_tiny.py"),
        ],
        cwd=suite, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "SKIPPED [1] test_tiny.py:12: the reason of this skip" in r.stdout
    left = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
    assert left == ["test_fails0/kept.bin"]


def _addopts_without_doctests() -> str:
    """The project's addopts less the doctest collection (the tiny suite has no modules to import)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    options = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    kept = [w for w in options["addopts"].split() if not w.startswith("--doctest")]
    assert "-rs" in kept  # the reason of every skip, under -q too
    return " ".join(kept)
