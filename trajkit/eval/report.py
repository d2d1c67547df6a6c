"""Evaluation summaries: computed from a stage's rows, kept in its manifest, printed with rich.

The CLI prints from the manifest, so a rerun of a completed stage (skipped by
the runner) shows the same report. Ordered parts are lists, not mappings:
manifests are written with sorted keys.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from trajkit.schema import DIFFICULTIES

TOP_TOOLS = 20


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


# ---------------------------------------------------------------- pass@k


def passk_report(rows: list[dict[str, Any]], models: list[str], ks: list[int]) -> list[dict[str, Any]]:
    """Mean pass@k per model and difficulty bucket, plus ``all``: one dict per (model, bucket).

    A task whose judged samples were fewer than k has no pass@k; it is left
    out of that k's mean (``tasks@k`` counts the tasks that have one).
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["model"], r["difficulty"] or "unknown"].append(r)
        groups[r["model"], "all"].append(r)
    order = [*DIFFICULTIES, "unknown", "all"]
    out = []
    for model in models:
        for bucket in order:
            members = groups.get((model, bucket))
            if not members:
                continue
            entry: dict[str, Any] = {"model": model, "difficulty": bucket, "tasks": len(members)}
            for k in ks:
                values = [p["value"] for r in members for p in r["pass_at"] or [] if p["k"] == k]
                entry[f"pass@{k}"] = _mean(values)
                entry[f"tasks@{k}"] = len(values)
            out.append(entry)
    return out


def print_passk(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from trajkit.progress import console

    ks, models = summary["ks"], summary["models"]
    table = Table("difficulty", "tasks", *(f"{m}\npass@{k}" for m in models for k in ks), title="pass@k")
    by_bucket: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for entry in summary["report"]:
        by_bucket[entry["difficulty"]][entry["model"]] = entry
    buckets = list(by_bucket)
    for i, bucket in enumerate(buckets):
        per_model = by_bucket[bucket]
        tasks = max(e["tasks"] for e in per_model.values())
        cells = [_fmt(per_model.get(m, {}).get(f"pass@{k}")) for m in models for k in ks]
        table.add_row(bucket, str(tasks), *cells, end_section=buckets[i + 1 : i + 2] == ["all"])
    Console().print(table)
    for warning in summary.get("same_model") or []:
        console().print(f"warning: {warning}", markup=False, highlight=False)  # one line, whatever the width


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


# ---------------------------------------------------------------- tool calls


def _accuracy(rows: list[dict[str, Any]]) -> dict[str, Any]:
    judged = [r for r in rows if r["correct"] is not None]
    calls = [r for r in judged if json.loads(r["expected"] or "null")]
    named = [r for r in calls if r["name_correct"]]
    abstain = [r for r in judged if json.loads(r["expected"] or "null") == []]
    return {
        "turns": len(rows),
        "judged": len(judged),
        "accuracy": _mean([float(r["correct"]) for r in judged]),
        "name_accuracy": _mean([float(bool(r["name_correct"])) for r in calls]),
        "args_accuracy": _mean([float(bool(r["args_correct"])) for r in named]),
        "abstention_accuracy": _mean([float(r["correct"]) for r in abstain]),
    }


def tools_report(rows: list[dict[str, Any]], models: list[str]) -> list[dict[str, Any]]:
    """Per model, in order: overall accuracy, by server, by expected tool (a turn counts for each tool it calls),
    and the reasons of wrong or unjudged turns, most frequent first."""
    out: list[dict[str, Any]] = []
    for model in models:
        mine = [r for r in rows if r["model"] == model]
        by_server: dict[str, list[dict[str, Any]]] = defaultdict(list)
        by_tool: dict[str, list[dict[str, Any]]] = defaultdict(list)
        reasons: dict[str, int] = defaultdict(int)
        for r in mine:
            by_server[r["server"] or "(abstention)"].append(r)
            for name in sorted({c["name"] for c in json.loads(r["expected"] or "null") or []}):
                by_tool[name].append(r)
            if r["reason"]:
                reasons[r["reason"].split(":")[0]] += 1
        tools = sorted(by_tool.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:TOP_TOOLS]
        out.append(
            {
                "model": model,
                "overall": _accuracy(mine),
                "servers": [{"server": s, **_accuracy(v)} for s, v in sorted(by_server.items())],
                "tools": [{"tool": t, **_accuracy(v)} for t, v in tools],
                "reasons": [[r, n] for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))],
            }
        )
    return out


def print_tools(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    columns = ("turns", "judged", "exact", "name", "args", "abstention")
    for rep in summary["models"]:
        table = Table("", *columns, title=f"tool-call accuracy: {rep['model']}")
        parts = [
            [("all", rep["overall"])],
            [(f"server {s['server']}", s) for s in rep["servers"]],
            [(f"tool {t['tool']}", t) for t in rep["tools"]],
        ]
        for items in parts:
            for i, (name, acc) in enumerate(items):
                table.add_row(
                    name,
                    str(acc["turns"]),
                    str(acc["judged"]),
                    *(
                        _fmt(acc[k], pct=True)
                        for k in ("accuracy", "name_accuracy", "args_accuracy", "abstention_accuracy")
                    ),
                    end_section=i == len(items) - 1,
                )
        console.print(table)
        if rep["reasons"]:
            console.print("reasons: " + ", ".join(f"{r} {n}" for r, n in rep["reasons"]), highlight=False)
    checker = summary.get("bfcl_checker")
    if checker:
        table = Table(
            "model",
            "category",
            "entries",
            "trajkit",
            "BFCL ast_checker",
            "disagree",
            title=f"BFCL {summary.get('bfcl_version', '')}",
        )
        for row in checker:
            table.add_row(
                row["model"],
                row["category"],
                str(row["entries"]),
                _fmt(row["trajkit"], True),
                _fmt(row["bfcl"], True),
                str(row["disagree"]),
            )
        console.print(table)


# ---------------------------------------------------------------- diversity


def print_diversity(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    overall = summary["overall"]
    metrics = [k for k in overall if k != "n"]
    table = Table("set", "texts", *metrics, title=f"diversity of {summary['table']}.{summary['column']}")
    table.add_row("all", str(overall["n"]), *(_fmt(overall[m]) for m in metrics), end_section=True)
    if "within_group_mean" in summary:
        mean = summary["within_group_mean"]
        table.add_row(
            f"mean of {summary['groups_count']} groups", "", *(_fmt(mean[m]) for m in metrics), end_section=True
        )
        for values in summary["groups"]:
            table.add_row(
                f"{summary['group_by']} = {values['group']}", str(values["n"]), *(_fmt(values[m]) for m in metrics)
            )
    Console().print(table)
