"""``trajkit model serve --record``: an OpenAI-compatible proxy that records every call an agent makes.

Point any agent (the OpenAI Agents SDK, LangGraph, smolagents, a loop of your
own) at the proxy instead of its model server; the proxy passes each request
to the upstream (vLLM, SGLang, a hosted API) and the answer back, streaming
included (server-sent events are passed on as they arrive), and appends every
Chat Completions call to the run's call log (``trajkit.models.calllog``):
before it is forwarded, and when it completes. ``trajkit curate traces`` turns
the log into ``tasks`` and ``trajectories`` rows (and into the call cache that
``model serve --replay`` answers from); nothing is parsed, redacted or grouped
on the request path.

Token ids: for a vLLM upstream (``token_ids="auto"`` asks ``/v1/models`` who
serves; ``"on"`` always) the proxy adds vLLM's ``return_token_ids`` (and
``logprobs``, unless the agent set it) to each chat request and nulls in the
answer, in place, exactly the fields they add, so the agent gets the bytes the
upstream sends a request without them. Other paths (``/v1/models``, ...) are
passed through unrecorded. A Responses API call (``/v1/responses``) is answered
400 with one line naming the harness setting that switches to Chat Completions.

The agent's headers go to the upstream (its ``Authorization`` included, unless
``upstream_key_env`` names a variable whose key replaces it) and are never
recorded; the session header (``X-Trajkit-Session``) an agent may send to group
its calls is recorded and not forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Literal, Self

from trajkit.errors import UserError
from trajkit.models.calllog import CallLog, FsyncPolicy
from trajkit.models.http1 import (
    HOP_BY_HOP,
    MAX_HEAD,
    BadMessage,
    Head,
    Upstream,
    body_chunks,
    chunk,
    read_body,
    read_head,
    response_head,
)

SESSION_HEADER = "X-Trajkit-Session"
MAX_BODY = 64 << 20
RESPONSES_HINT = (
    "trajkit's recording proxy records Chat Completions, not the Responses API: switch the harness to Chat "
    'Completions (OpenAI Agents SDK: set_default_openai_api("chat_completions"), or OpenAIChatCompletionsModel)'
)
TokenIds = Literal["auto", "on", "off"]
# vLLM's request field -> the response fields it adds, nulled in place before the agent sees them
TOKEN_FIELDS = {"return_token_ids": ("prompt_token_ids", "token_ids"), "logprobs": ("logprobs",)}
_EVENT_END = re.compile(rb"\r?\n\r?\n")


def _key(name: str) -> re.Pattern[str]:
    """A JSON object key ``name`` and its colon. In valid JSON an unescaped ``"`` followed by the name and
    ``":`` is a key: inside a string every quote is escaped, and a string's closing quote is never followed
    by more text before ``:``."""
    return re.compile(rf'"{re.escape(name)}"\s*:\s*')


_KEYS = {name: _key(name) for fields in TOKEN_FIELDS.values() for name in fields} | {
    name: _key(name) for name in TOKEN_FIELDS
}
_DECODER = json.JSONDecoder()


def with_token_fields(body: bytes) -> tuple[bytes, list[str]]:
    """The request body with vLLM's token fields the agent did not set added at its start, and their names."""
    text = body.decode("utf-8", "surrogatepass")
    added = [name for name in TOKEN_FIELDS if not _KEYS[name].search(text)]
    start = text.find("{")
    if not added or start < 0:
        return body, []
    rest = text[start + 1 :]
    fields = ",".join(f'"{name}":true' for name in added)
    glue = "" if rest.lstrip().startswith("}") else ","
    return (text[:start] + "{" + fields + glue + rest).encode("utf-8", "surrogatepass"), added


def strip_token_fields(data: bytes, added: list[str]) -> bytes:
    """A response (or one server-sent event) with the values of the fields the ``added`` request fields bring
    replaced by ``null`` in place: what the upstream sends a request without them."""
    names = [field for name in added for field in TOKEN_FIELDS[name]]
    text = data.decode("utf-8", "surrogatepass")
    spans = []
    for name in names:
        for m in _KEYS[name].finditer(text):
            try:
                _, end = _DECODER.raw_decode(text, m.end())
            except ValueError:
                continue
            if text[m.end() : end] != "null":
                spans.append((m.end(), end))
    if not spans:
        return data
    out, pos = [], 0
    for start, end in sorted(spans):
        if start < pos:  # inside a value already nulled
            continue
        out += [text[pos:start], "null"]
        pos = end
    out.append(text[pos:])
    return "".join(out).encode("utf-8", "surrogatepass")


class RecordingProxy:
    """The proxy: ``start()`` serves on a thread of its own (``base_url``), ``stop()`` ends it; or ``serve()``
    in a running event loop. ``notes()`` says what was decided at start (token ids asked for or not)."""

    def __init__(
        self,
        upstream: str,
        run: str | Path,
        *,
        port: int = 0,
        fsync: FsyncPolicy = "interval",
        token_ids: TokenIds = "auto",
        session_header: str = SESSION_HEADER,
        upstream_key_env: str | None = None,
        timeout_s: float = 600.0,
    ):
        try:
            self.upstream = Upstream(upstream, timeout_s)
        except ValueError as e:
            raise UserError(f"--upstream: {e}") from None
        if token_ids not in ("auto", "on", "off"):
            raise UserError(f"--token-ids must be auto, on or off, not {token_ids!r}")
        if upstream_key_env and not os.environ.get(upstream_key_env):
            raise UserError(f"--upstream-key-env: environment variable {upstream_key_env} is not set")
        self.run, self.port, self.fsync, self.token_ids = Path(run), port, fsync, token_ids
        self.session_header = session_header.lower()
        self.key_env = upstream_key_env
        self.capture = token_ids == "on"
        self.log: CallLog | None = None
        self._notes: list[str] = []
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    # ------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not serving")
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    def notes(self) -> list[str]:
        return list(self._notes)

    async def serve(self) -> None:
        """Open the log (recovering what a killed proxy left), decide on token ids, and listen."""
        try:
            self.log = CallLog(self.run, self.fsync)
        except OSError as e:
            raise UserError(f"--run {self.run}: cannot record there ({e.strerror or e})") from None
        if self.log.lost:
            self._notes.append(f"{len(self.log.lost)} call(s) a previous proxy left unfinished are marked lost")
        if self.token_ids == "auto":
            self.capture = await self._upstream_is_vllm()
        self._notes.append(
            "asking the upstream for token ids and logprobs (vLLM's return_token_ids)"
            if self.capture
            else "not asking the upstream for token ids (--token-ids on to ask a vLLM-compatible one)"
        )
        try:
            self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port, limit=MAX_HEAD)
        except OSError:
            self.log.close()
            raise

    async def aclose(self) -> None:
        """Stop listening, close the connections (calls in flight end unfinished), close the log."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._connections):
                writer.close()
            handlers = asyncio.all_tasks() - {asyncio.current_task()}
            if handlers:
                _, late = await asyncio.wait(handlers, timeout=1.0)
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
        self.upstream.close()
        if self.log is not None:
            self.log.close()

    def start(self) -> Self:
        """Serve on a thread of its own; errors at start (the port, a second recorder) are raised here."""
        started = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self.serve())
            except BaseException as e:  # noqa: BLE001 - handed to the starting thread
                failure.append(e)
                started.set()
                return
            started.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self.aclose())
            self._loop.close()

        self._thread = threading.Thread(target=main, name="trajkit-record", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _upstream_is_vllm(self) -> bool:
        """Whether the upstream's ``/v1/models`` lists a model owned by ``vllm``."""
        try:
            head, reader, writer = await self.upstream.request("GET", "/v1/models", self._headers(None), b"")
            data = b"".join([c async for c in body_chunks(reader, head)])
            self.upstream.release(reader, writer, head.keep_alive)
            models = json.loads(data).get("data") or []
        except (TimeoutError, OSError, BadMessage, ValueError, AttributeError, asyncio.IncompleteReadError):
            self._notes.append("could not ask the upstream which server it is (/v1/models)")
            return False
        return any(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in models)

    # ------------------------------------------------------------ serving
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                head = await read_head(reader, request=True)
                if head is None:
                    break
                if (head.get("expect") or "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await read_body(reader, head, MAX_BODY)
                if not await self._handle(head, body, writer) or not head.keep_alive:
                    break
                await writer.drain()
        except BadMessage as e:
            _send_error(writer, 400, f"trajkit record: {e}")
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the agent went away, or the proxy is stopping
        finally:
            self._connections.discard(writer)
            writer.close()

    def _headers(self, head: Head | None) -> list[tuple[str, str]]:
        """The agent's headers as the upstream gets them: without the connection's own and the session header;
        with the upstream key in place of the agent's where one is configured."""
        headers = [
            (k, v)
            for k, v in (head.headers if head else [])
            if k.lower() not in HOP_BY_HOP and k.lower() != self.session_header
        ]
        if self.key_env:
            headers = [(k, v) for k, v in headers if k.lower() != "authorization"]
            headers.append(("Authorization", f"Bearer {os.environ[self.key_env]}"))
        return headers

    async def _handle(self, head: Head, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to close."""
        path = head.target.split("?", 1)[0].rstrip("/")
        if head.method == "POST" and path.endswith("/chat/completions"):
            return await self._chat(head, body, writer)
        if head.method == "POST" and path.endswith("/responses"):
            _send_error(writer, 400, RESPONSES_HINT)
            return True
        return await self._forward(head, body, writer, None, [])

    async def _chat(self, head: Head, body: bytes, writer: asyncio.StreamWriter) -> bool:
        assert self.log is not None
        call_id = self.log.next_id()
        sent, added = with_token_fields(body) if self.capture else (body, [])
        fields: dict[str, Any] = {"path": head.target}
        session = head.get(self.session_header)
        if session is not None:
            fields["session"] = session
        if added:
            fields["added"] = added
        self.log.start(call_id, body, **fields)
        await self.log.durable()
        return await self._forward(head, sent, writer, call_id, added)

    async def _forward(
        self, head: Head, body: bytes, writer: asyncio.StreamWriter, call_id: str | None, added: list[str]
    ) -> bool:
        """Send a request on and its answer back; a recorded call (``call_id``) is logged when it completes."""
        t0 = time.monotonic()
        try:
            rhead, reader, conn = await self.upstream.request(head.method, head.target, self._headers(head), body)
        except (TimeoutError, OSError, BadMessage, asyncio.IncompleteReadError) as e:
            error = f"the upstream did not answer: {type(e).__name__}: {e}".rstrip(": ")
            if call_id is not None:
                self.log.end(call_id, b"", status=502, error=error, s=round(time.monotonic() - t0, 6))
            _send_error(writer, 502, f"trajkit record: {error}")
            return True
        headers = [(k, v) for k, v in rhead.headers if k.lower() not in HOP_BY_HOP]
        framed = rhead.chunked or rhead.length is not None
        stream = "text/event-stream" in (rhead.get("content-type") or "")
        strip = bool(added) and rhead.status == 200
        raw = bytearray()
        try:
            if not stream:
                async for piece in body_chunks(reader, rhead, until_close=not framed):
                    raw += piece
                if call_id is not None:
                    self.log.end(call_id, bytes(raw), status=rhead.status, s=round(time.monotonic() - t0, 6))
                    await self.log.durable()
                out = strip_token_fields(bytes(raw), added) if strip else bytes(raw)
                writer.write(response_head(rhead.status, headers, len(out)) + out)
            else:
                await self._relay(rhead, reader, writer, headers, raw, added if strip else [], framed)
                if call_id is not None:
                    self.log.end(call_id, bytes(raw), status=rhead.status, s=round(time.monotonic() - t0, 6))
        except (ConnectionError, asyncio.IncompleteReadError, BadMessage) as e:
            conn.close()
            if call_id is not None:
                error = f"the stream broke off: {type(e).__name__}: {e}".rstrip(": ")
                self.log.end(call_id, bytes(raw), status=rhead.status, error=error, s=round(time.monotonic() - t0, 6))
            return False
        self.upstream.release(reader, conn, framed and rhead.keep_alive)
        return True

    async def _relay(
        self,
        rhead: Head,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        headers: list[tuple[str, str]],
        raw: bytearray,
        strip: list[str],
        framed: bool,
    ) -> None:
        """Pass a stream of server-sent events on as it arrives (whole events, token fields nulled, when
        ``strip``), keeping what came in ``raw``."""
        writer.write(response_head(rhead.status, headers, None))
        pending = b""
        async for piece in body_chunks(reader, rhead, until_close=not framed):
            raw += piece
            if strip:
                pending += piece
                parts, cut = [], 0
                for m in _EVENT_END.finditer(pending):
                    parts += [strip_token_fields(pending[cut : m.start()], strip), m.group()]
                    cut = m.end()
                piece, pending = b"".join(parts), pending[cut:]
            if piece:
                writer.write(chunk(piece))
                await writer.drain()
        if pending:
            writer.write(chunk(strip_token_fields(pending, strip)))
        writer.write(chunk(b""))


def _send_error(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    """An error in the OpenAI API's shape."""
    data = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": status}}).encode()
    with contextlib.suppress(ConnectionError):
        writer.write(response_head(status, [("Content-Type", "application/json")], len(data)) + data)
