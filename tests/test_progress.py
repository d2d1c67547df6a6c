"""Long stages print a plain progress line regularly when output is not a terminal."""

from __future__ import annotations

import time

from trajkit import progress
from trajkit.config import StageConfig
from trajkit.runner import StageSpec, run_stage
from trajkit.store import Store


class SlowConfig(StageConfig):
    n: int = 6


def run_slow(ctx, cfg: SlowConfig) -> dict:
    with ctx.progress(cfg.n, "items") as advance:
        for _ in range(cfg.n):
            time.sleep(0.1)
            advance(1)
    return {}


def test_plain_progress_lines_when_not_a_terminal(run_dir, monkeypatch, capsys):
    monkeypatch.setattr(progress, "PLAIN_PROGRESS_S", 0.05)
    run_stage(Store(run_dir), StageSpec("test.slow", SlowConfig, run_slow), SlowConfig())
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("slow items: ")]
    assert len(lines) >= 3, lines
    assert lines[-1].startswith("slow items: 6 of 6 in ")
