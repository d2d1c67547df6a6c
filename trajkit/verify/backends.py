"""Choosing where verification code runs: the local ``Sandbox`` or e2b cloud sandboxes.

Stages that verify code take a ``sandbox:`` config field (``SandboxKind``,
default ``local``; not part of the config hash: where code runs does not change
a verdict's meaning) and ``workers``, and run with ``make_sandbox``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from trajkit.concurrency import Share

SandboxKind = Literal["local", "e2b"]
SANDBOX_HELP = (
    "Where verification code runs: local (confined worker processes) or e2b (cloud sandboxes; "
    "needs the e2b extra and E2B_API_KEY)."
)
E2B_WORKERS = 4


@contextlib.contextmanager
def make_sandbox(kind: SandboxKind = "local", workers: int | None = None, share: Share | None = None) -> Iterator[Any]:
    """A started sandbox of ``kind`` for the ``with`` block, closed after it.

    ``local`` with ``workers`` unset is the process-wide ``default_sandbox(share)``
    (started once, shared, closed at exit); with ``workers``, a pool of that
    many. ``share`` (a stage's ``StageContext.share``) gives the CPUs a local pool
    sizes itself from. ``e2b`` is an
    ``E2BSandbox`` of ``workers`` remote sandboxes (default 4); a missing extra or
    key is a UserError here, before any work.
    """
    from trajkit.verify.e2b_backend import E2BSandbox
    from trajkit.verify.sandbox import Sandbox, default_sandbox

    if kind == "e2b":
        with E2BSandbox(workers=workers or E2B_WORKERS) as sandbox:
            yield sandbox
    elif kind == "local" and workers is None:
        yield default_sandbox(share)
    elif kind == "local":
        with Sandbox(workers=workers, share=share) as sandbox:
            yield sandbox
    else:
        raise ValueError(f"unknown sandbox kind {kind!r}; known: local, e2b")


@contextlib.contextmanager
def sandbox_for(
    kinds: Iterable[str | None], kind: SandboxKind = "local", workers: int | None = None, share: Share | None = None
) -> Iterator[Any]:
    """``make_sandbox(kind, workers, share)`` when one of the verifier ``kinds`` runs code, else None: a stage
    whose tasks need no sandbox starts none."""
    from trajkit.verify.verifiers import SANDBOXED_KINDS

    if SANDBOXED_KINDS.isdisjoint(kinds):
        yield None
        return
    with make_sandbox(kind, workers, share) as sandbox:
        yield sandbox
