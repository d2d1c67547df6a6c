"""The persistent call cache: a rerun or a resumed stage pays nothing twice.

Every call is keyed by a sha256 of the model's identity, the conversation (in
trajkit's canonical message shape), the tools, the sampling parameters
(``n`` and ``seed`` included) and the options that change what the model sees.
The key is backend-independent: the same model id served by another backend
hits the same entries. For a local model directory the identity includes a
fingerprint of its weights and tokenizer, so retrained weights saved to the
same path do not hit stale entries; each entry keeps that identity beside the
model name, so a replay (``trajkit.models.replay``) finds the calls of a local
model without its directory. Keys, headers and URLs are never part of a
key or a value, and secrets are redacted from the stored completions (the stage's ``trajkit.redact.Redactor``).

``seed=None`` with ``temperature > 0`` is not reproducible, but it is cached
all the same: a rerun returns the first run's samples. Stages that want k
independent samples ask for ``n=k`` or for k different seeds, never k identical
calls. Failed calls (``Completion.error``) are not cached.

Entries live in ``calls.sqlite`` (WAL mode) in the cache directory: each put is
one atomic transaction, safe for concurrent tasks and for several processes
(ranks) sharing the directory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from trajkit.errors import UserError
from trajkit.models.base import (
    DEFAULT_PARAMS,
    Backend,
    Completion,
    Message,
    ModelSpec,
    SamplingParams,
    ToolCall,
    ToolCallError,
    ToolSchema,
)
from trajkit.models.chat import canonical, with_tool_media
from trajkit.redact import Redactor, environment_secrets

KEY_VERSION = 1
_FINGERPRINT_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
)
_CHUNK = 1 << 20


def model_identity(model: str) -> str:
    """The model id, plus a fingerprint of the weights and tokenizer for a local directory."""
    path = Path(model)
    if not path.is_dir():
        return model
    h = hashlib.sha256()
    for name in _FINGERPRINT_FILES:
        f = path / name
        if f.is_file():
            h.update(name.encode() + b"\0" + f.read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        size = f.stat().st_size
        h.update(f"{f.name}\0{size}\0".encode())
        with f.open("rb") as fh:  # head (the safetensors header) and tail: cheap even for large weights
            h.update(fh.read(_CHUNK))
            if size > 2 * _CHUNK:
                fh.seek(size - _CHUNK)
            h.update(fh.read(_CHUNK))
    return f"{path.resolve()}@{h.hexdigest()[:16]}"


def call_key(
    identity: str, messages: list[Message], tools: list[ToolSchema] | None, params: SamplingParams, spec: ModelSpec
) -> str:
    """The cache key of one call."""
    media = spec.tool_media != "text"  # the media the model is sent are part of the call (the default adds nothing)
    blob = {
        "v": KEY_VERSION,
        "model": identity,
        "messages": canonical(with_tool_media(messages) if media else messages),
        "tools": tools or None,
        "params": params.as_dict(),
        "options": {
            "chat_template_kwargs": spec.chat_template_kwargs,
            "extra_body": spec.extra_body,
            "logprobs": spec.logprobs,
            **({"tool_media": spec.tool_media} if media else {}),
        },
    }
    text = json.dumps(blob, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _setup(db: sqlite3.Connection, patience_s: float = 60.0) -> None:
    """WAL mode and the table. Processes opening a new cache at once (shards of one stage) can get "database
    is locked" at once, without sqlite's busy wait, while another switches the journal mode: retried."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS calls "
                "(key TEXT PRIMARY KEY, model TEXT, created REAL, completions TEXT, identity TEXT)"
            )
            if "identity" not in {row[1] for row in db.execute("PRAGMA table_info(calls)")}:
                db.execute("ALTER TABLE calls ADD COLUMN identity TEXT")  # a cache from before identities were kept
            return
        except sqlite3.OperationalError as e:
            if "duplicate column" in str(e):  # another process added it first
                continue
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02 + random.random() * 0.05)


class CallCache:
    """A sqlite table from call key to the completions that call returned."""

    def __init__(self, cache_dir: Path, redactor: Redactor | None = None, since: float | None = None):
        """``redactor``: what stored completions pass through (a stage's; by default the environment's secrets);
        ``since``: a time before which answers are not reused (a stage run ``--fresh``)."""
        self.redactor = redactor or Redactor(environment_secrets())
        self.since = since
        cache_dir = Path(cache_dir)
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.path = cache_dir / "calls.sqlite"
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
            _setup(self._db)
        except sqlite3.DatabaseError as e:  # not a database, a folder, unreadable; "locked" past the wait is not
            if "locked" in str(e):
                raise
            raise UserError(f"{self.path}: cannot use this call cache ({e}); remove it to start one afresh") from None

    def get(self, key: str) -> list[Completion] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT completions FROM calls WHERE key = ? AND created >= ?", (key, self.since or 0)
            ).fetchone()
        return None if row is None else [_decode(d) for d in json.loads(row[0])]

    def put(self, key: str, model: str, completions: list[Completion], identity: str | None = None) -> None:
        """Keep a call's completions; ``identity`` is the ``model_identity`` its key was made with (what a replay
        needs to find the call again where a local model directory is absent or holds other weights)."""
        entries = self.redactor.value([dataclasses.asdict(c) for c in completions])
        blob = json.dumps(entries, ensure_ascii=False)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO calls (key, model, created, completions, identity) VALUES (?, ?, ?, ?, ?)",
                (key, model, time.time(), blob, identity),
            )

    def identities(self, model: str) -> list[str | None]:
        """The identities the calls of ``model`` were keyed with, newest first (None: recorded without one)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT identity FROM calls WHERE model = ? GROUP BY identity ORDER BY max(created) DESC", (model,)
            ).fetchall()
        return [r[0] for r in rows]

    def models(self) -> dict[str, int]:
        """How many calls the cache holds per model."""
        with self._lock:
            return dict(self._db.execute("SELECT model, count(*) FROM calls GROUP BY model ORDER BY model").fetchall())

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _decode(d: dict[str, Any]) -> Completion:
    d = dict(d)
    d["tool_calls"] = [ToolCall(**c) for c in d.get("tool_calls") or []]
    d["tool_call_errors"] = [ToolCallError(**e) for e in d.get("tool_call_errors") or []]
    d["cached"] = True
    return Completion(**d)


class CachedBackend(Backend):
    """A backend whose calls go through the persistent cache; identical calls in flight are made once."""

    def __init__(self, inner: Backend, cache: CallCache):
        super().__init__(inner.spec)
        self.inner, self.cache, self.name = inner, cache, inner.name
        self._identity = model_identity(inner.spec.model)
        self._inflight: dict[str, asyncio.Future] = {}

    async def generate(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, params: SamplingParams = DEFAULT_PARAMS
    ) -> list[Completion]:
        key = call_key(self._identity, messages, tools, params, self.spec)
        while True:
            hit = self.cache.get(key)
            if hit is not None:
                return hit
            pending = self._inflight.get(key)
            if pending is None:
                break
            try:
                done = await asyncio.shield(pending)
            except asyncio.CancelledError:
                if pending.cancelled():
                    continue  # the caller making this call was cancelled: make it ourselves
                raise
            return [dataclasses.replace(c, cached=True) for c in done]
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            out = await self.inner.generate(messages, tools, params)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # marked retrieved: waiters re-raise it
            raise
        finally:
            self._inflight.pop(key, None)
        if not any(c.error for c in out):
            self.cache.put(key, self.model, out, self._identity)
        future.set_result(out)
        return out

    async def aclose(self) -> None:
        await self.inner.aclose()
        self.cache.close()
