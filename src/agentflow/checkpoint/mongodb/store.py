"""The MongoDB store on PyMongo's native asyncio client: checkpoints, records, events.

One collection holds a document per checkpoint, ``_id: {n, t, s}``, and a
document per thread, ``_id: {n, t}``: its summary (its latest step's number,
revision, status and wake instant) and its durable record
(:mod:`~agentflow.checkpoint.mongodb.runs`); events are in a collection
beside it (:mod:`~agentflow.checkpoint.mongodb.events`). A put of a new step
is one ``update`` command of two statements: create the checkpoint, then
raise the summary to it unless the summary names a later (step, revision)
already. ``commit_step`` is the same command with the record's guarded write
as its first statement. Listings and ``list_due`` are keyset ranges of the
thread documents' indexes. docs/mongodb.md has the layout, the races and the
guarantees.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final, TypeVar

from bson import Binary
from pymongo import AsyncMongoClient, ReturnDocument, UpdateMany, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, ConfigurationError, InvalidName
from pymongo.write_concern import WriteConcern

from agentflow.checkpoint.backend import EncodedCheckpoint, StepRange, StoredRow
from agentflow.checkpoint.base import Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.mongodb import schema
from agentflow.checkpoint.mongodb.documents import (
    PAYLOAD,
    Document,
    check_size,
    checkpoint_key,
    expiry,
    new_checkpoint,
    plain,
    rewrite,
    step_range,
    steps,
    stored_row,
)
from agentflow.checkpoint.mongodb.errors import driver_error
from agentflow.checkpoint.mongodb.events import MongoEvents
from agentflow.checkpoint.mongodb.fleet import MongoFleet
from agentflow.checkpoint.mongodb.records import LEASE, first_statement, refused_first
from agentflow.checkpoint.mongodb.summaries import Summaries
from agentflow.checkpoint.plans import Write
from agentflow.checkpoint.store_base import StoreBase
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.errors import AgentflowError, CheckpointCorrupted, InvalidArgument

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["MongoCheckpointer", "from_url"]

T = TypeVar("T")

#: Checkpoints per history round trip: bounds memory, amortizes the round trip.
_HISTORY_BATCH: Final = 256
#: Threads whose expiry this checkpointer refreshed in the current bucket; the
#: memo is dropped when it grows past this, costing one refresh per thread.
_REFRESH_MEMO: Final = 10_000
_CURSOR_SECRET_ID: Final = {"m": "cursor"}


class MongoCheckpointer(MongoFleet, MongoEvents, StoreBase):
    """A thread's checkpoints, durable record and events in one MongoDB database
    (a :class:`~agentflow.checkpoint.store.Store`), safe for many processes at once.

    A checkpointer built from ``uri`` owns its client and closes it on
    :meth:`close`; an injected ``client`` stays the caller's. Every write waits
    for the journal (``j: true``, on top of the client's ``w``), so an
    acknowledged put survives a crash of the server; ``journal=False`` uses the
    client's write concern as it is, faster but losing the last ~100 ms of
    acknowledged writes in a crash. ``ttl`` (seconds) makes a thread expire as a
    whole once it has not been written for that long (give or take MongoDB's
    60 s TTL pass), its record with it; events do not expire. ``sealing``
    seals checkpoints, records and events alike. Events are kept in
    ``<collection>_durable_events``. With ``create=False`` a missing collection
    raises :class:`~agentflow.errors.StoreNotFound` on the first call and
    nothing is created.
    """

    kind = "mongodb"

    def __init__(
        self,
        uri: str = "mongodb://127.0.0.1:27017",
        *,
        client: AsyncMongoClient[Document] | None = None,
        database: str = "agentflow",
        collection: str = "checkpoints",
        namespace: str | None = None,
        redact: Redactor | None = None,
        codec: CheckpointCodec | None = None,
        sealing: KeyRing | None = None,
        ttl: float | None = None,
        journal: bool = True,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec, sealing=sealing)
        self._may_create = bool(create)
        if ttl is not None and not (
            isinstance(ttl, int | float) and not isinstance(ttl, bool) and 0 < ttl < math.inf
        ):
            raise InvalidArgument(f"ttl must be None or a positive number of seconds, got {ttl!r}")
        if not isinstance(journal, bool):
            raise InvalidArgument(f"journal must be a bool, got {journal!r}")
        self._ttl = ttl
        self._owned = client is None
        try:
            self._client: AsyncMongoClient[Document] = client or AsyncMongoClient(uri)
            coll: AsyncCollection[Document] = self._client[database][collection]
        except (ConfigurationError, InvalidName, ValueError, TypeError) as exc:
            # The driver's message may quote the URI, password included.
            raise InvalidArgument(
                f"invalid MongoDB URI, database or collection name ({type(exc).__name__})"
            ) from exc
        if not coll.write_concern.acknowledged:
            raise InvalidArgument("an unacknowledged write concern (w=0) cannot detect conflicts")
        if journal:
            coll = coll.with_options(
                write_concern=WriteConcern(**{**coll.write_concern.document, "j": True})
            )
        self._coll = coll
        self._events = coll.database.get_collection(
            f"{collection}_durable_events", write_concern=coll.write_concern
        )
        self._summaries = Summaries(coll, self._namespace)
        seeds = self._client.topology_description.server_descriptions()
        self._where = ",".join(h if p is None else f"{h}:{p}" for h, p in sorted(seeds, key=str))
        self._setup_lock = asyncio.Lock()
        self._set_up = False
        self._refreshed: dict[str, datetime] = {}

    def __repr__(self) -> str:
        return f"MongoCheckpointer({self._where!r}, namespace={self.namespace!r})"

    @property
    def database(self) -> str:
        return f"mongodb://{self._where}/{self._coll.database.name}/{self._coll.name}"

    async def setup(self) -> None:
        """Create the indexes and bring an older layout up to date; idempotent, and
        run once before the first call that needs it.

        Call it at deploy time when the runtime user may not create indexes. A
        collection with a default collation is refused: ``_id`` ranges and the
        listings need thread ids compared as plain code points. An older
        layout (checkpoints and the durable collections of version 2) is
        migrated here, once, by one process.
        """
        self._check_open()
        try:
            await self._ready()
        except Exception as exc:
            self._reraise(exc, "setup")

    async def _ready(self) -> None:
        if self._set_up:
            return
        async with self._setup_lock:
            if not self._set_up:
                ttl, create = self._ttl is not None, self._may_create
                await schema.prepare(self._coll, self._events, ttl, create=create)
                self._set_up = True

    async def _io(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        """Run a record or event ``job`` once the store is set up; PyMongo's errors
        become agentflow's (damage as DurableCorrupted)."""
        try:
            await self._ready()
            return await job()
        except Exception as exc:
            self._reraise_part(exc, operation)

    # -- writes ------------------------------------------------------------

    def _key(self, thread: str, step: int) -> Document:
        return checkpoint_key(self._namespace, thread, step)

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        await self._ready()
        enc = encode()
        check_size(enc, self._namespace)
        expires = None if self._ttl is None else expiry(self._ttl)
        if if_revision:
            # A compare-and-set rewrites a stored step: its next revision is known,
            # but the summary may follow only once the write is known to have won.
            key = {"_id": self._key(thread, step), "rev": if_revision}
            result = await self._coll.update_one(key, rewrite(self._namespace, enc, expires))
            if result.matched_count != 1:
                # The loser's path, and a retry's after its first attempt won but lost
                # the summary write with the connection: put the summary right.
                await self._summaries.reconcile(thread)
                return await self._revision(thread, step)
            await self._summaries.write(enc, if_revision + 1, expires)
            return None
        created, summarized = await self._create(enc, expires)
        if created:
            return None
        if if_revision == 0:
            if summarized:
                # Our summary statement assumed revision 1 of content that did not win.
                await self._summaries.reconcile(thread)
            return await self._revision(thread, step)
        # The step exists: one atomic increment. Equality on _id only, so if a delete
        # removed the step meanwhile the upsert inserts revision 1, and the server
        # retries a racing upsert's duplicate key itself: no revision is lost.
        stored = await self._coll.find_one_and_update(
            {"_id": self._key(thread, step)},
            rewrite(self._namespace, enc, expires),
            projection={"rev": 1},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        await self._summaries.write(enc, _revision_of(stored, thread, step), expires)
        return None

    async def _create(
        self, enc: EncodedCheckpoint, expires: datetime | None, first: UpdateOne | None = None
    ) -> tuple[bool, bool]:
        """Create the step at revision 1 if absent and raise the summary to it, in one
        ordered command (checkpoint first, so a summary never names a step not yet
        written), after ``first`` if given. Returns (created, whether the summary
        statement may have changed anything).

        With ttl the same command first pushes back the expiry of the thread's older
        checkpoints, once per expiry bucket per checkpointer.
        """
        thread = enc.thread
        doc = new_checkpoint(self._namespace, enc, expires)
        key = doc.pop("_id")
        ops: list[UpdateOne | UpdateMany] = [] if first is None else [first]
        if expires is not None and self._refreshed.get(thread) != expires:
            stale = {"n": self._namespace, "t": thread, "expires_at": {"$not": {"$gte": expires}}}
            ops.append(UpdateMany(stale, {"$set": {"expires_at": expires}}))
        ops.append(UpdateOne({"_id": key}, {"$setOnInsert": doc}, upsert=True))
        ops.append(self._summaries.raise_to(enc, 1, expires))
        result = await self._coll.bulk_write(ops)
        if expires is not None:
            if len(self._refreshed) >= _REFRESH_MEMO:
                self._refreshed.clear()
            self._refreshed[thread] = expires
        upserted = result.upserted_ids or {}
        created = len(ops) - 2 in upserted
        changed = result.modified_count > (first is not None)  # the record statement's own
        return created, len(ops) - 1 in upserted or changed

    async def _revision(self, thread: str, step: int) -> int:
        """The revision stored at (thread, step) now, 0 if none: a lost race's answer."""
        stored = await self._coll.find_one({"_id": self._key(thread, step)}, {"rev": 1})
        return 0 if stored is None else _revision_of(stored, thread, step)

    async def _commit_step(
        self, thread: str, step: int, encode: Callable[[], EncodedCheckpoint], write: Write
    ) -> tuple[int | None, DurableCheckpoint]:
        """The record's guarded write and the step's put as one ordered command.

        The record statement is an upsert that cannot insert: when the guard
        does not hold, the insert it attempts fails, and an ordered command stops
        at its first error, so a refused claim writes nothing. MongoDB commits
        each statement on its own (no transactions on a standalone server), so
        a crash inside the command may keep the receipts without the step, and a
        step that exists is refused after the record was written, as the base's
        order has it. One round trip and one journal wait; with a kept lease, a
        read of it.
        """
        await self._ready()
        enc = encode()
        check_size(enc, self._namespace)
        expires = None if self._ttl is None else expiry(self._ttl)
        try:
            created, summarized = await self._create(
                enc, expires, first_statement(*self._statement(write))
            )
        except BulkWriteError as exc:
            if not refused_first(exc):
                raise
            raise await self._refused("commit_step", write) from None
        lease = {"lease_expires_at_ms": write.head.lease_expires_at_ms}
        if write.keep_lease:
            lease = await self._coll.find_one(self._run(thread), LEASE) or {}
        stored = self._stored(write, lease)
        if created:
            return None, stored
        if summarized:
            await self._summaries.reconcile(thread)
        return await self._revision(thread, step), stored

    async def _delete_rows(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        await self._ready()
        query: Document = {"_id": steps(self._namespace, thread, before_step)}
        if cutoff_us is not None:
            query["ts_us"] = {"$lt": cutoff_us}
        deleted = (await self._coll.delete_many(query)).deleted_count
        if deleted or (before_step is None and cutoff_us is None):
            await self._summaries.reconcile(thread)
        return deleted

    # -- reads -------------------------------------------------------------

    async def _checked(self) -> None:
        """Reads need no setup, but one that may not create refuses a missing store."""
        if not self._may_create:
            await self._ready()

    async def _read_step(self, thread: str, step: int | None) -> StoredRow | None:
        await self._checked()
        if step is not None:
            doc = await self._coll.find_one({"_id": self._key(thread, step)}, PAYLOAD)
        else:
            latest = {"_id": steps(self._namespace, thread)}
            doc = await self._coll.find_one(latest, PAYLOAD, sort=[("_id", -1)])
        return None if doc is None else stored_row(doc)

    async def _read_history(self, thread: str, steps: StepRange) -> AsyncIterator[StoredRow]:
        await self._checked()
        where = {"_id": step_range(self._namespace, thread, steps.after, steps.before)}
        order = [("_id", -1 if steps.newest_first else 1)]
        batch = _HISTORY_BATCH if steps.limit is None else min(_HISTORY_BATCH, steps.limit)
        cursor = self._coll.find(
            where, PAYLOAD, sort=order, batch_size=batch, limit=steps.limit or 0
        )
        try:
            while docs := await cursor.to_list(batch):
                for doc in docs:
                    yield stored_row(doc)
        finally:
            await cursor.close()

    async def _read_steps(self, thread: str, steps: Sequence[int]) -> list[StoredRow]:
        """One find for every step asked for (a record's chain)."""
        await self._checked()
        keys = [self._key(thread, step) for step in steps]
        docs = await self._coll.find({"_id": {"$in": keys}}, PAYLOAD).to_list(len(keys))
        return [stored_row(doc) for doc in docs]

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        await self._ready()
        return await self._summaries.page(after, limit, status)

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        await self._ready()
        return await self._summaries.due(now_us, after, limit)

    async def _cursor_secret(self) -> bytes:
        await self._checked()
        doc = await self._coll.find_one_and_update(
            {"_id": _CURSOR_SECRET_ID},
            {"$setOnInsert": {"secret": Binary(os.urandom(SECRET_BYTES))}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        secret = None if doc is None else doc.get("secret")
        if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
            raise CheckpointCorrupted("the store's cursor secret is damaged")
        return bytes(secret)

    async def _close_store(self) -> None:
        if self._owned:
            await self._client.close()

    def _driver_error(self, exc: Exception, operation: str) -> AgentflowError | None:
        return driver_error(exc, operation, self._where)


def _revision_of(doc: Document | None, thread: str, step: int) -> int:
    revision = None if doc is None else plain(doc.get("rev"))
    if type(revision) is not int or revision < 1:
        raise CheckpointCorrupted(f"thread {thread!r} step {step}: the revision is damaged")
    return revision


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    codec: CheckpointCodec | None = None,
    sealing: KeyRing | None = None,
    create: bool = True,
) -> MongoCheckpointer:
    """``mongodb://...`` or ``mongodb+srv://...``: a store that owns its client."""
    return MongoCheckpointer(url, namespace=namespace, codec=codec, sealing=sealing, create=create)
