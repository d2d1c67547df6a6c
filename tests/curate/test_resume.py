"""Killed with SIGKILL mid-write and run again, import and dedup write exactly what a clean run writes."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.curate.helpers import run, write_jsonl
from trajkit.store import Store

ROOT = Path(__file__).resolve().parents[2]
N = 20_000  # two shards of the store's 10,000 rows: the kill lands between them


def _records() -> list[dict]:
    """Random questions; every tenth repeats an earlier one, exactly or with one word changed."""
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(3000)]
    texts: list[str] = []
    for i in range(N):
        if i % 10 == 9:
            words = texts[rng.randrange(i)].split()
            if i % 20 == 9:
                words[rng.randrange(len(words))] = "changed"
            texts.append(" ".join(words))
        else:
            texts.append(" ".join(rng.choice(vocab) for _ in range(rng.randint(20, 30))) + "?")
    return [{"id": f"p{i}", "q": t} for i, t in enumerate(texts)]


def _cli(run_dir: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "trajkit.cli", "curate", *args, "--run", str(run_dir)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _kill_after_first_shard(proc: subprocess.Popen, table_dir: Path, stage: str) -> None:
    """SIGKILL the process as soon as one complete shard of the stage is on disk and listed."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (table_dir.parent / "_stages").is_dir() and Store(table_dir.parent).shards(table_dir.name, stage):
            break
        time.sleep(0.005)
    assert proc.poll() is None, f"the stage finished before it could be killed: {proc.stderr.read()}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _shard_bytes(store: Store, table: str, stage: str) -> list[bytes]:
    return [p.read_bytes() for p in store.shards(table, stage)]


@pytest.fixture(scope="module")
def source_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("src") / "problems.jsonl", _records())


@pytest.fixture(scope="module")
def imported(tmp_path_factory, source_file) -> Store:
    """A clean, uninterrupted import of the source file."""
    store = Store(tmp_path_factory.mktemp("imported") / "run", create=True)
    run(store, "curate.import", path=str(source_file), fields={"question": "q", "id": "id"}, source="big")
    return store


def test_import_killed_mid_run_resumes_to_the_same_bytes(tmp_path, source_file, imported):
    args = ["import", "--path", str(source_file), "--map", "question=q", "--map", "id=id", "--source", "big"]
    killed = tmp_path / "killed"
    proc = _cli(killed, *args)
    _kill_after_first_shard(proc, killed / "tasks", "import")
    store = Store(killed)
    assert store.manifest("import") is None and 0 < store.count("tasks") < N
    rerun = _cli(killed, *args)
    assert rerun.wait(timeout=120) == 0, rerun.stderr.read()
    assert store.read("tasks").equals(imported.read("tasks"))
    assert _shard_bytes(store, "tasks", "import") == _shard_bytes(imported, "tasks", "import")


def test_dedup_killed_mid_run_resumes_to_the_same_bytes(tmp_path, imported):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    shutil.copytree(imported.root, killed)
    shutil.copytree(imported.root, clean)
    proc = _cli(killed, "dedup")
    _kill_after_first_shard(proc, killed / "dedup", "dedup")
    assert Store(killed).manifest("dedup") is None
    rerun = _cli(killed, "dedup")
    assert rerun.wait(timeout=120) == 0, rerun.stderr.read()
    run(Store(clean), "curate.dedup")
    a, b = Store(killed), Store(clean)
    for table in ("dedup", "rejected"):
        assert a.read(table, stage="dedup").equals(b.read(table, stage="dedup"))
        assert _shard_bytes(a, table, "dedup") == _shard_bytes(b, table, "dedup")
    assert a.count("dedup") == N and N // 20 <= a.count("rejected") <= N // 10
