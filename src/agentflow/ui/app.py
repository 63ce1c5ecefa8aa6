"""The console's ASGI app: routes, live refresh, and errors shown as pages.

``GET /`` lists threads, ``GET /thread?id=...`` shows one, ``POST /act/NAME``
plans, confirms and runs an action (:mod:`.actions`), ``POST /diff`` turns the
two steps chosen into the thread page's address, ``GET /static/...`` serves
the shipped script and stylesheet. A GET with ``X-Console-Live: 1`` (the
script's poll) is answered with the ``<main>`` alone and an ETag of it, 304
when nothing changed: an open page follows the store within a poll's period
(``static/console.js``), whoever changed it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import get_args
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from agentflow.checkpoint.base import ThreadStatus
from agentflow.checkpoint.stores import without_passwords
from agentflow.cli.errors import EXIT_USAGE, exit_status
from agentflow.errors import AgentflowError
from agentflow.runtime import StepNotFound, ThreadNotFound
from agentflow.ui.actions import ACTIONS, Console, thread_url
from agentflow.ui.forms import confirm_main, error_main
from agentflow.ui.html import Html, page
from agentflow.ui.pages import Frame, header, thread_main, threads_main
from agentflow.ui.security import Guard
from agentflow.ui.views import list_threads, load_thread

__all__ = ["LIVE_HEADER", "build_app"]

LIVE_HEADER = "x-console-live"
_PAGE_SIZE = 50
_MAX_PAGE = 500
_STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
_MAX_FORM = 1 << 20
_log = logging.getLogger("agentflow.ui")
Handler = Callable[[Request], Awaitable[Response]]


class _Refused(Exception):
    """A request the console answers with an error page: status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _number(request: Request, name: str) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    if not text.isdigit() or len(text) > 19:
        raise _Refused(400, f"{name} must be a whole number, got {text!r}")
    return int(text)


async def _form(request: Request) -> dict[str, str]:
    """The posted ``application/x-www-form-urlencoded`` fields (the last of each name)."""
    body = await request.body()
    if len(body) > _MAX_FORM:
        raise _Refused(413, "the form is too large")
    try:
        return dict(parse_qsl(body.decode(), keep_blank_values=True))
    except UnicodeDecodeError:
        raise _Refused(400, "the form is not UTF-8") from None


class ConsoleApp:
    """The console's handlers, over one :class:`Console` (session, notes, timers)."""

    def __init__(self, console: Console, frame: Frame) -> None:
        self.console = console
        self.frame = frame

    def _hide(self, message: str) -> str:
        return without_passwords(message, [self.console.session.target.url])

    def _answer(self, request: Request, title: str, main: Html, status: int = 200) -> Response:
        """``main`` as a page; to the live script, alone with its ETag. Only what
        a GET shows is live (a confirmation is a post's answer: it stays)."""
        etag = '"' + hashlib.blake2b(main.encode(), digest_size=12).hexdigest() + '"'
        if request.headers.get(LIVE_HEADER) == "1":
            if request.headers.get("if-none-match") == etag:
                return Response(status_code=304, headers={"etag": etag})
            return HTMLResponse(main, status_code=status, headers={"etag": etag})
        live = etag if request.method == "GET" else None
        body = page(title, main, header=header(self.frame), etag=live)
        return HTMLResponse(body, status_code=status)

    def route(self, path: str, handler: Handler, method: str) -> Route:
        """``handler`` at ``path``: a refused request or a bug is an error page, not a trace."""

        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except _Refused as exc:
                return self._error(request, exc.status, str(exc), "/")
            except Exception as exc:
                _log.exception("the console failed on %s %s", request.method, request.url.path)
                message = f"unexpected {type(exc).__name__}; the console's terminal shows where"
                return self._error(request, 500, message, "/")

        return Route(path, endpoint, methods=[method])

    def _note(self, request: Request) -> str | None:
        """The note an action left for the page it redirected to (``?note=KEY``)."""
        key = request.query_params.get("note")
        return self.console.notes.get(key) if key else None

    def _error(self, request: Request, status: int, message: str, back: str) -> Response:
        return self._answer(request, "not done", error_main(self._hide(message), back), status)

    async def threads(self, request: Request) -> Response:
        status = request.query_params.get("status") or None
        if status is not None and status not in get_args(ThreadStatus):
            return self._error(request, 400, f"no status {status!r}", "/")
        limit = min(_number(request, "limit") or _PAGE_SIZE, _MAX_PAGE) or _PAGE_SIZE
        prefix = request.query_params.get("prefix", "")
        try:
            listing = await list_threads(
                self.console.session.store,
                limit=limit,
                cursor=request.query_params.get("cursor") or None,
                status=status,  # type: ignore[arg-type]  # checked above
                prefix=prefix,
            )
        except AgentflowError as exc:
            return self._failed(request, exc, "/")
        main = threads_main(
            listing, status=status, prefix=prefix, limit=limit, note=self._note(request)
        )
        return self._answer(request, "threads", main)

    async def thread(self, request: Request) -> Response:
        thread = request.query_params.get("id", "")
        a, b = _number(request, "a"), _number(request, "b")
        try:
            view = await load_thread(self.console.session.store, thread)
        except AgentflowError as exc:
            return self._failed(request, exc, "/")
        main = thread_main(
            view,
            step=_number(request, "step"),
            diff=(a, b) if a is not None and b is not None else None,
            fork=_number(request, "fork"),
            read_only=self.frame.read_only,
            note=self._note(request),
        )
        return self._answer(request, thread, main)

    async def diff(self, request: Request) -> Response:
        form = await _form(request)
        thread = request.query_params.get("id", "")
        query = {k: form.get(k) for k in ("a", "b", "step")}
        return RedirectResponse(thread_url(thread, **query), status_code=303)

    async def act(self, request: Request) -> Response:
        name = request.path_params["name"]
        thread = request.query_params.get("thread", "")
        back = thread_url(thread)
        if self.frame.read_only:
            return self._error(request, 403, "the console is read-only (--read-only)", back)
        planner = ACTIONS.get(name)
        if planner is None:
            return self._error(request, 404, f"no action {name!r}", back)
        form = await _form(request)
        query = dict(request.query_params)
        try:
            plan = await planner(self.console, thread, query, form)
            if form.get("confirm") != "yes":
                fields = {k: v for k, v in form.items() if k != "confirm"}
                main = confirm_main(
                    plan.title,
                    plan.what,
                    action=str(request.url.path) + "?" + request.url.query,
                    fields=fields,
                    verb=plan.verb,
                    back=back,
                )
                return self._answer(request, plan.title, main)
            done = await plan.run()
        except AgentflowError as exc:
            return self._failed(request, exc, back)
        location = done.location
        separator = "&" if "?" in location else "?"
        return RedirectResponse(
            f"{location}{separator}note={self.console.note(done.note)}", status_code=303
        )

    def _failed(self, request: Request, exc: AgentflowError, back: str) -> Response:
        if isinstance(exc, ThreadNotFound | StepNotFound):
            status = 404
        else:
            status = 400 if exit_status(exc) == EXIT_USAGE else 409
        return self._error(request, status, str(exc) or type(exc).__name__, back)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        kind = _STATIC.get(name)
        if kind is None:
            return Response("not found\n", status_code=404, media_type="text/plain")
        body = files("agentflow.ui").joinpath("static", name).read_bytes()
        return Response(body, media_type=kind)


def build_app(
    console: Console, frame: Frame, *, token: str, port: int, hosts: set[str] | None
) -> Starlette:
    """The console as an ASGI app, behind its :class:`~agentflow.ui.security.Guard`."""
    handlers = ConsoleApp(console, frame)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await console.stop()

    routes = [
        handlers.route("/", handlers.threads, "GET"),
        handlers.route("/thread", handlers.thread, "GET"),
        handlers.route("/diff", handlers.diff, "POST"),
        handlers.route("/act/{name}", handlers.act, "POST"),
        handlers.route("/static/{name}", handlers.static, "GET"),
    ]
    guard = Middleware(Guard, token=token, port=port, hosts=hosts)
    return Starlette(routes=routes, middleware=[guard], lifespan=lifespan)
