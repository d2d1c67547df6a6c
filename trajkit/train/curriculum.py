"""Curriculum files: one YAML listing GRPO stages, each run as a resumable stage ``grpo-<name>``.

::

    model: ${run}/models/sft          # starting weights of the first stage
    defaults:                         # merged under every stage (a stage's keys win)
      grpo: {num_generations: 8, max_completion_length: 256}
      rewards: [{name: correctness}, {name: format, weight: 0.1}]
    stages:
      - name: broad
        data: {stage: broad}
        steps: 200
      - name: hard
        data: {stage: hard, difficulty: [hard, medium]}
        steps: 100
        generation_steps: 4           # on a GPU: four steps' completions per generate call
        grpo: {learning_rate: 5.0e-7}

Stage n+1 starts from stage n's saved weights (``RUN/models/grpo-<n>/``, full
safetensors); the optimizer starts fresh. Every stage's config is validated,
and every ``grpo:`` key checked against ``GRPOConfig``, before the first stage starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from trajkit.config import StageConfig, build, format_errors, merge, read_yaml
from trajkit.errors import UserError
from trajkit.train.grpo import GRPOStageConfig, check_grpo_mapping

PREFIX = "grpo-"


class CurriculumFile(StageConfig):
    """The top level of a curriculum file."""

    model: str = Field(description="Starting weights of the first stage.")
    tokenizer: str | None = None
    defaults: dict[str, Any] = Field(default_factory=dict, description="Stage keys merged under every stage.")
    stages: list[dict[str, Any]] = Field(min_length=1, description="The stages, in order; each needs a name.")


def stage_name(name: str) -> str:
    return PREFIX + name


def load_curriculum(path: str | Path, run: str | Path, overrides: list[str] = ()) -> list[tuple[str, GRPOStageConfig]]:
    """Validate a curriculum file -> [(runner stage name, config)]; every problem reported at once.

    ``${run}`` in strings is the run directory; ``overrides`` are ``NAME.key=value``
    for the stage NAME (or ``*.key=value`` for every stage).
    """
    from trajkit.pipeline import substitute

    data = substitute(read_yaml(path), {"run": str(run)}, str(path))
    try:
        top = CurriculumFile.model_validate(data)
    except ValidationError as e:
        raise UserError(format_errors(e, str(path))) from None
    plan, errors, seen = [], [], set()
    model = top.model
    for i, entry in enumerate(top.stages):
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            errors.append(f"stages[{i}]: needs a 'name'")
            continue
        if name in seen:
            errors.append(f"stages[{i}]: duplicate stage name {name!r}")
        seen.add(name)
        body = merge(top.defaults, {k: v for k, v in entry.items() if k != "name"})
        body.setdefault("model", model)
        if top.tokenizer:
            body.setdefault("tokenizer", top.tokenizer)
        mine = [o.split(".", 1)[1] for o in overrides if o.split(".", 1)[0] in (name, "*") and "." in o]
        try:
            cfg = build(GRPOStageConfig, body, overrides=mine, where=f"stage {name!r}")
        except UserError as e:
            errors.append(str(e))
            continue
        errors += check_grpo_mapping(cfg.grpo, f"stage {name!r} grpo")
        plan.append((stage_name(name), cfg))
        model = cfg.output_dir or str(Path(run) / "models" / stage_name(name))
    if errors:
        raise UserError(f"{path}: {len(errors)} problem(s): " + " | ".join(errors))
    return plan


def run_curriculum(path: str | Path, run: str | Path, overrides: list[str] = (), fresh: bool = False) -> list[dict]:
    """Run every stage of a curriculum in order; completed stages are skipped, so a rerun resumes.

    Under ``accelerate launch`` every process runs the stages (training is
    collective) but only the main process writes the store.
    """
    from trajkit.stages import get_stage
    from trajkit.store import Store
    from trajkit.train.launch import run_on_every_rank

    plan = load_curriculum(path, run, overrides)
    store = Store(run, create=True)
    spec = get_stage("train.grpo")
    manifests = [run_on_every_rank(store, spec, cfg, name, fresh) for name, cfg in plan]
    return [m for m in manifests if m is not None]
