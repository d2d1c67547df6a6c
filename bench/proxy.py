"""Recording proxy benchmark: what `trajkit model serve --record` adds to each call an agent makes.

A zero-latency upstream (a process of its own answering a canned chat completion at once, the way vLLM
shapes it) is called directly and through the proxy, side by side:

* added latency at concurrency 1: one keep-alive connection each, direct and proxied requests interleaved,
  p50 and p99 of each and the median of the paired differences;
* the proxy's own CPU per call at concurrency 64: its process's user + system CPU (``/proc/<pid>/stat``)
  over the calls, with the upstream's for scale, and the calls per second of each path.

Goals: under 2 ms p50 added, under 2 ms of proxy CPU per call. Each setting runs with the call log fsynced
once a second (the default) and after every record (``--fsync always``); ``--stream`` answers with
server-sent events, ``--token-ids`` makes the upstream say it is vLLM so the proxy asks for and strips token
ids. The request is an agent's (a system prompt, a question, two tool calls and their results, three tools:
about 3 KB).

It imports the standard library and trajkit's source only (``trajkit.models.record`` and what it imports:
``calllog``, ``http1``, ``errors``), no third-party package, so on a bare GPU image it runs from a checkout:

    python bench/proxy.py [--calls 4000] [--concurrency 64] [--stream] [--token-ids] [--log-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")

UPSTREAM = r"""
import asyncio, json, sys
vllm = sys.argv[1] == "vllm"
message = {"role": "assistant", "content": "The weather in Oslo is sunny, 21 degrees.", "tool_calls": None}
def answer(asked):
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop", "token_ids": None}
    body = {"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
            "choices": [choice], "usage": {"prompt_tokens": 812, "completion_tokens": 12, "total_tokens": 824},
            "prompt_token_ids": None}
    if asked:
        choice["token_ids"] = list(range(100, 112))
        choice["logprobs"] = {"content": [{"token": "x", "logprob": -0.1, "bytes": None, "top_logprobs": []}] * 12}
        body["prompt_token_ids"] = list(range(812))
    return json.dumps(body, separators=(",", ":")).encode()
def events(asked):
    out = []
    for i, word in enumerate(message["content"].split(" ")):
        delta = {"role": "assistant", "content": word + " "} if i == 0 else {"content": word + " "}
        c = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "token_ids": [100 + i] if asked else None}
        out.append({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench", "choices": [c]})
    data = b"".join(b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in out)
    return data + b"data: [DONE]\n\n"
CANNED = {(s, a): (events(a) if s else answer(a)) for s in (False, True) for a in (False, True)}
MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "owned_by": "vllm" if vllm else "bench"}]}).encode()
class Serve(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf = transport, b""
    def data_received(self, data):
        self.buf += data
        while (i := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:i].lower()
            n = int(head.split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length:" in head else 0
            if len(self.buf) < i + 4 + n:
                return
            body, self.buf = self.buf[i + 4 : i + 4 + n], self.buf[i + 4 + n :]
            if b"/models" in head.split(b"\r\n")[0]:
                self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(MODELS), MODELS))
                continue
            stream = b'"stream":true' in body.replace(b" ", b"")
            data = CANNED[stream, b"return_token_ids" in body]
            if stream:
                self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            else:
                self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
async def main():
    server = await asyncio.get_running_loop().create_server(Serve, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

PROXY = r"""
import sys, threading
sys.path.insert(0, sys.argv[4])
from trajkit.models.record import RecordingProxy
proxy = RecordingProxy(sys.argv[1], sys.argv[2], fsync=sys.argv[3], token_ids="auto").start()
print(proxy.base_url, "|".join(proxy.notes()), flush=True)
threading.Event().wait()
"""


def request_body(stream: bool) -> bytes:
    """An agent's fourth call: system prompt, question, two tool calls and their results, three tools."""
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather of a city: temperature, wind, sky, humidity and a forecast. " * 2,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
        for i in range(2)
    ]
    messages = [
        {
            "role": "system",
            "content": "You are a helpful assistant with tools. Answer briefly and cite the tools. " * 6,
        },
        {"role": "user", "content": "What is the weather in Oslo and in Bergen today, and should I take an umbrella?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {
                "role": "tool",
                "tool_call_id": c["id"],
                "content": '{"temp": 21, "sky": "sunny", "wind": 3, "rain": 0.0}' * 3,
            }
            for c in calls
        ),
    ]
    body = {"model": "bench", "messages": messages, "tools": [tool, tool, tool], "temperature": 0.7, "max_tokens": 512}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


class Client:
    """One keep-alive HTTP/1.1 connection sending the same POST again and again."""

    def __init__(self, base_url: str, body: bytes):
        rest = base_url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        self.host, port = hostport.split(":")
        self.port = int(port)
        self.data = (
            f"POST /{path}/chat/completions HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer bench\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def open(self) -> Client:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def call(self) -> float:
        t0 = time.perf_counter()
        self.writer.write(self.data)
        head = (await self.reader.readuntil(b"\r\n\r\n")).lower()
        assert head.startswith(b"http/1.1 200"), head[:200]
        if b"content-length:" in head:
            await self.reader.readexactly(int(head.split(b"content-length:")[1].split(b"\r\n")[0]))
        else:  # chunked
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        return time.perf_counter() - t0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start(code: str, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


async def latency(direct_url: str, proxy_url: str, body: bytes, calls: int) -> dict[str, float]:
    direct, via = await Client(direct_url, body).open(), await Client(proxy_url, body).open()
    for _ in range(50):  # warm-up: connections, the proxy's first calls
        await direct.call()
        await via.call()
    d, v = [], []
    for _ in range(calls):
        d.append(await direct.call())
        v.append(await via.call())
    ms = lambda xs, q: 1e3 * statistics.quantiles(xs, n=100)[q - 1]
    return {
        "direct_p50": ms(d, 50),
        "proxy_p50": ms(v, 50),
        "direct_p99": ms(d, 99),
        "proxy_p99": ms(v, 99),
        "added_p50": 1e3 * statistics.median(b - a for a, b in zip(d, v)),
    }


async def load(url: str, body: bytes, calls: int, concurrency: int, pids: list[int]) -> dict[str, float]:
    clients = [await Client(url, body).open() for _ in range(concurrency)]
    for c in clients:
        await c.call()
    cpu0, t0 = [cpu_seconds(p) for p in pids], time.perf_counter()

    async def work(c: Client, n: int) -> None:
        for _ in range(n):
            await c.call()

    per = calls // concurrency
    await asyncio.gather(*(work(c, per) for c in clients))
    wall = time.perf_counter() - t0
    cpu = [cpu_seconds(p) - c for p, c in zip(pids, cpu0)]
    return {"calls_per_s": per * concurrency / wall, "cpu_ms": [1e3 * c / (per * concurrency) for c in cpu]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=4000, help="Calls per measurement.")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--stream", action="store_true", help="Server-sent events instead of one JSON answer.")
    ap.add_argument("--token-ids", action="store_true", help="A vLLM upstream: the proxy asks for token ids.")
    ap.add_argument(
        "--log-dir", type=Path, default=None, help="Where the runs (and call logs) go (default: a temp dir)."
    )
    args = ap.parse_args()
    body = request_body(args.stream)
    up, port = start(UPSTREAM, "vllm" if args.token_ids else "plain")
    upstream_url = f"http://127.0.0.1:{port}/v1"
    base = Path(tempfile.mkdtemp(prefix="bench-proxy-", dir=args.log_dir))
    rows = []
    try:
        for fsync in ("interval", "always"):
            proxy, line = start(PROXY, upstream_url, str(base / fsync), fsync, str(ROOT))
            proxy_url, notes = line.split(" ", 1)
            try:
                lat = asyncio.run(latency(upstream_url, proxy_url, body, args.calls // 4))
                direct = asyncio.run(load(upstream_url, body, args.calls, args.concurrency, [up.pid]))
                via = asyncio.run(load(proxy_url, body, args.calls, args.concurrency, [proxy.pid, up.pid]))
            finally:
                proxy.kill()
                proxy.wait()
            log = base / fsync / "_record" / "calls.log"
            rows.append((fsync, lat, direct, via, log.stat().st_size, notes))
    finally:
        up.kill()
        up.wait()
    print(
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {len(body)} B requests, "
        f"{'stream' if args.stream else 'json'}, token ids {'asked (vLLM)' if args.token_ids else 'not asked'}; "
        f"logs under {base} ({_fs(base)})"
    )
    print(
        f"{'fsync':9} {'c=1 p50 direct/proxy':>22} {'added p50':>10} {'p99 direct/proxy':>18} "
        f"{'c=' + str(args.concurrency) + ' calls/s direct/proxy':>28} {'proxy CPU/call':>15} {'upstream CPU/call':>18}"
    )
    for fsync, lat, direct, via, size, notes in rows:
        print(
            f"{fsync:9} {lat['direct_p50']:9.3f} / {lat['proxy_p50']:6.3f} ms {lat['added_p50']:7.3f} ms "
            f"{lat['direct_p99']:7.3f} / {lat['proxy_p99']:6.3f} ms {direct['calls_per_s']:12.0f} / {via['calls_per_s']:7.0f} "
            f"{via['cpu_ms'][0]:12.3f} ms {direct['cpu_ms'][0]:15.3f} ms"
        )
    print(f"proxy: {rows[0][5]}; call log after the run: {rows[0][4] / 1e6:.1f} MB (fsync interval)")


def _fs(path: Path) -> str:
    """The file system a path is on (from /proc/mounts), since fsync's cost is the disk's."""
    best = ("", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, kind, *_ = line.split()
        if str(path.resolve()).startswith(mount) and len(mount) > len(best[0]):
            best = (mount, kind)
    return best[1]


if __name__ == "__main__":
    main()
