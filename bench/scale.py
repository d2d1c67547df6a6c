"""Scale-out benchmark: ``synth rollouts`` on the local executor and on Ray clusters of 1 and 2 worker nodes.

Each trajectory: a ``set`` and a ``get`` on the project's ``kv`` server and a final
answer (3 model turns), the model a loopback OpenAI-compatible endpoint answering
after ``--delay`` seconds, served by ``--endpoints`` processes (``base_url`` is the
list of them). The same stage, ``--world-size`` shards of ``--per-shard``
trajectories, runs on

* ``local``: ``--world-size`` processes, ``trajkit synth rollouts --rank r`` each;
* ``ray-1``: ``--executor ray --address`` on a local cluster of a head node with no
  CPUs (the driver's) and one worker node with ``--world-size`` CPUs;
* ``ray-2``: the same with ``--world-size`` worker nodes of one CPU each,

``--repeats`` times, each repeat starting with the next executor of the three (the
machine is shared: rows side by side, medians over the repeats at the end, and the
spread between repeats is the noise). Each cluster is started before its run
and stopped after it; its start is a fixed cost, reported apart.

The kv server is declared ``state: stateless``: each shard shares a pool of
``pool_size`` kv processes instead of starting a fresh contained instance per
trajectory. Each trajectory uses its own key, so no state crosses trajectories, and
the shard's time is the model endpoint's and the client's, which is what the
executor's overhead is to be measured against (a fresh stateful instance costs
about 1 CPU-second to start, see ``bench/rollouts.py``: 1,000 of them would make
the shard 1,000 CPU-seconds of process starts on this machine, and any executor's
overhead invisible).

Reported per run:

* trajectories/s over the stage command's wall time;
* ``x bound``: the slowest shard's own time (``seconds`` in its manifest, measured
  inside the shard from its start to its last write) over the critical-path bound,
  trajectories per shard x turns x delay / concurrency;
* the executor's overhead: the command's wall time minus the slowest shard's own
  time (the driver's start and imports, connecting to the cluster, scheduling the
  tasks, the workers' start and imports, returning the manifests, disconnecting),
  in seconds and as a share of the shard's time; ``local`` pays its processes'
  start, imports and exit too;
* what Ray adds: a Ray run's overhead minus the ``local`` run's in the same repeat,
  in seconds and as a share of the Ray run's slowest shard. This is the figure the
  goal below speaks of: any executor starts a Python process, imports trajkit and
  the stage and exits, so that part of the total is not Ray's; the total is
  printed beside it. A Ray run's total is split into the driver's part (``driver s``:
  the command's wall time minus the time from the submission to the last shard's
  result, as the driver prints it, to 0.1 s) and the tasks' (``tasks s``: from the
  submission to the last result, minus the slowest shard's own time: the workers'
  start and imports, the shards' start skew, returning the manifests);
* CPU-seconds per trajectory on each node, over the trajectories its shards wrote:
  for ``local``, each rank's process and the servers it started (``wait4``); for a
  Ray worker node, its workers and the servers they started ("shard"), plus its
  raylet and agents ("Ray"), each process's own time read every ``SAMPLE_S``;
  the head's (cluster services and the driver) apart, per trajectory of the stage.
  The model endpoints' processes are not counted: on a cluster the model runs
  elsewhere.

Goal: Ray's overhead under 5% of a shard's time at 1,000 trajectories per shard (what
Ray adds, above), and the same CPU-seconds per trajectory on either executor.

    python bench/scale.py [--per-shard 1000] [--world-size 2] [--repeats 2] [--delay 0.2] [--endpoints 2]
        [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import discover
from trajkit.executors.ray import remove_session
from trajkit.store import Store

TURNS = 3
SAMPLE_S = 0.25
AGENTS = ("DashboardAgent", "RuntimeEnvAgent")  # a raylet's children that are not workers
DONE = re.compile(r"shard (\d+) done on (\w+) .*, ([\d.]+)s\)")  # the driver's line: shard, node, s since submit


def script(messages, tools, body):
    turn = sum(m["role"] == "assistant" for m in messages)
    key = next(m for m in messages if m["role"] == "user")["content"].split()[-1]  # the system message is first
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


def prepare(run: Path, trajectories: int, urls: list[str], concurrency: int) -> Path:
    """A run with the kv server harvested and the tasks imported; returns the stage's config file."""
    kv = ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.kv"], state="stateless")
    servers = asyncio.run(discover({"kv": kv}))
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
    path = run.parent / f"{run.name}.json"
    model = {"model": "scripted", "backend": "openai", "base_url": urls, "cache": False, "max_concurrency": concurrency}
    path.write_text(json.dumps({"model": model, "concurrency": concurrency, "pool_size": 2}))
    return path


def command(run: Path, cfg: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trajkit.cli", "synth", "rollouts", "--run", str(run), "--config", str(cfg), *extra]


def wait(proc: subprocess.Popen, stderr: str | None = None) -> float:
    """Wait for a child; its CPU-seconds and those of the children it waited for. ``stderr``: what was
    already read of its standard error."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(proc.args[:6])} ... exited {proc.returncode}: {(stderr or proc.stderr.read())[-2000:]}"
        )
    return usage.ru_utime + usage.ru_stime


def cpu(roots: list[int], seen: dict[tuple[int, float], tuple[str, float]]) -> None:
    """Record in ``seen`` the CPU-seconds of each live process in the trees at ``roots``, each labelled
    ``shard`` (a Ray worker and what it started) or ``ray`` (the node's own processes). Each process's own
    time only: a parent's time of the children it waited for would count them twice (their last reading
    is here), and a raylet does not wait for its workers at all (their time is read while they live)."""
    for root in roots:
        try:
            top = psutil.Process(root)
            tree = [(top, "ray")]
            for child in top.children():
                label = "ray" if any(a in " ".join(child.cmdline()) for a in AGENTS) else "shard"
                tree += [(child, label), *((c, label) for c in child.children(recursive=True))]
        except psutil.NoSuchProcess:
            continue
        for p, label in tree:
            try:
                t = p.cpu_times()
                seen[(p.pid, p.create_time())] = (label, t.user + t.system)
            except psutil.Error:
                continue


class Sampler(threading.Thread):
    """CPU-seconds of each node's process trees, read every ``SAMPLE_S`` until stopped: a process's last
    reading before it ended stands for it (at most ``SAMPLE_S`` of CPU missed per process)."""

    def __init__(self, roots: dict[str, list[int]]):
        super().__init__(daemon=True)
        self.roots, self.stop = roots, threading.Event()
        self.before = {name: {} for name in roots}
        for name, pids in roots.items():
            cpu(pids, self.before[name])
        self.seen = {name: dict(b) for name, b in self.before.items()}
        self.start()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            for name, pids in self.roots.items():
                cpu(pids, self.seen[name])

    def spent(self) -> dict[str, dict[str, float]]:
        """Per node, CPU-seconds since the start by label."""
        self.stop.set()
        self.join()
        out = {}
        for name in self.roots:
            out[name] = {"shard": 0.0, "ray": 0.0}
            for key, (label, seconds) in self.seen[name].items():
                out[name][label] += seconds - self.before[name].get(key, (label, 0.0))[1]
        return out


def shards(run: Path, world: int) -> list[dict]:
    store = Store(run)
    return [store.manifest("rollouts", r, world) for r in range(world)]


def run_local(run: Path, cfg: Path, world: int) -> dict:
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            command(run, cfg, "--rank", str(r), "--world-size", str(world)), stderr=subprocess.PIPE, text=True
        )
        for r in range(world)
    ]
    seconds = [wait(p) for p in procs]
    wall = time.monotonic() - t0
    manifests = shards(run, world)
    nodes = {f"rank {r}": (seconds[r], 0.0, m["counts"]["rows.trajectories"]) for r, m in enumerate(manifests)}
    return {"wall": wall, "manifests": manifests, "nodes": nodes, "head": None}


def run_ray(run: Path, cfg: Path, world: int, workers: int) -> dict:
    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    session = Path(cluster.head_node.get_session_dir_path())
    try:
        nodes = [cluster.add_node(num_cpus=world // workers) for _ in range(workers)]
        start = time.monotonic() - t0
        roots = {n.node_id[:8]: [p.process.pid for ps in n.all_processes.values() for p in ps] for n in nodes}
        head = [p.process.pid for ps in cluster.head_node.all_processes.values() for p in ps]
        sampler = Sampler({**roots, "head": head})
        t0 = time.monotonic()
        proc = subprocess.Popen(
            command(run, cfg, "--executor", "ray", "--address", cluster.address, "--world-size", str(world)),
            stderr=subprocess.PIPE,
            text=True,
        )
        out = list(proc.stderr)  # the driver's lines name each shard's node
        driver = wait(proc, "".join(out))
        wall = time.monotonic() - t0
        used = sampler.spent()
    finally:
        cluster.shutdown()
        remove_session(session)
    manifests = shards(run, world)
    done = [m for m in map(DONE.search, out) if m]
    placed = {int(m.group(1)): m.group(2) for m in done}
    rows = {name: 0 for name in roots}
    for r, m in enumerate(manifests):
        rows[placed[r]] += m["counts"]["rows.trajectories"]
    return {
        "wall": wall,
        "manifests": manifests,
        "nodes": {name: (used[name]["shard"], used[name]["ray"], rows[name]) for name in roots},
        "head": used["head"]["ray"] + driver,
        "start": start,
        "last": max(float(m.group(3)) for m in done),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-shard", type=int, default=1000)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--endpoints", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # loopback cluster: no token, whatever ~/.ray holds
    world, n = args.world_size, args.per_shard * args.world_size
    procs, urls = endpoints(args.endpoints, args.delay)
    bound = args.per_shard * TURNS * args.delay / args.concurrency
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        executors = [
            ("local", run_local),
            ("ray-1", lambda run, cfg, world: run_ray(run, cfg, world, 1)),
            ("ray-2", lambda run, cfg, world: run_ray(run, cfg, world, world)),
        ]
        for rep in range(args.repeats):
            for name, launch in executors[rep % 3 :] + executors[: rep % 3]:  # each repeat starts with the next
                run = Path(tmp) / f"{name}-{rep}"
                cfg = prepare(run, n, urls, args.concurrency)
                results.append((rep, name, launch(run, cfg, world)))
                print(f"{name} repeat {rep}: {results[-1][2]['wall']:.1f} s", file=sys.stderr, flush=True)
    for p in procs:
        p.kill()
    print(
        f"\n{n} trajectories, {world} shards of {args.per_shard}, {args.endpoints} endpoints, "
        f"{args.delay}s per model turn, concurrency {args.concurrency} per shard; bound {bound:.1f} s per shard"
    )
    print(
        f"{'executor':<8} {'traj/s':>7} {'wall s':>7} {'shard s':>8} {'x bound':>8} {'overhead s':>11} "
        f"{'% of shard':>10} {'Ray adds s':>11} {'% of shard':>10} {'driver s':>9} {'tasks s':>8} {'start s':>8}  "
        "CPU-s per trajectory, per node: shard+Ray (head)"
    )
    local = {rep: r["wall"] - slowest(r) for rep, name, r in results if name == "local"}
    for rep, name, r in results:
        rows = sum(m["counts"]["rows.trajectories"] for m in r["manifests"])
        assert rows == n, (name, rows)
        shard = slowest(r)
        overhead = r["wall"] - shard
        added = f"{'-':>11} {'-':>10} {'-':>9} {'-':>8}"
        if name != "local":  # the process start, imports and exit any executor pays are in local's overhead
            added = f"{overhead - local[rep]:>11.2f} {100 * (overhead - local[rep]) / shard:>9.1f}%"
            added += f" {r['wall'] - r['last']:>9.2f} {r['last'] - shard:>8.2f}"
        per_node = " ".join(f"{c / max(k, 1):.4f}+{d / max(k, 1):.4f}" for c, d, k in r["nodes"].values())
        head = "" if r["head"] is None else f" ({r['head'] / n:.4f})"
        start = f"{r['start']:.1f}" if "start" in r else "-"
        print(
            f"{name:<8} {n / r['wall']:>7.1f} {r['wall']:>7.1f} {shard:>8.1f} {shard / bound:>8.2f} "
            f"{overhead:>11.2f} {100 * overhead / shard:>9.1f}% {added} {start:>8}  {per_node}{head}"
        )
    summary(results, local)


def summary(results: list, local: dict[int, float]) -> None:
    """Medians over the repeats: each Ray run's overhead and what it adds over local's, as shares of its shard, and
    shards' CPU-seconds (their processes and the servers they started; Ray's own are in the table) over local's in
    the same repeat, both over the same trajectories."""
    cpu = {(rep, name): sum(c for c, _, _ in r["nodes"].values()) for rep, name, r in results}
    print(f"\nmedians over {len({rep for rep, _, _ in results})} repeats:")
    for executor in sorted({name for _, name, _ in results} - {"local"}):
        runs = [(rep, r) for rep, name, r in results if name == executor]
        total = [(r["wall"] - slowest(r)) / slowest(r) for _, r in runs]
        added = [(r["wall"] - slowest(r) - local[rep]) / slowest(r) for rep, r in runs]
        ratio = [cpu[rep, executor] / cpu[rep, "local"] for rep, _ in runs]
        print(
            f"{executor}: Ray adds {100 * statistics.median(added):.1f}% of a shard "
            f"(runs: {', '.join(f'{100 * a:.1f}' for a in added)}), overhead in all "
            f"{100 * statistics.median(total):.1f}% (runs: {', '.join(f'{100 * t:.1f}' for t in total)}); "
            f"shards' CPU-s per trajectory {statistics.median(ratio):.2f}x local's (runs: {', '.join(f'{x:.2f}' for x in ratio)})"
        )


def slowest(r: dict) -> float:
    """The slowest shard's own time (``seconds`` in its manifest)."""
    return max(m["seconds"] for m in r["manifests"])


if __name__ == "__main__":
    main()
