"""`trajkit model serve --script`: a stand-in OpenAI-compatible model from the CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.test_cli import ROOT


def weather(messages, tools, body):
    """Call the first tool once, then answer with the tool's result."""
    if messages[-1]["role"] == "tool":
        return f"It is {messages[-1]['content']}."
    return {"content": None, "tool_calls": [{"name": tools[0]["function"]["name"], "arguments": '{"city": "Oslo"}'}]}


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_model_serve_answers_chat_completions_with_tools():
    cmd = [sys.executable, "-m", "trajkit.cli", "model", "serve", "--script", "tests.models.test_serve:weather"]
    proc = subprocess.Popen([*cmd, "--port", "0", "--model", "stand-in"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        base_url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(base_url + "/models", timeout=10) as r:
            assert json.loads(r.read())["data"][0]["id"] == "stand-in"
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        first = _post(
            base_url + "/chat/completions",
            {"model": "stand-in", "messages": [{"role": "user", "content": "?"}], "tools": tools},
        )
        call = first["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {
            "city": "Oslo"
        }
        msgs = [
            {"role": "user", "content": "?"},
            first["choices"][0]["message"],
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ]
        second = _post(base_url + "/chat/completions", {"model": "stand-in", "messages": msgs, "tools": tools})
        assert second["choices"][0]["message"]["content"] == "It is sunny."
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


def test_model_serve_bad_script_is_a_user_error():
    proc = subprocess.run(
        [sys.executable, "-m", "trajkit.cli", "model", "serve", "--script", "tests.models.test_serve:nope"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "has no 'nope'" in proc.stderr


def test_model_serve_imports_the_script_from_the_current_directory(tmp_path):
    (tmp_path / "brain.py").write_text("answer = 'not a function'\n")
    trajkit = [str(Path(sys.executable).parent / "trajkit"), "model", "serve", "--script", "brain:answer"]
    proc = subprocess.run(trajkit, cwd=tmp_path, check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "'brain:answer' is not callable" in proc.stderr  # imported, then refused
