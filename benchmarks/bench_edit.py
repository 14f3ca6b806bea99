"""Memory and time of metadata edits as a user sees them: whole processes, measured by ``/usr/bin/time -v``.

Each edit is the command line a user types (``python -m gguf_schema set FILE KEY VALUE``, ...) run
on a fresh copy of a file with a huge header (4M tokens: a 116 MB header), under ``/usr/bin/time -v``:
the figures are the whole process's (interpreter, imports, the parse, the edit), its peak resident
set size ("Maximum resident set size", file pages of the mapped header included) and its wall and
CPU time. Each edit runs ``--repeat`` times (3); the table gives the best wall time, the CPU time of
that run and the largest peak RSS of all runs, with the machine's load (``uptime``) just before.
The same for opening and checking the legal file of 800,000 keys
(:func:`gguf_schema.testing.malformed.many_keys_file`).

With ``--peer`` the ``gguf`` package (llama.cpp's Python package) does the same edits in its own
processes, the way its scripts do: in place with ``GGUFReader(path, "r+")`` (``gguf_set_metadata``),
else by rewriting the file with ``GGUFWriter`` from the reader's fields (``gguf_new_metadata``);
at 4M tokens it needs minutes per edit, so compare at ``--tokens 500000``.

    python benchmarks/bench_edit.py [--tokens 4000000] [--repeat 3] [--peer] [--baseline DIR] [--out FILE]

``--baseline DIR`` runs the same commands with the ``gguf_schema`` of DIR too (a checkout of the
version before, its extensions built), side by side in the same run.

Targets (issue 27): every edit of the 116 MB header at most 300 MB and 3 s for the whole process;
open and check of the 800,000-key file at most 2 s and 300 MB.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

TOKEN_LEN = 13  # bytes per token: with the 8-byte length, ~84 MB of strings for 4M tokens
TIME = "/usr/bin/time"


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


#: edit -> (command line after the file, key, value the file must hold after it)
EDITS = {
    "set in place": (
        ["set", "{path}", "general.name", "huge-vocabulary-mode2"],
        "general.name",
        "huge-vocabulary-mode2",
    ),
    "set, header grows": (["set", "{path}", "general.description", "x" * 4096], "general.description", "x" * 4096),
    "rename": (
        ["rename", "{path}", "tokenizer.ggml.token_type", "tokenizer.ggml.token_types_renamed"],
        "tokenizer.ggml.token_types_renamed",
        None,
    ),
    "delete": (["delete", "{path}", "tokenizer.ggml.scores"], "tokenizer.ggml.scores", None),
    "set --no-in-place": (
        ["set", "{path}", "general.name", "huge-vocabulary-mode3", "--no-in-place"],
        "general.name",
        "huge-vocabulary-mode3",
    ),
}


def timed(cmd: list[str], timeout: float, code: str | None = None) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v``: wall and CPU seconds, peak RSS (MB), exit code, stderr's
    last line. ``code``: a folder holding another version of ``gguf_schema`` to run instead (PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": code} if code else None
    # run from "/" (every path is absolute): a package in the current folder would come before PYTHONPATH
    r = subprocess.run([TIME, "-v", *cmd], capture_output=True, timeout=timeout, check=False, env=env, cwd="/")
    err = r.stderr.decode(errors="replace")

    def field(name: str) -> str:
        m = re.search(rf"^\s*{re.escape(name)}: (.+)$", err, re.M)
        if m is None:
            raise RuntimeError(f"no {name!r} in the output of {TIME} -v:\n{err[-2000:]}")
        return m.group(1).strip()

    clock = [float(x) for x in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")]
    seconds = sum(x * 60**i for i, x in enumerate(reversed(clock)))
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    mine = [line for line in err.splitlines() if not line.startswith(("\t", "Command"))]
    return {
        "rc": r.returncode,
        "seconds": seconds,
        "cpu": cpu,
        "peak_mb": int(field("Maximum resident set size (kbytes)")) / 1024,
        "said": mine[-1] if mine else "",
    }


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def best_of(runs: list[dict]) -> dict:
    best = min(runs, key=lambda r: r["seconds"])
    return {**best, "peak_mb": max(r["peak_mb"] for r in runs)}


def verify(path: str, edit: str, n: int) -> None:
    import gguf_schema

    _, key, value = EDITS[edit]
    with gguf_schema.open(path, lazy=True) as f:
        md = f.metadata
        if edit == "rename":
            assert "tokenizer.ggml.token_type" not in md and len(md[key]) == n
        elif edit == "delete":
            assert key not in md
        else:
            assert md[key] == value
        assert len(md["tokenizer.ggml.tokens"]) == n
        assert f.tensors["w"].data[262143] == 262143.0


def peer_child(edit: str, path: str) -> None:
    """The same edit with the gguf package's public API (its scripts' approach), in this process."""
    import gguf

    argv, key, value = EDITS[edit]
    if edit in ("set in place", "set --no-in-place"):
        reader = gguf.GGUFReader(path, "r+")
        field = reader.fields[key]
        part = field.parts[field.data[0]]
        new = np.frombuffer(str(value).encode(), np.uint8)
        if len(new) != len(part):
            raise SystemExit("not the same length")
        part[:] = new
        reader.data.flush()
        return
    old = argv[2]
    reader = gguf.GGUFReader(path, "r")
    arch = reader.fields["general.architecture"].contents()
    tmp = path + ".new"
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
    for f in reader.fields.values():
        name = f.name
        if name == "general.architecture" or name.startswith("GGUF."):
            continue
        if edit == "delete" and name == old:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key if (edit == "rename" and name == old) else name, f.contents(), vtype, sub_type=sub)
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


def edit_rows(folder: str, n: int, repeat: int, peer: bool, peer_timeout: float, baseline: str | None) -> list[str]:
    master = os.path.join(folder, "huge.gguf")
    make_file(master, n)
    import gguf_schema

    with gguf_schema.open(master, lazy=True) as f:
        header = f.data_offset
    size = os.path.getsize(master)
    lines = [
        f"File: {n:,} tokens, header {header / 1e6:.1f} MB, file {size / 1e6:.1f} MB. "
        f"Best of {repeat} fresh processes for the time; the largest peak RSS of the {repeat}.",
        "",
        "| edit | tool | how | wall time (s) | CPU time (s) | peak RSS, whole process (MB) | load before (uptime) |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    work = os.path.join(folder, "work.gguf")
    for edit, (argv, _, _) in EDITS.items():
        tools = ["gguf-schema"]
        if baseline and edit != "set --no-in-place":
            tools.append("gguf-schema before")
        if peer and edit != "set --no-in-place":
            tools.append("gguf")
        for tool in tools:
            before = load()
            runs = []
            for _ in range(repeat if tool != "gguf" else 1):
                shutil.copyfile(master, work)
                if tool != "gguf":
                    cmd = [sys.executable, "-m", "gguf_schema", *(a.format(path=work) for a in argv)]
                else:
                    cmd = [sys.executable, os.path.abspath(__file__), "--peer-child", edit, work]
                try:
                    r = timed(
                        cmd, 600 if tool != "gguf" else peer_timeout, baseline if tool.endswith("before") else None
                    )
                except subprocess.TimeoutExpired:
                    runs = []
                    break
                if r["rc"] != 0:
                    raise RuntimeError(f"{edit} ({tool}) failed: {r['said']}")
                verify(work, edit, n)
                runs.append(r)
            os.unlink(work)
            if not runs:
                lines.append(f"| {edit} | {tool} | stopped after {peer_timeout:.0f} s | | | | `{before}` |")
                continue
            r = best_of(runs)
            how = r["said"].split("(", 1)[-1].split(",")[0] if tool != "gguf" else ""
            print(edit, tool, r, file=sys.stderr, flush=True)
            lines.append(
                f"| {edit} | {tool} | {how} | {r['seconds']:.2f} | {r['cpu']:.2f} | {r['peak_mb']:.0f} | `{before}` |"
            )
    return lines


def keys_rows(folder: str, repeat: int, baseline: str | None) -> list[str]:
    from gguf_schema.testing.malformed import many_keys_file

    path = os.path.join(folder, "keys800k.gguf")
    with open(path, "wb") as fh:
        fh.write(many_keys_file(800_000))
    work = os.path.join(folder, "keys-work.gguf")
    python = [sys.executable, "-c", "import sys, gguf_schema; gguf_schema.open(sys.argv[1]).close()"]
    cli = [sys.executable, "-m", "gguf_schema"]
    commands = {
        "open (`gguf_schema.open`)": ([*python, path], False),
        "check (`gguf-schema check`)": ([*cli, "check", path], False),
        "set in place (`gguf-schema set F k.5 2`)": ([*cli, "set", work, "k.5", "2"], True),
        "set, header grows (`gguf-schema set F general.name abc`)": ([*cli, "set", work, "general.name", "abc"], True),
    }
    lines = [
        f"File: 800,000 keys (`many_keys_file(800_000)`, {os.path.getsize(path) / 1e6:.1f} MB). "
        f"Best of {repeat} for the time; the largest peak RSS. The targets are for open and check; the edits are "
        "given for what they cost.",
        "",
        "| action | version | wall time (s) | CPU time (s) | peak RSS, whole process (MB) | load before (uptime) |",
        "|---|---|---:|---:|---:|---|",
    ]
    for name, (cmd, edits) in commands.items():
        for version, code in [("this branch", None), *([("before", baseline)] if baseline else [])]:
            before = load()
            runs = []
            for _ in range(repeat):
                if edits:
                    shutil.copyfile(path, work)
                r = timed(cmd, 600, code)
                if r["rc"] not in (0, 1):  # check: 1 = findings (the file has no general.architecture)
                    raise RuntimeError(f"{name} failed: {r['said']}")
                runs.append(r)
            r = best_of(runs)
            print(name, version, r, file=sys.stderr, flush=True)
            lines.append(
                f"| {name} | {version} | {r['seconds']:.2f} | {r['cpu']:.2f} | {r['peak_mb']:.0f} | `{before}` |"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peer", action="store_true", help="also the gguf package (minutes per edit at 4M tokens)")
    ap.add_argument("--peer-timeout", type=float, default=900)
    ap.add_argument("--no-keys", action="store_true", help="leave out the 800,000-key file")
    ap.add_argument(
        "--baseline",
        default=None,
        metavar="DIR",
        help="also run the gguf_schema found in DIR (e.g. a checkout of main)",
    )
    ap.add_argument("--folder", default=None, help="where to put the test files (default: a temporary folder)")
    ap.add_argument("--out", default=None, help="write the results (markdown) there too")
    ap.add_argument("--peer-child", nargs=2, metavar=("EDIT", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer_child:
        peer_child(*args.peer_child)
        return
    if not os.path.exists(TIME):
        raise SystemExit(f"{TIME} is needed (apt-get install time)")
    folder = os.path.abspath(tempfile.mkdtemp(dir=args.folder))
    try:
        lines = edit_rows(folder, args.tokens, args.repeat, args.peer, args.peer_timeout, args.baseline)
        if not args.no_keys:
            lines += ["", *keys_rows(folder, args.repeat, args.baseline)]
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
