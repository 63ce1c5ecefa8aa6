"""A MongoDB checkpointer on PyMongo's native asyncio client.

One collection holds one document per checkpoint, keyed ``_id: {n: namespace,
t: thread, s: step}``, with ``n, t, s`` repeated at the top level for the listing
index ``(n, t, s desc)``. A put is one ``insert_one`` (an existing step falls back
to one atomic ``$inc`` update), and there is no second document to keep in step:
the listing reads the first index key of each thread, which is its latest step.
docs/mongodb.md has the layout, indexes and guarantees.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn

from bson import MaxKey, MinKey
from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import ConfigurationError, DuplicateKeyError, InvalidName
from pymongo.write_concern import WriteConcern

from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    encode,
    parse_instant,
    validate_namespace,
    validate_step,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.mongodb_documents import (
    PAYLOAD,
    STATUS,
    THREADS_INDEX,
    Document,
    check_size,
    decode_document,
    driver_errors,
    indexes,
    new_document,
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
#: Index keys a listing round trip reads at first, per thread it needs, and at most:
#: threads with many steps take further round trips, each a bounded scan.
_KEYS_PER_THREAD = 16
_MAX_WINDOW = 65_536
#: Expiry times are rounded up to this many seconds (or the ttl if shorter), so
#: every write of a thread within one bucket finds its older documents already
#: refreshed and the refresh touches nothing.
_TTL_BUCKET_S = 60.0
#: Threads whose expiry this checkpointer pushed back in the current bucket; the
#: memo is dropped when it grows past this, costing one no-op refresh per thread.
_REFRESH_MEMO = 10_000
_NEWEST_FIRST = {"n": 1, "t": 1, "s": -1}


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
        self._refreshed: dict[str, datetime] = {}

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
        expires = None
        if self._ttl is not None:
            expires = self._expiry()
            await self._refresh_expiry(thread, expires)
        with driver_errors("put"):
            if not if_revision:
                # Most puts write a new step: a plain insert, revision 1, one index
                # entry besides _id. The _id index refuses an existing step.
                try:
                    await self._coll.insert_one(new_document(self._ns, enc, expires))
                    return f"{thread}:{step}"
                except DuplicateKeyError:
                    if if_revision == 0:
                        await self._conflict(thread, step, 0)
                # The step exists: one atomic increment. Equality on _id only, so if
                # a delete removed the step meanwhile the upsert inserts revision 1,
                # and the server retries a racing upsert's duplicate key itself:
                # concurrent unconditional puts never lose a revision.
                update = rewrite(self._ns, enc, expires)
                await self._coll.update_one({"_id": self._key(thread, step)}, update, upsert=True)
            else:
                update = rewrite(self._ns, enc, expires)
                key = self._key(thread, step)
                result = await self._coll.update_one({"_id": key, "rev": if_revision}, update)
                if result.matched_count != 1:
                    await self._conflict(thread, step, if_revision)
        return f"{thread}:{step}"

    async def _conflict(self, thread: str, step: int, expected: int) -> NoReturn:
        """Raise the conflict of a lost compare-and-set, with the revision stored now."""
        current = await self._coll.find_one({"_id": self._key(thread, step)}, {"rev": 1})
        raise CheckpointConflict(thread, step, expected, current["rev"] if current else 0)

    def _expiry(self) -> datetime:
        assert self._ttl is not None
        bucket = min(self._ttl, _TTL_BUCKET_S)
        deadline = math.ceil((time.time() + self._ttl) / bucket) * bucket
        return datetime.fromtimestamp(deadline, UTC)

    async def _refresh_expiry(self, thread: str, expires: datetime) -> None:
        """Push back the expiry of every document of ``thread`` to ``expires``.

        Runs before the checkpoint write, so a failure here stores nothing but a
        longer life. Skipped when this checkpointer already refreshed the thread
        in the same bucket: every document it wrote since carries the bucket, and
        other writers of the thread refresh to the same bucket themselves.
        """
        if self._refreshed.get(thread) == expires:
            return
        with driver_errors("put"):
            await self._coll.update_many(
                {"n": self._ns, "t": thread, "expires_at": {"$not": {"$gte": expires}}},
                {"$set": {"expires_at": expires}},
            )
        if len(self._refreshed) >= _REFRESH_MEMO:
            self._refreshed.clear()
        self._refreshed[thread] = expires

    async def delete_thread(self, thread: str) -> None:
        thread = validate_thread(thread)
        with driver_errors("delete"):
            await self._coll.delete_many({"_id": self._steps(thread)})

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        thread = validate_thread(thread)
        query: Document = {"_id": self._steps(thread, before_step)}
        if older_than is not None:
            query["ts_us"] = {"$lt": parse_instant(older_than, what="older_than")}
        with driver_errors("delete"):
            return (await self._coll.delete_many(query)).deleted_count

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

        The latest steps come from covered scans of the listing index, then the
        statuses from one indexed ``$in``; a latest step deleted in between costs
        one more read, and a thread with no checkpoint left is skipped. With
        ``peek``, one thread more is found to tell whether another page follows;
        the last thread of this page is returned when one does.
        """
        await self._ready()
        with driver_errors("list_threads"):
            latest = await self._latest_steps(after, skip + limit + int(peek))
            more = len(latest) > skip + limit
            latest = latest[skip : skip + limit]
            keys = [self._key(thread, step) for thread, step in latest]
            found = await self._coll.find({"_id": {"$in": keys}}, STATUS).to_list() if keys else []
            by_key = {(d["_id"]["t"], d["_id"]["s"]): d for d in found}
            infos = []
            for thread, step in latest:
                doc = by_key.get((thread, step)) or await self._latest(thread, STATUS)
                if doc is not None:
                    infos.append(thread_info(doc))
        return (latest[-1][0] if more else None), infos

    async def _latest_steps(self, after: str | None, count: int) -> list[tuple[str, int]]:
        """``(thread, latest step)`` of up to ``count`` threads after ``after``, in order.

        Each round trip reads a bounded window of the listing index, newest step
        first within a thread, and keeps each thread's first key. Every thread
        whose first key is in the window is complete, the last one included, so
        the next window starts after it, sized by the keys per thread seen.
        """
        found: list[tuple[str, int]] = []
        window = min(_MAX_WINDOW, _KEYS_PER_THREAD * count)
        while len(found) < count:
            match: Document = {"n": self._ns}
            if after is not None:
                match["t"] = {"$gt": after}
            pipeline: list[Document] = [
                {"$match": match},
                {"$sort": _NEWEST_FIRST},
                {"$limit": window},
                {"$group": {"_id": "$t", "s": {"$first": "$s"}, "keys": {"$sum": 1}}},
                {"$sort": {"_id": 1}},
            ]
            groups = await (await self._coll.aggregate(pipeline, hint=THREADS_INDEX)).to_list()
            found += [(g["_id"], g["s"]) for g in groups]
            if sum(g["keys"] for g in groups) < window:
                break
            after = groups[-1]["_id"]
            # Size the next window by the keys per thread seen so far, at least doubling.
            wanted = math.ceil(1.25 * window / len(groups) * (count - len(found)))
            window = min(_MAX_WINDOW, max(2 * window, wanted))
        return found[:count]
