"""``synth.harvest``: start every configured MCP server, list its tools, write the ``servers`` table.

One row per entry of the ``mcpServers`` file (``server_id`` = content id of the
name, command, args, url and env variable names; never env values). A server
that fails to start, hangs on ``initialize`` or lists invalid tools is a row
with status ``failed`` and the reason; the others have status ``ok``. A rerun
skips servers already written (``--fresh`` harvests all again).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field

from trajkit.config import StageConfig
from trajkit.runner import StageContext, StageSpec


class HarvestConfig(StageConfig):
    servers: str = Field(description="The mcpServers JSON file (command/args/env for stdio; url/headers for HTTP).")
    startup_timeout_s: float = Field(
        60.0, gt=0, json_schema_extra={"hash": False}, description="Limit on spawning plus initialize, per server."
    )
    list_timeout_s: float = Field(
        30.0, gt=0, json_schema_extra={"hash": False}, description="Limit per tools/list page."
    )
    concurrency: int = Field(4, ge=1, json_schema_extra={"hash": False}, description="Servers harvested at once.")


def run_harvest(ctx: StageContext, cfg: HarvestConfig) -> dict[str, Any]:
    from trajkit.envs.config import load_servers_config
    from trajkit.envs.discovery import discover

    servers = load_servers_config(cfg.servers)
    done = ctx.done("servers")
    todo = {n: c for n, c in servers.items() if c.server_id(n) not in done and ctx.mine(c.server_id(n))}
    with ctx.progress(len(todo), "servers") as advance:
        rows = asyncio.run(
            discover(
                todo,
                concurrency=cfg.concurrency,
                startup_timeout_s=cfg.startup_timeout_s,
                list_timeout_s=cfg.list_timeout_s,
                on_row=lambda row: advance(1),
            )
        )
    for row in rows:
        ctx.write("servers", row)
        ctx.counts[f"status.{row['status']}"] += 1
        if row["status"] == "failed":
            ctx.log(f"server {row['name']!r} failed: {row['reason']}")
    return {
        "servers_ok": sum(r["status"] == "ok" for r in rows),
        "servers_failed": sum(r["status"] == "failed" for r in rows),
        "tools": sum(r["num_tools"] or 0 for r in rows),
    }


HARVEST = StageSpec(
    "synth.harvest",
    HarvestConfig,
    run_harvest,
    inputs=(),
    outputs=("servers",),
    help="Start each MCP server of an mcpServers file, list its tools, write the servers table.",
)
