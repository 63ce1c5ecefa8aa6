"""Sequences while the counter is lost under concurrent writers.

Seed: "Concurrent saves therefore receive unique, positive, monotonic
sequences ... Concurrent recovery after a missing counter therefore cannot
reset or collide with retained sequences." A writer that read the retained
maximum just before another writer's insert, while the counter was missing,
is handed that writer's sequence; the insert then collides and ``save``
allocates again. Only a collision that keeps recurring is an error, and it
is its own retryable category, never the conflict error.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_framework_mongodb import (
    MongoDBConcurrencyError,
    MongoDBSequenceContentionError,
)
from agent_framework_mongodb.indexes import CHECKPOINT_KIND, COUNTER_KIND
from agent_framework_mongodb.writes import SEQUENCE_ATTEMPTS
from tests.agent_framework_mongodb.conftest import StorageFactory, make_checkpoint
from tests.agent_framework_mongodb.faults import CollectionProxy

WRITERS, SAVES_EACH = 8, 50


async def test_eight_writers_survive_counter_loss_without_failures(
    make_storage: StorageFactory, collection: Any
) -> None:
    """8 writers save 400 checkpoints while the counter is deleted every 5 ms (far more often
    than TTL or cleanup ever would): every save succeeds and every sequence is unique."""
    await (
        make_storage().ensure_indexes()
    )  # the unique sequence index turns a reuse into a collision
    writers = [make_storage() for _ in range(WRITERS)]
    running = True

    async def lose_counter() -> int:
        deletions = 0
        while running:
            deletions += (await collection.delete_one({"_kind": COUNTER_KIND})).deleted_count
            await asyncio.sleep(0.005)
        return deletions

    async def write(writer: Any, index: int) -> None:
        for step in range(SAVES_EACH):
            await writer.save(make_checkpoint(checkpoint_id=f"w{index}-{step:02}"))

    loser = asyncio.create_task(lose_counter())
    try:
        await asyncio.gather(*(write(w, i) for i, w in enumerate(writers)))
    finally:
        running = False
        deletions = await loser
    sequences = [d["sequence"] async for d in collection.find({"_kind": CHECKPOINT_KIND})]
    assert len(sequences) == WRITERS * SAVES_EACH == len(set(sequences))
    assert deletions > 1 and min(sequences) >= 1


async def test_a_collision_from_a_stale_maximum_is_retried(
    make_storage: StorageFactory, collection: Any
) -> None:
    """The exact race: the counter is gone and this writer read the retained maximum before
    another writer's insert. The first allocation reuses that sequence, the insert collides,
    and the second allocation succeeds above it, skipping the two sequences after it (which
    other saves in flight could hold)."""
    writer = make_storage()
    await writer.ensure_indexes()
    await writer.save(make_checkpoint(checkpoint_id="first"))
    await collection.delete_one({"_kind": COUNTER_KIND})
    proxy = CollectionProxy(collection)
    stale = [None]  # the retained maximum as read before "first" was inserted

    async def stale_read(real: Any, *args: Any, **kwargs: Any) -> Any:
        return stale.pop() if stale else await real(*args, **kwargs)

    proxy.intercept("find_one", stale_read)
    await make_storage(target=proxy).save(make_checkpoint(checkpoint_id="second"))
    assert proxy.methods().count("insert_one") == 2
    stored = {
        d["checkpoint_id"]: d["sequence"] async for d in collection.find({"_kind": CHECKPOINT_KIND})
    }
    assert stored == {"first": 1, "second": 4}


async def test_exhausted_collisions_are_retryable_contention_not_a_conflict(
    make_storage: StorageFactory, collection: Any
) -> None:
    """A counter that keeps handing out a used sequence makes save give up after a bounded
    number of allocations with MongoDBSequenceContentionError: retryable, its own category,
    not a MongoDBConcurrencyError, and nothing stored."""
    storage = make_storage()
    await storage.ensure_indexes()
    await storage.save(make_checkpoint(checkpoint_id="first"))
    proxy = CollectionProxy(collection)

    async def stuck(real: Any, *args: Any, **kwargs: Any) -> Any:
        return {"sequence": 1}  # a broken counter hands out a used sequence

    proxy.intercept("find_one_and_update", stuck)
    with pytest.raises(MongoDBSequenceContentionError) as caught:
        await make_storage(target=proxy).save(make_checkpoint(checkpoint_id="second"))
    error = caught.value
    assert error.retryable and error.category == "sequence_contention"
    assert not isinstance(error, MongoDBConcurrencyError)
    assert proxy.methods().count("insert_one") == SEQUENCE_ATTEMPTS
    assert await collection.count_documents({"_kind": CHECKPOINT_KIND}) == 1
