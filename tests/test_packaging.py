"""What the packages carry: the license, the metadata, and an sdist whose tests run.

The real build (``python -m build`` and ``twine check``) is slow and needs the network for its
isolated environment, so it is run by hand (the result is in benchmarks/results/packaging.md); here
the inputs it reads are checked: pyproject.toml's metadata, and MANIFEST.in against the files the
test-suite and the documentation need (every tracked file of tests/, docs/, benchmarks/, spec/).
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
#: the folders an unpacked sdist needs for ``python -m pytest`` (doctests of README and docs/, the
#: links the docs test follows into benchmarks/results, the spec data mapped in as gguf_schema.spec)
NEEDED = ("tests", "docs", "benchmarks", "spec")


def manifest_matches(lines: list[str], files: list[str]) -> set[str]:
    """The files (paths relative to the repository, with ``/``) that MANIFEST.in's ``include`` and
    ``recursive-include`` lines take; any other directive is refused (this reading would not know it)."""
    taken: set[str] = set()
    for line in lines:
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "include":
            taken |= {f for f in files if any(fnmatch.fnmatchcase(f, p) for p in words[1:])}
        elif words[0] == "recursive-include":
            folder, patterns = words[1].rstrip("/") + "/", words[2:]
            taken |= {
                f
                for f in files
                if f.startswith(folder) and any(fnmatch.fnmatchcase(f.rsplit("/", 1)[-1], p) for p in patterns)
            }
        else:
            raise AssertionError(f"MANIFEST.in directive this test does not read: {line!r}")
    return taken


def repository_files() -> list[str]:
    """The tracked files (git), or, in an unpacked sdist, the files on disk less caches."""
    if (REPO / ".git").exists():
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
        return [f for f in out.splitlines() if (REPO / f).exists()]
    found = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [
            d for d in dirs if d not in ("__pycache__", ".hypothesis", ".pytest_cache") and not d.endswith(".egg-info")
        ]
        found += [os.path.relpath(os.path.join(root, n), REPO).replace(os.sep, "/") for n in names]
    return [f for f in found if not f.endswith((".pyc", ".so")) and f != "PKG-INFO" and f != "setup.cfg"]


def test_the_license_file_is_the_mit_license_the_metadata_names() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the gguf-schema authors" in text
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"  # an SPDX expression (PEP 639), not the deprecated table
    assert project["license-files"] == ["LICENSE"]


def test_the_metadata_is_complete() -> None:
    project = PYPROJECT["project"]
    assert project["authors"] == [{"name": "the gguf-schema authors"}]
    classifiers = project["classifiers"]
    assert "Programming Language :: Python :: 3.10" in classifiers
    assert "Typing :: Typed" in classifiers
    # PEP 639: a license expression and a License :: classifier together are refused by the build
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert project["keywords"]
    # setuptools reads license = "MIT" and license-files from version 77 on
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]


def test_the_sdist_carries_everything_the_tests_and_docs_need() -> None:
    files = repository_files()
    taken = manifest_matches((REPO / "MANIFEST.in").read_text(encoding="utf-8").splitlines(), files)
    needed = {f for f in files if f.split("/", 1)[0] in NEEDED and not f.endswith(".gitattributes")}
    needed |= {"LICENSE", "README.md", "ARCHITECTURE.md", "conftest.py", "setup.py", "pyproject.toml", ".ci/run"}
    assert "tests/data/vocab/SOURCES" in needed and "docs/cli.md" in needed  # the walk found the data
    assert sorted(needed - taken) == []


#: what only an unsandboxed renderer does: an environment made without the sandbox, the renderer of tests/oracle/
UNSANDBOXED = re.compile(r"runtime_environment\(\s*sandboxed\s*=\s*(?!True\b)|\bLiveRenderer\b|\bProver\b")


def test_the_package_carries_no_unsandboxed_renderer() -> None:
    # the wheel holds every module below gguf_schema/ (setup.py: find_namespace_packages) and spec/ (gguf_schema.spec);
    # the live renders of chat templates (tests/oracle/live.py, tricks.py) stay in the repository
    shipped = [f for f in repository_files() if f.endswith(".py") and f.split("/", 1)[0] in ("gguf_schema", "spec")]
    assert "gguf_schema/check/templates/jinja.py" in shipped and "gguf_schema/testing/fixtures.py" in shipped
    offenders = [f for f in shipped if UNSANDBOXED.search((REPO / f).read_text(encoding="utf-8"))]
    assert offenders == []
    # the pattern finds the renderers where they are
    for kept in ("tests/oracle/live.py", "tests/oracle/tricks.py"):
        assert UNSANDBOXED.search((REPO / kept).read_text(encoding="utf-8")), kept
