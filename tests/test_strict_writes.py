"""``strict=`` is an argument of every function that writes a GGUF file, and ``--strict`` of every
writing command, which passes it down (issue 26: no ambient setting makes a write strict).

Each writer is given a header that breaks an error rule of the ``ggml`` profile (an empty key,
GGUF-E022): with ``strict="ggml"`` it is refused with a ``GGUFValidationError`` and nothing is
written (the target keeps its bytes, no temporary file is left); without it, the same write is a
``GGUFWarning`` and the file is written, so the refusal is the argument's doing."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFValidationError, GGUFWarning
from gguf_schema.compat.writer import GGUFWriter
from gguf_schema.tools import convert, edit, jsonio, requantize, split

from .helpers import run_cli as run

EMPTY_KEY = "GGUF-E022: empty key"


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    """A llama file whose header holds an empty key (which ggml refuses), with two quantizable tensors."""
    p = tmp_path / "bad.gguf"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GGUFWarning)
        gguf_schema.save(
            p,
            {"general.architecture": "llama", "llama.context_length": np.uint32(2048), "": np.uint8(1)},
            {"a": np.arange(1024, dtype=np.float32).reshape(4, 256), "b": np.ones((4, 256), np.float32)},
        )
    return p


@pytest.fixture
def bad_shards(bad: Path, tmp_path: Path) -> Path:
    """``bad`` split in two shards (written without strict): the first shard."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GGUFWarning)
        paths = split.split(bad, str(tmp_path / "parts"), max_tensors=1)
    return Path(paths[0])


def _state(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` (hidden temporaries too) and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _refused_then_written(folder: Path, write: Callable[[str | None], object], written: Path) -> None:
    """``write("ggml")`` is refused for the empty key and changes nothing in ``folder``; ``write(None)``
    warns GGUF-E022 and writes ``written``."""
    before = _state(folder)
    with pytest.raises(GGUFValidationError, match=EMPTY_KEY) as e:
        write("ggml")
    assert e.value.finding.rule == "GGUF-E022"
    assert _state(folder) == before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write(None)
    assert "GGUF-E022" in [w.message.rule for w in caught if issubclass(w.category, GGUFWarning)]
    assert written.exists() and (written.name not in before or written.read_bytes() != before[written.name])


# ---------------------------------------------------------------- the library


def test_gguf_file_save_takes_strict(bad: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.gguf"

    def write(strict: str | None) -> None:
        with gguf_schema.open(bad) as f:
            f.save(out, strict=strict)

    _refused_then_written(tmp_path, write, out)


@pytest.mark.parametrize("in_place", [True, False])
def test_an_edit_that_fits_the_header_takes_strict(bad: Path, tmp_path: Path, in_place: bool) -> None:
    """Same size: in place through the journal, or a clone or copy renamed over the file."""
    _refused_then_written(
        tmp_path,
        lambda strict: edit.set_key(bad, "llama.context_length", 4096, in_place=in_place, strict=strict),
        bad,
    )
    assert gguf_schema.open(bad).metadata["llama.context_length"] == 4096


def test_edits_that_rewrite_the_file_take_strict(bad: Path, tmp_path: Path) -> None:
    text = tmp_path / "template.txt"
    text.write_text("{{ messages }}")
    edits: list[Callable[[str | None], object]] = [
        lambda strict: edit.set_key_from_file(bad, "tokenizer.chat_template", text, strict=strict),
        lambda strict: edit.rename_key(bad, "llama.context_length", "llama.n_ctx", strict=strict),
        lambda strict: edit.delete_key(bad, "llama.n_ctx", strict=strict),
        lambda strict: edit.edit_file(bad, lambda f: f.set("general.name", "x"), strict=strict),
    ]
    for write in edits:
        _refused_then_written(tmp_path, write, bad)
    md = gguf_schema.open(bad).metadata
    assert (md["tokenizer.chat_template"], md["general.name"], "llama.n_ctx" in md) == ("{{ messages }}", "x", False)


def test_an_edit_to_another_file_takes_strict(bad: Path, tmp_path: Path) -> None:
    out = tmp_path / "edited.gguf"
    _refused_then_written(
        tmp_path, lambda strict: edit.delete_key(bad, "general.architecture", output=out, strict=strict), out
    )


def test_convert_takes_strict(bad: Path, tmp_path: Path) -> None:
    out = tmp_path / "v2.gguf"
    _refused_then_written(tmp_path, lambda strict: convert.convert(bad, out, version=2, strict=strict), out)


def test_split_and_split_plan_take_strict(bad: Path, tmp_path: Path) -> None:
    first = tmp_path / "s-00001-of-00002.gguf"
    _refused_then_written(
        tmp_path, lambda strict: split.split(bad, str(tmp_path / "s"), max_tensors=1, strict=strict), first
    )
    first.unlink()
    (tmp_path / "s-00002-of-00002.gguf").unlink()
    _refused_then_written(
        tmp_path, lambda strict: split.split_plan(bad, str(tmp_path / "s"), max_tensors=1, strict=strict), first
    )


def test_merge_takes_strict(bad_shards: Path, tmp_path: Path) -> None:
    out = tmp_path / "merged.gguf"
    _refused_then_written(tmp_path, lambda strict: split.merge(bad_shards, out, strict=strict), out)


def test_build_takes_strict(bad: Path, tmp_path: Path) -> None:
    with gguf_schema.open(bad) as f:
        doc = jsonio.to_json(f)
    out = tmp_path / "built.gguf"
    _refused_then_written(tmp_path, lambda strict: jsonio.build(doc, out, tensors_from=bad, strict=strict), out)


def test_quantize_takes_strict(bad: Path, tmp_path: Path) -> None:
    out = tmp_path / "q8.gguf"
    _refused_then_written(tmp_path, lambda strict: requantize.requantize(bad, out, "Q8_0", strict=strict), out)
    assert gguf_schema.open(out).metadata["general.quantization_version"] == 2


def test_the_compat_writer_takes_strict(tmp_path: Path) -> None:
    out = tmp_path / "w.gguf"

    def write(strict: str | None) -> None:
        w = GGUFWriter(out, "llama", strict=strict)
        try:
            w.add_uint8("", 1)
            w.add_tensor("w", np.arange(4, dtype=np.float32))
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
        finally:
            w.close()

    _refused_then_written(tmp_path, write, out)


def test_save_to_a_stream_takes_strict() -> None:
    buf = io.BytesIO()
    with pytest.raises(GGUFValidationError, match=EMPTY_KEY):
        gguf_schema.save(buf, {"": 1}, strict="ggml")
    assert buf.getvalue() == b""


# ---------------------------------------------------------------- the command line


@pytest.fixture
def cli_cases(bad: Path, bad_shards: Path, tmp_path: Path) -> Iterator[dict[str, tuple[list[Any], Path]]]:
    """Per writing command: its arguments (before ``--strict``) and the file it writes."""
    text = tmp_path / "template.txt"
    text.write_text("{{ messages }}")
    doc = tmp_path / "bad.json"
    doc.write_bytes(run("dump", bad, "--json").stdout)
    yield {
        "set": (["set", bad, "llama.context_length", "4096"], bad),  # same size: in place
        "set-file": (["set-file", bad, "tokenizer.chat_template", text, "--add"], bad),  # rewritten
        "delete": (["delete", bad, "llama.context_length", "-o", tmp_path / "deleted.gguf"], tmp_path / "deleted.gguf"),
        "rename": (["rename", bad, "llama.context_length", "llama.context_lengtx", "--no-in-place"], bad),
        "build": (["build", doc, tmp_path / "built.gguf", "--tensors-from", bad], tmp_path / "built.gguf"),
        "convert": (["convert", bad, tmp_path / "v2.gguf", "--version", "2"], tmp_path / "v2.gguf"),
        "split": (["split", bad, tmp_path / "s", "--max-tensors", "1"], tmp_path / "s-00001-of-00002.gguf"),
        "merge": (["merge", bad_shards, tmp_path / "merged.gguf"], tmp_path / "merged.gguf"),
        "quantize": (["quantize", bad, tmp_path / "q8.gguf", "-t", "Q8_0"], tmp_path / "q8.gguf"),
    }


WRITING_COMMANDS = ["set", "set-file", "delete", "rename", "build", "convert", "split", "merge", "quantize"]


def test_every_writing_command_is_covered_here() -> None:
    from gguf_schema.cli import COMMANDS
    from gguf_schema.cli.command import Trait

    assert sorted(n for n, c in COMMANDS.items() if Trait.WRITES in c.traits) == sorted(WRITING_COMMANDS)


@pytest.mark.parametrize("command", WRITING_COMMANDS)
def test_strict_ggml_refuses_a_bad_header_on_every_writing_command(
    command: str, cli_cases: dict[str, tuple[list[Any], Path]], tmp_path: Path
) -> None:
    args, written = cli_cases[command]
    before = _state(tmp_path)
    r = run(*args, "--strict", "ggml")
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.decode().splitlines() if not line.startswith("gguf-schema: note: ")]
    assert len(errors) == 1 and errors[0].startswith(f"gguf-schema: error: {EMPTY_KEY} (at offset "), r.stderr
    assert r.stdout == b"" and _state(tmp_path) == before  # nothing written, no temporary left
    r = run(*args)  # without --strict: a warning, and the file is written
    assert r.returncode == 0, r.stderr
    assert "gguf-schema: warning: [GGUF-E022]" in r.stderr.decode()
    assert written.exists() and (written.name not in before or written.read_bytes() != before[written.name])
