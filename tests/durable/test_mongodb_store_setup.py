"""The MongoDB durable store's setup and connections: its collections beside the checkpointer's,
the layout version, collations, write concerns, clients, URLs, an unreachable server, and a
write whose reply was lost."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable import event_payload_digest
from agentflow.durable.stores import open_durable_store
from agentflow.durable.stores.mongodb import MongoDurableStore, from_url
from agentflow.durable.stores.mongodb_documents import (
    CHILD_EVENTS_INDEX,
    LAYOUT_ID,
    LISTING_INDEX,
    RUN_EVENTS_INDEX,
    STATUS_INDEX,
)
from agentflow.durable.stores.mongodb_events import MongoRunEventStore
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, claimed
from agentflow.errors import (
    CheckpointCorrupted,
    IncompatibleSchema,
    InvalidArgument,
    InvalidStoreUrl,
    StoreClosed,
    StoreUnavailable,
)
from tests.durable.backends.mongodb import Commands, Doc, Scratch, replica_set
from tests.durable.backends.mongodb import scratch as scratch_body

scratch = pytest.fixture(scratch_body)


async def _indexes(scratch: Scratch) -> dict[str, set[str]]:
    found = {}
    for collection in (scratch.runs, scratch.events):
        found[collection.name] = {
            index["name"] for index in await (await collection.list_indexes()).to_list()
        }
    return found


async def test_collections_are_created_beside_a_checkpointer_and_versioned(
    scratch: Scratch,
) -> None:
    async with MongoCheckpointer(scratch.uri, database=scratch.database) as checkpointer:
        await checkpointer.put(make_checkpoint("t", 0))
    async with scratch.store() as store:
        await store.create(make_record())
    assert await _indexes(scratch) == {
        "checkpoints_durable_runs": {"_id_", LISTING_INDEX, STATUS_INDEX},
        "checkpoints_durable_events": {"_id_", RUN_EVENTS_INDEX, CHILD_EVENTS_INDEX},
    }
    assert await scratch.runs.find_one({"_id": LAYOUT_ID}) == {"_id": LAYOUT_ID, "v": 1}
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    try:
        async with (
            MongoCheckpointer(client=client, database=scratch.database) as checkpointer,
            MongoDurableStore(client=client, database=scratch.database) as store,
        ):
            assert await checkpointer.get("t") is not None
            commands.sent.clear()
            assert await store.load("run-1") is not None
            sent = commands.names()
    finally:
        await client.close()
    assert sent == ["find", "find"]  # a current layout: its version, then the run


@pytest.mark.parametrize(("version", "error"), [(2, IncompatibleSchema), ("one", None)])
async def test_a_newer_or_damaged_version_is_refused_and_nothing_is_written(
    scratch: Scratch, version: object, error: type[Exception] | None
) -> None:
    await scratch.runs.insert_one({"_id": LAYOUT_ID, "v": version})
    async with scratch.store() as store, scratch.event_store() as events:
        for call in (store.create(make_record()), events.replay("run-1")):
            with pytest.raises(error or CheckpointCorrupted) as caught:
                await call
            assert error is not None or not isinstance(caught.value, IncompatibleSchema)
    assert await scratch.runs.count_documents({}) == 1
    assert await _indexes(scratch) == {
        "checkpoints_durable_runs": {"_id_"},
        "checkpoints_durable_events": set(),
    }


async def test_a_collection_with_a_default_collation_is_refused(scratch: Scratch) -> None:
    database = scratch.client[scratch.database]
    await database.create_collection(scratch.runs.name, collation={"locale": "en"})
    async with scratch.store() as store:
        with pytest.raises(InvalidArgument, match="collation"):
            await store.load("run-1")
    assert await scratch.runs.count_documents({}) == 0


async def test_first_uses_racing_create_the_layout_once(scratch: Scratch) -> None:
    stores = [scratch.store(namespace=f"n{i}") for i in range(6)]
    try:
        await asyncio.gather(*(store.create(make_record()) for store in stores))
        assert all([await store.load("run-1") is not None for store in stores])
    finally:
        for store in stores:
            await store.close()
    assert await scratch.runs.count_documents({"_id": LAYOUT_ID}) == 1


@pytest.mark.parametrize(("journal", "concern"), [(True, {"j": True}), (False, None)])
async def test_writes_wait_for_the_journal_unless_told_not_to(
    scratch: Scratch, journal: bool, concern: Doc | None
) -> None:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    try:
        async with (
            MongoDurableStore(client=client, database=scratch.database, journal=journal) as store,
            MongoRunEventStore(client=client, database=scratch.database, journal=journal) as events,
        ):
            await store.load("warm-up")  # the layout's own writes are its version's
            commands.sent.clear()
            await claimed(store)
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
            event = {"run_id": "run-1"}
            await events.append_once("e", event_payload_digest(event), event)
            await store.delete("run-1")
    finally:
        await client.close()
    writes = [body for name, body in commands.sent if name in ("insert", "findAndModify", "delete")]
    assert len(writes) == 5  # create, claim, renewal, append, delete
    assert all(body.get("writeConcern") == concern for body in writes)


async def test_clients_urls_and_arguments(scratch: Scratch) -> None:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri)
    try:
        injected = MongoDurableStore(client=client, database=scratch.database)
        await injected.create(make_record())
        await injected.close()
        await injected.close()  # twice is fine
        with pytest.raises(StoreClosed):
            await injected.load("run-1")
        assert (await client.admin.command("ping"))["ok"] == 1  # the caller's, still open
    finally:
        await client.close()
    tenant = f"url-{uuid.uuid4().hex}"
    opened = open_durable_store(scratch.uri, namespace=tenant)
    try:
        assert isinstance(opened, MongoDurableStore) and opened.namespace == tenant
        await opened.create(make_record())  # in the checkpointer's default database
        assert await opened.delete("run-1")
    finally:
        await opened.close()
    with pytest.raises(StoreClosed):
        await opened.load("run-1")
    assert isinstance(from_url("mongodb+srv://cluster.example"), MongoDurableStore)
    with pytest.raises(InvalidStoreUrl):
        from_url("redis://127.0.0.1:6379/0")
    for bad in ({"collection": "bad$name"}, {"namespace": "nul\x00"}, {"journal": "yes"}):
        with pytest.raises(InvalidArgument):
            MongoDurableStore(scratch.uri, **bad)  # type: ignore[arg-type]


async def test_an_unreachable_server_is_unavailable() -> None:
    uri = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200&directConnection=true"
    async with MongoDurableStore(uri) as store, MongoRunEventStore(uri) as events:
        for call in (store.load("run-1"), events.replay("run-1")):
            with pytest.raises(StoreUnavailable) as caught:
                await call
            assert isinstance(caught.value.__cause__, PyMongoError)
            assert "127.0.0.1:1" in str(caught.value)


async def test_a_write_whose_reply_was_lost_lands_once() -> None:
    """The write lands, then its reply fails: on a replica set the driver sends it again
    and the server answers from its record of the first (a retryable write); without
    retries the caller hears StoreUnavailable and a re-read shows the write whole."""
    async with replica_set("--setParameter", "enableTestCommands=1") as (_, uri):
        admin: AsyncMongoClient[Doc] = AsyncMongoClient(uri)

        async def fail_next_reply() -> None:
            lost = {"code": 9001, "errmsg": "reply lost", "errorLabels": ["RetryableWriteError"]}
            data = {"failCommands": ["findAndModify"], "writeConcernError": lost}
            await admin.admin.command(
                "configureFailPoint", "failCommand", mode={"times": 1}, data=data
            )

        try:
            async with (
                MongoDurableStore(uri, database="d") as retrying,
                MongoDurableStore(f"{uri}&retryWrites=false", database="d") as once,
            ):
                record = await claimed(retrying)
                await fail_next_reply()
                entry = make_tool_entry("run-1", 1)
                record = await retrying.record_operation(record, entry, claim_token="owner-a")
                resent = await retrying.load("run-1")
                await fail_next_reply()
                with pytest.raises(StoreUnavailable):
                    await once.record_operation(record, entry.start(), claim_token="owner-a")
                landed = await once.load("run-1")
        finally:
            await admin.close()
    assert resent is not None and resent.to_dict() == record.to_dict() and record.revision == 2
    assert landed is not None and landed.revision == 3 and landed.tool_journal == [entry.start()]
