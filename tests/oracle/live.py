"""Chat templates rendered WITHOUT a sandbox, as a vulnerable runtime renders them: to prove a payload is live.

The template audit's tests and its differential fuzzer (``benchmarks/fuzz_templates.py``) must show
that each trick really runs a command, reads the environment or exhausts a bound when a runtime
renders it unsandboxed. That is dangerous by design, so it never happens in the calling process:
:class:`LiveRenderer` starts one server process (Jinja imported once), and the server forks a
child for each render, which sets hard limits on its address space and CPU time and has an alarm
before it renders; the server kills a child that outlives its timeout. A render can therefore
hang, allocate or crash without touching the caller, and costs a fork (a few milliseconds). It lives
in ``tests/``, not in the package: an installed gguf-schema never carries an unsandboxed renderer.

:meth:`LiveRenderer.observe` renders one template on many requests, under several loader
configurations, in ONE forked child, in the observing environments of
:mod:`gguf_schema.check.templates.observe` (what the containment oracle compares with the audit's
prediction). Each render has its own CPU-time alarm; the child runs in a temporary folder with the
functions that start processes or change files replaced by ones that refuse (the names a template
looks up and the calls it makes are recorded before that, so what it reached is still seen).

>>> with LiveRenderer() as live:
...     r = live.render("{{ messages[0]['content'] | upper }}", {"messages": [{"content": "hi"}]})
>>> r.kind, r.output
('ok', 'HI')
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import gguf_schema
from gguf_schema.errors import GGUFInternalError

__all__ = ["LiveRenderer", "LiveResult"]

# the environments module imports nothing of gguf-schema: the server loads it by path and stays small
_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(gguf_schema.__file__)), "check", "templates")
_JINJA_MODULE = os.path.join(_TEMPLATES, "jinja.py")
_OBSERVE_MODULE = os.path.join(_TEMPLATES, "observe.py")

_SERVER = r"""
import importlib.util, json, os, resource, select, signal, subprocess, sys, time  # a runtime has subprocess loaded
spec = importlib.util.spec_from_file_location("_gguf_template_jinja", sys.argv[1])
environments = importlib.util.module_from_spec(spec)
spec.loader.exec_module(environments)
ENV = environments.runtime_environment(sandboxed=False)
TRACED = []

def internal(name):
    return isinstance(name, str) and ((len(name) > 1 and name[0] == "_") or name in (
        "mro", "gi_frame", "gi_code", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "tb_frame",
        "co_code", "popen", "Popen", "check_output", "getoutput", "import_module"))

class Tracing(type(ENV)):
    # the same unsandboxed environment, noting every internal name a lookup reaches (and still reaching it)

    def getattr(self, obj, attribute):
        value = super().getattr(obj, attribute)
        if internal(attribute) and not isinstance(value, self.undefined):
            TRACED.append(attribute)
        return value

    def getitem(self, obj, argument):
        value = super().getitem(obj, argument)
        if internal(argument) and not isinstance(value, self.undefined) and not (
            isinstance(obj, dict) and argument in obj and type(obj) is dict and obj is not getattr(value, "__dict__", None)
        ):
            TRACED.append(argument)
        return value

TRACE = Tracing(trim_blocks=True, lstrip_blocks=True, extensions=[type(e) for e in ENV.extensions.values()])
TRACE.filters.update(ENV.filters)
TRACE.globals.update(ENV.globals)

class Alarm(BaseException):
    pass

def ring(signum, frame):
    raise Alarm

def child(job, w):
    resource.setrlimit(resource.RLIMIT_AS, (job["memory"], job["memory"]))
    cpu = max(1, int(job["timeout"]) + 1)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, job["timeout"])
    out = {"kind": "ok", "output": ""}
    try:
        env = TRACE if job.get("trace") else ENV
        text = env.from_string(job["source"]).render(**job["context"])
        out["output"] = text[: job["keep"]]
        out["size"] = len(text)
    except Alarm:
        out = {"kind": "timeout", "output": ""}
    except MemoryError:
        out = {"kind": "memory", "output": ""}
    except RecursionError:
        out = {"kind": "recursion", "output": ""}
    except BaseException as e:
        out = {"kind": "error", "output": f"{type(e).__name__}: {str(e)[:300]}"}
    signal.setitimer(signal.ITIMER_REAL, 0)
    out["internals"] = sorted(set(TRACED))[:20]
    os.write(w, json.dumps(out).encode())
    os._exit(0)

OBSERVE = None
CONFIGURED = {}

def configured(config):
    # config: [sandboxed, tojson ("transformers": no key sorting or escaping; "jinja2": Jinja's own), autoescape]
    global OBSERVE
    if OBSERVE is None:
        spec = importlib.util.spec_from_file_location("_gguf_template_observe", sys.argv[2])
        OBSERVE = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(OBSERVE)
    key = tuple(config)
    if key not in CONFIGURED:
        import jinja2.filters
        base = environments.runtime_environment(sandboxed=bool(config[0]))
        if config[1] == "jinja2":
            base.filters["tojson"] = jinja2.filters.FILTERS["tojson"]
        base.autoescape = bool(config[2])
        CONFIGURED[key] = OBSERVE.observing_environment(base)
    return CONFIGURED[key]

def refuse(*args, **kwargs):
    raise PermissionError("refused in the observing child")

def guard():
    # what a payload would run or change: refused (its lookups and its call are recorded before)
    import builtins, io, shutil, tempfile, warnings
    warnings.simplefilter("ignore")  # Python's compile warnings about the template's generated code
    os.chdir(tempfile.mkdtemp(prefix="gguf-oracle-"))
    for name in ("system", "popen", "fork", "forkpty", "kill", "killpg", "remove", "unlink", "rmdir", "removedirs",
                 "rename", "renames", "replace", "truncate", "chmod", "chown", "lchown", "link", "symlink", "mkdir",
                 "makedirs", "putenv", "unsetenv", "chdir", "chroot", "setuid", "setgid", "_exit", "abort",
                 "posix_spawn", "posix_spawnp", "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp",
                 "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe"):
        if hasattr(os, name) and name != "_exit":
            setattr(os, name, refuse)
    subprocess.Popen = refuse
    for name in ("run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"):
        setattr(subprocess, name, refuse)
    shutil.rmtree = shutil.move = shutil.copy = shutil.copyfile = refuse
    real_open = builtins.open
    def read_only(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            raise PermissionError("refused in the observing child")
        return real_open(file, mode, *args, **kwargs)
    builtins.open = io.open = read_only

def observe_child(job, w):
    resource.setrlimit(resource.RLIMIT_AS, (job["memory"], job["memory"]))
    cpu = max(1, int(job["timeout"] * (len(job["renders"]) + 1)) + 1)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
    write = os.write
    guard()
    signal.signal(signal.SIGVTALRM, ring)
    templates = {}
    for config, context in job["renders"]:
        env = configured(config)
        kind = "ok"
        compiled = None
        signal.setitimer(signal.ITIMER_VIRTUAL, job["timeout"])
        try:
            template = templates.get(tuple(config))
            if template is None:
                template = templates[tuple(config)] = OBSERVE.compile_observed(env, job["source"])
                compiled = env.observation.to_json()
                if template is None:
                    kind = "error"
            if template is not None:
                seen = OBSERVE.observe(env, template, context, keep=job["keep"], max_output=job["max_output"])
                kind = "ok" if seen.error is None else "error"
        except Alarm:
            kind = "timeout"
        except MemoryError:
            kind = "memory"
        except RecursionError:
            kind = "recursion"
        except BaseException as e:
            env.observation.error = f"{type(e).__name__}: {str(e)[:300]}"
            kind = "error"
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        out = {"kind": kind, "observation": env.observation.to_json()}
        if compiled is not None:
            out["compile"], compiled = compiled, None
        write(w, (json.dumps(out) + "\n").encode())
        if kind in ("timeout", "memory", "recursion"):
            break  # one bound exceeded is enough; the rest are not rendered
    os._exit(0)

def serve_observe(job):
    for config, _ in job["renders"]:
        configured(config)  # made once, in the server: the children inherit them
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            observe_child(job, w)
        except BaseException:
            import traceback
            traceback.print_exc(limit=5)
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + job["wall"]
    chunks = []
    killed = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            killed = True
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            data = os.read(r, 1 << 16)
            if not data:
                break
            chunks.append(data)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    renders = [json.loads(row) for row in b"".join(chunks).splitlines() if row.strip()]
    if len(renders) < len(job["renders"]) and not (renders and renders[-1]["kind"] in ("timeout", "memory", "recursion")):
        if killed or (os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)):
            why = "timeout"
        else:
            why = "crash"
        renders.append({"kind": why, "observation": None, "status": status})
    return {"renders": renders}

for line in sys.stdin:
    job = json.loads(line)
    if job.get("observe"):
        sys.stdout.write(json.dumps(serve_observe(job)) + "\n")
        sys.stdout.flush()
        continue
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            child(job, w)
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + job["timeout"] + 2.0
    chunks = []
    killed = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            killed = True
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            data = os.read(r, 1 << 16)
            if not data:
                break
            chunks.append(data)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if killed:
        result = {"kind": "timeout", "output": ""}
    elif chunks:
        result = json.loads(b"".join(chunks))
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        result = {"kind": "timeout", "output": ""}
    else:
        result = {"kind": "crash", "output": f"exit status {status}"}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
"""


@dataclass(frozen=True)
class LiveResult:
    """One unsandboxed render.

    Attributes:
        kind: ``ok``; ``error`` (the template raised); ``timeout`` (past its time, or its CPU limit);
            ``memory`` (past its address-space limit); ``recursion``; ``crash`` (the child died otherwise).
        output: the rendered text (at most ``keep`` characters), or the error.
        size: the full length of the output, for ``ok``.
        internals: with ``trace``, the internal names (underscore names, frames, ``popen``, ``environ``...)
            lookups reached (a dict item of that name in plain data excepted).
    """

    kind: str
    output: str
    size: int = 0
    internals: tuple[str, ...] = ()

    @property
    def exceeded(self) -> bool:
        """The render went past a bound (time, memory, recursion) or died."""
        return self.kind in ("timeout", "memory", "recursion", "crash")


class LiveRenderer:
    """A server process that renders templates unsandboxed, each in a forked child with limits (see the module)."""

    def __init__(self, *, env: dict[str, str] | None = None, nice: int = 0):
        if os.name != "posix":  # pragma: no cover - fork and rlimits are POSIX
            raise OSError("live renders need fork() and resource limits (POSIX)")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, _JINJA_MODULE, _OBSERVE_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env={**os.environ, **(env or {})},
            preexec_fn=(lambda: os.nice(nice)) if nice else None,
        )

    def render(
        self,
        source: str,
        context: dict[str, Any] | None = None,
        *,
        timeout: float = 5.0,
        memory: int = 1 << 30,
        keep: int = 4096,
        trace: bool = False,
    ) -> LiveResult:
        """Render ``source`` with ``context`` unsandboxed in a fresh child, within ``timeout`` seconds and
        ``memory`` bytes of address space; ``trace``: note the internal names its lookups reach."""
        if not (self.proc.stdin is not None and self.proc.stdout is not None):
            raise GGUFInternalError("self.proc.stdin is not None and self.proc.stdout is not None does not hold")
        job = {
            "source": source,
            "context": context or {},
            "timeout": timeout,
            "memory": memory,
            "keep": keep,
            "trace": trace,
        }
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the live-render server stopped")
        data = json.loads(line)
        return LiveResult(data["kind"], data.get("output", ""), data.get("size", 0), tuple(data.get("internals", ())))

    def observe(
        self,
        source: str,
        renders: list[tuple[tuple[bool, str, bool], dict[str, Any]]],
        *,
        timeout: float = 2.0,
        memory: int = 1 << 30,
        keep: int = 256,
        max_output: int = 1 << 22,
    ) -> list[dict[str, Any]]:
        """Render ``source`` unsandboxed or sandboxed as each ``(configuration, context)`` says, in one forked
        child with limits, in observing environments; one result per render, in order, until one exceeds a
        bound (the results stop there).

        A configuration is ``(sandboxed, tojson, autoescape)``: ``tojson`` ``"transformers"`` (no key sorting,
        no HTML escaping) or ``"jinja2"`` (Jinja's own: sorted keys, HTML-safe). Each result is a dict:
        ``kind`` (``ok``, ``error``: the template raised, ``timeout``: past ``timeout`` seconds of CPU,
        ``memory``, ``recursion``, ``crash``), ``observation`` (:meth:`Observation.to_json
        <gguf_schema.check.templates.observe.Observation.to_json>`, or None when the child died), and on the
        first render of each configuration ``compile``: what compiling the template did.
        """
        if not (self.proc.stdin is not None and self.proc.stdout is not None):
            raise GGUFInternalError("self.proc.stdin is not None and self.proc.stdout is not None does not hold")
        job = {
            "observe": True,
            "source": source,
            "renders": [[list(config), context] for config, context in renders],
            "timeout": timeout,
            "memory": memory,
            "keep": keep,
            "max_output": max_output,
            "wall": 4 * timeout * (len(renders) + 1) + 5,
        }
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the live-render server stopped")
        results: list[dict[str, Any]] = json.loads(line)["renders"]
        return results

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is None:
                raise GGUFInternalError("self.proc.stdin is not None does not hold")
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - the server only reads stdin
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> LiveRenderer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
