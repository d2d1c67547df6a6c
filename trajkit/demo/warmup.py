"""The ``trajkit.demo.warmup:WARMUP`` stage: warm-start one tiny model on the reference fixture's outputs.

1. **Record.** The reference fixture (``trajkit.demo.fixture``) is served as a
   real OpenAI-compatible endpoint on loopback (``ScriptedServer``), and the
   stages listed in ``record`` — real trajkit stages with the configs the demo
   pipeline uses for them (``demo.yaml`` shares them through YAML anchors) —
   run against it in a scratch run ``RUN/warmup/record``, with the run's
   harvested servers. Every request the fixture answers is kept: the exact
   messages and tools a model sees in those stages, and the reference reply.
2. **Tokenize.** A byte-level BPE with Qwen3's special tokens and chat template
   (``trajkit.models.tiny``) is trained on the recorded text. Each request
   becomes token ids rendered exactly as the ``transformers`` backend renders
   prompts, plus the reply's tokens with loss; the turns of one agent episode
   share one sequence (each turn's prompt extends the previous turn's).
3. **Train.** A seeded random-weight model (``make_tiny_model``) is fine-tuned
   on those sequences by the real ``train.sft`` stage (TRL's SFTTrainer) in
   ``RUN/warmup/sft``; the weights land in ``output_dir`` (default
   ``RUN/models/demo-base``) and the per-step metrics in this run's
   ``train_metrics`` (stage ``warmup``).

The scratch runs start over whenever this stage runs (it runs again only if it
did not complete), so a recording is never half from one attempt and half
from another. The fixture's code is part of the config (``fixture``, a hash of
its files): a rerun after the fixture changed refuses the completed warm-up
(``--fresh`` starts over) instead of reusing a recording of the old script.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from pathlib import Path
from typing import Any

from pydantic import Field, computed_field, model_validator

from trajkit import schema as S
from trajkit.config import StageConfig, Unhashed, build
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec, run_stage
from trajkit.store import Store

FIXTURE_FILES = tuple(Path(__file__).parent / name for name in ("fixture.py", "world.py"))  # the scripted answers


def fixture_hash() -> str:
    """A short hash of the reference fixture's code: what the warm-up records depends on it as on a model."""
    digest = hashlib.sha256()
    for path in FIXTURE_FILES:
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


DEFAULT_SHAPE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 8192,
}


class RecordedStage(StageConfig):
    """One stage to run against the fixture: as in a pipeline file, without the model (the warm-up sets it)."""

    stage: str = Field(description="A stage kind (synth.tasks, curate.passk, ...).")
    name: str | None = Field(None, description="Its name in the scratch run (default: from the kind).")
    config: dict[str, Any] = Field(default_factory=dict, description="Its config, without `model`.")


class WarmupConfig(StageConfig):
    record: list[RecordedStage] = Field(min_length=1, description="Stages whose model calls the fixture answers.")
    tokenizer_vocab: int = Field(2048, ge=300, description="Size of the BPE trained on the recorded text.")
    shape: dict[str, Any] = Field(default_factory=lambda: dict(DEFAULT_SHAPE), description="make_tiny_model shape.")
    seed: int = Field(0, description="Seed of the initial weights.")
    sft: dict[str, Any] = Field(default_factory=dict, description="Passed to train.sft's `sft:` (trl.SFTConfig).")
    output_dir: str | None = Field(None, description="Where the warm model goes (default RUN/models/demo-base).")
    concurrency: Unhashed[int] = Field(8, ge=1, description="Fixture requests in flight.")

    @computed_field(description="Hash of the reference fixture's code, whose answers are recorded (not settable).")
    @property
    def fixture(self) -> str:
        return fixture_hash()

    @model_validator(mode="after")
    def _check_record(self) -> WarmupConfig:
        from trajkit.models.base import ModelSpec

        # the fixture's endpoint exists only while the warm-up runs: check each config with its model's shape
        fixture_shaped = ModelSpec(model="reference-fixture", backend="openai", base_url="http://127.0.0.1:1/v1")
        problems = []
        for i, entry in enumerate(self.record):
            try:
                stage_config(entry, fixture_shaped)
            except UserError as e:
                problems.append(f"record[{i}]: {e}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def stage_config(entry: RecordedStage, model: Any) -> tuple[Any, Any, str]:
    """(spec, validated config, name) of a recorded stage, its model replaced by ``model``."""
    from trajkit.stages import get_stage

    spec = get_stage(entry.stage)
    if "model" in entry.config:
        raise UserError(f"stage {entry.stage!r}: leave `model` out, the warm-up sets it to the fixture")
    data = dict(entry.config)
    if "model" in spec.config.model_fields:
        data["model"] = model.model_dump()
    name = entry.name or spec.kind.split(".")[-1]
    return spec, build(spec.config, data, where=f"recorded stage {name!r}"), name


class Recorder:
    """Wraps the fixture for ``ScriptedServer``: answers, and keeps every (messages, tools, reply)."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.calls: dict[str, tuple[list[dict], list[dict] | None, Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict], tools: list[dict] | None, body: dict) -> Any:
        reply = self.policy(messages, tools, body)
        with self._lock:
            self.calls[S.content_id(messages, tools)] = (messages, tools, reply)
        return reply

    def examples(self) -> list[tuple[list[dict], list[dict] | None, Any]]:
        """The distinct requests answered, in a fixed order."""
        with self._lock:
            return [self.calls[k] for k in sorted(self.calls)]


def run_warmup(ctx: StageContext, cfg: WarmupConfig) -> dict[str, Any]:
    from trajkit.demo.fixture import NAME, ReferenceFixture
    from trajkit.demo.sequences import verify_rollouts

    servers = ctx.store.read("servers")
    if not len(servers):
        raise UserError(f"no servers in {ctx.store.root}: run synth.harvest before the warm-up")
    scratch = ctx.store.root / "warmup"
    shutil.rmtree(scratch, ignore_errors=True)
    record = Store(scratch / "record", create=True)
    record.write("servers", "harvest", servers)
    recorder = Recorder(ReferenceFixture())
    from trajkit.models.base import ModelSpec
    from trajkit.models.scripted_server import ScriptedServer

    with ScriptedServer(recorder, model=NAME) as server:
        spec = ModelSpec(
            model=NAME,
            backend="openai",
            base_url=server.base_url,
            api_key_env=None,
            cache=False,
            max_concurrency=cfg.concurrency,
        )
        for entry in cfg.record:
            stage, stage_cfg, name = stage_config(entry, spec)
            run_stage(record, stage, stage_cfg, name=name)
    examples = recorder.examples()
    with open(scratch / "recorded.jsonl", "w") as f:
        f.writelines(
            json.dumps({"messages": messages, "tools": tools, "reply": reply}, ensure_ascii=False) + "\n"
            for messages, tools, reply in examples
        )
    ctx.counts["requests_recorded"] = len(examples)
    checked = verify_rollouts(record)
    ctx.counts.update({f"fixture_rollouts.{k}": v for k, v in checked.items()})
    ctx.log(f"recorded {len(examples)} fixture answers; fixture rollouts: {checked}")
    return train(ctx, cfg, examples, scratch)


def train(ctx: StageContext, cfg: WarmupConfig, examples: list, scratch: Path) -> dict[str, Any]:
    """Tokenizer, initial weights, SFT sequences, then the real ``train.sft`` stage on them."""
    from trajkit.demo.sequences import build_tokenizer, sequences, sft_rows
    from trajkit.models.tiny import make_tiny_model
    from trajkit.stages import get_stage

    tokenizer_dir = build_tokenizer(examples, scratch / "tokenizer", cfg.tokenizer_vocab)
    init = make_tiny_model(scratch / "init", tokenizer=tokenizer_dir, seed=cfg.seed, **cfg.shape)
    from transformers import AutoTokenizer

    seqs = sequences(AutoTokenizer.from_pretrained(init), examples)
    tokens = sum(len(ids) for ids, _ in seqs)
    trained = sum(sum(mask) for _, mask in seqs)
    ctx.counts.update({"sequences": len(seqs), "tokens": tokens, "tokens_with_loss": trained})
    ctx.log(f"{len(seqs)} sequences, {tokens} tokens ({trained} with loss), vocabulary {cfg.tokenizer_vocab}")
    data = Store(scratch / "sft", create=True)
    data.write("trajectories", "record", sft_rows(seqs))
    out = Path(cfg.output_dir) if cfg.output_dir else ctx.store.root / "models" / "demo-base"
    spec = get_stage("train.sft")
    sft_cfg = build(
        spec.config,
        {"model": str(init), "output_dir": str(out), "source": "tokens", "sft": cfg.sft},
        where="warm-up sft",
    )
    manifest = run_stage(data, spec, sft_cfg, name="sft")
    metrics = data.rows("train_metrics")
    for row in metrics:
        row.update(metric_id=S.content_id(ctx.name, row["step"]), stage=ctx.name)
    ctx.write("train_metrics", metrics)
    summary = manifest.get("summary", {})
    return {
        "model": str(out),
        "requests": len(examples),
        "sequences": len(seqs),
        "tokens": tokens,
        "steps": summary.get("steps"),
        "loss_first": metrics[0]["loss"] if metrics else None,
        "loss_last": summary.get("loss_last"),
    }


WARMUP = StageSpec(
    "demo.warmup",
    WarmupConfig,
    run_warmup,
    inputs=("servers",),
    outputs=("train_metrics",),
)
