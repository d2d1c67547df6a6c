"""How a tool task's final answer, and an end-state probe's output, are compared with the expected value.

The rules (also in docs/schema.md, "Answer matching"):

* **The answer** is the last line that starts ``Answer:`` (``Final answer:``,
  any case, markdown emphasis allowed; an empty one is followed to the next
  non-empty line), with the reasoning dropped; without one, the last sentence
  of the last paragraph. Nothing else of the completion counts.
* ``number``: exactly one distinct value appears in the answer and it equals
  the expected one (relative tolerance 1e-6). Thousands separators, currency
  signs, units and ``a/b`` fractions are allowed; a percent is a percent
  (``50%`` is 0.5, not 50). An answer that hedges ("probably", "about", a
  question mark), gives a bound ("over 42", "42 or more"), negates or retracts
  ("not", "isn't", "wrong") or reports an error ("error", "failed", "timed
  out") fails whatever its number.
* ``exact``: the answer equals the expected text, ignoring case, surrounding
  quotes and emphasis, a final period and a leading article; or it is one
  sentence that ends ``... is|are|was|were|equals|named|called|:|= <expected>``
  with no hedge, negation or error before it ("The capital of France is
  Paris."). An expected JSON list or object is compared as a value.
* ``contains`` (only when a task chooses it): the expected text occurs in the
  answer, ignoring case and whitespace runs. It passes a list of candidates
  that includes the right one; ``regex``: ``re.search`` on the answer.
* **A probe's output** is read as a value (JSON, else a Python literal, else a
  number, else text): ``exact`` compares values (numbers numerically, text
  after trimming, case kept), ``number`` applies the number rule to the
  output, ``contains`` and ``regex`` read its text.

Every comparison returns ``(passed, reason)``; the reason says why it passed or why not.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

_ANSWER_LINE = re.compile(
    r"^[ \t>*_#-]*(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*(.*?)[ \t*_]*$", re.IGNORECASE | re.MULTILINE
)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_NUMBER = re.compile(
    r"(?<![\w.])([-+−]?)(\d{1,3}(?:[, \u00a0\u202f]\d{3}(?!\d))+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)([eE][-+]?\d+)?"
    r"(?:/(\d+)(?![\d.]))?(\s*(?:%|percent\b|per\s+cent\b))?",
    re.IGNORECASE,
)
_BARE_NUMBER = re.compile(
    r"^\s*[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?\s*%?\s*$|^\s*[-+]?\.\d+\s*$"
)
# Words and signs that make an answer something other than a plain statement of it: a hedge, a bound or
# comparison, a negation or retraction, an error report. A list of words cannot be complete; what no wording
# gets around is the one-value rule (a number answer names one value, an exact one equals the answer).
_HEDGES = (
    r"probably|maybe|perhaps|possibly|presumably|apparently|likely|unlikely|might|could|may\s+be|i\s+think"
    r"|i\s+believe|guess|guesses|guessed|guessing|not\s+sure|unsure|uncertain|unverified|unconfirmed"
    r"|approximately|approx|roughly|about|around|near|nearly|almost|close\s+to|or\s+so|give\s+or\s+take"
    r"|estimate|estimates|estimated|somewhere|between|either|whether|if|unless|assuming|suppose|supposedly"
)
_COMPARED = r"higher|lower|greater|smaller|more|less|fewer|above|below|over|under"
_BOUNDS = (  # a bound rather than a value: "over 42", "42 or more", "more than 42", "at least 42"
    rf"(?:over|under|above|below|upwards\s+of|up\s+to|min|max|minimum|maximum)\s*[:$€£]?\s*\d"
    rf"|or\s+(?:{_COMPARED})|(?:{_COMPARED})\s+than|at\s+(?:least|most)"
)
_NEGATIONS = (
    r"not|never|neither|nor|nobody|cannot|anything\s+but|rather\s+than|instead\s+of|other\s+than|except|excluding"
    r"|wrong|incorrect|false|ruled\s+out|scratch\s+that|never\s+mind|retract|retracted|no\s+longer"
)
_ERRORS = (
    r"errors?|exception|fail|fails|failed|failure|unable|invalid|denied|forbidden|refused|timeout|timed\s+out"
    r"|traceback|unavailable|unreachable|crash|crashed"
)
_QUALIFIER = re.compile(
    rf"(?<![\w])(?:{_HEDGES}|{_NEGATIONS}|{_ERRORS})(?![\w])|(?<![\w])(?:{_BOUNDS})"
    r"|\w+n['’]t\b|\d[-\s]?ish\b|\d\+(?!\d)|[~≈±?<>≤≥]",
    re.IGNORECASE,
)
_COPULA = re.compile(r"(?<![\w])(?:is|are|was|were|equals|named|called)\s+|(?<=\w)['’]s\s+|\s*[:=]\s*", re.IGNORECASE)
_EDGES = " \t\"'`*_“”‘’"
_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.IGNORECASE)
REL_TOL, ABS_TOL = 1e-6, 1e-9


def final_answer(completion: str) -> tuple[str, str]:
    """(the answer, where it was found): the last ``Answer:`` line's text, else the last sentence.

    ``completion`` is the final answer text of an episode, its reasoning already dropped.
    """
    found = list(_ANSWER_LINE.finditer(completion))
    if found:
        last = found[-1]
        text = last[1].strip()
        if not text:  # "**Answer:**" with the answer on the next non-empty line
            text = next((line.strip() for line in completion[last.end() :].splitlines() if line.strip()), "")
        return text, "answer line"
    paragraphs = [p for p in _PARAGRAPH.split(completion.strip()) if p.strip()]
    if not paragraphs:
        return "", "last sentence"
    sentences = [s for s in _SENTENCE_END.split(" ".join(paragraphs[-1].split())) if s]
    return (sentences[-1] if sentences else ""), "last sentence"


def default_answer_match(expected: str | None) -> str:
    """The match mode of an answer check that names none: ``number`` for a bare number, else ``exact``."""
    return "number" if expected is not None and _BARE_NUMBER.match(expected) else "exact"


def expected_number(expected: str) -> float | None:
    """The one value an expected ``number`` answer holds (None if it holds none or several)."""
    values = _distinct(numbers(expected))
    return values[0] if len(values) == 1 else None


def answer_matches(completion: str, expected: str, how: str) -> tuple[bool, str]:
    """Judge a final answer (reasoning dropped) against ``expected`` in mode ``how``: (passed, why)."""
    answer, where = final_answer(completion)
    if not answer:
        return False, "the completion has no final answer" if where == "last sentence" else "the answer line is empty"
    shown = f"{where} {_quote('Answer: ' + answer if where == 'answer line' else answer)}"
    if how == "number":
        return _number(answer, expected, shown)
    if how == "exact":
        return _exact(answer, expected, shown)
    if how in ("contains", "regex"):
        return _text(answer, expected, how, shown)
    return False, f"unknown match mode {how!r}"


def state_matches(observed: str, expected: str, how: str) -> tuple[bool, str]:
    """Judge a probe's output against ``expected`` in mode ``how``, comparing values: (passed, why)."""
    shown = f"output {_quote(observed)}"
    if how == "exact":
        got, want = read_value(observed), read_value(expected)
        if same_value(got, want):
            return True, f"{shown} equals {expected!r}"
        return False, f"{shown} is not {expected!r}"
    if how == "number":
        got = read_value(observed)
        if isinstance(got, (list, dict)):
            return False, f"{shown} is a {type(got).__name__}, not a number"
        return _number(observed, expected, shown)
    if how in ("contains", "regex"):
        return _text(observed, expected, how, shown)
    return False, f"unknown match mode {how!r}"


def numbers(text: str) -> list[float]:
    """The numeric values written in ``text``, in order (``1,250`` and ``1 250`` are 1250, ``50%`` is 0.5,
    ``3/4`` is 0.75)."""
    out = []
    for sign, digits, exponent, denominator, percent in _NUMBER.findall(text):
        value = float(re.sub(r"[, \u00a0\u202f]", "", digits) + (exponent or ""))
        if denominator:
            if int(denominator) == 0:
                continue
            value /= int(denominator)
        if sign in ("-", "−"):
            value = -value
        out.append(value / 100 if percent else value)
    return out


def read_value(text: str) -> Any:
    """A probe output or expected value as a value: JSON, else a Python literal, else a number, else the text."""
    stripped = text.strip()
    if _BARE_NUMBER.match(stripped):  # before literal_eval reads "1,250" as the tuple (1, 250)
        return numbers(stripped)[0]
    for read in (json.loads, ast.literal_eval):
        try:
            return read(stripped)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
    return stripped


def same_value(a: Any, b: Any) -> bool:
    """Equal as values: numbers within tolerance (a numeric text counts as its number), lists and objects
    item by item, text after collapsing whitespace."""
    a, b = _as_number(a), _as_number(b)
    if isinstance(a, float) and isinstance(b, float):
        return _close(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, str) and isinstance(b, str):
        return " ".join(a.split()) == " ".join(b.split())
    return type(a) is type(b) and a == b


def _number(answer: str, expected: str, shown: str) -> tuple[bool, str]:
    target = expected_number(expected)
    if target is None:
        return False, f"expected value {expected!r} is not one number"
    qualifier = _QUALIFIER.search(answer)
    if qualifier:
        return False, f"{shown} is qualified ({qualifier[0].strip()!r}): not a plain statement of a number"
    values = _distinct(numbers(answer))
    if not values:
        return False, f"{shown} holds no number"
    if len(values) > 1:
        listed = ", ".join(_fmt(v) for v in values[:5]) + (", ..." if len(values) > 5 else "")
        return False, f"{shown} holds {len(values)} different numbers ({listed}), not one answer"
    if not _close(values[0], target):
        return False, f"{shown} states {_fmt(values[0])}, not {expected}"
    return True, f"{shown} equals {expected}"


def _exact(answer: str, expected: str, shown: str) -> tuple[bool, str]:
    want = read_value(expected) if expected.lstrip().startswith(("[", "{")) else None
    if isinstance(want, (list, dict)):
        if same_value(read_value(_bare(answer, fold=False)), want):
            return True, f"{shown} equals {expected!r}"
        tail = _copula_tail(answer)
        if tail is not None and same_value(read_value(_bare(tail, fold=False)), want):
            return True, f"{shown} ends with {expected!r} after {answer[: len(answer) - len(tail)].strip()!r}"
        return False, f"{shown} is not {expected!r}"
    if _bare(answer) == _bare(expected):
        return True, f"{shown} equals {expected!r}"
    tail = _copula_tail(answer)
    if tail is not None and _bare(tail) == _bare(expected):
        return True, f"{shown} ends with {expected!r} after {answer[: len(answer) - len(tail)].strip()!r}"
    return False, f"{shown} is not {expected!r}"


def _copula_tail(answer: str) -> str | None:
    """What follows the last "is" (are, was, equals, named, ":", "=") of a one-sentence answer whose words before
    it neither hedge, negate nor report an error; None otherwise."""
    if len(_SENTENCE_END.split(answer.strip())) > 1:
        return None
    links = list(_COPULA.finditer(answer))
    if not links or _QUALIFIER.search(answer[: links[-1].start()]):
        return None
    return answer[links[-1].end() :]


def _text(answer: str, expected: str, how: str, shown: str) -> tuple[bool, str]:
    if how == "contains":
        if " ".join(expected.split()).casefold() in " ".join(answer.split()).casefold():
            return True, f"{shown} contains {expected!r}"
        return False, f"{shown} does not contain {expected!r}"
    try:
        found = re.search(expected, answer, re.DOTALL)
    except re.error as exc:
        return False, f"invalid pattern {expected!r}: {exc}"
    if found:
        return True, f"{shown} matches {expected!r} at {found[0][:60]!r}"
    return False, f"{shown} does not match {expected!r}"


def _bare(text: str, fold: bool = True) -> str:
    """Text for comparing: whitespace collapsed, surrounding quotes, emphasis and a final period or "!" gone,
    then (``fold``) case folded and a leading article dropped."""
    out = " ".join(text.split()).strip(_EDGES)
    out = out.rstrip(".!").strip(_EDGES)
    return _ARTICLE.sub("", out).casefold() if fold else out


def _as_number(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and _BARE_NUMBER.match(value):
        found = numbers(value)
        return found[0] if len(found) == 1 else value
    return value


def _distinct(values: list[float]) -> list[float]:
    out: list[float] = []
    for v in values:
        if not any(_close(v, u) for u in out):
            out.append(v)
    return out


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _fmt(value: float) -> str:
    return format(value, "g") if not value.is_integer() or abs(value) >= 1e15 else str(int(value))


def _quote(text: str, limit: int = 120) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= limit else one_line[: limit - 3] + "...")
