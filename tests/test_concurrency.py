"""Several processes on one file at once: editors lose no update, readers never crash and read only
whole versions while the file is edited in place and replaced (real processes, no mocks)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.tools.edit import edit_file

from .conftest import VOCAB_DIR


def start(code: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(p: subprocess.Popen) -> str:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err.decode()
    return out.decode()


#: edits key {prefix}.{i} for i in 0..49, each its own edit; in place (the keys exist) or growing the header
EDITOR = """
    import sys, time
    import numpy as np
    from gguf_schema.tools.edit import edit_file
    path, prefix, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
    while time.time() < start_at:
        time.sleep(0.001)
    for i in range(50):
        edit_file(path, lambda f: f.set(f"{prefix}.{i}", np.uint32(1000 + i)), sync=False)
"""


def test_two_editors_of_one_vocab_file_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "vocab.gguf"
    path.write_bytes((VOCAB_DIR / "ggml-vocab-bert-bge.gguf").read_bytes())
    # one editor sets keys that exist (in place, through the journal), the other adds keys (rewrites)
    edit_file(path, lambda f: [f.set(f"test.a.{i}", np.uint32(0)) for i in range(50)])
    go = time.time() + 0.5
    editors = [start(EDITOR, path, "test.a", go), start(EDITOR, path, "test.b", go)]
    for p in editors:
        finish(p)
    with gguf_schema.open(path) as f:
        for prefix in ("test.a", "test.b"):
            assert [f.metadata[f"{prefix}.{i}"] for i in range(50)] == [1000 + i for i in range(50)]
        assert len(f.metadata["tokenizer.ggml.tokens"]) == 30522
    assert sorted(os.listdir(tmp_path)) == ["vocab.gguf"]


NAMES = ["A" * 16, "B" * 16, "C" * 16, "D" * 16]  # first version, in-place edits (B, D), replacements (C)


def versions(path: Path, name: str) -> None:
    gguf_schema.save(
        path,
        {"general.name": name, "general.alignment": np.uint32(64)},
        {"w": np.arange(4096, dtype=np.float32), "v": np.full((64, 64), 2, np.float16)},
    )


#: what the two writers below share: they run until the file ``stop`` exists (or a hard deadline), and
#: after each step write their counts to ``counts`` (atomically), so the reader can end the race as soon
#: as every side has done enough, however loaded the machine is
_LOOP = """
    import os, sys, time
    path, ctl, go = sys.argv[1], sys.argv[2], float(sys.argv[3])
    stop, counts = os.path.join(ctl, "stop"), os.path.join(ctl, sys.argv[4])
    def running():
        return not os.path.exists(stop) and time.time() < go + 120
    def report(*numbers):
        with open(counts + ".tmp", "w") as fh:
            fh.write(" ".join(map(str, numbers)))
        os.replace(counts + ".tmp", counts)
    while time.time() < go:
        time.sleep(0.001)
"""

#: toggles general.name between B and D in place; counts edits and those that saw the file replaced
IN_PLACE_EDITOR = (
    _LOOP
    + """
    from gguf_schema.errors import GGUFChangedError
    from gguf_schema.tools.edit import set_key
    edits = replaced = 0
    while running():
        try:
            assert set_key(path, "general.name", "BD"[edits % 2] * 16, in_place=True).in_place
            edits += 1
        except GGUFChangedError:
            replaced += 1
        report(edits, replaced)
"""
)

#: replaces the file by a new one (general.name C); every fourth pause is longer, so that in-place
#: edits also complete on a loaded machine, where an edit takes longer than the short pause
REPLACER = (
    _LOOP
    + """
    import numpy as np, gguf_schema
    n = 0
    while running():
        gguf_schema.save(
            path,
            {"general.name": "C" * 16, "general.alignment": np.uint32(64)},
            {"w": np.arange(4096, dtype=np.float32), "v": np.full((64, 64), 2, np.float16)},
            sync=False,
        )
        n += 1
        report(n)
        time.sleep(0.01 if n % 4 else 0.1)
"""
)


def _counts(ctl: Path, name: str) -> list[int]:
    try:
        return [int(x) for x in (ctl / name).read_text().split()]
    except (FileNotFoundError, ValueError):
        return []


def test_readers_see_whole_versions_while_the_file_is_edited_and_replaced(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path / "m.gguf"
    ctl = tmp_path_factory.mktemp("race")
    versions(path, NAMES[0])
    go = time.time() + 0.7  # the children have imported by then (or soon after: the race waits for them)
    others = [start(IN_PLACE_EDITOR, path, ctl, go, "editor"), start(REPLACER, path, ctl, go, "replacer")]
    seen: dict[str, int] = {}
    reads = 0
    w, v = np.arange(4096, dtype=np.float32), np.full((64, 64), 2, np.float16)
    while time.time() < go:
        time.sleep(0.001)

    def enough() -> bool:
        edits, replacements = _counts(ctl, "editor")[:1], _counts(ctl, "replacer")
        return (
            reads > 50
            and bool(edits and edits[0] > 3 and replacements and replacements[0] > 10)
            and bool({"B" * 16, "D" * 16} & set(seen))
            and "C" * 16 in seen
        )

    while time.time() < go + 1.5 or (not enough() and time.time() < go + 100):
        with gguf_schema.open(path, mmap=reads % 2 == 0) as f:  # mapped and positioned readers in turn
            name = f.metadata["general.name"]
            seen[name] = seen.get(name, 0) + 1
            assert [t.name for t in f.tensor_list] == ["w", "v"]
            assert np.array_equal(f.tensors["w"].data, w) and np.array_equal(f.tensors["v"].data, v)
        reads += 1
    (ctl / "stop").touch()
    for p in others:
        finish(p)
    edits, replaced = _counts(ctl, "editor")
    (replacements,) = _counts(ctl, "replacer")
    assert set(seen) <= set(NAMES)
    assert reads > 50 and edits > 3 and replacements > 10
    assert {"B" * 16, "D" * 16} & set(seen) and "C" * 16 in seen  # in-place edits and replacements were seen
    print(
        f"{reads} reads ({seen}), {edits} in-place edits ({replaced} refused: file replaced), {replacements} replacements"
    )
    assert sorted(os.listdir(tmp_path)) == ["m.gguf"]
