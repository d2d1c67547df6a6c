"""Just enough HTTP/1.1 over asyncio streams for the recording proxy (``trajkit.models.record``).

Both sides of a proxy: reading a request and writing a response to the agent,
writing a request and reading a response from the upstream (keep-alive,
``Content-Length`` or chunked bodies, TLS for ``https``). Written on the
standard library's asyncio streams so the proxy adds little to each call (see
``bench/proxy.py``) and runs wherever trajkit does.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024  # bytes of a request or response line plus headers
# headers that describe one connection, never passed on (RFC 9110 7.6.1), and those the proxy sets itself
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
    | {"proxy-authorization", "proxy-authenticate", "content-length", "host", "accept-encoding", "expect"}
)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Content Too Large", 502: "Bad Gateway"}


class BadMessage(Exception):
    """A request or response that is not HTTP/1.1 as this module reads it."""


@dataclass
class Head:
    """A request line (method, target) or status line (status, reason), with its headers in order."""

    method: str = ""
    target: str = ""
    status: int = 0
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str, default: str | None = None) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), default)

    @property
    def chunked(self) -> bool:
        return "chunked" in (self.get("transfer-encoding") or "").lower()

    @property
    def length(self) -> int | None:
        value = self.get("content-length")
        if value is None:
            return None
        if not value.strip().isdigit():
            raise BadMessage(f"Content-Length {value!r} is not a number")
        return int(value)

    @property
    def keep_alive(self) -> bool:
        return "close" not in (self.get("connection") or "").lower()


def _parse_head(raw: bytes, request: bool) -> Head:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as e:  # pragma: no cover - latin-1 decodes every byte
        raise BadMessage(str(e)) from None
    first, *lines = text.rstrip("\r\n").split("\r\n")
    parts = first.split(" ", 2)
    if len(parts) < 2 or not parts[(2 if request else 0)].startswith("HTTP/1."):
        raise BadMessage(f"not an HTTP/1.x {'request' if request else 'status'} line: {first[:80]!r}")
    headers = []
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadMessage(f"malformed header line {line[:80]!r}")
        headers.append((name, value.strip()))
    if request:
        return Head(method=parts[0], target=parts[1], headers=headers)
    if not parts[1].isdigit():
        raise BadMessage(f"status {parts[1]!r} is not a number")
    return Head(status=int(parts[1]), reason=parts[2] if len(parts) > 2 else "", headers=headers)


async def read_head(reader: asyncio.StreamReader, request: bool) -> Head | None:
    """The next message's head; None when the peer closed the connection between messages."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise BadMessage("the connection closed in the middle of a message head") from None
    except asyncio.LimitOverrunError:
        raise BadMessage(f"a message head over {MAX_HEAD} bytes") from None
    return _parse_head(raw, request)


async def body_chunks(reader: asyncio.StreamReader, head: Head, until_close: bool = False) -> AsyncIterator[bytes]:
    """A message's body as it arrives: by ``Content-Length``, chunked, or (a response with neither) to the close."""
    if head.chunked:
        while True:
            line = await reader.readuntil(b"\r\n")
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadMessage(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    length = head.length
    if length is not None:
        while length > 0:
            data = await reader.read(min(length, 1 << 16))
            if not data:
                raise asyncio.IncompleteReadError(b"", length)
            length -= len(data)
            yield data
    elif until_close:
        while data := await reader.read(1 << 16):
            yield data


async def read_body(reader: asyncio.StreamReader, head: Head, limit: int) -> bytes:
    """A whole (request) body; over ``limit`` bytes is a BadMessage."""
    out = bytearray()
    async for data in body_chunks(reader, head):
        out += data
        if len(out) > limit:
            raise BadMessage(f"a body over {limit} bytes")
    return bytes(out)


def response_head(status: int, headers: list[tuple[str, str]], length: int | None) -> bytes:
    """A status line and headers; ``length`` None: a chunked body follows."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (``b""`` ends the body)."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"


class Upstream:
    """Keep-alive connections to one base URL (``http://host:port/v1``, or https); one request per connection at
    a time."""

    def __init__(self, base_url: str, timeout_s: float = 600.0):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host, self.tls = parts.hostname, parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.path = parts.path.rstrip("/")
        self.authority = parts.netloc.rpartition("@")[2]
        self.timeout_s = timeout_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._ssl = ssl.create_default_context() if self.tls else None

    def target(self, path: str) -> str:
        """The upstream's request target for a path the agent asked for (its ``/v1`` prefix is the base URL's)."""
        rest = path[3:] if path == "/v1" or path.startswith(("/v1/", "/v1?")) else path
        return self.path + rest

    async def request(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[Head, asyncio.StreamReader, asyncio.StreamWriter]:
        """Send a request; returns the response head and the connection to read its body from (give it back
        with ``release`` once the body is read). When a kept-alive connection turns out closed by the upstream
        (a restart) before any byte of the response came, the idle ones go too and a new connection is tried."""
        head = f"{method} {self.target(path)} HTTP/1.1\r\nHost: {self.authority}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers)
        data = (head + f"Content-Length: {len(body)}\r\nAccept-Encoding: identity\r\n\r\n").encode("latin-1") + body
        for attempt in range(2):
            reused = bool(self._idle)
            reader, writer = self._idle.pop() if reused else await self._connect()
            try:
                writer.write(data)
                response = await asyncio.wait_for(read_head(reader, request=False), self.timeout_s)
                if response is None:
                    raise ConnectionResetError("the upstream closed the connection")
                return response, reader, writer
            except (ConnectionError, BadMessage, asyncio.IncompleteReadError):
                writer.close()
                if not reused or attempt:
                    raise
                self.close()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self._ssl, limit=MAX_HEAD), self.timeout_s
        )
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return reader, writer

    def release(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reusable: bool) -> None:
        """Give a connection back after its response was read whole (``reusable``), else close it."""
        if reusable and not writer.is_closing():
            self._idle.append((reader, writer))
        else:
            writer.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop()[1].close()
