"""`trajkit sql` output: sums are numbers, CSV lines end in \\n, text is printed literally."""

from __future__ import annotations

import json

from tests.test_cli import invoke
from tests.test_store import traj
from trajkit.store import Store


def test_sums_csv_line_ends_and_literal_text(run_dir, tmp_path):
    Store(run_dir).write("trajectories", "rollouts", [traj(i) for i in range(3)])
    q = "SELECT sum(num_turns) AS turns, sum(num_tool_calls * 0.5) AS half, '[image 1] [as runMain]' AS t FROM trajectories"
    rows = json.loads(invoke("sql", q, "--run", str(run_dir), "-f", "json").stdout)
    assert rows == [{"turns": 6, "half": 1.5, "t": "[image 1] [as runMain]"}]
    out = tmp_path / "o.csv"
    invoke("sql", q, "--run", str(run_dir), "--output", str(out))
    assert out.read_bytes() == b"turns,half,t\n6,1.5,[image 1] [as runMain]\n"
    shown = invoke("sql", q, "--run", str(run_dir)).stdout
    assert "[image 1] [as runMain]" in shown and "6" in shown


def test_csv_cells_that_a_spreadsheet_would_run_are_text(run_dir, tmp_path):
    """Formula characters at the start, or after blanks or control characters; a cell split by a delimiter a
    spreadsheet may use, or by a bare carriage return, is quoted: it stays one cell."""
    import csv

    Store(run_dir).write("trajectories", "rollouts", [traj(0)])
    run = ['=HYPERLINK("http://x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\t=1", "\rx"]
    run += [" =1+1", "\u3000\x0b=1+1", "\u200b@SUM(A1)", "\uff1d1+1"]
    kept = ["a=1", "1-2", "a;=1+1", "b\r=1+1", "c|=1", "d\u2028=1"]
    values = ", ".join(f"{_sql_text(c)} AS c{i}" for i, c in enumerate(run + kept)) + ", -5 AS n"
    out = tmp_path / "o.csv"
    invoke("sql", f"SELECT {values}", "--run", str(run_dir), "--output", str(out))
    [_, row] = list(csv.reader(out.open(newline="")))
    assert row == ["'" + c for c in run] + kept + ["-5"]  # numbers stay numbers
    text = out.read_bytes().decode()
    assert text.count("\n") == 2 and all(f'"{c}"' in text for c in kept[2:] + ["'\rx"])


def _sql_text(text: str) -> str:
    """A DuckDB string literal of any text (control characters as chr())."""
    return " || ".join(f"chr({ord(c)})" if ord(c) < 32 else "'" + c.replace("'", "''") + "'" for c in text)
