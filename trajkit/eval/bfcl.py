"""BFCL's offline AST categories, read from the ``bfcl-eval`` wheel (data, answers, checker).

Entries are turned into trajkit's OpenAI-tools format the way BFCL's own
OpenAI function-calling handler does it (dots in names become underscores,
BFCL's types map to JSON Schema, the Python-syntax hint is appended), and
predictions are scored with trajkit's scorer (``toolcall.py``). BFCL's own
``ast_checker`` is available too (``official_checker``), so a run reports both.

Only the Python AST categories are supported: the Java and JavaScript ones
need BFCL's string-to-type converters, and multi-turn, memory and web-search
categories need BFCL's executable backends.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajkit.errors import UserError
from trajkit.eval.toolcall import Call, Expected, Verdict, score_calls

AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
CATEGORIES = AST_CATEGORIES + RELEVANCE_CATEGORIES
GROUPS = {
    "simple": ("simple_python",),
    "non_live": ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"),
    "live": (
        "live_simple",
        "live_multiple",
        "live_parallel",
        "live_parallel_multiple",
        "live_irrelevance",
        "live_relevance",
    ),
    "all": CATEGORIES,
}
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."


@dataclass
class Entry:
    """One BFCL test case: the conversation, the functions (BFCL's dialect) and the answer."""

    id: str
    category: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    expected: list[Expected] | None  # None for relevance/irrelevance categories

    def tools(self) -> list[dict[str, Any]]:
        """The functions as OpenAI tools, as BFCL's OpenAI function-calling handler sends them."""
        out = []
        for fn in copy.deepcopy(self.functions):
            fn["parameters"]["type"] = "object"
            fn["parameters"]["properties"] = _openai_properties(fn["parameters"].get("properties") or {})
            out.append({"type": "function", "function": fn})
        return out

    def schemas(self) -> dict[str, dict[str, Any]]:
        return {fn["name"]: fn["parameters"] for fn in self.functions}


def resolve(names: list[str]) -> list[str]:
    """Category names (or the groups simple, non_live, live, all) to BFCL category names."""
    out: list[str] = []
    for name in names:
        for cat in GROUPS.get(name, (name,)):
            if cat not in CATEGORIES:
                known = ", ".join((*GROUPS, *CATEGORIES))
                raise UserError(f"unknown or unsupported BFCL category {name!r}; supported: {known}")
            if cat not in out:
                out.append(cat)
    return out


def data_dir() -> Path:
    """The data folder of the installed bfcl-eval wheel (found without importing it)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("BFCL needs the bfcl-eval wheel: pip install --no-deps bfcl-eval")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def version() -> str:
    from importlib.metadata import version as dist_version

    return dist_version("bfcl-eval")


def load(category: str, limit: int | None = None) -> list[Entry]:
    """A category's entries (the first ``limit`` ones), with their answers."""
    root = data_dir()
    questions = _read_jsonl(_one(root, category))
    answers = {}
    if category in AST_CATEGORIES:
        answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(_one(root / "possible_answer", category))}
    entries = []
    for q in questions[:limit] if limit else questions:
        functions = []
        for fn in copy.deepcopy(q["function"]):
            fn["name"] = sanitize(fn["name"])
            fn["description"] = (fn.get("description") or "") + PYTHON_HINT
            functions.append(fn)
        expected = None
        if category in AST_CATEGORIES:
            expected = [Expected(sanitize(name), accept) for item in answers[q["id"]] for name, accept in item.items()]
        entries.append(Entry(q["id"], category, list(q["question"][0]), functions, expected))
    return entries


def sanitize(name: str) -> str:
    """OpenAI tool names cannot hold dots; BFCL's OpenAI handler replaces them with underscores."""
    return name.replace(".", "_")


def score(entry: Entry, calls: list[Call], malformed: int = 0) -> Verdict:
    """Score a model's calls on one entry with trajkit's scorer, BFCL's relevance rules included.

    ``malformed`` counts calls whose arguments were not a JSON object: BFCL
    cannot decode such output, which fails an AST entry and, for
    irrelevance, counts as no call.
    """
    if entry.expected is None:
        called = bool(calls) and not malformed
        if entry.category == "live_relevance":
            return Verdict(called, called, None, None if called else "no_call")
        return Verdict(not called, not called, None, "should_abstain" if called else None)
    if malformed:
        return Verdict(False, False, None, "malformed_call", f"{malformed} call(s) without JSON object arguments")
    return score_calls(calls, entry.expected, entry.schemas())


def official_checker() -> Callable[[Entry, list[Call]], bool]:
    """BFCL's own ``ast_checker`` as ``check(entry, calls) -> valid``, for AST categories.

    ``bfcl_eval.constants.model_config`` imports every vendor SDK BFCL
    supports only to read one per-model flag (whether dots in names become
    underscores). Names reach the checker already sanitized, so that flag is
    never read: when the module is not importable it is provided with an
    empty mapping, which loads the checker without those SDKs.
    """
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.MODEL_CONFIG_MAPPING = {}
        sys.modules[name] = stub
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    def check(entry: Entry, calls: list[Call]) -> bool:
        answers = [{e.name: e.accept} for e in entry.expected or []]
        output = [{c.name: c.arguments} for c in calls]
        result = ast_checker(entry.functions, output, answers, Language.PYTHON, entry.category, "trajkit")
        return bool(result["valid"])

    return check


def _one(folder: Path, category: str) -> Path:
    pattern = re.compile(rf"BFCL_v(\d+)_{re.escape(category)}\.json")
    found = sorted((int(m[1]), p) for p in folder.iterdir() if (m := pattern.fullmatch(p.name)))
    if not found:
        raise UserError(f"BFCL data for {category!r} not found in {folder}")
    return found[-1][1]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _openai_properties(props: dict[str, Any]) -> dict[str, Any]:
    """BFCL's types to JSON Schema, as ``bfcl_eval.model_handler.utils._cast_to_openai_type`` does."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI as MAP

    for spec in props.values():
        declared = spec.get("type")
        if declared == "float":
            spec["format"] = "float"
            spec["description"] = (spec.get("description") or "") + " This is a float type value."
        spec["type"] = MAP.get(declared, "string") if declared is not None else "string"
        if spec["type"] in ("array", "object"):
            if "properties" in spec:
                spec["properties"] = _openai_properties(spec["properties"])
            elif "items" in spec:
                items = spec["items"]
                items["type"] = MAP.get(items.get("type"), "string")
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = MAP.get(items["items"].get("type"), "string")
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _openai_properties(items["properties"])
    return props
