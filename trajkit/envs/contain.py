"""Which stdio MCP servers run contained, and the command that contains one for one trajectory.

``wrap`` gives the arguments (after ``python``) of the launcher (``trajkit/confine/launcher.py``, which holds
what runs contained: namespaces, a read-only host with copy-on-write layers, caps) for one server's instance:
the folders it may write (``writable_paths``: paths named in its args/env/cwd, its home, /tmp), its network,
its disk and memory caps, and where its layers are kept (``--keep-env-state``). ``enabled`` says whether
servers run contained here: a machine that cannot contain them stops the start with one line, unless
``--allow-weaker-sandbox`` was passed (docs/sandbox.md).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

from trajkit.confine import isolation as iso
from trajkit.confine import launcher, start

if TYPE_CHECKING:
    from trajkit.envs.config import ServerConfig

ENV_OFF = "TRAJKIT_UNCONTAINED"  # "1": servers run on the host as they are (tests of the bare transport)
ENV_KEEP = "TRAJKIT_KEEP_ENV_STATE"  # a folder (set by the CLI's --keep-env-state): each instance's writes kept there
DISK_MB = 512
MEMORY_MB = 2048


def writable_paths(
    args: list[str], env: dict[str, str], cwd: str | None, home: str | None, nested: bool = False
) -> list[str]:
    """The folders a server may write: absolute paths in args/env/cwd (a file's folder), home and /tmp,
    outermost first. A folder inside another is left to the outer one's overlay unless ``nested`` (in a
    user namespace an overlay cannot copy up a folder whose owner is not mapped there, root's /tmp, say,
    so each named folder gets an overlay of its own)."""
    found = ["/tmp"]
    for value in [*args, *env.values(), cwd or "", home or ""]:
        for part in value.split(os.pathsep) if value.startswith("/") else []:
            path = os.path.realpath(part)
            folder = path if os.path.isdir(path) else os.path.dirname(path)
            while folder != "/" and not os.path.isdir(folder):
                folder = os.path.dirname(folder)
            if folder != "/" and not folder.startswith(launcher.SKIP_RO):
                found.append(folder)
    ordered = sorted(set(found), key=lambda p: (len(p), p))
    if nested:
        return ordered
    outer = []
    for path in ordered:
        if not any(path == o or path.startswith(o + "/") for o in outer):
            outer.append(path)
    return outer


def enabled() -> bool:
    """Whether stdio servers run contained; a machine that cannot stops the start (one line) unless
    ``--allow-weaker-sandbox`` was passed."""
    if os.environ.get(ENV_OFF) == "1":
        return False
    missing = launcher.missing()
    iso.require("per-trajectory server containment", missing)
    return missing is None


# the folders package runners download a server into (npx, uvx and uv, bunx): written through by the
# one start that warms them (harvest's), read by every other instance as part of the read-only host
PACKAGE_CACHES = (".npm", ".cache/uv", ".local/share/uv", ".bun/install/cache")


def _caches(home: str) -> list[str]:
    """The package caches uvx/npx write to while starting a server: private layers even for a read-only one."""
    return [p for p in (os.path.join(home, d) for d in (".cache", ".npm", ".local")) if os.path.isdir(p)]


def wrap(
    name: str, cfg: ServerConfig, command: str, args: list[str], readonly: bool = False, warm_caches: bool = False
) -> list[str]:
    """The command line of the launcher that runs ``command args`` contained; ``readonly``:
    the server sees the whole filesystem read-only (a stateless server shared by trajectories);
    ``warm_caches``: the package caches (``PACKAGE_CACHES``) are written through to the host, so what
    this start downloads is there for every later instance (harvest's start, which serves no trajectory)."""
    from trajkit.envs.config import child_environment

    if shutil.which(command) is None:  # as a bare spawn would fail, before any namespace is made
        raise FileNotFoundError(f"[Errno 2] No such file or directory: {command!r}")
    env = child_environment(cfg)
    home = os.path.expanduser("~")
    keep = None if readonly else os.environ.get(ENV_KEEP)
    if keep:
        keep = tempfile.mkdtemp(prefix=f"{name}-", dir=keep)
    spec = {
        "writable": _caches(home) if readonly else writable_paths(args, env, cfg.cwd, home, nested=os.geteuid() != 0),
        "network": cfg.network,
        "disk_mb": DISK_MB,
        "memory_mb": MEMORY_MB,
        "keep": keep,
        "through": _package_caches(home) if warm_caches else [],
    }
    return start.command(sys.executable, "launcher", json.dumps(spec), "--", command, *args, flags=("-I", "-S"))


def _package_caches(home: str) -> list[str]:
    """``PACKAGE_CACHES`` under ``home``, made where missing (as the package runner would make them)."""
    paths = [os.path.join(home, d) for d in PACKAGE_CACHES]
    for path in paths:
        os.makedirs(path, exist_ok=True)
    return paths
