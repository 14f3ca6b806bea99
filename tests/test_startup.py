"""Start-up: what ``import gguf_schema``, the command line and ``compat.patch()`` import, asked of fresh processes.

Each check runs a small child (``python -c``) and reads its ``sys.modules``: the package imports only
its errors until a name is used, ``gguf-schema --help`` and ``gguf-schema info --help`` import no
command family but the one asked for and neither numpy nor construct, and the lazy parser is the
same parser as the one built whole. What these imports cost in time is measured in
``benchmarks/bench_startup.py``, never here.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from typing import Any

import pytest

import gguf_schema
from gguf_schema.cli import COMMANDS, TABLE, build_parser
from gguf_schema.cli.command import Family

#: what only a command that reads, writes or checks a file needs: never imported by the package or by --help
HEAVY = ("numpy", "construct", "gguf_schema.model", "gguf_schema.reader", "gguf_schema.writer", "gguf_schema.tensors")


def _child(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (``env``: its whole environment, else this process's); it leaves its
    answer in ``out`` (a dict), printed as JSON with the sorted names of the modules it imported."""
    script = (
        "import json, sys\nout = {}\n"
        + code
        + "\nout['modules'] = sorted(sys.modules)\nsys.stdout.write(json.dumps(out))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        env=dict(os.environ) if env is None else env,
        cwd=os.path.dirname(os.path.dirname(gguf_schema.__file__)),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout.decode().splitlines()[-1])  # type: ignore[no-any-return]


def _ours(modules: list[str]) -> set[str]:
    return {m for m in modules if m == "gguf_schema" or m.startswith("gguf_schema.")}


def _heavy(modules: list[str]) -> set[str]:
    return {m for m in modules if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY))}


def test_importing_the_package_imports_only_its_errors() -> None:
    out = _child("import gguf_schema")
    assert _ours(out["modules"]) == {"gguf_schema", "gguf_schema.errors", "gguf_schema.wiring"}
    assert _heavy(out["modules"]) == set()


def test_a_public_name_brings_only_its_layers() -> None:
    out = _child("from gguf_schema import GGUFError, Limits, GGMLType")
    assert "gguf_schema.format.types" in out["modules"] and "numpy" in out["modules"]  # GGMLType's tables
    assert _ours(out["modules"]) & {"gguf_schema.reader", "gguf_schema.writer", "gguf_schema.check"} == set()


def test_every_public_name_resolves_from_its_module() -> None:
    for name in gguf_schema.__all__:
        value = getattr(gguf_schema, name)
        assert value is not None, name
        if hasattr(value, "__module__") and not isinstance(value, type(gguf_schema)):
            module = sys.modules[value.__module__]
            assert getattr(module, name, value) is value, name
    assert set(gguf_schema.__all__) <= set(dir(gguf_schema))
    assert gguf_schema.writer is importlib.import_module("gguf_schema.writer")  # the modules as attributes
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        gguf_schema.nothing_here


def test_the_layers_are_wired_when_a_module_is_imported_directly() -> None:
    """GGUFFile.save and the check before every write work for code that never touches the package's names."""
    out = _child(
        "import io, warnings\n"
        "from gguf_schema.writer import save\n"
        "from gguf_schema.reader import read\n"
        "from gguf_schema.errors import GGUFValidationError, GGUFWarning\n"
        "buf = io.BytesIO()\n"
        "save(buf, {'general.architecture': 'llama'}, {})\n"
        "f = read(buf.getvalue())\n"
        "again = io.BytesIO()\n"
        "f.save(again)\n"
        "out['same'] = again.getvalue() == buf.getvalue()\n"
        "try:\n"
        "    save(io.BytesIO(), {'': 1}, {}, strict='ggml')\n"
        "except GGUFValidationError as e:\n"
        "    out['refused'] = str(e).split(':')[0]\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    save(io.BytesIO(), {'': 1}, {})\n"
        "out['warned'] = sorted({w.category.__name__ for w in seen if issubclass(w.category, GGUFWarning)})\n"
    )
    assert out["same"] is True
    assert out["refused"] == "GGUF-E022"  # the empty key: the check ran, imported on this first write
    assert out["warned"] == ["GGUFWarning"]


def _cli(argv: list[str]) -> dict[str, Any]:
    return _child(
        "import contextlib, io\n"
        "from gguf_schema.cli import main\n"
        "text = io.StringIO()\n"
        "with contextlib.redirect_stdout(text):\n"
        "    try:\n"
        f"        out['code'] = main({argv!r})\n"
        "    except SystemExit as e:\n"
        "        out['code'] = e.code\n"
        "out['text'] = text.getvalue()\n"
    )


def test_the_command_list_imports_no_command() -> None:
    out = _cli(["--help"])
    assert out["code"] == 0
    lines = out["text"].splitlines()
    listed = [line.split()[0] for line in lines if line.startswith("    ") and not line.startswith("     ")]
    assert [c for c in listed if c in COMMANDS] == [name for name, _, _ in TABLE]
    families = {f"gguf_schema.cli.{family}" for _, family, _ in TABLE}
    assert _ours(out["modules"]) & families == set()
    assert _heavy(out["modules"]) == set()


def test_a_commands_help_imports_only_its_family_and_nothing_heavy() -> None:
    out = _cli(["info", "--help"])
    assert out["code"] == 0 and out["text"].startswith("usage: gguf-schema info ")
    assert "--json" in out["text"] and "--no-mmap" in out["text"]
    families = {f"gguf_schema.cli.{family}" for _, family, _ in TABLE}
    assert _ours(out["modules"]) & families == {"gguf_schema.cli.inspect"}
    assert _heavy(out["modules"]) == set()
    assert {m for m in out["modules"] if m.startswith(("gguf_schema.tools", "gguf_schema.check"))} == set()


def test_info_imports_the_reader_and_no_other_command(tmp_path: Any) -> None:
    path = tmp_path / "m.gguf"
    gguf_schema.save(path, {"general.architecture": "llama"}, {})
    out = _cli(["info", str(path)])
    assert out["code"] == 0 and "GGUF v3" in out["text"]
    families = {f"gguf_schema.cli.{family}" for _, family, _ in TABLE}
    assert _ours(out["modules"]) & families == {"gguf_schema.cli.inspect"}
    assert "gguf_schema.reader" in out["modules"]
    assert {m for m in out["modules"] if m.startswith(("gguf_schema.tools", "gguf_schema.check"))} == set()
    assert {"gguf_schema.writer", "gguf_schema.tensors.engine"} & set(out["modules"]) == set()


def test_importing_compat_imports_nothing_heavy() -> None:
    """``python -m gguf_schema.compat`` runs its module after the package's __init__: numpy must not be loaded
    by then, for the runner's BLAS setting to apply."""
    out = _child("import gguf_schema.compat\nout['names'] = 'GGUFReader' in dir(gguf_schema.compat)")
    assert out["names"] is True
    assert _ours(out["modules"]) == {"gguf_schema", "gguf_schema.errors", "gguf_schema.wiring", "gguf_schema.compat"}
    assert _heavy(out["modules"]) == set()


def test_patch_imports_no_kernels_no_checks_and_no_command_line() -> None:
    pytest.importorskip("gguf")
    out = _child("import gguf_schema.compat as c\nc.patch()\nimport gguf\nout['ours'] = gguf.GGUFReader.__module__")
    assert out["ours"] == "gguf_schema.compat.reader"
    assert {m for m in _ours(out["modules"]) if m.startswith(("gguf_schema.tensors", "gguf_schema.check"))} == set()
    assert {m for m in _ours(out["modules"]) if m.startswith("gguf_schema.cli")} == set()


def test_the_table_is_what_the_families_declare() -> None:
    """TABLE (what --help lists without importing a family) holds each command's family, name and help, in order."""
    declared = []
    for family in dict.fromkeys(f for _, f, _ in TABLE):
        commands = importlib.import_module(f"gguf_schema.cli.{family}").COMMANDS
        assert isinstance(commands, Family)
        declared += [(c.name, family, c.help) for c in commands]
    assert list(TABLE) == declared
    assert list(COMMANDS) == [name for name, _, _ in TABLE] and len(COMMANDS) == 24


def _sub(parser: argparse.ArgumentParser) -> Any:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_the_lazy_parser_is_the_whole_parser() -> None:
    whole, lazy = build_parser(), build_parser(lazy=True)
    assert lazy.format_help() == whole.format_help()
    for name, p in _sub(whole).choices.items():
        assert _sub(lazy).choices[name].format_help() == p.format_help(), name
    for argv in (
        ["info", "a.gguf", "--json"],
        ["--no-mmap", "set", "m.gguf", "k", "1", "--strict", "ggml", "-o", "n.gguf"],
        ["quantize", "m.gguf", "q.gguf", "Q4_K_M", "-q"],
        ["check", "m.gguf"],
    ):
        a, b = vars(build_parser().parse_args(argv)), vars(build_parser(lazy=True).parse_args(argv))
        assert a.pop("func").__name__ == b.pop("func").__name__ and a == b, argv


@pytest.mark.parametrize(
    ("env", "seen"), [({}, "1"), ({"OMP_NUM_THREADS": "3"}, None), ({"OPENBLAS_NUM_THREADS": "2"}, "2")]
)
def test_the_program_asks_openblas_for_one_thread_unless_the_user_chose(env: dict[str, str], seen: str | None) -> None:
    """console() (the console script, python -m gguf_schema) sets OPENBLAS_NUM_THREADS=1 before numpy loads,
    unless a count was chosen; main(), called by a program, leaves the environment alone. (This process's own
    environment may hold a count: a Dask LocalCluster of an earlier test sets one.)"""
    clean = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    code = (
        "import atexit, os, sys\n"
        "atexit.register(lambda: print(repr(os.environ.get('OPENBLAS_NUM_THREADS')), file=sys.stderr))\n"
        "sys.argv = ['gguf-schema', 'info', '--help']\n"
        "from gguf_schema.cli import console\n"
        "console()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env={**clean, **env}, timeout=120)
    assert r.returncode == 0 and r.stderr.decode().strip() == repr(seen)
    assert (
        _child(
            "from gguf_schema.cli import main\nimport os\nout['env'] = os.environ.get('OPENBLAS_NUM_THREADS')", clean
        )["env"]
        is None
    )
