"""Finding due timers: ``list_due`` against paging every thread, as the worker used to.

Each store holds ``SUSPENDED`` threads waiting on a timer, of which ``DUE`` are due now,
plus as many threads waiting for a human. One pass of ``list_due`` pages through the due
ones only; the old way pages through every thread with ``list_threads_page`` and keeps
those whose ``wake_at`` has passed. "rows read" counts the summaries the store returned to
the caller in a pass, the peek row of each page included.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from agentflow.checkpoint import Checkpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from benchmarks.common import Table, median

NOW = "2026-06-01T12:00:00+00:00"
_DUE_AT = "2026-06-01T11:00:00+00:00"
_LATER = "2026-07-01T00:00:00+00:00"
#: Puts in flight while a store is filled.
_WINDOW = 64
_PAGE = 100


async def fill_waiting(cp: Checkpointer, suspended: int, due: int) -> None:
    async def one(i: int) -> None:
        wake = _DUE_AT if i < due else _LATER
        await cp.put(make_checkpoint(f"t{i:07d}", 0, next=("n",), interrupted=True, wake_at=wake))
        await cp.put(make_checkpoint(f"h{i:07d}", 0, next=("n",), interrupted=True))

    for start in range(0, suspended, _WINDOW):
        await asyncio.gather(*(one(i) for i in range(start, min(start + _WINDOW, suspended))))


async def list_due_pass(cp: Checkpointer) -> tuple[int, int]:
    found = read = 0
    cursor: str | None = None
    while True:
        page = await cp.list_due(NOW, limit=_PAGE, cursor=cursor)
        found += len(page.threads)
        read += len(page.threads) + (page.next_cursor is not None)
        if page.next_cursor is None:
            return found, read
        cursor = page.next_cursor


async def page_all_pass(cp: Checkpointer) -> tuple[int, int]:
    now_us = parse_instant(NOW)
    found = read = 0
    cursor: str | None = None
    while True:
        page = await cp.list_threads_page(limit=1_000, cursor=cursor)
        read += len(page.threads) + (page.next_cursor is not None)
        found += sum(
            1
            for info in page.threads
            if info.interrupted and info.wake_at and parse_instant(info.wake_at) <= now_us
        )
        if page.next_cursor is None:
            return found, read
        cursor = page.next_cursor


@asynccontextmanager
async def _sqlite() -> AsyncIterator[Checkpointer]:
    from agentflow.checkpoint.sqlite import SqliteCheckpointer

    with TemporaryDirectory(prefix="agentflow-bench-due-") as folder:
        async with SqliteCheckpointer(Path(folder) / "c.db") as cp:
            yield cp


@asynccontextmanager
async def _postgres() -> AsyncIterator[Checkpointer]:
    import asyncpg

    from agentflow.checkpoint.postgres import PostgresCheckpointer

    dsn = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    table = f"bench_due_{uuid.uuid4().hex[:10]}"
    try:
        async with PostgresCheckpointer(dsn, table=table) as cp:
            yield cp
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            for (name,) in await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE $1", f"{table}%"
            ):
                await conn.execute(f'DROP TABLE IF EXISTS "{name}"')
        finally:
            await conn.close()


@asynccontextmanager
async def _mongodb() -> AsyncIterator[Checkpointer]:
    from pymongo import AsyncMongoClient
    from tests.support.mongod import mongodb_uri

    from agentflow.checkpoint.mongodb import MongoCheckpointer

    database = f"bench_due_{uuid.uuid4().hex[:10]}"
    uri = mongodb_uri()
    try:
        async with MongoCheckpointer(uri, database=database) as cp:
            yield cp
    finally:
        client: AsyncMongoClient[Any] = AsyncMongoClient(uri)
        await client.drop_database(database)
        await client.close()


STORES: dict[str, Callable[[], Any]] = {
    "SQLite": _sqlite,
    "PostgreSQL": _postgres,
    "MongoDB": _mongodb,
}
#: ``AGENTFLOW_BENCH_STORES=SQLite`` measures those stores only.
_ONLY = os.environ.get("AGENTFLOW_BENCH_STORES")


async def _measure(name: str, suspended: int, due: int, rounds: int) -> list[str]:
    async with STORES[name]() as cp:
        start = time.perf_counter()
        await fill_waiting(cp, suspended, due)
        fill_s = time.perf_counter() - start
        due_times: list[float] = []
        scan_times: list[float] = []
        due_read = scan_read = 0
        for _ in range(rounds):  # interleaved, so load swings hit both alike
            start = time.perf_counter()
            found, due_read = await list_due_pass(cp)
            due_times.append(time.perf_counter() - start)
            assert found == due, (name, found, due)
            start = time.perf_counter()
            found, scan_read = await page_all_pass(cp)
            scan_times.append(time.perf_counter() - start)
            assert found == due, (name, found, due)
    return [
        name,
        f"{suspended:,} + {suspended:,} human",
        f"{due:,}",
        f"{median(due_times) * 1000:.1f} ms",
        f"{due_read:,} ({due_read / due:.2f}x due)",
        f"{median(scan_times) * 1000:.1f} ms",
        f"{scan_read:,}",
        f"{median(scan_times) / median(due_times):.0f}x",
        f"{fill_s:.0f} s",
    ]


async def run(quick: bool) -> list[Table]:
    suspended, due, rounds = (10_000, 100, 3) if quick else (100_000, 1_000, 5)
    table = Table(
        title=f"list_due: one pass over {due:,} due timers among {suspended:,} waiting threads",
        headers=[
            "store",
            "threads waiting (timer + human)",
            "due",
            "list_due pass",
            "rows read",
            "page-all pass",
            "rows read",
            "speed-up",
            "fill time",
        ],
        notes=[
            f"medians of {rounds} interleaved passes; pages of {_PAGE} (list_due) and 1,000 "
            "(page-all, the worker's old scan)",
            "rows read = summaries returned to the caller, the peek row of each page included",
        ],
    )
    for name in STORES:
        if _ONLY and name not in _ONLY.split(","):
            continue
        table.rows.append(await _measure(name, suspended, due, rounds))
    return [table]
