"""The code version every node must share: the package version plus a hash of its source files, so a git
commit made while a cluster runs changes nothing and an edited source file does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import trajkit
from trajkit import __version__
from trajkit.runner import code_version, source_hash

PACKAGE = Path(trajkit.__file__).parent


def test_the_code_version_hashes_the_source_not_the_git_commit(tmp_path):
    copy = tmp_path / "trajkit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert code_version() == f"{__version__}+{source_hash(copy)}"

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a commit while the cluster runs"], check=True)
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "runner.cpython-313.pyc").write_bytes(b"compiled")
    assert source_hash(copy) == source_hash(PACKAGE)

    runner = copy / "runner.py"
    runner.write_text(runner.read_text() + "\n# edited\n")
    edited = source_hash(copy)
    assert edited != source_hash(PACKAGE)
    runner.rename(copy / "runner2.py")  # the same bytes under another name: another package
    assert source_hash(copy) != edited
