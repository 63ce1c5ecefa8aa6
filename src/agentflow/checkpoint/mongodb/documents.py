"""The stored shape of :class:`~agentflow.checkpoint.mongodb.MongoCheckpointer`.

Building checkpoint documents and updates, decoding them back, the indexes, and
the mapping of PyMongo errors to agentflow's. docs/mongodb.md describes the layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pymongo import IndexModel
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    PyMongoError,
    WriteConcernError,
)

from agentflow.checkpoint.base import Checkpoint, ThreadInfo
from agentflow.checkpoint.codec import EncodedCheckpoint, decode
from agentflow.errors import (
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    StoreUnavailable,
)

Document = dict[str, Any]

#: MongoDB's fixed BSON document limit, and room for every field but the payload.
MAX_DOCUMENT = 16 * 1024 * 1024
_FIELDS_HEADROOM = 4096

#: Every checkpoint, newest step first within a thread: a listing page reads the
#: first key of each thread from it (covered, no document fetched).
THREADS_INDEX = "agentflow_threads"
_THREADS = IndexModel([("n", 1), ("t", 1), ("s", -1)], name=THREADS_INDEX)
#: One small registry entry per thread, ``_id: {n, t}`` with ``tn, tt`` repeated for
#: this index, which holds registry entries only: a listing page is a keyset range of it.
REGISTRY_INDEX = "agentflow_thread_registry"
_REGISTRY = IndexModel(
    [("tn", 1), ("tt", 1)],
    name=REGISTRY_INDEX,
    partialFilterExpression={"tn": {"$exists": True}},
)
#: With ttl: MongoDB's TTL monitor, and the stale documents of one thread for a refresh.
_TTL_INDEXES = [
    IndexModel([("expires_at", 1)], name="agentflow_expiry", expireAfterSeconds=0),
    IndexModel([("n", 1), ("t", 1), ("expires_at", 1)], name="agentflow_thread_expiry"),
]

PAYLOAD = {"_id": 1, "rev": 1, "payload": 1}
STATUS = {"_id": 1, "interrupted": 1, "done": 1, "ts": 1, "wake_at": 1}


def indexes(ttl: bool) -> list[IndexModel]:
    """The indexes ``setup()`` creates."""
    return [_THREADS, _REGISTRY, *_TTL_INDEXES] if ttl else [_THREADS, _REGISTRY]


def check_size(enc: EncodedCheckpoint, namespace: str) -> None:
    """Refuse what MongoDB would refuse, before anything is sent."""
    size = len(enc.payload) + 2 * (len(enc.thread.encode()) + len(namespace.encode()))
    if size + _FIELDS_HEADROOM > MAX_DOCUMENT:
        raise InvalidArgument(
            f"checkpoint of thread {enc.thread!r} step {enc.step} encodes to {len(enc.payload):,} "
            f"bytes; MongoDB documents are limited to {MAX_DOCUMENT:,}"
        )


def new_document(namespace: str, enc: EncodedCheckpoint, expires: datetime | None) -> Document:
    """A checkpoint written for the first time: revision 1.

    ``n, t, s`` appear twice: in ``_id`` (uniqueness, exact reads, ranges) and at the
    top level, where the listing index can see them.
    """
    thread, step = enc.thread, enc.step
    doc: Document = {
        "_id": {"n": namespace, "t": thread, "s": step},
        "n": namespace,
        "t": thread,
        "s": step,
        "rev": 1,
        "payload": enc.payload,
        "ts": enc.ts,
        "ts_us": enc.ts_us,
        "interrupted": enc.interrupted,
        "done": enc.done,
        "wake_at": enc.wake_at,
    }
    if expires is not None:
        doc["expires_at"] = expires
    return doc


def registration(namespace: str, thread: str, expires: datetime | None) -> Document:
    """The update that creates a thread's registry entry, or keeps it: for a live
    entry (no ``empty_since`` mark, expiry not earlier) it matches and modifies nothing."""
    update: Document = {
        "$setOnInsert": {"tn": namespace, "tt": thread},
        "$unset": {"empty_since": ""},
    }
    if expires is not None:
        update["$max"] = {"expires_at": expires}
    return update


def rewrite(namespace: str, enc: EncodedCheckpoint, expires: datetime | None) -> Document:
    """The update that writes ``enc`` over a stored step (or inserts it) and counts one revision."""
    update: Document = {
        "$set": {
            "n": namespace,
            "t": enc.thread,
            "s": enc.step,
            "payload": enc.payload,
            "ts": enc.ts,
            "ts_us": enc.ts_us,
            "interrupted": enc.interrupted,
            "done": enc.done,
            "wake_at": enc.wake_at,
        },
        "$inc": {"rev": 1},
    }
    if expires is not None:
        update["$max"] = {"expires_at": expires}
    return update


def decode_document(doc: Document, thread: str) -> Checkpoint:
    """Decode a stored checkpoint, refusing one whose payload belongs to another key."""
    payload, rev = doc.get("payload"), doc.get("rev")
    if not isinstance(payload, bytes) or type(rev) is not int or rev < 1:
        raise CheckpointCorrupted(f"checkpoint {doc['_id']!r} has no valid payload or revision")
    cp = decode(payload, rev)
    if cp.thread != thread or cp.step != doc["_id"].get("s"):
        raise CheckpointCorrupted(f"checkpoint {doc['_id']!r} holds another key's payload")
    return cp


def thread_info(doc: Document) -> ThreadInfo:
    """The listing entry of a thread, from its latest checkpoint (``STATUS`` fields)."""
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


def _unavailable(exc: PyMongoError) -> bool:
    """A dropped connection, a failover, or a timeout: the same call may succeed later."""
    return (
        isinstance(exc, ConnectionFailure | WriteConcernError)
        or exc.timeout
        or exc.has_error_label("RetryableWriteError")
        or (isinstance(exc, BulkWriteError) and bool(exc.details.get("writeConcernErrors")))
    )


@contextmanager
def driver_errors(operation: str) -> Iterator[None]:
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
