"""Fixtures of tests/models: the real model `make setup` converts."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "models"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct, Q4_1 dequantized, as `make setup` converted it (converted here, once, without setup)."""
    from trajkit.models.gguf import smollm2

    return smollm2(cache=CACHE)
