"""Third-party servers from PyPI in their own environments, run with uvx as MCP clients run them.

``mcp-server-sqlite`` needs mcp 1.x (``--with "mcp<2"``), which trajkit's own mcp 2.x cannot
provide: it works because each server has its own environment. ``make setup`` pre-warms
these environments; on a clean machine uvx fetches them from PyPI on first use.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from trajkit.envs.agent import AgentLimits, run_episode
from trajkit.envs.config import parse_servers_config
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.models.base import SamplingParams

TIME = {"command": "uvx", "args": ["mcp-server-time==2026.10.19", "--local-timezone", "UTC"]}
SQLITE = {
    "command": "uvx",
    "args": ["--with", "mcp<2", "mcp-server-sqlite==2025.4.25", "--db-path", "${SESSION_DIR}/db.sqlite"],
}


@pytest.fixture(scope="module")
def third_party(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README.md").write_text("hello\n")
    git = {"command": "uvx", "args": ["mcp-server-git==2026.10.19", "--repository", str(repo)]}
    config = parse_servers_config({"mcpServers": {"time": TIME, "git": git, "sqlite": SQLITE}})
    rows = asyncio.run(discover(config, concurrency=3, startup_timeout_s=120))
    return config, rows


def test_harvest_third_party_servers(third_party):
    _, rows = third_party
    assert [(r["name"], r["status"], r["reason"]) for r in rows] == [
        ("time", "ok", None),
        ("git", "ok", None),
        ("sqlite", "ok", None),
    ]
    tools = {r["name"]: {t["name"] for t in r["tools"]} for r in rows}
    assert tools["time"] == {"get_current_time", "convert_time"}
    assert {"git_status", "git_log", "git_add", "git_commit"} <= tools["git"]
    assert {"read_query", "write_query", "create_table", "list_tables"} <= tools["sqlite"]
    assert rows[0]["server_info"]["name"] == "mcp-time" and rows[2]["server_info"]["version"]
    # sqlite declares resources and prompts but does not serve resources/templates/list: none, quietly
    sqlite = rows[2]
    assert [r["uri"] for r in sqlite["resources"]] == ["memo://insights"] and sqlite["prompts"]
    assert sqlite["resource_templates"] is None and sqlite["notes"] is None


async def test_agent_uses_pooled_time_and_fresh_sqlite(third_party, scripted_openai):
    config, rows = third_party
    ids = [r["server_id"] for r in rows if r["name"] != "git"]
    state = [{"server": "sqlite", "tool": "read_query", "arguments": {"query": "SELECT n FROM t"}}]
    task = {
        "task_id": "tp",
        "question": "Convert, record, inspect.",
        "server_ids": ids,
        "verifier": {"kind": "tool_outcome", "spec": json.dumps({"state": state})},
    }
    plan = [
        [
            ("list_tables", {}),
            ("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        ],
        [("create_table", {"query": "CREATE TABLE t (n INTEGER)"})],
        [("write_query", {"query": "INSERT INTO t VALUES (42)"})],
    ]

    def script(messages, tools, body):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn < len(plan):
            return {"tool_calls": [{"name": n, "arguments": a} for n, a in plan[turn]]}
        return "recorded"

    _, backend = scripted_openai(script)
    async with ToolEnv(rows, config=config) as env:
        assert env.stateless == {"time": True, "git": False, "sqlite": False}  # read-only annotations decide
        row = await run_episode(task, backend, env, SamplingParams(), AgentLimits(tool_timeout_s=60))
    assert (row["status"], row["reason"]) == ("completed", None), row["messages"]
    results = [m["content"] for m in row["messages"] if m["role"] == "tool"]
    assert results[0] == "[]"  # a fresh database for this trajectory
    assert "21:00" in results[1] and "Asia/Tokyo" in results[1]
    assert row["end_state"] == ["[{'n': 42}]"]
