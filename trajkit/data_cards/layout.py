"""Where a run's files go in a Hub dataset repository (the card's ``configs`` point at these paths).

::

    README.md                       the card (RUN/card/README.md)
    plots/<name>.png                its plots (RUN/card/plots/)
    data/sft/, data/rl/             the training-ready views (RUN/card/data/, views.py)
    data/<table>/<shard>.parquet    every shard of every table, unchanged
"""

from __future__ import annotations

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
        RepoFile(p, f"data/{table}/{p.name}", p.stat().st_size) for table in store.tables() for p in store.shards(table)
    ]


def card_files(store: Store) -> list[RepoFile]:
    """The rendered card, its views and its plots (empty if the card was not rendered)."""
    root = card_dir(store)
    readme = root / README
    if not readme.is_file():
        return []
    found = [readme, *sorted((root / "data").glob("*/*.parquet")), *sorted((root / PLOTS).glob("*.png"))]
    return [RepoFile(p, p.relative_to(root).as_posix(), p.stat().st_size) for p in found]
