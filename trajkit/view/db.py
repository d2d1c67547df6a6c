"""The viewer's DuckDB: the store's views for the pages, rebuilt when shards change; the SQL box's two layers.

The pages run only the server's own queries, with parameters, on a connection whose
file access is limited to the run, with extension installs and loads off and its
configuration locked. A user's query (the SQL box) passes two independent layers:
(a) ``check_read``: DuckDB's parser must make one SELECT of it (DESCRIBE, SHOW,
SUMMARIZE, WITH, FROM and VALUES parse as SELECT), or an EXPLAIN (ANALYZE included) of
one; (b) it runs in a process that cannot write (``sqlbox``), on a read-only copy of the
views kept in a DuckDB file outside the run, so nothing under the run, no setting and
no view or table can change even when (a) lets a statement through.
Shards are read, never locked: a stage may write the run while it is viewed; when
the set of shards changes (new shards, a ``--fresh`` rerun deleting some) the views
are recreated, and a query that met a vanished file is run once more on fresh views.
Pages look rows up in in-memory copies of light columns (``cached``), dropped when a
table they read changes (a review rebuilds what reads reviews, not the copy of a
million trajectories); a copy with a key is stored in the order of the key's hash,
so a lookup by key (``keyed``) reads one row group of it, whatever the order of the ids.
Reviews, written one shard per decision, are kept in memory and brought up to date by
reading only the shards that are new (``REVIEWS``, with each row's review in force in
``LATEST``); the pages' ``reviews`` view reads them, so a decision recreates no view.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from trajkit import schema as S
from trajkit import sqlread
from trajkit.errors import UserError
from trajkit.store import Store, absent_columns, existing_run
from trajkit.view.sqlbox import BOX, Unavailable

QUERY_TIMEOUT_S = 30.0


class QueryError(ValueError):
    """A query the viewer refuses or DuckDB rejects; its message is shown to the user."""


class Watchdog:
    """Interrupts each watched cursor still running at its deadline, from one thread for all queries
    (a timer thread started per query costs more than a lookup by key)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._deadlines: dict[int, tuple[float, Any]] = {}
        self._thread: threading.Thread | None = None

    def watch(self, cur: Any, seconds: float) -> None:
        with self._cv:
            self._deadlines[id(cur)] = (time.monotonic() + seconds, cur)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="trajkit-view-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()

    def done(self, cur: Any) -> None:
        with self._cv:
            self._deadlines.pop(id(cur), None)

    def _run(self) -> None:
        with self._cv:
            while True:
                now = time.monotonic()
                for key, (deadline, cur) in list(self._deadlines.items()):
                    if deadline <= now:
                        cur.interrupt()
                        del self._deadlines[key]
                soonest = min((deadline for deadline, _ in self._deadlines.values()), default=None)
                self._cv.wait(None if soonest is None else soonest - now)


WATCHDOG = Watchdog()
MANIFESTS = "_manifests"  # the signature's entry for the stages' manifests
REVIEWS = "_reviews_all"  # every review, in memory
LATEST = "_reviews_latest"  # each reviewed row's review in force
LATEST_ORDER = "ORDER BY reviewed_at DESC, review_id DESC"


def _sources(sql: str) -> set[str]:
    """The tables whose shards feed a query: those it names (a column of the same name counts too, which
    only costs a needless rebuild), and for a base table's view the annotations and rejections it joins."""
    out = set()
    for table in S.TABLES:
        if re.search(rf"\b{table}\b", sql):
            out.add(table)
            if S.TABLES[table].base is None:
                out |= {a.name for a in S.TABLES.values() if a.base == table} | {"rejected"}
    return out


class RunDB:
    """One run's views. ``query`` serves the pages; ``read_only`` serves the SQL box."""

    def __init__(self, run: str | Path, memory_limit: str = "4GB"):
        self.store = Store(Path(run).resolve())
        self.memory_limit = memory_limit
        self.user_queries = 0  # the SQL box's queries that passed the parser's check and were run
        self._lock = threading.Lock()
        self._con = None
        self._signature: dict[str, tuple[str, ...]] = {}
        self._cached: dict[str, set[str]] = {}  # name -> the tables its rows come from
        self._memos: dict[str, tuple[Any, frozenset[str] | None]] = {}  # name -> value, the tables it read
        self._local = threading.local()
        self._views_lock = threading.Lock()
        self._views: tuple[str, dict[str, tuple[str, ...]]] | None = None  # the SQL box's views file, its signature
        self._views_dir: str | None = None
        self._views_made = itertools.count()
        self._reviews_read: set[str] = set()  # the review shards in REVIEWS
        self._labels: tuple[tuple[int, int] | None, list[Any]] | None = None

    def signature(self) -> dict[str, tuple[str, ...]]:
        """Each table's shard files and the stages' manifests present now: a change means the views are stale."""
        root = self.store.root
        sig = {}
        for table in S.TABLES:
            d = root / table
            names = sorted(os.listdir(d)) if d.is_dir() else []
            sig[table] = tuple(n for n in names if n.endswith(".parquet") and not n.startswith(".tmp-"))
        sig[MANIFESTS] = tuple(sorted(str(p.relative_to(root)) for p in root.glob("_stages/*/_manifest*.json")))
        return sig

    def _with_views(self, con) -> dict[str, tuple[str, ...]]:
        """(Re)create the views on ``con`` over the shards present; the signature they were made from
        (listed again when a shard vanished while they were made)."""
        tries = 3
        while True:
            sig = self.signature()
            try:
                self.store.create_views(con)
                return sig
            except UserError:
                tries -= 1
                if not tries:
                    raise

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Within it, this thread's queries use the views as they were at its start: a page lists the
        shards once, not before each of its queries (a query that meets a vanished shard still runs
        again on fresh views)."""
        self.connection()
        self._local.pinned = True
        try:
            yield
        finally:
            self._local.pinned = False

    def reload(self) -> None:
        """Look at the run again now, even inside ``pinned`` (after this thread wrote a review)."""
        pinned = getattr(self._local, "pinned", False)
        self._local.pinned = False
        try:
            self.connection()
        finally:
            self._local.pinned = pinned

    def connection(self, force: bool = False):
        """The current connection, rebuilt first if the run's shards changed (unless ``pinned``)."""
        if not force and self._con is not None and getattr(self._local, "pinned", False):
            return self._con
        with self._lock:
            sig = self.signature()
            if force or self._con is None or sig != self._signature:
                fresh = self._con is None
                if fresh:
                    self._con = self._connect()
                remade = force or fresh or {t for t in sig if sig[t] != self._signature.get(t)} != {"reviews"}
                if remade:
                    sig = self._with_views(self._con)
                self._drop_stale(sig, everything=force)
                self._signature = sig
                self._read_reviews(sig["reviews"], everything=force or fresh)
                if remade:  # the store's view of the review shards, replaced by one of the in-memory reviews
                    self._con.execute(f'CREATE OR REPLACE VIEW reviews AS FROM "{REVIEWS}"')
            return self._con

    def _read_reviews(self, shards: tuple[str, ...], everything: bool) -> None:
        """Bring REVIEWS and LATEST up to date with these review shards (file names), reading the new ones
        only (all of them when one went away or ``everything``)."""
        import duckdb

        con = self._con
        if everything or not self._reviews_read <= set(shards):
            con.register("_reviews_empty", S.REVIEWS.arrow_schema().empty_table())
            con.execute(f'CREATE OR REPLACE TABLE "{REVIEWS}" AS FROM _reviews_empty')
            con.execute(f'CREATE OR REPLACE TABLE "{LATEST}" AS FROM _reviews_empty')
            con.unregister("_reviews_empty")
            self._reviews_read = set()
        new = [n for n in shards if n not in self._reviews_read]
        if new:
            folder = self.store.table_dir("reviews")
            try:
                con.execute(
                    "CREATE OR REPLACE TEMP TABLE _reviews_new AS FROM read_parquet(?::VARCHAR[], union_by_name = true)",
                    [[str(folder / n) for n in new]],
                )
            except duckdb.IOException:  # a shard went away meanwhile (--fresh): all of them, listed again
                return self._read_reviews(tuple(p.name for p in self.store.shards("reviews")), everything=True)
            con.execute(f'INSERT INTO "{REVIEWS}" BY NAME FROM _reviews_new')
            con.execute(
                f'DELETE FROM "{LATEST}" l USING _reviews_new n '
                "WHERE l.target_kind = n.target_kind AND l.target_id = n.target_id"
            )
            con.execute(
                f'INSERT INTO "{LATEST}" FROM "{REVIEWS}" a SEMI JOIN _reviews_new n '
                "ON a.target_kind = n.target_kind AND a.target_id = n.target_id "
                f"QUALIFY row_number() OVER (PARTITION BY a.target_kind, a.target_id {LATEST_ORDER}) = 1"
            )
            con.execute("DROP TABLE _reviews_new")
            self._reviews_read |= set(new)

    def labels(self) -> list[Any]:
        """The run's labels (``accepted.run_labels``), read again when ``labels.yaml`` changes."""
        from trajkit.accepted import LABELS_FILE, run_labels

        try:
            st = os.stat(self.store.root / LABELS_FILE)
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if self._labels is None or self._labels[0] != stamp:
            self._labels = (stamp, run_labels(self.store.root))
        return self._labels[1]

    def _drop_stale(self, sig: dict[str, tuple[str, ...]], everything: bool) -> None:
        """Drop the in-memory copies (and computed values) that read a table whose shards changed: all of
        them when the stages' manifests changed (they order annotation rows) or ``everything``."""
        old = self._signature
        changed = {t for t in S.TABLES if sig.get(t) != old.get(t)}
        if everything or sig.get(MANIFESTS) != old.get(MANIFESTS):
            changed = set(S.TABLES)
        for name, tables in list(self._cached.items()):
            if tables & changed:
                self._con.execute(f'DROP TABLE IF EXISTS "_cached_{name}"')
                del self._cached[name]
        # a new dict: a value computed on the old views meanwhile is not kept
        self._memos = {k: v for k, v in self._memos.items() if v[1] is not None and not v[1] & changed}

    def _connect(self):
        import duckdb

        con = duckdb.connect()
        sqlread.lock(con, folders=[str(self.store.root)], memory_limit=self.memory_limit)
        return con

    def query(self, sql: str, params: list[Any] | None = None) -> pa.Table:
        """Run one of the viewer's own queries (once more on fresh views if a shard vanished)."""
        import duckdb

        try:
            return self._run(sql, params, fresh=False)
        except duckdb.IOException:
            return self._run(sql, params, fresh=True)

    def _run(self, sql: str, params: list[Any] | None, fresh: bool) -> pa.Table:
        import duckdb

        cur = self.connection(force=fresh).cursor()
        WATCHDOG.watch(cur, QUERY_TIMEOUT_S)
        try:
            return cur.sql(sql, params=params or None).to_arrow_table()
        except duckdb.InterruptException:
            raise QueryError(f"query stopped after {QUERY_TIMEOUT_S:.0f} s") from None
        except duckdb.IOException as e:
            if not fresh:
                raise
            raise QueryError(str(e).splitlines()[0]) from None
        except duckdb.Error as e:
            raise QueryError(str(e).splitlines()[0]) from None
        finally:
            WATCHDOG.done(cur)
            cur.close()

    def cached(
        self,
        name: str,
        select: Callable[[], str],
        key: str | None = None,
        reads: set[str] | None = None,
        params: list[Any] | None = None,
    ) -> str:
        """The name of an in-memory table holding the rows of the query ``select()`` writes, built
        once and again after a table it reads changes (once more on fresh views if a shard vanished
        meanwhile). The tables it reads are those its text names, as views or in shard paths.

        Pages look rows up by key in these instead of scanning every shard through the views;
        the heavy columns are then read from one shard. With ``key``, the rows are stored in
        the order of the key's hash (column ``_h``), which ``keyed`` lookups prune on. ``reads``
        names the tables it reads when its text does not (a copy made from another copy); ``params``, the
        values of the query's parameters."""
        import duckdb

        try:
            return self._build(name, select, key, reads, params, fresh=False)
        except duckdb.IOException:
            return self._build(name, select, key, reads, params, fresh=True)

    def _build(
        self,
        name: str,
        select: Callable[[], str],
        key: str | None,
        reads: set[str] | None,
        params: list[Any] | None,
        fresh: bool,
    ) -> str:
        table = f"_cached_{name}"
        con = self.connection(force=fresh)
        if name in self._cached:
            return table
        sql = select()  # outside the lock: it may run queries of its own
        with self._lock:
            if name not in self._cached:
                query = f'SELECT hash("{key}") AS _h, * FROM ({sql}) ORDER BY _h' if key else sql
                con.execute(f'CREATE OR REPLACE TABLE "{table}" AS {query}', params or None)
                self._cached[name] = reads or _sources(sql)
        return table

    def drop(self, name: str) -> None:
        """Forget an in-memory table ``cached`` made (its memory is freed)."""
        with self._lock:
            if self._cached.pop(name, None) is not None:
                self._con.execute(f'DROP TABLE IF EXISTS "_cached_{name}"')

    def keyed(self, table: str, key: str, ids: list[str], columns: str = "* EXCLUDE (_h)", where: str = "") -> list:
        """The rows of a cached table made with ``key`` whose key is one of ``ids`` (and match ``where``,
        an SQL condition without parameters): its min/max statistics on ``_h`` skip the other row groups."""
        return self.rows(
            f'SELECT {columns} FROM "{table}" WHERE _h IN (SELECT hash(unnest(?::VARCHAR[]))) '
            f"AND {key} IN (SELECT unnest(?::VARCHAR[])){' AND ' + where if where else ''}",
            [ids, ids],
        )

    def memo(self, name: str, compute: Callable[[], Any], reads: frozenset[str] | None = None) -> Any:
        """A value the pages compute from the run (the tasks page's filter choices), once per change of it,
        or of the tables in ``reads`` when given."""
        self.connection()
        memos = self._memos  # a rebuild meanwhile replaces it: the value computed on old views is not kept
        if name not in memos:
            memos[name] = (compute(), reads)
        return memos[name][0]

    def shards_of(self, table: str) -> str:
        """A base table's shards, each row with its ``filename`` and ``file_row_number``."""
        paths = self.store.shards(table)
        if not paths:
            return f"(SELECT *, NULL::VARCHAR AS filename, NULL::BIGINT AS file_row_number FROM {table} WHERE false)"
        listed = ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths)
        source = f"read_parquet([{listed}], filename = true, file_row_number = true, union_by_name = true)"
        return f"(SELECT *{absent_columns(table, paths)} FROM {source})"

    def row_at(self, filename: str, row: int, columns: tuple[str, ...]) -> dict[str, Any]:
        """Some columns of one row of one shard, by its position (DuckDB skips the shard's other row groups);
        a column the shard lacks (written before it was added) is None."""
        names = ", ".join("'" + c + "'" for c in columns)
        found = self.rows(
            f"SELECT COLUMNS(lambda c: list_contains([{names}], c)) FROM read_parquet(?::VARCHAR[], file_row_number = true) "
            "WHERE file_row_number = ?",
            [[filename], row],
        )[0]
        return {c: found.get(c) for c in columns}

    def rows(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        return self.query(sql, params).to_pylist()

    def read_only(self, sql: str) -> pa.Table:
        """A user's query (the SQL box): one read statement by DuckDB's parser (``check_read``), run in a
        process that cannot write, on the views file (``sqlbox``); its result, or QueryError."""
        check_read(sql)
        self.user_queries += 1
        views, sig = self._views_file()
        table, error, io = self._in_box(views, sql)
        if error is not None and io and self.signature() != sig:  # a shard vanished meanwhile: once more
            table, error, io = self._in_box(self._views_file()[0], sql)
        if error is not None:
            raise QueryError(error)
        return table

    def _in_box(self, views: str, sql: str) -> tuple[pa.Table | None, str | None, bool]:
        try:
            return BOX.run(views, str(self.store.root), sql, QUERY_TIMEOUT_S, self.memory_limit)
        except Unavailable as e:
            raise QueryError(str(e)) from None

    def _views_file(self) -> tuple[str, dict[str, tuple[str, ...]]]:
        """A DuckDB file holding the run's views as they are now, outside the run (the SQL box opens it
        read-only), written again when the shards changed; and the signature it was made from."""
        import duckdb

        with self._views_lock:
            if self._views is None or self.signature() != self._views[1]:
                if self._views_dir is None:
                    self._views_dir = tempfile.mkdtemp(prefix="trajkit-view-")
                    weakref.finalize(self, shutil.rmtree, self._views_dir, True)
                path = os.path.join(self._views_dir, f"views-{next(self._views_made)}.duckdb")
                con = duckdb.connect(path)
                try:
                    sig = self._with_views(con)
                finally:
                    con.close()
                if self._views is not None:
                    os.unlink(self._views[0])  # a child that opened it keeps reading it
                self._views = (path, sig)
            return self._views


def check_read(sql: str) -> None:
    """Layer (a) of the SQL box (``sqlread.check_read``): one SELECT or an EXPLAIN of one; QueryError otherwise."""
    try:
        sqlread.check_read(sql)
    except sqlread.NotARead as e:
        raise QueryError(str(e)) from None


def open_run(run: str | Path) -> RunDB:
    """A RunDB, or a user error if the directory is not a run."""
    existing_run(run)
    return RunDB(Path(run))
