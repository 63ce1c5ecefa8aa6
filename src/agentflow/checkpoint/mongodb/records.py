"""The stored shape of a durable record in its thread's document, and each write's filter
and update.

A thread's record lives in the thread document ``_id: {n, t}`` (beside its
summary, :mod:`~agentflow.checkpoint.mongodb.documents`):

- the :class:`~agentflow.checkpoint.rows.RunHead` fields by name (the status as
  its wire name, None as null, the lease in epoch milliseconds);
- ``body``, the body bytes, and ``journal: {model: [...], tool: [...]}``, one
  bytes value per entry, so a journal transition is ``$set`` of
  ``journal.tool.<i>``;
- ``rs``, the thread status the record's status imposes (present only then),
  set by the same update that writes the status.

Two partial indexes (a status that is text: thread documents holding a
record) hold every field of a :class:`~agentflow.checkpoint.rows.RunSummary`,
``(_id.n, _id.t, status, ...)`` for a namespace in key order and
``(_id.n, status, _id.t, ...)`` for one status: a listing page is a covered
query that reads index entries only, never a document and so never a body.

Every write's filter is its guard plus the document's shape (bytes for the
body, arrays for the journals), so a write never lands on a damaged
document. Claims and renewals compare the lease with ``$$NOW``, the server's
clock, inside the same command that writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, Final

from bson.int64 import Int64
from pymongo import IndexModel, UpdateOne
from pymongo.errors import BulkWriteError

from agentflow.checkpoint.mongodb.documents import Document, plain, summary_key
from agentflow.checkpoint.plans import Guard, JournalReplace, Write
from agentflow.checkpoint.rows import RunHead, RunRow
from agentflow.checkpoint.store_base import run_thread_status
from agentflow.durable.enums import CheckpointStatus, ClaimMode, OperationKind
from agentflow.durable.errors import DurableCorrupted, DurableError
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

LISTING_INDEX: Final = "agentflow_runs"
STATUS_INDEX: Final = "agentflow_run_status"
#: Claimed records by claim token: one holder's claims, a limit's live leases.
HOLDER_INDEX: Final = "agentflow_run_holders"
_ROW_INVALID: Final = "checkpoint_row_invalid"
_HEAD_FIELDS: Final = tuple(field.name for field in fields(RunHead))
#: Everything a record keeps in its thread's document: what a delete removes
#: (``df``: the run definition's digest, for a worker fleet's claims).
RECORD_FIELDS: Final = (*_HEAD_FIELDS, "body", "journal", "rs", "df")
#: What a summary holds besides key and status; both listing indexes end with these.
_SUMMARY_FIELDS: Final = (
    "revision",
    "cycle_index",
    "resume_attempt",
    "claimed_cycle",
    "lease_expires_at_ms",
    "terminal",
    "terminal_acknowledged",
    "ambiguous",
)
#: The fields that say a thread document holds a record, any one of them: damage
#: that removes some leaves a record, which then fails its checks.
_MARKS: Final = frozenset({"revision", "status", "identity", "body", "journal"})
RECORDED: Final = {"$or": [{name: {"$exists": True}} for name in sorted(_MARKS)]}
UNRECORDED: Final = {"$nor": RECORDED["$or"]}
#: A projection that is enough for :func:`holds_record`.
MARKS_READ: Final = dict.fromkeys(sorted(_MARKS), 1)
#: The partial filter of both listing indexes (a status that is text), which the
#: unfiltered listing repeats so the planner may use them; it must name a field
#: of the index for the page to be covered. A status damaged to another type
#: leaves the listings; a whole read of the record still raises.
_LISTED: Final = {"status": {"$gte": ""}}
RECORD_INDEXES: Final = [
    IndexModel(
        [("_id.n", 1), ("_id.t", 1), ("status", 1), *((name, 1) for name in _SUMMARY_FIELDS)],
        name=LISTING_INDEX,
        partialFilterExpression=_LISTED,
    ),
    IndexModel(
        [("_id.n", 1), ("status", 1), ("_id.t", 1), *((name, 1) for name in _SUMMARY_FIELDS)],
        name=STATUS_INDEX,
        partialFilterExpression=_LISTED,
    ),
    IndexModel(
        [("_id.n", 1), ("claim_token", 1)],
        name=HOLDER_INDEX,
        partialFilterExpression={"claim_token": {"$gt": ""}},
    ),
]
#: A listing's projection: index fields only, so the query is covered.
SUMMARY_READ: Final = {"_id.t": 1, "status": 1, **dict.fromkeys(_SUMMARY_FIELDS, 1)}
#: The server's clock in epoch milliseconds, as an aggregation expression.
NOW: Final = {"$toLong": "$$NOW"}
#: The fields of a document that every write requires to be of their type.
SHAPE: Final = {
    "body": {"$type": "binData"},
    "journal.model": {"$type": "array"},
    "journal.tool": {"$type": "array"},
}
#: A refused write's second read: the head, the server's now, and whether the shape holds.
HEAD_READ: Final = {
    "_id": 0,
    **dict.fromkeys(_HEAD_FIELDS, 1),
    "now": NOW,
    "intact": {
        "$and": [
            {"$eq": [{"$type": "$body"}, "binData"]},
            {"$isArray": ["$journal.model"]},
            {"$isArray": ["$journal.tool"]},
        ]
    },
}
LEASE: Final = {"_id": 0, "lease_expires_at_ms": 1}
#: What a planned write sets on an insert as the first statement of an ordered
#: command: an upsert whose guard does not hold attempts one and fails on it
#: (ImmutableField; DuplicateKey on a server that looks for the _id first).
_REFUSED: Final = {"_id": "refused"}
_REFUSED_CODES: Final = frozenset({66, 11000})
_CLAIMABLE: Final = [CheckpointStatus.RUNNING.value, CheckpointStatus.RECONCILIATION_REQUIRED.value]


def holds_record(doc: Document | None) -> bool:
    """Whether a thread document (read with ``MARKS_READ`` at least) holds a record."""
    return doc is not None and not _MARKS.isdisjoint(doc)


def check_text(text: str, code: str, what: str) -> str:
    """A caller's string BSON can hold; a lone surrogate is refused with ``code``."""
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise DurableError(code, f"{what} is not valid Unicode") from exc
    return text


def listing_filter(namespace: str, status: CheckpointStatus | None, after: str | None) -> Document:
    """The runs of a listing page: top-level fields only, so one index covers it."""
    found: Document = {"_id.n": namespace, **_LISTED}
    if status is not None:
        found["status"] = status.value  # which implies the partial filter
    if after is not None:
        found["_id.t"] = {"$gt": after}
    return found


def _head_fields(head: RunHead) -> Document:
    values = {name: getattr(head, name) for name in _HEAD_FIELDS}
    values["status"] = head.status.value
    return values


def _status_update(status: CheckpointStatus, update: Document) -> Document:
    """``update`` setting (or removing) ``rs`` for a record now in ``status``."""
    imposed = run_thread_status(status)
    if imposed is None:
        update["$unset"] = {"rs": ""}
    else:
        update.setdefault("$set", {})["rs"] = imposed
    return update


def record_fields(row: RunRow) -> Document:
    """Every field a record keeps in its thread's document (``rs`` included)."""
    values = {
        **_head_fields(row.head),
        "body": row.body,
        "journal": {"model": list(row.model_journal), "tool": list(row.tool_journal)},
    }
    imposed = run_thread_status(row.head.status)
    return values if imposed is None else values | {"rs": imposed}


def _count(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_WIRE_INTEGER


def _optional_count(value: object) -> bool:
    return value is None or _count(value)


def _flag(value: object) -> bool:
    return type(value) is bool


_STATUSES: Final = frozenset(status.value for status in CheckpointStatus)
_MISSING: Final = object()
_VALID: Final[dict[str, Callable[[object], bool]]] = {
    "revision": _count,
    "status": lambda value: value in _STATUSES,
    "cycle_index": _count,
    "resume_attempt": _count,
    "claim_token": lambda value: value is None or isinstance(value, str),
    "claimed_cycle": _optional_count,
    "lease_expires_at_ms": _optional_count,
    "terminal": _flag,
    "terminal_acknowledged": _flag,
    "ambiguous": _flag,
    "identity": lambda value: isinstance(value, str),
}


def _checked(key: str, doc: Document, names: tuple[str, ...]) -> dict[str, Any]:
    """The named fields of ``doc``, each of its stored type and range, else DurableCorrupted."""
    values: dict[str, Any] = {name: plain(doc.get(name, _MISSING)) for name in names}
    damaged = sorted(name for name, value in values.items() if not _VALID[name](value))
    if damaged:
        raise DurableCorrupted(
            _ROW_INVALID, f"stored head of {key!r} has damaged fields: {', '.join(damaged)}"
        )
    values["status"] = CheckpointStatus(values["status"])
    return values


def head_from(key: str, doc: Document) -> RunHead:
    """The head a thread document's record holds."""
    return RunHead(**_checked(key, doc, _HEAD_FIELDS))


def summary_from(doc: Document) -> RunSummary:
    """A listing entry from a covered read (``SUMMARY_READ``)."""
    names = doc.get("_id")
    key = names.get("t") if isinstance(names, dict) else None
    if not isinstance(key, str):
        raise DurableCorrupted(_ROW_INVALID, "a listing index holds a key that is not a string")
    values = _checked(key, doc, ("status", *_SUMMARY_FIELDS))
    claimed = values.pop("claimed_cycle") is not None
    return RunSummary(key=key, claimed=claimed, **values)


def _entries(key: str, journal: object, kind: OperationKind) -> tuple[bytes, ...]:
    entries = journal.get(kind.value) if isinstance(journal, dict) else None
    if not isinstance(entries, list) or not all(isinstance(entry, bytes) for entry in entries):
        raise DurableCorrupted(_ROW_INVALID, f"stored {kind.value} journal of {key!r} is damaged")
    return tuple(entries)


def row_from(key: str, doc: Document) -> RunRow:
    """The row a thread document's record holds; every part checked."""
    body, journal = doc.get("body"), doc.get("journal")
    if not isinstance(body, bytes):
        raise DurableCorrupted(_ROW_INVALID, f"stored body of {key!r} is missing or not bytes")
    if not isinstance(journal, dict) or set(journal) != {"model", "tool"}:
        raise DurableCorrupted(_ROW_INVALID, f"stored journals of {key!r} are damaged")
    return RunRow(
        key,
        head_from(key, doc),
        body,
        _entries(key, journal, OperationKind.MODEL),
        _entries(key, journal, OperationKind.TOOL),
    )


def intact(doc: Document) -> bool:
    """Whether a ``HEAD_READ`` found the shape every write requires."""
    return doc.get("intact") is True


def lease_from(key: str, doc: Document | None) -> int | None:
    """The stored lease a write returned (``LEASE``)."""
    lease = plain((doc or {}).get("lease_expires_at_ms", _MISSING))
    if not _optional_count(lease):
        raise DurableCorrupted(_ROW_INVALID, f"stored lease of {key!r} is damaged")
    assert lease is None or isinstance(lease, int)
    return lease


def guard_filter(namespace: str, key: str, guard: Guard) -> Document:
    """What the stored document must hold for a planned write to apply: every field
    the guard sets (the claimed cycle only under a claim), and the shape."""
    compared = {field.name: getattr(guard, field.name) for field in fields(Guard)}
    if guard.claim_token is None:
        del compared["claimed_cycle"]
        compared["claim_token"] = {"$type": "null"}  # unclaimed: null, not a missing field
    held = {name: value for name, value in compared.items() if value is not None}
    return {"_id": summary_key(namespace, key), **held, **SHAPE}


def write_update(write: Write) -> tuple[Document, Document]:
    """The shape conditions a write's journal change adds to its filter, and its update.

    A journal put at ``i`` needs the stored journal to reach ``i`` already (or an
    earlier put of the same write to have written ``i - 1``), so MongoDB never
    pads it with nulls.
    """
    values = _head_fields(write.head)
    if write.keep_lease:
        del values["lease_expires_at_ms"]
    if write.body is not None:
        values["body"] = write.body
    reaches: Document = {}
    if isinstance(write.journal, JournalReplace):
        values["journal"] = {"model": list(write.journal.model), "tool": list(write.journal.tool)}
    elif write.journal:
        written: set[tuple[str, int]] = set()
        needed: dict[str, int] = {}
        for put in write.journal:
            kind, index = put.kind.value, put.index
            values[f"journal.{kind}.{index}"] = put.entry
            if index and (kind, index - 1) not in written:
                needed[kind] = max(needed.get(kind, 0), index - 1)
            written.add((kind, index))
        reaches = {f"journal.{kind}.{index}": {"$exists": True} for kind, index in needed.items()}
    return reaches, _status_update(write.head.status, {"$set": values})


def first_statement(found: Document, update: Document) -> UpdateOne:
    """A planned write (its filter and update) as the first statement of an ordered
    command: it matches when the guard holds and fails when it does not, so the
    command stops before its other statements."""
    return UpdateOne(found, update | {"$setOnInsert": _REFUSED}, upsert=True)


def refused_first(exc: BulkWriteError) -> bool:
    """Whether an ordered command failed on its :func:`first_statement`'s guard."""
    errors = exc.details.get("writeErrors") or [{}]
    return errors[0].get("index") == 0 and errors[0].get("code") in _REFUSED_CODES


def claim_filter(
    namespace: str, key: str, cycle_index: int, lease_ms: int, mode: ClaimMode
) -> Document:
    """Every rule of :func:`~agentflow.checkpoint.claims.claim_refusal` (and the
    overflow checks of :func:`~agentflow.checkpoint.claims.claimed_head`), on ``$$NOW``."""
    found: Document = {
        "_id": summary_key(namespace, key),
        "terminal": False,
        "cycle_index": cycle_index - 1,
        "revision": {"$lt": MAX_WIRE_INTEGER},
        **SHAPE,
        "$expr": {
            "$and": [
                # null sorts before every number: an unclaimed run passes
                {"$lte": ["$lease_expires_at_ms", NOW]},
                {"$lte": [{"$add": [NOW, lease_ms]}, MAX_WIRE_INTEGER]},
            ]
        },
    }
    if mode is ClaimMode.RECOVERY:
        found["status"] = {"$in": _CLAIMABLE}
        found["resume_attempt"] = {"$lt": MAX_WIRE_INTEGER}
    else:
        found["status"] = CheckpointStatus.RUNNING.value
        found["lease_expires_at_ms"] = {"$type": "null"}
        found["ambiguous"] = False
    return found


def claim_update(
    claim_token: str, cycle_index: int, lease_ms: int, mode: ClaimMode
) -> list[Document]:
    """The head after a claim (:func:`~agentflow.checkpoint.claims.claimed_head`), as a
    pipeline; a claimed record is running, so it imposes no thread status."""
    values: Document = {
        "revision": {"$add": ["$revision", 1]},
        "status": {"$literal": CheckpointStatus.RUNNING.value},
        "claim_token": {"$literal": claim_token},
        "claimed_cycle": {"$literal": cycle_index},
        "lease_expires_at_ms": {"$add": [NOW, Int64(lease_ms)]},
        "rs": "$$REMOVE",
    }
    if mode is ClaimMode.RECOVERY:
        values["resume_attempt"] = {"$add": ["$resume_attempt", 1]}
    return [{"$set": values}]


def renew_filter(namespace: str, key: str, claim_token: str, lease_ms: int) -> Document:
    """The caller's claim with a live lease (expiry > ``$$NOW``) and room to extend it."""
    return {
        "_id": summary_key(namespace, key),
        "claim_token": claim_token,
        "lease_expires_at_ms": {"$type": "number"},
        "$expr": {
            "$and": [
                {"$gt": ["$lease_expires_at_ms", NOW]},
                {"$lte": [{"$add": [NOW, lease_ms]}, MAX_WIRE_INTEGER]},
            ]
        },
    }


def renew_update(lease_ms: int) -> list[Document]:
    """The lease, and nothing else, set to now + ``lease_ms``."""
    return [{"$set": {"lease_expires_at_ms": {"$add": [NOW, Int64(lease_ms)]}}}]
