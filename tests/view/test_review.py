"""Reviewing at scale through Starlette's test client: the keyboard flow's walk and decisions, bulk decisions
and their undo, labels and guidelines from the run, each write checked in the reviews table."""

from __future__ import annotations

import re
from html import escape

import pytest

from tests.view.test_app import _csrf, _sql
from tests.view.test_lists import LABELS, _truth
from trajkit.accepted import LABELS_FILE, accepted_ids
from trajkit.store import Store
from trajkit.view import flow

ROW = re.compile(r'<section id="flow-row" data-traj="(\w*)">')


def _post(client, url: str, form: dict):
    """A form posted as the viewer's own page posts it (this start's token, its origin)."""
    form = {"csrf": _csrf(client.get("/sql").text), **form}
    return client.post(url, data=form, headers={"origin": str(client.base_url)}, follow_redirects=False)


def _latest(run) -> dict[str, tuple]:
    rows = _sql(
        run,
        "SELECT target_id, decision, labels, reviewer, batch_id FROM reviews QUALIFY row_number() OVER "
        "(PARTITION BY target_kind, target_id ORDER BY reviewed_at DESC, review_id DESC) = 1",
    )
    return {r["target_id"]: (r["decision"], r["labels"], r["reviewer"], r["batch_id"]) for r in rows}


def test_the_flow_walks_the_filtered_list_and_each_decision_shows_the_next_unreviewed_row(client, run_copy):
    (run_copy / LABELS_FILE).write_text(LABELS)
    filters = {"status": "completed"}
    order = _truth(run_copy, "status = 'completed'")
    assert len(order) >= 6
    html = client.get("/flow", params=filters).text
    assert ROW.search(html).group(1) == order[0] and f"0 of {len(order)} reviewed" in html
    step = lambda go, at: ROW.search(client.get("/flow/row", params={**filters, "go": go, "at": at}).text).group(1)
    assert step("next", order[0]) == order[1] and step("prev", order[1]) == order[0]
    assert step("prev", order[0]) == order[0] and step("next", order[-1]) == order[-1]  # the ends stay
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    decided = []
    db = client.app.state.viewer.db
    asked = {r["traj_id"]: r["q"] for r in _sql(run_copy, "SELECT traj_id, messages[1].content AS q FROM trajectories")}
    client.get("/flow", params=filters)  # shows the first row
    for i, action in enumerate(["accept", "reject", "label:gold", "accept"]):
        assert order[i + 1] in flow._ahead(db)  # the row after the one shown, read meanwhile
        r = _post(client, f"/flow/decide?{query}", {"traj_id": order[i], "action": action, "fragment": "1"})
        assert r.status_code == 200 and ROW.search(r.text).group(1) == order[i + 1], action
        assert escape(asked[order[i + 1]][:60]) in r.text  # its own conversation, as read ahead
        decided.append(order[i])
        assert f"{i + 1} of {len(order)} reviewed" in r.text
    r = _post(client, f"/flow/decide?{query}", {"traj_id": order[2], "action": "label:gold", "fragment": "1"})
    assert ROW.search(r.text).group(1) == order[4]  # the next unreviewed after it: 3 is reviewed
    assert "3 of" in r.text  # a label key toggles: its second press took the only label off
    assert step("todo", order[4]) == order[5] and step("todo", order[-1]) == order[2]  # skip; past the end, the top
    latest = _latest(run_copy)
    assert latest[order[0]][:3] == ("accept", None, "alice") and latest[order[1]][0] == "reject"
    assert latest[order[2]][:2] == (None, None) and latest[order[3]][0] == "accept"
    r = _post(client, f"/flow/decide?{query}", {"traj_id": order[1], "action": "label:hallucination"})
    assert r.status_code == 303 and r.headers["location"].endswith(f"&at={order[2]}")  # without the page's script
    assert _latest(run_copy)[order[1]][:2] == ("reject", ["hallucination"])  # the label keeps the decision
    for bad in ({"traj_id": "nope", "action": "accept"}, {"traj_id": order[0], "action": "label:nope"}):
        assert _post(client, f"/flow/decide?{query}", bad).status_code == 400
    done = client.get("/flow", params={**filters, "review": "none", "status": "nope"}).text
    assert 'id="flow-done"' in done  # nothing to review


def test_a_bulk_decision_is_one_batch_behind_a_confirmation_and_undone_as_one(client, run_copy):
    (run_copy / LABELS_FILE).write_text(LABELS)
    store = Store(run_copy)
    completed = _truth(run_copy, "status = 'completed'")
    first = completed[0]
    _post(client, "/flow/decide?status=completed", {"traj_id": first, "action": "label:gold", "fragment": "1"})
    shards = len(store.shards("reviews"))
    confirm = client.get("/bulk", params={"status": "completed", "action": "reject"})
    assert confirm.status_code == 200 and f'id="bulk-n">{len(completed)}<' in confirm.text
    assert len(store.shards("reviews")) == shards  # asking writes nothing
    expected = re.search(r'name="expected" value="(\d+)"', confirm.text).group(1)
    stale = _post(client, "/bulk?status=completed", {"action": "reject", "expected": int(expected) + 1})
    assert stale.status_code == 409 and len(store.shards("reviews")) == shards  # the list changed: ask again
    r = _post(client, "/bulk?status=completed", {"action": "reject", "expected": expected})
    assert r.status_code == 303 and len(store.shards("reviews")) == shards + 1  # one shard
    batch = re.search(r"batch=(\w+)", r.headers["location"]).group(1)
    latest = _latest(run_copy)
    assert {t for t, v in latest.items() if v[3] == batch} == set(completed)
    assert latest[first][:3] == ("reject", ["gold"], "alice")  # its label kept
    assert not set(completed) & accepted_ids(store, "trajectories")
    page = client.get(r.headers["location"]).text
    assert f"{len(completed)} reviews by alice" in page and 'id="undo"' in page
    labelled = _post(client, "/bulk?status=completed", {"action": "label:hallucination", "expected": expected})
    assert labelled.status_code == 303
    label_batch = re.search(r"batch=(\w+)", labelled.headers["location"]).group(1)
    assert _latest(run_copy)[first][:2] == ("reject", ["gold", "hallucination"])  # the decision kept, a label added
    assert _post(client, "/bulk/undo", {"batch": label_batch}).status_code == 303
    assert _post(client, "/bulk/undo", {"batch": batch}).status_code == 303
    latest = _latest(run_copy)
    assert latest[first][:2] == (None, ["gold"])  # as before the bulk decision
    assert all(latest[t][0] is None and not latest[t][1] for t in completed[1:])  # unreviewed again
    assert len(store.shards("reviews")) == shards + 4
    assert _post(client, "/bulk/undo", {"batch": "nope"}).status_code == 400
    assert client.get("/bulk", params={"action": "delete"}).status_code == 400


def test_labels_and_guidelines_come_from_the_run(client, run_copy):
    html = client.get("/flow").text
    assert 'id="legend"' not in html and 'id="guidelines"' not in html  # none in the run
    (run_copy / LABELS_FILE).write_text(LABELS)
    (run_copy / "guidelines.md").write_text(
        "# How to review\n\n- **accept** a *grounded* answer\n- <script>alert(1)</script> <b>raw</b>\n\n"
        "[a link](javascript:alert(1)) [docs](https://example.com/d)\n"
    )
    html = client.get("/flow").text
    keys = re.search(r'data-keys="([^"]+)"', html).group(1)
    assert "&#34;h&#34;: &#34;label:hallucination&#34;" in keys and "&#34;a&#34;: &#34;accept&#34;" in keys
    assert '<rect width="10" height="10" fill="#c0392b"/>' in html and "(leaves the accepted data)" in html
    guide = re.search(r'<div class="guidelines">(.*?)</div>', html, re.DOTALL).group(1)
    assert "<h1>How to review</h1>" in guide and "<strong>accept</strong>" in guide and "<em>grounded</em>" in guide
    assert "<script>" not in guide and "&lt;script&gt;alert(1)&lt;/script&gt;" in guide and "&lt;b&gt;raw" in guide
    assert 'href="javascript:' not in guide and 'href="https://example.com/d"' in guide
    (run_copy / LABELS_FILE).write_text("labels:\n  - {name: x, key: a, color: '#fff'}\n")
    broken = client.get("/flow")
    assert broken.status_code == 500 and "key &#39;a&#39; is not one lowercase letter or digit" in broken.text


@pytest.mark.parametrize("kind", ["task", "trajectory"])
def test_the_page_form_writes_labels_the_run_names(client, run_copy, kind):
    (run_copy / LABELS_FILE).write_text(LABELS)
    table, key = ("tasks", "task_id") if kind == "task" else ("trajectories", "traj_id")
    target = _sql(run_copy, f"SELECT {key} FROM {table} LIMIT 1")[0][key]
    form = {"target_kind": kind, "target_id": target, "decision": "accept", "label": ["gold", "hallucination"]}
    assert _post(client, "/review", form).status_code == 303
    assert _latest(run_copy)[target][:2] == ("accept", ["gold", "hallucination"])
    assert _post(client, "/review", {**form, "label": ["nope"]}).status_code == 400
    page = client.get(f"/{'tasks' if kind == 'task' else 'trajectories'}/{target}").text
    assert re.search(r'<input type="checkbox" name="label" value="gold" checked>', page)
