"""trajkit.verify: the sandbox and the verifiers that curation, rewards and evaluation judge through.

``verify(verifier, completion, context, sandbox)`` judges one completion with a
task's verifier (unit tests, stdin/stdout cases, math answers, tool outcomes,
a custom function, or a caller-supplied judge) and returns a ``Result``;
``verify_many`` does it for many in parallel. Code runs in ``Sandbox``, a pool
of confined worker processes (docs/sandbox.md), or in ``E2BSandbox``;
``make_sandbox(kind, workers)`` picks one for a stage's ``sandbox:`` setting.
``check_custom_verifiers`` imports the custom verifiers tasks name, up front.
"""

from trajkit.verify.backends import SandboxKind, make_sandbox
from trajkit.verify.e2b_backend import E2BSandbox
from trajkit.verify.extract import extract_code, unit_test_program
from trajkit.verify.metrics import difficulty, pass_at_k
from trajkit.verify.result import Result, RunResult
from trajkit.verify.sandbox import Sandbox, SandboxUnavailable, default_sandbox
from trajkit.verify.verifiers import SANDBOXED_KINDS, VERIFIERS, check_custom_verifiers, verify, verify_many

__all__ = [
    "SANDBOXED_KINDS",
    "VERIFIERS",
    "E2BSandbox",
    "Result",
    "RunResult",
    "Sandbox",
    "SandboxKind",
    "SandboxUnavailable",
    "check_custom_verifiers",
    "default_sandbox",
    "difficulty",
    "extract_code",
    "make_sandbox",
    "pass_at_k",
    "unit_test_program",
    "verify",
    "verify_many",
]
