"""Server draws: uniform, power law by rank of weight, given list; deterministic per request."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from trajkit.errors import UserError
from trajkit.synth.sampling import draw, server_weights, usable_servers


def _server(i, tools):
    return {
        "server_id": f"s{i:02d}",
        "name": f"srv{i}",
        "status": "ok",
        "tools": [{"name": f"t{j}"} for j in range(tools)],
    }


SERVERS = [_server(i, tools=i + 1) for i in range(10)]


def _counts(strategy, alpha=1.0, mode="single_tool", n=3000):
    weights = server_weights(SERVERS, strategy, alpha, None)
    out = Counter()
    for i in range(n):
        d = draw(mode, SERVERS, weights, random.Random(i), (2, 3), 2)
        out[d.servers[0]["name"]] += 1
    return out


def test_uniform_and_power_law():
    uniform = _counts("uniform")
    assert max(uniform.values()) < 2 * min(uniform.values())
    power = _counts("power_law", alpha=1.5)
    # weight = number of tools: srv9 has the most, so rank 1; srv0 ranks last
    assert power["srv9"] > 10 * power["srv0"]
    assert power["srv9"] > power["srv8"] > power["srv5"]


def test_given_weights_and_list():
    weights = server_weights(SERVERS, "power_law", 2.0, {"srv0": 100.0})
    assert weights[0] == 1.0 and max(weights[1:]) == 0.25
    assert [s["name"] for s in usable_servers(SERVERS, ["srv3", "s05"])] == ["srv3", "srv5"]
    with pytest.raises(UserError, match="nope"):
        usable_servers(SERVERS, ["nope"])


def test_modes_draw_what_they_promise():
    weights = [1.0] * len(SERVERS)
    for i in range(200):
        single = draw("single_tool", SERVERS, weights, random.Random(i), (2, 3), 2)
        assert len(single.servers) == 1 and len(single.tools) == 1
        multi = draw("multi_tool", SERVERS, weights, random.Random(i), (2, 3), 2)
        assert len(multi.servers) == 1 and 2 <= len(multi.tools) <= 3 and len(set(multi.tools)) == len(multi.tools)
        cross = draw("multi_server", SERVERS, weights, random.Random(i), (2, 3), 2)
        assert len({s for s, _ in cross.tools}) == 2  # a tool from each of the two servers
    assert draw("multi_tool", [_server(0, 1)], [1.0], random.Random(0), (2, 3), 2) is None
    assert draw("multi_server", [_server(0, 3)], [1.0], random.Random(0), (2, 3), 2) is None
    a = draw("multi_server", SERVERS, weights, random.Random("x"), (2, 3), 2)
    assert a == draw("multi_server", SERVERS, weights, random.Random("x"), (2, 3), 2)
