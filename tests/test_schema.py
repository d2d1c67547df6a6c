"""Schemas: explicit, versioned, validated with precise errors, documented in docs/schema.md."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from trajkit import schema as S

DOC = Path(__file__).resolve().parent.parent / "docs" / "schema.md"


def doc_tables() -> dict[str, list[tuple[str, str, bool]]]:
    tables, current = {}, None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
        elif current and (m := re.match(r"^\| `([^`]+)` \| `([^`]+)` \| (yes|no) \|", line)):
            tables.setdefault(current, []).append((m[1], m[2], m[3] == "yes"))
    return tables


def test_docs_match_schema_exactly():
    documented = doc_tables()
    assert set(documented) == set(S.TABLES), "docs/schema.md sections differ from schema.TABLES"
    for name, tbl in S.TABLES.items():
        expected = [(f.name, str(f.type), not f.nullable) for f in tbl.schema]
        assert documented[name] == expected, f"docs/schema.md is out of date for {name}"
    text = DOC.read_text()
    for (table, column), values in S.ENUMS.items():
        assert f"`{table}.{column}`: " + ", ".join(f"`{v}`" for v in values) in text


def test_canonical_columns_and_enums():
    traj = S.TRAJECTORIES.schema
    for col in (
        "roles",
        "tools_called",
        "num_turns",
        "num_tool_calls",
        "final_answer",
        "token_ids",
        "loss_mask",
        "logprobs",
        "policy_version",
    ):
        assert col in traj.names
    msg = traj.field("messages").type.value_type
    assert [f.name for f in msg] == [
        "role",
        "content",
        "reasoning_content",
        "tool_calls",
        "tool_call_id",
        "name",
        "parts",
    ]
    assert [f.name for f in msg.field("tool_calls").type.value_type] == ["id", "name", "arguments"]
    assert S.TRAJ_STATUS == ("completed", "truncated", "failed", "aborted")
    assert S.VERDICTS == ("pass", "fail", "timeout", "memory", "error")
    assert S.DIFFICULTIES == ("unsolved", "hard", "medium", "easy", "trivial")
    for tbl in S.TABLES.values():
        assert tbl.arrow_schema().metadata[S.VERSION_KEY] == str(tbl.version).encode()
        assert tbl.key in tbl.schema.names and not tbl.schema.field(tbl.key).nullable


@pytest.mark.parametrize(
    "rows, message",
    [
        (
            [{"task_id": "a", "mode": "imported"}, {"task_id": "b", "mode": "weird"}],
            r"tasks\.mode row 1: 'weird' is not one of",
        ),
        ([{"task_id": "a"}], r"tasks\.mode row 0: required value is missing"),
        ([{"task_id": "a", "mode": "imported", "bogus": 1}], r"tasks\.bogus row 0: unknown field"),
        ([{"task_id": "a", "mode": "imported", "target_tools": "add"}], r"tasks\.target_tools row 0: expected a list"),
        (
            [{"task_id": "a", "mode": "imported"}, {"task_id": "b", "mode": "imported", "vs_probability": "high"}],
            r"tasks\.vs_probability row 1",
        ),
    ],
)
def test_validation_errors_name_table_field_and_row(rows, message):
    with pytest.raises(S.SchemaError, match=message):
        S.to_batch("tasks", rows)


def test_arrow_input_is_cast_and_checked():
    ok = S.to_batch(
        "samples",
        pa.table({"sample_id": ["s"], "task_id": ["t"], "sample_index": [0], "verdict": ["pass"], "score": [1]}),
    )
    assert ok.schema.field("score").type == pa.float64() and ok.num_rows == 1
    with pytest.raises(S.SchemaError, match=r"samples\.verdict row 1: 'maybe'"):
        S.to_batch(
            "samples",
            pa.table(
                {"sample_id": ["s", "u"], "task_id": ["t", "t"], "sample_index": [0, 1], "verdict": ["pass", "maybe"]}
            ),
        )
    with pytest.raises(S.SchemaError, match="unknown table"):
        S.to_batch("nope", [])


def test_content_id_is_stable_and_input_defined():
    assert S.content_id("a", 1, {"x": [1, 2]}) == S.content_id("a", 1, {"x": [1, 2]})
    assert S.content_id("a", 1) != S.content_id("a", 2)
    assert len(S.content_id("a")) == 16
