"""The compute buffers and repacked weights of the estimate, against llama.cpp's own figures.

``tests/data/llama_buffers/`` holds what llama.cpp logged when it created contexts for real and
generated models (``benchmarks/llama_buffers.py``; its SOURCES.md says which llama.cpp and how):
every buffer it allocated on the CPU and, for the offload settings, on an RPC device it treats as a
GPU. The estimate of the same model and settings must be within 5% of each (the compute buffer,
the repacked weights, the CPU total; the offload device's compute buffer and total). The allocator
emulation itself is checked against a brute-force model of memory over random sequences.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gguf_schema
from gguf_schema.model import Tensor
from gguf_schema.tools.compute_graph import ComputeShapes, _Allocator, _Builder, compute_buffer
from gguf_schema.tools.estimate import estimate

DATA = Path(__file__).parent / "data" / "llama_buffers"
MIB = 2**20


def _load() -> tuple[dict[str, Any], dict[str, Any]]:
    models = json.loads((DATA / "models.json").read_text())
    records = json.loads((DATA / "records.json").read_text())
    return models, records


MODELS, RECORDS = _load()


class _Model:
    """A model as the estimate reads it: metadata and tensor infos (no tensor data), from a record."""

    def __init__(self, desc: dict[str, Any]):
        meta = dict(desc["metadata"])
        arch = meta["general.architecture"]
        n_vocab = meta.pop("tokenizer.ggml.tokens#len", None)
        if n_vocab:
            meta[f"{arch}.vocab_size"] = n_vocab
        self.metadata = meta
        self.tensor_list = [
            Tensor(
                name,
                int(gguf_schema.GGMLType[type_name]),
                tuple(dims),
                0,
                data_offset=0,
                byte_order="little",
                storage=None,
                info_offset=0,
            )
            for name, type_name, dims in desc["tensors"]
        ]


def _isa(flags: list[str]) -> str:
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "none"


def _cpu(rec: dict[str, Any], kind: str) -> float:
    """MiB of the CPU buffers of ``kind`` llama.cpp logged (host buffer types: CPU, CPU_Mapped, CPU_REPACK)."""
    return sum(b["mib"] for b in rec["buffers"] if b["kind"] == kind and b["buffer"].startswith("CPU"))


def _ids() -> list[str]:
    return [f"{r['model']}-{'-'.join(f'{k}={v}' for k, v in r['settings'].items())}" for r in RECORDS["records"]]


@pytest.mark.parametrize("rec", RECORDS["records"], ids=_ids())
def test_cpu_buffers_within_5_percent_of_llama_cpp(rec: dict[str, Any]) -> None:
    e = estimate(_Model(MODELS[rec["model"]]), cpu_isa=_isa(RECORDS["info"]["cpu_flags"]), **rec["settings"])
    got = rec["llama_cpp"]
    assert e.settings["n_ubatch"] == got["n_ubatch"] and e.settings["n_batch"] == got["n_batch"]
    compute = got["compute_mib_4"].get("CPU", _cpu(got, "compute"))
    assert e.compute_on("CPU") / MIB == pytest.approx(compute, rel=0.05, abs=0.01)
    assert e.repacked / MIB == pytest.approx(_repacked(got), rel=0.05, abs=0.01)
    total = sum(b["mib"] for b in got["buffers"] if b["buffer"].startswith("CPU"))
    assert e.total_cpu / MIB == pytest.approx(total, rel=0.05)
    if rec["settings"].get("gpu_layers"):  # the offload device: an RPC device llama.cpp treats as a GPU
        device = sum(v for k, v in got["compute_mib_4"].items() if not k.startswith("CPU"))
        assert e.compute_on("GPU") / MIB == pytest.approx(device, rel=0.05)
        device_total = sum(b["mib"] for b in got["buffers"] if not b["buffer"].startswith("CPU"))
        assert e.total_gpu / MIB == pytest.approx(device_total, rel=0.05)
    else:
        assert e.compute_on("GPU") == e.total_gpu == 0


def _repacked(got: dict[str, Any]) -> float:
    return sum(b["mib"] for b in got["buffers"] if b["buffer"] == "CPU_REPACK")


def test_the_records_cover_the_cases_the_issue_names() -> None:
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in RECORDS["records"]:
        by_model.setdefault(r["model"], []).append(r)
    assert {"gemma-3-270m", "llama", "llama-moe", "gemma2", "phi3"} <= set(by_model)
    kinds = {(s.get("flash_attn", True), s.get("parallel", 1) > 1) for r in RECORDS["records"] for s in [r["settings"]]}
    assert kinds == {(True, False), (False, False), (True, True), (False, True)}
    assert any(_repacked(r["llama_cpp"]) > 1 for r in RECORDS["records"])  # some repacking
    assert {r["settings"].get("gpu_layers", 0) for r in RECORDS["records"]} >= {0, 1, 3, -1}  # offload too


def test_gemma_270m_issue_figures() -> None:
    """The figures issue 39 quotes: ctx 2048, ubatch 512 -> compute 514.50 MiB; ubatch 128 -> 128.63 MiB."""
    model = _Model(MODELS["gemma-3-270m"])
    assert round(estimate(model, ctx=2048).compute_on("CPU") / MIB, 2) == 514.50
    assert round(estimate(model, ctx=2048, ubatch=128).compute_on("CPU") / MIB, 2) == 128.63
    assert round(estimate(model, ctx=2048, cpu_isa="avx2").repacked / MIB, 2) == 12.66
    assert estimate(model, ctx=2048, cpu_isa="none").repacked == 0


def test_compute_grows_with_ubatch_and_attention_without_flash_attention() -> None:
    model = _Model(MODELS["llama"])
    small = estimate(model, ctx=16384, ubatch=64).compute_on("CPU")
    big = estimate(model, ctx=16384, ubatch=512).compute_on("CPU")
    no_fa = estimate(model, ctx=16384, ubatch=512, flash_attn=False).compute_on("CPU")
    n_head = model.metadata["llama.attention.head_count"]
    assert small < big < no_fa
    # without flash attention, the scores (n_kv x n_ubatch x n_head floats) and the F32 mask live at once
    assert no_fa >= 16384 * 512 * n_head * 4 + 16384 * 512 * 4


def test_offloading_moves_the_compute_buffer() -> None:
    model = _Model(MODELS["gemma-3-270m"])
    cpu = estimate(model, ctx=2048)
    gpu = estimate(model, ctx=2048, gpu_layers=-1)
    assert set(cpu.compute) == {"CPU"} and set(gpu.compute) == {"CPU", "GPU"}
    assert gpu.compute_on("GPU") >= 262144 * 512 * 4 and gpu.compute_on("CPU") < cpu.compute_on("CPU") / 10
    assert gpu.repacked == 0  # nothing left on the CPU to repack but the input embeddings
    assert any("not on a GPU" in n for n in gpu.notes)


# --------------------------------------------------------------------------- the allocator


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5000), st.integers(0, 10**6)), min_size=1, max_size=60))
def test_allocator_never_overlaps_and_reports_its_peak(ops: list[tuple[bool, int, int]]) -> None:
    """Random allocations and frees: live blocks never overlap, and the peak is the highest end ever used."""
    a = _Allocator()
    live: list[tuple[int, int]] = []
    highest = 0
    for is_alloc, size, pick in ops:
        if is_alloc or not live:
            addr = a.alloc(size, "t")
            span = -(-size // 32) * 32
            assert addr % 32 == 0
            for start, n in live:
                assert addr + span <= start or start + n <= addr
            live.append((addr, span))
            highest = max(highest, addr + span)
        else:
            start, n = live.pop(pick % len(live))
            a.free(start, n)
        assert a.max_size == highest
        free_total = sum(b[1] for b in a.blocks[:-1])
        assert free_total + sum(n for _, n in live) == a.blocks[-1][0]  # every byte below the tail is live or free


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4).map(lambda x: 64 * x),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(100, 50000),
    st.sampled_from([1, 7, 64, 512]),
    st.booleans(),
    st.sampled_from(["llama", "gemma3", "gemma2"]),
)
def test_compute_buffer_bounds(
    n_embd: int, n_layer: int, n_kv_head: int, n_vocab: int, n_tokens: int, fa: bool, family: str
) -> None:
    """The peak holds at least the logits and the input embeddings, and at most every tensor of the graph at once."""
    s = ComputeShapes(
        n_embd=n_embd,
        n_ff=2 * n_embd,
        n_vocab=n_vocab,
        n_head=[4] * n_layer,
        n_head_kv=[n_kv_head] * n_layer,
        head_k=64,
        head_v=64,
        n_kv=[256] * n_layer,
        n_tokens=n_tokens,
        n_seqs=1,
        flash_attn=fa,
        family=family,
        v_trans_width=64 * n_kv_head,
    )
    r = compute_buffer(s)
    logits = n_vocab * n_tokens * 4
    assert r.peak["CPU"] >= logits + n_embd * n_tokens * 4
    g = _Builder(s).build()
    every = sum(-(-t.nbytes // 32) * 32 for t in g.leafs + g.nodes if t.view_src is None and "x" not in t.flags)
    assert r.peak["CPU"] <= every
