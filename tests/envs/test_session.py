"""Sessions against a raw JSON-RPC server that misbehaves on purpose: results, faults, pools, bounds."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import time

import pytest

from tests.fixtures.envs import RAW_SERVER
from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.envs.forks import Zygote
from trajkit.envs.session import Connection, ServerFault
from trajkit.envs.structured import CHECK_S, problem
from trajkit.errors import UserError


@pytest.mark.parametrize("forked", [False, True])
async def test_results_errors_and_faults_of_one_connection(raw_server, forked):
    """Spawned (``stdio.spawn``), or forked from a zygote (``Zygote.instance``): the same answers."""
    cfg = raw_server() if not forked else ServerConfig(command=sys.executable, args=[str(RAW_SERVER)])
    fork = Zygote("raw", cfg) if forked else None
    conn = Connection("raw", cfg, fork=fork)
    try:
        assert (await conn.call("echo", {"text": "hi"})).text == "hi"
        failed = await conn.call("fail", {})
        assert failed.is_error and failed.text == "Error: it failed on purpose"
        rejected = await conn.call("reject", {})  # a JSON-RPC error response is an answer, for the model
        assert rejected.is_error and "rejected on purpose (code -32602)" in rejected.text
        assert (await conn.call("junk", {})).text == "after junk"  # stray stdout lines are skipped
        big = await conn.call("big", {"seconds": 300_000}, max_chars=100)  # one line of 300 kB on stdout
        assert big.truncated and big.text.startswith("x" * 100) and "truncated 299900 characters" in big.text
        on_disk = open_file_bytes()  # (what other tests of this process left open counts before and after)
        assert (await conn.call("big", {"seconds": 20e6, "text": "stderr"})).text == "ok"  # 20 MB on stderr:
        assert conn.stderr_tail().endswith("x | wrote a lot)") and open_file_bytes() - on_disk < 1 << 20  # none on disk
        with pytest.raises(ServerFault, match="malformed malformed result from 'raw': content"):
            await conn.call("malformed", {})
        with pytest.raises(ServerFault, match="hang timed out after 0.3s"):
            await conn.call("hang", {}, timeout_s=0.3)
        with pytest.raises(ServerFault, match=r"exited during crash \(stderr: .* crashing on purpose\)"):
            await conn.call("crash", {})
        with pytest.raises(ServerFault, match="is gone"):
            await conn.call("echo", {"text": "again"})
        assert not forked or (fork.proc.poll() is None and fork.restarts == 0)  # (forked: the zygote served it)
    finally:
        await conn.aclose()
        if fork is not None:
            fork.close()


def open_file_bytes() -> int:
    """The size of the regular files this process has open (temporary files included)."""
    sizes = [
        os.stat(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")
    ]
    return sum(s.st_size for s in sizes if stat.S_ISREG(s.st_mode))


@pytest.mark.parametrize("forked", [False, True])
async def test_a_message_over_the_servers_cap_is_its_fault(forked):
    """The cap is the server's own (``max_message_mib``), spawned or forked; over it: ``line_too_long``."""
    cfg = ServerConfig(command=sys.executable, args=[str(RAW_SERVER)], max_message_mib=1)
    fork = Zygote("raw", cfg) if forked else None
    conn = Connection("raw", cfg, fork=fork)
    try:
        assert len((await conn.call("big", {"seconds": 1000_000})).text) == 1000_000
        with pytest.raises(ServerFault, match="during big .*a message from this server was over 1 MiB") as e:
            await conn.call("big", {"seconds": 2 << 20})
        assert e.value.code == "line_too_long"
    finally:
        await conn.aclose()
        if fork is not None:
            fork.close()


async def test_results_are_checked_against_the_harvested_output_schema_and_no_session_lists_tools(raw_server):
    """Structured content must fit the output schema harvest recorded; a trajectory's session never lists the tools
    itself (the SDK's ``call_tool`` would, in every session, and compile each schema again)."""
    rows = await discover({"raw": raw_server("--no-readonly")})
    async with ToolEnv(rows, config={"raw": raw_server("--no-readonly")}) as env:
        for _ in range(2):  # fresh instances, the second on a schema compiled before
            async with env.episode() as ep:
                assert (await ep.call("raw", "shaped", {"text": "good"})).text == "1"
                with pytest.raises(ServerFault, match="structured content returned by tool shaped: 'one' is not of"):
                    await ep.call("raw", "shaped", {"text": "bad"})
                with pytest.raises(ServerFault, match="tool shaped has an output schema but returned no structured"):
                    await ep.call("raw", "shaped", {"text": "none"})
                assert (await ep.call("raw", "echo", {"text": "hi"})).text == "hi"
                assert (await ep.call("raw", "lists", {})).text == "0"


async def test_a_check_against_an_output_schema_is_bounded_and_never_blocks_the_event_loop(raw_server):
    """The server's own schema, with a ``pattern`` that backtracks, and its result: checked in the client, the
    check would hold the event loop (and the GIL) for seconds; it is the server's fault past ``CHECK_S``."""
    rows = await discover({"raw": raw_server("--no-readonly")})
    gaps, stop = [], asyncio.Event()

    async def ticks():
        while not stop.is_set():
            t = time.monotonic()
            await asyncio.sleep(0.01)
            gaps.append(time.monotonic() - t)

    async with ToolEnv(rows, config={"raw": raw_server("--no-readonly")}) as env, env.episode() as ep:
        ticker = asyncio.create_task(ticks())
        with pytest.raises(
            ServerFault, match=f"result of tool shaped against its output schema took over {CHECK_S:g}s"
        ):
            await ep.call("raw", "shaped", {"text": "slow"})
        stop.set()
        await ticker
        assert (await ep.call("raw", "shaped", {"text": "good"})).text == "1"  # checked by a new process
    assert max(gaps) < 0.5


async def test_a_servers_own_timeout_replaces_the_callers(raw_server):
    """Cline's per-server ``timeout`` (seconds): shorter or longer than the stage's tool timeout, it wins."""
    short = Connection("short", raw_server().model_copy(update={"timeout": 0.3}))
    long = Connection("long", raw_server().model_copy(update={"timeout": 5}))
    try:
        with pytest.raises(ServerFault, match="hang timed out after 0.3s"):
            await short.call("hang", {}, timeout_s=30)
        assert not (await long.call("sleep", {"seconds": 0.5}, timeout_s=0.1)).is_error
    finally:
        await asyncio.gather(short.aclose(), long.aclose())


async def test_a_missing_variable_is_the_users_error_not_a_server_fault(raw_server, monkeypatch):
    monkeypatch.delenv("TRAJKIT_UNSET_VAR", raising=False)
    cfg = raw_server().model_copy(update={"env": {"TOKEN": "${TRAJKIT_UNSET_VAR}"}})
    conn = Connection("raw", cfg)
    try:
        with pytest.raises(UserError, match="TRAJKIT_UNSET_VAR is not set"):
            await conn.call("echo", {"text": "hi"})
    finally:
        await conn.aclose()


async def test_tools_list_follows_pages(raw_server):
    conn = Connection("raw", raw_server("--pages", "4"))
    try:
        tools = await conn.list_all()
    finally:
        await conn.aclose()
    assert [t.name for t in tools][:3] == ["echo", "sleep", "big"] and len(tools) == 13


@pytest.mark.parametrize(
    "flags, reason",
    [
        (["--exit-init"], "initialize failed: MCPError: Connection closed (stderr: refusing to initialize)"),
        (["--hang-init"], "initialize timed out after 1s"),
    ],
)
async def test_server_that_does_not_come_up_is_a_fault(raw_server, flags, reason):
    conn = Connection("raw", raw_server(*flags), startup_timeout_s=1)
    with pytest.raises(ServerFault) as e:
        await conn.open()
    await conn.aclose()
    assert str(e.value) == reason


async def rows_for(raw_server, **configs):
    rows = await discover(configs)
    assert all(r["status"] == "ok" for r in rows)
    return rows


async def test_read_only_servers_share_a_pool_and_stateful_ones_get_fresh_processes(raw_server):
    shared, own = raw_server(), raw_server("--no-readonly")
    rows = await rows_for(raw_server, shared=shared, own=own)
    async with ToolEnv(rows, config={"shared": shared, "own": own}, pool_size=1) as env:
        assert env.stateless == {"shared": True, "own": False}
        counts = []
        for _ in range(3):
            async with env.episode() as ep:
                counts.append(((await ep.call("shared", "count", {})).text, (await ep.call("own", "count", {})).text))
        assert counts == [("1", "1"), ("2", "1"), ("3", "1")]  # pooled state carries over; fresh state does not
    async with ToolEnv(rows, config={"shared": shared, "own": own}, stateless={"shared": False}) as env:
        for _ in range(2):
            async with env.episode(["shared"]) as ep:
                assert (await ep.call("shared", "count", {})).text == "1"


async def test_a_pooled_server_that_crashed_is_replaced(raw_server, monkeypatch):
    monkeypatch.setenv("TRAJKIT_UNCONTAINED", "1")  # host pids tell instances apart (contained, each is pid 2)
    cfg = raw_server()
    rows = await rows_for(raw_server, raw=cfg)
    async with ToolEnv(rows, config={"raw": cfg}, pool_size=1) as env:
        async with env.episode() as ep:
            first = (await ep.call("raw", "pid", {})).text
            with pytest.raises(ServerFault, match="exited during crash"):
                await ep.call("raw", "crash", {})
        async with env.episode() as ep:
            second = (await ep.call("raw", "pid", {})).text
    assert first != second


async def test_calls_in_flight_per_server_are_bounded(raw_server):
    cfg = raw_server("--no-readonly")
    rows = await rows_for(raw_server, raw=cfg)
    async with ToolEnv(rows, config={"raw": cfg}, max_concurrency_per_server=2) as env, env.episode() as ep:
        outs = await asyncio.gather(*(ep.call("raw", "sleep", {"seconds": 0.2}) for _ in range(6)))
    assert max(int(o.text) for o in outs) == 2


class CountingEnv(ToolEnv):
    peak = 0

    def _connection(self, name, cfg):
        conn = super()._connection(name, cfg)
        CountingEnv.peak = max(CountingEnv.peak, len(self.live))
        return conn


async def test_live_processes_are_bounded_without_deadlock(raw_server, monkeypatch):
    monkeypatch.setenv("TRAJKIT_UNCONTAINED", "1")  # host pids tell instances apart (contained, each is pid 2)
    a, b = raw_server("--no-readonly"), raw_server("--no-readonly")
    rows = await rows_for(raw_server, a=a, b=b)
    async with CountingEnv(rows, config={"a": a, "b": b}, max_processes=3) as env:

        async def one(i: int) -> set[str]:
            async with env.episode(["a", "b"] if i % 2 else ["a"]) as ep:
                return {(await ep.call(s, "pid", {})).text for s in ep.rows}

        pids = set().union(*await asyncio.gather(*(one(i) for i in range(8))))
        assert len(pids) == 12  # every trajectory had its own processes
        assert 1 <= CountingEnv.peak <= 3
        with pytest.raises(ServerFault, match="needs 2 server processes; max_processes is 1"):
            async with ToolEnv(rows, config={"a": a, "b": b}, max_processes=1).episode(["a", "b"]):
                pass


async def test_a_server_that_failed_at_harvest_fails_the_episode(raw_server):
    config = {"broken": raw_server("--exit-init"), "fine": raw_server()}
    rows = await discover(config)
    assert [r["status"] for r in rows] == ["failed", "ok"]
    async with ToolEnv(rows, config=config) as env:
        with pytest.raises(ServerFault, match="server 'broken' failed at harvest: initialize failed"):
            async with env.episode(["broken", "fine"]):
                pass
        async with env.episode() as ep:  # no server list: every server that harvested ok
            assert list(ep.rows) == ["fine"] and (await ep.call("fine", "echo", {"text": "ok"})).text == "ok"
        assert [r.server for r in env.routes()] == ["fine"] * 13


@pytest.mark.parametrize("ref", ["#/$defs/missing", "http://127.0.0.1:9/schema.json"])
def test_an_output_schema_whose_ref_does_not_resolve_is_the_servers_fault(ref):
    """A server's own output schema with a ``$ref`` to nothing (or outside it): a reason, which a call turns into a
    ServerFault, not the validator's own error escaping the call as a crash of the trajectory."""
    reason = problem("t", json.dumps({"type": "object", "$ref": ref}), {"n": 1})
    assert reason.startswith("output schema of tool t has a $ref that does not resolve")


async def test_a_hostile_server_costs_only_its_own_call_and_never_holds_the_loop(raw_server):
    """Endless and huge lines, JSON nested past any parser's limit, a line that trickles forever: each fails the
    call with a reason (the trajectory's), and a ticker on the client's loop shows a worst gap during the attack
    under 3x its worst gap in a control phase of ordinary calls, measured in this same test."""
    conn = Connection("raw", raw_server())
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticks():
        while not stop.is_set():
            t = time.monotonic()
            await asyncio.sleep(0.005)
            gaps.append(time.monotonic() - t)

    async def phase(calls) -> float:
        gaps.clear()
        stop.clear()
        ticker = asyncio.create_task(ticks())
        await asyncio.sleep(0.02)
        out = await asyncio.gather(*calls)  # side by side
        stop.set()
        await ticker
        return max(gaps), out

    servers = [Connection("raw", raw_server()) for _ in range(3)]
    try:
        await conn.call("echo", {"text": "warm"})
        control, _ = await phase([conn.call("big", {"seconds": 1 << 20}) for _ in range(4)])
        attack, faults = await phase(
            [
                _fault(servers[0].call("nested", {}, timeout_s=1)),  # past the parser's depth: not an answer
                _fault(servers[1].call("big", {"seconds": 30 << 20})),  # one valid JSON-RPC line of 30 MiB
                _fault(servers[2].call("trickle", {}, timeout_s=1)),  # a line that never ends
            ]
        )
        assert attack < 3 * max(control, 0.02), (attack, control)
        assert "timed out after 1s (server wrote non-JSON-RPC output" in faults[0], faults
        assert faults[1].startswith("line_too_long: ") and "message from this server was over 4 MiB" in faults[1]
        assert faults[2].startswith("timeout: ") and "timed out after 1s" in faults[2], faults
    finally:
        await asyncio.gather(*(c.aclose() for c in [conn, *servers]))


async def _fault(call) -> str:
    try:
        result = await call
    except ServerFault as e:
        return f"{e.code}: {e}"
    return result.text[:100]
