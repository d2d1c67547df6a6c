"""The package's imports run one way (DESIGN.md, "Imports run one way"). Every import counts, at any depth
of a module's code: at its top, inside a function, under ``if TYPE_CHECKING``.

A *room* is a folder of the package (``trajkit.envs``) or a module at its top (``trajkit.store``). Rooms sit
in layers, top to bottom:

1. ``cli``: ``trajkit.cli``, the command.
2. the stages: ``synth``, ``curate``, ``train``, ``eval``, ``data_cards``, and the two commands built over them,
   ``view`` (the viewer) and ``demo`` (what ``trajkit demo`` needs beyond the stages);
3. the stage machinery: ``clikit`` (a stage's options as flags), ``pipeline``, ``executors``, ``stages`` (the
   registry, which names the stages as strings), ``runner``;
4. the shared layers: ``envs``, ``verify``, ``models``;
5. the ground: every other module at the top (``store``, ``config``, ``schema``, ``errors``, ``redact``, ...)
   and ``confine`` (the jail: the standard library and itself only, held by tests/confine).

The rules:

- a room imports only rooms of its own layer or of a layer below it: the ground imports nothing above it,
  the shared layers import no stage machinery (``models/`` stands below the runner), no stage and not the
  CLI; nothing imports the CLI;
- a stage imports no other stage (shared code moves down to where both can reach it);
- no circle, among modules or among rooms;
- the layer depth, the most rooms on one import path from ``trajkit.cli`` to the ground, stays below 12
  (the depth the review of issue 33 found).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "trajkit"
LAYERS = (
    ("cli",),
    ("synth", "curate", "train", "eval", "data_cards", "view", "demo"),
    ("clikit", "pipeline", "executors", "stages", "runner"),
    ("envs", "verify", "models"),
)
GROUND = len(LAYERS)
STAGE_LAYER = 1
MAX_DEPTH = 11


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str], source: str | None = None) -> set[str]:
    """Every trajkit module this file (or ``source`` in its place) imports, at any depth of its code."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # ``from pkg import submodule`` imports the submodule; any other name comes from the module itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target != "trajkit":
                found.add(target)
    return found


@functools.cache
def graph() -> dict[str, frozenset[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: frozenset(imports(path, set(files))) for name, path in files.items()}


def room(module: str) -> str:
    """``trajkit.envs.agent`` -> ``envs``; ``trajkit.store`` -> ``store``."""
    return module.split(".")[1] if module.count(".") else ""


def layer(name: str) -> int:
    """A room's layer: 0 for the CLI, larger is lower; the ground is ``GROUND``."""
    return next((i for i, rooms in enumerate(LAYERS) if name in rooms), GROUND)


def rooms(edges: dict[str, frozenset[str]]) -> dict[str, set[str]]:
    """The import graph between rooms (a room's imports of itself left out)."""
    out: dict[str, set[str]] = {}
    for m, targets in edges.items():
        if room(m):
            out.setdefault(room(m), set()).update(room(t) for t in targets if room(t) and room(t) != room(m))
    return out


def cycles(edges: dict[str, set[str]] | dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def climbs(edges: dict[str, frozenset[str]]) -> list[tuple[str, str]]:
    """Imports that break a rule: into a higher layer, into the CLI, or from one stage into another."""
    bad = []
    for m, targets in sorted(edges.items()):
        for t in sorted(targets):
            a, b = room(m), room(t)
            if not a or not b or a == b:
                continue
            if layer(b) < layer(a) or b == "cli" or (layer(a) == layer(b) == STAGE_LAYER):
                bad.append((m, t))
    return bad


def depth(edges: dict[str, set[str]], top: str = "cli") -> list[str]:
    """The longest import path from ``top`` through the (acyclic) room graph, as its rooms."""

    @functools.cache
    def longest(v: str) -> tuple[str, ...]:
        return (v, *max((longest(w) for w in edges.get(v, ())), key=len, default=()))

    return list(longest(top))


def test_no_import_circle():
    assert cycles(graph()) == []


def test_no_circle_between_rooms():
    assert cycles(rooms(graph())) == []


def test_a_circle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_climbs_a_layer_or_crosses_between_stages():
    assert climbs(graph()) == []


def test_climbs_are_found():
    """Each rule catches its own case: the ground reaching up (inside a function too), a shared layer
    reaching the runner, one stage reaching another, anything reaching the CLI."""
    edges = {
        "trajkit.redact": frozenset({"trajkit.envs.config"}),
        "trajkit.models.accounting": frozenset({"trajkit.runner"}),
        "trajkit.data_cards.views": frozenset({"trajkit.train.data", "trajkit.store"}),
        "trajkit.pipeline": frozenset({"trajkit.cli", "trajkit.stages"}),
        "trajkit.envs.solve": frozenset({"trajkit.models", "trajkit.verify"}),
    }
    assert climbs(edges) == [
        ("trajkit.data_cards.views", "trajkit.train.data"),
        ("trajkit.models.accounting", "trajkit.runner"),
        ("trajkit.pipeline", "trajkit.cli"),
        ("trajkit.redact", "trajkit.envs.config"),
    ]
    # a function-local import is an edge like any other
    source = "def f():\n    from trajkit.envs.config import load_servers_config\n"
    assert imports(PACKAGE / "redact.py", set(graph()), source) == {"trajkit.envs.config"}


def test_layer_depth_is_below_the_reviewed_one():
    edges = rooms(graph())
    assert cycles(edges) == []  # a circle has no depth
    path = depth(edges)
    assert len(path) <= MAX_DEPTH, " -> ".join(path)
    assert layer(path[-1]) == GROUND
