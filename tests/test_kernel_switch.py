"""The compiled modules: one switch, ``GGUF_SCHEMA_NO_KERNELS=1``, a way to see which are active
(``gguf-schema --version``), and a note at install when they could not be built.

The variable has one meaning at install (skip building them) and at run time (turn off those that
were built: the tensor kernels and the string walk alike). Each case runs in a fresh process, since
the modules are chosen at import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_schema.tensors import engine

REPO = Path(__file__).resolve().parents[1]
MODULES = ("gguf_schema.tensors._kernels", "gguf_schema.format._scan")

built = pytest.mark.skipif(
    engine.compiled_kernels is None or os.environ.get("GGUF_SCHEMA_NO_KERNELS") == "1",
    reason="the compiled modules are not built (or are turned off) in this installation",
)


def _run(*argv: str, off: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GGUF_SCHEMA_NO_KERNELS"}
    if off:
        env["GGUF_SCHEMA_NO_KERNELS"] = "1"
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=120)


@built
def test_the_variable_turns_off_every_compiled_module_at_run_time() -> None:
    code = (
        "import gguf_schema.tensors.engine as e, gguf_schema.format.values as v\n"
        "print(e.compiled_kernels is None, len(e.COMPILED_DEQUANTIZE), len(e.COMPILED_QUANTIZE), v.compiled_scan is None)"
    )
    assert _run("-c", code, off=True).stdout.split() == ["True", "0", "0", "True"]
    on = _run("-c", code, off=False).stdout.split()
    assert on[0] == "False" and int(on[1]) > 10 and int(on[2]) > 10 and on[3] == "False"


@built
def test_version_lists_the_compiled_modules_and_their_state() -> None:
    on = _run("-m", "gguf_schema", "--version", off=False)
    assert on.returncode == 0
    assert on.stdout.splitlines() == ["gguf-schema 0.1.0", *(f"{m}: active" for m in MODULES)]
    off = _run("-m", "gguf_schema", "--version", off=True)
    assert off.stdout.splitlines() == ["gguf-schema 0.1.0", *(f"{m}: off (GGUF_SCHEMA_NO_KERNELS=1)" for m in MODULES)]


@pytest.mark.skipif(shutil.which("false") is None, reason="no `false` program to stand for a broken compiler")
def test_a_build_without_a_working_compiler_says_so(tmp_path: Path) -> None:
    # setup.py's build_ext alone, in a copy of what it reads, with a "compiler" that always fails
    shutil.copy(REPO / "setup.py", tmp_path)
    shutil.copytree(REPO / "spec", tmp_path / "spec")
    for sub in ("tensors", "format"):
        shutil.copytree(REPO / "gguf_schema" / sub / "csrc", tmp_path / "gguf_schema" / sub / "csrc")
    (tmp_path / "gguf_schema" / "__init__.py").write_text("")
    env = {**os.environ, "CC": "false"}
    env.pop("GGUF_SCHEMA_NO_KERNELS", None)
    r = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "out", "--build-temp", "tmp"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr  # optional modules: the build goes on
    notes = [line for line in r.stderr.splitlines() if line.startswith("gguf-schema: note:")]
    assert len(notes) == 1
    assert notes[0].startswith(
        "gguf-schema: note: the optional compiled module(s) gguf_schema.tensors._kernels, gguf_schema.format._scan "
        "could not be built"
    )
    assert "`gguf-schema --version` lists which are active" in notes[0]
    assert not list((tmp_path / "out").rglob("*.so"))
