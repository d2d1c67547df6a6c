"""`trajkit demo --student`: the pipeline derived from examples/demo.yaml validates and gives each role its model.

The student run itself is slow on a CPU (README, "The demo's student"); the suite runs the tiny default demo,
and the real model's path is covered by tests/models/test_gguf.py's smoke test.
"""

from __future__ import annotations

from pathlib import Path

from trajkit.demo.student import TEACHER_STAGES, student_pipeline
from trajkit.pipeline import load_pipeline

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.yaml"


def test_the_student_pipeline_gives_the_teacher_its_roles_and_trains_and_evaluates_the_student(tmp_path):
    run, student = tmp_path / "run", tmp_path / "student"
    teacher = {"model": "reference-fixture@x", "backend": "openai", "base_url": "http://127.0.0.1:1/v1"}
    path = student_pipeline(DEMO, run, student, {**teacher, "api_key_env": None, "cache": False})
    plan = {name: (spec.kind, cfg) for spec, name, cfg in load_pipeline(path, [], {"run": str(run), "here": "."})}
    kinds = [kind for kind, _ in plan.values()]
    assert kinds[:2] == ["synth.harvest", "synth.tasks"] and "demo.warmup" not in kinds
    for kind, cfg in plan.values():
        if kind in TEACHER_STAGES:
            assert cfg.model.model == teacher["model"] and cfg.model.cache is False
    assert plan["extend"][1].user_model.model == teacher["model"]
    assert plan["sft"][1].model == str(student)
    assert plan["grpo"][1].model == str(run.resolve() / "models" / "sft")
    compared = [str(student), *(str(run.resolve() / "models" / m) for m in ("sft", "grpo"))]
    for name in ("eval-passk", "eval-tools"):
        assert [m.model for m in plan[name][1].models] == compared
        assert {m.backend for m in plan[name][1].models} == {"transformers"}
