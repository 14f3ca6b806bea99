"""The documentation's links lead somewhere: every relative link in README.md, ARCHITECTURE.md and
docs/*.md names a file of the repository (their examples run as doctests through pytest's
``--doctest-glob``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", REPO / "ARCHITECTURE.md", *(REPO / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_pages_exist_and_link():
    assert (REPO / "docs").is_dir() and len(PAGES) >= 4
    assert any(relative_links(p) for p in PAGES), "no relative links found: the pattern is broken"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_name_files_of_the_repository(page):
    missing = [t for t in relative_links(page) if not (page.parent / t.split("#", 1)[0]).exists()]
    assert not missing, f"{page.relative_to(REPO)} links to missing files: {missing}"


def test_ci_runs_the_readmes_two_commands_as_written():
    # .ci/run reads both commands from the README (after their markers) and runs them in one fresh clone
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for marker, command in (
        ("<!-- ci:install-command -->", "pip install . && gguf-schema demo"),
        ("<!-- ci:test-command -->", "pip install -e '.[test]' && python -m pytest -q -n auto"),
    ):
        after = readme.split(marker, 1)[1].lstrip("\n")
        assert after.startswith(f"```sh\n{command}\n```"), marker
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'git clone -q --no-hardlinks "$repo" "$clone"' in ci
    assert ci.index('run_step "newest: install and demo" "$install_cmd"') < ci.index(
        'run_step "newest: tests" "$test_cmd"'
    )
