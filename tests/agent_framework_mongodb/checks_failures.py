"""Error categories, cancellation, client ownership, options and log hygiene."""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
import socket
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import AutoReconnect, InvalidOperation, OperationFailure

from agent_framework_mongodb import (
    MongoDBAuthorizationError,
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBOperationError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
)
from agent_framework_mongodb.indexes import CHECKPOINT_KIND
from tests.agent_framework_mongodb.af_workflows import WORKFLOW_NAME
from tests.agent_framework_mongodb.conftest import StorageFactory, make_checkpoint, scope_options
from tests.agent_framework_mongodb.faults import CollectionProxy


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def unreachable_uri(credentials: str = "") -> str:
    return f"mongodb://{credentials}127.0.0.1:{unused_port()}/?serverSelectionTimeoutMS=150"


async def test_unreachable_server_is_transient_with_driver_cause() -> None:
    """Seed: "transient retrieval, transient persistence ... use the package's stable
    categories while preserving driver exceptions as __cause__"."""
    async with MongoDBCheckpointStorage(
        scope_options(), connection_string=unreachable_uri()
    ) as storage:
        with pytest.raises(MongoDBTransientRetrievalError) as read:
            await storage.load("x")
        with pytest.raises(MongoDBTransientPersistenceError) as write:
            await storage.save(make_checkpoint())
    assert read.value.retryable and write.value.retryable
    assert type(read.value.__cause__).__module__.startswith("pymongo")
    assert type(write.value.__cause__).__module__.startswith("pymongo")


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (AutoReconnect("connection reset"), MongoDBTransientPersistenceError),
        (OperationFailure("not authorized", code=13), MongoDBAuthorizationError),
        (OperationFailure("something else", code=2), MongoDBOperationError),
    ],
    ids=["dropped", "unauthorized", "other"],
)
async def test_driver_failures_map_to_stable_categories(
    make_storage: StorageFactory, collection: Any, failure: Exception, expected: type
) -> None:
    proxy = CollectionProxy(collection)

    async def fail(real: Any, *args: Any, **kwargs: Any) -> Any:
        raise failure

    proxy.intercept("insert_one", fail)
    with pytest.raises(expected) as caught:
        await make_storage(target=proxy).save(make_checkpoint())
    assert caught.value.__cause__ is failure


async def test_identical_retry_after_a_lost_reply_spends_no_sequence(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "An identical retry returns the same ID" and "Retries and failed inserts may
    leave sequence gaps; ordering never assumes contiguity". When the reply of an insert
    that landed is lost, the storage knows the outcome is open: the identical retry looks the
    ID up first and spends no new sequence (a changed retry is still a conflict)."""
    proxy = CollectionProxy(collection)
    failures = [AutoReconnect("lost after write")]

    async def lose_ack(real: Any, *args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)  # the write lands, the reply is lost
        if failures:
            raise failures.pop()
        return result

    proxy.intercept("insert_one", lose_ack)
    storage = make_storage(target=proxy)
    checkpoint = make_checkpoint(checkpoint_id="retried")
    with pytest.raises(MongoDBTransientPersistenceError):
        await storage.save(checkpoint)
    assert await storage.save(checkpoint) == "retried"
    assert proxy.methods().count("find_one_and_update") == 1  # the retry allocated nothing
    changed = make_checkpoint(checkpoint_id="retried", state={"other": True})
    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(changed)
    await storage.save(make_checkpoint(checkpoint_id="next"))
    documents = collection.find({"_kind": CHECKPOINT_KIND})
    sequences = {d["checkpoint_id"]: d["sequence"] async for d in documents}
    assert sequences["next"] > sequences["retried"] + 1  # the conflicting save left a gap
    ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
    assert ids == ["retried", "next"]


async def test_failed_insert_leaves_a_gap_that_ordering_tolerates(
    make_storage: StorageFactory, collection: Any
) -> None:
    """A counter advanced for a save whose insert then failed leaves a hole in the
    sequences; listing and get_latest still order by sequence."""
    proxy = CollectionProxy(collection)
    failures = [AutoReconnect("dropped before insert")]

    async def drop_first(real: Any, *args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real(*args, **kwargs)

    storage = make_storage(target=proxy)
    await storage.save(make_checkpoint(checkpoint_id="a"))
    proxy.intercept("insert_one", drop_first)
    with pytest.raises(MongoDBTransientPersistenceError):
        await storage.save(make_checkpoint(checkpoint_id="b"))  # sequence 2 is lost...
    await storage.save(make_checkpoint(checkpoint_id="b"))  # ...the retry takes 3
    documents = collection.find({"_kind": CHECKPOINT_KIND})
    assert {d["checkpoint_id"]: d["sequence"] async for d in documents} == {"a": 1, "b": 3}
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME) == ["a", "b"]
    latest = await storage.get_latest(workflow_name=WORKFLOW_NAME)
    assert latest is not None and latest.checkpoint_id == "b"


@pytest.mark.parametrize("method", ["insert_one", "find_one_and_update", "find_one"])
async def test_cancellation_propagates_from_save(
    make_storage: StorageFactory, collection: Any, method: str
) -> None:
    """Seed: "asyncio.CancelledError is never caught"."""
    proxy = CollectionProxy(collection)
    entered = asyncio.Event()

    async def hang(real: Any, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        await asyncio.Event().wait()

    proxy.intercept(method, hang)
    task = asyncio.create_task(make_storage(target=proxy).save(make_checkpoint()))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_cancellation_propagates_from_every_page_request(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "Cancellation propagates from every page request"."""
    writer = make_storage()
    for i in range(5):
        await writer.save(make_checkpoint(checkpoint_id=f"c-{i}"))
    proxy = CollectionProxy(collection)
    finds = 0
    entered = asyncio.Event()

    def second_page_hangs(real: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal finds
        finds += 1
        if finds < 2:
            return real(*args, **kwargs)
        entered.set()
        return HangingCursor()

    proxy.intercept("find", second_page_hangs)
    reader = make_storage(target=proxy, page_size=2)
    for listing in (reader.list_checkpoints, reader.list_checkpoint_ids):
        finds = 0
        entered.clear()
        task = asyncio.create_task(listing(workflow_name=WORKFLOW_NAME))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


class HangingCursor:
    """A cursor whose fetch never completes, standing in for a stalled server."""

    def sort(self, *args: Any, **kwargs: Any) -> HangingCursor:
        return self

    def collation(self, *args: Any) -> HangingCursor:
        return self

    def limit(self, *args: Any) -> HangingCursor:
        return self

    def batch_size(self, *args: Any) -> HangingCursor:
        return self

    async def to_list(self, *args: Any) -> list[Any]:
        await asyncio.Event().wait()
        return []


async def test_owned_client_is_closed_once_and_injected_clients_stay_open(
    mongo_uri: str, mongo_client: AsyncMongoClient[dict[str, Any]], collection: Any
) -> None:
    """Seed: "Injected clients and collections remain caller-owned. A storage created from a
    connection string owns its PyMongo AsyncMongoClient; close() and the async context
    manager close it once. Ownership never changes after an error"."""
    options = scope_options(database_name=collection.database.name,
                            collection_name=collection.name)  # fmt: skip
    owned = MongoDBCheckpointStorage(options, connection_string=mongo_uri)
    await owned.save(make_checkpoint(checkpoint_id="kept"))
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await owned.load("absent")  # an error changes nothing about ownership
    await owned.close()
    await owned.close()
    with pytest.raises(InvalidOperation):
        await owned._collection.find_one({})
    async with MongoDBCheckpointStorage(options, connection_string=mongo_uri) as scoped:
        assert (await scoped.load("kept")).checkpoint_id == "kept"
    with pytest.raises(InvalidOperation):
        await scoped._collection.find_one({})

    for injected in (
        MongoDBCheckpointStorage(options, client=mongo_client),
        MongoDBCheckpointStorage(options, collection=collection),
    ):
        async with injected:
            await injected.load("kept")
        assert await collection.count_documents({}) >= 1  # caller's client still open


def test_options_and_constructor_are_validated() -> None:
    """Seed: "MongoDBCheckpointStorageOptions immutably binds a required tenant_id,
    workflow_name, and session_id at construction. application_id is optional."""
    options = scope_options(application_id=None)
    with pytest.raises(AttributeError):
        options.tenant_id = "other"  # type: ignore[misc]
    bad: list[dict[str, Any]] = [
        {"tenant_id": ""}, {"workflow_name": "a\x00b"}, {"session_id": 5}, {"application_id": ""},
        {"page_size": 0}, {"max_page_size": 10, "page_size": 11}, {"page_size": True},
        {"ttl": datetime.timedelta(0)}, {"allowed_checkpoint_types": ("nocolon",)},
        {"allowed_checkpoint_types": "mod:Type"},
    ]  # fmt: skip
    for overrides in bad:
        with pytest.raises(MongoDBConfigurationError):
            MongoDBCheckpointStorage(scope_options(**overrides), collection=object())
    with pytest.raises(MongoDBConfigurationError):
        MongoDBCheckpointStorage(options)
    with pytest.raises(MongoDBConfigurationError):
        MongoDBCheckpointStorage(options, connection_string="mongodb://x", collection=object())
    with pytest.raises(MongoDBConfigurationError) as caught:
        MongoDBCheckpointStorage(options, connection_string="notmongo://user:pw-SECRET@host")
    assert "SECRET" not in str(caught.value)


LOG_LINE = re.compile(
    r"feature=workflow_checkpoint_storage operation=[a-z_]+ "
    r"outcome=(succeeded|failed|cancelled) count=\d+ duration_ms=\d+\.\d{3} category=[a-z_]+"
)


async def test_completion_logs_carry_no_identifying_data(
    mongo_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Seed: "Completion logs contain only feature, operation, outcome, bounded result count,
    duration, and stable error category. They exclude IDs, scopes, payloads,
    collection/database names, filters, driver messages, hosts, and credentials"."""
    caplog.set_level(logging.DEBUG, logger="agent_framework_mongodb")
    secret = scope_options(
        tenant_id="tenant-SECRET", application_id="app-SECRET", session_id="session-SECRET",
        database_name="db-SECRET", collection_name="test-checkpoint-SECRET",
    )  # fmt: skip
    async with MongoDBCheckpointStorage(secret, connection_string=mongo_uri) as storage:
        checkpoint = make_checkpoint(checkpoint_id="id-SECRET", state={"token": "payload-SECRET"})
        try:
            await storage.save(checkpoint)
            await storage.load("id-SECRET")
            await storage.get_latest(workflow_name=WORKFLOW_NAME)
            await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
            with pytest.raises(MongoDBCheckpointNotFoundError):
                await storage.load("missing-SECRET")
            with pytest.raises(MongoDBAuthorizationError):
                await storage.get_latest(workflow_name="workflow-SECRET")
        finally:
            await storage.clear_run()
            await storage._collection.drop()
    async with MongoDBCheckpointStorage(
        secret, connection_string=unreachable_uri("user-SECRET:pw-SECRET@")
    ) as down:
        with pytest.raises(MongoDBTransientRetrievalError):
            await down.load("id-SECRET")
    ours = [r for r in caplog.records if r.name == "agent_framework_mongodb"]
    for record in ours:
        message = record.getMessage()
        assert "SECRET" not in message and "127.0.0.1" not in message
        assert record.exc_info is None
    completions = [r for r in ours if "duration_ms=" in r.getMessage()]
    assert len(completions) == 8
    for record in completions:
        assert LOG_LINE.fullmatch(record.getMessage()), record.getMessage()
    # The one other line: the collection has no unique sequence index (never provisioned).
    (other,) = [r for r in ours if r not in completions]
    assert "outcome=unindexed category=configuration" in other.getMessage()
    categories = {r.getMessage().rsplit("=", 1)[1] for r in completions}
    assert {"none", "not_found", "authorization", "transient_retrieval"} <= categories
