"""Split models: shard naming and split.* keys as llama.cpp writes them, merge, and open_split as one model."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.errors import GGUFBuildError, GGUFFormatError
from gguf_schema.tools.split import merge, open_split, parse_size, plan_split, shard_paths, split

from .conftest import demo_bytes


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "m.gguf"
    tensors = {f"blk.{i}.w": np.full((4, 256), i, np.float32) for i in range(6)}  # 4096 bytes each
    gguf_schema.save(p, {"general.architecture": "llama", "general.name": "six"}, tensors)
    return p


def test_parse_size_units() -> None:
    assert [parse_size(s) for s in ("1", "500K", "500M", "2G", "1.5G", "1T", "512MiB", "2gib", "10kb")] == [
        1,
        500_000,
        500_000_000,
        2_000_000_000,
        1_500_000_000,
        10**12,
        512 * 2**20,
        2 * 2**30,
        10_000,
    ]
    for bad in ("", "M", "2X", "-1G", "0", "1 GiBs"):
        with pytest.raises(GGUFBuildError, match="size"):
            parse_size(bad)


def test_max_tensors_groups_in_order(model: Path, tmp_path: Path) -> None:
    paths = split(model, str(tmp_path / "out"), max_tensors=4)
    assert [os.path.basename(p) for p in paths] == ["out-00001-of-00002.gguf", "out-00002-of-00002.gguf"]
    with gguf_schema.open(paths[0]) as a, gguf_schema.open(paths[1]) as b:
        assert [t.name for t in a.tensor_list] == ["blk.0.w", "blk.1.w", "blk.2.w", "blk.3.w"]
        assert [t.name for t in b.tensor_list] == ["blk.4.w", "blk.5.w"]
        ident = a.metadata["split.id"]
        assert len(ident) == 16 and int(ident, 16) >= 0
        assert [(f.key, f.type.name, f.value) for f in a.fields.records] == [
            ("general.architecture", "STRING", "llama"),
            ("general.name", "STRING", "six"),
            ("split.no", "UINT16", 0),
            ("split.count", "UINT16", 2),
            ("split.tensors.count", "INT32", 6),
            ("split.id", "STRING", ident),
        ]
        assert [(f.key, f.type.name, f.value) for f in b.fields.records] == [
            ("split.no", "UINT16", 1),
            ("split.count", "UINT16", 2),
            ("split.tensors.count", "INT32", 6),
            ("split.id", "STRING", ident),
        ]


def test_max_size_is_respected_exactly(model: Path, tmp_path: Path) -> None:
    limit = 10_000
    paths = split(model, str(tmp_path / "s"), max_size=limit)
    sizes = [os.path.getsize(p) for p in paths]
    assert len(paths) == 3 and all(s <= limit for s in sizes)
    with gguf_schema.open(model) as f:
        groups = plan_split(f, max_size=limit)
        assert [len(g) for g in groups] == [2, 2, 2]
        # one byte less than what the first shard needs pushes its second tensor out
        assert next(len(g) for g in plan_split(f, max_size=sizes[0] - 1)) == 1


def test_a_tensor_larger_than_the_limit_gets_its_own_shard(model: Path, tmp_path: Path) -> None:
    paths = split(model, str(tmp_path / "s"), max_size=100)
    assert len(paths) == 6
    with open_split(paths[0]) as m:
        assert [len(s.tensor_list) for s in m.shards] == [1] * 6


def test_open_split_presents_one_model_with_zero_copy_tensors(model: Path, tmp_path: Path) -> None:
    paths = split(model, str(tmp_path / "s"), max_tensors=2)
    with open_split(paths[0]) as m:
        assert m.paths == paths
        assert list(m.tensors) == [f"blk.{i}.w" for i in range(6)]
        assert m.metadata["general.name"] == "six" and m.metadata["split.count"] == 3
        t = m.tensors["blk.5.w"]
        assert t.source_name == m.paths[2] and not t.data.flags.writeable and t.data.base is not None
        assert float(t.data[0, 0]) == 5.0
        assert m.file_size == sum(os.path.getsize(p) for p in paths)
    with open_split(model) as single:  # an unsplit file is a model of one shard
        assert len(single.shards) == 1 and len(single.tensors) == 6


def test_merge_reproduces_the_original(model: Path, tmp_path: Path) -> None:
    paths = split(model, str(tmp_path / "s"), max_tensors=5)
    out = tmp_path / "merged.gguf"
    merge(paths[0], out)
    assert out.read_bytes() == model.read_bytes()


def test_demo_with_zero_tensor_vocabulary_style_split(tmp_path: Path) -> None:
    src = tmp_path / "v.gguf"
    gguf_schema.save(src, {"tokenizer.ggml.tokens": ["a", "b"]})
    paths = split(src, str(tmp_path / "v"), max_tensors=1)
    assert [os.path.basename(p) for p in paths] == ["v-00001-of-00001.gguf"]
    with open_split(paths[0]) as m:
        assert m.metadata["split.tensors.count"] == 0 and m.metadata["tokenizer.ggml.tokens"] == ["a", "b"]


def test_split_keeps_a_non_default_alignment_in_every_shard(tmp_path: Path) -> None:
    src = tmp_path / "a.gguf"
    src.write_bytes(demo_bytes(alignment=64))
    paths = split(src, str(tmp_path / "a"), max_tensors=2)
    for p in paths[1:]:
        with gguf_schema.open(p) as s:
            assert s.alignment == 64 and s.fields.records[0].key == "general.alignment"
            assert all(t.stored_offset % 64 == 0 for t in s.tensor_list)
    merge(paths[0], tmp_path / "m.gguf")
    assert (tmp_path / "m.gguf").read_bytes() == src.read_bytes()


def test_missing_or_inconsistent_shards_are_reported(model: Path, tmp_path: Path) -> None:
    paths = split(model, str(tmp_path / "s"), max_tensors=2)
    with pytest.raises(GGUFFormatError, match="is shard 2 of 3, not the first shard"):
        shard_paths(paths[1])
    renamed = tmp_path / "renamed.gguf"
    os.rename(paths[0], renamed)
    with pytest.raises(GGUFFormatError, match="a model of 3 shards needs names like PREFIX-00001-of-00003.gguf"):
        open_split(renamed)
    os.rename(renamed, paths[0])
    os.remove(paths[2])
    with pytest.raises(GGUFFormatError, match="shard 3 of 3 is missing"):
        open_split(paths[0])


def test_split_needs_a_limit(model: Path, tmp_path: Path) -> None:
    with pytest.raises(GGUFBuildError, match="give a maximum shard size or a maximum number of tensors"):
        split(model, str(tmp_path / "s"))
    with pytest.raises(GGUFBuildError, match="at least 1, got 0"):
        split(model, str(tmp_path / "s"), max_tensors=0)
    assert list(tmp_path.glob("s-*")) == []
