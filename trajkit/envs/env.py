"""``ToolEnv``: the harvested servers of a run, with bounded sessions for many concurrent trajectories.

A stateful server gets one fresh process per trajectory (a clean state, no
residue between trajectories); a stateless one is shared through a bounded
pool. A server is stateless when every tool it lists is annotated
``readOnlyHint: true`` (the MCP way of saying a tool does not modify its
environment), unless the server's config says ``state: stateless|stateful`` or
``stateless={name: bool}`` says otherwise. A stateless server's shared processes see
the filesystem read-only (contained), so one that is not in fact stateless fails its
writes instead of carrying state from one trajectory to the next.

Start-up is kept off the critical path by a warm pool (``warm``): per stateful stdio
server, ``warm`` fresh instances are started ahead of demand; a trajectory takes a
never-used one (an initialized one first) and a replacement starts at once, so it
waits for a start only when the pool runs dry. An instance serves one trajectory,
and its end state is read from it before it is torn down. A contained Python server's
instances are forked from a zygote of its own (``forks.py``, about a tenth of a spawn's
CPU), killed with the env. Bounds:

* ``max_processes`` — live per-trajectory server processes, all servers
  together; a trajectory reserves the processes it needs at once (so two
  trajectories can never deadlock holding half of theirs); pools add
  ``pool_size`` processes per stateless server on top, started as load needs
  them. Both default to the CPUs the shard has (``share.cpus``: a Ray task's, not
  its node's): ``SERVERS_PER_CPU`` per CPU, and one pool process per CPU;
* ``max_concurrency_per_server`` — calls in flight on one server process
  (or HTTP session) at a time.

Server env values, HTTP headers and cwd come from ``config`` (the
``mcpServers`` file). Without it a server is rebuilt from its ``servers`` row,
which holds its command, args or url but only the *names* of the environment
variables it reads: a row with ``env_names`` then needs the file, and
building the env says so (a UserError, before anything starts), as it does for
a ``${VAR}`` of the config that is not set and for a stdio command this machine
does not have (a cluster node that cannot start the servers fails its shard). (Nor does a row record a stdio
``cwd`` or literal HTTP headers: pass the file for servers that have them.)
Use ``async with ToolEnv(...)``: every server is shut down on every exit path,
Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from trajkit.concurrency import Share
from trajkit.envs.config import (
    ServerConfig,
    check_command,
    check_environment,
    load_servers_config,
    server_state,
)
from trajkit.envs.forks import Zygote, python_entry
from trajkit.envs.session import Connection, ServerFault, ToolOutput
from trajkit.envs.structured import OutputCheck
from trajkit.envs.tools import ToolRoute, select_servers, tool_routes
from trajkit.errors import UserError
from trajkit.redact import REDACTED

SERVERS_PER_CPU = 16  # server processes mostly wait on their caller; memory, not CPU, bounds more


def row_config(row: dict[str, Any]) -> ServerConfig:
    """A server's config rebuilt from its ``servers`` row: command and args, or url.

    A row that names environment variables, or whose url or args held a secret
    (redacted when written), cannot be rebuilt: a UserError that asks for the mcpServers file.
    """
    if row.get("env_names"):
        raise UserError(
            f"server {row['name']!r} reads environment variables ({', '.join(row['env_names'])}) that the servers "
            "table does not hold (names only): pass its mcpServers file (servers_config / --servers-config)"
        )
    if any(REDACTED in part for part in [row.get("url") or "", *(row.get("args") or [])]):
        raise UserError(
            f"server {row['name']!r} has a secret in its url or args that the servers table does not hold: "
            "pass its mcpServers file (servers_config / --servers-config)"
        )
    volatile = list(row.get("volatile") or [])
    if row["transport"] == "http":
        return ServerConfig(url=row["url"], volatile=volatile)
    return ServerConfig(command=row["command"], args=list(row.get("args") or []), volatile=volatile)


class _Slots:
    """A counting bound with all-or-nothing reservation of several slots."""

    def __init__(self, total: int):
        self.total, self.free = total, total
        self._cond = asyncio.Condition()

    async def reserve(self, n: int) -> None:
        if n > self.total:
            raise ServerFault(f"a trajectory needs {n} server processes; max_processes is {self.total}")
        async with self._cond:
            await self._cond.wait_for(lambda: self.free >= n)
            self.free -= n

    async def release(self, n: int) -> None:
        async with self._cond:
            self.free += n
            self._cond.notify_all()


class Pool:
    """Up to ``size`` shared connections to one stateless server, started on demand, least-loaded first.

    A connection that faults (crash, hang, garbage) is retired and replaced on demand.
    """

    def __init__(self, env: ToolEnv, name: str, cfg: ServerConfig, size: int):
        self.env, self.name, self.cfg, self.size = env, name, cfg, size
        self.conns: list[Connection] = []

    def _pick(self) -> Connection:
        live = [c for c in self.conns if not c.dead]
        idle = [c for c in live if c.load == 0]
        if idle:
            return idle[0]
        if len(live) < self.size:
            conn = self.env._connection(self.name, self.cfg, shared=True)
            conn.start()
            self.conns.append(conn)
            return conn
        return min(live, key=lambda c: c.load)

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float, max_chars: int | None) -> ToolOutput:
        conn = self._pick()
        try:
            return await conn.call(tool, arguments, timeout_s, max_chars)
        except ServerFault:
            self.retire(conn)
            raise

    def retire(self, conn: Connection) -> None:
        if conn in self.conns:
            self.conns.remove(conn)
            self.env._close_later(conn)


class Warm:
    """Fresh, never-used instances of one stateful stdio server, started ahead of demand."""

    def __init__(self, env: ToolEnv, name: str, cfg: ServerConfig, size: int):
        self.env, self.name, self.cfg, self.size = env, name, cfg, size
        self.ready: list[Connection] = []

    def take(self) -> Connection:
        """An instance for one trajectory (an initialized one first, else the oldest starting one, else a
        new one: the pool ran dry); the pool is topped up at once."""
        for conn in [c for c in self.ready if c.dead]:
            self.ready.remove(conn)
            self.env._close_later(conn)
        up = next((c for c in self.ready if c.session is not None), self.ready[0] if self.ready else None)
        if up is not None:
            self.ready.remove(up)
        else:
            up = self._start()
        while len(self.ready) < self.size:
            self.ready.append(self._start())
        return up

    def _start(self) -> Connection:
        conn = self.env._connection(self.name, self.cfg)
        conn.start()
        return conn


class ToolEnv:
    """The servers of a run, ready to serve trajectories; an async context manager.

    ``servers``: ``servers`` table rows (failed rows are kept so a task using
    one fails with the harvest reason). ``config``: the ``mcpServers`` file or
    mapping, for env values, headers and cwd. ``stateless``: name -> bool
    overrides of the read-only rule and of the config's ``state``. ``warm``: fresh
    instances kept started per stateful stdio server (0: each trajectory starts its own;
    size it from the number of trajectories in flight). ``share``: the CPUs the bounds
    default from (a stage's ``StageContext.share``; by default the machine's).
    """

    def __init__(
        self,
        servers: list[dict[str, Any]],
        *,
        config: Mapping[str, ServerConfig] | str | Path | None = None,
        stateless: Mapping[str, bool] | None = None,
        max_processes: int | None = None,
        pool_size: int | None = None,
        max_concurrency_per_server: int = 8,
        startup_timeout_s: float = 60.0,
        warm: int = 0,
        share: Share | None = None,
    ):
        if isinstance(config, (str, Path)):
            config = load_servers_config(config)
        self.rows = list(servers)
        self.config = dict(config or {})
        for row in self.rows:  # every server that may start can start: a user error now, not a fault later
            if row["status"] == "ok":
                check_environment(row["name"], self.config_for(row))
                check_command(row["name"], self.config_for(row))
        self.stateless = {r["name"]: self._is_stateless(r, stateless or {}) for r in self.rows}
        cpus = (share or Share()).cpus
        self.pool_size = pool_size or cpus
        self.warm = warm
        self.max_concurrency_per_server = max_concurrency_per_server
        self.startup_timeout_s = startup_timeout_s
        self.slots = _Slots(max_processes or SERVERS_PER_CPU * cpus)
        self.pools: dict[str, Pool] = {}
        self.warm_pools: dict[str, Warm] = {}
        self.forks: dict[str, Zygote | None] = {}  # per stateful Python server: its zygote (forks.py)
        self.output_checks = {r["name"]: OutputCheck(_output_schemas(r)) for r in self.rows if _output_schemas(r)}
        self.live: set[Connection] = set()
        self._closers: set[asyncio.Task] = set()
        self._routes: dict[tuple[str, ...] | None, list[ToolRoute]] = {}
        self._closed = False

    def _is_stateless(self, row: dict[str, Any], override: Mapping[str, bool]) -> bool:
        if row["name"] in override:
            return override[row["name"]]
        cfg = self.config.get(row["name"])
        if cfg is None:  # as harvest decided it (rows of runs older than the column: stateful, the safe side)
            return row.get("state") == "stateless"
        return server_state(cfg, row.get("tools")) == "stateless"

    @classmethod
    async def from_config(cls, config: Mapping[str, ServerConfig] | str | Path, **kwargs: Any) -> ToolEnv:
        """Harvest the configured servers now (start, list tools, stop) and build an env from the rows."""
        from trajkit.envs.discovery import discover

        if isinstance(config, (str, Path)):
            config = load_servers_config(config)
        return cls(await discover(dict(config)), config=config, **kwargs)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------ what a task sees
    def routes(self, server_ids: list[str] | None = None) -> list[ToolRoute]:
        """The tools offered to a task (``tool_routes`` over this env's rows), computed once per server list."""
        key = None if server_ids is None else tuple(server_ids)
        if key not in self._routes:
            self._routes[key] = tool_routes(self.server_rows(server_ids))
        return self._routes[key]

    def server_rows(self, server_ids: list[str] | None = None) -> list[dict[str, Any]]:
        """The rows of the given servers (ids or names), in that order; None = every server harvested ok."""
        if server_ids is None:
            return [r for r in self.rows if r["status"] == "ok"]
        return select_servers(self.rows, server_ids)

    def config_for(self, row: dict[str, Any]) -> ServerConfig:
        return self.config.get(row["name"]) or row_config(row)

    def episode(self, server_ids: list[str] | None = None) -> Episode:
        """Sessions for one trajectory over the given servers (ids or names; None = all that are ok)."""
        return Episode(self, self.server_rows(server_ids))

    # ------------------------------------------------------------ connections
    def _connection(self, name: str, cfg: ServerConfig, shared: bool = False) -> Connection:
        if self._closed:
            raise ServerFault("the tool environment is closed")
        if not shared and name not in self.forks:
            self.forks[name] = Zygote(name, cfg) if python_entry(cfg) else None
        if name in self.output_checks:
            self.output_checks[name].start()
        conn = Connection(
            name,
            cfg,
            startup_timeout_s=self.startup_timeout_s,
            max_concurrency=self.max_concurrency_per_server,
            shared=shared,
            fork=None if shared else self.forks[name],
            output_check=self.output_checks.get(name),
        )
        self.live.add(conn)
        return conn

    def pool(self, row: dict[str, Any]) -> Pool:
        if row["name"] not in self.pools:
            self.pools[row["name"]] = Pool(self, row["name"], self.config_for(row), self.pool_size)
        return self.pools[row["name"]]

    def instance(self, row: dict[str, Any]) -> Connection:
        """A fresh, never-used instance of a stateful server for one trajectory (from the warm pool if any)."""
        cfg = self.config_for(row)
        if self.warm <= 0 or cfg.transport != "stdio":
            conn = self._connection(row["name"], cfg)
            conn.start()
            return conn
        if row["name"] not in self.warm_pools:
            self.warm_pools[row["name"]] = Warm(self, row["name"], cfg, self.warm)
        return self.warm_pools[row["name"]].take()

    async def close_connection(self, conn: Connection) -> None:
        try:
            await conn.aclose()
        finally:
            self.live.discard(conn)

    def _close_later(self, conn: Connection) -> None:
        task = asyncio.create_task(self.close_connection(conn))
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    async def aclose(self) -> None:
        """Shut down every server this env started (pools, stragglers), waiting for each to exit."""
        self._closed = True
        closing = [self.close_connection(c) for c in list(self.live)]
        await asyncio.shield(asyncio.gather(*closing, *self._closers, return_exceptions=True))
        for fork in self.forks.values():
            if fork is not None:
                fork.close()
        for check in self.output_checks.values():
            check.close()
        self.pools.clear()
        self.warm_pools.clear()


def _output_schemas(row: dict[str, Any]) -> dict[str, str]:
    """Each harvested tool's output schema (JSON text), where it declared one."""
    return {t["name"]: t["output_schema"] for t in row.get("tools") or [] if t.get("output_schema")}


class Episode:
    """The sessions of one trajectory: fresh processes for stateful servers (taken from the warm pool, or
    started at once, in the background, while the model thinks), the shared pool for stateless ones.
    ``async with`` it."""

    def __init__(self, env: ToolEnv, rows: list[dict[str, Any]]):
        self.env = env
        self.rows = {r["name"]: r for r in rows}
        self.ids = {r["server_id"]: r["name"] for r in rows}
        self.fresh: dict[str, Connection] = {}
        self._reserved = 0

    async def __aenter__(self) -> Self:
        failed = [r for r in self.rows.values() if r["status"] != "ok"]
        if failed:
            raise ServerFault(f"server {failed[0]['name']!r} failed at harvest: {failed[0]['reason']}")
        own = [r for r in self.rows.values() if not self.env.stateless[r["name"]]]
        needed = sum(r["transport"] == "stdio" for r in own)
        await self.env.slots.reserve(needed)
        self._reserved = needed
        try:
            for row in own:
                self.fresh[row["name"]] = self.env.instance(row)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            closing = [self.env.close_connection(c) for c in self.fresh.values()]
            await asyncio.shield(asyncio.gather(*closing, return_exceptions=True))
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self.env.slots.release(self._reserved))
            self._reserved = 0

    def server_name(self, server: str) -> str:
        """A server's name from its name or id; KeyError if the trajectory does not use it."""
        if server in self.rows:
            return server
        return self.ids[server]

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], timeout_s: float = 30.0, max_chars: int | None = None
    ) -> ToolOutput:
        """Call a tool on one of this trajectory's servers (name or id); ServerFault on a server failure."""
        name = self.server_name(server)
        if name in self.fresh:
            return await self.fresh[name].call(tool, arguments, timeout_s, max_chars)
        return await self.env.pool(self.rows[name]).call(tool, arguments, timeout_s, max_chars)
