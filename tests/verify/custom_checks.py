"""Custom verifiers loaded by dotted path in the tests (``fn(completion, spec, context)``)."""

from __future__ import annotations

from trajkit.verify import Result


def keyword_share(completion: str, spec: dict, context: dict) -> float:
    """The share of ``spec["keywords"]`` that occur in the completion."""
    words = spec["keywords"]
    return sum(w in completion for w in words) / len(words)


def is_shouting(completion: str, spec: dict, context: dict) -> bool:
    return completion.isupper()


def full_result(completion: str, spec: dict, context: dict) -> Result:
    return Result(0.5, "fail", {"seen": context.get("tag")})


def broken(completion: str, spec: dict, context: dict) -> float:
    raise RuntimeError("this verifier is broken")


def out_of_range(completion: str, spec: dict, context: dict) -> float:
    return 7.0


VALUE = 0.5  # not a function: naming it as a verifier is a user error
