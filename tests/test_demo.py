"""The built-in example: `gguf-schema demo` as a new user runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf_schema
from gguf_schema import ValueType


def test_demo_command_writes_reads_proves_the_round_trip_and_validates(tmp_path):
    out = tmp_path / "demo.gguf"
    r = subprocess.run(
        [sys.executable, "-m", "gguf_schema", "demo", "-o", str(out)], capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"wrote {out}: 4,544 bytes, sha256 ")
    assert lines[1] == "GGUF v3, little-endian, alignment 32, data at offset 1504"
    assert lines[2] == "28 metadata keys:"
    assert lines[-2] == "round trip: rebuilt bytes identical: True; values equal: True; tensor bytes equal: True"
    assert lines[-1] == "validation: spec clean, ggml clean, lenient clean"
    with gguf_schema.open(out) as f:
        assert {fld.type for fld in f.fields.values()} == set(ValueType)
        assert [t.type.name for t in f.tensors.values()] == ["F32", "F16", "Q8_0", "I32", "F32"]


def test_demo_command_by_default_writes_in_a_new_temporary_folder_and_says_where(tmp_path):
    # run from a clone, the README's `gguf-schema demo` must leave nothing in the working tree (issue 28)
    r = subprocess.run([sys.executable, "-m", "gguf_schema", "demo"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == []
    written = Path(r.stdout.split(":", 1)[0].removeprefix("wrote "))
    try:
        assert written.name == "demo.gguf" and written.parent.name.startswith("gguf-schema-demo-")
        assert written.parent.parent == Path(tempfile.gettempdir()) and written.stat().st_size == 4544
    finally:
        shutil.rmtree(written.parent)


def test_demo_help_says_what_it_does():
    r = subprocess.run([sys.executable, "-m", "gguf_schema", "demo", "--help"], capture_output=True, text=True)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0
    assert "Write demo.gguf, a small llama-style model with all 13 metadata value types" in text
    assert "prove the round trip" in text and "Exit 0 when all of that holds, 1 otherwise" in text
    assert "--limit" not in text and "--no-mmap" not in text and "--storage-option" not in text
