"""`trajkit eval ...` sub-commands, generated from the stages' configs (see the README's flag table)."""

from __future__ import annotations

from typing import Any

from trajkit.clikit import stage_app, stage_command

app = stage_app()


def _report(printer: str) -> Any:
    """Print the stage's summary with ``trajkit.eval.report.<printer>`` (imported when a command runs)."""

    def report(manifest: dict[str, Any]) -> None:
        from trajkit.eval import report as reports

        getattr(reports, printer)(manifest["summary"])

    return report


stage_command(
    app,
    "eval.passk",
    "pass@k of one or two+ models on the held-out tasks, per difficulty bucket and overall (eval_passk).",
    aliases={"ks": ["--at"]},
    default_name="eval-passk",
    report=_report("print_passk"),
)
stage_command(
    app,
    "eval.tools",
    "Tool-call accuracy on held-out trajectories (or BFCL's AST categories), per tool and per server (eval_tools).",
    default_name="eval-tools",
    report=_report("print_tools"),
)
stage_command(
    app,
    "eval.diversity",
    "Semantic diversity, distinct-n and self-BLEU of a text column, per group and overall (no table written).",
    default_name="eval-diversity",
    report=_report("print_diversity"),
)
