"""No import circle among trajkit.train's modules, local (function-level) imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import trajkit.train

TRAIN = Path(trajkit.train.__file__).parent


def imports(path: Path) -> set[str]:
    """The trajkit.train modules a file imports anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out |= {
            n.split(".")[2]
            for n in names
            if n.startswith("trajkit.train.") and (TRAIN / f"{n.split('.')[2]}.py").is_file()
        }
    return out


def test_no_import_circle_in_train():
    graph = {p.stem: imports(p) - {p.stem} for p in TRAIN.glob("*.py")}
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == 1:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(module) :] + [module]))
        if state.get(module) == 2:
            return
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            visit(dep, path + [module])
        state[module] = 2

    for module in sorted(graph):
        visit(module, [])
