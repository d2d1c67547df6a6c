"""The recording proxy (`trajkit model serve --record`): pass-through, streaming, vLLM's token ids asked for and
stripped, no credentials kept, the Responses API refused in one line, and nothing lost on SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.test_cli import ROOT, trajkit
from tests.test_user_errors import user_error
from trajkit.curate.trace_files import recorded_calls
from trajkit.errors import UserError
from trajkit.models.calllog import CallLog, log_path, read_log
from trajkit.models.record import RESPONSES_HINT, RecordingProxy
from trajkit.models.scripted_server import Fault, ScriptedServer

KEY = "plainkey-4f9a2c1e7b"  # a key no redaction pattern knows: absent from the run because it is never written


def post(base_url: str, path: str, body: dict | bytes, headers: dict | None = None) -> tuple[int, bytes]:
    """A raw POST: the status and the body's exact bytes."""
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", url.path + path, data, {"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    out = response.status, response.read()
    conn.close()
    return out


def answer(messages, tools, body):
    if messages[-1]["role"] == "tool":
        return f"It is {messages[-1]['content']}."
    return {"content": None, "tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]}


class VLLMStandIn(ScriptedServer):
    """vLLM's fields as vLLM writes them: ``prompt_token_ids``, each choice's ``token_ids`` and ``logprobs``
    are always there, null unless the request asked (``return_token_ids``, ``logprobs``); /v1/models says vllm.
    Deterministic ids and times, so two answers to one request are the same bytes."""

    owned_by = "vllm"

    def _complete(self, body, index):
        out = super()._complete(body, index)
        asked = body.get("return_token_ids") is True
        out["id"], out["created"] = "chatcmpl-fixed", 0
        for choice in out["choices"]:
            choice["logprobs"] = choice["logprobs"] if body.get("logprobs") else None
            choice["token_ids"] = choice.get("token_ids") if asked else None
        ids = out.pop("prompt_token_ids", None)
        out["prompt_token_ids"] = ids if asked else None
        return out


def vllm_answer(messages, tools, body):
    """Text with its token ids, logprobs and the prompt's ids, as a vLLM server returns them."""
    return {
        "content": "Sunny in Oslo.",
        "token_ids": [11, 12, 13],
        "logprobs": [-0.5, -0.25, -0.125],
        "prompt_token_ids": [1, 2, 3, 4],
    }


def test_calls_pass_through_unchanged_and_are_recorded_without_credentials(run_dir):
    body = {"model": "scripted", "messages": [{"role": "user", "content": "weather?"}]}
    with ScriptedServer(answer) as up, RecordingProxy(up.base_url, run_dir) as proxy:
        status, via = post(proxy.base_url, "/chat/completions", body, {"Authorization": f"Bearer {KEY}"})
        assert status == 200
        assert up.requests[-1]["headers"]["Authorization"] == f"Bearer {KEY}"  # the upstream gets the agent's key
        streamed = post(proxy.base_url, "/chat/completions", {**body, "stream": True})[1]
    sent = json.loads(via)
    assert sent["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "weather"
    assert streamed.startswith(b"data: ") and streamed.endswith(b"data: [DONE]\n\n")
    records, _ = read_log(log_path(run_dir))
    assert [r.event for r in records] == ["start", "end", "start", "end"]
    assert json.loads(records[0].body) == body and records[1].body == via  # as sent, as received
    assert records[3].body == streamed
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files and not any(KEY.encode() in p.read_bytes() for p in files)
    assert oct(log_path(run_dir).stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("stream", [False, True])
def test_a_vllm_upstream_is_asked_for_token_ids_and_the_agent_gets_the_bytes_it_would_without(run_dir, stream):
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "stream": stream}
    with VLLMStandIn(vllm_answer) as up:
        direct = post(up.base_url, "/chat/completions", body)[1]  # the upstream's answer to the agent's request
        with RecordingProxy(up.base_url, run_dir) as proxy:
            assert any("asking the upstream for token ids" in n for n in proxy.notes())
            status, via = post(proxy.base_url, "/chat/completions", body)
        asked = up.chat_requests[-1]
    assert status == 200 and via == direct
    assert asked["return_token_ids"] is True and asked["logprobs"] is True  # what the proxy added
    [call], _ = recorded_calls(run_dir)
    assert call.request == body  # recorded as the agent sent it
    [completion] = call.completions
    assert completion.token_ids == [11, 12, 13] and completion.prompt_token_ids == [1, 2, 3, 4]
    assert completion.logprobs == [-0.5, -0.25, -0.125]


def test_the_agent_asking_for_logprobs_itself_gets_them(run_dir):
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "logprobs": True}
    with VLLMStandIn(vllm_answer) as up, RecordingProxy(up.base_url, run_dir) as proxy:
        sent = json.loads(post(proxy.base_url, "/chat/completions", body)[1])
        assert up.chat_requests[-1]["return_token_ids"] is True
    assert sent["choices"][0]["logprobs"]["content"][0]["logprob"] == -0.5  # the agent's own field stays
    assert sent["choices"][0]["token_ids"] is None and sent["prompt_token_ids"] is None  # the proxy's is nulled


def test_token_ids_are_not_asked_of_an_upstream_that_is_not_vllm(run_dir):
    with ScriptedServer(answer) as up, RecordingProxy(up.base_url, run_dir) as proxy:
        post(proxy.base_url, "/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "?"}]})
        assert "return_token_ids" not in up.chat_requests[-1]


async def test_a_stream_reaches_the_agent_as_the_upstream_sends_it(run_dir):
    """The upstream sends one event and waits; the agent reads that event through the proxy meanwhile."""
    first, rest = b'data: {"choices": []}\n\n', b"data: [DONE]\n\n"
    gate = asyncio.Event()

    async def upstream(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(first), first))
        await writer.drain()
        await gate.wait()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(rest), rest))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with RecordingProxy(f"http://127.0.0.1:{port}/v1", run_dir, token_ids="off") as proxy:
        url = urlsplit(proxy.base_url)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        data = b'{"model": "m", "messages": [], "stream": true}'
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert b"text/event-stream" in head
        size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)).strip(), 16)
        assert await asyncio.wait_for(reader.readexactly(size), 10) == first  # before the upstream finished
        gate.set()
        tail = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 10)
        assert rest in tail
        writer.close()
    server.close()


async def test_calls_go_on_after_the_upstream_restarts(run_dir):
    """Connections kept alive to an upstream that restarted are all closed: the next call opens a new one."""
    canned = json.dumps({"choices": [], "usage": {}}).encode()
    connections = []

    async def upstream(reader, writer):
        connections.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(int(re.search(rb"(?i)content-length: *(\d+)", head)[1]))
                await asyncio.sleep(0.2)  # slow enough that calls at once take connections of their own
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(canned), canned))

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    body = {"model": "m", "messages": [{"role": "user", "content": "?"}]}
    with RecordingProxy(f"http://127.0.0.1:{port}/v1", run_dir, token_ids="off") as proxy:
        calls = [asyncio.to_thread(post, proxy.base_url, "/chat/completions", body) for _ in range(3)]
        assert [s for s, _ in await asyncio.gather(*calls)] == [200, 200, 200]
        assert len(connections) == 3
        server.close()  # the restart: every connection goes
        for writer in connections:
            writer.close()
        await server.wait_closed()
        server = await asyncio.start_server(upstream, "127.0.0.1", port)
        assert (await asyncio.to_thread(post, proxy.base_url, "/chat/completions", body))[0] == 200
    server.close()


def test_a_responses_api_call_is_answered_with_the_setting_that_switches_to_chat_completions(run_dir):
    with ScriptedServer(answer) as up, RecordingProxy(up.base_url, run_dir) as proxy:
        status, data = post(proxy.base_url, "/responses", {"model": "m", "input": "hi"})
        assert up.requests == [r for r in up.requests if r["path"].endswith("/models")]  # nothing reached it
    assert status == 400 and json.loads(data)["error"]["message"] == RESPONSES_HINT
    assert "set_default_openai_api" in RESPONSES_HINT and "\n" not in RESPONSES_HINT


def test_an_upstream_that_does_not_answer_is_a_502_recorded_as_a_failed_call(run_dir):
    with RecordingProxy("http://127.0.0.1:9/v1", run_dir, token_ids="off") as proxy:
        body = {"model": "m", "messages": [{"role": "user", "content": "?"}]}
        status, data = post(proxy.base_url, "/chat/completions", body)
    assert status == 502 and "the upstream did not answer" in json.loads(data)["error"]["message"]
    [call], _ = recorded_calls(run_dir)
    assert call.status == "failed" and "did not answer" in call.error


def test_one_proxy_records_into_a_run_at_a_time(run_dir):
    with (
        ScriptedServer(answer) as up,
        RecordingProxy(up.base_url, run_dir, token_ids="off"),
        pytest.raises(UserError, match="another proxy is recording into this run"),
    ):
        RecordingProxy(up.base_url, run_dir, token_ids="off").start()


def test_a_run_that_cannot_be_recorded_into_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot record there"):
        RecordingProxy("http://127.0.0.1:9/v1", tmp_path / "file", token_ids="off").start()


def test_a_torn_last_record_is_moved_aside_and_the_log_goes_on(run_dir):
    log = CallLog(run_dir, fsync="never")
    log.start("a-1", b'{"messages": []}')
    log.end("a-1", b"{}", status=200)
    log.close()
    whole = log_path(run_dir).read_bytes()
    with open(log_path(run_dir), "ab") as f:
        f.write(b'{"e":"start","id":"a-2","t":0,"n":500}\n{"messa')  # a write cut short by a crash
    log = CallLog(run_dir, fsync="never")
    log.close()
    assert log_path(run_dir).read_bytes() == whole
    assert (log_path(run_dir).parent / f"calls.log.torn-{len(whole)}").read_bytes().startswith(b'{"e":"start"')


def test_with_fsync_always_a_call_goes_on_once_its_record_is_on_disk_and_calls_in_flight_share_flushes(
    run_dir, monkeypatch
):
    from trajkit.models import calllog

    flushed: list[int] = []  # the log's size at each fsync
    fsync = os.fsync

    def slow_disk(fd: int) -> None:
        time.sleep(0.02)
        fsync(fd)
        flushed.append(os.fstat(fd).st_size)

    monkeypatch.setattr(calllog.os, "fsync", slow_disk)
    early = []

    def script(messages, tools, body):
        if messages[-1]["content"].encode() not in log_path(run_dir).read_bytes()[: max(flushed, default=0)]:
            early.append(messages[-1]["content"])  # forwarded before its record was flushed
        return "ok"

    with ScriptedServer(script) as up, RecordingProxy(up.base_url, run_dir, fsync="always", token_ids="off") as proxy:
        bodies = [{"model": "m", "messages": [{"role": "user", "content": f"call-{i:03d}"}]} for i in range(16)]
        with ThreadPoolExecutor(16) as pool:
            assert {s for s, _ in pool.map(lambda b: post(proxy.base_url, "/chat/completions", b), bodies)} == {200}
        flushes = len(flushed)
    assert early == []
    assert flushes < 32  # 16 calls wrote 32 records: calls in flight at once shared a flush


def _serve(run: Path, upstream: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "trajkit.cli", "model", "serve", "--record", "--upstream", upstream]
    proc = subprocess.Popen(
        [*cmd, "--run", str(run), "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    assert " at http" in line, proc.stderr.read()
    return proc, line.split(" at ")[1].split()[0]


def test_a_call_in_flight_when_the_proxy_is_killed_becomes_an_aborted_row(run_dir):
    """SIGKILL in the middle of a call: the calls before it are whole, and on restart it is marked lost, so
    `curate traces` writes its trajectory with status aborted (interrupted)."""
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    question = [{"role": "user", "content": "weather in Oslo?"}]
    with ScriptedServer(answer, faults={1: Fault.stall(60)}) as up:
        proc, url = _serve(run_dir, up.base_url)
        try:
            first = json.loads(post(url, "/chat/completions", {"model": "m", "messages": question, "tools": tools})[1])
            call = first["choices"][0]["message"]
            follow = [
                *question,
                call,
                {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "sunny"},
            ]
            body = {"model": "m", "messages": follow, "tools": tools}
            threading.Thread(target=lambda: _quietly(post, url, "/chat/completions", body), daemon=True).start()
            deadline = time.monotonic() + 20
            while sum(r.event == "start" for r in read_log(log_path(run_dir))[0]) < 2:
                assert time.monotonic() < deadline, "the second call was never logged"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        again, _ = _serve(run_dir, up.base_url)
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=20) == 0
        assert "1 call(s) a previous proxy left unfinished are marked lost" in again.stderr.read()
    trajkit("curate", "traces", "--run", str(run_dir))
    from trajkit.store import Store

    [row] = Store(run_dir).rows("trajectories")
    assert (row["status"], row["reason_code"]) == ("aborted", "interrupted")
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool"]
    assert row["messages"][2]["content"] == "sunny" and row["num_turns"] == 1


def _quietly(fn, *args):
    try:
        fn(*args)
    except OSError:  # the proxy was killed under the request
        pass


def test_model_serve_record_needs_an_upstream_and_a_run(run_dir):
    message = user_error("model", "serve", "--record", "--run", str(run_dir))
    assert "--record goes with --upstream URL and --run DIR" in message
