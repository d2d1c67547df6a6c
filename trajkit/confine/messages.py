"""Length-prefixed JSON messages over a pipe: how the sandbox and its worker talk (standard library only).

Each message is a 4-byte big-endian length, then that many bytes of JSON.
"""

from __future__ import annotations

import json
import os
import struct

_HEADER = struct.Struct(">I")


def read_message(fd: int) -> dict | None:
    header = read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    body = read_exactly(fd, _HEADER.unpack(header)[0])
    return None if body is None else json.loads(body)


def write_message(fd: int, message: dict) -> None:
    body = json.dumps(message).encode()
    data = _HEADER.pack(len(body)) + body
    while data:
        data = data[os.write(fd, data) :]


def read_exactly(fd: int, n: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = os.read(fd, n - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)
