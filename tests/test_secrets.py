"""Secrets never leave a run: each kind is planted in a run built by the stages through the CLI (a real
stdio MCP server and a real streamable HTTP one that leak their env, headers and input; a scripted model
on loopback that repeats everything and returns byte-level token ids), then searched for in the decoded
content of every file of the run (Parquet tables with token ids decoded, the call cache, manifests),
the CLI's output, the export and the files pushed to a fake Hub."""

from __future__ import annotations

import io
import itertools
import json
import socket
import sqlite3
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.data_cards.conftest import TOKEN
from tests.data_cards.fake_hub import FakeHub
from tests.fixtures.envs import http_server
from tests.synth.brain import Brain
from trajkit import schema as S
from trajkit.cli import app
from trajkit.config import StageConfig
from trajkit.envs.config import ServerConfig, ServersFile
from trajkit.envs.env import row_config
from trajkit.errors import UserError
from trajkit.models.scripted_server import ScriptedServer
from trajkit.redact import INVISIBLE, REDACTED, Redactor, config_secrets
from trajkit.store import Store

LEAKY = Path(__file__).resolve().parent / "envs" / "servers" / "leaky.py"
INLINE = "Inl1ne-Secret-Value-93"  # written in the servers config's env
EXPANDED = "Upstr3am-Token-Value-58"  # env MY_TOKEN: ${UPSTREAM_SECRET}, gone from the pushing shell
HEADER = "H3ader-Api-Key-Value-27"  # an HTTP server's header value
HEADER_BEARER = "VaultBearer-8c1d2e3f4a5b"  # Authorization: Bearer ${VAULT_TOKEN}
BEARER = "qW3rTy-Free-Standing-81"  # a Bearer header in a tool's input and output
URL_PASSWORD = "Pg-Passw0rd-4471"  # a password in a URL
SHORT = "zq9Vt4"  # a short custom token, env SHOP_ID
QUERY = "Qu3ry-Api-Key-Value-64"  # in the query string of an HTTP server's url
ARG = "Arg-Api-Key-Value-12"  # a stdio server's --api-key argument
SECRETS = (INLINE, EXPANDED, HEADER, HEADER_BEARER, BEARER, URL_PASSWORD, SHORT, QUERY, ARG)
KEPT = ("TZ=UTC", "DEBUG=false", "MODE=production")  # under the floor, or not shaped like a token


class Leaker(Brain):
    """Tasks that either audit the configuration (every leak at once) or just greet; an agent that calls
    the leaking tools, then repeats their results; byte-level token ids for every answer."""

    def __init__(self):
        super().__init__(garbage=0)
        self._n = itertools.count()

    def task(self, targets, rng):
        kind = "Audit the shop configuration" if next(self._n) % 2 == 0 else "Greet the team"
        return {"question": f"{kind}, ticket {rng.randint(1, 10**6)}.", "target_tools": targets, "state": []}

    def __call__(self, messages, tools, body):
        if not tools:
            return super().__call__(messages, tools, body)
        reply = self.agent_turn(messages)
        text = reply["content"] or json.dumps(reply["tool_calls"])
        return {**reply, "token_ids": list(text.encode()), "prompt_token_ids": list(json.dumps(messages).encode())}

    def agent_turn(self, messages):
        if messages[-1]["role"] == "tool":
            results = [m["content"] for m in messages if m["role"] == "tool"]
            return {"content": "I found: " + " | ".join(results), "tool_calls": []}
        question = next(m["content"] for m in messages if m["role"] == "user")
        if not question.startswith("Audit"):
            return {"content": "Hello, team!", "tool_calls": []}
        calls = [("leaky__read_env", {"name": n}) for n in ("INTERNAL_API_KEY", "MY_TOKEN", "SHOP_ID", *_KEPT_NAMES)]
        calls += [
            ("leaky__read_env_split", {"name": "INTERNAL_API_KEY"}),
            ("leaky__read_api_key", {}),
            ("leaky__echo", {"text": f"curl -H 'Authorization: Bearer {BEARER}' https://api.example"}),
            ("leaky__echo", {"text": f"postgres://admin:{URL_PASSWORD}@db.internal/app?sslmode=require"}),
            ("vault__request_headers", {}),
        ]
        tool_calls = [{"id": f"call_{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(calls)]
        return {"content": None, "tool_calls": tool_calls}


_KEPT_NAMES = ("TZ", "DEBUG", "MODE")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vault_url():
    """The leaky server on streamable HTTP (loopback): it returns the headers each request carried."""
    port = _free_port()
    with http_server([sys.executable, str(LEAKY), "--http", str(port)], port) as url:
        yield url


def _cli(*args) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.output


def _strings(value, out: list[str], key: str = "") -> None:
    """Every string inside a decoded row; token ids decoded to the text they encode (bytes here)."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings(v, out, k)
    elif isinstance(value, list):
        if key == "token_ids" and value:
            out.append(bytes(value).decode(errors="replace"))
        else:
            for v in value:
                _strings(v, out, key)


def _decoded(name: str, data: bytes) -> str:
    """A file's content as text: a Parquet file's rows (every string, token ids decoded), a sqlite
    database's rows, and for anything else (and those too) the raw bytes."""
    texts = [data.decode("utf-8", errors="replace")]
    if name.endswith(".parquet"):
        for row in pq.read_table(io.BytesIO(data)).to_pylist():
            _strings(row, texts)
    return "\n".join(texts)


def _sqlite_rows(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(str(row) for t in tables for row in db.execute(f'SELECT * FROM "{t}"'))
    finally:
        db.close()


def _leaks(text: str) -> list[str]:
    plain = text.translate({ord(c): None for c in INVISIBLE})  # a token split by invisible characters, joined
    return [s for s in SECRETS if s in plain]


@pytest.fixture(scope="module")
def leaked_run(tmp_path_factory, vault_url):
    """harvest, tasks, rollouts, card, export and a push to a fake Hub, through the CLI; returns the run
    and what to search: {where: decoded text}."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _leak(tmp_path_factory.mktemp("secrets"), vault_url, monkeypatch)


def _leak(tmp_path: Path, vault_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    from huggingface_hub import constants

    monkeypatch.setenv("UPSTREAM_SECRET", EXPANDED)
    monkeypatch.setenv("VAULT_TOKEN", HEADER_BEARER)
    servers = tmp_path / "servers.json"
    env = {"INTERNAL_API_KEY": INLINE, "MY_TOKEN": "${UPSTREAM_SECRET}", "SHOP_ID": SHORT}
    env |= {"TZ": "UTC", "DEBUG": "false", "MODE": "production"}
    headers = {"Authorization": "Bearer ${VAULT_TOKEN}", "X-Api-Key": HEADER}
    config = {"leaky": {"command": "python", "args": [str(LEAKY), f"--api-key={ARG}"], "env": env}}
    config["vault"] = {"url": f"{vault_url}?api_key={QUERY}", "headers": headers}
    servers.write_text(json.dumps({"mcpServers": config}))
    run = tmp_path / "run"
    out = {}
    with ScriptedServer(Leaker()) as model:
        url = model.base_url.replace("http://", f"http://bob:{URL_PASSWORD}@")  # the endpoint's password too
        m = ["--model", "scripted", "--backend", "openai", "--base-url", url, "--set", "model.max_retries=0"]
        out["harvest output"] = _cli("synth", "harvest", "--run", run, "--servers", servers)
        out["tasks output"] = _cli(
            "synth", "tasks", "--run", run, *m, "--mode", "multi_server", "--requests", 1, "--k", 2,
            "--sampling", "list", "--server", "leaky", "--server", "vault",
        )  # fmt: skip
        out["rollouts output"] = _cli(
            "synth", "rollouts", "--run", run, *m, "--n", 1, "--servers-config", servers, "--set", "pool_size=1"
        )
    monkeypatch.delenv("UPSTREAM_SECRET")  # the pushing shell no longer has it
    monkeypatch.delenv("VAULT_TOKEN")
    out["card output"] = _cli("card", "--run", run, "--repo", "alice/leaky")
    out["export output"] = _cli("export", tmp_path / "export.jsonl", "--run", run, "--all")
    out["export"] = (tmp_path / "export.jsonl").read_text()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with FakeHub() as hub:
        out["push output"] = _cli("push", "--run", run, "--repo", "alice/leaky", "--endpoint", hub.url)
        for repo in hub.repos.values():
            for path, (_, content) in repo.files.items():
                out[f"pushed {path}"] = _decoded(path, content)
        for oid, content in hub.lfs.items():
            out[f"pushed object {oid[:8]}"] = _decoded(".parquet" if content.startswith(b"PAR1") else "", content)
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        out[str(path.relative_to(run))] = _decoded(path.name, path.read_bytes())
        if path.name.endswith(".sqlite"):
            out[f"{path.relative_to(run)} rows"] = _sqlite_rows(path)
    return run, out


def test_no_planted_secret_is_written_anywhere(leaked_run):
    run, searched = leaked_run
    store = Store(run)
    trajs = store.rows("trajectories")
    audits = [t for t in trajs if t["messages"][1]["content"].startswith("Audit")]  # after the system message
    assert audits and all(t["status"] == "completed" for t in trajs), [t["reason"] for t in trajs]
    tool_results = "\n".join(m["content"] for t in audits for m in t["messages"] if m["role"] == "tool")
    # every leak happened, and was redacted where it was written
    for seen in ("INTERNAL_API_KEY=" + REDACTED, "MY_TOKEN=" + REDACTED, "SHOP_ID=" + REDACTED, "key: " + REDACTED):
        assert seen in tool_results
    assert f"Bearer {REDACTED}" in tool_results and f"admin:{REDACTED}@db.internal" in tool_results
    assert f"x-api-key: {REDACTED}" in tool_results
    assert any(n.endswith(".parquet") for n in searched) and any(n.endswith("calls.sqlite rows") for n in searched)
    assert any(n.startswith("pushed data/") for n in searched) and "export" in searched
    assert any("_manifest.json" in n for n in searched) and "card/data/sft/train-00000.parquet" in searched
    endpoint = store.manifest("rollouts")["config"]["model"]["base_url"]
    assert endpoint.startswith("http://127.0.0.1:") and endpoint in store.manifest("rollouts")["usage"]["endpoints"]
    assert f"base_url: {endpoint}" in searched["card/README.md"]  # endpoints without credentials
    found = {where: _leaks(text) for where, text in searched.items()}
    assert {w: f for w, f in found.items() if f} == {}
    # a trajectory that held a secret lost its token ids; a clean one kept them, and they decode
    assert all(t["token_ids"] is None for t in audits)
    greets = [t for t in trajs if t["messages"][1]["content"].startswith("Greet")]
    assert greets and all("Hello, team!" in bytes(t["token_ids"]).decode() for t in greets)


def test_values_under_the_floor_are_not_redacted(leaked_run):
    run, _ = leaked_run
    results = [m["content"] for t in Store(run).rows("trajectories") for m in t["messages"] if m["role"] == "tool"]
    for kept in KEPT:
        assert any(kept in r for r in results), kept
    env = {"TZ": "UTC", "DEBUG": "false", "MODE": "production", "SHOP_ID": SHORT, "DB_PASSWORD": "hunter"}
    found = config_secrets({"s": ServerConfig(command="x", env=env)}, environ={})
    assert found == {"s.SHOP_ID": SHORT, "s.DB_PASSWORD": "hunter"}  # a secret's name lowers the bar to the floor
    args = [
        "-y",
        "pkg@1.2.3",
        "--password",
        "hunter",
        "--compass",
        "n0rth1",
        "--token-file",
        "/etc/token",
        "--db-pass=s3cr3t",
    ]
    url = "https://h.example/mcp?page=2&apiKey=abc123&lang=english"
    found = config_secrets({"a": ServerConfig(command="x", args=args), "b": ServerConfig(url=url)}, environ={})
    assert found == {"a.args.password": "hunter", "a.args.db-pass": "s3cr3t", "b.url.apiKey": "abc123"}


def test_a_table_is_redacted_as_its_rows_are():
    """Arrow's RE2 and Python's re read the patterns alike; nulls and nesting survive; only rows that
    held a secret lose their token trace."""
    redactor = Redactor({"s.SHOP_ID": SHORT})
    split = SHORT[:3] + "\u200d" + SHORT[3:]
    rows = [
        {"traj_id": "a", "task_id": "t", "status": "completed", "token_ids": [1, 2], "messages": [
            {"role": "tool", "content": f"id {split}", "name": None},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "name": "f", "arguments": f"Bearer {BEARER}"}]},
        ]},
        {"traj_id": "b", "task_id": "t", "status": "completed", "token_ids": [3], "messages": None, "reason": None},
        {"traj_id": "c", "task_id": "t", "status": "failed", "token_ids": [4], "messages": [], "reason": f"https://u:{URL_PASSWORD}@h"},
    ]  # fmt: skip
    table = redactor.table(S.to_batch("trajectories", rows))
    expected = [{**redactor.value(r), **({"token_ids": None} if redactor.value(r) != r else {})} for r in rows]
    assert table.to_pylist() == S.to_batch("trajectories", expected).to_pylist()
    assert [r["token_ids"] for r in table.to_pylist()] == [None, [3], None]
    assert REDACTED in table.column("reason")[2].as_py() and SHORT not in str(table.to_pylist())


def test_a_server_whose_url_held_a_secret_needs_its_servers_file(leaked_run):
    """The servers row keeps the url with its secret redacted, so rebuilding it from the row is a user error."""
    run, _ = leaked_run
    (vault,) = [r for r in Store(run).rows("servers") if r["name"] == "vault"]
    assert vault["url"].endswith(f"?api_key={REDACTED}")
    with pytest.raises(UserError, match="secret in its url or args.*--servers-config"):
        row_config({**vault, "env_names": []})


def test_card_views_redact_again_only_shards_not_redacted_when_written(run_dir, monkeypatch):
    """Shards the store wrote carry the redaction mark and are not redacted twice; a shard a stage listed
    unmarked (written before redaction existed) is."""
    from tests.toy_stage import relist
    from trajkit.data_cards.views import write_views

    secret = "late-secret-9f8e7d6c5b4a"
    store = Store(run_dir)
    store.write("tasks", "t", [{"task_id": "a", "question": "q", "mode": "imported"}])
    said = [{"role": "user", "content": "q"}, {"role": "assistant", "content": f"the key is {secret}"}]
    store.write("trajectories", "r", [{"traj_id": "x", "task_id": "a", "status": "completed", "messages": said}])
    assert store.redacted("trajectories") and store.redacted("tasks")
    store.redactor = Redactor({"LATE_TOKEN": secret})  # known only when the card is made
    write_views(store, run_dir / "card")
    sft = pq.read_table(run_dir / "card" / "data" / "sft" / "train-00000.parquet").to_pylist()
    assert secret in json.dumps(sft)  # marked shards are taken as written (push scans what leaves)

    old = store.table_dir("trajectories") / "old-r0-000000.parquet"
    pq.write_table(
        S.to_batch("trajectories", [{"traj_id": "y", "task_id": "a", "status": "completed", "messages": said}]),
        old,
    )
    relist(store, old, "trajectories")
    assert not store.redacted("trajectories")
    write_views(store, run_dir / "card")
    sft = pq.read_table(run_dir / "card" / "data" / "sft" / "train-00000.parquet").to_pylist()
    assert len(sft) == 2 and secret not in json.dumps(sft) and REDACTED in json.dumps(sft)


class _Quoting(StageConfig):
    servers_config: ServersFile[str | None] = None


def _quote_the_env(ctx, cfg):
    raise UserError(f"the server said: {json.loads(Path(cfg.servers_config).read_text())['mcpServers']}")


def test_an_error_leaving_a_stage_is_redacted_with_the_stages_secrets(tmp_path):
    """A stage's error may quote its servers file (a server's stderr, a bad value): it leaves the runner with
    the secrets that file holds redacted, though the environment never held them."""
    from trajkit.runner import StageSpec, run_stage

    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"shop": {"command": "x", "env": {"SHOP_TOKEN": INLINE}}}}))
    spec = StageSpec("test.quote", _Quoting, _quote_the_env)
    with pytest.raises(UserError) as e:
        run_stage(Store(tmp_path / "run", create=True), spec, _Quoting(servers_config=str(servers)), quiet=True)
    assert INLINE not in str(e.value) and REDACTED in str(e.value)
