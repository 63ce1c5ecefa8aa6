"""Racing writers on one PostgreSQL table set: separate processes claim and append,
exactly one wins; appenders racing a paging reader never make it skip an event.

Each spawned worker opens its own stores, so the processes share only the
server; they meet at a barrier before every race. The parent does the asserting.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from threading import Barrier

import pytest

from agentflow.durable import event_payload_digest
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import DurableError
from agentflow.durable.stores.postgres import PostgresDurableStore
from agentflow.durable.stores.postgres_events import PostgresRunEventStore
from agentflow.durable.testing import make_record
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse, take
from tests.backends.postgres import DSN, admin_session
from tests.durable.backends.postgres import scratch_durable_table

WORKERS = 4
ROUNDS = 6
#: How long a worker waits for its peers (a hung peer fails the test).
_BARRIER_TIMEOUT = 120.0
_shared: dict[str, Barrier] = {}

admin = pytest.fixture(admin_session)


table = pytest.fixture(scratch_durable_table)


def _init(barrier: Barrier) -> None:
    _shared["barrier"] = barrier


async def _meet() -> None:
    await asyncio.to_thread(_shared["barrier"].wait, _BARRIER_TIMEOUT)


async def _race(table: str, worker: int, keys: list[str]) -> list[str]:
    outcomes: list[str] = []
    async with (
        PostgresDurableStore(DSN, table=table) as store,
        PostgresRunEventStore(DSN, table=table) as events,
    ):
        await store.load(keys[0])  # connected and set up before any race
        await events.replay("run-a")
        for key in keys:
            await _meet()
            try:
                await store.claim(
                    key,
                    cycle_index=1,
                    claim_token=f"worker-{worker}",
                    lease_ms=LIVE_MS,
                    mode=ClaimMode.RECOVERY,
                )
                outcomes.append("claimed")
            except DurableError as exc:
                outcomes.append(exc.code)
        for event_id, n in (("same", 0), ("different", worker)):
            event = {"type": "step", "run_id": "run-a", "n": n}
            await _meet()
            try:
                result = await events.append_once(event_id, event_payload_digest(event), event)
                kind = "inserted" if result.inserted else "duplicate"
                outcomes.append(f"{kind} {result.cursor['sequence']}")
            except DurableError as exc:
                outcomes.append(exc.code)
    return outcomes


def race(table: str, worker: int, keys: list[str]) -> list[str]:
    """Child entry point: one worker's outcome of every race, in order."""
    return asyncio.run(_race(table, worker, keys))


async def test_racing_processes_claim_and_append_exactly_once(table: str) -> None:
    keys = [f"run-{n}" for n in range(ROUNDS)]
    async with PostgresDurableStore(DSN, table=table) as store:
        for key in keys:  # each run's holder died: only a recovery claim takes it
            await store.create(make_record(key))
            await take(store, "dead-holder", key=key, lease_ms=LAPSED_MS)
        await lapse()
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            WORKERS, mp_context=ctx, initializer=_init, initargs=(ctx.Barrier(WORKERS),)
        ) as pool:
            loop = asyncio.get_running_loop()
            per_worker = await asyncio.gather(
                *(loop.run_in_executor(pool, race, table, w, keys) for w in range(WORKERS))
            )
        stored = [await store.load(key) for key in keys]
    for round_, key in enumerate(keys):
        outcomes = [worker[round_] for worker in per_worker]
        assert sorted(outcomes) == ["checkpoint_claim_active"] * (WORKERS - 1) + ["claimed"]
        record = stored[round_]
        assert record is not None and (record.revision, record.resume_attempt) == (2, 2)
        assert record.claim_token == f"worker-{outcomes.index('claimed')}", key
    same = sorted(worker[ROUNDS] for worker in per_worker)
    sequence = same[-1].split()[1]
    assert same == [f"duplicate {sequence}"] * (WORKERS - 1) + [f"inserted {sequence}"]
    different = sorted(worker[ROUNDS + 1].split()[0] for worker in per_worker)
    assert different == ["event_identity_conflict"] * (WORKERS - 1) + ["inserted"]


async def test_appenders_racing_a_paging_reader_never_make_it_skip(table: str) -> None:
    appenders, per_appender = 4, 30
    stores = [PostgresRunEventStore(DSN, table=table) for _ in range(appenders + 1)]
    reader, writers = stores[0], stores[1:]
    await reader.replay("run-a")  # the tables exist before the race

    async def append(worker: int, store: PostgresRunEventStore) -> None:
        for n in range(per_appender):
            # A run's own events and its child's interleave in one family replay.
            run = {"run_id": "run-a"} if n % 2 else {"run_id": f"child-{worker}"}
            event = {"type": "step", "parent_run_id": "run-a", "n": n, "w": worker, **run}
            await store.append_once(f"e-{worker}-{n}", event_payload_digest(event), event)

    seen: list[int] = []
    after: dict[str, int] | None = None
    try:
        writing = asyncio.gather(*(append(w, s) for w, s in enumerate(writers)))
        while True:
            done = writing.done()
            page = await reader.replay("run-a", after=after, limit=7, include_children=True)
            seen += [event.cursor["sequence"] for event in page.events]
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
