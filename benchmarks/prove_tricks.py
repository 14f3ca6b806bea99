"""Prove every trick of tests/data/templates/tricks live, and count how many the current audit catches.

Each trick is rendered WITHOUT a sandbox in a forked child with limits (tests.oracle.tricks):
its proof must hold (a command ran, a planted environment value or a file's content is in the output, or the
render went past its time/memory bound). Then it is rendered in Jinja's ImmutableSandboxedEnvironment (does the
sandbox refuse it, or hang/explode on it too?), and audited statically (``audit_template``): caught means at
least one error-severity finding.

    python benchmarks/prove_tricks.py [--timeout 3] [--memory-mb 512] [--update-manifest] [--out FILE] [NAME...]

``--update-manifest`` writes what the sandbox did into MANIFEST.json's ``sandbox`` field. Exit status 1 when
some trick is not live.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.oracle is not installed

from gguf_schema.check.templates import audit_template
from tests.oracle.tricks import Prover, load

TRICKS = Path(__file__).resolve().parents[1] / "tests" / "data" / "templates" / "tricks"


def sandbox_verdict(kind: str, output: str) -> str:
    """What ImmutableSandboxedEnvironment does: ``refuses`` (SecurityError), ``exceeds`` (past the bound),
    ``errors`` (another error) or ``renders``."""
    if kind == "error":
        return "refuses" if output.startswith("SecurityError") else "errors"
    if kind in ("timeout", "memory", "recursion", "crash"):
        return "exceeds"
    return "renders"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--memory-mb", type=int, default=512)
    ap.add_argument("--update-manifest", action="store_true")
    ap.add_argument("--out", type=Path, help="write the table (markdown) here")
    args = ap.parse_args()
    tricks = load(TRICKS)
    names = args.names or sorted(tricks)
    memory = args.memory_mb << 20
    rows = []
    not_live = []
    sandbox = {}
    with Prover() as prover:
        for name in names:
            trick = tricks[name]
            start = time.monotonic()
            proof = prover.prove(trick, timeout=args.timeout, memory=memory)
            took = time.monotonic() - start
            boxed = prover.sandboxed(trick, timeout=args.timeout, memory=memory)
            verdict = sandbox_verdict(boxed.kind, boxed.output)
            sandbox[name] = verdict
            cpu = time.process_time()
            findings = audit_template(trick.source)
            audit_s = time.process_time() - cpu
            errors = sorted({f.rule for f in findings if f.severity == "error"})
            if not proof.live:
                not_live.append(name)
            rows.append(
                (
                    name,
                    trick.cls,
                    trick.proof,
                    trick.config,
                    proof.live,
                    proof.result.kind,
                    took,
                    verdict,
                    errors,
                    audit_s,
                )
            )
            print(
                f"{name:34s} {trick.proof:6s} live={'yes' if proof.live else 'NO '} ({proof.result.kind}, {took:.1f} s)"
                f" sandbox={verdict:8s} audit={','.join(errors) or '-'}",
                flush=True,
            )
    caught = sum(1 for r in rows if r[8])
    live = sum(1 for r in rows if r[4])
    summary = f"{len(rows)} tricks, {live} proven live, {caught} caught by the current audit (an error finding)"
    print(summary)
    if args.update_manifest:
        path = TRICKS / "MANIFEST.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        for name, verdict in sandbox.items():
            manifest[name]["sandbox"] = verdict
        path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.out:
        lines = [
            "| trick | class | proof | config | live | unsandboxed render | ImmutableSandboxedEnvironment | audit errors |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, cls, proof_kind, config, ok, kind, took, verdict, errors, _ in rows:
            lines.append(
                f"| {name} | {cls} | {proof_kind} | {config} | {'yes' if ok else 'NO'} | {kind} ({took:.1f} s) | {verdict} "
                f"| {', '.join(errors) or '-'} |"
            )
        args.out.write_text(summary + "\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    if not_live:
        print("not live:", ", ".join(not_live), file=sys.stderr)
    return 1 if not_live else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
