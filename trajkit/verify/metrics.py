"""pass@k and the difficulty buckets curation assigns from pass@1."""

from __future__ import annotations

DEFAULT_THRESHOLDS = {"hard": 0.25, "medium": 0.75}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from ``n`` samples of which ``c`` passed: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    missing = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) as a product, stable for large n
        missing *= 1.0 - k / i
    return 1.0 - missing


def difficulty(pass_at_1: float, thresholds: dict | None = None) -> str:
    """The difficulty bucket of a task from its pass@1.

    unsolved = 0; hard <= ``hard`` (0.25); medium < ``medium`` (0.75); easy < 1;
    trivial = 1. ``thresholds`` overrides ``hard`` and/or ``medium``.
    """
    bounds = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    unknown = set(bounds) - set(DEFAULT_THRESHOLDS)
    if unknown:
        raise ValueError(f"unknown difficulty threshold(s) {sorted(unknown)}; known: hard, medium")
    if not 0.0 < bounds["hard"] < bounds["medium"] <= 1.0:
        raise ValueError(f"difficulty thresholds need 0 < hard < medium <= 1; got {bounds}")
    if not 0.0 <= pass_at_1 <= 1.0:
        raise ValueError(f"pass@1 must be in [0, 1]; got {pass_at_1}")
    if pass_at_1 <= 0.0:
        return "unsolved"
    if pass_at_1 >= 1.0:
        return "trivial"
    if pass_at_1 <= bounds["hard"]:
        return "hard"
    if pass_at_1 < bounds["medium"]:
        return "medium"
    return "easy"
