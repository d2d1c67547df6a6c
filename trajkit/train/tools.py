"""MCP tools in GRPO: real servers behind TRL's ``environment_factory``.

For each set of servers the tasks use, ``environment_factories`` builds an
environment class whose public methods are the servers' tools, named and
described exactly as ``trajkit.envs.tools.tool_schemas`` renders them for
synthesis. TRL creates one instance per rollout and calls ``reset`` before it:
``reset`` opens a new ``trajkit.envs`` episode, so a stateful server gets a fresh
process per rollout and a stateless one is shared through the env's pool. Tool
output comes back as text and TRL masks its tokens from the loss.

TRL renders a tool from a Python callable through its signature and docstring,
which cannot express an arbitrary MCP input schema, and lists methods by name.
Each tool method carries its rendered schema and its position, and
``bind_tool_schemas`` makes the tokenizer use both, so the tool block TRL
renders is byte for byte the one synthesis rendered.

Sessions live on one background event loop (the MCP SDK's transports are
async); tool methods are synchronous for TRL and wait on that loop.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trajkit.concurrency import Share
from trajkit.envs.agent import AgentLimits, outcome_probes
from trajkit.envs.env import Episode, ToolEnv
from trajkit.envs.session import ServerFault
from trajkit.envs.solve import ALL_SERVERS, NO_TOOLS
from trajkit.envs.tools import ToolRoute
from trajkit.errors import UserError
from trajkit.store import Store

SCHEMA_ATTR = "__trajkit_tool_schema__"
ORDER_ATTR = "__trajkit_tool_order__"
RESERVED = ("reset", "get_reward")


class _Loop:
    """One event loop on a daemon thread, owning the ToolEnv and every episode."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="trajkit-mcp", daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


class ToolSessions:
    """The run's harvested servers on a background loop; episodes for TRL's environments."""

    def __init__(self, servers: list[dict[str, Any]], **env_kwargs: Any):
        self._loop = _Loop()
        try:
            self.env: ToolEnv = self._loop.run(self._make(servers, env_kwargs))
        except BaseException:  # e.g. a server that needs its mcpServers file: no loop left behind
            self._loop.stop()
            raise
        atexit.register(self.close)

    @staticmethod
    async def _make(servers: list[dict[str, Any]], env_kwargs: dict[str, Any]) -> ToolEnv:
        return ToolEnv(servers, **env_kwargs)

    def open_episode(self, server_ids: list[str] | None) -> Episode:
        episode = self.env.episode(server_ids)
        return self._loop.run(episode.__aenter__())

    def close_episode(self, episode: Episode) -> None:
        self._loop.run(episode.__aexit__(None, None, None))

    def call(
        self,
        episode: Episode,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        timeout_s: float,
        max_chars: int | None,
    ) -> Any:
        """A ``ToolOutput``; raises ServerFault when the server fails."""
        return self._loop.run(episode.call(server, tool, arguments, timeout_s, max_chars))

    def close(self) -> None:
        if self._loop.loop.is_running():
            self._loop.run(self.env.aclose())
            self._loop.stop()


class McpEnvironment:
    """Base of the generated environments: one episode (server sessions) per rollout."""

    sessions: ToolSessions
    server_ids: list[str] | None
    timeout_s: float = AgentLimits.tool_timeout_s
    max_chars: int | None = AgentLimits.max_tool_output_chars

    def __init__(self) -> None:
        self._episode: Episode | None = None

    def reset(self, **row: Any) -> None:
        """Start the next rollout on fresh sessions (a new process for each stateful server)."""
        self._close()
        self._episode = self.sessions.open_episode(self.server_ids)

    def _call(self, route: ToolRoute, arguments: dict[str, Any]) -> str:
        if self._episode is None:
            self.reset()
        try:
            out = self.sessions.call(
                self._episode, route.server_id, route.tool, arguments, self.timeout_s, self.max_chars
            )
        except ServerFault as e:
            raise RuntimeError(f"server {route.server!r} failed: {e}") from None
        return out.text

    def _end_state(self, probes: list[dict[str, Any]]) -> list[str | None]:
        """The outputs of the outcome-check probes on this rollout's sessions (None for a failed probe)."""
        if self._episode is None:
            return [None] * len(probes)
        out: list[str | None] = []
        for p in probes:
            try:
                result = self.sessions.call(
                    self._episode, p["server"], p["tool"], p.get("arguments") or {}, self.timeout_s, None
                )
                out.append(None if result.is_error else result.text)
            except (ServerFault, KeyError):
                out.append(None)
        return out

    def _close(self) -> None:
        if self._episode is not None:
            episode, self._episode = self._episode, None
            self.sessions.close_episode(episode)


def end_state(environment: Any, verifier: dict[str, Any]) -> list[str | None] | None:
    """The end state a ``tool_outcome`` verifier reads, probed on the environment's live sessions."""
    probes = outcome_probes({"verifier": verifier})
    if not probes or not isinstance(environment, McpEnvironment):
        return None
    return environment._end_state(probes)


def close_environment(environment: Any) -> None:
    """End an environment's current episode (its fresh server processes exit)."""
    if isinstance(environment, McpEnvironment):
        environment._close()


def _tool_method(route: ToolRoute, order: int) -> Callable[..., str]:
    def tool(self: McpEnvironment, **arguments: Any) -> str:
        return self._call(route, arguments)

    tool.__name__ = tool.__qualname__ = route.name
    tool.__doc__ = route.description or route.name
    setattr(tool, SCHEMA_ATTR, route.schema)
    setattr(tool, ORDER_ATTR, order)
    return tool


def environment_class(
    name: str, sessions: ToolSessions, server_ids: list[str] | None, **settings: Any
) -> type[McpEnvironment]:
    """An ``McpEnvironment`` subclass whose public methods are the tools of ``server_ids``."""
    routes = sessions.env.routes(server_ids)
    clash = [r.name for r in routes if r.name in RESERVED or r.name.startswith("_")]
    if clash:
        raise UserError(f"tool name(s) {', '.join(clash)} of {name} cannot be offered through TRL's environments")
    body: dict[str, Any] = {r.name: _tool_method(r, i) for i, r in enumerate(routes)}
    body.update(sessions=sessions, server_ids=server_ids, **settings)
    return type(f"Mcp_{name.replace('+', '_')}", (McpEnvironment,), body)


class _NoTools:
    """The environment of tasks that offer no tools (TRL routes every example to an environment)."""

    def reset(self, **row: Any) -> None:
        return None


@dataclass
class Tools:
    """What a GRPO stage needs for tools: TRL's factories, the schemas per environment, the sessions, and
    every environment the factories made (so ``close`` ends them without reading the trainer's internals)."""

    factories: dict[str, Callable[[], Any]]
    schemas: dict[str, list[dict]]
    sessions: ToolSessions
    instances: list[Any] = field(default_factory=list)

    def recording(self, cls: Callable[[], Any]) -> Callable[[], Any]:
        """A factory that makes ``cls()`` and remembers it (TRL looks at the instance's type, not the factory's)."""

        def make() -> Any:
            environment = cls()
            self.instances.append(environment)
            return environment

        return make

    def close(self) -> None:
        """End every environment's episode, then stop every server."""
        for environment in self.instances:
            close_environment(environment)
        self.instances.clear()
        self.sessions.close()


def environment_factories(
    store: Store,
    names: set[str],
    tokenizer: Any,
    config: str | None = None,
    share: Share | None = None,
    **settings: Any,
) -> Tools:
    """TRL's ``environment_factory`` mapping, with the tool schemas of each environment.

    ``names`` are ``trajkit.envs.solve.environment_name`` values (server ids joined
    by ``+``); ``config`` the mcpServers file (env values, headers, cwd) for the
    run's servers; ``share`` the stage's, which sizes the server pools. Binds the
    schemas onto ``tokenizer`` (see ``bind_tool_schemas``).
    """
    servers = store.rows("servers")
    if not servers:
        raise UserError(f"tasks use MCP servers but {store.root} has no servers table (run synth.harvest)")
    sessions = ToolSessions(servers, config=config, share=share)
    tools = Tools({}, {}, sessions)
    try:
        for name in sorted(names):
            if name == NO_TOOLS:
                tools.factories[name], tools.schemas[name] = tools.recording(_NoTools), []
                continue
            ids = None if name == ALL_SERVERS else name.split("+")
            try:
                cls = environment_class(name, sessions, ids, **settings)
            except KeyError as e:
                raise UserError(f"tasks use a server missing from the servers table: {e.args[0]}") from None
            tools.factories[name] = tools.recording(cls)
            tools.schemas[name] = [r.schema for r in sessions.env.routes(ids)]
    except BaseException:
        tools.close()
        raise
    bind_tool_schemas(tokenizer)
    return tools


def schemas_of(tools: list) -> list:
    """Tools as ``apply_chat_template`` should see them: a generated tool method becomes its rendered schema.

    TRL lists an environment's methods by name; when every tool is a generated
    method they are put back in the order synthesis rendered them.
    """
    if tools and all(hasattr(t, ORDER_ATTR) for t in tools):
        tools = sorted(tools, key=lambda t: getattr(t, ORDER_ATTR))
    return [getattr(t, SCHEMA_ATTR, t) for t in tools]


def bind_tool_schemas(tokenizer: Any) -> Any:
    """Make ``apply_chat_template`` and ``parse_response`` of this tokenizer read a tool method's own schema.

    Only this tokenizer instance changes; tools without a carried schema pass through.
    """
    if getattr(tokenizer, "_trajkit_tools_bound", False):
        return tokenizer
    cls = type(tokenizer)

    def with_schemas(method: Callable) -> Callable:
        @functools.wraps(method)
        def call(self: Any, *args: Any, tools: list | None = None, **kwargs: Any) -> Any:
            if tools is not None:
                tools = schemas_of(list(tools))
            return method(self, *args, tools=tools, **kwargs)

        return call

    tokenizer.apply_chat_template = types.MethodType(with_schemas(cls.apply_chat_template), tokenizer)
    tokenizer.parse_response = types.MethodType(with_schemas(cls.parse_response), tokenizer)
    tokenizer._trajkit_tools_bound = True
    return tokenizer
