"""Scale-out: run a ``trajkit train`` command under ``accelerate launch`` with a shipped or given config.

``fsdp2`` and ``ddp`` name the files in ``trajkit/train/configs/``; any other
value is a path to an accelerate config file. The launched processes run the
same command (one per GPU, NCCL); ``TRAJKIT_LAUNCHED`` marks them so they do
not launch again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from trajkit.errors import UserError

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
LAUNCHED = "TRAJKIT_LAUNCHED"


def config_path(name: str) -> Path:
    """A shipped config by name (``fsdp2``, ``ddp``) or a path to an accelerate config file."""
    shipped = CONFIG_DIR / f"{name}.yaml"
    if shipped.is_file():
        return shipped
    path = Path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
        raise UserError(f"accelerate config {name!r} is neither a shipped config ({known}) nor a file")
    return path


def launched() -> bool:
    """Whether this process was started by ``launch`` (so it must not launch again)."""
    return os.environ.get(LAUNCHED) == "1"


def launch_command(config: str, cli_args: list[str], num_processes: int | None = None) -> list[str]:
    """``python -m accelerate.commands.launch --config_file F [--num_processes N] -m trajkit.cli ARGS``."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_path(config))]
    if num_processes is not None:
        cmd += ["--num_processes", str(num_processes)]
    return cmd + ["-m", "trajkit.cli", *cli_args]


def launch(config: str, cli_args: list[str], num_processes: int | None = None) -> int:
    """Run the command under accelerate and return its exit status."""
    env = {**os.environ, LAUNCHED: "1"}
    return subprocess.call(launch_command(config, cli_args, num_processes), env=env)


def run_on_every_rank(store: Any, spec: Any, cfg: Any, name: str, fresh: bool = False) -> dict[str, Any] | None:
    """Run a training stage in this process, whatever its rank (training is collective).

    Rank 0 runs it as a trajkit stage (config check, resume, manifest); the other
    ranks train alongside without writing the store. Every rank decides from the
    same files before training: a config that differs from the stage's recorded
    one fails on every rank (a UserError, as on rank 0), and a stage whose
    manifest exists is skipped on every rank, so no rank waits in a collective
    for one that left.
    """
    from trajkit.config import config_hash
    from trajkit.runner import StageContext, run_stage

    if int(os.environ.get("RANK", "0")) == 0:
        return run_stage(store, spec, cfg, name=name, fresh=fresh)
    previous = store.stage_config(name)
    if not fresh and previous is not None and previous["config_hash"] != config_hash(cfg):
        raise UserError(
            f"stage {name!r} in {store.root} was run with a different config "
            f"({previous['config_hash']} != {config_hash(cfg)}); pass --fresh to start it over"
        )
    if fresh or store.manifest(name) is None:
        spec.run(StageContext(store, name, spec.kind, quiet=True), cfg)
    return None
