"""A MongoDB checkpointer on PyMongo's native asyncio client.

One collection holds one document per checkpoint, keyed ``_id: {n: namespace,
t: thread, s: step}``, with ``n, t, s`` repeated at the top level for the index
``(n, t, s desc)``, and one small registry entry per thread, ``_id: {n, t}``,
with ``tn, tt`` repeated for the registry index. A put of a thread this
checkpointer registered within the last minute is one ``insert_one`` (an
existing step falls back to one atomic ``$inc`` update); otherwise one ordered
write registers the thread (a no-op match for a known thread) and creates the
step. A listing page is a keyset range of registry entries, each joined to its
thread's latest checkpoint by one index seek. docs/mongodb.md has the layout,
indexes, races and guarantees.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn

from bson import MaxKey, MinKey
from pymongo import AsyncMongoClient, UpdateMany, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import ConfigurationError, DuplicateKeyError, InvalidName
from pymongo.write_concern import WriteConcern

from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    EncodedCheckpoint,
    encode,
    parse_instant,
    validate_namespace,
    validate_step,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.mongodb.documents import (
    PAYLOAD,
    REGISTRY_INDEX,
    STATUS,
    Document,
    check_size,
    decode_document,
    driver_errors,
    indexes,
    new_document,
    registration,
    rewrite,
    thread_info,
)
from agentflow.checkpoint.paging import check_page_args, check_prune_bounds
from agentflow.checkpoint.redaction import redact_none
from agentflow.errors import CheckpointConflict, InvalidArgument

__all__ = ["MongoCheckpointer"]

_BACKEND = "mongodb"
#: Checkpoints per history round trip: bounds memory, amortizes the round trip.
_HISTORY_BATCH = 256
#: Registry entries a listing round trip reads at most.
_LIST_BATCH = 1_000
#: Expiry times are rounded up to this many seconds (or the ttl if shorter), so
#: every write of a thread within one bucket finds its older documents already
#: refreshed and the refresh touches nothing.
_TTL_BUCKET_S = 60.0
#: A put skips the registration of its thread when this checkpointer registered it
#: less than this long ago (and, with ttl, in the same expiry bucket).
_MEMO_S = 60.0
#: A registry entry marked empty is deleted only once the mark is this old, and a put
#: that ends this long after its thread's registration registers it again: so no
#: registration a put relied on can be removed before the put's checkpoint is visible.
_GRACE_S = 300.0
#: Threads this checkpointer registered recently; dropped when it grows past this,
#: costing one no-op registration per thread.
_REGISTRY_MEMO = 10_000


class MongoCheckpointer(AsyncClosing):
    """Checkpoints in one MongoDB collection, safe for many processes at once.

    A checkpointer built from ``uri`` owns its client and closes it on
    :meth:`close`; an injected ``client`` stays the caller's. Writes use the
    client's write concern (the server default when none is set: ``w:1`` on a
    standalone, ``majority`` on a replica set); ``journal=True`` also waits
    for the journal. ``ttl`` (seconds) makes a thread expire as a whole once
    it has not been written for that long (give or take MongoDB's 60 s TTL pass).
    """

    def __init__(
        self,
        uri: str = "mongodb://127.0.0.1:27017",
        *,
        client: AsyncMongoClient[Document] | None = None,
        database: str = "agentflow",
        collection: str = "checkpoints",
        redact: Redactor | None = None,
        namespace: str | None = None,
        ttl: float | None = None,
        journal: bool = False,
    ) -> None:
        self._ns = validate_namespace(namespace)
        self._redact = redact or redact_none
        if ttl is not None and not (
            isinstance(ttl, int | float) and not isinstance(ttl, bool) and 0 < ttl < math.inf
        ):
            raise InvalidArgument(f"ttl must be None or a positive number of seconds, got {ttl!r}")
        self._ttl = ttl
        self._owned = client is None
        try:
            self._client: AsyncMongoClient[Document] = client or AsyncMongoClient(uri)
            coll: AsyncCollection[Document] = self._client[database][collection]
        except (ConfigurationError, InvalidName, ValueError) as exc:
            # The driver's message may quote the URI, password included.
            raise InvalidArgument(
                f"invalid MongoDB URI, database or collection name ({type(exc).__name__})"
            ) from exc
        if not coll.write_concern.acknowledged:
            raise InvalidArgument("an unacknowledged write concern (w=0) cannot detect conflicts")
        if journal:
            wc = WriteConcern(**{**coll.write_concern.document, "j": True})
            coll = coll.with_options(write_concern=wc)
        self._coll = coll
        self._setup_lock = asyncio.Lock()
        self._set_up = False
        self._closed = False
        self._registered: dict[str, tuple[float, datetime | None]] = {}

    # -- lifecycle ---------------------------------------------------------

    async def setup(self) -> None:
        """Create the indexes; idempotent, and run once before the first write or listing.

        Call it at deploy time when the runtime user may not create indexes. A
        collection with a default collation is refused: ``_id`` ranges and the
        listing need thread ids compared as plain code points.
        """
        with driver_errors("setup"):
            listing = await self._coll.database.list_collections(filter={"name": self._coll.name})
            info = await listing.to_list()
            collation = info[0].get("options", {}).get("collation") if info else None
            if collation and collation.get("locale") != "simple":
                raise InvalidArgument(
                    f"collection {self._coll.name!r} has a default collation; "
                    "agentflow needs the simple (binary) collation"
                )
            await self._coll.create_indexes(indexes(self._ttl is not None))
        self._set_up = True

    async def _ready(self) -> None:
        if self._set_up:
            return
        async with self._setup_lock:
            if not self._set_up:
                await self.setup()

    async def close(self) -> None:
        """Close the client if this checkpointer created it; safe to call twice."""
        if self._owned and not self._closed:
            self._closed = True
            await self._client.close()

    # -- keys --------------------------------------------------------------

    def _key(self, thread: str, step: Any) -> Document:
        """The ``_id`` of a checkpoint.

        Field order is part of the key: BSON compares embedded documents field by
        field, which is what makes a thread's checkpoints one contiguous,
        step-ordered range of the ``_id`` index.
        """
        return {"n": self._ns, "t": thread, "s": step}

    def _entry(self, thread: str) -> Document:
        """The ``_id`` of a thread's registry entry: a prefix of its checkpoints' ``_id``,
        so it sorts just before them and outside every ``_steps`` range."""
        return {"n": self._ns, "t": thread}

    def _steps(self, thread: str, before: int | None = None) -> Document:
        """An ``_id`` range over the thread's checkpoints."""
        low = self._key(thread, MinKey())
        if before is None:
            return {"$gte": low, "$lte": self._key(thread, MaxKey())}
        return {"$gte": low, "$lt": self._key(thread, before)}

    # -- writes ------------------------------------------------------------

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        if if_revision is not None and (
            isinstance(if_revision, bool) or not isinstance(if_revision, int) or if_revision < 0
        ):
            raise InvalidArgument(f"if_revision must be None or an int >= 0, got {if_revision!r}")
        enc = encode(cp, self._redact)
        check_size(enc, self._ns)
        if not self._set_up:
            await self._ready()
        thread, step = enc.thread, enc.step
        expires = self._expiry() if self._ttl is not None else None
        with driver_errors("put"):
            if if_revision:
                # A compare-and-set rewrites a stored step: it never creates a
                # checkpoint, so the thread is registered already.
                update = rewrite(self._ns, enc, expires)
                key = self._key(thread, step)
                result = await self._coll.update_one({"_id": key, "rev": if_revision}, update)
                if result.matched_count != 1:
                    await self._conflict(thread, step, if_revision)
                return f"{thread}:{step}"
            memo = self._registered.get(thread)
            now = time.monotonic()
            if memo is not None and memo[1] == expires and now - memo[0] < _MEMO_S:
                registered_at = memo[0]
                # Most puts write a new step of a registered thread: a plain insert,
                # revision 1. The _id index refuses an existing step.
                try:
                    await self._coll.insert_one(new_document(self._ns, enc, expires))
                    created = True
                except DuplicateKeyError:
                    created = False
            else:
                registered_at = now
                created = await self._register_and_create(enc, expires)
            if not created:
                if if_revision == 0:
                    await self._conflict(thread, step, 0)
                # The step exists: one atomic increment. Equality on _id only, so if
                # a delete removed the step meanwhile the upsert inserts revision 1,
                # and the server retries a racing upsert's duplicate key itself:
                # concurrent unconditional puts never lose a revision.
                update = rewrite(self._ns, enc, expires)
                await self._coll.update_one({"_id": self._key(thread, step)}, update, upsert=True)
            if time.monotonic() - registered_at >= _GRACE_S:
                # A put this slow may land after a cleanup trusted the registration's
                # age: register again, after the checkpoint is written.
                await self._coll.update_one(
                    {"_id": self._entry(thread)},
                    registration(self._ns, thread, expires),
                    upsert=True,
                )
        return f"{thread}:{step}"

    async def _register_and_create(self, enc: EncodedCheckpoint, expires: datetime | None) -> bool:
        """Register the thread and create the step if absent, in one ordered write.

        With ttl the same write first pushes back the expiry of the thread's older
        checkpoints. Returns whether the step was created (revision 1); the memo
        then lets this checkpointer's further puts of the thread skip all but the
        insert for ``_MEMO_S`` seconds, within one expiry bucket.
        """
        thread, started = enc.thread, time.monotonic()
        doc = new_document(self._ns, enc, expires)
        key = doc.pop("_id")
        ops: list[UpdateOne | UpdateMany] = []
        if expires is not None:
            ops.append(
                UpdateMany(
                    {"n": self._ns, "t": thread, "expires_at": {"$not": {"$gte": expires}}},
                    {"$set": {"expires_at": expires}},
                )
            )
        ops.append(
            UpdateOne(
                {"_id": self._entry(thread)}, registration(self._ns, thread, expires), upsert=True
            )
        )
        ops.append(UpdateOne({"_id": key}, {"$setOnInsert": doc}, upsert=True))
        result = await self._coll.bulk_write(ops)
        if len(self._registered) >= _REGISTRY_MEMO:
            self._registered.clear()
        self._registered[thread] = (started, expires)
        return len(ops) - 1 in (result.upserted_ids or {})

    async def _conflict(self, thread: str, step: int, expected: int) -> NoReturn:
        """Raise the conflict of a lost compare-and-set, with the revision stored now."""
        current = await self._coll.find_one({"_id": self._key(thread, step)}, {"rev": 1})
        raise CheckpointConflict(thread, step, expected, current["rev"] if current else 0)

    def _expiry(self) -> datetime:
        assert self._ttl is not None
        bucket = min(self._ttl, _TTL_BUCKET_S)
        deadline = math.ceil((time.time() + self._ttl) / bucket) * bucket
        return datetime.fromtimestamp(deadline, UTC)

    async def delete_thread(self, thread: str) -> None:
        thread = validate_thread(thread)
        with driver_errors("delete"):
            await self._coll.delete_many({"_id": self._steps(thread)})
            await self._mark_if_empty(thread)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        thread = validate_thread(thread)
        query: Document = {"_id": self._steps(thread, before_step)}
        if older_than is not None:
            query["ts_us"] = {"$lt": parse_instant(older_than, what="older_than")}
        with driver_errors("delete"):
            deleted = (await self._coll.delete_many(query)).deleted_count
            if deleted:
                await self._mark_if_empty(thread)
        return deleted

    async def _mark_if_empty(self, thread: str) -> None:
        """Mark the thread's registry entry empty (server time) if no checkpoint is left.

        The entry stays, so no put that relied on it is hidden; a registration
        clears the mark, and a listing deletes an entry once its mark is
        ``_GRACE_S`` old and the thread still has no checkpoint.
        """
        if await self._coll.find_one({"_id": self._steps(thread)}, {"_id": 1}) is None:
            await self._coll.update_one(
                {"_id": self._entry(thread), "empty_since": {"$exists": False}},
                [{"$set": {"empty_since": "$$NOW"}}],
            )

    # -- reads -------------------------------------------------------------

    async def _latest(self, thread: str, projection: Mapping[str, int]) -> Document | None:
        return await self._coll.find_one(
            {"_id": self._steps(thread)}, projection, sort=[("_id", -1)]
        )

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        thread = validate_thread(thread)
        with driver_errors("get"):
            if step is None:
                doc = await self._latest(thread, PAYLOAD)
            else:
                doc = await self._coll.find_one(
                    {"_id": self._key(thread, validate_step(step))}, PAYLOAD
                )
        return None if doc is None else decode_document(doc, thread)

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        thread = validate_thread(thread)
        cursor = self._coll.find(
            {"_id": self._steps(thread)}, PAYLOAD, sort=[("_id", 1)], batch_size=_HISTORY_BATCH
        )
        try:
            while True:
                with driver_errors("history"):
                    docs = await cursor.to_list(_HISTORY_BATCH)
                if not docs:
                    return
                for doc in docs:
                    yield decode_document(doc, thread)
        finally:
            await cursor.close()

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        check_page_args(limit, offset)
        return (await self._page(None, skip=offset, limit=limit))[1]

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        after = None if cursor is None else decode_cursor(_BACKEND, self._ns, cursor)
        last, infos = await self._page(after, skip=0, limit=limit, peek=True)
        return ThreadPage(infos, encode_cursor(_BACKEND, self._ns, last) if last else None)

    async def _page(
        self, after: str | None, *, skip: int, limit: int, peek: bool = False
    ) -> tuple[str | None, list[ThreadInfo]]:
        """A page of threads after ``after``, with the status of each latest checkpoint.

        Each round trip reads a keyset range of registry entries and, joined to
        each, the thread's latest checkpoint: one key of the listing index per
        entry, whatever the thread's length. An entry whose thread has no
        checkpoint is skipped (and cleaned up). With ``peek``, one thread more is
        found to tell whether another page follows; the last thread of this page
        is returned when one does.
        """
        await self._ready()
        need = skip + limit + int(peek)
        infos: list[ThreadInfo] = []
        empty: list[Document] = []
        with driver_errors("list_threads"):
            while len(infos) < need:
                batch = min(_LIST_BATCH, need - len(infos))
                rows = await self._entries(after, batch)
                for row in rows:
                    after = row["tt"]
                    if row["latest"]:
                        infos.append(thread_info(row["latest"][0]))
                    else:
                        empty.append(row)
                if len(rows) < batch:
                    break
            for row in empty:
                await self._clean(row)
        more = len(infos) > skip + limit
        infos = infos[skip : skip + limit]
        return (infos[-1].thread if more else None), infos

    async def _entries(self, after: str | None, count: int) -> list[Document]:
        """Up to ``count`` registry entries after ``after``, each with ``latest``: a list
        of at most the thread's latest checkpoint (``STATUS`` fields)."""
        match: Document = {"tn": self._ns}
        if after is not None:
            match["tt"] = {"$gt": after}
        latest: list[Document] = [
            {"$match": {"n": self._ns, "$expr": {"$eq": ["$t", "$$t"]}}},
            {"$sort": {"s": -1}},
            {"$limit": 1},
            {"$project": STATUS},
        ]
        pipeline: list[Document] = [
            {"$match": match},
            {"$sort": {"tn": 1, "tt": 1}},
            {"$limit": count},
            {"$project": {"tt": 1, "empty_since": 1}},
            {
                "$lookup": {
                    "from": self._coll.name,
                    "let": {"t": "$tt"},
                    "pipeline": latest,
                    "as": "latest",
                }
            },
        ]
        # A first batch larger than the limit lets the server close the cursor at once.
        cursor = await self._coll.aggregate(pipeline, hint=REGISTRY_INDEX, batchSize=count + 1)
        return await cursor.to_list()

    async def _clean(self, row: Document) -> None:
        """Mark an empty registry entry, or delete it once its mark is ``_GRACE_S`` old;
        a checkpoint found after the delete (a put racing it) registers it again."""
        thread = row["tt"]
        if "empty_since" not in row:
            await self._mark_if_empty(thread)
            return
        stale = {"$lt": ["$empty_since", {"$subtract": ["$$NOW", int(_GRACE_S * 1000)]}]}
        gone = await self._coll.delete_one({"_id": self._entry(thread), "$expr": stale})
        if gone.deleted_count:
            survivor = await self._latest(thread, {"_id": 1, "expires_at": 1})
            if survivor is not None:
                expires = survivor.get("expires_at")
                await self._coll.update_one(
                    {"_id": self._entry(thread)},
                    registration(self._ns, thread, expires),
                    upsert=True,
                )
