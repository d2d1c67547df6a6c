"""Explicit Arrow schemas for every table trajkit writes.

Column names and enum values here are canonical (see docs/schema.md, which a
test checks against this file). Enums are lowercase strings. Each schema
carries its version in the metadata key ``trajkit.schema_version``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

VERSION_KEY = b"trajkit.schema_version"
TABLE_KEY = b"trajkit.table"

# ---------------------------------------------------------------- enums
SERVER_STATUS = ("ok", "failed")
SERVER_STATES = ("stateless", "stateful")
TRANSPORTS = ("stdio", "http")
SYNTH_MODES = ("single_tool", "multi_tool", "multi_server")  # how synth tasks make a task (Toucan)
TASK_MODES = (*SYNTH_MODES, "imported", "trace")  # trace: a recorded or imported trace's first user message
VS_METHODS = ("direct", "vs_standard", "vs_cot", "vs_multi")
TRAJ_STATUS = ("completed", "truncated", "failed", "aborted")
# where a trajectory came from when not trajkit's own agent loop (null): another agent's calls recorded by
# ``model serve --record``, or traces imported from a file (``curate traces``)
TRAJ_SOURCES = ("recorded", "imported")
VERDICTS = ("pass", "fail", "timeout", "memory", "error")
DIFFICULTIES = ("unsolved", "hard", "medium", "easy", "trivial")
SPLITS = ("train", "held_out")
REVIEW_TARGETS = ("task", "trajectory")
REVIEW_DECISIONS = ("accept", "reject")  # null: no decision (labels only, or a state an undo cleared)
# Why a trajectory (or an attempt's sample, or a harvested server) did not end well, beside the free-text
# reason; set where the agent loop and the stages write reasons (envs/agent.py, envs/discovery.py,
# synth/rollouts.py, synth/extend.py).
REASON_CODES = (
    "model_error",  # the model request failed
    "malformed_call",  # a tool call that could not be parsed
    "unknown_tool",  # a call to a tool that was not offered
    "bad_arguments",  # arguments that are not JSON, not an object, or violate the tool's schema
    "tool_error",  # calling the tool raised in trajkit (not a server fault)
    "server_crash",  # a server would not start, exited, went away or answered garbage
    "unreachable",  # no connection to an HTTP server (refused, unknown host, connect timed out)
    "timeout",  # a server start or a tool call timed out
    "unknown_server",  # the task names a server the run does not have
    "turn_limit",  # max_turns reached
    "context_limit",  # max_context_tokens reached
    "max_tokens",  # the final answer hit max_tokens
    "probe_failed",  # an end-state probe of the outcome check failed
    "token_trace",  # the token trace does not match the turns
    "target_reached",  # cancelled: the stage's target was reached
    "conversation_ended",  # the user simulator ended the conversation (no extension)
    "extension_failed",  # the user simulator gave no usable follow-up
    "interrupted",  # the recording proxy stopped before the upstream answered the call
    "state_not_reproducible",  # an extension's replay of the earlier turns' calls gave other results
    "line_too_long",  # a server sent a message over its cap (envs.stdio.MAX_LINE, its max_message_mib)
)

TRANSIENT = ("model_error", "timeout", "unreachable")  # the reason codes of faults a rerun may cure: stages retry them
# a judge's row: its request failed (retried on resume), or its answer could not be read (synth.filter rejects it)
JUDGE_REASON_CODES = ("model_error", "judge_unreadable")

ENUMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("servers", "status"): SERVER_STATUS,
    ("servers", "transport"): TRANSPORTS,
    ("servers", "state"): SERVER_STATES,
    ("servers", "reason_code"): REASON_CODES,
    ("tasks", "mode"): TASK_MODES,
    ("tasks", "vs_method"): VS_METHODS,
    ("trajectories", "status"): TRAJ_STATUS,
    ("trajectories", "source"): TRAJ_SOURCES,
    ("trajectories", "verdict"): VERDICTS,
    ("trajectories", "reason_code"): REASON_CODES,
    ("samples", "verdict"): VERDICTS,
    ("samples", "reason_code"): REASON_CODES,
    ("eval_tools", "reason_code"): REASON_CODES,
    ("task_quality", "judge_reason_code"): JUDGE_REASON_CODES,
    ("trajectory_quality", "judge_reason_code"): JUDGE_REASON_CODES,
    ("passk", "difficulty"): DIFFICULTIES,
    ("splits", "split"): SPLITS,
    ("reviews", "target_kind"): REVIEW_TARGETS,
    ("reviews", "decision"): REVIEW_DECISIONS,
}

# ---------------------------------------------------------------- shared types
TOOL_CALL = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("arguments", pa.string()),  # JSON text, as in the OpenAI format
    ]
)
MEDIA_PART = pa.struct(
    [
        pa.field("type", pa.string()),  # image | audio
        pa.field("mime_type", pa.string()),
        pa.field("data", pa.string()),  # base64; null when over the size cap (envs.session.MAX_MEDIA_BYTES)
        pa.field("size", pa.int64()),  # bytes
    ]
)
MESSAGE = pa.struct(
    [
        pa.field("role", pa.string()),
        pa.field("content", pa.string()),
        pa.field("reasoning_content", pa.string()),
        pa.field("tool_calls", pa.list_(TOOL_CALL)),
        pa.field("tool_call_id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("parts", pa.list_(MEDIA_PART)),  # a tool result's image/audio content
    ]
)
TOOL = pa.struct(
    [
        pa.field("server", pa.string()),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field("input_schema", pa.string()),  # JSON Schema as JSON text
        pa.field("annotations", pa.string()),  # JSON text or null
        pa.field("title", pa.string()),
        pa.field("output_schema", pa.string()),  # JSON Schema of structured output as JSON text, or null
    ]
)
RESOURCE = pa.struct(
    [
        pa.field("uri", pa.string()),  # a URI template for resource_templates
        pa.field("name", pa.string()),
        pa.field("title", pa.string()),
        pa.field("description", pa.string()),
        pa.field("mime_type", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("annotations", pa.string()),  # JSON text or null
    ]
)
PROMPT_ARGUMENT = pa.struct(
    [pa.field("name", pa.string()), pa.field("description", pa.string()), pa.field("required", pa.bool_())]
)
PROMPT = pa.struct(
    [
        pa.field("name", pa.string()),
        pa.field("title", pa.string()),
        pa.field("description", pa.string()),
        pa.field("arguments", pa.list_(PROMPT_ARGUMENT)),
    ]
)
VERIFIER = pa.struct([pa.field("kind", pa.string()), pa.field("spec", pa.string())])
SAMPLING = pa.struct(
    [
        pa.field("temperature", pa.float64()),
        pa.field("top_p", pa.float64()),
        pa.field("max_tokens", pa.int32()),
        pa.field("seed", pa.int64()),
    ]
)
SERVER_INFO = pa.struct(
    [
        pa.field("name", pa.string()),
        pa.field("version", pa.string()),
        pa.field("protocol_version", pa.string()),
        pa.field("instructions", pa.string()),
    ]
)
CALL = pa.struct(  # one model or tool call of an episode, for the viewer's timeline
    [
        pa.field("kind", pa.string()),  # model | tool
        pa.field("name", pa.string()),  # the tool's name; null for a model call
        pa.field("message", pa.int32()),  # index in messages of what it produced; null: a model call that failed
        pa.field("start_s", pa.float64()),  # seconds from the episode's start
        pa.field("seconds", pa.float64()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("status", pa.string()),  # model: the finish reason (stop, tool_calls, length, error); tool: ok, error
    ]
)
PASS_AT = pa.struct([pa.field("k", pa.int32()), pa.field("value", pa.float64())])
# one attempt of an evaluation: the text judged, the verdict, and why (eval_passk.attempts)
ATTEMPT = pa.struct(
    [
        pa.field("sample_index", pa.int32()),
        pa.field("completion", pa.string()),
        pa.field("verdict", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("reason", pa.string()),
        pa.field("reason_code", pa.string()),
        pa.field("details", pa.string()),
        pa.field("output_tail", pa.string()),
    ]
)


def _req(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=False)


# ---------------------------------------------------------------- tables
@dataclass(frozen=True)
class Table:
    """A table's name, primary key, schema, version and (for annotations) its base."""

    name: str
    key: str
    schema: pa.Schema
    version: int = 1
    base: str | None = None  # annotation tables name the base table they join onto
    doc: str = ""
    added: tuple[str, ...] = ()  # nullable columns added after version 1: older shards lack them (read as null)

    def arrow_schema(self) -> pa.Schema:
        return self.schema.with_metadata({VERSION_KEY: str(self.version), TABLE_KEY: self.name})


SERVERS = Table(
    "servers",
    "server_id",
    pa.schema(
        [
            _req("server_id", pa.string()),
            _req("name", pa.string()),
            _req("transport", pa.string()),
            pa.field("command", pa.string()),
            pa.field("args", pa.list_(pa.string())),
            pa.field("url", pa.string()),
            pa.field("env_names", pa.list_(pa.string())),
            pa.field("server_info", SERVER_INFO),
            pa.field("tools", pa.list_(TOOL)),
            pa.field("num_tools", pa.int32()),
            pa.field("resources", pa.list_(RESOURCE)),
            pa.field("resource_templates", pa.list_(RESOURCE)),
            pa.field("prompts", pa.list_(PROMPT)),
            pa.field("state", pa.string()),  # stateless | stateful (the config's state:, else inferred)
            pa.field("notes", pa.list_(pa.string())),  # warnings about the server, e.g. a stateful HTTP server
            _req("status", pa.string()),
            pa.field("reason", pa.string()),
            pa.field("reason_code", pa.string()),  # why a server failed (timeout: retried on resume)
            pa.field("volatile", pa.list_(pa.string())),  # the config's volatile result fields (envs/volatile.py)
        ]
    ),
    doc="Harvested MCP servers: one row per entry of the mcpServers config.",
    version=3,
    added=("reason_code", "volatile"),
)

TASKS = Table(
    "tasks",
    "task_id",
    pa.schema(
        [
            _req("task_id", pa.string()),
            pa.field("source_id", pa.string()),
            pa.field("source", pa.string()),
            pa.field("question", pa.string()),
            pa.field("target_tools", pa.list_(pa.string())),
            pa.field("server_ids", pa.list_(pa.string())),
            _req("mode", pa.string()),
            pa.field("generator_model", pa.string()),
            pa.field("vs_method", pa.string()),
            pa.field("vs_probability", pa.float64()),
            pa.field("verifier", VERIFIER),
            pa.field("metadata", pa.string()),  # JSON text: prompt, entry point, etc.
            pa.field("raw_output", pa.string()),
        ]
    ),
    doc="Tasks from synthesis or imports; a task's verifier is a kind plus a JSON spec.",
)

TRAJECTORIES = Table(
    "trajectories",
    "traj_id",
    pa.schema(
        [
            _req("traj_id", pa.string()),
            _req("task_id", pa.string()),
            pa.field("parent_id", pa.string()),
            pa.field("rollout_index", pa.int32()),
            pa.field("model", pa.string()),
            pa.field("backend", pa.string()),
            pa.field("sampling", SAMPLING),
            pa.field("tools", pa.list_(TOOL)),
            pa.field("messages", pa.list_(MESSAGE)),
            _req("status", pa.string()),
            pa.field("reason", pa.string()),
            pa.field("reason_code", pa.string()),
            pa.field("verdict", pa.string()),  # the task verifier's outcome; null: no verifier or not judged
            pa.field("model_s", pa.float64()),
            pa.field("tools_s", pa.float64()),
            pa.field("total_s", pa.float64()),
            pa.field("prompt_tokens", pa.int64()),
            pa.field("completion_tokens", pa.int64()),
            # flattened side columns, fast to filter in SQL
            pa.field("roles", pa.list_(pa.string())),
            pa.field("tools_called", pa.list_(pa.string())),
            pa.field("num_turns", pa.int32()),
            pa.field("num_tool_calls", pa.int32()),
            pa.field("final_answer", pa.string()),
            # outputs of the task's outcome-check probes, read at the episode's end
            pa.field("end_state", pa.list_(pa.string())),
            # token-in/token-out
            pa.field("token_ids", pa.list_(pa.int32())),
            pa.field("loss_mask", pa.list_(pa.int8())),
            pa.field("logprobs", pa.list_(pa.float32())),
            pa.field("policy_version", pa.int64()),
            pa.field("source", pa.string()),  # recorded | imported; null: trajkit's agent loop
            pa.field("calls", pa.list_(CALL)),  # each model and tool call, in the order they started
        ]
    ),
    version=4,
    added=("reason_code", "verdict", "source", "calls"),
    doc="Agent rollouts in the OpenAI chat format, with side columns and tokens.",
)

SAMPLES = Table(
    "samples",
    "sample_id",
    pa.schema(
        [
            _req("sample_id", pa.string()),
            _req("task_id", pa.string()),
            _req("sample_index", pa.int32()),
            pa.field("model", pa.string()),
            pa.field("completion", pa.string()),
            pa.field("traj_id", pa.string()),
            _req("verdict", pa.string()),
            pa.field("score", pa.float64()),
            pa.field("runtime_s", pa.float64()),
            pa.field("output_tail", pa.string()),
            pa.field("details", pa.string()),  # JSON text from the verifier
            pa.field("reason_code", pa.string()),  # why an attempt could not be judged (verdict error)
        ]
    ),
    version=2,
    added=("reason_code",),
    doc="Verified completions: one row per (task, sample index).",
)

REJECTED = Table(
    "rejected",
    "reject_id",
    pa.schema(
        [
            _req("reject_id", pa.string()),
            _req("row_id", pa.string()),
            _req("table_name", pa.string()),
            _req("stage", pa.string()),
            _req("reason", pa.string()),
            pa.field("detail", pa.string()),
        ]
    ),
    doc="Rows a filter or a stage rejected, with the reason; the rows stay in their table.",
)

TASK_QUALITY = Table(
    "task_quality",
    "task_id",
    pa.schema(
        [
            _req("task_id", pa.string()),
            pa.field("judge_model", pa.string()),
            pa.field("tool_selection_difficulty", pa.float64()),
            pa.field("tool_selection_uniqueness", pa.float64()),
            pa.field("question_quality", pa.float64()),
            pa.field("scenario_realism", pa.float64()),
            pa.field("verifiability", pa.float64()),
            pa.field("stability", pa.float64()),
            pa.field("quality_score", pa.float64()),
            pa.field("judge_reason", pa.string()),
            pa.field("judge_raw", pa.string()),
            pa.field("judge_reason_code", pa.string()),  # JUDGE_REASON_CODES; null: the answer was read
        ]
    ),
    version=2,
    added=("judge_reason_code",),
    base="tasks",
    doc="LLM-judge scores for tasks on Toucan's six dimensions (1-5; null if unparsed).",
)

TRAJECTORY_QUALITY = Table(
    "trajectory_quality",
    "traj_id",
    pa.schema(
        [
            _req("traj_id", pa.string()),
            pa.field("judge_model", pa.string()),
            pa.field("completeness", pa.float64()),
            pa.field("conciseness", pa.float64()),
            pa.field("tool_accuracy", pa.float64()),
            pa.field("order_correct", pa.bool_()),
            pa.field("judge_reason", pa.string()),
            pa.field("judge_raw", pa.string()),
            pa.field("judge_reason_code", pa.string()),  # JUDGE_REASON_CODES; null: the answer was read
        ]
    ),
    version=2,
    added=("judge_reason_code",),
    base="trajectories",
    doc="Judge scores (completeness, conciseness) and computed tool accuracy.",
)

PASSK = Table(
    "passk",
    "task_id",
    pa.schema(
        [
            _req("task_id", pa.string()),
            pa.field("model", pa.string()),
            _req("samples", pa.int32()),
            _req("correct", pa.int32()),
            pa.field("pass_at_1", pa.float64()),
            pa.field("pass_at", pa.list_(PASS_AT)),
            _req("difficulty", pa.string()),
        ]
    ),
    base="tasks",
    doc="pass@k per task from verified samples, with the difficulty bucket.",
)

DEDUP = Table(
    "dedup",
    "task_id",
    pa.schema(
        [
            _req("task_id", pa.string()),
            _req("cluster_id", pa.string()),
            _req("cluster_size", pa.int32()),
            _req("duplicate", pa.bool_()),
        ]
    ),
    base="tasks",
    doc="Near-duplicate clusters; one row per task kept as the cluster's representative.",
)

SPLITS_TABLE = Table(
    "splits",
    "task_id",
    pa.schema([_req("task_id", pa.string()), _req("split", pa.string())]),
    base="tasks",
    doc="Train / held-out assignment by id hash, one side per near-duplicate cluster.",
)

CURRICULUM = Table(
    "curriculum",
    "task_id",
    pa.schema(
        [
            _req("task_id", pa.string()),
            _req("stage", pa.string()),
            pa.field("phase", pa.int32()),
            pa.field("rollouts_per_prompt", pa.int32()),
            pa.field("weight", pa.float64()),
        ]
    ),
    base="tasks",
    doc="Curriculum stage per training task (broad, hard), rollouts per prompt.",
)

EVAL_PASSK = Table(
    "eval_passk",
    "eval_id",
    pa.schema(
        [
            _req("eval_id", pa.string()),
            _req("model", pa.string()),
            _req("task_id", pa.string()),
            pa.field("difficulty", pa.string()),
            _req("samples", pa.int32()),
            _req("correct", pa.int32()),
            pa.field("pass_at", pa.list_(PASS_AT)),
            pa.field("attempts", pa.list_(ATTEMPT)),
        ]
    ),
    version=2,
    added=("attempts",),
    doc="Evaluation pass@k per (model, task).",
)

EVAL_TOOLS = Table(
    "eval_tools",
    "eval_id",
    pa.schema(
        [
            _req("eval_id", pa.string()),
            _req("model", pa.string()),
            _req("traj_id", pa.string()),
            _req("turn", pa.int32()),
            pa.field("server", pa.string()),
            pa.field("expected", pa.string()),  # JSON list of calls
            pa.field("predicted", pa.string()),
            pa.field("name_correct", pa.bool_()),
            pa.field("args_correct", pa.bool_()),
            pa.field("correct", pa.bool_()),
            pa.field("reason", pa.string()),
            pa.field("reason_code", pa.string()),  # model_error: the request failed (retried on resume)
        ]
    ),
    version=2,
    added=("reason_code",),
    doc="Tool-call accuracy per replayed assistant turn (BFCL-style).",
)

TRAIN_METRICS = Table(
    "train_metrics",
    "metric_id",
    pa.schema(
        [
            _req("metric_id", pa.string()),
            _req("stage", pa.string()),
            _req("step", pa.int32()),
            pa.field("reward_mean", pa.float64()),
            pa.field("reward_std", pa.float64()),
            pa.field("pass_rate", pa.float64()),
            pa.field("completion_length", pa.float64()),
            pa.field("zero_variance_groups", pa.float64()),
            pa.field("loss", pa.float64()),
            pa.field("clip_fraction", pa.float64()),  # tokens clipped by the importance ratio
            pa.field("staleness", pa.float64()),  # optimizer steps since the step's samples were generated
            pa.field("tokens_per_s", pa.float64()),  # completion tokens/s, cumulative since the stage started
            pa.field("metrics", pa.string()),  # all trainer logs for the step, JSON text
        ]
    ),
    doc="Per-step training metrics of each SFT/GRPO stage.",
)

REVIEWS = Table(
    "reviews",
    "review_id",
    pa.schema(
        [
            _req("review_id", pa.string()),
            _req("target_id", pa.string()),
            _req("target_kind", pa.string()),
            pa.field("decision", pa.string()),  # required in version 1
            pa.field("labels", pa.list_(pa.string())),
            pa.field("note", pa.string()),
            _req("reviewer", pa.string()),
            _req("reviewed_at", pa.timestamp("us", tz="UTC")),
            pa.field("batch_id", pa.string()),
        ]
    ),
    version=2,
    added=("labels", "batch_id"),
    doc="Human reviews of tasks and trajectories; append-only, the latest review of a row wins.",
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        SERVERS,
        TASKS,
        TRAJECTORIES,
        SAMPLES,
        REJECTED,
        TASK_QUALITY,
        TRAJECTORY_QUALITY,
        PASSK,
        DEDUP,
        SPLITS_TABLE,
        CURRICULUM,
        EVAL_PASSK,
        EVAL_TOOLS,
        TRAIN_METRICS,
        REVIEWS,
    )
}


# ---------------------------------------------------------------- helpers
class SchemaError(ValueError):
    """A batch that does not fit its table's schema (names the table, field and row)."""


def table(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise SchemaError(f"unknown table {name!r}; known: {', '.join(TABLES)}") from None


def content_id(*parts: Any, length: int = 16) -> str:
    """A stable id: the hash of the inputs that define a row (never of model output)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def seed_for(*parts: Any) -> int:
    """A 31-bit seed derived from the inputs that define a row (base seed, task, index, ...).

    Every stage derives per-row seeds this one way, so a row's sampling does not
    depend on which other rows run beside it, or on the backend.
    """
    return int(content_id(*parts)[:8], 16) & 0x7FFFFFFF


def _check_enum(tbl: Table, column: str, values: list[Any]) -> None:
    allowed = ENUMS.get((tbl.name, column))
    if allowed is None:
        return
    for i, v in enumerate(values):
        if v is not None and v not in allowed:
            raise SchemaError(f"{tbl.name}.{column} row {i}: {v!r} is not one of {', '.join(allowed)}")


def to_batch(name: str, rows: list[dict[str, Any]] | pa.Table | pa.RecordBatch) -> pa.Table:
    """Validate rows (dicts or Arrow) against a table's schema and cast to it exactly.

    Unknown columns, missing required values, wrong types and bad enum values
    raise SchemaError naming the table, the field and the row.
    """
    if isinstance(rows, (pa.Table, pa.RecordBatch)):
        return _cast_arrow(name, rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows]))
    tbl = table(name)
    schema = tbl.arrow_schema()
    for i, row in enumerate(rows):
        extra = set(row) - set(schema.names)
        if extra:
            raise SchemaError(f"{name}.{min(extra)} row {i}: unknown field")
    columns = {}
    for field in schema:
        values = [row.get(field.name) for row in rows]
        if not field.nullable:
            for i, v in enumerate(values):
                if v is None:
                    raise SchemaError(f"{name}.{field.name} row {i}: required value is missing")
        _check_enum(tbl, field.name, values)
        if pa.types.is_list(field.type):
            for i, v in enumerate(values):
                if isinstance(v, (str, bytes)):
                    raise SchemaError(f"{name}.{field.name} row {i}: expected a list, got a string")
        try:
            columns[field.name] = pa.array(values, type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            row = _first_bad_row(values, field.type)
            raise SchemaError(f"{name}.{field.name} row {row}: {e}") from None
    return pa.Table.from_pydict(columns, schema=schema)


def _cast_arrow(name: str, data: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    tbl = table(name)
    schema = tbl.arrow_schema()
    extra = set(data.column_names) - set(schema.names)
    if extra:
        raise SchemaError(f"{name}.{min(extra)}: unknown field")
    columns = []
    for field in schema:
        if field.name in data.column_names:
            col = data.column(field.name)
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaError(f"{name}.{field.name}: {e}") from None
        else:
            col = pa.nulls(len(data), field.type)
        if not field.nullable and col.null_count:
            row = pc.index(pc.is_null(col), True).as_py()
            raise SchemaError(f"{name}.{field.name} row {row}: required value is missing")
        allowed = ENUMS.get((name, field.name))
        if allowed is not None:
            bad = pc.and_(pc.invert(pc.is_in(col, pa.array(allowed))), pc.is_valid(col))
            if pc.any(bad).as_py():
                row = pc.index(bad, True).as_py()
                raise SchemaError(
                    f"{name}.{field.name} row {row}: {col[row].as_py()!r} is not one of {', '.join(allowed)}"
                )
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def _first_bad_row(values: list[Any], type_: pa.DataType) -> int:
    for i, v in enumerate(values):
        try:
            pa.array([v], type=type_)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            return i
    return 0


def check_schema(name: str, schema: pa.Schema, where: str = "") -> None:
    """Raise SchemaError unless a file's schema matches the table's schema (an older file may
    lack the table's ``added`` columns)."""
    tbl = table(name)
    meta = schema.metadata or {}
    owner, version = meta.get(TABLE_KEY, name.encode()).decode(errors="replace"), meta.get(VERSION_KEY, b"1")
    if owner != name:
        raise SchemaError(f"{where or name}: a shard of table {owner!r}, not {name!r}")
    if not version.isdigit() or int(version) > tbl.version:
        raise SchemaError(
            f"{where or name}: written as {name} schema v{version.decode(errors='replace')} by a newer trajkit "
            f"(this one reads up to v{tbl.version}); upgrade trajkit to read it"
        )
    expected = tbl.schema
    got = pa.schema(list(schema)).remove_metadata()
    if got.equals(expected):
        return
    for field in expected:
        if field.name not in got.names:
            if field.name in tbl.added:
                continue
            raise SchemaError(f"{where or name}: missing field {field.name!r}")
        if not got.field(field.name).type.equals(field.type):
            raise SchemaError(
                f"{where or name}: field {field.name!r} is {got.field(field.name).type}, expected {field.type}"
            )
    extra = [n for n in got.names if n not in expected.names]
    if extra or got.names != [n for n in expected.names if n in got.names]:
        raise SchemaError(f"{where or name}: unexpected field(s) {', '.join(extra) or '(order differs)'}")


def upgrade(name: str, data: pa.Table, columns: list[str] | None = None) -> pa.Table:
    """Rows read from an older shard with the ``added`` columns it lacks filled in as nulls."""
    tbl = table(name)
    missing = [c for c in tbl.added if c not in data.column_names and (columns is None or c in columns)]
    if not missing:
        return data
    for c in missing:
        data = data.append_column(tbl.schema.field(c), pa.nulls(len(data), tbl.schema.field(c).type))
    if columns is not None:
        return data.select(columns)
    return pa.Table.from_arrays([data.column(c) for c in tbl.schema.names], schema=tbl.arrow_schema())
