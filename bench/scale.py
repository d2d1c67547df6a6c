"""Scale-out benchmark: ``synth rollouts`` on the local executor and on Ray, side by side.

Rollouts against the kv server (stdio, one pooled process per shard) and a
loopback model endpoint answering after ``--delay`` seconds, served by
``--endpoints`` processes (``base_url`` is the list of them). Each trajectory:
a ``set``, a ``get`` and a final answer (3 model turns). The same stage runs

* locally: ``--world-size`` processes, ``trajkit synth rollouts --rank r`` each;
* on Ray: ``--executor ray --world-size W`` on a local cluster (``ray.init``).

Reported per executor: trajectories/s, the ratio of the wall time to the
critical-path bound (trajectories per shard x turns x delay / concurrency),
and the executor's overhead: wall time minus the slowest shard's own seconds
(from its manifest), per shard and as a share of a shard's time. Goal: Ray's
overhead under 5% of a shard's time at 1,000 trajectories per shard.

    python bench/scale.py [--per-shard 1000] [--world-size 2] [--delay 0.2] [--endpoints 2] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import discover
from trajkit.store import Store

TURNS = 3


def script(messages, tools, body):
    turn = sum(m["role"] == "assistant" for m in messages)
    key = messages[0]["content"].split()[-1]
    if turn == 0:
        return {"tool_calls": [{"name": "set", "arguments": {"key": key, "value": "v"}}]}
    if turn == 1:
        return {"tool_calls": [{"name": "get", "arguments": {"key": key}}]}
    return "Stored and read back."


def serve(delay: float, queue) -> None:
    from trajkit.models.scripted_server import ScriptedServer

    server = ScriptedServer(script, delay_s=delay).start()
    queue.put(server.base_url)
    while True:
        time.sleep(3600)


def endpoints(n: int, delay: float) -> tuple[list[mp.Process], list[str]]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=serve, args=(delay, queue), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs, [queue.get(timeout=60) for _ in procs]


def prepare(run: Path, trajectories: int) -> None:
    cfg = {"kv": ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.kv"])}
    servers = asyncio.run(discover(cfg))
    store = Store(run, create=True)
    store.write("servers", "harvest", servers)
    ids = [s["server_id"] for s in servers]
    tasks = [
        {
            "task_id": f"scale-{i:07d}",
            "source_id": str(i),
            "question": f"Store a value under the key k{i}",
            "mode": "imported",
            "server_ids": ids,
        }
        for i in range(trajectories)
    ]
    store.write("tasks", "import", tasks)


def config(run: Path, urls: list[str], concurrency: int) -> Path:
    path = run.parent / f"{run.name}.json"
    model = {"model": "scripted", "backend": "openai", "base_url": urls, "cache": False, "max_concurrency": concurrency}
    path.write_text(json.dumps({"model": model, "concurrency": concurrency, "pool_size": 2}))
    return path


def command(run: Path, cfg: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trajkit.cli", "synth", "rollouts", "--run", str(run), "--config", str(cfg), *extra]


def measure(run: Path, world: int, launch) -> dict:
    t0 = time.monotonic()
    launch()
    wall = time.monotonic() - t0
    store = Store(run)
    shards = [store.manifest("rollouts", r, world) for r in range(world)]
    slowest = max(m["seconds"] for m in shards)
    rows = sum(m["counts"].get("rows.trajectories", 0) for m in shards)
    return {"wall": wall, "rows": rows, "slowest": slowest, "overhead": wall - slowest}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-shard", type=int, default=1000)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--endpoints", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    world, n = args.world_size, args.per_shard * args.world_size
    procs, urls = endpoints(args.endpoints, args.delay)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("local", "ray"):
            run = Path(tmp) / name
            prepare(run, n)
            cfg = config(run, urls, args.concurrency)
            if name == "local":

                def launch(run=run, cfg=cfg):
                    shards = [
                        subprocess.Popen(command(run, cfg, "--rank", str(r), "--world-size", str(world)))
                        for r in range(world)
                    ]
                    assert all(p.wait() == 0 for p in shards)
            else:

                def launch(run=run, cfg=cfg):
                    subprocess.run(command(run, cfg, "--executor", "ray", "--world-size", str(world)), check=True)

            results[name] = measure(run, world, launch)
    for p in procs:
        p.kill()
    bound = args.per_shard * TURNS * args.delay / args.concurrency
    print(f"\n{n} trajectories, {world} shards, {args.endpoints} endpoints, {args.delay}s per model turn")
    print(f"{'executor':<8} {'traj/s':>8} {'wall s':>8} {'x bound':>8} {'overhead s':>11} {'% of shard':>11}")
    for name, r in results.items():
        print(
            f"{name:<8} {r['rows'] / r['wall']:>8.1f} {r['wall']:>8.1f} {r['slowest'] / bound:>8.2f} "
            f"{r['overhead']:>11.2f} {100 * r['overhead'] / r['slowest']:>10.1f}%"
        )


if __name__ == "__main__":
    main()
