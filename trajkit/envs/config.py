"""MCP server configuration in the ``mcpServers`` JSON format that MCP clients use.

A file is either ``{"mcpServers": {NAME: ENTRY, ...}}`` or the bare mapping.
An entry is a stdio server::

    {"command": "uvx", "args": ["mcp-server-time==2026.10.19"], "env": {"TZ": "UTC"}, "cwd": "..."}

or a streamable HTTP server::

    {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ${API_TOKEN}"}}

``${VAR}`` in ``env`` and ``headers`` values is read from the environment when
a session starts, so secrets stay out of the file (and only env variable
*names* ever reach a table); ``check_environment`` reads them all once before
anything starts, so a missing variable is a user error up front. ``type`` (stdio, http, streamable-http) is
optional, as in other clients; an entry with ``"disabled": true`` is skipped.
Third-party servers run in their own environments, exactly as MCP clients run
them: ``uvx``/``uv`` resolve next to this Python when not on PATH, and
``python``/``python3`` mean this interpreter (so the project's own servers,
``python -m trajkit.envs.servers.calculator``, find trajkit). ``${SESSION_DIR}`` in
``args`` is a fresh temporary directory per session (see ``trajkit.envs.session``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trajkit import schema as S
from trajkit.errors import UserError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Variables a server (or the uvx/npx that runs it) needs to reach its registry through this
# machine's proxy and certificates, find its caches, and format text; passed through when set.
PASSTHROUGH_PREFIXES = ("UV_", "NPM_CONFIG_", "npm_config_", "XDG_", "LC_")
PASSTHROUGH = {
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "LANG",
    "TZ",
    "TMPDIR",
}


class ServerConfig(BaseModel):
    """One entry of ``mcpServers``: a stdio command or a streamable HTTP url."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = None
    disabled: bool = False
    network: bool = True  # false: a contained stdio server runs without network

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either 'command' (stdio) or 'url' (streamable HTTP)")
        if self.command is not None and (self.headers or self.type not in (None, "stdio")):
            raise ValueError("'headers' and an HTTP 'type' need a 'url', not a 'command'")
        if self.url is not None and (self.args or self.env or self.cwd or self.type == "stdio"):
            raise ValueError("'args', 'env', 'cwd' and type 'stdio' need a 'command', not a 'url'")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} is not http(s)")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def server_id(self, name: str) -> str:
        """The content id of a server: its name, command, args, url and env variable names."""
        return S.content_id(name, self.command, list(self.args), self.url, sorted(self.env))


def parse_servers_config(data: Any, where: str = "servers config") -> dict[str, ServerConfig]:
    """Validate an ``mcpServers`` mapping (already parsed JSON); all problems in one line."""
    if isinstance(data, dict) and "mcpServers" in data:
        data = data["mcpServers"]
    if not isinstance(data, dict) or not data:
        raise UserError(f"{where}: expected a non-empty 'mcpServers' object of name -> server")
    servers, errors = {}, []
    for name, entry in data.items():
        if not isinstance(entry, dict):
            errors.append(f"{name}: expected an object")
            continue
        try:
            cfg = ServerConfig.model_validate(entry)
        except ValidationError as e:
            errors.extend(f"{name}.{'.'.join(map(str, err['loc'])) or '(entry)'}: {err['msg']}" for err in e.errors())
            continue
        if not cfg.disabled:
            servers[name] = cfg
    if errors:
        raise UserError(f"{where}: {len(errors)} problem(s): " + "; ".join(errors))
    if not servers:
        raise UserError(f"{where}: every server is disabled")
    return servers


def load_servers_config(path: str | Path) -> dict[str, ServerConfig]:
    """Read an ``mcpServers`` JSON file -> {name: ServerConfig}; a bad file is a one-line UserError."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"servers config not found: {p}")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: not valid JSON ({e})") from None
    return parse_servers_config(data, str(p))


def expand(value: str, environ: dict[str, str] | None = None) -> str:
    """Replace ``${VAR}`` with the variable's value; a missing variable is a UserError."""
    environ = os.environ if environ is None else environ

    def sub(m: re.Match) -> str:
        if m.group(1) not in environ:
            raise UserError(f"environment variable {m.group(1)} is not set (used in a server config)")
        return environ[m.group(1)]

    return _VAR.sub(sub, value)


def variables(cfg: ServerConfig) -> list[str]:
    """The environment variable names a config reads: a stdio server's ``env`` keys, or the ``${VAR}``
    names its HTTP headers use (what a ``servers`` row records; values never)."""
    if cfg.command is not None:
        return sorted(cfg.env)
    return sorted({m.group(1) for v in cfg.headers.values() for m in _VAR.finditer(v)})


def check_environment(name: str, cfg: ServerConfig) -> None:
    """Expand every ``${VAR}`` of a server's env and headers now: a missing one is a UserError naming the server."""
    try:
        for value in [*cfg.env.values(), *cfg.headers.values()]:
            expand(value)
    except UserError as e:
        raise UserError(f"server {name!r}: {e}") from None


def check_command(name: str, cfg: ServerConfig) -> None:
    """A stdio server's command must be found here: a machine (a cluster node) without it cannot start the
    server, a UserError naming the server before anything starts, not a fault in every trajectory."""
    if cfg.transport == "stdio" and shutil.which(resolve_command(cfg.command)) is None:
        raise UserError(f"server {name!r}: command {cfg.command!r} not found on this machine (PATH)")


def resolve_command(command: str) -> str:
    """The executable to spawn: ``python`` is this interpreter; ``uv``/``uvx`` fall back to this venv's."""
    if command in ("python", "python3"):
        return sys.executable
    if os.sep not in command and shutil.which(command) is None:
        beside = Path(sys.executable).parent / command
        if beside.exists():
            return str(beside)
    return command


def child_environment(cfg: ServerConfig) -> dict[str, str]:
    """Extra environment for a stdio server: pass-through variables, then the entry's ``env`` (expanded).

    The MCP SDK adds the safe defaults (HOME, PATH, ...). A ``uv``/``uvx`` server
    gets ``UV_PYTHON`` = this interpreter unless set, so uv never downloads a Python.
    """
    env = {k: v for k, v in os.environ.items() if k in PASSTHROUGH or k.startswith(PASSTHROUGH_PREFIXES)}
    if Path(cfg.command or "").name in ("uv", "uvx"):
        env.setdefault("UV_PYTHON", sys.executable)
    env.update({k: expand(v) for k, v in cfg.env.items()})
    return env
