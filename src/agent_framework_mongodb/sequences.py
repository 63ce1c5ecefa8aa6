"""Per-run sequence allocation: unique, positive, increasing, and safe after counter loss.

Each run has one counter document, advanced by a single aggregation-pipeline
upsert. The allocation starts from the maximum of the counter and the
greatest sequence still retained in the run (read just before), so a counter
removed by TTL or cleanup, even while several writers recover it at once,
can never hand out a sequence a retained checkpoint already holds once its
insert is visible. A writer that read the retained maximum just before
another writer's insert, while the counter was missing, can still be handed
that writer's sequence: ``save`` then retries the allocation, which reads the
new maximum. Failed inserts leave gaps; nothing assumes contiguity.
"""

from __future__ import annotations

import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from agent_framework_mongodb.documents import stored_sequence
from agent_framework_mongodb.errors import MongoDBSequenceContentionError
from agent_framework_mongodb.indexes import COUNTER_KIND, SIMPLE_COLLATION
from agent_framework_mongodb.telemetry import driver_errors

__all__ = ["allocate_sequence", "counter_pipeline"]

_ALLOCATION_ATTEMPTS = 3


async def allocate_sequence(
    collection: Any,
    checkpoint_filter: dict[str, Any],
    counter_filter: dict[str, Any],
    expires_at: datetime.datetime | None,
    *,
    at_least: int = 0,
) -> int:
    """Allocate the next sequence of the run the two scoped filters select.

    The sequence is above the retained maximum, the counter and ``at_least``
    (a sequence the caller knows is taken, or may soon be).
    """
    with driver_errors(write=True):
        top = await collection.find_one(
            checkpoint_filter,
            {"_id": 0, "sequence": 1},
            sort=[("sequence", -1)],
            collation=SIMPLE_COLLATION,
        )
    observed = max(at_least, 0 if top is None else stored_sequence(top))
    for _ in range(_ALLOCATION_ATTEMPTS):
        with driver_errors(write=True):
            try:
                counter = await collection.find_one_and_update(
                    counter_filter,
                    counter_pipeline(observed, 1, expires_at),
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                    projection={"_id": 0, "sequence": 1},
                    collation=SIMPLE_COLLATION,
                )
            except DuplicateKeyError:
                # Two first allocations raced to insert the counter; the
                # loser retries against the document the winner created.
                continue
        return stored_sequence(counter)
    raise MongoDBSequenceContentionError("sequence counter contention in this run")


def counter_pipeline(
    observed: int, count: int, expires_at: datetime.datetime | None
) -> list[dict[str, Any]]:
    """One atomic update: advance the counter and merge its retention.

    Permanent retention dominates (a legacy counter with a sequence and no
    ``expires_at`` counts as permanent); otherwise ``expires_at`` only moves
    forward, so an out-of-order shorter TTL cannot shorten it.
    """
    stage: dict[str, Any] = {
        "_kind": COUNTER_KIND,
        "sequence": {"$add": [{"$max": [{"$ifNull": ["$sequence", 0]}, observed]}, count]},
    }
    if expires_at is None:
        stage["retention_mode"] = "permanent"
        stage["expires_at"] = "$$REMOVE"
    else:
        permanent = {
            "$or": [
                {"$eq": ["$retention_mode", "permanent"]},
                {
                    "$and": [
                        {"$ne": [{"$type": "$sequence"}, "missing"]},
                        {"$eq": [{"$type": "$expires_at"}, "missing"]},
                    ]
                },
            ]
        }
        stage["retention_mode"] = {"$cond": [permanent, "permanent", "expiring"]}
        stage["expires_at"] = {
            "$cond": [permanent, "$$REMOVE", {"$max": [{"$ifNull": ["$expires_at", expires_at]},
                                                      expires_at]}]
        }  # fmt: skip
    return [{"$set": stage}]
