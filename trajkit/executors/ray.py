"""The Ray executor: a stage's shards as Ray tasks on an existing cluster or a local one.

Each shard is ``runner.run_stage`` with its rank, run in a Ray task on any
node; every node must see the run directory at the same path. A worker killed
mid-shard is retried by Ray (``max_retries``); the retry resumes the shard
the way a rerun does (content ids, temp files cleaned), so nothing is lost or
duplicated. A driver that dies takes its tasks with it: Ray ends the job of a
driver that exited and kills its workers; and should one still be writing
when the command is rerun, the rerun's shard takes the lease on it first
(``Store.leased``), which fences the old task off before any temporary file is
cleaned. Each shard asks for an even share of the cluster's CPUs, and its
sandbox and server pools size themselves from that share, not the node's count.
Each shard first checks that its node runs the driver's code version, before it
touches the run: no round of probe tasks delays the stage, and a node that joins
the cluster later, or gets other code meanwhile, is checked when it runs a shard.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajkit.errors import StageStopped, UserError

SHARD_RETRIES = 3


def _ray():
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs Ray: pip install 'trajkit[ray]'") from None
    return ray


def run_on_ray(
    root: Path,
    spec: Any,
    cfg: Any,
    name: str,
    fresh: bool,
    world_size: int,
    address: str | None = None,
    budget_tokens: int | None = None,
    budget_cost: float | None = None,
    redo_stale: bool = False,
    max_failed_calls: float = 0.5,
    reuse_cache: bool = False,
) -> dict[str, Any]:
    """Run the stage's ``world_size`` shards on Ray (a stale shard redone with ``redo_stale``, else refused); return ``{"stage", "world_size", "shards"}`` (their
    manifests, rank order) and, for a stage with a report, ``"summary"``: the report over every shard's rows.
    A ``fresh`` stage is dropped and its config pinned here, once, with the time before which its shards reuse
    no cached answer (unless ``reuse_cache``): the shards find it pinned and run as a resumed stage."""
    from trajkit.progress import SHARD_PROGRESS_S, console, display, read_shards
    from trajkit.redact import Redactor
    from trajkit.runner import StageContext, check_config, code_version, pin_config, say_warnings
    from trajkit.store import Store

    ray = _ray()
    store = Store(root, create=True)
    store.redactor = Redactor.for_stage(cfg)
    chash, _ = check_config(store, name, cfg, fresh, spec.kind)  # one-line config errors before anything starts
    if fresh:
        pin_config(store, name, spec.kind, cfg, chash, not reuse_cache, quiet=False)
    version = code_version()
    folder = store.stage_dir(name)
    with cluster(address), display(f"{name} ({world_size} shards)") as show, _progress_files(folder):
        shard = ray.remote(num_cpus=shard_cpus(ray, world_size), max_retries=SHARD_RETRIES)(_shard)
        pending = {
            shard.remote(
                str(store.root),
                spec,
                cfg,
                name,
                r,
                world_size,
                budget_tokens,
                budget_cost,
                version,
                (redo_stale, max_failed_calls),
            ): r
            for r in range(world_size)
        }
        manifests: dict[int, dict[str, Any]] = {}
        t0 = time.monotonic()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=SHARD_PROGRESS_S)
            show(*read_shards(folder, world_size))
            if not ready:
                continue
            rank = pending.pop(ready[0])
            try:
                manifests[rank] = ray.get(ready[0])
            except ray.exceptions.RayTaskError as e:
                for ref in pending:
                    ray.cancel(ref, force=True)
                cause = e.cause if isinstance(e.cause, Exception) else e
                raise cause from None
            rows = sum(v for k, v in manifests[rank]["counts"].items() if k.startswith("rows."))
            console().print(
                f"[dim]{name}[/]: shard {rank} done on {manifests[rank]['node']} "
                f"({len(manifests)}/{world_size} shards, {rows} rows, {time.monotonic() - t0:.1f}s)",
                highlight=False,
            )
            say_warnings(manifests[rank])
    result = {"stage": name, "world_size": world_size, "shards": [manifests[r] for r in range(world_size)]}
    if spec.report is not None:  # each shard's own summary saw only the rows written by its end
        result["summary"] = spec.report(StageContext(store, name, spec.kind, world_size=world_size, quiet=True), cfg)
    return result


def shard_cpus(ray, world_size: int) -> int:
    """CPUs each shard asks Ray for: an even share of the cluster's, at least 1 and at most a node's.
    Inside the task, sandbox and server pools size themselves from this share (``StageContext.share``)."""
    nodes = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]]
    return max(1, min(int(sum(nodes) // world_size), int(max(nodes, default=1))))


@contextlib.contextmanager
def cluster(address: str | None) -> Iterator[None]:
    """Connect to the cluster at ``address`` (or start a local one of its own on this machine's CPUs) unless connected;
    disconnect (and stop a local cluster) at the end."""
    ray = _ray()
    if ray.is_initialized():
        yield
        return
    # without an address, a cluster of its own: ray.init() alone joins any cluster already running here
    opts = {"address": address} if address else {"address": "local", "num_cpus": len(os.sched_getaffinity(0))}
    try:
        context = ray.init(**opts, include_dashboard=False, log_to_driver=False, configure_logging=False)
    except ConnectionError as e:
        raise UserError(f"cannot connect to the Ray cluster at {address}: {e}") from None
    try:
        yield
    finally:
        ray.shutdown(wait_for_processes=not address)
        if not address:
            remove_session(Path(context.address_info["session_dir"]))


@contextlib.contextmanager
def _progress_files(folder: Path) -> Iterator[None]:
    """The stage's shards' progress files: those an earlier run left removed first, these at the end."""

    def remove() -> None:
        for path in folder.glob("_progress-r*.json"):
            path.unlink(missing_ok=True)

    remove()
    try:
        yield
    finally:
        remove()


def remove_session(session: Path) -> None:
    """Delete the session folder (logs, sockets) of a cluster this run started and stopped, and the
    ``session_latest`` link where it still points there; other clusters' sessions are left alone."""
    shutil.rmtree(session, ignore_errors=True)
    latest = session.with_name("session_latest")
    if latest.is_symlink() and Path(os.readlink(latest)) == session:
        latest.unlink(missing_ok=True)


def _shard(root, spec, cfg, name, rank, world_size, budget_tokens, budget_cost, version, checks) -> dict[str, Any]:
    """One shard, inside a Ray worker: the same ``run_stage`` a hand-started rank runs (``checks``: its
    ``redo_stale`` and ``max_failed_calls``), on the CPUs Ray gave it,
    once this node is found to run the driver's code ``version``."""
    import ray

    from trajkit.progress import shard_file
    from trajkit.runner import code_version, run_stage
    from trajkit.store import Store

    node_id = ray.get_runtime_context().get_node_id()
    if code_version() != version:
        raise UserError(
            f"nodes run another trajkit version than this driver ({version}): "
            f"node {node_id[:8]} ({_address(ray, node_id)}) runs {code_version()}"
        )
    try:
        manifest = run_stage(
            Store(root),
            spec,
            cfg,
            name=name,
            rank=rank,
            world_size=world_size,
            quiet=True,
            budget_tokens=budget_tokens,
            budget_cost=budget_cost,
            progress_file=shard_file(Store(root).stage_dir(name), rank),
            cpus=int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)),
            redo_stale=checks[0],
            max_failed_calls=checks[1],
        )
    except (UserError, StageStopped) as e:  # say where: a node that cannot start the servers or sandbox
        raise type(e)(f"shard {rank} on node {node_id[:8]} ({_address(ray, node_id)}): {e}") from None
    return {**manifest, "node": node_id[:8]}


def _address(ray, node_id: str) -> str:
    return next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id), "?")
