"""Document shape, counters and TTL, lineage gaps, cleanup, indexes, compatibility gates."""

from __future__ import annotations

import asyncio
import datetime
import re
from typing import Any

import pytest
from bson.binary import Binary
from pymongo.errors import DuplicateKeyError

from agent_framework_mongodb import MongoDBMappingError
from agent_framework_mongodb.indexes import CHECKPOINT_KIND, COUNTER_KIND, INDEX_SPECS
from tests.agent_framework_mongodb.af_workflows import WORKFLOW_NAME
from tests.agent_framework_mongodb.conftest import StorageFactory, make_checkpoint
from tests.agent_framework_mongodb.faults import CollectionProxy

HOUR = datetime.timedelta(hours=1)
DOCUMENT_FIELDS = {
    "_id", "_kind", "schema_version", "framework_version", "payload_version",
    "idempotency_hash_version", "scope_discriminator", "tenant_id", "application_id",
    "workflow_name", "session_id", "checkpoint_id", "parent_checkpoint_id", "sequence",
    "created_at", "expires_at", "checkpoint", "payload_hash",
}  # fmt: skip


async def counter(collection: Any) -> dict[str, Any]:
    document = await collection.find_one({"_kind": COUNTER_KIND})
    assert document is not None
    return dict(document)


async def test_document_shape(make_storage: StorageFactory, collection: Any) -> None:
    """Seed: "Each immutable checkpoint document is: {...}" and "The framework checkpoint ID
    is preserved exactly, while _id is deterministic for the complete scope and ID"."""
    storage = make_storage(ttl=HOUR)
    checkpoint = make_checkpoint(checkpoint_id="Mixed Case/ID", previous="parent-1")
    await storage.save(checkpoint)
    document = await collection.find_one({"_kind": CHECKPOINT_KIND})
    assert document is not None and set(document) == DOCUMENT_FIELDS
    options = storage.options
    assert document["_id"] == options.document_id("Mixed Case/ID") != "Mixed Case/ID"
    assert document["checkpoint_id"] == "Mixed Case/ID"
    assert document["parent_checkpoint_id"] == "parent-1"
    assert document["scope_discriminator"] == options.scope_discriminator
    assert (document["tenant_id"], document["application_id"], document["session_id"]) == (
        "tenant-1", "application-1", "run-1"
    )  # fmt: skip
    assert (document["schema_version"], document["idempotency_hash_version"]) == (1, 2)
    assert document["framework_version"] == "agent-framework-core/1:WorkflowCheckpoint.to_dict/v1"
    assert document["payload_version"] == "1.0" and document["sequence"] == 1
    assert isinstance(document["checkpoint"], bytes) and re.fullmatch(
        "[0-9a-f]{64}", document["payload_hash"]
    )
    assert document["expires_at"] - document["created_at"] == HOUR
    assert document["created_at"].microsecond % 1000 == 0


async def test_missing_counter_recovers_from_retained_maximum(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "storage first reads the greatest retained checkpoint sequence ... Concurrent
    recovery after a missing counter therefore cannot reset or collide with retained
    sequences"."""
    storages = [make_storage() for _ in range(4)]
    for i in range(3):
        await storages[0].save(make_checkpoint(checkpoint_id=f"old-{i}"))
    await collection.delete_one({"_kind": COUNTER_KIND})
    fresh = [make_checkpoint(checkpoint_id=f"new-{i}") for i in range(12)]
    await asyncio.gather(*(storages[i % 4].save(c) for i, c in enumerate(fresh)))
    new = [d["sequence"] async for d in collection.find({"checkpoint_id": {"$regex": "^new"}})]
    assert len(set(new)) == 12 and min(new) > 3
    assert (await counter(collection))["sequence"] == max(new)


async def test_counter_ttl_only_moves_forward_and_permanent_dominates(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "the same update extends the counter's expires_at to the maximum of its current
    and requested values ... A non-expiring checkpoint atomically changes retention_mode to
    permanent and removes expires_at. That mode is dominant"."""
    await make_storage(ttl=2 * HOUR).save(make_checkpoint())
    first = await counter(collection)
    assert first["retention_mode"] == "expiring" and "expires_at" in first
    await make_storage(ttl=HOUR).save(make_checkpoint())  # shorter TTL, later
    assert (await counter(collection))["expires_at"] == first["expires_at"]
    await make_storage(ttl=3 * HOUR).save(make_checkpoint())
    longer = (await counter(collection))["expires_at"]
    assert longer > first["expires_at"]
    await make_storage().save(make_checkpoint())  # non-expiring
    permanent = await counter(collection)
    assert permanent["retention_mode"] == "permanent" and "expires_at" not in permanent
    await make_storage(ttl=HOUR).save(make_checkpoint())
    assert "expires_at" not in await counter(collection)


async def test_legacy_counter_without_expiration_is_permanent(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "Legacy counters with a sequence but no expiration are treated as permanent"."""
    storage = make_storage(ttl=HOUR)
    await collection.insert_one(
        {"_id": storage.options.counter_id(), "_kind": COUNTER_KIND, "sequence": 5,
         **storage.options.scope_filter()}
    )  # fmt: skip
    await storage.save(make_checkpoint(checkpoint_id="next"))
    state = await counter(collection)
    assert state["sequence"] == 6 and state["retention_mode"] == "permanent"
    assert "expires_at" not in state


async def test_ttl_gap_child_outlives_parent(make_storage: StorageFactory, collection: Any) -> None:
    """Seed: "Parents are not required to exist at save or load time ... MongoDB TTL removal
    is asynchronous and may expire a parent before a child. Restoring a child does not
    traverse or rewrite its parent edge"."""
    storage = make_storage(ttl=HOUR)
    await storage.save(make_checkpoint(checkpoint_id="orphan", previous="never-saved"))
    await storage.save(make_checkpoint(checkpoint_id="parent"))
    await storage.save(make_checkpoint(checkpoint_id="child", previous="parent"))
    await collection.delete_one({"checkpoint_id": "parent"})  # what the TTL monitor does
    child = await storage.load("child")
    assert child.previous_checkpoint_id == "parent"
    latest = await storage.get_latest(workflow_name=WORKFLOW_NAME)
    assert latest is not None and latest.checkpoint_id == "child"
    assert (await storage.load("orphan")).previous_checkpoint_id == "never-saved"
    document = await collection.find_one({"checkpoint_id": "child"})
    assert document is not None and document["parent_checkpoint_id"] == "parent"


async def test_clear_run_is_scoped_retry_safe_and_never_id_only(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "clear_run() ... applies the complete constructor-bound scope to a checkpoint
    delete_many followed by the exact deterministic counter delete_one ... It never issues
    an empty or ID-only delete". The run's refusal record goes last, as scoped."""
    proxy = CollectionProxy(collection)
    storage, other = make_storage(target=proxy), make_storage(session_id="run-2")
    for _ in range(3):
        await storage.save(make_checkpoint())
        await other.save(make_checkpoint())
    result = await storage.clear_run()
    assert (result.checkpoints_deleted, result.counters_deleted) == (3, 1)
    again = await storage.clear_run()
    assert (again.checkpoints_deleted, again.counters_deleted) == (0, 0)
    assert len(await other.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)) == 3
    scope = storage.options.scope_filter()
    deletes = [(m, a[0]) for m, a, _ in proxy.calls if m.startswith("delete")]
    assert [m for m, _ in deletes] == ["delete_many", "delete_one", "delete_one"] * 2
    for _, query in deletes:
        assert {k: query[k] for k in scope} == scope and "_kind" in query
    assert deletes[1][1]["_id"] == storage.options.counter_id()
    assert deletes[2][1]["_id"] == storage.options.refusal_id()


async def test_no_operation_touches_indexes_until_ensure(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "Construction, save, load, and workflow hooks never mutate indexes.
    ensure_indexes() is the explicit provisioning operation and validate_indexes() is
    read-only"."""
    storage = make_storage()
    await storage.save(make_checkpoint(checkpoint_id="a"))
    await storage.load("a")
    await storage.get_latest(workflow_name=WORKFLOW_NAME)
    await storage.list_checkpoints(workflow_name=WORKFLOW_NAME)
    assert set(await collection.index_information()) == {"_id_"}
    problems = await storage.validate_indexes()
    assert problems == [f"{spec.name}: missing" for spec in INDEX_SPECS]
    assert set(await collection.index_information()) == {"_id_"}
    await storage.ensure_indexes()
    await storage.ensure_indexes()  # idempotent
    assert await storage.validate_indexes() == []
    names = {"_id_", *(spec.name for spec in INDEX_SPECS)}
    assert set(await collection.index_information()) == names


async def test_indexes_enforce_uniqueness_and_serve_latest(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: the index table, and "Identity, sequence, lineage, and checkpoint TTL indexes
    have a checkpoint-only partial filter, so the internal counter cannot collide"."""
    storage = make_storage()
    await storage.ensure_indexes()
    for i in range(3):
        await storage.save(make_checkpoint(checkpoint_id=f"i-{i}"))
    clone = await collection.find_one({"checkpoint_id": "i-2"})
    assert clone is not None
    clone.update(_id="other-id", checkpoint_id="i-9")  # same sequence as i-2
    with pytest.raises(DuplicateKeyError):
        await collection.insert_one(clone)
    clone.update(_id="other-id-2", checkpoint_id="i-1", sequence=99)  # same checkpoint ID
    with pytest.raises(DuplicateKeyError):
        await collection.insert_one(clone)
    query = {"_kind": CHECKPOINT_KIND, **storage.options.scope_filter()}
    plan = await collection.find(query).sort("sequence", -1).limit(2).explain()
    winning = str(plan["queryPlanner"]["winningPlan"])
    assert "checkpoint_scope_sequence" in winning and "'SORT'" not in winning


GATES = [
    ("schema_version", 2),
    ("framework_version", "agent-framework-core/2:other"),
    ("payload_version", "2.0"),
    ("idempotency_hash_version", 3),
    ("idempotency_hash_version", 1),
    ("_kind", "something-else"),
]


@pytest.mark.parametrize(("field", "value"), GATES)
async def test_compatibility_gates_refuse_unknown_versions(
    make_storage: StorageFactory, collection: Any, field: str, value: Any
) -> None:
    """Seed: "schema_version, framework_version, the checkpoint's public version, and
    idempotency_hash_version are independent compatibility gates. Unknown values raise
    MongoDBMappingError with migration guidance" and "Hash version 2 rejects version 1
    records with migration guidance"."""
    storage = make_storage()
    checkpoint = make_checkpoint(checkpoint_id="gated")
    await storage.save(checkpoint)
    await collection.update_one({"checkpoint_id": "gated"}, {"$set": {field: value}})
    if field == "_kind":
        await collection.update_one({"checkpoint_id": "gated"}, {"$set": {"_kind": value}})
        assert await storage.get_latest(workflow_name=WORKFLOW_NAME) is None
        return
    with pytest.raises(MongoDBMappingError, match="migrat"):
        await storage.load("gated")
    if field == "idempotency_hash_version":
        with pytest.raises(MongoDBMappingError, match="version 1" if value == 1 else "unknown"):
            await storage.save(checkpoint)  # the retry path compares hashes


async def test_payload_must_agree_with_its_document(
    make_storage: StorageFactory, collection: Any
) -> None:
    storage = make_storage()
    await storage.save(make_checkpoint(checkpoint_id="one"))
    await storage.save(make_checkpoint(checkpoint_id="two"))
    two = await collection.find_one({"checkpoint_id": "two"})
    assert two is not None
    await collection.update_one(
        {"checkpoint_id": "one"}, {"$set": {"checkpoint": Binary(two["checkpoint"])}}
    )
    with pytest.raises(MongoDBMappingError):
        await storage.load("one")
