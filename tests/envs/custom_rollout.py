"""A custom rollout function for the extension-point test: the documented signature, wrapping the loop."""

from __future__ import annotations

from trajkit.envs.agent import run_episode


async def rollout(task, backend, env, params, limits, **kw):
    """Run the standard loop with a fixed system prompt, and tag the row's reason."""
    kw["system_prompt"] = "You are a careful calculator."
    row = await run_episode(task, backend, env, params, limits, **kw)
    return row | {"reason": f"custom rollout ({row['status']})"}


def not_async(task, backend, env, params, limits, **kw):
    return {}
