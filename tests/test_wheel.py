"""The wheel is the product: built, installed without the checkout, it synthesizes (issue 34 item 6)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.fixtures.synth import model

ROOT = Path(__file__).resolve().parents[1]

# runs the CLI with an audit hook that keeps every path opened under the checkout
AUDITED = """
import json, os, sys
checkout, seen_file, args = sys.argv[1], sys.argv[2], sys.argv[3:]
deps = sys.prefix + os.sep  # the test environment's dependencies (a .venv inside the checkout)
seen = []
def hook(event, a):
    if event == "open" and isinstance(a[0], (str, bytes)):
        path = os.path.abspath(os.fsdecode(a[0]))
        if (path == checkout or path.startswith(checkout + os.sep)) and not path.startswith(deps):
            seen.append(path)
sys.addaudithook(hook)
import trajkit
from trajkit.cli import main
sys.argv = ["trajkit", *args]
try:
    main()
finally:
    with open(seen_file, "w") as f:
        json.dump({"trajkit": trajkit.__file__, "opened": seen}, f)
"""


def test_the_installed_wheel_synthesizes_without_the_checkout(tmp_path, calculator_rows, model_server):
    source = tmp_path / "source"  # built from a copy: a build leaves build/ and egg-info folders behind
    shutil.copytree(ROOT / "trajkit", source / "trajkit", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", source], check=True)
    [wheel] = (tmp_path / "dist").glob("trajkit-*.whl")
    prefix = tmp_path / "prefix"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--no-compile", "--target", prefix, wheel], check=True)

    work = tmp_path / "work"  # the user's folder: a servers file and a pipeline, nothing of the checkout
    work.mkdir()
    (work / "servers.json").write_text(json.dumps({"mcpServers": {"calculator": {"url": calculator_rows[0]["url"]}}}))
    m = model(model_server)
    stages = [
        {"stage": "synth.harvest", "config": {"servers": "${here}/servers.json"}},
        {"stage": "synth.tasks", "config": {"model": m, "modes": ["single_tool"], "requests_per_mode": 2, "k": 2}},
        {"stage": "synth.rollouts", "config": {"model": m, "pool_size": 1}},
        {"stage": "synth.judge", "config": {"model": m}},
    ]
    (work / "pipeline.yaml").write_text(json.dumps({"stages": stages}))
    env = {**os.environ, "PYTHONPATH": str(prefix)}
    cmd = [sys.executable, "-c", AUDITED, str(ROOT), str(tmp_path / "seen.json"), "run", "pipeline.yaml", "-r", "run"]
    result = subprocess.run(cmd, check=False, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert Path(seen["trajkit"]).is_relative_to(prefix)
    assert seen["opened"] == []
    manifests = sorted((work / "run" / "_stages").glob("*/_manifest.json"))
    assert [p.parent.name for p in manifests] == ["harvest", "judge", "rollouts", "tasks"]
    counts = {p.parent.name: json.loads(p.read_text())["outputs"] for p in manifests}
    assert counts["tasks"]["tasks"] >= 1 and counts["rollouts"]["trajectories"] >= 1
