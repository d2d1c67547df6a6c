"""`trajkit sql` (``Store.sql``) changes nothing: no statement of any type DuckDB's parser makes, its
EXPLAIN ANALYZE, nor any table function DuckDB has, called with paths in the run, changes a byte under the
run, in the folder it runs from or outside, with the parser's check let through (the connection's lock and
Landlock hold), or without Landlock (a kernel without it: the check and the lock hold); ``trajkit/sqlread.py``.

(Without the lock, DuckDB ends the process when Landlock refuses the log file of ``EXPLAIN ANALYZE SELECT *
FROM enable_logging(storage = 'file', ...)``, an IOException thrown where it cannot be caught: nothing is
written, but the test would end; with the lock, enable_logging is refused first.)"""

from __future__ import annotations

import duckdb
import pytest

from tests.test_store import traj
from tests.view.test_sqlbox import STATEMENTS, _files
from trajkit import sqlread
from trajkit.errors import UserError
from trajkit.store import Store


def _table_functions() -> list[str]:
    """Every table function DuckDB has, called with a path in the run for each text (or any) parameter
    and null for the others (``CALL f(...)`` is ``SELECT * FROM f(...)``); and the few whose writing needs
    named parameters."""
    out = []
    con = duckdb.connect()
    rows = con.sql(
        "SELECT function_name, parameters, parameter_types FROM duckdb_functions() WHERE function_type = 'table'"
    ).fetchall()
    for name, params, types in rows:
        args = ", ".join(
            f"'{{run}}/{name}-{i}'" if t in ("VARCHAR", "ANY") else f"NULL::{t}"
            for i, (_, t) in enumerate(zip(params, types, strict=True))
        )
        out.append(f"SELECT * FROM {name}({args})")
    return out + [
        "CALL enable_logging(storage = 'file', storage_path = '{run}/logs')",
        "CALL enable_profiling(format = 'json', save_location = '{run}/profile.json')",
        "SELECT * FROM read_csv('{shard}')",
    ]


def _statements() -> list[str]:
    single = [s for statements in STATEMENTS.values() for s in statements]
    explained = [f"EXPLAIN ANALYZE {s}" for s in single if ";" not in s]
    return single + explained + _table_functions() + ["SELECT 1; COPY (SELECT 1) TO '{run}/y.csv'"]


@pytest.mark.parametrize("without", ["check", "confine"])
def test_no_statement_sql_runs_changes_a_file_without_the_parser_check_or_without_landlock(
    tmp_path, monkeypatch, without
):
    run = tmp_path / "run"
    store = Store(run, create=True)
    store.write("trajectories", "rollouts", [traj(i) for i in range(3)])
    here = tmp_path / "here"  # the folder it runs from: a relative path, a spill folder
    here.mkdir()
    monkeypatch.chdir(here)
    if without == "check":
        monkeypatch.setattr(sqlread, "check_read", lambda sql: None)
    else:
        monkeypatch.setattr(sqlread, "confine", lambda: (_ for _ in ()).throw(OSError("no Landlock here")))
    before = _files(tmp_path)
    shard = store.shards("trajectories")[0]
    ran = 0
    for sql in _statements():
        sql = sql.format(run=run, shard=shard, views="memory")
        try:
            store.sql(sql)
            ran += 1
        except UserError:
            pass
        assert _files(tmp_path) == before, (without, sql)
    assert ran and store.sql("SELECT count(*) AS n FROM trajectories").to_pylist() == [{"n": 3}]


def test_sql_runs_read_statements_only(run_dir):
    store = Store(run_dir)
    store.write("trajectories", "rollouts", [traj(i) for i in range(3)])
    assert store.sql("EXPLAIN ANALYZE SELECT count(*) FROM trajectories").num_rows == 1
    assert store.sql("DESCRIBE trajectories").num_rows > 10
    for sql, message in (
        ("COPY trajectories TO 'x.csv'", "not COPY"),
        ("EXPLAIN ANALYZE COPY trajectories TO 'x.csv'", "not of COPY"),
        ("SELECT 1; SELECT 2", "one statement at a time"),
        ("PRAGMA enable_profiling", "not PRAGMA"),
        ("CALL checkpoint()", "not CALL"),
        (";", "no statement to run"),
        ("SELEC 1", "SQL error: Parser Error"),
    ):
        with pytest.raises(UserError, match=message):
            store.sql(sql)
