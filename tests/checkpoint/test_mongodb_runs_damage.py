"""Damaged MongoDB records and events raise DurableCorrupted and are never written over."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.durable import event_payload_digest
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import claimed, take
from tests.backends.mongodb import Doc, MongoStore
from tests.backends.mongodb import scratch as scratch_body

scratch = pytest.fixture(scratch_body)


def _run(key: str = "run-1") -> Doc:
    return {"_id": {"n": "", "t": key}}


@pytest.mark.parametrize(
    ("change", "malformed"),
    [
        ({"status": "paused"}, True),
        ({"revision": -1}, True),
        ({"revision": "1"}, True),  # BSON holds text where an int belongs
        ({"cycle_index": 2**53}, True),
        ({"claimed_cycle": -3}, True),
        ({"lease_expires_at_ms": 1.5}, True),
        ({"terminal_acknowledged": 0}, True),
        ({"claim_token": 7}, False),  # not in a listing: only a whole read sees it
        ({"status": 7}, False),  # not text: the listings' partial indexes leave it out
        ({"identity": None, "revision": None, "body": None}, True),  # what is left is a record
        ({"terminal": True}, False),  # well-formed, but the body holds no terminal result
        ({"ambiguous": True}, False),  # well-formed, but no journal entry is ambiguous
        ({"identity": "other"}, False),
    ],
)
async def test_a_damaged_head_raises_on_every_read(
    scratch: MongoStore, change: Doc, malformed: bool
) -> None:
    async with scratch.store() as store:
        await claimed(store)
        await scratch.raw.update_one(_run(), {"$set": change})
        with pytest.raises(DurableCorrupted):
            await store.load("run-1")
        if malformed:  # a listing reads the index alone, so it sees what the index holds
            with pytest.raises(DurableCorrupted):
                await store.list_runs()


@pytest.mark.parametrize(
    "change",
    [
        {"$unset": {"body": ""}},
        {"$set": {"body": "text, not bytes"}},
        {"$unset": {"journal": ""}},
        {"$set": {"journal.tool": {"0": b"{}"}}},
        {"$unset": {"journal.model": ""}},
    ],
)
async def test_a_damaged_body_or_journal_refuses_every_write_and_stays_as_found(
    scratch: MongoStore, change: Doc
) -> None:
    async with scratch.store() as store:
        record = await claimed(store)
        await store.create(make_record("run-2"))
        await scratch.raw.update_many({"_id.t": {"$in": ["run-1", "run-2"]}}, change)
        damaged = await scratch.raw.find({"revision": {"$exists": True}}).to_list()
        entry = make_tool_entry("run-1", 1)
        for write in (
            store.record_operation(record, entry, claim_token="owner-a"),
            store.progress(record, claim_token="owner-a"),
            take(store, "owner-b", key="run-2"),
            store.load("run-1"),
        ):
            with pytest.raises(DurableCorrupted):
                await write
        after = await scratch.raw.find({"revision": {"$exists": True}}).to_list()
    assert after == damaged


async def test_a_shortened_journal_is_never_padded(scratch: MongoStore) -> None:
    async with scratch.store() as store:
        record = await claimed(store)
        for position in (1, 2):
            entry = make_tool_entry("run-1", 1, position)
            record = await store.record_operation(record, entry, claim_token="owner-a")
        await scratch.raw.update_one(_run(), {"$pop": {"journal.tool": 1}})
        third = make_tool_entry("run-1", 1, 3)
        with pytest.raises(DurableCorrupted):
            await store.record_operation(record, third, claim_token="owner-a")
        stored = await scratch.raw.find_one(_run())
    assert stored is not None and len(stored["journal"]["tool"]) == 1
    assert stored["revision"] == record.revision


async def _events(scratch: MongoStore, count: int = 3) -> None:
    async with scratch.store() as store:
        for n in range(count):
            event = {"type": "step", "run_id": "run-a", "n": n}
            await store.append_once(f"e{n}", event_payload_digest(event), event)


def _event(n: int) -> Doc:
    return {"_id": {"n": "", "e": f"e{n}"}}


@pytest.mark.parametrize(
    "change",
    [
        {"$set": {"b": b'{"n":99,"run_id":"run-a","type":"step"}'}},  # fails its digest
        {"$set": {"d": 7}},
        {"$set": {"rp": -1}},
        {"$unset": {"q": ""}},
        {"$set": {"q": 99}},  # renumbered: the next event's link names a missing number
    ],
)
async def test_a_damaged_event_raises_on_replay(scratch: MongoStore, change: Doc) -> None:
    await _events(scratch)
    await scratch.events.update_one(_event(1), change)
    async with scratch.store() as store:
        with pytest.raises(DurableCorrupted):
            await store.replay("run-a")


async def test_a_repeat_of_a_damaged_event_raises(scratch: MongoStore) -> None:
    await _events(scratch, 1)
    await scratch.events.update_one(_event(0), {"$set": {"b": b"{}"}})
    event: dict[str, Any] = {"type": "step", "run_id": "run-a", "n": 0}
    async with scratch.store() as store:
        with pytest.raises(DurableCorrupted):
            await store.append_once("e0", event_payload_digest(event), event)


async def test_events_missing_or_moved_to_another_run_raise(scratch: MongoStore) -> None:
    await _events(scratch, 4)
    await scratch.events.delete_one(_event(1))
    async with scratch.store() as store:
        with pytest.raises(DurableCorrupted) as missing:
            await store.replay("run-a")
        await scratch.events.update_one(_event(2), {"$set": {"r": "run-b"}})
        with pytest.raises(DurableCorrupted) as moved:
            await store.replay("run-b")
        await scratch.events.update_one(_event(3), {"$set": {"q": "4"}})
        event = {"type": "step", "run_id": "run-a", "n": 9}
        with pytest.raises(DurableCorrupted):  # where the namespace's numbers end is text now
            await store.append_once("e9", event_payload_digest(event), event)
        assert await scratch.events.count_documents({"_id.e": "e9"}) == 0
    assert "no number 2" in str(missing.value)
    assert "another run" in str(moved.value)
