"""What a verifier returns (``Result``) and what one sandboxed run returns (``RunResult``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from trajkit.schema import VERDICTS

TAIL_CHARS = 2000


@dataclass
class Result:
    """A verifier's judgement of one completion: a score in [0, 1], a verdict, and why."""

    score: float  # in [0, 1]
    verdict: str  # one of trajkit.schema.VERDICTS: pass, fail, timeout, memory, error
    details: dict = field(default_factory=dict)  # JSON-able: per-case results, reasons
    runtime_s: float = 0.0
    output_tail: str = ""  # capped tail of stdout/stderr

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        if not (isinstance(self.score, (int, float)) and math.isfinite(self.score) and 0.0 <= self.score <= 1.0):
            raise ValueError(f"score {self.score!r} is not a number in [0, 1]")
        self.score = float(self.score)

    @classmethod
    def error(cls, reason: str, **details) -> Result:
        """A verdict of ``error``: the completion could not be judged (bad spec, missing input, crash)."""
        return cls(0.0, "error", {"reason": reason, **details})

    def details_json(self) -> str:
        """``details`` as JSON text, as the samples table stores it."""
        return json.dumps(self.details, default=str, ensure_ascii=False)


@dataclass
class RunResult:
    """How one program ended in the sandbox.

    ``verdict`` is ``pass`` when it exited with status 0, ``fail`` on a non-zero
    status, an uncaught exception, a fatal signal or too much output,
    ``timeout``/``memory`` when a limit stopped it, and ``error`` when the
    sandbox itself failed. ``finished`` is true only when the program's last
    statement ran without raising — a program that exits early with status 0
    passes as a process but not as a test suite.
    """

    verdict: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    signal: int | None = None
    finished: bool = False
    exception: str | None = None
    reason: str = ""
    runtime_s: float = 0.0

    def tail(self, chars: int = TAIL_CHARS) -> str:
        """The last ``chars`` characters of stdout then stderr."""
        text = self.stdout + (("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr)
        return text[-chars:]
