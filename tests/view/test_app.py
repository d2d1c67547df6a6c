"""The viewer's pages, its one write and its defences, through Starlette's test client on a staged run."""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from trajkit.accepted import accepted_where, add_review
from trajkit.schema import content_id
from trajkit.store import Store
from trajkit.view import pages
from trajkit.view.app import create_app
from trajkit.view.db import QueryError, RunDB, check_read

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _box(client, query: str, path: str = "/sql"):
    """The SQL box's form posted as the viewer's own page posts it (its token, its origin)."""
    form = {"q": query, "csrf": _csrf(client.get("/sql").text)}
    return client.post(path, data=form, headers={"origin": str(client.base_url)})


def _sql(run: Path, query: str) -> list[dict]:
    return Store(run).sql(query).to_pylist()


def test_run_page_lists_tables_stages_and_plots(client, run_copy):
    html = client.get("/").text
    store = Store(run_copy)
    for table in store.tables():
        assert re.search(
            rf"<td><a href=\"/tables/{table}\">{table}</a></td><td class=\"n\">{store.count(table):,}</td>", html
        )
    for m in store.manifests():
        assert f"<td>{m['stage']}</td><td>{m['kind']}</td>" in html
    plots = sorted(p.name for p in (run_copy / "card" / "plots").glob("*.png"))
    assert plots and all(f'src="/plots/{p}"' in html for p in plots)
    got = client.get(f"/plots/{plots[0]}")
    assert got.status_code == 200 and got.content == (run_copy / "card" / "plots" / plots[0]).read_bytes()
    assert client.get("/plots/..%2FREADME.md").status_code == 404
    assert client.get("/plots/README.md").status_code == 404


def test_tasks_filter_sort_and_paginate(client, run_copy, monkeypatch):
    total = _sql(run_copy, "SELECT count(*) AS n FROM tasks")[0]["n"]
    assert f"{total} matching" in client.get("/tasks").text
    for col in ("difficulty", "split", "stage", "mode"):
        value = _sql(run_copy, f"SELECT {col} AS v FROM tasks WHERE {col} IS NOT NULL LIMIT 1")[0]["v"]
        want = _sql(run_copy, f"SELECT task_id FROM tasks WHERE {col} = '{value}'")
        html = client.get("/tasks", params={col: value}).text
        assert f"{len(want)} matching" in html
        assert set(re.findall(r'href="/tasks/(\w+)"', html)) == {r["task_id"] for r in want}
    reason = _sql(run_copy, "SELECT reason FROM rejected WHERE table_name = 'tasks' LIMIT 1")[0]["reason"]
    rejected = _sql(run_copy, f"SELECT count(DISTINCT row_id) AS n FROM rejected WHERE reason = '{reason}'")[0]["n"]
    assert f"{rejected} matching" in client.get("/tasks", params={"reject": reason}).text
    scored = _sql(run_copy, "SELECT count(*) AS n FROM tasks WHERE quality_score >= 3")[0]["n"]
    assert f"{scored} matching" in client.get("/tasks", params={"min_quality": "3"}).text
    order = [
        r["task_id"] for r in _sql(run_copy, "SELECT task_id FROM tasks ORDER BY pass_at_1 DESC NULLS LAST, task_id")
    ]
    html = client.get("/tasks", params={"sort": "pass_at_1", "dir": "desc"}).text
    assert re.findall(r'href="/tasks/(\w+)"', html) == order
    monkeypatch.setattr(pages, "PAGE_SIZE", 5)
    seen = []
    for page in range(1, -(-total // 5) + 1):
        seen += re.findall(r'href="/tasks/(\w+)"', client.get("/tasks", params={"page": page}).text)
    assert seen == sorted(seen) and len(seen) == total == len(set(seen))


def test_task_page_shows_all_its_trajectories_and_samples(client, run_copy):
    from trajkit.accepted import accepted_sql

    with_accepted = f"SELECT task_id FROM ({accepted_sql('trajectories')})"  # a task with yes and no marks
    row = _sql(
        run_copy,
        f"SELECT task_id FROM samples WHERE task_id IN ({with_accepted}) GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1",
    )[0]
    html = client.get(f"/tasks/{row['task_id']}").text
    trajs = {
        r["traj_id"] for r in _sql(run_copy, f"SELECT traj_id FROM trajectories WHERE task_id = '{row['task_id']}'")
    }
    linked = set(re.findall(r'href="/trajectories/(\w+)" class="id"', html))
    assert trajs and linked == trajs
    from trajkit.accepted import accepted_ids

    accepted = accepted_ids(Store(run_copy), "trajectories") & trajs
    marks = re.findall(r'href="/trajectories/(\w+)" class="id">.*?<td class="accepted">(yes|no)</td>', html, re.DOTALL)
    assert accepted and {i for i, m in marks if m == "yes"} == accepted and {i for i, _ in marks} == trajs
    task_ok = row["task_id"] in accepted_ids(Store(run_copy), "tasks")
    assert ('id="accepted">accepted<' in html) == task_ok
    samples = _sql(run_copy, f"SELECT verdict FROM samples WHERE task_id = '{row['task_id']}'")
    assert html.count("<tr><td>") >= len(samples) and "Verifier: tool_outcome" in html
    # each trajectory's verdict column: its own (rollouts judge their rows), as the trajectories view has it
    verdicts = {r["traj_id"]: r["verdict"] for r in _sql(run_copy, "SELECT traj_id, verdict FROM trajectories")}
    shown = re.findall(
        r'href="/trajectories/(\w+)" class="id">.*?</td>\s*<td>(\w*)</td><td class="n">', html, re.DOTALL
    )
    assert {i: v or None for i, v in shown} == {i: verdicts[i] for i in trajs}
    assert client.get("/tasks/nope").status_code == 404


def test_trajectory_page_renders_the_conversation_and_the_token_trace(client, run_copy):
    t = _sql(
        run_copy, "SELECT traj_id, token_ids, loss_mask, logprobs FROM trajectories WHERE token_ids IS NOT NULL LIMIT 1"
    )[0]
    html = client.get(f"/trajectories/{t['traj_id']}").text
    trace = json.loads(html_lib.unescape(re.search(r'<div id="tokens" data-trace="([^"]*)">', html).group(1)))
    assert trace["ids"] == t["token_ids"] and trace["mask"] == t["loss_mask"]
    assert trace["logprobs"] == pytest.approx(t["logprobs"], abs=1e-4)
    assert len(trace["text"]) == len(t["token_ids"])  # decoded: the tiny model's tokenizer is a local directory
    called = _sql(run_copy, "SELECT traj_id, tools_called FROM trajectories WHERE num_tool_calls > 0 LIMIT 1")[0]
    html = client.get(f"/trajectories/{called['traj_id']}").text
    assert f'<span class="tool">{called["tools_called"][0]}</span>' in html and "no token trace" in html


def _hostile_run(run: Path) -> tuple[str, str]:
    store = Store(run)
    tid, trid = content_id("hostile-task"), content_id("hostile-traj")
    store.write("tasks", "hostile", [{"task_id": tid, "question": HOSTILE, "mode": "single_tool", "source": HOSTILE}])
    call = {"id": "c1", "name": HOSTILE, "arguments": json.dumps({"q": HOSTILE})}
    msgs = [
        {"role": "user", "content": HOSTILE},
        {"role": "assistant", "content": HOSTILE, "reasoning_content": HOSTILE, "tool_calls": [call]},
        {"role": "tool", "content": json.dumps({"html": HOSTILE}), "tool_call_id": "c1", "name": HOSTILE},
        {"role": "assistant", "content": HOSTILE * 100},
    ]
    traj = {"traj_id": trid, "task_id": tid, "model": HOSTILE, "messages": msgs, "status": "failed", "reason": HOSTILE}
    store.write("trajectories", "hostile", [{**traj, "final_answer": HOSTILE, "end_state": [HOSTILE]}])
    return tid, trid


def test_model_and_tool_text_is_shown_as_text_never_markup(client, run_copy):
    tid, trid = _hostile_run(run_copy)
    for r in (
        client.get(f"/tasks/{tid}"),
        client.get(f"/trajectories/{trid}"),
        client.get("/tasks"),
        _box(client, f"SELECT * FROM trajectories WHERE traj_id = '{trid}'"),
    ):
        url = r.request.url
        assert r.status_code == 200, url
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, url
        assert "&lt;script&gt;alert(" in r.text, url
        assert "script-src 'self'" in r.headers["content-security-policy"]
    html = client.get(f"/trajectories/{trid}").text
    assert '<details class="fold"><summary>reasoning</summary>' in html  # reasoning folded
    assert "characters)</summary>" in html  # the long answer folded
    assert "&#34;html&#34;: &#34;&lt;script&gt;" in html  # the tool's JSON pretty-printed, as text


REFUSED = [  # by the parser's check (layer a), before anything runs
    "COPY (SELECT 1 AS a) TO '{run}/tasks/evil.parquet'",
    "COPY (SELECT 1 AS a) TO '{run}/x.csv'",
    "COPY (SELECT 1 AS a) TO '/tmp/trajkit-view-evil.csv'",
    "EXPORT DATABASE '{run}/dump'",
    "ATTACH '{run}/evil.duckdb' AS evil",
    "CREATE TABLE evil AS SELECT 1",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "CALL pragma_version()",
    "UPDATE EXTENSIONS",  # a type the installed duckdb's Python enum cannot name
    "SELECT 1; COPY (SELECT 1) TO '{run}/y.csv'",
    "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{run}/reviews/forged.parquet'",
    "/* a comment */ explain analyse -- another\n COPY (SELECT 1) TO '{run}/x.csv';",
    "EXPLAIN ANALYZE CREATE TABLE evil AS SELECT 1",
    "EXPLAIN ANALYZE DROP VIEW tasks",
    "EXPLAIN (FORMAT json) INSERT INTO tasks (task_id) VALUES ('x')",
    "EXPLAIN ANALYZE SELECT " + "1 + " * 600 + "1",  # too long to look for its inner statement
]
FAIL_IN_DUCKDB = [  # SELECTs that pass the check and that DuckDB refuses: no file outside the run, no query()
    "SELECT * FROM query('COPY (SELECT 1) TO ''{run}/z.csv''')",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_text('{run}/../outside.txt')",
    "SELECT * FROM 'https://example.com/data.parquet'",
]


def test_the_sql_box_refuses_writes_attaches_installs_and_reads_outside_the_run(client, run_copy):
    (run_copy.parent / "outside.txt").write_text("secret")
    before = sorted(p.relative_to(run_copy) for p in run_copy.rglob("*"))
    db = client.app.state.viewer.db
    for query in REFUSED + FAIL_IN_DUCKDB:
        for path in ("/sql", "/sql.csv"):
            r = _box(client, query.format(run=run_copy), path)
            assert r.status_code == 400 and "secret" not in r.text, (query, path)
        if query in REFUSED:
            assert db.user_queries == 0, query  # refused by the parser's check: nothing ran
    assert db.user_queries == 2 * len(FAIL_IN_DUCKDB)
    assert sorted(p.relative_to(run_copy) for p in run_copy.rglob("*")) == before
    assert not Path("/tmp/trajkit-view-evil.csv").exists()


def test_the_pages_connection_is_locked_down(run_copy):
    db = RunDB(run_copy)
    for q in (
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "SELECT * FROM read_text('/etc/hostname')",
    ):
        with pytest.raises(QueryError):
            db.query(q)
    assert db.query("SELECT count(*) FROM read_text('" + str(run_copy) + "/card/README.md')").num_rows == 1


def test_the_parser_check_finds_the_statement_an_explain_wraps(run_copy):
    db = RunDB(run_copy)
    for query in (
        "EXPLAIN SELECT 1",
        "EXPLAIN ANALYZE SELECT count(*) FROM tasks",
        "explain analyse select 1 union select 2",
        "EXPLAIN (FORMAT json) WITH t AS (SELECT 1) SELECT * FROM t",
        "EXPLAIN ANALYZE DESCRIBE tasks",
        "EXPLAIN (SELECT 1)",
    ):
        check_read(query)
    assert "Total Time" in _box_text(db, "EXPLAIN ANALYZE SELECT count(*) FROM tasks")  # analyzed: it ran
    for query, inner in (
        ("EXPLAIN ANALYZE COPY (SELECT 1) TO 'x.csv'", "COPY"),
        ("EXPLAIN ANALYZE INSERT INTO t SELECT 1", "INSERT"),
        ("EXPLAIN ANALYZE CALL checkpoint()", "CALL"),
        ("EXPLAIN ANALYZE UPDATE EXTENSIONS", "UNKNOWN"),
    ):
        with pytest.raises(QueryError, match=f"not of {inner}$"):
            check_read(query)


def _box_text(db: RunDB, query: str) -> str:
    return " ".join(str(v) for row in db.read_only(query).to_pylist() for v in row.values())


def test_the_sql_box_runs_read_statements_as_a_table_and_csv(client, run_copy):
    for q in (
        "SELECT task_id FROM tasks",
        "WITH t AS (SELECT task_id FROM tasks) SELECT * FROM t",
        "FROM tasks SELECT task_id",
    ):
        html = _box(client, q).text
        assert f"{Store(run_copy).count('tasks')} rows" in html, q
    assert '<td class="text">task_id</td>' in _box(client, "DESCRIBE tasks").text
    assert '<td class="text">trajectories</td>' in _box(client, "SHOW TABLES").text
    got = _box(client, "SELECT task_id, target_tools FROM tasks ORDER BY 1", "/sql.csv")
    want = _sql(run_copy, "SELECT task_id FROM tasks ORDER BY 1")
    lines = got.text.splitlines()
    assert got.headers["content-type"].startswith("text/csv") and lines[0] == "task_id,target_tools"
    assert [ln.split(",")[0] for ln in lines[1:]] == [r["task_id"] for r in want]


def test_compare_puts_differences_first(client, run_copy):
    html = client.get("/compare", params={"a": "scripted-good", "b": "scripted-worse"}).text
    diffs = [float(d) for d in re.findall(r'<td class="n">(-?[\d.]+)</td></tr>', html)]
    assert diffs and any(diffs) and [abs(d) for d in diffs] == sorted((abs(d) for d in diffs), reverse=True)


def test_a_review_needs_the_csrf_token_and_the_apps_origin(client, run_copy):
    tid = _sql(run_copy, "SELECT task_id FROM tasks LIMIT 1")[0]["task_id"]
    form = {"target_kind": "task", "target_id": tid, "decision": "reject", "note": "off-topic"}
    good = {"origin": "http://127.0.0.1"}
    csrf = _csrf(client.get(f"/tasks/{tid}").text)
    assert client.post("/review", data=form, headers=good).status_code == 403
    assert client.post("/review", data={**form, "csrf": "x" + csrf}, headers=good).status_code == 403
    assert (
        client.post("/review", data={**form, "csrf": csrf}, headers={"origin": "http://evil.example"}).status_code
        == 403
    )
    assert client.post("/review", data={**form, "csrf": csrf}).status_code == 403  # no Origin nor Referer
    assert client.post("/review", data={**form, "csrf": csrf, "decision": "maybe"}, headers=good).status_code == 400
    assert client.post("/review", data={**form, "csrf": csrf, "target_id": "nope"}, headers=good).status_code == 400
    assert not Store(run_copy).shards("reviews")
    r = client.post("/review", data={**form, "csrf": csrf}, headers=good, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/tasks/{tid}"
    rows = Store(run_copy).rows("reviews")
    assert [(x["target_id"], x["target_kind"], x["decision"], x["note"], x["reviewer"]) for x in rows] == [
        (tid, "task", "reject", "off-topic", "alice")
    ]
    assert rows[0]["review_id"] == content_id("task", tid, "alice", rows[0]["reviewed_at"].isoformat())


def test_the_latest_review_wins_survives_a_restart_and_marks_the_card_stale(client, run_copy):
    trid = _sql(run_copy, "SELECT traj_id FROM trajectories LIMIT 1")[0]["traj_id"]
    assert 'id="card-stale"' not in client.get("/").text
    for decision in ("accept", "reject"):
        csrf = _csrf(client.get(f"/trajectories/{trid}").text)
        form = {"csrf": csrf, "target_kind": "trajectory", "target_id": trid, "decision": decision}
        client.post("/review", data=form, headers={"referer": f"http://127.0.0.1/trajectories/{trid}"})
    with TestClient(create_app(RunDB(run_copy), "bob"), base_url="http://127.0.0.1") as again:
        html = again.get(f"/trajectories/{trid}").text
        assert re.search(r'id="review-state"><span class="verdict reject">rejected</span>\s+by alice', html)
        assert "2 reviews" in html
        assert 'id="card-stale"' in again.get("/").text
        task = _sql(run_copy, f"SELECT task_id FROM trajectories WHERE traj_id = '{trid}'")[0]["task_id"]
        assert '<td class="verdict reject">reject</td>' in again.get(f"/tasks/{task}").text


def test_a_review_rebuilds_no_in_memory_copy_and_no_view(run_copy, monkeypatch):
    trid = _sql(run_copy, f"SELECT traj_id FROM trajectories WHERE {accepted_where('trajectories')} LIMIT 1")
    db = RunDB(run_copy)
    assert pages.trajectory_page(db, trid[0]["traj_id"])["accepted"]
    cached = {"trajectories", "trajectories_by_task", "trajectory_quality", "samples", "rejected"}
    cached |= {"accepted_trajectories", "extensions"}  # this trajectory has extensions: their timelines' copy
    assert set(db._cached) == cached
    made = []
    monkeypatch.setattr(db, "_with_views", lambda con: made.append(con))
    add_review(db.store, trid[0]["traj_id"], "trajectory", "reject", None, "alice")
    db.connection()
    assert set(db._cached) == cached and not made  # the new review shard is read alone, into memory
    assert not pages.trajectory_page(db, trid[0]["traj_id"])["accepted"]
    assert db.rows("SELECT count(*) AS n FROM reviews")[0]["n"] == 1


def test_loopback_only_answers_loopback_host_names(run_copy):
    with TestClient(create_app(RunDB(run_copy), "alice"), base_url="http://evil.example") as c:
        assert c.get("/").status_code == 400  # DNS rebinding: a foreign host name is refused


def test_beyond_loopback_every_request_needs_the_token(run_copy):
    app = create_app(RunDB(run_copy), "alice", token="s3cret-token", loopback=False)
    with TestClient(app, base_url="http://192.0.2.1") as c:
        assert c.get("/").status_code == 401 and c.get("/tasks?token=wrong").status_code == 401
        assert c.get("/sql", params={"q": "SELECT 1"}).status_code == 401
        r = c.get("/tasks?token=s3cret-token", follow_redirects=False)
        assert (
            r.status_code == 303 and r.headers["location"] == "/tasks" and "httponly" in r.headers["set-cookie"].lower()
        )
        assert c.get("/tasks").status_code == 200  # the cookie now


def test_new_shards_appear_and_vanished_shards_are_survived(client, run_copy):
    store = Store(run_copy)
    n = store.count("tasks")
    assert f"{n} matching" in client.get("/tasks").text
    store.write(
        "tasks", "later", [{"task_id": content_id("later", i), "mode": "imported", "question": "q"} for i in range(3)]
    )
    assert f"{n + 3} matching" in client.get("/tasks").text
    store.drop_stage("later")  # as --fresh does
    assert f"{n} matching" in client.get("/tasks").text
    assert client.get("/").status_code == 200


def test_a_shard_vanishing_between_the_check_and_the_query_is_retried_on_fresh_views(run_copy, monkeypatch):
    store = Store(run_copy)
    store.write("tasks", "later", [{"task_id": "late", "mode": "imported"}])
    db = RunDB(run_copy)
    n = db.rows("SELECT count(*) AS n FROM tasks")[0]["n"]
    listed = db.signature()
    monkeypatch.setattr(db, "signature", lambda: listed)  # the change lands after the check
    db.connection(force=True)
    store.drop_stage("later")
    assert db.rows("SELECT count(*) AS n FROM tasks")[0]["n"] == n - 1
    store.write("tasks", "later", [{"task_id": "late", "mode": "imported"}])
    db.connection(force=True)
    store.drop_stage("later")  # the in-memory copy of the tasks view is built after this
    assert pages.tasks_page(db, pages.TaskQuery())["total"] == n - 1


def test_a_runaway_query_is_stopped(client, monkeypatch):
    from trajkit.view import db as db_module

    monkeypatch.setattr(db_module, "QUERY_TIMEOUT_S", 0.3)
    r = _box(client, "SELECT count(*) FROM range(1000000000000) a, range(10) b")
    assert r.status_code == 400 and "query stopped after" in r.text


def test_an_empty_run_shows_every_page(tmp_path):
    with TestClient(create_app(RunDB(tmp_path), "alice"), base_url="http://127.0.0.1") as c:
        for url in ("/", "/tasks", "/compare", "/sql"):
            assert c.get(url).status_code == 200, url
        assert _box(c, "SELECT * FROM trajectories").status_code == 200
        assert _box(c, "SELECT 1", "/sql.csv").status_code == 200
        assert "0 matching" in c.get("/tasks").text and "no evaluation yet" in c.get("/compare").text
        assert c.get("/tasks/x").status_code == 404 and c.get("/trajectories/y").status_code == 404


def test_two_viewer_processes_write_reviews_under_their_own_shard_names(run_copy):
    import subprocess
    import sys

    from trajkit.accepted import add_review

    tid = _sql(run_copy, "SELECT task_id FROM tasks LIMIT 1")[0]["task_id"]
    code = f"from trajkit.store import Store; from trajkit.accepted import add_review; add_review(Store({str(run_copy)!r}), {tid!r}, 'task', 'accept', reviewer='bob')"
    subprocess.run([sys.executable, "-c", code], check=True)
    add_review(Store(run_copy), tid, "task", "reject", reviewer="alice")
    shards = Store(run_copy).shards("reviews")
    assert len(shards) == 2 and len({p.name.split("-")[1] for p in shards}) == 2  # review-r<pid>-000000
    assert sorted(r["reviewer"] for r in Store(run_copy).rows("reviews")) == ["alice", "bob"]


def _every_route(app, run: Path) -> list[tuple[str, set[str]]]:
    """Each of the app's routes as a path to a real task, trajectory and plot of the run, with its methods."""
    values = {
        "task_id": _sql(run, "SELECT task_id FROM tasks LIMIT 1")[0]["task_id"],
        "traj_id": _sql(run, "SELECT traj_id FROM trajectories LIMIT 1")[0]["traj_id"],
        "name": next((run / "card" / "plots").glob("*.png")).name,
        "path": "/view.js",
        "table": "trajectories",
    }
    return [
        (app.url_path_for(r.name, **{k: values[k] for k in r.param_convertors}), getattr(r, "methods", {"GET"}))
        for r in app.routes
    ]


def test_every_route_is_a_get_without_user_sql_or_a_post_behind_the_token(client, run_copy):
    """Whatever a request says, only a POST carrying this start's token from the app's own origin runs
    user SQL or writes; every route of the app, those added later included."""
    app, viewer = client.app, client.app.state.viewer
    csrf, here = _csrf(client.get("/sql").text), str(client.base_url)
    tid = _sql(run_copy, "SELECT task_id FROM tasks LIMIT 1")[0]["task_id"]
    sneaky = {"q": f"COPY (SELECT 1) TO '{run_copy}/x.csv'", "target_kind": "task", "target_id": tid}
    trid = _sql(run_copy, "SELECT traj_id FROM trajectories LIMIT 1")[0]["traj_id"]
    batch = content_id("a batch")  # the forms of the flow, a bulk decision and an undo, as a page would post them
    sneaky.update(
        decision="reject",
        traj_id=trid,
        action="reject",
        expected=_sql(run_copy, "SELECT count(*) AS n FROM trajectories")[0]["n"],
        batch=batch,
    )
    routes = _every_route(app, run_copy)
    assert {"/sql", "/sql.csv", "/review", f"/tasks/{tid}", "/flow/decide", "/bulk", "/bulk/undo"} <= {
        p for p, _ in routes
    }
    for path, methods in routes:
        assert methods <= {"GET", "HEAD"} or methods == {"POST"}, path  # a route is a page or an action
        assert client.get(path, params={**sneaky, "csrf": csrf}).status_code in (200, 400, 404, 405), path
        for form, headers in (
            (sneaky, {"origin": here}),
            ({**sneaky, "csrf": "guessed"}, {"origin": here}),
            ({**sneaky, "csrf": csrf}, {"origin": "http://evil.example"}),  # the token leaked, another origin
            ({**sneaky, "csrf": csrf}, {"referer": "http://127.0.0.1.evil.example/"}),
            ({**sneaky, "csrf": csrf}, {}),
        ):
            assert client.post(path, data=form, headers=headers).status_code in (403, 405), (path, headers)
    assert viewer.db.user_queries == 0 and viewer.writes == 0 and not Store(run_copy).shards("reviews")
    assert not (run_copy / "x.csv").exists()
    assert _box(client, "SELECT 1").status_code == 200 and viewer.db.user_queries == 1  # what they count
    r = client.post("/review", data={**sneaky, "csrf": csrf}, headers={"origin": here}, follow_redirects=False)
    assert r.status_code == 303
    assert viewer.writes == 1 and len(Store(run_copy).rows("reviews")) == 1
