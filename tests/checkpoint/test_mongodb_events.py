"""The MongoDB store's event numbering: one sequence per namespace, gapless under racing
appends, a family replay in acceptance order, and pages whose cursors never skip."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.durable import event_payload_digest
from agentflow.durable.run.events import AppendOnceResult, EventPage
from agentflow.errors import InvalidCursor
from tests.backends.mongodb import Commands, Doc, Explained, MongoStore, explain
from tests.backends.mongodb import scratch as scratch_body

scratch = pytest.fixture(scratch_body)


async def _append(store: MongoCheckpointer, event_id: str, **event: Any) -> AppendOnceResult:
    return await store.append_once(event_id, event_payload_digest(event), event)


async def _pages(
    store: MongoCheckpointer, run: str, limit: int, **kwargs: Any
) -> tuple[list[str], list[dict[str, Any] | None]]:
    """Every event id of a replay read ``limit`` at a time, and the cursors it went through."""
    seen: list[str] = []
    cursors: list[dict[str, Any] | None] = []
    after = kwargs.pop("after", None)
    while True:
        page: EventPage = await store.replay(run, after=after, limit=limit, **kwargs)
        seen += [event.event_id for event in page.events]
        after = page.next_after
        cursors.append(after)
        if after is None:
            return seen, cursors


async def test_a_family_replay_is_in_acceptance_order_across_run_and_children(
    scratch: MongoStore,
) -> None:
    async with scratch.store() as store:
        await _append(store, "c1", run_id="child-a", parent_run_id="p")
        p1 = await _append(store, "p1", run_id="p")
        await _append(store, "c2", run_id="child-b", parent_run_id="p")
        await _append(store, "c3", run_id="child-a", parent_run_id="p")
        await _append(store, "p2", run_id="p")
        await _append(store, "self", run_id="p", parent_run_id="p")  # its own parent: once
        await _append(store, "other", run_id="q", parent_run_id="q-root")
        whole, _ = await _pages(store, "p", 100, include_children=True)
        paged, cursors = await _pages(store, "p", 1, include_children=True)
        after_p1 = (await store.replay("p", after=p1.cursor, include_children=True)).events
        own, _ = await _pages(store, "p", 2)
        child, _ = await _pages(store, "child-a", 1)
        with pytest.raises(InvalidCursor):
            await store.replay("q", after={"sequence": 1})  # a cursor this store never signed
    assert whole == paged == ["c1", "p1", "c2", "c3", "p2", "self"]
    assert len(cursors) == 6 and cursors[-1] is None  # one page per event, the last says so
    assert p1.cursor.keys() == {"cursor"}  # the store's signed cursor, nothing in the clear
    assert [event.event_id for event in after_p1] == ["c2", "c3", "p2", "self"]
    assert own == ["p1", "p2", "self"] and child == ["c1", "c3"]


async def test_racing_appends_number_the_namespace_without_gaps(scratch: MongoStore) -> None:
    stores = [scratch.store() for _ in range(4)]  # four clients, four pools
    try:
        results = await asyncio.gather(
            *(
                _append(stores[n % 4], f"e{n}", run_id="r", parent_run_id="p", n=n)
                for n in range(40)
            )
        )
        again = await asyncio.gather(
            *(
                _append(stores[n % 4], f"e{n}", run_id="r", parent_run_id="p", n=n)
                for n in range(40)
            )
        )
        own, _ = await _pages(stores[0], "r", 7)
        family, _ = await _pages(stores[1], "p", 7, include_children=True)
    finally:
        for store in stores:
            await store.close()
    assert all(result.inserted for result in results)
    stored = await scratch.events.find({}, {"_id.e": 1, "q": 1}).sort("q").to_list()
    assert [doc["q"] for doc in stored] == list(range(1, 41))
    assert [r.cursor for r in again] == [r.cursor for r in results]
    assert not any(result.inserted for result in again)
    assert own == family == [doc["_id"]["e"] for doc in stored]


async def test_a_paging_reader_racing_appenders_never_skips(scratch: MongoStore) -> None:
    appenders = [scratch.store() for _ in range(3)]
    reader = scratch.store()
    done = asyncio.Event()
    seen: list[str] = []

    async def append(worker: int) -> None:
        for n in range(25):
            await _append(appenders[worker], f"w{worker}-{n}", run_id="r", parent_run_id="p")

    async def read() -> None:
        after = None
        while True:
            finished = done.is_set()
            page = await reader.replay("p", after=after, limit=4, include_children=True)
            seen.extend(event.event_id for event in page.events)
            if page.events:  # each event's cursor resumes this replay after it
                after = page.events[-1].cursor
            if finished and page.next_after is None:
                return

    try:
        reading = asyncio.create_task(read())
        await asyncio.gather(*(append(worker) for worker in range(3)))
        done.set()
        await reading
    finally:
        for store in [*appenders, reader]:
            await store.close()
    expected = {f"w{worker}-{n}" for worker in range(3) for n in range(25)}
    assert len(seen) == len(expected) and set(seen) == expected
    for worker in range(3):  # each appender's events in the order it appended them
        mine = [event for event in seen if event.startswith(f"w{worker}-")]
        assert mine == [f"w{worker}-{n}" for n in range(25)]


async def test_appends_and_replays_read_only_their_index_ranges(scratch: MongoStore) -> None:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    read: dict[str, Explained] = {}
    try:
        async with MongoCheckpointer(client=client, database=scratch.database) as store:
            for n in range(60):
                await _append(store, f"e{n}", run_id=f"run-{n % 3}", parent_run_id=f"p-{n % 2}")
                await _append(store, f"o{n}", run_id=f"p-{n % 2}", n=n)
            after = (await store.replay("run-1", limit=5)).next_after
            for name, call in (
                ("append", _append(store, "late", run_id="run-1", parent_run_id="p-1")),
                ("repeat", _append(store, "e7", run_id="run-1", parent_run_id="p-1")),
                ("replay", store.replay("run-1", after=after, limit=4)),
                ("family", store.replay("p-1", limit=4, include_children=True)),
            ):
                commands.sent.clear()
                await call
                [command] = [body for op, body in commands.sent if op == "aggregate"]
                read[name] = await explain(scratch.client, command)
    finally:
        await client.close()
    for name, explained in read.items():  # index ranges in order: no scan, no sort
        assert not {"COLLSCAN", "SORT"} & explained.stages, (name, explained)
    # the id (one key, one document: explained after the insert, it is found) and where
    # three sequences end (the namespace's, the run's, the parent's children), one key each
    assert (read["append"].keys, read["append"].docs) == (4, 1)
    assert (read["repeat"].keys, read["repeat"].docs) == (4, 1)
    assert (read["replay"].keys, read["replay"].docs) == (5, 5)  # the page and one more
    assert (read["family"].keys, read["family"].docs) == (10, 10)  # that, from both ranges
