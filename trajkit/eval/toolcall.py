"""BFCL-style scoring of predicted tool calls against reference calls.

The rules follow the AST checker of the Berkeley Function Calling Leaderboard
(``bfcl_eval.eval_checker.ast_eval.ast_checker``), so trajkit's numbers and
BFCL's agree on the same predictions (a test checks this on BFCL's own data):

* the function name must match; parallel calls are matched as a set (order free);
* every required parameter must be present, and no parameter outside the
  schema and the reference may appear;
* each value must have the declared type (an int is accepted for ``float``),
  or the type of the reference value (BFCL's "variable" case);
* values match one of the acceptable values: strings case- and
  punctuation-insensitively, lists element-wise, dicts key by key, numbers
  equal (floats up to round-off); ``""`` among the acceptable values means the
  parameter may be omitted;
* a turn whose reference has no call is correct only if the model abstains.

Two deliberate differences from BFCL's checker: parallel calls are matched
with a maximum bipartite matching (BFCL matches greedily and can miss a valid
assignment), and floats equal up to 1e-12 relative error (binary round-off, as in 0.1 + 0.2) count as equal.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

OPTIONAL = ""  # among a parameter's acceptable values: the parameter may be left out

# BFCL's parameter types and JSON Schema's, as the Python types a value must have.
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "any": (str,),
    "integer": (int,),
    "float": (float,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "tuple": (list,),
    "dict": (dict,),
    "object": (dict,),
    "null": (type(None),),
}
_PUNCT = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class Call:
    """A tool call: the function name and its parsed arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Expected:
    """A reference call: per parameter, the list of acceptable values (BFCL's possible answers)."""

    name: str
    accept: dict[str, list[Any]]


@dataclass(frozen=True)
class Verdict:
    """The score of one turn. ``args_correct`` is None when names already differ or nothing was expected."""

    correct: bool
    name_correct: bool | None
    args_correct: bool | None
    reason: str | None = None
    detail: str = ""


def score_calls(predicted: list[Call], expected: list[Expected], schemas: dict[str, dict[str, Any]]) -> Verdict:
    """Score one turn's predicted calls against the reference calls.

    ``schemas`` maps a function name to its parameters schema (JSON Schema or
    BFCL's dialect: ``properties`` with a ``type`` each, and ``required``).
    An empty ``expected`` is an abstention turn.
    """
    if not expected:
        if predicted:
            return Verdict(False, False, None, "should_abstain", f"called {', '.join(c.name for c in predicted)}")
        return Verdict(True, True, None)
    if not predicted:
        return Verdict(False, False, None, "no_call", f"expected {', '.join(e.name for e in expected)}")
    names_match = Counter(c.name for c in predicted) == Counter(e.name for e in expected)
    if len(predicted) != len(expected):
        return Verdict(False, False, None, "wrong_count", f"{len(predicted)} calls, expected {len(expected)}")
    if not names_match:
        got, want = sorted(c.name for c in predicted), sorted(e.name for e in expected)
        return Verdict(False, False, None, "wrong_name", f"called {got}, expected {want}")
    problems: dict[tuple[int, int], tuple[str, str] | None] = {}
    for i, exp in enumerate(expected):
        for j, call in enumerate(predicted):
            if call.name == exp.name:
                problems[i, j] = check_call(call, exp, schemas.get(exp.name) or {})
    ok = {
        i: [j for j in range(len(predicted)) if (i, j) in problems and problems[i, j] is None]
        for i in range(len(expected))
    }
    unmatched = _unmatched(ok, len(predicted))
    if unmatched is None:
        return Verdict(True, True, True)
    first = next((p for (i, _), p in sorted(problems.items()) if i == unmatched and p is not None), None)
    reason, detail = first or ("value_error", "")
    return Verdict(False, True, False, reason, detail)


def check_call(call: Call, expected: Expected, schema: dict[str, Any]) -> tuple[str, str] | None:
    """Why ``call`` does not match ``expected`` as (reason, detail), or None if it does."""
    if call.name != expected.name:
        return "wrong_name", f"{call.name!r} is not {expected.name!r}"
    props = schema.get("properties") or {}
    for param in schema.get("required") or []:
        if param not in call.arguments:
            return "missing_required", f"missing required parameter {param!r}"
    for param, value in call.arguments.items():
        if param not in props or param not in expected.accept:
            return "unexpected_param", f"unexpected parameter {param!r}"
        problem = _check_value(param, value, props[param] or {}, expected.accept[param])
        if problem:
            return problem
    for param, accepted in expected.accept.items():
        if param not in call.arguments and OPTIONAL not in accepted:
            return "missing_param", f"parameter {param!r} is in the reference and not optional"
    return None


def expected_from_reference(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, list[Any]]:
    """Acceptable values from one concrete reference call (a trajectory's call).

    A value equal to the schema's default may be left out; an optional
    parameter the reference left out may be left out or given its default.
    """
    props = schema.get("properties") or {}
    accept: dict[str, list[Any]] = {}
    for param, value in arguments.items():
        spec = props.get(param) or {}
        answer = _as_answer(value, spec)
        accept[param] = [answer, OPTIONAL] if "default" in spec and spec["default"] == value else [answer]
    for param, spec in props.items():
        if param not in accept:
            spec = spec or {}
            accept[param] = [OPTIONAL, spec["default"]] if "default" in spec else [OPTIONAL]
    return accept


def _as_answer(value: Any, spec: dict[str, Any]) -> Any:
    """A concrete value in BFCL's answer form: a dict (or list of dicts) holds a list of acceptable values per key."""
    declared, items = spec.get("type"), (spec.get("items") or {}).get("type")
    if declared in ("dict", "object") and isinstance(value, dict):
        return {k: [v] for k, v in value.items()}
    if (
        _is_array(declared)
        and items in ("dict", "object")
        and isinstance(value, list)
        and all(isinstance(x, dict) for x in value)
    ):
        return [{k: [v] for k, v in x.items()} for x in value]
    return value


def parse_arguments(text: str | None) -> dict[str, Any] | None:
    """A call's JSON arguments as a dict, or None if they are not a JSON object."""
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------- values


def _check_value(param: str, value: Any, spec: dict[str, Any], accepted: list[Any]) -> tuple[str, str] | None:
    declared = spec.get("type")
    if declared == "float" and type(value) is int:
        value = float(value)
    answer_type = next((type(a) for a in accepted if a != OPTIONAL), None)
    example = next((a for a in accepted if a != OPTIONAL), None)
    item_type = (spec.get("items") or {}).get("type") if _is_array(declared) else None
    is_variable = answer_type is not None and not _fits(example, declared)
    if _fits(value, declared):
        if item_type in _PY_TYPES and not _items_fit(value, item_type, accepted):
            return "type_error", f"{param!r} items should be {item_type}"
    elif answer_type is None or type(value) is not answer_type:
        return "type_error", f"{param!r} should be {declared}, got {type(value).__name__}"
    else:
        is_variable = True
    if not is_variable:
        if declared in ("dict", "object"):
            ok = _dict_ok(value, accepted)
        elif _is_array(declared) and item_type in ("dict", "object"):
            ok = _list_of_dicts_ok(value, accepted)
        elif declared in ("string", "any"):
            ok = _norm(value) in [_norm(a) for a in accepted if isinstance(a, str)]
        elif _is_array(declared):
            ok = _norm_list(value) in [_norm_list(a) if isinstance(a, list) else a for a in accepted]
        else:
            ok = _member(value, accepted)
        if ok:
            return None
    elif _member(value, accepted):
        return None
    return "value_error", f"{param!r}={_short(value)} is not one of {_short(accepted)}"


def _is_array(declared: Any) -> bool:
    return declared in ("array", "tuple")


def _fits(value: Any, declared: Any) -> bool:
    """Whether a value has the declared type; unknown or absent types accept anything."""
    if isinstance(declared, list):
        return any(_fits(value, d) for d in declared)
    types = _PY_TYPES.get(declared)
    return types is None or type(value) in types


def _items_fit(value: list[Any], item_type: str, accepted: list[Any]) -> bool:
    """BFCL's one-level nested type check: the items fit the item type (or the answer's item type)."""
    for answer in accepted:
        if not isinstance(answer, list):
            return True
        answer_type = next((type(a) for a in answer if a != OPTIONAL), None)
        if all(type(v) in _PY_TYPES[item_type] or (answer_type is not None and type(v) is answer_type) for v in value):
            return True
    return False


def _norm(value: Any) -> Any:
    """BFCL's string standardization: no spaces or ``,./-_*^``, lower case, double quotes."""
    return _PUNCT.sub("", value).lower().replace("'", '"') if isinstance(value, str) else value


def _norm_list(values: list[Any]) -> list[Any]:
    return [_norm(v) for v in values]


def _member(value: Any, accepted: list[Any]) -> bool:
    if value in accepted:
        return True
    if not _is_number(value):
        return False
    return any(
        _is_number(a) and (isinstance(a, float) or isinstance(value, float)) and math.isclose(a, value, rel_tol=1e-12)
        for a in accepted
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _dict_ok(value: dict[str, Any], accepted: list[Any]) -> bool:
    for answer in accepted:
        if answer == OPTIONAL or not isinstance(answer, dict):
            continue
        if all(
            k in answer and isinstance(answer[k], list) and _norm(v) in [_norm(a) for a in answer[k]]
            for k, v in value.items()
        ) and all(k in value or (isinstance(v, list) and OPTIONAL in v) for k, v in answer.items()):
            return True
    return False


def _list_of_dicts_ok(value: list[Any], accepted: list[Any]) -> bool:
    for answer in accepted:
        if not isinstance(answer, list) or len(answer) != len(value):
            continue
        if all(isinstance(v, dict) and _dict_ok(v, [a]) for v, a in zip(value, answer)):
            return True
    return False


def _unmatched(ok: dict[int, list[int]], n_predicted: int) -> int | None:
    """Maximum bipartite matching of expected calls to predicted calls (Kuhn's algorithm).

    Returns an expected index left unmatched, or None if every expected call is matched.
    """
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in ok[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in ok:
        if not augment(i, set()):
            return i
    return None


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
