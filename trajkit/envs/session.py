"""One live MCP connection: a server process over stdio (or an HTTP session), owned by one task.

The ``mcp`` SDK's transports are async context managers that must be entered
and left in the same task, so each ``Connection`` runs an owner task that
opens the transport, initializes, and holds the session until ``aclose``.
Calls come from any task. Every call has a timeout and a bound on calls in
flight; results are rendered to text and truncated. A server that cannot
start, crashes, hangs or answers garbage raises ``ServerFault`` (a reason for
the trajectory to fail); an error the tool itself reports is an ordinary
``ToolOutput`` with ``is_error`` set, for the model to read. A missing
``${VAR}`` of the server's env or headers is the user's error (``UserError``),
not the server's. A stdio server's transport (``stdio.py``) ends its whole
process group on every exit path, cancellation included. A fault's reason says ``timed out after`` exactly
when a start or a call timed out (``TIMED_OUT``: the fault a retry may cure).

``${SESSION_DIR}`` in a stdio server's command, args, env or cwd becomes a
fresh temporary directory for that session (``ServerConfig.resolved``), removed when it closes: a file-backed server
(``--db-path ${SESSION_DIR}/db.sqlite``) starts each trajectory clean too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from trajkit.envs import contain
from trajkit.envs.config import ServerConfig, resolve_command
from trajkit.envs.forks import NotForked, Zygote
from trajkit.envs.stdio import MAX_LINE, Stderr, environment, spawn
from trajkit.envs.structured import OutputCheck
from trajkit.errors import UserError

TIMED_OUT = "timed out after"  # in a fault's reason: a start or a call that timed out


def _connect_failed(e: BaseException) -> bool:
    """No connection to an HTTP server (refused, no route, unknown host, connect timed out): httpx's
    ``ConnectError`` or ``ConnectTimeout``, of whichever httpx package the mcp client uses (httpx, httpx2)."""
    return any(
        c.__name__ in ("ConnectError", "ConnectTimeout") and c.__module__.startswith("httpx") for c in type(e).__mro__
    )


class ServerFault(Exception):
    """A server failed (would not start, crashed, hung, or answered garbage): a reason, not a crash of the run.
    ``code`` is its ``schema.REASON_CODES`` value, set where the fault is raised: ``timeout`` for a start or a
    call that timed out (a retry may cure it), else ``server_crash``."""

    def __init__(self, reason: str, code: str = "server_crash"):
        super().__init__(reason)
        self.code = code

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.args[0], self.code)


@dataclass(frozen=True)
class ToolOutput:
    """A tool's result as the model sees it: text (truncated), and whether the tool reported an error;
    ``parts``: its image and audio content as typed parts (``media_part``)."""

    text: str
    is_error: bool = False
    truncated: bool = False
    seconds: float = 0.0
    parts: tuple[dict[str, Any], ...] = ()


def truncate(text: str, max_chars: int | None) -> tuple[str, bool]:
    """Cut ``text`` to ``max_chars`` and say how much was cut (so the model knows)."""
    if max_chars is None or len(text) <= max_chars:
        return text, False
    return text[:max_chars] + f"\n[... truncated {len(text) - max_chars} characters]", True


MAX_MEDIA_BYTES = 1_000_000  # an image or audio part larger than this keeps its type and size, not its data


def media_part(block: Any) -> dict[str, Any]:
    """An image or audio block as a typed part: base64 ``data`` (None past ``MAX_MEDIA_BYTES``) and its size."""
    size = len(block.data) * 3 // 4 - block.data[-2:].count("=")
    data = block.data if size <= MAX_MEDIA_BYTES else None
    return {"type": block.type, "mime_type": block.mime_type, "data": data, "size": size}


def render_content(result: Any) -> tuple[str, list[dict[str, Any]]]:
    """A ``CallToolResult`` as text and typed media parts: text blocks joined; a resource link by its name,
    description and uri; an image or audio block as a part (``media_part``), named in the text;
    structured output as JSON when there is nothing else."""
    parts: list[str] = []
    media: list[dict[str, Any]] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            media.append(media_part(block))
            cut = "" if media[-1]["data"] is not None else f", over the {MAX_MEDIA_BYTES} byte cap, not kept"
            parts.append(f"[{kind} {block.mime_type}, {media[-1]['size']} bytes, part {len(media)}{cut}]")
        elif kind == "resource_link":
            about = f": {block.description}" if block.description else ""
            parts.append(f"[resource {block.name}{about} <{block.uri}>]")
        elif kind == "resource":
            res = block.resource
            parts.append(res.text if hasattr(res, "text") else f"[binary resource {res.uri}]")
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts), media


class Connection:
    """One MCP session to one server; ``await open()``, ``await call(...)``, ``await aclose()``.

    ``output_check``: the harvested output schemas of the server's tools, which ``call`` checks results
    against (``structured.py``); ``max_concurrency`` bounds the calls in flight on this connection;
    ``startup_timeout_s`` bounds spawning plus ``initialize``; ``shared``: a stateless server's
    process that several trajectories use, which (contained) sees the filesystem read-only; ``fork``:
    the server's zygote, which (contained) forks the instance instead of a spawn (``forks.py``).
    """

    def __init__(
        self,
        name: str,
        cfg: ServerConfig,
        *,
        startup_timeout_s: float = 60.0,
        max_concurrency: int = 8,
        shared: bool = False,
        warm_caches: bool = False,
        fork: Zygote | None = None,
        output_check: OutputCheck | None = None,
    ):
        self.name = name
        self.output_check = output_check
        self.cfg = cfg
        self.shared = shared
        self.warm_caches = warm_caches  # contained: package caches written through (contain.wrap)
        self.fork = fork  # contained: forked from this zygote rather than spawned (forks.py)
        self.startup_timeout_s = startup_timeout_s
        self.init_result: Any = None
        self.session: Any = None
        self.load = 0  # calls in flight or waiting (the pool balances on it)
        self.dead: str | None = None
        self._sem = asyncio.Semaphore(max_concurrency)
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stderr: Any = None
        self._junk: str | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the owner task (spawn + initialize in the background); ``open`` waits for it."""
        if self._task is None:
            self._task = asyncio.create_task(self._own(), name=f"mcp:{self.name}")

    async def open(self) -> Connection:
        """Start (if needed) and wait until initialized; raises ServerFault if the server does not come up."""
        self.start()
        await asyncio.shield(self._ready)
        return self

    async def aclose(self) -> None:
        """Shut the server down (stdin closed, then SIGTERM/SIGKILL of its process group) and wait for it."""
        self._closing.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)

    async def _own(self) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._transport(stack)
                session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._on_message))
                try:
                    async with asyncio.timeout(self.startup_timeout_s):
                        self.init_result = await session.initialize()
                except TimeoutError:
                    raise ServerFault(f"initialize {TIMED_OUT} {self.startup_timeout_s:g}s", "timeout") from None
                self.session = session
                self._ready.set_result(None)
                await self._closing.wait()
        except asyncio.CancelledError:
            self._fail("cancelled")
            raise
        except UserError as e:  # a missing ${VAR} of the config: the user's to fix, not the server's fault
            self._fail(str(e), error=e)
        except BaseException as e:  # noqa: BLE001 - every failure of the transport becomes a reason
            self._fail(*self._describe(e))
        finally:
            self.session = None
            if self.dead is None:
                self.dead = "closed"
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    async def _transport(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        if self.cfg.transport == "stdio":
            self._stderr = Stderr()  # closed in _own's finally, after a failure's reason read its tail
            workdir = None
            if self.cfg.uses_session_dir:
                workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"trajkit-{self.name}-"))
            cfg = self.cfg.resolved(session_dir=workdir)
            command, args = resolve_command(cfg.command), list(cfg.args)
            max_line = int(cfg.max_message_mib * (1 << 20)) if cfg.max_message_mib else MAX_LINE
            if contain.enabled():
                command, *args = contain.wrap(
                    self.name, cfg, command, args, readonly=self.shared, warm_caches=self.warm_caches
                )
                if self.fork is not None:
                    with contextlib.suppress(NotForked):  # no zygote (given up, or dead): spawned
                        instance = self.fork.instance(args, self._stderr, max_line, self.startup_timeout_s)
                        return await stack.enter_async_context(instance)
            spawned = spawn([command, *args], environment(cfg), cfg.cwd, self._stderr, max_line)
            return await stack.enter_async_context(spawned)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        cfg = self.cfg.resolved()
        http = await stack.enter_async_context(create_mcp_http_client(headers=cfg.headers))
        return await stack.enter_async_context(streamable_http_client(cfg.url, http_client=http))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a line on stdout that is not JSON-RPC
            errors = getattr(message, "errors", None)
            line = errors()[0].get("input") if callable(errors) and errors() else None
            self._junk = repr(line)[:200] if isinstance(line, str) else f"{type(message).__name__}: {message}"[:200]

    def _fail(self, reason: str, code: str = "server_crash", error: Exception | None = None) -> None:
        if self.dead is None or self.dead == "closed":
            self.dead = reason
        if not self._ready.done():
            self._ready.set_exception(error or ServerFault(reason, code))
            self._ready.exception()  # retrieved: nobody may be waiting yet

    def _describe(self, e: BaseException) -> tuple[str, str]:
        """A failure's reason (with the server's stderr tail) and reason code."""
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        code = e.code if isinstance(e, ServerFault) else self._noted("server_crash")
        if isinstance(e, ServerFault):
            reason = str(e)
        elif self.cfg.transport == "http" and not self.init_result and _connect_failed(e):
            reason, code = f"cannot reach {self.cfg.url}: {type(e).__name__}: {str(e)[:200]}", "unreachable"
        elif isinstance(e, OSError) and not self.init_result:
            reason = f"cannot start server: {e}"
        else:
            phase = "initialize" if self.init_result is None else "session"
            reason = f"{phase} failed: {type(e).__name__}: {str(e)[:200]}"
        return reason + self.stderr_tail(), code

    def _noted(self, code: str) -> str:
        """The reason code the client's own note on stderr gave (``line_too_long``), else ``code``."""
        return (self._stderr.code if self._stderr is not None else None) or code

    def stderr_tail(self) -> str:
        """`` (stderr: ...)`` with the server's last stderr line(s), or ``""``."""
        return self._stderr.tail() if self._stderr is not None else ""

    # ------------------------------------------------------------ calls
    @property
    def server_info(self) -> Any:
        return self.init_result.server_info if self.init_result else None

    async def list_all(self, kind: str = "tools", timeout_s: float = 30.0, max_pages: int = 100) -> list[Any]:
        """Every item the server lists of ``kind`` (tools, resources, resource_templates, prompts), all pages."""
        from mcp.types import PaginatedRequestParams

        await self.open()
        items, cursor = [], None
        what = kind.replace("resource_templates", "resources/templates") + "/list"
        for _ in range(max_pages):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            result = await self._request(what, getattr(self.session, f"list_{kind}")(params=params), timeout_s)
            items.extend(getattr(result, kind))
            cursor = result.next_cursor
            if not cursor:
                return items
        raise ServerFault(f"{what} returned more than {max_pages} pages")

    async def call(
        self, tool: str, arguments: dict[str, Any], timeout_s: float = 30.0, max_chars: int | None = None
    ) -> ToolOutput:
        """Call a tool; its own errors come back as ``is_error`` output, server faults raise ServerFault.
        The server's own ``timeout`` (Cline's key), where its config has one, replaces ``timeout_s``."""
        timeout_s = self.cfg.timeout or timeout_s
        self.load += 1
        try:
            await self.open()
            async with self._sem:
                if self.dead:
                    raise ServerFault(f"server {self.name!r} is gone: {self.dead}")
                t0 = time.monotonic()
                try:
                    result = await self._request(tool, self._call_tool(tool, arguments, timeout_s), timeout_s)
                except ProtocolError as e:
                    return ToolOutput(f"Error: {e}", is_error=True, seconds=time.monotonic() - t0)
                self._junk = None  # stray output before a good answer is noise, not this call's fault
                text, media = render_content(result)
                text, cut = truncate(text, max_chars)
                if result.is_error and not text.lower().startswith("error"):
                    text = "Error: " + text
                return ToolOutput(text, bool(result.is_error), cut, time.monotonic() - t0, tuple(media))
        finally:
            self.load -= 1

    async def _call_tool(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> Any:
        """``tools/call``, its result checked against the harvested output schema (the SDK's ``call_tool`` would
        list the tools first in every session)."""
        from mcp.types import CallToolRequest, CallToolRequestParams, CallToolResult

        request = CallToolRequest(params=CallToolRequestParams(name=tool, arguments=arguments))
        result = await self.session.send_request(request, CallToolResult, request_read_timeout_seconds=timeout_s)
        if self.output_check is not None:
            await self.output_check.check(tool, result)
        return result

    async def _request(self, what: str, coro: Any, timeout_s: float) -> Any:
        from mcp import MCPError
        from mcp.types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT
        from pydantic import ValidationError

        try:
            # The SDK times the request out itself; this outer bound catches a wedged transport.
            async with asyncio.timeout(timeout_s + 5):
                return await coro
        except MCPError as e:
            if e.code == REQUEST_TIMEOUT:
                raise self._fault(f"{what} {TIMED_OUT} {timeout_s:g}s", code="timeout") from None
            if e.code == CONNECTION_CLOSED:
                raise self._fault(f"server {self.name!r} exited during {what}", dead=True) from None
            raise ProtocolError(f"{e.message} (code {e.code})", e.code) from None
        except TimeoutError:
            raise self._fault(f"{what} {TIMED_OUT} {timeout_s:g}s", code="timeout") from None
        except ValidationError as e:
            detail = e.errors()[0]
            where = ".".join(map(str, detail["loc"]))
            raise self._fault(f"malformed {what} result from {self.name!r}: {where}: {detail['msg']}") from None
        except (RuntimeError, ValueError, TypeError) as e:
            raise self._fault(f"bad {what} result from {self.name!r}: {type(e).__name__}: {str(e)[:200]}") from None

    def _fault(self, reason: str, dead: bool = False, code: str = "server_crash") -> ServerFault:
        if self._junk:
            reason += f" (server wrote non-JSON-RPC output: {self._junk})"
        reason += self.stderr_tail()
        if dead:
            self.dead = reason
            code = self._noted(code)
        return ServerFault(reason, code)


class ProtocolError(Exception):
    """A JSON-RPC error response (``code``): to a tool call, a valid answer fed back to the model as an error."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code
