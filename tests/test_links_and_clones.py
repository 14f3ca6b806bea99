"""Writes through symbolic links land on the real file (its journal, lock and temporaries beside it,
the link left a link), and edits that never change a file's bytes where they are (``--no-in-place``,
and by default where the filesystem clones files): what other programs reading the file see.

The clone branch runs on a real filesystem with reflinks: ``GGUF_SCHEMA_REFLINK_DIR`` (a folder on
one), else a small XFS image this module mounts when it can (root, ``mkfs.xfs``); it is skipped
otherwise. Writers are killed for real (SIGKILL in a child process)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema import durable
from gguf_schema.cli import main
from gguf_schema.errors import GGUFError
from gguf_schema.tools.edit import set_key

NAME_OLD, NAME_NEW = "a" * 24, "b" * 24
LONG = "a name longer than the padding can absorb, so that the header grows and the file is rewritten " * 2


def make_model(path: Path) -> Path:
    gguf_schema.save(
        path,
        {"general.name": NAME_OLD, "x.count": np.uint32(7)},
        {"w": np.arange(64, dtype=np.float32), "v": np.full((4, 8), 3, np.float16)},
    )
    return path


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    """``(link, real)``: ``links/m.gguf`` -> ``data/real.gguf``, in two folders."""
    (tmp_path / "links").mkdir()
    (tmp_path / "data").mkdir()
    real = make_model(tmp_path / "data" / "real.gguf")
    link = tmp_path / "links" / "m.gguf"
    link.symlink_to(Path("..") / "data" / "real.gguf")
    return link, real


def assert_only(link: Path, real: Path) -> None:
    """The link is still a link to the real file, and nothing else is in either folder."""
    assert link.is_symlink() and os.path.samefile(link, real)
    assert sorted(os.listdir(link.parent)) == [link.name]
    assert sorted(os.listdir(real.parent)) == [real.name]


def run_child(code: str) -> int:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], timeout=60, check=False).returncode


def cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------- symbolic links


@pytest.mark.parametrize(
    ("value", "in_place", "how"),
    [(NAME_NEW, None, "in place"), (LONG, None, "rewrite"), (NAME_NEW, False, "new file")],
    ids=["in-place", "rewrite", "no-in-place"],
)
def test_an_edit_through_a_link_changes_the_real_file_and_keeps_the_link(
    linked: tuple[Path, Path], value: str, in_place: bool | None, how: str
) -> None:
    link, real = linked
    inode = real.stat().st_ino
    result = set_key(link, "general.name", value, in_place=in_place)
    assert result.path == str(link)
    assert result.in_place == (how == "in place" and not durable.can_clone(real))
    assert (real.stat().st_ino == inode) == result.in_place
    with gguf_schema.open(real) as f:
        assert f.metadata["general.name"] == value and f.tensors["w"].data.tolist() == list(range(64))
    assert_only(link, real)


def test_new_files_written_through_a_link_replace_its_target(linked: tuple[Path, Path], capsys) -> None:
    link, real = linked
    gguf_schema.save(link, {"general.name": "saved"})
    with gguf_schema.open(real) as f:
        assert f.metadata["general.name"] == "saved"
    assert_only(link, real)
    source = make_model(link.parent.parent / "source.gguf")
    rc, _, err = cli(capsys, "convert", source, "-o", link, "--byte-order", "big")
    assert rc == 0, err
    with gguf_schema.open(real) as f:
        assert (f.byte_order, f.metadata["general.name"]) == ("big", NAME_OLD)
    assert_only(link, real)


#: edits general.name in place and is killed half-way through writing the new bytes
KILLED_IN_PLACE = """
    import os, signal
    from gguf_schema.tools.edit import set_key
    real = os.pwrite
    def torn(fd, data, offset):
        real(fd, bytes(data)[: len(data) // 2], offset)
        os.kill(os.getpid(), signal.SIGKILL)
    os.pwrite = torn
    set_key({path!r}, "general.name", {value!r}, in_place=True)
"""


@pytest.mark.parametrize("through", ["link", "real"])
def test_an_edit_killed_through_a_link_is_recovered_through_either_name(
    linked: tuple[Path, Path], through: str, capsys
) -> None:
    link, real = linked
    before = real.read_bytes()
    assert run_child(KILLED_IN_PLACE.format(path=str(link), value=NAME_NEW)) == -signal.SIGKILL
    assert real.read_bytes() != before
    journal = Path(str(real) + "-journal")
    assert journal.is_file() and sorted(os.listdir(link.parent)) == ["m.gguf"]  # beside the real file only
    for name in (link, real):
        with pytest.raises(GGUFError, match="real.gguf-journal: the file may be torn"):
            gguf_schema.open(name)
    rc, out, err = cli(capsys, "recover", link if through == "link" else real)
    assert rc == 0, err
    assert f"from {journal}: the interrupted edit was undone" in out and "it reads: 2 keys, 2 tensors" in out
    assert real.read_bytes() == before
    assert_only(link, real)


def test_a_journal_an_earlier_version_left_beside_the_link_is_found_through_it(linked: tuple[Path, Path]) -> None:
    link, real = linked
    before = real.read_bytes()
    at = before.index(NAME_OLD.encode())
    st = real.stat()
    legacy = durable.Journal(at, before[at : at + 24], st.st_size, st.st_dev, st.st_ino)  # format 2
    Path(str(link) + "-journal").write_bytes(legacy.encode())  # where versions before issue 27 put it
    with open(real, "r+b") as fh:
        fh.seek(at)
        fh.write(NAME_NEW[:12].encode())
    with pytest.raises(GGUFError, match="links/m.gguf-journal: the file may be torn"):
        gguf_schema.open(link)
    said = durable.recover(link)
    assert said is not None and "links/m.gguf-journal: the interrupted edit was undone" in said
    assert real.read_bytes() == before
    assert_only(link, real)


#: rewrites the file through the link (the header grows) and is killed just before the rename
KILLED_BEFORE_RENAME = """
    import os, signal
    from gguf_schema.tools.edit import set_key
    os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    set_key({path!r}, "general.name", {value!r}, in_place={in_place!r})
"""


@pytest.mark.parametrize(("value", "in_place"), [(LONG, None), (NAME_NEW, False)], ids=["rewrite", "no-in-place"])
def test_a_new_file_killed_before_its_rename_leaves_the_target_and_the_link(
    linked: tuple[Path, Path], value: str, in_place: bool | None
) -> None:
    link, real = linked
    before = real.read_bytes()
    code = KILLED_BEFORE_RENAME.format(path=str(link), value=value, in_place=in_place)
    assert run_child(code) == -signal.SIGKILL
    assert real.read_bytes() == before
    assert link.is_symlink() and sorted(os.listdir(link.parent)) == ["m.gguf"]
    (stale,) = [n for n in os.listdir(real.parent) if n != "real.gguf"]  # named, beside the real file
    assert stale.startswith(".real.gguf.gguf-tmp-")
    assert not set_key(link, "general.name", LONG).in_place  # the next write removes it
    assert_only(link, real)


# --------------------------------------------------------------------------- never in place


def test_no_in_place_writes_a_new_file_and_a_reader_keeps_the_old_one(tmp_path: Path, capsys) -> None:
    path = make_model(tmp_path / "m.gguf")
    os.chmod(path, 0o640)
    before = path.read_bytes()
    with open(path, "rb") as reader:  # a program that reads the file meanwhile, taking no lock
        rc, out, err = cli(capsys, "set", path, "general.name", NAME_NEW, "--no-in-place", "--json")
        assert rc == 0, err
        assert reader.read() == before  # the file it opened was never written
    result = json.loads(out)
    cloned = durable.can_clone(tmp_path)
    assert (result["in_place"], result["cloned"]) == (False, cloned)
    assert result["bytes_written"] == (24 if cloned else len(before))
    after = path.read_bytes()
    assert len(after) == len(before) and after == before.replace(NAME_OLD.encode(), NAME_NEW.encode())
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["m.gguf"]


# --------------------------------------------------------------------------- clones


def _can_mount_xfs() -> str | None:
    """Why a small XFS image cannot be mounted here, or None."""
    if os.environ.get("GGUF_SCHEMA_NO_MOUNT"):
        return "GGUF_SCHEMA_NO_MOUNT is set"
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "mounting a test filesystem needs root on Linux"
    if shutil.which("mkfs.xfs") is None:
        return "mkfs.xfs is absent (apt-get install xfsprogs)"
    with open("/proc/filesystems") as fh:
        if "xfs" not in fh.read().split():
            return "the kernel has no XFS"
    return None


@pytest.fixture(scope="module")
def reflink_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder on a filesystem that clones files: GGUF_SCHEMA_REFLINK_DIR, or an XFS image mounted for this module."""
    given = os.environ.get("GGUF_SCHEMA_REFLINK_DIR")
    if given:
        folder = Path(given) / f"gguf-schema-test-{os.getpid()}"
        folder.mkdir()
        yield folder
        shutil.rmtree(folder, ignore_errors=True)
        return
    why = _can_mount_xfs()
    if why is not None:
        pytest.skip(f"no filesystem with reflinks: {why}")
    base = tmp_path_factory.mktemp("xfs")
    image, mountpoint = base / "xfs.img", base / "mnt"
    mountpoint.mkdir()
    with open(image, "wb") as fh:
        fh.truncate(320 * 2**20)  # sparse: XFS's smallest size
    made = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True, check=False)
    mounted = (
        made.returncode == 0
        and (
            subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], capture_output=True, check=False)
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip(f"could not make or mount an XFS image: {made.stderr.decode()[-200:]}")
    try:
        yield mountpoint
    finally:
        gc.collect()  # maps of files there that are still waiting to be freed would keep it busy
        if subprocess.run(["umount", str(mountpoint)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            image.unlink()


def clone_works(folder: Path) -> bool:
    """A clone tried by hand between two files in ``folder``: what the filesystem really does."""
    a, b = folder / "probe-a", folder / "probe-b"
    a.write_bytes(bytes(8192))
    b.touch()
    try:
        with open(a, "rb") as src, open(b, "r+b") as dst:
            return durable.clone_file(src.fileno(), dst.fileno())
    finally:
        a.unlink()
        b.unlink()


def check_automatic_choice(folder: Path) -> bool:
    """An edit that keeps the header's size, made with the default choice in ``folder``: in place through
    the journal where the filesystem cannot clone, else a clone renamed over the file. Returns the probe."""
    path = make_model(folder / "m.gguf")
    probe = durable.can_clone(folder)
    assert probe == clone_works(folder)
    before, inode = path.read_bytes(), path.stat().st_ino
    with open(path, "rb") as reader:
        result = set_key(path, "general.name", NAME_NEW)
        assert (result.in_place, result.cloned) == (not probe, probe)
        assert result.bytes_written == 24
        assert (path.stat().st_ino == inode) == (not probe)
        assert (reader.read() == before) == probe  # a reader of the old file sees it whole, or the edit in place
    assert path.read_bytes() == before.replace(NAME_OLD.encode(), NAME_NEW.encode())
    forced = set_key(path, "general.name", NAME_OLD, in_place=True)  # in place on request, even where clones are cheap
    assert forced.in_place and path.read_bytes() == before
    assert sorted(os.listdir(folder)) == ["m.gguf"]
    path.unlink()
    return probe


def test_the_default_choice_follows_the_filesystem_here(tmp_path: Path) -> None:
    check_automatic_choice(tmp_path)


def test_the_default_choice_clones_on_a_filesystem_with_reflinks(reflink_dir: Path) -> None:
    assert check_automatic_choice(reflink_dir) is True
    big = make_model(reflink_dir / "big.gguf")
    with open(big, "ab") as fh:  # 32 MiB more after the tensor data: a clone copies none of it
        fh.write(b"\x01" * 2**25)
    used = shutil.disk_usage(reflink_dir).used
    assert set_key(big, "general.name", NAME_NEW).cloned
    assert shutil.disk_usage(reflink_dir).used - used < 8 * 2**20
    big.unlink()
