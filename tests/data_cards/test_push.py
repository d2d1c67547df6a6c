"""`trajkit push` against a fake Hub on loopback: the exact requests, secrets refused, resumable multi-commit pushes."""

from __future__ import annotations

import base64
import hashlib
import logging

import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from tests.data_cards.conftest import TOKEN
from tests.toy_stage import relist
from trajkit import schema as S
from trajkit.accepted import accepted_ids
from trajkit.data_cards import cli, layout
from trajkit.data_cards.push import push
from trajkit.errors import UserError
from trajkit.store import Store


def _planned(run) -> dict[str, bytes]:
    store = Store(run)
    return {f.path_in_repo: f.local.read_bytes() for f in layout.data_files(store) + layout.card_files(store)}


def test_push_creates_the_repo_and_commits_everything_once(carded_run, hub, capsys, caplog):
    caplog.set_level(logging.INFO)
    result = push(carded_run, "alice/tool-traj", private=True, endpoint=hub.url)
    planned = _planned(carded_run)

    assert result.commits == 1 and result.url == f"{hub.url}/datasets/alice/tool-traj"
    calls = hub.calls()
    assert calls[0] == ("POST", "/api/repos/create")
    assert hub.requests[0].body == {
        "name": "tool-traj",
        "organization": "alice",
        "visibility": "private",
        "type": "dataset",
    }
    assert calls[1] == ("POST", "/api/validate-yaml")  # the README's metadata is checked before anything is uploaded
    assert hub.requests[1].body["content"] == planned["README.md"].decode()
    assert calls[2] == ("POST", "/api/datasets/alice/tool-traj/preupload/main")
    assert sorted(f["path"] for f in hub.requests[2].body["files"]) == sorted(planned)
    assert calls[3] == ("POST", "/datasets/alice/tool-traj.git/info/lfs/objects/batch")
    lfs = {p: c for p, c in planned.items() if p.endswith((".parquet", ".png"))}
    puts = [r for r in hub.requests if r.method == "PUT"]
    assert sorted(r.path for r in puts) == sorted(f"/lfs/{hashlib.sha256(c).hexdigest()}" for c in lfs.values())
    assert calls[-1] == ("POST", "/api/datasets/alice/tool-traj/commit/main")
    assert [r.path for r in hub.requests if r.path.endswith("/commit/main")] == [
        "/api/datasets/alice/tool-traj/commit/main"
    ]

    commit = hub.requests[-1].body
    assert commit[0] == {"key": "header", "value": {"summary": "Upload run with trajkit", "description": ""}}
    ops = {line["value"]["path"]: line for line in commit[1:]}
    assert sorted(ops) == sorted(planned)
    assert ops["README.md"]["key"] == "file"
    assert base64.b64decode(ops["README.md"]["value"]["content"]) == planned["README.md"]
    assert all(
        ops[p]["key"] == "lfsFile" and ops[p]["value"]["oid"] == hashlib.sha256(c).hexdigest() for p, c in lfs.items()
    )

    repo = hub.repos["alice/tool-traj"]
    assert repo.private is True
    assert {p: c for p, (_, c) in repo.files.items()} == planned
    api_requests = [r for r in hub.requests if r.path.startswith(("/api/", "/datasets/"))]
    assert {r.authorization for r in api_requests} == {f"Bearer {TOKEN}"}
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err + caplog.text


def test_pushed_repo_loads_with_datasets_by_the_card_configs(carded_run, hub, tmp_path):
    import datasets

    push(carded_run, "alice/tool-traj", endpoint=hub.url)
    assert hub.repos["alice/tool-traj"].private is False
    clone = tmp_path / "clone"
    for path, (_, content) in hub.repos["alice/tool-traj"].files.items():
        (clone / path).parent.mkdir(parents=True, exist_ok=True)
        (clone / path).write_bytes(content)
    store = Store(carded_run)
    cache = tmp_path / "hf-cache"
    for config in ("trajectories", "passk"):
        ds = datasets.load_dataset(str(clone), config, split="train", cache_dir=str(cache))
        assert ds.num_rows == store.count(config)
    assert datasets.get_dataset_config_names(str(clone)) == ["sft", "rl", *store.tables()]
    sft = datasets.load_dataset(str(clone), split="train", cache_dir=str(cache))  # the default config
    assert sorted(sft["traj_id"]) == sorted(accepted_ids(store, "trajectories"))
    call = sft[0]["messages"][1]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["arguments"].startswith('{"city": ')


def test_dry_run_lists_the_exact_files_and_sends_nothing(carded_run, hub):
    lines: list[str] = []
    result = push(carded_run, "alice/tool-traj", dry_run=True, endpoint=hub.url, echo=lines.append)
    files = layout.data_files(Store(carded_run)) + layout.card_files(Store(carded_run))
    assert result.dry_run and result.url is None
    assert hub.requests == []
    assert lines[:-1] == [f"{f.size:>14,}  {f.path_in_repo}  <- {f.local}" for f in files]
    total = sum(f.size for f in files)
    assert (
        lines[-1].startswith(f"{len(files)} files, {total:,} bytes")
        and "1 commit(s) to datasets/alice/tool-traj" in lines[-1]
    )


def test_interrupted_multi_commit_push_resumes_without_reuploading(carded_run, hub):
    planned = _planned(carded_run)
    hub.fail_commit = 2
    with pytest.raises(UserError, match=r"failed at commit 2/\d+: .*rerun the same command to resume"):
        push(carded_run, "alice/tool-traj", endpoint=hub.url, files_per_commit=2)
    repo = hub.repos["alice/tool-traj"]
    first = list(repo.commits[0]["files"])
    assert len(repo.commits) == 1 and len(first) == 2 and all(p.startswith("data/") for p in first)

    seen = len(hub.requests)
    result = push(carded_run, "alice/tool-traj", endpoint=hub.url, files_per_commit=2)
    rerun = hub.requests[seen:]
    assert rerun[0].path == "/api/repos/create"  # 409: the repo exists, which is fine
    uploaded_again = {r.path for r in rerun if r.method == "PUT"}
    assert not uploaded_again & {f"/lfs/{hashlib.sha256(planned[p]).hexdigest()}" for p in first}
    committed = [c["files"] for c in repo.commits]
    assert committed[0] == first
    assert sorted(p for files in committed for p in files) == sorted(planned)  # every file committed exactly once
    assert committed[-1][0] == "README.md" and all(not p.startswith("data/") for p in committed[-1])
    assert all(len(files) <= 2 for files in committed[:-1])
    n = result.commits
    assert [c["summary"] for c in repo.commits] == [f"Upload run with trajkit (part {i}/{n})" for i in range(1, n + 1)]


def test_secret_in_a_shard_is_refused_before_any_request(run_copy, hub):
    secret = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7z" * 2
    build = Store(run_copy)
    rows = build.rows("trajectories")
    rows[17]["messages"][1]["tool_calls"][0]["arguments"] = f'{{"api_key": "{secret}"}}'
    (shard,) = build.shards("trajectories")  # rewritten by hand: the store would redact the key
    pq.write_table(S.to_batch("trajectories", rows), shard)
    relist(build, shard, "trajectories")  # as a trajkit that did not redact would have listed it
    with pytest.raises(UserError) as err:
        push(run_copy, "alice/tool-traj", endpoint=hub.url)
    message = str(err.value)
    assert "refusing to push alice/tool-traj: 1 possible secret(s)" in message
    assert "data/trajectories/rollouts-r0-000000.parquet column messages.tool_calls.arguments row 17" in message
    assert "OpenAI or Anthropic key" in message and secret not in message
    assert hub.requests == []


def test_secret_from_the_environment_in_the_card_is_refused(run_copy, hub, monkeypatch):
    value = "corp-internal-7f3a9c2e11"
    monkeypatch.setenv("ACME_SERVICE_PASSWORD", value)
    readme = run_copy / "card" / "README.md"
    readme.write_text(readme.read_text() + f"\nconnection: {value}\n")
    with pytest.raises(UserError, match=r"README\.md: value of \$ACME_SERVICE_PASSWORD") as err:
        push(run_copy, "alice/tool-traj", endpoint=hub.url)
    assert value not in str(err.value)
    assert hub.requests == []


def test_missing_token_card_or_bad_repo_id_are_user_errors(carded_run, run_dir, hub, monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(UserError, match="no Hugging Face token"):
        push(carded_run, "alice/tool-traj", endpoint=hub.url)
    with pytest.raises(UserError, match="user/name"):
        push(carded_run, "not a repo", endpoint=hub.url)
    Store(run_dir).write("tasks", "t", [{"task_id": "a", "mode": "imported"}])
    with pytest.raises(UserError, match="run `trajkit card"):
        push(run_dir, "alice/x", endpoint=hub.url)
    assert hub.requests == []


def test_push_cli(carded_run, hub):
    app = typer.Typer()
    app.command("card")(cli.card)
    app.command("push")(cli.push)
    result = CliRunner().invoke(app, ["push", "--run", str(carded_run), "--repo", "bob/data", "--endpoint", hub.url])
    assert result.exit_code == 0, result.output
    assert f"in 1 commit(s) to {hub.url}/datasets/bob/data" in result.output
    assert TOKEN not in result.output
    assert hub.repos["bob/data"].commits[0]["files"][-1].startswith("plots/")


def test_an_unreachable_hub_is_a_user_error_naming_it(carded_run, monkeypatch):
    """No network (here: a refused connection) is the user's environment: a UserError (one line, exit 2)
    naming the endpoint, not the HTTP library's traceback."""
    import socket

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends: nothing listens
    with pytest.raises(UserError) as err:
        push(carded_run, "a/b", endpoint=endpoint)
    message = str(err.value)
    assert "\n" not in message and TOKEN not in message
    assert message.startswith(f"push to a/b at {endpoint} failed at creating the repository: ConnectError")
