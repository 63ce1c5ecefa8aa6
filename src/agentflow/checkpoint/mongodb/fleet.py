"""The MongoDB store's batch claims of due runs, and its runs listed by holder.

A batch is one ``find_one_and_update`` per run: the first thread document in
the due index's order (wake instant, thread) whose record a claim admits,
claimed with the next token in the same single-document update. A document
another claimer took no longer matches, so racing claimers each take other
runs and none loses a claim. Runs that need no recovery are claimed first,
then those a recovery claim takes (a lapsed lease, an ambiguous call).

MongoDB decides one document at a time, so a batch with ``max_concurrent``
first takes a lock document of its definitions (a lease on the server's
clock, so a claimer that dies cannot keep it): the live leases are counted
and claimed under it, and a claimer that finds it taken claims nothing this
time. Leases run on the server's clock (``$$NOW``).
"""

from __future__ import annotations

import abc
import hashlib
import secrets
from functools import partial
from typing import Any, Final

from bson.int64 import Int64
from pymongo import ReturnDocument

from agentflow.checkpoint.fleet import DueClaim, DueRun, FleetBase, held_range
from agentflow.checkpoint.mongodb.documents import DUE_INDEX, Document
from agentflow.checkpoint.mongodb.records import (
    HOLDER_INDEX,
    NOW,
    SHAPE,
    SUMMARY_READ,
    row_from,
    summary_from,
)
from agentflow.checkpoint.mongodb.runs import MongoRuns
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

__all__ = ["MongoFleet"]

#: How long a limited batch's lock lasts if its claimer dies holding it.
_LOCK_MS: Final = 10_000
_RUNNING: Final = CheckpointStatus.RUNNING.value


def _due_filter(namespace: str, request: DueClaim, mode: ClaimMode) -> Document:
    """The records :func:`~agentflow.checkpoint.fleet.due_claim_mode` admits in ``mode``."""
    found: Document = {
        "tn": namespace,
        "wk": {"$lte": Int64(request.now_us)},
        "terminal": False,
        "status": _RUNNING,
        "revision": {"$lt": MAX_WIRE_INTEGER},
        "cycle_index": {"$lt": MAX_WIRE_INTEGER},
        **SHAPE,
    }
    limits: list[Any] = [{"$lte": [{"$add": [NOW, request.lease_ms]}, MAX_WIRE_INTEGER]}]
    if mode is ClaimMode.CONTINUE:
        found["lease_expires_at_ms"] = {"$type": "null"}
        found["ambiguous"] = False
    else:
        found["$or"] = [{"lease_expires_at_ms": {"$type": "number"}}, {"ambiguous": True}]
        found["resume_attempt"] = {"$lt": MAX_WIRE_INTEGER}
        limits.append({"$lte": ["$lease_expires_at_ms", NOW]})  # null sorts first
    found["$expr"] = {"$and": limits}
    if request.exclude:
        found["tt"] = {"$nin": sorted(request.exclude)}
    definitions: list[str | None] = list(request.definitions or ())
    if request.scope == "definitions":  # records kept before definitions match any
        found["df"] = {"$in": [*definitions, None]}
    elif request.scope == "limited":
        found["df"] = {"$in": definitions}
    return found


def _due_update(token: str, lease_ms: int, mode: ClaimMode) -> list[Document]:
    """The head after a claim of the next cycle, as a pipeline (running: no imposed status)."""
    values: Document = {
        "revision": {"$add": ["$revision", 1]},
        "status": {"$literal": _RUNNING},
        "claim_token": {"$literal": token},
        "claimed_cycle": {"$add": ["$cycle_index", 1]},
        "lease_expires_at_ms": {"$add": [NOW, Int64(lease_ms)]},
        "rs": "$$REMOVE",
    }
    if mode is ClaimMode.RECOVERY:
        values["resume_attempt"] = {"$add": ["$resume_attempt", 1]}
    return [{"$set": values}]


class MongoFleet(MongoRuns, FleetBase, abc.ABC):
    """The record part of :class:`~agentflow.checkpoint.mongodb.MongoCheckpointer`,
    with a fleet's batch claims and holder listing."""

    async def _claim_due(self, request: DueClaim) -> list[DueRun]:
        if request.max_concurrent is None:
            return await self._claim_batch(request, len(request.tokens))
        assert request.definitions is not None
        scope = hashlib.blake2b("\0".join(request.definitions).encode(), digest_size=12)
        lock = {"_id": {"m": f"fleet:{self._namespace}:{scope.hexdigest()}"}}
        owner = secrets.token_hex(8)
        if not await self._lock(lock, owner):
            return []  # another claimer is deciding this limit now
        try:
            live = await self._io(
                "claim_due",
                lambda: self._coll.count_documents(
                    {
                        "_id.n": self._namespace,
                        "claim_token": {"$gt": ""},
                        "df": {"$in": list(request.definitions or ())},
                        "$expr": {"$gt": ["$lease_expires_at_ms", NOW]},
                    },
                    hint=HOLDER_INDEX,
                ),
            )
            room = max(0, min(len(request.tokens), request.max_concurrent - live))
            return await self._claim_batch(request, room)
        finally:
            await self._unlock(lock, owner)

    async def _lock(self, lock: Document, owner: str) -> bool:
        """Take ``lock`` unless a live one is held (a lease on the server's clock)."""
        free = {**lock, "$expr": {"$lte": ["$until", NOW]}}
        take = [{"$set": {"owner": owner, "until": {"$add": [NOW, _LOCK_MS]}}}]

        async def attempt() -> bool:
            await self._coll.update_one(lock, {"$setOnInsert": {"until": 0}}, upsert=True)
            return (await self._coll.update_one(free, take)).matched_count == 1

        return await self._io("claim_due", attempt)

    async def _unlock(self, lock: Document, owner: str) -> None:
        await self._io(
            "claim_due",
            lambda: self._coll.update_one({**lock, "owner": owner}, {"$set": {"until": 0}}),
        )

    async def _claim_batch(self, request: DueClaim, room: int) -> list[DueRun]:
        claimed: list[DueRun] = []
        for mode in (ClaimMode.CONTINUE, ClaimMode.RECOVERY):
            found = _due_filter(self._namespace, request, mode)
            while len(claimed) < room:
                update = _due_update(request.tokens[len(claimed)], request.lease_ms, mode)
                doc = await self._io("claim_due", partial(self._claim_next, found, update))
                if doc is None:
                    break
                key, step = doc["_id"]["t"], doc["ls"]
                record = self._parts.decode_row(row_from(key, doc))
                claimed.append(DueRun(key, int(step), record, mode is ClaimMode.RECOVERY))
        return claimed

    async def _claim_next(self, found: Document, update: list[Document]) -> Document | None:
        """Claim the first due run ``found`` matches, in wake order; its document after."""
        return await self._coll.find_one_and_update(
            found,
            update,
            sort=[("wk", 1), ("tt", 1)],
            hint=DUE_INDEX,
            return_document=ReturnDocument.AFTER,
        )

    async def _held(
        self, holder: str, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        lo, hi = held_range(holder)
        tokens: Document = {"$gte": lo, "$lt": hi}
        if after is not None:
            tokens["$gt"] = after

        async def read() -> list[Document]:
            found = self._coll.find(
                {"_id.n": self._namespace, "claim_token": tokens},
                SUMMARY_READ | {"claim_token": 1},
                sort=[("claim_token", 1)],
                limit=limit + 1,
                hint=HOLDER_INDEX,
            )
            return await found.to_list()

        documents = await self._io("list_held", read)
        runs = [summary_from(document) for document in documents[:limit]]
        more = len(documents) > limit
        return runs, str(documents[limit - 1]["claim_token"]) if more else None
