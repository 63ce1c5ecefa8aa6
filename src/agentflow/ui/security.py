"""Who may use the console: the holder of this launch's token, from this origin.

The console can move money (a replayed receipt, a retried charge), so it
is a local tool with a lock, as Jupyter is:

* each launch makes a random token and prints it in the URL to open; the
  first request carrying it (``?token=``) is answered with an HttpOnly,
  SameSite=Strict cookie and a redirect to the same address without it, so
  the token leaves the address bar and the history;
* every request without the token (query or cookie) is refused with 403,
  the stylesheet and script included;
* a request whose ``Host`` is not the address the console was opened on is
  refused when it listens on loopback (DNS rebinding: a page on another
  site that resolves its own name to 127.0.0.1);
* a write (any method but GET and HEAD) also needs ``Origin`` to be the
  console's own (or, without one or with ``null``, ``Sec-Fetch-Site:
  same-origin``):
  a form on another site cannot post here even in a browser that holds the
  cookie;
* every answer forbids inline script, framing, caching and referrers to other sites.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Collection
from urllib.parse import urlencode

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Guard", "cookie_name", "new_token"]

_SAFE_METHODS = frozenset({"GET", "HEAD"})
#: Sent with every answer: what a page may load and do.
_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # not no-referrer: under it a browser sends ``Origin: null`` with a form's post
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
_NO_TOKEN = (
    "403 Forbidden: this console needs the token of its launch; open the URL "
    "that `agentflow ui` printed (it ends in ?token=...)\n"
)


def new_token() -> str:
    """A fresh launch token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    """The cookie of the console on ``port``: browsers share cookies across
    ports, so two consoles on one machine must not overwrite each other's."""
    return f"agentflow_console_{port}"


class Guard:
    """ASGI middleware in front of the console: see the module docstring.

    ``hosts`` are the ``Host`` values accepted (``host:port``); None accepts
    any (the console listens beyond loopback, where the token is the lock).
    """

    def __init__(
        self, app: ASGIApp, *, token: str, port: int, hosts: Collection[str] | None
    ) -> None:
        self.app = app
        self.token = token
        self.cookie = cookie_name(port)
        self.hosts = None if hosts is None else frozenset(h.lower() for h in hosts)

    def _holds(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def _refusal(self, request: Request) -> Response | None:
        """Why ``request`` may not go on, as the answer to send; None when it may."""
        host = request.headers.get("host", "").lower()
        if self.hosts is not None and host not in self.hosts:
            return PlainTextResponse("403 Forbidden: unknown Host\n", status_code=403)
        if "token" in request.query_params:
            if not self._holds(request.query_params["token"]):
                return PlainTextResponse(_NO_TOKEN, status_code=403)
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            path = "/" + request.url.path.lstrip("/")  # never ``//host``: another site
            target = path + (f"?{urlencode(rest)}" if rest else "")
            answer = RedirectResponse(target, status_code=303)
            answer.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            return answer
        if not self._holds(request.cookies.get(self.cookie)):
            return PlainTextResponse(_NO_TOKEN, status_code=403)
        if request.method not in _SAFE_METHODS and not self._same_origin(request, host):
            return PlainTextResponse(
                "403 Forbidden: a write must come from the console's own page\n", status_code=403
            )
        return None

    @staticmethod
    def _same_origin(request: Request, host: str) -> bool:
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            return origin.lower() == f"http://{host}"
        return request.headers.get("sec-fetch-site") == "same-origin"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        if scope["type"] != "http":  # no websockets here
            return
        refusal = self._refusal(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, send_guarded)
            return
        await self.app(scope, receive, send_guarded)
