"""The viewer in a real browser: Debian's headless Chromium driven by Playwright, on a run built by the stages.

One walk through every page: the run, tasks filtered, a task's trajectories, a
trajectory (folds and the token trace), a review submitted and then seen by
``trajkit sql``, the SQL box, the comparison. Screenshots go to
``.cache/view-screenshots/`` (artifacts to look at, not assertions).
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


@pytest.fixture
def browser_page():
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed (make test installs it: apt-get install chromium)"
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox cannot start as root
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(30_000)  # a loaded 2-core machine
        yield page
        browser.close()


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
        difficulty = Store(run_copy).sql("SELECT difficulty FROM tasks GROUP BY 1 ORDER BY count(*) DESC").column(0)[0]
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
        page.click("#sql-form button")
        rows = Store(run_copy).sql("SELECT split, count(*) FROM tasks WHERE split IS NOT NULL GROUP BY 1 ORDER BY 1")
        cells = page.locator("#result td").all_inner_texts()
        assert cells == [str(v) for r in rows.to_pylist() for v in r.values()]
        shot("sql")
        page.fill("#sql-box", f"COPY (SELECT 1) TO '{run_copy}/evil.csv'")
        page.click("#sql-form button")
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
