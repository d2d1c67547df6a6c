"""MCP server configuration as MCP clients write it.

Accepted files: Claude Desktop and Cursor ``{"mcpServers": {NAME: ENTRY}}``, VS Code's
``mcp.json`` ``{"servers": {NAME: ENTRY}, "inputs": [...]}``, Cline's entries (its
``autoApprove``/``alwaysAllow``/``transportType`` keys are accepted and not used: trajkit
calls every tool itself; its ``timeout``, in seconds, is that server's tool-call timeout in
place of the stage's ``tool_timeout_s``), or the bare mapping. An entry is a stdio server::

    {"command": "uvx", "args": ["mcp-server-time==2026.10.19"], "env": {"TZ": "UTC"}, "cwd": "..."}

or a streamable HTTP server::

    {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ${API_TOKEN}"}}

``type`` (stdio, http, streamable-http) is optional. An entry with ``"disabled": true``
is skipped with a note; a key trajkit does not know is a warning, not an error.

Expansion. ``${VAR}`` in ``command``, ``args``, ``env``, ``cwd``, ``url`` and ``headers`` is
read from the environment when a session starts (``ServerConfig.resolved``), so secrets
stay out of the file and only variable *names* reach a table; ``check_environment`` reads
them all once before anything starts, so a missing one is a user error up front.
``${SESSION_DIR}`` in the same fields is a fresh folder per session (per trajectory),
made and removed by ``trajkit.envs.session``. ``${input:ID}`` (VS Code's prompted inputs)
is filled when the file is read, from ``inputs`` (``--set synth.harvest.inputs.ID=...``)
or the environment variable named by the id in capitals with ``_`` for other characters
(``api-key`` -> ``API_KEY``); one without a value refuses the file. A value filled into
``args`` or ``url`` is stored in the ``servers`` table like any literal there: put secrets
in ``env`` or ``headers``.

State. ``state: stateless | stateful`` says whether a server keeps state between calls.
Without it the state is inferred (``server_state``): stateless only when the server was
harvested and every tool is annotated ``readOnlyHint: true`` and it uses no
``${SESSION_DIR}``; anything else, unknown included, is stateful. ``volatile`` lists the
fields of its tool results that differ between two runs of the same call (ids,
timestamps: ``trajkit.envs.volatile``), which an extension's replay of earlier turns ignores.

Third-party servers run in their own environments, exactly as MCP clients run
them: ``uvx``/``uv`` resolve next to this Python when not on PATH, and
``python``/``python3`` mean this interpreter (so the project's own servers,
``python -m trajkit.envs.servers.calculator``, find trajkit).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trajkit import schema as S
from trajkit.config import VARIABLE, SecretSource, expand_variables
from trajkit.envs import volatile
from trajkit.errors import UserError

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
    """One server entry: a stdio command or a streamable HTTP url (strings unexpanded, as in the file)."""

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
    fork: bool = True  # false: a contained Python server's instances are spawned, not forked (envs/forks.py)
    state: Literal["stateless", "stateful"] | None = None  # None: inferred at harvest (server_state)
    timeout: float | None = Field(None, gt=0)  # Cline's: seconds per tool call, over the caller's timeout
    max_message_mib: float | None = Field(None, gt=0)  # a stdio server's longest message; None: envs.stdio.MAX_LINE
    volatile: list[str] = Field(default_factory=list)  # result fields that differ between runs (envs/volatile.py)

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        for field in self.volatile:
            volatile.parse(field)
        if (self.command is None) == (self.url is None):
            raise ValueError("give either 'command' (stdio) or 'url' (streamable HTTP)")
        if self.command is not None and (self.headers or self.type not in (None, "stdio")):
            raise ValueError("'headers' and an HTTP 'type' need a 'url', not a 'command'")
        if self.url is not None and (self.args or self.env or self.cwd or self.type == "stdio"):
            raise ValueError("'args', 'env', 'cwd' and type 'stdio' need a 'command', not a 'url'")
        if self.url is not None and not self.url.startswith(("http://", "https://", "${")):
            raise ValueError(f"url {self.url!r} is not http(s)")
        if self.url is not None and self.uses_session_dir:
            raise ValueError("${SESSION_DIR} is a folder for a stdio server, not an HTTP one")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def server_id(self, name: str) -> str:
        """The content id of a server: its name, command, args, url and env variable names."""
        return S.content_id(name, self.command, list(self.args), self.url, sorted(self.env))

    def _strings(self) -> list[str]:
        return [
            *(x for x in (self.command, self.cwd, self.url) if x is not None),
            *self.args,
            *self.env.values(),
            *self.headers.values(),
        ]

    @property
    def uses_session_dir(self) -> bool:
        """Whether ``${SESSION_DIR}`` appears anywhere (then each session needs its own folder)."""
        return any(SESSION_DIR in v for v in self._strings())

    def resolved(self, session_dir: str | None = None, environ: Mapping[str, str] | None = None) -> ServerConfig:
        """This config with ``${SESSION_DIR}`` (= ``session_dir``) and every ``${VAR}`` expanded, as a session starts it."""
        env = dict(os.environ if environ is None else environ)
        if session_dir is not None:
            env["SESSION_DIR"] = session_dir
        elif self.uses_session_dir:
            raise ValueError("this server uses ${SESSION_DIR}: resolve it with a session folder")

        def x(v: str | None) -> str | None:
            return None if v is None else expand(v, env)

        return self.model_copy(
            update={
                "command": x(self.command),
                "args": [x(a) for a in self.args],
                "env": {k: x(v) for k, v in self.env.items()},
                "cwd": x(self.cwd),
                "url": x(self.url),
                "headers": {k: x(v) for k, v in self.headers.items()},
            }
        )


SESSION_DIR = "${SESSION_DIR}"
IGNORED_KEYS = {"autoApprove", "alwaysAllow", "transportType"}  # other clients' UI settings
_INPUT = re.compile(r"\$\{input:([^}]+)\}")
# VS Code's predefined variables a server entry may use (``workspaceFolder``: the folder whose ``.vscode/`` holds
# the file, else the file's folder)
_PREDEFINED = re.compile(r"\$\{(workspaceFolder|workspaceFolderBasename|userHome|pathSeparator|/)\}")
log = logging.getLogger("trajkit.envs")
_noted: set[str] = set()


def _note(message: str) -> None:
    """A warning about the servers file, once per process (a stage and its redactor both read the file)."""
    if message not in _noted:
        _noted.add(message)
        log.warning(message)


def input_variable(input_id: str) -> str:
    """The environment variable that gives ``${input:ID}``: ``api-key`` -> ``API_KEY``."""
    return re.sub(r"[^A-Za-z0-9]", "_", input_id).upper()


def predefined_variables(path: Path) -> dict[str, str]:
    """VS Code's predefined variables for a servers file at ``path``."""
    folder = path.resolve().parent
    workspace = folder.parent if folder.name == ".vscode" else folder
    return {
        "workspaceFolder": str(workspace),
        "workspaceFolderBasename": workspace.name,
        "userHome": os.path.expanduser("~"),
        "pathSeparator": os.sep,
        "/": os.sep,
    }


def _fill_inputs(
    entry: dict[str, Any], inputs: Mapping[str, str], declared: dict[str, str], predefined: Mapping[str, str]
) -> dict[str, Any]:
    """``entry`` with every ``${input:ID}`` and VS Code predefined variable (``${workspaceFolder}``, ...) of its
    strings filled; a missing input is a one-line UserError."""

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            value = _PREDEFINED.sub(lambda m: predefined.get(m.group(1), m.group(0)), value)
            return _INPUT.sub(lambda m: value_of(m.group(1)), value)
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    def value_of(input_id: str) -> str:
        if input_id in inputs:
            return inputs[input_id]
        if input_variable(input_id) in os.environ:
            return os.environ[input_variable(input_id)]
        what = f" ({declared[input_id]})" if declared.get(input_id) else ""
        raise UserError(
            f"${{input:{input_id}}}{what} has no value: set environment variable {input_variable(input_id)} "
            f"or --set inputs.{input_id}=..."
        )

    return {k: fill(v) if k in ("command", "args", "env", "cwd", "url", "headers") else v for k, v in entry.items()}


def parse_servers_config(
    data: Any,
    where: str = "servers config",
    inputs: Mapping[str, str] | None = None,
    predefined: Mapping[str, str] | None = None,
) -> dict[str, ServerConfig]:
    """Validate a servers mapping (already parsed JSON); all problems in one line.

    ``inputs``: values for VS Code's ``${input:ID}`` (before the environment); ``predefined``: its predefined
    variables (``predefined_variables`` of the file).
    """
    declared: dict[str, str] = {}
    if isinstance(data, dict) and ("mcpServers" in data or "servers" in data):
        for item in data.get("inputs") or []:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                declared[item["id"]] = str(item.get("description") or "")
        extra = sorted(set(data) - {"mcpServers", "servers", "inputs"})
        if extra:
            _note(f"{where}: ignoring top-level key(s) {', '.join(extra)}")
        data = data.get("mcpServers", data.get("servers"))
    if not isinstance(data, dict) or not data:
        raise UserError(f"{where}: expected a non-empty 'mcpServers' (or 'servers') object of name -> server")
    known = set(ServerConfig.model_fields)
    servers, errors = {}, []
    for name, entry in data.items():
        if not name.strip():
            errors.append(f"{name!r}: a server needs a name")
            continue
        if not isinstance(entry, dict):
            errors.append(f"{name}: expected an object")
            continue
        unknown = sorted(set(entry) - known - IGNORED_KEYS)
        if unknown:
            _note(f"{where}: server {name!r}: ignoring unknown key(s) {', '.join(unknown)}")
        entry = {k: v for k, v in entry.items() if k in known}
        try:
            entry = _fill_inputs(entry, inputs or {}, declared, predefined or {})
        except UserError as e:
            raise UserError(f"{where}: server {name!r}: {e}") from None
        try:
            cfg = ServerConfig.model_validate(entry)
        except ValidationError as e:
            errors.extend(f"{name}.{'.'.join(map(str, err['loc'])) or '(entry)'}: {err['msg']}" for err in e.errors())
            continue
        if cfg.disabled:
            _note(f"{where}: server {name!r} is disabled: skipped")
        else:
            servers[name] = cfg
    if errors:
        raise UserError(f"{where}: {len(errors)} problem(s): " + "; ".join(errors))
    if not servers:
        raise UserError(f"{where}: every server is disabled")
    return servers


def load_servers_config(path: str | Path, inputs: Mapping[str, str] | None = None) -> dict[str, ServerConfig]:
    """Read a servers JSON file -> {name: ServerConfig}; a bad file is a one-line UserError."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"servers config not found: {p}")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: not valid JSON ({e})") from None
    return parse_servers_config(data, str(p), inputs, predefined_variables(p))


def expand(value: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace ``${VAR}`` with the variable's value; a missing variable is a UserError."""
    return expand_variables(
        value,
        os.environ if environ is None else environ,
        lambda name: f"environment variable {name} is not set (used in a server config)",
    )


def variables(cfg: ServerConfig) -> list[str]:
    """The environment variable names a config reads (what a ``servers`` row records; values never):
    a stdio server's ``env`` keys and every ``${VAR}`` of its strings, ``SESSION_DIR`` aside."""
    used = {m.group(1) for v in cfg._strings() for m in VARIABLE.finditer(v)} - {"SESSION_DIR"}
    return sorted(used | set(cfg.env))


def check_environment(name: str, cfg: ServerConfig) -> None:
    """Expand every ``${VAR}`` of a server's config now: a missing one is a UserError naming the server."""
    try:
        cfg.resolved(session_dir="")
    except UserError as e:
        raise UserError(f"server {name!r}: {e}") from None


def server_state(cfg: ServerConfig, tools: list[dict[str, Any]] | None) -> str:
    """``stateless`` or ``stateful``: the config's ``state``, else inferred from harvested ``tools`` records
    (stateless only when there are tools, all annotated ``readOnlyHint: true``, and no ``${SESSION_DIR}``)."""
    if cfg.state is not None:
        return cfg.state
    read_only = bool(tools) and all(
        json.loads(t.get("annotations") or "{}").get("readOnlyHint") is True for t in tools or []
    )
    return "stateless" if read_only and not cfg.uses_session_dir else "stateful"


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
    """Extra environment for a stdio server (a ``resolved`` config): pass-through variables, then its ``env``.

    The MCP SDK adds the safe defaults (HOME, PATH, ...). A ``uv``/``uvx`` server
    gets ``UV_PYTHON`` = this interpreter unless set, so uv never downloads a Python.
    """
    env = {k: v for k, v in os.environ.items() if k in PASSTHROUGH or k.startswith(PASSTHROUGH_PREFIXES)}
    if Path(cfg.command or "").name in ("uv", "uvx"):
        env.setdefault("UV_PYTHON", sys.executable)
    env.update(cfg.env)
    return env


def servers_file_secrets(path: Any, cfg: Any) -> dict[str, str]:
    """The secrets a stage's servers file holds (``redact.config_secrets``: env and header values, secret flags,
    url passwords), its ``${input:ID}`` filled from the stage's ``inputs``; none without a file."""
    from trajkit.redact import config_inputs, config_secrets  # pyarrow, which server processes need not load

    if not isinstance(path, str) or not Path(path).is_file():
        return {}
    return config_secrets(load_servers_config(path, config_inputs(cfg)))


T = TypeVar("T")
ServersFile = Annotated[T, SecretSource(servers_file_secrets)]
"""A config field naming an mcpServers file: the stage's redactor hides the secrets it holds."""
