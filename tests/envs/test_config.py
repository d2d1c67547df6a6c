"""mcpServers parsing: transports, validation errors in one line, env expansion, command resolution."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trajkit.envs.config import ServerConfig, child_environment, expand, load_servers_config, resolve_command
from trajkit.errors import UserError


def write(tmp_path: Path, data) -> Path:
    p = tmp_path / "servers.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_reads_stdio_and_http_entries_in_order(tmp_path):
    cfg = load_servers_config(
        write(
            tmp_path,
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time==2026.10.19"], "env": {"TZ": "UTC"}},
                    "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"X-Key": "${KEY}"}},
                    "off": {"command": "x", "disabled": True},
                }
            },
        )
    )
    assert list(cfg) == ["time", "remote"]
    assert cfg["time"].transport == "stdio" and cfg["time"].args == ["mcp-server-time==2026.10.19"]
    assert cfg["remote"].transport == "http" and cfg["remote"].headers == {"X-Key": "${KEY}"}


def test_bare_mapping_without_the_mcpServers_key(tmp_path):
    assert list(load_servers_config(write(tmp_path, {"calc": {"command": "python"}}))) == ["calc"]


@pytest.mark.parametrize(
    "data, message",
    [
        ("{not json", "not valid JSON"),
        ({"mcpServers": {}}, "non-empty"),
        ({"mcpServers": {"a": {"args": ["x"]}}}, "a.(entry): Value error, give either 'command'"),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}, "give either"),
        ({"mcpServers": {"a": {"command": "x", "arg": ["typo"]}}}, "a.arg: Extra inputs are not permitted"),
        ({"mcpServers": {"a": {"url": "ftp://h"}}}, "is not http(s)"),
        ({"mcpServers": {"a": {"command": "x", "headers": {"h": "v"}}}}, "need a 'url'"),
        ({"mcpServers": {"a": "python"}}, "a: expected an object"),
    ],
)
def test_bad_files_are_one_line_user_errors(tmp_path, data, message):
    with pytest.raises(UserError) as e:
        load_servers_config(write(tmp_path, data))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_every_problem_is_reported_at_once(tmp_path):
    with pytest.raises(UserError, match=r"2 problem\(s\): a\..*; b\."):
        load_servers_config(write(tmp_path, {"a": {"comand": "x"}, "b": {"command": 3}}))


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_servers_config(tmp_path / "nope.json")


def test_server_id_depends_on_env_names_not_values():
    a = ServerConfig(command="uvx", args=["s"], env={"TOKEN": "one"})
    b = ServerConfig(command="uvx", args=["s"], env={"TOKEN": "two"})
    c = ServerConfig(command="uvx", args=["s"], env={"OTHER": "one"})
    assert a.server_id("s") == b.server_id("s") != c.server_id("s")
    assert a.server_id("s") != a.server_id("t")


def test_env_values_expand_from_the_environment(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "s3cr3t")
    monkeypatch.setenv("UV_CACHE_DIR", "/tmp/uvcache")
    cfg = ServerConfig(command="uvx", env={"TOKEN": "Bearer ${SECRET_TOKEN}"})
    env = child_environment(cfg)
    assert env["TOKEN"] == "Bearer s3cr3t"
    assert env["UV_CACHE_DIR"] == "/tmp/uvcache"  # uv settings reach a uvx-run server
    assert env["UV_PYTHON"] == sys.executable  # uv never downloads a Python
    monkeypatch.delenv("SECRET_TOKEN")
    with pytest.raises(UserError, match="SECRET_TOKEN is not set"):
        expand("${SECRET_TOKEN}")


def test_python_and_uvx_resolve_to_this_environment(monkeypatch):
    assert resolve_command("python") == sys.executable
    monkeypatch.setenv("PATH", "/nonexistent")
    assert resolve_command("uvx") == str(Path(sys.executable).parent / "uvx")
    assert resolve_command("some-tool-nowhere") == "some-tool-nowhere"
