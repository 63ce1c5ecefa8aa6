"""``agentflow ui``: serve the console over the command's store until Ctrl-C.

Imports nothing of the ``ui`` extra until it runs, so the command line starts
without Starlette and uvicorn, and says how to install them when asked for
the console. The socket is bound before anything is printed: the first line
starting with ``http`` is the address to open, with its real port (``--port
0`` picks a free one) and this launch's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket

from agentflow.cli.session import Session
from agentflow.errors import AgentflowError

__all__ = ["ConsoleUnavailable", "ui"]

_INSTALL = "pip install 'agentflow-durable[ui]'"


class ConsoleUnavailable(AgentflowError):
    """``agentflow ui`` without the ``ui`` extra (Starlette, uvicorn) installed."""

    code = "console_unavailable"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _accepted_hosts(host: str, port: int) -> set[str] | None:
    """The ``Host`` headers a loopback console answers; None (any) beyond loopback."""
    if not _loopback(host):
        return None
    names = {host, "127.0.0.1", "localhost", "::1"}
    return {_authority(name, port) for name in names}


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _describe(s: Session) -> str:
    """The store as the pages name it: kind, place and namespace, never a password."""
    namespace = f", namespace {s.target.namespace}" if s.target.namespace else ""
    return f"{s.target.scheme or 'local'} store at {s.target.where}{namespace}"


async def ui(s: Session) -> int:
    try:
        import uvicorn

        from agentflow.ui.actions import Console
        from agentflow.ui.app import build_app
        from agentflow.ui.pages import Frame
        from agentflow.ui.security import new_token
    except ImportError as exc:
        missing = f" ({exc.name} is missing)" if exc.name else ""
        raise ConsoleUnavailable(f"the console needs the ui extra{missing}: {_INSTALL}") from None
    if s.graph_specs:
        _ = s.registry  # a bad --graph fails now, not at the first action
    host, read_only = s.args.host, s.args.read_only
    sock = _bind(host, s.args.port)
    port = sock.getsockname()[1]
    token = new_token()
    console = Console(s)
    app = build_app(
        console,
        Frame(_describe(s), read_only),
        token=token,
        port=port,
        hosts=_accepted_hosts(host, port),
    )
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    mode = " (read-only)" if read_only else ""
    s.say(f"agentflow console{mode} on the {_describe(s)}")
    s.console.print(f"http://{_authority(shown, port)}/?token={token}", soft_wrap=True)
    s.say("open it in a browser on this machine; Ctrl-C stops the console")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        await asyncio.shield(serving)
    except asyncio.CancelledError:
        # Ctrl-C: the server stops as on its own signal (its lifespan ends, so the
        # console's store work is finished), not cancelled mid-loop with a traceback.
        server.should_exit = True
        while not serving.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(serving)
        raise
    return 0
