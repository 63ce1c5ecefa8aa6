"""A MongoDB checkpointer on PyMongo's native asyncio client.

One collection holds checkpoints, keyed ``_id: {n: namespace, t: thread, s: step}``
(the unique index on (namespace, thread, step) is the ``_id`` index itself), and one
summary per thread, ``_id: {n, t}``, holding only the highest step. A put is one
ordered bulk write, summary first: one round trip, and the summary is never behind
the checkpoints. When it is ahead (a lost compare-and-set, or a server that died
between the two writes) the listing reads the real latest step instead, and
prune/delete recompute it. docs/mongodb.md has the layout, indexes and guarantees.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from bson import MaxKey, MinKey
from pymongo import AsyncMongoClient, IndexModel, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    ConnectionFailure,
    InvalidName,
    PyMongoError,
)
from pymongo.write_concern import WriteConcern

from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    EncodedCheckpoint,
    decode,
    encode,
    parse_instant,
    validate_namespace,
    validate_step,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.paging import check_page_args, check_prune_bounds
from agentflow.checkpoint.redaction import redact_none
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    StoreUnavailable,
)

__all__ = ["MongoCheckpointer"]

_BACKEND = "mongodb"
Document = dict[str, Any]

#: MongoDB's fixed BSON document limit, and room for every field but the payload.
_MAX_DOCUMENT = 16 * 1024 * 1024
_FIELDS_HEADROOM = 4096
#: Checkpoints per history round trip: bounds memory, amortizes the round trip.
_HISTORY_BATCH = 256
#: Thread summaries only, so a listing page walks one entry per thread.
_THREADS_INDEX = IndexModel(
    [("ns", 1), ("th", 1)],
    name="agentflow_threads",
    unique=True,
    partialFilterExpression={"latest": {"$exists": True}},
)
#: With ttl: MongoDB's TTL monitor, and the stale documents of one thread for a refresh.
_TTL_INDEXES = [
    IndexModel([("expires_at", 1)], name="agentflow_expiry", expireAfterSeconds=0),
    IndexModel([("_id.n", 1), ("_id.t", 1), ("expires_at", 1)], name="agentflow_thread_expiry"),
]
#: Expiry times are rounded up to this many seconds (or the ttl if shorter), so
#: every write of a thread within one bucket finds its older documents already
#: refreshed and the refresh touches nothing.
_TTL_BUCKET_S = 60.0
#: Threads whose expiry this checkpointer pushed back in the current bucket; the
#: memo is dropped when it grows past this, costing one no-op refresh per thread.
_REFRESH_MEMO = 10_000
_RESYNC_ATTEMPTS = 8
_DUPLICATE_KEY = 11000
_PAYLOAD = {"_id": 1, "rev": 1, "payload": 1}
_STATUS = {"_id": 1, "interrupted": 1, "done": 1, "ts": 1, "wake_at": 1}
_EXPIRY = {"_id": 1, "expires_at": 1}


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
        with _driver_errors("setup"):
            listing = await self._coll.database.list_collections(filter={"name": self._coll.name})
            info = await listing.to_list()
            collation = info[0].get("options", {}).get("collation") if info else None
            if collation and collation.get("locale") != "simple":
                raise InvalidArgument(
                    f"collection {self._coll.name!r} has a default collation; "
                    "agentflow needs the simple (binary) collation"
                )
            ttl_indexes = _TTL_INDEXES if self._ttl is not None else []
            await self._coll.create_indexes([_THREADS_INDEX, *ttl_indexes])
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

    def _key(self, thread: str, step: Any = None) -> Document:
        """The ``_id`` of a checkpoint, or of the thread's summary when ``step`` is None.

        Field order is part of the key: BSON compares embedded documents field by
        field, which is what makes a thread's checkpoints one contiguous,
        step-ordered range of the ``_id`` index, right after its summary.
        """
        if step is None:
            return {"n": self._ns, "t": thread}
        return {"n": self._ns, "t": thread, "s": step}

    def _steps(self, thread: str, before: int | None = None) -> Document:
        """An ``_id`` range over the thread's checkpoints (excluding its summary)."""
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
        _check_size(enc, self._ns)
        await self._ready()
        thread, step = enc.thread, enc.step
        key = self._key(thread, step)
        update: Document = {
            "$set": {
                "payload": enc.payload,
                "ts": enc.ts,
                "ts_us": enc.ts_us,
                "interrupted": enc.interrupted,
                "done": enc.done,
                "wake_at": enc.wake_at,
            },
            "$inc": {"rev": 1},
        }
        raise_latest: Document = {"latest": step}
        if self._ttl is not None:
            expires = self._expiry()
            update["$max"] = {"expires_at": expires}
            raise_latest["expires_at"] = expires
            await self._refresh_expiry(thread, expires)
        summary = UpdateOne(
            {"_id": self._key(thread)},
            {"$max": raise_latest, "$setOnInsert": {"ns": self._ns, "th": thread}},
            upsert=True,
        )
        if if_revision is None:
            # Equality on _id only: the server retries a racing upsert's duplicate
            # key itself, so concurrent unconditional puts never lose a revision.
            write = UpdateOne({"_id": key}, update, upsert=True)
        elif if_revision == 0:
            # Matches nothing stored; the upsert's insert then hits the _id index
            # when the step exists, and that duplicate key is the conflict.
            write = UpdateOne({"_id": key, "rev": {"$exists": False}}, update, upsert=True)
        else:
            write = UpdateOne({"_id": key, "rev": if_revision}, update)
        with _driver_errors("put"):
            try:
                result = await self._coll.bulk_write([summary, write], ordered=True)
            except BulkWriteError as exc:
                if if_revision is None or not _duplicate_at(exc, 1):
                    raise
                written = False
            else:
                # matched_count covers both writes; the summary matched unless inserted.
                summary_matched = 0 if 0 in (result.upserted_ids or {}) else 1
                written = not if_revision or result.matched_count - summary_matched == 1
            if not written:
                assert if_revision is not None
                current = await self._coll.find_one({"_id": key}, {"rev": 1})
                raise CheckpointConflict(
                    thread, step, if_revision, current["rev"] if current else 0
                )
        return f"{thread}:{step}"

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
        with _driver_errors("put"):
            await self._coll.update_many(
                {"_id.n": self._ns, "_id.t": thread, "expires_at": {"$not": {"$gte": expires}}},
                {"$set": {"expires_at": expires}},
            )
        if len(self._refreshed) >= _REFRESH_MEMO:
            self._refreshed.clear()
        self._refreshed[thread] = expires

    async def delete_thread(self, thread: str) -> None:
        thread = validate_thread(thread)
        everything = {"$gte": self._key(thread), "$lte": self._key(thread, MaxKey())}
        await self._delete(thread, {"_id": everything})

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        thread = validate_thread(thread)
        query: Document = {"_id": self._steps(thread, before_step)}
        if older_than is not None:
            query["ts_us"] = {"$lt": parse_instant(older_than, what="older_than")}
        return await self._delete(thread, query)

    async def _delete(self, thread: str, query: Document) -> int:
        """Delete with one ``delete_many``, then set the summary to the real latest step.

        A put racing with us may raise the summary between our read of the
        latest step and our write of it, which would lower it again; re-reading
        after writing catches exactly that case, and we go round once more.
        """
        await self._ready()
        with _driver_errors("delete"):
            deleted = (await self._coll.delete_many(query)).deleted_count
            latest = await self._latest(thread, _EXPIRY) if deleted else None
            for _ in range(_RESYNC_ATTEMPTS if deleted else 0):
                if latest is None:
                    await self._coll.delete_one({"_id": self._key(thread)})
                else:
                    fields = {"latest": latest["_id"]["s"], "expires_at": latest.get("expires_at")}
                    await self._coll.update_one(
                        {"_id": self._key(thread)},
                        {"$set": fields, "$setOnInsert": {"ns": self._ns, "th": thread}},
                        upsert=True,
                    )
                again = await self._latest(thread, _EXPIRY)
                if _step_of(again) == _step_of(latest):
                    break
                latest = again
        return deleted

    # -- reads -------------------------------------------------------------

    async def _latest(self, thread: str, projection: Mapping[str, int]) -> Document | None:
        return await self._coll.find_one(
            {"_id": self._steps(thread)}, projection, sort=[("_id", -1)]
        )

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        thread = validate_thread(thread)
        with _driver_errors("get"):
            if step is None:
                doc = await self._latest(thread, _PAYLOAD)
            else:
                doc = await self._coll.find_one(
                    {"_id": self._key(thread, validate_step(step))}, _PAYLOAD
                )
        return None if doc is None else _decode(doc, thread)

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        thread = validate_thread(thread)
        cursor = self._coll.find(
            {"_id": self._steps(thread)}, _PAYLOAD, sort=[("_id", 1)], batch_size=_HISTORY_BATCH
        )
        try:
            while True:
                with _driver_errors("history"):
                    docs = await cursor.to_list(_HISTORY_BATCH)
                if not docs:
                    return
                for doc in docs:
                    yield _decode(doc, thread)
        finally:
            await cursor.close()

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        check_page_args(limit, offset)
        return (await self._summaries({}, limit=limit, skip=offset))[1]

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        after: Document = {}
        if cursor is not None:
            after = {"th": {"$gt": decode_cursor(_BACKEND, self._ns, cursor)}}
        last, infos = await self._summaries(after, limit=limit, skip=0, peek=True)
        return ThreadPage(infos, encode_cursor(_BACKEND, self._ns, last) if last else None)

    async def _summaries(
        self, extra: Document, *, limit: int, skip: int, peek: bool = False
    ) -> tuple[str | None, list[ThreadInfo]]:
        """A page of threads with their status, read from each latest checkpoint.

        One indexed read of summaries and one indexed ``$in`` of their
        checkpoints; a summary that is ahead of its thread (see the module
        docstring) costs one more read, and a thread with no checkpoint left is
        skipped. With ``peek``, one summary more is read to tell whether another
        page follows; the last thread of this page is returned when one does.
        """
        await self._ready()
        query = {"ns": self._ns, "latest": {"$exists": True}, **extra}
        with _driver_errors("list_threads"):
            summaries = await self._coll.find(
                query,
                {"_id": 0, "th": 1, "latest": 1},
                sort=[("th", 1)],
                skip=skip,
                limit=limit + int(peek),
            ).to_list()
            more = len(summaries) > limit
            summaries = summaries[:limit]
            keys = [self._key(s["th"], s["latest"]) for s in summaries]
            found = await self._coll.find({"_id": {"$in": keys}}, _STATUS).to_list() if keys else []
            by_key = {(d["_id"]["t"], d["_id"]["s"]): d for d in found}
            infos = []
            for summary in summaries:
                doc = by_key.get((summary["th"], summary["latest"]))
                if doc is None:
                    doc = await self._latest(summary["th"], _STATUS)
                if doc is not None:
                    infos.append(_info(doc))
        return (summaries[-1]["th"] if more else None), infos


def _step_of(doc: Document | None) -> int | None:
    return None if doc is None else int(doc["_id"]["s"])


def _check_size(enc: EncodedCheckpoint, namespace: str) -> None:
    """Refuse what MongoDB would refuse, before any write of the put is sent."""
    size = len(enc.payload) + 3 * len(enc.thread.encode()) + len(namespace.encode())
    if size + _FIELDS_HEADROOM > _MAX_DOCUMENT:
        raise InvalidArgument(
            f"checkpoint of thread {enc.thread!r} step {enc.step} encodes to {len(enc.payload):,} "
            f"bytes; MongoDB documents are limited to {_MAX_DOCUMENT:,}"
        )


def _decode(doc: Document, thread: str) -> Checkpoint:
    """Decode a stored checkpoint, refusing one whose payload belongs to another key."""
    payload, rev = doc.get("payload"), doc.get("rev")
    if not isinstance(payload, bytes) or type(rev) is not int or rev < 1:
        raise CheckpointCorrupted(f"checkpoint {doc['_id']!r} has no valid payload or revision")
    cp = decode(payload, rev)
    if cp.thread != thread or cp.step != doc["_id"].get("s"):
        raise CheckpointCorrupted(f"checkpoint {doc['_id']!r} holds another key's payload")
    return cp


def _info(doc: Document) -> ThreadInfo:
    try:
        info = ThreadInfo(
            thread=doc["_id"]["t"],
            latest_step=doc["_id"]["s"],
            interrupted=doc["interrupted"],
            done=doc["done"],
            ts=doc["ts"],
            wake_at=doc["wake_at"],
        )
    except KeyError as exc:
        raise CheckpointCorrupted(f"stored checkpoint {doc.get('_id')!r} lacks {exc}") from exc
    if {type(info.interrupted), type(info.done)} != {bool} or not isinstance(info.ts, str):
        raise CheckpointCorrupted(f"stored checkpoint {doc['_id']!r} has a malformed status")
    return info


def _duplicate_at(exc: BulkWriteError, index: int) -> bool:
    errors = exc.details.get("writeErrors", [])
    return len(errors) == 1 and errors[0]["index"] == index and errors[0]["code"] == _DUPLICATE_KEY


def _unavailable(exc: PyMongoError) -> bool:
    """A dropped connection, a failover, or a timeout: the same call may succeed later."""
    return (
        isinstance(exc, ConnectionFailure)
        or exc.timeout
        or exc.has_error_label("RetryableWriteError")
        or (isinstance(exc, BulkWriteError) and bool(exc.details.get("writeConcernErrors")))
    )


@contextmanager
def _driver_errors(operation: str) -> Iterator[None]:
    """Map a PyMongo error to agentflow's, keeping it as ``__cause__``.

    The message names the error class and code only: driver messages can carry
    host names and query fragments.
    """
    try:
        yield
    except PyMongoError as exc:
        code = getattr(exc, "code", None)
        detail = f"{type(exc).__name__}" + (f" (code {code})" if code is not None else "")
        if _unavailable(exc):
            raise StoreUnavailable(f"MongoDB unavailable during {operation}: {detail}") from exc
        raise CheckpointError(f"MongoDB failed during {operation}: {detail}") from exc
