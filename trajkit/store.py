"""A run directory: immutable Parquet shards per table, manifests, resume, DuckDB views.

Layout::

    RUN/
      tasks/<stage>-r<rank>-<seq>.parquet     one folder per table, shards never rewritten
      trajectories/...                        by another stage
      _stages/<stage>/_config.json            the stage's config, written when it starts
      _stages/<stage>/_manifest.json          written last: the stage completed

Only this module writes shards: through pyarrow, cast to the table's schema,
secrets redacted by the store's ``redactor`` (a stage's run sets the stage's:
``trajkit.redact``), to a temporary file that is fsynced and renamed into place. A run of a stage shard holds a ``Lease`` on it
(``_stages/<stage>/_lease-r<rank>``); a newer run of the same shard takes the
lease over, and the older run's next commit then fails (``Fenced``) with its
temporary file removed, so a rerun never races an older run that is still
alive (a killed driver's Ray tasks, a second shell).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trajkit import schema as S
from trajkit.errors import Fenced, UserError
from trajkit.redact import SHARD_MARK, Redactor, environment_secrets

STAGES_DIR = "_stages"
FILE_INPUTS = "files"  # in a manifest's inputs, beside the tables: files read, by path, with their versions
LEDGER_PREFIX = "_shards-r"  # _stages/<stage>/_shards-r<rank>.jsonl: the shards a stage rank wrote, with hashes
TMP_PREFIX = ".tmp-"
# a stage's shard: ``stage-r<rank>-<seq>.parquet``, or ``stage-r<rank>-<seq>-<last>.parquet`` for the shard
# that compacted shards seq..last when the stage completed (``Store.compact``); stage names hold no "-"
SHARD_RE = re.compile(r"^(?P<stage>.+)-r(?P<rank>\d+)-(?P<seq>\d{6})(?:-(?P<last>\d{6}))?\.parquet$")
COMPACT_ROWS = 16_384  # rows per compacted shard (at most; fewer where rows are large: read whole to merge)
COMPACT_BYTES = 64 << 20  # bytes of the shards merged into one (at most, past the first)


def safe_name(stage: str) -> str:
    """A stage name usable in file names."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", stage).replace(".", "_")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}-{path.name}")  # unique: ranks on any node write at once
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode() + b"\n")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_parquet_atomic(path: Path, data: pa.Table, lease: Lease | None = None) -> str:
    """Write a shard to a temporary file of its own, then (``lease`` still held) rename it into place;
    returns its content hash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "w+b") as f:
        pq.write_table(data, f, compression="zstd", row_group_size=64 * 1024)
        f.flush()
        os.fsync(f.fileno())
        f.seek(0)
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if lease is not None:
        try:
            lease.check()
        except Fenced:
            tmp.unlink(missing_ok=True)
            raise
    os.replace(tmp, path)  # fails if a newer run cleaned the temporary file after checking: fenced as well
    _fsync_dir(path.parent)
    return digest


def file_hash(path: Path) -> str:
    """The content hash a shard is listed with (sha256 of its bytes)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class Lease:
    """A run's hold on one stage shard (stage, rank), written when the run starts and checked before it
    commits anything. A newer run of that shard writes its own token, which fences the older run off."""

    def __init__(self, path: Path, stage: str, rank: int):
        self.path, self.stage, self.rank = path, stage, rank
        self.token = uuid.uuid4().hex
        atomic_write_bytes(path, self.token.encode())

    def release(self) -> None:
        """Give the shard up (a run that wrote nothing): the lease file goes, unless a newer run holds it."""
        with contextlib.suppress(FileNotFoundError):
            if self.path.read_text() == self.token:
                self.path.unlink()

    def check(self) -> None:
        try:
            holder = self.path.read_text()
        except FileNotFoundError:  # the stage was dropped (--fresh) since
            holder = None
        if holder != self.token:
            raise Fenced(
                f"stage {self.stage!r} rank {self.rank}: a newer run took this shard over; "
                "this run stopped and its unwritten rows were discarded"
            )


class ShardWriter:
    """Buffers rows for one (table, stage, rank) and writes them as numbered shards.

    Every shard but the last holds exactly ``rows_per_shard`` rows, whatever the
    sizes of the ``write`` calls, so a resumed stage that skips the rows already
    written produces the same shards as an uninterrupted one.
    """

    def __init__(self, store: Store, table: str, stage: str, rank: int = 0, rows_per_shard: int = 10_000):
        self.store, self.table, self.stage, self.rank = store, table, safe_name(stage), rank
        self.rows_per_shard = rows_per_shard
        self._pending: list[pa.Table] = []
        self._buffered = 0
        self.rows_written = 0
        self._seq = store._next_seq(table, self.stage, rank)

    def write(self, rows: dict[str, Any] | Iterable[dict[str, Any]] | pa.Table) -> None:
        """Validate and buffer rows (cast to the table's schema); full shards are written at once, redacted."""
        if not isinstance(rows, pa.Table):
            rows = [rows] if isinstance(rows, dict) else list(rows)
            if not rows:
                return
        data = S.to_batch(self.table, rows)
        self._pending.append(data)
        self._buffered += len(data)
        while self._buffered >= self.rows_per_shard:
            self._write_shard(self.rows_per_shard)

    def _write_shard(self, n: int) -> None:
        data = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        shard, rest = data.slice(0, n), data.slice(n)
        self._pending = [rest] if len(rest) else []
        self._buffered = len(rest)
        path = self.store.table_dir(self.table) / f"{self.stage}-r{self.rank}-{self._seq:06d}.parquet"
        shard = self.store.redactor.table(shard)  # once per shard: a call per small write cost more than the stage
        shard = shard.replace_schema_metadata({**(shard.schema.metadata or {}), SHARD_MARK: b"1"})
        self.store._commit(path, self.table, shard.combine_chunks())
        self._seq += 1
        self.rows_written += len(shard)

    def flush(self) -> None:
        """Write whatever is buffered as a (possibly short) shard."""
        if self._buffered:
            self._write_shard(self._buffered)

    close = flush


def _compact_groups(small: list[tuple[int, Path]]) -> list[list[tuple[int, Path]]]:
    """Consecutive shards of one schema, grouped up to ``COMPACT_ROWS`` rows or ``COMPACT_BYTES`` bytes each."""
    groups: list[list[tuple[int, Path]]] = []
    rows = size = 0
    schema = None
    for seq, p in small:
        meta = pq.read_metadata(p)
        n, b, this = meta.num_rows, p.stat().st_size, meta.schema.to_arrow_schema().remove_metadata()
        if not groups or rows + n > COMPACT_ROWS or size + b > COMPACT_BYTES or this != schema:
            groups.append([])
            rows = size = 0
        groups[-1].append((seq, p))
        rows, size, schema = rows + n, size + b, this
    return groups


# what every reader of a manifest or stage config relies on: key -> type (required keys first)
MANIFEST_KEYS = {"stage": str, "kind": str, "config_hash": str, "finished_at": str, "seconds": (int, float)}
MANIFEST_OPTIONAL = {"outputs": dict, "usage": dict, "counts": dict, "config": dict, "inputs": dict, "shards": dict}
CONFIG_KEYS = {"config": dict, "config_hash": str}


def _json_or_none(path: Path) -> Any:
    """A JSON file's value, or None when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_json(
    path: Path, keys: dict[str, type | tuple[type, ...]], optional: dict[str, type] | None = None
) -> dict[str, Any]:
    """A manifest or config the store wrote, with the ``keys`` every reader relies on (and the ``optional``
    ones, where present, of their type); a damaged one is a user error naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        problem = str(e)
    else:
        if not isinstance(data, dict):
            problem = "not a JSON object"
        elif missing := [k for k in keys if k not in data]:
            problem = f"no {', '.join(missing)}"
        elif wrong := [k for k, t in {**keys, **(optional or {})}.items() if k in data and not isinstance(data[k], t)]:
            problem = f"{', '.join(wrong)} of the wrong type"
        else:
            return data
    raise UserError(f"{path}: damaged ({problem}); remove it to redo that stage, or rerun with --fresh")


CREATED_RUNS: list[Path] = []  # the topmost folder each Store(create=True) of this process made, in order


def remove_new_empty_runs(since: int = 0) -> None:
    """Remove the run folders made after the first ``since`` of ``CREATED_RUNS`` that hold only empty folders,
    as a command that failed on bad input leaves them; a folder that held anything, or existed before, stays."""
    while len(CREATED_RUNS) > since:
        remove_empty_tree(CREATED_RUNS.pop())


def remove_empty_tree(top: Path) -> None:
    """Remove ``top`` if it holds only (nested) empty folders; one that holds any file stays whole."""
    if any(p.is_symlink() or not p.is_dir() for p in top.rglob("*")):
        return
    for folder, _, _ in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):  # written to meanwhile: it stays
            os.rmdir(folder)


def existing_run(root: str | Path) -> Store:
    """The run a read command names (``sql``, ``info``, ``show``, ``export``, ``card``, ``push``, ``view``), or
    one line saying why it is none: a missing path, a file, a folder no stage ever wrote to. A run is a folder
    with ``_stages/`` (made with the run, before any stage starts) or a table's folder; an empty run is a run."""
    path = Path(root)
    if not path.exists():
        raise UserError(f"run directory not found: {path}")
    if not path.is_dir():
        raise UserError(f"{path} is a file, not a run directory")
    if not (path / STAGES_DIR).is_dir() and not any((path / t).is_dir() for t in S.TABLES):
        raise UserError(f"{path} is not a trajkit run: it has neither {STAGES_DIR}/ nor a table folder")
    return Store(path)


class Store:
    """A run directory. ``create=False`` makes a missing directory a user error; ``create=True`` (a stage
    that writes) also requires it to be writable. ``redactor``: what every shard, manifest and stage config
    written through this store passes through (by default the environment's secrets; a stage's run sets the
    stage's, ``runner.run_stage``)."""

    def __init__(self, root: str | Path, create: bool = False, redactor: Redactor | None = None):
        self.root = Path(root)
        if not self.root.is_dir():
            if not create:
                raise UserError(f"run directory not found: {self.root}")
            top = self.root
            while not top.parent.exists():
                top = top.parent
            try:
                (self.root / STAGES_DIR).mkdir(parents=True)  # what marks a run (``existing_run``)
            except OSError as e:
                raise UserError(f"cannot create the run directory {self.root}: {e.strerror or e}") from None
            CREATED_RUNS.append(top)
        elif create and not os.access(self.root, os.W_OK | os.X_OK):
            raise UserError(f"the run directory {self.root} is not writable (read-only file system or permissions)")
        self._redactor = redactor
        self.lease: Lease | None = None  # set on the store a stage run writes through (``leased``)
        self._checked: dict[Path, tuple[int, int]] = {}  # shards ``validate`` found good: (mtime_ns, size)
        self._hashes: dict[Path, tuple[tuple[int, int, int], str]] = {}  # (inode, mtime_ns, size), content hash
        self._ledgers: dict[Path, tuple[tuple[int, int, int], list[dict[str, Any]]]] = {}
        self.reads: dict[str, dict[str, str]] | None = None  # a stage run's: table -> stage -> version it read
        self._legacy: set[str] | None = None  # ``legacy_stages``, found once

    @property
    def redactor(self) -> Redactor:
        """What this store's writes go through (made on first use: most stores only read)."""
        if self._redactor is None:
            self._redactor = Redactor(environment_secrets())
        return self._redactor

    @redactor.setter
    def redactor(self, redactor: Redactor) -> None:
        self._redactor = redactor

    def leased(self, stage: str, rank: int, redactor: Redactor) -> Store:
        """Take the lease on a stage shard (fencing off any older run of it) and return this run directory
        as the new run writes to it: every shard it commits or rewrites checks the lease first, and goes
        through the stage's ``redactor``."""
        store = copy.copy(self)
        store.lease = Lease(self.stage_dir(stage) / f"_lease-r{rank}", stage, rank)
        store.redactor = redactor
        store.reads = {}
        return store

    def write_json(self, path: Path, obj: Any) -> None:
        """A stage's bookkeeping (config, manifest) written atomically, through the store's redactor."""
        atomic_write_json(path, self.redactor.value(obj))

    # ------------------------------------------------------------ paths
    def table_dir(self, table: str) -> Path:
        S.table(table)
        return self.root / table

    def stage_dir(self, stage: str) -> Path:
        return self.root / STAGES_DIR / safe_name(stage)

    def tables(self) -> list[str]:
        """Tables that have at least one shard, in schema order."""
        return [t for t in S.TABLES if self.shards(t)]

    def shards(self, table: str, stage: str | None = None, rank: int | None = None) -> list[Path]:
        """A table's shard files in a stable order (stage, rank, sequence); optionally one stage's (and one
        rank's) only. Only shards a stage listed as it wrote them are data: a file no stage listed (copied in,
        or renamed into place by a write killed before it was listed) is left out, and a listed shard that is
        missing or whose content hash changed is a user error naming it (``problems`` says all of them). A
        shard that a compacted one covers (left behind by a compaction that was killed) is not listed. A
        stage's run records, per table and stage, the version of what it read (``reads``)."""
        paths, problems = self._scan(table, stage, rank)
        bad = [line for kind, line in problems if kind != "unlisted"]
        if bad:
            raise UserError(f"{bad[0]}; `trajkit info {self.root}` lists every such shard")
        if self.reads is not None and paths and rank is None:  # a stage's shards of every rank: its version
            own = safe_name(self.lease.stage) if self.lease is not None else None
            by_stage: dict[str, list[Path]] = {}
            for p in paths:
                by_stage.setdefault(SHARD_RE.match(p.name)["stage"], []).append(p)
            listed = self.listed(table)
            for st, group in by_stage.items():
                if st != own:
                    self.reads.setdefault(table, {})[st] = _version((p.name, listed[p.name][0]) for p in group)
        return paths

    def note_input(self, path: Path) -> None:
        """Record a file besides the tables that a stage run reads (a recording's call log, which grows while
        the proxy records), by content hash, so the stage is stale once the file changes (``file_version``)."""
        if self.reads is not None:
            self.reads.setdefault(FILE_INPUTS, {})[os.path.relpath(path, self.root)] = self.file_version(path)

    def file_version(self, path: Path | str) -> str | None:
        """The version of a file a stage read (relative paths are the run's): a hash of its content, or None."""
        path = self.root / path
        return file_hash(path)[:16] if path.is_file() else None

    def version(self, table: str, stage: str) -> str:
        """The version of one stage's shards of a table: a hash of their names and content hashes."""
        listed = self.listed(table)
        return _version((p.name, listed[p.name][0]) for p in self.shards(table, stage))

    def problems(self, table: str | None = None, stage: str | None = None, rank: int | None = None) -> list[str]:
        """One line per shard file of a table (by default every table; optionally one stage's, one rank's)
        that disagrees with what the stages listed: unlisted, missing or changed."""
        tables = S.TABLES if table is None else (table,)
        return [line for t in tables for _, line in self._scan(t, stage, rank)[1]]

    def _scan(self, table: str, stage: str | None, rank: int | None) -> tuple[list[Path], list[tuple[str, str]]]:
        """The listed shards present (covered ones left out), and the problems as (kind, line)."""
        listed = self.listed(table)
        entries = self._entries(table, stage, rank)
        present = {p.name for *_, p in entries}
        problems = []
        good = []
        for e in entries:
            p = e[-1]
            digest = listed.get(p.name, (None, 0))[0]
            if digest is None:
                problems.append(("unlisted", f"{p}: no stage listed this shard (copied in, or left by a killed write)"))
            elif self._hash(p) != digest:
                problems.append(("changed", f"{p}: changed since its stage wrote it (not the content hash listed)"))
            else:
                good.append(e)
        covers: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for st, rk, seq, last, _ in good:
            if last is not None:
                covers.setdefault((st, rk), []).append((seq, last))

        def covered(st: str, rk: int, seq: int, last: int | None) -> bool:
            return last is None and any(a <= seq <= b for a, b in covers.get((st, rk), ()))

        for name, (digest, _) in listed.items():
            m = SHARD_RE.match(name)
            if digest is None or name in present or m is None:
                continue
            st, rk, seq, last = m["stage"], int(m["rank"]), int(m["seq"]), m["last"] and int(m["last"])
            mine = (stage is None or st == safe_name(stage)) and (rank is None or rk == rank)
            if mine and not covered(st, rk, seq, last):
                problems.append(("missing", f"{self.table_dir(table) / name}: listed by its stage but missing"))
        return [p for st, rk, seq, last, p in good if not covered(st, rk, seq, last)], problems

    def listed(self, table: str) -> dict[str, tuple[str | None, int]]:
        """The shards of a table that stages listed as they wrote them: file name -> (content hash, rows);
        the hash is None for a shard its stage removed since (merged by a compaction, its rows dropped)."""
        out: dict[str, tuple[str | None, int]] = {}
        root = self.root / STAGES_DIR
        for ledger in sorted(root.glob(f"*/{LEDGER_PREFIX}*.jsonl")) if root.is_dir() else ():
            for entry in self._ledger(ledger):
                if entry["table"] == table:
                    out[entry["shard"]] = (entry["sha256"], entry["rows"])
        legacy = self.legacy_stages()
        for p in sorted(self.table_dir(table).glob("*.parquet")) if legacy else ():
            m = SHARD_RE.match(p.name)
            if m and m["stage"] in legacy and p.name not in out:
                out[p.name] = (self._hash(p), pq.read_metadata(p).num_rows)
        return out

    def legacy_stages(self) -> set[str]:
        """Stages that completed before stages listed their shards (manifests without ``shards``, no ledger):
        their shards are taken as found, so a run an older trajkit wrote reads as it did (``trajkit info``
        names them; a rerun with ``--fresh`` lists them)."""
        if self._legacy is None:
            root = self.root / STAGES_DIR
            self._legacy = {
                d.name
                for d in (root.iterdir() if root.is_dir() else ())
                if d.is_dir()
                and not any(d.glob(f"{LEDGER_PREFIX}*.jsonl"))
                and (manifests := list(d.glob("_manifest*.json")))
                and all("shards" not in (_json_or_none(m) or {"shards": None}) for m in manifests)
            }
        return self._legacy

    def _ledger(self, path: Path) -> list[dict[str, Any]]:
        """A stage rank's ledger: what it listed, in order (a line torn by a kill, or not a listing, is skipped)."""
        try:
            st = path.stat()
        except OSError:
            return []
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._ledgers.get(path)
        if cached is not None and cached[0] == seen:
            return cached[1]
        entries = []
        for line in path.read_bytes().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("table"), str)
                and isinstance(entry.get("shard"), str)
                and isinstance(entry.get("sha256"), str | None)
                and isinstance(entry.get("rows"), int)
            ):
                entries.append(entry)
        self._ledgers[path] = (seen, entries)
        return entries

    def _hash(self, path: Path) -> str | None:
        """A shard file's content hash (kept while its inode, size and modification time hold)."""
        try:
            st = path.stat()
        except OSError:
            return None
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._hashes.get(path)
        if cached is None or cached[0] != seen:
            cached = self._hashes[path] = (seen, file_hash(path))
        return cached[1]

    def _commit(self, path: Path, table: str, data: pa.Table) -> None:
        """Write a shard (the lease checked) and list it, with its content hash and rows, in its stage rank's
        ledger; a write killed between the two leaves a shard no stage listed, which the rerun removes."""
        digest = _write_parquet_atomic(path, data, self.lease)
        self._list(path, table, digest, len(data))

    def _remove(self, path: Path, table: str) -> None:
        """Delete one of this store's shards and strike it from its stage rank's ledger."""
        path.unlink(missing_ok=True)
        self._list(path, table, None, 0)

    def _list(self, path: Path, table: str, digest: str | None, rows: int) -> None:
        m = SHARD_RE.match(path.name)
        ledger = self.root / STAGES_DIR / m["stage"] / f"{LEDGER_PREFIX}{m['rank']}.jsonl"
        ledger.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"table": table, "shard": path.name, "sha256": digest, "rows": rows}) + "\n"
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if digest is not None:
            st = path.stat()
            self._hashes[path] = ((st.st_ino, st.st_mtime_ns, st.st_size), digest)

    def stage_shards(self, stage: str, rank: int) -> dict[str, dict[str, dict[str, Any]]]:
        """What one stage rank listed and holds now: table -> shard name -> its content hash and rows
        (a manifest records it; a resume compares)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for table in S.TABLES:
            listed = self.listed(table)
            for p in self.shards(table, stage, rank):
                digest, rows = listed[p.name]
                out.setdefault(table, {})[p.name] = {"sha256": digest, "rows": rows}
        return out

    def _entries(self, table: str, stage: str | None, rank: int | None) -> list[tuple[str, int, int, int | None, Path]]:
        """Every shard file as (stage, rank, seq, last seq if compacted, path), sorted, covered ones too."""
        d = self.table_dir(table)
        if not d.is_dir():
            if d.exists():
                raise UserError(f"{d}: a file where the {table} table's folder belongs; move it away")
            return []
        out = []
        for p in d.iterdir():
            m = SHARD_RE.match(p.name)
            if m and (stage is None or m["stage"] == safe_name(stage)) and (rank is None or int(m["rank"]) == rank):
                last = int(m["last"]) if m["last"] else None
                out.append((m["stage"], int(m["rank"]), int(m["seq"]), last, p))
            elif not m and stage is None and not p.name.startswith(TMP_PREFIX) and p.suffix == ".parquet":
                out.append(("", 0, 0, None, p))
        return sorted(out, key=lambda e: e[:3])

    def _next_seq(self, table: str, stage: str, rank: int) -> int:
        return max((last or seq for _, _, seq, last, _ in self._entries(table, stage, rank)), default=-1) + 1

    def compact(self, table: str, stage: str, rank: int = 0) -> int:
        """Merge a stage's small shards of one rank into shards of up to ``COMPACT_ROWS`` rows, keeping
        their rows and order; returns the number of shard files removed. Crash-safe: a compacted shard
        is renamed into place whole, and covers the shards it merged from then on (``shards``); they are
        deleted after it. Run when the stage completes (a resumed stage keeps writing small shards)."""
        listed, removed = set(self.shards(table, stage, rank)), 0
        small = []
        for _, _, seq, last, p in self._entries(table, stage, rank):
            if p not in listed:  # covered by a compacted shard: a killed compaction's leftover
                self._remove(p, table)
                removed += 1
            elif last is None:
                small.append((seq, p))
        for group in _compact_groups(small):
            if len(group) < 2:
                continue
            first, last = group[0][0], group[-1][0]
            path = self.table_dir(table) / f"{safe_name(stage)}-r{rank}-{first:06d}-{last:06d}.parquet"
            parts = [pq.read_table(p) for _, p in group]
            marked = all(SHARD_MARK in (t.schema.metadata or {}) for t in parts)
            data = pa.concat_tables(parts).combine_chunks()
            meta = {k: v for k, v in (data.schema.metadata or {}).items() if marked or k != SHARD_MARK}
            self._commit(path, table, data.replace_schema_metadata(meta))
            for _, p in group:
                self._remove(p, table)
                removed += 1
        return removed

    def writer(self, table: str, stage: str, rank: int = 0, rows_per_shard: int = 10_000) -> ShardWriter:
        return ShardWriter(self, table, stage, rank, rows_per_shard)

    def write(self, table: str, stage: str, rows: Iterable[dict[str, Any]] | pa.Table, rank: int = 0) -> int:
        """Write rows as this stage's shards in one go; returns the number written."""
        w = self.writer(table, stage, rank)
        w.write(rows)
        w.close()
        return w.rows_written

    # ------------------------------------------------------------ reading
    def _open(self, path: Path, table: str) -> pq.ParquetFile:
        try:
            f = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise UserError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0]})") from None
        try:
            S.check_schema(table, f.schema_arrow, where=str(path))
        except S.SchemaError as e:
            raise UserError(f"wrong schema: {e}") from None
        return f

    def redacted(self, table: str) -> bool:
        """Whether every shard of a table was redacted as it was written (not one copied in by hand,
        or written before ``trajkit.redact`` existed)."""
        return all(SHARD_MARK in (pq.read_schema(p).metadata or {}) for p in self.shards(table))

    def validate(self, table: str, stage: str | None = None) -> list[Path]:
        """Open every shard of a table (or of one stage's) and check its schema; returns the shard paths.
        A shard this store checked before is not opened again while its size and modification time hold."""
        paths = self.shards(table, stage)
        for p in paths:
            try:
                st = p.stat()
                seen = (st.st_mtime_ns, st.st_size)
            except OSError:  # vanished: opening it says so
                seen = None
            if seen is None or self._checked.get(p) != seen:
                self._open(p, table)
                if seen is not None:
                    self._checked[p] = seen
        return paths

    def read(self, table: str, columns: list[str] | None = None, stage: str | None = None) -> pa.Table:
        """All rows of a table (or of one stage's shards), cast to the table's schema."""
        schema = S.table(table).arrow_schema()
        parts = []
        for p in self.shards(table, stage):
            parts.append(self._read_shard(p, table, columns))
        if not parts:
            if columns:
                schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
            return pa.Table.from_batches([], schema=schema)
        return pa.concat_tables(parts)

    def _read_shard(self, path: Path, table: str, columns: list[str] | None = None) -> pa.Table:
        """One shard's rows (older shards get the columns added since as nulls)."""
        f = self._open(path, table)
        have = f.schema_arrow.names
        try:
            data = f.read(columns=None if columns is None else [c for c in columns if c in have])
        except (pa.ArrowInvalid, OSError) as e:
            raise UserError(f"{path}: corrupt Parquet data ({str(e).splitlines()[0]})") from None
        return S.upgrade(table, data, columns)

    def rows(self, table: str, columns: list[str] | None = None, stage: str | None = None) -> list[dict[str, Any]]:
        return self.read(table, columns, stage).to_pylist()

    def ids(self, table: str, stage: str | None = None) -> set[str]:
        """The primary keys present in a table (optionally one stage's shards only)."""
        key = S.table(table).key
        data = self.read(table, [key], stage)
        return set(data.column(key).to_pylist())

    def iter_batches(
        self, table: str, columns: list[str] | None = None, batch_size: int = 1024
    ) -> Iterator[pa.RecordBatch]:
        for p in self.shards(table):
            f = self._open(p, table)
            have = f.schema_arrow.names
            wanted = None if columns is None else [c for c in columns if c in have]
            for batch in f.iter_batches(batch_size=batch_size, columns=wanted):
                yield from S.upgrade(table, pa.Table.from_batches([batch]), columns).to_batches()

    def count(self, table: str, stage: str | None = None) -> int:
        return sum(self._open(p, table).metadata.num_rows for p in self.shards(table, stage))

    def rejected(self, table: str) -> set[str]:
        """Ids of a table's rows that some stage rejected."""
        data = self.read("rejected", ["row_id", "table_name"])
        if not len(data):
            return set()
        import pyarrow.compute as pc

        return set(data.filter(pc.equal(data["table_name"], table))["row_id"].to_pylist())

    # ------------------------------------------------------------ stage bookkeeping
    def manifest_path(self, stage: str, rank: int = 0, world_size: int = 1) -> Path:
        name = "_manifest.json" if world_size == 1 else f"_manifest-r{rank}-of-{world_size}.json"
        return self.stage_dir(stage) / name

    def manifest(self, stage: str, rank: int = 0, world_size: int = 1) -> dict[str, Any] | None:
        p = self.manifest_path(stage, rank, world_size)
        return _read_json(p, MANIFEST_KEYS, MANIFEST_OPTIONAL) if p.is_file() else None

    def manifests(self) -> list[dict[str, Any]]:
        """Every manifest of the run, oldest first."""
        root = self.root / STAGES_DIR
        found = (
            [_read_json(p, MANIFEST_KEYS, MANIFEST_OPTIONAL) for p in root.glob("*/_manifest*.json")]
            if root.is_dir()
            else []
        )
        return sorted(found, key=lambda m: (m.get("finished_at", ""), m.get("stage", "")))

    def stage_config(self, stage: str) -> dict[str, Any] | None:
        p = self.stage_dir(stage) / "_config.json"
        return _read_json(p, CONFIG_KEYS) if p.is_file() else None

    def clean_temp(self, stage: str, rank: int = 0) -> None:
        """Remove temporary shard files a killed writer of this stage and rank left behind
        (never another writer's: ranks and stages may run at the same time). Called after taking the
        shard's lease, so an older run still alive can no longer rename one into place."""
        for p in self.root.glob(f"*/{TMP_PREFIX}{safe_name(stage)}-r{rank}-*"):
            p.unlink(missing_ok=True)

    def drop_stage(self, stage: str) -> None:
        """Delete a stage's own shards and bookkeeping (``--fresh``)."""
        for t in S.TABLES:
            for *_, p in self._entries(t, stage, None):
                p.unlink()
        shutil.rmtree(self.stage_dir(stage), ignore_errors=True)

    def drop_shard(self, stage: str, rank: int, world_size: int) -> None:
        """Delete one stage rank's manifest, shards and ledger (a stage rank redone; its config stays)."""
        self.manifest_path(stage, rank, world_size).unlink(missing_ok=True)
        for t in S.TABLES:
            for *_, p in self._entries(t, stage, rank):
                p.unlink()
        (self.stage_dir(stage) / f"{LEDGER_PREFIX}{rank}.jsonl").unlink(missing_ok=True)

    def remove_unlisted(self, stage: str, rank: int) -> int:
        """Delete a stage rank's shard files that its ledger does not list; returns how many."""
        removed = 0
        for t in S.TABLES:
            listed = self.listed(t)
            for *_, p in self._entries(t, stage, rank):
                if listed.get(p.name, (None, 0))[0] is None:
                    p.unlink(missing_ok=True)
                    removed += 1
        return removed

    def drop_rows(self, table: str, stage: str, ids: set[str]) -> int:
        """Remove rows with these ids from this stage's own shards (to retry aborted work).

        Each affected shard is rewritten atomically under its own name; no other
        stage's shard is touched. Returns the number of rows removed.
        """
        if not ids:
            return 0
        import pyarrow.compute as pc

        key = S.table(table).key
        removed = 0
        for p in self.shards(table, stage):
            data = self._read_shard(p, table)
            keep = pc.invert(pc.is_in(data[key], pa.array(sorted(ids))))
            n = len(data) - pc.sum(keep.cast(pa.int64())).as_py() if len(data) else 0
            if n:
                kept = data.filter(keep)
                if len(kept):
                    self._commit(p, table, kept)
                else:
                    if self.lease is not None:
                        self.lease.check()
                    self._remove(p, table)
                removed += n
        return removed

    # ------------------------------------------------------------ SQL
    def duckdb(self):
        """A DuckDB connection with a view per table; annotations joined onto their base."""
        import duckdb

        con = duckdb.connect()
        self.create_views(con)
        return con

    def create_views(self, con) -> None:
        """(Re)create the views on a connection over the shards present now."""
        present = {t: self.validate(t) for t in S.TABLES}
        present = {t: paths for t, paths in present.items() if paths}
        for name in S.TABLES:
            if name in present:
                con.execute(f'CREATE OR REPLACE VIEW "_raw_{name}" AS {self._raw_sql(name, present[name])}')
        for name, tbl in S.TABLES.items():
            con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {_view_sql(tbl, present)}')
        for name in S.TABLES:
            if name not in present:
                con.execute(f'DROP VIEW IF EXISTS "_raw_{name}"')

    def _by_stage(self, paths: list[Path]) -> list[list[Path]]:
        """Shards grouped by the stage that wrote them, the stage that finished last at the end
        (unfinished stages after finished ones; ties by name)."""
        by_stage: dict[str, list[Path]] = {}
        for p in paths:
            m = SHARD_RE.match(p.name)
            by_stage.setdefault(m["stage"] if m else "", []).append(p)
        finished = {safe_name(m["stage"]): m.get("finished_at", "") for m in self.manifests()}
        order = sorted(by_stage, key=lambda st: (st not in finished, finished.get(st, ""), st))
        return [by_stage[st] for st in order]

    def latest(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """An annotation table with one row per key: the row of the stage that finished last
        wins (the same rule as the DuckDB views), read with pyarrow alone."""
        key = S.table(table).key
        if columns is not None and key not in columns:
            columns = [key, *columns]
        rows: dict[str, dict[str, Any]] = {}
        for group in self._by_stage(self.shards(table)):
            for p in group:
                for row in self._read_shard(p, table, columns).to_pylist():
                    rows[row[key]] = row
        if not rows:
            return self.read(table, columns)
        schema = S.table(table).arrow_schema()
        if columns is not None:
            schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
        return pa.Table.from_pylist(list(rows.values()), schema=schema)

    def _raw_sql(self, name: str, paths: list[Path]) -> str:
        """All shards of a table. For an annotation table written by several stages, one
        row per key: the row from the stage that finished last wins."""
        tbl = S.table(name)
        groups = self._by_stage(paths)
        if tbl.base is None or len(groups) == 1:
            return f"SELECT *{absent_columns(name, paths)} FROM read_parquet([{_files(paths)}], union_by_name = true)"
        parts = " UNION ALL BY NAME ".join(
            f"SELECT *, {i} AS _order FROM read_parquet([{_files(group)}])" for i, group in enumerate(groups)
        )
        return (
            f"SELECT * EXCLUDE (_order) FROM ({parts}) "
            f"QUALIFY row_number() OVER (PARTITION BY {_q(tbl.key)} ORDER BY _order DESC) = 1"
        )

    def sql(self, query: str) -> pa.Table:
        """The rows of one read statement over the run's views, which changes nothing (``trajkit.sqlread``:
        DuckDB's parser must make one SELECT of it, the connection may open the shards only, and it runs in
        a thread the kernel lets write nothing)."""
        import duckdb

        from trajkit.sqlread import check_read, confined, lock

        if not query.strip():
            raise UserError("the SQL query is empty")
        if not query.isascii() and not _utf8(query):
            raise UserError("the SQL query is not valid UTF-8 text")

        check_read(query)

        def run() -> pa.Table:
            con = duckdb.connect()
            try:
                self.create_views(con)
                lock(con, files=[str(p) for table in S.TABLES for p in self.shards(table)])
                return con.sql(query).to_arrow_table()
            except duckdb.Error as e:
                raise UserError(f"SQL error: {str(e).splitlines()[0]}") from None
            finally:
                con.close()

        result = confined(run)
        twice = sorted({c for c in result.column_names if result.column_names.count(c) > 1})
        if twice:
            raise UserError(f"the query returns more than one column named {twice[0]!r}: name them apart with AS")
        return result


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (an argument of bytes that are not UTF-8 arrives with lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def sql_condition(text: str, what: str) -> str:
    """``(text)`` once DuckDB parses it as a single expression: a condition cannot close its
    parenthesis and widen the query around it (``1=1) OR (1=1``)."""
    import duckdb

    if not _utf8(text):
        raise UserError(f"{what} is not valid UTF-8 text")
    try:
        duckdb.SQLExpression(text)
    except duckdb.Error as e:
        raise UserError(f"{what} {text!r} is not one SQL condition ({str(e).splitlines()[0]})") from None
    return f"({text})"


def _view_sql(tbl: S.Table, present: dict[str, list[Path]]) -> str:
    """SELECT for a table's view: base columns, then its annotations' columns, then
    ``reject_reason``. Absent tables give typed NULL columns, so queries never
    depend on which stages have run."""
    if tbl.name in present:
        cols, source = [f"b.{_q(c)}" for c in tbl.schema.names], f'"_raw_{tbl.name}" b'
    else:
        cols, source = [f"CAST(NULL AS {_duck_type(f.type)}) AS {_q(f.name)}" for f in tbl.schema], None
    if tbl.base is not None:
        return f"SELECT {', '.join(cols)} FROM {source}" if source else f"SELECT {', '.join(cols)} WHERE false"
    taken, joins = set(tbl.schema.names), []
    for ann in S.TABLES.values():
        if ann.base != tbl.name:
            continue
        alias = f"a_{ann.name}"
        for f in ann.schema:
            if f.name == ann.key:
                continue
            out = f.name if f.name not in taken else f"{ann.name}_{f.name}"
            taken.add(out)
            if source and ann.name in present:
                cols.append(f"{alias}.{_q(f.name)} AS {_q(out)}")
            else:
                cols.append(f"CAST(NULL AS {_duck_type(f.type)}) AS {_q(out)}")
        if source and ann.name in present:
            joins.append(f'LEFT JOIN "_raw_{ann.name}" {alias} ON {alias}.{_q(ann.key)} = b.{_q(tbl.key)}')
    if source and "rejected" in present:
        cols.append("r.reject_reason")
        joins.append(
            "LEFT JOIN (SELECT row_id, string_agg(DISTINCT reason, '; ' ORDER BY reason) AS reject_reason "
            f"FROM \"_raw_rejected\" WHERE table_name = '{tbl.name}' GROUP BY row_id) r ON r.row_id = b.{_q(tbl.key)}"
        )
    else:
        cols.append("CAST(NULL AS VARCHAR) AS reject_reason")
    if not source:
        return f"SELECT {', '.join(cols)} WHERE false"
    return f"SELECT {', '.join(cols)} FROM {source} {' '.join(joins)}"


def absent_columns(table: str, paths: list[Path]) -> str:
    """``, CAST(NULL AS type) AS column`` for each of a table's ``added`` columns that none of these shards
    has (a run written before it was added), to follow ``SELECT *`` over them."""
    tbl = S.table(table)
    if not tbl.added:
        return ""
    missing = set(tbl.added)
    for p in paths:  # a run written since the columns were added has them in its first shard
        missing -= set(pq.read_schema(p).names)
        if not missing:
            return ""
    return "".join(
        f", CAST(NULL AS {_duck_type(tbl.schema.field(c).type)}) AS {_q(c)}" for c in tbl.added if c in missing
    )


def _version(shards: Iterable[tuple[str, str | None]]) -> str:
    """A version of a set of shards: a hash of their names and content hashes."""
    return hashlib.sha256("".join(f"{name} {digest}\n" for name, digest in sorted(shards)).encode()).hexdigest()[:16]


def _files(paths: list[Path]) -> str:
    return ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _duck_type(t: pa.DataType) -> str:
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_int8(t):
        return "TINYINT"
    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_list(t):
        return _duck_type(t.value_type) + "[]"
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f"{_q(f.name)} {_duck_type(f.type)}" for f in t) + ")"
    raise TypeError(f"no DuckDB type for {t}")
