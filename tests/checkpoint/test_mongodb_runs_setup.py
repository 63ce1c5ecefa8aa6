"""The MongoDB store's setup and connections: one version for every part, the record indexes
beside the checkpoints', the events' collection, collations, write concerns, clients, URLs,
an unreachable server, and a write whose reply was lost."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from agentflow.checkpoint import open_store
from agentflow.checkpoint.mongodb import MongoCheckpointer, from_url
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable import event_payload_digest
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, claimed
from agentflow.errors import (
    CheckpointCorrupted,
    IncompatibleSchema,
    InvalidArgument,
    StoreClosed,
    StoreUnavailable,
)
from tests.backends.mongodb import Commands, Doc, MongoStore, replica_set
from tests.backends.mongodb import scratch as scratch_body

scratch = pytest.fixture(scratch_body)
_SCHEMA = {"_id": {"m": "schema"}}
_DURABLE = {"_id": {"m": "durable"}}


async def _indexes(scratch: MongoStore) -> dict[str, set[str]]:
    found = {}
    for collection in (scratch.raw, scratch.events):
        found[collection.name] = {
            index["name"] for index in await (await collection.list_indexes()).to_list()
        }
    return found


async def _append(store: MongoCheckpointer, run_id: str = "run-1") -> None:
    event = {"run_id": run_id}
    await store.append_once(f"e-{run_id}", event_payload_digest(event), event)


async def test_one_version_covers_checkpoints_records_and_events(scratch: MongoStore) -> None:
    async with scratch.store() as store:
        await store.put(make_checkpoint("t", 0))
        await store.create(make_record())
        await _append(store)
    assert await _indexes(scratch) == {
        "checkpoints": {
            "_id_",
            "agentflow_threads",
            "agentflow_thread_registry",
            "agentflow_thread_steps_status",
            "agentflow_thread_run_status",
            "agentflow_due",
            "agentflow_runs",
            "agentflow_run_status",
            "agentflow_run_holders",
        },
        "checkpoints_durable_events": {
            "_id_",
            "agentflow_event_sequence",
            "agentflow_run_events",
            "agentflow_child_events",
        },
    }
    assert await scratch.raw.find_one(_SCHEMA) == {**_SCHEMA, "v": 4}
    names = await scratch.client[scratch.database].list_collection_names()
    assert sorted(names) == ["checkpoints", "checkpoints_durable_events"]
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    try:
        async with MongoCheckpointer(client=client, database=scratch.database) as store:
            assert await store.load("run-1") is not None
            first = commands.names()
            commands.sent.clear()
            assert await store.load("run-1") is not None
            again = commands.names()
    finally:
        await client.close()
    # a current layout: its version (which says every index is there), then the run
    assert first == ["find", "find"]
    assert again == ["find"]


@pytest.mark.parametrize(
    ("layout", "error"),
    [
        ({**_SCHEMA, "v": 5}, IncompatibleSchema),
        ({**_DURABLE, "v": 2}, IncompatibleSchema),
        ({**_DURABLE, "v": "one"}, CheckpointCorrupted),
    ],
)
async def test_a_newer_or_damaged_version_is_refused_and_nothing_is_written(
    scratch: MongoStore, layout: Doc, error: type[Exception]
) -> None:
    where = (
        scratch.raw
        if layout["_id"] == _SCHEMA["_id"]
        else scratch.client[scratch.database]["checkpoints_durable_runs"]
    )
    await where.insert_one(layout)
    async with scratch.store() as store:
        for call in (store.create(make_record()), store.replay("run-1"), store.list_threads()):
            with pytest.raises(error) as caught:
                await call
            assert error is IncompatibleSchema or not isinstance(caught.value, IncompatibleSchema)
    assert await where.count_documents({}) == 1
    assert await scratch.raw.count_documents({}) == (1 if where is scratch.raw else 0)
    assert (
        "checkpoints_durable_events"
        not in await scratch.client[scratch.database].list_collection_names()
    )


async def test_an_event_collection_with_a_default_collation_is_refused(
    scratch: MongoStore,
) -> None:
    database = scratch.client[scratch.database]
    await database.create_collection(scratch.events.name, collation={"locale": "en"})
    async with scratch.store() as store:
        with pytest.raises(InvalidArgument, match="collation"):
            await store.load("run-1")
    assert await scratch.raw.count_documents({}) == 0


async def test_first_uses_racing_create_the_layout_once(scratch: MongoStore) -> None:
    stores = [scratch.store(namespace=f"n{i}") for i in range(6)]
    try:
        await asyncio.gather(*(store.create(make_record()) for store in stores))
        assert all([await store.load("run-1") is not None for store in stores])
    finally:
        for store in stores:
            await store.close()
    assert await scratch.raw.count_documents(_SCHEMA) == 1
    assert await scratch.raw.find_one(_SCHEMA) == {**_SCHEMA, "v": 4}


@pytest.mark.parametrize(("journal", "concern"), [(True, {"j": True}), (False, None)])
async def test_writes_wait_for_the_journal_unless_told_not_to(
    scratch: MongoStore, journal: bool, concern: Doc | None
) -> None:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    try:
        async with MongoCheckpointer(
            client=client, database=scratch.database, journal=journal
        ) as store:
            await store.load("warm-up")  # the layout's own writes are its version's
            commands.sent.clear()
            await store.put(make_checkpoint("run-1", 0))
            await claimed(store)
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
            await _append(store)
            await store.delete("run-1", force=True)
    finally:
        await client.close()
    writes = [body for name, body in commands.sent if name in ("insert", "update", "delete")]
    writes += [body for name, body in commands.sent if name == "findAndModify"]
    # put, create, claim, renewal, the cursor secret (the append's cursor is the first
    # signed), append, and the delete's record, events, checkpoints and summary
    assert len(writes) == 10
    assert all(body.get("writeConcern") == concern for body in writes)


async def test_clients_urls_and_arguments(scratch: MongoStore) -> None:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri)
    try:
        injected = MongoCheckpointer(client=client, database=scratch.database)
        await injected.create(make_record())
        await injected.close()
        await injected.close()  # twice is fine
        with pytest.raises(StoreClosed):
            await injected.load("run-1")
        assert (await client.admin.command("ping"))["ok"] == 1  # the caller's, still open
    finally:
        await client.close()
    tenant = f"url-{uuid.uuid4().hex}"
    opened = open_store(scratch.uri, namespace=tenant)
    try:
        assert isinstance(opened, MongoCheckpointer) and opened.namespace == tenant
        await opened.create(make_record())  # in the default database
        assert await opened.delete("run-1")
    finally:
        await opened.close()
    with pytest.raises(StoreClosed):
        await opened.load("run-1")
    assert isinstance(from_url("mongodb+srv://cluster.example"), MongoCheckpointer)
    for bad in ({"collection": "bad$name"}, {"namespace": "nul\x00"}, {"journal": "yes"}):
        with pytest.raises(InvalidArgument):
            MongoCheckpointer(scratch.uri, **bad)  # type: ignore[arg-type]


async def test_the_database_names_server_database_and_collection_only(
    scratch: MongoStore,
) -> None:
    secret = scratch.uri.replace("mongodb://", "mongodb://agent:s3cret@")
    async with (
        MongoCheckpointer(secret, database="d1", namespace="a") as a,
        scratch.open(database="d1", namespace="b") as b,
        scratch.open(database="d2") as c,
        scratch.open(database="d1", collection="other") as d,
    ):
        assert a.database == b.database and "s3cret" not in a.database
        assert len({a.database, c.database, d.database}) == 3


async def test_an_unreachable_server_is_unavailable() -> None:
    uri = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200&directConnection=true"
    async with MongoCheckpointer(uri) as store:
        for call in (store.load("run-1"), store.replay("run-1"), store.get("t")):
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
                MongoCheckpointer(uri, database="d") as retrying,
                MongoCheckpointer(f"{uri}&retryWrites=false", database="d") as once,
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
