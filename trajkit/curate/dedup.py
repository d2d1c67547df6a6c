"""``curate.dedup``: exact and near-duplicate tasks, one kept per cluster.

Exact duplicates share their normalized text (lowercased NFKC words and
symbols: case and spacing do not matter, ``2+3`` and ``2*3`` differ); near duplicates are found with MinHash
LSH over word shingles (``trajkit.curate.minhash``), between the first tasks
of exact groups. Exact groups and near pairs are joined into clusters; in each
cluster the task with the smallest ``task_id`` is kept (``cluster_id`` is its
id). Every task considered gets a ``dedup`` row; every dropped one a
``rejected`` row: ``exact_duplicate`` when an earlier task has its text, else
``near_duplicate``; the detail is the id of the task that survives in its
place. With ``reject_near_duplicates: false`` near duplicates are only
clustered (and exact ones still dropped). The result does not depend on row
order, and rows are written sorted by task id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from trajkit.config import StageConfig
from trajkit.curate.minhash import LSHParams, components, near_duplicate_pairs
from trajkit.curate.ngrams import tokenize
from trajkit.curate.pool import active_tasks
from trajkit.runner import StageContext, StageSpec


class DedupConfig(StageConfig):
    """Exact and MinHash near-duplicate detection over task questions."""

    exact: bool = Field(
        True, description="Drop tasks whose normalized question (case and spacing ignored) equals another's."
    )
    near: bool = Field(True, description="Find near duplicates with MinHash LSH.")
    threshold: float = Field(
        0.7, gt=0, le=1, description="Estimated Jaccard similarity of word shingles for a near duplicate."
    )
    num_perm: int = Field(128, ge=8, description="MinHash signature size.")
    bands: int | None = Field(
        None, ge=1, description="LSH bands, a divisor of num_perm (default: chosen for the threshold)."
    )
    shingle: int = Field(3, ge=1, le=64, description="Words per shingle.")
    seed: int = Field(0, description="MinHash seed.")
    reject_near_duplicates: bool = Field(
        True, description="Reject near duplicates; when false they are only clustered (splits keep a cluster together)."
    )

    @model_validator(mode="after")
    def _check(self) -> DedupConfig:
        if self.bands is not None and self.num_perm % self.bands:
            raise ValueError(f"num_perm ({self.num_perm}) must be a multiple of bands ({self.bands})")
        return self

    def lsh(self) -> LSHParams:
        return LSHParams(self.threshold, self.num_perm, self.bands, self.shingle, self.seed)


@dataclass
class Duplicates:
    """Per document: the index of its cluster's kept document and of its exact group's first
    document (itself unless an earlier one has the same normalized text)."""

    kept: np.ndarray  # int64
    exact_rep: np.ndarray  # int64

    @property
    def duplicate(self) -> np.ndarray:
        return self.kept != np.arange(len(self.kept))

    def cluster_sizes(self) -> np.ndarray:
        return np.bincount(self.kept, minlength=len(self.kept))[self.kept]


def find_duplicates(
    texts: list[str | None], order_keys: list[str], params: LSHParams, exact: bool = True, near: bool = True
) -> Duplicates:
    """Cluster documents by exact normalized text and MinHash near-duplication; the kept
    document of a cluster is the one with the smallest ``order_keys`` value."""
    n = len(texts)
    if n == 0:
        return Duplicates(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    tokens = tokenize(texts, symbols=True)
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(np.array(order_keys, dtype=object), kind="stable")] = np.arange(n)
    edges = []
    reps = np.arange(n)
    if exact:
        keys = [tokens.hashes[tokens.offsets[i] : tokens.offsets[i + 1]].tobytes() for i in range(n)]
        first: dict[bytes, int] = {}
        for i in np.argsort(rank):
            reps[i] = first.setdefault(keys[i], int(i))
        dup = np.flatnonzero(reps != np.arange(n))
        edges.append(np.stack([dup, reps[dup]], axis=1))
    if near:
        edges.append(near_duplicate_pairs(tokens, params, rows=np.flatnonzero(reps == np.arange(n))))
    pairs = np.concatenate(edges) if edges else np.zeros((0, 2), dtype=np.int64)
    labels = components(n, pairs.astype(np.int64))
    # the kept member of each component: the one with the smallest rank
    best = np.full(labels.max() + 1, n, dtype=np.int64)
    np.minimum.at(best, labels, rank)
    by_rank = np.argsort(rank)
    return Duplicates(by_rank[best[labels]].astype(np.int64), reps.astype(np.int64))


def run_dedup(ctx: StageContext, cfg: DedupConfig) -> dict[str, Any]:
    tasks = sorted(active_tasks(ctx.store, ctx.name, ["question"]), key=lambda r: r["task_id"])
    ids = [t["task_id"] for t in tasks]
    found = find_duplicates([t["question"] for t in tasks], ids, cfg.lsh(), cfg.exact, cfg.near)
    sizes, dup = found.cluster_sizes(), found.duplicate
    rows, rejects = [], []
    exact = found.exact_rep != np.arange(len(ids))
    for i, tid in enumerate(ids):
        kept = ids[found.kept[i]]
        rows.append({"task_id": tid, "cluster_id": kept, "cluster_size": int(sizes[i]), "duplicate": bool(dup[i])})
        if not dup[i] or (not exact[i] and not cfg.reject_near_duplicates):
            continue
        reason = "exact_duplicate" if exact[i] else "near_duplicate"
        rejects.append((tid, reason, kept if cfg.reject_near_duplicates else ids[found.exact_rep[i]]))
    rows = ctx.todo(rows, "dedup", key="task_id")
    rejects = ctx.todo(rejects, "rejected", key=lambda r: ctx.reject_id("tasks", r[0], r[1]), shard=lambda r: r[0])
    with ctx.progress(len(rows) + len(rejects), "rows") as advance:
        for start in range(0, len(rows), 5000):
            ctx.write("dedup", rows[start : start + 5000])
            advance(len(rows[start : start + 5000]))
        for tid, reason, kept in rejects:
            ctx.reject("tasks", tid, reason, kept)
            advance()
    return {
        "tasks": len(ids),
        "clusters": int((~dup).sum()),
        "exact_duplicates": int(exact.sum()),
        "near_duplicates": int((dup & ~exact).sum()),
    }


DEDUP = StageSpec(
    "curate.dedup",
    DedupConfig,
    run_dedup,
    inputs=("tasks",),
    outputs=("dedup", "rejected"),
    help="Exact and MinHash-LSH near-duplicate tasks: cluster, keep the smallest id, reject the rest.",
)
