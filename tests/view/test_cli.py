"""`trajkit view` as a user starts it: one-line errors, and a real server that wants its token off loopback."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx

TRAJKIT = [sys.executable, "-m", "trajkit.cli", "view"]


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    done = subprocess.run([*TRAJKIT, "--run", str(tmp_path / "missing")], check=False, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "run directory not found" in done.stderr
    done = subprocess.run(
        [*TRAJKIT, "--run", str(tmp_path), "--port", "70000"], check=False, capture_output=True, text=True
    )
    assert done.returncode == 2 and "--port" in done.stderr
    (tmp_path / "_stages").mkdir()
    (tmp_path / "labels.yaml").write_text("labels:\n  - {name: gold, key: j, color: '#0a0'}\n")
    done = subprocess.run([*TRAJKIT, "--run", str(tmp_path)], check=False, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0  # a bad labels.yaml: nothing listens
    assert (
        "label 1 (gold): key 'j' is not one lowercase letter or digit of its own (the review flow's next)"
        in done.stderr
    )


def test_serving_beyond_loopback_prints_a_token_and_requires_it(viewed_run):
    # 127.0.0.2 is a loopback address but not the default one: the viewer treats it as "elsewhere"
    proc = subprocess.Popen(
        [*TRAJKIT, "--run", str(viewed_run), "--port", "0", "--host", "127.0.0.2"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        url = re.search(r"(http://127\.0\.0\.2:\d+/)\?token=(\S+)", line)
        assert url, line
        base, token = url.groups()
        with httpx.Client(base_url=base, timeout=10) as c:
            assert c.get("/tasks").status_code == 401
            assert c.get("/tasks", params={"token": token + "x"}).status_code == 401
            assert c.get("/tasks", params={"token": token}, follow_redirects=True).status_code == 200
            assert "matching" in c.get("/tasks").text  # the cookie carries the token
    finally:
        proc.terminate()
        proc.wait(10)
