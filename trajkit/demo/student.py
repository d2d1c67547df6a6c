"""``trajkit demo --student smollm2``: the reference fixture teaches, a real model learns.

The fixture (``trajkit.demo.fixture``) is served on loopback as an
OpenAI-compatible endpoint for the run's length and plays the teacher's roles:
task generator, judges, user simulator, and the agent whose trajectories are
the demonstrations SFT trains on. The student — SmolLM2-135M-Instruct, Q4_1
dequantized (``trajkit model smollm2``), or any model directory — is what
``train.sft`` and then ``train.grpo`` train, and ``eval.passk`` and
``eval.tools`` compare it before SFT, after SFT and after GRPO on the held-out
tool tasks, with the same seeds and settings.

The stages and their configs come from ``examples/demo.yaml`` (one source for
both demos): the synthesis and curation stages as they are, minus the warm-up,
the coding slice, decontamination, pass@k tagging, the curriculum and the card;
one GRPO stage on every train task; training and evaluation sized for a 135M
model on a CPU (``STUDENT_SFT``, ``STUDENT_GRPO``). The derived file is written to
``RUN/pipeline.yaml`` (it names that run's loopback teacher: rerun it with
``trajkit demo --student``, which serves the teacher again, not with ``trajkit
run``); the teacher's model name carries the fixture's code hash,
so a rerun after the fixture changed refuses the completed stages
(``--fresh`` starts over) instead of reusing answers of the old script.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from trajkit.config import read_yaml
from trajkit.errors import UserError

TEACHER_STAGES = ("synth.tasks", "synth.rollouts", "synth.judge", "synth.extend")
KEPT = ("synth.harvest", *TEACHER_STAGES, "curate.dedup", "synth.filter", "curate.split")
# a 135M model on 2 CPU cores, where a training sequence (~900 tokens, most of them the tools' schemas) takes
# 15-60 s: a few SFT steps and GRPO steps, few evaluation samples
STUDENT_SFT: dict[str, Any] = {
    "max_steps": 4,
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 2,
    "learning_rate": 1.0e-4,
    "seed": 0,
    "max_length": 2048,
}
STUDENT_GRPO: dict[str, Any] = {
    "num_generations": 2,
    "per_device_train_batch_size": 2,
    "max_tool_calling_iterations": 2,
    "learning_rate": 1.0e-5,
}
STUDENT_GRPO_STEPS = 2
STUDENT_EVAL_PASSK: dict[str, Any] = {"n": 2, "ks": [1, 2], "max_turns": 3, "max_tokens": 128}
STUDENT_EVAL_TOOLS: dict[str, Any] = {"limit": 4}


def student_model(name: str) -> Path:
    """The student's model folder: ``smollm2`` (fetched and converted once), or an existing model directory."""
    from trajkit.models.gguf import DEFAULT_CACHE, smollm2

    if name == "smollm2":
        return smollm2(cache=DEFAULT_CACHE)
    path = Path(name)
    if not (path / "config.json").is_file():
        raise UserError(f"--student {name!r}: give smollm2 or a local model directory (with config.json)")
    return path.resolve()


def student_pipeline(pipeline: str | Path, run: str | Path, student: Path, teacher: dict[str, Any]) -> Path:
    """Write ``RUN/pipeline.yaml``: ``pipeline``'s stages with the teacher's and the student's roles; its path."""
    from trajkit.pipeline import substitute

    data = read_yaml(pipeline)
    stages = {(s.get("name") or s["stage"].split(".")[-1]): s for s in data.get("stages") or []}
    kept = []
    for stage in (s for s in stages.values() if s["stage"] in KEPT):
        stage = copy.deepcopy(stage)
        config = stage.setdefault("config", {})
        if stage["stage"] in TEACHER_STAGES:
            config["model"] = dict(teacher)
        if stage["stage"] == "synth.extend":
            config["user_model"] = dict(teacher)
        kept.append(stage)
    try:
        sft, grpo = stages["sft"], stages["grpo-broad"]
        eval_passk, eval_tools = stages["eval-passk-before"]["config"], stages["eval-tools-before"]["config"]
    except KeyError as e:
        raise UserError(f"{pipeline}: --student needs the demo's stage {e.args[0]!r}") from None
    run_models = Path(run).resolve() / "models"
    base = {"model": str(student), "backend": "transformers", "max_batch_size": 32}
    models = [base, {**base, "model": str(run_models / "sft")}, {**base, "model": str(run_models / "grpo")}]
    kept += [
        {"stage": "train.sft", "config": {**sft["config"], "model": str(student), "sft": dict(STUDENT_SFT)}},
        {
            "stage": "train.grpo",
            "config": {
                **grpo["config"],
                "model": str(run_models / "sft"),
                "data": {"split": "train"},
                "steps": STUDENT_GRPO_STEPS,
                "grpo": {**grpo["config"]["grpo"], **STUDENT_GRPO},
            },
        },
        {"stage": "eval.passk", "name": "eval-passk", "config": {**eval_passk, **STUDENT_EVAL_PASSK, "models": models}},
        {"stage": "eval.tools", "name": "eval-tools", "config": {**eval_tools, **STUDENT_EVAL_TOOLS, "models": models}},
    ]
    out_data = {"stages": kept}
    out_data = substitute(out_data, {"here": str(Path(pipeline).resolve().parent)}, None)  # ${run}: when it runs
    out = Path(run) / "pipeline.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(out_data, sort_keys=False))
    return out


def run_student_demo(pipeline: str | Path, run: str | Path, student: str, fresh: bool, overrides: list[str]) -> None:
    """Serve the fixture as the teacher, run the derived pipeline, print the stage table and the student's table."""
    from trajkit.demo.fixture import NAME, ReferenceFixture
    from trajkit.demo.warmup import fixture_hash
    from trajkit.models.scripted_server import ScriptedServer
    from trajkit.pipeline import run_pipeline

    model = student_model(student)
    teacher_name = f"{NAME}@{fixture_hash()}"
    with ScriptedServer(ReferenceFixture(), model=teacher_name) as server:
        teacher = {"model": teacher_name, "backend": "openai", "base_url": server.base_url, "api_key_env": None}
        teacher["cache"] = False  # the fixture answers at once; its code hash is in its name
        path = student_pipeline(pipeline, run, model, teacher)
        run_pipeline(path, run, fresh=fresh, overrides=overrides)
    print_student(run, model)


def student_rows(run: str | Path, student: Path) -> list[dict[str, Any]]:
    """Per model (before SFT, after SFT, after GRPO): held-out tasks, samples, pass@1; on the held-out
    trajectories' turns, tool-call accuracy where the reference called a tool and abstention where it answered."""
    from trajkit.store import Store

    store = Store(run)
    present = set(store.tables())
    run_models = Path(run).resolve() / "models"
    labels = {str(student): "before SFT", str(run_models / "sft"): "after SFT", str(run_models / "grpo"): "after GRPO"}
    rows = {m: {"model": label} for m, label in labels.items()}
    if "eval_passk" in present:
        query = (
            "SELECT model, count(*) AS tasks, sum(samples) AS samples, sum(correct) AS correct, "
            "round(avg(list_filter(pass_at, lambda p: p.k = 1)[1].value), 3) AS pass_at_1 "
            "FROM eval_passk GROUP BY model"
        )
        for r in store.sql(query).to_pylist():
            rows.setdefault(r.pop("model"), {}).update(r)
    if "eval_tools" in present:
        call, answer = "FILTER (expected <> '[]')", "FILTER (expected = '[]')"  # a turn that called / that answered
        query = (
            f"SELECT model, count(*) {call} AS call_turns, round(avg(name_correct::INT) {call}, 3) AS name_acc, "
            f"round(avg(correct::INT) {call}, 3) AS call_acc, count(*) {answer} AS answer_turns, "
            f"round(avg(correct::INT) {answer}, 3) AS abstain_acc FROM eval_tools GROUP BY model"
        )
        for r in store.sql(query).to_pylist():
            rows.setdefault(r.pop("model"), {}).update(r)
    return [rows[m] for m in labels]


def print_student(run: str | Path, student: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from trajkit.demo.summary import stage_table
    from trajkit.store import Store

    console = Console()
    console.print(stage_table(Store(run)))
    columns = (
        "model",
        "tasks",
        "samples",
        "correct",
        "pass_at_1",
        "call_turns",
        "name_acc",
        "call_acc",
        "answer_turns",
        "abstain_acc",
    )
    table = Table(
        *columns,
        title="the student on held-out tool tasks (SmolLM2-135M-Instruct, Q4_1 dequantized, unless --student DIR)",
        title_justify="left",
    )
    for row in student_rows(run, student):
        table.add_row(*("-" if row.get(c) is None else str(row[c]) for c in columns))
    console.print(table)
