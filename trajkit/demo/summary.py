"""``print_summary(run_dir)``: what ``trajkit demo`` prints when the pipeline is done.

Everything comes from the run directory (manifests and SQL over the tables),
so a rerun whose stages were all skipped prints the same summary.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

# (what it shows, the query): pasteable as `trajkit sql "<query>" --run <run>`
QUERIES = (
    (
        "difficulty buckets per source, with the held-out split",
        (
            "SELECT source, difficulty, split, count(*) AS tasks FROM tasks "
            "WHERE difficulty IS NOT NULL GROUP BY ALL ORDER BY ALL"
        ),
    ),
    (
        "the trajectories training would use: completed, not rejected, with their tools",
        (
            "SELECT traj_id, num_tool_calls, tools_called, final_answer FROM trajectories "
            "WHERE status = 'completed' AND reject_reason IS NULL ORDER BY traj_id LIMIT 10"
        ),
    ),
    (
        "why rows were dropped, per stage",
        "SELECT stage, table_name, reason, count(*) AS n FROM rejected GROUP BY ALL ORDER BY n DESC",
    ),
)


def print_summary(run_dir: str | Path) -> None:
    """Per-stage table, data and difficulty, training, evaluation before/after, the card, example queries."""
    from rich.console import Console

    from trajkit.store import Store

    store = Store(run_dir)
    console = Console()
    console.rule(f"trajkit demo: {run_dir}")
    console.print(stage_table(store))
    for title, rows in sections(store):
        console.print(_table(title, rows))
    card = Path(run_dir) / "card" / "README.md"
    if card.is_file():
        console.print(f"dataset card: [bold]{card}[/] (plots in {card.parent / 'plots'})")
    console.print("\ntry:")
    for what, query in QUERIES:
        console.print(f"  [dim]# {what}[/]", highlight=False, soft_wrap=True)
        console.print(
            f"  trajkit sql {shlex.quote(query)} --run {shlex.quote(str(run_dir))}", highlight=False, soft_wrap=True
        )


def stage_table(store: Any) -> Any:
    from rich.table import Table

    table = Table("stage", "kind", "seconds", "rows written", "tokens", title="stages", title_justify="left")
    total = 0.0
    for m in sorted(store.manifests(), key=lambda m: _started(store, m["stage"])):
        usage = m.get("usage", {})
        tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        rows = ", ".join(f"{t} {n}" for t, n in sorted(m.get("outputs", {}).items()) if n)
        table.add_row(m["stage"], m["kind"], f"{m['seconds']:.1f}", rows or "-", f"{tokens:,}" if tokens else "-")
        total += m["seconds"]
    table.add_section()
    table.add_row("total", "", f"{total:.1f}", "", "")
    return table


def _started(store: Any, stage: str) -> int:
    """When a stage started: its config file is written first (manifest times have one-second steps)."""
    path = store.stage_dir(stage) / "_config.json"
    return path.stat().st_mtime_ns if path.is_file() else 0


def sections(store: Any) -> list[tuple[str, list[dict[str, Any]]]]:
    """(title, rows) of each summary table whose tables exist in the run."""
    present = set(store.tables())
    queries = [
        (
            "tasks",
            "tasks",
            (
                "SELECT source, mode, count(*) AS tasks, count(*) FILTER (reject_reason IS NULL) AS kept, "
                "string_agg(DISTINCT reject_reason, '; ') AS rejected_for FROM tasks GROUP BY ALL ORDER BY ALL"
            ),
        ),
        (
            "trajectories",
            "trajectories",
            (
                "SELECT CASE WHEN parent_id IS NULL THEN 'first turn' ELSE 'follow-up' END AS kind, status, "
                "count(*) AS n, round(avg(num_tool_calls), 2) AS tool_calls, "
                "count(*) FILTER (reject_reason IS NULL AND status = 'completed') AS accepted "
                "FROM trajectories GROUP BY ALL ORDER BY ALL"
            ),
        ),
        (
            "difficulty (pass@k tagging)",
            "passk",
            (
                "SELECT source, difficulty, count(*) AS tasks, round(avg(pass_at_1), 3) AS pass_at_1 "
                "FROM tasks WHERE difficulty IS NOT NULL GROUP BY source, difficulty ORDER BY source, "
                "list_position(['unsolved', 'hard', 'medium', 'easy', 'trivial'], difficulty)"
            ),
        ),
        (
            "training",
            "train_metrics",
            (
                "SELECT stage, count(*) AS steps, round(first(loss ORDER BY step), 3) AS loss_first, "
                "round(last(loss ORDER BY step), 3) AS loss_last, round(avg(reward_mean), 3) AS reward_mean, "
                "round(avg(reward_std), 3) AS reward_std, round(avg(zero_variance_groups), 3) AS zero_variance "
                "FROM train_metrics GROUP BY stage ORDER BY min(metric_id IS NULL), stage"
            ),
        ),
        (
            "evaluation: pass@k on held-out tasks (before = demo-base, after = GRPO)",
            "eval_passk",
            (
                "SELECT model, count(*) AS tasks, sum(samples) AS samples, sum(correct) AS correct, "
                "round(avg(list_filter(pass_at, lambda p: p.k = 1)[1].value), 3) AS pass_at_1 "
                "FROM eval_passk GROUP BY model ORDER BY model"
            ),
        ),
        (
            "evaluation: tool calls replayed on held-out trajectories",
            "eval_tools",
            (
                "SELECT model, count(*) AS turns, round(avg(name_correct::INT), 3) AS name_acc, "
                "round(avg(correct::INT), 3) AS call_acc FROM eval_tools GROUP BY model ORDER BY model"
            ),
        ),
    ]
    return [(title, store.sql(sql).to_pylist()) for title, table, sql in queries if table in present]


def _table(title: str, rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(*(rows[0] if rows else ["(none)"]), title=title, title_justify="left")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row.values()))
    return table
