"""The SQL box's second layer alone: with the parser's check patched to let everything through, no
statement of any type DuckDB's parser makes changes a byte under the run, a setting, a view or a table."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb

from trajkit.sqlread import statement_types
from trajkit.store import Store
from trajkit.view import db as db_module
from trajkit.view.db import QueryError, RunDB

# One or more statements of each type, aimed at the run ({run}, a shard of it, the views' database);
# the type is the last statement's.
STATEMENTS: dict[str, list[str]] = {
    "SELECT": [
        "SELECT * FROM enable_logging(storage = 'file', storage_path = '{run}/logs')",
        "FROM checkpoint()",
        "SELECT * FROM query('COPY (SELECT 1) TO ''{run}/q.csv''')",
    ],
    "INSERT": ["INSERT INTO tasks (task_id) VALUES ('forged')"],
    "UPDATE": ["UPDATE tasks SET question = 'forged'"],
    "CREATE": [
        "CREATE TABLE evil AS SELECT 1",
        "CREATE OR REPLACE VIEW tasks AS SELECT 'forged' AS task_id",
        "CREATE TEMP TABLE scratch AS SELECT 1",
        "CREATE FUNCTION evil() AS 1",
        "CREATE SECRET evil (TYPE s3, KEY_ID 'x', SECRET 'y')",
    ],
    "DELETE": ["TRUNCATE tasks"],
    "PREPARE": ["PREPARE p AS SELECT 1"],
    "EXECUTE": ["PREPARE p AS DELETE FROM tasks; EXECUTE p"],
    "ALTER": ["ALTER VIEW tasks RENAME TO gone"],
    "TRANSACTION": ["BEGIN TRANSACTION"],
    "COPY": [
        "COPY (SELECT 1 AS a) TO '{run}/tasks/forged.parquet'",
        "COPY (SELECT 'forged' AS task_id) TO '{shard}' (USE_TMP_FILE false)",  # over a shard, in place
        "COPY (SELECT 'x' AS target_id) TO '{run}/reviews/review-forged-000000.parquet'",
        "COPY (SELECT 1 AS a) TO '{run}/card' (FORMAT parquet, PARTITION_BY (a), OVERWRITE_OR_IGNORE)",
    ],
    "EXPLAIN": [
        "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{run}/x.csv'",
        "EXPLAIN ANALYZE DROP VIEW tasks",
    ],
    "DROP": ["DROP VIEW _raw_tasks CASCADE"],
    "EXPORT": ["EXPORT DATABASE '{run}/dump'"],
    "PRAGMA": [
        "PRAGMA enable_profiling",
        "IMPORT DATABASE '{run}'",
        "COPY FROM DATABASE memory TO system",
    ],
    "VACUUM": ["VACUUM", "ANALYZE"],
    "CALL": ["CALL enable_logging(storage = 'file', storage_path = '{run}/logs')", "FORCE CHECKPOINT"],
    "SET": [
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "RESET memory_limit",
        "PRAGMA memory_limit = '1GB'",
        "SET profile_output = '{run}/profile.json'",
        "SET VARIABLE x = 1",
    ],
    "LOAD": [
        "INSTALL httpfs",
        "FORCE INSTALL '{run}/card/README.md'",
        "LOAD '{run}/card/README.md'",
    ],
    "ATTACH": [
        "ATTACH '{run}/evil.duckdb' AS evil",
        "ATTACH ':memory:' AS scratch",
    ],
    "DETACH": ["DETACH DATABASE {views}"],
    "MULTI": ["PIVOT tasks ON mode USING count(*)"],
    "MERGE_INTO": [
        "MERGE INTO tasks USING (SELECT 'x' AS task_id) s ON tasks.task_id = s.task_id WHEN NOT MATCHED THEN DELETE",
    ],
    "UNKNOWN": ["UPDATE EXTENSIONS"],  # a type the installed duckdb's Python enum cannot name
}
# Types of duckdb's StatementType that its parser does not make from SQL text; the text that made some
# of them in earlier versions is among the statements above.
NOT_FROM_TEXT = {
    "INVALID": "no statement",
    "RELATION": "made by the Python relation API",
    "LOGICAL_PLAN": "a plan handed over by an extension",
    "EXTENSION": "a parser extension's statement (no extension loads here)",
    "ANALYZE": "ANALYZE parses as VACUUM",
    "VARIABLE_SET": "SET VARIABLE parses as SET",
    "CREATE_FUNC": "CREATE FUNCTION parses as CREATE",
    "COPY_DATABASE": "COPY FROM DATABASE parses as PRAGMA",
}
# What the user's connection shows of its state; temporary objects of its own session are left out
# (they live in its process only, which ends with the query).
STATE = """
SELECT 'setting' AS kind, name AS key, value FROM duckdb_settings()
UNION ALL SELECT 'database', database_name, coalesce(path, '') FROM duckdb_databases()
UNION ALL SELECT 'view', database_name || '.' || schema_name || '.' || view_name, sql
  FROM duckdb_views() WHERE NOT internal AND database_name <> 'temp'
UNION ALL SELECT 'table', database_name || '.' || schema_name || '.' || table_name, sql
  FROM duckdb_tables() WHERE database_name <> 'temp'
ORDER BY ALL
"""


def test_every_statement_type_has_statements_here():
    assert set(STATEMENTS) - {"UNKNOWN"} | set(NOT_FROM_TEXT) == set(duckdb.StatementType.__members__)
    assert not set(STATEMENTS) & set(NOT_FROM_TEXT)
    for kind, statements in STATEMENTS.items():
        for sql in statements:
            assert statement_types(sql.format(run="/r", shard="/r/s.parquet", views="v"))[-1] == kind, sql


def _files(*roots: Path) -> dict[str, str]:
    """Every file and directory under these, with the sha256 of each file's bytes."""
    out = {}
    for root in roots:
        for p in sorted([root, *root.rglob("*")] if root.is_dir() else [root]):
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def test_no_statement_of_any_type_changes_the_run_a_setting_a_view_or_a_table(run_copy, monkeypatch):
    monkeypatch.setattr(db_module, "check_read", lambda sql: None)  # layer (a) lets everything through
    db = RunDB(run_copy)
    box_state, pages_state = db.read_only(STATE).to_pylist(), db.query(STATE).to_pylist()
    views = Path(db._views[0])
    before = _files(run_copy, views)
    name = db.read_only("SELECT current_database() AS d").column(0)[0].as_py()
    ran = []
    for statements in STATEMENTS.values():
        for sql in statements:
            sql = sql.format(run=run_copy, shard=Store(run_copy).shards("tasks")[0], views=f'"{name}"')
            try:  # then, in the same connection, its state (when the statement did not fail)
                assert db.read_only(f"{sql};\n{STATE}").to_pylist() == box_state, sql
                ran.append(sql)
            except QueryError:
                pass
            assert _files(run_copy, views) == before, sql  # not a byte, not a new file
            assert db.query(STATE).to_pylist() == pages_state, sql  # the pages' connection
    assert db.read_only(STATE).to_pylist() == box_state  # the next query's
    assert Path(db._views[0]) == views and Store(run_copy).count("tasks") > 0
    assert "FROM checkpoint()" in ran and db.user_queries == 3 + sum(map(len, STATEMENTS.values()))


def test_where_landlock_is_missing_the_box_runs_nothing_and_says_why(tmp_path, monkeypatch):
    import sys

    from starlette.testclient import TestClient

    from tests.view.test_app import _box
    from trajkit.view.app import create_app
    from trajkit.view.sqlbox import SqlBox

    helper = (
        "import trajkit.view.sqlbox as box\n"
        "def confine():\n"
        "    raise OSError(38, 'Landlock version: Function not implemented')\n"
        "box.confine = confine\n"
        "box.serve()\n"
    )
    box = SqlBox([sys.executable, "-c", helper])
    monkeypatch.setattr(db_module, "BOX", box)
    with TestClient(create_app(RunDB(tmp_path), "alice"), base_url="http://127.0.0.1") as client:
        for _ in range(2):  # the reason is kept: the second is refused at once
            r = _box(client, "SELECT 1 AS one")
            assert r.status_code == 400 and "cannot confine the SQL box&#39;s process" in r.text
            assert "Function not implemented" in r.text and 'id="result"' not in r.text
            assert box._proc is None and "Function not implemented" in box._refused
