"""Where a run's files go in a Hub dataset repository (the card's ``configs`` point at these paths).

::

    README.md                       the card (RUN/card/README.md)
    plots/<name>.png                its plots (RUN/card/plots/)
    data/sft/, data/rl/             the training-ready views (RUN/card/data/, views.py)
    data/<table>/<shard>.parquet    every shard of every table, unchanged
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from trajkit.store import Store

CARD_DIR = "card"
README = "README.md"
PLOTS = "plots"


@dataclass(frozen=True)
class RepoFile:
    local: Path
    path_in_repo: str
    size: int


def card_dir(store: Store) -> Path:
    return store.root / CARD_DIR


def data_glob(table: str) -> str:
    return f"data/{table}/*.parquet"


def data_files(store: Store) -> list[RepoFile]:
    """Every shard of every table that has one, in schema and shard order."""
    return [
        RepoFile(p, f"data/{table}/{p.name}", p.lstat().st_size)
        for table in store.tables()
        for p in store.shards(table)
    ]


def card_files(store: Store) -> list[RepoFile]:
    """Every file in the card folder (empty if the card was not rendered): the README, its views and its
    plots, and anything else found there (which ``push`` refuses). Links are listed, never followed."""
    root = card_dir(store)
    if not (root / README).is_file():
        return []
    found = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names) + [d for d in dirs if (Path(folder) / d).is_symlink()]:
            path = Path(folder) / name
            found.append(RepoFile(path, path.relative_to(root).as_posix(), path.lstat().st_size))
    readme = [f for f in found if f.path_in_repo == README]
    return readme + [f for f in found if f.path_in_repo != README]
