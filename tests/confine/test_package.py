"""The jail (``trajkit/confine``) is a package of its own: it imports only the standard library and itself, it is
importable as part of trajkit, and what it starts runs from a folder holding only it, so that no other trajkit code
is reachable there (and, in the sandbox, not even it)."""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from trajkit.confine import start
from trajkit.envs import contain
from trajkit.envs.config import ServerConfig
from trajkit.verify import Sandbox

PACKAGE = Path(start.PACKAGE)
NOT_STANDARD = {("plain.py", "numpy")}  # built on the tests' side only when the solution sent an array (it had numpy)


def foreign_imports(path: Path) -> set[tuple[str, str]]:
    """(file, module) for each import of ``path``, at any depth of its code, that is neither of the standard library
    nor a relative one within this package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [f"{'.' * node.level}{node.module or ''}"]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            inside = name.startswith(".") and not name.startswith("..")
            if not inside and top not in sys.stdlib_module_names and top != "__future__":
                found.add((path.name, name))
    return found


def test_the_jail_imports_only_the_standard_library_and_itself(tmp_path):
    modules = sorted(PACKAGE.glob("*.py"))
    assert {m.name for m in modules} >= {"isolation.py", "worker.py", "launcher.py", "server_zygote.py"}
    assert set().union(*(foreign_imports(m) for m in modules)) == NOT_STANDARD
    sample = tmp_path / "sample.py"  # the check finds what it should
    sample.write_text(
        "import os\nfrom . import harness\n\ndef f():\n    import trajkit.store\n    from .. import cli\n"
    )
    assert foreign_imports(sample) == {("sample.py", "trajkit.store"), ("sample.py", "..")}
    for m in modules:  # and each module is importable as part of trajkit (siblings by relative imports)
        if m.stem != "__main__":
            importlib.import_module(f"trajkit.confine.{m.stem}")


def test_the_folder_holds_only_the_package_and_is_made_again_or_private(tmp_path, monkeypatch):
    folder = start.folder()
    assert sorted(os.listdir(folder)) == ["__main__.py", "confine"]
    assert os.path.realpath(os.path.join(folder, "confine")) == os.path.realpath(PACKAGE)
    assert os.stat(folder).st_uid == os.geteuid() and os.stat(folder).st_mode & 0o077 == 0
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(start, "_private", [])
    shared = start.folder()
    os.remove(os.path.join(shared, "__main__.py"))  # (a cleaning of /tmp, say)
    assert start.folder() == shared and sorted(os.listdir(shared)) == ["__main__.py", "confine"]
    if os.geteuid() == 0:  # the name taken by another user's folder: a folder of this process's own
        shutil.rmtree(shared)
        os.mkdir(shared)
        (Path(shared) / "__main__.py").write_text("print('theirs')")
        os.chown(shared, 65534, 65534)
        private = start.folder()
        assert private != shared and sorted(os.listdir(private)) == ["__main__.py", "confine"]
        assert start.folder() == private and os.listdir(shared) == ["__main__.py"]


def test_servers_launchers_start_from_the_folder_in_isolated_mode_and_leave_it_as_it_was():
    """``-B`` on every start: Python caching the compiled ``__main__.py`` in the folder made it unsound, and the
    next ``folder`` made it again under launchers starting from it (servers failed to start, now and then)."""
    cfg = ServerConfig(command=sys.executable, args=["-c", "pass"])
    argv = contain.wrap("s", cfg, sys.executable, ["-c", "pass"])
    assert argv[:6] == [sys.executable, "-B", "-I", "-S", start.folder(), "launcher"]
    assert argv[argv.index("--") :] == ["--", sys.executable, "-c", "pass"]
    subprocess.run(start.command(sys.executable, "no_such_module"), capture_output=True, check=False, timeout=60)
    assert sorted(os.listdir(start.folder())) == ["__main__.py", "confine"]


PROGRAM = r"""
import importlib, json, os, sys
names = ["trajkit", "trajkit.confine", "confine", *(f"confine.{m}" for m in MODULES), *MODULES]
imported = []
for name in names:
    try:
        importlib.import_module(name)
        imported.append(name)
    except ImportError:
        pass
found = []
for root in ROOTS:
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in ("/proc", "/sys")]
        found += [os.path.join(folder, n) for n in dirs + files if "trajkit" in n or n == "confine" or n in FILES]
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("confine", "trajkit", *MODULES))
print(json.dumps({"imported": imported, "found": found, "loaded": loaded}))
"""


def _look(sandbox: Sandbox, roots: list[str]) -> dict:
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_"))
    files = sorted({"program_zygote.py", "server_zygote.py", "crossing.py", "harness.py", "isolation.py"})
    head = f"MODULES, FILES, ROOTS = {modules!r}, {files!r}, {roots!r}\n"
    r = sandbox.run(head + PROGRAM, timeout_s=60)
    assert r.verdict == "pass", r
    return json.loads(r.stdout)


def test_a_sandbox_program_reaches_no_trajkit_code(sandbox_pool):
    """The workers run ``python -B -s FOLDER worker`` (``-I`` but ``-E``: the pool builds their whole environment,
    and its ``PYTHONHASHSEED`` must hold); a program in the sandbox imports neither trajkit nor the jail, has none
    of their modules loaded, and finds no file of either anywhere."""
    workers = [p.cmdline() for p in psutil.Process().children(recursive=True) if p.cmdline()[-1:] == ["worker"]]
    assert [sys.executable, "-B", "-s", start.folder(), "worker"] in workers
    assert sandbox_pool.protections["mount_namespace"]
    assert _look(sandbox_pool, ["/"]) == {"imported": [], "found": [], "loaded": []}


def test_without_the_sandboxs_root_the_same_program_finds_them():
    """The fallback (no mount namespace) shows the host: the same program imports and finds the jail there, so the
    test above can fail."""
    with Sandbox(workers=1, namespaces=False, drop_privileges=False, cgroups=False, allow_weaker=True) as fallback:
        seen = _look(fallback, [start.folder()])
    assert {"trajkit", "confine", "confine.harness"} <= set(seen["imported"])
    assert os.path.join(start.folder(), "confine") in seen["found"]
