"""The web UI's application: its routes, the token and CSRF checks, the templates.

``create_app(app, token=...)``: a Starlette application over a ``FlowForge``. With a
token every request must carry it (``?token=`` once, which sets a cookie, or an
``Authorization: Bearer`` header). Every POST must carry this process's CSRF token in
its form. Templates autoescape everything (``docs/ui.md``, "Safety").
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from urllib.parse import parse_qs, urlencode
from uuid import UUID

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from flowforge import errors, timefmt
from flowforge.app import ids
from flowforge.app.definition_files import load_definition_text
from flowforge.app.service import FlowForge
from flowforge.ui import grid, pages
from flowforge.ui.live import ChangeFeed

HERE = Path(__file__).parent
TOKEN_COOKIE = "flowforge_ui_token"  # noqa: S105  (the cookie's name)
CSRF_FIELD = "csrf_token"
#: Pages load only this package's own script and styles; no page may be framed.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


#: What a run's page says after an action that led to it (``?submitted=1``, ``?rerun=1``).
_RUN_NOTICES = {
    "submitted": "submitted: this run is new",
    "rerun": "a re-run: the tasks that did not succeed run again (see 'rerun of')",
}


#: What a page's id can fail with: the page shows the message, as a 404.
NOT_FOUND = (errors.UnknownRunError, errors.InvalidIdError, errors.ArchivedRunError)


class BadQueryError(ValueError):
    """A page's query parameter is invalid; the message says which and why (a 400)."""


def create_app(app: FlowForge, *, token: str | None) -> Starlette:
    """The UI over ``app``; ``token``: required on every request if given."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # everything a user or a handler wrote is shown as text
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["iso"] = timefmt.iso  # one time format on every page (UTC)
    templates = Jinja2Templates(env=environment)
    csrf = secrets.token_urlsafe(32)  # per process: a POST from another site lacks it
    feed = ChangeFeed(app)
    ui = _Pages(app, templates, csrf, feed)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        feed.start()
        try:
            yield
        finally:
            feed.stop()

    starlette = Starlette(
        routes=[
            Route("/", ui.runs),
            Route("/runs", ui.submit, methods=["POST"]),
            Route("/runs/{run}", ui.run),
            Route("/runs/{run}/tasks.json", ui.run_changes),
            Route("/workflows/{name}", ui.grid),
            Route("/runs/{run}/cancel", ui.cancel, methods=["POST"]),
            Route("/runs/{run}/rerun", ui.rerun, methods=["POST"]),
            Route("/tasks/{task}", ui.task),
            Route("/events", ui.events),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=_guard(token))],
        # One answer for every page: an id that names no run (or task) is a 404.
        exception_handlers=dict.fromkeys(NOT_FOUND, ui.not_found),
        lifespan=lifespan,
    )
    starlette.state.feed = feed  # closed by a stopping server (ui/server.py)
    return starlette


_Next = Callable[[Request], Awaitable[Response]]


def _guard(token: str | None) -> Callable[[Request, _Next], Awaitable[Response]]:
    """The token check (if any) before every request, the security headers after."""

    async def dispatch(request: Request, call_next: _Next) -> Response:
        if token is not None:
            given = request.query_params.get("token")
            if given is not None and _same(given, token):
                rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                url = request.url.path + (f"?{urlencode(rest)}" if rest else "")
                response: Response = RedirectResponse(url, status_code=303)
                response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
                return _secured(response)
            if not _carries(request, token):
                return _secured(
                    PlainTextResponse(
                        "a token is required: open this page with ?token=FLOWFORGE_UI_TOKEN "
                        "or send Authorization: Bearer FLOWFORGE_UI_TOKEN",
                        status_code=401,
                    )
                )
        return _secured(await call_next(request))

    return dispatch


def _carries(request: Request, token: str) -> bool:
    bearer = request.headers.get("authorization", "")
    if bearer.lower().startswith("bearer ") and _same(bearer[7:].strip(), token):
        return True
    return _same(request.cookies.get(TOKEN_COOKIE, ""), token)


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _secured(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def parse_at(text: str | None) -> datetime | None:
    """``?at=``: ISO 8601; a time without an offset is UTC, as ``flowforge why --at``."""
    if not text:
        return None
    try:
        return timefmt.parse_iso(text)
    except ValueError:
        raise BadQueryError(
            f"at={text!r} is not an ISO 8601 time; write e.g. {timefmt.ISO_EXAMPLE}"
        ) from None


class _Pages:
    """The routes' handlers. Reads run in a thread (``FlowForge`` is synchronous)."""

    def __init__(
        self, app: FlowForge, templates: Jinja2Templates, csrf: str, feed: ChangeFeed
    ) -> None:
        self.app, self.templates, self.csrf, self.feed = app, templates, csrf, feed

    def _render(
        self, request: Request, name: str, context: dict[str, object], status: int = 200
    ) -> Response:
        context = {**context, "csrf": self.csrf, "csrf_field": CSRF_FIELD}
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def _problem(self, request: Request, message: str, status: int) -> Response:
        context = {"message": message, "status": status}
        return self._render(request, "problem.html", context, status)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        """Any page whose id names no run or task (``NOT_FOUND``): its message, a 404."""
        return self._problem(request, str(exc), 404)

    async def runs(self, request: Request) -> Response:
        params = request.query_params
        search = params.get("q", "").strip()
        if search:
            found = await run_in_threadpool(ids.resolve_run, self.app, search)
            return RedirectResponse(f"/runs/{found.id}", status_code=303)
        page = params.get("page", "1")
        query = pages.RunsQuery(
            state=params.get("state", ""),
            workflow=params.get("workflow", ""),
            page=int(page) if page.isdigit() else 1,
        )
        context = await run_in_threadpool(pages.runs_page, self.app, query)
        context["live"] = True
        return self._render(request, "runs.html", context)

    async def run(self, request: Request) -> Response:
        try:
            at = parse_at(request.query_params.get("at"))
            run = await run_in_threadpool(
                ids.resolve_run_brief, self.app, request.path_params["run"]
            )
        except BadQueryError as exc:
            return self._problem(request, str(exc), 400)
        page = request.query_params.get("tasks", "1")
        context = await run_in_threadpool(
            pages.run_page, self.app, run, at, int(page) if page.isdigit() else 1
        )
        context["cancelled"] = request.query_params.get("cancelled") == "1"
        context["notice"] = _RUN_NOTICES.get(next(iter(request.query_params), ""), "")
        context["live"] = at is None
        # Live, the page patches its tasks' states from JSON instead of reloading.
        context["patch"] = f"/runs/{run.id}/tasks.json" if at is None else ""
        return self._render(request, "run.html", context)

    async def run_changes(self, request: Request) -> Response:
        """A live run page's patch: the run's state and counts, and its tasks changed
        since ``?since=`` (the ``cursor`` of the previous answer), as JSON."""
        try:
            since = parse_at(request.query_params.get("since"))
            run = await run_in_threadpool(
                ids.resolve_run_brief, self.app, request.path_params["run"]
            )
        except BadQueryError as exc:
            return PlainTextResponse(str(exc), 400)
        changes = await run_in_threadpool(pages.run_changes, self.app, run, since)
        return JSONResponse(changes, headers={"Cache-Control": "no-store"})

    async def grid(self, request: Request) -> Response:
        """A workflow's newest runs as columns, its tasks as rows (``grid.py``)."""
        page = request.query_params.get("page", "1")
        context = await run_in_threadpool(
            grid.grid_page,
            self.app,
            request.path_params["name"],
            int(page) if page.isdigit() else 1,
        )
        context["live"] = True
        return self._render(request, "grid.html", context)

    async def task(self, request: Request) -> Response:
        try:
            at = parse_at(request.query_params.get("at"))
            task_run_id = UUID(request.path_params["task"])
        except BadQueryError as exc:
            return self._problem(request, str(exc), 400)
        except ValueError:
            return self._problem(request, "not a task run's id; open a task from its run", 404)
        context = await run_in_threadpool(
            pages.task_page, self.app, task_run_id, at, _log_page(request)
        )
        context["live"] = at is None
        return self._render(request, "task.html", context)

    async def _form(self, request: Request) -> dict[str, str] | None:
        """A POST's form fields (the first of each), or ``None`` without this process's
        CSRF token."""
        form = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
        fields = {name: values[0] for name, values in form.items()}
        return fields if _same(fields.get(CSRF_FIELD, ""), self.csrf) else None

    async def cancel(self, request: Request) -> Response:
        """Cancel a run, as ``flowforge cancel`` does: a finished run is refused."""
        if await self._form(request) is None:
            return _csrf_refused()
        run = await run_in_threadpool(ids.resolve_run, self.app, request.path_params["run"])
        cancelled = await run_in_threadpool(self.app.cancel_workflow_run, run.id)
        if not cancelled:
            after = await run_in_threadpool(self.app.get_workflow_run, run.id)
            return self._problem(
                request,
                f"run {run.id} already {after.state}; a finished run never changes, so "
                f"there is nothing to cancel",
                409,
            )
        return RedirectResponse(f"/runs/{run.id}?cancelled=1", status_code=303)

    async def rerun(self, request: Request) -> Response:
        """Re-run a finished run, as ``flowforge rerun RUN [--from TASK]`` does: every task
        that did not succeed (or the task ``from`` and every task after it) runs again,
        the others' results carried over."""
        form = await self._form(request)
        if form is None:
            return _csrf_refused()
        from_tasks = [form["from"]] if form.get("from") else []
        run = await run_in_threadpool(ids.resolve_run, self.app, request.path_params["run"])
        try:
            started = await run_in_threadpool(
                partial(self.app.rerun_workflow_run, run.id, from_tasks=from_tasks)
            )
        except errors.UnknownTaskKeyError as exc:
            return self._problem(request, str(exc), 400)
        except (errors.RunNotFinishedError, errors.NothingToRerunError) as exc:
            return self._problem(request, str(exc), 409)
        return RedirectResponse(f"/runs/{started.run_id}?rerun=1", status_code=303)

    async def submit(self, request: Request) -> Response:
        """Submit a workflow (a TOML or JSON file's text) with inputs (a JSON object), as
        ``flowforge submit FILE --input ...`` does, with its validation and messages."""
        form = await self._form(request)
        if form is None:
            return _csrf_refused()
        try:
            definition = load_definition_text(
                form.get("definition", ""), form.get("format", "toml"), origin="the form"
            )
            inputs = parse_inputs(form.get("inputs", ""))
            started = await run_in_threadpool(self.app.submit_workflow_run, definition, inputs)
        except (errors.InvalidWorkflowDefinitionError, BadQueryError) as exc:
            return self._problem(request, str(exc), 400)
        except ValueError as exc:  # inputs that cannot be stored
            return self._problem(request, str(exc), 400)
        return RedirectResponse(f"/runs/{started.run_id}?submitted=1", status_code=303)

    async def events(self, request: Request) -> Response:
        """Server-sent events: ``change`` (the audit log's newest position) whenever
        something changed (``live.py`` says how it knows), a comment line when idle."""

        async def stream() -> AsyncIterator[str]:
            yield "retry: 2000\n\n"
            async for position in self.feed.changes():
                yield ": idle\n\n" if position is None else f"event: change\ndata: {position}\n\n"

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


def parse_inputs(text: str) -> dict[str, object]:
    """The form's inputs: empty, or a JSON object."""
    if not text.strip():
        return {}
    try:
        inputs = json.loads(text)
    except ValueError as exc:
        raise BadQueryError(f"inputs: not valid JSON: {exc}") from None
    if not isinstance(inputs, dict):
        raise BadQueryError(
            f'inputs: expected a JSON object such as {{"rows": 8}}, got {type(inputs).__name__}'
        )
    return inputs


def _csrf_refused() -> Response:
    return PlainTextResponse("missing or wrong CSRF token: reload the page", 403)


def _log_page(request: Request) -> tuple[int, int] | None:
    """The attempt log a task page pages through: ``?log=TOKEN&log_page=N``."""
    token, page = request.query_params.get("log", ""), request.query_params.get("log_page", "1")
    return (int(token), int(page)) if token.isdigit() and page.isdigit() else None
