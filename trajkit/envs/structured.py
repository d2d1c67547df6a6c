"""Tool results checked against their tools' output schemas, in a child process, each check within ``CHECK_S``.

Both the schema and the result come from the server, and a check can run as long as they make it: a
``pattern`` that backtracks (``^(a+)+$`` against ``"a" * 30 + "!"``: a minute), ``anyOf`` branches that
multiply, a quadratic ``uniqueItems``. Run in the client, it would hold the event loop, and every trajectory
of the process with it (``re`` keeps the GIL: no timeout fires). So each server's results are checked by a
process of its own (``python -m trajkit.envs.structured``, started at its first check, with validators
compiled once): a check that takes longer than ``CHECK_S`` kills it (started again at the next check), and,
as a result that does not fit, is that server's fault. One process per server: a slow server's checks queue
behind its own, not another's.
"""

from __future__ import annotations

import functools
import json
import resource
import sys
from typing import Any

CHECK_S = 2.0
MAX_MEMORY = 1 << 30  # the checking process's address space
MAX_ANSWER = 1000  # characters of a reason (one pipe write: it arrives whole)


@functools.lru_cache(maxsize=256)
def output_validator(schema: str) -> Any:
    """The compiled validator of a tool's output schema (its JSON text), checked and built once per process: the
    SDK's ``call_tool`` lists the tools and compiles each schema again in every session, a trajectory's worth of
    CPU for a short one. RuntimeError (not cached) for a schema that is not JSON Schema."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for
    from referencing import Registry

    parsed = json.loads(schema)
    cls = validator_for(parsed)
    try:
        cls.check_schema(parsed)
    except SchemaError as e:
        raise RuntimeError(f"invalid output schema: {e.message}") from None
    return cls(parsed, registry=Registry())  # an empty registry: $refs resolve within the schema, as in the SDK


def problem(tool: str, schema: str, content: Any) -> str | None:
    """Why ``content``, a result's structured content, does not fit its tool's output ``schema``; None if it does."""
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    try:
        error = best_match(output_validator(schema).iter_errors(content))
    except Unresolvable as e:  # a $ref outside the schema, or to nothing in it: the server's fault, as any other
        return f"output schema of tool {tool} has a $ref that does not resolve: {e}"
    except Exception as e:  # noqa: BLE001 - an invalid schema, a recursion without end, memory
        return f"output schema of tool {tool} cannot be checked: {type(e).__name__}: {e}"
    return None if error is None else f"invalid structured content returned by tool {tool}: {error.message}"


class OutputCheck:
    """The output schemas (JSON text by tool) of one server's tools, and the process that checks its results."""

    def __init__(self, schemas: dict[str, str]):
        import concurrent.futures  # (here, as each import of the client's: the checking process needs none)

        self.schemas = schemas
        self._proc: Any = None
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="output-check")
        self._closed = False

    def start(self) -> None:
        """Start the checking process in the background (at a server's start: ready by its first result)."""
        if self._proc is None:
            self._thread.submit(self._started)

    async def check(self, tool: str, result: Any) -> None:
        """A successful result of a tool that declares an output schema must carry structured content that fits it
        (as the MCP spec says and the SDK checks), checked within ``CHECK_S``; RuntimeError otherwise."""
        import asyncio

        schema = self.schemas.get(tool)
        if schema is None or result.is_error:
            return
        if result.structured_content is None:
            raise RuntimeError(f"tool {tool} has an output schema but returned no structured content")
        request = json.dumps([tool, schema, result.structured_content]).encode() + b"\n"
        # in a thread of its own, start to end: cancelled, the caller leaves no answer behind for the next check
        reason = await asyncio.get_running_loop().run_in_executor(self._thread, self._ask, tool, request)
        if reason is not None:
            raise RuntimeError(reason)

    def _ask(self, tool: str, request: bytes) -> str | None:
        """In the check's thread: the checking process's answer, or why there is none (it is killed then)."""
        import select

        if self._closed:
            return "the tool environment is closed"
        try:
            proc = self._started()
            proc.stdin.write(request)
            proc.stdin.flush()
            if not select.select([proc.stdout], [], [], CHECK_S)[0]:
                reason = f"checking the result of tool {tool} against its output schema took over {CHECK_S:g}s"
            elif answer := proc.stdout.readline():
                return json.loads(answer)
            else:
                reason = f"the process checking tool {tool}'s result against its output schema exited"
        except OSError as e:  # (it was killed: closed)
            reason = f"checking the result of tool {tool} against its output schema failed: {e}"
        self._stop()
        return reason

    def _started(self) -> Any:
        """The checking process, started if need be (in the check's thread), once its imports are done (not a
        check's time: it says so on its first line)."""
        import subprocess

        if self._proc is None:
            self._proc = subprocess.Popen(  # its own session: a terminal's Ctrl-C is the stage's, which closes it
                [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
            )
            if self._closed:  # (close saw no process yet: it waits for this thread, not for the imports)
                self._proc.kill()
            self._proc.stdout.readline()
        return self._proc

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()
            self._proc = None

    def close(self) -> None:
        """Kill the checking process (a check under way fails at once) once its thread is done."""
        self._closed = True
        if (proc := self._proc) is not None:
            proc.kill()  # (the thread's select wakes: the pipe's end)
        self._thread.shutdown(cancel_futures=True)
        self._stop()


def _serve() -> None:
    """The checking process: a request ``[tool, schema, content]`` per line in, a JSON reason or null per line out."""
    import signal

    from trajkit.confine import isolation

    isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
    resource.setrlimit(resource.RLIMIT_AS, (MAX_MEMORY, MAX_MEMORY))
    output_validator('{"type": "object"}')  # (the imports)
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.buffer.flush()
    for line in sys.stdin.buffer:
        reason = problem(*json.loads(line))
        sys.stdout.buffer.write(json.dumps(reason and reason[:MAX_ANSWER]).encode() + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    _serve()
