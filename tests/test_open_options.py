"""The reading options (``--limit NAME=VALUE``, ``--no-mmap``; ``limits=``, ``mmap=``) reach every
command and every library function that reads a GGUF file.

Whether a file was mapped is observed through Python's audit events: ``mmap.__new__`` is raised
for every map a process makes, with the descriptor mapped, which names the file
(``/proc/self/fd``). Nothing is replaced or mocked: the commands run as they run for a user.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema import Limits, shards
from gguf_schema.check.audit import audit
from gguf_schema.cli import build_parser
from gguf_schema.errors import GGUFLimitError
from gguf_schema.io.source import MappedSource, PositionedSource
from gguf_schema.tools import convert, edit, export, jsonio, requantize, scan, split
from gguf_schema.tools.imatrix import load_imatrix

from .conftest import demo_bytes
from .helpers import run_cli as run

# the demo file's tokenizer.ggml.tokens holds 8 strings: over this limit, under the default
LIMIT = ["--limit", "max_array_length=4"]
SMALL = Limits(max_array_length=4)
REFUSED = b"exceeds max_array_length = 4"

# ---------------------------------------------------------------- what a process maps

_MAPPED: list[str] | None = None  # paths mapped while a `mapped()` block runs
_HOOKED = False


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "mmap.__new__" and _MAPPED is not None and args[0] >= 0:
        with contextlib.suppress(OSError):  # a descriptor closed by another thread meanwhile
            _MAPPED.append(os.readlink(f"/proc/self/fd/{args[0]}"))


class _Maps:
    """The real paths of the files mapped inside a ``with mapped() as m`` block: ``m.paths``."""

    paths: list[str]

    def of(self, folder: Path) -> list[str]:
        """The mapped files inside ``folder``."""
        root = os.path.realpath(folder) + os.sep
        return sorted({p for p in self.paths if p.startswith(root)})


@pytest.fixture
def mapped() -> Callable[[], Any]:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to name the files mapped")
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit_hook)  # audit hooks cannot be removed: it records only inside mapped()
        _HOOKED = True

    @contextlib.contextmanager
    def block() -> Iterator[_Maps]:
        global _MAPPED
        maps = _Maps()
        maps.paths = _MAPPED = []
        try:
            yield maps
        finally:
            _MAPPED = None

    return block


# ---------------------------------------------------------------- the files the commands read


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with what the commands read: the demo model ``d.gguf`` (and a copy ``e.gguf``), its JSON
    form ``d.json``, a text file ``t.txt``, and the demo split in three shards ``s-0000i-of-00003.gguf``."""
    d = tmp_path / "d.gguf"
    d.write_bytes(demo_bytes())
    (tmp_path / "e.gguf").write_bytes(d.read_bytes())
    with gguf_schema.open(d) as f:
        (tmp_path / "d.json").write_text(jsonio.dumps(f), encoding="utf-8")
    (tmp_path / "t.txt").write_text("a name", encoding="utf-8")
    split.split(d, str(tmp_path / "s"), max_tensors=2)
    return tmp_path


#: every command that reads a GGUF file: its arguments (after the name; @NAME: the file NAME of the folder
#: ``work``) and its exit status on the demo files
READING: dict[str, tuple[list[str], int]] = {
    "info": (["@d.gguf"], 0),
    "dump": (["@d.gguf"], 0),
    "tensors": (["@d.gguf"], 0),
    "get": (["@d.gguf", "general.name"], 0),
    "check": (["--profile", "spec", "@d.gguf"], 0),  # the demo's nested array: refused by the default (ggml)
    "audit": (["@d.gguf"], 0),
    "scan": (["@d.gguf"], 0),
    "diff": (["@d.gguf", "@e.gguf"], 0),
    "estimate": (["@d.gguf"], 0),
    "export": (["@d.gguf", "@o.safetensors"], 0),
    "set": (["@d.gguf", "general.name", "other"], 0),
    "set-file": (["@d.gguf", "general.name", "@t.txt"], 0),
    "delete": (["@d.gguf", "general.name"], 0),
    "rename": (["@d.gguf", "general.name", "general.title"], 0),
    "convert": (["@d.gguf", "@c.gguf", "--byte-order", "big"], 0),
    "split": (["@d.gguf", "@p", "--max-tensors", "3"], 0),
    "merge": (["@s-00001-of-00003.gguf", "@m.gguf"], 0),
    "build": (["@d.json", "@b.gguf", "--tensors-from", "@d.gguf"], 0),
    "quantize": (["@d.gguf", "@q.gguf", "--type", "q8_0"], 0),
    "recover": (["@d.gguf"], 0),
}

#: commands that read no GGUF file given by the user
NOT_READING = {"demo", "generate", "rules", "audit-spec"}


def _commands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_every_command_is_either_tested_for_the_reading_options_or_reads_no_file() -> None:
    """A new command must be added to READING (and so pass the tests below) or to NOT_READING."""
    assert _commands() == set(READING) | NOT_READING
    assert not set(READING) & NOT_READING


def _argv(work: Path, command: str) -> list[str]:
    args, _ = READING[command]
    return [command, *(str(work / a[1:]) if a.startswith("@") else a for a in args)]


@pytest.mark.parametrize("command", sorted(READING))
def test_a_limit_refuses_the_file_in_every_command(work: Path, command: str) -> None:
    before = {p.name: p.read_bytes() for p in work.iterdir()}
    argv = _argv(work, command)
    r = run(*LIMIT, *argv)
    assert r.returncode == 2, r
    assert REFUSED in r.stdout + r.stderr, r
    assert {p.name: p.read_bytes() for p in work.iterdir()} == before  # nothing written, nothing changed
    r = run(*argv, "--limit", "max_array_length=8")  # after the command too; the file is within it
    assert r.returncode == READING[command][1], r


@pytest.mark.parametrize("command", sorted(READING))
def test_no_mmap_maps_nothing_in_every_command(work: Path, command: str, mapped: Any) -> None:
    argv = _argv(work, command)
    with mapped() as m:
        r = run(*argv, "--no-mmap")
    assert r.returncode == READING[command][1], r
    assert m.of(work) == []
    for p in work.glob("*.gguf"):  # a fresh set of inputs (edits changed d.gguf, recover ...)
        p.unlink()
    (work / "o.safetensors").unlink(missing_ok=True)
    d = work / "d.gguf"
    d.write_bytes(demo_bytes())
    (work / "e.gguf").write_bytes(d.read_bytes())
    split.split(d, str(work / "s"), max_tensors=2)
    with mapped() as m:
        r = run("--limit", "max_keys=1000", *argv)  # the default: the inputs are mapped
    assert r.returncode == READING[command][1], r
    assert m.of(work), "without --no-mmap the command maps its input"


# ---------------------------------------------------------------- the library


@pytest.fixture
def long_second_shard(tmp_path: Path) -> Path:
    """A split model whose second shard alone holds a long tensor name: over ``max_tensor_name_length=8``."""
    src = tmp_path / "m.gguf"
    gguf_schema.save(
        src,
        {"general.architecture": "llama"},
        {"short": np.zeros(8, np.float32), "a_rather_long_tensor_name": np.ones(8, np.float32)},
    )
    split.split(src, str(tmp_path / "m"), max_tensors=1)
    src.unlink()
    return tmp_path / "m-00001-of-00002.gguf"


def test_split_models_read_every_shard_with_the_options(long_second_shard: Path, tmp_path: Path) -> None:
    names = Limits(max_tensor_name_length=8)
    with gguf_schema.open(long_second_shard, limits=names) as f:  # the first shard alone is within the limit
        assert [t.name for t in f.tensor_list] == ["short"]
    assert len(shards.shard_paths(long_second_shard, limits=names)) == 2
    for call in (
        lambda: shards.open_split(long_second_shard, limits=names),
        lambda: gguf_schema.open(long_second_shard, split=True, limits=names),
        lambda: split.merge(long_second_shard, tmp_path / "merged.gguf", limits=names),
    ):
        with pytest.raises(GGUFLimitError, match="max_tensor_name_length = 8"):
            call()
    assert not (tmp_path / "merged.gguf").exists()
    for mmap, kind in ((True, MappedSource), (False, PositionedSource)):
        with gguf_schema.open(long_second_shard, split=True, mmap=mmap) as model:
            assert isinstance(model, gguf_schema.SplitModel)
            assert [type(s.storage) for s in model.shards] == [kind, kind]
            assert model.tensors["a_rather_long_tensor_name"].data.tolist() == [1.0] * 8


def test_edits_without_a_map_change_the_file_in_place(work: Path, mapped: Any) -> None:
    d = work / "d.gguf"
    with pytest.raises(GGUFLimitError, match="max_array_length = 4"):
        edit.set_key(d, "general.name", "x", limits=SMALL)
    with mapped() as m:
        result = edit.set_key(d, "general.name", "Another demo mod", mmap=False)  # as long as before: in place
        renamed = edit.rename_key(d, "demo.bool", "demo.flag", mmap=False, limits=Limits(max_array_length=8))
    assert result.in_place and renamed.in_place and m.of(work) == []
    with gguf_schema.open(d) as f:
        assert (f.metadata["general.name"], f.metadata["demo.flag"]) == ("Another demo mod", True)
        with gguf_schema.open(demo_bytes()) as original:  # the tensor data untouched
            assert f.data_offset == original.data_offset
            assert bytes(f.view(f.data_offset, f.data_section.size)) == bytes(
                original.view(original.data_offset, original.data_section.size)
            )
    with mapped() as m:
        assert edit.set_key(d, "general.name", "Yet another demo").in_place  # the default maps the file
    assert m.of(work) == [os.path.realpath(d)]


def _imatrix(path: Path, datasets: int) -> Path:
    gguf_schema.save(
        path,
        {
            "imatrix.datasets": ["x"] * datasets,
            "imatrix.chunk_count": np.uint32(1),
            "imatrix.chunk_size": np.uint32(512),
        },
        {"w.in_sum2": np.full(32, 2.0, np.float32), "w.counts": np.full(1, 2.0, np.float32)},
    )
    return path


def _plain(path: Path) -> Path:
    gguf_schema.save(
        path, {"general.architecture": "llama"}, {"w": np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)}
    )
    return path


#: every library function a command reads through: called on the demo folder with the given keywords
LIBRARY: dict[str, Callable[..., Any]] = {
    "edit_file": lambda w, **kw: edit.edit_file(w / "d.gguf", lambda f: f.set("general.name", "x"), **kw),
    "set_key_from_file": lambda w, **kw: edit.set_key_from_file(w / "d.gguf", "general.name", w / "t.txt", **kw),
    "delete_key": lambda w, **kw: edit.delete_key(w / "d.gguf", "general.name", output=w / "o.gguf", **kw),
    "convert": lambda w, **kw: convert.convert(w / "d.gguf", w / "o.gguf", byte_order="big", **kw),
    "split_plan": lambda w, **kw: split.split_plan(w / "d.gguf", str(w / "p"), max_tensors=2, **kw),
    "export_safetensors": lambda w, **kw: export.export_safetensors(w / "d.gguf", w / "o.safetensors", **kw),
    "build": lambda w, **kw: jsonio.build(
        jsonio.loads((w / "d.json").read_text()), w / "o.gguf", tensors_from=w / "d.gguf", **kw
    ),
    "requantize": lambda w, **kw: requantize.requantize(w / "d.gguf", w / "o.gguf", "Q8_0", **kw),
    "requantize imatrix": lambda w, **kw: requantize.requantize(  # a model without arrays: the imatrix is refused
        _plain(w / "plain.gguf"), w / "o.gguf", "Q8_0", imatrix=_imatrix(w / "i.gguf", 5), **kw
    ),
    "load_imatrix": lambda w, **kw: load_imatrix(_imatrix(w / "i.gguf", 5), **kw),
}


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_library_functions_take_the_reading_options(work: Path, name: str, mapped: Any) -> None:
    call = LIBRARY[name]
    with pytest.raises(GGUFLimitError, match="max_array_length = 4"):
        call(work, limits=SMALL)
    assert not any(p.name.startswith(("o.", "p-")) for p in work.iterdir())  # refused before writing
    with mapped() as m:
        call(work, mmap=False)
    assert m.of(work) == []
    for p in work.iterdir():
        if p.name.startswith(("o.", "p-")):
            p.unlink()
    with mapped() as m:
        call(work, limits=Limits(max_array_length=8))
    assert m.of(work)


def test_scan_and_audit_report_a_file_over_a_limit(work: Path, mapped: Any) -> None:
    d = work / "d.gguf"
    record = scan.scan_file(d, limits=SMALL)
    assert not record.readable and record.error_type == "GGUFLimitError" and "max_array_length = 4" in record.error
    [many] = scan.scan([d], limits=SMALL, threads=1)
    assert many.error == record.error
    report = audit(d, limits=SMALL)
    assert not report.readable and "max_array_length = 4" in (report.error or "")
    with mapped() as m:
        assert scan.scan([d], mmap=False)[0].readable and audit(d, mmap=False).readable
    assert m.of(work) == []
    with mapped() as m:
        assert scan.scan_file(d).readable and audit(d).readable
    assert m.of(work) == [os.path.realpath(d)]


def test_commands_read_every_input_with_the_limits(work: Path, long_second_shard: Path) -> None:
    """Not only the first file: the second of `diff`, the imatrix of `quantize`, the later shards of `merge`."""
    plain = _plain(work / "plain.gguf")
    imatrix = _imatrix(work / "i.gguf", 5)
    for argv, ok in (
        (["diff", plain, work / "d.gguf"], 1),
        (["quantize", plain, work / "q.gguf", "--type", "q8_0", "--imatrix", imatrix], 0),
    ):
        r = run(*argv, *LIMIT)
        assert r.returncode == 2 and REFUSED in r.stderr, r
        assert run(*argv).returncode == ok
    merged = long_second_shard.parent / "merged.gguf"
    r = run("merge", long_second_shard, merged, "--limit", "max_tensor_name_length=8")
    assert r.returncode == 2 and b"exceeds max_tensor_name_length = 8" in r.stderr, r
    assert not merged.exists()
