"""The viewer's web app (Starlette): server-rendered pages, autoescaped templates, one write (reviews).

Security: templates escape everything (model and tool text is data, never markup)
and a Content-Security-Policy allows only the app's own script and styles; the
SQL box runs read statements only on a locked-down connection (see ``db.py``);
review forms carry a per-start CSRF token and must come from the app's own
origin; bound to loopback, requests must name a loopback host (no DNS
rebinding); bound elsewhere, every request needs the token printed at start.
"""

from __future__ import annotations

import io
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trajkit import schema as S
from trajkit.accepted import add_review
from trajkit.view import pages
from trajkit.view.db import QueryError, RunDB

HERE = Path(__file__).resolve().parent
LOOPBACK_HOSTS = ["127.0.0.1", "localhost"]
TOKEN_COOKIE = "trajkit_view_token"
SQL_ROWS_SHOWN = 500
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=True, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["num"] = _num
    env.globals["with_query"] = lambda params, **kw: "?" + urlencode({**params, **kw})
    return env


def _num(value: Any, digits: int = 3) -> str:
    """A number for a table cell; empty for null or absent."""
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else ""


class Viewer:
    """The app's state: the run's views, the reviewer's name, the CSRF and access tokens."""

    def __init__(self, db: RunDB, reviewer: str, token: str | None):
        self.db, self.reviewer, self.token = db, reviewer, token
        self.csrf = secrets.token_urlsafe(32)
        self.env = templates()

    def render(self, request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(
            request=request, run=self.db.store.root.name, reviewer=self.reviewer, csrf=self.csrf, **ctx
        )
        return HTMLResponse(html, status_code=status)

    def pinned(self, handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """A page whose queries all use the views as they were when it started (``RunDB.pinned``)."""

        def page(request: Request) -> Response:
            with self.db.pinned():
                return handler(request)

        return page

    # ------------------------------------------------------------ pages
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
        return self.render(request, "trajectory.jinja", page="tasks", **data)

    def compare(self, request: Request) -> Response:
        data = pages.compare_page(self.db, request.query_params.get("a"), request.query_params.get("b"))
        return self.render(request, "compare.jinja", page="compare", **data)

    def sql(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        result, error = None, None
        if query:
            try:
                result = self.db.read_only(query)
            except QueryError as e:
                error = str(e)
        shown = result.slice(0, SQL_ROWS_SHOWN).to_pylist() if result is not None else []
        return self.render(
            request,
            "sql.jinja",
            page="sql",
            query=query,
            error=error,
            columns=result.column_names if result is not None else [],
            rows=[[_cell(v) for v in r.values()] for r in shown],
            total=result.num_rows if result is not None else 0,
            tables=list(S.TABLES),
            status=400 if error else 200,
        )

    def sql_csv(self, request: Request) -> Response:
        from trajkit.tabular import write_table

        try:
            result = self.db.read_only(request.query_params.get("q", ""))
        except QueryError as e:
            return PlainTextResponse(f"error: {e}\n", status_code=400)
        buf = io.StringIO()
        write_table(result, buf, "csv")
        headers = {"Content-Disposition": 'attachment; filename="query.csv"'}
        return Response(buf.getvalue(), media_type="text/csv; charset=utf-8", headers=headers)

    def plot(self, request: Request) -> Response:
        name = request.path_params["name"]
        plots = self.db.store.root / "card" / "plots"
        if name not in {p.name for p in plots.glob("*.png")}:  # only the card's own plots, by name
            return PlainTextResponse("not found\n", status_code=404)
        return FileResponse(plots / name, media_type="image/png")

    # ------------------------------------------------------------ the one write
    async def review(self, request: Request) -> Response:
        form = await request.form()
        if not secrets.compare_digest(str(form.get("csrf", "")), self.csrf) or not _same_origin(request):
            return PlainTextResponse("refused: the form did not come from this viewer (reload the page)\n", 403)
        kind, target = str(form.get("target_kind", "")), str(form.get("target_id", ""))
        decision, note = str(form.get("decision", "")), str(form.get("note", "")).strip()
        if kind not in S.REVIEW_TARGETS or decision not in S.REVIEW_DECISIONS:
            return PlainTextResponse("bad review: target_kind or decision\n", status_code=400)
        if not await run_in_threadpool(pages.exists, self.db, kind, target):
            return PlainTextResponse(f"bad review: no {kind} {target!r}\n", status_code=400)
        await run_in_threadpool(
            add_review, self.db.store, target, kind, decision, note[:4000] or None, self.reviewer, check_target=False
        )
        where = f"/tasks/{quote(target)}" if kind == "task" else f"/trajectories/{quote(target)}"
        return RedirectResponse(where, status_code=303)

    def not_found(self, request: Request, what: str) -> Response:
        return self.render(request, "error.jinja", status=404, page="", message=f"no such {what}")


def _cell(value: Any, width: int = 200) -> str:
    if value is None:
        return "null"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


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
    """The app; ``token`` is required on every request when given; ``loopback`` checks the Host header."""
    v = Viewer(db, reviewer, token)
    routes = [
        Route("/", v.pinned(v.run_page)),
        Route("/tasks", v.pinned(v.tasks)),
        Route("/tasks/{task_id}", v.pinned(v.task)),
        Route("/trajectories/{traj_id}", v.pinned(v.trajectory)),
        Route("/compare", v.pinned(v.compare)),
        Route("/sql", v.pinned(v.sql)),
        Route("/sql.csv", v.pinned(v.sql_csv)),
        Route("/plots/{name}", v.plot),
        Route("/review", v.review, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(Guard, viewer=v)]
    if loopback:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS))
    return Starlette(routes=routes, middleware=middleware)
