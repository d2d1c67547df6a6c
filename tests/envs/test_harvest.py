"""`trajkit synth harvest`: real servers over stdio and streamable HTTP; failures are rows with reasons."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from tests.fixtures.envs import RAW_SERVER
from trajkit import schema as S
from trajkit.cli import app
from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import STATEFUL_HTTP, discover
from trajkit.envs.env import ToolEnv
from trajkit.errors import UserError
from trajkit.store import Store


@pytest.fixture(scope="module")
def http_calculator():
    """The example calculator serving streamable HTTP on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajkit.envs.servers.calculator", "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    assert proc.poll() is None, "the HTTP calculator did not start"
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


def raw(*flags: str, **extra) -> dict:
    return {"command": "python", "args": ["-S", str(RAW_SERVER), *flags], **extra}


def test_harvest_writes_one_row_per_server(tmp_path, run_dir, http_calculator, monkeypatch):
    monkeypatch.setenv("HARVEST_TEST_KEY", "secret-header-value")
    config = {
        "mcpServers": {
            "paged": raw("--pages", "3", env={"RAW_TOKEN": "value-that-must-not-be-stored"}),
            "banner": raw("--junk-init"),
            "http-calc": {"url": http_calculator, "headers": {"X-Key": "Bearer ${HARVEST_TEST_KEY}"}},
            "missing": {"command": "definitely-not-a-command-xyz"},
            "exits": raw("--exit-init"),
            "hangs": raw("--hang-init"),
            "bad-schema": raw("--bad-tools"),
            "dup-names": raw("--dup-tools"),
        }
    }
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(config))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = CliRunner().invoke(
        app, ["synth", "harvest", "--servers", str(path), "--run", str(run_dir), "--startup-timeout", "2"]
    )
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in Store(run_dir).rows("servers")}
    assert sorted(rows) == sorted(config["mcpServers"])  # written as each server is done
    status = {n: (r["status"], r["reason"]) for n, r in rows.items()}
    assert status["paged"] == status["banner"] == status["http-calc"] == ("ok", None)
    assert status["missing"][0] == "failed" and "cannot start server" in status["missing"][1]
    assert status["exits"] == (
        "failed",
        "initialize failed: MCPError: Connection closed (stderr: refusing to initialize)",
    )
    assert status["hangs"] == ("failed", "initialize timed out after 2s")
    assert status["bad-schema"][1].startswith("invalid tools: tool 'echo': invalid input schema")
    assert status["dup-names"] == ("failed", "invalid tools: duplicate tool name 'echo'")

    paged = rows["paged"]
    assert paged["num_tools"] == 13 and paged["tools"][0]["name"] == "echo"
    assert json.loads(paged["tools"][0]["input_schema"])["type"] == "object"
    assert json.loads(paged["tools"][0]["annotations"]) == {"readOnlyHint": True}
    assert paged["server_info"]["name"] == "raw" and paged["transport"] == "stdio"
    assert paged["env_names"] == ["RAW_TOKEN"]
    args = config["mcpServers"]["paged"]["args"]
    assert paged["server_id"] == S.content_id("paged", "python", args, None, ["RAW_TOKEN"])
    stored = json.dumps(list(rows.values()), default=str)
    assert "value-that-must-not-be-stored" not in stored and "secret-header-value" not in stored

    calc = rows["http-calc"]
    assert calc["transport"] == "http" and calc["url"] == http_calculator and calc["command"] is None
    assert [t["name"] for t in calc["tools"]] == ["add", "subtract", "multiply", "divide", "power", "sqrt", "evaluate"]
    assert calc["server_info"]["name"] == "calculator"
    assert calc["env_names"] == ["HARVEST_TEST_KEY"]  # the variable its headers read, never the value

    # the table holds names only: rebuilding these two servers without the file would drop their values
    for name in ("paged", "http-calc"):
        with pytest.raises(UserError, match=f"server '{name}' reads environment variables .* pass its mcpServers"):
            ToolEnv([rows[name]])

    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before  # every harvested server was shut down

    again = CliRunner().invoke(app, ["synth", "harvest", "--servers", str(path), "--run", str(run_dir)])
    assert again.exit_code == 0 and Store(run_dir).count("servers") == len(config["mcpServers"])
    # skipping a complete stage names what it kept failed, and the way to retry it
    assert "kept as faults: servers.failed 5 (--fresh redoes the stage)" in again.output


def test_a_missing_variable_is_a_user_error_before_any_server_starts(tmp_path, run_dir, monkeypatch, raw_server):
    monkeypatch.delenv("TRAJKIT_UNSET_VAR", raising=False)
    config = {"mcpServers": {"ok": raw(), "needs": raw(env={"TOKEN": "${TRAJKIT_UNSET_VAR}"})}}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["synth", "harvest", "-s", str(path), "-r", str(run_dir)])
    assert isinstance(result.exception, UserError)
    assert str(result.exception) == (
        "server 'needs': environment variable TRAJKIT_UNSET_VAR is not set (used in a server config)"
    )
    assert Store(run_dir).count("servers") == 0  # nothing started, nothing written

    # the same in a stage's tool environment: at its start, not as a fault of every trajectory
    cfg = raw_server()
    rows = asyncio.run(discover({"s": cfg}))
    headers = {"s": ServerConfig(url="http://127.0.0.1:9/mcp", headers={"A": "${TRAJKIT_UNSET_VAR}"})}
    with pytest.raises(UserError, match="server 's': environment variable TRAJKIT_UNSET_VAR is not set"):
        ToolEnv(rows, config=headers)


def test_a_server_that_timed_out_is_harvested_again_on_resume(tmp_path, run_dir):
    flag = tmp_path / "hang"
    flag.touch()
    config = {"mcpServers": {"slow": raw("--hang-init-while", str(flag)), "fine": raw()}}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(config))
    args = ["synth", "harvest", "-s", str(path), "-r", str(run_dir), "--startup-timeout", "1"]
    assert CliRunner().invoke(app, args).exit_code == 0
    store = Store(run_dir)
    first = {r["name"]: (r["status"], r["reason"], r["reason_code"]) for r in store.rows("servers")}
    assert first == {"slow": ("failed", "initialize timed out after 1s", "timeout"), "fine": ("ok", None, None)}

    store.manifest_path("harvest").unlink()  # as a kill before the manifest leaves it: the stage resumes
    flag.unlink()
    assert CliRunner().invoke(app, args).exit_code == 0
    again = {r["name"]: r["status"] for r in store.rows("servers")}
    assert again == {"slow": "ok", "fine": "ok"} and store.count("servers") == 2
    assert store.manifest("harvest")["counts"]["retried"] == 1


def test_no_reachable_server_is_one_line_naming_the_url(tmp_path, run_dir):
    """An HTTP server nobody listens at: harvest ends with one line naming the URL (exit 2); its row is
    kept as unreachable, a transient fault, so a rerun once the server is up harvests it again."""
    from trajkit.envs.agent import is_transient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"remote": {"url": url}}}))
    args = ["synth", "harvest", "-s", str(path), "-r", str(run_dir)]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, UserError), result.output
    assert str(result.exception).startswith(f"no server could be reached (1 tried): 'remote': cannot reach {url}: ")
    [row] = Store(run_dir).rows("servers")
    assert (row["status"], row["reason_code"]) == ("failed", "unreachable") and is_transient(row["reason_code"])


def test_a_server_that_errors_on_tools_list_is_a_failed_row(tmp_path, run_dir):
    """A JSON-RPC error from one server is that server's failed row (its message kept), on every rerun."""
    config = {"mcpServers": {"broken": raw("--error-list"), "fine": raw()}}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(config))
    args = ["synth", "harvest", "-s", str(path), "-r", str(run_dir)]
    for _ in range(2):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    rows = {r["name"]: (r["status"], r["reason"]) for r in Store(run_dir).rows("servers")}
    assert rows["fine"] == ("ok", None)
    assert rows["broken"][0] == "failed" and "tools/list is broken here" in rows["broken"][1]


def test_optional_lists_not_served_are_none_and_real_errors_are_notes(tmp_path, run_dir):
    """Resources, templates and prompts are asked for only where declared; "Method not found" means none, quietly."""
    config = {"mcpServers": {"plain": raw(), "optional": raw("--optional-lists")}}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["synth", "harvest", "-s", str(path), "-r", str(run_dir)])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in Store(run_dir).rows("servers")}
    plain, optional = rows["plain"], rows["optional"]
    assert plain["resources"] is plain["resource_templates"] is plain["prompts"] is plain["notes"] is None
    assert [r["uri"] for r in optional["resources"]] == ["raw://one"] and optional["status"] == "ok"
    assert optional["resource_templates"] is optional["prompts"] is None
    assert optional["notes"] == ["listing prompts failed: prompts/list is broken here (code -32603)"]
    assert "prompts/list is broken here" in result.output and "resource_templates" not in result.output


def test_bad_servers_file_is_a_user_error(tmp_path, run_dir):
    path = tmp_path / "servers.json"
    path.write_text('{"mcpServers": {"a": {"args": []}}}')
    result = CliRunner().invoke(app, ["synth", "harvest", "-s", str(path), "-r", str(run_dir)])
    assert isinstance(result.exception, UserError)  # trajkit.cli.main prints it as one line, exit 2
    assert str(result.exception) == (
        f"{path}: 1 problem(s): a.(entry): Value error, give either 'command' (stdio) or 'url' (streamable HTTP)"
    )


async def test_tool_calls_over_streamable_http(http_calculator):
    config = {"calc": ServerConfig(url=http_calculator)}
    rows = await discover(config)
    async with ToolEnv(rows, config=config) as env:
        assert env.stateless == {"calc": True}
        async with env.episode() as ep:
            outs = await asyncio.gather(*(ep.call("calc", "multiply", {"a": i, "b": 3}) for i in range(5)))
            assert [o.text for o in outs] == ["0", "3", "6", "9", "12"]
            assert (await ep.call("calc", "evaluate", {"expression": "2 ** 8"})).text == "256"


GALLERY = Path(__file__).parent / "servers" / "gallery.py"


def test_harvest_keeps_everything_a_server_declares(tmp_path, run_dir, http_calculator, monkeypatch):
    """A VS Code mcp.json: tool titles and output schemas, resources, templates, prompts, state; a stateful
    HTTP server is noted; ${input:} comes from --set, and without a value the file is refused."""
    config = {
        "inputs": [{"type": "promptString", "id": "gallery-mode", "description": "Gallery mode"}],
        "servers": {
            "gallery": {
                "type": "stdio",
                "command": "python",
                "args": [str(GALLERY)],
                "env": {"M": "${input:gallery-mode}"},
            },
            "remote": {"type": "http", "url": http_calculator, "state": "stateful"},
        },
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    monkeypatch.delenv("GALLERY_MODE", raising=False)
    refused = CliRunner().invoke(app, ["synth", "harvest", "-s", str(path), "-r", str(run_dir)])
    assert isinstance(refused.exception, UserError) and "${input:gallery-mode} (Gallery mode) has no value" in str(
        refused.exception
    )
    args = ["synth", "harvest", "-s", str(path), "-r", str(run_dir), "--set", "inputs.gallery-mode=quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    store = Store(run_dir)
    assert "quiet" not in json.dumps(store.manifest("harvest"))  # a --set input is a secret
    rows = {r["name"]: r for r in store.rows("servers")}
    gallery, remote = rows["gallery"], rows["remote"]
    assert gallery["status"] == "ok" and gallery["state"] == "stateful" and not gallery["notes"]
    area = next(t for t in gallery["tools"] if t["name"] == "area")
    assert area["title"] == "Shape area"
    assert json.loads(area["output_schema"])["required"] == ["shape", "area"]
    assert json.loads(area["annotations"]) == {"readOnlyHint": True}
    assert gallery["resources"] == [
        {
            "uri": "notes://readme",
            "name": "readme",
            "title": "Read me",
            "description": "How to use the gallery",
            "mime_type": "text/plain",
            "size": None,
            "annotations": None,
        }
    ]
    assert [(t["uri"], t["name"]) for t in gallery["resource_templates"]] == [("notes://{topic}", "note")]
    assert gallery["prompts"] == [
        {
            "name": "summarize",
            "title": "Summarize",
            "description": "Summarize a note",
            "arguments": [
                {"name": "topic", "description": None, "required": True},
                {"name": "style", "description": None, "required": False},
            ],
        }
    ]
    # the calculator's tools are all read-only, but the config says stateful: flagged, as trajkit cannot contain it
    assert remote["state"] == "stateful" and remote["notes"] == [STATEFUL_HTTP]
    assert remote["resources"] == remote["prompts"] == []  # the capability declared, nothing listed
    assert STATEFUL_HTTP[:40] in result.output
