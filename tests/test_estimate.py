"""Memory estimates: exact bytes worked out by hand for generated models, and gemma-3-270m.

The gemma-3-270m figures below are also what llama.cpp itself reports when it loads the file
(benchmarks/bench_estimate.py, results/estimate.md); here they are pinned from the arithmetic.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gguf_schema
from gguf_schema import GGUFArray, GGUFFormatError, GGUFKeyError, RawTensor, ValueType
from gguf_schema.cli import main
from gguf_schema.shards import open_split
from gguf_schema.tools.estimate import CACHE_TYPES, NOT_ESTIMATED, estimate
from gguf_schema.tools.split import split

MIB = 2**20


def model(
    arch: str = "llama",
    *,
    layers: Any = 4,
    embd: Any = 512,
    heads: Any = 8,
    kv: Any = 2,
    ctx: int | None = 4096,
    tensors: dict | None = None,
    vocab: int | None = None,
    **keys: Any,
) -> gguf_schema.GGUFFile:
    """An open in-memory model with the standard keys of ``arch`` (None leaves a key out)."""
    meta: dict[str, Any] = {"general.architecture": arch}
    std: dict[str, Any] = {
        "block_count": layers,
        "context_length": ctx,
        "embedding_length": embd,
        "attention.head_count": heads,
        "attention.head_count_kv": kv,
    }
    std.update(keys)
    for suffix, value in std.items():
        if value is None:
            continue
        key = f"{arch}.{suffix.replace('__', '.')}"
        if isinstance(value, list):
            meta[key] = GGUFArray(ValueType.INT32, np.array(value, np.int32)) if isinstance(value[0], int) else value
        else:
            meta[key] = value
    if vocab:
        meta["tokenizer.ggml.tokens"] = [f"t{i}" for i in range(vocab)]
    buf = io.BytesIO()
    gguf_schema.save(buf, meta, tensors or {})
    return gguf_schema.open(buf.getvalue())


# --------------------------------------------------------------------------- KV cache


def test_gqa_kv_cache_is_cells_times_row_size() -> None:
    # head size 512 / 8 = 64, 2 KV heads: 128 values per cell; F16 -> 256 bytes; 4096 cells, 4 layers
    e = estimate(model())
    assert e.settings["n_ctx"] == 4096 and e.settings["n_ctx_seq"] == 4096 and e.settings["n_stream"] == 1
    assert [(x.layer, x.kind, x.cells, x.n_embd_k_gqa, x.k_bytes, x.v_bytes) for x in e.kv_layers] == [
        (il, "full", 4096, 128, 4096 * 256, 4096 * 256) for il in range(4)
    ]
    assert e.kv_k_bytes == e.kv_v_bytes == 4 * MIB and e.kv_bytes == 8 * MIB
    mha = estimate(model(kv=None))  # head_count_kv defaults to head_count: 4x the GQA cache
    assert mha.kv_k_bytes == 16 * MIB


def test_context_is_padded_to_256_and_split_over_sequences() -> None:
    f = model()
    assert estimate(f, ctx=1000).kv_layers[0].cells == 1024
    # 3 sequences: n_ctx_seq = pad256(1024 / 3 = 341) = 512 per stream, 3 streams, n_ctx becomes 1536
    e = estimate(f, ctx=1000, parallel=3)
    assert (e.settings["n_ctx"], e.settings["n_ctx_seq"], e.settings["n_stream"]) == (1536, 512, 3)
    assert e.kv_k_bytes == 4 * 512 * 3 * 256
    u = estimate(f, ctx=2048, parallel=2, kv_unified=True)
    assert (u.settings["n_ctx_seq"], u.settings["n_stream"], u.kv_k_bytes) == (2048, 1, 4 * 2048 * 256)
    b = estimate(f, ctx=300, batch=1024, ubatch=2048)  # the batch is bounded by the context before it is padded
    assert (b.settings["n_ctx"], b.settings["n_batch"], b.settings["n_ubatch"]) == (512, 300, 300)
    b = estimate(f, ctx=4096, batch=1024, ubatch=2048)
    assert (b.settings["n_batch"], b.settings["n_ubatch"]) == (1024, 1024)


def test_key_and_value_lengths_override_the_head_size() -> None:
    e = estimate(model(embd=512, heads=8, kv=2, attention__key_length=128, attention__value_length=96), ctx=256)
    assert (e.kv_layers[0].n_embd_k_gqa, e.kv_layers[0].n_embd_v_gqa) == (256, 192)
    assert (e.kv_k_bytes, e.kv_v_bytes) == (4 * 256 * 256 * 2, 4 * 256 * 192 * 2)


@pytest.mark.parametrize(
    ("cache_type", "row_bytes"),
    [
        ("f32", 512),
        ("f16", 256),
        ("bf16", 256),
        ("q8_0", 4 * 34),
        ("q4_0", 4 * 18),
        ("q4_1", 4 * 20),
        ("iq4_nl", 4 * 18),
        ("q5_0", 4 * 22),
        ("q5_1", 4 * 24),
    ],
)
def test_quantized_cache_types_take_their_block_geometry(cache_type: str, row_bytes: int) -> None:
    # 128 values per cell = 4 blocks of 32
    e = estimate(model(), ctx=1024, cache_type_k=cache_type, cache_type_v=cache_type)
    assert e.kv_k_bytes == e.kv_v_bytes == 4 * 1024 * row_bytes
    assert e.settings["cache_type_k"] == cache_type.upper()


def test_a_row_that_is_not_whole_blocks_is_refused_for_a_quantized_cache() -> None:
    f = model(embd=320, heads=8, kv=2)  # head size 40: 80 values per cell
    assert estimate(f, ctx=256).kv_k_bytes == 4 * 256 * 160
    with pytest.raises(ValueError, match="q8_0 stores 32 values per block, but this model's K rows have 80 values"):
        estimate(f, cache_type_k="q8_0")


def test_per_layer_head_count_kv() -> None:
    f = model(heads=8, kv=[8, 2, 0, 4], attention__key_length=64, attention__value_length=64)
    e = estimate(f, ctx=512)
    assert [x.n_embd_k_gqa for x in e.kv_layers] == [512, 128, 0, 256]
    assert [x.k_bytes for x in e.kv_layers] == [512 * 512 * 2, 512 * 128 * 2, 0, 512 * 256 * 2]
    assert e.kv_v_bytes == e.kv_k_bytes
    # without flash attention llama.cpp transposes V and pads every layer's rows to the widest
    no_fa = estimate(f, ctx=512, flash_attn=False)
    assert [x.n_embd_v_gqa for x in no_fa.kv_layers] == [512] * 4
    assert no_fa.kv_v_bytes == 4 * 512 * 512 * 2 and no_fa.kv_k_bytes == e.kv_k_bytes
    assert "padded to the widest, 512" in dict(no_fa.formulas)["kv v"]


def test_quantized_v_cache_needs_flash_attention() -> None:
    with pytest.raises(ValueError, match="quantized V cache .Q8_0. needs flash attention"):
        estimate(model(), cache_type_v="q8_0", flash_attn=False)
    assert estimate(model(), cache_type_k="q8_0", flash_attn=False).kv_k_bytes == 4 * 4096 * 136


# --------------------------------------------------------------------------- sliding window


def test_gemma3_swa_pattern_and_cache_size() -> None:
    # 12 layers, pattern 6: layers 5 and 11 attend to everything; the others to a window of 256
    f = model(
        "gemma3",
        layers=12,
        embd=256,
        heads=4,
        kv=1,
        ctx=8192,
        attention__sliding_window=256,
        attention__key_length=64,
        attention__value_length=64,
    )
    e = estimate(f)
    assert [x.layer for x in e.kv_layers if x.kind == "full"] == [5, 11]
    swa = [x for x in e.kv_layers if x.kind == "swa"]
    assert len(swa) == 10 and {x.cells for x in swa} == {768}  # pad256(min(8192, 256 + ubatch 512))
    assert e.kv_k_bytes == 2 * 8192 * 128 + 10 * 768 * 128
    assert estimate(f, ubatch=100).kv_layers[0].cells == 512  # pad256(256 + 100)
    assert estimate(f, swa_full=True).kv_layers[0].cells == 8192
    assert estimate(f, parallel=2, kv_unified=True).kv_layers[0].cells == 1024  # pad256(256 x 2 + 512)
    assert estimate(f, parallel=2).kv_layers[0].cells == 768  # per stream: pad256(256 + 512)
    assert estimate(f, ctx=512).kv_layers[0].cells == 512  # never more than n_ctx_seq before padding


def test_gemma3_without_a_window_key_has_no_swa() -> None:
    e = estimate(model("gemma3", layers=6, embd=256, heads=4, kv=1), ctx=1024)
    assert {x.kind for x in e.kv_layers} == {"full"}


def test_gemma2_window_defaults_to_4096_and_alternates() -> None:
    e = estimate(model("gemma2", layers=4, embd=256, heads=4, kv=2, ctx=16384))
    assert [(x.kind, x.cells) for x in e.kv_layers] == [("swa", 4608), ("full", 16384), ("swa", 4608), ("full", 16384)]


def test_swa_pattern_array_and_period_keys() -> None:
    flags = GGUFArray(ValueType.BOOL, np.array([True, False, False, True], np.bool_))
    e = estimate(
        model(
            "gemma3",
            layers=4,
            embd=256,
            heads=4,
            kv=1,
            attention__sliding_window=128,
            attention__sliding_window_pattern=flags,
        ),
        ctx=4096,
    )
    assert [x.kind for x in e.kv_layers] == ["swa", "full", "full", "swa"]
    e = estimate(
        model(
            "gemma3",
            layers=4,
            embd=256,
            heads=4,
            kv=1,
            attention__sliding_window=128,
            attention__sliding_window_pattern=2,
        ),
        ctx=4096,
    )
    assert [x.kind for x in e.kv_layers] == ["swa", "full", "swa", "full"]


def test_a_window_key_llama_cpp_ignores_is_noted_not_applied() -> None:
    e = estimate(model("llama", attention__sliding_window=1024), ctx=4096)
    assert {x.cells for x in e.kv_layers} == {4096}
    assert any("llama.attention.sliding_window = 1024" in n for n in e.notes)


# --------------------------------------------------------------------------- weights by device


def _tensors(output: bool = True) -> dict:
    t = {
        "token_embd.weight": np.zeros((100, 64), np.float32),  # 25,600 bytes
        "output_norm.weight": np.zeros(64, np.float32),
    }  # 256
    for il in range(4):
        t[f"blk.{il}.attn_q.weight"] = RawTensor(gguf_schema.GGMLType.Q8_0, (64, 64), bytes(64 * 2 * 34))  # 4,352
        t[f"blk.{il}.attn_norm.weight"] = np.zeros(64, np.float32)  # 256
    if output:
        t["output.weight"] = np.zeros((100, 64), np.float16)  # 12,800
    return t


def test_gpu_layers_offload_the_output_first_then_the_last_layers() -> None:
    f = model(layers=4, embd=64, heads=4, kv=4, tensors=_tensors())
    layer = 4352 + 256
    cases = {
        0: (25600 + 4 * layer + 13056, 0),
        1: (25600 + 4 * layer, 13056),
        3: (25600 + 2 * layer, 2 * layer + 13056),
        5: (25600, 4 * layer + 13056),
        99: (25600, 4 * layer + 13056),
        -1: (25600, 4 * layer + 13056),
    }
    for n, (cpu, gpu) in cases.items():
        e = estimate(f, ctx=256, gpu_layers=n)
        assert (e.weights_cpu, e.weights_gpu) == (cpu, gpu), n
    e = estimate(f, ctx=256, gpu_layers=3)
    assert [(g.name, g.device, g.bytes, g.tensors) for g in e.weights] == [
        ("input", "CPU", 25600, 1),
        ("layer 0", "CPU", layer, 2),
        ("layer 1", "CPU", layer, 2),
        ("layer 2", "GPU", layer, 2),
        ("layer 3", "GPU", layer, 2),
        ("output", "GPU", 13056, 2),
    ]
    # the KV cache of a layer lives with the layer
    assert [x.device for x in e.kv_layers] == ["CPU", "CPU", "GPU", "GPU"]
    kv_layer = 256 * 64 * 2
    assert (e.cache_on("CPU"), e.cache_on("GPU")) == (2 * 2 * kv_layer, 2 * 2 * kv_layer)
    assert e.total_gpu == e.weights_gpu + 2 * 2 * kv_layer
    assert e.total_cpu == e.weights_cpu + 2 * 2 * kv_layer + e.output_buffer


def test_tied_output_puts_a_copy_of_the_embeddings_on_the_gpu() -> None:
    f = model(layers=4, embd=64, heads=4, kv=4, tensors=_tensors(output=False))
    assert estimate(f, ctx=256).weights_gpu == 0
    e = estimate(f, ctx=256, gpu_layers=1)
    assert [(g.name, g.device, g.bytes) for g in e.weights][-2:] == [
        ("output", "GPU", 256),
        ("output (tied)", "GPU", 25600),
    ]
    assert e.weights_cpu == 25600 + 4 * (4352 + 256)
    assert any("second copy on the GPU" in n for n in e.notes)


def test_a_split_model_is_estimated_as_one(tmp_path: Path) -> None:
    src = tmp_path / "m.gguf"
    meta = {
        "general.architecture": "llama",
        "llama.block_count": 4,
        "llama.context_length": 512,
        "llama.embedding_length": 64,
        "llama.attention.head_count": 4,
    }
    gguf_schema.save(src, meta, _tensors())
    shards = split(src, str(tmp_path / "m"), max_tensors=4)
    assert len(shards) == 3
    with gguf_schema.open(src) as one, open_split(shards[0]) as many:
        a, b = estimate(one, gpu_layers=2), estimate(many, gpu_layers=2)
        assert (
            a.weights == b.weights
            and a.kv_layers == b.kv_layers
            and a.weights_cpu + a.weights_gpu == 25600 + 4 * 4608 + 13056
        )


# --------------------------------------------------------------------------- other architectures


def test_mamba_recurrent_state() -> None:
    f = model(
        "mamba",
        layers=3,
        embd=256,
        heads=None,
        kv=None,
        ssm__conv_kernel=4,
        ssm__inner_size=512,
        ssm__state_size=16,
        ssm__time_step_rank=16,
    )
    e = estimate(f, parallel=2, ctx=1024)
    # conv: (4 - 1) x 512 = 1536 floats; ssm: 16 x 512 = 8192 floats; one row per sequence
    assert [(x.rows, x.n_embd_r, x.n_embd_s, x.r_bytes, x.s_bytes) for x in e.recurrent_layers] == [
        (2, 1536, 8192, 4 * 1536 * 2, 4 * 8192 * 2)
    ] * 3
    assert e.kv_layers == () and e.recurrent_bytes == 3 * 4 * (1536 + 8192) * 2


def test_mamba2_needs_its_group_count() -> None:
    keys = dict(heads=None, kv=None, ssm__conv_kernel=4, ssm__inner_size=512, ssm__state_size=64)
    with pytest.raises(GGUFKeyError, match="'mamba2.ssm.group_count' is missing"):
        estimate(model("mamba2", layers=2, **keys))
    e = estimate(model("mamba2", layers=2, ssm__group_count=2, **keys))
    assert e.recurrent_layers[0].n_embd_r == 3 * (512 + 2 * 2 * 64) and e.recurrent_layers[0].n_embd_s == 64 * 512


def test_rwkv_state() -> None:
    e = estimate(model("rwkv7", layers=2, embd=256, heads=None, kv=None, wkv__head_size=64))
    assert [(x.n_embd_r, x.n_embd_s) for x in e.recurrent_layers] == [(2 * 256, 256 * 64)] * 2


def test_cacheless_hybrid_and_unknown_architectures() -> None:
    bert = estimate(model("bert", layers=2), ctx=512)
    assert bert.kv_layers == () and "without a KV cache" in dict(bert.formulas)["kv cache"]
    hybrid = estimate(model("jamba", layers=2), ctx=512)
    assert hybrid.kv_layers == () and any("'jamba'" in x for x in hybrid.not_estimated)
    odd = estimate(model("newarch", layers=2), ctx=512)
    assert odd.kv_k_bytes == 2 * 512 * 256 and any("'newarch' is not in this module's list" in n for n in odd.notes)
    # compute buffers: not for a graph not modelled; the llama graph, said so, for an unknown decoder
    assert bert.compute == hybrid.compute == {} and any("compute buffers" in x for x in hybrid.not_estimated)
    odd = estimate(model("newarch", layers=2, vocab=100), ctx=512)
    assert odd.compute_on("CPU") > 100 * 512 * 4 and any("graph of llama's family" in n for n in odd.notes)


def test_next_token_prediction_layers_have_no_cache() -> None:
    e = estimate(model(layers=4, nextn_predict_layers=1), ctx=256)
    assert [x.layer for x in e.kv_layers] == [0, 1, 2]


def test_output_buffer_is_one_row_of_logits_per_sequence() -> None:
    assert estimate(model(vocab=1000), parallel=3).output_buffer == 1000 * 3 * 4
    e = estimate(model(), ctx=256)
    assert e.output_buffer == 0 and any("vocabulary size is unknown" in x for x in e.not_estimated)


# --------------------------------------------------------------------------- gemma-3-270m


def test_gemma_3_270m(gemma: Path) -> None:
    with gguf_schema.open(gemma, lazy=True) as f:
        e = estimate(f)
        assert e.weights_cpu == 246_587_904 and e.weights_gpu == 0
        # 3 full layers x 32768 cells + 15 SWA layers x pad256(512 + 512) cells, 256 values x 2 bytes
        assert e.kv_k_bytes == e.kv_v_bytes == (3 * 32768 + 15 * 1024) * 512 == int(55.5 * MIB)
        assert e.output_buffer == 262_144 * 4
        assert [x.layer for x in e.kv_layers if x.kind == "full"] == [5, 11, 17]
        assert estimate(f, ctx=4096).kv_k_bytes == int(13.5 * MIB)
        q8 = estimate(f, ctx=2048, cache_type_k="q8_0", cache_type_v="q8_0")
        assert q8.kv_k_bytes == (3 * 2048 + 15 * 1024) * 8 * 34
        off = estimate(f, ctx=4096, gpu_layers=19)
        embd = f.tensors["token_embd.weight"].nbytes
        # all but the input embedding on the GPU, plus the copy of it that serves as the (tied) output matrix
        assert off.weights_cpu == embd == 178_257_920 and off.weights_gpu == 246_587_904
        json.dumps(e.to_dict())


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"layers": None}, "llama.block_count"),
        ({"heads": None, "kv": None}, "llama.attention.head_count"),
        ({"embd": None}, "llama.embedding_length"),
    ],
)
def test_a_missing_key_is_named(kw: dict, key: str) -> None:
    with pytest.raises(GGUFKeyError, match=f"metadata key '{key}' is missing") as info:
        estimate(model(**kw), ctx=512)
    assert isinstance(info.value, KeyError) and info.value.value == key


def test_context_length_is_needed_only_without_ctx() -> None:
    f = model(ctx=None)
    with pytest.raises(GGUFKeyError, match="'llama.context_length' is missing"):
        estimate(f)
    assert estimate(f, ctx=512).settings["n_ctx"] == 512
    with pytest.raises(GGUFKeyError, match="'general.architecture' is missing"):
        estimate(gguf_schema.open(_bytes({"llama.block_count": 2})))


def test_a_key_of_the_wrong_kind_is_a_format_error() -> None:
    with pytest.raises(GGUFFormatError, match="'llama.block_count' must be a non-negative integer, is 'four'"):
        estimate(model(layers="four"))
    with pytest.raises(
        GGUFFormatError, match="'llama.attention.head_count_kv' must be a non-negative integer or an array of 4"
    ):
        estimate(model(kv=[1, 2]))
    with pytest.raises(GGUFFormatError, match="'llama.block_count' must be a positive integer"):
        estimate(model(layers=0))


def test_argument_mistakes() -> None:
    f = model()
    assert estimate(f, ctx=0).settings["n_ctx"] == 4096  # as llama.cpp's -c 0: the training context
    for kw, exc, text in [
        ({"ctx": -1}, ValueError, "ctx must be >= 0"),
        ({"parallel": 0}, ValueError, "parallel must be in"),
        ({"parallel": 257}, ValueError, "parallel must be in"),
        ({"gpu_layers": -2}, ValueError, "gpu_layers"),
        ({"batch": "512"}, TypeError, "batch must be an int"),
        ({"cache_type_k": "q4_k"}, ValueError, "not a cache type"),
        ({"cache_type_v": 8}, TypeError, "cache type name"),
        ({"flash_attn": 1}, TypeError, "flash_attn must be a bool"),
    ]:
        with pytest.raises(exc, match=text):
            estimate(f, **kw)
    with pytest.raises(TypeError, match="takes an open model"):
        estimate("model.gguf")
    assert CACHE_TYPES[:2] == ("f32", "f16")


def test_to_dict_is_json_with_totals_and_what_is_not_estimated() -> None:
    e = estimate(model(vocab=10, tensors=_tensors()), ctx=256, gpu_layers=2)
    d = json.loads(json.dumps(e.to_dict()))
    assert d["totals"]["kv_k"] == e.kv_k_bytes and d["totals"]["gpu"] == e.total_gpu and d["totals"]["all"] == e.total
    assert d["kv_layers"][0] == {
        "layer": 0,
        "kind": "full",
        "device": "CPU",
        "cells": 256,
        "streams": 1,
        "n_embd_k_gqa": 128,
        "n_embd_v_gqa": 128,
        "k_bytes": 256 * 256,
        "v_bytes": 256 * 256,
    }
    assert d["not_estimated"][: len(NOT_ESTIMATED)] == list(NOT_ESTIMATED)
    assert set(d["formulas"]) == {
        "context",
        "weights",
        "repacked weights",
        "kv cells",
        "kv k",
        "kv v",
        "output buffer",
        "compute buffer",
    }
    assert (
        d["totals"]["compute_cpu"] == d["compute"]["CPU"] > 0 and d["totals"]["compute_gpu"] == d["compute"]["GPU"] > 0
    )
    assert d["formulas"]["context"].startswith("n_ctx = pad256(ctx 256) = 256")


def _bytes(meta: dict) -> bytes:
    buf = io.BytesIO()
    gguf_schema.save(buf, meta)
    return buf.getvalue()


# --------------------------------------------------------------------------- CLI


def _file(tmp_path: Path, **kw: Any) -> Path:
    p = tmp_path / "m.gguf"
    with model(**kw) as f:
        f.save(p)
    return p


def test_cli_estimate_prints_the_table_and_formulas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _file(tmp_path, tensors=_tensors(), embd=64, heads=4, kv=4)
    assert main(["estimate", str(p), "--ctx", "1000", "--gpu-layers", "3", "--cache-type-k", "q8_0"]) == 0
    out = capsys.readouterr().out
    assert (
        "settings:  ctx 1024 (1024 cells x 1 stream(s), 1 sequence(s)), batch 512, ubatch 512, cache K Q8_0 V F16, gpu layers 3 of 5"
        in out
    )
    lines = out.splitlines()
    kv_k = 1024 * 68 * 2  # per layer: 1024 cells x 2 blocks of 34 bytes; 2 layers per device
    assert f"KV cache K         {kv_k / MIB:>10.2f} MiB {kv_k / MIB:>10.2f} MiB {2 * kv_k / MIB:>10.2f} MiB" in lines
    assert "  full-attention layers, 1024 cells: 0-3" in lines
    assert any(line.startswith("  kv k: per layer: cells x streams x row_size(Q8_0, n_embd_k_gqa)") for line in lines)
    assert "not estimated:" in lines
    assert main(["estimate", str(p), "--json", "--ctx", "256"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["n_ctx"] == 256


def test_cli_estimate_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _file(tmp_path, layers=None)
    assert main(["estimate", str(p)]) == 2
    assert "gguf-schema: error: metadata key 'llama.block_count' is missing" in capsys.readouterr().err
    p = _file(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", str(p), "--cache-type-v", "q4_k"])
    assert exit_.value.code == 2
    assert (
        "gguf-schema: error: argument --cache-type-v: 'q4_k' is not a cache type llama.cpp accepts"
        in capsys.readouterr().err
    )


def test_cli_estimate_errors_name_the_flags_not_the_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 28: "pass flash_attn=True" is the API's wording; the command line names its flags
    p = _file(tmp_path)
    assert main(["estimate", str(p), "--cache-type-v", "q8_0", "--no-flash-attn"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "gguf-schema: error: --cache-type-v q8_0 is a quantized cache type, which llama.cpp allows only with flash "
        "attention: leave out --no-flash-attn, or choose f32, f16 or bf16\n"
    )
    for flag, value, words in (
        ("--ctx", "-1", "argument --ctx: needs a whole number of tokens (4096, 8k = 8192, 128K, 1M), got '-1'"),
        ("--batch", "0", "argument --batch: needs a whole number >= 1, got '0'"),
        ("--gpu-layers", "-2", "argument --gpu-layers: needs a whole number >= -1, got '-2'"),
        ("--parallel", "300", "argument --parallel: needs a whole number from 1 to 256, got '300'"),
    ):
        with pytest.raises(SystemExit):
            main(["estimate", str(p), flag, value])
        assert f"gguf-schema: error: {words}\n" in capsys.readouterr().err


def test_cli_estimate_says_where_the_layers_go_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _file(tmp_path, tensors=_tensors(), embd=64, heads=4, kv=4)
    assert main(["estimate", str(p)]) == 0
    out = capsys.readouterr().out
    assert "input layer -> CPU; repeating layers -> CPU (all 4; none on the GPU); output layer -> CPU" in out
    assert "0 of 4" not in out and "blk.4 on" not in out
    assert main(["estimate", str(p), "--gpu-layers", "3"]) == 0
    out = capsys.readouterr().out
    assert "repeating layers: 2 of 4 -> GPU (blk.2 to blk.3), the other 2 -> CPU; output layer -> GPU" in out


def test_cli_estimate_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("usage: gguf-schema estimate")
        and "--cache-type-k T" in out
        and "compute buffer per device" in out
        and "--cpu-isa" in out
    )
