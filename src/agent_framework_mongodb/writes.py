"""Writing one checkpoint document: its sequence, the insert, and what a duplicate means.

A save is three dependent round trips (read the retained maximum, advance
the counter from it, insert), and a duplicate key on the insert is one of
three things: an identical retry (the stored payload hash matches: success),
a conflict (the ID holds other state: ``MongoDBConcurrencyError``), or a
sequence collision. The last is possible only while several writers recover
a lost counter, one of them having read the retained maximum just before
another's insert. The allocation is then repeated above the collided
sequence, skipping a stretch that doubles on each attempt (the sequences
right above may belong to other saves still in flight, and gaps are
allowed), a bounded number of times before the save fails with the
retryable ``MongoDBSequenceContentionError``.

That collision is a duplicate key only where the unique sequence index
exists. A writer therefore looks, once, whether it does
(:func:`~agent_framework_mongodb.indexes.sequences_unique`); where it does not
(never provisioned, or not listable with the runtime's privileges) it logs a
warning naming ``ensure_indexes`` and reads back each inserted sequence: a
save that finds another checkpoint on its sequence removes its own document
and allocates again, exactly as on a collision. Either way a save that
returned holds a sequence no other checkpoint of the run holds.
"""

from __future__ import annotations

import datetime
from typing import Any

from agent_framework import WorkflowCheckpoint
from pymongo.errors import DuplicateKeyError

from agent_framework_mongodb.codec import EncodedPayload
from agent_framework_mongodb.documents import build_document, check_hash_version, expiry
from agent_framework_mongodb.errors import (
    MongoDBAuthorizationError,
    MongoDBConcurrencyError,
    MongoDBSequenceContentionError,
)
from agent_framework_mongodb.indexes import SEQUENCE_INDEX, SIMPLE_COLLATION, sequences_unique
from agent_framework_mongodb.options import MongoDBCheckpointStorageOptions
from agent_framework_mongodb.sequences import allocate_sequence
from agent_framework_mongodb.telemetry import FEATURE, driver_errors, logger

__all__ = ["CheckpointWriter"]

_HASH_FIELDS = {"payload_hash": 1, "idempotency_hash_version": 1}
_DIFFERENT_STATE = "checkpoint ID already stored with different public state"
#: Allocations one save makes before a run of sequence collisions is an error.
SEQUENCE_ATTEMPTS = 8
#: Checkpoint IDs remembered as unsettled (their save's outcome never arrived).
_UNSETTLED_LIMIT = 1024


class CheckpointWriter:
    """Inserts the documents of one scoped run; owned by one storage."""

    def __init__(
        self,
        collection: Any,
        options: MongoDBCheckpointStorageOptions,
        checkpoint_filter: dict[str, Any],
        counter: dict[str, Any],
    ) -> None:
        self._collection = collection
        self._options = options
        self._checkpoint_filter = checkpoint_filter
        self._counter = counter
        # IDs whose last save here ended without an outcome (a transient error
        # or a cancellation): the write may have landed, so a retry looks first.
        self._unsettled: dict[str, None] = {}
        self._indexed: bool | None = None  # is the unique sequence index there?

    async def write(self, checkpoint: WorkflowCheckpoint, encoded: EncodedPayload) -> None:
        """Store ``checkpoint`` as ``encoded`` unless the run already holds it identically.

        An identical retry of a save whose outcome this writer never learned
        is answered by one lookup, without spending a new sequence.
        """
        checkpoint_id = checkpoint.checkpoint_id
        if checkpoint_id in self._unsettled and await self._stored_identical(
            checkpoint_id, encoded
        ):
            del self._unsettled[checkpoint_id]
            return
        self._remember_unsettled(checkpoint_id)
        settled = False
        try:
            await self._insert_with_sequence(checkpoint, encoded)
            settled = True
        except (MongoDBConcurrencyError, MongoDBSequenceContentionError):
            settled = True  # a definite outcome: nothing of this save was stored
            raise
        finally:
            if settled:
                self._unsettled.pop(checkpoint_id, None)

    async def _insert_with_sequence(
        self, checkpoint: WorkflowCheckpoint, encoded: EncodedPayload
    ) -> None:
        created_at = _now()
        ttl = self._options.ttl
        expires_at = None if ttl is None else expiry(created_at, ttl)
        collision: DuplicateKeyError | None = None
        at_least = 0
        indexed = await self._sequences_indexed()
        for attempt in range(SEQUENCE_ATTEMPTS):
            sequence = await allocate_sequence(
                self._collection,
                self._checkpoint_filter,
                self._counter,
                expires_at,
                at_least=at_least,
            )
            document = build_document(
                checkpoint,
                encoded,
                self._options,
                sequence=sequence,
                created_at=created_at,
                expires_at=expires_at,
            )
            duplicate = await self._insert(document)
            if duplicate is None:
                if indexed or await self._sequence_alone(document):
                    return
                at_least = sequence + 2 ** (attempt + 1)
                continue
            if "sequence" not in _key_pattern(duplicate):
                await self._confirm_identical(document, duplicate)
                return
            # The sequences just above the collided one may be held by other
            # writers' saves still in flight: step over a growing stretch.
            collision, at_least = duplicate, sequence + 2 ** (attempt + 1)
        raise MongoDBSequenceContentionError(
            "sequence allocation kept colliding in this run; the same save may be retried"
        ) from collision

    async def _sequences_indexed(self) -> bool:
        """Whether the collection has the unique sequence index (looked up once)."""
        if self._indexed is None:
            try:
                with driver_errors(write=True):  # part of a save: its outcome is a save's
                    existing = await self._collection.index_information()
                self._indexed = sequences_unique(existing)
            except MongoDBAuthorizationError:
                self._indexed = False
            if not self._indexed:
                logger.warning(
                    "feature=%s operation=save outcome=unindexed category=configuration: the "
                    "unique index %s is missing or cannot be listed; each save reads its "
                    "sequence back to keep it unique. Run ensure_indexes() to provision it",
                    FEATURE,
                    SEQUENCE_INDEX,
                )
        return self._indexed

    async def _sequence_alone(self, document: dict[str, Any]) -> bool:
        """Without the unique index: whether the inserted sequence is the run's
        only one; if not, the document is removed again (its save allocates anew)."""
        query = {**self._checkpoint_filter, "sequence": document["sequence"]}
        with driver_errors(write=True):
            holders = (
                await self._collection.find(query, {"_id": 1})
                .collation(SIMPLE_COLLATION)
                .limit(2)
                .to_list()
            )
            if len(holders) < 2:
                return True
            await self._collection.delete_one(
                {"_id": document["_id"], "sequence": document["sequence"]},
                collation=SIMPLE_COLLATION,
            )
        return False

    async def _insert(self, document: dict[str, Any]) -> DuplicateKeyError | None:
        with driver_errors(write=True):
            try:
                await self._collection.insert_one(document)
            except DuplicateKeyError as exc:
                return exc
        return None

    def _remember_unsettled(self, checkpoint_id: str) -> None:
        unsettled = self._unsettled
        if checkpoint_id not in unsettled and len(unsettled) >= _UNSETTLED_LIMIT:
            del unsettled[next(iter(unsettled))]
        unsettled[checkpoint_id] = None

    async def _stored_hash(self, document_id: str) -> dict[str, Any] | None:
        with driver_errors(write=False):
            stored: dict[str, Any] | None = await self._collection.find_one(
                {"_id": document_id, **self._checkpoint_filter},
                _HASH_FIELDS,
                collation=SIMPLE_COLLATION,
            )
        if stored is not None:
            check_hash_version(stored)
        return stored

    async def _stored_identical(self, checkpoint_id: str, encoded: EncodedPayload) -> bool:
        """Whether the run already holds this ID with this state (different state raises)."""
        stored = await self._stored_hash(self._options.document_id(checkpoint_id))
        if stored is None:
            return False
        if stored.get("payload_hash") != encoded.payload_hash:
            raise MongoDBConcurrencyError(
                "checkpoint ID already stored with different public state"
            )
        return True

    async def _confirm_identical(self, document: dict[str, Any], exc: DuplicateKeyError) -> None:
        """An ID collision is an idempotent retry only if the stored public state is identical."""
        stored = await self._stored_hash(document["_id"])
        if stored is None:
            raise MongoDBConcurrencyError("checkpoint ID is held by another document") from exc
        if stored.get("payload_hash") != document["payload_hash"]:
            raise MongoDBConcurrencyError(_DIFFERENT_STATE) from exc


def _key_pattern(exc: DuplicateKeyError) -> dict[str, Any]:
    pattern: dict[str, Any] = (exc.details or {}).get("keyPattern", {"_id": 1})
    return pattern


def _now() -> datetime.datetime:
    moment = datetime.datetime.now(datetime.UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)
