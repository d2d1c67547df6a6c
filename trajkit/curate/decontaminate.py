"""``curate.decontaminate``: reject tasks that share a word n-gram with an eval set.

Texts are compared as lowercased NFKC words; every run of ``n`` words (13 by
default) of every eval text is hashed into a sorted array per eval set, and a
task is contaminated when any of its n-grams is in one. A contaminated task
gets a ``rejected`` row (reason ``contaminated``) whose detail names the eval
set and the first overlapping n-gram, e.g. ``humaneval: "return the sum of ..."``.

A task imported from an eval set (its ``source`` is the set's name: ``curate import
--preset humaneval`` against the built-in ``humaneval``) is not checked against that
set: it matches it by construction, and the user imported it on purpose. It is still
checked against every other set, and the stage says how many tasks it left out of
their own source's check. Rejecting them all instead would leave nothing to split
whenever a run imports HumanEval with the default eval sets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from trajkit.config import StageConfig
from trajkit.curate.evalsets import EvalSet, load_texts, strings
from trajkit.curate.ngrams import ngrams, tokenize
from trajkit.curate.pool import active_tasks
from trajkit.runner import StageContext, StageSpec

TaskField = Literal["question", "metadata", "verifier", "raw_output"]


@dataclass
class Match:
    eval_set: str
    ngram: str


class NgramIndex:
    """Hashed word n-grams of named eval sets (a sorted array each), queried a whole corpus at a time."""

    def __init__(self, n: int = 13):
        self.n = n
        self.sets: dict[str, np.ndarray] = {}

    def add(self, name: str, texts: list[str]) -> int:
        """Index an eval set's texts; returns its number of distinct n-grams."""
        grams = ngrams(tokenize(texts), self.n, short="drop").hashes
        self.sets[name] = np.unique(np.concatenate([self.sets.get(name, np.zeros(0, np.uint64)), grams]))
        return len(self.sets[name])

    def match(self, texts: list[str | None], skip: list[str | None] | None = None) -> list[Match | None]:
        """For each text, the first eval set (in the order added) sharing an n-gram with it,
        and the first such n-gram in the text; ``skip[i]`` names a set text i is not checked against."""
        tokens = tokenize(texts)
        grams = ngrams(tokens, self.n, short="drop")
        out: list[Match | None] = [None] * len(texts)
        if not len(grams.hashes):
            return out
        import polars as pl

        doc = np.repeat(np.arange(len(texts)), np.diff(grams.offsets))
        queries = pl.Series(grams.hashes)
        for name, table in self.sets.items():
            if not len(table):
                continue
            hits = np.flatnonzero(queries.is_in(pl.Series(table).implode()).to_numpy())  # a hash join, in Rust
            docs, first = np.unique(doc[hits], return_index=True)
            for d, h in zip(docs.tolist(), hits[first].tolist()):
                if out[d] is None and (skip is None or skip[d] != name):
                    start = int(grams.starts[h])
                    out[d] = Match(name, tokens.text(start, start + self.n))
        return out


class DecontaminateConfig(StageConfig):
    """Eval sets and the n-gram size of the overlap check."""

    evals: list[EvalSet] = Field(
        default_factory=lambda: [EvalSet(name="humaneval"), EvalSet(name="bfcl")],
        description="Eval sets: humaneval, bfcl, a path, name=path, or {name, path, fields}. "
        "A task imported from one (its source is the set's name) is checked against the others only.",
    )
    n: int = Field(13, ge=1, le=256, description="Words per n-gram.")
    fields: list[TaskField] = Field(
        ["question"], min_length=1, description="Task fields checked (structured ones by their strings)."
    )


def _task_texts(task: dict[str, Any], fields: list[str]) -> list[str]:
    out = []
    for f in fields:
        value = task.get(f)
        if f == "verifier" and value:
            value = value.get("spec")
        if f in ("metadata", "verifier") and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        out.extend(strings(value) if f != "question" else [value or ""])
    return out


def run_decontaminate(ctx: StageContext, cfg: DecontaminateConfig) -> dict[str, Any]:
    index = NgramIndex(cfg.n)
    sizes = {}
    for spec in cfg.evals:
        sizes[spec.name] = index.add(spec.name, load_texts(spec))
    tasks = active_tasks(ctx.store, ctx.name, [*cfg.fields, "mode", "source"])
    owner, texts, skip = [], [], []
    for i, task in enumerate(tasks):
        own = task["source"] if task["mode"] == "imported" and task["source"] in sizes else None
        if own is not None:
            ctx.counts[f"own_source.{own}"] += 1
        for text in _task_texts(task, cfg.fields):
            owner.append(i)
            texts.append(text)
            skip.append(own)
    for name in sizes:
        if ctx.counts[f"own_source.{name}"]:
            ctx.log(
                f"{ctx.counts[f'own_source.{name}']} task(s) imported from {name} not checked against the eval set "
                f"{name}, their own source (checked against the others)"
            )
    found: dict[int, Match] = {}
    for i, m in zip(owner, index.match(texts, skip)):
        if m is not None and i not in found:
            found[i] = m
    hits = sorted((tasks[i]["task_id"], m) for i, m in found.items())
    for _, m in hits:
        ctx.counts[f"contaminated.{m.eval_set}"] += 1
    for tid, m in ctx.todo(
        hits, "rejected", key=lambda h: ctx.reject_id("tasks", h[0], "contaminated"), shard=lambda h: h[0]
    ):
        ctx.reject("tasks", tid, "contaminated", f'{m.eval_set}: "{m.ngram}"')
    return {"tasks": len(tasks), "contaminated": len(hits), "eval_ngrams": sizes}


DECONTAMINATE = StageSpec(
    "curate.decontaminate",
    DecontaminateConfig,
    run_decontaminate,
    inputs=("tasks",),
    outputs=("rejected",),
    help="Reject tasks sharing a word n-gram (13 by default) with HumanEval, BFCL or given eval sets.",
)
