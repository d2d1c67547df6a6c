"""The project's example servers: deterministic logic, and their tools over real stdio sessions."""

from __future__ import annotations

import json

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from trajkit.envs.env import ToolEnv
from trajkit.envs.servers.calculator import evaluate_expression
from trajkit.envs.servers.units import convert


@pytest.mark.parametrize(
    "expression, value",
    [
        ("(3 + 4) * sqrt(16) / 2", 14),
        ("2 ** 10 - 1", 1023),
        ("7 / 2", 3.5),
        ("-(2 + 3) % 4", 3),
        ("round(pi, 2)", 3.14),
    ],
)
def test_expression_evaluator(expression, value):
    assert evaluate_expression(expression) == value


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os').system('true')", "unsupported expression element"),
        ("1 / 0", "division by zero"),
        ("2 ** 100000", "exponent"),
        ("sqrt(-1)", "cannot evaluate"),
        ("1 +", "not an arithmetic expression"),
    ],
)
def test_expression_evaluator_refuses_what_it_cannot_do(expression, message):
    with pytest.raises(ToolError, match=message):
        evaluate_expression(expression)


def test_unit_conversion():
    assert convert(100, "C", "F") == 212
    assert convert(1, "mi", "km") == 1.609344
    assert convert(1, "GiB", "MiB") == 1024
    with pytest.raises(ToolError, match="cannot convert length"):
        convert(1, "km", "kg")


def test_example_servers_list_their_tools(example_servers):
    names = {r["name"]: [t["name"] for t in r["tools"]] for r in example_servers}
    assert names == {
        "calculator": ["add", "subtract", "multiply", "divide", "power", "sqrt", "evaluate"],
        "kv": ["set", "get", "delete", "list_keys", "dump"],
        "units": ["convert", "list_units"],
    }
    kv = {t["name"]: json.loads(t["annotations"]) for t in example_servers[1]["tools"]}
    assert kv["get"]["readOnlyHint"] is True and kv["set"]["readOnlyHint"] is False


async def test_kv_and_calculator_over_stdio(example_servers, example_servers_config):
    env = ToolEnv(example_servers, config=example_servers_config)
    async with env, env.episode(["calculator", "kv"]) as ep:
        assert (await ep.call("calculator", "divide", {"a": 7, "b": 2})).text == "3.5"
        err = await ep.call("calculator", "divide", {"a": 1, "b": 0})
        assert err.is_error and err.text == "Error executing tool divide: division by zero"
        await ep.call("kv", "set", {"key": "b", "value": "2"})
        await ep.call("kv", "set", {"key": "a", "value": "1"})
        await ep.call("kv", "delete", {"key": "b"})
        assert json.loads((await ep.call("kv", "dump", {})).text) == {"a": "1"}
        missing = await ep.call("kv", "get", {"key": "b"})
        assert missing.is_error and "no such key: b" in missing.text
