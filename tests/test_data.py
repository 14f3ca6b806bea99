"""The test data in tests/data: every file is listed in its folder's SOURCES with the SHA-256 of its bytes, and
the packed golden vectors are ggml's arrays byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from .conftest import DATA, VOCAB_FILES
from .helpers import GOLDEN_MANIFEST, ggml_golden

#: folders whose every file (SOURCES itself aside) is listed in a SOURCES file: name<TAB>sha256<TAB>origin
#: (templates/real has one too, checked with its own corpus in test_templates.py; templates/real2 is the second corpus
#: of real chat templates, tests/test_real_templates2.py)
LISTED = [DATA / "vocab", DATA / "golden", DATA / "templates" / "real2"]
#: files beside the data that are not data: the lists themselves and git's settings
NOT_DATA = {"SOURCES", "SOURCES.md", ".gitattributes"}


def sources(folder: Path) -> dict[str, tuple[str, str]]:
    """``{relative path: (sha256, origin)}`` from ``folder/SOURCES`` (``#`` lines are prose)."""
    listed: dict[str, tuple[str, str]] = {}
    for line in (folder / "SOURCES").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, digest, origin = line.split("\t")
        assert name not in listed, f"{name} is listed twice"
        listed[name] = (digest, origin)
    return listed


@pytest.mark.parametrize("folder", LISTED, ids=[p.relative_to(DATA).as_posix() for p in LISTED])
def test_every_data_file_is_listed_with_its_checksum(folder: Path):
    listed = sources(folder)
    present = sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name not in NOT_DATA
    )
    assert sorted(listed) == present
    for name, (digest, origin) in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
        assert origin.strip(), name


def test_sources_name_the_upstreams():
    vocab = sources(DATA / "vocab")
    assert sorted(vocab) == [p.name for p in VOCAB_FILES] and len(vocab) == 12
    assert all(origin.startswith(f"ggml-org/llama.cpp models/{name} ") for name, (_, origin) in vocab.items())
    text = (DATA / "golden" / "SOURCES").read_text(encoding="utf-8")
    assert "d99724f2b141fed9e1a9f402213506c081433465" in text  # the ggml commit that made quants/


@pytest.mark.parametrize("name", sorted(GOLDEN_MANIFEST))
def test_packed_golden_vectors_are_ggmls_arrays(name: str):
    """Each type's file put back together holds exactly the arrays ggml wrote, with their dtype, shape and bytes."""
    entry = GOLDEN_MANIFEST[name]
    g = ggml_golden(name)
    assert sorted(g) == sorted(entry["arrays"]) == sorted(entry["sha256"])
    for key, a in g.items():
        assert a.dtype.str == entry["dtype"][key] and list(a.shape) == entry["shape"][key], key
        assert hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() == entry["sha256"][key], key
    for key, twin in entry["same_as"].items():  # a repeat is stored once: the digests agree
        assert entry["sha256"][key] == entry["sha256"][twin]
