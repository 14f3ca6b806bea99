"""Split models: shard naming and split.* keys as llama.cpp writes them, merge, and open_split as one model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.cli import main
from gguf_schema.errors import GGUFBuildError, GGUFFormatError
from gguf_schema.shards import open_split, shard_paths
from gguf_schema.tools.split import merge, parse_size, plan_split, split, split_plan

from .conftest import demo_bytes
from .helpers import run_cli


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


# --------------------------------------------------------------------------- plans, options, sets


def test_a_dry_run_plans_exactly_what_a_split_writes(model: Path, tmp_path: Path) -> None:
    plan = split_plan(model, str(tmp_path / "s"), max_size=10_000, dry_run=True)
    assert sorted(os.listdir(tmp_path)) == ["m.gguf"]
    assert [len(s.tensors) for s in plan.shards] == [2, 2, 2] and plan.warnings == ()
    written = split_plan(model, str(tmp_path / "s"), max_size=10_000)
    assert written == plan
    assert [os.path.getsize(s.path) for s in plan.shards] == [s.size for s in plan.shards]
    with gguf_schema.open(plan.shards[1].path) as f:
        assert tuple(t.name for t in f.tensor_list) == plan.shards[1].tensors == ("blk.2.w", "blk.3.w")
        assert f.metadata["split.id"] == plan.split_id


def test_split_cli_dry_run_json_and_the_too_large_tensor_warning(model: Path, tmp_path: Path, capsys) -> None:
    rc = main(["split", str(model), "-o", str(tmp_path / "s"), "--max-size", "4350", "--dry-run", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and sorted(os.listdir(tmp_path)) == ["m.gguf"]
    doc = json.loads(out)
    assert doc["dry_run"] is True and len(doc["shards"]) == 6 and len(doc["split_id"]) == 16
    assert doc["shards"][0]["tensors"] == ["blk.0.w"] and doc["shards"][0]["path"].endswith("s-00001-of-00006.gguf")
    assert len(doc["warnings"]) == 1 and err.count("gguf-schema: warning: ") == 1
    # the first shard holds the metadata too, so it alone cannot meet 4350 bytes with its 4096-byte tensor
    assert "tensor blk.0.w (4,096 bytes) does not fit in a shard of 4,350 bytes: its shard holds 4,384 bytes" in err
    rc = main(["split", str(model), str(tmp_path / "s"), "--max-size", "4350"])
    out, err = capsys.readouterr()
    assert rc == 0 and len(out.splitlines()) == 6 and "does not fit" in err
    sizes = [os.path.getsize(tmp_path / f"s-0000{i}-of-00006.gguf") for i in range(1, 7)]
    assert [s["size"] for s in doc["shards"]] == sizes


def test_no_tensor_first_split_puts_only_metadata_in_the_first_shard(model: Path, tmp_path: Path) -> None:
    paths = split(model, str(tmp_path / "s"), max_tensors=3, no_tensor_first_split=True)
    assert len(paths) == 3
    with gguf_schema.open(paths[0]) as first:
        assert first.tensor_list == [] and first.metadata["general.name"] == "six"
    with open_split(paths[0]) as m:
        assert [len(s.tensor_list) for s in m.shards] == [0, 3, 3]
    merge(paths[0], tmp_path / "back.gguf")
    assert (tmp_path / "back.gguf").read_bytes() == model.read_bytes()


def _other_model(tmp_path: Path) -> Path:
    p = tmp_path / "other.gguf"
    tensors = {f"blk.{i}.w": np.full((4, 256), -i, np.float32) for i in range(6)}
    gguf_schema.save(p, {"general.architecture": "llama", "general.name": "other"}, tensors)
    return p


def test_open_split_refuses_shards_of_another_split(model: Path, tmp_path: Path) -> None:
    ours = split(model, str(tmp_path / "s"), max_tensors=2)
    theirs = split(_other_model(tmp_path), str(tmp_path / "t"), max_tensors=2)
    os.replace(theirs[1], ours[1])  # same names, numbers and counts: only the identity differs
    with pytest.raises(GGUFFormatError, match=r"s-00002-of-00003.gguf belongs to another split: split.id") as info:
        open_split(ours[0])
    assert info.value.path == ours[1]
    fewer = split(model, str(tmp_path / "u"), max_tensors=2)
    with gguf_schema.open(fewer[2]) as f:  # a shard whose split.tensors.count disagrees
        f.set("split.tensors.count", 5, gguf_schema.ValueType.INT32)
        f.save(tmp_path / "x.gguf")
    os.replace(tmp_path / "x.gguf", fewer[2])
    with pytest.raises(GGUFFormatError, match="belongs to another split: split.tensors.count = 5"):
        open_split(fewer[0])


#: splits sys.argv[1] into prefix sys.argv[2] and kills itself (SIGKILL) at the N-th call of os.<sys.argv[3]>
KILLED_SPLIT = """
import os, signal, sys
from gguf_schema.tools.split import split
src, prefix, name, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
real, calls = getattr(os, name), [0]
def dying(*a, **k):
    calls[0] += 1
    if calls[0] == n:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **k)
setattr(os, name, dying)
split(src, prefix, max_tensors=2)
"""


def _killed_split(src: Path, prefix: Path, call: str, n: int) -> None:
    r = subprocess.run([sys.executable, "-c", KILLED_SPLIT, src, prefix, call, str(n)], timeout=60, check=False)
    assert r.returncode == -signal.SIGKILL


def test_a_split_killed_while_writing_leaves_the_old_set(model: Path, tmp_path: Path) -> None:
    old = split(_other_model(tmp_path), str(tmp_path / "s"), max_tensors=2)
    before = {p: Path(p).read_bytes() for p in old}
    _killed_split(model, tmp_path / "s", "fsync", 3)  # the third shard's fsync: two shards written already
    assert {p: Path(p).read_bytes() for p in old} == before
    assert sorted(os.listdir(tmp_path)) == sorted(["m.gguf", "other.gguf", *(os.path.basename(p) for p in old)])


def test_a_split_killed_between_its_renames_is_detected_and_cleaned_by_the_next(model: Path, tmp_path: Path) -> None:
    old = split(_other_model(tmp_path), str(tmp_path / "s"), max_tensors=2)
    _killed_split(model, tmp_path / "s", "replace", 2)  # the first shard renamed, not the others
    with pytest.raises(GGUFFormatError, match="belongs to another split"):
        open_split(old[0])
    litter = [n for n in os.listdir(tmp_path) if ".gguf-tmp-" in n]
    assert len(litter) == 2  # the complete new shards 2 and 3, named, not renamed yet
    paths = split(model, str(tmp_path / "s"), max_tensors=2)  # run again: the set is whole, the litter gone
    assert paths == old and not [n for n in os.listdir(tmp_path) if ".gguf-tmp-" in n]
    with open_split(paths[0]) as m:
        assert float(m.tensors["blk.5.w"].data[0, 0]) == 5.0


def test_merge_of_a_file_that_is_not_split_is_refused(model: Path, tmp_path: Path) -> None:
    # issue 28: `merge` of a plain file silently wrote a copy of it
    with pytest.raises(GGUFBuildError, match="not a split model .it has no split.count key.: there is nothing"):
        merge(model, tmp_path / "copy.gguf")
    assert not (tmp_path / "copy.gguf").exists()
    r = run_cli("merge", model, tmp_path / "copy.gguf")
    assert r.returncode == 2 and not (tmp_path / "copy.gguf").exists()
    assert r.stderr.decode() == (
        "gguf-schema: error: not a split model (it has no split.count key): there is nothing to merge, and nothing "
        f"was written (to copy a file, use convert) (in {model})\n"
    )


def _quantized_model(path: Path) -> Path:
    """A llama-style model whose file type says mostly Q4_K, with a first tensor that is not Q4_K."""
    from gguf_schema.tensors import quantize

    w = np.sin(np.arange(2 * 256, dtype=np.float32)).reshape(2, 256)
    gguf_schema.save(
        path,
        {
            "general.architecture": "llama",
            "general.quantization_version": np.uint32(2),
            "general.file_type": np.uint32(15),  # MOSTLY_Q4_K_M: mostly Q4_K
        },
        {
            "output_norm.weight": np.ones(256, np.float32),
            "blk.0.ffn_up.weight": gguf_schema.RawTensor("Q4_K", (2, 256), quantize(w, "Q4_K")),
            "blk.1.ffn_up.weight": gguf_schema.RawTensor("Q4_K", (2, 256), quantize(w, "Q4_K")),
        },
    )
    return path


def test_shards_are_checked_as_shards_and_a_first_shard_stands_for_its_model(tmp_path: Path) -> None:
    # issue 28: split's own shards failed check: later shards E050 (no architecture) and E052 (quantized tensors
    # without quantization_version), a first shard without the main type E057
    from gguf_schema.check import validate

    src = _quantized_model(tmp_path / "q.gguf")
    paths = split(src, str(tmp_path / "q"), max_tensors=1)
    model_rules = {"GGUF-E050", "GGUF-E052", "GGUF-E057"}  # (the test models lack llama's required keys: E054)
    rules = lambda r: [f.rule for f in r.errors if f.rule in model_rules]  # noqa: E731
    assert rules(validate(src)) == []
    assert [rules(validate(p)) for p in paths] == [[], [], []]  # E057 is not known without the model
    with open_split(paths[0]) as m:
        assert rules(validate(m.shards[0], model=m)) == []
    broken = tmp_path / "b.gguf"  # the model itself is wrong: the first shard says so, with its model
    gguf_schema.save(
        broken,
        {"general.architecture": "llama", "general.file_type": np.uint32(15)},
        {"a": np.ones(256, np.float32), "b": gguf_schema.RawTensor("Q4_0", (1, 32), bytes(18))},
    )
    bpaths = split(broken, str(tmp_path / "b"), max_tensors=1)
    with open_split(bpaths[0]) as m:
        assert rules(validate(m.shards[0], model=m)) == ["GGUF-E052", "GGUF-E057"]
    assert rules(validate(bpaths[1])) == []  # a later shard is not asked for the model's metadata
    r = run_cli("check", "--json", paths[0])
    assert [rep["path"] for rep in json.loads(r.stdout)["reports"]] == paths
    r = run_cli("scan", *paths)  # shards marked as such; a later shard's absent name is "-", never "None"
    lines = r.stdout.decode().splitlines()
    assert r.returncode == 0 and "None" not in r.stdout.decode() and "spec:rejected" not in lines[1] + lines[2]
    assert lines[1].startswith(f"{paths[1]}: ") and ", shard 2 of 3, - -, file type -, 1 tensors (Q4_Kx1)" in lines[1]
    r = run_cli("audit", paths[0], paths[2])  # the first shard stands for its model; no shard twice
    assert r.returncode == 0 and r.stdout.decode().count(": clean") == 3
    os.rename(paths[1], tmp_path / "away.gguf")
    r = run_cli("check", "--profile", "spec", paths[0])
    lines = r.stdout.decode().splitlines()
    assert r.returncode == 2 and lines[0].startswith(f"{paths[0]}: rejected under profile spec (7 errors")
    assert f"{paths[0]}: unreadable under profile spec (1 error, 0 warnings)" in lines
    assert f"the split model it starts cannot be read: shard 2 of 3 is missing: {paths[1]}" in lines[-1]
