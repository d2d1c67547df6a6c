"""The two kinds of failure trajkit distinguishes at its edges.

A UserError is bad input (a missing file, a bad config, a wrong schema): the
CLI prints its one-line message and exits 2. A fault inside a run (a tool
crash, a bad model output) is not an exception at all: it becomes a row with a
status and a reason.
"""


class UserError(Exception):
    """Bad input from the user: one clear line, exit status 2, no traceback."""

    exit_code = 2


class StageStopped(Exception):
    """A stage stopped cleanly before finishing (a budget cap): rerun to resume."""

    exit_code = 3


class Fenced(StageStopped):
    """A newer run of the same stage shard took it over: this run's uncommitted rows are discarded and it stops."""
