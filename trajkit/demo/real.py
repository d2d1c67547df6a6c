"""The demo pipeline on a real model: every role played by one given model, no warm-up.

``trajkit demo --model Qwen/Qwen3-1.7B`` (a Hub id or a local directory), or
``--backend openai --base-url http://localhost:8000/v1`` for a ``vllm serve``
endpoint, runs the same file with its ``x-model`` mapping (the model every role
uses, shared through a YAML anchor) pointed at that model, without the
``warmup`` stage, and with SFT starting from the same weights. The derived file
is written next to the run (``RUN/pipeline.yaml``) so the run can be repeated
with ``trajkit run``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from trajkit.config import read_yaml
from trajkit.errors import UserError

MODEL_KEY = "x-model"
WARMUP = "warmup"


def with_model(pipeline: str | Path, run: str | Path, model: str, backend: str, base_url: str | None) -> Path:
    """Write ``RUN/pipeline.yaml``: ``pipeline`` with every role played by ``model``; returns its path."""
    from trajkit.pipeline import substitute

    data = read_yaml(pipeline)
    if Path(model).exists():
        model = str(Path(model).resolve())  # a local directory, relative to where the command runs
    spec = data.get(MODEL_KEY)
    if not isinstance(spec, dict):
        raise UserError(f"{pipeline}: --model needs a top-level {MODEL_KEY!r} mapping (the model every role uses)")
    spec.clear()  # the same object every `*model` alias in the file refers to
    spec.update(model=model, backend=backend, **({"base_url": base_url} if base_url else {}))
    stages = [s for s in data.get("stages") or [] if (s.get("name") or "") != WARMUP]
    for stage in stages:
        if stage.get("stage") == "train.sft":
            stage.setdefault("config", {})["model"] = model
    data["stages"] = stages
    data = substitute(data, {"here": str(Path(pipeline).resolve().parent)}, None)  # ${run}: when the copy runs
    out = Path(run) / "pipeline.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out
