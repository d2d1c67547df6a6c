"""Verbalized sampling (Zhang et al. 2025): k candidates with verbalized probabilities in one call.

Methods: ``direct`` (one candidate per completion, the baseline), ``vs_standard``
(k candidates, each with a probability, in one JSON list), ``vs_cot`` (reason
first, then the list), ``vs_multi`` (turns of m candidates until k). An optional
tail threshold asks for candidates whose probabilities are each below p.

``parse_candidates`` reads what models actually write: JSON in or out of code
fences, with trailing commas or cut off, ``<response>`` tags, percent strings
for probabilities, reasoning before the answer. It never raises; output it
cannot read comes back with no candidates and a reason.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajkit.prompts import load_prompt, render

FORMAT_FILES = {
    "direct": "format_direct.md",
    "vs_standard": "format_vs_standard.md",
    "vs_cot": "format_vs_cot.md",
    "vs_multi": "format_vs_standard.md",  # the first turn of VS-Multi is a VS-Standard request for m
}
CONTINUE_FILE = "vs_multi_continue.md"
FULL = "Please sample at random from the full distribution."
TAIL = "Please sample at random from the tails of the distribution, such that the probability of each task is less than {P}."

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[^\n`]*\n?(.*?)(?:```|$)", re.DOTALL)
_RESPONSE = re.compile(r"<response\b[^>]*>(.*?)(?:</response>|(?=<response\b)|$)", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<([A-Za-z_][\w-]*)(?:\s[^>]*)?>(.*?)</\1\s*>", re.DOTALL)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_LIST_KEYS = ("responses", "tasks", "candidates", "items", "results", "samples")
_PROB_KEYS = ("probability", "prob", "p", "likelihood")


@dataclass
class Parsed:
    """Candidates read from one model output (dicts of fields, ``probability`` normalized to [0, 1]
    or None), or none and the reason why."""

    candidates: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None


def tail_sentence(tail: float | None) -> str:
    """The VS paper's sampling instruction: the full distribution, or its tails below ``tail``."""
    return FULL if tail is None else render(TAIL, P=f"{tail:g}")


def format_instructions(method: str, k: int, tail: float | None, prompts_dir: str | Path | None = None) -> str:
    """The output-format part of a generation prompt for ``method`` asking for ``k`` candidates."""
    required = () if method == "direct" else ("K",)
    text = load_prompt(FORMAT_FILES[method], prompts_dir, required)
    return render(text, K=k, TAIL=tail_sentence(tail)).strip()


def continue_instructions(k: int, tail: float | None, prompts_dir: str | Path | None = None) -> str:
    """The follow-up turn of VS-Multi: ``k`` more candidates, different from the previous ones."""
    return render(load_prompt(CONTINUE_FILE, prompts_dir, ("K",)), K=k, TAIL=tail_sentence(tail)).strip()


def parse_probability(value: Any) -> float | None:
    """A verbalized probability as a float in [0, 1]: 0.2, "0.2", "20%", 20 (a percent) -> 0.2.

    Anything else (negative, above 100, not a number) is None: never a made-up value.
    """
    if isinstance(value, bool) or value is None:
        return None
    percent = False
    if isinstance(value, str):
        m = _NUMBER.search(value)
        if not m:
            return None
        percent = "%" in value[m.end() : m.end() + 3]
        try:
            value = float(m[0])
        except ValueError:
            return None
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    if percent or value > 1:
        return value / 100 if value <= 100 else None
    return float(value)


def parse_candidates(text: str | None) -> Parsed:
    """Candidates from a generator's output; never raises (a failure is a reason, not an exception)."""
    try:
        return _parse(text)
    except Exception as e:  # noqa: BLE001 - a parser bug must become data, not stop a run
        return Parsed([], f"parser error: {type(e).__name__}: {e}")


def _parse(text: str | None) -> Parsed:
    if not isinstance(text, str) or not text.strip():
        return Parsed([], "empty output")
    body = _strip_reasoning(text)
    if not body.strip():
        return Parsed([], "only reasoning, no answer")
    items = _from_tags(body) if re.search(r"<response\b", body, re.IGNORECASE) else []
    if not items:
        items = _from_json(body)
    candidates = [_normalize(it) for it in items if isinstance(it, dict) and it]
    candidates = [c for c in candidates if any(k != "probability" for k in c)]
    if candidates:
        return Parsed(candidates)
    if "{" in body or "[" in body:
        return Parsed([], "JSON without candidates")
    return Parsed([], "no JSON object or <response> tags")


def _strip_reasoning(text: str) -> str:
    text = _THINK.sub("", text)
    for close in ("</think>", "</thinking>", "</reasoning>"):  # an opening tag the chat template supplied
        if close in text:
            text = text.rsplit(close, 1)[1]
    return text


def _from_json(body: str) -> list[Any]:
    sources = [m[1] for m in _FENCE.finditer(body)] if "```" in body else []
    sources.append(body)
    for src in sources:
        starts = sorted(i for i in (src.find("{"), src.find("[")) if i >= 0)
        keyed = re.search(r'"(?:{})"\s*:'.format("|".join(_LIST_KEYS)), src)
        if keyed and src.rfind("{", 0, keyed.start()) >= 0:  # skip braces in reasoning before the answer
            starts.insert(0, src.rfind("{", 0, keyed.start()))
        for start in starts:
            items = _items(_repair(src[start:]))
            if items:
                return items
    return []


def _repair(text: str) -> Any:
    """The JSON value ``text`` starts with: strict JSON (trailing commas dropped, text after it
    ignored), else ``json_repair.loads``; None where both fail."""
    try:
        return json.JSONDecoder().raw_decode(_drop_trailing_commas(text))[0]
    except ValueError:
        pass
    import json_repair

    try:
        return _join_surrogates(json_repair.loads(text))
    except Exception:  # noqa: BLE001
        return None


def _drop_trailing_commas(text: str) -> str:
    """``[1, 2,]`` -> ``[1, 2]``, leaving commas inside strings alone."""
    out, in_string, escaped = [], False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "," and text[i + 1 :].lstrip()[:1] in ("}", "]"):
            continue
        out.append(ch)
    return "".join(out)


def _join_surrogates(obj: Any) -> Any:
    """json_repair leaves ``\\ud83d\\ude00`` escapes as two surrogates; join them into one character."""
    if isinstance(obj, str):
        try:
            return obj.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeError:
            return obj
    if isinstance(obj, list):
        return [_join_surrogates(x) for x in obj]
    if isinstance(obj, dict):
        return {_join_surrogates(k): _join_surrogates(v) for k, v in obj.items()}
    return obj


def _items(obj: Any) -> list[Any]:
    if isinstance(obj, dict):
        for key in _LIST_KEYS:
            if isinstance(obj.get(key), list):
                return _items(obj[key])
        return [obj] if obj else []
    if isinstance(obj, list):
        # json_repair returns several top-level values as a list: use the first with candidates
        if any(isinstance(x, list) or (isinstance(x, dict) and any(k in x for k in _LIST_KEYS)) for x in obj):
            for x in obj:
                found = _items(x)
                if found:
                    return found
            return []
        return [x if isinstance(x, dict) else {"text": x} for x in obj if isinstance(x, (dict, str)) and x != ""]
    return []


def _from_tags(body: str) -> list[dict[str, Any]]:
    out = []
    for block in _RESPONSE.findall(body):
        fields = {name.lower(): _tag_value(value, name.lower()) for name, value in _TAG.findall(block)}
        text = fields.get("text")
        if isinstance(text, dict):  # <text>{"question": ...}</text>: the candidate is the JSON inside
            fields = {**text, **{k: v for k, v in fields.items() if k != "text"}}
        if fields:
            out.append(fields)
    return out


def _tag_value(raw: str, name: str = "") -> Any:
    value = raw.strip()
    if name == "question":  # text, even when it looks like JSON ("[]", "{x}")
        return value
    children = _TAG.findall(value)
    if children and len({name for name, _ in children}) == 1 and not _TAG.sub("", value).strip():
        return [v.strip() for _, v in children]  # <target_tools><tool>a</tool><tool>b</tool></target_tools>
    if value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            pass  # text that merely starts with a bracket
    return value


def _normalize(item: dict[str, Any]) -> dict[str, Any]:
    out = {str(k).strip().lower(): v for k, v in item.items()}
    prob = None
    for key in _PROB_KEYS:
        if key in out:
            prob = parse_probability(out.pop(key))
            break
    out["probability"] = prob
    return out
