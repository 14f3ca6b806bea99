"""Differential harness: ggml's own GGUF reader against gguf_schema on tens of thousands of hostile files.

For each mutant (:mod:`ggml_mutants`) it records

* ggml's verdict -- ``accept`` / ``reject`` / ``crash`` / ``timeout`` -- for a metadata-only load and a
  full load (:mod:`ggml_reader`; the library is loaded with ctypes from ``--ggml-lib``), and when
  ggml accepts, its data offset and tensor offsets;
* ours: the outcome of :func:`gguf_schema.open` (ok / the GGUFError class / any other exception,
  which is a bug), its wall time, peak RSS and error-message length, then ``nbytes`` and ``data`` of every
  tensor (a GGUFError is fine, anything else a bug); the verdict of the ``ggml``
  validation profile (:func:`profile_verdict`); and the bytes ``gguf-schema check --profile ggml FILE``
  prints (its ``main()``, with every subcommand module already imported, writing to a UTF-8 stream
  with strict errors, as stdout is under a UTF-8 locale other than C.UTF-8). Each runs in its own
  forked child under the same time cap as ggml and an address-space cap;

then whether the profile agrees with ggml, whether ggml would read tensor data at other offsets
than we do, and which of our costs exceed the budget (2 s per phase, 300 MiB peak RSS, 64 KiB
printed, 64 KiB error message).

    python benchmarks/ggml_diff.py --ggml-lib /path/to/libggml-base.so            # full run (resumable)
    python benchmarks/ggml_diff.py --ggml-lib /path/to/libggml-base.so --quick    # a few hundred mutants
    python benchmarks/ggml_diff.py --ggml-lib ... --resume                        # continue a stopped full run
    python benchmarks/ggml_diff.py --ggml-lib ... --confirm --no-cases            # re-measure the overruns, one at a time
    python benchmarks/ggml_diff.py --report-only                                  # rewrite the report from the state
    python benchmarks/ggml_diff.py --rebuild benchmarks/results/ggml_diff_disagreements.jsonl 123 out.gguf

Results: ``benchmarks/results/ggml_diff.md`` (the report), ``ggml_diff_disagreements.jsonl`` and
``ggml_diff_over_budget.jsonl`` (every such mutant of the full run, with the operations that rebuild
it), ``ggml_diff_quick.jsonl`` (the same for the quick run). The state (every record) stays in
``--state`` (default ``/tmp/gguf_schema_ggml_diff``). ggml itself is never part of this project:
give the path of a library built elsewhere.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: keep every child's address space small

import argparse
import collections
import concurrent.futures as cf
import io
import json
import multiprocessing
import platform
import re
import sys
import time
import traceback
from array import array
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from capped import hwm_kb, reset_hwm, rss_kb, run_capped  # noqa: E402
from ggml_mutants import SHARED, InPlace, Mutant, Seeds, apply_ops, build, enumerate_mutants, quick_sample  # noqa: E402
from ggml_reader import GGMLLib, ggml_verdict, normalize_reason  # noqa: E402

import gguf_schema  # noqa: E402
from gguf_schema.errors import GGUFError  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
STATE = Path("/tmp/gguf_schema_ggml_diff")
DEFAULT_LIB = None

#: What one file may cost us: seconds per phase, peak RSS (MiB), bytes printed, bytes of error message.
BUDGET = {"seconds": 2.0, "peak_mb": 300.0, "printed": 64 * 1024, "message": 64 * 1024}


# --------------------------------------------------------------------------- our side


def profile_verdict(path: str) -> Any:
    """The ``ggml`` validation profile's report on ``path`` (the one place that calls it: change here if the API moves)."""
    from gguf_schema.check.validate import check

    return check(path, "ggml")


class _CountingRaw(io.RawIOBase):
    """A binary sink that counts bytes and keeps the first few hundred."""

    def __init__(self) -> None:
        self.n = 0
        self.head = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        n = len(b)
        self.n += n
        if len(self.head) < 400:
            self.head += bytes(b[: 400 - len(self.head)])
        return n


def _memory_error_in(e: BaseException) -> bool:
    seen = 0
    x: BaseException | None = e
    while x is not None and seen < 10:
        if (
            isinstance(x, MemoryError)
            or "MemoryError" in x.__class__.__name__
            or str(x).startswith(("MemoryError", "_ArrayMemoryError"))
        ):
            return True
        x = x.__cause__ or x.__context__
        seen += 1
    return False


def _touch(tensors: list[Any], limit: int = 100_000) -> dict[str, Any]:
    """``nbytes`` and ``data`` of each tensor: a GGUFError is fine (the tensor cannot be read), anything else a bug."""
    t0 = time.perf_counter()
    bug = None
    for t in tensors[:limit]:
        try:
            _ = t.nbytes, t.data
        except GGUFError:
            pass
        except Exception as e:
            bug = f"{type(e).__name__} from tensor {t.name[:40]!r}: {str(e)[:200]}"
            break
    return {"bug": bug, "s": round(time.perf_counter() - t0, 4)}


def _ours_open(
    path: str, layout: dict[str, Any] | None, offsets_path: str | None, cfg: dict[str, Any]
) -> dict[str, Any]:
    def fn(emit):
        base = rss_kb()
        reset_hwm()
        t0 = time.perf_counter()
        f, capped = None, False
        try:
            f = gguf_schema.open(path)
            outcome, msg = "ok", ""
        except GGUFError as e:
            outcome, msg, capped = type(e).__name__, str(e), _memory_error_in(e)
        except Exception as e:
            outcome, msg, capped = f"bug {type(e).__name__}", traceback.format_exc()[-2000:], isinstance(e, MemoryError)
        seconds = time.perf_counter() - t0
        rec: dict[str, Any] = {
            "outcome": outcome,
            "s": round(seconds, 4),
            "peak_mb": round(hwm_kb() / 1024, 1),
            "base_mb": round(base / 1024, 1),
            "msg_len": len(msg),
            "msg_head": msg[:240],
            "capped": capped,
        }
        if f is not None:
            with f:
                tensors = f.tensor_list
                rec["touch"] = _touch(tensors)
                rec["layout"] = {
                    "data_offset": f.data_offset,
                    "alignment": f.alignment,
                    "n_tensors": len(tensors),
                    "n_kv": len(f.fields.records),
                    "metadata_end": f.metadata_end,
                }
                if layout is not None and offsets_path:
                    theirs = array("Q")
                    with open(offsets_path, "rb") as fh:
                        theirs.frombytes(fh.read())
                    ours_abs = [t.offset for t in tensors]
                    theirs_abs = [layout["data_offset"] + o for o in theirs]
                    reads: dict[str, Any] = {
                        "same": ours_abs == theirs_abs,
                        "data_offset": [f.data_offset, layout["data_offset"]],
                    }
                    if ours_abs != theirs_abs:
                        i = next(
                            (i for i, (a, b) in enumerate(zip(ours_abs, theirs_abs, strict=False)) if a != b),
                            min(len(ours_abs), len(theirs_abs)),
                        )
                        reads["first"] = {
                            "index": i,
                            "ours": ours_abs[i] if i < len(ours_abs) else None,
                            "ggml": theirs_abs[i] if i < len(theirs_abs) else None,
                            "n": [len(ours_abs), len(theirs_abs)],
                        }
                    rec["reads"] = reads
        emit(rec)

    child = run_capped(fn, timeout=cfg["timeout"], mem_cap=cfg["mem_cap"])
    if child.records and "outcome" in child.records[0]:
        return child.records[0]
    what = "timeout" if child.timed_out else f"crash ({child.status})"
    return {
        "outcome": what,
        "s": round(child.seconds, 4),
        "peak_mb": round(child.maxrss_kb / 1024, 1),
        "msg_len": 0,
        "msg_head": (child.records[0].get("child_error", "") if child.records else "")[-240:],
        "capped": False,
    }


def _ours_check(path: str, cfg: dict[str, Any]) -> dict[str, Any]:
    def fn(emit):
        reset_hwm()
        t0 = time.perf_counter()
        try:
            report = profile_verdict(path)
            rec = {
                "verdict": "accept" if report.ok else "reject",
                "readable": report.readable,
                "rules": report.rules[:6],
                "n": len(report.findings),
                "first": str(report.findings[0])[:200] if report.findings else "",
            }
        except Exception as e:
            rec = {"verdict": f"bug {type(e).__name__}", "first": traceback.format_exc()[-1500:]}
        rec.update(s=round(time.perf_counter() - t0, 4), peak_mb=round(hwm_kb() / 1024, 1))
        emit(rec)

    child = run_capped(fn, timeout=cfg["timeout"], mem_cap=cfg["mem_cap"])
    if child.records and "verdict" in child.records[0]:
        return child.records[0]
    return {
        "verdict": "timeout" if child.timed_out else f"crash ({child.status})",
        "s": round(child.seconds, 4),
        "peak_mb": round(child.maxrss_kb / 1024, 1),
    }


def _ours_cli(path: str, cfg: dict[str, Any]) -> dict[str, Any]:
    def fn(emit):
        from gguf_schema.cli import main

        raw = _CountingRaw()
        out = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)  # a UTF-8 terminal or pipe
        sys.stdout = sys.stderr = out
        reset_hwm()
        t0 = time.perf_counter()
        try:
            rc: Any = main(["check", "--profile", "ggml", path])
        except SystemExit as e:
            rc = e.code
        except Exception as e:
            rc = f"bug {type(e).__name__}: {str(e)[:200]}"
        seconds = time.perf_counter() - t0
        out.flush()
        emit(
            {
                "rc": rc,
                "printed": raw.n,
                "head": raw.head.decode("utf-8", "replace")[:300],
                "s": round(seconds, 4),
                "peak_mb": round(hwm_kb() / 1024, 1),
            }
        )

    child = run_capped(fn, timeout=cfg["timeout"], mem_cap=cfg["mem_cap"])
    if child.records and "rc" in child.records[0]:
        return child.records[0]
    return {
        "rc": "timeout" if child.timed_out else f"crash ({child.status})",
        "printed": None,
        "s": round(child.seconds, 4),
        "peak_mb": round(child.maxrss_kb / 1024, 1),
    }


# --------------------------------------------------------------------------- judging one record


def judge(rec: dict[str, Any]) -> None:
    """Add ``kinds`` (disagreements, bugs) and ``over`` (budget overruns) to a finished record."""
    g = rec["ggml"]
    o, c, cli = rec["open"], rec.get("check") or {}, rec.get("cli") or {}
    kinds = []
    if (
        o["outcome"].startswith("bug")
        or (o.get("touch") or {}).get("bug")
        or str(c.get("verdict", "")).startswith("bug")
        or str(cli.get("rc", "")).startswith("bug")
    ):
        kinds.append("bug")
    if o["outcome"].startswith("crash") or str(c.get("verdict", "")).startswith("crash"):
        kinds.append("our child crashed")
    cv = c.get("verdict")
    if cv in ("accept", "reject") and g["verdict"] in ("accept", "reject", "crash"):
        if g["verdict"] == "accept" and cv == "reject":
            kinds.append("profile rejects, ggml accepts")
        elif g["verdict"] != "accept" and cv == "accept":
            kinds.append("profile accepts, ggml " + ("crashes" if g["verdict"] == "crash" else "rejects"))
    if (
        g["meta"] == "accept"
        and o["outcome"] != "ok"
        and not o["outcome"].startswith(("bug", "timeout", "crash"))
        and not o.get("capped")
    ):
        kinds.append("ggml reads it, open() refuses it")
    reads = o.get("reads")
    if reads and not reads["same"]:
        kinds.append("ggml reads tensor data elsewhere")
    rec["kinds"] = kinds
    notes = []
    if reads and reads["same"] and reads["data_offset"][0] != reads["data_offset"][1]:
        notes.append("data offsets differ, no tensors (nothing is read there)")
    if g["verdict"] == "timeout":
        notes.append("ggml over its time cap (no verdict)")
    if g["meta"] == "accept" and g["full"] not in (None, "accept"):
        notes.append(f"ggml: metadata load accepts, full load: {g['full']}")
    if cv is not None and cv not in ("accept", "reject") and not str(cv).startswith("bug"):
        notes.append("no profile verdict (" + str(cv).split(" (")[0] + ")")
    rec["notes"] = notes
    over = []
    for phase, r in (("open", o), ("check", c), ("cli", cli)):
        if not r:
            continue
        if r.get("s", 0) > BUDGET["seconds"]:
            over.append(f"{phase} time")
        if r.get("peak_mb", 0) > BUDGET["peak_mb"]:
            over.append(f"{phase} memory")
    if o.get("outcome") == "timeout":
        over.append("open over the time cap")
    if o.get("capped"):
        over.append("open over the memory cap")
    if o.get("msg_len", 0) > BUDGET["message"]:
        over.append("message size")
    if (cli.get("printed") or 0) > BUDGET["printed"]:
        over.append("printed size")
    rec["over"] = over


# --------------------------------------------------------------------------- one mutant, in a worker process

_W: dict[str, Any] = {}


def _init_worker(cfg: dict[str, Any]) -> None:
    seeds = Seeds(cfg["seeds_dir"], shared=Path(cfg["shared"]))
    seeds.load()
    work = Path(cfg["state"]) / f"w{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    _W.update(cfg=cfg, lib=GGMLLib(cfg["ggml_lib"]), seeds=seeds, work=work)
    import gguf_schema.cli

    gguf_schema.cli.build_parser()  # import every subcommand module before the forks: a CLI phase times the command, not imports


def _materialize(m: Mutant) -> tuple[Path | None, dict[str, Any]]:
    cfg, seeds, work = _W["cfg"], _W["seeds"], _W["work"]
    path = work / "mutant.gguf"

    def fn(emit):
        data, repro = build(m, seeds)
        with open(path, "wb") as fh:
            fh.write(data)
        import hashlib

        emit(
            {
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "repro": repro if any(op[0] == "mutate" for op in m.ops) else None,
            }
        )

    child = run_capped(fn, timeout=300, mem_cap=cfg["build_mem_cap"])
    if not child.records or "size" not in child.records[0]:
        return None, {"error": f"could not build the mutant: {child.status} {child.records[-1:]}"}
    return path, child.records[0]


def run_one(d: dict[str, Any]) -> dict[str, Any]:
    """Everything about one mutant (runs in a worker; each reader in its own capped child)."""
    cfg, lib, seeds, work = _W["cfg"], _W["lib"], _W["seeds"], _W["work"]
    m = Mutant.from_dict(d)
    rec = m.to_dict()
    t0 = time.perf_counter()
    inplace = None
    try:
        if m.seed in Seeds.INPLACE:
            inplace = InPlace(seeds.path(m.seed), work / f"{m.seed}.work", m.ops)
            path = inplace.__enter__()
            rec["size"] = path.stat().st_size
        else:
            path, info = _materialize(m)
            rec.update(info)
            if path is None:
                return rec
        g = ggml_verdict(lib, str(path), timeout=cfg["timeout"], mem_cap=cfg["ggml_mem_cap"], workdir=str(work))
        rec["ggml"] = g.to_dict()
        rec["open"] = _ours_open(str(path), g.layout, g.offsets_path, cfg)
        if rec["open"]["outcome"] == "timeout" or rec["open"].get("capped"):
            rec["check"] = {"verdict": "skipped (open over a cap)"}
            rec["cli"] = {"rc": "skipped (open over a cap)"}
        else:
            rec["check"] = _ours_check(str(path), cfg)
            rec["cli"] = _ours_cli(str(path), cfg)
    finally:
        if inplace is not None:
            inplace.__exit__(None, None, None)
    judge(rec)
    rec["wall"] = round(time.perf_counter() - t0, 3)
    return rec


# --------------------------------------------------------------------------- the run


def _fingerprint(mutants: list[Mutant]) -> str:
    import hashlib

    h = hashlib.sha256()
    for m in mutants:
        h.update(json.dumps(m.to_dict(), sort_keys=True).encode())
    return h.hexdigest()[:16]


def _load_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    with open(path) as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except ValueError:  # a line cut by an interrupted run
                pass
    return out


def _worker_cfg(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    return {
        "state": str(state),
        "seeds_dir": str(state / "seeds"),
        "shared": str(args.shared),
        "ggml_lib": args.ggml_lib,
        "timeout": args.timeout,
        "mem_cap": int(args.mem_cap * 2**30),
        "ggml_mem_cap": int(args.ggml_mem_cap * 2**30),
        "build_mem_cap": 8 * 2**30,
    }


def _execute(
    todo: list[Mutant],
    cfg: dict[str, Any],
    jobs: int,
    out_path: Path,
    *,
    total: int,
    deadline: float | None = None,
    on_progress: Any = None,
) -> int:
    """Run ``todo`` on ``jobs`` worker processes, appending each record to ``out_path``; return how many ran."""
    t0 = time.perf_counter()
    n = disagree = over = 0
    ctx = multiprocessing.get_context("spawn")
    with (
        open(out_path, "a") as out,
        cf.ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init_worker, initargs=(cfg,)) as pool,
    ):
        pending: set[cf.Future] = set()
        it = iter(todo)
        stop = False
        while True:
            while not stop and len(pending) < 2 * jobs:
                m = next(it, None)
                if m is None or (deadline and time.time() > deadline):
                    stop = True
                    break
                pending.add(pool.submit(run_one, m.to_dict()))
            if not pending:
                break
            finished, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                rec = fut.result()
                out.write(json.dumps(rec) + "\n")
                out.flush()
                n += 1
                disagree += bool(rec.get("kinds"))
                over += bool(rec.get("over"))
                if rec.get("kinds") and "bug" in rec["kinds"]:
                    print(f"  bug: #{rec['id']} {rec['cls']} {rec.get('seed', '')}: {rec['note'][:70]}", flush=True)
                if n % 250 == 0:
                    el = time.perf_counter() - t0
                    print(
                        f"{n:,} of {total:,} run, {n / el:.1f}/s, {disagree:,} disagreements, {over:,} over budget",
                        flush=True,
                    )
                    if on_progress:
                        on_progress(el)
    return n


def run(args: argparse.Namespace, state: Path, quick: bool) -> None:
    seeds = Seeds(state / "seeds", shared=args.shared, with_gemma=not args.no_gemma)
    seeds.materialize()
    mutants = enumerate_mutants(seeds, random_count=args.random, rng_seed=args.seed)
    if quick:
        mutants = quick_sample(mutants, args.quick_target)
    if args.limit:
        mutants = mutants[: args.limit]
    fp = _fingerprint(mutants)
    records_path = state / "records.jsonl"
    meta_path = state / "meta.json"
    done: set[int] = set()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    if args.resume and meta_path.is_file():
        old = json.loads(meta_path.read_text())
        if old.get("fingerprint") != fp:
            sys.exit(
                f"the mutants changed since the state in {state} was written (fingerprint {old.get('fingerprint')} != {fp}); "
                "start afresh without --resume"
            )
        done = {r["id"] for r in _load_records(records_path)}
        seconds_before, started = old.get("seconds", 0.0), old.get("started", started)
    else:
        for stale in (records_path, state / "confirm.jsonl"):
            if stale.exists():
                stale.unlink()
        seconds_before = 0.0
    meta = {
        "fingerprint": fp,
        "mutants": len(mutants),
        "quick": quick,
        "ggml_lib": os.path.realpath(args.ggml_lib),
        "timeout": args.timeout,
        "mem_cap": args.mem_cap,
        "ggml_mem_cap": args.ggml_mem_cap,
        "jobs": args.jobs,
        "seed": args.seed,
        "random": args.random,
        "seeds": len(seeds.names()),
        "seconds": seconds_before,
        "started": started,
        "command": " ".join(sys.argv),
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    todo = [m for m in mutants if m.id not in done]
    print(
        f"{len(mutants):,} mutants ({len(done):,} done before), {len(todo):,} to run with {args.jobs} workers; state in {state}",
        flush=True,
    )

    def progress(elapsed: float) -> None:
        meta["seconds"] = seconds_before + elapsed
        meta.setdefault("loadavg", []).append(round(os.getloadavg()[0], 2))
        meta_path.write_text(json.dumps(meta, indent=1))

    t0 = time.perf_counter()
    deadline = time.time() + args.time_limit if args.time_limit else None
    n = _execute(
        todo,
        _worker_cfg(args, state),
        args.jobs,
        records_path,
        total=len(todo),
        deadline=deadline,
        on_progress=progress,
    )
    meta["seconds"] = seconds_before + time.perf_counter() - t0
    if n + len(done) >= len(mutants):
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"ran {n:,} mutants in {time.perf_counter() - t0:,.0f} s", flush=True)


def confirm(args: argparse.Namespace, state: Path) -> None:
    """Run every over-budget mutant of the run in ``state`` again, alone (one worker), into ``confirm.jsonl``."""
    records = _load_records(state / "records.jsonl")
    todo = [Mutant.from_dict(r) for r in records if r.get("over")]
    out = state / "confirm.jsonl"
    if out.exists():
        out.unlink()
    print(f"re-measuring {len(todo):,} over-budget mutants with one worker", flush=True)
    t0 = time.perf_counter()
    _execute(todo, _worker_cfg(args, state), 1, out, total=len(todo))
    print(f"done in {time.perf_counter() - t0:,.0f} s", flush=True)


# --------------------------------------------------------------------------- the regression cases, checked against the real ggml


def _as_verdict(ggml: str) -> str:
    """ggml's verdict as a table verdict: an abort (``crash``) means ggml does not load the file."""
    return "reject" if ggml == "crash" else ggml


def verify_cases(args: argparse.Namespace, state: Path) -> list[dict[str, Any]]:
    """Every case of :func:`malformed_cases` and :data:`GGML_EDGE_CASES`: the real ggml's verdict and each profile's."""
    from gguf_schema.check.validate import PROFILES, check
    from gguf_schema.testing import malformed

    lib = GGMLLib(args.ggml_lib)
    work = state / "cases"
    work.mkdir(parents=True, exist_ok=True)
    cfg = {"timeout": args.timeout, "mem_cap": int(args.mem_cap * 2**30)}
    out = []
    edge = getattr(malformed, "GGML_EDGE_CASES", [])
    for table, cases in (("malformed_cases", malformed.malformed_cases()), ("GGML_EDGE_CASES", edge)):
        for case in cases:
            path = work / f"{case.name}.gguf"
            path.write_bytes(case.data)
            g = ggml_verdict(
                lib, str(path), timeout=args.timeout, mem_cap=int(args.ggml_mem_cap * 2**30), workdir=str(work)
            )

            def fn(emit, path=path):
                emit({p: ("accept" if check(str(path), p).ok else "reject") for p in PROFILES})

            child = run_capped(fn, timeout=args.timeout, mem_cap=cfg["mem_cap"])
            ours = (
                child.records[0]
                if child.records and "spec" in child.records[0]
                else {p: child.status for p in PROFILES}
            )
            out.append(
                {
                    "table": table,
                    "name": case.name,
                    "size": len(case.data),
                    "expected": case.expected,
                    "ggml": g.to_dict(),
                    "profiles": ours,
                }
            )
            path.unlink()
    with open(state / "cases.jsonl", "w") as fh:
        for r in out:
            fh.write(json.dumps(r) + "\n")
    bad = [r for r in out if _as_verdict(r["ggml"]["verdict"]) != r["expected"]["ggml"]]
    print(
        f"{len(out)} cases checked against ggml: {len(bad)} expected ggml verdicts differ from the real ggml",
        flush=True,
    )
    for r in bad:
        print(
            f"  {r['table']} {r['name']}: expected {r['expected']['ggml']}, ggml {r['ggml']['verdict']} ({r['ggml']['reason']})"
        )
    return out


# --------------------------------------------------------------------------- the report


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x:.2f}" if x < 100 else f"{x:,.0f}")


def _fmt_b(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{n} B"


def _our_says(rec: dict[str, Any]) -> str:
    c = rec.get("check") or {}
    v = c.get("verdict", "?")
    if v == "reject":
        return "reject " + ",".join(r.replace("GGUF-", "") for r in c.get("rules", [])[:3])
    return v


_NUM = re.compile(r"\d+")


def _open_says(rec: dict[str, Any]) -> str:
    o = rec["open"]
    if o["outcome"] == "ok":
        return "opens"
    head = o.get("msg_head", "").split(" (at offset", 1)[0]
    return f"{o['outcome']}: {_NUM.sub('N', head)[:70]}"


def _example(rec: dict[str, Any]) -> str:
    seed = rec.get("seed") or "generated"
    return f"#{rec['id']} `{seed}` {rec['note'][:90]}".replace("|", "\\|")


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _max_of(rs: list[dict[str, Any]], phase: str, key: str) -> float | None:
    """The largest number ``rec[phase][key]`` of the records (None when none has one)."""
    vals = [
        r[phase][key]
        for r in rs
        if isinstance((r.get(phase) or {}).get(key), (int, float)) and not isinstance(r[phase][key], bool)
    ]
    return max(vals) if vals else None


def _peak_of(rs: list[dict[str, Any]]) -> float:
    """The highest peak RSS (MiB) of any phase of the records."""
    return max([v for v in (_max_of(rs, p, "peak_mb") for p in ("open", "check", "cli")) if v is not None] or [0])


def _class_table(records: list[dict[str, Any]]) -> list[str]:
    by: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        if "ggml" in r:
            by[r["cls"]].append(r)
    lines = [
        "| class | mutants | ggml accept / reject / crash / timeout | profile agrees with ggml | disagreements | "
        "max open s | max check s | max CLI s | max peak RSS | max message | max printed | over budget |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cls in sorted(by):
        rs = by[cls]
        gv = collections.Counter(r["ggml"]["verdict"] for r in rs)
        comparable = [
            r
            for r in rs
            if r["check"].get("verdict") in ("accept", "reject")
            and r["ggml"]["verdict"] in ("accept", "reject", "crash")
        ]
        agree = sum(1 for r in comparable if (r["check"]["verdict"] == "accept") == (r["ggml"]["verdict"] == "accept"))
        dis = sum(1 for r in rs if r.get("kinds"))

        def mx(phase: str, key: str, rs: list[dict[str, Any]] = rs) -> Any:
            return _max_of(rs, phase, key)

        peak = _peak_of(rs)
        lines.append(
            f"| `{cls}` | {len(rs):,} | {gv['accept']:,} / {gv['reject']:,} / {gv['crash']:,} / {gv['timeout']:,} | "
            f"{agree:,} of {len(comparable):,} | {dis:,} | {_fmt_s(mx('open', 's'))} | {_fmt_s(mx('check', 's'))} | "
            f"{_fmt_s(mx('cli', 's'))} | {peak:,.0f} MiB | {_fmt_b(mx('open', 'msg_len'))} | {_fmt_b(mx('cli', 'printed'))} | "
            f"{sum(1 for r in rs if r.get('over')):,} |"
        )
    return lines


def _disagreement_groups(records: list[dict[str, Any]]) -> list[str]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        for k in r.get("kinds", []):
            if k == "ggml reads tensor data elsewhere":
                reads = r["open"]["reads"]
                ours_do, theirs_do = reads["data_offset"]
                what = "data section starts elsewhere" if ours_do != theirs_do else "tensor offsets differ"
                key = (k, f"{what}; ggml {r['ggml']['verdict']}", _our_says(r))
            elif k == "ggml reads it, open() refuses it":
                key = (k, f"ggml meta {r['ggml']['meta']}, full {r['ggml']['full']}", _open_says(r))
            elif k in ("bug", "our child crashed"):
                touch = (r["open"].get("touch") or {}).get("bug")
                key = (
                    k,
                    r["ggml"]["verdict"],
                    (
                        f"Tensor.data: {_NUM.sub('N', touch.split(':', 1)[0] + ':' + touch.split(':', 2)[-1])[:90]}"
                        if touch
                        else _open_says(r)
                        + " / check "
                        + str(r["check"].get("verdict"))[:60]
                        + " / cli "
                        + str(r["cli"].get("rc"))[:60]
                    ),
                )
            else:
                key = (k, normalize_reason(r["ggml"]["reason"]) or r["ggml"]["verdict"], _our_says(r))
            groups[key].append(r)
    lines = [
        "| kind | ggml says | ours says | mutants | classes | example (id, seed, mutation) |",
        "|---|---|---|---|---|---|",
    ]
    for (k, theirs, ours), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        classes = collections.Counter(r["cls"] for r in rs)
        cl = ", ".join(f"`{c}` {n}" for c, n in classes.most_common(4)) + (" …" if len(classes) > 4 else "")
        lines.append(f"| {k} | {_esc(theirs)} | {_esc(ours)} | {len(rs):,} | {cl} | {_example(rs[0])} |")
    return lines


def _over_groups(records: list[dict[str, Any]]) -> list[str]:
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        if r.get("over"):
            groups[r["cls"]].append(r)
    lines = [
        "| class | mutants over | overruns (mutants) | worst open s | worst check s | worst CLI s | worst peak RSS | worst message | worst printed | slowest case |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cls, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):

        def mx(phase: str, key: str, rs: list[dict[str, Any]] = rs) -> Any:
            return _max_of(rs, phase, key)

        peak = _peak_of(rs)
        worst = max(rs, key=lambda r: r["open"].get("s", 0) + (r["check"].get("s") or 0) + (r["cli"].get("s") or 0))
        kinds = collections.Counter(o for r in rs for o in r["over"])
        lines.append(
            f"| `{cls}` | {len(rs):,} | {', '.join(f'{k} {v:,}' for k, v in kinds.most_common())} | {_fmt_s(mx('open', 's'))} | "
            f"{_fmt_s(mx('check', 's'))} | {_fmt_s(mx('cli', 's'))} | {peak:,.0f} MiB | {_fmt_b(mx('open', 'msg_len'))} | "
            f"{_fmt_b(mx('cli', 'printed'))} | {_example(worst)} |"
        )
    return lines


def _ggml_costs(records: list[dict[str, Any]]) -> list[str]:
    rs = [r for r in records if "ggml" in r]
    slow = sorted(rs, key=lambda r: -(r["ggml"]["meta_s"] or 0))[:8]
    lines = [
        "| mutant | ggml meta verdict | ggml meta s | ggml full s | our open s | our check s | our peak RSS | our message | printed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in slow:
        lines.append(
            f"| {_example(r)} | {r['ggml']['meta']} | {_fmt_s(r['ggml']['meta_s'])} | {_fmt_s(r['ggml']['full_s'])} | "
            f"{_fmt_s(r['open'].get('s'))} | {_fmt_s(r['check'].get('s'))} | {r['open'].get('peak_mb', 0):,.0f} MiB | "
            f"{_fmt_b(r['open'].get('msg_len'))} | {_fmt_b(r['cli'].get('printed'))} |"
        )
    return lines


def _gen_table(records: list[dict[str, Any]], alone: dict[int, dict[str, Any]]) -> list[str]:
    """One row per size-built file; a mutant measured again alone (``alone``, by id) shows those figures, marked *."""
    rs = sorted(
        (alone.get(r["id"], r) for r in records if r["cls"].startswith("gen.") and "ggml" in r), key=lambda r: r["id"]
    )
    lines = [
        "| class | file | size | ggml meta / full | ggml s (meta + full) | open() | open s | peak RSS | message | profile | "
        "check s | printed | CLI s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        g, o, c, cli = r["ggml"], r["open"], r["check"], r["cli"]
        mark = " *" if r["id"] in alone else ""
        lines.append(
            f"| `{r['cls']}`{mark} | {_esc(r['note'][:60])} | {_fmt_b(r.get('size'))} | {g['meta']} / {g['full'] or '-'} | "
            f"{_fmt_s((g['meta_s'] or 0) + (g['full_s'] or 0))} | {_esc(o['outcome'])} | {_fmt_s(o.get('s'))} | "
            f"{o.get('peak_mb', 0):,.0f} MiB | {_fmt_b(o.get('msg_len'))} | {_esc(_our_says(r))} | {_fmt_s(c.get('s'))} | "
            f"{_fmt_b(cli.get('printed'))} | {_fmt_s(cli.get('s'))} |"
        )
    return lines


def _summary(records: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    rs = [r for r in records if "ggml" in r]
    gv = collections.Counter(r["ggml"]["verdict"] for r in rs)
    gm = collections.Counter(r["ggml"]["meta"] for r in rs)
    ov = collections.Counter("ok" if r["open"]["outcome"] == "ok" else r["open"]["outcome"].split(" (")[0] for r in rs)
    comparable = [
        r
        for r in rs
        if r["check"].get("verdict") in ("accept", "reject") and r["ggml"]["verdict"] in ("accept", "reject", "crash")
    ]
    agree = sum(1 for r in comparable if (r["check"]["verdict"] == "accept") == (r["ggml"]["verdict"] == "accept"))
    kinds = collections.Counter(k for r in rs for k in r.get("kinds", []))
    over = collections.Counter(o for r in rs for o in r.get("over", []))
    base = [r["open"].get("base_mb") for r in rs if r["open"].get("base_mb")]
    rate = len(rs) / meta["seconds"] if meta.get("seconds") else 0
    lines = [
        "| measure | value |",
        "|---|---|",
        f"| mutants run | {len(rs):,} (of {meta['mutants']:,} enumerated){' — ' + str(len(records) - len(rs)) + ' could not be built' if len(records) > len(rs) else ''} |",
        f"| wall time | {meta.get('seconds', 0):,.0f} s with {meta.get('jobs')} workers ({rate:.1f} mutants/s) |",
        f"| ggml full load: accept / reject / crash / timeout | {gv['accept']:,} / {gv['reject']:,} / {gv['crash']:,} / {gv['timeout']:,} |",
        f"| ggml metadata load: accept / reject / crash / timeout | {gm['accept']:,} / {gm['reject']:,} / {gm['crash']:,} / {gm['timeout']:,} |",
        f"| `gguf_schema.open` outcomes | {', '.join(f'{k} {v:,}' for k, v in ov.most_common())} |",
        f"| `ggml` profile agrees with ggml's full load | {agree:,} of {len(comparable):,} comparable ({100 * agree / max(1, len(comparable)):.2f} %) |",
    ]
    for k, v in sorted(kinds.items()):
        lines.append(f"| mutants: {k} | {v:,} |")
    for k, v in sorted(collections.Counter(n for r in rs for n in r.get("notes", [])).items()):
        lines.append(f"| note: {k} | {v:,} |")
    lines.append(f"| mutants over a budget | {sum(1 for r in rs if r.get('over')):,} |")
    for k, v in sorted(over.items()):
        lines.append(f"| … {k} | {v:,} |")
    if base:
        lines.append(
            f"| RSS of a measuring child before it opens (fork of a worker with gguf_schema imported) | {min(base):.0f}-{max(base):.0f} MiB |"
        )
    return lines


def _cases_section(cases: list[dict[str, Any]]) -> list[str]:
    from gguf_schema.check.validate import PROFILES

    lines = [
        "| table | case | size | expected ggml | real ggml (meta / full) | ggml's reason | profiles today (spec, ggml, lenient) | profiles that differ from expected |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in cases:
        g = r["ggml"]
        differ = [p for p in PROFILES if r["profiles"].get(p) != r["expected"].get(p)]
        flag = "" if _as_verdict(g["verdict"]) == r["expected"]["ggml"] else " **(differs)**"
        lines.append(
            f"| {r['table']} | `{r['name']}` | {_fmt_b(r['size'])} | {r['expected']['ggml']} | {g['meta']} / {g['full'] or '-'}{flag} | "
            f"{_esc(g['reason'][:90])} | {', '.join(str(r['profiles'].get(p)) for p in PROFILES)} | {', '.join(differ) or '-'} |"
        )
    return lines


def write_report(args: argparse.Namespace) -> None:
    out_dir = args.output_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    full_state, quick_state = args.state, args.quick_state
    lines = ["# ggml's reader against gguf_schema: differential run and the cost of hostile input", ""]
    lines += [
        "`python benchmarks/ggml_diff.py --ggml-lib PATH/libggml-base.so` (full run) and `--quick` (a sample). Every mutant is",
        "loaded by ggml's own reader through ctypes in capped children: metadata only (`no_alloc`, as llama.cpp's loader",
        "opens a file) and, when that accepts, a full load (the data section read too; the `ggml` validation profile models",
        "this one). On our side, each in its own forked child: `gguf_schema.open` (outcome, wall time, peak RSS = `VmHWM` of",
        "the child, error-message length; then `nbytes` and `data` of every tensor, where anything but a `GGUFError` is a",
        "bug), the `ggml` validation profile (`gguf_schema.check.validate.check(path, 'ggml')`),",
        "and what `gguf-schema check --profile ggml FILE` prints (its `main()` run in the child, subcommand modules already",
        "imported, stdout/stderr counted through a UTF-8 stream with strict errors, as under a UTF-8 locale other than C.UTF-8).",
        f"Budgets: {BUDGET['seconds']:g} s per phase, {BUDGET['peak_mb']:g} MiB peak RSS, {BUDGET['printed'] // 1024} KiB printed, "
        f"{BUDGET['message'] // 1024} KiB error message. A phase over a budget is an overrun.",
        "",
    ]
    for title, state, files in (
        ("Full run", full_state, ("ggml_diff_disagreements.jsonl", "ggml_diff_over_budget.jsonl")),
        ("Quick run", quick_state, ("ggml_diff_quick.jsonl",)),
    ):
        meta_path = state / "meta.json"
        if not meta_path.is_file():
            continue
        meta = json.loads(meta_path.read_text())
        records = _load_records(state / "records.jsonl")
        for r in records:
            if "ggml" in r:
                judge(r)  # judged again: the report follows the current rules
        rs = [r for r in records if "ggml" in r]
        lines += [
            f"## {title}",
            "",
            f"Command: `{_esc(meta.get('command', ''))}`; started {meta.get('started')}, finished {meta.get('finished', '(not finished)')}.",
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; ggml library "
            f"`{Path(meta['ggml_lib']).name}`; caps: {meta['timeout']:g} s per load, address space {meta['mem_cap']:g} GiB (ours) / "
            f"{meta['ggml_mem_cap']:g} GiB (ggml); {meta['seeds']} seed files; random seed {meta['seed']}.",
            "",
        ]
        if meta.get("loadavg"):
            la = meta["loadavg"]
            lines += [
                f"1-minute load average during the run (sampled every 250 mutants): median {sorted(la)[len(la) // 2]:.1f}, "
                f"max {max(la):.1f} on {os.cpu_count()} CPUs: other work shared the machine, so times are upper bounds.",
                "",
            ]
        if meta.get("note"):
            lines += [meta["note"], ""]
        lines += [*_summary(records, meta), ""]
        lines += ["### Per mutant class", "", *_class_table(records), ""]
        lines += [
            "### Disagreements, grouped",
            "",
            "`profile …` compares the `ggml` profile with ggml's full load (crash counts as not accepting). `ggml reads it,",
            "open() refuses it`: ggml's metadata load accepts a file `gguf_schema.open` cannot open. `ggml reads tensor data",
            "elsewhere`: ggml accepts and would read some tensor at another absolute offset than `Tensor.offset`.",
            "",
        ]
        lines += [*_disagreement_groups(rs), ""]
        lines += ["### Budget overruns, grouped", "", *_over_groups(rs), ""]
        confirmed = [r for r in _load_records(state / "confirm.jsonl") if "ggml" in r]
        if confirmed:
            for r in confirmed:
                judge(r)
            first = {r["id"]: set(r.get("over", [])) for r in rs}
            same = sum(1 for r in confirmed if set(r.get("over", [])) & first.get(r["id"], set()))
            lines += [
                "The same over-budget mutants measured again, one at a time (one worker, nothing else of this harness",
                f"running): {same:,} of {len(confirmed):,} are over a budget again.",
                "",
            ]
            lines += [*_over_groups(confirmed), ""]
        gen = _gen_table(rs, {r["id"]: r for r in confirmed})
        if len(gen) > 2:
            lines += [
                "### The size-built hostile files (classes a-d)",
                "",
                "Rows marked * show the measurement made alone (one worker) after the run; the others are from the run.",
                "",
            ]
            lines += [*gen, ""]
        lines += ["### Where ggml itself is slowest", "", *_ggml_costs(rs), ""]
        if files:
            kept = [r for r in rs if r.get("kinds") or r.get("over")]
            slim = [
                {
                    k: r.get(k)
                    for k in (
                        "id",
                        "cls",
                        "seed",
                        "note",
                        "ops",
                        "repro",
                        "size",
                        "sha256",
                        "kinds",
                        "over",
                        "ggml",
                        "open",
                        "check",
                        "cli",
                    )
                }
                for r in kept
            ]
            if len(files) == 2:
                parts = {files[0]: [r for r in slim if r["kinds"]], files[1]: [r for r in slim if r["over"]]}
            else:
                parts = {files[0]: slim}
            for name, rows in parts.items():
                with open(out_dir / name, "w") as fh:
                    for r in rows:
                        fh.write(json.dumps(r) + "\n")
            lines += [
                "Every such mutant, with the operations that rebuild it from its seed (`ops`; `repro` for seeded random",
                "mutations): "
                + ", ".join(f"`benchmarks/results/{n}` ({len(rows):,} lines)" for n, rows in parts.items())
                + ". Rebuild one with `python benchmarks/ggml_diff.py --rebuild FILE ID OUT.gguf` (ids number the mutants of",
                "that run; each line carries its own seed and operations, and `sha256` of the file when it was built whole).",
                "",
            ]
    cases_path = full_state / "cases.jsonl"
    if cases_path.is_file():
        cases = _load_records(cases_path)
        lines += [
            "## The regression cases against the real ggml",
            "",
            "`gguf_schema.testing.malformed`: `malformed_cases()` (used by the tests) and `GGML_EDGE_CASES` (the classes this",
            "harness found; tests/test_validate.py checks every verdict), each loaded by the real ggml. 'expected ggml' is the table's verdict,",
            "the real ggml's is next to it; the last column lists the profiles whose verdict today differs from the table's.",
            "",
        ]
        lines += [*_cases_section(cases), ""]
    (out_dir / "ggml_diff.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out_dir / 'ggml_diff.md'}")


# --------------------------------------------------------------------------- rebuilding a reported mutant


def rebuild(args: argparse.Namespace) -> None:
    source, ident, out = args.rebuild
    rec = next((r for r in _load_records(Path(source)) if str(r["id"]) == ident), None)
    if rec is None:
        sys.exit(f"no record with id {ident} in {source}")
    seeds = Seeds(args.state / "seeds", shared=args.shared)
    seeds.materialize()
    ops = rec.get("repro") or rec["ops"]
    if rec["seed"]:
        data, _ = apply_ops(seeds.data(rec["seed"]), ops)
    else:
        data, _ = build(Mutant.from_dict(rec), seeds)
    Path(out).write_bytes(data)
    print(f"wrote {out}: {len(data):,} bytes ({rec['cls']}: {rec['note']})")


# --------------------------------------------------------------------------- re-checking recorded disagreements


def recheck(args: argparse.Namespace) -> None:
    """Our side again (open, touch every tensor, the ``ggml`` profile) on every mutant of a disagreements file,
    against the ggml verdicts recorded there: which disagreements and bugs the current code still has.

    ggml is not run again (its verdicts are in the file); each mutant runs in a capped child.
    """
    from gguf_schema.reader import read

    source = Path(args.recheck)
    records = _load_records(source)
    seeds = Seeds(args.state / "seeds", shared=args.shared)
    seeds.materialize()
    tmp = args.state / "recheck.gguf"
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    loads = [os.getloadavg()[0]]
    for rec in records:
        ops = rec.get("repro") or rec["ops"]
        data = apply_ops(seeds.data(rec["seed"]), ops)[0] if rec["seed"] else build(Mutant.from_dict(rec), seeds)[0]
        tmp.write_bytes(data)
        del data

        def ours(emit: Any) -> None:
            report = profile_verdict(str(tmp))
            touch: dict[str, Any] = {"bug": None}
            try:
                with read(str(tmp)) as f:
                    touch = _touch(f.tensor_list)
            except GGUFError:
                pass
            emit(
                {
                    "verdict": "accept" if report.ok else "reject",
                    "rules": report.rules[:6],
                    "bug": touch["bug"],
                }
            )

        res = run_capped(ours, timeout=args.timeout, mem_cap=int(args.mem_cap * 2**30))
        got = res.records[0] if res.records else {"verdict": f"no verdict ({res.status})", "rules": [], "bug": None}
        ggml = _as_verdict(rec["ggml"]["verdict"] if rec["ggml"]["full"] is None else rec["ggml"]["full"])
        rows.append({"id": rec["id"], "cls": rec["cls"], "was": rec["kinds"], "ggml": ggml, **got})
        loads.append(os.getloadavg()[0])
    seconds = time.perf_counter() - t_start
    tmp.unlink(missing_ok=True)
    agree = [r for r in rows if r["verdict"] == r["ggml"]]
    bugs = [r for r in rows if r["bug"]]
    lines = [
        "# Recorded disagreements of the full run, re-checked with the current code",
        "",
        f"`python benchmarks/ggml_diff.py --recheck {source.as_posix()}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"{len(rows)} mutants rebuilt and run again on our side (each in a child capped at {args.timeout:g} s and "
        f"{args.mem_cap:g} GiB); ggml's verdicts are the recorded ones (its full load; an abort counts as a rejection). "
        f"{seconds:,.0f} s, 1-minute load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} CPUs.",
        "",
        f"- the `ggml` profile now gives ggml's verdict on {len(agree)} of {len(rows)}",
        f"- bugs (an exception other than a GGUFError from `nbytes`/`data`): {len(bugs)}",
        "",
        "| was | class | mutants | profile now agrees | still differs (ggml / profile, rules), or notes |",
        "|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        groups[(", ".join(r["was"]), r["cls"])].append(r)
    for (was, cls), rs in sorted(groups.items()):
        differ = [r for r in rs if r["verdict"] != r["ggml"]]
        detail = "; ".join(
            sorted({f"#{r['id']} {r['ggml']} / {r['verdict']} {','.join(x[5:] for x in r['rules'])}" for r in differ})
        )
        if "elsewhere" in was:  # the verdicts agreed before too: what matters is that the profile now says so
            warned = sum("GGUF-W010" in r["rules"] for r in rs)
            detail = f"W010 (ggml reads the data elsewhere) on {warned} of {len(rs)}" + (
                f"; {detail}" if detail else ""
            )
        lines.append(f"| {was} | `{cls}` | {len(rs)} | {len(rs) - len(differ)} | {_esc(detail[:300]) or '-'} |")
    if bugs:
        lines += ["", "Bugs:", ""] + [f"- #{r['id']} `{r['cls']}`: {_esc(r['bug'])}" for r in bugs]
    out = args.output_dir / "ggml_diff_recheck.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}: {len(agree)} of {len(rows)} agree, {len(bugs)} bugs")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ggml-lib", default=DEFAULT_LIB, help="path of a libggml-base shared library (built elsewhere)")
    p.add_argument("--quick", action="store_true", help="a sample of a few hundred mutants over every class")
    p.add_argument("--quick-target", type=int, default=300)
    p.add_argument("--resume", action="store_true", help="continue the run in the state directory")
    p.add_argument("--report-only", action="store_true", help="only rewrite the report from the state")
    p.add_argument(
        "--recheck", metavar="JSONL", default=None, help="run our side again on every mutant of a disagreements file"
    )
    p.add_argument("--rebuild", nargs=3, metavar=("JSONL", "ID", "OUT"), help="write the file of one reported mutant")
    p.add_argument("--no-cases", action="store_true", help="skip checking the malformed.py cases against ggml")
    p.add_argument(
        "--confirm", action="store_true", help="re-measure the over-budget mutants of the run, one at a time"
    )
    p.add_argument("--cases-only", action="store_true", help="only check the malformed.py cases against ggml")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds each load (ggml's or ours) may take")
    p.add_argument("--mem-cap", type=float, default=6.0, help="address-space cap of our children, GiB")
    p.add_argument("--ggml-mem-cap", type=float, default=6.0, help="address-space cap of ggml's children, GiB")
    p.add_argument("--random", type=int, default=6000, help="random (seeded Mutator) mutants in a full run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=0, help="run only the first N mutants")
    p.add_argument("--time-limit", type=float, default=0, help="stop submitting after this many seconds (resume later)")
    p.add_argument("--no-gemma", action="store_true", help="leave gemma-3-270m out of the seeds")
    p.add_argument("--shared", type=Path, default=SHARED, help="the ../shared folder (real vocabulary files)")
    p.add_argument("--state", type=Path, default=STATE / "full")
    p.add_argument("--quick-state", type=Path, default=STATE / "quick")
    p.add_argument("--output-dir", type=Path, default=RESULTS)
    p.add_argument(
        "--note", default=None, help="with --report-only: a sentence stored with the run and printed in its report"
    )
    args = p.parse_args(argv)
    if args.rebuild:
        rebuild(args)
        return 0
    if args.recheck:
        recheck(args)
        return 0
    if args.note is not None:
        meta_path = (args.quick_state if args.quick else args.state) / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["note"] = args.note
        meta_path.write_text(json.dumps(meta, indent=1))
    if not args.report_only:
        if not args.ggml_lib:
            p.error("--ggml-lib PATH is required (a libggml-base.so built from ggml's sources)")
        state = args.quick_state if args.quick else args.state
        state.mkdir(parents=True, exist_ok=True)
        if not args.no_cases or args.cases_only:
            verify_cases(args, args.state)
        if args.confirm:
            confirm(args, state)
        elif not args.cases_only:
            run(args, state, quick=args.quick)
    write_report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
