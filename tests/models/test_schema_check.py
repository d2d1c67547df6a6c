"""A hostile input schema cannot hold the event loop: the client checks a model's arguments against a
server's schema with patterns searched by RE2 (linear time). A ticker on the loop measures the worst gap
while arguments are checked, in a control phase (a plain pattern) and under attack (a pattern that
backtracks exponentially in Python's ``re``), in the same test."""

from __future__ import annotations

import asyncio
import json
import re
import time

from trajkit.models.parsing import parse_tool_calls

EVIL = "^(a+)+$"  # Python's re: 2^n steps on "a" * n + "!" (n = 24: seconds)


def _tools(pattern: str) -> list[dict]:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "pattern": pattern}},
        "patternProperties": {pattern: {"type": "string"}},
        "additionalProperties": False,
    }
    return [{"type": "function", "function": {"name": "find", "parameters": schema}}]


def _call(value: str) -> str:
    return "<tool_call>" + json.dumps({"name": "find", "arguments": {"q": value}}) + "</tool_call>"


async def _worst_gap(work, seconds: float = 0.6) -> float:
    """The longest the loop went without running a 5 ms ticker while ``work`` ran on it, call after call."""
    gaps, stop = [0.0], False

    async def ticker():
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)  # the ticker is running before the first call
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        work()
        await asyncio.sleep(0)
    stop = True
    await tick
    return max(gaps)


def test_a_catastrophic_pattern_in_an_input_schema_does_not_hold_the_loop():
    evil_value = "a" * 24 + "!"
    parse_tool_calls(_call("b!"), _tools("^b+!$"))  # imports and caches made before either phase
    control = asyncio.run(_worst_gap(lambda: parse_tool_calls(_call("b" * 24 + "!"), _tools("^b+!$"))))
    _, calls, errors = parse_tool_calls(_call(evil_value), _tools(EVIL))
    assert not calls and errors[0].code == "bad_arguments" and "does not match" in errors[0].reason
    attack = asyncio.run(_worst_gap(lambda: parse_tool_calls(_call(evil_value), _tools(EVIL))))
    assert attack < 3 * max(control, 0.02), (attack, control)
    # the same check in Python's re would have held the loop far longer (a sanity check on the measure)
    t0 = time.perf_counter()
    re.search(EVIL, "a" * 22 + "!")
    assert time.perf_counter() - t0 > 0.05


def test_a_pattern_re2_cannot_read_accepts_the_call():
    _, calls, errors = parse_tool_calls(_call("abab"), _tools(r"^(ab)\1$"))  # a backreference
    assert [c.name for c in calls] == ["find"] and errors == []
