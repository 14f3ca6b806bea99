"""The child process of the sandboxed render: read one job on stdin, render, write one JSON line per conversation.

The parent (:mod:`.sandbox`) starts ``python -I`` on this file by path, without importing
gguf-schema (no numpy, a small process). From the start of the job the process has no more
memory, CPU time, files or child processes than a render needs (``setrlimit``), each
conversation has an alarm, and rendering stops at the first bound a conversation exceeds: one is
enough to report the template.
"""

from __future__ import annotations

import importlib.util
import json
import math
import signal
import sys
import traceback
from typing import Any

__all__ = ["main"]


class _Timeout(BaseException):
    """The alarm of one conversation rang (a BaseException, so the template cannot catch it)."""


def _limit(memory: int, cpu: float) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        seconds = max(1, math.ceil(cpu) + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not every platform has every limit
        pass


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

    env = environments.runtime_environment(sandboxed=True)

    def ring(signum: int, frame: Any) -> None:
        raise _Timeout

    seconds = job["timeout"]
    # the limits hold from the compile on: Jinja folds constant expressions ('x' * 10**10) when it compiles
    _limit(job["memory"], seconds * (len(job["conversations"]) + 1))
    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        template = env.from_string(job["source"])
    except _Timeout:
        emit(kind="bound", conversation="compile", message=f"did not compile within {seconds:g} s")
        return
    except MemoryError:
        emit(kind="bound", conversation="compile", message="ran out of the memory bound while compiling")
        return
    except Exception as e:
        emit(kind="compile-error", message=f"{type(e).__name__}: {str(e)[:200]}")
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    for label, context in job["conversations"]:
        size = 0
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            for chunk in template.generate(**context):
                size += len(chunk)
                if size > job["max_output"]:
                    emit(kind="bound", conversation=label, message=f"output passed {job['max_output']:,} characters")
                    return
            emit(kind="ok", conversation=label, size=size)
        except _Timeout:
            emit(kind="bound", conversation=label, message=f"did not finish within {seconds:g} s")
            return
        except SecurityError as e:
            emit(kind="security", conversation=label, message=str(e)[:300], line=_template_line(e.__traceback__))
        except MemoryError:
            emit(kind="bound", conversation=label, message="ran out of the memory bound")
            return
        except RecursionError:
            emit(kind="bound", conversation=label, message="recursed past Python's recursion limit")
            return
        except OverflowError as e:  # the sandbox's own range limit, or a number too large to use
            emit(
                kind="bound",
                conversation=label,
                message=f"was stopped by a limit: {str(e)[:200]}",
                line=_template_line(e.__traceback__),
            )
            return
        except Exception as e:
            emit(kind="error", conversation=label, message=f"{type(e).__name__}: {str(e)[:200]}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


if __name__ == "__main__":  # pragma: no cover - the child process
    main()
