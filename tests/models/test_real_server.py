"""The openai backend against a real OpenAI-compatible server: ``transformers serve`` over the tiny model.

The server runs as ``transformers serve`` does for a user (its own process, the
command line, which stays stable across transformers releases), on a free
loopback port, offline.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from trajkit.models import ModelSpec, SamplingParams, make_backend
from trajkit.models.accounting import Usage
from trajkit.models.chat import render_prompt


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = Path(sys.executable).with_name("transformers")
    cmd = [str(cli), "serve", str(tiny_model_dir), "--device", "cpu", "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(cmd + ["--log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            if server.poll() is not None:
                pytest.fail(f"transformers serve exited {server.returncode}: {server.stderr.read().decode()[-2000:]}")
            try:
                httpx.get(f"{url}/models", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_the_openai_backend_talks_to_transformers_serve(served, tiny_model_dir, tiny_tokenizer, tmp_path):
    spec = ModelSpec(model=str(tiny_model_dir), backend="openai", base_url=served, timeout_s=60)
    messages = [{"role": "user", "content": "What is 1 + 2?"}]
    usage = Usage()

    async def main():
        backend = make_backend(spec, usage, tmp_path)
        try:
            return await backend.generate(messages, None, SamplingParams(n=2, max_tokens=6, seed=1))
        finally:
            await backend.aclose()

    out = asyncio.run(main())
    prompt = tiny_tokenizer.encode(render_prompt(tiny_tokenizer, messages, None), add_special_tokens=False)
    assert len(out) == 2  # the server ignores n: the backend asked again for the second sample
    for c in out:
        assert c.error is None and c.finish_reason in ("stop", "length")
        assert c.prompt_tokens == len(prompt)  # the server rendered the same chat template
        assert 0 < c.completion_tokens <= 6
    assert (usage.calls, usage.prompt_tokens) == (1, len(prompt))
    again = Usage()
    cached = asyncio.run(
        make_backend(spec, again, tmp_path).generate(messages, None, SamplingParams(n=2, max_tokens=6, seed=1))
    )
    assert [c.text for c in cached] == [c.text for c in out] and again.cached_calls == 1
