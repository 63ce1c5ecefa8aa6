"""Seed 000's last gaps, each against a real mongod.

- "unique, simple collation": every query and index pins the binary
  collation, so a collection with a case-insensitive default changes nothing,
  and ``validate_indexes`` reports that default;
- a checkpoint MongoDB cannot store is a ``MongoDBSerializationError`` before
  a sequence is allocated ("fail before sequence allocation");
- "Concurrent saves therefore receive unique ... sequences", also where
  ``ensure_indexes`` never ran, while the counter keeps being lost;
- cursors are authenticated: a cursor this storage's collection did not MAC
  for this scope is refused.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBInvalidCursorError,
    MongoDBMappingError,
    MongoDBSequenceContentionError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.documents import MAX_DOCUMENT_BYTES
from agent_framework_mongodb.indexes import CHECKPOINT_KIND
from agent_framework_mongodb.paging import CURSOR_SECRET_ID
from tests.agent_framework_mongodb.af_workflows import WORKFLOW_NAME
from tests.agent_framework_mongodb.conftest import DATABASE, StorageFactory, make_checkpoint
from tests.agent_framework_mongodb.faults import (
    CollectionProxy,
    io_besides_the_refusal,
    refusal_recorded,
)

CASE_INSENSITIVE = {"locale": "en", "strength": 2}


async def test_a_case_insensitive_collection_changes_no_lookup(
    mongo_client: AsyncMongoClient[dict[str, Any]], make_storage: StorageFactory
) -> None:
    database = mongo_client[DATABASE]
    collection = await database.create_collection(
        f"test-checkpoint-{uuid.uuid4().hex}", collation=CASE_INSENSITIVE
    )
    try:
        storage = make_storage(target=collection)
        await storage.ensure_indexes()
        await storage.save(make_checkpoint(checkpoint_id="AbC"))
        with pytest.raises(MongoDBCheckpointNotFoundError, match="No checkpoint found with ID abc"):
            await storage.load("abc")
        assert await storage.delete("abc") is False
        await storage.save(make_checkpoint(checkpoint_id="abc"))  # another ID, not a conflict
        assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME) == ["AbC", "abc"]
        assert (await storage.load("AbC")).checkpoint_id == "AbC"
        problems = await storage.validate_indexes()
        assert problems == [
            "collection: default collation differs (locale 'en'); queries pin simple, "
            "but create the collection without a default collation"
        ]
    finally:
        await collection.drop()


async def test_indexes_built_in_a_case_insensitive_collection_are_binary(
    mongo_client: AsyncMongoClient[dict[str, Any]], make_storage: StorageFactory
) -> None:
    collection = await mongo_client[DATABASE].create_collection(
        f"test-checkpoint-{uuid.uuid4().hex}", collation=CASE_INSENSITIVE
    )
    try:
        await make_storage(target=collection).ensure_indexes()
        info = await collection.index_information()
        built = {name: spec.get("collation", {}).get("locale") for name, spec in info.items()}
        assert built.pop("_id_") == "en"  # the collection's own; ours name simple
        assert set(built.values()) <= {None, "simple"} and len(built) == 5
    finally:
        await collection.drop()


async def test_an_oversized_checkpoint_is_refused_before_a_sequence_is_taken(
    recording: CollectionProxy, collection: Any, make_storage: StorageFactory
) -> None:
    storage = make_storage(target=recording)
    huge = make_checkpoint(state={"blob": b"\x00" * MAX_DOCUMENT_BYTES})
    with pytest.raises(MongoDBSerializationError, match="16 MiB") as refused:
        await storage.save(huge)
    assert refused.value.category == "serialization"
    assert io_besides_the_refusal(recording) == [] and refusal_recorded(recording)
    assert await collection.count_documents({"_kind": {"$ne": "workflow_checkpoint_refusal"}}) == 0
    fits = make_checkpoint(state={"blob": b"\x01" * (MAX_DOCUMENT_BYTES - 64 * 1024)})
    await storage.save(fits)
    stored = await collection.find_one({"checkpoint_id": fits.checkpoint_id})
    assert stored is not None and stored["sequence"] == 1  # no sequence was spent on the refusal
    assert (await make_storage().load(fits.checkpoint_id)).state == fits.state


async def test_sequences_stay_unique_without_indexes_while_the_counter_is_lost(
    make_storage: StorageFactory, collection: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No ensure_indexes: 200 saves from 8 storages while the run's counter is
    deleted over and over (as TTL or a cleanup would); every sequence is unique,
    and each storage warned once, naming ensure_indexes."""
    caplog.set_level(logging.WARNING, logger="agent_framework_mongodb")
    storages = [make_storage() for _ in range(8)]
    counter = {"_id": storages[0].options.counter_id()}
    done = asyncio.Event()

    async def lose_the_counter() -> None:
        while not done.is_set():
            await collection.delete_one(counter)
            await asyncio.sleep(0.002)

    async def saves(index: int) -> None:
        for n in range(25):
            checkpoint = make_checkpoint(checkpoint_id=f"s-{index}-{n:02}")
            while True:  # as a caller does with the retryable contention error
                try:
                    await storages[index].save(checkpoint)
                    break
                except MongoDBSequenceContentionError:
                    continue

    loser = asyncio.create_task(lose_the_counter())
    try:
        await asyncio.gather(*(saves(i) for i in range(8)))
    finally:
        done.set()
        await loser
    sequences = [d["sequence"] async for d in collection.find({"_kind": CHECKPOINT_KIND})]
    assert len(sequences) == 200 and len(set(sequences)) == 200
    warnings = [r for r in caplog.records if "outcome=unindexed" in r.getMessage()]
    assert len(warnings) == 8 and all("ensure_indexes()" in r.getMessage() for r in warnings)


async def test_an_indexed_collection_needs_no_read_back(
    make_storage: StorageFactory, collection: Any
) -> None:
    proxy = CollectionProxy(collection)
    storage = make_storage(target=proxy)
    await storage.ensure_indexes()
    for n in range(3):
        await storage.save(make_checkpoint(checkpoint_id=f"i-{n}"))
    # The index is looked up once; no save then reads its sequence back.
    assert proxy.methods().count("index_information") == 1
    assert "find" not in proxy.methods()


async def test_cursors_are_authenticated(
    make_storage: StorageFactory, mongo_client: AsyncMongoClient[dict[str, Any]], collection: Any
) -> None:
    storage = make_storage(page_size=2)
    for n in range(5):
        await storage.save(make_checkpoint(checkpoint_id=f"c-{n}"))
    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME)
    cursor = page.next_cursor
    assert cursor is not None and "." in cursor
    rest = await make_storage(page_size=2).list_checkpoint_page(
        workflow_name=WORKFLOW_NAME, cursor=cursor
    )
    assert [c.checkpoint_id for c in rest.checkpoints] == ["c-2", "c-3"]
    body, _, mac = cursor.rpartition(".")
    forged = f"{body}.{'B' if mac[0] != 'B' else 'C'}{mac[1:]}"
    # Another collection keeps another secret: the same scope's cursor is foreign there.
    other = mongo_client[DATABASE][f"test-checkpoint-{uuid.uuid4().hex}"]
    try:
        for target, attempt in ((None, forged), (None, body), (other, cursor)):
            with pytest.raises(MongoDBInvalidCursorError):
                await make_storage(target=target).list_checkpoint_page(
                    workflow_name=WORKFLOW_NAME, cursor=attempt
                )
    finally:
        await other.drop()
    await collection.update_one({"_id": CURSOR_SECRET_ID}, {"$set": {"secret": b"short"}})
    with pytest.raises(MongoDBMappingError, match="cursor secret"):
        await make_storage().list_checkpoint_page(workflow_name=WORKFLOW_NAME, cursor=cursor)
