"""A real ``agentflow ui`` process, and plain HTTP requests to it.

The console is started as a user starts it (``python -m agentflow.cli ... ui
--port 0``) and found by the first line it prints that starts with ``http``.
Requests use :mod:`http.client`, so a test says exactly which headers
(``Host``, ``Origin``, the cookie) go out and nothing follows a redirect.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from tests.cli.support import command, env
from tests.runtime.graphs import lost_reply_graph

#: How long a console may take to print its address.
_START_S = 30.0


@dataclass
class RunningConsole:
    """A console process: its printed address (with the token) and its output."""

    process: subprocess.Popen[str]
    url: str
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        """``http://host:port`` without the token."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def token(self) -> str:
        return urlsplit(self.url).query.removeprefix("token=")

    @cached_property
    def cookie(self) -> str:
        """The ``Cookie`` header the console's own redirect sets."""
        answer = request(self, "GET", f"/?token={self.token}")
        jar: SimpleCookie = SimpleCookie(answer.headers["set-cookie"])
        [(name, morsel)] = jar.items()
        return f"{name}={morsel.value}"

    def output(self) -> str:
        """Everything printed so far."""
        return "".join(self.lines)


def _read(process: subprocess.Popen[str], lines: list[str], found: threading.Event) -> None:
    """Keep every line the console prints (a full pipe would stall it); ``found``
    is set at the first that starts with ``http``, or when output ends."""
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if line.startswith("http"):
            found.set()
    found.set()


@contextmanager
def console(
    cwd: Path, *args: str, extra_env: Mapping[str, str] | None = None
) -> Iterator[RunningConsole]:
    """``agentflow *args ui --port 0`` in ``cwd`` (extra flags of ``ui`` may follow
    in ``args`` after ``"ui"``; without it, ``ui --port 0`` is added)."""
    words = list(args) if "ui" in args else [*args, "ui", "--port", "0"]
    if "--port" not in words:
        words += ["--port", "0"]
    process = subprocess.Popen(
        command(*words),
        cwd=cwd,
        env=env(**(extra_env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    found = threading.Event()
    reader = threading.Thread(target=_read, args=(process, lines, found), daemon=True)
    reader.start()
    urls = (
        [line.strip() for line in lines if line.startswith("http")] if found.wait(_START_S) else []
    )
    if not urls:
        process.kill()
        reader.join(timeout=5)
        raise AssertionError(f"the console printed no address: {''.join(lines)}")
    running = RunningConsole(process, urls[0], lines)
    try:
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        reader.join(timeout=5)


def run_apart(make: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a coroutine to its end on a thread of its own: once a browser test has
    started the sync Playwright driver, an event loop runs on the main thread."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: asyncio.run(make())).result()


def store_path(cwd: Path) -> Path:
    """The default store's file under ``cwd`` (``sqlite:///.runs/checkpoints.db``)."""
    db = cwd / ".runs" / "checkpoints.db"
    db.parent.mkdir(mode=0o700, exist_ok=True)
    return db


#: The flags that register the graph of :func:`lost_reply`'s threads.
LOST_REPLY = ["--graph", "tests.runtime.graphs:lost_reply_graph"]


def lost_reply(cwd: Path, thread: str) -> Path:
    """``thread`` waits for reconciliation: its charge went out, the reply was lost.
    Returns the ledger the charge was written to."""
    ledger = cwd / "ledger"

    async def run() -> None:
        async with SqliteCheckpointer(store_path(cwd)) as store:
            result = (
                await lost_reply_graph().compile(store).run({"ledger": str(ledger)}, thread=thread)
            )
            assert result.status == "reconciliation_required"

    run_apart(run)
    return ledger


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: str


def request(
    running: RunningConsole,
    method: str,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: str | None = None,
) -> Answer:
    """One request to the console, headers as given (``Host`` defaults to its own)."""
    parts = urlsplit(running.base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        sent = {"Host": running.host, **(headers or {})}
        if body is not None:
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        conn.request(method, path, body=body, headers=sent)
        answer = conn.getresponse()
        received = {k.lower(): v for k, v in answer.getheaders()}
        return Answer(answer.status, received, answer.read().decode())
    finally:
        conn.close()


def post(
    running: RunningConsole,
    path: str,
    fields: Mapping[str, str],
    *,
    origin: str | None = "own",
    cookie: str | None = None,
) -> Answer:
    """A form's post, from the console's own page unless ``origin`` says another
    (None: no ``Origin`` header at all), with the console's cookie unless given."""
    headers = {"Cookie": cookie if cookie is not None else running.cookie}
    if origin is not None:
        headers["Origin"] = running.base if origin == "own" else origin
    return request(running, "POST", path, headers=headers, body=urlencode(fields))


def get(running: RunningConsole, path: str) -> Answer:
    """A GET with the console's cookie."""
    return request(running, "GET", path, headers={"Cookie": running.cookie})
