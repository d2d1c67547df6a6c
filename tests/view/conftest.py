"""A run built by the real stages for the viewer's tests, and the viewer serving it on loopback.

The synth stages run against a scripted model and the example calculator (the
synth tests' fixtures), then pass@k, the split, the curriculum, an evaluation of
two models (a second scripted model that answers worse), rollouts of the tiny
local model (token traces), and the card.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures.synth import model, stage
from tests.synth.brain import Brain
from trajkit.models.scripted_server import ScriptedServer
from trajkit.view.app import create_app
from trajkit.view.db import RunDB


@pytest.fixture(scope="session")
def viewed_run(tmp_path_factory, clean_pipeline, model_server, tiny_model_dir) -> Path:
    """A read-only run with every table the viewer shows; copy it before changing it."""
    run = tmp_path_factory.mktemp("viewed") / "run"
    shutil.copytree(clean_pipeline, run)
    good = model(model_server)
    stage(run, "curate.passk", {"model": good, "sources": ["synth"], "k": 2, "max_turns": 4}, name="passk")
    stage(run, "curate.split", {"held_out": 0.3})
    stage(run, "curate.curriculum", {"broad_difficulties": ["unsolved", "hard", "medium", "easy", "trivial"]})
    with ScriptedServer(Brain(garbage=0.7)) as worse:
        models = [{**good, "model": "scripted-good"}, {**model(worse), "model": "scripted-worse"}]
        stage(
            run,
            "eval.passk",
            {"models": models, "split": None, "n": 2, "ks": [1, 2], "max_turns": 4},
            name="eval-passk",
        )
    tiny = {"model": str(tiny_model_dir), "backend": "transformers", "device": "cpu"}
    stage(
        run, "synth.rollouts", {"model": tiny, "max_tokens": 12, "max_turns": 1, "pool_size": 1}, name="rollouts-tiny"
    )
    stage(run, "card", {"examples": 1})
    return run


@pytest.fixture
def run_copy(viewed_run, tmp_path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(viewed_run, dest)
    return dest


@pytest.fixture
def client(run_copy):
    """A test client of the app on a private copy of the run (reviewer alice)."""
    from starlette.testclient import TestClient

    with TestClient(create_app(RunDB(run_copy), "alice"), base_url="http://127.0.0.1") as c:
        yield c


class Served:
    """The app under uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app):
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
