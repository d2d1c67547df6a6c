"""The README's CLI tour, run as written: its HumanEval lines (import, dedup, decontaminate,
split) are read from README.md, so the test fails when the README and the commands drift."""

from __future__ import annotations

import shlex
from pathlib import Path

from typer.testing import CliRunner

from trajkit.cli import app
from trajkit.store import Store

README = Path(__file__).resolve().parent.parent / "README.md"
HUMANEVAL_TOUR = ("curate import", "curate dedup", "curate decontaminate", "curate split")


def tour_lines() -> dict[str, list[str]]:
    """The CLI tour's commands (the first ``trajkit`` line of each ``trajkit A B`` in the section), as argv."""
    section = README.read_text().split("## CLI tour", 1)[1].split("\n## ", 1)[0]
    out: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("trajkit "):
            argv = shlex.split(line.split("#", 1)[0])[1:]
            out.setdefault(" ".join(argv[:2]), argv)
    return out


def test_the_humaneval_tour_splits_the_tasks_it_imported(tmp_path, monkeypatch):
    lines = tour_lines()
    assert "--preset" in lines["curate import"] and "humaneval" in lines["curate import"]
    monkeypatch.chdir(tmp_path)  # runs/x, as a user in a fresh folder
    for command in HUMANEVAL_TOUR:
        result = CliRunner().invoke(app, lines[command], catch_exceptions=False)
        assert result.exit_code == 0, (lines[command], result.output)
    store = Store(tmp_path / "runs" / "x")
    imported = store.count("tasks")
    assert imported == 164 and store.count("rejected") == 0
    assert store.count("splits") == imported
    sides = {r["split"] for r in store.rows("splits")}
    assert sides == {"train", "held_out"}
