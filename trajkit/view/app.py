"""The viewer's web app (Starlette): server-rendered pages, autoescaped templates, one write (reviews).

Security, by construction of the route table (``ROUTES``): a ``Page`` is a GET that runs only
the server's own queries with parameters, whatever its URL says (the trajectory list's filters,
the flow's next row, a bulk decision's confirmation); an ``Action`` (running the user's SQL,
writing a review: the page forms, the flow's decisions, a bulk decision and its undo, all
through ``trajkit/accepted.py``) is a POST that must carry this start's CSRF token and come from
the app's own origin, checked before its handler sees the form. Every link and image a page
builds goes through ``url``, which percent-encodes each path segment (a name from the run with
``/``, ``\\``, ``?``, ``#``, ``%`` or ``..`` stays inside its route). The SQL box's queries pass
DuckDB's parser and run where nothing can be written (``db.py``, ``sqlbox.py``). Templates
escape everything (model and tool text is data, never markup) and a Content-Security-Policy
allows only the app's own script and styles. Bound to loopback, requests must name a loopback
host (no DNS rebinding); bound elsewhere, every request needs the token printed at start.
"""

from __future__ import annotations

import io
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trajkit import schema as S
from trajkit.accepted import add_review, undo_batch
from trajkit.errors import UserError
from trajkit.view import flow, listing, pages
from trajkit.view.db import QueryError, RunDB
from trajkit.view.tables import cell, table_page

HERE = Path(__file__).resolve().parent
LOOPBACK_HOSTS = ["127.0.0.1", "localhost"]
TOKEN_COOKIE = "trajkit_view_token"
SQL_ROWS_SHOWN = 500
# columns of SQL results whose values are ids of a page: the route and its parameter
ID_LINKS = {
    "task_id": ("task", "task_id"),
    "traj_id": ("trajectory", "traj_id"),
    "parent_id": ("trajectory", "traj_id"),
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


class NameConvertor(Convertor):
    """A name from the run (an id, a file name) as one path segment, whatever its characters.

    ``to_string`` percent-encodes all of it (``/`` too), so the browser sees one segment; a name
    that would still be resolved away (``.``, ``..``, empty) or that starts with ``~`` gets a ``~``
    in front, which ``convert`` takes off. The server matches the decoded path, where a name's
    ``/`` is a ``/``: the segment may hold any character."""

    regex = ".+"

    def convert(self, value: str) -> str:
        return value.removeprefix("~")

    def to_string(self, value: Any) -> str:
        value = str(value)
        if value in ("", ".", "..") or value.startswith("~"):
            value = "~" + value
        return quote(value, safe="")


register_url_convertor("name", NameConvertor())


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=lambda value: "" if value is None else value,  # a missing value prints as nothing, not None
    )
    env.filters["num"] = _num
    env.globals["id_links"] = ID_LINKS
    env.globals["with_query"] = lambda params, **kw: "?" + urlencode({**params, **kw})
    return env


def _num(value: Any, digits: int = 3) -> str:
    """A number for a table cell; empty for null or absent."""
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else ""


class Viewer:
    """The app's state: the run's views, the reviewer's name, the CSRF and access tokens, and how many
    reviews it wrote (``writes``; the SQL box's queries are counted by ``RunDB.user_queries``)."""

    def __init__(self, db: RunDB, reviewer: str, token: str | None):
        self.db, self.reviewer, self.token = db, reviewer, token
        self.csrf = secrets.token_urlsafe(32)
        self.env = templates()
        self.writes = 0

    def render(self, request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(
            request=request,
            url=request.app.url_path_for,
            run=self.db.store.root.name,
            reviewer=self.reviewer,
            csrf=self.csrf,
            label_info={label.name: label for label in self._labels()},
            **ctx,
        )
        return HTMLResponse(html, status_code=status)

    def _labels(self) -> list[Any]:
        try:
            return self.db.labels()
        except UserError:  # shown by the page that needs them; an error page still renders
            return []

    # ------------------------------------------------------------ pages (GET)
    def run_page(self, request: Request) -> Response:
        return self.render(request, "run.jinja", page="run", **pages.run_page(self.db))

    def tasks(self, request: Request) -> Response:
        params = dict(request.query_params)
        q = pages.TaskQuery.parse(params)
        data = pages.tasks_page(self.db, q)
        params.pop("page", None)
        return self.render(request, "tasks.jinja", page="tasks", q=q, params=params, **data)

    def task(self, request: Request) -> Response:
        data = pages.task_page(self.db, request.path_params["task_id"])
        if data is None:
            return self.not_found(request, "task")
        return self.render(request, "task.jinja", page="tasks", **data)

    def trajectory(self, request: Request) -> Response:
        data = pages.trajectory_page(self.db, request.path_params["traj_id"])
        if data is None:
            return self.not_found(request, "trajectory")
        return self.render(request, "trajectory.jinja", page="trajectories", **data)

    def trajectories(self, request: Request) -> Response:
        """The trajectory list: filters, counts, sort, pages, bulk decisions; the banner of a batch."""
        q = listing.TrajQuery.parse(request.query_params)
        data = listing.list_page(self.db, q)
        batch = request.query_params.get("batch")
        found = (
            self.db.rows(
                "SELECT count(*) AS n, any_value(reviewer) AS reviewer, max(reviewed_at) AS at, any_value(decision) AS "
                "decision, any_value(labels) AS labels FROM reviews WHERE batch_id = ?",
                [batch],
            )[0]
            if batch
            else None
        )
        return self.render(
            request,
            "trajectories.jinja",
            page="trajectories",
            q=q,
            params=q.params(),
            filters=listing.FILTERS,
            sorts=list(listing.SORTS),
            bulk_actions=sorted(flow.actions(self.db)),
            batch={**found, "id": batch} if found and found["n"] else None,
            **data,
        )

    def flow_page(self, request: Request) -> Response:
        """The review flow on a filtered list: the row ``at``, or the first unreviewed one."""
        q = listing.TrajQuery.parse(request.query_params)
        at = request.query_params.get("at")
        here = listing.row_of(self.db, at, q.place()) if at else None
        target, after, progress = listing.walk(self.db, q, here, "todo")
        keys = flow.keymap(self.db)
        return self.render(
            request,
            "flow.jinja",
            page="flow",
            q=q,
            params=q.params(),
            keys=keys,
            keys_json=json.dumps(keys),
            guidelines=flow.guidelines(self.db),
            **flow.flow_row(self.db, at if here else target, progress, ahead=None if here else after),
        )

    def flow_step(self, request: Request) -> Response:
        """The flow's next, previous or next unreviewed (skip) row, as the fragment the page swaps in."""
        q = listing.TrajQuery.parse(request.query_params)
        go, at = request.query_params.get("go", ""), request.query_params.get("at", "")
        if go not in ("next", "prev", "todo"):
            return PlainTextResponse("go must be next, prev or todo\n", status_code=400)
        here = listing.row_of(self.db, at, q.place()) if at else None
        target, after, progress = listing.walk(self.db, q, here, go)
        if target is None and go != "todo" and here:  # past either end: stay
            target = at
        return self.fragment(request, q, target, progress, unreviewed=go == "todo", ahead=after)

    def fragment(
        self,
        request: Request,
        q: listing.TrajQuery,
        target: str | None,
        progress: dict,
        unreviewed: bool = False,
        ahead: str | None = None,
    ) -> Response:
        data = flow.flow_row(self.db, target, progress, unreviewed, ahead)
        return self.render(request, "flow_row.jinja", q=q, params=q.params(), **data)

    def bulk_confirm(self, request: Request) -> Response:
        """What a bulk decision on this list would do, and the form that does it (a GET writes nothing)."""
        q = listing.TrajQuery.parse(request.query_params)
        action = request.query_params.get("action", "")
        if action not in flow.actions(self.db):
            return PlainTextResponse("bad bulk decision: action\n", status_code=400)
        return self.render(
            request, "bulk.jinja", page="trajectories", q=q, params=q.params(), action=action,
            n=flow.bulk_count(self.db, q), changed=None,
        )  # fmt: skip

    def diff(self, request: Request) -> Response:
        data = pages.diff_page(self.db, request.query_params.get("a"), request.query_params.get("b"))
        return self.render(request, "diff.jinja", page="trajectories", status=200 if not data["error"] else 404, **data)

    def table(self, request: Request) -> Response:
        try:
            page = int(request.query_params.get("page", "1"))
        except ValueError:
            page = 1
        data = table_page(self.db, request.path_params["table"], page)
        if data is None:
            return self.not_found(request, "table")
        return self.render(request, "table.jinja", page="run", **data)

    def compare(self, request: Request) -> Response:
        data = pages.compare_page(self.db, request.query_params.get("a"), request.query_params.get("b"))
        return self.render(request, "compare.jinja", page="compare", **data)

    def sql_form(self, request: Request) -> Response:
        return self.sql_page(request, "", None, None)

    def plot(self, request: Request) -> Response:
        name = request.path_params["name"]
        plots = self.db.store.root / "card" / "plots"
        if name not in {p.name for p in plots.glob("*.png")}:  # only the card's own plots, by name
            return PlainTextResponse("not found\n", status_code=404)
        return FileResponse(plots / name, media_type="image/png")

    def not_found(self, request: Request, what: str) -> Response:
        return self.render(request, "error.jinja", status=404, page="", message=f"no such {what}")

    # ------------------------------------------------------------ actions (POST, token and origin checked)
    def sql_run(self, request: Request, form: FormData) -> Response:
        query = str(form.get("q", "")).strip()
        if not query:
            return self.sql_page(request, "", None, None)
        try:
            return self.sql_page(request, query, self.db.read_only(query), None)
        except QueryError as e:
            return self.sql_page(request, query, None, str(e))

    def sql_page(self, request: Request, query: str, result: Any, error: str | None) -> Response:
        shown = result.slice(0, SQL_ROWS_SHOWN).to_pylist() if result is not None else []
        return self.render(
            request,
            "sql.jinja",
            page="sql",
            query=query,
            error=error,
            columns=result.column_names if result is not None else [],
            rows=[[(cell(v), v if isinstance(v, str) else None) for v in r.values()] for r in shown],
            total=result.num_rows if result is not None else 0,
            tables=list(S.TABLES),
            status=400 if error else 200,
        )

    def sql_csv(self, request: Request, form: FormData) -> Response:
        from trajkit.tabular import write_table

        try:
            result = self.db.read_only(str(form.get("q", "")))
        except QueryError as e:
            return PlainTextResponse(f"error: {e}\n", status_code=400)
        buf = io.StringIO()
        write_table(result, buf, "csv")
        headers = {"Content-Disposition": 'attachment; filename="query.csv"'}
        return Response(buf.getvalue(), media_type="text/csv; charset=utf-8", headers=headers)

    def review(self, request: Request, form: FormData) -> Response:
        """The one write: a review appended through ``add_review`` (a task's or trajectory's page form:
        a decision, the labels checked, a note)."""
        kind, target = str(form.get("target_kind", "")), str(form.get("target_id", ""))
        decision, note = str(form.get("decision", "")), str(form.get("note", "")).strip()
        labels = [str(x) for x in form.getlist("label")]
        if kind not in S.REVIEW_TARGETS or decision not in S.REVIEW_DECISIONS:
            return PlainTextResponse("bad review: target_kind or decision\n", status_code=400)
        if not set(labels) <= {label.name for label in self.db.labels()}:
            return PlainTextResponse("bad review: a label the run's labels.yaml does not name\n", status_code=400)
        if not pages.exists(self.db, kind, target):
            return PlainTextResponse(f"bad review: no {kind} {target!r}\n", status_code=400)
        note = note[: flow.NOTE_CHARS] or None
        add_review(self.db.store, target, kind, decision, note, self.reviewer, check_target=False, labels=labels)
        self.writes += 1
        route, key = ("task", "task_id") if kind == "task" else ("trajectory", "traj_id")
        return RedirectResponse(request.app.url_path_for(route, **{key: target}), status_code=303)

    def flow_decide(self, request: Request, form: FormData) -> Response:
        """A decision in the flow (accept, reject, a label): written, then the next unreviewed row of the
        list, as the fragment the page swaps in (``fragment=1``) or a redirect to its page."""
        q = listing.TrajQuery.parse(request.query_params)
        traj_id, action = str(form.get("traj_id", "")), str(form.get("action", ""))
        note = str(form.get("note", "")).strip()[: flow.NOTE_CHARS] or None
        if action not in flow.actions(self.db):
            return PlainTextResponse("bad decision: action\n", status_code=400)
        here = listing.row_of(self.db, traj_id, q.place())
        if here is None:
            return PlainTextResponse(f"bad decision: no trajectory {traj_id!r}\n", status_code=400)
        flow.decide(self.db, traj_id, action, note, self.reviewer)
        self.writes += 1
        self.db.reload()
        target, after, progress = listing.walk(self.db, q, here, "todo")
        if form.get("fragment"):
            return self.fragment(request, q, target, progress, unreviewed=True, ahead=after)
        url = request.app.url_path_for("flow") + "?" + urlencode(q.params(at=target))
        return RedirectResponse(url, status_code=303)

    def bulk(self, request: Request, form: FormData) -> Response:
        """A bulk decision on the filtered list: one review per matching row, one batch (``flow.bulk``),
        when the list still holds the number of rows the confirmation showed."""
        q = listing.TrajQuery.parse(request.query_params)
        action = str(form.get("action", ""))
        if action not in flow.actions(self.db):
            return PlainTextResponse("bad bulk decision: action\n", status_code=400)
        n = flow.bulk_count(self.db, q)
        if str(n) != str(form.get("expected", "")):
            return self.render(
                request, "bulk.jinja", status=409, page="trajectories", q=q, params=q.params(), action=action,
                n=n, changed=str(form.get("expected", "")),
            )  # fmt: skip
        batch, _ = flow.bulk(self.db, q, action, self.reviewer)
        self.writes += 1
        url = request.app.url_path_for("trajectories") + "?" + urlencode(q.params(batch=batch))
        return RedirectResponse(url, status_code=303)

    def undo(self, request: Request, form: FormData) -> Response:
        """Undo a batch (``accepted.undo_batch``): one more batch restoring each row's state before it."""
        q = listing.TrajQuery.parse(request.query_params)
        cur = self.db.connection().cursor()  # its reviews view: the in-memory reviews
        try:
            batch, _, _ = undo_batch(self.db.store, str(form.get("batch", "")), self.reviewer, cur)
        except UserError as e:
            return PlainTextResponse(f"bad undo: {e}\n", status_code=400)
        finally:
            cur.close()
        self.writes += 1
        url = request.app.url_path_for("trajectories") + "?" + urlencode(q.params(batch=batch))
        return RedirectResponse(url, status_code=303)

    # ------------------------------------------------------------ the two kinds of route
    def page(self, show: Callable[[Viewer, Request], Response]) -> Callable[[Request], Response]:
        """A page's endpoint: its queries all use the views as they were when it started (``RunDB.pinned``)."""

        def endpoint(request: Request) -> Response:
            with self.db.pinned():
                try:
                    return show(self, request)
                except UserError as e:  # the run's labels.yaml went bad while it is viewed
                    return self.render(request, "error.jinja", status=500, page="", message=str(e))

        return endpoint

    def action(self, act: Callable[[Viewer, Request, FormData], Response]) -> Callable[[Request], Any]:
        """An action's endpoint: the form must carry this start's CSRF token and come from the app's own
        origin, or the action is refused before it sees it."""

        async def endpoint(request: Request) -> Response:
            form = await request.form()
            if not secrets.compare_digest(str(form.get("csrf", "")), self.csrf) or not _same_origin(request):
                return PlainTextResponse("refused: the form did not come from this viewer (reload the page)\n", 403)

            def run() -> Response:
                with self.db.pinned():
                    try:
                        return act(self, request, form)
                    except UserError as e:
                        return PlainTextResponse(f"refused: {e}\n", status_code=400)

            return await run_in_threadpool(run)

        return endpoint


@dataclass(frozen=True)
class Page:
    """A GET (and HEAD): shows the run through the server's own queries with parameters; runs no user
    SQL and writes nothing, so any link to it, from anywhere, is harmless."""

    path: str
    name: str
    show: Callable[[Viewer, Request], Response]


@dataclass(frozen=True)
class Action:
    """A POST from one of this viewer's own pages (CSRF token and origin checked first): runs the user's
    SQL or writes. Only an Action may do either."""

    path: str
    name: str
    act: Callable[[Viewer, Request, FormData], Response]


ROUTES: tuple[Page | Action, ...] = (
    Page("/", "run", Viewer.run_page),
    Page("/tasks", "tasks", Viewer.tasks),
    Page("/tasks/{task_id:name}", "task", Viewer.task),
    Page("/trajectories", "trajectories", Viewer.trajectories),
    Page("/trajectories/{traj_id:name}", "trajectory", Viewer.trajectory),
    Page("/diff", "diff", Viewer.diff),
    Page("/tables/{table:name}", "table", Viewer.table),
    Page("/compare", "compare", Viewer.compare),
    Page("/sql", "sql", Viewer.sql_form),
    Action("/sql", "sql_run", Viewer.sql_run),
    Action("/sql.csv", "sql_csv", Viewer.sql_csv),
    Page("/plots/{name:name}", "plot", Viewer.plot),
    Action("/review", "review", Viewer.review),
    Page("/flow", "flow", Viewer.flow_page),
    Page("/flow/row", "flow_row", Viewer.flow_step),
    Action("/flow/decide", "flow_decide", Viewer.flow_decide),
    Page("/bulk", "bulk_confirm", Viewer.bulk_confirm),
    Action("/bulk", "bulk", Viewer.bulk),
    Action("/bulk/undo", "undo", Viewer.undo),
)


def _same_origin(request: Request) -> bool:
    """A POST names its origin (browsers send Origin or Referer); it must be this app's."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return False
    return urlsplit(origin).netloc == request.headers.get("host")


class Guard(BaseHTTPMiddleware):
    """The access token (when bound beyond loopback), response headers and the server time."""

    def __init__(self, app, viewer: Viewer):
        super().__init__(app)
        self.viewer = viewer

    async def dispatch(self, request: Request, call_next):
        t0 = time.perf_counter()
        token = self.viewer.token
        if token is not None:
            given = request.query_params.get("token")
            if given is not None and secrets.compare_digest(given, token):
                response = RedirectResponse(request.url.path, status_code=303)
                response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
                return response
            if not secrets.compare_digest(request.cookies.get(TOKEN_COOKIE, ""), token):
                return PlainTextResponse("a token is required: open the address printed at start\n", 401)
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - t0) * 1000:.1f}"
        return response


def create_app(db: RunDB, reviewer: str, token: str | None = None, loopback: bool = True) -> Starlette:
    """The app; ``token`` is required on every request when given; ``loopback`` checks the Host header.
    ``app.state.viewer`` is the Viewer (its counters)."""
    v = Viewer(db, reviewer, token)
    routes: list[Route | Mount] = [
        Route(r.path, v.page(r.show), methods=["GET"], name=r.name)
        if isinstance(r, Page)
        else Route(r.path, v.action(r.act), methods=["POST"], name=r.name)
        for r in ROUTES
    ]
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    middleware = [Middleware(Guard, viewer=v)]
    if loopback:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS))
    app = Starlette(routes=routes, middleware=middleware)
    app.state.viewer = v
    return app
