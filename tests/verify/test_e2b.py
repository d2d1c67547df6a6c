"""The e2b backend against a fake e2b at the SDK's HTTP boundary, and live when E2B_API_KEY is set."""

from __future__ import annotations

import os
import sys

import pytest

from tests.verify.fake_e2b import ACCESS_TOKEN, SANDBOX_ID, FakeE2B, request_lines
from trajkit.errors import UserError
from trajkit.verify import E2BSandbox, make_sandbox, verify
from trajkit.verify.e2b_backend import _command

KEY = "e2b_test_key_0123"


def _pool(fake: FakeE2B, **kw) -> E2BSandbox:
    return E2BSandbox(workers=1, api_key=KEY, api_url=fake.url, sandbox_url=fake.url, http_version="1.1", **kw)


def test_runs_go_through_the_sdk_with_the_exact_requests():
    with FakeE2B() as fake, _pool(fake) as pool:
        first = pool.run("print(input()[::-1])", stdin="abc", timeout_s=5)
        second = pool.run("raise ValueError('bad')", timeout_s=5)
        pool.close()

        assert (first.verdict, first.stdout, first.finished) == ("pass", "cba\n", True)
        assert second.verdict == "fail" and second.exception == "ValueError: bad"
        assert request_lines(fake) == [
            "POST /v2/sandboxes",
            "POST /process.Process/Start",
            "POST /process.Process/Start",
            f"DELETE /sandboxes/{SANDBOX_ID}",
        ]
        create, start, _, kill = fake.requests
        assert create.body == {
            "templateID": "base",
            "timeout": 600,
            "allow_internet_access": False,
            "metadata": {"created_by": "trajkit.verify"},
            "envVars": {},
        }
        assert create.headers["x-api-key"] == KEY and create.headers["content-type"] == "application/json"
        assert start.headers["x-access-token"] == ACCESS_TOKEN
        assert start.headers["e2b-sandbox-id"] == SANDBOX_ID
        assert start.headers["authorization"] == "Basic dXNlcjo="  # user "user", no password
        assert start.headers["content-type"] == "application/connect+json"
        assert kill.headers["x-api-key"] == KEY
        sent = fake.starts[0].process
        expected = _command({"program": "print(input()[::-1])", "stdin": "abc", "timeout_s": 5, "memory_mb": 1024})
        assert (sent.cmd, list(sent.args), dict(sent.envs)) == ("/bin/bash", ["-l", "-c", expected], {})


def test_verifiers_work_on_the_e2b_backend():
    spec = {"test": "assert square(3) == 9", "timeout_s": 5}
    with FakeE2B() as fake, _pool(fake) as pool:
        good = verify({"kind": "unit_tests", "spec": spec}, "def square(x):\n    return x * x", sandbox=pool)
        bad = verify({"kind": "unit_tests", "spec": spec}, "def square(x):\n    return x + x", sandbox=pool)
        slow = verify(
            {"kind": "unit_tests", "spec": {**spec, "timeout_s": 0.5}}, "import time\ntime.sleep(5)", sandbox=pool
        )
    assert (good.verdict, bad.verdict, slow.verdict) == ("pass", "fail", "timeout")


def test_api_failures_become_error_verdicts():
    with FakeE2B(create_status=401) as fake, _pool(fake) as pool:
        r = pool.run("print(1)")
    assert r.verdict == "error" and "401" in r.reason
    assert request_lines(fake) == ["POST /v2/sandboxes"]


def test_a_key_and_the_extra_are_required_and_programs_must_fit_in_a_command(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(UserError, match="^the e2b sandbox needs an API key: set E2B_API_KEY$"):
        E2BSandbox().start()
    with pytest.raises(UserError, match="E2B_API_KEY"), make_sandbox("e2b", 2):
        pass
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "e2b", None)  # the extra is not installed
        with pytest.raises(UserError, match=r"needs the e2b extra: pip install 'trajkit\[e2b\]'"):
            E2BSandbox(api_key="k").start()
    monkeypatch.setenv("E2B_API_KEY", "k")
    assert E2BSandbox().run("x = '" + os.urandom(150_000).hex() + "'").verdict == "error"


@pytest.mark.live
@pytest.mark.skipif(not os.environ.get("E2B_API_KEY"), reason="live e2b: needs E2B_API_KEY and the network")
def test_live_e2b():
    with E2BSandbox(workers=1) as pool:
        r = pool.run("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="1 2 3", timeout_s=20)
        assert (r.verdict, r.stdout.strip()) == ("pass", "6")
        assert pool.run("while True: pass", timeout_s=2).verdict == "timeout"
