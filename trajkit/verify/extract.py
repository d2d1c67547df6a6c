"""Turn a model's completion into the program a code verifier runs.

The rules (also in docs/sandbox.md):

1. Reasoning is dropped: text up to the last ``</think>`` is ignored, and so is
   a ``<think>`` that never closes (a truncated completion), to the end.
2. Fenced code wins: among ```` ```python ```` / ```` ```py ```` / unlabeled
   fenced blocks, the first that defines the entry point, else the first one.
   An unterminated fence (a truncated completion) runs to the end. Without a
   Python block the whole text is the code.
3. HumanEval style (the spec has a ``prompt``): if the code defines the entry
   point at top level, the program is the prompt *without* the entry point's
   own definition (its imports and helper functions stay) followed by the
   code; otherwise the code is a continuation of the prompt's function body and
   the program is ``prompt + code``.
4. For unit tests, top-level ``if __name__ == "__main__":`` blocks are removed
   from the completion's code (demo code must not read stdin or print).
5. The test code follows; when it defines ``check`` and there is an entry
   point, ``check(entry_point)`` is called last. MBPP style (no prompt) runs
   the code then the asserts.
6. The solution and the tests run in two processes (``unit_test_parts``):
   the tests, with the prompt's own helpers (never the completion's), call
   the solution's functions through stand-ins and get plain built-in values back.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import threading

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL)
_PYTHON_LABELS = {"", "python", "py", "python3", "py3"}
# CPython 3.11 keeps ast.parse's recursion depth in shared module state: parses in concurrent
# verifier threads can fail with "SystemError: AST constructor recursion depth mismatch" (gh-106905)
_PARSE_LOCK = threading.Lock()


def strip_reasoning(text: str) -> str:
    """The final answer of a completion: what follows the last ``</think>``, less a ``<think>`` left open."""
    return text.rpartition("</think>")[2].partition("<think>")[0]


def extract_code(completion: str, entry_point: str | None = None) -> str:
    """The code in a completion: a fenced Python block (the one defining ``entry_point`` first) or the text."""
    text = strip_reasoning(completion)
    blocks = [code for label, code in _FENCE.findall(text) if label.lower() in _PYTHON_LABELS]
    if not blocks:
        return text
    if entry_point:
        for code in blocks:
            if defines(code, entry_point):
                return code
    return blocks[0]


def defines(code: str, name: str) -> bool:
    """Whether ``code`` defines ``name`` at top level (a def, class or assignment)."""
    tree = parse_python(code)
    if tree is None:
        return re.search(rf"^(async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None
    return any(name in _bound_names(node) for node in tree.body)


def without_definition(prompt: str, name: str) -> str:
    """``prompt`` minus its top-level definition of ``name`` (with decorators); everything else stays."""
    tree = parse_python(prompt)
    lines = prompt.splitlines(keepends=True)
    if tree is None:
        match = re.search(rf"^(async\s+)?def\s+{re.escape(name)}\s*\(", prompt, re.MULTILINE)
        return prompt[: match.start()] if match else prompt
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            return "".join(lines[:start] + lines[node.end_lineno :])
    return prompt


def without_main_guard(code: str) -> str:
    """``code`` minus its top-level ``if __name__ == "__main__":`` blocks."""
    tree = parse_python(code)
    if tree is None:
        return code
    lines = code.splitlines(keepends=True)
    for node in reversed(tree.body):
        if isinstance(node, ast.If) and _is_main_guard(node.test):
            del lines[node.lineno - 1 : node.end_lineno]
    return "".join(lines)


def unit_test_program(completion: str, test: str, prompt: str | None = None, entry_point: str | None = None) -> str:
    """The program a ``unit_tests`` verifier runs for ``completion`` (rules in the module docstring) as one text."""
    solution, tests, _ = unit_test_parts(completion, test, prompt, entry_point)
    return solution.rstrip("\n") + "\n\n" + tests


def unit_test_parts(
    completion: str, test: str, prompt: str | None = None, entry_point: str | None = None
) -> tuple[str, str, list[str]]:
    """The two programs a unit-test run is made of, and the names that cross between them.

    The *solution* (the prompt with the completion) runs in one process; the
    *tests* (the prompt's own helpers, the test code, the final ``check``) run
    in another, where each of ``names`` (the entry point and every function
    of the completion the tests call) is a stand-in that calls into the solution's
    process and gets back plain built-in values.
    """
    code = without_main_guard(extract_code(completion, entry_point))
    if prompt and entry_point and defines(code, entry_point):
        solution = without_definition(prompt, entry_point).rstrip("\n") + "\n\n" + code
    elif prompt:
        solution = prompt + code
    else:
        solution = code
    helpers = without_definition(prompt, entry_point) if prompt and entry_point else (prompt or "")
    tests = (helpers.rstrip("\n") + "\n\n" if helpers.strip() else "") + test.rstrip("\n") + "\n"
    if entry_point and defines(test, "check"):
        tests += f"\ncheck({entry_point})\n"
    wanted = _free_names(tests) | ({entry_point} if entry_point and not defines(tests, entry_point) else set())
    return solution.rstrip("\n") + "\n", tests, sorted(wanted)


def _free_names(code: str) -> set[str]:
    """Names ``code`` reads but binds nowhere and that are not built-ins: those the solution must define."""
    tree = parse_python(code)
    if tree is None:
        return set()
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read - bound - set(dir(builtins))


@functools.lru_cache(maxsize=4096)  # pass@k re-reads the same prompts and tests k times
def parse_python(code: str) -> ast.Module | None:
    """The module's syntax tree (None if it does not parse), one parse at a time (gh-106905), cached."""
    try:
        with _PARSE_LOCK:
            return ast.parse(code)
    except (SyntaxError, ValueError):
        return None


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {t.id for t in targets if isinstance(t, ast.Name)}
    return set()


def _is_main_guard(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]
