"""From a generator's candidate to a task: target tools checked, tool names and refusals caught, verifier built.

A candidate is a dict of fields from ``vs.parse_candidates``. ``to_task`` returns
the task's fields and, when the candidate is unusable, the reason to reject it
(the row is kept either way; the stage records the reason).
"""

from __future__ import annotations

import json
import re
from typing import Any

from trajkit.envs.tools import ToolRoute
from trajkit.verify.matching import default_answer_match
from trajkit.verify.specs import SpecError, parse_spec

# A generator model may not pick a lenient check for its own task: contains and regex are for tasks a person writes.
SYNTH_MATCHES = ("number", "exact")
_REFUSAL = re.compile(
    r"^\W*(i'?m sorry|i am sorry|sorry\b|i cannot|i can'?t|i can not|i am unable|i'?m unable|i won'?t|i will not"
    r"|as an ai\b|unfortunately,? i\b|i'?m not able|i am not able|i must decline)",
    re.IGNORECASE,
)

MODE_MISMATCH = "mode_mismatch"  # the reject reason of a multi_tool task of one tool, a multi_server one on one server


def read_only(route: ToolRoute) -> bool | None:
    """A tool's ``readOnlyHint`` annotation (None when the server does not say)."""
    try:
        value = json.loads(route.annotations).get("readOnlyHint") if route.annotations else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, bool) else None


class ToolIndex:
    """The tools offered for a request (``envs.tools.tool_routes``), found by the agent's name,
    the tool's MCP name, or ``server.tool``."""

    def __init__(self, routes: list[ToolRoute]):
        self.refs = routes
        self._by: dict[str, ToolRoute | None] = {}
        for r in routes:
            for key in (r.name, f"{r.server}.{r.tool}", f"{r.server}:{r.tool}", f"{r.server}/{r.tool}", r.tool):
                # a bare tool name shared by two servers is ambiguous: it resolves to nothing
                self._by[key] = r if self._by.get(key, r) == r else None

    def resolve(self, name: Any) -> ToolRoute | None:
        if not isinstance(name, str):
            return None
        key = name.strip().strip("`'\"").strip()
        return self._by.get(key) or self._by.get(key.removeprefix("functions."))


def utf8(text: str) -> str:
    """Text that can be stored: a lone surrogate (from a ``\\ud800`` escape) becomes "?"."""
    return text.encode("utf-8", "replace").decode("utf-8")


def is_refusal(text: str | None) -> bool:
    """Whether a text opens like a refusal ("I'm sorry, I can't ...")."""
    return bool(text) and bool(_REFUSAL.match(text))


def named_tool(question: str, index: ToolIndex) -> str | None:
    """The tool the question names, if any.

    An identifier-like name (``list_keys``, ``getWeather``, ``v2``) counts wherever
    it appears as a word; a plain word (``add``, ``get``) only when it is written
    as code (in quotes or backticks, or called ``add(``) or called a tool
    ("the add tool", "function get") - so "add 3 and 4" does not count.
    """
    for ref in index.refs:
        for name in dict.fromkeys((ref.name, ref.tool)):
            n = re.escape(name)
            identifier = re.search(r"[_\-.\d]|[a-z][A-Z]", name)
            if identifier and re.search(rf"(?<![\w]){n}(?![\w])", question):
                return name
            code = rf"[`'\"]{n}[`'\"]|(?<![\w]){n}\s*\(|(?<![\w]){n}\s+(tool|function|endpoint|command)\b"
            if re.search(code, question, re.IGNORECASE) or re.search(
                rf"\b(tool|function)\s+[`'\"]?{n}(?![\w])", question, re.IGNORECASE
            ):
                return name
    return None


def to_task(
    candidate: dict[str, Any], index: ToolIndex, mode: str | None = None
) -> tuple[dict[str, Any], str | None, str | None]:
    """(task fields, reject reason or None, detail) for one parsed candidate of a request in ``mode``.

    The fields are ``question``, ``target_tools`` and ``verifier``; rejected
    candidates keep what could be read. A ``multi_tool`` task targets two tools or more, a ``multi_server``
    one tools of two servers or more (``mode_mismatch`` otherwise).
    """
    question = candidate.get("question", candidate.get("text"))
    question = utf8(question).strip() if isinstance(question, str) else None
    raw_targets = candidate.get("target_tools", candidate.get("tools"))
    if isinstance(raw_targets, str):
        raw_targets = [t for t in re.split(r"[,\n]+", raw_targets) if t.strip()]
    targets = [t for t in raw_targets if t is not None] if isinstance(raw_targets, list) else []
    resolved = [index.resolve(t) for t in targets]
    fields: dict[str, Any] = {
        "question": question,
        "target_tools": [r.name if r else utf8(str(t)) for r, t in zip(resolved, targets)],
        "verifier": None,
    }
    if not question:
        return fields, "missing_question", "the candidate has no question text"
    if is_refusal(question):
        return fields, "refusal", question[:200]
    if not targets:
        return fields, "no_target_tools", None
    unknown = [utf8(str(t)) for r, t in zip(resolved, targets) if r is None]
    if unknown:
        return fields, "unknown_target_tool", ", ".join(unknown)[:200]
    if mode == "multi_tool" and len({r.name for r in resolved}) < 2:
        return fields, MODE_MISMATCH, "a multi_tool task targets two tools or more"
    if mode == "multi_server" and len({r.server for r in resolved}) < 2:
        return fields, MODE_MISMATCH, "a multi_server task targets tools of two servers or more"
    named = named_tool(question, index)
    if named:
        return fields, "question_names_tool", named
    verifier, problem = build_verifier(candidate, index)
    fields["verifier"] = verifier
    if problem:
        return fields, "bad_verifier", problem
    return fields, None, None


def build_verifier(candidate: dict[str, Any], index: ToolIndex) -> tuple[dict[str, str], str | None]:
    """A ``tool_outcome`` verifier from the candidate's answer and state probes, or kind ``none``.

    Returns (verifier, problem); a problem (a probe on an unknown or writing
    tool, a bad match mode) rejects the task rather than silently dropping the check.
    An answer without a match mode is matched as a ``number`` when it is one, else
    ``exact`` (``verify.matching``); a mode other than those two rejects the task.
    """
    answer = candidate.get("answer", candidate.get("expected_answer"))
    if isinstance(answer, bool):
        answer = str(answer).lower()
    elif isinstance(answer, (int, float)):
        answer = format(answer, "g") if isinstance(answer, float) else str(answer)
    elif isinstance(answer, (list, dict)):
        answer = json.dumps(answer, sort_keys=True)
    answer = answer.strip() if isinstance(answer, str) and answer.strip() and answer.strip().lower() != "null" else None
    match = candidate.get("answer_match")
    if match is None or match == "":
        match = default_answer_match(answer)
    if match not in SYNTH_MATCHES:
        return _none(), f"answer_match {str(match)[:40]!r} is not one of {', '.join(SYNTH_MATCHES)}"
    state, problem = _state_probes(candidate.get("state"), index)
    if problem:
        return _none(), problem
    if answer is None and not state:
        return _none(), None
    spec = {"answer": answer, "answer_match": match, "state": state}
    try:
        parse_spec("tool_outcome", spec)  # e.g. a check that any text passes
    except SpecError as e:
        return _none(), str(e)
    return {"kind": "tool_outcome", "spec": json.dumps(spec, sort_keys=True)}, None


def _state_probes(raw: Any, index: ToolIndex) -> tuple[list[dict[str, Any]], str | None]:
    if raw in (None, "", [], {}):
        return [], None
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return [], "state is not a list of probes"
    probes = []
    for p in raw:
        if not isinstance(p, dict):
            return [], "a state probe is not an object"
        ref = index.resolve(p.get("tool"))
        if ref is None:
            return [], f"state probe tool {str(p.get('tool'))[:60]!r} is not a tool of the task's servers"
        if read_only(ref) is False:
            return [], f"state probe tool {ref.name!r} changes state (not read-only)"
        args = p.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                return [], f"state probe arguments for {ref.name!r} are not JSON"
        if not isinstance(args, dict):
            return [], f"state probe arguments for {ref.name!r} are not an object"
        expected = p.get("expected")
        if expected is None:
            return [], f"state probe {ref.name!r} has no expected value"
        if not isinstance(expected, str):
            expected = json.dumps(expected, sort_keys=True) if isinstance(expected, (list, dict)) else str(expected)
        match = p.get("match") or "exact"
        if match not in SYNTH_MATCHES:
            return [], f"state probe match {str(match)[:40]!r} is not one of {', '.join(SYNTH_MATCHES)}"
        probes.append({"server": ref.server, "tool": ref.tool, "arguments": args, "expected": expected, "match": match})
    return probes, None


def _none() -> dict[str, str]:
    return {"kind": "none", "spec": "{}"}
