"""The trajectory list, the table browser, the timeline and the diff, through Starlette's test client on a run
built by the stages; each checked against a query of the run's views written here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.toy_stage import relist
from tests.view.test_app import HOSTILE, _box, _hostile_run, _sql
from trajkit.accepted import LABELS_FILE, add_review
from trajkit.store import Store
from trajkit.view import listing
from trajkit.view.db import RunDB

LABELS = """labels:
  - {name: hallucination, key: h, color: "#c0392b", excludes: true}
  - {name: gold, key: g, color: "#27ae60"}
"""
ID = re.compile(r'href="/trajectories/(\w+)" class="id"')
STAGE = r"regexp_extract(filename, '([^/]+)-r[0-9]+-[0-9]{6}(-[0-9]{6})?\.parquet$', 1)"


def listed(client, **params) -> list[str]:
    """The ids the list shows, every page of it."""
    out, page = [], 1
    while True:
        html = client.get("/trajectories", params={**params, "page": page}).text
        out += ID.findall(html)
        if 'id="next"' not in html:
            return out
        page += 1


def _reviewed(run: Path) -> None:
    """Reviews of a few trajectories: accepted, rejected, labelled only, and one reviewed and then cleared."""
    (run / LABELS_FILE).write_text(LABELS)
    store = Store(run)
    ids = [r["traj_id"] for r in _sql(run, "SELECT traj_id FROM trajectories ORDER BY traj_id LIMIT 5")]
    add_review(store, ids[0], "trajectory", "accept", None, "alice")
    add_review(store, ids[1], "trajectory", "reject", None, "bob", labels=["hallucination"])
    add_review(store, ids[2], "trajectory", None, None, "bob", labels=["gold"])
    add_review(store, ids[3], "trajectory", "accept", None, "bob")
    add_review(store, ids[3], "trajectory", None, None, "bob")  # an undo's "not reviewed"


TRUTH = {  # each filter value and the views' rows it must show (the latest review of a row in force)
    "status": lambda v: f"status = '{v}'",
    "verdict": lambda v: "verdict IS NULL" if v == "none" else f"verdict = '{v}'",
    "reason_code": lambda v: "reason_code IS NULL" if v == "none" else f"reason_code = '{v}'",
    "reject": lambda v: "reject_reason IS NULL" if v == "none" else f"'{v}' IN string_split(reject_reason, '; ')",
    "tool": lambda v: f"list_contains(tools_called, '{v}')",
    "model": lambda v: f"model = '{v}'",
    "extension": lambda v: f"parent_id IS {'NOT ' if v == 'yes' else ''}NULL",
    "stage": lambda v: f"{STAGE} = '{v}'",
    "review": lambda v: {
        "accept": "rv.decision = 'accept'",
        "reject": "rv.decision = 'reject'",
        "labelled": "rv.decision IS NULL AND len(rv.labels) > 0",
        "reviewed": "(rv.decision IS NOT NULL OR len(rv.labels) > 0)",
        "none": "rv.decision IS NULL AND coalesce(len(rv.labels), 0) = 0",
    }[v],
    "label": lambda v: f"list_contains(rv.labels, '{v}')",
    "reviewer": lambda v: f"rv.reviewer = '{v}' AND (rv.decision IS NOT NULL OR len(rv.labels) > 0)",
}
LATEST = (
    "LEFT JOIN (SELECT target_id, decision, labels, reviewer FROM reviews WHERE target_kind = 'trajectory' QUALIFY row_number() OVER (PARTITION BY "
    "target_id ORDER BY reviewed_at DESC, review_id DESC) = 1) rv ON rv.target_id = t.traj_id"
)


def _truth(run: Path, condition: str, order: str = listing.TASK_ORDER, con=None) -> list[str]:
    """The ids of the trajectories matching ``condition`` in ``order``, by a query of the run's views (on
    ``con``, a connection with them, when given: it does not see what is written after it was made)."""
    shards = ", ".join(f"'{p}'" for p in Store(run).shards("trajectories"))
    query = (
        f"SELECT t.traj_id FROM (SELECT v.*, f.filename FROM trajectories v JOIN read_parquet([{shards}], "
        f"filename = true) f USING (traj_id)) t {LATEST} WHERE {condition} ORDER BY {order}"
    )
    rows = con.sql(query).to_arrow_table().to_pylist() if con is not None else _sql(run, query)
    return [r["traj_id"] for r in rows]


def test_every_filter_value_shows_the_rows_the_views_hold_and_counts_them(client, run_copy, monkeypatch):
    _reviewed(run_copy)
    monkeypatch.setattr(listing, "PAGE_SIZE", 40)
    html = client.get("/trajectories").text
    con = Store(run_copy).duckdb()
    truth = lambda condition: _truth(run_copy, condition, con=con)
    everything = truth("true")
    assert listed(client) == everything and f"{len(everything)} matching" in html
    assert "3 of " in html  # reviewed: accepted, rejected, labelled; the cleared one is not
    choices = dict(re.findall(r'<select name="(\w+)">(.*?)</select>', html, re.DOTALL))
    tried = 0
    for name, condition in TRUTH.items():
        for value, count in re.findall(r'<option value="([^"]+)" >[^<]*\((\d+)\)</option>', choices[name]):
            want = truth(condition(value))
            assert listed(client, **{name: value}) == want, (name, value)
            assert int(count) == len(want), (name, value)  # the count beside the value
            tried += 1
    assert tried > 30
    both = {"status": "completed", "review": "none", "extension": "no"}
    assert listed(client, **both) == truth(" AND ".join(TRUTH[k](v) for k, v in both.items()))  # filters combine
    task = everything[0]
    task_id = _sql(run_copy, f"SELECT task_id FROM trajectories WHERE traj_id = '{task}'")[0]["task_id"]
    assert listed(client, task=task_id) == truth(f"task_id = '{task_id}'")
    for junk in ({"model": "nope"}, {"status": "nope"}, {"tool": "x'; DROP"}, {"label": "nope"}):
        assert listed(client, **junk) == []  # a value the run does not hold matches nothing


def test_the_flow_walks_each_filtered_list_and_keeps_the_places_of_the_last_few(run_copy):
    db = RunDB(run_copy)
    con = Store(run_copy).duckdb()
    tasks = [r["task_id"] for r in _sql(run_copy, "SELECT DISTINCT task_id FROM trajectories ORDER BY 1")]
    assert len(tasks) > listing.SELECTIONS_KEPT
    orders = {"task": listing.TASK_ORDER, "seconds": f"total_s DESC NULLS LAST, {listing.TASK_ORDER}"}
    for task in tasks:
        for sort, order in orders.items():
            q = listing.TrajQuery.parse({"task": task, "sort": sort, "dir": "desc" if sort == "seconds" else "asc"})
            want = _truth(run_copy, f"task_id = '{task}'", order, con=con)
            first, after, progress = listing.walk(db, q, None, "next")
            assert [first, after] == [*want, None][:2] and progress == {"total": len(want), "reviewed": 0}
    kept = [name for name in db._cached if name.startswith("selection_")]
    assert len(kept) == listing.SELECTIONS_KEPT  # the places of each list's rows, the last few kept


def test_the_list_sorts_and_clamps_its_page(client, run_copy, monkeypatch):
    monkeypatch.setattr(listing, "PAGE_SIZE", 10)
    want = _truth(run_copy, "true", f"total_s DESC NULLS LAST, {listing.TASK_ORDER}")  # ties in task order
    assert listed(client, sort="seconds", dir="desc") == want
    assert listed(client, sort="turns") == _truth(run_copy, "true", f"num_turns NULLS LAST, {listing.TASK_ORDER}")
    last = -(-len(want) // 10)
    html = client.get("/trajectories", params={"page": 999}).text
    assert f"page {last} of {last}" in html and ID.findall(html) == listed(client)[(last - 1) * 10 :]
    tasks = client.get("/tasks", params={"page": 999}).text
    assert re.search(r"page (\d+) of \1\b", tasks)


def test_the_table_browser_summarises_every_column_of_every_table(client, run_copy):
    store = Store(run_copy)
    con = store.duckdb()
    for table in store.tables():
        html = client.get(f"/tables/{table}").text
        assert f"{store.count(table):,} rows" in html and "(≈)" not in html, table  # a small table: exact
        summary = re.search(r'<table id="summary">(.*?)</table>', html, re.DOTALL).group(1)
        for column, nulls, distinct in re.findall(
            r"<tr>\s*<td>(\w+)</td><td class=\"type\">[^<]*</td>\s*<td class=\"n\">([\d,]*)</td>\s*<td class=\"n\">([\d,]*)</td>",
            summary,
        ):
            truth = con.sql(
                f"SELECT count(*) - count({column}) AS nulls, count(DISTINCT {column}) AS d FROM {table}"
            ).fetchall()[0]
            truth = {"nulls": truth[0], "d": truth[1]}
            assert int(nulls.replace(",", "")) == truth["nulls"], (table, column)
            assert distinct == "" or int(distinct.replace(",", "")) == truth["d"], (table, column)  # exact here
    html = client.get("/tables/trajectory_quality").text
    bars = re.search(r"<td>completeness</td>.*?<svg class=\"hist\"(.*?)</svg>", html, re.DOTALL).group(1)
    judged = store.sql("SELECT count(completeness) FROM trajectory_quality").column(0)[0].as_py()
    assert sum(int(n.replace(",", "")) for n in re.findall(r"<title>([\d,]+) from", bars)) == judged
    assert client.get("/tables/nope").status_code == 404 and client.get("/tables/..%2Fsql").status_code == 404
    ids = re.findall(r'<a href="/trajectories/(\w+)" class="id">', client.get("/tables/trajectories").text)
    assert ids and set(ids) <= set(_truth(run_copy, "true"))  # ids are links


def test_ids_in_sql_results_are_links_to_their_pages(client, run_copy):
    html = _box(client, "SELECT traj_id, task_id, parent_id, status FROM trajectories WHERE parent_id IS NOT NULL").text
    row = _sql(run_copy, "SELECT traj_id, task_id, parent_id FROM trajectories WHERE parent_id IS NOT NULL LIMIT 1")[0]
    assert f'<a href="/trajectories/{row["traj_id"]}" class="id">{row["traj_id"]}</a>' in html
    assert f'<a href="/tasks/{row["task_id"]}" class="id">{row["task_id"]}</a>' in html
    assert f'<a href="/trajectories/{row["parent_id"]}" class="id">{row["parent_id"]}</a>' in html
    assert '<td class="text">completed</td>' in html


def test_the_timeline_draws_each_call_and_the_extensions_under_their_parent(client, run_copy):
    parent = _sql(
        run_copy,
        "SELECT parent_id FROM trajectories WHERE parent_id IS NOT NULL AND calls IS NOT NULL GROUP BY 1 LIMIT 1",
    )[0]["parent_id"]
    rows = {
        r["traj_id"]: r
        for r in _sql(
            run_copy, f"SELECT traj_id, calls FROM trajectories WHERE traj_id = '{parent}' OR parent_id = '{parent}'"
        )
    }
    html = client.get(f"/trajectories/{parent}").text
    timeline = re.search(r'<div id="timeline">(.*?)<h2>Conversation', html, re.DOTALL).group(1)
    groups = re.split(r"<h3>extension ", timeline)
    assert len(groups) == len(rows)  # the trajectory, then each extension under it
    for group in groups[1:]:
        ext = re.match(r'<a href="/trajectories/(\w+)"', group).group(1)
        assert ext in rows and len(re.findall(r'<tr class="tl ', group)) == len(rows[ext]["calls"])
    own = rows[parent]["calls"]
    bars = re.findall(r'<tr class="tl (model|tool) (ok|bad)">\s*<td>(.*?)</td>\s*<td class="n">([\d.]+)</td>'
                      r'<td class="n">([\d.]+)</td>', groups[0])  # fmt: skip
    assert [(kind, float(start), float(secs)) for kind, _, _, start, secs in bars] == [
        (c["kind"], pytest.approx(c["start_s"], abs=0.006), pytest.approx(c["seconds"], abs=0.006)) for c in own
    ]
    model = next(c for c in own if c["kind"] == "model")
    assert f"{model['prompt_tokens']:,} + {model['completion_tokens']:,}" in groups[0]
    assert f'<a href="#m{model["message"]}">model</a>' in groups[0] and f'id="m{model["message"]}"' in html
    _, untimed = _hostile_run(run_copy)  # a row written without per-call timings says so
    assert "no per-call timings in this row" in client.get(f"/trajectories/{untimed}").text


def test_the_diff_aligns_two_trajectories_of_one_task(client, run_copy):
    pair = _sql(
        run_copy,
        "SELECT parent_id AS a, traj_id AS b FROM trajectories WHERE parent_id IS NOT NULL AND messages IS NOT NULL "
        "ORDER BY traj_id LIMIT 1",
    )[0]  # an extension repeats its parent's conversation, then goes on
    msgs = {
        r["traj_id"]: r["messages"]
        for r in _sql(
            run_copy, f"SELECT traj_id, messages FROM trajectories WHERE traj_id IN ('{pair['a']}', '{pair['b']}')"
        )
    }
    html = client.get("/diff", params=pair).text
    kinds = re.findall(r'<tr class="d-(\w+)">', html)
    shared = len(msgs[pair["a"]])  # the parent's messages, side by side, then the extension's own
    assert kinds == ["same"] * shared + ["right"] * (len(msgs[pair["b"]]) - shared)
    assert f"{shared} the same on both sides" in html
    aborted = _sql(run_copy, "SELECT parent_id AS a, traj_id AS b FROM trajectories WHERE messages IS NULL LIMIT 1")
    html = client.get("/diff", params=aborted[0]).text  # an extension the simulator ended has no messages
    assert set(re.findall(r'<tr class="d-(\w+)">', html)) == {"left"} and "0 the same on both sides" in html
    other = _sql(
        run_copy,
        f"SELECT traj_id FROM trajectories WHERE task_id != (SELECT task_id FROM trajectories WHERE traj_id = '{pair['a']}') LIMIT 1",
    )[0]["traj_id"]
    r = client.get("/diff", params={"a": pair["a"], "b": other})
    assert r.status_code == 404 and "different tasks" in r.text
    assert client.get("/diff").status_code == 404


def test_new_pages_show_model_text_as_text_and_print_no_none(client, run_copy):
    tid, trid = _hostile_run(run_copy)
    store = Store(run_copy)
    other = _sql(run_copy, "SELECT traj_id FROM trajectories WHERE traj_id != '" + trid + "' LIMIT 1")[0]["traj_id"]
    store.write(
        "trajectories",
        "hostile2",
        [{"traj_id": "h2", "task_id": tid, "messages": [{"role": "user", "content": HOSTILE}], "status": "failed"}],
    )
    pages = [
        f"/trajectories?task={tid}",
        f"/flow?task={tid}",
        f"/flow/row?task={tid}&go=next&at={trid}",
        f"/diff?a={trid}&b=h2",
        "/tables/tasks?page=999",
        "/tables/trajectories?page=999",
        f"/trajectories/{trid}",
        f"/trajectories/{other}",
    ]
    for url in pages:
        r = client.get(url)
        assert r.status_code == 200, url
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, url
        assert "&lt;script&gt;alert(" in r.text or url.endswith(other) or "/tables/" in url, url
    for url in (f"/tasks/{tid}", "/trajectories/h2", "/flow?at=h2", f"/diff?a={trid}&b=h2"):  # most values missing
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", client.get(url).text))
        assert not re.search(r"\bNone\b", text), url  # a missing value prints as nothing
        units = r"[·,+] (turns|tool calls|prompt|completion tokens|s ·|s in all)"
        assert not re.search(units, text), url  # nor its unit


def test_a_run_written_before_reviews_v2_and_trajectories_v4_opens_unchanged(client, run_copy):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trajkit import schema as S

    store = Store(run_copy)
    first, second = _truth(run_copy, "true")[:2]
    add_review(store, first, "trajectory", "accept", "fine", "ann")
    add_review(store, second, "trajectory", "reject", None, "ann")
    for table, old, version in (("reviews", ["labels", "batch_id"], b"1"), ("trajectories", ["calls"], b"3")):
        for path in store.shards(table):  # as the versions before wrote them
            data = pq.read_table(path).drop_columns(old)
            if table == "reviews":  # decision was required
                data = data.cast(pa.schema([f.with_nullable(f.name in ("note",)) for f in data.schema]))
            pq.write_table(data.replace_schema_metadata({S.VERSION_KEY: version, S.TABLE_KEY: table.encode()}), path)
            relist(store, path, table)
    assert listed(client, review="accept") == [first] and listed(client, review="reject") == [second]
    assert listed(client, review="labelled") == [] and listed(client, review="reviewed") == [first, second]
    page = client.get(f"/trajectories/{first}").text
    assert "no per-call timings in this row" in page and "accepted by ann" in re.sub(
        r"\s+", " ", re.sub(r"<[^>]+>", " ", page)
    )
    assert client.get("/flow").status_code == 200 and client.get("/tables/reviews").status_code == 200
