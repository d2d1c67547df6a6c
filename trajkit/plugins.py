"""The plug-in points: the signature user code is held to at each, and the one way custom filters are called.

Each point is a dotted path (``pkg.module:name``) in a stage's config, loaded when the stage starts
(``config.load_object``). Its signature is a ``Protocol`` here, so a type checker (mypy, pyright) holds a
plug-in to it; declare the function as the point's type::

    def no_lists(row: dict[str, Any]) -> str | None: ...

    _: RowFilter = no_lists  # flagged by the checker if no_lists does not fit

This module imports nothing of trajkit's at its top (but ``errors``), so a checker reads it without reading
the package (``[tool.mypy]`` in ``pyproject.toml``): the objects
trajkit passes in (a backend, a tool environment) are typed ``Any`` here and named in each docstring.
``examples/plugins.py`` has one of each (``docs/extending.md`` lists them with their tests).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any, Protocol

from trajkit.errors import UserError


class RolloutFn(Protocol):
    """``rollout_fn:`` of ``synth rollouts`` and ``synth extend`` (``rollout:`` of ``curate passk``): one
    episode, as a complete ``trajectories`` row. Called ``await fn(task, backend, env, params, limits, **kw)``
    with a ``trajkit.models.Backend``, an ``envs.env.ToolEnv``, ``models.SamplingParams`` and
    ``envs.agent.AgentLimits``; ``kw`` carries ``system_prompt``, ``history``, ``rollout_index``, ``seed``,
    ``policy_version`` and ``parent_id`` as ``envs.agent.run_episode`` takes them (a custom function may call
    it). The stage sets the row's ``traj_id`` to its own id of the episode (``envs.agent.staged_episode``), so
    the function need not know its stage."""

    def __call__(
        self, task: dict[str, Any], backend: Any, env: Any, params: Any, limits: Any, /, **kw: Any
    ) -> Awaitable[dict[str, Any]]: ...


class Verifier(Protocol):
    """A task's ``verifier: {kind: custom, spec: {"path": ...}}``: ``fn(completion, spec, context)`` returns a
    ``trajkit.verify.Result``, a score in [0, 1] or a bool."""

    def __call__(self, completion: str, spec: dict[str, Any], context: dict[str, Any], /) -> Any: ...


class RowFilter(Protocol):
    """``--custom`` of ``curate filter`` (a task row with its pass@k annotation and sample scores) and of
    ``synth filter`` (a trajectory row): None keeps the row, a string is the reason it is rejected."""

    def __call__(self, row: dict[str, Any], /) -> str | None: ...


class Reward(Protocol):
    """A curriculum stage's ``rewards: [{name: pkg.mod:fn}]``: TRL's reward function, called by keyword
    (``completion_ids``, ``trainer_state`` and the dataset's columns among ``kwargs``); None is no reward."""

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]: ...


class TaskSource(Protocol):
    """``curate import --source-fn``: ``fn(**source_params)`` yields records, mapped like a file's (``--map``)."""

    def __call__(self, **params: Any) -> Iterable[dict[str, Any]]: ...


def load_filters(paths: Iterable[str]) -> list[tuple[str, RowFilter]]:
    """The custom filters at ``paths``, as (path, function); one that does not import or is not callable is a
    user error, before any row."""
    from trajkit.config import load_object

    out = []
    for path in paths:
        fn = load_object(path, "custom filter")
        if not callable(fn):
            raise UserError(f"custom filter {path!r} is not callable")
        out.append((path, fn))
    return out


def apply_filter(name: str, fn: RowFilter, row: dict[str, Any], what: str, row_id: str) -> str | None:
    """``fn(row)``: None or a reason. A filter that raises, or returns anything but None or a non-empty string,
    is a user error naming the filter and the row (``what`` and ``row_id``: "task", its id)."""
    try:
        reason = fn(row)
    except Exception as e:  # noqa: BLE001 - a bug in a user's filter: stop with one clear line
        raise UserError(f"filter {name} failed on {what} {row_id}: {type(e).__name__}: {e}") from None
    if reason is not None and (not isinstance(reason, str) or not reason):
        raise UserError(f"filter {name} returned {reason!r} for {what} {row_id}; expected None or a reason string")
    return reason
