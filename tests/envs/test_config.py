"""mcpServers parsing: transports, validation errors in one line, env expansion, command resolution."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trajkit.envs.config import (
    ServerConfig,
    check_environment,
    child_environment,
    expand,
    load_servers_config,
    resolve_command,
    server_state,
    variables,
)
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
        ({"mcpServers": {"a": {"command": "x", "state": "maybe"}}}, "a.state: Input should be 'stateless' or"),
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
        load_servers_config(write(tmp_path, {"a": {"url": "x"}, "b": {"command": 3}}))


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
    env = child_environment(cfg.resolved())
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


def test_claude_desktop_and_cursor_files(tmp_path):
    claude = {
        "mcpServers": {
            "filesystem": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
            },
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"A": "1"}},
        }
    }
    cfg = load_servers_config(write(tmp_path, claude))
    assert list(cfg) == ["filesystem", "memory"] and cfg["memory"].env == {"A": "1"}
    cursor = {
        "mcpServers": {
            "remote": {"url": "https://example.com/mcp", "headers": {"API_KEY": "${KEY}"}},
            "local": {"type": "stdio", "command": "python", "args": ["server.py"], "envFile": ".env"},
        }
    }
    cfg = load_servers_config(write(tmp_path, cursor))
    assert cfg["remote"].transport == "http" and cfg["local"].transport == "stdio"


def test_cline_keys_and_disabled_servers_are_notes_not_errors(tmp_path, caplog):
    cline = {
        "mcpServers": {
            "kv": {"command": "python", "args": ["-m", "kv"], "autoApprove": ["get"], "timeout": 30},
            "off": {"command": "node", "args": ["x.js"], "disabled": True, "autoApprove": []},
            "odd": {"command": "python", "futureKey": 1},
        }
    }
    with caplog.at_level("WARNING", logger="trajkit.envs"):
        cfg = load_servers_config(write(tmp_path, cline))
    assert list(cfg) == ["kv", "odd"]
    assert (cfg["kv"].timeout, cfg["odd"].timeout) == (30, None)  # applied per call (tests/envs/test_session.py)
    notes = [r.getMessage() for r in caplog.records]
    assert any("'off' is disabled: skipped" in n for n in notes)
    assert any("'odd': ignoring unknown key(s) futureKey" in n for n in notes)
    assert not any("autoApprove" in n or "timeout" in n for n in notes)  # Cline's own keys are known


def test_vscode_servers_and_inputs_from_the_environment_or_set(tmp_path, monkeypatch):
    vscode = {
        "inputs": [{"type": "promptString", "id": "api-key", "description": "Perplexity API Key", "password": True}],
        "servers": {
            "perplexity": {
                "type": "stdio",
                "command": "npx",
                "args": ["-y", "server-perplexity-ask"],
                "env": {"PERPLEXITY_API_KEY": "${input:api-key}"},
            },
            "github": {"type": "http", "url": "https://api.example.com/mcp/"},
        },
    }
    path = write(tmp_path, vscode)
    monkeypatch.delenv("API_KEY", raising=False)
    with pytest.raises(UserError) as e:
        load_servers_config(path)
    assert str(e.value) == (
        f"{path}: server 'perplexity': ${{input:api-key}} (Perplexity API Key) has no value: "
        "set environment variable API_KEY or --set inputs.api-key=..."
    )
    assert load_servers_config(path, {"api-key": "from-set"})["perplexity"].env == {"PERPLEXITY_API_KEY": "from-set"}
    monkeypatch.setenv("API_KEY", "from-env")
    cfg = load_servers_config(path)
    assert cfg["perplexity"].env == {"PERPLEXITY_API_KEY": "from-env"} and cfg["github"].transport == "http"


def test_vscode_predefined_variables(tmp_path, monkeypatch):
    """``${workspaceFolder}`` and ``${userHome}`` in a VS Code ``.vscode/mcp.json`` were taken for environment
    variables and refused (issue 34)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "proj" / ".vscode").mkdir(parents=True)
    entry = {
        "command": "python",
        "args": ["${workspaceFolder}${/}server.py", "--name", "${workspaceFolderBasename}"],
        "env": {"DATA": "${userHome}/data", "KEEP": "${OTHER}"},
    }
    path = tmp_path / "proj" / ".vscode" / "mcp.json"
    path.write_text(json.dumps({"servers": {"fs": entry}}))
    cfg = load_servers_config(path)["fs"]
    assert cfg.args == [f"{tmp_path / 'proj'}/server.py", "--name", "proj"]
    assert cfg.env == {"DATA": f"{tmp_path / 'home'}/data", "KEEP": "${OTHER}"}  # ${VAR}: from the environment
    assert load_servers_config(write(tmp_path, {"servers": {"fs": entry}}))["fs"].args[0] == f"{tmp_path}/server.py"


def test_session_dir_and_variables_expand_in_every_field(monkeypatch):
    monkeypatch.setenv("TK_BIN", "/opt/bin")
    monkeypatch.setenv("TK_TOKEN", "t0k")
    cfg = ServerConfig(
        command="${TK_BIN}/server",
        args=["--db", "${SESSION_DIR}/db.sqlite", "--token=${TK_TOKEN}"],
        env={"HOME_DIR": "${SESSION_DIR}", "TOKEN": "${TK_TOKEN}"},
        cwd="${SESSION_DIR}",
    )
    assert cfg.uses_session_dir and variables(cfg) == ["HOME_DIR", "TK_BIN", "TK_TOKEN", "TOKEN"]
    out = cfg.resolved(session_dir="/tmp/s1")
    assert out.command == "/opt/bin/server" and out.args == ["--db", "/tmp/s1/db.sqlite", "--token=t0k"]
    assert out.env == {"HOME_DIR": "/tmp/s1", "TOKEN": "t0k"} and out.cwd == "/tmp/s1"
    assert cfg.server_id("s") == ServerConfig(**cfg.model_dump()).server_id("s")  # ids use the unexpanded text
    http = ServerConfig(url="${TK_HOST}/mcp", headers={"Authorization": "Bearer ${TK_TOKEN}"})
    monkeypatch.setenv("TK_HOST", "http://127.0.0.1:9")
    out = http.resolved()
    assert out.url == "http://127.0.0.1:9/mcp" and out.headers == {"Authorization": "Bearer t0k"}
    monkeypatch.delenv("TK_BIN")
    with pytest.raises(UserError, match="server 'x': environment variable TK_BIN is not set"):
        check_environment("x", cfg)
    with pytest.raises(ValueError, match="not an HTTP one"):
        ServerConfig(url="http://h/${SESSION_DIR}")


def test_state_is_explicit_or_inferred_from_read_only_annotations():
    ro = {"annotations": json.dumps({"readOnlyHint": True})}
    rw = {"annotations": json.dumps({"readOnlyHint": False})}
    plain = ServerConfig(command="python")
    assert server_state(plain, [ro, ro]) == "stateless"
    assert server_state(plain, [ro, rw]) == server_state(plain, [ro, {"annotations": None}]) == "stateful"
    assert server_state(plain, None) == server_state(plain, []) == "stateful"  # unknown is stateful
    assert server_state(ServerConfig(command="python", args=["${SESSION_DIR}"]), [ro]) == "stateful"
    assert server_state(ServerConfig(command="python", state="stateless"), [rw]) == "stateless"
    assert server_state(ServerConfig(command="python", state="stateful"), [ro]) == "stateful"
