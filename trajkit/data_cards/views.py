"""The card's training-ready views, ``sft`` and ``rl``: Parquet files written beside the card.

* ``sft``: accepted trajectories (``trajkit.accepted``) in the OpenAI chat format: ``messages``
  (tool calls nested as ``{"id", "type": "function", "function": {"name", "arguments"}}``) and
  ``tools`` (OpenAI function tools, ``parameters`` a JSON object), ready for a chat template's
  ``tools=`` and for TRL's ``SFTTrainer``.
* ``rl``: accepted tasks with a prompt: the conversational ``prompt`` (as trajkit's own GRPO
  builds it, ``envs.solve.grpo_rows``), the verifier (kind and JSON spec), ``difficulty``,
  ``split``, curriculum ``stage``, the server set (``environment``) and its ``tools``.

``tools`` is a list of JSON values (Arrow's ``arrow.json`` extension type, Parquet's JSON logical
type): each tool keeps its own parameter schema, which no shared struct type could hold, and
``datasets`` decodes the values back into dicts (its ``Json`` feature).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trajkit.accepted import accepted, accepted_where, excluding_labels
from trajkit.redact import Redactor
from trajkit.store import Store

VIEWS = ("sft", "rl")
VIEW_TABLES = {"sft": ("trajectories",), "rl": ("tasks", "servers", "splits", "curriculum", "passk")}  # their text
DATA = "data"
BATCH_ROWS = 16_384  # trajectories written at a time: the sft view streams, whatever the run's size
TOOLS = pa.list_(pa.json_())
FUNCTION_CALL = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("type", pa.string()),
        pa.field("function", pa.struct([pa.field("name", pa.string()), pa.field("arguments", pa.string())])),
    ]
)
OPENAI_MESSAGE = pa.struct(
    [
        pa.field("role", pa.string()),
        pa.field("content", pa.string()),
        pa.field("reasoning_content", pa.string()),
        pa.field("tool_calls", pa.list_(FUNCTION_CALL)),
        pa.field("tool_call_id", pa.string()),
        pa.field("name", pa.string()),
    ]
)
CHAT = pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))
SCHEMAS = {
    "sft": pa.schema(
        [
            pa.field("messages", pa.list_(OPENAI_MESSAGE)),
            pa.field("tools", TOOLS),
            pa.field("traj_id", pa.string()),
            pa.field("task_id", pa.string()),
            pa.field("model", pa.string()),
        ]
    ),
    "rl": pa.schema(
        [
            pa.field("prompt", CHAT),
            pa.field("task_id", pa.string()),
            pa.field("verifier_kind", pa.string()),
            pa.field("verifier_spec", pa.string()),
            pa.field("difficulty", pa.string()),
            pa.field("split", pa.string()),
            pa.field("stage", pa.string()),
            pa.field("environment", pa.string()),
            pa.field("target_tools", pa.list_(pa.string())),
            pa.field("tools", TOOLS),
        ]
    ),
}
DOCS = {
    "sft": "accepted trajectories as OpenAI `messages` + `tools` (for SFT)",
    "rl": "accepted tasks: `prompt`, verifier, difficulty, split, curriculum stage, tools (for RL)",
}


def view_glob(view: str) -> str:
    """Where a view's files are, relative to the card directory and in the Hub repository."""
    return f"{DATA}/{view}/*.parquet"


# The sft view in SQL, so a card of a million trajectories converts them in DuckDB, not row by row in
# Python: the same OpenAI shapes as export.openai_messages and export.openai_tools (a test checks it).
SFT_SELECT = """
SELECT
  list_transform(messages, lambda m: {
    'role': m.role,
    'content': coalesce(m.content, ''),
    'reasoning_content': nullif(m.reasoning_content, ''),
    'tool_calls': CASE WHEN len(m.tool_calls) > 0 THEN list_transform(m.tool_calls, lambda c, i: {
      'id': coalesce(nullif(c.id, ''), 'call_' || (i - 1)),
      'type': 'function',
      'function': {'name': c.name, 'arguments': coalesce(nullif(c.arguments, ''), '{}')}
    }) END,
    'tool_call_id': nullif(m.tool_call_id, ''),
    'name': CASE WHEN m.role = 'tool' THEN nullif(m.name, '') END
  }) AS messages,
  list_transform(coalesce(tools, []), lambda t: json_object(
    'type', 'function',
    'function', json_object(
      'name', t.name,
      'description', coalesce(t.description, ''),
      'parameters', CASE WHEN json_valid(t.input_schema) THEN t.input_schema::JSON ELSE '{}'::JSON END
    )
  )::VARCHAR) AS tools,
  traj_id, task_id, model
FROM trajectories
"""


def sft_batches(store: Store, memory_limit: str = "1GB") -> Iterator[pa.Table]:
    """Accepted trajectories with messages, in shard order (no sort: the view streams), ``BATCH_ROWS`` at
    a time, in the view's schema."""
    query = (
        f"{SFT_SELECT} WHERE {accepted_where('trajectories', excluded=excluding_labels(store))} AND len(messages) > 0"
    )
    schema = SCHEMAS["sft"]
    as_text = pa.schema([pa.field("tools", pa.list_(pa.string())) if f.name == "tools" else f for f in schema])
    con = store.duckdb()
    con.execute(f"SET memory_limit = '{memory_limit}'")
    try:
        for batch in con.sql(query).to_arrow_reader(BATCH_ROWS):
            yield pa.Table.from_batches([batch]).cast(as_text).cast(schema)
    finally:
        con.close()


def rl_rows(store: Store) -> list[dict[str, Any]]:
    """Accepted tasks with a prompt, in id order, with their split, curriculum stage and tools."""
    from trajkit.envs.solve import grpo_rows, is_tool_task
    from trajkit.envs.tools import tool_schemas

    tasks = sorted(accepted(store, "tasks").to_pylist(), key=lambda t: t["task_id"])
    by_id = {t["task_id"]: t for t in tasks}
    servers = store.rows("servers")
    out = []
    for row in grpo_rows(tasks):
        task = by_id[row["task_id"]]
        try:
            tools = tool_schemas(servers, task.get("server_ids")) if is_tool_task(task) else []
        except KeyError:  # a task naming a server the run does not have: offered nothing
            tools = []
        row.update(
            split=task.get("split"),
            stage=task.get("stage"),
            tools=[json.dumps(t, ensure_ascii=False) for t in tools],
        )
        out.append(row)
    return out


def write_views(store: Store, card_dir: Path, memory_limit: str = "1GB") -> dict[str, int]:
    """Write each view that has rows as ``card_dir/data/<view>/train-00000.parquet`` (atomically;
    an earlier rendering's files go); rows per view."""
    return {
        "sft": _write(card_dir / DATA / "sft", "sft", sft_batches(store, memory_limit), _redactor(store, "sft")),
        "rl": _write(card_dir / DATA / "rl", "rl", iter([_table("rl", rl_rows(store))]), _redactor(store, "rl")),
    }


def _redactor(store: Store, view: str) -> Redactor | None:
    """The store's redactor when a view's rows go through it again; None when every shard the view reads
    from was redacted as it was written (``push`` scans what leaves either way)."""
    return None if all(store.redacted(table) for table in VIEW_TABLES[view]) else store.redactor


def _write(folder: Path, view: str, batches: Iterator[pa.Table], redactor: Redactor | None) -> int:
    """Stream tables into one Parquet file, renamed into place once complete; rows written."""
    for old in folder.glob("*.parquet"):
        old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    tmp, final = folder / f".tmp-{os.getpid()}-train-00000.parquet", folder / "train-00000.parquet"
    n = 0
    try:
        with pq.ParquetWriter(tmp, SCHEMAS[view], compression="zstd") as writer:
            for table in batches:
                writer.write_table(redactor.table(table) if redactor is not None else table)
                n += len(table)
        if n:
            os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def _table(view: str, rows: list[dict[str, Any]]) -> pa.Table:
    schema = SCHEMAS[view]
    columns = []
    for field in schema:
        values = [r.get(field.name) for r in rows]
        if field.type == TOOLS:  # JSON text, then viewed as JSON values
            columns.append(pa.array(values, type=pa.list_(pa.string())).cast(TOOLS))
        else:
            columns.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(columns, schema=schema)
