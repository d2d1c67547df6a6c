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

from trajkit.encodings import ENCODED, UNREADABLE, base64_runs, unescaped


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
# Parquet metadata of a shard whose rows went through a Redactor when written; the version names the rules
# (2: decoded forms, tool results joined, AWS secret beside its id; 3: every message's texts joined; 4: the texts
# inside a binary payload, such as a PNG's text chunks), so older shards are redacted again on reading
SHARD_MARK = b"trajkit.redacted.v4"
INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"  # zero-width characters and the soft hyphen
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS(?:W(?:OR)?D|PHRASE)?(?:_|$)|CREDENTIAL", re.IGNORECASE)
# a header, flag or query parameter named as a secret: Authorization, Cookie, X-Api-Key, --password, ?token=
SECRET_KEY = re.compile(r"AUTH|COOKIE|KEY|TOKEN|SECRET|(?<![A-Z])PASS(?:W(?:OR)?D|PHRASE)?\b|CREDENTIAL", re.IGNORECASE)
NOT_A_VALUE = re.compile(r"_(?:FILE|PATH|DIR|URL|ENDPOINT|SOCK|NAME|ENV)$", re.IGNORECASE)
MIN_LEN = 6
MIN_BITS = 12.0  # length x Shannon entropy per character: "false" has 11.6, "hunter2" 19.7
TOKEN_COLUMNS = ("token_ids", "loss_mask", "logprobs")
TEXT_FIELDS = ("reasoning_content", "content")  # a message's texts, in order; then its tool calls' arguments
# The one list of forms that are a credential wherever they appear, read alike by Python's re and Arrow's RE2:
# kind -> (pattern, what the redactor writes in its place, or None for a form only the push scan refuses:
# ``data_cards/secret_scan.py`` finds every one). A replacement keeps the groups around the secret.
CREDENTIALS: dict[str, tuple[str, str | None]] = {
    "Hugging Face token": (r"\bhf_[A-Za-z0-9]{30,}", REDACTED),
    "OpenAI or Anthropic key": (r"\bsk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", REDACTED),
    # an unlabelled secret key beside its key id (either order): 40 base64 characters, alone, within 80 of it
    "AWS secret access key beside its id": (
        r"((?:AKIA|ASIA)[0-9A-Z]{16}[^A-Za-z0-9/+](?:[^\n]{0,80}[^A-Za-z0-9/+])?)[A-Za-z0-9/+]{40}([^A-Za-z0-9/+=]|$)",
        r"\1" + REDACTED + r"\2",
    ),
    "AWS secret access key before its id": (
        r"(^|[^A-Za-z0-9/+])[A-Za-z0-9/+]{40}([^A-Za-z0-9/+=](?:[^\n]{0,80}[^A-Za-z0-9/+])?(?:AKIA|ASIA)[0-9A-Z]{16})",
        r"\1" + REDACTED + r"\2",
    ),
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
DECODE_DEPTH = 2  # base64 of a URL-encoded token is found; a third encoding around it is not
_ENCODED = re.compile(ENCODED)
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

    def __init__(self, values: Mapping[str, str] | None = None, every_form: bool = False):
        """``values``: the literal secrets, {name: value}. ``every_form``: the forms only the push scan
        refuses (a private key, a token split by invisible characters) are replaced too (the scan's view)."""
        literals = sorted(set((values or {}).values()), key=len, reverse=True)
        rules = [(f"(?:{'|'.join(_escape(v) for v in literals)})", REDACTED)] if literals else []
        forms = [(p, r or REDACTED) for p, r in CREDENTIALS.values()] if every_form else list(FORMS)
        self.rules = rules + forms
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
        """``text`` with every secret replaced: as written, and behind escapes or base64 (``encodings``)."""
        for rx, replacement in self._compiled:
            text = rx.sub(replacement, text)
        return _replaced(text, self.spans(text)) if _ENCODED.search(text) else text

    def spans(self, text: str, depth: int = DECODE_DEPTH) -> list[tuple[int, int]]:
        """Where ``text`` holds a secret: a match as written; a base64 run, or a stretch of escapes, whose
        decoded text holds one (decoded again, ``depth`` levels). A run that decodes to binary (an image)
        is replaced whole when a text inside it holds one, or when a compressed text in it cannot be read
        (``encodings.payload_texts``): a secret cannot be cut out of an image's bytes and leave an image."""
        found = [m.span() for rx, _ in self._compiled for m in rx.finditer(text)]
        if depth > 0:
            found += [(a, b) for a, b, d in base64_runs(text) if d == UNREADABLE or self.spans(d, depth - 1)]
            plain = unescaped(text)
            if plain is not None:
                found += [(plain[1][a], plain[2][b - 1]) for a, b in self.spans(plain[0], depth - 1) if b > a]
        return found

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
        """Every string, nested ones included, redacted; in a ``messages`` column, also a secret that only
        the row's texts joined hold (a token split across two messages: ``joined``). A row whose text held a
        secret loses its token trace (``token_ids``, ``loss_mask``, ``logprobs``): ids cannot be redacted
        without the tokenizer, so such a row trains on its (redacted) messages."""
        data, hits = self.changes(data)
        if not hits:
            return data
        hit = np.logical_or.reduce(list(hits.values()))
        columns = data.columns
        for name in TOKEN_COLUMNS:
            if name in data.column_names:
                i = data.column_names.index(name)
                columns[i] = pc.if_else(pa.array(hit), pa.nulls(len(data), columns[i].type), columns[i])
        return pa.Table.from_arrays(columns, schema=data.schema)

    def changes(self, data: pa.Table) -> tuple[pa.Table, dict[str, np.ndarray]]:
        """``data`` redacted, and for each column that changed, which rows did (the push scan's findings)."""
        data = data.combine_chunks()
        hits: dict[str, np.ndarray] = {}
        columns = []
        for name, col in zip(data.column_names, data.columns):
            arr, mask = self.array(col.chunk(0) if col.num_chunks else pa.array([], col.type))
            if is_messages(arr.type):
                arr, joined = self.joined(arr)
                mask = joined if mask is None else mask if joined is None else mask | joined
            columns.append(arr)
            if mask is not None and mask.any():
                hits[name] = mask
        return (pa.Table.from_arrays(columns, schema=data.schema) if hits else data), hits

    def joined(self, arr: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
        """A ``messages`` array whose rows' texts, joined in order (every message's reasoning, content and tool
        call arguments: ``TEXT_FIELDS``), held a secret no one text held: the part of it in each text redacted.
        A token split between a tool result and the next assistant message is found so."""
        joined, counts = _joined_texts(arr)
        if not len(counts) or counts.max() < 2:
            return arr, None
        suspect = pc.match_substring_regex(joined, f"{self._any}|{ENCODED}")
        picked = np.flatnonzero(pc.fill_null(suspect, False).to_numpy(zero_copy_only=False) & (counts >= 2))
        changed: dict[int, list[dict[str, Any]]] = {}
        for i in picked.tolist():
            messages = arr[i].as_py()
            if _redact_across(_holders(messages), self):
                changed[i] = messages
        if not changed:
            return arr, None
        order = np.arange(len(arr))
        order[list(changed)] = len(arr) + np.arange(len(changed))
        merged = pa.concat_arrays([arr, pa.array(list(changed.values()), arr.type)]).take(pa.array(order))
        mask = np.zeros(len(arr), dtype=bool)
        mask[list(changed)] = True
        return merged, mask

    def array(self, arr: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
        """``arr`` redacted and which of its elements changed (None: none did)."""
        t = arr.type
        if isinstance(t, pa.BaseExtensionType):  # JSON columns: text underneath
            storage, mask = self.array(arr.storage)
            return (arr if mask is None else pa.ExtensionArray.from_storage(t, storage)), mask
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            mask = None
            if pc.any(pc.match_substring_regex(arr, self._any)).as_py():
                for pattern, replacement in self.rules:
                    found = pc.fill_null(pc.match_substring_regex(arr, pattern), False)
                    if pc.any(found).as_py():
                        arr = pc.replace_substring_regex(arr, pattern, replacement)
                        m = found.to_numpy(zero_copy_only=False)
                        mask = m if mask is None else mask | m
            encoded = pc.fill_null(pc.match_substring_regex(arr, ENCODED), False)
            if pc.any(encoded).as_py():  # decoded in Python: each distinct string that holds an encoding, once
                rows = pc.indices_nonzero(encoded)
                picked = arr.take(rows)
                distinct = pc.unique(picked)
                redacted = {v: r for v in distinct.to_pylist() if (r := _replaced(v, self.spans(v))) != v}
                if redacted:
                    which = pc.index_in(picked, pa.array(list(redacted), t))
                    moved = pc.is_valid(which).to_numpy(zero_copy_only=False)
                    m = np.zeros(len(arr), dtype=bool)
                    m[rows.to_numpy()[moved]] = True
                    new = pa.array(list(redacted.values()), t).take(which.filter(pc.is_valid(which)))
                    arr = pc.replace_with_mask(arr, pa.array(m), new)
                    mask = m if mask is None else mask | m
            return arr, mask
        if pa.types.is_struct(t):
            children = [self.array(child) for child in arr.flatten()]
            masks = [m for _, m in children if m is not None]
            if not masks:
                return arr, None
            nulls = arr.is_null() if arr.null_count else None
            rebuilt = pa.StructArray.from_arrays([c for c, _ in children], fields=list(t), mask=nulls)
            return rebuilt, np.logical_or.reduce(masks)
        if pa.types.is_list(t):
            values, mask = self.array(arr.flatten())
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


def is_messages(t: pa.DataType) -> bool:
    """A list of chat messages: structs with a role and a content."""
    if not pa.types.is_list(t) or not pa.types.is_struct(t.value_type):
        return False
    names = {f.name for f in t.value_type}
    return {"role", "content"} <= names


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span (overlapping ones merged) replaced by ``[REDACTED]``."""
    out, pos = [], 0
    for a, b in _merged(spans):
        out += [text[pos:a], REDACTED]
        pos = b
    return "".join(out) + text[pos:]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _joined_texts(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Each row of a ``messages`` array as one text: its messages' ``TEXT_FIELDS`` and tool call arguments, in
    order, joined (large strings: a batch's texts together may pass 2 GiB); and how many texts each row has."""
    flat = arr.flatten()
    names = {f.name for f in flat.type}
    texts = [flat.field(name).cast(pa.large_string()) for name in TEXT_FIELDS if name in names]
    counts = sum((t.is_valid().to_numpy(zero_copy_only=False).astype(np.int64) for t in texts), np.zeros(len(flat)))
    if "tool_calls" in names and _has_arguments(flat.type.field("tool_calls").type):
        calls = flat.field("tool_calls")
        args = calls.flatten().field("arguments").cast(pa.large_string())
        valid = args.is_valid()
        per_message = np.bincount(pc.list_parent_indices(calls).filter(valid).to_numpy(), minlength=len(flat))
        offsets = pa.array(np.concatenate([[0], np.cumsum(per_message)]).astype(np.int32))
        texts.append(pc.binary_join(pa.ListArray.from_arrays(offsets, args.filter(valid)), pa.scalar("", args.type)))
        counts = counts + per_message
    empty = pa.scalar("", pa.large_string())
    message_text = pc.fill_null(pc.binary_join_element_wise(*texts, empty, null_handling="skip"), empty)
    parents = pc.list_parent_indices(arr).to_numpy()
    per_row = np.bincount(parents, minlength=len(arr))
    offsets = pa.array(np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32))
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, message_text), empty)
    return joined, np.bincount(parents, weights=counts, minlength=len(arr)).astype(np.int64)


def _holders(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Where each text of a row's messages is, in ``_joined_texts``' order: (the message or tool call, its key)."""
    out = []
    for m in messages:
        out += [(m, key) for key in TEXT_FIELDS if isinstance(m.get(key), str)]
        calls = m.get("tool_calls")
        out += (
            [(c, "arguments") for c in calls if isinstance(c.get("arguments"), str)] if isinstance(calls, list) else []
        )
    return out


def _has_arguments(t: pa.DataType) -> bool:
    """A list of tool calls with ``arguments`` (not, say, JSON text of the calls)."""
    return pa.types.is_list(t) and pa.types.is_struct(t.value_type) and t.value_type.get_field_index("arguments") >= 0


def _redact_across(holders: list[tuple[dict[str, Any], str]], redactor: Redactor) -> bool:
    """Redact, in each text (``holder[key]``), its share of a secret that only the texts joined hold. Whether
    any was."""
    parts = [holder[key] for holder, key in holders]
    bounds = np.cumsum([0] + [len(p) for p in parts])
    per_part: list[list[tuple[int, int]]] = [[] for _ in parts]
    for a, b in _merged(redactor.spans("".join(parts))):
        first, last = int(np.searchsorted(bounds, a, "right")) - 1, int(np.searchsorted(bounds, b, "left")) - 1
        if first == last:
            continue  # inside one text: redacted with it already
        for k in range(first, last + 1):
            per_part[k].append((max(a, bounds[k]) - bounds[k], min(b, bounds[k + 1]) - bounds[k]))
    for (holder, key), part, spans in zip(holders, parts, per_part):
        if spans:
            holder[key] = _replaced(part, spans)
    return any(per_part)
