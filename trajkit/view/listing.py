"""The trajectory list: filters from the query string, sorting, the counts of each filter's values, and the
order the review flow walks (the row after or before another, the next unreviewed one, progress).

Every query is the server's own, with the filter values as parameters; a value the run does not have
matches nothing. The rows come from one in-memory copy of the trajectories' light columns with their
judge score, reject reasons and writing stage (``list_table``); review states from the in-memory
reviews (``db.LATEST``), so a decision rebuilds nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from trajkit import schema as S
from trajkit.store import SHARD_RE
from trajkit.view.db import LATEST, RunDB

PAGE_SIZE = 50
# the list's first order: by task, each trajectory followed by the ones that extend it
TASK_ORDER = "task_id, coalesce(parent_id, traj_id), parent_id IS NOT NULL, traj_id"
SORTS = {  # what the list sorts by; ties (and "task") in TASK_ORDER (``pos``)
    "task": "pos",
    "trajectory": "traj_id",
    "model": "model",
    "status": "status",
    "verdict": "verdict",
    "turns": "num_turns",
    "tool_calls": "num_tool_calls",
    "seconds": "total_s",
    "tokens": "tokens",
    "completeness": "completeness",
    "stage": "stage",
}
REVIEW_STATES = ("accept", "reject", "labelled", "reviewed", "none")
# filters on the list table's ENUM columns (a list of them for tools and reject reasons)
ENUM_COLUMNS = {
    "status": "status",
    "verdict": "verdict",
    "reason_code": "reason_code",
    "model": "model",
    "stage": "stage",
    "tool": "tools",
    "reject": "rejects",
}
# the list page's columns
SHOWN = (
    "traj_id, task_id, parent_id, model, status, reason_code, verdict, num_turns, num_tool_calls, total_s, tokens, "
    "completeness, stage, reject_reason"
)
NULLABLE = ("verdict", "reason_code", "reject")
TOOL_BITS = 64  # their value "none" asks for rows without one
FACETS = ("status", "verdict", "reason_code", "model", "stage")  # the ENUM columns a row's ``facet`` holds
FILTERS = (  # name, what the page calls it
    ("status", "status"),
    ("verdict", "verdict"),
    ("reason_code", "reason code"),
    ("reject", "reject reason"),
    ("review", "review"),
    ("label", "label"),
    ("reviewer", "reviewer"),
    ("tool", "tool"),
    ("model", "model"),
    ("stage", "stage"),
    ("extension", "extension"),
    ("task", "task"),
)
NONE = "none"  # the value of a filter that asks for rows without one (verdict, reason code, reject reason)
REVIEWED = "(decision IS NOT NULL OR coalesce(len(labels), 0) > 0)"  # a review in force that says something
ON_REVIEWS = ("review", "label", "reviewer")  # the filters on reviews
SELECTIONS_KEPT = 8  # in-memory copies of the places of the rows a combination of filters keeps (``source``)


LIST_SOURCES = frozenset({"trajectories", "trajectory_quality", "rejected"})  # the tables the list table reads


def list_table(db: RunDB) -> str:
    """The in-memory copy of every trajectory's light columns the list, the flow and the pages read; the
    columns filters compare and group are ENUMs (a few times faster on a million rows than text)."""
    return db.cached("trajectories", lambda: _list_sql(db), key="traj_id")


def by_task(db: RunDB, task_id: str) -> list[dict[str, Any]]:
    """The trajectories of a task (id, parent, model, rollout, status), in the list's order, from a copy
    of the list table kept in the order of the task's hash (a lookup reads one row group of it)."""
    table = list_table(db)
    index = db.cached(
        "trajectories_by_task",
        lambda: f'SELECT task_id, traj_id, parent_id, model, rollout_index, status, pos FROM "{table}"',
        key="task_id",
        reads=set(LIST_SOURCES),
    )
    rows = db.keyed(
        index, "task_id", [task_id], "traj_id, parent_id, model::VARCHAR AS model, rollout_index, status, pos"
    )
    return sorted(rows, key=lambda r: r["pos"])


def _list_sql(db: RunDB) -> str:
    """The list table's query: the light columns, the stage that wrote each shard (by its file name), the
    judge's completeness, the reject reasons, ``pos`` (its place in ``TASK_ORDER``) and ``facet``."""
    shards = db.shards_of("trajectories")

    def found(sql: str) -> list[str]:
        return [r["v"] for r in db.rows(f"SELECT DISTINCT v FROM ({sql}) WHERE v IS NOT NULL ORDER BY 1")]

    models = found(f"SELECT model AS v FROM {shards}")
    tools = found(f"SELECT unnest(tools_called) AS v FROM {shards}")
    reasons = found("SELECT reason AS v FROM rejected WHERE table_name = 'trajectories'")
    files = {str(p): (m["stage"] if (m := SHARD_RE.match(p.name)) else None) for p in db.store.shards("trajectories")}
    stages = sorted({v for v in files.values() if v})
    by_file = ", ".join(f"({_lit(f)}, {_lit(st) if st else 'NULL'})" for f, st in files.items()) or "(NULL, NULL)"
    sizes = {"status": len(S.TRAJ_STATUS), "verdict": len(S.VERDICTS), "reason_code": len(S.REASON_CODES)}
    sizes.update(model=len(models), stage=len(stages))
    return (  # pos is numbered over the few columns it needs, then joined back (a window over whole rows is slower)
        f"WITH light AS MATERIALIZED (SELECT t.traj_id, t.task_id, t.parent_id, t.rollout_index, TRY_CAST(t.model AS {_enum(models)}) AS model, "
        f"TRY_CAST(t.status AS {_enum(S.TRAJ_STATUS)}) AS status, t.reason, "
        f"TRY_CAST(t.reason_code AS {_enum(S.REASON_CODES)}) AS reason_code, "
        f"TRY_CAST(t.verdict AS {_enum(S.VERDICTS)}) AS verdict, t.num_turns, t.num_tool_calls, "
        f"TRY_CAST(list_distinct(t.tools_called) AS {_enum(tools)}[]) AS tools, t.total_s, "
        "t.prompt_tokens + t.completion_tokens AS tokens, left(t.final_answer, 300) AS final_answer, "
        f"TRY_CAST(f.stage AS {_enum(stages)}) AS stage, q.completeness, r.reject_reason, "
        f"TRY_CAST(string_split(r.reject_reason, '; ') AS {_enum(reasons)}[]) AS rejects, t.filename, t.file_row_number "
        f"FROM {shards} t LEFT JOIN (VALUES {by_file}) f(file, stage) ON f.file = t.filename "
        "LEFT JOIN (SELECT traj_id, completeness FROM trajectory_quality) q ON q.traj_id = t.traj_id "
        "LEFT JOIN (SELECT row_id, string_agg(DISTINCT reason, '; ' ORDER BY reason) AS reject_reason "
        "FROM rejected WHERE table_name = 'trajectories' GROUP BY 1) r ON r.row_id = t.traj_id) "
        f"SELECT light.*, n.pos, {_facet(sizes)} AS facet, {_tool_bits(len(tools))} AS tool_bits FROM light JOIN "
        f"(SELECT filename, file_row_number, row_number() OVER (ORDER BY {TASK_ORDER})::INTEGER AS pos FROM light) n "
        "USING (filename, file_row_number)"
    )


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _enum(values: Any) -> str:
    """The ENUM type of these values (VARCHAR when there are none)."""
    if not values:
        return "VARCHAR"
    return "ENUM(" + ", ".join(_lit(str(v)) for v in values) + ")"


def _in_reviews(condition: str) -> str:
    return f"traj_id IN (SELECT target_id FROM \"{LATEST}\" WHERE target_kind = 'trajectory' AND {condition})"


@dataclass
class ListQuery:
    """A list page's filters, sort and page, from the query string (unknown names and sorts are ignored);
    a subclass names its filters and sorts."""

    FILTERS: ClassVar[tuple[str, ...]] = ()
    SORTS: ClassVar[Mapping[str, str]] = {}
    filters: dict[str, str] = field(default_factory=dict)
    sort: str = "task"
    desc: bool = False
    page: int = 1

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Self:
        filters = {k: params[k] for k in cls.FILTERS if params.get(k)}
        sort = params.get("sort", "task") if params.get("sort") in cls.SORTS else "task"
        try:
            page = max(1, int(params.get("page", "1")))
        except ValueError:
            page = 1
        return cls(filters, sort, params.get("dir") == "desc", page)


@dataclass
class TrajQuery(ListQuery):
    """The trajectory list's query."""

    FILTERS: ClassVar[tuple[str, ...]] = tuple(name for name, _ in FILTERS)
    SORTS: ClassVar[Mapping[str, str]] = SORTS

    def params(self, **changes: Any) -> dict[str, Any]:
        """The query string of this list (page left out), with ``changes``; for links and forms."""
        out: dict[str, Any] = {**self.filters, "sort": self.sort, "dir": "desc" if self.desc else "asc"}
        return {k: v for k, v in {**out, **changes}.items() if v not in (None, "")}

    def where(self, choices: dict[str, list[str]]) -> tuple[str, list[Any]]:
        """The SQL condition over the list table, and its parameters; a value of an ENUM column that is
        not among ``choices`` (what the run holds) matches nothing."""
        clauses, params = [], []

        def add(clause: str, *values: Any) -> None:
            clauses.append(clause)
            params.extend(values)

        f = self.filters
        for name, column in ENUM_COLUMNS.items():
            value = f.get(name)
            if value is None:
                continue
            if value == NONE and name in NULLABLE:
                add(f"{column} IS NULL")
            elif value not in choices.get(name, ()):
                add("false")
            elif name == "tool" and len(choices["tool"]) <= TOOL_BITS:
                add("(tool_bits & ?::UBIGINT) != 0", 1 << choices["tool"].index(value))
            elif name in ("tool", "reject"):
                add(f"list_contains({column}, ?)", value)
            else:
                add(f"{column} = ?", value)
        if "task" in f:
            add("task_id = ?", f["task"])
        review = f.get("review")
        if review in ("accept", "reject"):
            add(_in_reviews("decision = ?"), review)
        elif review == "labelled":  # labels and no decision
            add(_in_reviews("decision IS NULL AND coalesce(len(labels), 0) > 0"))
        elif review == "reviewed":
            add(_in_reviews(REVIEWED))
        elif review == NONE:
            add(f"NOT {_in_reviews(REVIEWED)}")
        if "label" in f:
            add(_in_reviews("list_contains(labels, ?)"), f["label"])
        if "reviewer" in f:
            add(_in_reviews(f"reviewer = ? AND {REVIEWED}"), f["reviewer"])
        if f.get("extension") in ("yes", "no"):
            add(f"parent_id IS {'NOT ' if f['extension'] == 'yes' else ''}NULL")
        return (" AND ".join(clauses) or "true"), params

    def order(self, reverse: bool = False) -> str:
        col, desc = SORTS[self.sort], self.desc != reverse
        first = f"{col} {'DESC' if desc else 'ASC'} NULLS {'FIRST' if reverse else 'LAST'}"
        return first if col == "pos" else f"{first}, pos {'DESC' if reverse else 'ASC'}"

    def place(self) -> str:
        """The list table's columns that place a row in this order (what ``beyond`` reads of it)."""
        return "traj_id, pos" + ("" if SORTS[self.sort] == "pos" else f", {SORTS[self.sort]}")

    def beyond(self, row: dict[str, Any], before: bool) -> tuple[str, list[Any]]:
        """The condition of the rows after ``row`` in this order (before it with ``before``): the sort
        column (nulls last), then ``pos``."""
        col, value, pos = SORTS[self.sort], row[SORTS[self.sort]], row["pos"]
        later = "<" if self.desc else ">"
        earlier = ">" if self.desc else "<"
        if value is None:
            if before:
                return f"({col} IS NOT NULL OR pos < ?)", [pos]
            return f"({col} IS NULL AND pos > ?)", [pos]
        if before:
            return f"({col} IS NOT NULL AND ({col} {earlier} ? OR ({col} = ? AND pos < ?)))", [value, value, pos]
        return f"({col} IS NULL OR {col} {later} ? OR ({col} = ? AND pos > ?))", [value, value, pos]


def condition(db: RunDB, q: TrajQuery) -> tuple[str, list[Any]]:
    """``q``'s SQL condition and parameters against what the run holds."""
    return q.where(choices(db))


def source(db: RunDB, q: TrajQuery) -> tuple[str, str, list[Any]]:
    """Where the review flow reads ``q``'s rows from, and the condition and parameters still to apply there.

    Without filters on the run's own columns, the list table. With them, an in-memory copy of the columns
    that place the rows they keep in ``q``'s order (``TrajQuery.place``), in task order, made once per
    combination of them and of the order (the last ``SELECTIONS_KEPT``) and dropped with the list table:
    the flow walks the same list after each decision, and scanning the few narrow rows kept costs a
    fraction of scanning every row of the list table. The filters on reviews (``ON_REVIEWS``) stay in the
    condition, since a decision changes the rows they keep."""
    found = choices(db)
    table = list_table(db)
    where, params = TrajQuery({k: v for k, v in q.filters.items() if k not in ON_REVIEWS}).where(found)
    rest = TrajQuery({k: v for k, v in q.filters.items() if k in ON_REVIEWS}).where(found)
    if where == "true":
        return table, *rest
    columns = q.place()
    name = "selection_" + hashlib.sha256(json.dumps([where, params, columns]).encode()).hexdigest()[:16]
    kept = db.memo("selections", dict, LIST_SOURCES)  # their names, oldest first
    kept.pop(name, None)
    kept[name] = True
    while len(kept) > SELECTIONS_KEPT:
        oldest = next(iter(kept))
        del kept[oldest]
        db.drop(oldest)
    made = db.cached(
        name,
        lambda: f'SELECT {columns} FROM "{table}" WHERE {where} ORDER BY pos',
        reads=set(LIST_SOURCES),
        params=params,
    )
    return made, *rest


def list_page(db: RunDB, q: TrajQuery) -> dict[str, Any]:
    """One page of the matching trajectories (the page clamped to the last), their review states, the
    counts of each filter's values among the matching rows, and the choices of every filter."""
    table = list_table(db)
    where, params = condition(db, q)
    counts = _counts(db, table, where, params)
    total = sum(counts["status"].values())
    pages = max(1, -(-total // PAGE_SIZE))
    q.page = min(q.page, pages)
    skip = (q.page - 1) * PAGE_SIZE
    if where == "true" and SORTS[q.sort] == "pos":  # every row in task order: pos numbers them, no sort needed
        where, params, skip = ("pos > ?" if not q.desc else "pos <= ?"), [skip if not q.desc else total - skip], 0
    rows = db.rows(
        f'SELECT {SHOWN} FROM "{table}" WHERE {where} ORDER BY {q.order()} LIMIT ? OFFSET ?',
        [*params, PAGE_SIZE, skip],
    )
    states = review_states(db, "trajectory", [r["traj_id"] for r in rows])
    for r in rows:
        r["review"] = states.get(r["traj_id"])
    reviewed = total - counts["review"].get(NONE, 0)
    return {
        "rows": rows,
        "total": total,
        "pages": pages,
        "counts": counts,
        "choices": {**choices(db), "reviewer": reviewers(db)},
        "reviewed": reviewed,
    }


def _counts(db: RunDB, table: str, where: str, params: list[Any]) -> dict[str, dict[str, int]]:
    """Among the matching rows, how many have each value of each filter (a row with several tools, reject
    reasons or labels counts once for each): one scan grouped by the rows' ``facet`` (every ENUM filter's
    value in one integer; a few thousand groups, summed each way here) and, when the run has trajectory
    reviews, their review state; then one scan for each list column."""
    reviews = bool(db.rows(f"SELECT 1 FROM \"{LATEST}\" WHERE target_kind = 'trajectory' AND {REVIEWED} LIMIT 1"))
    join = (
        f"LEFT JOIN (SELECT target_id, decision, reviewer FROM \"{LATEST}\" WHERE target_kind = 'trajectory' "
        f"AND {REVIEWED}) rv ON rv.target_id = traj_id"
    )
    review = ", rv.decision, rv.reviewer, rv.target_id IS NOT NULL AS reviewed" if reviews else ""
    groups = db.rows(
        f'SELECT facet{review}, count(*) AS n FROM "{table}" {join if reviews else ""} WHERE {where} GROUP BY ALL',
        params,
    )
    found = choices(db)
    values = {"status": S.TRAJ_STATUS, "verdict": S.VERDICTS, "reason_code": S.REASON_CODES}
    values.update(model=found["model"], stage=found["stage"])  # each ENUM's values, in its order
    out: dict[str, dict[str, int]] = {k: {} for k, _ in FILTERS}
    for g in groups:
        g.update(_decode(g["facet"], values))
        g["review"] = (g["decision"] or "labelled") if g.get("reviewed") else NONE
        for name in ("status", "verdict", "reason_code", "model", "stage", "extension", "review", "reviewer"):
            if g.get(name) is not None:
                out[name][g[name]] = out[name].get(g[name], 0) + g["n"]
        if not g["rejected"]:
            out["reject"][NONE] = out["reject"].get(NONE, 0) + g["n"]
    out["review"]["reviewed"] = sum(n for state, n in out["review"].items() if state != NONE)
    lists = [
        ("tool", f'SELECT unnest(tools) AS v FROM "{table}" WHERE {where}'),
        ("reject", f'SELECT unnest(rejects) AS v FROM "{table}" WHERE rejects IS NOT NULL AND {where}'),
    ]
    if reviews and db.labels():
        labelled = f'SELECT traj_id FROM "{table}" WHERE {where}'
        kind = "target_kind = 'trajectory'"
        lists.append(
            ("label", f'SELECT unnest(labels) AS v FROM "{LATEST}" WHERE {kind} AND target_id IN ({labelled})')
        )
    for name, sql in lists:
        found = db.rows(f"SELECT v, count(*) AS n FROM ({sql}) WHERE v IS NOT NULL GROUP BY 1", params)
        out[name].update({r["v"]: r["n"] for r in found})
    return out


def _tool_bits(tools: int) -> str:
    """SQL for a row's ``tool_bits``: a bit per tool it called (its ENUM code), when the run has at most 64
    (a filter on one tool then tests a bit, a few times faster than looking in the list); else null."""
    if not 0 < tools <= TOOL_BITS:
        return "NULL::UBIGINT"
    return "list_aggregate(list_transform(tools, lambda t: (1::UBIGINT << enum_code(t)::INTEGER)), 'bit_or')"


def _facet(sizes: dict[str, int]) -> str:
    """SQL for a row's ``facet``: the code of each of its ``FACETS`` values (0 for null, an ENUM's index + 1
    otherwise), then whether it extends another and whether a stage rejected it, in one mixed-radix integer."""
    code = "((parent_id IS NOT NULL)::BIGINT * 2 + (rejects IS NOT NULL)::BIGINT)"
    for name in reversed(FACETS):
        digit = f"coalesce(enum_code({name})::BIGINT + 1, 0)" if sizes[name] else "0"
        code = f"({digit} + {sizes[name] + 1} * {code})"
    return code


def _decode(code: int, values: dict[str, Any]) -> dict[str, Any]:
    """A ``facet`` back to each filter's value (``none`` for a null verdict or reason code)."""
    out: dict[str, Any] = {}
    for name in FACETS:
        code, digit = divmod(code, len(values[name]) + 1)
        out[name] = values[name][digit - 1] if digit else (NONE if name in NULLABLE else None)
    out["extension"], out["rejected"] = ("yes" if code // 2 else "no"), bool(code % 2)
    return out


def choices(db: RunDB) -> dict[str, list[str]]:
    """The values each filter offers but the reviewers (``reviewers``): the enums, and what the run holds
    (the labels its labels.yaml names)."""
    fixed = {
        "status": list(S.TRAJ_STATUS),
        "verdict": [*S.VERDICTS, NONE],
        "reason_code": [*S.REASON_CODES, NONE],
        "review": list(REVIEW_STATES),
        "extension": ["yes", "no"],
        "label": [label.name for label in db.labels()],
    }
    return {**fixed, **db.memo("list_choices", lambda: _found(db), LIST_SOURCES)}


def reviewers(db: RunDB) -> list[str]:
    """The reviewers of trajectories (what the list's reviewer filter offers), found again after a review:
    apart from the other choices, which a review does not change."""

    def find() -> list[str]:
        rows = db.rows(f"SELECT DISTINCT reviewer FROM \"{LATEST}\" WHERE target_kind = 'trajectory' ORDER BY 1")
        return [r["reviewer"] for r in rows]

    return db.memo("list_reviewers", find, frozenset({"reviews"}))


def _found(db: RunDB) -> dict[str, list[str]]:
    """Each ENUM column's values (its type's): a review changes none of them."""
    table = list_table(db)
    out = {}
    for name, column in ENUM_COLUMNS.items():
        if name in ("model", "stage", "tool", "reject"):
            first = f"{column}[1]" if name in ("tool", "reject") else column
            rows = db.rows(
                f'SELECT enum_range({first})::VARCHAR[] AS v FROM "{table}" WHERE {first} IS NOT NULL LIMIT 1'
            )
            out[name] = rows[0]["v"] if rows else []
    out["reject"] = [*out["reject"], NONE]
    return out


def review_states(db: RunDB, kind: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The review in force of each of these rows that has one that says something (decision or labels)."""
    rows = db.rows(
        f'SELECT target_id, decision, labels, note, reviewer, reviewed_at, batch_id FROM "{LATEST}" '
        f"WHERE target_kind = ? AND target_id IN (SELECT unnest(?::VARCHAR[])) AND {REVIEWED}",
        [kind, ids],
    )
    return {r["target_id"]: r for r in rows}


# ---------------------------------------------------------------- the review flow's walk
def row_of(db: RunDB, traj_id: str, columns: str = "* EXCLUDE (_h)") -> dict[str, Any] | None:
    """A trajectory's row of the list table (these of its columns: by default all, its place in any
    order among them), or None."""
    found = db.keyed(list_table(db), "traj_id", [traj_id], columns)
    return found[0] if found else None


def walk(db: RunDB, q: TrajQuery, at: dict[str, Any] | None, go: str) -> tuple[str | None, str | None, dict[str, int]]:
    """The id of the matching row the flow shows next, the id of the one the same step would show after
    it (to read ahead), and the list's progress (rows matching, and reviewed of them). ``go``: ``next``
    or ``prev`` (the row after or before ``at``, reviewed or not; the first row without ``at``),
    ``todo`` (the first unreviewed row after ``at``, from the top when there is none after it or no
    ``at``). An id is None when there is no such row. The rows come from ``source``, kept in task
    order: in that order, the first two beyond ``at`` are found without reading the rows before."""
    table, where, params = source(db, q)
    if go == "todo":
        where += f" AND NOT {_in_reviews(REVIEWED)}"
    order = q.order(reverse=go == "prev")

    def first_two(condition: str, more: list[Any]) -> list[str]:
        sql = f'SELECT traj_id FROM "{table}" WHERE {where} AND {condition} ORDER BY {order} LIMIT 2'
        return [r["traj_id"] for r in db.rows(sql, [*params, *more])]

    ids = first_two(*q.beyond(at, before=go == "prev")) if at is not None else []
    if at is None or (not ids and go == "todo"):
        ids = first_two("true", [])
    ids = [*ids, None, None]
    return ids[0], ids[1], progress(db, q)


def progress(db: RunDB, q: TrajQuery) -> dict[str, int]:
    """How many rows match, and how many of them have a review in force."""
    table, where, params = source(db, q)
    reviewed = f"SELECT target_id FROM \"{LATEST}\" WHERE target_kind = 'trajectory' AND {REVIEWED}"
    row = db.rows(  # the reviewed rows by a join from the reviews' side: a few rows, not a test of each row
        f'SELECT (SELECT count(*) FROM "{table}" WHERE {where}) AS total, (SELECT count(*) FROM "{table}" '
        f"SEMI JOIN ({reviewed}) r ON r.target_id = traj_id WHERE {where}) AS reviewed",
        [*params, *params],
    )[0]
    return {"total": row["total"], "reviewed": row["reviewed"]}
