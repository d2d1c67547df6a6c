"""Typed configs: YAML plus CLI overrides, validated all at once before work starts."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from trajkit.errors import UserError

C = TypeVar("C", bound=BaseModel)
T = TypeVar("T")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # ${NAME}; ${input:ID} and the like are not variables


def expand_variables(text: str, values: Mapping[str, str], missing: Callable[[str], str] | None = None) -> str:
    """``text`` with each ``${NAME}`` replaced by ``values[NAME]``: the one rule of pipeline files (``${run}``,
    ``${here}``) and servers configs (the environment). A name without a value is a UserError whose line is
    ``missing(name)``, or with ``missing=None`` stays as written (for an expansion another step finishes)."""

    def value(m: re.Match) -> str:
        if m.group(1) in values:
            return values[m.group(1)]
        if missing is None:
            return m.group(0)
        raise UserError(missing(m.group(1)))

    return VARIABLE.sub(value, text)


class _NotHashed:
    """The mark ``Unhashed`` puts on a field."""

    def __repr__(self) -> str:
        return "Unhashed"


NOT_HASHED = _NotHashed()
Unhashed = Annotated[T, NOT_HASHED]
"""A config field outside the config hash: how a stage runs (concurrency, endpoints, timeouts, progress),
not what it makes, so it may change between a run and its resume. ``workers: Unhashed[int] = Field(4)``."""


class SecretSource:
    """Marks a config field whose value says where secrets come from (a servers file): ``read(value, config)``
    gives them as {name: value}, and the stage's redactor hides each wherever it would be written.
    ``servers_config: Annotated[str | None, SecretSource(read)]``."""

    def __init__(self, read: Callable[[Any, BaseModel], dict[str, str]]):
        self.read = read


def field_secrets(cfg: BaseModel) -> dict[str, str]:
    """The secrets the fields of ``cfg`` marked with ``SecretSource`` point at."""
    out: dict[str, str] = {}
    for name, field in type(cfg).model_fields.items():
        for mark in field.metadata:
            if isinstance(mark, SecretSource):
                out.update(mark.read(getattr(cfg, name), cfg))
    return out


class StageConfig(BaseModel):
    """Base of every stage's config: unknown keys are errors, not silently ignored.

    Numbers are finite (an infinite timeout or temperature is a typo, and JSON cannot hold it).
    Fields marked ``Unhashed`` may change between a run and its resume without counting as a
    different config.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class _UniqueKeys(yaml.SafeLoader):
    """The safe loader, with a key given twice in one mapping an error (YAML forbids it; PyYAML kept the
    last). Keys a merge (``<<: *anchor``) brings in may still be overridden."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice in one mapping", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping or fail with one line."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p} is a directory, not a YAML file")
    if not p.is_file():
        raise UserError(f"config file not found: {p}")
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeys) or {}
    except (UnicodeDecodeError, OSError) as e:
        raise UserError(f"{p}: not a readable UTF-8 text file ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{p}:{where} is not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    _check_aliases(data, p)
    return data


MAX_EXPANDED_VALUES = 1_000_000


def _check_aliases(data: Any, path: Path) -> None:
    """Refuse what YAML aliases can build but no config needs: a value that contains itself, or one
    that expands to more than ``MAX_EXPANDED_VALUES`` values (every later walk over it would hang)."""
    seen, stack = 0, [(data, frozenset())]
    while stack:
        value, above = stack.pop()
        seen += 1
        if seen > MAX_EXPANDED_VALUES:
            raise UserError(f"{path}: its aliases expand to more than {MAX_EXPANDED_VALUES:,} values")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if id(child) in above or child is value:
                    raise UserError(f"{path}: a YAML alias refers to a value that contains it")
                stack.append((child, above | {id(value)}))


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=value`` -> (["a", "b"], value), the value parsed as YAML (so 3, true, [1,2] work)."""
    key, _, raw = item.partition("=")
    keys = key.strip().split(".")
    if "=" not in item or not all(k.strip() for k in keys):
        raise UserError(f"override {item!r} is not KEY=VALUE (KEY a name, or dotted names)")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return [k.strip() for k in keys], value


def merge(base: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``updates`` into a copy of ``base`` (updates win)."""
    out = dict(base)
    for k, v in updates.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def build(cls: type[C], *sources: dict[str, Any] | None, overrides: list[str] = (), where: str = "") -> C:
    """Merge mappings (later wins) and ``a.b=value`` overrides, then validate. A null in a mapping is null
    (``split: null`` in a pipeline file); a command's options leave out those not given (``given_options``).

    Every validation error is reported at once, in one line.
    """
    data: dict[str, Any] = {}
    for src in sources:
        if src:
            data = merge(data, src)
    for item in overrides:
        keys, value = parse_override(item)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise UserError(f"override {item!r}: {k} is not a mapping")
        node[keys[-1]] = value
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise UserError(format_errors(e, where or cls.__name__)) from None


def given_options(options: dict[str, Any]) -> dict[str, Any]:
    """A command's options without those not given (None)."""
    return {k: v for k, v in options.items() if v is not None}


def format_errors(e: ValidationError, where: str) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        parts.append(f"{loc}: {err['msg']}")
    n = len(parts)
    return f"invalid config for {where} ({n} error{'s' * (n != 1)}): " + "; ".join(parts)


def hashed_dict(cfg: BaseModel) -> dict[str, Any]:
    """The config as a dict without the fields marked as not part of its identity, at any depth."""
    return _strip(cfg, cfg.model_dump(mode="json"))


def _strip(model: BaseModel, data: dict[str, Any]) -> dict[str, Any]:
    for name, field in type(model).model_fields.items():
        value = getattr(model, name, None)
        if NOT_HASHED in field.metadata:
            data.pop(name, None)
        elif isinstance(value, BaseModel) and isinstance(data.get(name), dict):
            _strip(value, data[name])
        elif isinstance(value, list) and isinstance(data.get(name), list):
            for item, item_data in zip(value, data[name]):
                if isinstance(item, BaseModel) and isinstance(item_data, dict):
                    _strip(item, item_data)
    return data


def config_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``field: stored -> current`` for each field that both configs have and that differs.

    Fields only one side has are left out: a field that left the hash (an endpoint, say)
    or a field added since keeps a stored run resumable. Lists of mappings of one length (``models``)
    are compared item by item (``models.0.model: "a" -> "b"``), not printed whole.
    """
    return sorted(_differences(stored, current, ""))


def _differences(old: Any, new: Any, path: str) -> Iterator[str]:
    if isinstance(old, dict) and isinstance(new, dict) and old and new:
        for key in old.keys() & new.keys():
            yield from _differences(old[key], new[key], f"{path}{key}.")
    elif _records(old) and _records(new) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            yield from _differences(a, b, f"{path}{i}.")
    elif old != new:
        yield f"{path.rstrip('.')}: {json.dumps(old)} -> {json.dumps(new)}"


def _records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def config_hash(cfg: BaseModel) -> str:
    blob = json.dumps(hashed_dict(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _import_user_module(name: str) -> Any:
    """``name`` imported; a module next to the user (the current directory) is found as ``python -m`` finds it,
    though the installed ``trajkit`` command's ``sys.path`` lacks that directory (appended: installed ones win)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name.split(".")[0] or os.getcwd() in sys.path:
            raise
        sys.path.append(os.getcwd())
        return importlib.import_module(name)


def load_object(path: str, what: str = "object") -> Any:
    """Import ``package.module:attr`` (or ``package.module.attr``); a clear error if absent."""
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    if not module_name or not attr:
        raise UserError(f"{what} {path!r} is not a dotted path like package.module:name")
    try:
        module = _import_user_module(module_name)
    except Exception as e:  # noqa: BLE001 - any failure importing user code (a syntax error, a relative name) is a user error
        raise UserError(f"cannot import {what} {path!r}: {type(e).__name__}: {e}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UserError(f"cannot import {what} {path!r}: {module_name} has no {attr!r}") from None
