"""trajkit.demo: what ``trajkit demo`` needs beyond the real stages, and nothing the stages depend on.

* ``world.py``    — the demo's small, fixed world: tool tasks over the example
  servers (calculator, kv, units) and the third-party ``mcp-server-sqlite``,
  each with its reference solution, expected outcome and a follow-up.
* ``fixture.py``  — ``ReferenceFixture``, the scripted reference policy that
  plays every model role (task generator with verbalized probabilities,
  agent, task and trajectory judges, user simulator, coder) for that world.
* ``warmup.py``   — the ``trajkit.demo.warmup:WARMUP`` stage: the real
  generating stages talk to the fixture served over HTTP; every answered
  request becomes an SFT example for one tiny local model, which then plays
  every role in the rest of the demo.
* ``summary.py``  — ``print_summary(run_dir)``, what ``trajkit demo`` prints at the end.
* ``student.py``  — ``trajkit demo --student smollm2``: the fixture as the
  teacher, a real model (SmolLM2-135M-Instruct) as the agent SFT and GRPO train.

A random-weight model cannot produce a task, a tool call or a judgment, so the
demo warm-starts its one tiny model on the fixture's outputs; the stages
themselves have no demo code paths.
"""
