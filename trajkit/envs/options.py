"""Config fields shared by the stages that run the agent loop, declared once.

``EpisodeOptions``: sampling and episode limits (``synth rollouts``, ``synth extend``,
``curate passk``, ``eval passk``). ``ServerPoolOptions`` adds how many server processes
the stage may keep (``synth rollouts``, ``synth extend``: see ``envs.env.ToolEnv``). A
stage overrides a field's default by declaring it again.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trajkit.concurrency import Share
from trajkit.config import StageConfig, Unhashed
from trajkit.envs.agent import AgentLimits
from trajkit.envs.config import ServersFile
from trajkit.envs.env import ToolEnv
from trajkit.models.base import SamplingParams


class EpisodeOptions(StageConfig):
    temperature: float = Field(1.0, ge=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(1024, ge=1, description="Per model call.")
    seed: int = Field(0, description="Seeds each episode (with its task and index).")
    max_turns: int = Field(8, ge=1, description="Model calls per episode.")
    max_context_tokens: int | None = Field(None, ge=1, description="Stop an episode (truncated) past this context.")
    tool_timeout_s: float = Field(
        30.0, gt=0, description="Per tool call (a server's own timeout in the servers file wins)."
    )
    max_tool_output_chars: int = Field(4000, ge=1, description="Tool output beyond this is cut, with a note.")
    servers_config: ServersFile[str | None] = Field(
        None, description="The mcpServers file, for env values and cwd of servers."
    )

    def sampling(self) -> SamplingParams:
        """One sample per request with this config's sampling fields."""
        return SamplingParams(
            n=1, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens, seed=self.seed
        )

    def limits(self) -> AgentLimits:
        return AgentLimits(self.max_turns, self.max_context_tokens, self.tool_timeout_s, self.max_tool_output_chars)


class ServerPoolOptions(EpisodeOptions):
    concurrency: Unhashed[int] = Field(8, ge=1, description="Episodes in flight.")
    max_processes: Unhashed[int | None] = Field(
        None,
        ge=1,
        description="Live server processes (default: 16 per CPU the shard has).",
    )
    pool_size: Unhashed[int | None] = Field(
        None,
        ge=1,
        description="Processes per stateless server, started as load needs them (default: one per CPU the shard has).",
    )
    flush_rows: Unhashed[int] = Field(64, ge=1, description="Rows per written shard.")

    def tool_env(self, servers: list[dict[str, Any]], share: Share) -> ToolEnv:
        """The stage's servers, with a warm instance started ahead of demand per episode in flight, sized
        from the stage's ``share``."""
        return ToolEnv(
            servers,
            config=self.servers_config,
            max_processes=self.max_processes,
            pool_size=self.pool_size,
            warm=self.concurrency,
            share=share,
        )
