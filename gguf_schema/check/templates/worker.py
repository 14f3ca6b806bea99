"""The child process of the sandboxed render: read one job on stdin, render, write one JSON line per event.

The parent (:mod:`.sandbox`) starts ``python -I`` on this file by path, with an empty environment and
a temporary working folder, without importing gguf-schema (no numpy, a small process). From the start
of the job the process has no more memory, CPU time, files or child processes than the renders need
(``setrlimit``). The job holds every template of a file: each is compiled under every configuration and
renders every conversation, within one alarm per template; a template stops at the first bound it
exceeds (one is enough to report it) and the next one starts. When the job has a ``budget`` (CPU seconds
for the whole child, its start included), a template gets what is left of it when that is less; a template
the budget cuts short, or never reaches, is a ``budget`` event. Events: ``start`` and ``end`` of a template,
``security``, ``bound``, ``budget``, ``error``, ``compile-error``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import signal
import sys
import time
import traceback
from typing import Any

__all__ = ["main"]


_HELD_APART = ("filters", "tests", "format-arguments")


class _Timeout(BaseException):
    """The CPU timer of one template rang (a BaseException, so the template cannot catch it)."""


def _limit(memory: int, cpu: float) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        seconds = max(1, math.ceil(cpu) + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not every platform has every limit
        pass


def _containers(value: Any) -> set[int]:
    """The ids of every list and dict in the request (JSON data: a tree)."""
    out: set[int] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            out.add(id(v))
            todo.extend(v.values())
        elif isinstance(v, list):
            out.add(id(v))
            todo.extend(v)
    return out


def _template_line(tb: Any) -> int | None:
    line = None
    for frame in traceback.extract_tb(tb):
        if frame.filename == "<template>":
            line = frame.lineno
    return line


def main() -> None:
    job = json.loads(sys.stdin.read())
    sys.dont_write_bytecode = True  # with the file-size limit below, writing a .pyc would kill the process
    sys.path[:0] = [p for p in job["path"] if p not in sys.path]
    spec = importlib.util.spec_from_file_location("_gguf_template_jinja", job["jinja"])
    if not (spec is not None and spec.loader is not None):
        raise RuntimeError("spec is not None and spec.loader is not None does not hold")
    environments = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(environments)
    import jinja2  # noqa: F401 - imported before the limits, so its import is not what they stop
    from jinja2.exceptions import SecurityError

    def emit(**fields: Any) -> None:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    spec = importlib.util.spec_from_file_location("_gguf_template_observe", job["observe"])
    if not (spec is not None and spec.loader is not None):
        raise RuntimeError("spec is not None and spec.loader is not None does not hold")
    observing = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = observing  # its dataclasses look their module up
    spec.loader.exec_module(observing)
    job["counted"] = observing._counted  # the template with every loop's passes counted
    configurations = [
        (c, observing.observing_environment(environments.runtime_environment(sandboxed=True, flavour=c)))
        for c in job["configurations"]
    ]

    def ring(signum: int, frame: Any) -> None:
        raise _Timeout

    seconds = job["timeout"]
    # the whole job's CPU (this process's start included) when the audit gives one: what its budget has left
    budget = job.get("budget")
    whole = seconds * len(job["templates"]) if budget is None else min(budget, seconds * len(job["templates"]))
    # the limits hold from the first compile on: Jinja folds constant expressions ('x' * 10**10) when it compiles
    _limit(job["memory"], whole + 1)
    signal.signal(signal.SIGPROF, ring)
    for t, source in enumerate(job["templates"]):
        emit(kind="start", template=t)
        left = math.inf if budget is None else budget - time.process_time()
        # each template has `seconds` of CPU (user and system: a timer of the process's own time, which a loaded
        # machine does not shorten) for all its compiles and renders, or what the job's budget has left
        job["limited"] = left < seconds
        if left <= 0.01 or job.get("spent"):  # the budget's timer rang (its clock and this one differ by a tick)
            emit(
                kind="budget",
                template=t,
                message=f"not started: the {budget:.2f} s of CPU left for the file's renders were used",
            )
            emit(kind="end", template=t)
            continue
        signal.setitimer(signal.ITIMER_PROF, min(seconds, left))
        try:
            _render_all(t, source, configurations, job, emit, SecurityError)
        except _Timeout:
            emit(**_out_of_time(job, {"template": t}))
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        emit(kind="end", template=t)


def _out_of_time(job: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    """The event of a template whose timer rang: a render past its own time bound (``bound``), or one the job's
    budget cut short (``budget``: nothing is known of it but that)."""
    if job.get("limited"):
        job["spent"] = True
        return {
            "kind": "budget",
            **event,
            "message": f"not finished within the {job['budget']:.2f} s of CPU the "
            "audit had left for the file's renders",
        }
    return {"kind": "bound", **event, "message": f"did not finish within {job['timeout']:g} s of CPU"}


def _render_all(t: int, source: str, configurations: list[Any], job: dict[str, Any], emit: Any, security: Any) -> None:
    """Every conversation of ``job`` rendered from ``source`` under every configuration, observed (names looked
    up, work done: :mod:`.observe`); stops at the first bound. Emits what was observed at the end."""
    names: set[str] = set()
    work = [0, ""]  # the most work one render did, and which

    def note(env: Any, event: dict[str, Any]) -> bool:
        """Keep what the render observed; whether it did more work than the bound (then it is reported)."""
        seen = env.observation
        # a filter's or test's name picks one of Jinja's functions, a format field a keyword: not attributes
        names.update(str(x.name) for x in seen.lookups if x.is_text and x.receiver not in _HELD_APART)
        if seen.work > work[0]:
            work[:] = [seen.work, f"{event['conversation']} conversation, {event['configuration']}"]
        if seen.work > job["max_work"]:
            emit(kind="bound", **event, message=f"did {seen.work:,} steps of work, more than {job['max_work']:,}")
            return True
        return False

    try:
        _render_configurations(t, source, configurations, job, emit, security, note)
    finally:
        emit(kind="observed", template=t, names=sorted(names)[: job["max_names"]], work=work[0], where=work[1])


def _render_configurations(
    t: int, source: str, configurations: list[Any], job: dict[str, Any], emit: Any, security: Any, note: Any
) -> None:
    for name, env in configurations:
        env.observation = type(env.observation)()
        try:
            template = env.from_string(job["counted"](env, source))
        except MemoryError:
            emit(kind="bound", template=t, configuration=name, message="ran out of the memory bound while compiling")
            return
        except RecursionError:
            emit(kind="bound", template=t, configuration=name, message="recursed past Python's limit while compiling")
            return
        except _Timeout:
            emit(**_out_of_time(job, {"template": t, "configuration": name, "conversation": "compile"}))
            return
        except Exception as e:
            emit(kind="compile-error", template=t, configuration=name, message=f"{type(e).__name__}: {str(e)[:200]}")
            continue
        for label, context in job["conversations"]:
            event = {"template": t, "configuration": name, "conversation": label}
            request = _containers(context)
            size = 0
            env.observation = type(env.observation)()
            try:
                for chunk in template.generate(**context):
                    size += len(chunk)
                    env.observation.output_chars = size
                    if size > job["max_output"]:
                        emit(kind="bound", **event, message=f"output passed {job['max_output']:,} characters")
                        return
            except _Timeout:
                emit(**_out_of_time(job, event))
                return
            except security as e:
                if getattr(e, "mutation", False) and getattr(e, "receiver", None) not in request:
                    # the immutable sandbox refused a change of a list or dict the template made: no reach
                    emit(kind="mutation", **event, message=str(e)[:300])
                    continue
                emit(kind="security", **event, message=str(e)[:300], line=_template_line(e.__traceback__))
            except MemoryError:
                emit(kind="bound", **event, message="ran out of the memory bound")
                return
            except RecursionError:
                emit(kind="bound", **event, message="recursed past Python's recursion limit")
                return
            except OverflowError as e:  # the sandbox's own range limit, or a number too large to use
                line = _template_line(e.__traceback__)
                emit(kind="bound", **event, message=f"was stopped by a limit: {str(e)[:200]}", line=line)
                return
            except Exception as e:
                emit(kind="error", **event, message=f"{type(e).__name__}: {str(e)[:200]}")
            if note(env, event):
                return


if __name__ == "__main__":  # pragma: no cover - the child process
    main()
