"""Small builders shared by the curate tests: task rows, MBPP files, stage runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trajkit.config import build
from trajkit.runner import run_stage
from trajkit.schema import content_id
from trajkit.stages import get_stage
from trajkit.store import Store

MBPP_RECORDS = [
    {
        "task_id": 11,
        "text": "Write a python function to remove first and last occurrence of a given character from the string.",
        "code": "def remove_Occ(s,ch):\n    s = s.replace(ch, '', 1)\n    s = s[::-1].replace(ch, '', 1)[::-1]\n    return s",
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": ['assert remove_Occ("hellolloll","l") == "helollol"'],
    },
    {
        "task_id": 12,
        "text": "Write a function to sort a given matrix in ascending order according to the sum of its rows.",
        "code": "def sort_matrix(M):\n    return sorted(M, key=sum)",
        "test_list": [
            "assert sort_matrix([[1, 2, 3], [2, 4, 5], [1, 1, 1]])==[[1, 1, 1], [1, 2, 3], [2, 4, 5]]",
            "assert sort_matrix([[5,8,9],[6,4,3],[2,1,4]])==[[2, 1, 4], [6, 4, 3], [5, 8, 9]]",
        ],
        "test_setup_code": "import math",
        "challenge_test_list": [],
    },
]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run(store: Store, kind: str, name: str | None = None, **config: Any) -> dict[str, Any]:
    """Run one stage in-process, quietly; returns its manifest."""
    spec = get_stage(kind)
    return run_stage(store, spec, build(spec.config, config), name=name, quiet=True)


def task(qid: str, question: str, source: str = "src", **extra: Any) -> dict[str, Any]:
    """A minimal imported task row."""
    return {
        "task_id": content_id(source, qid),
        "source_id": qid,
        "source": source,
        "question": question,
        "mode": "imported",
        "verifier": {"kind": "math", "spec": json.dumps({"answer": "1"})},
        **extra,
    }
