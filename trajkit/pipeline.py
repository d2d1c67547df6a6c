"""The pipeline runner (``trajkit run pipeline.yaml``); stages come from ``trajkit.stages``.

A pipeline file lists stages by kind, each with an optional name and a config::

    stages:
      - stage: synth.harvest
        config: {servers: "${here}/servers.json"}
      - stage: curate.passk
        name: passk-tools
        config: {model: runs/demo/models/agent, k: 8}

Every stage's config is validated before the first stage starts, and every
error is reported at once. Each stage resumes on a rerun; ``fresh`` starts all over.

Paths: ``${run}`` is the run directory and ``${here}`` the pipeline file's own
directory; any other relative path resolves against the current directory, as
on the command line. Files shipped next to a pipeline are written
``${here}/servers.json``, so the pipeline runs from any directory. Any other
``${name}`` is an error naming it and where it is (a servers file's ``${VAR}``
lives in that file, read from the environment when its servers start).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trajkit.config import build, expand_variables, parse_override, read_yaml
from trajkit.errors import UserError
from trajkit.runner import StageSpec, check_runner_options, run_stage
from trajkit.stages import get_stage
from trajkit.store import Store, safe_name


def load_pipeline(
    path: str | Path, overrides: list[str] = (), variables: dict[str, str] | None = None
) -> list[tuple[StageSpec, str, Any]]:
    """Read a pipeline file and validate every stage's config; all errors at once.

    ``overrides`` are ``NAME.key=value`` for the stage named NAME.
    """
    for o in overrides:
        parse_override(o)  # each is KEY=VALUE, or one line saying it is not
    data = substitute(read_yaml(path), variables or {}, str(path))
    entries = data.get("stages")
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{path}: expected a non-empty 'stages:' list")
    plan, errors, names = [], [], set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("stage"), str):
            errors.append(f"stages[{i}]: expected a mapping with a 'stage' key naming a stage")
            continue
        unknown = set(entry) - {"stage", "name", "config"}
        if unknown:
            errors.append(f"stages[{i}]: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        if not isinstance(entry.get("name", ""), str) or not isinstance(entry.get("config") or {}, dict):
            errors.append(f"stages[{i}]: 'name' must be text and 'config' a mapping")
            continue
        try:
            spec = get_stage(entry["stage"])
        except UserError as e:
            errors.append(f"stages[{i}]: {e}")
            continue
        name = entry.get("name") or spec.kind.split(".")[-1]
        if name in names:
            errors.append(f"stages[{i}]: duplicate stage name {name!r}; give it a 'name:'")
        elif safe_name(name) in {safe_name(n) for n in names}:
            errors.append(f"stages[{i}]: stage name {name!r} shares its folder with another stage's; rename one")
        names.add(name)
        mine = [
            o.split("=", 1)[0][len(name) + 1 :] + "=" + o.split("=", 1)[1]
            for o in overrides
            if o.startswith(name + ".")
        ]
        try:
            cfg = build(spec.config, entry.get("config") or {}, overrides=mine, where=f"stage {name!r}")
        except UserError as e:
            errors.append(str(e))
            continue
        plan.append((spec, name, cfg))
    for o in overrides:
        target = o.split("=", 1)[0]
        if "." not in target or target.split(".", 1)[0] not in names:
            errors.append(
                f"--set {o!r}: no stage named {target.split('.', 1)[0]!r} (give NAME.key=value; stages: "
                f"{', '.join(sorted(names))})"
            )
    if errors:
        raise UserError(f"{path}: {len(errors)} problem(s): " + " | ".join(errors))
    return plan


def run_pipeline(
    path: str | Path,
    run_dir: str | Path,
    fresh: bool = False,
    overrides: list[str] = (),
    executor: str = "local",
    address: str | None = None,
    world_size: int = 1,
    reuse_cache: bool = False,
) -> list[dict]:
    """Run every stage of a pipeline file in order, each resumable, a stale one redone (what it read changed
    since it ran: an earlier stage redone, a recording grown); returns the manifests (with
    ``executor="ray"``, each stage's ``world_size`` shards on one Ray cluster, all their manifests)."""
    check_runner_options(0, world_size, None, None)
    plan = load_pipeline(path, overrides, {"run": str(run_dir), "here": str(Path(path).resolve().parent)})
    if executor == "ray":
        from trajkit.executors.ray import cluster, run_on_ray

        with cluster(address):
            return [
                m
                for spec, name, cfg in plan
                for m in run_on_ray(
                    Path(run_dir), spec, cfg, name, fresh, world_size, redo_stale=True, reuse_cache=reuse_cache
                )["shards"]
            ]
    if executor not in ("local", "ray"):
        raise UserError(f"--executor must be local or ray, not {executor!r}")
    if world_size != 1:
        raise UserError("trajkit run takes --world-size only with --executor ray")
    store = Store(run_dir, create=True)
    return [
        run_stage(store, spec, cfg, name=name, fresh=fresh, redo_stale=True, reuse_cache=reuse_cache)
        for spec, name, cfg in plan
    ]


def substitute(value: Any, variables: dict[str, str], where: str | None) -> Any:
    """Replace ``${name}`` in every string of a config (``${run}`` is the run directory) by the shared rule
    (``trajkit.config.expand_variables``). Any other ``${name}`` is one line naming it, the file ``where``
    and its place there; with ``where=None`` it is kept as written (a copy whose other variables are
    expanded when it is run)."""
    known = " and ".join(f"${{{k}}}" for k in variables)

    def walk(v: Any, at: str) -> Any:
        if isinstance(v, str):
            return expand_variables(v, variables, None if where is None else missing(at))
        if isinstance(v, dict):
            return {k: walk(x, f"{at}.{k}" if at else str(k)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, f"{at}[{i}]") for i, x in enumerate(v)]
        return v

    def missing(at: str) -> Callable[[str], str]:
        return lambda name: f"{where}: unknown variable ${{{name}}} in {at} (this file has {known})"

    return walk(value, "")
