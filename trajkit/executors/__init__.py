"""Executors: where a stage's shards run.

``local`` runs the one shard given by ``--rank/--world-size`` in this process
(several shells split a stage by hand); ``ray`` runs all ``--world-size``
shards as Ray tasks on a cluster whose nodes share the run directory. Both go
through ``runner.run_stage``, so the per-rank manifests and the views are the
same whichever ran them.
"""

from __future__ import annotations

EXECUTORS = ("local", "ray")
