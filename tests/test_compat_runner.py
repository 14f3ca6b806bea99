"""``python -m gguf_schema.compat SCRIPT ARGS``: gguf-py's own scripts, run on our engine.

Each script runs in a fresh process, once as gguf-py's own command would (its ``main()``) and once
through the runner, on a real file (a vocabulary written by llama.cpp's converter) and on generated
ones: the same output and the same bytes written. A truncated file shows that the runner's patch was
in effect: the error is ours (one line naming the offset), which gguf-py's reader does not give.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import VOCAB_FILES, demo_bytes

pytest.importorskip("gguf")

OWN = "import sys; from importlib import import_module\nsys.argv = sys.argv[1:]\nsys.exit(import_module('gguf.scripts.' + sys.argv[0].replace('-', '_')).main())"


def own(*argv: object) -> subprocess.CompletedProcess[str]:
    """gguf-py's script itself (as its console script runs it)."""
    return subprocess.run([sys.executable, "-c", OWN, *map(str, argv)], capture_output=True, text=True, timeout=120)


def runner(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gguf_schema.compat", *map(str, argv)], capture_output=True, text=True, timeout=120
    )


def test_gguf_dump_through_the_runner_prints_what_gguf_dump_prints(tmp_path: Path) -> None:
    real = min(VOCAB_FILES, key=lambda p: p.stat().st_size)  # gguf-py takes seconds for a big vocabulary
    ours, theirs = runner("gguf-dump", "--json", real), own("gguf-dump", "--json", real)
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    assert json.loads(ours.stdout) == json.loads(theirs.stdout)
    demo = tmp_path / "demo.gguf"  # the text form, on a generated file with every value type
    demo.write_bytes(demo_bytes())
    text = runner("gguf-dump", demo)
    assert text.returncode == 0 and text.stdout == own("gguf-dump", demo).stdout


def test_gguf_set_metadata_through_the_runner_writes_the_same_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(demo_bytes())
    shutil.copy(a, b)
    assert own("gguf-set-metadata", a, "llama.context_length", "256", "--force").returncode == 0
    r = runner("gguf-set-metadata", b, "llama.context_length", "256", "--force")
    assert r.returncode == 0, r.stderr
    assert a.read_bytes() == b.read_bytes() != demo_bytes()


def test_the_runner_reads_with_our_engine(tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(demo_bytes()[:500])
    r = runner("gguf-dump", cut)
    assert r.returncode == 2
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("gguf-schema: error: ")]
    assert "(at offset " in line and "in header -> metadata_kv[" in line


def test_the_runner_lists_the_scripts_and_refuses_others() -> None:
    r = runner()
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m gguf_schema.compat SCRIPT [ARGS...]")
    assert "gguf-dump" in r.stdout and "gguf-set-metadata" in r.stdout
    r = runner("gguf-nothing")
    assert r.returncode == 2
    assert r.stderr.startswith("gguf-schema: error: 'gguf-nothing' is not one of gguf-py's scripts installed here: ")
