"""Setting a database up for the MongoDB store, and upgrading an older layout.

One version, in the checkpoints collection's ``{m: "schema"}`` document,
covers every part: checkpoints, thread documents (summary, record) and
events. Version 4 keeps a thread's durable record in its thread document
(with its run definition's digest, ``df``, and its claim token indexed by
holder, for worker fleets) and numbers events in one sequence per namespace;
version 3 was the same but for that index, which moving up creates (its
records keep no ``df``: any definition). Version 2 kept the summaries
only; its durable store had collections of its own (``<collection>_durable_runs``
with a layout version of its own, and ``<collection>_durable_events`` numbered
per run): :mod:`~agentflow.checkpoint.mongodb.migration` moves them in.
Version 1 had no version document and a registry entry per thread holding
nothing but the thread's id; its summaries are built from the checkpoints.
One process migrates, under a lease in the version document, while the
others wait for it to finish.
"""

from __future__ import annotations

import asyncio
import os
from typing import Final

from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from agentflow.checkpoint.mongodb.documents import (
    STATUS_FIELDS,
    THREADS_INDEX,
    Document,
    indexes,
    newer_wins,
    summary_of_stored,
)
from agentflow.checkpoint.mongodb.events import EVENT_INDEXES
from agentflow.checkpoint.mongodb.migration import absorb_durable, check_durable_layout
from agentflow.checkpoint.mongodb.records import RECORD_INDEXES
from agentflow.errors import IncompatibleSchema, InvalidArgument, StoreNotFound

__all__ = ["SCHEMA_VERSION", "prepare"]

SCHEMA_VERSION: Final = 4
_SCHEMA_ID: Final = {"m": "schema"}
#: How long a migrating process holds the store before another may take over.
_LEASE_MS: Final = 60_000
#: How often a process waiting for another's migration looks again.
_POLL_S: Final = 0.1
#: Threads whose summaries one round trip builds.
_BATCH: Final = 500


async def prepare(
    coll: AsyncCollection[Document],
    events: AsyncCollection[Document],
    ttl: bool,
    *,
    create: bool = True,
) -> None:
    """Bring the database to this version: at it, one read (and with ``ttl`` the TTL
    indexes, which a store opened without it never made); below it, check the
    collations, create the indexes and migrate, or with ``create=False`` raise
    StoreNotFound for a missing collection.

    The version is written last, after every index (the events' unique sequence
    among them), so a store at this version has them all.
    """
    version = await _version(coll)
    if version == SCHEMA_VERSION:
        if ttl:
            await coll.create_indexes(indexes(ttl))
        return
    names = [coll.name, events.name]
    listing = await coll.database.list_collections(filter={"name": {"$in": names}})
    info = {found["name"]: found for found in await listing.to_list()}
    if coll.name not in info and not create:
        raise StoreNotFound(f"no store: collection {coll.full_name} does not exist")
    for name, found in info.items():
        collation = found.get("options", {}).get("collation")
        if collation and collation.get("locale") != "simple":
            raise InvalidArgument(
                f"collection {name!r} has a default collation; "
                "agentflow needs the simple (binary) collation"
            )
    await check_durable_layout(coll)
    await coll.create_indexes([*indexes(ttl), *RECORD_INDEXES])
    token = os.urandom(12).hex()
    while version < SCHEMA_VERSION:
        if await _claim(coll, token):
            if version < 2:
                await _summarize_every_thread(coll, token)
            await absorb_durable(coll, events, lambda: _renew(coll, token))
            # after the migration: events of version 2 had no number in the sequence
            await events.create_indexes(EVENT_INDEXES)
            await coll.update_one(
                {"_id": _SCHEMA_ID, "owner": token},
                {"$set": {"v": SCHEMA_VERSION}, "$unset": {"owner": "", "lease": ""}},
            )
        else:
            await asyncio.sleep(_POLL_S)
        version = await _version(coll)


async def _version(coll: AsyncCollection[Document]) -> int:
    """The store's version (1 without a version document); a newer one is refused,
    never misread."""
    doc = await coll.find_one({"_id": _SCHEMA_ID}, {"v": 1})
    version = doc.get("v", 1) if doc else 1
    if type(version) is not int or version > SCHEMA_VERSION:
        raise IncompatibleSchema(
            f"the MongoDB collection {coll.name!r} has layout version {version!r}; "
            f"this agentflow reads version {SCHEMA_VERSION}"
        )
    return version


async def _renew(coll: AsyncCollection[Document], token: str) -> None:
    """Push the migration lease back: the migrator is still at work."""
    await coll.update_one(
        {"_id": _SCHEMA_ID, "owner": token},
        [{"$set": {"lease": {"$add": ["$$NOW", _LEASE_MS]}}}],
    )


async def _claim(coll: AsyncCollection[Document], token: str) -> bool:
    """Take the migration lease unless a live one is held (server time, so clocks may differ)."""
    await coll.update_one({"_id": _SCHEMA_ID}, {"$setOnInsert": {"v": 1}}, upsert=True)
    free = {
        "_id": _SCHEMA_ID,
        "v": {"$lt": SCHEMA_VERSION},
        "$or": [{"lease": {"$exists": False}}, {"$expr": {"$lt": ["$lease", "$$NOW"]}}],
    }
    take = [{"$set": {"owner": token, "lease": {"$add": ["$$NOW", _LEASE_MS]}}}]
    return (await coll.update_one(free, take)).matched_count == 1


async def _summarize_every_thread(coll: AsyncCollection[Document], token: str) -> None:
    """Write the summary of every thread from its latest checkpoint, then drop the
    entries of threads that have none left.

    The scan of ``(n, t, s desc)`` is covered (index keys only, no document read);
    then one round trip reads the latest checkpoints of a batch of threads and
    one writes their summaries, newer-wins, so puts of this version running
    meanwhile are never overwritten with older data.
    """
    latest = await coll.aggregate(
        [
            {"$match": {"n": {"$type": "string"}}},
            {"$sort": {"n": 1, "t": 1, "s": -1}},
            {"$group": {"_id": {"n": "$n", "t": "$t"}, "s": {"$first": "$s"}}},
        ],
        hint=THREADS_INDEX,
        allowDiskUse=True,
    )
    batch: list[Document] = []
    async for row in latest:
        batch.append({"n": row["_id"]["n"], "t": row["_id"]["t"], "s": row["s"]})
        if len(batch) == _BATCH:
            await _summarize(coll, batch, token)
            batch = []
    if batch:
        await _summarize(coll, batch, token)
    await coll.delete_many({"tn": {"$exists": True}, "ls": {"$exists": False}})


async def _summarize(coll: AsyncCollection[Document], keys: list[Document], token: str) -> None:
    docs = await coll.find({"_id": {"$in": keys}}, STATUS_FIELDS).to_list()
    writes = [
        UpdateOne(
            {"_id": {"n": doc["_id"]["n"], "t": doc["_id"]["t"]}},
            newer_wins(summary_of_stored(doc["_id"]["n"], doc), doc.get("expires_at")),
            upsert=True,
        )
        for doc in docs
    ]
    if writes:
        await coll.bulk_write(writes, ordered=False)
    await _renew(coll, token)
