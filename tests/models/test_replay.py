"""`trajkit model serve --replay RUN_DIR`: a recorded run's calls served again, so the pipeline that made the
run runs again end to end without the model, into rows equal to the recorded run's."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request

from tests.fixtures.synth import pipeline_configs, with_servers
from tests.synth.compare import OUTPUTS, assert_same_output
from tests.test_cli import ROOT
from trajkit.models import ModelSpec, make_backend
from trajkit.models.base import Backend, Completion
from trajkit.models.cache import CachedBackend, CallCache
from trajkit.models.replay import ReplayServer, open_cache
from trajkit.store import Store


def _serve(*args: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "trajkit.cli", "model", "serve", *args, "--port", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert " at http" in line, proc.stderr.read()
    return proc, line.split(" at ")[1].split()[0]


def test_a_recorded_run_replayed_gives_the_same_rows(tmp_path, clean_pipeline, calculator_rows, model_server):
    replay, base_url = _serve("--replay", str(clean_pipeline))
    try:
        with urllib.request.urlopen(base_url + "/models", timeout=10) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == ["scripted"]
        stages = []
        for name, cfg in pipeline_configs(model_server).items():
            cfg = json.loads(json.dumps(cfg).replace(model_server.base_url, base_url))
            stages.append({"stage": f"synth.{name}", "config": cfg})
        pipeline = tmp_path / "pipeline.yaml"
        pipeline.write_text(json.dumps({"stages": stages}))  # YAML is a superset of JSON
        run = with_servers(tmp_path / "dry", calculator_rows)
        cmd = [sys.executable, "-m", "trajkit.cli", "run", str(pipeline), "--run", str(run)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        # a call that was never recorded is refused (4xx: the client does not retry it) and says why
        body = {"model": "scripted", "messages": [{"role": "user", "content": "never asked"}]}
        request = urllib.request.Request(base_url + "/chat/completions", json.dumps(body).encode())
        try:
            urllib.request.urlopen(request, timeout=10)
            raise AssertionError("an unrecorded call was answered")
        except urllib.error.HTTPError as e:
            assert e.code == 404 and "no recorded answer" in json.loads(e.read())["error"]["message"]
    finally:
        replay.send_signal(signal.SIGINT)
        assert replay.wait(timeout=10) == 0
    for name in OUTPUTS:
        assert_same_output(clean_pipeline, run, name)
    assert all(m["usage"]["served"] == {"scripted": "scripted"} for m in Store(run).manifests() if m["usage"]["calls"])


def test_replay_needs_a_recorded_cache(tmp_path):
    for args, message in (
        (["--replay", str(tmp_path)], "no recorded calls there"),
        (["--replay", str(tmp_path), "--script", "tests.models.test_serve:weather"], "one of --script"),
        ([], "one of --script"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "trajkit.cli", "model", "serve", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_stage_records_the_served_model_and_refuses_to_mix_models(tmp_path, calculator_rows, model_server, brain):
    """The endpoint left the config hash; what it reports serving (/v1/models) is recorded per stage, and a
    resume against an endpoint serving another model is refused in one line (exit 2) before any request."""
    from tests.test_cli import trajkit
    from trajkit.models.scripted_server import ScriptedServer

    run = with_servers(tmp_path / "run", calculator_rows)
    configs = pipeline_configs(model_server)
    config = tmp_path / "tasks.json"
    # one request at a time, so the budget stops the stage after some rows whatever the answers' lengths
    config.write_text(json.dumps({**configs["tasks"], "concurrency": 1}))
    args = ["synth", "tasks", "--run", str(run), "--config", str(config)]
    stopped = trajkit(*args, "--budget-tokens", "1500", check=False)
    assert stopped.returncode == 3 and Store(run).count("tasks")
    assert json.loads((run / "_stages" / "tasks" / "_served.json").read_text()) == {"scripted": "scripted"}
    with ScriptedServer(brain, model="other-weights") as other:
        refused = trajkit(*args, "--set", f"model.base_url={other.base_url}", check=False)
        assert not other.chat_requests
    error = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert error.startswith("error: model 'scripted': the endpoint serves 'other-weights', but this stage was run")
    # the same model at a moved endpoint (localhost for 127.0.0.1) resumes; the manifest says what was served
    trajkit(*args, "--set", f"model.base_url={model_server.base_url.replace('127.0.0.1', 'localhost')}")
    assert Store(run).manifest("tasks")["usage"]["served"] == {"scripted": "scripted"}


class _Recorded(Backend):
    """A local model that answers what it was asked (no weights loaded)."""

    name = "transformers"

    async def _generate(self, messages, tools, params):
        return [Completion(text=f"answer to {messages[-1]['content']}")]


def test_calls_of_a_local_model_with_template_kwargs_replay_without_its_directory(tmp_path):
    """A transformers run of a local model directory with chat_template_kwargs, replayed for the openai backend
    on a machine without that directory: the key's identity comes from the cache, the template kwargs from the
    request's chat_template_kwargs field; a model inside the recorded run answers to the same place inside
    another run. What cannot be found says why."""
    weights = tmp_path / "run" / "models" / "sft"  # ${run}/models/sft
    weights.mkdir(parents=True)
    (weights / "config.json").write_text('{"layers": 2}')
    kwargs = {"enable_thinking": False}
    local = ModelSpec(model=str(weights), backend="transformers", chat_template_kwargs=kwargs)
    asks = [[{"role": "user", "content": f"q{i}"}] for i in range(2)]

    async def record():
        backend = CachedBackend(_Recorded(local), CallCache(tmp_path / "run" / "_cache"))
        await asyncio.gather(*(backend.generate(a) for a in asks))
        await backend.aclose()

    asyncio.run(record())
    shutil.rmtree(weights)
    (tmp_path / "old").mkdir()  # a cache written before identities were kept
    with sqlite3.connect(tmp_path / "old" / "calls.sqlite") as db:
        db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, model TEXT, created REAL, completions TEXT)")
        db.execute("INSERT INTO calls VALUES ('k', '/gone/model', 0, '[]')")
    legacy = CallCache(tmp_path / "old")

    async def replay(spec: ModelSpec, messages):
        backend = make_backend(spec.model_copy(update={"max_retries": 0}))
        try:
            return await backend.generate(messages)
        finally:
            await backend.aclose()

    with ReplayServer(open_cache(tmp_path / "run")) as server:
        remote = local.model_copy(update={"backend": "openai", "base_url": server.base_url})
        assert [asyncio.run(replay(remote, a))[0].text for a in asks] == ["answer to q0", "answer to q1"]
        assert not server.notes()
        rerun = remote.model_copy(update={"model": str(tmp_path / "dry" / "models" / "sft")})  # into another run
        assert asyncio.run(replay(rerun, asks[1]))[0].text == "answer to q1"
        missed = asyncio.run(replay(remote, [{"role": "user", "content": "q9"}]))[0].error
        assert "no recorded call has this conversation" in missed
        other = remote.model_copy(update={"model": str(tmp_path / "dry" / "models" / "rl")})
        assert "/dry/models/rl' was never recorded" in asyncio.run(replay(other, asks[0]))[0].error
    assert "'/gone/model' were recorded before the cache kept" in ReplayServer(legacy).notes()[0]


def test_calls_that_sent_tool_media_replay(tmp_path):
    """With tool_media user_message the request carries the media as a user message: the replay keys it so."""
    from tests.models.test_openai_backend import SHOT

    spec = ModelSpec(model="vision", backend="openai", tool_media="user_message")

    async def record():
        backend = CachedBackend(_Recorded(spec), CallCache(tmp_path / "_cache"))
        await backend.generate(SHOT)
        await backend.aclose()

    async def replay(spec: ModelSpec):
        backend = make_backend(spec.model_copy(update={"max_retries": 0}))
        try:
            return (await backend.generate(SHOT))[0]
        finally:
            await backend.aclose()

    asyncio.run(record())
    with ReplayServer(open_cache(tmp_path)) as server:
        remote = spec.model_copy(update={"base_url": server.base_url})
        assert asyncio.run(replay(remote)).text == "answer to [audio audio/wav, 4 bytes, part 1]"
        assert "no recorded call" in asyncio.run(replay(remote.model_copy(update={"tool_media": "text"}))).error
