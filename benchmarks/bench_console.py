"""The console's threads list on a SQLite store of 100,000 threads (10,000 with --quick).

What a page costs: ``list_threads_page(limit=50)`` alone, and the whole first
page as the console answers it (the store call, the HTML, the token check),
asked of its ASGI app in process, so no socket or browser time is counted.
A page deep in the listing (after 50,000 threads) and a status-filtered one
show the cost does not grow with the store: keyset pages are O(page). The
prefix search is a bounded scan (the listing has no prefix filter): a prefix
near the start is one page, one far along reads up to its budget.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import MutableMapping
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from rich.console import Console as Terminal

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.cli.session import Session, StoreTarget
from agentflow.ui.actions import Console
from agentflow.ui.app import build_app
from agentflow.ui.pages import Frame
from agentflow.ui.security import cookie_name
from agentflow.ui.views import SCAN_BUDGET
from benchmarks.common import Table, median, ms

_WINDOW = 64
_PORT = 8765
_TOKEN = "bench-token"
_ROUNDS = 30


async def _fill(store: SqliteCheckpointer, threads: int) -> None:
    """``threads`` threads ``t0000000``...; every fourth waits for a human."""

    async def one(i: int) -> None:
        waiting = i % 4 == 0
        cp = make_checkpoint(f"t{i:07d}", 0, next=("n",) if waiting else (), interrupted=waiting)
        await store.put(cp)

    for start in range(0, threads, _WINDOW):
        await asyncio.gather(*(one(i) for i in range(start, min(start + _WINDOW, threads))))


async def _cursor_after(store: SqliteCheckpointer, count: int) -> str | None:
    cursor = None
    for _ in range(count // 10_000):
        cursor = (await store.list_threads_page(limit=10_000, cursor=cursor)).next_cursor
    return cursor


def _client(store: SqliteCheckpointer) -> Any:
    """``get(path)``: the console's answer to a GET of ``path``, from its ASGI app."""
    args = argparse.Namespace(graph=[], json=False)
    session = Session(args, store, Terminal(quiet=True), StoreTarget("sqlite:///bench.db", None))
    app = build_app(Console(session), Frame("bench", True), token=_TOKEN, port=_PORT, hosts=None)
    cookie = f"{cookie_name(_PORT)}={_TOKEN}".encode()

    async def get(path: str) -> tuple[int, bytes]:
        target, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": target,
            "raw_path": target.encode(),
            "query_string": query.encode(),
            "headers": [(b"host", f"127.0.0.1:{_PORT}".encode()), (b"cookie", cookie)],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", _PORT),
        }
        status, body = 0, bytearray()

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))

        await app(scope, receive, send)
        return status, bytes(body)

    return get


async def _timed(call: Any) -> float:
    samples = []
    for _ in range(_ROUNDS):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return median(samples)


async def run(quick: bool) -> list[Table]:
    threads = 10_000 if quick else 100_000
    with TemporaryDirectory(prefix="agentflow-bench-console-") as folder:
        async with SqliteCheckpointer(Path(folder) / "c.db") as store:
            start = time.perf_counter()
            await _fill(store, threads)
            fill_s = time.perf_counter() - start
            get = _client(store)
            status, body = await get("/")
            assert status == 200 and body.count(b'href="/thread?id=') == 50, status
            middle = await _cursor_after(store, threads // 2)
            near, far = "t0000", f"t{threads - 1:07d}"[:5]
            cases: list[tuple[str, Any]] = [
                (
                    "list_threads_page(limit=50), first page",
                    lambda: store.list_threads_page(limit=50),
                ),
                (
                    f"list_threads_page(limit=50) after {threads // 2:,} threads",
                    lambda: store.list_threads_page(limit=50, cursor=middle),
                ),
                (
                    "list_threads_page(limit=50, status=interrupted)",
                    lambda: store.list_threads_page(limit=50, status="interrupted"),
                ),
                ("console GET / (first page, HTML)", lambda: get("/")),
                ("console GET /?status=interrupted", lambda: get("/?status=interrupted")),
                (f"console GET /?prefix={near} (at the start)", lambda: get(f"/?prefix={near}")),
                (f"console GET /?prefix={far} (far along)", lambda: get(f"/?prefix={far}")),
            ]
            rows = [[name, ms(await _timed(call))] for name, call in cases]
    return [
        Table(
            f"The console's threads list, SQLite, {threads:,} threads",
            ["page", "median"],
            rows,
            notes=[
                f"{_ROUNDS} rounds each; filled in {fill_s:.1f} s (puts {_WINDOW} at a time)",
                "GET is the console's ASGI app in process: store call + HTML + token check",
                f"a prefix search reads at most {SCAN_BUDGET:,} summaries, then offers to go on",
            ],
        )
    ]
