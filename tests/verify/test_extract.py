"""Code extraction from completions, pass@k and difficulty buckets (no sandbox needed)."""

from __future__ import annotations

import math

import pytest

from trajkit.verify import difficulty, extract_code, pass_at_k, unit_test_program
from trajkit.verify.extract import defines, without_definition, without_main_guard

PROMPT = '''import math


def helper(x):
    return x * 2


def add(a: int, b: int) -> int:
    """Add two numbers."""
'''


def test_fenced_block_defining_the_entry_point_wins():
    completion = (
        "Here is an example:\n```python\nprint(add(1, 2))\n```\n"
        "And the solution:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
    )
    assert extract_code(completion, "add") == "def add(a, b):\n    return a + b"
    assert extract_code(completion) == "print(add(1, 2))"


def test_unterminated_fence_and_reasoning_are_handled():
    completion = "<think>maybe ```python\nwrong()\n```</think>\n```py\ndef add(a, b):\n    return a + b"
    assert extract_code(completion, "add") == "def add(a, b):\n    return a + b"
    assert extract_code("<think>```python\ndef add(a, b):\n    return a + b\n```") == ""  # cut off while reasoning


def test_text_without_python_fence_is_the_code():
    completion = "    return a + b\n"
    assert extract_code(completion, "add") == completion
    assert extract_code("```text\nnot code\n```") == "```text\nnot code\n```"


def test_full_function_replaces_the_prompt_def_but_keeps_imports_and_helpers():
    completion = "```python\ndef add(a, b):\n    return helper(a) // 2 + b + 0 * math.pi\n```"
    program = unit_test_program(completion, "assert add(2, 3) == 5", PROMPT, "add")
    assert "import math" in program and "def helper" in program
    assert program.count("def add") == 1
    assert '"""Add two numbers."""' not in program


def test_continuation_is_appended_to_the_prompt():
    program = unit_test_program("    return a + b\n", "def check(f):\n    assert f(1, 2) == 3\n", PROMPT, "add")
    assert program.startswith(PROMPT + "    return a + b\n")
    assert program.rstrip().endswith("check(add)")


def test_main_guard_is_dropped_and_mbpp_style_runs_code_then_asserts():
    code = "def f(x):\n    return x\n\nif __name__ == '__main__':\n    print(f(input()))\n"
    assert "input" not in without_main_guard(code)
    program = unit_test_program(code, "assert f(3) == 3")
    assert program == "def f(x):\n    return x\n\nassert f(3) == 3\n"


def test_defines_and_without_definition():
    assert defines("def add(a, b): pass", "add")
    assert defines("add = lambda a, b: a + b", "add")
    assert not defines("def other(): pass\n", "add")
    assert defines("def add(a, b):\n  return (\n", "add")  # unparsable: falls back to a pattern
    assert without_definition(PROMPT, "add").rstrip().endswith("return x * 2")
    assert without_definition("def add(\n", "add") == ""


def test_pass_at_k_matches_the_closed_form():
    for n, c, k in [(10, 3, 1), (10, 3, 5), (20, 0, 5), (5, 5, 5), (100, 37, 10)]:
        expected = 1.0 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(expected)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 2, 3) == 1.0  # fewer failures than draws
    with pytest.raises(ValueError):
        pass_at_k(5, 6, 1)
    with pytest.raises(ValueError):
        pass_at_k(5, 1, 6)


@pytest.mark.parametrize(
    "p, bucket",
    [
        (0.0, "unsolved"),
        (0.1, "hard"),
        (0.25, "hard"),
        (0.5, "medium"),
        (0.75, "easy"),
        (0.99, "easy"),
        (1.0, "trivial"),
    ],
)
def test_difficulty_default_buckets(p, bucket):
    assert difficulty(p) == bucket


def test_difficulty_thresholds_are_configurable_and_checked():
    assert difficulty(0.3, {"hard": 0.4}) == "hard"
    assert difficulty(0.8, {"medium": 0.9}) == "medium"
    with pytest.raises(ValueError):
        difficulty(0.5, {"easy": 0.9})
    with pytest.raises(ValueError):
        difficulty(0.5, {"hard": 0.8, "medium": 0.5})
    with pytest.raises(ValueError):
        difficulty(1.5)
