"""The card's "Pipeline" section: which stages made the data, from the run's manifests.

Models, servers, parameters, code versions, dates, tokens and cost, as the
stages recorded them when they completed.
"""

from __future__ import annotations

from typing import Any

import yaml

from trajkit.data_cards.markdown import code, fence, fmt_num, table
from trajkit.redact import clean_endpoint

_MODEL_KEYS = ("model", "backend", "base_url")


def models_in(config: Any) -> list[str]:
    """Every model spec (a mapping with ``model`` and ``backend``) inside a stage config."""
    found: list[str] = []
    if isinstance(config, dict):
        if isinstance(config.get("model"), str) and "backend" in config:
            found.append(f"{config['model']} ({config['backend']})")
        for value in config.values():
            found += models_in(value)
    elif isinstance(config, list):
        for value in config:
            found += models_in(value)
    return list(dict.fromkeys(found))


def _compact(config: Any) -> Any:
    """A config for display: model specs reduced to model, backend and endpoint; nulls dropped."""
    if isinstance(config, dict):
        if isinstance(config.get("model"), str) and "backend" in config:
            out = {k: config[k] for k in _MODEL_KEYS if config.get(k) is not None}
            if "base_url" in out:
                urls = out["base_url"] if isinstance(out["base_url"], list) else [out["base_url"]]
                out["base_url"] = ", ".join(clean_endpoint(u) for u in urls)
            return out
        return {k: _compact(v) for k, v in config.items() if v is not None and v != {} and v != []}
    if isinstance(config, list):
        return [_compact(v) for v in config]
    return config


def pipeline_section(manifests: list[dict[str, Any]], servers: list[tuple[Any, ...]]) -> list[str]:
    if not manifests:
        return ["## Pipeline", "", "No stage manifests in this run (tables were copied in).", ""]
    usage = [m.get("usage") or {} for m in manifests]
    prompt = sum(u.get("prompt_tokens", 0) for u in usage)
    completion = sum(u.get("completion_tokens", 0) for u in usage)
    cost = sum(u.get("cost", 0.0) for u in usage)
    versions = sorted({m.get("code_version", "?") for m in manifests})
    start = min(m.get("started_at", "") for m in manifests)
    end = max(m.get("finished_at", "") for m in manifests)
    out = [
        "## Pipeline",
        "",
        (
            f"{len(manifests)} stage(s) ran between {code(start)} and {code(end)} with trajkit "
            f"{', '.join(code(v) for v in versions)}. "
            f"Tokens: {fmt_num(prompt)} prompt, {fmt_num(completion)} completion; cost {cost:.4f}."
        ),
        "",
    ]
    rows = []
    for m in manifests:
        u = m.get("usage") or {}
        written = ", ".join(f"{t} {fmt_num(n)}" for t, n in (m.get("outputs") or {}).items())
        rows.append(
            [
                m["stage"],
                m.get("kind", ""),
                m.get("finished_at", ""),
                f"{m.get('seconds', 0):.1f}",
                "; ".join(models_in(m.get("config"))) or "-",
                written or "-",
                fmt_num(u.get("prompt_tokens", 0) + u.get("completion_tokens", 0)),
                f"{u.get('cost', 0.0):.4f}",
            ]
        )
    out += [table(["stage", "kind", "finished", "seconds", "models", "rows written", "tokens", "cost"], rows), ""]
    if servers:
        out += ["MCP servers:", "", table(["server", "transport", "tools", "status"], [list(s) for s in servers]), ""]
    params = {
        m["stage"]: {
            "kind": m.get("kind"),
            "config": _compact(m.get("config")),
            "config_hash": m.get("config_hash"),
            "counts": m.get("counts") or {},
        }
        for m in manifests
    }
    out += [
        "<details>",
        "<summary>Stage parameters and counts</summary>",
        "",
        fence(yaml.safe_dump(params, sort_keys=False, allow_unicode=True, width=100).rstrip(), "yaml"),
        "",
        "</details>",
        "",
    ]
    return out
