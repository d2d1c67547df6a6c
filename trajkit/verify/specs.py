"""The verifier spec formats: what a tasks row's ``verifier.spec`` JSON holds for each kind.

Validated with pydantic so that a bad spec becomes an ``error`` verdict that
names the field, never an exception. Unknown keys are ignored (importers may
keep provenance there), except for ``custom`` and ``judge`` specs, which pass
every key on to the user's function.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trajkit.verify.extract import parse_python
from trajkit.verify.matching import default_answer_match, expected_number

Match = Literal["exact", "contains", "number", "regex"]


def _text(value: Any) -> Any:
    """Numbers in JSON specs (``"answer": 42``) are read as their text."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _checks_something(expected: str | None, match: str) -> None:
    """Refuse a ``contains`` or ``regex`` check that an empty text passes (``""``, ``.*``, ``\\d*``): every
    answer would pass it, whatever the agent did; and a ``number`` check that expects no single number."""
    if expected is None:
        return
    if match == "number" and expected_number(expected) is None:
        raise ValueError(f"a number check expects one number, not {expected!r}")
    if match not in ("contains", "regex"):
        return
    try:
        vacuous = not expected.split() if match == "contains" else re.search(expected, "", re.DOTALL) is not None
    except re.error:
        return  # an invalid pattern fails its check, with the reason, when it is run
    if vacuous:
        raise ValueError(f"a {match} check for {expected!r} passes any text: it checks nothing")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="ignore")


class UnitTestsSpec(_Spec):
    prompt: str | None = None
    test: str
    entry_point: str | None = None
    timeout_s: float = Field(10.0, gt=0, le=600)
    memory_mb: int = Field(1024, gt=0)

    @model_validator(mode="after")
    def _tests_run_something(self) -> UnitTestsSpec:
        """Refuse test code that only defines things (blank, comments, a ``check`` no entry point calls):
        every completion would pass it."""
        tree = parse_python(self.test)
        if tree is None:
            return self  # fails when it runs, with the reason
        body = tree.body
        definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
        inert = all(
            isinstance(n, definitions) or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body
        )
        check_called = self.entry_point and any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in body)
        if inert and not check_called:
            raise ValueError("the test code runs nothing (no statement, or a check() without an entry_point)")
        return self


LINE_END = " \t\r\f\v"  # the ASCII whitespace a line of output may end with ("\n" ends it)


def output_lines(text: str) -> list[str]:
    """A stdio output as it is compared: its lines (split at "\n" only), each without the ASCII whitespace it ends
    with (spaces, tabs, carriage returns, form feeds, vertical tabs), and without the empty lines it ends with;
    nothing else is normalized (docs/schema.md): other whitespace, a no-break space say, is a character like any."""
    lines = [line.rstrip(LINE_END) for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


class StdioCase(_Spec):
    input: str = ""
    output: str

    read_numbers_as_text = field_validator("input", "output", mode="before")(_text)


class StdioSpec(_Spec):
    cases: list[StdioCase] = Field(min_length=1)
    timeout_s: float = Field(10.0, gt=0, le=600)
    memory_mb: int = Field(1024, gt=0)

    @model_validator(mode="after")
    def _expects_output(self) -> StdioSpec:
        if not any(output_lines(case.output) for case in self.cases):
            raise ValueError("every case expects no output: a program that prints nothing passes them all")
        return self


class MathSpec(_Spec):
    answer: str
    timeout_s: float = Field(10.0, gt=0, le=600)

    read_numbers_as_text = field_validator("answer", mode="before")(_text)


class StateProbe(_Spec):
    server: str
    tool: str
    arguments: dict = Field(default_factory=dict)
    expected: str
    match: Match = "exact"

    read_numbers_as_text = field_validator("expected", mode="before")(_text)

    @model_validator(mode="after")
    def _checks(self) -> StateProbe:
        _checks_something(self.expected, self.match)
        return self


class ToolOutcomeSpec(_Spec):
    """An answer check and end-state probes (rules: ``trajkit.verify.matching``). Without ``answer_match``,
    a bare-number answer is matched as a ``number`` and any other as ``exact``; ``contains`` is never a
    default. A probe's ``match`` defaults to ``exact`` (its output compared as a value)."""

    answer: str | None = None
    answer_match: Match | None = None
    state: list[StateProbe] = Field(default_factory=list)

    read_numbers_as_text = field_validator("answer", mode="before")(_text)

    @model_validator(mode="after")
    def _checks(self) -> ToolOutcomeSpec:
        if self.answer_match is None:
            self.answer_match = default_answer_match(self.answer)
        _checks_something(self.answer, self.answer_match)
        return self


class CustomSpec(_Spec):
    model_config = ConfigDict(extra="allow")
    path: str
    pass_threshold: float = Field(1.0, ge=0, le=1)


class JudgeSpec(_Spec):
    model_config = ConfigDict(extra="allow")
    rubric: str
    pass_threshold: float = Field(0.5, ge=0, le=1)


SPECS: dict[str, type[_Spec]] = {
    "unit_tests": UnitTestsSpec,
    "stdio": StdioSpec,
    "math": MathSpec,
    "tool_outcome": ToolOutcomeSpec,
    "custom": CustomSpec,
    "judge": JudgeSpec,
}


class SpecError(ValueError):
    """A spec that cannot be read: the message names the kind and the field."""


def parse_spec(kind: str, spec: str | dict | None) -> _Spec:
    """Read a spec (JSON text or a dict) into the model for ``kind``."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{kind} spec is not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise SpecError(f"{kind} spec must be a JSON object, got {type(spec).__name__}")
    try:
        return SPECS[kind].model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in exc.errors())
        raise SpecError(f"bad {kind} spec: {problems}") from None
