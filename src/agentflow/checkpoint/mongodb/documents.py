"""The stored shape of the MongoDB backend's checkpoints and thread documents.

One collection holds three kinds of document, told apart by their ``_id``
(docs/mongodb.md has the layout and why):

- a checkpoint, ``_id: {n, t, s}`` (namespace, thread, step), with ``n, t, s``
  repeated at the top level for the ``(n, t, s desc)`` index;
- a thread, ``_id: {n, t}``: while the thread has checkpoints, its summary
  (``tn, tt`` repeated for the listing indexes, the latest step's number
  ``ls``, revision ``lr``, status ``st``, ``ts``, wake time ``wa`` and, while
  it waits on a timer, its instant ``wk``); while it has a durable record, the
  record (:mod:`~agentflow.checkpoint.mongodb.records`), and ``rs``, the
  thread status the record imposes, if any. One document, so a record write
  sets ``rs`` in the same single-document update;
- store metadata, ``_id: {m: name}`` (the schema version, the cursor secret).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final, get_args

from bson import MaxKey, MinKey
from bson.int64 import Int64
from pymongo import IndexModel

from agentflow.checkpoint.backend import EncodedCheckpoint, StoredRow
from agentflow.checkpoint.base import ThreadInfo, ThreadStatus
from agentflow.checkpoint.store_base import RUN_STATUSES
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointCorrupted, InvalidArgument

Document = dict[str, Any]

#: MongoDB's fixed BSON document limit, and room for every field but the payload.
MAX_DOCUMENT: Final = 16 * 1024 * 1024
_FIELDS_HEADROOM: Final = 4096

#: Every checkpoint, newest step first within a thread: the latest step is one seek.
THREADS_INDEX: Final = "agentflow_threads"
#: Summaries in thread order: the unfiltered listing.
LISTING_INDEX: Final = "agentflow_thread_registry"
#: Summaries by the latest step's status and the record's, then thread: the
#: filter on a checkpoint's status (``rs: null``, the record imposing none).
STATUS_INDEX: Final = "agentflow_thread_steps_status"
#: Summaries of threads whose record imposes a status, by it, then thread.
RUN_STATUS_INDEX: Final = "agentflow_thread_run_status"
#: Summaries of threads waiting on a timer, by wake instant then thread: ``list_due``.
DUE_INDEX: Final = "agentflow_due"
_INDEXES: Final = [
    IndexModel([("n", 1), ("t", 1), ("s", -1)], name=THREADS_INDEX),
    IndexModel(
        [("tn", 1), ("tt", 1)],
        name=LISTING_INDEX,
        partialFilterExpression={"tn": {"$exists": True}},
    ),
    IndexModel(
        [("tn", 1), ("st", 1), ("rs", 1), ("tt", 1)],
        name=STATUS_INDEX,
        partialFilterExpression={"tn": {"$exists": True}},
    ),
    IndexModel(
        [("tn", 1), ("rs", 1), ("tt", 1)],
        name=RUN_STATUS_INDEX,
        partialFilterExpression={"tn": {"$exists": True}, "rs": {"$exists": True}},
    ),
    IndexModel(
        [("tn", 1), ("wk", 1), ("tt", 1)],
        name=DUE_INDEX,
        partialFilterExpression={"wk": {"$exists": True}},
    ),
]
#: With ttl: MongoDB's TTL monitor, and the stale documents of one thread for a refresh.
_TTL_INDEXES: Final = [
    IndexModel([("expires_at", 1)], name="agentflow_expiry", expireAfterSeconds=0),
    IndexModel([("n", 1), ("t", 1), ("expires_at", 1)], name="agentflow_thread_expiry"),
]

PAYLOAD: Final = {"_id": 1, "rev": 1, "payload": 1}
#: What a summary is made from: the fields of a stored checkpoint that are not its state.
STATUS_FIELDS: Final = {
    "_id": 1,
    "rev": 1,
    "ts": 1,
    "interrupted": 1,
    "done": 1,
    "wake_at": 1,
    "expires_at": 1,
}
#: What a listing reads of a thread document.
INFO_FIELDS: Final = {"_id": 0, "tt": 1, "ls": 1, "st": 1, "ts": 1, "wa": 1, "rs": 1}
#: The fields that make a summary right or wrong (reconciliation compares these).
SUMMARY_KEYS: Final = ("ls", "lr", "st", "ts", "wa", "wk")
#: Every field of a summary: what goes when the thread's last checkpoint does.
SUMMARY_FIELDS: Final = ("tn", "tt", *SUMMARY_KEYS, "expires_at")
_STATUSES: Final = frozenset(get_args(ThreadStatus))
#: The statuses a record imposes on its thread (``rs``).
IMPOSED: Final = frozenset(RUN_STATUSES.values())


def indexes(ttl: bool) -> list[IndexModel]:
    """The indexes ``setup()`` creates."""
    return [*_INDEXES, *_TTL_INDEXES] if ttl else list(_INDEXES)


#: Expiry times are rounded up to this many seconds (or the ttl if shorter), so
#: every write of a thread within one bucket finds its older documents refreshed.
_TTL_BUCKET_S: Final = 60.0


def expiry(ttl: float) -> datetime:
    """When a thread written now expires, rounded up to its bucket."""
    bucket = min(ttl, _TTL_BUCKET_S)
    return datetime.fromtimestamp(math.ceil((time.time() + ttl) / bucket) * bucket, UTC)


def check_size(enc: EncodedCheckpoint, namespace: str) -> None:
    """Refuse what MongoDB would refuse, before anything is sent."""
    size = len(enc.payload) + 2 * (len(enc.thread.encode()) + len(namespace.encode()))
    if size + _FIELDS_HEADROOM > MAX_DOCUMENT:
        raise InvalidArgument(
            f"checkpoint of thread {enc.thread!r} step {enc.step} encodes to {len(enc.payload):,} "
            f"bytes; MongoDB documents are limited to {MAX_DOCUMENT:,}"
        )


def checkpoint_key(namespace: str, thread: str, step: Any) -> Document:
    """A checkpoint's ``_id``. BSON compares embedded documents field by field, so
    a thread's checkpoints are one step-ordered range of the ``_id`` index."""
    return {"n": namespace, "t": thread, "s": step}


def summary_key(namespace: str, thread: str) -> Document:
    """A summary's ``_id``: a prefix of its checkpoints', sorting just before them
    and outside every range of :func:`steps`."""
    return {"n": namespace, "t": thread}


def steps(namespace: str, thread: str, before: int | None = None) -> Document:
    """An ``_id`` range over a thread's checkpoints (below step ``before`` if given)."""
    low = checkpoint_key(namespace, thread, MinKey())
    if before is None:
        return {"$gte": low, "$lte": checkpoint_key(namespace, thread, MaxKey())}
    return {"$gte": low, "$lt": checkpoint_key(namespace, thread, before)}


def step_range(namespace: str, thread: str, after: int, before: int | None) -> Document:
    """An ``_id`` range over a thread's checkpoints with ``after < step < before``
    (``after`` -1: from the first; ``before`` None: to the last)."""
    low = "$gte", checkpoint_key(namespace, thread, MinKey() if after < 0 else after)
    if after >= 0:
        low = "$gt", low[1]
    high = checkpoint_key(namespace, thread, MaxKey() if before is None else before)
    return {low[0]: low[1], "$lt": high}


def plain(value: object) -> object:
    """``value`` with BSON's 64-bit integer type read back as a plain int, as stored."""
    return int(value) if type(value) is Int64 else value


def _status_fields(enc: EncodedCheckpoint) -> Document:
    return {
        "ts": enc.ts,
        "ts_us": enc.ts_us,
        "interrupted": enc.interrupted,
        "done": enc.done,
        "wake_at": enc.wake_at,
    }


def new_checkpoint(namespace: str, enc: EncodedCheckpoint, expires: datetime | None) -> Document:
    """A checkpoint written for the first time: revision 1.

    ``n, t, s`` appear twice: in ``_id`` (uniqueness, exact reads, ranges) and at the
    top level, where the ``(n, t, s desc)`` index can see them.
    """
    thread, step = enc.thread, enc.step
    doc: Document = {"_id": checkpoint_key(namespace, thread, step)}
    doc |= {"n": namespace, "t": thread, "s": step, "rev": 1, "payload": enc.payload}
    doc |= _status_fields(enc)
    if expires is not None:
        doc["expires_at"] = expires
    return doc


def rewrite(namespace: str, enc: EncodedCheckpoint, expires: datetime | None) -> Document:
    """The update that writes ``enc`` over a stored step (or inserts it) and counts one revision."""
    fields = {"n": namespace, "t": enc.thread, "s": enc.step, "payload": enc.payload}
    update: Document = {"$set": fields | _status_fields(enc), "$inc": {"rev": 1}}
    if expires is not None:
        update["$max"] = {"expires_at": expires}
    return update


def summary(
    namespace: str,
    thread: str,
    *,
    step: int,
    revision: int,
    status: ThreadStatus,
    ts: str,
    wake_at: str | None,
    wake_us: int | None,
) -> Document:
    """The summary of a thread whose latest step is ``step`` at ``revision``.

    ``wk`` is present only while the thread waits on a timer, so the partial
    due index holds exactly the threads ``list_due`` can return.
    """
    doc: Document = {"_id": summary_key(namespace, thread), "tn": namespace, "tt": thread}
    doc |= {"ls": step, "lr": revision, "st": status, "ts": ts, "wa": wake_at}
    if status == "waiting":
        doc["wk"] = wake_us
    return doc


def summary_of(namespace: str, enc: EncodedCheckpoint, revision: int) -> Document:
    """The summary a put of ``enc`` at ``revision`` gives its thread when it is the latest step."""
    return summary(
        namespace,
        enc.thread,
        step=enc.step,
        revision=revision,
        status=enc.status,
        ts=enc.ts,
        wake_at=enc.wake_at,
        wake_us=enc.wake_us,
    )


def _stored_status(interrupted: bool, done: bool, wake_at: str | None) -> ThreadStatus:
    if interrupted:
        return "waiting" if wake_at is not None else "interrupted"
    return "done" if done else "running"


def summary_of_stored(namespace: str, doc: Document) -> Document:
    """The summary a stored checkpoint (``STATUS_FIELDS``) gives its thread as its latest step."""
    key = doc.get("_id")
    thread, step = (key.get("t"), plain(key.get("s"))) if isinstance(key, dict) else (None, None)
    interrupted, done = doc.get("interrupted"), doc.get("done")
    ts, wake_at, revision = doc.get("ts"), doc.get("wake_at"), plain(doc.get("rev"))
    if not (
        isinstance(thread, str)
        and type(step) is int
        and type(revision) is int
        and type(interrupted) is bool
        and type(done) is bool
        and isinstance(ts, str)
        and (wake_at is None or isinstance(wake_at, str))
    ):
        raise CheckpointCorrupted(f"stored checkpoint {key!r} has a malformed status")
    status = _stored_status(interrupted, done, wake_at)
    try:
        wake_us = parse_instant(wake_at) if status == "waiting" else None
    except InvalidArgument as exc:
        raise CheckpointCorrupted(f"stored checkpoint {key!r} has a malformed wake_at") from exc
    return summary(
        namespace,
        thread,
        step=step,
        revision=revision,
        status=status,
        ts=ts,
        wake_at=wake_at,
        wake_us=wake_us,
    )


def newer_wins(doc: Document, expires: datetime | None) -> list[Document]:
    """An update pipeline that sets a thread's summary fields to ``doc`` unless it
    already names a later (step, revision): the summary converges to the highest,
    in any order the writes land. The record's fields are left as they are. It
    upserts on ``_id``. Every value is a ``$literal``, so a thread id such as
    ``"$where"`` is never read as a field path."""
    step, revision = doc["ls"], doc["lr"]
    newer = {
        "$or": [
            {"$lt": ["$ls", step]},
            {"$and": [{"$eq": ["$ls", step]}, {"$lt": ["$lr", revision]}]},
        ]
    }
    fields: Document = {
        name: {"$cond": [newer, {"$literal": value}, f"${name}"]}
        for name, value in doc.items()
        if name != "_id"
    }
    if "wk" not in doc:
        fields["wk"] = {"$cond": [newer, "$$REMOVE", "$wk"]}
    stages: list[Document] = [{"$set": fields}]
    if expires is not None:
        latest = {"$max": ["$expires_at", {"$literal": expires}]}
        stages.append({"$set": {"expires_at": latest}})
    return stages


def thread_info(doc: Document) -> ThreadInfo:
    """The listing entry of a thread, from its summary (``INFO_FIELDS``)."""
    thread, step, status = doc.get("tt"), plain(doc.get("ls")), doc.get("st")
    ts, wake_at, imposed = doc.get("ts"), doc.get("wa"), doc.get("rs")
    if (
        isinstance(thread, str)
        and type(step) is int
        and step >= 0
        and status in _STATUSES - IMPOSED
        and isinstance(ts, str)
        and (wake_at is None or isinstance(wake_at, str))
        and (imposed is None or imposed in IMPOSED)
    ):
        suspended = status in ("interrupted", "waiting")
        info = ThreadInfo(thread, step, suspended, status == "done", ts, wake_at)
        if info.status == status:
            return replace(info, run_status=imposed)
    raise CheckpointCorrupted(f"the summary of thread {thread!r} is malformed")


def stored_row(doc: Document) -> StoredRow:
    """A checkpoint document (``PAYLOAD`` fields) as the base checks and decodes it."""
    key, payload = doc.get("_id"), doc.get("payload")
    if not isinstance(payload, bytes) or not isinstance(key, dict):
        raise CheckpointCorrupted(f"checkpoint {key!r} has no valid payload")
    return StoredRow(plain(key.get("s")), plain(doc.get("rev")), payload)
