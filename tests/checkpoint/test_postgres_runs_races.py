"""Racing writers on one PostgreSQL table set: separate processes claim and append,
exactly one wins (the workers share only the server, see tests/durable/racing.py);
appenders racing a paging reader never make it skip an event.
"""

from __future__ import annotations

import asyncio
from functools import partial

import pytest

from agentflow.checkpoint.cursor import CursorSigner
from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.durable import event_payload_digest
from tests.backends.postgres import DSN, Connection, admin_session, scratch_table
from tests.durable.racing import race_processes

admin = pytest.fixture(admin_session)
table = pytest.fixture(scratch_table)


async def test_racing_processes_claim_and_append_exactly_once(table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as store:
        opener = partial(PostgresCheckpointer, DSN, table=table)
        openers = (opener, opener)  # the records and the events: one store
        await race_processes(store, openers)


async def test_appenders_racing_a_paging_reader_never_make_it_skip(
    admin: Connection, table: str
) -> None:
    appenders, per_appender = 4, 30
    stores = [PostgresCheckpointer(DSN, table=table) for _ in range(appenders + 1)]
    reader, writers = stores[0], stores[1:]
    warm = {"type": "warm-up"}  # the tables and the cursor secret exist before the race
    await reader.append_once("warm", event_payload_digest(warm), warm)

    async def append(worker: int, store: PostgresCheckpointer) -> None:
        for n in range(per_appender):
            # A run's own events and its child's interleave in one family replay.
            run = {"run_id": "run-a"} if n % 2 else {"run_id": f"child-{worker}"}
            event = {"type": "step", "parent_run_id": "run-a", "n": n, "w": worker, **run}
            await store.append_once(f"e-{worker}-{n}", event_payload_digest(event), event)

    secret = await admin.fetchval(
        f"SELECT value FROM \"{table}_meta\" WHERE component = 'cursor_secret'"
    )
    signer = CursorSigner(secret, "postgres", "")
    seen: list[int] = []
    after: dict[str, str] | None = None
    try:
        writing = asyncio.gather(*(append(w, s) for w, s in enumerate(writers)))
        while True:
            done = writing.done()
            page = await reader.replay("run-a", after=after, limit=7, include_children=True)
            seen += [signer.decode("events", e.cursor["cursor"])["sequence"] for e in page.events]
            if page.events:
                after = dict(page.events[-1].cursor)
            if done and page.next_after is None:
                break
        await writing
    finally:
        for store in stores:
            await store.close()
    assert len(seen) == appenders * per_appender
    assert seen == sorted(set(seen))
