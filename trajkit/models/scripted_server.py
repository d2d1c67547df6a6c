"""A real OpenAI-compatible HTTP server on loopback whose answers come from a Python function.

For tests, benchmarks and the demo: the ``openai`` backend talks to it over
real HTTP, exactly as to ``vllm serve``. ``script(messages, tools, body)``
returns the assistant message (a string, or ``{"content", "tool_calls",
"reasoning_content"}``, optionally with ``logprobs``, ``token_ids`` and
``prompt_token_ids`` that the response then carries, as vLLM's does; a ``stream: true`` request gets the
answer as server-sent events, ``trajkit.models.sse``); ``faults``
injects 500s, 429s with ``Retry-After``, stalls and malformed 200 bodies by
request index (or through a function of the index, e.g. ``faults_at_rate``).
Every request is recorded (path, headers, body) so tests
can assert exactly what was sent. Requests are served concurrently.

    with ScriptedServer(lambda messages, tools, body: "hi") as server:
        spec = ModelSpec(model="scripted", backend="openai", base_url=server.base_url)
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from trajkit.models.base import Message, ToolSchema

Script = Callable[[list[Message], "list[ToolSchema] | None", dict], "dict | str"]
_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class Fault:
    """What to do instead of answering one request: an error status, and/or a stall first."""

    status: int = 500
    retry_after: float | None = None
    stall_s: float = 0.0
    body: Any = None  # with status 200: sent as the response instead of an answer (JSON, or raw bytes)

    @classmethod
    def error(cls, status: int = 500) -> Fault:
        return cls(status=status)

    @classmethod
    def rate_limited(cls, retry_after: float = 1.0) -> Fault:
        return cls(status=429, retry_after=retry_after)

    @classmethod
    def stall(cls, seconds: float) -> Fault:
        """Hold the request for ``seconds`` (past the client's timeout), then answer normally."""
        return cls(status=200, stall_s=seconds)

    @classmethod
    def garbage(cls, body: Any) -> Fault:
        """Answer 200 with ``body`` (any JSON value, or raw bytes) instead of a chat completion."""
        return cls(status=200, body=body)


Faults = Mapping[int, Fault] | Callable[[int], "Fault | None"]


def faults_at_rate(fault: Fault, rate: float, seed: int = 0) -> Callable[[int], Fault | None]:
    """``fault`` for a seeded random fraction ``rate`` of requests."""
    return lambda index: fault if random.Random(f"{seed}:{index}").random() < rate else None


def count_tokens(text: str) -> int:
    """The server's token count: words and punctuation marks."""
    return len(_TOKEN.findall(text))


class Refused(Exception):
    """A request the server answers with an error status instead of a completion (a replay that has no
    recorded answer for it): 4xx, so the client does not retry it."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ScriptedServer:
    """An OpenAI-compatible chat server on 127.0.0.1; a context manager, sync or async. A ``stream: true``
    request is answered with server-sent events."""

    owned_by = "trajkit"  # what /v1/models says owns the model (vLLM says "vllm")

    def __init__(
        self,
        script: Script,
        delay_s: float = 0.0,
        faults: Faults | None = None,
        model: str = "scripted",
        port: int = 0,
    ):
        self.script, self.delay_s, self.faults, self.model, self.port = script, delay_s, faults, model, port
        self.requests: list[dict[str, Any]] = []  # every request: index, method, path, headers, body
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.in_flight = 0
        self.max_in_flight = 0

    # ------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the server is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> Self:
        handler = type("Handler", (_Handler,), {"owner": self})
        self._server = _Server(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The bodies of the chat completion requests received, in arrival order."""
        with self._lock:
            return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    # ------------------------------------------------------------ serving
    def _record(self, method: str, path: str, headers: dict[str, str], body: Any) -> int:
        with self._lock:
            index = sum(1 for r in self.requests if r["path"].endswith("/chat/completions"))
            self.requests.append({"index": index, "method": method, "path": path, "headers": headers, "body": body})
            return index

    def served_models(self) -> list[str]:
        """The model ids ``/v1/models`` lists."""
        return [self.model]

    def _fault(self, index: int) -> Fault | None:
        if self.faults is None:
            return None
        if callable(self.faults):
            return self.faults(index)
        return self.faults.get(index)

    def _complete(self, body: dict[str, Any], index: int) -> dict[str, Any]:
        messages, tools = body.get("messages") or [], body.get("tools")
        n, max_tokens = int(body.get("n") or 1), body.get("max_tokens") or body.get("max_completion_tokens")
        choices, completion_tokens, prompt_ids = [], 0, None
        for i in range(n):
            reply = self.script(messages, tools, body)
            message, finish = _assistant_message(reply, f"call_{index}_{i}")
            content = message.get("content") or ""
            if max_tokens is not None and count_tokens(content) > max_tokens:
                cut = list(_TOKEN.finditer(content))[max_tokens - 1].end() if max_tokens > 0 else 0
                message, finish = {"role": "assistant", "content": content[:cut]}, "length"
            completion_tokens += count_tokens(message.get("content") or "")
            completion_tokens += count_tokens(json.dumps(message["tool_calls"])) if message.get("tool_calls") else 0
            choice = {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
            if isinstance(reply, dict) and reply.get("logprobs") is not None:
                choice["logprobs"] = {"content": [{"token": "", "logprob": x} for x in reply["logprobs"]]}
            if isinstance(reply, dict) and reply.get("token_ids") is not None:
                choice["token_ids"] = reply["token_ids"]
                prompt_ids = reply.get("prompt_token_ids", prompt_ids)
            choices.append(choice)
        prompt_tokens = sum(count_tokens(json.dumps(m.get("content") or "")) for m in messages)
        extra = {"prompt_token_ids": prompt_ids} if prompt_ids is not None else {}
        return {
            **extra,
            "id": f"chatcmpl-{index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _assistant_message(reply: dict | str, call_prefix: str) -> tuple[dict[str, Any], str]:
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}, "stop"
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if reply.get("reasoning_content") is not None:
        message["reasoning_content"] = reply["reasoning_content"]
    calls = []
    for j, call in enumerate(reply.get("tool_calls") or []):
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        calls.append(
            {
                "id": call.get("id") or f"{call_prefix}_{j}",
                "type": "function",
                "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
        )
    if calls:
        message["tool_calls"] = calls
    return message, reply.get("finish_reason") or ("tool_calls" if calls else "stop")


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # many clients connect at once (the default backlog of 5 stalls them)


class _Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # headers and body go in separate writes; no 40 ms delayed-ACK stall
    protocol_version = "HTTP/1.1"
    owner: ScriptedServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            self.close_connection = True

    def do_GET(self) -> None:
        owner = self.owner
        owner._record("GET", self.path, dict(self.headers), None)
        if self.path.rstrip("/").endswith("/models"):
            data = [{"id": m, "object": "model", "owned_by": owner.owned_by} for m in owner.served_models()]
            self._send(200, {"object": "list", "data": data})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        owner = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            owner._record("POST", self.path, dict(self.headers), raw.decode(errors="replace"))
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        index = owner._record("POST", self.path, dict(self.headers), body)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        with owner._lock:
            owner.in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
        try:
            self._answer(body, index)
        finally:
            with owner._lock:
                owner.in_flight -= 1

    def _answer(self, body: dict[str, Any], index: int) -> None:
        owner = self.owner
        fault = owner._fault(index)
        wait = owner.delay_s + (fault.stall_s if fault else 0.0)
        if wait and owner._stop.wait(wait):
            return
        if fault is not None and fault.status != 200:
            headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
            self._send(fault.status, {"error": {"message": f"injected fault {fault.status}"}}, headers)
            return
        if fault is not None and fault.body is not None:
            self._send(200, fault.body)
            return
        try:
            payload = owner._complete(body, index)
        except Refused as e:
            self._send(e.status, {"error": {"message": str(e)}})
            return
        except Exception as e:  # noqa: BLE001 - a broken script is the server's 500, as with a real server
            self._send(500, {"error": {"message": f"script failed: {type(e).__name__}: {e}"}})
            return
        if body.get("stream") is True:
            self._send_stream(payload, bool((body.get("stream_options") or {}).get("include_usage")))
        else:
            self._send(200, payload)

    def _send_stream(self, payload: dict[str, Any], include_usage: bool) -> None:
        """The answer as server-sent events, one chunk of the body per event (``trajkit.models.sse``)."""
        from trajkit.models import sse

        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in sse.encode(sse.stream_chunks(payload, include_usage)):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
