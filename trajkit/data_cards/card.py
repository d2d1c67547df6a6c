"""The ``card`` stage: a Hugging Face dataset card for a run (README.md with plots).

Writes ``RUN/card/README.md``, ``RUN/card/plots/*.png`` and the training-ready
views ``RUN/card/data/{sft,rl}/`` (``views.py``: accepted rows only, human
reviews applied): YAML front matter (``configs``: the views first, ``sft`` the
default, then each table mapped to its Parquet files in the pushed layout;
license, task categories, size category, tags), a summary of each view and
table, the pipeline that produced it (from the stage manifests), statistics
computed with DuckDB, and example rows rendered as conversations. The front
matter is parsed back with ``huggingface_hub.DatasetCard`` before the file is
written.

The card describes the run as it is when rendered, reviews included (the
newest one it applied is named in it; ``trajkit push`` refuses a card older
than the newest review): ``trajkit card`` always renders afresh, while a
pipeline file's ``card`` stage is skipped on a rerun like any completed stage
(rerun it with ``--fresh``).
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import yaml
from pydantic import Field, field_validator

from trajkit.config import StageConfig, Unhashed
from trajkit.data_cards import layout, views
from trajkit.data_cards.markdown import Markdown, code, conversation, fence, fmt_bytes, fmt_num, in_html, table
from trajkit.data_cards.provenance import pipeline_section
from trajkit.data_cards.stats import CardStats, collect, examples
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec
from trajkit.store import atomic_write_bytes

SIZE_CATEGORIES = [
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
]
BASE_TAGS = ["trajkit", "synthetic", "agents", "tool-use", "mcp"]


class CardConfig(StageConfig):
    pretty_name: str | None = Field(None, description="Title of the card (default: the run directory's name).")
    description: str | None = Field(None, description="A paragraph under the title.")
    license: str = Field("unknown", description="A Hub license id (apache-2.0, cc-by-4.0, other, ...).")
    language: list[str] = Field(default_factory=lambda: ["en"])
    task_categories: list[str] = Field(default_factory=lambda: ["text-generation"])
    tags: list[str] = Field(default_factory=list, description="Tags added to trajkit's own.")
    repo_id: str | None = Field(None, description="user/name, for the loading snippet.")
    examples: int = Field(2, ge=0, description="Example trajectories rendered as conversations.")
    task_examples: int = Field(3, ge=0, description="Example tasks shown.")
    max_example_chars: int = Field(1500, ge=100, description="Characters kept per message in examples.")
    duckdb_memory: Unhashed[str] = Field("1GB", description="DuckDB memory limit.")

    @field_validator("pretty_name", "license", "language", "task_categories", "tags", "repo_id")
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        """Front-matter values are single lines: a line break (or a ``---``) would end the YAML header."""
        for text in value if isinstance(value, list) else [value]:
            if text is not None and (not text.strip() or len(text.splitlines()) > 1):
                raise ValueError(f"{text!r} must be one non-empty line")
        return value


def size_category(n: int) -> str:
    for bound, label in SIZE_CATEGORIES:
        if n < bound:
            return label
    return "n>1B"


def front_matter(stats: CardStats, cfg: CardConfig, pretty_name: str, view_rows: dict[str, int]) -> dict[str, Any]:
    """The card's metadata: one ``configs`` entry per view with rows (the first is the default), then
    one per table, each pointing at its Parquet files."""
    paths = [(v, views.view_glob(v)) for v in views.VIEWS if view_rows.get(v)]
    paths += [(t.name, layout.data_glob(t.name)) for t in stats.tables]
    configs = []
    for i, (name, path) in enumerate(paths):
        entry: dict[str, Any] = {"config_name": name, "data_files": [{"split": "train", "path": path}]}
        if i == 0:
            entry["default"] = True
        configs.append(entry)
    largest = max([t.rows for t in stats.tables] + list(view_rows.values()), default=0)
    return {
        "pretty_name": pretty_name,
        "license": cfg.license,
        "language": list(cfg.language),
        "task_categories": list(cfg.task_categories),
        "size_categories": [size_category(largest)],
        "tags": list(dict.fromkeys(BASE_TAGS + list(cfg.tags))),
        "configs": configs,
    }


def review_summary(store: Any) -> tuple[int, Any]:
    """How many human reviews the run has, and when the newest was made (None without any)."""
    row = store.sql("SELECT count(*) AS n, max(reviewed_at) AS newest FROM reviews").to_pylist()[0]
    return row["n"], row["newest"]


def labels_in_force(store: Any) -> list[tuple[str, int, bool]]:
    """Each label of the run's ``labels.yaml`` that a review in force gives some rows: its name, how many
    rows carry it, and whether it takes them out of the views (``excludes``)."""
    from trajkit.accepted import LATEST_REVIEWS_SQL, run_labels

    labels = run_labels(store.root)
    if not labels:
        return []
    counts = store.sql(
        f"SELECT label, count(*) AS n FROM (SELECT unnest(labels) AS label FROM ({LATEST_REVIEWS_SQL})) GROUP BY 1"
    ).to_pylist()
    n = {r["label"]: r["n"] for r in counts}
    return [(label.name, n[label.name], label.excludes) for label in labels if label.name in n]


def compose(meta: dict[str, Any], body: str) -> str:
    """README text: front matter from huggingface_hub's DatasetCardData, then the body;
    parsed back to check that the Hub will read the same metadata."""
    from huggingface_hub import DatasetCard, DatasetCardData

    data = DatasetCardData(**meta)
    text = f"---\n{data.to_yaml()}\n---\n\n{body}"
    parsed = DatasetCard(text).data.to_dict()
    plain = yaml.safe_load(text.split("---\n", 2)[1])
    for key, value in meta.items():
        if parsed.get(key) != value or plain.get(key) != value:
            raise UserError(f"card front matter does not round-trip for {key!r}")
    return text


def render_body(
    stats: CardStats,
    cfg: CardConfig,
    pretty_name: str,
    plots: dict[str, str],
    manifests: list[dict[str, Any]],
    tasks: list[dict[str, Any]],
    trajs: list[dict[str, Any]],
    view_rows: dict[str, int],
    reviews: tuple[int, Any],
    labels: list[tuple[str, int, bool]],
) -> str:
    repo = cfg.repo_id or "USER/DATASET"
    n_reviews, newest = reviews
    out = [f"# {pretty_name}", ""]
    if cfg.description:
        out += [cfg.description, ""]
    out += [
        (
            "Tool-use agent data produced with trajkit: tasks, "
            "trajectories over MCP servers, verification and curation tables, all as Parquet."
        ),
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'sft = load_dataset("{repo}", "sft", split="train")  # messages + tools, for a chat template',
        f'rl = load_dataset("{repo}", "rl", split="train")  # prompt + verifier, for RL',
        f'trajectories = load_dataset("{repo}", "trajectories", split="train")  # every row, as stored',
        "```",
        "",
        "## Training-ready views",
        "",
        (
            'Only accepted rows (docs/schema.md, "Accepted rows": completed, verifier passed where '
            "there is one, judge thresholds met, not rejected by a filter or a human review)."
        ),
        (
            f"Human reviews applied: {n_reviews}, the newest from {newest.isoformat()}."
            if n_reviews
            else "Human reviews applied: none."
        ),
        *(
            [
                "Labels in force: "
                + ", ".join(f"`{name}` {fmt_num(n)} rows" + (" (left out)" if out else "") for name, n, out in labels)
                + "."
            ]
            if labels
            else []
        ),
        "",
        table(
            ["config", "rows", "files", "contents"],
            [[v, fmt_num(view_rows.get(v, 0)), views.view_glob(v), Markdown(views.DOCS[v])] for v in views.VIEWS],
        ),
        "",
        "## Tables",
        "",
        table(
            ["table", "rows", "shards", "size", "description"],
            [[t.name, fmt_num(t.rows), t.shards, fmt_bytes(t.bytes), Markdown(t.doc)] for t in stats.tables],
        ),
        "",
    ]
    for t in stats.tables:
        out.append(f"- {code(t.name)} ({code(layout.data_glob(t.name))}): " + ", ".join(code(c) for c in t.columns))
    out.append("")
    out += pipeline_section(manifests, stats.servers)
    out += _statistics(stats, plots)
    out += _examples(tasks, trajs, cfg.max_example_chars)
    return "\n".join(out).rstrip() + "\n"


def _plot(plots: dict[str, str], name: str, alt: str) -> list[str]:
    return [f"![{alt}]({layout.PLOTS}/{plots[name]})", ""] if name in plots else []


def _statistics(s: CardStats, plots: dict[str, str]) -> list[str]:
    out = ["## Statistics", ""]
    if s.task_modes:
        out += [
            "### Tasks",
            "",
            table(["mode", "source", "tasks"], [[m, src, fmt_num(n)] for m, src, n in s.task_modes]),
            "",
        ]
    if s.difficulty:
        out += ["### Difficulty", "", "Buckets from pass@k over verified samples (`passk` table).", ""]
        out += _plot(plots, "difficulty", "tasks by difficulty")
        out += [table(["difficulty", "tasks"], [[d, fmt_num(n)] for d, n in s.difficulty]), ""]
    if s.passk:
        out += ["### pass@k by difficulty", ""] + _plot(plots, "passk_by_difficulty", "pass@k by difficulty")
        out += [
            table(
                ["difficulty", "k", "mean pass@k", "tasks"], [[d, k, f"{v:.3f}", fmt_num(n)] for d, k, v, n in s.passk]
            ),
            "",
        ]
    if s.splits or s.curriculum:
        rows = [["split", sp, fmt_num(n)] for sp, n in s.splits] + [
            ["curriculum stage", st, fmt_num(n)] for st, n in s.curriculum
        ]
        out += ["### Splits and curriculum", "", table(["kind", "value", "tasks"], rows), ""]
    if s.status:
        out += ["### Trajectories", ""] + _plot(plots, "trajectory_status", "trajectories by status")
        out += [table(["status", "trajectories"], [[st, fmt_num(n)] for st, n in s.status]), ""]
    if s.tools:
        out += (
            ["### Tool and server usage", ""]
            + _plot(plots, "tools", "most called tools")
            + _plot(plots, "servers", "calls by server")
        )
        out += [table(["tool", "server", "calls"], [[t, sv, fmt_num(n)] for t, sv, n in s.tools]), ""]
    if s.turns or s.tokens:
        out += ["### Turns and lengths", ""]
        out += _plot(plots, "turns", "turns per trajectory") + _plot(plots, "tool_calls", "tool calls per trajectory")
        out += _plot(plots, "tokens", "tokens per trajectory")
        if s.tokens:
            q = s.tokens.quantiles
            out += [
                table(
                    ["tokens per trajectory", "min", "p50", "p90", "p99", "max"],
                    [["prompt + completion", *(fmt_num(q[k]) for k in ("min", "p50", "p90", "p99", "max"))]],
                ),
                "",
            ]
    if s.rejections:
        out += ["### Rejections", "", "Rejected rows stay in their table; the `rejected` table says why.", ""]
        out += _plot(plots, "rejections", "rejections by reason")
        out += [
            table(["table", "stage", "reason", "rows"], [[t, st, r, fmt_num(n)] for t, st, r, n in s.rejections]),
            "",
        ]
    if s.quality:
        out += [
            "### Judge scores",
            "",
            table(["score", "mean"], [[k, "n/a" if v is None else f"{v:.3f}"] for k, v in s.quality.items()]),
            "",
        ]
    if s.eval_passk:
        out += ["### Evaluation: pass@k", ""] + _plot(plots, "eval_passk", "evaluation pass@k")
        out += [
            table(
                ["model", "difficulty", "k", "mean pass@k", "tasks"],
                [[m, d, k, f"{v:.3f}", fmt_num(n)] for m, d, k, v, n in s.eval_passk],
            ),
            "",
        ]
    if s.eval_tools:
        rows = [[m, sv, fmt_num(n), _pct(a), _pct(b), _pct(c)] for m, sv, n, a, b, c in s.eval_tools]
        out += [
            "### Evaluation: tool-call accuracy",
            "",
            table(["model", "server", "turns", "name", "arguments", "exact"], rows),
            "",
        ]
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _examples(tasks: list[dict[str, Any]], trajs: list[dict[str, Any]], max_chars: int) -> list[str]:
    """Example tasks and trajectories, their text as code (``markdown``: nothing from the data is live)."""
    if not tasks and not trajs:
        return []
    out = ["## Examples", ""]
    for t in tasks:
        kind = ", ".join(x for x in (t["mode"], t.get("difficulty")) if x)
        question = t["question"] if len(t["question"]) <= max_chars else t["question"][:max_chars] + " …"
        out += [f"**task** {code(t['task_id'])} ({code(kind)})", "", fence(question), ""]
    for tr in trajs:
        summary = (
            f"trajectory <code>{in_html(tr['traj_id'])}</code> · <code>{in_html(tr['model'] or '')}</code> · "
            f"{tr['num_turns']} turns · {tr['num_tool_calls']} tool calls"
        )
        out += [
            "<details>",
            f"<summary>{summary}</summary>",
            "",
            conversation(tr["messages"], max_chars=max_chars),
            "",
            "</details>",
            "",
        ]
    return out


def run_card(ctx: StageContext, cfg: CardConfig) -> dict[str, Any]:
    store = ctx.store
    if not store.tables():
        raise UserError(f"{store.root} has no tables to describe")
    root = layout.card_dir(store)
    t0 = time.monotonic()
    stats = collect(store, cfg.duckdb_memory)
    tasks, trajs = examples(store, cfg.examples, cfg.task_examples)
    tasks = store.redactor.value(tasks)  # a second look, as the views get: shards an older trajkit wrote
    trajs = store.redactor.table(pa.Table.from_pylist(trajs)).to_pylist() if trajs else []
    t1 = time.monotonic()
    from trajkit.data_cards.plots import render

    plots = render(stats, root / layout.PLOTS)
    t2 = time.monotonic()
    view_rows = views.write_views(store, root, cfg.duckdb_memory)
    reviews = review_summary(store)
    pretty = cfg.pretty_name or store.root.resolve().name
    manifests = [m for m in store.manifests() if m.get("kind") != "card"]
    meta = front_matter(stats, cfg, pretty, view_rows)
    labels = labels_in_force(store)
    text = compose(meta, render_body(stats, cfg, pretty, plots, manifests, tasks, trajs, view_rows, reviews, labels))
    atomic_write_bytes(root / layout.README, text.encode())
    rows = ", ".join(f"{view} {n:,} rows" for view, n in view_rows.items())
    ctx.log(f"wrote {root / layout.README} with {len(plots)} plot(s); views: {rows or 'none'}")
    return {
        "card": str(root / layout.README),
        "views": view_rows,
        "plots": sorted(plots.values()),
        "tables": {t.name: t.rows for t in stats.tables},
        "size_category": meta["size_categories"][0],
        "seconds": {
            "statistics": round(t1 - t0, 3),
            "plots": round(t2 - t1, 3),
            "readme": round(time.monotonic() - t2, 3),
        },
    }


CARD = StageSpec(
    "card",
    CardConfig,
    run_card,
    inputs=(),
    outputs=(),
)
