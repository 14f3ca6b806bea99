"""The corpus of live chat-template tricks (``tests/data/templates/tricks``): read it, and prove each trick live.

Each trick is a template file ``NAME.jinja``, exactly what an audit reads, and an entry of the
folder's ``MANIFEST.json``: how it is proven live (``proof``), the render variables it needs
(``context``), the Jinja configuration it is live under (``config``), the class of trick and a
note, and what Jinja's ``ImmutableSandboxedEnvironment`` does with it (``sandbox``).

A proof is an unsandboxed render in a forked child with limits (:class:`.LiveRenderer` for the
transformers-like configuration, a one-shot child for plain Jinja2), and then:

* ``marker``: a command ran: the template runs ``touch "$GGUF_TRICK_MARKER"``, the prover checks
  the file appeared;
* ``env``: the output holds the value the prover planted in ``GGUF_TRICK_SECRET``;
* ``file``: the output holds the first bytes of ``/etc/passwd``;
* ``bound``: the render went past its time or memory limit (on the conversation of ``context``).

>>> import pathlib
>>> folder = pathlib.Path(__file__).parents[2] / "tests" / "data" / "templates" / "tricks"
>>> tricks = load(folder) if folder.is_dir() else {}
>>> all(t.proof in PROOFS for t in tricks.values())
True
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from .live import _JINJA_MODULE, LiveRenderer, LiveResult

__all__ = ["CONFIGS", "PROOFS", "Proof", "Prover", "Trick", "load"]

#: how a trick is proven live (see the module)
PROOFS = ("marker", "env", "file", "bound")
#: the Jinja configurations a trick is rendered under: ``transformers`` (what transformers and
#: llama-cpp-python configure: ``tojson`` as ``json.dumps``, trim/lstrip blocks), ``plain`` (a plain
#: ``jinja2.Environment`` with Jinja's own ``tojson``: sorted keys, HTML characters escaped), ``autoescape`` (plain
#: Jinja2 with autoescaping on: the output of ``{{ }}`` is escaped, also where a ``{% set %}`` block captures it)
CONFIGS = ("transformers", "plain", "autoescape")
MARK_VAR = "GGUF_TRICK_MARKER"
SECRET_VAR = "GGUF_TRICK_SECRET"
SECRET = "planted-secret-4e1d9b"
FILE = "/etc/passwd"


@dataclass(frozen=True)
class Trick:
    """One trick of the corpus (see the module)."""

    name: str
    source: str
    proof: str
    context: dict[str, Any]
    cls: str
    note: str
    config: str = "transformers"
    sandbox: str = ""


def load(folder: Path) -> dict[str, Trick]:
    """Every trick of ``folder`` (its ``MANIFEST.json`` and ``NAME.jinja`` files), by name."""
    manifest = json.loads((folder / "MANIFEST.json").read_text(encoding="utf-8"))
    out = {}
    for name, entry in manifest.items():
        source = (folder / f"{name}.jinja").read_text(encoding="utf-8")
        config = entry.get("config", "transformers")
        if entry["proof"] not in PROOFS or config not in CONFIGS:
            raise ValueError(f"{name}: unknown proof {entry['proof']!r} or configuration {config!r}")
        out[name] = Trick(
            name,
            source,
            entry["proof"],
            entry["context"],
            entry["class"],
            entry["note"],
            config,
            entry.get("sandbox", ""),
        )
    return out


@dataclass(frozen=True)
class Proof:
    """The outcome of proving one trick: ``live`` when its proof held; ``result``: the render."""

    live: bool
    result: LiveResult


# One render in a fresh child process under a configuration the live server does not have (plain Jinja2, or a
# sandbox), with the same kind of limits. The job comes on stdin, the result goes to stdout as JSON.
_ONE_SHOT = r"""
import importlib.util, json, resource, signal, sys, subprocess
spec = importlib.util.spec_from_file_location("_gguf_template_jinja", sys.argv[1])
environments = importlib.util.module_from_spec(spec)
spec.loader.exec_module(environments)
import jinja2, jinja2.sandbox
job = json.loads(sys.stdin.read())
ext = ["jinja2.ext.loopcontrols", "jinja2.ext.do", environments.generation_extension()]
config = job["config"]
if config in ("plain", "autoescape"):
    env = jinja2.Environment(extensions=ext, autoescape=config == "autoescape")
elif config in ("plain-sandboxed", "autoescape-sandboxed"):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(extensions=ext, autoescape=config == "autoescape-sandboxed")
else:
    env = environments.runtime_environment(sandboxed=config == "transformers-sandboxed")
resource.setrlimit(resource.RLIMIT_AS, (job["memory"], job["memory"]))
cpu = max(1, int(job["timeout"]) + 1)
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
class Alarm(BaseException):
    pass
def ring(signum, frame):
    raise Alarm
signal.signal(signal.SIGALRM, ring)
signal.setitimer(signal.ITIMER_REAL, job["timeout"])
try:
    text = env.from_string(job["source"]).render(**job["context"])
    out = {"kind": "ok", "output": text[:4096], "size": len(text)}
except Alarm:
    out = {"kind": "timeout", "output": ""}
except MemoryError:
    out = {"kind": "memory", "output": ""}
except RecursionError:
    out = {"kind": "recursion", "output": ""}
except BaseException as e:
    out = {"kind": "error", "output": f"{type(e).__name__}: {str(e)[:300]}"}
signal.setitimer(signal.ITIMER_REAL, 0)
sys.stdout.write(json.dumps(out))
sys.stdout.flush()
"""


def render_once(
    source: str,
    context: dict[str, Any],
    config: str,
    *,
    timeout: float,
    memory: int,
    env: dict[str, str] | None = None,
) -> LiveResult:
    """Render ``source`` once under ``config`` (one of :data:`CONFIGS`, or it with ``-sandboxed``: Jinja's
    ``ImmutableSandboxedEnvironment`` instead) in a new child process within ``timeout`` seconds and ``memory`` bytes."""
    job = json.dumps({"source": source, "context": context, "config": config, "timeout": timeout, "memory": memory})
    try:
        done = subprocess.run(
            [sys.executable, "-c", _ONE_SHOT, _JINJA_MODULE],
            input=job,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=timeout + 10.0,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        return LiveResult("timeout", "")
    if not done.stdout:
        return LiveResult("crash", f"exit status {done.returncode}: {done.stderr[-300:]}")
    data = json.loads(done.stdout)
    return LiveResult(data["kind"], data.get("output", ""), data.get("size", 0))


class Prover:
    """Proves tricks live (see the module): a live-render server and a scratch folder for the marker file."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="gguf-tricks-")
        self.marker = os.path.join(self.folder, "payload-ran")
        self.env = {MARK_VAR: self.marker, SECRET_VAR: SECRET}
        self.live = LiveRenderer(env=self.env)
        with open(FILE, encoding="utf-8", errors="replace") as f:
            self.file_text = f.read(10)

    def render(self, trick: Trick, *, timeout: float, memory: int) -> LiveResult:
        """One unsandboxed render of ``trick`` under its configuration (the marker file removed first)."""
        if os.path.exists(self.marker):
            os.remove(self.marker)
        if trick.config == "transformers":
            return self.live.render(trick.source, trick.context, timeout=timeout, memory=memory)
        return render_once(trick.source, trick.context, trick.config, timeout=timeout, memory=memory, env=self.env)

    def prove(self, trick: Trick, *, timeout: float = 5.0, memory: int = 768 << 20) -> Proof:
        """Render ``trick`` unsandboxed and check its proof."""
        result = self.render(trick, timeout=timeout, memory=memory)
        if trick.proof == "marker":
            live = result.kind == "ok" and os.path.exists(self.marker)
        elif trick.proof == "env":
            live = result.kind == "ok" and SECRET in result.output
        elif trick.proof == "file":
            live = result.kind == "ok" and bool(self.file_text) and self.file_text in result.output
        else:
            live = result.exceeded
        return Proof(live, result)

    def sandboxed(self, trick: Trick, *, timeout: float = 5.0, memory: int = 768 << 20) -> LiveResult:
        """Render ``trick`` in Jinja's ``ImmutableSandboxedEnvironment`` under its configuration."""
        return render_once(
            trick.source, trick.context, f"{trick.config}-sandboxed", timeout=timeout, memory=memory, env=self.env
        )

    def close(self) -> None:
        self.live.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Prover:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
