"""Trajectory ids are unique in a run: two stages that run the same episodes (same tasks, model and seed) write
two trajectories with two ids, each opened by ``trajkit show`` and by the viewer, and each stage's seeds stay
the seeds every model and stage draws."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.fixtures.synth import model, stage
from tests.synth.brain import Brain
from tests.test_cli import invoke
from trajkit.models.scripted_server import ScriptedServer
from trajkit.store import Store
from trajkit.view.app import create_app
from trajkit.view.db import RunDB

STAGES = ("rollouts", "rollouts_cool", "custom", "extend", "extend_again")


async def no_keywords_rollout(task, backend, env, params, limits, **kw):
    """A custom rollout function that passes on only the episode's index and seed (no stage, no parent):
    its row's own id is the same in every stage."""
    from trajkit.envs.agent import run_episode

    return await run_episode(task, backend, env, params, limits, rollout_index=kw["rollout_index"], seed=kw["seed"])


def test_two_stages_running_the_same_episodes_write_two_ids_each_opened_everywhere(synth_run):
    """Three rollouts stages (one a custom function that knows no stage) and two extend stages over the same
    episodes: before ids named their stage, 9 rows had 2 ids."""
    run = synth_run
    server_id = Store(run).rows("servers")[0]["server_id"]
    task = {
        "task_id": "t2",
        "question": "What is 2 plus 5?",
        "target_tools": ["add"],
        "server_ids": [server_id],
        "mode": "single_tool",
    }
    Store(run).write("tasks", "import", [task])
    with ScriptedServer(Brain(garbage=0)) as server:
        m = model(server)
        rollouts = {"model": m, "pool_size": 1, "seed": 7}
        stage(run, "synth.rollouts", rollouts, name="rollouts")
        stage(run, "synth.rollouts", {**rollouts, "temperature": 0.2}, name="rollouts_cool")
        stage(run, "synth.rollouts", {**rollouts, "rollout_fn": f"{__name__}:no_keywords_rollout"}, name="custom")
        extend = {
            "model": m,
            "pool_size": 1,
            "seed": 7,
            "where": "parent_id IS NULL AND status = 'completed'",
        }
        stage(run, "synth.extend", extend, name="extend")
        stage(run, "synth.extend", extend, name="extend_again")
    store = Store(run)
    rows = store.rows("trajectories")
    n = {name: store.count("trajectories", stage=name) for name in STAGES}
    assert n["rollouts"] == n["rollouts_cool"] == n["custom"] == 1 and len(rows) == sum(n.values())
    assert n["extend"] == n["extend_again"] > 0  # the same parents extended twice
    ids = [r["traj_id"] for r in rows]
    assert len(set(ids)) == len(ids), "a traj_id names several rows"
    viewed = store.sql("SELECT traj_id, count(*) AS n FROM trajectories GROUP BY traj_id").to_pylist()
    assert {v["traj_id"] for v in viewed} == set(ids) and {v["n"] for v in viewed} == {1}
    # the seeds are the episode's, not the stage's: every stage drew the same numbers for an episode
    seeds = {}
    for r in rows:
        if r["parent_id"] is None:
            seeds.setdefault((r["task_id"], r["rollout_index"]), set()).add(r["sampling"]["seed"])
    assert len(seeds) == 1 and all(len(s) == 1 for s in seeds.values())
    # extensions link to their parents by the parents' ids
    assert {r["parent_id"] for r in rows if r["parent_id"]} <= set(ids)
    with TestClient(create_app(RunDB(run), "alice"), base_url="http://127.0.0.1") as client:
        for tid in ids:
            assert tid in invoke("show", tid, "--run", str(run)).output
            page = client.get(f"/trajectories/{tid}")
            assert page.status_code == 200 and tid in page.text
