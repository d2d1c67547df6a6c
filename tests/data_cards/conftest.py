"""Fixtures for card and push tests: a rendered run (built once per session) and a fake Hub."""

from __future__ import annotations

import shutil

import pytest

from tests.data_cards.fake_hub import FakeHub
from tests.data_cards.runs import build_run
from trajkit.config import StageConfig
from trajkit.models.base import ModelSpec
from trajkit.runner import StageContext, StageSpec, run_stage

TOKEN = "hf_" + "T0kenForTheFakeHubOnly" * 2


class ToySynthConfig(StageConfig):
    model: ModelSpec
    temperature: float = 0.7


def _toy_synth(ctx: StageContext, cfg: ToySynthConfig) -> dict:
    """A stage that records usage, so the card's pipeline section has models, tokens and cost."""
    ctx.usage.add(prompt_tokens=1200, completion_tokens=345, cost=0.0125)
    ctx.counts["accepted"] = 40
    return {"note": "toy"}


TOY_SYNTH = StageSpec("synth.toy", ToySynthConfig, _toy_synth)


def render_card(run, **config):
    from trajkit.data_cards.card import CARD, CardConfig
    from trajkit.store import Store

    return run_stage(Store(run), CARD, CardConfig(**config), name="card", fresh=True, quiet=True)


@pytest.fixture(scope="session")
def carded_run(tmp_path_factory):
    """A run with every table the card reads, a stage manifest, and its rendered card. Read-only."""
    run = tmp_path_factory.mktemp("carded") / "run"
    store = build_run(run)
    run_stage(
        store,
        TOY_SYNTH,
        ToySynthConfig(model=ModelSpec(model="Qwen/Qwen3-8B", backend="openai")),
        name="synth-toy",
        quiet=True,
    )
    render_card(run, repo_id="alice/tool-traj", tags=["weather"])
    return run


@pytest.fixture
def run_copy(carded_run, tmp_path):
    """A private copy of the carded run that a test may change."""
    dest = tmp_path / "run"
    shutil.copytree(carded_run, dest)
    return dest


@pytest.fixture
def hub(monkeypatch):
    """A fake Hub on loopback; huggingface_hub online, LFS transfers (the fake does not speak Xet), our token."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with FakeHub() as fake:
        yield fake
