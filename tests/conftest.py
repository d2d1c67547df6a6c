"""Shared test setup: offline Hugging Face, a fresh run directory, shared fixture plugins."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = ["tests.fixtures.models", "tests.fixtures.envs", "tests.fixtures.verify", "tests.fixtures.synth"]


@pytest.fixture
def run_dir(tmp_path):
    """An empty run directory."""
    d = tmp_path / "run"
    d.mkdir()
    return d
