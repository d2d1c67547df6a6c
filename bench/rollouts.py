"""Rollout benchmark: the agent loop at concurrency 1, 16 and 64 against the critical-path bound.

Each trajectory makes 3 tool calls (calculator ``add``, ``mcp-server-time``
``get_current_time``, calculator ``multiply``) and a final answer: 4 model
turns, answered by an OpenAI-compatible loopback server (in its own process)
after a fixed delay. The bound is ``trajectories x turns x delay / concurrency``.
Side by side: a sequential loop written directly on the bare ``mcp`` client and
``httpx`` (one trajectory at a time), the way one would without trajkit; and,
per concurrency, the same model turns through the same ``openai`` backend with
the tool results faked ("model calls only"): the ceiling the backend itself
sets, so the difference is what MCP sessions and the loop cost.
Goal: within 1.3x of the bound at concurrency 64.

Second table: ``call_tool`` round trips per second on the calculator server,
through trajkit's session layer (``ToolEnv`` episode -> pool -> ``Connection``)
against the bare ``mcp`` ``ClientSession``, one call in flight and 16 in flight.
Goal: overhead under 20%.

    python bench/rollouts.py [--trajectories 500] [--serial-trajectories 50] [--delay 0.2] [--calls 2000]

Concurrency 1 and the sequential loop run ``--serial-trajectories`` (their rate
does not depend on the count; 500 of them would take 400 s each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trajkit.envs.agent import AgentLimits, run_episode
from trajkit.envs.config import ServerConfig, child_environment, resolve_command
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.models import ModelSpec, make_backend
from trajkit.models.base import SamplingParams

TURNS = 4
SERVERS = {
    "calculator": ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.calculator"]),
    "time": ServerConfig(command="uvx", args=["mcp-server-time==2026.10.19", "--local-timezone", "UTC"]),
}
PLAN = [
    ("add", {"a": 2, "b": 3}),
    ("get_current_time", {"timezone": "UTC"}),
    ("multiply", {"a": 5, "b": 7}),
]


def script(messages, tools, body):
    """Scripted model: the k-th assistant turn makes the k-th planned call, then answers."""
    turn = sum(m["role"] == "assistant" for m in messages)
    if turn < len(PLAN):
        name, args = PLAN[turn]
        return {"tool_calls": [{"name": name, "arguments": args}]}
    return "The answer is 35."


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
    return {"task_id": f"bench-{i}", "question": "Compute (2 + 3) * 7 and tell the time.", "server_ids": server_ids}


# ---------------------------------------------------------------- trajkit
async def trajkit_run(rows, base_url: str, n: int, concurrency: int) -> tuple[float, int]:
    spec = ModelSpec(model="scripted", backend="openai", base_url=base_url, cache=False, max_concurrency=concurrency)
    backend = make_backend(spec)
    ids = [r["server_id"] for r in rows]
    sem = asyncio.Semaphore(concurrency)
    limits = AgentLimits(max_turns=TURNS + 2)
    async with ToolEnv(rows, config=SERVERS, pool_size=2, max_concurrency_per_server=64) as env:
        # warm the pools so process start-up is not part of the measurement
        async with env.episode(ids) as ep:
            await asyncio.gather(*(ep.call(s, tool, args) for s, (tool, args) in zip(["calculator", "time"], PLAN[:2])))

        async def one(i: int) -> dict:
            async with sem:
                return await run_episode(task(i, ids), backend, env, SamplingParams(max_tokens=64), limits)

        t0 = time.perf_counter()
        out = await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - t0
    await backend.aclose()
    bad = [r for r in out if r["status"] != "completed" or r["num_tool_calls"] != len(PLAN)]
    if bad:
        raise SystemExit(f"{len(bad)} trajectories did not complete: {bad[0]['reason']}")
    return elapsed, n


async def model_only_run(rows, base_url: str, n: int, concurrency: int) -> tuple[float, int]:
    """The same model turns through the same backend with tool results faked: the backend's own ceiling."""
    from trajkit.envs.agent import schema_message
    from trajkit.envs.tools import tool_schemas

    spec = ModelSpec(model="scripted", backend="openai", base_url=base_url, cache=False, max_concurrency=concurrency)
    backend = make_backend(spec)
    tools = tool_schemas(rows)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            messages = [{"role": "user", "content": task(i, [])["question"]}]
            for _ in range(TURNS):
                c = (await backend.generate(messages, tools, SamplingParams(max_tokens=64)))[0]
                messages.append(schema_message(c.message()))
                messages.extend(
                    {"role": "tool", "content": "1", "tool_call_id": t.id, "name": t.name} for t in c.tool_calls
                )

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - t0
    await backend.aclose()
    return elapsed, n


# ---------------------------------------------------------------- the peer: a plain sequential loop
async def sequential_run(rows, base_url: str, n: int) -> tuple[float, int]:
    """One trajectory at a time, with the bare mcp client and httpx: no trajkit."""
    import contextlib

    import httpx
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    tools, owner = [], {}
    for row in rows:
        for t in row["tools"]:
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t["description"],
                        "parameters": json.loads(t["input_schema"]),
                    },
                }
            )
            owner[t["name"]] = row["name"]
    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        for name, cfg in SERVERS.items():
            params = StdioServerParameters(
                command=resolve_command(cfg.command), args=cfg.args, env=child_environment(cfg)
            )
            read, write = await stack.enter_async_context(stdio_client(params))
            sessions[name] = await stack.enter_async_context(ClientSession(read, write))
            await sessions[name].initialize()
        client = await stack.enter_async_context(httpx.AsyncClient(base_url=base_url + "/", timeout=60))
        t0 = time.perf_counter()
        for i in range(n):
            messages = [{"role": "user", "content": task(i, [])["question"]}]
            while True:
                body = {"model": "scripted", "messages": messages, "tools": tools, "max_tokens": 64}
                msg = (await client.post("chat/completions", json=body)).json()["choices"][0]["message"]
                messages.append(msg)
                if not msg.get("tool_calls"):
                    break
                for call in msg["tool_calls"]:
                    fn = call["function"]
                    result = await sessions[owner[fn["name"]]].call_tool(fn["name"], json.loads(fn["arguments"]))
                    text = "\n".join(c.text for c in result.content if c.type == "text")
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        return time.perf_counter() - t0, n


# ---------------------------------------------------------------- call_tool round trips
async def bare_calls(calls: int, in_flight: int) -> float:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    cfg = SERVERS["calculator"]
    params = StdioServerParameters(command=cfg.command, args=cfg.args)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("add", {"a": 1, "b": 2})
        return await _timed(lambda i: session.call_tool("add", {"a": i, "b": 1}), calls, in_flight)


async def trajkit_calls(rows, calls: int, in_flight: int) -> float:
    calc = [r for r in rows if r["name"] == "calculator"]
    env = ToolEnv(calc, config=SERVERS, pool_size=1, max_concurrency_per_server=in_flight)
    async with env, env.episode() as ep:
        await ep.call("calculator", "add", {"a": 1, "b": 2})
        return await _timed(lambda i: ep.call("calculator", "add", {"a": i, "b": 1}), calls, in_flight)


async def _timed(make_call, calls: int, in_flight: int) -> float:
    sem = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with sem:
            await make_call(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(calls)))
    return calls / (time.perf_counter() - t0)


# ---------------------------------------------------------------- report
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=500)
    ap.add_argument("--serial-trajectories", type=int, default=50)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    args = ap.parse_args()

    rows = asyncio.run(discover(SERVERS, startup_timeout_s=120))
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        raise SystemExit(f"server {failed[0]['name']} failed: {failed[0]['reason']}")
    proc, base_url = start_model_server(args.delay)
    try:
        print(f"{TURNS} model turns and {len(PLAN)} tool calls per trajectory, model delay {args.delay * 1000:.0f} ms")
        print(f"{'loop':<22}{'conc':>5}{'trajs':>7}{'seconds':>9}{'traj/s':>9}{'bound s':>9}{'x bound':>9}")
        results = []
        for c in args.concurrency:
            n = args.serial_trajectories if c == 1 else args.trajectories
            elapsed, n = asyncio.run(trajkit_run(rows, base_url, n, c))
            results.append(("trajkit run_episode", c, n, elapsed))
            elapsed, n = asyncio.run(model_only_run(rows, base_url, n, c))
            results.append(("  model calls only", c, n, elapsed))
        elapsed, n = asyncio.run(sequential_run(rows, base_url, args.serial_trajectories))
        results.append(("sequential (bare mcp)", 1, n, elapsed))
        for label, c, n, elapsed in results:
            bound = n * TURNS * args.delay / c
            print(f"{label:<22}{c:>5}{n:>7}{elapsed:>9.2f}{n / elapsed:>9.2f}{bound:>9.2f}{elapsed / bound:>9.2f}")
    finally:
        proc.terminate()

    print(f"\ncall_tool round trips per second, calculator server, {args.calls} calls, best of 3 alternating runs")
    print(f"{'in flight':>9}{'bare mcp':>11}{'trajkit':>11}{'overhead':>10}")
    for in_flight in (1, 16):
        bare, ours = [], []
        for _ in range(3):
            bare.append(asyncio.run(bare_calls(args.calls, in_flight)))
            ours.append(asyncio.run(trajkit_calls(rows, args.calls, in_flight)))
        b, t = max(bare), max(ours)
        print(f"{in_flight:>9}{b:>11.0f}{t:>11.0f}{(b / t - 1) * 100:>9.1f}%")


if __name__ == "__main__":
    main()
