"""Rollout benchmark: fresh contained server instances per trajectory, with and without the warm pool.

Each trajectory makes 3 tool calls on its own contained instance of the project's
stateful ``kv`` server (``set`` a marker unique to the trajectory, ``list_keys``,
``get`` the marker) and a final answer: 4 model turns, answered by an
OpenAI-compatible loopback server (in its own process) after a fixed delay. The
critical-path bound is ``trajectories x turns x delay / concurrency``; the "model
calls only" loop makes the same model turns through the same ``openai`` backend with
the tool results faked: the ceiling the HTTP path sets on this machine.

Per concurrency, with the warm pool (``ToolEnv(warm=concurrency)``, filled inside the
timed run) and without it (each trajectory starts its instance when it starts):
seconds, ratio to the bound and to "model calls only", the instance start latency a
trajectory sees (from taking an instance to its ``initialize`` answer; p50, p99),
peak memory of the whole process tree, and cross-trajectory leaks (a trajectory whose
``list_keys`` shows another's marker, or whose ``get`` misses its own).

Second table: CPU-seconds per instance start (launcher + server, to its ``initialize``
answer) spawned as trajkit does (``contain.py`` launcher, then ``exec`` of the server),
bare (no containment), and from a fork server that imported the server once and forks
a contained instance per request; and the start rate the machine's cores allow.
Third: client CPU per model call on the HTTP path ("model calls only", this process).

    python bench/rollouts.py              # quick (make bench): 48 trajectories at concurrency 16
    python bench/rollouts.py --full       # the issue's run: 1,000 trajectories at 16, 64 and 256

A spawned kv instance costs about 1.2 CPU-seconds to start, so on 2 cores the full run
is bound by starts (1,000 starts per row), not by the model: hours, not minutes.

No node server: ``@modelcontextprotocol/server-memory`` is not in this machine's npm
cache, and the benchmark runs offline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from trajkit.envs import contain
from trajkit.envs.agent import AgentLimits, run_episode
from trajkit.envs.config import ServerConfig, child_environment
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.models import ModelSpec, make_backend
from trajkit.models.base import SamplingParams

TURNS = 4
KV = ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.kv"])
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def script(messages, tools, body):
    """Scripted model: set this trajectory's marker, list the keys, get the marker, answer."""
    marker = messages[0]["content"].split()[-1]
    turn = sum(m["role"] == "assistant" for m in messages)
    plan = [("set", {"key": marker, "value": "1"}), ("list_keys", {}), ("get", {"key": marker})]
    if turn < len(plan):
        name, args = plan[turn]
        return {"tool_calls": [{"name": name, "arguments": args}]}
    return "done"


def serve(delay: float, queue) -> None:
    from trajkit.models.scripted_server import ScriptedServer

    server = ScriptedServer(script, delay_s=delay).start()
    queue.put(server.base_url)
    while True:
        time.sleep(3600)


def start_model_server(delay: float) -> tuple[mp.Process, str]:
    queue = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=serve, args=(delay, queue), daemon=True)
    proc.start()
    return proc, queue.get(timeout=60)


def task(i: int, server_ids: list[str]) -> dict:
    return {"task_id": f"bench-{i}", "question": f"Store your marker m{i}", "server_ids": server_ids}


def backend_for(base_url: str, concurrency: int):
    spec = ModelSpec(model="scripted", backend="openai", base_url=base_url, cache=False, max_concurrency=concurrency)
    return make_backend(spec)


class Peak:
    """The peak resident memory of this process and all its descendants, sampled every 0.2 s."""

    def __init__(self):
        self.mb = 0.0

    async def watch(self) -> None:
        me = psutil.Process()
        while True:
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.mb = max(self.mb, total / 2**20)
            await asyncio.sleep(0.2)


# ---------------------------------------------------------------- rollouts
async def trajkit_run(rows, base_url: str, n: int, concurrency: int, warm: int) -> dict:
    backend = backend_for(base_url, concurrency)
    ids = [r["server_id"] for r in rows]
    sem = asyncio.Semaphore(concurrency)
    limits = AgentLimits(max_turns=TURNS + 2)
    waits: list[float] = []
    watchers: set[asyncio.Task] = set()
    peak = Peak()
    sampler = asyncio.create_task(peak.watch())
    async with ToolEnv(rows, config={"kv": KV}, max_processes=concurrency, warm=warm) as env:
        take = env.instance

        def timed_instance(row):  # the wait a trajectory sees: from taking its instance to initialize's answer
            conn, t = take(row), time.perf_counter()

            async def ready() -> None:
                await conn.open()
                waits.append(time.perf_counter() - t)

            watchers.add(asyncio.create_task(ready()))
            return conn

        env.instance = timed_instance

        async def one(i: int) -> dict:
            async with sem:
                return await run_episode(task(i, ids), backend, env, SamplingParams(max_tokens=64), limits)

        t0 = time.perf_counter()
        out = await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - t0
        await asyncio.gather(*watchers, return_exceptions=True)
    sampler.cancel()
    await backend.aclose()
    bad = [r for r in out if r["status"] != "completed" or r["num_tool_calls"] != 3]
    if bad:
        raise SystemExit(f"{len(bad)} trajectories did not complete: {bad[0]['reason']}")
    leaks = sum(_leaked(r, i) for i, r in enumerate(out))
    waits.sort()
    return {
        "elapsed": elapsed,
        "p50": waits[len(waits) // 2],
        "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
        "peak_mb": peak.mb,
        "leaks": leaks,
    }


def _leaked(row: dict, i: int) -> bool:
    """Whether the trajectory saw another's marker, or lost its own."""
    tools = [m["content"] for m in row["messages"] if m["role"] == "tool"]
    return json.loads(tools[1]) != [f"m{i}"] or tools[2] != "1"


async def model_only_run(rows, base_url: str, n: int, concurrency: int) -> tuple[float, float]:
    """The same model turns through the same backend with tool results faked; (seconds, client CPU-s)."""
    from trajkit.envs.agent import schema_message
    from trajkit.envs.tools import tool_schemas

    backend = backend_for(base_url, concurrency)
    tools = tool_schemas(rows)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            messages = [schema_message({"role": "user", "content": task(i, [])["question"]})]
            for _ in range(TURNS):
                c = (await backend.generate(messages, tools, SamplingParams(max_tokens=64)))[0]
                messages.append(schema_message(c.message()))
                messages.extend(
                    schema_message({"role": "tool", "content": '["x"]', "tool_call_id": t.id, "name": t.name})
                    for t in c.tool_calls
                )

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await backend.aclose()
    return elapsed, cpu


# ---------------------------------------------------------------- instance starts: spawn vs fork server
def _handshake(write_fd: int, read_file) -> None:
    os.write(write_fd, (json.dumps(INIT) + "\n").encode())
    line = read_file.readline()
    if b'"result"' not in line:
        raise SystemExit(f"server did not answer initialize: {line[:200]!r}")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def spawn_starts(n: int, contained: bool) -> tuple[float, float]:
    """(CPU-s per start, seconds per start) of n sequential starts spawned as trajkit does (or bare)."""
    argv = [KV.command, *KV.args]
    if contained:
        argv = [sys.executable, *contain.wrap("kv", KV, KV.command, list(KV.args))]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    for _ in range(n):
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_environment(KV))
        _handshake(proc.stdin.fileno(), proc.stdout)
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()
    return (_children_cpu() - cpu0) / n, (time.perf_counter() - t0) / n


ZYGOTE = """
import json, os, socket, sys, resource
from trajkit.envs import contain
from trajkit.envs.servers import kv
spec = json.loads(sys.argv[1])
sock = socket.socket(fileno=int(sys.argv[2]))
while True:
    msg, fds, _, _ = socket.recv_fds(sock, 16, 2)
    if not fds:
        break
    if os.fork() == 0:
        sock.close()
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        os.closerange(3, 1024)
        os._exit(contain.run(spec, kv.server.run))
    for fd in fds:
        os.close(fd)
    sock.send(b"k")
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
r = resource.getrusage(resource.RUSAGE_CHILDREN)
sock.send(json.dumps(r.ru_utime + r.ru_stime).encode())
"""


def fork_starts(n: int) -> tuple[float, float]:
    """(CPU-s per start, seconds per start) of n sequential contained starts forked from a zygote that
    imported the kv server once (the zygote's own import is not counted: it is paid once)."""
    spec = json.loads(contain.wrap("kv", KV, KV.command, list(KV.args))[3])
    ours, theirs = socket.socketpair()
    zygote = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE, json.dumps(spec), str(theirs.fileno())],
        pass_fds=[theirs.fileno()],
        env=dict(child_environment(KV), PYTHONPATH=str(Path(__file__).resolve().parent.parent)),
    )
    theirs.close()
    t0 = time.perf_counter()
    for _ in range(n):
        server_in, to_server = os.pipe()
        from_server, server_out = os.pipe()
        socket.send_fds(ours, [b"s"], [server_in, server_out])
        os.close(server_in)
        os.close(server_out)
        ours.recv(1)
        with os.fdopen(to_server, "wb", buffering=0) as w, os.fdopen(from_server, "rb") as r:
            _handshake(w.fileno(), r)
    seconds = (time.perf_counter() - t0) / n
    socket.send_fds(ours, [b"q"], [])
    ours.shutdown(socket.SHUT_WR)
    cpu = json.loads(ours.recv(64))
    zygote.wait()
    return cpu / n, seconds


# ---------------------------------------------------------------- report
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="the issue's run: 1,000 trajectories at 16, 64 and 256")
    ap.add_argument("--trajectories", type=int, default=None, help="default: 48 (1,000 with --full)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=None, help="default: 16 (16 64 256 with --full)")
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--starts", type=int, default=5, help="sequential starts per way of starting")
    args = ap.parse_args()
    n = args.trajectories or (1000 if args.full else 48)
    levels = args.concurrency or ([16, 64, 256] if args.full else [16])

    rows = asyncio.run(discover({"kv": KV}, startup_timeout_s=120))
    if rows[0]["status"] != "ok":
        raise SystemExit(f"kv failed: {rows[0]['reason']}")
    proc, base_url = start_model_server(args.delay)
    cpu_per_call = []
    try:
        print(f"{n} trajectories x {TURNS} model turns (3 kv calls on a fresh contained instance each),")
        print(f"model delay {args.delay * 1000:.0f} ms, {os.cpu_count()} cores")
        head = f"{'loop':<18}{'conc':>5}{'seconds':>9}{'x bound':>9}{'x model':>9}"
        print(head + f"{'start p50':>11}{'start p99':>11}{'peak MiB':>10}{'leaks':>7}")
        for c in levels:
            bound = n * TURNS * args.delay / c
            model_s, model_cpu = asyncio.run(model_only_run(rows, base_url, n, c))
            cpu_per_call.append((c, model_cpu / (n * TURNS)))
            print(f"{'model calls only':<18}{c:>5}{model_s:>9.2f}{model_s / bound:>9.2f}{1:>9.2f}")
            for label, warm in (("warm pool", c), ("no warm pool", 0)):
                r = asyncio.run(trajkit_run(rows, base_url, n, c, warm))
                print(
                    f"{label:<18}{c:>5}{r['elapsed']:>9.2f}{r['elapsed'] / bound:>9.2f}{r['elapsed'] / model_s:>9.2f}"
                    f"{r['p50'] * 1000:>9.0f}ms{r['p99'] * 1000:>9.0f}ms{r['peak_mb']:>10.0f}{r['leaks']:>7}"
                )
    finally:
        proc.terminate()

    print(f"\ninstance start (kv server, to its initialize answer), {args.starts} sequential starts each")
    print(f"{'way':<34}{'CPU-s/start':>12}{'s/start':>9}{'starts/s on all cores':>23}")
    for label, (cpu, secs) in (
        ("spawn, contained (trajkit)", spawn_starts(args.starts, contained=True)),
        ("spawn, bare", spawn_starts(args.starts, contained=False)),
        ("fork server, contained", fork_starts(args.starts)),
    ):
        print(f"{label:<34}{cpu:>12.3f}{secs:>9.3f}{os.cpu_count() / cpu:>23.1f}")

    print("\nclient CPU per model call on the HTTP path (model calls only loop, this process)")
    for c, cpu in cpu_per_call:
        print(f"  concurrency {c:>4}: {cpu * 1000:.2f} ms")


if __name__ == "__main__":
    main()
