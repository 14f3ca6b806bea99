"""Memory and time of metadata edits on a file with a huge header (4M tokens, ~116 MB of metadata).

Each edit runs in a fresh process on a fresh copy of the file; it reports the wall time of the edit
and its peak resident memory (``VmHWM``, reset after the imports through ``/proc/self/clear_refs``)
above the resident size when the edit starts. Pages of the file mapped and touched count as resident. Beside
gguf-schema, the ``gguf`` package (llama.cpp's Python package) does the same edit where it can:
in place with ``GGUFReader(path, "r+")`` (as its ``gguf_set_metadata`` script), else by
rewriting the file with ``GGUFWriter`` from the ``GGUFReader``'s fields (as its
``gguf_new_metadata`` script) and renaming it over the original.

    python benchmarks/bench_edit.py [--tokens 4000000] [--peer-timeout 900] [--out benchmarks/results/edit.md]

Targets (the issue): at most 300 MB and 3 s per edit with gguf-schema.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

TOKEN_LEN = 13  # bytes per token: with the 8-byte length, ~84 MB of strings for 4M tokens


def make_file(path: str, n: int) -> None:
    """A little-endian v3 GGUF file: general.* keys, n tokens with scores and types, one F32 tensor."""

    def s(text: str) -> bytes:
        b = text.encode()
        return np.uint64(len(b)).tobytes() + b

    kv = []
    kv.append(s("general.architecture") + np.uint32(8).tobytes() + s("llama"))
    kv.append(s("general.name") + np.uint32(8).tobytes() + s("huge-vocabulary-model"))
    kv.append(s("tokenizer.ggml.model") + np.uint32(8).tobytes() + s("gpt2"))
    rec = np.zeros(n, dtype=[("len", "<u8"), ("s", f"S{TOKEN_LEN}")])
    rec["len"] = TOKEN_LEN
    rec["s"] = np.char.add(b"tok", np.char.zfill(np.arange(n).astype("S10"), TOKEN_LEN - 3))
    array = lambda key, t, count: s(key) + np.uint32(9).tobytes() + np.uint32(t).tobytes() + np.uint64(count).tobytes()  # noqa: E731
    kv.append(array("tokenizer.ggml.tokens", 8, n) + rec.tobytes())
    kv.append(array("tokenizer.ggml.scores", 6, n) + np.linspace(0, -1, n, dtype=np.float32).tobytes())
    kv.append(array("tokenizer.ggml.token_type", 5, n) + np.ones(n, np.int32).tobytes())
    info = (
        s("w") + np.uint32(1).tobytes() + np.uint64(262144).tobytes() + np.uint32(0).tobytes() + np.uint64(0).tobytes()
    )
    head = b"GGUF" + np.uint32(3).tobytes() + np.uint64(1).tobytes() + np.uint64(len(kv)).tobytes()
    body = head + b"".join(kv) + info
    pad = (-len(body)) % 32
    with open(path, "wb") as fh:
        fh.write(body + b"\0" * pad)
        fh.write(np.arange(262144, dtype=np.float32).tobytes())


EDITS = {
    "set in place": ("general.name", "huge-vocabulary-mode2"),
    "set, header grows": ("general.description", "x" * 4096),
    "rename": ("tokenizer.ggml.token_type", "tokenizer.ggml.token_types_renamed"),
    "delete": ("tokenizer.ggml.scores", None),
}


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> float:
    """Reset the peak resident size (VmHWM, Linux >= 4.0) and return the resident size now (MB)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status_mb("VmRSS")


def child(tool: str, edit: str, path: str) -> dict:
    """Run one edit in this (fresh) process; report seconds, peak RSS over the import baseline, and how."""
    if tool == "gguf-schema":
        import numpy as np  # noqa: F401

        from gguf_schema.tools.edit import delete_key, rename_key, set_key
    else:
        import gguf
    base = _reset_peak()
    key, value = EDITS[edit]
    t0 = time.perf_counter()
    how = ""
    if tool == "gguf-schema":
        if edit == "rename":
            r = rename_key(path, key, value)
        elif edit == "delete":
            r = delete_key(path, key)
        else:
            r = set_key(path, key, value)
        how = "in place" if r.in_place else "rewritten"
    else:
        how = _gguf_edit(gguf, path, edit, key, value)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak_mb": _status_mb("VmHWM") - base, "base_mb": base, "how": how}


def _gguf_edit(gguf, path: str, edit: str, key: str, value: str | None) -> str:  # type: ignore[no-untyped-def]
    """The same edit with the gguf package's public API (its scripts' approach)."""
    if edit == "set in place":
        reader = gguf.GGUFReader(path, "r+")
        field = reader.fields[key]
        part = field.parts[field.data[0]]
        new = np.frombuffer(value.encode(), np.uint8)
        if len(new) != len(part):
            raise SystemExit("not the same length")
        part[:] = new
        reader.data.flush()
        return "in place"
    reader = gguf.GGUFReader(path, "r")
    arch = reader.fields["general.architecture"].contents()
    tmp = path + ".new"
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        name = field.name
        if name == "general.architecture" or name.startswith("GGUF."):
            continue
        if edit == "delete" and name == key:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(
            value if (edit == "rename" and name == key) else name, field.contents(), vtype, sub_type=sub
        )
    if edit == "set, header grows":
        writer.add_key_value(key, value, gguf.GGUFValueType.STRING)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data)
    writer.close()
    os.replace(tmp, path)
    return "rewritten"


def verify(path: str, edit: str, n: int) -> None:
    import gguf_schema

    key, value = EDITS[edit]
    with gguf_schema.open(path, lazy=True) as f:
        md = f.metadata
        if edit == "rename":
            assert key not in md and len(md[value]) == n
        elif edit == "delete":
            assert key not in md
        else:
            assert md[key] == value
        assert len(md["tokenizer.ggml.tokens"]) == n
        assert f.tensors["w"].data[262143] == 262143.0


def run(tool: str, edit: str, path: str, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--child", tool, edit, path]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=timeout, check=True).stdout
    except subprocess.TimeoutExpired:
        return {"error": f"more than {timeout:.0f} s (stopped)"}
    except subprocess.CalledProcessError as e:
        return {"error": e.stderr.decode().strip().splitlines()[-1]}
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4_000_000)
    ap.add_argument("--peer-timeout", type=float, default=900)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--folder", default=None, help="where to put the test files (default: a temporary folder)")
    ap.add_argument("--out", default=None, help="write the results table (markdown) there too")
    ap.add_argument("--child", nargs=3, metavar=("TOOL", "EDIT", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    folder = tempfile.mkdtemp(dir=args.folder)
    try:
        master = os.path.join(folder, "huge.gguf")
        make_file(master, args.tokens)
        import gguf_schema

        with gguf_schema.open(master, lazy=True) as f:
            header = f.data_offset
        size = os.path.getsize(master)
        lines = [
            f"File: {args.tokens:,} tokens, header {header / 1e6:.1f} MB, file {size / 1e6:.1f} MB "
            f"(`python benchmarks/bench_edit.py --tokens {args.tokens}`; one fresh process per edit).",
            "",
            "| edit | tool | how | time (s) | peak RSS increase (MB) | time ratio gguf/ours | RSS ratio gguf/ours |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        for edit in EDITS:
            results = {}
            for tool in ("gguf-schema", "gguf") if not args.no_peer else ("gguf-schema",):
                work = os.path.join(folder, "work.gguf")
                shutil.copyfile(master, work)
                r = run(tool, edit, work, 600 if tool == "gguf-schema" else args.peer_timeout)
                if "error" not in r:
                    verify(work, edit, args.tokens)
                results[tool] = r
                os.unlink(work)
                print(edit, tool, r, file=sys.stderr, flush=True)
            ours = results["gguf-schema"]
            for tool, r in results.items():
                if "error" in r:
                    lines.append(f"| {edit} | {tool} | {r['error']} | | | | |")
                    continue
                ratio_t = ratio_m = ""
                if tool == "gguf" and "error" not in ours:
                    ratio_t = f"{r['seconds'] / ours['seconds']:.1f}x"
                    ratio_m = f"{r['peak_mb'] / max(ours['peak_mb'], 1):.1f}x"
                lines.append(
                    f"| {edit} | {tool} | {r['how']} | {r['seconds']:.2f} | {r['peak_mb']:.0f} | {ratio_t} | {ratio_m} |"
                )
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
