"""The statistics a data card shows, computed with DuckDB over the run's views.

Every query is an aggregation or a LIMIT, so nothing loads a whole table into
memory; columns that are not named are never read. Absent tables give empty
results, not errors (the store's views exist for every table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trajkit import schema as S
from trajkit.store import Store

Rows = list[tuple[Any, ...]]
TOP = 20  # bars shown for tools, servers and rejection reasons


@dataclass
class TableInfo:
    name: str
    rows: int
    shards: int
    bytes: int
    columns: list[str]
    doc: str


@dataclass
class Histogram:
    """Counts per bin; ``edges`` has one more entry than ``counts`` (the last bin holds p99 and above)."""

    edges: list[float]
    counts: list[int]
    quantiles: dict[str, float]


@dataclass
class CardStats:
    tables: list[TableInfo] = field(default_factory=list)
    difficulty: Rows = field(default_factory=list)  # (difficulty, tasks)
    passk: Rows = field(default_factory=list)  # (difficulty, k, mean pass@k, tasks)
    eval_passk: Rows = field(default_factory=list)  # (model, difficulty, k, mean pass@k, tasks)
    eval_tools: Rows = field(default_factory=list)  # (model, server, turns, name acc, args acc, acc)
    task_modes: Rows = field(default_factory=list)  # (mode, source, tasks)
    splits: Rows = field(default_factory=list)  # (split, tasks)
    curriculum: Rows = field(default_factory=list)  # (stage, tasks)
    status: Rows = field(default_factory=list)  # (status, trajectories)
    rejections: Rows = field(default_factory=list)  # (table, stage, reason, rows)
    tools: Rows = field(default_factory=list)  # (tool, server, calls)
    servers_usage: Rows = field(default_factory=list)  # (server, calls)
    servers: Rows = field(default_factory=list)  # (name, transport, tools, status)
    turns: Rows = field(default_factory=list)  # (num_turns, trajectories)
    tool_calls: Rows = field(default_factory=list)  # (num_tool_calls, trajectories)
    tokens: Histogram | None = None
    quality: dict[str, float | None] = field(default_factory=dict)


def collect(store: Store, memory_limit: str = "1GB", threads: int | None = None) -> CardStats:
    """Compute every statistic of the card in one DuckDB session."""
    present = set(store.tables())
    stats = CardStats(tables=[_table_info(store, name) for name in S.TABLES if name in present])
    con = store.duckdb()
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")

    def q(sql: str) -> Rows:
        return con.execute(sql).fetchall()

    try:
        if "passk" in present:
            order = ", ".join(f"'{d}'" for d in S.DIFFICULTIES)
            rank = f"array_position([{order}], difficulty)"
            stats.difficulty = q(f"SELECT difficulty, count(*) FROM passk GROUP BY 1 ORDER BY {rank}")
            stats.passk = q(
                "SELECT difficulty, p.k AS k, avg(p.value), count(*) FROM (SELECT difficulty, unnest(pass_at) AS p FROM passk) "
                f"GROUP BY difficulty, k ORDER BY {rank}, k"
            )
        if "eval_passk" in present:
            order = ", ".join(f"'{d}'" for d in S.DIFFICULTIES)
            stats.eval_passk = q(
                "SELECT model, coalesce(difficulty, 'unknown') AS d, p.k AS k, avg(p.value), count(*) "
                "FROM (SELECT model, difficulty, unnest(pass_at) AS p FROM eval_passk) "
                f"GROUP BY model, d, k ORDER BY model, coalesce(array_position([{order}], d), 99), k"
            )
        if "eval_tools" in present:
            stats.eval_tools = q(
                "SELECT model, coalesce(server, '(none)'), count(*), avg(name_correct::INT), avg(args_correct::INT), "
                "avg(correct::INT) FROM eval_tools GROUP BY ALL ORDER BY 1, 3 DESC"
            )
        if "tasks" in present:
            stats.task_modes = q("SELECT mode, coalesce(source, ''), count(*) FROM tasks GROUP BY ALL ORDER BY 3 DESC")
        if "splits" in present:
            stats.splits = q("SELECT split, count(*) FROM splits GROUP BY 1 ORDER BY 1")
        if "curriculum" in present:
            stats.curriculum = q("SELECT stage, count(*) FROM curriculum GROUP BY 1 ORDER BY 1")
        if "rejected" in present:
            stats.rejections = q(
                "SELECT table_name, stage, reason, count(*) FROM rejected GROUP BY ALL ORDER BY 4 DESC, 3 LIMIT 50"
            )
        if "servers" in present:
            stats.servers = q(
                "SELECT name, transport, coalesce(num_tools, len(tools)), status FROM servers ORDER BY name"
            )
        if "trajectories" in present:
            _trajectory_stats(store, con, q, stats, "servers" in present)
        if "task_quality" in present:
            stats.quality["task_quality_score"] = q("SELECT avg(quality_score) FROM task_quality")[0][0]
        if "trajectory_quality" in present:
            row = q("SELECT avg(completeness), avg(conciseness), avg(tool_accuracy) FROM trajectory_quality")[0]
            stats.quality.update(completeness=row[0], conciseness=row[1], tool_accuracy=row[2])
    finally:
        con.close()
    return stats


def _trajectory_stats(store: Store, con: Any, q: Any, stats: CardStats, have_servers: bool) -> None:
    # one scan of the few side columns these statistics need (a few bytes per row), then small queries
    con.execute(
        "CREATE TEMP TABLE traj AS SELECT status, num_turns, num_tool_calls, "
        "prompt_tokens + completion_tokens AS tokens FROM trajectories"
    )
    stats.status = q("SELECT status, count(*) FROM traj GROUP BY 1 ORDER BY 2 DESC")
    stats.turns = q("SELECT num_turns, count(*) FROM traj WHERE num_turns IS NOT NULL GROUP BY 1 ORDER BY 1")
    stats.tool_calls = q(
        "SELECT num_tool_calls, count(*) FROM traj WHERE num_tool_calls IS NOT NULL GROUP BY 1 ORDER BY 1"
    )
    con.execute(
        "CREATE TEMP TABLE tool_calls AS SELECT unnest(tools_called) AS tool, count(*) AS calls FROM trajectories GROUP BY 1"
    )
    con.register("tool_server", _tool_servers(store if have_servers else None))
    stats.tools = q(
        f"SELECT c.tool, coalesce(s.server, '(unknown)'), c.calls FROM tool_calls c LEFT JOIN tool_server s USING (tool) "
        f"ORDER BY 3 DESC, 1 LIMIT {TOP}"
    )
    stats.servers_usage = q(
        "SELECT coalesce(s.server, '(unknown)'), sum(c.calls)::BIGINT FROM tool_calls c LEFT JOIN tool_server s USING (tool) "
        f"GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT {TOP}"
    )
    stats.tokens = _histogram(q, "SELECT tokens AS x FROM traj")


def _tool_servers(store: Store | None) -> Any:
    """Tool name -> server name, for the names a tool gets when its server is offered alone
    and when all servers are offered together (``envs.tools`` renders both)."""
    import pyarrow as pa

    pairs: set[tuple[str, str]] = set()
    if store is not None:
        from trajkit.envs.tools import tool_routes

        rows = store.rows("servers", ["server_id", "name", "tools"])
        for route in tool_routes(rows) + [r for row in rows for r in tool_routes([row])]:
            pairs.add((route.name, route.server))
    by_tool: dict[str, set[str]] = {}
    for tool, server in pairs:
        by_tool.setdefault(tool, set()).add(server)
    tools = sorted(by_tool)
    schema = pa.schema([("tool", pa.string()), ("server", pa.string())])
    return pa.table({"tool": tools, "server": ["|".join(sorted(by_tool[t])) for t in tools]}, schema=schema)


def _histogram(q: Any, source: str, bins: int = 30) -> Histogram | None:
    """``bins - 1`` equal bins from the minimum to p99, and a last bin for everything from p99 up."""
    lo, p50, p90, p99, hi, n = q(
        f"SELECT min(x), quantile_cont(x, 0.5), quantile_cont(x, 0.9), quantile_cont(x, 0.99), max(x), count(x) FROM ({source})"
    )[0]
    if not n:
        return None
    top = p99 if p99 > lo else hi
    width = max((top - lo) / (bins - 1), 1e-9)
    counts = dict(
        q(
            f"SELECT least(floor((x - {lo}) / {width}), {bins - 1})::INT, count(*) FROM ({source}) WHERE x IS NOT NULL GROUP BY 1"
        )
    )
    return Histogram(
        edges=[lo + i * width for i in range(bins)] + [hi],
        counts=[counts.get(i, 0) for i in range(bins)],
        quantiles={"min": lo, "p50": p50, "p90": p90, "p99": p99, "max": hi},
    )


def _table_info(store: Store, name: str) -> TableInfo:
    paths = store.shards(name)
    tbl = S.table(name)
    return TableInfo(
        name, store.count(name), len(paths), sum(p.stat().st_size for p in paths), tbl.schema.names, tbl.doc
    )


def examples(
    store: Store, n_trajectories: int = 2, n_tasks: int = 3
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A few tasks and completed trajectories (the first ones in shard order: a LIMIT, no sort)."""
    present = set(store.tables())
    tasks, trajs = [], []
    con = store.duckdb()
    try:
        if "tasks" in present:
            rel = con.sql(
                f"SELECT task_id, mode, source_id, question, difficulty FROM tasks WHERE question IS NOT NULL LIMIT {n_tasks}"
            )
            tasks = rel.to_arrow_table().to_pylist()
        if "trajectories" in present:
            rel = con.sql(
                "SELECT traj_id, task_id, model, status, num_turns, num_tool_calls, messages FROM trajectories "
                f"WHERE status = 'completed' AND reject_reason IS NULL LIMIT {n_trajectories}"
            )
            trajs = rel.to_arrow_table().to_pylist()
    finally:
        con.close()
    return tasks, trajs
