"""What a run writes keeps no credentials: endpoints without them, and secret values redacted.

``clean_endpoint`` is what manifests and cards keep of a ``base_url``. A ``Redactor``
replaces with ``[REDACTED]`` the values of secret-named environment variables and
of the servers config's ``env`` and ``headers`` (over a length and entropy floor, so
``false`` or ``UTC`` stay), those values split by invisible characters, and forms
that are a credential wherever they appear (``Bearer`` tokens, passwords in URLs,
known token formats). ``trajkit.runner`` builds one per stage and hands it to the
stage's store (``Store.redactor``), which applies it to rows, manifests and stage
configs; the stage's log lines, call cache entries and errors go through the same one.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def clean_endpoint(url: str) -> str:
    """An endpoint for display: no user, password, query string or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def clean_endpoints(data: Any) -> Any:
    """A config (dicts and lists) with every ``base_url`` (a string or a list) cleaned."""
    if isinstance(data, dict):
        return {k: (_clean_url_value(v) if k == "base_url" else clean_endpoints(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [clean_endpoints(v) for v in data]
    return data


def _clean_url_value(value: Any) -> Any:
    if isinstance(value, str):
        return clean_endpoint(value)
    if isinstance(value, list):
        return [clean_endpoint(v) if isinstance(v, str) else v for v in value]
    return value


# ---------------------------------------------------------------- secret values
REDACTED = "[REDACTED]"
SHARD_MARK = b"trajkit.redacted"  # Parquet metadata of a shard whose rows went through a Redactor when written
INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"  # zero-width characters and the soft hyphen
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS(?:W(?:OR)?D|PHRASE)?(?:_|$)|CREDENTIAL", re.IGNORECASE)
# a header, flag or query parameter named as a secret: Authorization, Cookie, X-Api-Key, --password, ?token=
SECRET_KEY = re.compile(r"AUTH|COOKIE|KEY|TOKEN|SECRET|(?<![A-Z])PASS(?:W(?:OR)?D|PHRASE)?\b|CREDENTIAL", re.IGNORECASE)
NOT_A_VALUE = re.compile(r"_(?:FILE|PATH|DIR|URL|ENDPOINT|SOCK|NAME|ENV)$", re.IGNORECASE)
MIN_LEN = 6
MIN_BITS = 12.0  # length x Shannon entropy per character: "false" has 11.6, "hunter2" 19.7
TOKEN_COLUMNS = ("token_ids", "loss_mask", "logprobs")
# The one list of forms that are a credential wherever they appear, read alike by Python's re and Arrow's RE2:
# kind -> (pattern, what the redactor writes in its place, or None for a form only the push scan refuses:
# ``data_cards/secret_scan.py`` finds every one). A replacement keeps the groups around the secret.
CREDENTIALS: dict[str, tuple[str, str | None]] = {
    "Hugging Face token": (r"\bhf_[A-Za-z0-9]{30,}", REDACTED),
    "OpenAI or Anthropic key": (r"\bsk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", REDACTED),
    "AWS access key id": (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", REDACTED),
    "AWS secret access key": (r"((?i:aws_?secret_?access_?key)\W{1,4})[A-Za-z0-9/+]{40}", r"\1" + REDACTED),
    "GitHub token": (r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})", REDACTED),
    "Google API key": (r"\bAIza[0-9A-Za-z_-]{35}", REDACTED),
    "Slack token": (r"\bxox[abposr]-[A-Za-z0-9-]{10,}", REDACTED),
    # the key below the line is what matters, and text goes on after it: refused, not rewritten
    "private key": (r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----", None),
    "Bearer header": (r"(\b(?i:bearer)\s+)[A-Za-z0-9._~+/=-]{12,}", r"\1" + REDACTED),
    "credentials in a URL": (r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:)[^/\s@\[\]]+@", r"\1" + REDACTED + "@"),
    # ordinary words hold soft hyphens too; known values are redacted through invisible characters anyway
    "token split by an invisible character": (f"[A-Za-z0-9_-]{{4}}[{INVISIBLE}]+[A-Za-z0-9_-]{{4}}", None),
}
FORMS = tuple((pattern, replacement) for pattern, replacement in CREDENTIALS.values() if replacement is not None)


def entropy_bits(value: str) -> float:
    """The value's length times the Shannon entropy of its characters."""
    n = len(value)
    return -sum(c * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


def worth_redacting(value: str, named_secret: bool) -> bool:
    """Whether a configured value is redacted: over the floor (``MIN_LEN`` characters and ``MIN_BITS``), and
    either named as a secret or shaped like a token (no spaces, letters and digits; not a path or plain URL)."""
    v = value.strip()
    if len(v) < MIN_LEN or entropy_bits(v) < MIN_BITS:
        return False
    if named_secret:
        return True
    plain_url = "://" in v and "@" not in v
    shaped = not any(c.isspace() for c in v) and any(c.isalpha() for c in v) and any(c.isdigit() for c in v)
    return shaped and not plain_url and not v.startswith(("/", "~", "."))


def environment_secrets(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables whose names say they hold a secret (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ...),
    over the floor: {name: value}. Names that point at a secret (``*_FILE``, ``*_PATH``, ...) are left out."""
    env = os.environ if environ is None else environ
    return {
        k: v for k, v in env.items() if SECRET_NAME.search(k) and not NOT_A_VALUE.search(k) and worth_redacting(v, True)
    }


def config_secrets(servers: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The values of every server's ``env`` and ``headers`` (``${VAR}`` expanded), its ``args`` (the values of
    secret-named flags), and the password and query values of its ``url``, over the
    floor: {"server.VAR": value}. The token of an
    ``Authorization: Bearer <token>`` value is a value of its own."""
    from trajkit.config import VARIABLE

    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, cfg in servers.items():
        for key, raw in [*cfg.env.items(), *cfg.headers.items()]:
            value = VARIABLE.sub(lambda m: env.get(m.group(1), ""), raw)
            named = bool((SECRET_KEY if key in cfg.headers else SECRET_NAME).search(key)) or any(
                SECRET_NAME.search(m.group(1)) for m in VARIABLE.finditer(raw)
            )
            parts = value.split(None, 1)
            for i, v in enumerate([value] + ([parts[1]] if len(parts) == 2 else [])):
                if worth_redacting(v, named):
                    out[f"{name}.{key}" + ("" if i == 0 else ".token")] = v.strip()
        for flag, value in _flag_values(cfg.args):
            named = SECRET_KEY.search(flag) and not NOT_A_VALUE.search(flag.replace("-", "_"))
            if named and worth_redacting(value, True):
                out[f"{name}.args.{flag.lstrip('-')}"] = value
        url = urlsplit(cfg.url or "")
        if url.password and worth_redacting(url.password, True):
            out[f"{name}.url.password"] = url.password
        for key, v in parse_qsl(url.query):
            if worth_redacting(v, bool(SECRET_KEY.search(key))):
                out[f"{name}.url.{key}"] = v
    return out


def config_inputs(cfg: Any) -> dict[str, str]:
    """The values a stage config gives VS Code's ``${input:ID}`` (its ``inputs``): {ID: value}."""
    return {k: v.get_secret_value() for k, v in (getattr(cfg, "inputs", None) or {}).items()}


def _flag_values(args: list[str]) -> list[tuple[str, str]]:
    """(flag, value) for every ``--flag VALUE`` and ``--flag=VALUE`` in a command line."""
    out = []
    for before, arg in zip(["", *args], args):
        if arg.startswith("-") and "=" in arg:
            out.append(tuple(arg.split("=", 1)))
        elif not arg.startswith("-") and before.startswith("-") and "=" not in before:
            out.append((before, arg))
    return out


def _escape(literal: str) -> str:
    """A literal as a pattern that Python's ``re`` and Arrow's RE2 read alike, matching with
    invisible characters between any two of its characters."""
    chars = [c if c.isalnum() or c == "_" or not c.isascii() or c.isspace() else "\\" + c for c in literal]
    return f"[{INVISIBLE}]*".join(chars)


class Redactor:
    """Replaces secret values and credential forms with ``[REDACTED]`` in text, JSON-like values and
    Arrow tables. Built once per stage (``for_stage``) and applied where rows, manifests, log lines and
    call-cache entries are written, so a secret is gone before anything reaches a disk."""

    def __init__(self, values: Mapping[str, str] | None = None):
        literals = sorted(set((values or {}).values()), key=len, reverse=True)
        rules = [(f"(?:{'|'.join(_escape(v) for v in literals)})", REDACTED)] if literals else []
        self.rules = rules + list(FORMS)
        self._any = "|".join(f"(?:{p})" for p, _ in self.rules)  # one pass finds the strings to redact
        self._compiled = [(re.compile(p), r) for p, r in self.rules]

    @classmethod
    def for_stage(cls, cfg: Any, environ: Mapping[str, str] | None = None) -> Redactor:
        """The environment's secret-named variables, the ``inputs`` a stage config gives (VS Code's
        ``${input:ID}``), and what its fields marked ``SecretSource`` point at (the env and header values
        of a servers file: ``trajkit.envs.config.ServersFile``)."""
        from trajkit.config import field_secrets

        values = environment_secrets(environ)
        values.update({f"input.{k}": v for k, v in config_inputs(cfg).items() if worth_redacting(v, True)})
        values.update(field_secrets(cfg))
        return cls(values)

    def text(self, text: str) -> str:
        for rx, replacement in self._compiled:
            text = rx.sub(replacement, text)
        return text

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """An exception leaving the block leaves with its text redacted (a message may quote a server's
        stderr or a config value), so whoever prints it prints no secret."""
        try:
            yield
        except BaseException as e:
            e.args = tuple(self.text(a) if isinstance(a, str) else a for a in e.args)
            raise

    def value(self, data: Any) -> Any:
        """Strings anywhere in dicts, lists and tuples redacted (keys too)."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {self.value(k): self.value(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return [self.value(v) for v in data]
        return data

    def table(self, data: pa.Table) -> pa.Table:
        """Every string, nested ones included, redacted. A row whose text held a secret loses its token
        trace (``token_ids``, ``loss_mask``, ``logprobs``): ids cannot be redacted without the tokenizer,
        so such a row trains on its (redacted) messages."""
        data = data.combine_chunks()
        hit = np.zeros(len(data), dtype=bool)
        columns = []
        for col in data.columns:
            arr, mask = self._array(col.chunk(0) if col.num_chunks else pa.array([], col.type))
            columns.append(arr)
            if mask is not None:
                hit |= mask
        if not hit.any():
            return data
        for name in TOKEN_COLUMNS:
            if name in data.column_names:
                i = data.column_names.index(name)
                columns[i] = pc.if_else(pa.array(hit), pa.nulls(len(data), columns[i].type), columns[i])
        return pa.Table.from_arrays(columns, schema=data.schema)

    def _array(self, arr: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
        """``arr`` redacted and which of its elements changed (None: none did)."""
        t = arr.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            mask = None
            if not pc.any(pc.match_substring_regex(arr, self._any)).as_py():
                return arr, mask
            for pattern, replacement in self.rules:
                found = pc.fill_null(pc.match_substring_regex(arr, pattern), False)
                if pc.any(found).as_py():
                    arr = pc.replace_substring_regex(arr, pattern, replacement)
                    m = found.to_numpy(zero_copy_only=False)
                    mask = m if mask is None else mask | m
            return arr, mask
        if pa.types.is_struct(t):
            children = [self._array(child) for child in arr.flatten()]
            masks = [m for _, m in children if m is not None]
            if not masks:
                return arr, None
            nulls = arr.is_null() if arr.null_count else None
            rebuilt = pa.StructArray.from_arrays([c for c, _ in children], fields=list(t), mask=nulls)
            return rebuilt, np.logical_or.reduce(masks)
        if pa.types.is_list(t):
            values, mask = self._array(arr.flatten())
            if mask is None:
                return arr, None
            lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
            offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
            nulls = arr.is_null() if arr.null_count else None
            rebuilt = pa.ListArray.from_arrays(offsets, values, type=t, mask=nulls)
            rows = np.zeros(len(arr), dtype=bool)
            rows[pc.list_parent_indices(arr).to_numpy()[mask]] = True
            return rebuilt, rows
        return arr, None
