"""Rollout benchmark: fresh contained server instances per trajectory, with and without the warm pool.

Each trajectory makes 3 tool calls on its own contained instance of a stateful server
and a final answer: 4 model turns, answered by an OpenAI-compatible loopback server (in
its own process) after a fixed delay. The server (``--server``) is the project's ``kv``
(Python: instances forked from its zygote, ``trajkit/envs/forks.py``; ``set`` a marker
unique to the trajectory, ``list_keys``, ``get`` the marker) or the npm
``@modelcontextprotocol/server-memory`` with its knowledge graph in a file on the host,
as its README configures it (node: instances spawned; ``create_entities`` with the
marker, ``read_graph``, ``open_nodes``; installed under ``~/.cache/trajkit/bench-node``
with npm on first use). The critical-path bound is
``trajectories x turns x delay / concurrency``; the "model calls only" loop makes the
same model turns through the same ``openai`` backend with the tool results faked: the
ceiling the HTTP path sets on this machine.

Per concurrency, with the warm pool (``ToolEnv(warm=concurrency)``, filled inside the
timed run) and without it (each trajectory starts its instance when it starts; kv with
``--spawned``: also spawned instead of forked): seconds, ratio to the bound and to
"model calls only", the instance start latency a trajectory sees (from taking an
instance to its ``initialize`` answer; p50, p99), peak memory (PSS) of the whole process
tree, cross-trajectory leaks (a trajectory that sees another's marker, or misses its
own; memory: the host's graph file must also be unchanged after the run), and
CPU-seconds per trajectory of this process (agent loop, HTTP, MCP client) and of the
servers (launchers, zygote, instances): on a loaded machine the wall-clock ratios vary
from run to run; these set the ceiling, cores / CPU-s per trajectory.

Second table: CPU-seconds per instance start through ``ToolEnv`` (to its ``initialize``
answer, then shut down; server side: launcher, zygote and instance; client side: this
process), forked from the zygote (kv; whose one import is not counted), spawned
contained (``contain.py`` launcher, then ``exec`` of the server) and spawned bare (no
containment); and the start rate the machine's cores allow.
Third: client CPU per model call on the HTTP path ("model calls only", this process).

    python bench/rollouts.py              # quick (make bench): 48 trajectories at concurrency 16
    python bench/rollouts.py --trajectories 256 --concurrency 16 64 --spawned   # docs/sandbox.md's numbers
    python bench/rollouts.py --full [--server memory]   # the issue's run: 1,000 trajectories at 16, 64 and 256
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from trajkit.envs import contain
from trajkit.envs.agent import AgentLimits, run_episode
from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.models import ModelSpec, make_backend
from trajkit.models.base import SamplingParams

TURNS = 4
KV = ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.kv"])
MEMORY_PACKAGE = "@modelcontextprotocol/server-memory"
NODE_DIR = Path.home() / ".cache" / "trajkit" / "bench-node"  # where --server memory installs it (npm)
HOST_GRAPH = {"type": "entity", "name": "host", "entityType": "marker", "observations": []}


def memory_server(state: Path) -> ServerConfig:
    """The npm memory server, its knowledge graph in ``state`` (a file on the host that no trajectory may change),
    installed under ``NODE_DIR`` on first use."""
    entry = NODE_DIR / "node_modules" / MEMORY_PACKAGE / "dist" / "index.js"
    if not entry.exists():
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund", MEMORY_PACKAGE], check=True
        )
    state.write_text(json.dumps(HOST_GRAPH) + "\n")
    return ServerConfig(command="node", args=[str(entry)], env={"MEMORY_FILE_PATH": str(state)})


def script(messages, tools, body):
    """Scripted model: store this trajectory's marker, read back what the server holds, fetch the marker, answer
    (``set``, ``list_keys``, ``get`` on kv; ``create_entities``, ``read_graph``, ``open_nodes`` on memory)."""
    marker = next(m for m in messages if m["role"] == "user")["content"].split()[-1]  # the system message is first
    turn = sum(m["role"] == "assistant" for m in messages)
    plan = [("set", {"key": marker, "value": "1"}), ("list_keys", {}), ("get", {"key": marker})]
    if "create_entities" in json.dumps(tools):
        entity = {"name": marker, "entityType": "marker", "observations": []}
        plan = [("create_entities", {"entities": [entity]}), ("read_graph", {}), ("open_nodes", {"names": [marker]})]
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


class Peak(threading.Thread):
    """The peak memory of this process and all its descendants (proportional set size: a page a forked instance
    shares with its zygote counts once, split between them), sampled every 0.5 s on a thread of its own, whose
    CPU (``cpu``, reading smaps is not cheap) is not the client's."""

    def __init__(self):
        super().__init__(daemon=True)
        self.mb, self.cpu = 0.0, 0.0
        self._done = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self._done.wait(0.5):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    pass
            self.mb = max(self.mb, total / 2**20)
        self.cpu = time.thread_time()

    def stop(self) -> None:
        self._done.set()
        self.join()


# ---------------------------------------------------------------- rollouts
async def trajkit_run(rows, cfg: ServerConfig, base_url: str, n: int, concurrency: int, warm: int, way: str) -> dict:
    backend = backend_for(base_url, concurrency)
    ids = [r["server_id"] for r in rows]
    sem = asyncio.Semaphore(concurrency)
    limits = AgentLimits(max_turns=TURNS + 2)
    waits: list[float] = []
    watchers: set[asyncio.Task] = set()
    peak = Peak()
    peak.start()
    async with contextlib.AsyncExitStack() as stack:
        config = stack.enter_context(started(way, rows[0]["name"], cfg))
        env = await stack.enter_async_context(ToolEnv(rows, config=config, max_processes=concurrency, warm=warm))
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

        t0, own0, servers0 = time.perf_counter(), time.process_time(), _children_cpu()
        out = await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - t0
        await asyncio.gather(*watchers, return_exceptions=True)
        zygote = _zygote_cpu(env)
    peak.stop()
    own, servers = time.process_time() - own0 - peak.cpu, _children_cpu() - servers0 + zygote
    await backend.aclose()
    bad = [r for r in out if r["status"] != "completed" or r["num_tool_calls"] != 3]
    if bad:
        raise SystemExit(f"{len(bad)} trajectories did not complete: {bad[0]['reason']}")
    leaks = sum(_leaked(r, i) for i, r in enumerate(out))
    if leaks:  # another's marker seen, or its own lost: the isolation failed, or the bench's own script did
        raise SystemExit(f"{leaks} of {n} trajectories saw another's marker or lost their own")
    waits.sort()
    return {
        "elapsed": elapsed,
        "p50": waits[len(waits) // 2],
        "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
        "peak_mb": peak.mb,
        "leaks": leaks,
        "cpu": (own / n, servers / n),
    }


def _leaked(row: dict, i: int) -> bool:
    """Whether the trajectory saw another's marker, or lost its own (kv: the keys are its marker alone; memory:
    the graph holds the host's entity and its marker, nothing else)."""
    tools = [m["content"] for m in row["messages"] if m["role"] == "tool"]
    seen = json.loads(tools[1])
    if isinstance(seen, list):  # kv's keys
        return seen != [f"m{i}"] or tools[2] != "1"
    return [e["name"] for e in seen["entities"]] != ["host", f"m{i}"] or f'"m{i}"' not in tools[2]


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
def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@contextlib.contextmanager
def started(way: str, name: str, cfg: ServerConfig):
    """The servers config whose instances are forked (trajkit's default for a Python server), spawned
    (``fork: false``), or spawned bare (not contained) inside the block."""
    saved = os.environ.get(contain.ENV_OFF)
    if way == "bare":
        os.environ[contain.ENV_OFF] = "1"
    try:
        yield {name: cfg.model_copy(update={"fork": way == "forked"})}
    finally:
        if way == "bare" and saved is None:
            del os.environ[contain.ENV_OFF]
        elif way == "bare":
            os.environ[contain.ENV_OFF] = saved


def _zygote_cpu(env: ToolEnv) -> float:
    """CPU so far of the zygote (0 for a server not forked), PID 1 of its namespace under the process this one
    started: their own and their reaped children's (the instances), read while they live (killed at the env's
    close, the zygote is never reaped by a waiting parent, and its time would be lost)."""
    fork = next(iter(env.forks.values()), None)
    if fork is None or fork.proc is None:
        return 0.0
    outside = psutil.Process(fork.proc.pid)
    times = [p.cpu_times() for p in [outside, *outside.children()]]
    return sum(t.user + t.system + t.children_user + t.children_system for t in times)


async def starts(rows, cfg: ServerConfig, n: int, way: str) -> tuple[float, float, float]:
    """(CPU-s per start of the server side, of this client, seconds per start) of n sequential instance starts
    (to initialize's answer, then shut down) through trajkit, after one that is not counted (the zygote's imports,
    paid once per run). ``way``: forked (trajkit's default for kv), spawned, or bare (not contained)."""
    with started(way, rows[0]["name"], cfg) as config:
        async with ToolEnv(rows, config=config) as env:
            for i in range(n + 1):
                if i == 1:
                    cpu0, own0, t0 = _children_cpu() + _zygote_cpu(env), time.process_time(), time.perf_counter()
                conn = env.instance(rows[0])
                await conn.open()
                await env.close_connection(conn)
            cpu = _children_cpu() + _zygote_cpu(env) - cpu0
            own, seconds = time.process_time() - own0, time.perf_counter() - t0
    return cpu / n, own / n, seconds / n


# ---------------------------------------------------------------- report
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="the issue's run: 1,000 trajectories at 16, 64 and 256")
    ap.add_argument("--server", choices=["kv", "memory"], default="kv", help="memory: the npm server (installs it)")
    ap.add_argument("--trajectories", type=int, default=None, help="default: 48 (1,000 with --full)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=None, help="default: 16 (16 64 256 with --full)")
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--starts", type=int, default=5, help="sequential starts per way of starting")
    ap.add_argument("--spawned", action="store_true", help="kv: also the rollouts with spawned instances (slow)")
    args = ap.parse_args()
    n = args.trajectories or (1000 if args.full else 48)
    levels = args.concurrency or ([16, 64, 256] if args.full else [16])

    with tempfile.TemporaryDirectory() as home:
        state = Path(home) / "memory.jsonl"
        cfg = KV if args.server == "kv" else memory_server(state)
        before = state.read_bytes() if args.server == "memory" else None
        report(args, n, levels, cfg)
        if before is not None:
            print(f"\nthe host's graph file {'unchanged' if state.read_bytes() == before else 'CHANGED'}")


def report(args: argparse.Namespace, n: int, levels: list[int], cfg: ServerConfig) -> None:
    rows = asyncio.run(discover({args.server: cfg}, startup_timeout_s=120))
    if rows[0]["status"] != "ok":
        raise SystemExit(f"{args.server} failed: {rows[0]['reason']}")
    forked = args.server == "kv"  # a Python server: forked from its zygote; node: spawned
    proc, base_url = start_model_server(args.delay)
    cpu_per_call = []
    try:
        print(f"{n} trajectories x {TURNS} model turns (3 {args.server} calls on a fresh contained instance each),")
        print(f"model delay {args.delay * 1000:.0f} ms, {os.cpu_count()} cores")
        head = f"{'loop':<18}{'conc':>5}{'seconds':>9}{'x bound':>9}{'x model':>9}"
        print(head + f"{'start p50':>11}{'start p99':>11}{'peak MiB':>10}{'leaks':>7}{'CPU-s/traj client+servers':>27}")
        for c in levels:
            bound = n * TURNS * args.delay / c
            model_s, model_cpu = asyncio.run(model_only_run(rows, base_url, n, c))
            cpu_per_call.append((c, model_cpu / (n * TURNS)))
            print(f"{'model calls only':<18}{c:>5}{model_s:>9.2f}{model_s / bound:>9.2f}{1:>9.2f}")
            way = "forked" if forked else "spawned"
            ways = [("warm pool", c, way), ("no warm pool", 0, way)]
            if forked and args.spawned:
                ways += [("spawned, warm pool", c, "spawned"), ("spawned, no pool", 0, "spawned")]
            for label, warm, way in ways:
                r = asyncio.run(trajkit_run(rows, cfg, base_url, n, c, warm, way))
                print(
                    f"{label:<18}{c:>5}{r['elapsed']:>9.2f}{r['elapsed'] / bound:>9.2f}{r['elapsed'] / model_s:>9.2f}"
                    f"{r['p50'] * 1000:>9.0f}ms{r['p99'] * 1000:>9.0f}ms{r['peak_mb']:>10.0f}{r['leaks']:>7}"
                    f"{r['cpu'][0]:>19.3f} + {r['cpu'][1]:.3f}"
                )
    finally:
        proc.terminate()

    print(f"\ninstance start ({args.server} server, to its initialize answer), {args.starts} sequential starts each")
    print(f"{'way':<30}{'server CPU-s':>13}{'client CPU-s':>13}{'s/start':>9}{'starts/s on all cores':>23}")
    ways = [("forked, contained (trajkit)", "forked")] if forked else []
    ways += [("spawned, contained" + ("" if forked else " (trajkit)"), "spawned"), ("spawned, bare", "bare")]
    for label, way in ways:
        cpu, own, secs = asyncio.run(starts(rows, cfg, args.starts, way))
        print(f"{label:<30}{cpu:>13.3f}{own:>13.3f}{secs:>9.3f}{os.cpu_count() / (cpu + own):>23.1f}")

    print("\nclient CPU per model call on the HTTP path (model calls only loop, this process)")
    for c, cpu in cpu_per_call:
        print(f"  concurrency {c:>4}: {cpu * 1000:.2f} ms")


if __name__ == "__main__":
    main()
