"""trajkit.train: the handoff to TRL.

* ``sft``        — SFT on accepted trajectories (exact tokens where stored, assistant-only loss otherwise).
* ``grpo``       — one GRPO curriculum stage; ``curriculum`` runs a stages file as ``grpo-<name>`` stages.
* ``data``       — curated tables -> training rows (pyarrow only: no polars, no duckdb).
* ``rewards``    — TRL-signature rewards over ``trajkit.verify``; ``judge`` a judge-model conciseness scorer.
* ``tools``      — MCP servers behind TRL's ``environment_factory``, rendered exactly as synthesis rendered them.
* ``metrics``, ``weights``, ``launch``, ``speed`` — per-step metrics and plots, full-safetensors I/O,
  ``accelerate launch`` with ``configs/``, fast-generation settings measured by ``bench/grpo_gpu.py``.
"""
