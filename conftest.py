"""Settings for the doctests in gguf_schema/ and README.md (the test-suite's own fixtures live in tests/).

Doctests that call Hypothesis's ``find`` print the example it settles on; with a random seed and no
example database (a fresh clone) that example can differ from run to run when several values
qualify. Doctests therefore run with ``derandomize=True``: the same example every time.

The examples make their files with ``tempfile.mkdtemp()``, as a user would; while a doctest runs,
Python's temporary folder is the test's own ``tmp_path``, so those files go when the test passes
(pyproject.toml's ``tmp_path_retention_policy``) instead of piling up in the system's temporary space.
"""

import importlib.metadata
import tempfile

import pytest
from hypothesis import settings


def pytest_report_header(config):
    """Say which versions this run got (CI installs the newest that the bounds allow)."""
    got = []
    for dist in ("numpy", "construct", "gguf", "hypothesis"):
        try:
            got.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            got.append(f"{dist} absent")
    return "versions: " + ", ".join(got)


# no deadline: a slow example on a loaded machine is not a bug
settings.register_profile("doctests", derandomize=True, database=None, deadline=None)


@pytest.fixture(autouse=True)
def _doctest_temporaries_in_tmp_path(request):
    if type(request.node).__name__ != "DoctestItem":
        yield
        return
    saved = tempfile.tempdir
    tempfile.tempdir = str(request.getfixturevalue("tmp_path"))
    try:
        yield
    finally:
        tempfile.tempdir = saved


@pytest.fixture(autouse=True)
def _deterministic_hypothesis_in_doctests(request):
    if type(request.node).__name__ != "DoctestItem":
        yield
        return
    previous = settings._current_profile
    settings.load_profile("doctests")
    try:
        yield
    finally:
        settings.load_profile(previous)
