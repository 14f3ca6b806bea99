"""Many presets in one pass (tools/onepass.requantize_many, `quantize IN OUTDIR -t A -t B ...`): every output
byte for byte the file a single run writes for its preset (the single runs are checked against llama-quantize's
own files in tests/test_presets.py), for presets drawn at random on every generated model, with an importance
matrix, options and --keep-split; the source read once (bytes counted by a real HTTP server); an interrupted
run leaves no output under its final name and the old files as they were."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import pytest

import gguf_schema
from gguf_schema.errors import GGUFBuildError
from gguf_schema.testing.quant_models import QUANT_MODELS, quant_model, save_imatrix, save_quant_model
from gguf_schema.tools.onepass import output_stem, requantize_many
from gguf_schema.tools.quantplan import PRESETS
from gguf_schema.tools.requantize import requantize
from gguf_schema.tools.split import split

from .helpers import run_cli


def sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("onepass")
    out = {}
    for kind in QUANT_MODELS:
        src, im = d / f"{kind}.gguf", d / f"{kind}.imatrix.gguf"
        save_quant_model(src, kind)
        save_imatrix(im, quant_model(kind)[1])
        out[kind] = (src, im)
    return out


@pytest.mark.parametrize("kind", QUANT_MODELS)
def test_every_output_is_the_single_run_file(models, tmp_path, kind):
    """Five presets drawn at random (a seed per model), with the importance matrix: each output equals the
    file requantize writes for that preset alone."""
    src, im = models[kind]
    rng = random.Random(f"onepass-{kind}")
    names = rng.sample([p.name for p in PRESETS], 5)
    options = {"imatrix": str(im), "allow_requantize": True}
    if rng.random() < 0.5:
        options["tensor_types"] = ["ffn_down=q6_k"]
    job = requantize_many(src, tmp_path / "out", names, threads=1, measure=True, **options)
    assert [r.preset for r in job.results] == names
    for r in job.results:
        assert r.paths == [str(tmp_path / "out" / f"{kind}-{r.preset}.gguf")]
        single = tmp_path / f"single-{r.preset}.gguf"
        alone = requantize(src, single, r.preset, threads=1, measure=True, **options)
        assert sha(r.paths[0]) == sha(single), (kind, r.preset)
        # the same plan and the same measures (RMS errors, summed over other chunks of rows: to rounding)
        measures = ("rms_error", "rms_input", "relative_error")
        for a, b in zip(r.tensors, alone.tensors, strict=True):
            da, db = a.to_dict(), b.to_dict()
            assert {k: v for k, v in da.items() if k not in measures} == {
                k: v for k, v in db.items() if k not in measures
            }
            for k in measures:
                assert (da[k] is None) == (db[k] is None) and (da[k] is None or da[k] == pytest.approx(db[k], rel=1e-9))
        assert (r.notes, r.metadata, r.file_type) == (alone.notes, alone.metadata, alone.file_type)
    assert sorted(os.listdir(tmp_path / "out")) == sorted(f"{kind}-{n}.gguf" for n in names)
    # each tensor read once: the tensor data of the source, and no more
    with gguf_schema.open(src) as f:
        assert job.source_bytes == sum(t.nbytes for t in f.tensor_list)
    assert job.results_computed < job.results_written


def test_keep_split_outputs_are_the_single_run_shards(models, tmp_path):
    src, im = models["qwen2-odd"]
    shards = split(src, str(tmp_path / "in"), max_tensors=200)
    assert len(shards) > 1
    names = ["Q4_K_M", "Q3_K_S", "F16"]
    job = requantize_many(shards[0], tmp_path / "out", names, keep_split=True, imatrix=str(im), threads=1)
    for r in job.results:
        single = requantize(shards[0], tmp_path / f"single-{r.preset}", r.preset, keep_split=True, imatrix=str(im))
        assert len(r.paths) == len(single.paths) == len(shards)
        assert os.path.basename(r.paths[0]) == f"in-{r.preset}-00001-of-{len(shards):05d}.gguf"
        assert [sha(p) for p in r.paths] == [sha(p) for p in single.paths]


def test_source_read_once_over_http(models, tmp_path):
    """Bytes a real HTTP server sent: one pass over four presets reads the file about once; four single runs
    read it four times."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from .http_server import FileServer

    src, _ = models["llama-gqa"]
    size = src.stat().st_size
    names = ["Q4_K_M", "Q5_K_S", "Q8_0", "Q6_K"]
    with FileServer() as server:
        url = server.add("llama.gguf", src)
        requantize_many(url, tmp_path / "out", names, threads=1)
        once = server.bytes_sent("llama.gguf")
        server.reset()
        for n in names:
            requantize(url, tmp_path / f"single-{n}.gguf", n, threads=1)
        singles = server.bytes_sent("llama.gguf")
    assert size * 0.9 < once < size * 1.5, (once, size)
    assert singles > 3.5 * once, (singles, once)
    for n in names:
        assert sha(tmp_path / "out" / f"llama-{n}.gguf") == sha(tmp_path / f"single-{n}.gguf")


class Stop(Exception):
    pass


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, Stop])
def test_interrupted_run_leaves_no_output_and_the_old_files(models, tmp_path, interrupt):
    src, _ = models["gemma3"]
    out = tmp_path / "out"
    out.mkdir()
    old = out / "gemma3-Q8_0.gguf"
    old.write_bytes(b"the old file")
    seen = []

    def progress(n: int) -> None:
        seen.append(n)
        if sum(seen) > 200_000:  # well into the tensor data of every output
            raise interrupt()

    with pytest.raises(interrupt):
        requantize_many(src, out, ["Q4_K_M", "Q8_0", "Q2_K"], overwrite=True, progress=progress, threads=1)
    assert sorted(os.listdir(out)) == ["gemma3-Q8_0.gguf"]  # no new output, no temporary left
    assert old.read_bytes() == b"the old file"


def test_refusals_write_nothing(models, tmp_path):
    src, _ = models["llama-gqa"]
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="twice"):
        requantize_many(src, out, ["Q4_K_M", "q4_k_m"])
    with pytest.raises(GGUFBuildError, match="needs an importance matrix"):  # one preset refused: no output at all
        requantize_many(src, out, ["Q4_K_M", "IQ2_XS"])
    assert not out.exists()
    out.mkdir()
    (out / "llama-gqa-Q8_0.gguf").write_bytes(b"x")
    with pytest.raises(GGUFBuildError, match="exist already"):
        requantize_many(src, out, ["Q4_K_M", "Q8_0"])
    assert os.listdir(out) == ["llama-gqa-Q8_0.gguf"]


def test_an_output_folder_that_is_a_file_is_refused(models, tmp_path):
    src, _ = models["llama-gqa"]
    (tmp_path / "f").write_bytes(b"x")
    r = run_cli("quantize", str(src), str(tmp_path / "f"), "-t", "Q4_0", "-t", "Q8_0")
    assert r.returncode != 0 and b"Traceback" not in r.stderr and str(tmp_path / "f").encode() in r.stderr
    assert (tmp_path / "f").read_bytes() == b"x"


def test_output_stem():
    assert output_stem("/m/model-00001-of-00004.gguf") == "model"
    assert output_stem("hf://org/repo/gemma-f32.gguf") == "gemma-f32"
    assert output_stem("plain") == "plain"


def test_cli_dry_run_json_shows_plans_and_sharing(models, tmp_path):
    src, im = models["qwen3moe"]
    names = ["Q4_K_M", "Q5_K_M", "IQ2_XS"]
    r = run_cli(
        "quantize",
        str(src),
        str(tmp_path / "o"),
        *[x for n in names for x in ("-t", n)],
        "--imatrix",
        str(im),
        "--dry-run",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dry_run"] and not (tmp_path / "o").exists()
    plans = {o["preset"]: {t["name"]: t for t in o["tensors"]} for o in doc["outputs"]}
    assert list(plans) == names
    computed = computed_bytes = 0
    for entry in doc["shared"]:
        outputs = [p for g in entry["results"] for p in g["outputs"]]
        assert sorted(outputs) == sorted(names)  # each output takes exactly one result of each tensor
        for g in entry["results"]:
            for p in g["outputs"]:
                t = plans[p][entry["name"]]
                want = "copy" if not t["requantized"] else t["to"] + ("+imatrix" if t["imatrix"] else "")
                assert g["result"] == want
                assert g["bytes"] == t["bytes"]
        computed += len(entry["results"])
        computed_bytes += sum(g["bytes"] for g in entry["results"])
    assert computed == doc["results_computed"] < doc["results_written"] == 3 * len(doc["shared"])
    written = sum(t["bytes"] for o in doc["outputs"] for t in o["tensors"])
    assert computed_bytes == doc["bytes_computed"] < doc["bytes_written"] == written
    # and for real: the files, and the table's last line
    r = run_cli(
        "quantize",
        str(src),
        str(tmp_path / "o"),
        *[x for n in names for x in ("-t", n)],
        "--imatrix",
        str(im),
        "--threads",
        "1",
    )
    assert r.returncode == 0, r.stderr
    assert b"3 presets in one pass" in r.stdout
    assert sorted(os.listdir(tmp_path / "o")) == sorted(f"qwen3moe-{n}.gguf" for n in names)
    assert r.stderr.count(b"gguf-schema: wrote ") == 3
