"""Crash harness for every write path: kill the writer (SIGKILL) at many moments, inject I/O errors.

Not part of the tests (it runs for minutes). For each write path (set in place, set that rewrites,
delete, rename, convert, split, merge, save, build, quantize, and the one-pass quantize of several
presets into a folder: into a new folder, and replacing the outputs of an earlier run with ``--overwrite``):

1. **Kills.** The write runs in a forked child (the library already imported, so the child starts
   writing at once); the parent kills it with SIGKILL after a delay. The delays are spread evenly
   over the write's duration (the shortest of 5 clean runs), with a random offset inside each slot,
   until ``--kills`` kills have landed before the writer finished (runs it finished first are
   counted apart, and judged too).
2. **I/O errors.** The same write runs in a new process under ``strace -f -e inject=SYSCALL:error=E:when=N``
   for each syscall a write uses (write, pwrite64, fsync, fdatasync, rename, linkat, copy_file_range,
   ftruncate, unlink, openat for the journal...), several N, and ENOSPC / EIO.

After each run, the harness checks: every target is byte-identical to its content before or to the
output of a clean run (a split's shards as a set: all old, all new, or a mixed set that
``open_split`` refuses; the one pass's outputs are separate files, each its old or its new
content, "mixed" when some are old and some new, as a kill between their renames leaves them); every target opens with :func:`gguf_schema.open` (a file a journal
guards is first refused by readers, then recovered by :func:`gguf_schema.durable.recover`); the
inputs are unchanged; nothing else is left in the folder (temporaries left by a killed writer are
counted, and must be removed by the next write of the same target).

When the write makes more I/O calls than ``--kills`` allows aiming at (before and after each), the
aimed kills are the calls of the commit (every ``replace``, ``rename``, ``link``, ``fsync``), before
and after, and the other calls spread evenly to ``--kills`` in all.

    python benchmarks/crash_harness.py [--kills 1000] [--paths set-in-place,split] [--out benchmarks/results/crash.md]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import gguf_schema
from gguf_schema import durable
from gguf_schema.errors import GGUFError
from gguf_schema.tools import convert as convert_mod
from gguf_schema.tools import edit, jsonio
from gguf_schema.tools import onepass as onepass_mod
from gguf_schema.tools import requantize as requantize_mod
from gguf_schema.tools import split as split_mod

NAME = "crash-harness-model-name"  # 24 characters: an in-place edit keeps the length


def make_model(path: str, tokens: int = 50_000, name: str = NAME, seed: int = 0, suffix: str = "w") -> None:
    rng = np.random.default_rng(seed)
    gguf_schema.save(
        path,
        {
            "general.architecture": "llama",
            "general.name": name,
            "tokenizer.ggml.tokens": [f"tok{i:06d}" for i in range(tokens)],
            "tokenizer.ggml.scores": np.linspace(0, -1, tokens, dtype=np.float32),
        },
        {f"blk.{i}.{suffix}": rng.standard_normal((256, 1024)).astype(np.float32) for i in range(3)},  # 1 MiB each
    )


@dataclass
class Scenario:
    """One write path: how to prepare its folder, the write itself, and what it writes."""

    name: str
    action: Callable[[str], object]  # runs the write in folder
    targets: list[str]  # the files the write changes or creates
    inputs: list[str]  # files it only reads
    prepare: Callable[[str], None]  # makes the inputs and the targets' old content in an empty folder
    cli: list[str] = field(default_factory=list)  # the same write on the command line (for strace)
    is_set: bool = False  # the targets form a set (split shards)
    several: bool = False  # several separate targets (one pass of many presets): each old or new on its own
    journal: bool = False  # in-place edits: a journal may be left, then recovered
    links: dict[str, str] = field(default_factory=dict)  # symbolic links the write goes through: name -> target


def _model_and_old(folder: str, *old_targets: str) -> None:
    make_model(os.path.join(folder, "model.gguf"))
    for i, t in enumerate(old_targets):
        make_model(os.path.join(folder, t), tokens=10, name=f"old-target-{i}", seed=i + 1)


def _model_and_link(folder: str) -> None:
    _model_and_old(folder)
    os.symlink(IN, os.path.join(folder, LINK))


def _prepare_quantize(folder: str) -> None:
    make_model(os.path.join(folder, "model.gguf"), suffix="ffn_up.weight")  # weights: requantized
    make_model(os.path.join(folder, "q.gguf"), tokens=10, name="old-target", seed=1)


#: the presets of the one-pass paths, and the outputs they write into the folder ``out``
ONEPASS = ["Q8_0", "Q4_0", "Q6_K"]
ONEPASS_OUT = [f"out/model-{p}.gguf" for p in ONEPASS]


def _prepare_onepass(folder: str, old: bool) -> None:
    make_model(os.path.join(folder, IN), suffix="ffn_up.weight")  # weights: requantized
    if old:  # the outputs of an earlier run, to be replaced (--overwrite)
        os.mkdir(os.path.join(folder, "out"))
        for i, t in enumerate(ONEPASS_OUT):
            make_model(os.path.join(folder, t), tokens=10, name=f"old-target-{i}", seed=i + 1)


def _onepass(folder: str, overwrite: bool) -> None:
    onepass_mod.requantize_many(
        os.path.join(folder, IN), os.path.join(folder, "out"), ONEPASS, threads=1, overwrite=overwrite
    )


def _prepare_merge(folder: str) -> None:
    _model_and_old(folder, "merged.gguf")
    split_mod.split(os.path.join(folder, "model.gguf"), os.path.join(folder, "s"), max_tensors=1)
    os.unlink(os.path.join(folder, "model.gguf"))


def _prepare_build(folder: str) -> None:
    _model_and_old(folder, "built.gguf")
    with gguf_schema.open(os.path.join(folder, "model.gguf")) as f:
        doc = jsonio.to_json(f)
    doc_text = json.dumps(doc).replace(NAME, "renamed-by-build-from-json-document")
    with open(os.path.join(folder, "m.json"), "w") as fh:
        fh.write(doc_text)


def _prepare_split(folder: str) -> None:
    _model_and_old(folder)
    other = os.path.join(folder, "other.gguf")
    make_model(other, tokens=100, name="another-model", seed=9)
    split_mod.split(other, os.path.join(folder, "p"), max_tensors=1)  # an old set under the same names
    os.unlink(other)


def _save(folder: str) -> None:
    rng = np.random.default_rng(5)
    gguf_schema.save(
        os.path.join(folder, "saved.gguf"),
        {"general.name": "saved", "tokenizer.ggml.tokens": [f"t{i}" for i in range(30_000)]},
        {f"t{i}": rng.standard_normal((512, 512)).astype(np.float32) for i in range(3)},
    )


def _build(folder: str) -> None:
    with open(os.path.join(folder, "m.json")) as fh:
        doc = json.load(fh)
    jsonio.build(doc, os.path.join(folder, "built.gguf"), tensors_from=os.path.join(folder, "model.gguf"))


SHARDS = [f"p-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
IN = "model.gguf"
LINK = "link.gguf"  # a symbolic link to IN


def scenarios() -> list[Scenario]:
    j = os.path.join
    return [
        Scenario(
            "set-in-place",
            lambda d: edit.set_key(j(d, IN), "general.name", "x" * 24),
            [IN],
            [],
            _model_and_old,
            ["set", IN, "general.name", "x" * 24],
            journal=True,
        ),
        Scenario(
            "set-via-link",
            lambda d: edit.set_key(j(d, LINK), "general.name", "y" * 24),
            [IN],
            [],
            _model_and_link,
            ["set", LINK, "general.name", "y" * 24],
            journal=True,
            links={LINK: IN},
        ),
        Scenario(
            "set-no-in-place",
            lambda d: edit.set_key(j(d, IN), "general.name", "z" * 24, in_place=False),
            [IN],
            [],
            _model_and_old,
            ["set", IN, "general.name", "z" * 24, "--no-in-place"],
            journal=True,
        ),
        Scenario(
            "set-rewrite",
            lambda d: edit.set_key(j(d, IN), "general.name", "a name that is longer than the padding " * 3),
            [IN],
            [],
            _model_and_old,
            ["set", IN, "general.name", "a name that is longer than the padding " * 3],
            journal=True,
        ),
        Scenario(
            "delete",
            lambda d: edit.delete_key(j(d, IN), "tokenizer.ggml.scores"),
            [IN],
            [],
            _model_and_old,
            ["delete", IN, "tokenizer.ggml.scores"],
            journal=True,
        ),
        Scenario(
            "rename",
            lambda d: edit.rename_key(j(d, IN), "tokenizer.ggml.scores", "tokenizer.ggml.token_scores_renamed"),
            [IN],
            [],
            _model_and_old,
            ["rename", IN, "tokenizer.ggml.scores", "tokenizer.ggml.token_scores_renamed"],
            journal=True,
        ),
        Scenario(
            "convert",
            lambda d: convert_mod.convert(j(d, IN), j(d, "out.gguf"), byte_order="big"),
            ["out.gguf"],
            [IN],
            lambda d: _model_and_old(d, "out.gguf"),
            ["convert", IN, "out.gguf", "--byte-order", "big"],
        ),
        Scenario(
            "split",
            lambda d: split_mod.split(j(d, IN), j(d, "p"), max_tensors=1),
            SHARDS,
            [IN],
            _prepare_split,
            ["split", IN, "p", "--max-tensors", "1"],
            is_set=True,
        ),
        Scenario(
            "merge",
            lambda d: split_mod.merge(j(d, "s-00001-of-00003.gguf"), j(d, "merged.gguf")),
            ["merged.gguf"],
            [f"s-0000{i}-of-00003.gguf" for i in (1, 2, 3)],
            _prepare_merge,
            ["merge", "s-00001-of-00003.gguf", "merged.gguf"],
        ),
        Scenario(
            "quantize",
            lambda d: requantize_mod.requantize(j(d, IN), j(d, "q.gguf"), "Q8_0", threads=1),
            ["q.gguf"],
            [IN],
            _prepare_quantize,
            ["quantize", IN, "q.gguf", "--type", "Q8_0", "--threads", "1"],
        ),
        Scenario(
            "quantize-onepass",
            lambda d: _onepass(d, False),
            ONEPASS_OUT,
            [IN],
            lambda d: _prepare_onepass(d, False),
            ["quantize", IN, "out", *[x for p in ONEPASS for x in ("-t", p)], "--threads", "1"],
            several=True,
        ),
        Scenario(
            "quantize-onepass-overwrite",
            lambda d: _onepass(d, True),
            ONEPASS_OUT,
            [IN],
            lambda d: _prepare_onepass(d, True),
            ["quantize", IN, "out", *[x for p in ONEPASS for x in ("-t", p)], "--threads", "1", "--overwrite"],
            several=True,
        ),
        Scenario("save", _save, ["saved.gguf"], [IN], lambda d: _model_and_old(d, "saved.gguf"), []),
        Scenario(
            "build",
            _build,
            ["built.gguf"],
            ["m.json", IN],
            _prepare_build,
            ["build", "m.json", "built.gguf", "--tensors-from", IN],
        ),
    ]


# --------------------------------------------------------------------------- states


def digest(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except FileNotFoundError:
        return None


@dataclass
class Baseline:
    template: str  # the prepared folder (inputs and old targets)
    old: dict[str, str | None]
    new: dict[str, str | None]
    inputs: dict[str, str | None]
    seconds: float  # from the first I/O call to the end, the shortest of 5 clean runs
    io_calls: int  # I/O calls of a clean run
    calls: list[str] = field(default_factory=list)  # their names, in order (a clean run)


def reset(folder: str, template: str, s: Scenario) -> None:
    """Make ``folder`` the prepared state again (the targets' old content, the links; nothing else)."""
    for name in os.listdir(folder):
        if name not in s.inputs:
            p = os.path.join(folder, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
    for name in os.listdir(template):
        if name in s.links:
            os.symlink(s.links[name], os.path.join(folder, name))
        elif os.path.isdir(os.path.join(template, name)):
            shutil.copytree(os.path.join(template, name), os.path.join(folder, name))
        elif name not in s.inputs or not os.path.exists(os.path.join(folder, name)):
            shutil.copyfile(os.path.join(template, name), os.path.join(folder, name))


#: the calls through which a write reaches the file system (builtin functions and methods, by name)
IO_CALLS = frozenset(
    {
        "write", "pwrite", "writev", "flush", "fsync", "fdatasync", "replace", "rename", "link", "unlink",
        "ftruncate", "truncate", "copy_file_range", "sendfile", "open", "close", "fchmod", "fchown",
    }
)  # fmt: skip


@dataclass
class Run:
    finished: bool  # the writer finished before it was killed
    io_calls: int  # I/O calls the writer made (a run that is not killed)
    write_seconds: float  # from the first I/O call to the end (a run that is not killed)
    calls: list[str] = field(default_factory=list)  # the I/O calls' names, in order (a run that is not killed)


def run_forked(s: Scenario, folder: str, *, delay: float | None = None, at_call: tuple[int, str] | None = None) -> Run:
    """Run the write in a forked child (the library already imported).

    ``at_call=(k, "before" | "after")``: the child kills itself with SIGKILL just before, or just
    after, its k-th I/O call (:data:`IO_CALLS`, seen through :func:`sys.setprofile`).
    ``delay``: the parent kills it that many seconds after its first I/O call.
    Neither: the write runs to its end, and the run reports its I/O calls and duration.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write, then leave without any cleanup of the parent's state
        os.close(r)
        count = [0]
        names: list[str] = []
        kill_at, when = at_call if at_call is not None else (0, "")

        def hook(frame: object, event: str, arg: object) -> None:
            if event not in ("c_call", "c_return") or getattr(arg, "__name__", "") not in IO_CALLS:
                return
            if event == "c_call":
                count[0] += 1
                names.append(getattr(arg, "__name__", ""))
                if count[0] == 1:
                    os.write(w, struct_start)
                if count[0] == kill_at and when == "before":
                    os.kill(os.getpid(), signal.SIGKILL)
            elif count[0] == kill_at and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)

        struct_start = b"s"
        code = 0
        t_first = time.perf_counter()
        sys.setprofile(hook)
        try:
            s.action(folder)
        except BaseException:
            code = 3
        sys.setprofile(None)
        os.write(w, json.dumps([count[0], time.perf_counter() - t_first, names]).encode())
        os._exit(code)
    os.close(w)
    try:
        started = os.read(r, 1)  # the first I/O call (or the end, if there is none)
        t0 = time.perf_counter()
        if delay is not None and started:
            end = t0 + delay
            while (left := end - time.perf_counter()) > 0:
                if left > 0.002:
                    time.sleep(left - 0.001)
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    return Run(True, 0, 0.0)
            os.kill(pid, signal.SIGKILL)
        rest = b""
        while chunk := os.read(r, 4096):
            rest += chunk
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    finished = os.WIFEXITED(status)
    if finished and os.WEXITSTATUS(status) != 0:
        raise RuntimeError(f"{s.name}: the write failed without being killed")
    if finished and rest:
        calls, _, names = json.loads(rest.decode())
        return Run(True, calls, time.perf_counter() - t0, names)
    return Run(finished, 0, 0.0)


def baseline(s: Scenario, root: str) -> Baseline:
    template = os.path.join(root, "template")
    os.makedirs(template)
    s.prepare(template)
    old = {t: digest(os.path.join(template, t)) for t in s.targets}
    inputs = {t: digest(os.path.join(template, t)) for t in s.inputs}
    work = os.path.join(root, "work")
    os.makedirs(work)
    runs = []
    for _ in range(5):
        reset(work, template, s)
        runs.append(run_forked(s, work))
    new = {t: digest(os.path.join(work, t)) for t in s.targets}
    assert new != old, s.name
    least = min(runs, key=lambda r: r.io_calls)
    return Baseline(template, old, new, inputs, min(r.write_seconds for r in runs), least.io_calls, least.calls)


def files_in(folder: str) -> set[str]:
    """Every name in ``folder`` and its subfolders (relative; a folder itself is not a name)."""
    names = set()
    for here, dirs, files in os.walk(folder):
        rel = os.path.relpath(here, folder)
        names.update(f if rel == "." else os.path.join(rel, f) for f in files)
        names.update(d if rel == "." else os.path.join(rel, d) for d in dirs if os.path.islink(os.path.join(here, d)))
    return names


def judge(s: Scenario, b: Baseline, folder: str) -> tuple[str, list[str], bool, str]:
    """Classify the folder after a run: (outcome, litter, a journal was recovered, problems)."""
    problems = []
    recovered = False
    jpaths = [durable.journal_path(os.path.join(folder, t)) for t in s.targets]
    if s.journal and any(os.path.exists(j) for j in jpaths):
        target = os.path.join(folder, s.targets[0])
        names = [target, *(os.path.join(folder, link) for link in s.links)]  # the file by each of its names
        refused = []
        for name in names:
            try:
                with gguf_schema.open(name):
                    pass
                refused.append(False)
            except GGUFError as e:
                refused.append("recover" in str(e))
        with open(durable.journal_path(target), "rb") as fh:
            jdata = fh.read()
        # a complete journal whose edit has begun to write means a torn (or unfinished) file: readers
        # must refuse it; one whose edit wrote nothing yet stands beside a whole old file, which reads
        begun = durable.Journal.decode(jdata) is not None and digest(target) != b.old[s.targets[0]]
        if any(r != begun for r in refused):
            problems.append(f"readers {'did not refuse' if begun else 'refused'} the file ({refused})")
        said = durable.recover(names[-1])  # through the link, where there is one
        if said is None or "aside" in said:
            problems.append(f"recover did not apply or remove the journal: {said}")
        recovered = True
    names = files_in(folder)
    litter = sorted(names - set(s.targets) - set(s.inputs) - set(s.links))
    for name, target in s.links.items():
        if not os.path.islink(os.path.join(folder, name)) or os.readlink(os.path.join(folder, name)) != target:
            problems.append(f"the link {name} is no longer a link to {target}")
    states = []
    for t in s.targets:
        d = digest(os.path.join(folder, t))
        states.append("old" if d == b.old[t] else "new" if d == b.new[t] else "other")
    for t in s.inputs:
        if digest(os.path.join(folder, t)) != b.inputs[t]:
            problems.append(f"input {t} changed")
    if s.is_set:
        if set(states) == {"old"}:
            outcome = "old"
        elif set(states) == {"new"}:
            outcome = "new"
        elif "other" in states:
            outcome = "other"
        else:
            outcome = "mixed"
            try:
                split_mod.open_split(os.path.join(folder, s.targets[0])).close()
                problems.append("open_split accepted a mixed set")
            except GGUFError:
                pass
    elif s.several:
        outcome = states[0] if len(set(states)) == 1 else "other" if "other" in states else "mixed"
    else:
        outcome = states[0]
    for t in s.targets:
        p = os.path.join(folder, t)
        if os.path.exists(p):
            try:
                with gguf_schema.open(p) as f:
                    for tensor in f.tensor_list:
                        tensor.raw()
            except GGUFError as e:
                problems.append(f"{t} does not open: {e}")
    if outcome == "other":
        problems.append("a target is neither its old nor its new content")
    return outcome, litter, recovered, "; ".join(problems)


def litter_removed_by_next_write(s: Scenario, folder: str, litter: list[str]) -> bool:
    """Temporaries of a killed writer must go with the next write of the same target."""
    temps = [n for n in litter if durable._TMP_MARK in n]
    for t in s.targets:
        durable.remove_stale_temporaries(os.path.join(folder, t))
    return not any(os.path.exists(os.path.join(folder, n)) for n in temps)


# --------------------------------------------------------------------------- kills


def kills(s: Scenario, root: str, n: int, rng: random.Random) -> dict:
    """Aimed kills (before and after every I/O call of the write), then kills at spread moments of the
    write (after its first I/O call) until ``n`` kills have landed before the writer finished."""
    b = baseline(s, root)
    work = os.path.join(root, "work")
    counts: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    litter_runs = litter_left = recovered = finished = killed = runs = 0
    kinds: collections.Counter[str] = (
        collections.Counter()
    )  # what was left, names with the PID and the random part masked
    empty_dirs = 0  # runs that left a folder the write made, empty
    aimed = [(k, when) for k in range(1, b.io_calls + 1) for when in ("before", "after")]
    if len(aimed) > n:  # the commit's calls, and the others spread evenly to n kills in all
        commit = [k for k, name in enumerate(b.calls, 1) if name in ("replace", "rename", "link", "fsync")]
        rest = [k for k in range(1, b.io_calls + 1) if k not in commit]
        room = max(0, (n - 2 * len(commit)) // 2)
        spread = [rest[round(i * (len(rest) - 1) / max(1, room - 1))] for i in range(room)] if rest and room else []
        aimed = [(k, when) for k in sorted(set(commit) | set(spread)) for when in ("before", "after")]
    timed = 0
    while (killed < n or runs < len(aimed)) and runs < 3 * max(n, len(aimed)):
        reset(work, b.template, s)
        if runs < len(aimed):
            at_call, delay = aimed[runs], None
            moment = f"{at_call[1]} I/O call {at_call[0]}"
        else:
            slot = timed % max(1, n - len(aimed))
            delay = (slot + rng.random()) / max(1, n - len(aimed)) * b.seconds
            at_call, timed = None, timed + 1
            moment = f"{delay * 1000:.2f} ms into the write"
        runs += 1
        run = run_forked(s, work, delay=delay, at_call=at_call)
        finished += run.finished
        killed += not run.finished
        outcome, litter, rec, problem = judge(s, b, work)
        counts[outcome] += 1
        recovered += rec
        kinds.update(re.sub(r"\d+-[0-9a-f]{8}$", "PID-XXXXXXXX", n) for n in litter)
        empty_dirs += any(
            not os.listdir(os.path.join(here, d))
            and not os.path.exists(os.path.join(b.template, os.path.relpath(os.path.join(here, d), work)))
            for here, dirs, _ in os.walk(work)
            for d in dirs
        )
        if litter:
            litter_runs += 1
            if not litter_removed_by_next_write(s, work, litter):
                litter_left += 1
                problems.append(f"kill {moment} left {litter}, not removed by the next write")
        if problem:
            problems.append(f"kill {moment}: {problem}")
    return {
        "path": s.name,
        "kills": killed,
        "runs": runs,
        "aimed": min(len(aimed), runs),
        "write_ms": b.seconds * 1000,
        "io_calls": b.io_calls,
        "outcomes": dict(counts),
        "finished_before_kill": finished,
        "journal_recovered": recovered,
        "litter_runs": litter_runs,
        "litter_not_removed": litter_left,
        "litter_kinds": dict(kinds),
        "empty_dirs": empty_dirs,
        "problems": problems[:10],
        "n_problems": len(problems),
    }


# --------------------------------------------------------------------------- injected I/O errors

INJECT = {
    "write": (1, 2, 3, 5, 8),
    "pwrite64": (1, 2),
    "fsync": (1, 2, 3),
    "fdatasync": (1,),
    "rename": (1, 2, 3),
    "linkat": (1, 2, 3),
    "copy_file_range": (1, 2),
    "ftruncate": (1,),
    "unlink": (1,),
}


def inject(s: Scenario, root: str, errors: tuple[str, ...]) -> dict:
    if not s.cli or shutil.which("strace") is None:
        return {"path": s.name, "runs": 0}
    b = baseline(s, root)
    work = os.path.join(root, "work")
    counts: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    runs = clean_errors = raw_errors = litter_runs = 0
    for err in errors:
        for call, whens in INJECT.items():
            for when in whens:
                reset(work, b.template, s)
                cmd = ["strace", "-f", "-qq", "-o", "/dev/null"]
                cmd += ["-e", f"inject={call}:error={err}:when={when}"]
                cmd += [sys.executable, "-m", "gguf_schema", *s.cli]
                r = subprocess.run(cmd, cwd=work, capture_output=True, timeout=300, check=False)
                runs += 1
                if r.returncode != 0:
                    if b"Traceback" in r.stderr:
                        raw_errors += 1
                        problems.append(f"{call}#{when} {err}: a raw traceback: {r.stderr.decode()[-300:]}")
                    else:
                        clean_errors += 1
                outcome, litter, _, problem = judge(s, b, work)
                counts[outcome] += 1
                if litter:
                    litter_runs += 1
                    if not litter_removed_by_next_write(s, work, litter):
                        problems.append(f"{call}#{when} {err}: left {litter}")
                if problem:
                    problems.append(f"{call}#{when} {err}: {problem}")
    return {
        "path": s.name,
        "runs": runs,
        "outcomes": dict(counts),
        "clean_errors": clean_errors,
        "raw_errors": raw_errors,
        "litter_runs": litter_runs,
        "problems": problems[:10],
        "n_problems": len(problems),
    }


# --------------------------------------------------------------------------- report


def table(kill_rows: list[dict], inject_rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"Command: `python benchmarks/crash_harness.py --kills {args.kills}` "
        f"(strace {'present' if shutil.which('strace') else 'absent'}; Linux, O_TMPFILE temporaries).",
        "",
        "## SIGKILL at spread moments",
        "",
        "| path | runs | killed before the end | aimed at I/O calls (calls x before/after) | write (ms) | old | new "
        "| mixed (a split: refused) | other | journal recovered | runs with litter | litter not removed by next write "
        "| problems |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in kill_rows:
        o = r["outcomes"]
        lines.append(
            f"| {r['path']} | {r['runs']} | {r['kills']} | {r['aimed']} ({r['io_calls']} x 2) | {r['write_ms']:.1f} "
            f"| {o.get('old', 0)} | {o.get('new', 0)} | "
            f"{o.get('mixed', 0)} | {o.get('other', 0)} | {r['journal_recovered']} | {r['litter_runs']} | "
            f"{r['litter_not_removed']} | {r['n_problems']} |"
        )
    lines += [
        "",
        "## Injected I/O errors (strace -e inject=SYSCALL:error=ERR:when=N)",
        "",
        "| path | runs | old | new | mixed (a split: refused) | other | failed cleanly | raw traceback | runs with litter "
        "| problems |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in inject_rows:
        if not r["runs"]:
            lines.append(f"| {r['path']} | 0 (no CLI form or no strace) | | | | | | | | |")
            continue
        o = r["outcomes"]
        lines.append(
            f"| {r['path']} | {r['runs']} | {o.get('old', 0)} | {o.get('new', 0)} | {o.get('mixed', 0)} "
            f"| {o.get('other', 0)} | "
            f"{r['clean_errors']} | {r['raw_errors']} | {r['litter_runs']} | {r['n_problems']} |"
        )
    notes = [
        f"{r['path']}: left after a kill (runs): "
        + (", ".join(f"`{k}` ({v})" for k, v in sorted(r["litter_kinds"].items())) or "nothing")
        + (f"; the output folder the write made, left empty: {r['empty_dirs']} runs" if r.get("empty_dirs") else "")
        for r in kill_rows
        if "litter_kinds" in r
    ]
    if notes:
        lines += ["", "## What kills left beside the targets", "", *(f"- {n}" for n in notes)]
    details = [p for r in kill_rows + inject_rows for p in (f"{r['path']}: {x}" for x in r.get("problems", []))]
    if details:
        lines += ["", "## Problems (first ten per path)", "", *(f"- {d}" for d in details)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=1000, help="kills per path")
    ap.add_argument("--paths", default=None, help="comma-separated paths (default: all)")
    ap.add_argument("--errors", default="ENOSPC,EIO", help="errno names to inject")
    ap.add_argument("--no-inject", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--folder", default=None, help="where to work (default: a temporary folder)")
    ap.add_argument("--out", default=None, help="write the markdown table there too")
    ap.add_argument("--from-logs", nargs="+", metavar="LOG", help="only print the table of earlier runs' stderr")
    args = ap.parse_args()
    if args.from_logs:
        rows: dict[tuple[str, bool], dict] = {}
        for log in args.from_logs:
            with open(log) as fh:
                for line in fh:
                    if line.startswith("{"):
                        r = json.loads(line[: line.rindex("}") + 1])
                        rows[(r["path"], "kills" in r)] = r  # a later log replaces an earlier row
        order = [s.name for s in scenarios()]
        pick = lambda kill: [rows[(p, kill)] for p in order if (p, kill) in rows]  # noqa: E731
        text = table(pick(True), pick(False), args)
        print(text)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text)
        return
    chosen = [s for s in scenarios() if args.paths is None or s.name in args.paths.split(",")]
    rng = random.Random(args.seed)
    kill_rows, inject_rows = [], []
    for s in chosen:
        root = tempfile.mkdtemp(dir=args.folder)
        try:
            t0 = time.perf_counter()
            kill_rows.append(kills(s, root, args.kills, rng))
            print(json.dumps(kill_rows[-1]), f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        if not args.no_inject:
            root = tempfile.mkdtemp(dir=args.folder)
            try:
                inject_rows.append(inject(s, root, tuple(args.errors.split(","))))
                print(json.dumps(inject_rows[-1]), file=sys.stderr, flush=True)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    text = table(kill_rows, inject_rows, args)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
