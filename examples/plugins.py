"""One plug-in of each kind, typed against ``trajkit.plugins`` so that a type checker holds each to its point's
signature (``mypy examples/plugins.py``; ``tests/test_plugins.py`` runs it, and runs each plug-in through the
loader its stage uses). Use them by dotted path, e.g. ``trajkit curate filter --custom examples.plugins:no_lists``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trajkit.plugins import Reward, RolloutFn, RowFilter, TaskSource, Verifier


async def careful_rollout(
    task: dict[str, Any], backend: Any, env: Any, params: Any, limits: Any, /, **kw: Any
) -> dict[str, Any]:
    """``--rollout-fn``: the standard agent loop with a fixed system prompt."""
    from trajkit.envs.agent import run_episode

    row: dict[str, Any] = await run_episode(
        task, backend, env, params, limits, **{**kw, "system_prompt": "Be careful."}
    )
    return row


def exact_answer(completion: str, spec: dict[str, Any], context: dict[str, Any], /) -> bool:
    """A custom verifier: the completion, stripped, is the spec's ``answer``."""
    return completion.strip() == str(spec.get("answer", "")).strip()


def no_lists(row: dict[str, Any], /) -> str | None:
    """A task filter: reject questions that mention lists."""
    return "mentions_list" if "list" in (row.get("question") or "").lower() else None


def short_answers(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A reward: 1 for a completion of at most 200 characters, else 0."""
    texts = [c if isinstance(c, str) else (c[-1].get("content") or "") for c in completions]
    return [1.0 if len(t) <= 200 else 0.0 for t in texts]


def sums(count: int = 3, **params: Any) -> Iterator[dict[str, Any]]:
    """A task source: ``count`` sums, answered by the math verifier (``--map question=problem``)."""
    for i in range(1, int(count) + 1):
        yield {"id": f"sum-{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)}


# each plug-in declared as its point's type: a checker flags one that does not fit
_rollout: RolloutFn = careful_rollout
_verifier: Verifier = exact_answer
_filter: RowFilter = no_lists
_reward: Reward = short_answers
_source: TaskSource = sums
