"""The viewer in a real browser: Debian's headless Chromium driven by Playwright, on a run built by the stages.

One walk through every page: the run, tasks filtered, a task's trajectories, a
trajectory (folds and the token trace), a review submitted and then seen by
``trajkit sql``, the SQL box, the comparison. Screenshots go to
``.cache/view-screenshots/`` (artifacts to look at, not assertions). Then what a
hostile page or a hostile run can make the browser do: requests fired at every
route from another origin, and links and images built from names that look like URLs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.view.conftest import Served
from tests.view.test_app import HOSTILE, _hostile_run
from trajkit.store import Store
from trajkit.view.app import create_app
from trajkit.view.db import RunDB

SHOTS = Path(__file__).resolve().parents[2] / ".cache" / "view-screenshots"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed (make test installs it: apt-get install chromium)"
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox cannot start as root
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        yield browser
        browser.close()


@pytest.fixture
def browser_page(browser):
    """A page of its own browser context (no cookies or windows shared between tests)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)  # a loaded 2-core machine
    yield page
    context.close()


def _count(run: Path, query: str) -> int:
    return Store(run).sql(query).column(0)[0].as_py()


def test_click_through_every_page_filter_review_and_query(browser_page, run_copy):
    page, shot = browser_page, lambda name: page.screenshot(path=SHOTS / f"{name}.png", full_page=True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with Served(create_app(RunDB(run_copy), "alice")) as server:
        page.goto(server.url + "/")
        assert page.locator("#tables tr", has_text="trajectories").inner_text().split()[1] == str(
            Store(run_copy).count("trajectories")
        )
        assert page.locator("#stages tr").count() == len(Store(run_copy).manifests()) + 1
        assert page.locator(".plots img").count() >= 1
        shot("run")

        page.click("nav >> text=Tasks")
        total = _count(run_copy, "SELECT count(*) FROM tasks")
        assert page.inner_text("#total") == f"{total} matching"
        tagged = "SELECT difficulty FROM tasks WHERE difficulty IS NOT NULL GROUP BY 1 ORDER BY count(*) DESC"
        difficulty = Store(run_copy).sql(tagged).column(0)[0]  # untagged tasks (no verifier) may be the most
        page.select_option("select[name=difficulty]", difficulty.as_py())
        page.click("#filters button[type=submit]")
        want = _count(run_copy, f"SELECT count(*) FROM tasks WHERE difficulty = '{difficulty}'")
        assert page.inner_text("#total") == f"{want} matching"
        assert page.locator("#tasks tr").count() == want + 1
        shot("tasks-filtered")

        page.locator("#tasks a.id").first.click()
        task_id = page.url.rsplit("/", 1)[1]
        trajs = _count(run_copy, f"SELECT count(*) FROM trajectories WHERE task_id = '{task_id}'")
        assert trajs and page.locator("#trajectories tr").count() == trajs + 1
        question = Store(run_copy).sql(f"SELECT question FROM tasks WHERE task_id = '{task_id}'").column(0)[0]
        assert page.inner_text("#question") == question.as_py()
        shot("task")

        page.locator("#trajectories a.id").first.click()
        assert page.locator("#conversation .msg").count() >= 2
        page.click("#toggle-all")  # the page's script unfolds every folded part
        assert page.inner_text("#toggle-all") == "fold all"
        page.fill("input[name=note]", "wrong tool <b>order</b>")
        page.click("button[value=reject]")
        assert page.inner_text("#review-state").startswith("rejected by alice")
        assert "wrong tool <b>order</b>" in page.inner_text("#review-state")  # the note is text
        traj_id = page.url.rsplit("/", 1)[1]
        shot("trajectory-reviewed")
        done = subprocess.run(
            [sys.executable, "-m", "trajkit.cli", "sql", "--run", str(run_copy), "--format", "csv",
             "SELECT target_id, decision, note, reviewer FROM reviews"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert done.stdout.splitlines()[1:] == [f"{traj_id},reject,wrong tool <b>order</b>,alice"]

        traced = Store(run_copy).sql("SELECT traj_id FROM trajectories WHERE token_ids IS NOT NULL").column(0)[0]
        page.goto(f"{server.url}/trajectories/{traced}")
        page.hover("#tokens .tok.m1 >> nth=0")
        assert "mask 1 · logprob" in page.inner_text("#token-info")
        shot("token-trace")

        page.click("nav >> text=SQL")
        page.fill("#sql-box", "SELECT split, count(*) AS n FROM tasks WHERE split IS NOT NULL GROUP BY 1 ORDER BY 1")
        page.click("#run")
        rows = Store(run_copy).sql("SELECT split, count(*) FROM tasks WHERE split IS NOT NULL GROUP BY 1 ORDER BY 1")
        cells = page.locator("#result td").all_inner_texts()
        assert cells == [str(v) for r in rows.to_pylist() for v in r.values()]
        shot("sql")
        with page.expect_download() as download:
            page.click("#csv")  # the same query as CSV, posted with the same form
        csv = Path(download.value.path()).read_text().splitlines()
        assert csv[1:] == [",".join(str(v) for v in r.values()) for r in rows.to_pylist()]
        page.fill("#sql-box", f"COPY (SELECT 1) TO '{run_copy}/evil.csv'")
        page.click("#run")
        assert "only read statements" in page.inner_text("#sql-error") and not (run_copy / "evil.csv").exists()

        tid, trid = _hostile_run(run_copy)  # model and tool text full of markup: shown, never run
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{server.url}/trajectories/{trid}")
        page.click("#toggle-all")
        assert HOSTILE in page.inner_text("#conversation") and page.locator("#conversation img").count() == 0
        page.goto(f"{server.url}/tasks/{tid}")
        assert page.inner_text("#question") == HOSTILE and not dialogs
        shot("hostile")

        page.click("nav >> text=Compare")
        page.select_option("select[name=a]", "scripted-good")
        page.select_option("select[name=b]", "scripted-worse")
        page.click("#compare-form button")
        diffs = [float(r.split("\t")[-1]) for r in page.locator("#compare tr").all_inner_texts()[1:]]
        assert diffs and diffs[0] != 0 and [abs(d) for d in diffs] == sorted(map(abs, diffs), reverse=True)
        shot("compare")


class Recorder:
    """An ASGI wrapper noting each request the app receives (method, path as decoded)."""

    def __init__(self, app):
        self.app, self.seen = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.seen.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)


ATTACK = """<!doctype html><body><script>
// from another origin: every route of the viewer as an image, a form posted with and without guessed
// fields, a no-cors fetch (GET and POST), and top-level navigations (a new window, a form to _blank)
const viewer = %s, paths = %s, fields = %s;
let frames = 0;
function post(url, data, target) {
  const form = document.createElement("form");
  form.method = "post"; form.action = url; form.target = target;
  for (const [k, v] of Object.entries(data)) {
    const input = document.createElement("input");
    input.type = "hidden"; input.name = k; input.value = v; form.appendChild(input);
  }
  document.body.appendChild(form);
  form.submit();
}
function frame() {
  const f = document.createElement("iframe");
  f.name = "f" + frames++; document.body.appendChild(f);
  return f.name;
}
for (const path of paths) {
  const url = viewer + path, get = url + "?" + new URLSearchParams(fields);
  new Image().src = get;
  post(url, fields, frame());
  post(url, {}, frame());
  fetch(get, {mode: "no-cors", credentials: "include"});
  fetch(url, {mode: "no-cors", method: "POST", credentials: "include", body: new URLSearchParams(fields)});
  window.open(get, "_blank");
  post(url, fields, "_blank");
}
</script></body>"""
ATTEMPTS = 7  # requests per path above


def _serve_page(host: str, html: str):
    """A one-page web server on another loopback origin, in a thread; returns (its URL, the server)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(html.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{host}:{server.server_address[1]}/", server


def arrived(recorder: Recorder, paths: list[str]) -> dict[str, int]:
    return {p: sum(1 for _, seen in recorder.seen if seen == p) for p in paths}


def test_another_origin_cannot_make_the_viewer_run_sql_or_write(browser_page, run_copy):
    import json
    import time

    from tests.view.test_app import _every_route
    from tests.view.test_sqlbox import _files

    app = create_app(RunDB(run_copy), "alice")
    viewer = app.state.viewer
    paths = sorted({path for path, _ in _every_route(app, run_copy)})
    tid = Store(run_copy).sql("SELECT task_id FROM tasks LIMIT 1").column(0)[0].as_py()
    fields = {"q": "SELECT count(*) FROM tasks", "csrf": "guessed"}  # a read: only the route can refuse it
    fields.update(target_kind="task", target_id=tid, decision="reject", note="forged")
    trid = Store(run_copy).sql("SELECT traj_id FROM trajectories LIMIT 1").column(0)[0].as_py()
    fields.update(traj_id=trid, action="reject", expected=str(Store(run_copy).count("trajectories")))
    before = _files(run_copy)
    recorder = Recorder(app)
    with Served(recorder) as server:
        page_url, attacker = _serve_page("127.0.0.2", ATTACK % tuple(map(json.dumps, (server.url, paths, fields))))
        try:
            browser_page.goto(page_url)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and min(arrived(recorder, paths).values()) < ATTEMPTS:
                time.sleep(0.2)
            time.sleep(0.5)  # anything still on its way
        finally:
            attacker.shutdown()
    assert min(arrived(recorder, paths).values()) >= ATTEMPTS, arrived(recorder, paths)  # every attempt came
    assert {m for m, _ in recorder.seen} == {"GET", "POST"}
    assert viewer.db.user_queries == 0 and viewer.writes == 0
    assert _files(run_copy) == before


NAMES = {  # names from the run that look like URLs of other routes
    "task": ["..\\sql?q=SELECT 1#%2F", ".."],
    "trajectory": ["../sql?q=SELECT 2#%2F..\\", "~/..%2F#?x"],
    "plot": ["..\\sql?q=SELECT 3#%2F.png"],
}


def _named_run(run: Path) -> None:
    """Tasks, trajectories (one extending the other) and a card plot named as in ``NAMES``."""
    tasks, (traj, parent), (plot,) = NAMES["task"], NAMES["trajectory"], NAMES["plot"]
    store = Store(run)
    store.write("tasks", "named", [{"task_id": t, "mode": "single_tool", "question": f"named {t}"} for t in tasks])
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "done"}]
    rows = [
        {"traj_id": parent, "task_id": tasks[0], "messages": msgs, "status": "completed"},
        {"traj_id": traj, "task_id": tasks[0], "parent_id": parent, "messages": msgs, "status": "completed"},
    ]
    store.write("trajectories", "named", rows)
    plots = run / "card" / "plots"
    shutil.copy(next(plots.glob("*.png")), plots / plot)


def test_names_from_the_run_stay_inside_their_routes(browser_page, run_copy):
    from urllib.parse import unquote, urlsplit

    from starlette.routing import Match

    _named_run(run_copy)
    app = create_app(RunDB(run_copy), "alice")
    page, requests = browser_page, []
    page.on("request", lambda r: requests.append((r.method, r.url)))

    def route_of(method: str, url: str) -> tuple[str, tuple]:
        """The route the viewer serves a request with, and its parameters (the path decoded once, as uvicorn does)."""
        scope = {"type": "http", "method": method, "path": unquote(urlsplit(url).path), "root_path": ""}
        for r in app.routes:
            match, child = r.matches(scope)
            if match == Match.FULL:
                return r.name, tuple(child.get("path_params", {}).values())
        return "none", ()

    with Served(app) as server:
        page.goto(server.url + "/")
        page.wait_for_load_state("networkidle")
        assert page.get_by_alt_text(NAMES["plot"][0], exact=True).evaluate("img => img.naturalWidth") > 0
        for task in reversed(NAMES["task"]):  # the first, whose trajectories follow, last
            page.goto(f"{server.url}/tasks?q=named")
            page.locator("#tasks a.id").get_by_text(task, exact=True).click()
            assert page.inner_text("h1 .id") == task
        page.locator("#trajectories a.id").get_by_text(NAMES["trajectory"][0], exact=True).click()
        assert page.inner_text("h1 .id") == NAMES["trajectory"][0]
        page.locator("p a").get_by_text(NAMES["trajectory"][1], exact=True).click()  # the trajectory it extends
        assert page.inner_text("h1 .id") == NAMES["trajectory"][1]
        page.click("#task-link")
        assert page.inner_text("h1 .id") == NAMES["task"][0]
        page.click("button[value=accept]")  # the review's redirect is built from the name too
        assert page.inner_text("h1 .id") == NAMES["task"][0] and page.inner_text("#review-state").startswith("accept")
    reached = {url: route_of(method, url) for method, url in requests if urlsplit(url).path != "/favicon.ico"}
    assert all(url.startswith(server.url + "/") for _, url in requests)
    plots = {p.name for p in (run_copy / "card" / "plots").glob("*.png")}
    for url, (route, params) in reached.items():  # each request went to the route it belongs to
        assert route in {"run", "tasks", "task", "trajectory", "plot", "static", "review"}, url
        assert route not in NAMES or params[0] in NAMES[route] or (route == "plot" and params[0] in plots), url
    assert {(r, (name,)) for r, names in NAMES.items() for name in names} <= set(reached.values())
    assert app.state.viewer.db.user_queries == 0


# ---------------------------------------------------------------- reviewing at scale (issue 36)
KEYS = ["a", "r", "g", "a", "h", "s"]  # accept, reject, a label, accept, a label that excludes, skip


def _flow_row(page, traj_id: str) -> None:
    """Wait until the flow shows this row."""
    page.locator(f'#flow-row[data-traj="{traj_id}"]').wait_for()


def test_a_review_session_of_twenty_rows_by_keys_alone(browser_page, run_copy):
    from tests.view.test_lists import LABELS, _truth
    from tests.view.test_review import _latest
    from trajkit.accepted import LABELS_FILE

    (run_copy / LABELS_FILE).write_text(LABELS)
    order = _truth(run_copy, "true")
    assert len(order) > 21
    page, documents = browser_page, []
    page.on("request", lambda r: documents.append(r.url) if r.resource_type == "document" else None)
    with Served(create_app(RunDB(run_copy), "alice")) as server:
        page.goto(server.url + "/flow")
        _flow_row(page, order[0])
        page.locator("body").evaluate("body => { body.dataset.marker = 'one page load'; }")
        for i in range(20):
            page.keyboard.press(KEYS[i % len(KEYS)])
            _flow_row(page, order[i + 1])  # the next unreviewed row, in the list's order
        page.keyboard.press("k")  # previous: the row before, reviewed or not
        _flow_row(page, order[19])
        page.keyboard.press("j")
        _flow_row(page, order[20])
        reviewed = sum(KEYS[i % len(KEYS)] != "s" for i in range(20))
        assert page.inner_text("#progress-text") == f"{reviewed} of {len(order)} reviewed"
        assert page.locator("body").get_attribute("data-marker") == "one page load"  # no page was loaded
        assert documents == [server.url + "/flow"] and page.url.endswith(f"at={order[20]}")
        page.screenshot(path=SHOTS / "review-flow.png", full_page=True)
    latest = _latest(run_copy)
    want = {"a": ("accept", None), "r": ("reject", None), "g": (None, ["gold"]), "h": (None, ["hallucination"])}
    for i in range(20):
        key = KEYS[i % len(KEYS)]
        got = latest.get(order[i])
        assert (got[:2] if got else None) == want.get(key), (i, key)
        assert got is None or got[2] == "alice"


def test_a_bulk_decision_asks_first_and_is_undone_as_one(browser_page, run_copy):
    from tests.view.test_lists import _truth
    from tests.view.test_review import _latest

    completed = _truth(run_copy, "status = 'completed'")
    page = browser_page
    with Served(create_app(RunDB(run_copy), "alice")) as server:
        page.goto(server.url + "/trajectories")
        page.select_option("select[name=status]", "completed")
        page.click("#filters button[type=submit]")
        assert page.inner_text("#total") == f"{len(completed)} matching"
        page.screenshot(path=SHOTS / "trajectory-list.png", full_page=True)
        page.locator("a.bulk", has_text="reject").click()
        assert page.inner_text("#bulk-n") == str(len(completed)) and not Store(run_copy).shards("reviews")
        page.screenshot(path=SHOTS / "bulk-confirm.png")
        page.click("#bulk-confirm")
        assert f"{len(completed)} reviews by alice" in page.inner_text("#batch")
        assert {t for t, v in _latest(run_copy).items() if v[0] == "reject"} == set(completed)
        assert page.inner_text("#reviewed") == f"{len(completed)} of {len(completed)} reviewed"
        page.click("#undo")
        assert page.inner_text("#reviewed") == f"0 of {len(completed)} reviewed"
        assert all(v[0] is None for v in _latest(run_copy).values()) and len(Store(run_copy).shards("reviews")) == 2


def test_a_label_given_by_key_changes_the_export(browser_page, run_copy, tmp_path):
    import json

    from tests.test_cli import invoke
    from tests.view.test_lists import LABELS
    from trajkit.accepted import LABELS_FILE, accepted_ids

    (run_copy / LABELS_FILE).write_text(LABELS)
    store = Store(run_copy)
    parents = set(store.sql("SELECT parent_id FROM trajectories WHERE parent_id IS NOT NULL").column(0).to_pylist())
    target = min(parents & accepted_ids(store, "trajectories"))  # accepted, with an extension (and a task to diff in)
    out = tmp_path / "out.jsonl"

    def exported(*flags: str) -> set[str]:
        invoke("export", str(out), "--run", str(run_copy), "-f", "jsonl", *flags)
        return {json.loads(line)["traj_id"] for line in out.read_text().splitlines()}

    assert target in exported()
    page = browser_page
    with Served(create_app(RunDB(run_copy), "alice")) as server:
        page.goto(f"{server.url}/flow?at={target}")
        _flow_row(page, target)
        page.keyboard.press("h")  # hallucination: excludes
        page.locator(f'#flow-row:not([data-traj="{target}"])').wait_for()
        page.goto(f"{server.url}/trajectories/{target}")  # the timeline, its extensions under it
        assert page.locator("#timeline tr.tl").count() >= 1 and "not accepted" in page.inner_text("#accepted")
        page.screenshot(path=SHOTS / "timeline.png", full_page=True)
        page.click("#diff-form button")
        assert page.locator("#diff tr").count() > 1
        page.screenshot(path=SHOTS / "diff.png", full_page=True)
        page.goto(f"{server.url}/tables/trajectory_quality")
        assert page.locator("#summary svg.hist").count() >= 1
        page.screenshot(path=SHOTS / "table-browser.png", full_page=True)
    assert target not in exported() and exported("--all", "--label", "hallucination") == {target}
