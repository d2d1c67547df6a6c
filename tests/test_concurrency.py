"""StageContext.fan_out, the one way stages fan out: bounded, written in order of finishing, flushed
between items, and on a failure the work in flight is cancelled (its cleanup runs) before the error rises."""

from __future__ import annotations

import asyncio
import os

import pyarrow.parquet as pq
import pytest

from trajkit.runner import StageContext
from trajkit.store import Store


def row(i: int) -> dict:
    return {"reject_id": f"r{i}", "row_id": f"t{i}", "table_name": "tasks", "stage": "s", "reason": "x"}


def test_bounded_written_as_finished_and_flushed_between_items(tmp_path):
    ctx = StageContext(Store(tmp_path, create=True), "s", "toy", quiet=True)
    in_flight = peak = 0

    async def work(i: int) -> list[dict]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (i % 3))
        in_flight -= 1
        return [row(i), row(100 + i)]  # an item writes two rows: shards must end between items

    asyncio.run(
        ctx.fan_out(
            range(10),
            work,
            concurrency=3,
            unit="items",
            write=lambda _, rows: ctx.write("rejected", rows),
            flush=(3, ("rejected",)),
        )
    )
    ctx.flush()
    shards = ctx.store.shards("rejected")
    sizes = [pq.ParquetFile(p).metadata.num_rows for p in shards]
    assert peak == 3 and sum(sizes) == 20 and all(n % 2 == 0 for n in sizes) and len(shards) > 1


def test_a_failure_cancels_the_work_in_flight_and_propagates(tmp_path):
    ctx = StageContext(Store(tmp_path, create=True), "s", "toy", quiet=True)
    cleaned, started = [], []

    async def work(i: int) -> int:
        started.append(i)
        if i == 2:
            await asyncio.sleep(0.01)
            raise RuntimeError("boom")
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append(i)  # e.g. a server killed with its trajectory
        return i

    async def main() -> None:
        await asyncio.wait_for(ctx.fan_out(range(100), work, concurrency=4, unit="items", write=lambda *_: 0), 30)

    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(main())
    assert sorted(started) == [0, 1, 2, 3] and sorted(cleaned) == [0, 1, 3]


def test_stage_log_lines_show_server_and_model_text_literally(tmp_path, capsys):
    ctx = StageContext(Store(tmp_path, create=True), "s", "toy")
    ctx.log("server 'x' failed: [bold red]boom[/] [image 1]")
    assert "[bold red]boom[/] [image 1]" in capsys.readouterr().err


def test_until_stops_launching_and_cancels_the_rest(tmp_path):
    ctx = StageContext(Store(tmp_path, create=True), "s", "toy", quiet=True)
    written, cancelled_cleanup = [], []

    async def work(i: int) -> int:
        try:
            await asyncio.sleep(0 if i < 4 else 5)  # 0..3 finish at once; the rest would hang
        except asyncio.CancelledError:
            cancelled_cleanup.append(i)
            raise
        return i

    cancelled, unstarted = asyncio.run(
        ctx.fan_out(
            range(10),
            work,
            concurrency=6,
            unit="items",
            write=lambda i, _: written.append(i),
            until=lambda: len(written) >= 3,
        )
    )
    assert written == [0, 1, 2]  # finished together: written in the order they started
    assert cancelled == [3, 4, 5] and unstarted == [6, 7, 8, 9]
    assert {4, 5} <= set(cancelled_cleanup) <= {3, 4, 5}  # the cancelled ones ran their cleanup


def test_pools_size_from_the_cpus_the_executor_gave_the_shard(tmp_path):
    """Given a ``Share`` of n CPUs (a Ray task's, through the stage's context) the sandbox and the server bound
    size from n, not the machine; without one, from the machine."""
    from trajkit.concurrency import Share
    from trajkit.envs.env import SERVERS_PER_CPU, ToolEnv
    from trajkit.verify.sandbox import WORKERS_PER_CPU, Sandbox, SandboxUnavailable

    machine = len(os.sched_getaffinity(0))
    assert Share().cpus == machine
    assert Sandbox().workers == machine and ToolEnv([]).slots.total == SERVERS_PER_CPU * machine
    assert ToolEnv([]).pool_size == machine
    share = Share(machine + 3)  # not the machine's count, whatever the machine
    assert Sandbox(share=share).workers == share.cpus
    assert ToolEnv([], share=share).slots.total == SERVERS_PER_CPU * share.cpus
    assert ToolEnv([], share=share).pool_size == share.cpus
    with pytest.raises(SandboxUnavailable, match=f"1 to {WORKERS_PER_CPU * share.cpus} "):
        Sandbox(workers=WORKERS_PER_CPU * share.cpus + 1, share=share)


def test_a_stage_gets_the_cpus_its_executor_gave_it(tmp_path):
    """``run_stage(cpus=n)`` hands the stage a share of n CPUs (what its pools size from); the manifest records
    the CPUs."""
    from trajkit.config import StageConfig
    from trajkit.runner import StageSpec, run_stage
    from trajkit.store import Store

    seen = []
    spec = StageSpec("test.share", StageConfig, lambda ctx, cfg: seen.append(ctx.share))
    manifest = run_stage(Store(tmp_path / "run", create=True), spec, StageConfig(), cpus=3, quiet=True)
    assert manifest["cpus"] == 3 and seen[0].cpus == 3
