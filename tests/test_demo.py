"""The built-in example: `gguf-schema demo` as a new user runs it."""

from __future__ import annotations

import subprocess
import sys

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


def test_demo_command_default_output_is_demo_gguf_in_the_current_folder(tmp_path):
    r = subprocess.run([sys.executable, "-m", "gguf_schema", "demo"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "demo.gguf").stat().st_size == 4544
