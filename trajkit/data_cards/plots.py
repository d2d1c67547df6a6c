"""PNG plots of a card's statistics (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trajkit.data_cards.stats import CardStats

PlotFn = Callable[[Any, CardStats], "float | None"]  # draws; may return the left margin it needs


def render(stats: CardStats, out_dir: Path) -> dict[str, str]:
    """Draw every plot that has data; returns {plot name: file name}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):
        old.unlink()
    made: dict[str, str] = {}
    for name, has_data, draw in _PLOTS:
        if not has_data(stats):
            continue
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
        try:
            left = draw(ax, stats) or 0.12
            # fixed margins: tight_layout would draw every figure twice
            fig.subplots_adjust(left=left, right=0.97, top=0.9, bottom=0.14)
            fig.savefig(out_dir / f"{name}.png", metadata={"Software": None})
        finally:
            plt.close(fig)
        made[name] = f"{name}.png"
    return made


def _bars(
    ax: Any, labels: list[Any], values: list[float], title: str, ylabel: str, horizontal: bool = False
) -> float | None:
    """A bar chart; horizontal ones return the left margin their labels need."""
    labels = [str(x) for x in labels]
    ax.set_title(title)
    if horizontal:
        ax.barh(labels[::-1], values[::-1], color="#4C72B0")
        ax.set_xlabel(ylabel)
        return min(0.5, 0.05 + 0.0125 * max(len(x) for x in labels))
    ax.bar(labels, values, color="#4C72B0")
    ax.set_ylabel(ylabel)
    return None


def _grouped(ax: Any, groups: list[str], series: dict[str, dict[str, float]], title: str, ylabel: str) -> None:
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        xs = [j + i * width for j in range(len(groups))]
        ax.bar(xs, [values.get(g, 0.0) for g in groups], width=width, label=label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], groups)
    ax.set_ylim(0, 1)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)


def _difficulty(ax: Any, s: CardStats) -> None:
    _bars(ax, [r[0] for r in s.difficulty], [r[1] for r in s.difficulty], "Tasks by difficulty", "tasks")


def _passk(ax: Any, s: CardStats) -> None:
    groups = list(dict.fromkeys(r[0] for r in s.passk))
    series: dict[str, dict[str, float]] = {}
    for difficulty, k, value, _ in s.passk:
        series.setdefault(f"pass@{k}", {})[difficulty] = value
    _grouped(ax, groups, series, "pass@k by difficulty (curation)", "mean pass@k")


def _eval_passk(ax: Any, s: CardStats) -> None:
    groups = list(dict.fromkeys(r[1] for r in s.eval_passk))
    series: dict[str, dict[str, float]] = {}
    for model, difficulty, k, value, _ in s.eval_passk:
        series.setdefault(f"{model} pass@{k}", {})[difficulty] = value
    _grouped(ax, groups, series, "Evaluation pass@k by difficulty", "mean pass@k")


def _status(ax: Any, s: CardStats) -> None:
    _bars(ax, [r[0] for r in s.status], [r[1] for r in s.status], "Trajectories by status", "trajectories")


def _tools(ax: Any, s: CardStats) -> float | None:
    return _bars(ax, [r[0] for r in s.tools], [r[2] for r in s.tools], "Most called tools", "calls", horizontal=True)


def _servers(ax: Any, s: CardStats) -> float | None:
    return _bars(
        ax,
        [r[0] for r in s.servers_usage],
        [r[1] for r in s.servers_usage],
        "Tool calls by server",
        "calls",
        horizontal=True,
    )


def _turns(ax: Any, s: CardStats) -> None:
    _bars(ax, [r[0] for r in s.turns], [r[1] for r in s.turns], "Assistant turns per trajectory", "trajectories")


def _tool_calls(ax: Any, s: CardStats) -> None:
    _bars(ax, [r[0] for r in s.tool_calls], [r[1] for r in s.tool_calls], "Tool calls per trajectory", "trajectories")


def _tokens(ax: Any, s: CardStats) -> None:
    h = s.tokens
    ax.bar(
        h.edges[:-1],
        h.counts,
        width=(h.edges[1] - h.edges[0]) if len(h.edges) > 2 else 1.0,
        align="edge",
        color="#4C72B0",
    )
    ax.set_title("Tokens per trajectory (prompt + completion; last bin: p99 and above)")
    ax.set_xlabel("tokens")
    ax.set_ylabel("trajectories")


def _rejections(ax: Any, s: CardStats) -> float | None:
    rows = s.rejections[:20]
    return _bars(
        ax, [f"{r[0]}: {r[2]}" for r in rows], [r[3] for r in rows], "Rejected rows by reason", "rows", horizontal=True
    )


_PLOTS: list[tuple[str, Callable[[CardStats], bool], PlotFn]] = [
    ("difficulty", lambda s: bool(s.difficulty), _difficulty),
    ("passk_by_difficulty", lambda s: bool(s.passk), _passk),
    ("eval_passk", lambda s: bool(s.eval_passk), _eval_passk),
    ("trajectory_status", lambda s: bool(s.status), _status),
    ("tools", lambda s: bool(s.tools), _tools),
    ("servers", lambda s: bool(s.servers_usage), _servers),
    ("turns", lambda s: bool(s.turns), _turns),
    ("tool_calls", lambda s: bool(s.tool_calls), _tool_calls),
    ("tokens", lambda s: s.tokens is not None, _tokens),
    ("rejections", lambda s: bool(s.rejections), _rejections),
]
