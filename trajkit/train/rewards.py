"""GRPO rewards with TRL's signature: ``f(prompts, completions, completion_ids, trainer_state, **columns)``.

Each reward returns one float per completion, or ``None`` where it does not
apply (TRL then leaves it out of that completion's sum). Columns come from the
dataset ``trajkit.envs.solve.grpo_rows`` builds (``verifier_kind``,
``verifier_spec``, ``difficulty``, ``environment``, ``tools_json``); settings are
bound with ``functools.partial``.

* ``correctness_reward`` — the task's verifier (``trajkit.verify.verify``, the one
  that tagged difficulty), None where the verdict is ``error`` (the sandbox or
  the verifier failed: no evidence either way; logged as ``verify_error``, the
  share of judged completions), with a conciseness bonus paid only on a pass:
  ``R = R_correct * (1 + alpha * c * (s + d))``, ``c`` in [0, 1] a conciseness
  score (length-based, a judge model's rating, or a dotted-path scorer), ``s`` an
  annealing coefficient from ``trainer_state``, ``d`` from the difficulty bucket.
* ``format_reward`` — balanced think tags, no unparsed tool-call markup, a final answer.
* ``tool_call_reward`` — the share of tool calls that name an offered tool with
  arguments valid against its input schema (None for tasks without tools).
* ``overlong`` — TRL's soft overlong penalty.
* anything else — a dotted path to a function with TRL's reward signature.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable
from typing import Any

from pydantic import Field, model_validator

from trajkit.config import StageConfig
from trajkit.errors import UserError
from trajkit.models.base import ModelSpec
from trajkit.plugins import Reward
from trajkit.train.data import completion_text
from trajkit.train.judge import JudgeConciseness

# d in R_correct * (1 + alpha * c * (s + d)): the easier the task, the more a short answer is worth.
DIFFICULTY_BONUS: dict[str, float] = {"trivial": 1.0, "easy": 0.75, "medium": 0.5, "hard": 0.25, "unsolved": 0.0}
BUILTIN = ("correctness", "format", "tool_calls", "overlong")


class RewardSpec(StageConfig):
    """One reward: a built-in name or a dotted path, its weight and its keyword settings."""

    name: str = Field(description=f"One of {', '.join(BUILTIN)}, or package.module:function with TRL's signature.")
    weight: float = Field(1.0, description="Weight in the sum of rewards (GRPOConfig.reward_weights).")
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword settings bound to the function.")


class Conciseness(StageConfig):
    """The conciseness bonus of the correctness reward."""

    alpha: float = Field(0.2, ge=0, description="Bonus scale; 0 turns the bonus off.")
    scorer: str = Field(
        "length",
        description="'length'; 'judge' (a judge model rates each correct answer); or a dotted path "
        "f(prompts, completions, completion_ids) -> list of c in [0, 1] (None or a value outside: no rating).",
    )
    judge: ModelSpec | None = Field(None, description="The judge model when scorer is 'judge'.")
    anneal_fraction: float = Field(
        1.0, gt=0, le=1, description="s ramps from 0 to 1 over this fraction of the stage's steps."
    )
    difficulty_bonus: dict[str, float] = Field(default_factory=lambda: dict(DIFFICULTY_BONUS))

    @model_validator(mode="after")
    def _judge_named(self) -> Conciseness:
        if self.scorer == "judge" and self.judge is None:
            raise ValueError("scorer 'judge' needs a judge: model spec")
        return self


def anneal(trainer_state: Any, fraction: float = 1.0) -> float:
    """s in [0, 1]: the share of the first ``fraction`` of the stage's steps already done."""
    if trainer_state is None or not getattr(trainer_state, "max_steps", 0):
        return 1.0
    return min(1.0, trainer_state.global_step / (fraction * trainer_state.max_steps))


def length_conciseness(lengths: list[int], max_length: int) -> list[float]:
    """c = 1 - length / max_length, clipped to [0, 1]: the shorter the completion, the closer to 1."""
    return [min(1.0, max(0.0, 1.0 - n / max_length)) for n in lengths]


def correctness_reward(
    prompts: list,
    completions: list,
    completion_ids: list[list[int]] | None = None,
    trainer_state: Any = None,
    *,
    verifier_kind: list[str],
    verifier_spec: list[str],
    difficulty: list[str | None] | None = None,
    environments: list | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    sandbox: Any = None,
    alpha: float = 0.0,
    max_length: int = 256,
    scorer: str | Callable[..., list[float | None]] = "length",
    anneal_fraction: float = 1.0,
    difficulty_bonus: dict[str, float] | None = None,
    **_: Any,
) -> list[float | None]:
    """The task's verifier score, times the conciseness bonus where the verdict is a pass; None where the
    verifier could not judge (an ``error`` verdict) or the task has none."""
    from trajkit.verify import verify_many

    n = len(completions)
    difficulty = difficulty or [None] * n
    bonus = DIFFICULTY_BONUS if difficulty_bonus is None else difficulty_bonus
    todo: list[int] = []
    items: list[tuple[dict, str, dict | None]] = []
    for i in range(n):
        if verifier_kind[i] in (None, "none"):
            continue
        verifier = {"kind": verifier_kind[i], "spec": verifier_spec[i]}
        context = None
        if verifier_kind[i] == "tool_outcome" and environments is not None:
            from trajkit.train.tools import end_state

            context = {"end_state": end_state(environments[i], verifier)}
        todo.append(i)
        items.append((verifier, completion_text(completions[i]), context))
    results: list[Any] = [None] * n
    for i, result in zip(todo, verify_many(items, sandbox=sandbox)):
        results[i] = result
    errors = [r is not None and r.verdict == "error" for r in results]
    if log_metric is not None and todo:
        log_metric("verify_error", sum(errors) / len(todo))
    results = [None if failed else r for r, failed in zip(results, errors)]  # an error judged nothing
    passed = [r is not None and r.verdict == "pass" for r in results]
    scored = [r for r in results if r is not None]
    if log_metric is not None and scored:
        log_metric("pass_rate", sum(passed) / len(scored))
    if alpha and any(passed):
        if scorer != "length":
            rate = scorer if callable(scorer) else _load_scorer(scorer)
            picked = [i for i in range(n) if passed[i]]  # only correct answers earn a bonus, so only they are rated
            rated = rate(
                prompts=[prompts[i] for i in picked],
                completions=[completions[i] for i in picked],
                completion_ids=[completion_ids[i] for i in picked] if completion_ids is not None else None,
            )
            c = [None] * n
            for i, value in zip(picked, rated):  # a value outside [0, 1] (NaN, inf, 7 of 10) is no rating
                c[i] = value if isinstance(value, (int, float)) and 0.0 <= value <= 1.0 else None
            if log_metric is not None:
                log_metric("conciseness_unrated", sum(c[i] is None for i in picked) / len(picked))
        elif completion_ids is not None:
            c = length_conciseness([len(ids) for ids in completion_ids], max_length)
        else:  # text completions without token ids: characters stand in for tokens
            c = length_conciseness([len(completion_text(x)) for x in completions], max_length)
        s = anneal(trainer_state, anneal_fraction)
    out: list[float | None] = []
    for i, r in enumerate(results):
        if r is None:
            out.append(None)
        elif passed[i] and alpha and c[i] is not None:
            d = bonus.get(difficulty[i] or "", 0.0)
            out.append(float(r.score) * (1.0 + alpha * float(c[i]) * (s + d)))
        else:
            out.append(float(r.score))
    return out


@functools.cache
def _load_scorer(path: str) -> Callable[..., list[float]]:
    from trajkit.config import load_object

    scorer = load_object(path, "conciseness scorer")
    if not callable(scorer):
        raise UserError(f"conciseness scorer {path!r} is not callable")
    return scorer


def format_reward(prompts: list, completions: list, **_: Any) -> list[float | None]:
    """1.0 when every assistant turn has balanced think tags and no unparsed tool-call markup, and the
    completion ends with a non-empty answer; else 0.0."""
    out: list[float | None] = []
    for completion in completions:
        messages = [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion
        ok = bool(completion_text(completion).strip())
        for m in messages:
            if m.get("role") != "assistant":
                continue
            text = m.get("content") if isinstance(m.get("content"), str) else ""
            opened, closed = text.count("<think>"), text.count("</think>")
            if (
                opened > 1
                or closed > 1
                or (opened and not closed)
                or (opened and text.find("<think>") > text.find("</think>"))
            ):
                ok = False
            if "<tool_call>" in text or "</tool_call>" in text:
                ok = False  # markup the tool-call parser could not read
        out.append(1.0 if ok else 0.0)
    return out


def tool_call_reward(
    prompts: list, completions: list, *, tools_json: list[str] | None = None, **_: Any
) -> list[float | None]:
    """Share of tool calls naming an offered tool with schema-valid arguments; None without tools or calls."""
    import jsonschema

    from trajkit.models.schema_check import PatternError, linear

    out: list[float | None] = []
    for i, completion in enumerate(completions):
        schemas = json.loads(tools_json[i] or "[]") if tools_json else []
        offered = {t["function"]["name"]: t["function"].get("parameters") or {} for t in schemas}
        if not offered or isinstance(completion, str):
            out.append(None)
            continue
        total = valid = 0
        for m in completion:
            if m.get("role") != "assistant":
                continue
            content = m.get("content") if isinstance(m.get("content"), str) else ""
            total += content.count("<tool_call>")  # calls the parser could not read
            for call in m.get("tool_calls") or []:
                total += 1
                fn = call.get("function", call)
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        continue
                schema = offered.get(fn.get("name"))
                if schema is None or not isinstance(args, dict):
                    continue
                try:  # patterns searched in linear time: a server's schema cannot stall training
                    cls = linear(jsonschema.validators.validator_for(schema))
                    cls.check_schema(schema)
                    if next(cls(schema).iter_errors(args), None) is not None:
                        continue
                except (jsonschema.SchemaError, PatternError):
                    continue
                valid += 1
        out.append(valid / total if total else None)
    return out


def build_rewards(
    specs: list[RewardSpec],
    conciseness: Conciseness,
    max_completion_length: int,
    closing: contextlib.ExitStack,
    sandbox: Any = None,
) -> tuple[list[Callable[..., list[float | None]]], list[float]]:
    """The reward functions (settings bound) and their weights, in order.

    What they hold open (a judge model's backend) lives until ``closing`` closes: the training stage's lifetime.
    """
    funcs, weights = [], []
    for spec in specs:
        params = dict(spec.params)
        if spec.name == "correctness":
            scorer: Any = conciseness.scorer
            if scorer == "judge":
                scorer = closing.enter_context(JudgeConciseness(conciseness.judge))
            elif scorer != "length":
                scorer = _load_scorer(scorer)  # a path that does not import fails now, not mid-training
            defaults = {
                "alpha": conciseness.alpha,
                "scorer": scorer,
                "anneal_fraction": conciseness.anneal_fraction,
                "difficulty_bonus": conciseness.difficulty_bonus,
                "max_length": max_completion_length,
            }
            func = functools.partial(correctness_reward, sandbox=sandbox, **{**defaults, **params})
        elif spec.name == "format":
            func = functools.partial(format_reward, **params) if params else format_reward
        elif spec.name == "tool_calls":
            func = functools.partial(tool_call_reward, **params) if params else tool_call_reward
        elif spec.name == "overlong":
            from trl.rewards import get_soft_overlong_punishment

            func = get_soft_overlong_punishment(
                params.get("max_completion_len", max_completion_length),
                params.get("soft_punish_cache", max(1, max_completion_length // 4)),
            )
        else:
            func = load_reward(spec.name, params)
        funcs.append(func)
        weights.append(spec.weight)
    return funcs, weights


def load_reward(path: str, params: dict[str, Any] | None = None) -> Reward:
    """A custom reward from ``package.module:function`` (TRL's signature, ``trajkit.plugins.Reward``), with
    ``params`` bound."""
    from trajkit.config import load_object

    if "." not in path and ":" not in path:
        raise UserError(f"unknown reward {path!r}: use one of {', '.join(BUILTIN)} or a dotted path")
    func = load_object(path, "reward")
    if not callable(func):
        raise UserError(f"reward {path!r} is not callable")
    return functools.partial(func, **params) if params else func
