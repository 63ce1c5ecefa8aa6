"""A database written by agentflow before the one-store refactor (checkpoint layout 2
beside durable layout 1) opens as one store of version 3 and goes on.

The data is tests/data/migration/mongodb/dump.json, made by the old code itself
(make_dump.py beside it, run from a worktree of commit aeb9750): in namespace
``acme``, sealed, a run paused on a human interrupt, a run waiting for
reconciliation after a lost reply and three events (one of a child run,
accepted between its parent's two); in the default namespace a finished run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from bson import json_util
from pymongo import AsyncMongoClient, IndexModel

from agentflow.checkpoint.mongodb import MongoCheckpointer, migration
from agentflow.checkpoint.sealing import KeyRing
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable import OperationState, ReconciliationDecision
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.wire.canonical import canonical_json
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema
from tests.backends.mongodb import Doc, MongoStore
from tests.backends.mongodb import scratch as scratch_body
from tests.runtime import graphs

DUMP = Path(__file__).parents[1] / "data" / "migration" / "mongodb" / "dump.json"
scratch = pytest.fixture(scratch_body)
_SCHEMA = {"_id": {"m": "schema"}}


def _dump() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DUMP.read_text())
    return loaded


def _bson(value: object) -> Any:
    """Canonical extended JSON back to its BSON types (field order kept)."""
    return json_util.loads(json.dumps(value), json_options=json_util.CANONICAL_JSON_OPTIONS)


async def _load(scratch: MongoStore) -> None:
    """Every collection of the dump, its indexes first, as the old code left it."""
    db = scratch.client[scratch.database]
    for name, dumped in _dump()["collections"].items():
        specs = []
        for spec in _bson(dumped["indexes"]):
            keys = list(spec.pop("key").items())
            specs.append(IndexModel(keys, **spec))
        await db.create_collection(name)
        if specs:
            await db[name].create_indexes(specs)
        await db[name].insert_many(_bson(dumped["documents"]))


@pytest.fixture
async def old(scratch: MongoStore) -> AsyncIterator[MongoStore]:
    """A database holding the old layout."""
    await _load(scratch)
    yield scratch


def _ring() -> KeyRing:
    spec = _dump()["keyring"]
    return KeyRing.from_source(lambda: spec)


async def _everything(scratch: MongoStore) -> dict[str, list[Doc]]:
    db = scratch.client[scratch.database]
    return {
        name: await db[name].find({}).sort("_id", 1).to_list()
        for name in sorted(await db.list_collection_names())
    }


async def test_the_old_layout_reads_back_whole_as_one_store(old: MongoStore) -> None:
    assert await old.raw.find_one(_SCHEMA) == {**_SCHEMA, "v": 2}
    async with old.store(namespace="acme", sealing=_ring()) as store:
        listed = {i.thread: i for i in await store.list_threads()}
        assert await old.raw.find_one(_SCHEMA) == {**_SCHEMA, "v": 4}
        assert {t: i.status for t, i in listed.items()} == {
            "ambiguous": "reconciliation_required",
            "paused": "interrupted",
        }
        assert listed["ambiguous"].run_status == "reconciliation_required"
        waiting = await store.list_threads_page(status="reconciliation_required")
        assert [i.thread for i in waiting.threads] == ["ambiguous"]
        assert (await store.list_threads_page(status="running")).threads == []
        # checkpoints, sealed with the ring: every step of both runs
        paused = await store.get("paused")
        assert paused is not None and paused.interrupted and paused.interrupt_node == "ask"
        assert paused.state["log"] == ["prepare"]
        assert [c.step async for c in store.history("paused")] == [0, 1, 2]
        raw = await old.raw.find_one({"_id": {"n": "acme", "t": "paused", "s": paused.step}})
        assert raw is not None and b"prepare" not in raw["payload"]
        # records, with their journals, in their threads' documents now
        record = await store.load("ambiguous")
        assert record is not None and record.status is CheckpointStatus.RECONCILIATION_REQUIRED
        (call,) = record.tool_journal
        assert (call.tool_name, call.state) == ("charge", OperationState.AMBIGUOUS)
        held = await store.load("paused")
        assert held is not None and held.status is CheckpointStatus.RUNNING
        assert held.claim_token is None and held.cycle_index == 1
        assert [run.key for run in (await store.list_runs()).runs] == ["ambiguous", "paused"]
        thread = await old.raw.find_one({"_id": {"n": "acme", "t": "ambiguous"}})
        assert thread is not None and thread["rs"] == "reconciliation_required"
        assert b"charge" not in thread["journal"]["tool"][0]  # sealed as it was
        # events, the child's through its parent too, in acceptance order
        assert [e.event_id for e in (await store.replay("paused")).events] == [
            "evt-paused-1",
            "evt-paused-2",
        ]
        family = await store.replay("paused", include_children=True)
        assert [e.event_id for e in family.events] == [
            "evt-paused-1",
            "evt-child-1",
            "evt-paused-2",
        ]
        assert family.events[1].event["parent_run_id"] == "paused"
        later = await store.replay("paused", after=family.events[0].cursor, include_children=True)
        assert [e.event_id for e in later.events] == ["evt-child-1", "evt-paused-2"]
        await store.delete_thread("child")  # its event leaves the parent's family
        family = await store.replay("paused", include_children=True)
        assert [e.event_id for e in family.events] == ["evt-paused-1", "evt-paused-2"]
    names = await old.client[old.database].list_collection_names()
    assert sorted(names) == ["checkpoints", "checkpoints_durable_events"]
    numbered = await old.events.find({}, {"_id": 0, "q": 1, "rp": 1}).sort("q").to_list()
    assert numbered == [{"q": 1, "rp": 0}, {"q": 3, "rp": 1}]  # q 2 was the child's
    assert await old.events.count_documents({"rs": {"$exists": True}}) == 0
    async with old.store(namespace="acme") as unsealed:
        with pytest.raises(CheckpointCorrupted):
            await unsealed.get("paused")
    async with old.store() as plain:
        (done,) = await plain.list_threads()
        assert (done.thread, done.status) == ("plain", "done")
        finished = await plain.load("plain")
        assert finished is not None and finished.status is CheckpointStatus.COMPLETED


async def test_the_old_runs_resume_through_the_runtime(old: MongoStore) -> None:
    async with old.store(namespace="acme", sealing=_ring()) as store:
        approval = graphs.approval_graph().compile(store)
        answered = await approval.resume("paused", "yes")
        assert answered.status == "done"
        assert answered.state["log"] == ["prepare", "answer yes", "finish"]
        lost = graphs.lost_reply_graph().compile(store)
        record = await store.load("ambiguous")
        assert record is not None
        (call,) = record.tool_journal
        # the operator saw the charge in the ledger: no second charge
        decision = ReconciliationDecision.replay_result({"charged": 700})
        await lost.reconcile("ambiguous", call.operation_id, decision, attempt=1)
        settled = await lost.resume("ambiguous")
        assert settled.status == "done" and settled.state["receipt"] == {"charged": 700}
        statuses = {i.thread: i.status for i in await store.list_threads()}
        assert statuses == {"ambiguous": "done", "paused": "done"}


async def test_processes_migrating_at_once_agree(old: MongoStore) -> None:
    clients: list[AsyncMongoClient[Doc]] = [AsyncMongoClient(old.uri) for _ in range(4)]
    stores = [MongoCheckpointer(client=c, database=old.database, namespace="acme") for c in clients]
    try:
        pages = await asyncio.gather(
            *(s.list_threads_page(status="reconciliation_required") for s in stores)
        )
        assert [[i.thread for i in page.threads] for page in pages] == [["ambiguous"]] * 4
        assert [run.key for run in (await stores[0].list_runs()).runs] == ["ambiguous", "paused"]
    finally:
        for store, client in zip(stores, clients, strict=True):
            await store.close()
            await client.close()
    assert await old.raw.find_one(_SCHEMA) == {**_SCHEMA, "v": 4}
    assert sorted(doc["q"] for doc in await old.events.find({}).to_list()) == [1, 2, 3]


async def test_a_migrator_that_died_midway_is_taken_over(
    old: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs moved in, the events half numbered, then the process died: the next
    store, once the lease lapsed, runs every step again and ends where one run would."""
    numbered = migration._number_events

    async def dies(events: Any, renew: Any) -> None:
        await old.events.update_one({"_id.e": "evt-paused-1"}, {"$set": {"q": 1, "rp": 0}})
        raise ConnectionResetError("the migrator died")

    monkeypatch.setattr(migration, "_number_events", dies)
    async with old.store(namespace="acme") as first:
        with pytest.raises(ConnectionResetError):
            await first.list_threads()
    assert (await old.raw.find_one(_SCHEMA) or {}).get("v") == 2
    monkeypatch.setattr(migration, "_number_events", numbered)
    async with old.store(namespace="acme", sealing=_ring()) as waiting:
        with pytest.raises(TimeoutError):  # the lease is live: it waits for the migrator
            await asyncio.wait_for(waiting.list_threads(), 0.5)
    lapsed = {"$set": {"lease": datetime(2000, 1, 1, tzinfo=UTC)}}
    await old.raw.update_one(_SCHEMA, lapsed)
    async with old.store(namespace="acme", sealing=_ring()) as store:
        assert {i.thread for i in await store.list_threads()} == {"ambiguous", "paused"}
        family = await store.replay("paused", include_children=True)
        assert [e.event_id for e in family.events] == [
            "evt-paused-1",
            "evt-child-1",
            "evt-paused-2",
        ]
        assert (await store.load("ambiguous")) is not None
    assert await old.raw.find_one(_SCHEMA) == {**_SCHEMA, "v": 4}


async def test_a_newer_durable_layout_is_refused_and_left_alone(old: MongoStore) -> None:
    runs = old.client[old.database]["checkpoints_durable_runs"]
    await runs.update_one({"_id": {"m": "durable"}}, {"$set": {"v": 2}})
    before = await _everything(old)
    async with old.store(namespace="acme") as store:
        with pytest.raises(IncompatibleSchema):
            await store.load("paused")
        with pytest.raises(IncompatibleSchema):
            await store.put(make_checkpoint("new", 0))
    assert await _everything(old) == before


def _old_event(
    event_id: str, run: str, rs: int, rc: int, parent: tuple[str, int, int] | None
) -> Doc:
    """An event as version 2 stored it: its place in its run and its parent's children,
    and how far the other sequence had come (a plain payload, as before the envelopes)."""
    event: Doc = {"type": "note", "run_id": run}
    doc: Doc = {"_id": {"n": "", "e": event_id}, "r": run, "rs": rs, "rc": rc}
    if parent is not None:
        event["parent_run_id"] = parent[0]
        doc |= {"p": parent[0], "ps": parent[1], "po": parent[2]}
    body = canonical_json(event, what="event")
    return doc | {"d": hashlib.sha256(body).hexdigest(), "b": body}


async def test_events_of_many_families_keep_every_replay_order(scratch: MongoStore) -> None:
    """Two parents with interleaved children, one child with two parents' worth of
    events: each replay, own or with its children, is the order version 2 replayed."""
    await scratch.raw.insert_one({**_SCHEMA, "v": 2})
    await scratch.events.insert_many(
        [
            _old_event("p1", "P", 1, 0, None),
            _old_event("c1", "C", 1, 0, ("P", 1, 1)),  # after p1
            _old_event("d1", "D", 1, 0, ("P", 2, 1)),
            _old_event("p2", "P", 2, 2, None),  # after c1 and d1
            _old_event("q1", "Q", 1, 0, None),
            _old_event("c2", "C", 2, 0, ("P", 3, 2)),  # after p2
            _old_event("e1", "E", 1, 0, ("Q", 1, 1)),
            _old_event("p3", "P", 3, 3, None),
            _old_event("q2", "Q", 2, 1, None),
        ]
    )
    async with scratch.store() as store:

        async def replayed(run: str, family: bool = False) -> list[str]:
            page = await store.replay(run, include_children=family)
            return [event.event_id for event in page.events]

        assert await replayed("P", True) == ["p1", "c1", "d1", "p2", "c2", "p3"]
        assert await replayed("P") == ["p1", "p2", "p3"]
        assert await replayed("C") == ["c1", "c2"]
        assert await replayed("Q", True) == ["q1", "e1", "q2"]
    numbers = sorted(doc["q"] for doc in await scratch.events.find({}).to_list())
    assert numbers == list(range(1, 10))


async def test_old_events_missing_one_are_refused(scratch: MongoStore) -> None:
    await scratch.raw.insert_one({**_SCHEMA, "v": 2})
    await scratch.events.insert_many(
        [_old_event("p1", "P", 1, 0, None), _old_event("p3", "P", 3, 0, None)]
    )
    async with scratch.store() as store:
        with pytest.raises(CheckpointCorrupted, match="no event number 2"):
            await store.replay("P")
    assert (await scratch.raw.find_one(_SCHEMA) or {}).get("v") == 2
