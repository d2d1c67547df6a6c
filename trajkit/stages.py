"""The stage registry: every stage by kind, and custom stages by dotted path.

Stage modules are imported only when a stage is used, so the registry sits below
the stages (it names them as strings) and both the pipeline runner and the
executors look stages up here.
"""

from __future__ import annotations

from trajkit.config import load_object
from trajkit.errors import UserError
from trajkit.runner import StageSpec

# kind -> "module:ATTRIBUTE" of a StageSpec; imported only when used.
REGISTRY: dict[str, str] = {
    "synth.harvest": "trajkit.synth.harvest:HARVEST",
    "synth.tasks": "trajkit.synth.tasks:TASKS",
    "synth.rollouts": "trajkit.synth.rollouts:ROLLOUTS",
    "synth.judge": "trajkit.synth.judge:JUDGE",
    "synth.filter": "trajkit.synth.filters:FILTER",
    "synth.extend": "trajkit.synth.extend:EXTEND",
    "curate.import": "trajkit.curate.imports:IMPORT",
    "curate.verify": "trajkit.curate.verify:VERIFY",
    "curate.traces": "trajkit.curate.traces:TRACES",
    "curate.passk": "trajkit.curate.passk:PASSK",
    "curate.dedup": "trajkit.curate.dedup:DEDUP",
    "curate.decontaminate": "trajkit.curate.decontaminate:DECONTAMINATE",
    "curate.filter": "trajkit.curate.filters:FILTER",
    "curate.split": "trajkit.curate.splits:SPLIT",
    "curate.curriculum": "trajkit.curate.curriculum:CURRICULUM",
    "train.sft": "trajkit.train.sft:SFT",
    "train.grpo": "trajkit.train.grpo:GRPO",
    "eval.passk": "trajkit.eval.passk:EVAL_PASSK",
    "eval.tools": "trajkit.eval.tools:EVAL_TOOLS",
    "eval.diversity": "trajkit.eval.diversity:EVAL_DIVERSITY",
    "card": "trajkit.data_cards.card:CARD",
}


def get_stage(kind: str) -> StageSpec:
    """A registered stage by kind, or a custom one by dotted path (``pkg.module:SPEC``)."""
    if kind in REGISTRY:
        return load_object(REGISTRY[kind], "stage")
    if ":" in kind:
        spec = load_object(kind, "stage")
        if not isinstance(spec, StageSpec):
            raise UserError(f"stage {kind!r} is not a trajkit.runner.StageSpec")
        return spec
    raise UserError(f"unknown stage {kind!r}; known: {', '.join(sorted(REGISTRY))}, or a dotted path to a StageSpec")
