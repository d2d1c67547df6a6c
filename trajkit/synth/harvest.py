"""``synth.harvest``: start every configured MCP server, list what it declares, write the ``servers`` table.

One row per entry of the ``mcpServers`` file (``server_id`` = content id of the
name, command, args, url and env variable names; never env values), written as
each server is done. A server that fails to start, hangs on ``initialize`` or
lists invalid tools is a row with status ``failed`` and the reason; the others
have status ``ok``. When no server could be reached at all (every one an HTTP
server refusing connections, an unknown host), the stage ends with one line
naming the URL, exit 2. Every ``${VAR}`` of the file's env and headers is read
before any server starts: a missing one is a user error (exit 2).

A rerun skips servers already written (``--fresh`` harvests all again), except
transient failures — a server whose start or listing timed out, or that could
not be reached (``envs.agent.is_transient``): the next run of the stage (a resume) drops this
rank's rows of those and harvests them again, as every stage retries its
transient failures.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr

from trajkit.config import StageConfig, Unhashed
from trajkit.envs.config import ServersFile
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec


class HarvestConfig(StageConfig):
    servers: ServersFile[str] = Field(
        description="The servers JSON file as Claude Desktop, Cursor, VS Code (mcp.json) or Cline write it."
    )
    inputs: Unhashed[dict[str, SecretStr]] = Field(
        default_factory=dict,
        description="Values of VS Code ${input:ID} (else the environment variable ID in capitals, '-' as '_').",
    )
    startup_timeout_s: Unhashed[float] = Field(60.0, gt=0, description="Limit on spawning plus initialize, per server.")
    list_timeout_s: Unhashed[float] = Field(30.0, gt=0, description="Limit per tools/list page.")
    concurrency: Unhashed[int] = Field(4, ge=1, description="Servers harvested at once.")


def retry_timed_out(ctx: StageContext, _: HarvestConfig) -> int:
    """Drop this rank's rows of servers whose harvest timed out, so they are harvested again."""
    from trajkit.envs.agent import is_transient

    data = ctx.store.read("servers", ["server_id", "status", "reason_code"], stage=ctx.name).to_pylist()
    again = {
        r["server_id"]
        for r in data
        if r["status"] == "failed" and is_transient(r["reason_code"]) and ctx.mine(r["server_id"])
    }
    ctx.store.drop_rows("servers", ctx.name, again)
    return len(again)


async def run_harvest(ctx: StageContext, cfg: HarvestConfig) -> dict[str, Any]:
    from trajkit.envs.agent import none_reached
    from trajkit.envs.config import check_environment, load_servers_config
    from trajkit.envs.discovery import discover

    servers = load_servers_config(cfg.servers, {k: v.get_secret_value() for k, v in cfg.inputs.items()})
    for name, server in servers.items():
        check_environment(name, server)
    todo = dict(ctx.todo(servers.items(), "servers", key=lambda server: server[1].server_id(server[0])))
    with ctx.progress(len(todo), "servers") as advance:

        def write(row: dict[str, Any]) -> None:
            ctx.write("servers", row)
            ctx.flush()  # a server is slow to harvest: keep each one as it is done
            if row["status"] == "failed":
                ctx.log(f"server {row['name']!r} failed: {row['reason']}")
            for note in row.get("notes") or []:
                ctx.log(f"server {row['name']!r}: {note}")
            advance(1)

        rows = await discover(
            todo,
            concurrency=cfg.concurrency,
            startup_timeout_s=cfg.startup_timeout_s,
            list_timeout_s=cfg.list_timeout_s,
            on_row=write,
        )
    if none_reached([r.get("reason_code") for r in rows]):
        first = rows[0]
        raise UserError(
            f"no server could be reached ({len(rows)} tried): {first['name']!r}: {first['reason']}; "
            "start it or correct its url, then rerun"
        )
    import pyarrow.parquet as pq

    shards = ctx.store.shards("servers", ctx.name, rank=ctx.rank)
    rows = [r for p in shards for r in pq.read_table(p, columns=["status", "num_tools"]).to_pylist()]
    return {
        "servers_ok": sum(r["status"] == "ok" for r in rows),
        "servers_failed": sum(r["status"] == "failed" for r in rows),
        "tools": sum(r["num_tools"] or 0 for r in rows),
    }


HARVEST = StageSpec(
    "synth.harvest",
    HarvestConfig,
    run_harvest,
    retry=retry_timed_out,
    inputs=(),
    outputs=("servers",),
    help="Start each MCP server of an mcpServers file, list its tools, and write the `servers` table (failed servers with a reason).",
)
