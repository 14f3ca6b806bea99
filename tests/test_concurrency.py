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


#: toggles general.name between B and D in place until the deadline; counts edits that saw the file replaced
IN_PLACE_EDITOR = """
    import sys, time
    from gguf_schema.errors import GGUFChangedError
    from gguf_schema.tools.edit import set_key
    path, go, until = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    while time.time() < go:
        time.sleep(0.001)
    edits = replaced = 0
    while time.time() < until:
        try:
            assert set_key(path, "general.name", "BD"[edits % 2] * 16, in_place=True).in_place
            edits += 1
        except GGUFChangedError:
            replaced += 1
    print(edits, replaced)
"""

#: replaces the file by a new one (general.name C) until the deadline
REPLACER = """
    import sys, time
    import numpy as np, gguf_schema
    path, go, until = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    while time.time() < go:
        time.sleep(0.001)
    n = 0
    while time.time() < until:
        gguf_schema.save(
            path,
            {"general.name": "C" * 16, "general.alignment": np.uint32(64)},
            {"w": np.arange(4096, dtype=np.float32), "v": np.full((64, 64), 2, np.float16)},
            sync=False,
        )
        n += 1
        time.sleep(0.01)
    print(n)
"""


def test_readers_see_whole_versions_while_the_file_is_edited_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    versions(path, NAMES[0])
    go = time.time() + 0.7  # the children have started by then
    until = go + 1.5
    others = [start(IN_PLACE_EDITOR, path, go, until), start(REPLACER, path, go, until)]
    seen: dict[str, int] = {}
    reads = 0
    w, v = np.arange(4096, dtype=np.float32), np.full((64, 64), 2, np.float16)
    while time.time() < go:
        time.sleep(0.001)
    while time.time() < until:
        with gguf_schema.open(path, mmap=reads % 2 == 0) as f:  # mapped and positioned readers in turn
            name = f.metadata["general.name"]
            seen[name] = seen.get(name, 0) + 1
            assert [t.name for t in f.tensor_list] == ["w", "v"]
            assert np.array_equal(f.tensors["w"].data, w) and np.array_equal(f.tensors["v"].data, v)
        reads += 1
    edits, replaced = map(int, finish(others[0]).split())
    replacements = int(finish(others[1]))
    assert set(seen) <= set(NAMES)
    assert reads > 50 and edits > 3 and replacements > 10
    assert {"B" * 16, "D" * 16} & set(seen) and "C" * 16 in seen  # in-place edits and replacements were seen
    print(
        f"{reads} reads ({seen}), {edits} in-place edits ({replaced} refused: file replaced), {replacements} replacements"
    )
    assert sorted(os.listdir(tmp_path)) == ["m.gguf"]
