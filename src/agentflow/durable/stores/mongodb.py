"""A :class:`~agentflow.durable.DurableStore` in MongoDB, one ``find_one_and_update`` per write.

A run is one document beside the checkpointer's collection (see
:mod:`~agentflow.durable.stores.mongodb_documents` for the layout): every
planned write is one ``find_one_and_update`` whose filter is the guard and
whose ``$set`` names the head fields, the body when it changes and the one
journal entry it writes, so MongoDB's document-level atomicity decides
between racing writers in any number of processes. Claims and renewals are
update pipelines that compare and set the lease on ``$$NOW``, the server's
clock. A write that matched nothing is answered from the head read by a
second command.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from agentflow.checkpoint.mongodb.documents import Document, plain
from agentflow.checkpoint.stores import safe_url, scheme_of
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    DurableConflict,
    DurableCorrupted,
    DurableError,
)
from agentflow.durable.leases import check_claim_request, claim_refusal, claimed_head, renew_refusal
from agentflow.durable.paged import ListedRuns
from agentflow.durable.planned import PlannedWrites
from agentflow.durable.record import DurableCheckpoint
from agentflow.durable.rows import RunHead, RunSummary
from agentflow.durable.stores.mongodb_client import MongoStoreBase, check_text
from agentflow.durable.stores.mongodb_documents import (
    HEAD_READ,
    LEASE,
    LISTING_INDEX,
    STATUS_INDEX,
    SUMMARY_READ,
    claim_filter,
    claim_update,
    guard_filter,
    head_from,
    intact,
    lease_from,
    listing_filter,
    new_run,
    renew_filter,
    renew_update,
    row_from,
    run_id,
    summary_from,
    write_update,
)
from agentflow.durable.transitions import Write, refusal
from agentflow.durable.validators import validate_checkpoint_key
from agentflow.errors import InvalidStoreUrl

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["MongoDurableStore", "from_url"]

_CLAIM = "checkpoint_claim_invalid"


class MongoDurableStore(PlannedWrites, ListedRuns, MongoStoreBase):
    """Durable records of runs in MongoDB, beside a checkpointer's collection.

    Takes the arguments of :class:`~agentflow.checkpoint.mongodb.MongoCheckpointer`
    (``uri`` or ``client``, ``database``, ``collection``, ``journal``) and a
    ``namespace``; the collections and indexes are created on first use.
    """

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        row = self._parts.encode_row(checkpoint)
        document = new_run(self._namespace, row)

        async def insert() -> bool:
            try:
                await self._runs.insert_one(document)
            except DuplicateKeyError:
                return False
            return True

        if not await self._call("create", insert):
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")

    async def load(self, key: str) -> DurableCheckpoint | None:
        key = validate_checkpoint_key(key)
        found = await self._call(
            "load", lambda: self._runs.find_one({"_id": run_id(self._namespace, key)})
        )
        return None if found is None else self._parts.decode_row(row_from(key, found))

    async def _head(self, operation: str, key: str) -> tuple[RunHead | None, int, bool]:
        """A refused command's second read: the head, the server's now, whether the shape holds."""
        found = await self._call(
            operation, lambda: self._runs.find_one({"_id": run_id(self._namespace, key)}, HEAD_READ)
        )
        if found is None:
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
        check_claim_request(cycle_index, claim_token, lease_ms)
        token = check_text(claim_token, _CLAIM, "claim token")
        key = validate_checkpoint_key(key)
        found = await self._call(
            "claim",
            lambda: self._runs.find_one_and_update(
                claim_filter(self._namespace, key, cycle_index, lease_ms, mode),
                claim_update(token, cycle_index, lease_ms, mode),
                return_document=ReturnDocument.AFTER,
            ),
        )
        if found is not None:
            return self._parts.decode_row(row_from(key, found))
        head, now, shaped = await self._head("claim", key)
        error = claim_refusal(head, cycle_index, now, mode)
        if error is None and head is not None:
            # only an overflow or damage is left: raise it
            claimed_head(head, cycle_index, token, now_ms=now, lease_ms=lease_ms, mode=mode)
            if not shaped:
                raise self._damaged(key)
        raise error or DurableConflict("the claim matched nothing")

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        check_claim_request(1, claim_token, lease_ms)
        token = check_text(claim_token, _CLAIM, "claim token")
        key = validate_checkpoint_key(key)
        found = await self._call(
            "renew_claim",
            lambda: self._runs.find_one_and_update(
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

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply a planned write as its one command; if it matched nothing, say why."""
        reaches, update = write_update(write)
        found = await self._call(
            operation,
            lambda: self._runs.find_one_and_update(
                guard_filter(self._namespace, write.key, write.guard) | reaches,
                update,
                projection=LEASE,
                return_document=ReturnDocument.AFTER,
            ),
        )
        if found is not None:
            return replace(write.record, lease_expires_at_ms=lease_from(write.key, found))
        head, _, _ = await self._head(operation, write.key)
        if head is not None and write.guard.holds(head):
            # the guard holds, so the shape did not: a body, a journal or an entry is missing
            raise self._damaged(write.key)
        raise refusal(head, write.guard)

    async def delete(self, key: str) -> bool:
        key = validate_checkpoint_key(key)
        deleted = await self._call(
            "delete", lambda: self._runs.delete_one({"_id": run_id(self._namespace, key)})
        )
        return deleted.deleted_count == 1

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        index = LISTING_INDEX if status is None else STATUS_INDEX

        async def read() -> list[Document]:
            found = self._runs.find(
                listing_filter(self._namespace, status, after),
                SUMMARY_READ,
                sort=[("_id.k", 1)],
                limit=limit + 1,
                hint=index,
            )
            return await found.to_list()

        documents = await self._call("list_runs", read)
        runs = [summary_from(document) for document in documents[:limit]]
        return runs, runs[-1].key if len(documents) > limit else None


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    create: bool = True,
    sealing: KeyRing | None = None,
) -> MongoDurableStore:
    """``mongodb://...`` or ``mongodb+srv://...``: a store that owns its client, as the
    checkpointer's."""
    if scheme_of(url) not in ("mongodb", "mongodb+srv"):
        raise InvalidStoreUrl(f"not a MongoDB URL: {safe_url(url)!r}")
    return MongoDurableStore(url, namespace=namespace, create=create, sealing=sealing)
