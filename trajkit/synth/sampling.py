"""Which servers and tools a task-generation request is about.

Servers are drawn uniformly, by a power law over their rank by weight (a few
popular servers often, a long tail rarely, as in Toucan), or from a given list.
Every draw uses its own ``random.Random`` seeded by the request's inputs, so a
request's servers do not depend on how many requests come before it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from trajkit.errors import UserError


@dataclass(frozen=True)
class Draw:
    """The servers (rows of the ``servers`` table) and the tool names one request targets."""

    servers: tuple[dict[str, Any], ...]
    tools: tuple[tuple[str, str], ...]  # (server name, tool name)


def usable_servers(rows: list[dict[str, Any]], only: list[str] | None = None) -> list[dict[str, Any]]:
    """Harvested servers with status ok and at least one tool, optionally limited to names or ids."""
    ok = [r for r in rows if r["status"] == "ok" and r.get("tools")]
    if only:
        known = {r["name"] for r in ok} | {r["server_id"] for r in ok}
        missing = [s for s in only if s not in known]
        if missing:
            raise UserError(f"servers not harvested (or failed, or without tools): {', '.join(missing)}")
        ok = [r for r in ok if r["name"] in only or r["server_id"] in only]
    return sorted(ok, key=lambda r: r["server_id"])


def server_weights(
    servers: list[dict[str, Any]], strategy: str, alpha: float, weights: dict[str, float] | None
) -> list[float]:
    """Selection weights: equal (uniform, list), or 1/rank**alpha by weight (power_law).

    A server's weight is ``weights[name or id]`` when given, else its number of tools.
    """
    if strategy != "power_law":
        return [1.0] * len(servers)
    given = weights or {}

    def weight(r: dict[str, Any]) -> float:
        return float(given.get(r["name"], given.get(r["server_id"], len(r.get("tools") or []))))

    order = sorted(range(len(servers)), key=lambda i: (-weight(servers[i]), servers[i]["server_id"]))
    out = [0.0] * len(servers)
    for rank, i in enumerate(order, start=1):
        out[i] = 1.0 / rank**alpha
    return out


def draw(
    mode: str,
    servers: list[dict[str, Any]],
    weights: list[float],
    rng: random.Random,
    tools_per_task: tuple[int, int],
    servers_per_task: int,
) -> Draw | None:
    """One request's servers and target tools, or None when no server can serve ``mode``."""
    if mode == "multi_server":
        if len(servers) < 2:
            return None
        picked = _weighted_sample(servers, weights, min(servers_per_task, len(servers)), rng)
        n_tools = max(rng.randint(*tools_per_task), len(picked))
        tools = [(s["name"], rng.choice(s["tools"])["name"]) for s in picked]  # one from each server
        pool = [(s["name"], t["name"]) for s in picked for t in s["tools"] if (s["name"], t["name"]) not in tools]
        tools += rng.sample(pool, min(n_tools - len(tools), len(pool)))
        return Draw(tuple(picked), tuple(tools))
    need = 1 if mode == "single_tool" else 2
    eligible = [(s, w) for s, w in zip(servers, weights) if len(s["tools"]) >= need]
    if not eligible:
        return None
    server = _weighted_sample([s for s, _ in eligible], [w for _, w in eligible], 1, rng)[0]
    n_tools = 1 if mode == "single_tool" else min(rng.randint(*tools_per_task), len(server["tools"]))
    tools = rng.sample([t["name"] for t in server["tools"]], n_tools)
    return Draw((server,), tuple((server["name"], t) for t in tools))


def _weighted_sample(items: list[Any], weights: list[float], k: int, rng: random.Random) -> list[Any]:
    """``k`` distinct items, each draw proportional to the remaining weights."""
    items, weights, out = list(items), list(weights), []
    for _ in range(k):
        i = rng.choices(range(len(items)), weights=weights)[0]
        out.append(items.pop(i))
        weights.pop(i)
    return out
