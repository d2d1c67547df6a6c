"""Running one stage: config check, resume, writers, counters, usage, manifest last.

A stage is a ``StageSpec``: a config class and a function ``run(ctx, cfg)`` (or an
``async def``, which the runner runs on an event loop of its own) that reads
tables through ``ctx.store`` and writes rows through ``ctx.write``. The runner
makes every stage resumable the same way:

* the config is written when the stage starts; a rerun with a different config
  is a user error unless ``fresh`` (which deletes the stage's own shards);
* a stage whose manifest exists is complete and is skipped;
* ``ctx.todo(items, table, key)`` hands the stage the items still to do for its
  shard: those its rank owns whose row is not yet in ``table``;
* writers are flushed on every exit path, and the manifest is written last;
* a run takes its shard's lease first: an older run of the same shard that is
  still alive (a killed driver's Ray task, a second shell) is fenced off, its
  unwritten rows discarded, before the temporary files are cleaned.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import hashlib
import inspect
import operator
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from trajkit import __version__
from trajkit import schema as S
from trajkit.concurrency import Share, bounded, machine_cpus
from trajkit.config import StageConfig, config_differences, config_hash, hashed_dict
from trajkit.errors import Fenced, StageStopped, UserError
from trajkit.models.accounting import Usage
from trajkit.progress import console, display, to_file
from trajkit.redact import Redactor, clean_endpoints
from trajkit.store import FILE_INPUTS, STAGES_DIR, ShardWriter, Store, remove_empty_tree

if TYPE_CHECKING:
    from trajkit.models.base import Backend, ModelSpec

T = TypeVar("T")


@dataclass(frozen=True)
class StageSpec:
    """What a stage is: its kind (``curate.import``), config class, function (plain or ``async def``) and
    tables, and ``help``, the one line its command shows (``trajkit synth tasks --help``).

    ``retry`` is the stage's one retry rule: called with the context and config
    before the stage runs (a first run finds nothing), it drops this rank's rows
    that a previous run left failed in a way a rerun may cure (a model request or
    a server that failed or timed out) and returns how many units run again; the
    runner counts them as ``retried``.

    ``report``, for a stage whose summary covers every shard's rows (an
    evaluation's report): called with the context and config, it builds that
    summary from the stage's rows; the stage returns it from ``run``, and the
    Ray executor calls it once more after every shard finished.
    """

    kind: str
    config: type[StageConfig]
    run: Callable[[StageContext, Any], dict[str, Any] | None | Awaitable[dict[str, Any] | None]]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    help: str = ""
    retry: Callable[[StageContext, Any], int] | None = None
    report: Callable[[StageContext, Any], dict[str, Any]] | None = None


# per table, the column whose values the manifest tallies as "<prefix>.<value>"
_TALLIES = {
    "rejected": ("reason", "rejected"),
    "trajectories": ("status", "status"),
    "servers": ("status", "servers"),
    "samples": ("verdict", "verdict"),
    "task_quality": ("judge_reason", "task_quality"),
    "trajectory_quality": ("judge_reason", "trajectory_quality"),
}


@dataclass
class StageContext:
    """What a running stage sees: the store (which redacts what it writes with the stage's redactor), its
    name and shard, writers and counters, its usage, and its ``share`` of the machine (the CPUs its pools
    size from)."""

    store: Store
    name: str
    kind: str
    rank: int = 0
    world_size: int = 1
    usage: Usage = field(default_factory=Usage)
    counts: Counter = field(default_factory=Counter)
    quiet: bool = False
    progress_file: Path | None = None
    share: Share = field(default_factory=Share)
    _writers: dict[str, ShardWriter] = field(default_factory=dict)
    _rejected: set[str] | None = None

    # ------------------------------------------------------------ writing
    def writer(self, table: str, rows_per_shard: int = 10_000) -> ShardWriter:
        """This stage's writer for a table (created on first use with ``rows_per_shard``)."""
        if table not in self._writers:
            self._writers[table] = self.store.writer(table, self.name, self.rank, rows_per_shard)
        return self._writers[table]

    def write(self, table: str, rows: dict[str, Any] | Iterable[dict[str, Any]] | pa.Table) -> int:
        """Add rows to this stage's shards of ``table``; returns how many."""
        rows = [rows] if isinstance(rows, dict) else rows
        if not isinstance(rows, pa.Table):
            rows = list(rows)
        self.writer(table).write(rows)
        self.counts[f"rows.{table}"] += len(rows)
        return len(rows)

    def reject(self, table: str, row_id: str, reason: str, detail: str | None = None) -> None:
        """Record that a row was rejected (it stays in its table), once per (row, reason) across resumes.

        A stage that writes a row and its rejects should flush the ``rejected``
        rows first: a kill between the two then redoes the row, and the rejects
        already written are skipped here (the other order would lose them).
        """
        reject_id = self.reject_id(table, row_id, reason)
        if self._rejected is None:
            self._rejected = self.done("rejected")
        if reject_id in self._rejected:
            return
        self._rejected.add(reject_id)
        self.write(
            "rejected",
            {
                "reject_id": reject_id,
                "row_id": row_id,
                "table_name": table,
                "stage": self.name,
                "reason": reason,
                "detail": detail,
            },
        )

    def reject_id(self, table: str, row_id: str, reason: str) -> str:
        """The id of this stage's ``rejected`` row for (row, reason): the key of a reject in ``todo``."""
        return S.content_id(table, row_id, self.name, reason)

    def flush(self) -> None:
        for w in self._writers.values():
            w.flush()

    def discard(self) -> None:
        """Forget the rows buffered and not yet written (a fenced-off run)."""
        self._writers.clear()

    def flush_every(self, rows: int, tables: tuple[str, ...]) -> Callable[[int], None]:
        """For work items that write several rows (a request's candidates and their rejects):
        returns ``wrote(n)``, which after ``rows`` rows flushes ``tables`` in the given order, so
        shards end only between work items and a killed stage leaves whole items."""
        for t in tables:
            self.writer(t, rows_per_shard=sys.maxsize)
        pending = 0

        def wrote(n: int) -> None:
            nonlocal pending
            pending += n
            if pending >= rows:
                for t in tables:
                    self.writer(t).flush()
                pending = 0

        return wrote

    async def fan_out(
        self,
        items: Iterable[Any],
        fn: Callable[[Any], Awaitable[Any]],
        *,
        concurrency: int,
        unit: str,
        write: Callable[[Any, Any], int | None],
        flush: tuple[int, tuple[str, ...]] | None = None,
        until: Callable[[], bool] | None = None,
    ) -> tuple[list[Any], list[Any]]:
        """The one way a stage fans out: ``fn`` over ``items`` with at most ``concurrency`` in flight.

        Each (item, result) goes to ``write`` in this coroutine as it finishes (no
        locks needed), which returns the rows it wrote; with ``flush=(rows,
        tables)`` those tables are flushed in order every ``rows`` rows, so shards
        end only between items. A progress bar counts items as ``unit``. An
        exception from ``fn`` or ``write`` (a bug, a budget cap) cancels the work
        in flight and propagates; faults that are data are rows made inside ``fn``.
        Once ``until()`` is true after a write, no item starts and those in flight
        are cancelled. Returns the items cancelled in flight and those never
        started, each in input order.
        """
        items = list(items)
        wrote = self.flush_every(*flush) if flush else None
        started: list[int] = []
        finished: set[int] = set()

        def feed():
            for index in range(len(items)):
                started.append(index)
                yield index

        async def run(index: int) -> Any:
            return await fn(items[index])

        with self.progress(len(items), unit) as advance:
            async with contextlib.aclosing(bounded(feed(), run, concurrency)) as results:
                async for index, result in results:
                    finished.add(index)
                    rows = write(items[index], result)
                    if wrote is not None:
                        wrote(rows or 0)
                    advance(1)
                    if until is not None and until():
                        break
        cancelled = [items[i] for i in started if i not in finished]
        return cancelled, items[len(started) :]

    def recount(self) -> None:
        """Set ``rows.<table>`` (and the tallies below) from this stage's and rank's shards, so a
        resumed run's manifest counts what an uninterrupted run's does."""
        self.flush()
        for table in S.TABLES:
            paths = self.store.shards(table, self.name, rank=self.rank)
            if not paths:
                continue
            self.counts[f"rows.{table}"] = sum(pq.read_metadata(p).num_rows for p in paths)
            if table not in _TALLIES:
                continue
            column, prefix = _TALLIES[table]
            for key in [k for k in self.counts if k.startswith(prefix + ".")]:
                del self.counts[key]
            values: Counter = Counter()
            for p in paths:
                values.update(pq.read_table(p, columns=[column]).column(0).to_pylist())
            if column == "judge_reason":
                unparsed = sum(n for v, n in values.items() if v is not None)
                if unparsed:
                    self.counts[f"{prefix}.unparsed"] = unparsed
                continue
            for value, n in values.items():
                self.counts[f"{prefix}.{value}"] = n

    # ------------------------------------------------------------ resume and sharding
    def todo(
        self,
        items: Iterable[T],
        done: str | Collection[Hashable],
        key: str | Callable[[T], Hashable],
        shard: str | Callable[[T], str] | None = None,
    ) -> list[T]:
        """The items still to do for this shard, in their order: those this rank owns (``mine`` of ``shard``'s
        id, by default ``key``'s) whose ``key`` is not done: not an id this stage already wrote to the table
        ``done`` names (or not among the keys ``done`` holds). ``key`` and ``shard``: a field of dict items,
        or a function of an item. Owned items found done (a resumed run's) are counted as ``resumed``."""
        key_of = key if callable(key) else operator.itemgetter(key)
        shard_of = key_of if shard is None else shard if callable(shard) else operator.itemgetter(shard)
        done = self.done(done) if isinstance(done, str) else done
        owned = [item for item in items if self.mine(shard_of(item))]
        todo = [item for item in owned if key_of(item) not in done]
        if len(owned) > len(todo):
            self.counts["resumed"] += len(owned) - len(todo)
        return todo

    def done(self, table: str) -> set[str]:
        """Ids of rows this stage (any rank) already wrote to a table."""
        return self.store.ids(table, stage=self.name)

    def mine(self, row_id: str) -> bool:
        """Whether this rank owns a row: a hash partition, so shards split the same rows."""
        if self.world_size == 1:
            return True
        return int(hashlib.sha256(row_id.encode()).hexdigest()[:8], 16) % self.world_size == self.rank

    # ------------------------------------------------------------ models
    def backend(self, spec: ModelSpec) -> Backend:
        """The backend of a model spec for this stage: its calls counted into the stage's usage (and budget),
        kept in the run's call cache, redacted as the stage's rows are; a stage run ``--fresh`` reuses no answer
        the cache held before (unless ``--reuse-cache``), resumed or not."""
        from trajkit.models import make_backend

        since = (self.store.stage_config(self.name) or {}).get("cache_since")
        return make_backend(spec, self.usage, self.store.root / "_cache", self.store.redactor, since)

    # ------------------------------------------------------------ reporting
    def log(self, message: str) -> None:
        if not self.quiet:
            from rich.markup import escape  # messages carry server and model text: shown literally

            text = escape(self.store.redactor.text(message))
            console().print(f"[dim]{escape(self.name)}[/]: {text}", highlight=False)

    @contextlib.contextmanager
    def progress(self, total: int | None, description: str = "") -> Iterator[Callable[[int], None]]:
        """Items done of ``total``, shown as ``trajkit.progress`` does (for a shard on a cluster: in its
        ``progress_file``, for the driver to show); yields ``advance(n=1)``."""
        if self.progress_file is not None:
            shown = to_file(self.progress_file, description)
        elif self.quiet:
            shown = contextlib.nullcontext(lambda done, total: None)
        else:
            shown = display(f"{self.name} {description}")
        done = 0
        with shown as show:
            show(done, total)

            def advance(n: int = 1) -> None:
                nonlocal done
                done += n
                show(done, total)

            yield advance


@functools.cache
def code_version() -> str:
    """The package version plus a hash of its source files (what runs, whatever git says: a commit made
    while a cluster runs changes nothing, an edited file does)."""
    return f"{__version__}+{source_hash(Path(__file__).parent)}"


def source_hash(package: Path) -> str:
    """A short hash of every file of a package directory (paths and contents; compiled files left out)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if path.suffix in (".pyc", ".pyo"):
            continue
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def check_config(store: Store, name: str, cfg: StageConfig, fresh: bool, kind: str | None = None) -> tuple[str, bool]:
    """Drop the stage if ``fresh``, else refuse a config whose data-changing fields differ from the one
    it was run with (each differing field named with both values); return the hash and whether the
    config is to be (re)pinned: a new or fresh stage, or one pinned before a field left the hash.
    A stage of another ``kind`` under the same name is refused, fresh or not (``synth filter`` and
    ``curate filter`` are both ``filter`` by default): it would be skipped as complete, or dropped."""
    chash = config_hash(cfg)
    previous = store.stage_config(name)
    if previous is not None and previous.get("stage", name) != name:
        raise UserError(
            f"stage names {name!r} and {previous['stage']!r} (already in {store.root}) share the folder "
            f"{store.stage_dir(name).relative_to(store.root)}; give this stage another name"
        )
    if previous is not None and kind is not None and previous.get("kind", kind) != kind:
        raise UserError(
            f"stage {name!r} in {store.root} is a {previous['kind']} stage, not {kind}; give this one another "
            "name (--name, or name: in a pipeline file)"
        )
    if fresh:
        store.drop_stage(name)
        return chash, True
    if previous is not None and previous["config_hash"] != chash:
        differ = config_differences(previous["config"], hashed_dict(cfg))
        if differ:
            raise UserError(
                f"stage {name!r} in {store.root} was run with a different config ({'; '.join(differ)}); "
                "pass --fresh to start it over"
            )
        return chash, True  # made before a field left the hash: same data, so re-pin under today's hash
    return chash, previous is None


def pin_config(
    store: Store, name: str, kind: str, cfg: StageConfig, chash: str, fresh_answers: bool, quiet: bool
) -> None:
    """Write the stage's ``_config.json`` (its config and hash); with ``fresh_answers`` (a fresh run without
    ``--reuse-cache``) also the time before which no answer the call cache held is reused (``cache_since``),
    which every shard's backends read from it."""
    config = {"stage": name, "kind": kind, "config": hashed_dict(cfg), "config_hash": chash}
    if fresh_answers:
        config["cache_since"] = time.time()
        if (store.root / "_cache").is_dir():
            _say(quiet, name, "fresh: no answer the call cache held is reused (--reuse-cache reuses them)")
    store.write_json(store.stage_dir(name) / "_config.json", config)


def check_runner_options(
    rank: int, world_size: int, budget_tokens: int | None, budget_cost: float | None, max_failed_calls: float = 0.5
) -> None:
    """The shard and budgets a stage runs under: at least one shard, a rank among them, budgets that are numbers >= 0,
    a share of failed calls from 0 to 1."""
    if not 0 <= max_failed_calls <= 1:  # NaN fails too
        raise UserError(f"--max-failed-calls must be a share from 0 to 1, not {max_failed_calls}")
    if world_size < 1:
        raise UserError(f"--world-size must be at least 1, not {world_size}")
    if not 0 <= rank < world_size:
        raise UserError(f"--rank {rank} is not in 0..{world_size - 1} (--world-size {world_size})")
    for flag, value in (("--budget-tokens", budget_tokens), ("--budget-cost", budget_cost)):
        if value is not None and not value >= 0:  # NaN fails too
            raise UserError(f"{flag} must be a number >= 0, not {value}")


def run_stage(
    store: Store,
    spec: StageSpec,
    cfg: StageConfig,
    name: str | None = None,
    fresh: bool = False,
    rank: int = 0,
    world_size: int = 1,
    quiet: bool = False,
    budget_tokens: int | None = None,
    budget_cost: float | None = None,
    progress_file: Path | None = None,
    cpus: int | None = None,
    redo_stale: bool = False,
    max_failed_calls: float = 0.5,
    reuse_cache: bool = False,
) -> dict[str, Any]:
    """Run (or resume, or skip) one stage and return its manifest. ``progress_file``: where a shard run by
    another process's executor keeps its progress (``trajkit.progress.to_file``); ``cpus``: the CPUs an
    executor gave it (by default every CPU this process may run on); ``reuse_cache``: a ``fresh`` run may
    take answers the call cache held before it. A completed stage whose inputs changed
    since it ran is stale: redone with ``redo_stale`` (a pipeline's), else refused. A stage more than
    ``max_failed_calls`` of whose model calls failed did no real work: a user error naming the endpoint and
    the error, its manifest unwritten (a rerun retries those calls)."""
    name = name or spec.kind.split(".")[-1]
    check_runner_options(rank, world_size, budget_tokens, budget_cost, max_failed_calls)
    redactor = Redactor.for_stage(cfg)  # rows, manifests, log lines, call cache entries and errors go through it
    with redactor.errors():
        chash, pin = check_config(store, name, cfg, fresh, spec.kind)
        done = None if fresh else _completed(store, name, rank, world_size, redo_stale, quiet)
        if done is not None:
            if not quiet:
                console().print(
                    f"[dim]{name}[/]: already complete, skipped{_summary(done, spec)}{_faults(done)}", highlight=False
                )
            return done
        # the stage's folders this run makes, removed if it fails leaving them empty; not with other ranks
        # starting beside it in the same folders
        made = [d for d in (store.root / STAGES_DIR, store.stage_dir(name)) if not d.is_dir() and world_size == 1]
        store = store.leased(name, rank, redactor)  # an older run of this shard still alive is fenced off from here on
        store.clean_temp(name, rank)
        _repair(store, name, rank, world_size, quiet)
        if pin:
            pin_config(store, name, spec.kind, cfg, chash, fresh and not reuse_cache, quiet)
        usage = Usage(budget_tokens, budget_cost, served_file=store.stage_dir(name) / "_served.json")
        share = Share(cpus or machine_cpus())
        ctx = StageContext(
            store, name, spec.kind, rank, world_size, usage, quiet=quiet, progress_file=progress_file, share=share
        )
        started, t0 = _now(), time.monotonic()
        extra = _execute(ctx, spec, cfg, made)
        _check_calls(ctx.usage, name, max_failed_calls)
        for table in S.TABLES:  # the stage's many small shards (written as rows finished) merged into few
            store.compact(table, name, rank)
        ctx.recount()
        manifest = {
            "stage": name,
            "kind": spec.kind,
            "config": clean_endpoints(cfg.model_dump(mode="json")),
            "config_hash": chash,
            "inputs": store.reads,
            "outputs": {t: store.count(t, stage=name) for t in S.TABLES if store.shards(t, name)},
            "shards": store.stage_shards(name, rank),
            "code_version": code_version(),
            "python": sys.version.split()[0],
            "cpus": ctx.share.cpus,
            "rank": rank,
            "world_size": world_size,
            "started_at": started,
            "finished_at": _now(),
            "seconds": round(time.monotonic() - t0, 3),
            "counts": dict(sorted(ctx.counts.items())),
            "usage": ctx.usage.as_dict(),
            **({"summary": extra} if extra else {}),
        }
        old_answers = ctx.usage.old_answers_only()
        if old_answers:
            manifest["warnings"] = [old_answers]
        store.lease.check()
        store.write_json(store.manifest_path(name, rank, world_size), manifest)
        if not quiet:
            console().print(
                f"[dim]{name}[/]: done in {manifest['seconds']:.1f}s{_summary(manifest, spec)}", highlight=False
            )
        say_warnings(manifest, quiet)
        return manifest


def _completed(
    store: Store, name: str, rank: int, world_size: int, redo_stale: bool, quiet: bool
) -> dict[str, Any] | None:
    """The manifest of a shard that completed, or None to run it. A complete stage whose shards disagree with
    its manifest (a shard damaged, lost, changed, copied in; counts that lie) is redone, never reported
    complete; one whose inputs changed since it ran (``stale``) is redone with ``redo_stale``, else refused
    in one line that names the input and the ways on."""
    done = store.manifest(name, rank, world_size)
    if done is None:
        return None
    why = _disagrees(store, done, name, rank)
    if why is None and (why := stale(store, done)) is not None and not redo_stale:
        raise UserError(
            f"stage {name!r} is stale: {why} since it ran; rerun it with --fresh, or with --redo-stale "
            "to redo it only if stale"
        )
    if why is None:
        return done
    _say(quiet, name, f"redone: {why}")
    store.drop_shard(name, rank, world_size)
    return None


def _disagrees(store: Store, manifest: dict[str, Any], name: str, rank: int) -> str | None:
    """Why a completed stage rank's shards are not what its manifest says, or None."""
    if bad := store.problems(None, name, rank):
        return bad[0]
    try:
        held = store.stage_shards(name, rank)
        for table in S.TABLES:
            store.validate(table, stage=name)
    except UserError as e:
        return str(e)
    if "shards" not in manifest:
        return "its manifest was written before stages listed their shards (an older trajkit)"
    if manifest.get("shards") != held:
        return "its shards are not the ones its manifest lists"
    counted = {t: sum(s["rows"] for s in shards.values()) for t, shards in held.items()}
    if manifest.get("world_size", 1) == 1 and manifest.get("outputs") != counted:
        return "its shards do not hold the rows its manifest counts"
    return None


def stale(store: Store, manifest: dict[str, Any]) -> str | None:
    """What a completed stage read that changed since (``table from stage X changed``, ``file F changed``),
    or None."""
    for table, versions in manifest.get("inputs", {}).items():
        for source, version in versions.items() if isinstance(versions, dict) else ():
            if table == FILE_INPUTS:
                if store.file_version(source) != version:
                    return f"its input file {source} changed"
                continue
            try:
                now = store.version(table, source)
            except UserError:
                now = None
            if now != version:
                return f"its input {table} from stage {source!r} changed"
    return None


def _repair(store: Store, name: str, rank: int, world_size: int, quiet: bool) -> None:
    """Before a stage rank (re)starts: its shard files no ledger lists (renamed into place by a write killed
    before it listed them, or copied in) are removed; if one it listed is missing or changed, it starts over,
    so a resume builds only on what it wrote."""
    store.remove_unlisted(name, rank)
    if bad := store.problems(None, name, rank):
        _say(quiet, name, f"starting over: {bad[0]}")
        store.drop_shard(name, rank, world_size)


def _say(quiet: bool, name: str, message: str) -> None:
    if not quiet:
        from rich.markup import escape

        console().print(f"[dim]{escape(name)}[/]: {escape(message)}", highlight=False)


def _execute(ctx: StageContext, spec: StageSpec, cfg: StageConfig, made: list[Path]) -> dict[str, Any]:
    """The stage's retry rule, then the stage (an async one on an event loop of its own): its summary. Its rows
    are flushed on every exit path; one that fails having written nothing pins no config, holds no lease and
    leaves none of the ``made`` folders."""
    store, name = ctx.store, ctx.name
    try:
        retried = spec.retry(ctx, cfg) if spec.retry is not None else 0
        if retried:
            ctx.counts["retried"] += retried
            ctx.log(f"running again {retried} unit(s) that failed in a way a rerun may cure")
        extra = spec.run(ctx, cfg)
        if inspect.isawaitable(extra):
            extra = asyncio.run(extra)
        return extra or {}
    except Fenced:
        ctx.discard()
        raise
    except StageStopped as e:
        ctx.flush()
        raise StageStopped(f"stage {name!r} stopped: {e}; rerun to resume") from None
    except BaseException:
        ctx.flush()
        if not any(store.shards(t, name) for t in S.TABLES):  # no rows: pin nothing, hold nothing
            (store.stage_dir(name) / "_config.json").unlink(missing_ok=True)
            (store.stage_dir(name) / "_served.json").unlink(missing_ok=True)
            store.lease.release()
            for folder in reversed(made):  # left empty, or holding empty folders (a trainer's output_dir)
                remove_empty_tree(folder)
        raise
    finally:
        ctx.flush()


def _check_calls(usage: Usage, name: str, max_failed: float) -> None:
    """A stage more than ``max_failed`` of whose model calls got no answer did no real work: one line naming
    the model, its endpoint and the last error (exit 2: the endpoint is the user's environment)."""
    answered = usage.calls + usage.cached_calls  # a cached answer is an answer
    if usage.failed_calls and usage.failed_calls / answered > max_failed:
        raise UserError(
            f"stage {name!r}: {usage.failed_calls} of {answered} model calls failed ({usage.failure}); "
            "fix the endpoint and rerun to retry them (--max-failed-calls sets the share a stage may lose)"
        )


def _faults(manifest: dict[str, Any]) -> str:
    """``; kept as faults: servers.failed 2 (--fresh redoes the stage)`` for a completed stage that kept rows of
    failed servers or unfinished trajectories: skipping it says so, or a fixed server stays failed unseen."""
    ok = ("servers.ok", "status.completed")
    faults = {
        k: v for k, v in manifest.get("counts", {}).items() if k.startswith(("servers.", "status.")) and k not in ok
    }
    if not faults:
        return ""
    return f"; kept as faults: {', '.join(f'{k} {v}' for k, v in faults.items())} (--fresh redoes the stage)"


def say_warnings(manifest: dict[str, Any], quiet: bool = False) -> None:
    """A stage's warnings (its manifest's ``warnings``), one line each."""
    for warning in manifest.get("warnings", []):
        _say(quiet, manifest["stage"], f"warning: {warning}")


def _summary(manifest: dict[str, Any], spec: StageSpec) -> str:
    """`` (tasks 12, rejected 3; 40 model calls, 8 from the cache)``: the rows a stage wrote (nothing for a
    stage that writes no table: card) and, for a stage that called a model, how many calls the cache answered."""
    counts = manifest.get("counts", {})
    rows = ", ".join(f"{k.split('.', 1)[1]} {v}" for k, v in counts.items() if k.startswith("rows."))
    usage = manifest.get("usage", {})
    calls, cached = usage.get("calls", 0), usage.get("cached_calls", 0)
    said = f"; {calls + cached} model calls, {cached} from the cache" if calls + cached else ""
    return f" ({rows or 'no rows'}{said})" if rows or spec.outputs or said else ""
