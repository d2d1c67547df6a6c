"""A fake e2b: the control API (create, kill) and envd's process service, over real local HTTP.

The e2b SDK talks to it exactly as to the cloud (``api_url`` and
``sandbox_url`` point here); every request is recorded for the tests to
assert. ``Start`` really runs the requested command on this machine, as envd
would inside the sandbox, and streams its output back as envd events.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field
from typing import Self

import uvicorn
from e2b.envd.process import process_pb
from e2b.envd.process.process_connect import Process, ProcessASGIApplication
from protobuf import Oneof
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SANDBOX_ID = "sbx-fake-1"
ACCESS_TOKEN = "envd-token-fake"
COMMAND_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict
    body: object = None


@dataclass
class FakeE2B:
    create_status: int = 201
    requests: list[Recorded] = field(default_factory=list)
    starts: list[process_pb.StartRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        rest = Starlette(
            routes=[
                Route("/v2/sandboxes", self._create, methods=["POST"]),
                Route("/sandboxes/{sandbox_id}", self._kill, methods=["DELETE"]),
            ]
        )
        process = ProcessASGIApplication(_Process(self))

        async def app(scope, receive, send):
            if scope["type"] == "http" and scope["path"].startswith(process.path + "/"):
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                self.requests.append(Recorded(scope["method"], scope["path"], headers))
                return await process(scope, receive, send)
            return await rest(scope, receive, send)

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        while not self._server.started:
            threading.Event().wait(0.01)
        return self

    def __exit__(self, *_exc) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    async def _create(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(Recorded("POST", "/v2/sandboxes", _lower(request.headers), body))
        if self.create_status != 201:
            return JSONResponse({"code": self.create_status, "message": "invalid API key"}, self.create_status)
        return JSONResponse(
            {
                "templateID": body["templateID"],
                "sandboxID": SANDBOX_ID,
                "clientID": "client-fake",
                "envdVersion": "0.6.4",
                "envdAccessToken": ACCESS_TOKEN,
            },
            201,
        )

    async def _kill(self, request: Request) -> Response:
        path = f"/sandboxes/{request.path_params['sandbox_id']}"
        self.requests.append(Recorded("DELETE", path, _lower(request.headers)))
        return Response(status_code=204)


class _Process(Process):
    """envd's process service: ``Start`` runs the command and streams start, data and end events."""

    def __init__(self, owner: FakeE2B):
        self.owner = owner

    async def start(self, request: process_pb.StartRequest, ctx):
        self.owner.starts.append(request)
        proc = await asyncio.create_subprocess_exec(
            request.process.cmd,
            *request.process.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**COMMAND_ENV, **dict(request.process.envs)},
        )
        yield _event("start", process_pb.ProcessEvent.StartEvent(pid=proc.pid))
        out, err = await proc.communicate()
        for stream, data in (("stdout", out), ("stderr", err)):
            if data:
                yield _event("data", process_pb.ProcessEvent.DataEvent(output=Oneof(stream, data)))
        status = f"exit status {proc.returncode}"
        yield _event("end", process_pb.ProcessEvent.EndEvent(exit_code=proc.returncode, exited=True, status=status))


def _event(kind: str, value) -> process_pb.StartResponse:
    return process_pb.StartResponse(event=process_pb.ProcessEvent(event=Oneof(kind, value)))


def _lower(headers) -> dict:
    return {k.lower(): v for k, v in headers.items()}


def request_lines(fake: FakeE2B) -> list[str]:
    return [f"{r.method} {r.path}" for r in fake.requests]
