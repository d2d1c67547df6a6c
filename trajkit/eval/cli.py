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
    aliases={"ks": ["--at"]},
    default_name="eval-passk",
    report=_report("print_passk"),
)
stage_command(
    app,
    "eval.tools",
    default_name="eval-tools",
    report=_report("print_tools"),
)
stage_command(
    app,
    "eval.diversity",
    default_name="eval-diversity",
    report=_report("print_diversity"),
)
