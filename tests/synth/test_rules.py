"""Rule filters and computed tool accuracy on trajectories rows."""

from __future__ import annotations

import json

from trajkit.synth import rules
from trajkit.synth.tool_accuracy import tool_accuracy


def traj(*messages, final="The result is 5.", **extra):
    calls = [c["name"] for m in messages for c in m.get("tool_calls") or []]
    return {
        "messages": list(messages),
        "final_answer": final,
        "num_tool_calls": len(calls),
        "tools_called": calls,
        **extra,
    }


def call(name, **args):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "name": name, "arguments": json.dumps(args)}],
    }


def result(text):
    return {"role": "tool", "content": text, "tool_call_id": "c", "name": "add"}


USER = {"role": "user", "content": "What is 2 plus 3?"}


def test_a_good_trajectory_passes_every_rule():
    row = traj(USER, call("add", a=2, b=3), result("5"), {"role": "assistant", "content": "The result is 5."})
    assert rules.check(row) == []


def test_each_rule_catches_its_fault():
    assert rules.check(traj(USER, {"role": "assistant", "content": "42"}, final="42")) == ["no_tool_call"]
    errors = traj(USER, call("divide", a=1, b=0), result("Error: division by zero"), final="Sorry.")
    assert rules.check(errors) == ["all_tool_errors"]
    mixed = traj(USER, call("divide", a=1, b=0), result("Error: division by zero"), call("add", a=1, b=1), result("2"))
    assert "all_tool_errors" not in rules.check(mixed)
    assert rules.check(traj(USER, call("add", a=2, b=3), result("5"), final="  ")) == ["empty_final_answer"]
    assert rules.check(traj(USER, call("add", a=2, b=3), result("5"), final=None)) == ["empty_final_answer"]


def test_degenerate_repetition():
    loop = {"role": "assistant", "content": "Let me add the numbers again. " * 20}
    assert "degenerate_repetition" in rules.check(traj(USER, call("add", a=2, b=3), result("5"), loop))
    prose = {
        "role": "assistant",
        "content": "I added 2 and 3 with the calculator and got 5. Since you also asked about the budget, note that "
        "the remaining amount after rent, groceries and transport is 412 dollars, which covers the phone bill "
        "twice over; if the electricity estimate of 96 dollars holds, about 220 dollars are left for savings.",
    }
    assert rules.check(traj(USER, call("add", a=2, b=3), result("5"), prose)) == []
    same = [m for _ in range(3) for m in (call("add", a=2, b=3), result("5"))]
    assert rules.check(traj(USER, *same)) == ["degenerate_repetition"]
    # the same tool with different arguments is not a loop
    varied = [m for i in range(3) for m in (call("add", a=i, b=3), result(str(i + 3)))]
    assert rules.check(traj(USER, *varied)) == []


def test_only_chosen_rules_run():
    row = traj(USER, {"role": "assistant", "content": ""}, final="")
    assert rules.check(row, ["empty_final_answer"]) == ["empty_final_answer"]
    assert rules.check(row) == ["no_tool_call", "empty_final_answer"]


def test_tool_accuracy_share_and_order():
    assert tool_accuracy(["add", "multiply"], ["add", "multiply"]) == (1.0, True)
    assert tool_accuracy(["add", "multiply"], ["multiply", "add"]) == (1.0, False)
    assert tool_accuracy(["add", "multiply"], ["add", "sqrt", "add", "multiply"]) == (1.0, True)
    assert tool_accuracy(["add", "multiply"], ["add"]) == (0.5, False)
    assert tool_accuracy(["add", "add"], ["add"]) == (1.0, False)  # a repeated target needs two calls in order
    assert tool_accuracy(["add"], []) == (0.0, False)
    assert tool_accuracy([], ["add"]) == (None, None)
    assert tool_accuracy(None, None) == (None, None)


def test_a_broken_custom_filter_stops_the_stage_with_one_line(run_dir):
    import pytest

    from trajkit.config import build
    from trajkit.errors import UserError
    from trajkit.runner import run_stage
    from trajkit.store import Store
    from trajkit.synth.filters import FILTER

    store = Store(run_dir)
    row = {"traj_id": "t1", "task_id": "k1", "status": "completed", "rollout_index": 0}
    store.write("trajectories", "rollouts", [traj(call("add", a=1), result("5"), **row)])
    for fn, message in [
        ("crashing_filter", "filter tests.synth.extensions:crashing_filter failed on trajectory t1: KeyError: "),
        ("numeric_filter", "filter tests.synth.extensions:numeric_filter returned 1 for trajectory t1; expected None"),
    ]:
        cfg = build(FILTER.config, {"custom": [f"tests.synth.extensions:{fn}"]})
        with pytest.raises(UserError) as e:
            run_stage(store, FILTER, cfg, name=fn, quiet=True)
        assert str(e.value).startswith(message)
    assert not store.rows("rejected")  # a bug in user code rejects nothing


def test_a_multi_tool_task_is_kept_only_when_every_target_tool_was_called(run_dir):
    """A task targeting add and set passed on a trajectory that called add only (its verifier checks the answer
    only): the filter rejects it as target_tool_not_called, as it does a target call whose result is an error."""
    from trajkit.config import build
    from trajkit.runner import run_stage
    from trajkit.store import Store
    from trajkit.synth.filters import FILTER

    def calls(*named):  # (tool, result) pairs, each call with its own id
        out = []
        for i, (name, text) in enumerate(named):
            out.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "name": name}]})
            out.append({"role": "tool", "content": text, "tool_call_id": f"c{i}", "name": name})
        return out

    store = Store(run_dir)
    task = {"source": "synth", "question": "Add 2 and 3, then remember the sum.", "target_tools": ["add", "set"]}
    store.write("tasks", "tasks", [{**task, "task_id": "multi", "mode": "multi_tool"}])
    store.write("tasks", "tasks", [{**task, "task_id": "single", "mode": "single_tool"}])
    rows = {
        "both": ("multi", calls(("add", "5"), ("set", "ok"))),
        "add_only": ("multi", calls(("add", "5"))),
        "set_failed": ("multi", calls(("add", "5"), ("set", "Error: no such key"))),
        "single": ("single", calls(("add", "5"))),  # a single_tool task's targets are not required
    }
    store.write(
        "trajectories",
        "rollouts",
        [traj(USER, *m, task_id=t, traj_id=k, status="completed", rollout_index=0) for k, (t, m) in rows.items()],
    )
    manifest = run_stage(store, FILTER, build(FILTER.config, {"min_completeness": None}), quiet=True)
    rejected = {r["row_id"]: (r["reason"], r["detail"]) for r in store.rows("rejected")}
    assert rejected == {"add_only": ("target_tool_not_called", "set"), "set_failed": ("target_tool_not_called", "set")}
    assert manifest["counts"]["kept"] == 2
    off = build(FILTER.config, {"min_completeness": None, "require_target_tools": False})
    assert run_stage(store, FILTER, off, name="lenient", quiet=True)["counts"]["kept"] == 4
