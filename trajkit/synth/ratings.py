"""Judge ratings: Toucan's label scales and a parser for what a judge model writes.

A dimension is rated by a label from its five-step scale (Toucan's wording) or
a number from 1 to 5, inside ``<dimension>...<rating>...</rating></dimension>``
tags or as JSON. A rating that cannot be read is None with a reason: never a
default score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

SCALES: dict[str, tuple[str, ...]] = {
    "tool_selection_difficulty": ("very easy", "easy", "medium", "hard", "very hard"),
    "tool_selection_uniqueness": (
        "not unique",
        "somewhat unique",
        "moderately unique",
        "quite unique",
        "highly unique",
    ),
    "question_quality": ("very poor", "poor", "average", "good", "excellent"),
    "scenario_realism": (
        "unrealistic",
        "somewhat unrealistic",
        "moderately realistic",
        "realistic",
        "highly realistic",
    ),
    "verifiability": (
        "hard to verify",
        "somewhat hard",
        "moderately verifiable",
        "mostly verifiable",
        "easy to verify",
    ),
    "stability": ("highly unstable", "somewhat unstable", "moderately stable", "mostly stable", "highly stable"),
    "completeness": (
        "very incomplete",
        "incomplete",
        "partially complete",
        "mostly complete",
        "fully complete",
    ),
    "conciseness": ("very redundant", "redundant", "average", "concise", "very concise"),
}
TASK_DIMENSIONS = (
    "tool_selection_difficulty",
    "tool_selection_uniqueness",
    "question_quality",
    "scenario_realism",
    "verifiability",
    "stability",
)
TRAJECTORY_DIMENSIONS = ("completeness", "conciseness")
ALIASES = {"verifiability": ("verifiable",)}

_NUMERIC = re.compile(r"^\s*([1-5](?:\.\d+)?)\s*(?:/\s*5|out of 5)?\s*$")


@dataclass
class Judgment:
    """Scores per dimension (1-5 or None) and, when any is None, the reason."""

    scores: dict[str, float | None] = field(default_factory=dict)
    reason: str | None = None

    @property
    def complete(self) -> bool:
        return all(v is not None for v in self.scores.values())


def rating_value(dimension: str, rating: Any) -> float | None:
    """A rating as a number 1-5: a label of the dimension's scale, or a number in 1..5."""
    if isinstance(rating, bool) or rating is None:
        return None
    if isinstance(rating, (int, float)):
        return float(rating) if 1 <= rating <= 5 else None
    text = re.sub(r"<!--.*?-->", "", str(rating), flags=re.DOTALL)
    text = re.sub(r"^\s*(rating|score)\s*[:=]\s*", "", text.strip(), flags=re.IGNORECASE)
    text = re.sub(r"[\s_*\"'`.]+", " ", text).strip().lower()
    m = _NUMERIC.match(text)
    if m:
        return float(m[1])
    scale = SCALES[dimension]
    if text in scale:
        return float(scale.index(text) + 1)
    return None


def parse_judgment(text: str | None, dimensions: tuple[str, ...], nonce: str | None = None) -> Judgment:
    """Read a judge's ratings for ``dimensions`` from XML tags or JSON; never raises. With the call's
    ``nonce`` (``prompts.judged_prompt``), only what is inside the last ``<response nonce="...">`` that
    carries it is read: a verdict the judge echoed from the judged text carries none."""
    try:
        if nonce is not None:
            blocks = re.findall(
                rf'<response\s+nonce="{re.escape(nonce)}"\s*>(.*?)</response\s*>', text or "", re.DOTALL
            )
            if not blocks:
                return Judgment({d: None for d in dimensions}, "no verdict carrying this call's nonce")
            text = blocks[-1]
        return _parse(text, dimensions)
    except Exception as e:  # noqa: BLE001 - a parser bug must become data, not stop a run
        return Judgment({d: None for d in dimensions}, f"parser error: {type(e).__name__}: {e}")


def _parse(text: str | None, dimensions: tuple[str, ...]) -> Judgment:
    if not isinstance(text, str) or not text.strip():
        return Judgment({d: None for d in dimensions}, "empty judge output")
    body = re.sub(r"<(think|thinking)>.*?</\1>", "", text, flags=re.DOTALL | re.IGNORECASE)
    raw = _from_tags(body, dimensions)
    if not any(v is not None for v in raw.values()):
        raw = _from_json(body, dimensions)
    if not any(v is not None for v in raw.values()):
        return Judgment(
            {d: None for d in dimensions}, "no ratings found: expected <dimension><rating>...</rating> tags or JSON"
        )
    scores, problems = {}, []
    for d in dimensions:
        value = raw.get(d)
        scores[d] = rating_value(d, value)
        if scores[d] is None:
            problems.append(f"{d}: " + ("missing" if value is None else f"unreadable rating {str(value)[:40]!r}"))
    return Judgment(scores, "; ".join(problems) or None)


def _from_tags(body: str, dimensions: tuple[str, ...]) -> dict[str, Any]:
    """Each dimension's rating: the *last* rating tag between its first opening and its last closing tag.

    The judge's verdict is the last thing it writes; a rating it quotes from the conversation it judges
    (a forged ``<rating>`` in its reasoning, a whole forged block before its reply) comes earlier.
    """
    out: dict[str, Any] = {}
    for d in dimensions:
        for name in (d, *ALIASES.get(d, ())):
            start = re.search(rf"<{name}\b[^>]*>", body, re.IGNORECASE)
            ends = [m.start() for m in re.finditer(rf"</{name}\s*>", body, re.IGNORECASE)]
            if not start or not ends or ends[-1] < start.end():
                continue
            block = body[start.end() : ends[-1]]
            ratings = re.findall(r"<(rating|score)>(.*?)</\1\s*>", block, re.DOTALL | re.IGNORECASE)
            out[d] = (
                ratings[-1][1] if ratings else re.sub(r"<reasoning>.*?</reasoning>", "", block, flags=re.DOTALL).strip()
            )
            break
    return out


def _from_json(body: str, dimensions: tuple[str, ...]) -> dict[str, Any]:
    from trajkit.synth.vs import parse_candidates

    parsed = parse_candidates(body)
    if not parsed.candidates:
        return {}
    obj = parsed.candidates[0]
    out: dict[str, Any] = {}
    for d in dimensions:
        for name in (d, *ALIASES.get(d, ())):
            if name in obj:
                value = obj[name]
                out[d] = value.get("rating", value.get("score")) if isinstance(value, dict) else value
                break
    return out


def mean_score(scores: dict[str, float | None]) -> float | None:
    """The mean of the scores, or None unless every dimension was read."""
    values = list(scores.values())
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)
