"""``gguf-schema generate``: every fixture is written, listed in the manifest, and behaves as the manifest says."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gguf_schema
from gguf_schema.format.types import GGMLType
from gguf_schema.testing.fixtures import ARCHITECTURES, KINDS, PROFILES, fixture_files, generate, random_blocks

from .helpers import open_variant

SPEC_ARCHS = {"llama", "mpt", "gptneox", "gptj", "gpt2", "bloom", "falcon", "rwkv", "whisper", "mamba"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("fixtures")
    records = generate(out, seed=0)
    return out, records


def _manifest(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]


def test_manifest_lines_are_well_formed(generated):
    folder, records = generated
    lines = _manifest(folder)
    assert lines == records
    names = [r["file"] for r in lines]
    assert len(names) == len(set(names))
    assert sorted(p.name for p in folder.iterdir()) == sorted([*names, "manifest.jsonl"])
    for r in lines:
        assert set(r) == {"file", "kind", "description", "expected", "size", "sha256"}
        assert r["kind"] in KINDS and r["file"].endswith(".gguf") and r["description"]
        assert set(PROFILES) <= set(r["expected"]) and set(r["expected"].values()) <= {"accept", "reject"}
        data = (folder / r["file"]).read_bytes()
        assert len(data) == r["size"] and hashlib.sha256(data).hexdigest() == r["sha256"]


def test_every_family_is_there(generated):
    _, records = generated
    by_kind = {k: [r["file"] for r in records if r["kind"] == k] for k in KINDS}
    assert {f"arch_{a}.gguf" for a in SPEC_ARCHS} == set(by_kind["arch"])
    assert {f"type_{t.name}.gguf" for t in GGMLType if not t.removed} <= set(by_kind["types"])
    for edge in (
        "edge_alignment_1.gguf",
        "edge_no_tensors.gguf",
        "edge_ndims_0.gguf",
        "edge_zero_size_dims.gguf",
        "edge_name_63.gguf",
        "edge_name_64.gguf",
        "edge_vocab_300k.gguf",
    ):
        assert edge in by_kind["edge"]
    try:
        from gguf_schema.testing.malformed import malformed_cases
    except ImportError:
        pytest.skip("gguf_schema.testing.malformed is not there yet")
    assert len(by_kind["malformed"]) == len(malformed_cases()) > 0


def test_valid_fixtures_open_and_round_trip_byte_identically(generated):
    folder, records = generated
    valid = [r for r in records if r["expected"]["lenient"] == "accept"]
    assert len(valid) > 60
    for r in valid:
        path = folder / r["file"]
        data = path.read_bytes()
        for fast in (True, False) if len(data) < 2**20 else (True,):  # the 300k vocabulary: the fast variant only
            with open_variant(path, fast=fast) as f:
                for t in f.tensor_list:
                    assert t.data.nbytes == t.nbytes, (r["file"], t.name)
                out = io.BytesIO()
                f.save(out)
                assert out.getvalue() == data, r["file"]


def test_malformed_fixtures_behave_as_the_manifest_says_for_every_profile(generated):
    from gguf_schema.check.validate import validate

    folder, records = generated
    for r in records:
        for profile in PROFILES:
            report = validate(folder / r["file"], profile)
            verdict = "accept" if report.ok else "reject"
            assert verdict == r["expected"][profile], (r["file"], profile, [str(x) for x in report.findings][:3])


def test_lenient_rejects_are_refused_by_the_reader_or_fail_on_tensor_access(generated):
    """Without the validator: what 'lenient: reject' means for a plain open()."""
    folder, records = generated
    for r in records:
        if r["expected"]["lenient"] != "reject":
            continue
        try:
            with gguf_schema.open(folder / r["file"]) as f, pytest.raises(gguf_schema.GGUFError):
                for t in f.tensor_list:
                    t.data
        except gguf_schema.GGUFError:
            pass


def test_architecture_models_have_the_keys_the_spec_requires(generated):
    folder, _ = generated
    for arch, keys in ARCHITECTURES.items():
        with gguf_schema.open(folder / f"arch_{arch}.gguf") as f:
            assert f.metadata["general.architecture"] == arch
            for suffix, vt, _value in keys:
                field = f.fields[f"{arch}.{suffix}"]
                assert field.type == vt
            n_vocab = len(f.metadata["tokenizer.ggml.tokens"])
            embd = f.tensors.get("token_embd.weight") or f.tensors["dec.token_embd.weight"]
            assert embd.shape[0] == n_vocab
            assert any(t.type == GGMLType.Q8_0 for t in f.tensor_list)
            assert f.metadata["general.quantization_version"] == 2


def test_quantized_fixture_data_dequantizes_to_finite_values(generated):
    from gguf_schema.tensors import dequantize

    folder, _ = generated
    with gguf_schema.open(folder / "types_all.gguf") as f:
        assert {t.type for t in f.tensor_list} == {t for t in GGMLType if not t.removed}
        for t in f.tensor_list:
            values = dequantize(t.raw(), t.type, t.shape, f.byte_order)
            assert values.shape == t.shape and np.isfinite(values).all(), t.type.name


@pytest.mark.parametrize("t", [t for t in GGMLType if t.quantized], ids=lambda t: t.name)
def test_random_blocks_are_valid_in_both_byte_orders(t):
    from gguf_schema.tensors import byteswap, dequantize

    shape = (4 * t.block_size,)
    little = random_blocks(t, 4, np.random.default_rng(1), "little")
    a = dequantize(little, t, shape, "little")
    assert np.isfinite(a).all()
    assert np.array_equal(dequantize(byteswap(little, t, "little", "big"), t, shape, "big"), a)
    big = random_blocks(t, 4, np.random.default_rng(2), "big")  # scales written big-endian: finite too
    assert np.isfinite(dequantize(big, t, shape, "big")).all()


def test_edge_cases_hold_what_they_say(generated):
    folder, _ = generated
    with gguf_schema.open(folder / "edge_alignment_1.gguf") as f:
        assert f.alignment == 1 and [t.stored_offset for t in f.tensor_list] == [0, 3, 13]
    with gguf_schema.open(folder / "edge_ndims_0.gguf") as f:
        assert f.tensor_list[0].dims == () and f.tensor_list[0].data.tolist() == 1.5
    with gguf_schema.open(folder / "edge_zero_size_dims.gguf") as f:
        assert [t.n_elements for t in f.tensor_list] == [0, 0, 0, 4]
    with gguf_schema.open(folder / "edge_name_63.gguf") as f, gguf_schema.open(folder / "edge_name_64.gguf") as g:
        assert [len(t.name) for t in f.tensor_list + g.tensor_list] == [63, 64]
    with gguf_schema.open(folder / "edge_vocab_300k.gguf") as f:
        assert len(f.metadata["tokenizer.ggml.tokens"]) == len(f.metadata["tokenizer.ggml.scores"]) == 300_000
    with gguf_schema.open(folder / "edge_no_tensors.gguf") as f:
        assert f.tensor_list == [] and f.metadata["general.architecture"] == "llama"
    with gguf_schema.open(folder / "edge_empty.gguf") as f:
        assert len(f.fields) == 0 and f.tensor_list == []
    with gguf_schema.open(folder / "edge_big_endian.gguf") as f:
        assert f.byte_order == "big"
    with gguf_schema.open(folder / "edge_bool_byte_2.gguf") as f:
        assert int(f.fields["x.flag"].value) == 2


def test_same_seed_same_bytes_other_seed_other_data():
    a = {f.name: f.data for f in fixture_files(kinds=("types",), seed=5)}
    b = {f.name: f.data for f in fixture_files(kinds=("types",), seed=5)}
    c = {f.name: f.data for f in fixture_files(kinds=("types",), seed=6)}
    assert a == b
    assert a["type_Q4_K.gguf"] != c["type_Q4_K.gguf"] and len(a["type_Q4_K.gguf"]) == len(c["type_Q4_K.gguf"])


def test_generate_command_writes_only_the_chosen_families(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gguf_schema",
            "generate",
            str(tmp_path / "g"),
            "--only",
            "types",
            "edge",
            "--seed",
            "3",
            "--small",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "manifest.jsonl" in out.stdout
    kinds = {r["kind"] for r in _manifest(tmp_path / "g")}
    assert kinds == {"types", "edge"}
    assert (tmp_path / "g" / "edge_vocab_30k.gguf").is_file()


def test_generate_command_rejects_an_unknown_family(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "gguf_schema", "generate", str(tmp_path), "--only", "bogus"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "invalid choice" in out.stderr
