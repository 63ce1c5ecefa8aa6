"""The record part of the MongoDB store: one ``find_one_and_update`` per write.

A record is fields of its thread's document (see
:mod:`~agentflow.checkpoint.mongodb.records`): every planned write is one
``find_one_and_update`` whose filter is the guard and whose ``$set`` names
the head fields, the body when it changes, the journal entries it writes and
the thread status the record now imposes, so MongoDB's document-level
atomicity decides between racing writers in any number of processes, and a
thread's listed status never disagrees with its record. Claims, renewals and
deletes compare the lease with ``$$NOW``, the server's clock. A write that
matched nothing is answered from the head read by a second command.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Final, TypeVar

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from agentflow.checkpoint.claims import (
    check_claim_request,
    claim_refusal,
    claimed_head,
    renew_refusal,
)
from agentflow.checkpoint.mongodb.documents import Document, plain, summary_key
from agentflow.checkpoint.mongodb.records import (
    HEAD_READ,
    LEASE,
    LISTING_INDEX,
    MARKS_READ,
    NOW,
    RECORD_FIELDS,
    RECORDED,
    STATUS_INDEX,
    SUMMARY_READ,
    UNRECORDED,
    check_text,
    claim_filter,
    claim_update,
    guard_filter,
    head_from,
    holds_record,
    intact,
    lease_from,
    listing_filter,
    record_fields,
    renew_filter,
    renew_update,
    row_from,
    summary_from,
    write_update,
)
from agentflow.checkpoint.plans import Write, refusal
from agentflow.checkpoint.rows import RunHead
from agentflow.checkpoint.runs import RunsBase
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    ClaimActive,
    DurableConflict,
    DurableCorrupted,
    DurableError,
)
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.validators import validate_checkpoint_key

__all__ = ["MongoRuns"]

T = TypeVar("T")

_CLAIM: Final = "checkpoint_claim_invalid"
#: Rounds of a delete whose lease lapsed between its refusal and the re-read.
_DELETE_ROUNDS: Final = 4
#: Rounds of a claim whose refusal read finds the lease lapsed since the command.
_CLAIM_ROUNDS: Final = 3
#: A thread document that holds neither a record nor a summary.
_UNSUMMARIZED: Final = {"ls": {"$exists": False}, **UNRECORDED}
#: A lease that is live on the server's clock.
_LIVE: Final = {"$gt": ["$lease_expires_at_ms", NOW]}


class MongoRuns(RunsBase, abc.ABC):
    """The record part of :class:`~agentflow.checkpoint.mongodb.MongoCheckpointer`."""

    _coll: AsyncCollection[Document]

    @abc.abstractmethod
    async def _io(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` once the store is set up, the driver's errors as agentflow's."""

    def _run(self, key: str) -> Document:
        return {"_id": summary_key(self._namespace, key)}

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        self._check_open()
        row = self._parts.encode_row(checkpoint)
        # The thread's document may hold its summary already; one holding a record
        # is not matched, and the upsert's insert then meets its _id.
        free = self._run(row.key) | UNRECORDED
        fields = record_fields(row) | {"df": checkpoint.run_definition_digest}

        async def upsert() -> bool:
            try:
                await self._coll.update_one(free, {"$set": fields}, upsert=True)
            except DuplicateKeyError:
                return False
            return True

        if not await self._io("create", upsert):
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")

    async def load(self, key: str) -> DurableCheckpoint | None:
        self._check_open()
        key = validate_checkpoint_key(key)
        found = await self._io("load", lambda: self._coll.find_one(self._run(key)))
        if not holds_record(found):
            return None
        assert found is not None
        return self._parts.decode_row(row_from(key, found))

    async def _head(self, operation: str, key: str) -> tuple[RunHead | None, int, bool]:
        """A refused command's second read: the head, the server's now, whether the shape holds."""
        read = HEAD_READ | MARKS_READ
        found = await self._io(operation, lambda: self._coll.find_one(self._run(key), read))
        if found is None or not holds_record(found):
            return None, 0, True
        now = plain(found.get("now"))
        assert type(now) is int  # $toLong of $$NOW
        return head_from(key, found), now, intact(found)

    def _damaged(self, key: str) -> DurableCorrupted:
        return DurableCorrupted(
            "checkpoint_row_invalid", f"stored record {key!r} has a damaged body or journal"
        )

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        self._check_open()
        check_claim_request(cycle_index, claim_token, lease_ms)
        token = check_text(claim_token, _CLAIM, "claim token")
        key = validate_checkpoint_key(key)
        # The refusal is read after the command, on the server's clock of then: a
        # lease that lapsed in between refuses nothing, and the claim is tried again.
        for _ in range(_CLAIM_ROUNDS):
            found = await self._io(
                "claim",
                lambda: self._coll.find_one_and_update(
                    claim_filter(self._namespace, key, cycle_index, lease_ms, mode),
                    claim_update(token, cycle_index, lease_ms, mode),
                    return_document=ReturnDocument.AFTER,
                ),
            )
            if found is not None:
                return self._parts.decode_row(row_from(key, found))
            head, now, shaped = await self._head("claim", key)
            error = claim_refusal(head, cycle_index, now, mode)
            if error is not None:
                raise error
            if head is None:
                break
            # only an overflow or damage is left: raise it
            claimed_head(head, cycle_index, token, now_ms=now, lease_ms=lease_ms, mode=mode)
            if not shaped:
                raise self._damaged(key)
        raise DurableConflict("the claim matched nothing")

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        self._check_open()
        check_claim_request(1, claim_token, lease_ms)
        token = check_text(claim_token, _CLAIM, "claim token")
        key = validate_checkpoint_key(key)
        found = await self._io(
            "renew_claim",
            lambda: self._coll.find_one_and_update(
                renew_filter(self._namespace, key, token, lease_ms),
                renew_update(lease_ms),
                projection=LEASE,
                return_document=ReturnDocument.AFTER,
            ),
        )
        lease = None if found is None else lease_from(key, found)
        if lease is not None:
            return lease
        head, now, _ = await self._head("renew_claim", key)
        raise renew_refusal(head, token, now) or DurableError(
            _CLAIM, "lease expiry is outside the JSON-safe range"
        )

    def _statement(self, write: Write) -> tuple[Document, Document]:
        """The filter and update of a planned write."""
        reaches, update = write_update(write)
        return guard_filter(self._namespace, write.key, write.guard) | reaches, update

    async def _refused(self, operation: str, write: Write) -> DurableError:
        """Why a planned write matched nothing, from the head read again."""
        head, _, _ = await self._head(operation, write.key)
        if head is not None and write.guard.holds(head):
            # the guard holds, so the shape did not: a body, a journal or an entry is missing
            return self._damaged(write.key)
        return refusal(head, write.guard)

    def _stored(self, write: Write, lease: Document | None) -> DurableCheckpoint:
        return replace(write.record, lease_expires_at_ms=lease_from(write.key, lease))

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply a planned write as its one command; if it matched nothing, say why."""
        found, update = self._statement(write)
        written = await self._io(
            operation,
            lambda: self._coll.find_one_and_update(
                found, update, projection=LEASE, return_document=ReturnDocument.AFTER
            ),
        )
        if written is None:
            raise await self._refused(operation, write)
        return self._stored(write, written)

    async def _delete_run(self, key: str, *, force: bool) -> bool:
        """Remove the record's fields (and ``rs``) from the thread's document, refusing
        a lease live on the server's clock unless ``force``; a document left with
        neither record nor summary goes too."""
        recorded = self._run(key) | RECORDED
        if not force:
            recorded["$expr"] = {"$not": [_LIVE]}
        drop = {"$unset": dict.fromkeys(RECORD_FIELDS, "")}
        for _ in range(_DELETE_ROUNDS):
            before = await self._io(
                "delete",
                lambda: self._coll.find_one_and_update(recorded, drop, projection={"ls": 1}),
            )
            if before is not None:
                if "ls" not in before:
                    empty = self._run(key) | _UNSUMMARIZED
                    await self._io("delete", partial(self._coll.delete_one, empty))
                return True
            held = await self._io(
                "delete",
                lambda: self._coll.find_one(self._run(key), MARKS_READ | {"live": _LIVE}),
            )
            if not holds_record(held):
                return False
            assert held is not None
            if held.get("live") is True:
                raise ClaimActive(f"run {key!r} is held by a live lease; delete it with force")
        raise DurableConflict(f"the record of {key!r} kept changing while it was deleted")

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        index = LISTING_INDEX if status is None else STATUS_INDEX

        async def read() -> list[Document]:
            found = self._coll.find(
                listing_filter(self._namespace, status, after),
                SUMMARY_READ,
                sort=[("_id.t", 1)],
                limit=limit + 1,
                hint=index,
            )
            return await found.to_list()

        documents = await self._io("list_runs", read)
        runs = [summary_from(document) for document in documents[:limit]]
        return runs, runs[-1].key if len(documents) > limit else None
