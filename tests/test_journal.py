"""The journal of in-place edits (gguf_schema.durable): which file a journal belongs to, told by what
a restart keeps (the file's size, its inode, the bytes of the span sector by sector), never by the
device number; journals that do not fit are kept aside, never deleted; journals of the earlier
format are still read. Torn states are made the way a dying editor leaves them: the journal, then
some sectors of the new bytes."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import durable
from gguf_schema.cli import main
from gguf_schema.errors import GGUFError
from gguf_schema.tools.edit import set_key

OLD_NAME, NEW_NAME = "a" * 1500, "b" * 1500  # a span of 1,500 bytes: three sectors or more


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "m.gguf"
    gguf_schema.save(p, {"general.name": OLD_NAME, "x.count": np.uint32(7)}, {"w": np.arange(64, dtype=np.float32)})
    return p


def edit_span(path: Path) -> tuple[bytes, bytes, int, int]:
    """The file's bytes before and after setting general.name to NEW_NAME (made on a copy), and the changed span."""
    copy = path.with_name("copy.gguf")
    shutil.copyfile(path, copy)
    assert set_key(copy, "general.name", NEW_NAME, in_place=True).in_place
    before, after = path.read_bytes(), copy.read_bytes()
    copy.unlink()
    diff = np.flatnonzero(np.frombuffer(before, np.uint8) != np.frombuffer(after, np.uint8))
    return before, after, int(diff[0]), int(diff[-1]) + 1


def torn(path: Path, journal: durable.Journal, after: bytes, upto: int) -> None:
    """What an editor killed mid-write leaves: ``journal`` beside the file, the new bytes written up to ``upto``."""
    Path(durable.journal_path(path)).write_bytes(journal.encode())
    with open(path, "r+b") as fh:
        fh.seek(journal.offset)
        fh.write(after[journal.offset : upto])


def sector_after(offset: int) -> int:
    return (offset // durable.SECTOR + 1) * durable.SECTOR


def cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_journal_whose_device_number_differs_is_applied_when_its_bytes_fit(model: Path, capsys) -> None:
    before, after, first, last = edit_span(model)
    st = model.stat()
    journal = durable.Journal.of_edit(first, before[first:last], after[first:last], st)
    renumbered = dataclasses.replace(journal, device=st.st_dev + 1)  # the disk came back under another number
    torn(model, renumbered, after, sector_after(first))
    assert durable.Journal.decode(Path(durable.journal_path(model)).read_bytes()) == renumbered
    with pytest.raises(GGUFError, match="an interrupted edit left .*m.gguf-journal: the file may be torn"):
        gguf_schema.open(model)
    rc, out, _ = cli(capsys, "recover", model)
    assert rc == 0
    assert f"restored {last - first:,} bytes at offset {first:,}" in out and "it reads: 2 keys, 1 tensors" in out
    assert model.read_bytes() == before
    assert sorted(os.listdir(model.parent)) == ["m.gguf"]


def test_a_torn_file_copied_to_a_new_inode_is_still_repaired_by_its_bytes(model: Path) -> None:
    before, after, first, last = edit_span(model)
    journal = durable.Journal.of_edit(first, before[first:last], after[first:last], model.stat())
    torn(model, journal, after, sector_after(first) + durable.SECTOR)  # two sectors of the span written
    copy = model.with_name("restored.gguf")
    shutil.copyfile(model, copy)
    os.replace(copy, model)  # e.g. put back from a backup: another inode, the same bytes
    assert model.stat().st_ino != journal.inode
    assert "the interrupted edit was undone" in durable.recover(model)
    assert model.read_bytes() == before


def test_a_journal_that_fits_another_file_is_kept_aside_and_the_file_left_alone(model: Path, capsys) -> None:
    before, after, first, last = edit_span(model)
    journal = durable.Journal.of_edit(first, before[first:last], after[first:last], model.stat())
    Path(durable.journal_path(model)).write_bytes(journal.encode())
    other = model.with_name("other.gguf")  # the path is given another file of the same size (another inode)
    gguf_schema.save(other, {"general.name": "c" * 1500, "x.count": np.uint32(7)}, {"w": np.zeros(64, np.float32)})
    assert other.stat().st_size == model.stat().st_size
    os.replace(other, model)
    theirs = model.read_bytes()
    with gguf_schema.open(model) as f:  # readers do not hold another file's journal against this one
        assert f.metadata["general.name"] == "c" * 1500
    rc, out, _ = cli(capsys, "recover", model)
    assert rc == 0 and "it reads: 2 keys, 1 tensors" in out
    assert "kept " in out and "m.gguf-journal aside as m.gguf-journal.orphan-" in out
    assert f"the bytes at offset {first:,} are neither the saved nor the new ones" in out
    assert "the file was not touched" in out
    assert model.read_bytes() == theirs
    (aside,) = [n for n in os.listdir(model.parent) if n != "m.gguf"]
    assert aside.startswith("m.gguf-journal.orphan-")
    assert (model.parent / aside).read_bytes() == journal.encode()  # kept whole, never deleted
    assert durable.recover(model) is None  # the orphan is no journal of this file


def test_a_journal_of_a_file_of_another_size_is_kept_aside(model: Path) -> None:
    before, after, first, last = edit_span(model)
    journal = durable.Journal.of_edit(first, before[first:last], after[first:last], model.stat())
    Path(durable.journal_path(model)).write_bytes(journal.encode())
    with open(model, "ab") as fh:
        fh.write(bytes(32))  # another program appended to the file since
    said = durable.recover(model)
    assert said is not None and "aside" in said
    assert f"the file has {len(before) + 32:,} bytes, the journal's had {len(before):,}" in said


def test_a_journal_whose_edit_had_not_changed_the_file_is_removed(model: Path) -> None:
    before, after, first, last = edit_span(model)
    journal = durable.Journal.of_edit(first, before[first:last], after[first:last], model.stat())
    Path(durable.journal_path(model)).write_bytes(journal.encode())  # killed after the journal, before writing
    with gguf_schema.open(model) as f:  # the file is whole (the old version): readers read it
        assert f.metadata["general.name"] == OLD_NAME
    said = durable.recover(model)
    assert said is not None and "the interrupted edit had not changed the file yet" in said
    assert model.read_bytes() == before and sorted(os.listdir(model.parent)) == ["m.gguf"]


@pytest.mark.parametrize("upto", ["first sector", "all"])
def test_a_journal_of_the_earlier_format_is_still_applied_to_its_inode(model: Path, upto: str) -> None:
    before, after, first, last = edit_span(model)
    st = model.stat()
    legacy = durable.Journal(first, before[first:last], st.st_size, st.st_dev + 1, st.st_ino)  # format 2: no digests
    assert legacy.encode()[8:12] == (2).to_bytes(4, "little")
    torn(model, legacy, after, sector_after(first) if upto == "first sector" else last)
    with pytest.raises(GGUFError, match="the file may be torn"):
        gguf_schema.open(model)
    assert "the interrupted edit was undone" in durable.recover(model)
    assert model.read_bytes() == before


def test_a_journal_of_the_earlier_format_for_another_inode_is_kept_aside(model: Path) -> None:
    before, after, first, last = edit_span(model)
    st = model.stat()
    legacy = durable.Journal(first, before[first:last], st.st_size, st.st_dev, st.st_ino + 1)
    Path(durable.journal_path(model)).write_bytes(legacy.encode())
    with open(model, "r+b") as fh:
        fh.seek(first)
        fh.write(after[first:last])
    said = durable.recover(model)
    assert said is not None and "aside as m.gguf-journal.orphan-" in said
    assert model.read_bytes() == after  # not rolled back: the journal was not this file's


def test_a_damaged_journal_is_never_applied(model: Path) -> None:
    before, after, first, last = edit_span(model)
    data = bytearray(durable.Journal.of_edit(first, before[first:last], after[first:last], model.stat()).encode())
    data[100] ^= 1  # a bit flipped in the saved bytes: the checksum fails
    assert durable.Journal.decode(bytes(data)) is None
    Path(durable.journal_path(model)).write_bytes(bytes(data))
    assert "removed an incomplete journal" in durable.recover(model)
    assert model.read_bytes() == before


def test_the_streamed_journal_of_an_edit_is_the_journal_of_its_bytes(model: Path) -> None:
    """The journal an editor streams to disk (chunk by chunk, never holding the span) is byte for byte
    the one :meth:`Journal.of_edit` encodes in memory. The editor is killed as it starts writing the file."""
    before, after, first, last = edit_span(model)
    st = model.stat()
    code = f"""
import os, signal
from gguf_schema.tools.edit import set_key
os.pwrite = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
set_key({str(model)!r}, "general.name", {NEW_NAME!r}, in_place=True)
"""
    assert subprocess.run([sys.executable, "-c", code], timeout=60, check=False).returncode == -signal.SIGKILL
    journal = Path(durable.journal_path(model)).read_bytes()
    assert journal == durable.Journal.of_edit(first, before[first:last], after[first:last], st).encode()
    assert model.read_bytes() == before
