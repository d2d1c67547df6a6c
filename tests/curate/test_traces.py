"""`curate traces`: recorded calls and trace files grouped into trajectories, written as first-class rows that the
judge, the filter, export, SFT, the card and SQL read unchanged; verdicts from a task file; one-line errors for
what does not map."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.curate.helpers import run, write_jsonl
from tests.synth.brain import Brain
from tests.test_cli import trajkit
from tests.test_user_errors import user_error
from trajkit.config import build
from trajkit.curate.threads import Call, group, trajectory_row
from trajkit.errors import UserError
from trajkit.models.record import SESSION_HEADER, RecordingProxy
from trajkit.models.scripted_server import ScriptedServer
from trajkit.runner import run_stage
from trajkit.stages import get_stage
from trajkit.store import Store
from trajkit.train.data import sft_rows

ADD = {"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {"type": "object"}}}


def call(cid, messages, answer, session=None, status="ok", finish=None, usage=None, **extra):
    """A recorded call asking ``messages`` and answered with ``answer`` (an assistant message)."""
    response = None
    if answer is not None:
        finish = finish or ("tool_calls" if answer.get("tool_calls") else "stop")
        choice = {"index": 0, "message": {"role": "assistant", **answer}, "finish_reason": finish}
        response = {
            "model": "served-m",
            "choices": [choice],
            "usage": usage or {"prompt_tokens": 5, "completion_tokens": 2},
        }
    request = {"model": "m", "messages": messages, "tools": [ADD]}
    return Call(cid, request, response, status=status, session=session, **extra)


def tool_call(cid, a=2, b=3, compact=False):
    args = json.dumps({"a": a, "b": b}, separators=(",", ":") if compact else None)
    return {"id": cid, "type": "function", "function": {"name": "add", "arguments": args}}


USER = {"role": "user", "content": "What is 2 plus 3?"}
SYSTEM = {"role": "system", "content": "Use the tools."}
ASKS = {"content": None, "reasoning_content": "I should add.", "tool_calls": [tool_call("call_1")]}


def echoed(answer):
    """The assistant message as an agent sends it back: reasoning dropped, arguments re-serialized."""
    calls = [tool_call(c["id"], compact=True) for c in answer["tool_calls"]]
    return {"role": "assistant", "tool_calls": calls}


def test_a_call_continues_the_conversation_whose_exact_answer_it_sends_back():
    first = call("c1", [SYSTEM, USER], ASKS)
    result = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    second = call("c2", [SYSTEM, USER, echoed(ASKS), result], {"content": "It is 5."})
    forged = {**echoed(ASKS), "tool_calls": [tool_call("call_other")]}  # an answer the proxy never returned
    other = call("c3", [SYSTEM, USER, forged, {**result, "tool_call_id": "call_other"}], {"content": "5."})
    threads, ambiguous = group([first, second, other])
    assert [[c.id for c in t.calls] for t in threads] == [["c1", "c2"], ["c3"]] and ambiguous == 0
    row = trajectory_row(threads[0], "t", "recorded", "openai")
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert row["messages"][2]["reasoning_content"] == "I should add."  # the answer as returned, not as echoed
    assert row["messages"][3]["content"] == "5" and row["messages"][3]["tool_call_id"] == "call_1"
    assert (row["status"], row["final_answer"], row["num_turns"], row["tools_called"]) == (
        "completed",
        "It is 5.",
        2,
        ["add"],
    )
    assert row["model"] == "served-m" and row["prompt_tokens"] == 10 and row["tools"][0]["name"] == "add"


def test_two_trajectories_a_call_continues_alike_make_it_start_its_own_and_are_counted():
    """Two runs of one task with a deterministic model: every follow-up matches both; a session header tells."""
    result = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    calls = [
        call("a1", [USER], ASKS),
        call("b1", [USER], ASKS),
        call("a2", [USER, echoed(ASKS), result], {"content": "5"}),
        call("b2", [USER, echoed(ASKS), result], {"content": "5"}),
    ]
    threads, ambiguous = group(calls)
    assert (len(threads), ambiguous) == (4, 2)
    for c, session in zip(calls, ["a", "b", "a", "b"]):
        c.session = session
    threads, ambiguous = group(calls)
    assert [[c.id for c in t.calls] for t in threads] == [["a1", "a2"], ["b1", "b2"]] and ambiguous == 0


def test_a_retry_after_a_failed_call_continues_the_trajectory_and_the_last_call_sets_the_status():
    result = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    follow = [USER, echoed(ASKS), result]
    calls = [
        call("c1", [USER], ASKS),
        call("c2", follow, None, status="failed", error="HTTP 500: overloaded"),
        call("c3", follow, {"content": "5"}),
    ]
    [thread], _ = group(calls)
    assert [c.id for c in thread.calls] == ["c1", "c2", "c3"]
    assert trajectory_row(thread, "t", "recorded", "openai")["status"] == "completed"
    outcomes = {
        "failed": ([calls[0], calls[1]], ("failed", "model_error")),
        "unfinished": ([calls[0], call("c4", follow, None, status="unfinished")], ("aborted", "interrupted")),
        "no results": ([calls[0]], ("truncated", "turn_limit")),
        "length": ([call("c5", [USER], {"content": "5 is"}, finish="length")], ("truncated", "max_tokens")),
    }
    for what, (chain, expected) in outcomes.items():
        [thread], _ = group(chain)
        row = trajectory_row(thread, "t", "recorded", "openai")
        assert (row["status"], row["reason_code"]) == expected, what


def test_token_ids_of_every_call_make_the_trajectory_token_trace():
    from trajkit.models.base import Completion

    result = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    first = call("c1", [USER], ASKS)
    first.completions = [Completion("", prompt_token_ids=[1, 2, 3], token_ids=[11, 12], logprobs=[-0.5, -0.5])]
    second = call("c2", [USER, echoed(ASKS), result], {"content": "5"})
    second.completions = [Completion("5", prompt_token_ids=[1, 2, 3, 11, 12, 20, 21], token_ids=[30], logprobs=[-1.0])]
    [thread], _ = group([first, second])
    row = trajectory_row(thread, "t", "recorded", "openai")
    assert row["token_ids"] == [1, 2, 3, 11, 12, 20, 21, 30]
    assert row["loss_mask"] == [0, 0, 0, 1, 1, 0, 0, 1]
    assert row["logprobs"] == [0.0, 0.0, 0.0, -0.5, -0.5, 0.0, 0.0, -1.0]
    second.completions = [Completion("5")]  # a call without ids: no token trace at all
    [thread], _ = group([first, second])
    assert trajectory_row(thread, "t", "recorded", "openai")["token_ids"] is None


# ---------------------------------------------------------------- a recorded run through the stages
def calculator_agent(base_url: str, question: str, session: str | None = None) -> str:
    """A small agent loop of its own (not trajkit's): ask, run the add tool, ask again."""
    import openai

    client = openai.OpenAI(
        base_url=base_url, api_key="k", default_headers={SESSION_HEADER: session} if session else None
    )
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": question}]
    while True:
        m = client.chat.completions.create(model="scripted", messages=messages, tools=tools).choices[0].message
        messages.append(m.model_dump(exclude_none=True))
        if not m.tool_calls:
            return m.content
        for c in m.tool_calls:
            args = json.loads(c.function.arguments)
            messages.append({"role": "tool", "tool_call_id": c.id, "content": str(args["a"] + args["b"])})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run holding the recording of two questions asked through the proxy, the upstream still serving (it also
    plays the judge)."""
    run_dir = tmp_path_factory.mktemp("recorded") / "run"
    with ScriptedServer(Brain(garbage=0)) as up:
        with RecordingProxy(up.base_url, run_dir) as proxy:
            answers = [calculator_agent(proxy.base_url, q) for q in ("What is 2 plus 3?", "What is 40 plus 2?")]
        assert answers == ["The result is 5.", "The result is 42."]
        yield run_dir, up


def checks_says(completion: str, spec: dict, context: dict) -> bool:
    """A custom verifier: the answer holds the expected word."""
    return spec["word"] in completion


def test_recorded_trajectories_go_through_judge_filter_export_and_sql(recorded, tmp_path):
    run_dir, up = recorded
    store = Store(run_dir)
    run(store, "curate.traces")
    rows = sorted(store.rows("trajectories"), key=lambda r: r["final_answer"])
    assert [r["final_answer"] for r in rows] == ["The result is 42.", "The result is 5."]
    assert {r["source"] for r in rows} == {"recorded"} and all(r["status"] == "completed" for r in rows)
    assert [m["role"] for m in rows[1]["messages"]] == ["user", "assistant", "tool", "assistant"]
    tasks = {t["task_id"]: t for t in store.rows("tasks")}
    assert {tasks[r["task_id"]]["question"] for r in rows} == {"What is 2 plus 3?", "What is 40 plus 2?"}
    assert {(t["mode"], t["source"]) for t in tasks.values()} == {("trace", "recorded")}
    judge = {"model": "scripted", "backend": "openai", "base_url": up.base_url, "max_retries": 0}
    run(store, "synth.judge", model=judge)
    assert {r["traj_id"] for r in store.rows("trajectory_quality")} == {r["traj_id"] for r in rows}
    manifest = run(store, "synth.filter", min_completeness=None, min_task_quality=None)
    assert manifest["summary"]["of"] == 2
    out = tmp_path / "accepted.jsonl"
    trajkit("export", str(out), "--run", str(run_dir))
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    sql = store.sql("SELECT count(*) AS n, min(source) AS s FROM trajectories WHERE reject_reason IS NULL").to_pylist()
    assert sql == [{"n": len(exported), "s": "recorded"}] and len(exported) == 2
    assert exported[0]["messages"][1]["tool_calls"][0]["function"]["name"] == "add"
    # SFT examples and the card read them as any rows: both accepted trajectories, the card's task table says how
    assert sorted(r["traj_id"] for r in sft_rows(store)) == sorted(r["traj_id"] for r in rows)
    trajkit("card", "--run", str(run_dir), "--examples", "0")
    assert "| `trace` | `recorded` | 2 |" in (run_dir / "card" / "README.md").read_text()


def test_a_task_file_attaches_verifiers_and_recorded_attempts_get_verdicts(recorded, tmp_path):
    run_dir, _ = recorded
    tasks = write_jsonl(
        tmp_path / "tasks.jsonl",
        [
            {
                "question": "What is 2 plus 3?",
                "verifier": {"kind": "custom", "spec": {"path": f"{__name__}:checks_says", "word": "5"}},
            },
            {
                "question": "What is 40 plus 2?",
                "verifier": {"kind": "custom", "spec": {"path": f"{__name__}:checks_says", "word": "41"}},
            },
            {"question": "never asked", "verifier": {"kind": "custom", "spec": {"path": f"{__name__}:checks_says"}}},
        ],
    )
    other = Store(tmp_path / "copy", create=True)  # a copy of the recording: the shared run stays as it is
    shutil.copytree(run_dir / "_record", other.root / "_record")
    run(other, "curate.traces")  # rows first, the task file afterwards
    before = {r["final_answer"]: (r["traj_id"], r["verdict"]) for r in other.rows("trajectories")}
    spec = get_stage("curate.traces")
    manifest = run_stage(other, spec, build(spec.config, {"tasks": str(tasks)}), fresh=True, quiet=True)
    after = {r["final_answer"]: (r["traj_id"], r["verdict"]) for r in other.rows("trajectories")}
    assert {a: v for a, (_, v) in before.items()} == {"The result is 5.": None, "The result is 42.": None}
    assert after == {
        "The result is 5.": (before["The result is 5."][0], "pass"),
        "The result is 42.": (before["The result is 42."][0], "fail"),
    }
    assert all(t["verifier"]["kind"] == "custom" for t in other.rows("tasks"))
    assert manifest["counts"]["skipped.unknown_task"] == 1


def test_a_recording_that_grew_makes_its_traces_stage_stale(recorded, tmp_path):
    """The stage versions the call log it read: once the proxy records more, a rerun is refused in one line as
    stale (never "complete"), and --redo-stale reads the grown recording."""
    run_dir, up = recorded
    other = Store(tmp_path / "copy", create=True)
    shutil.copytree(run_dir / "_record", other.root / "_record")
    run(other, "curate.traces")
    with RecordingProxy(up.base_url, other.root) as proxy:
        calculator_agent(proxy.base_url, "What is 1 plus 1?")
    spec = get_stage("curate.traces")
    with pytest.raises(UserError, match="stage 'traces' is stale: its input file .* changed"):
        run_stage(other, spec, build(spec.config, {}), quiet=True)
    run_stage(other, spec, build(spec.config, {}), quiet=True, redo_stale=True)
    assert len(other.rows("trajectories")) == 3


def test_secrets_in_what_the_agent_sent_are_redacted_in_rows_and_the_cache(run_dir, monkeypatch):
    """The log keeps what the agent sent; rows and cache entries are redacted when the stage writes them."""
    from trajkit.models.calllog import CallLog

    secret = "Zq9vT4kLm2Xw8RbN"
    monkeypatch.setenv("SHOP_API_TOKEN", secret)
    log = CallLog(run_dir, fsync="never")
    body = {"model": "m", "messages": [{"role": "user", "content": f"my token is {secret}, store it"}]}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": f"Stored {secret}."}}]}
    log.start("c1", json.dumps(body).encode())
    log.end("c1", json.dumps(answer).encode(), status=200)
    log.close()
    run(Store(run_dir, create=True), "curate.traces")
    [row] = Store(run_dir).rows("trajectories")
    assert row["final_answer"] == "Stored [REDACTED]." and "[REDACTED]" in row["messages"][0]["content"]
    written = [p for p in run_dir.rglob("*") if p.is_file() and "_record" not in p.parts]
    assert any(p.name == "calls.sqlite" for p in written)
    assert not any(secret.encode() in p.read_bytes() for p in written)


# ---------------------------------------------------------------- trace files
CONVERSATION = [
    SYSTEM,
    USER,
    {"role": "assistant", "content": None, "tool_calls": [tool_call("call_1")]},
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    {"role": "assistant", "content": "It is 5."},
]


def roles_and_text(row):
    return [
        (m["role"], m["content"], [(c["name"], json.loads(c["arguments"])) for c in m["tool_calls"] or []])
        for m in row["messages"]
    ]


def test_openai_chat_jsonl_imports_as_trajectories_and_tasks(tmp_path):
    path = write_jsonl(tmp_path / "chats.jsonl", [{"messages": CONVERSATION, "tools": [ADD]}, {"messages": [USER]}])
    store = Store(tmp_path / "run", create=True)
    run(store, "curate.traces", path=str(path))
    rows = sorted(store.rows("trajectories"), key=lambda r: r["num_turns"])
    assert [(r["status"], r["source"]) for r in rows] == [("truncated", "imported"), ("completed", "imported")]
    assert roles_and_text(rows[1]) == roles_and_text({"messages": [_stored(m) for m in CONVERSATION]})
    assert len(store.rows("tasks")) == 1  # one question, one task


def _stored(m):
    from trajkit.models.chat import stored_message

    return stored_message(m)


def test_sharegpt_as_export_writes_it_imports_back_to_the_same_conversation(tmp_path):
    source = write_jsonl(tmp_path / "chats.jsonl", [{"messages": CONVERSATION, "tools": [ADD]}])
    first = Store(tmp_path / "a", create=True)
    run(first, "curate.traces", path=str(source))
    shared = tmp_path / "sharegpt.jsonl"
    trajkit("export", str(shared), "--run", str(first.root), "--format", "sharegpt", "--all")
    second = Store(tmp_path / "b", create=True)
    run(second, "curate.traces", path=str(shared))
    [a], [b] = first.rows("trajectories"), second.rows("trajectories")
    assert roles_and_text(a) == roles_and_text(b) and b["tools"][0]["name"] == "add"


def otlp(spans):
    def value(v):
        return {"stringValue": v} if isinstance(v, str) else {"intValue": str(v)}

    return {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "t1",
                                "spanId": f"s{i}",
                                "name": name,
                                "startTimeUnixNano": str(1_000_000_000 * (i + 1)),
                                "endTimeUnixNano": str(1_000_000_000 * (i + 1) + 500_000_000),
                                "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
                            }
                            for i, (name, attrs) in enumerate(spans)
                        ]
                    }
                ]
            }
        ]
    }


def genai_spans():
    """Two chat spans of one agent run and the tool span between them, as OpenTelemetry GenAI records them."""
    system = json.dumps([{"type": "text", "content": "Use the tools."}])
    ask = [{"role": "user", "parts": [{"type": "text", "content": "What is 2 plus 3?"}]}]
    calls = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}],
    }
    result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "5"}]}
    done = {"role": "assistant", "parts": [{"type": "text", "content": "It is 5."}], "finish_reason": "stop"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.system_instructions": system}
    return [
        (
            "chat m",
            {
                **chat,
                "gen_ai.input.messages": json.dumps(ask),
                "gen_ai.output.messages": json.dumps([{**calls, "finish_reason": "tool_call"}]),
                "gen_ai.usage.input_tokens": 7,
            },
        ),
        ("execute_tool add", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add"}),
        (
            "chat m",
            {
                **chat,
                "gen_ai.input.messages": json.dumps([*ask, calls, result]),
                "gen_ai.output.messages": json.dumps([done]),
            },
        ),
    ]


def openinference_spans():
    """The same run as Phoenix exports it: OpenInference attributes, flattened, in span objects."""

    def message(prefix, i, role, content=None, call=None, answers=None):
        base = f"{prefix}.{i}.message."
        out = {base + "role": role}
        if content is not None:
            out[base + "content"] = content
        if call:
            out |= {
                base + "tool_calls.0.tool_call.id": "call_1",
                base + "tool_calls.0.tool_call.function.name": "add",
                base + "tool_calls.0.tool_call.function.arguments": '{"a": 2, "b": 3}',
            }
        if answers:
            out[base + "tool_call_id"] = answers
        return out

    tool = {"llm.tools.0.tool.json_schema": json.dumps(ADD)}
    first = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "m",
        **tool,
        **message("llm.input_messages", 0, "system", "Use the tools."),
        **message("llm.input_messages", 1, "user", "What is 2 plus 3?"),
        **message("llm.output_messages", 0, "assistant", call=True),
    }
    second = {
        **{k: v for k, v in first.items() if not k.startswith("llm.output")},
        **message("llm.input_messages", 2, "assistant", call=True),
        **message("llm.input_messages", 3, "tool", "5", answers="call_1"),
        **message("llm.output_messages", 0, "assistant", "It is 5."),
    }
    span = {"context": {"trace_id": "t1"}, "status_code": "OK"}
    return [
        {
            **span,
            "context": {"trace_id": "t1", "span_id": "a"},
            "start_time": "2025-01-01T00:00:01+00:00",
            "attributes": first,
        },
        {
            **span,
            "context": {"trace_id": "t1", "span_id": "b"},
            "start_time": "2025-01-01T00:00:02+00:00",
            "attributes": {"openinference.span.kind": "TOOL"},
        },
        {
            **span,
            "context": {"trace_id": "t1", "span_id": "c"},
            "start_time": "2025-01-01T00:00:03+00:00",
            "attributes": second,
        },
    ]


def langfuse_observations():
    first = {
        "type": "GENERATION",
        "traceId": "t1",
        "id": "g1",
        "startTime": "2025-01-01T00:00:01Z",
        "model": "m",
        "input": CONVERSATION[:2],
        "output": CONVERSATION[2],
        "usage": {"input": 7, "output": 3},
    }
    second = {
        **first,
        "id": "g2",
        "startTime": "2025-01-01T00:00:03Z",
        "input": CONVERSATION[:4],
        "output": CONVERSATION[4],
    }
    return [first, {"type": "SPAN", "traceId": "t1", "id": "s1"}, second]


@pytest.mark.parametrize(
    "make",
    [lambda: otlp(genai_spans()), openinference_spans, langfuse_observations],
    ids=["otlp-genai", "phoenix", "langfuse"],
)
def test_opentelemetry_spans_import_as_one_trajectory_per_agent_run(tmp_path, make):
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(make()))
    store = Store(tmp_path / "run", create=True)
    run(store, "curate.traces", path=str(path))
    [row] = store.rows("trajectories")
    assert roles_and_text(row) == roles_and_text({"messages": [_stored(m) for m in CONVERSATION]})
    assert (row["status"], row["num_turns"], row["source"]) == ("completed", 2, "imported")


@pytest.mark.parametrize(
    "record, message",
    [
        ({"messages": [USER, {"role": "function", "name": "add", "content": "5"}]}, "role 'function' is not one of"),
        (
            {"messages": [USER, {"role": "tool", "tool_call_id": "x", "content": "5"}]},
            "a tool result with no tool call before it",
        ),
        (
            {"conversations": [{"from": "human", "value": "hi"}, {"from": "observation", "value": "5"}]},
            "an observation with no function_call",
        ),
        (
            otlp([("chat m", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})]),
            "captured no message content",
        ),
        ({"something": "else"}, "is not a trace this import reads"),
    ],
    ids=["legacy-function-role", "orphan-tool-result", "orphan-observation", "spans-without-content", "unknown"],
)
def test_what_does_not_map_is_one_line_and_exit_2(tmp_path, record, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert message in user_error("curate", "traces", "--run", str(tmp_path / "run"), "--path", str(path))
    assert not (tmp_path / "run").exists()


def test_a_recorded_request_that_is_no_conversation_is_counted_not_a_row(run_dir):
    """An agent's malformed request (the upstream refused it too) is skipped and counted; the others are rows."""
    from trajkit.models.calllog import CallLog

    log = CallLog(run_dir, fsync="never")
    bad = {"model": "m", "messages": [{"role": "assistant", "tool_calls": ["not a call"]}]}
    good = {"model": "m", "messages": [USER]}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "5"}, "finish_reason": "stop"}]}
    for i, body in enumerate((bad, good)):
        log.start(f"c{i}", json.dumps(body).encode())
        log.end(f"c{i}", json.dumps(answer).encode(), status=200)
    log.close()
    manifest = run(Store(run_dir, create=True), "curate.traces")
    assert manifest["counts"]["skipped.unreadable_request"] == 1
    [row] = Store(run_dir).rows("trajectories")
    assert row["final_answer"] == "5"


def test_a_run_without_a_recording_is_a_user_error(run_dir):
    from trajkit.errors import UserError

    with pytest.raises(UserError, match="no recording"):
        run(Store(run_dir, create=True), "curate.traces")
