"""A scripted model for the synth tests: generator, judge, agent and user simulator in one function.

It answers the real prompts of the stages (it recognizes them by their text)
with output in the real formats: VS candidate lists in JSON (in code fences,
with trailing commas and percent strings), Toucan-style XML ratings, OpenAI
tool calls, ``<follow_up>`` messages. A deterministic share of its answers is
garbage (unparseable text, refusals, a question naming its tool, an unknown
target tool, an unreadable judgment, an answer without tool calls, a misread
tool result); a multi-tool request none of whose tools it can phrase gets a
one-tool sum (``mode_mismatch``), whatever ``garbage`` is. Every choice is a function of the request's content, so a
resumed run gets the same answers as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections import Counter
from typing import Any

OPS = {  # calculator tool -> (phrase, function)
    "add": ("plus", lambda a, b: a + b),
    "subtract": ("minus", lambda a, b: a - b),
    "multiply": ("times", lambda a, b: a * b),
}
KV_TOOLS = ("set", "get", "delete", "list_keys", "dump")
_OP_RE = re.compile(r"(-?\d+) (plus|minus|times) (-?\d+)")
_KV_RE = re.compile(r"remember that the (\w+) is (\w+)", re.IGNORECASE)


class Brain:
    """``Brain(garbage=0.25)`` is a ScriptedServer script; ``garbage`` is the share of bad answers."""

    def __init__(self, garbage: float = 0.25):
        self.garbage = garbage
        self._lock = threading.Lock()
        self._calls: Counter = Counter()
        self._allow: int | None = None
        self._gate = threading.Event()
        self._gate.set()

    def hold_after(self, allow: int) -> None:
        """Answer ``allow`` more requests, then hold every later one until ``release``."""
        with self._lock:
            self._allow = allow
            self._gate.clear()

    def release(self) -> None:
        with self._lock:
            self._allow = None
            self._gate.set()

    def __call__(self, messages: list[dict], tools: list[dict] | None, body: dict) -> dict | str:
        key = hashlib.sha256(json.dumps([messages, body.get("seed")], sort_keys=True).encode()).hexdigest()
        with self._lock:  # the i-th of the n choices of one request
            i = self._calls[key] % max(1, int(body.get("n") or 1))
            self._calls[key] += 1
            wait = self._allow is not None and self._allow <= 0
            if self._allow is not None:
                self._allow -= 1
        if wait:
            self._gate.wait(timeout=60)
        rng = random.Random(f"{key}:{i}")
        first = messages[0]["content"] or ""
        if tools:
            reply = self.agent(messages, rng)
            for j, call in enumerate(reply.get("tool_calls", []) if isinstance(reply, dict) else []):
                call["id"] = f"call_{key[:8]}_{j}"  # ids from content, as the rest of the answer
            return reply
        if "## What a task looks like" in first:
            return self.generator(messages, rng)
        if "tool_selection_difficulty" in first:
            return self.judgment(TASK_DIMS, rng, first)
        if "**completeness**" in first:
            return self.judgment(TRAJ_DIMS, rng, first)
        if "simulating the **user**" in first:
            return self.user(rng, first)
        return "I do not recognize this prompt."

    # ------------------------------------------------------------ generator
    def generator(self, messages: list[dict], rng: random.Random) -> str:
        last = messages[-1]["content"]
        targets = [t.strip() for t in re.search(r"\*\*[^`]*`([^`]+)`", messages[0]["content"])[1].split(",")]
        want = re.search(r"Generate (\d+) (?:different|alternative) tasks", last)
        if rng.random() < self.garbage:
            return rng.choice(
                [
                    "lorem ipsum, no tasks here",
                    "I'm sorry, but I can't help with creating that.",
                    (
                        f'```json\n{{"responses": [{{"question": "Please run the `{targets[0]}` tool now.", "target_tools": ["{targets[0]}"], '
                        '"probability": 0.2}]}\n```'
                    ),
                    '{"responses": [{"question": "Teleport me home.", "target_tools": ["teleport"], "probability": 0.1}]}',
                ]
            )
        if not want:
            return json.dumps(self.task(targets, rng))
        items = []
        for _ in range(int(want[1])):
            task = self.task(targets, rng)
            task["probability"] = rng.choice([round(rng.uniform(0.01, 0.3), 3), f"{rng.randint(1, 30)}%"])
            items.append(task)
        text = json.dumps({"responses": items}, indent=1)
        text = re.sub(r"(\})(\s*\])", r"\1,\2", text)  # a trailing comma, as models write
        return "<reasoning>Think about varied users.</reasoning>\n```json\n" + text + "\n```"

    def task(self, targets: list[str], rng: random.Random) -> dict[str, Any]:
        parts, answers, calls = [], [], []
        for t in targets:
            if t in OPS:
                a, b = rng.randint(2, 99), rng.randint(2, 99)
                parts.append(f"{a} {OPS[t][0]} {b}")
                answers.append(OPS[t][1](a, b))
                calls.append(t)
            elif t in KV_TOOLS:  # any key-value tool: a task that stores something
                key, value = rng.choice(["color", "city", "pet"]), rng.choice(["blue", "paris", "otter", "green"])
                return {
                    "question": f"Remember that the {key} is {value}.",
                    "target_tools": ["set"],
                    "answer": None,
                    "state": [{"tool": "get", "arguments": {"key": key}, "expected": value}],
                }
        if not parts:  # no tool this brain can phrase: a sum instead (of one tool: a multi_tool request rejects it)
            a, b = rng.randint(2, 99), rng.randint(2, 99)
            parts, answers, calls = [f"{a} plus {b}"], [a + b], ["add"]
        elif len(targets) > 1 and len(calls) == 1:  # a multi-tool request: a second operation it can phrase
            op = rng.choice([t for t in OPS if t not in calls])
            a, b = rng.randint(2, 99), rng.randint(2, 99)
            parts, answers, calls = [*parts, f"{a} {OPS[op][0]} {b}"], [*answers, OPS[op][1](a, b)], [*calls, op]
        question = "What is " + ", and what is ".join(parts) + "?"
        answer = str(answers[0]) if len(answers) == 1 else None
        return {"question": question, "target_tools": calls, "answer": answer, "answer_match": "number", "state": []}

    # ------------------------------------------------------------ judge
    def judgment(self, dims: dict[str, tuple[str, ...]], rng: random.Random, prompt: str) -> str:
        if rng.random() < self.garbage:
            return "Looks fine to me overall!"
        blocks = [
            f"<{d}><reasoning>ok</reasoning><rating>{rng.choice(labels)}</rating></{d}>" for d, labels in dims.items()
        ]
        nonce = re.findall(r'<response nonce="([0-9a-f]+)">', prompt)[-1]  # what the output format asks for
        return f'<response nonce="{nonce}">\n' + "\n".join(blocks) + "\n</response>"

    # ------------------------------------------------------------ agent
    def agent(self, messages: list[dict], rng: random.Random) -> dict | str:
        last = messages[-1]
        if last["role"] == "tool":
            results = []
            for m in reversed(messages):
                if m["role"] != "tool":
                    break
                results.append(m["content"])
            if len(results) == 1 and results[0].lstrip("-").isdigit() and rng.random() < self.garbage / 2:
                return f"The result is {int(results[0]) + 1}."  # a misread tool result: the verifier's to catch
            return f"The result is {', '.join(reversed(results))}."
        question = last["content"] or ""
        if rng.random() < self.garbage / 2:
            return "I believe the answer is 42."  # no tool call
        kv = _KV_RE.search(question)
        if kv:
            return {"content": None, "tool_calls": [{"name": "set", "arguments": {"key": kv[1], "value": kv[2]}}]}
        names = {v[0]: k for k, v in OPS.items()}
        calls = [{"name": names[op], "arguments": {"a": int(a), "b": int(b)}} for a, op, b in _OP_RE.findall(question)]
        return {"content": None, "tool_calls": calls} if calls else "I cannot tell what to compute."

    # ------------------------------------------------------------ user simulator
    def user(self, rng: random.Random, prompt: str) -> str:
        nonce = re.findall(r'<follow_up nonce="([0-9a-f]+)">', prompt)[-1]  # what the output format asks for
        again = "Thanks! Now what is" in prompt  # a second follow-up: ends half of the time, so some extensions end
        if rng.random() < self.garbage or (again and rng.random() < 0.5):
            return f'<follow_up nonce="{nonce}"><END_CONVERSATION></follow_up>'
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        return f'<follow_up nonce="{nonce}">Thanks! Now what is {a} times {b}?</follow_up>'


TASK_DIMS = {
    "tool_selection_difficulty": ("very easy", "easy", "medium", "hard", "very hard"),
    "tool_selection_uniqueness": ("not unique", "quite unique", "highly unique"),
    "question_quality": ("poor", "average", "good", "excellent"),
    "scenario_realism": ("realistic", "highly realistic", "somewhat unrealistic"),
    "verifiability": ("easy to verify", "mostly verifiable"),
    "stability": ("highly stable", "mostly stable"),
}
TRAJ_DIMS = {
    "completeness": ("fully complete", "mostly complete", "incomplete"),
    "conciseness": ("concise", "very concise", "redundant"),
}
