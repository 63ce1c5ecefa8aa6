"""The event part of the MongoDB store: an accepted-once log, one sequence per namespace.

An event is one document of ``<collection>_durable_events``, ``_id: {n, e}``
(namespace, event id), so the ``_id`` index accepts an id once across
connections and processes. It holds ``q``, its number in the namespace's
sequence (the unique index ``(_id.n, q)``), its run ``r`` and parent run
``p`` (``(_id.n, r, q)`` and ``(_id.n, p, q)``: a replay is one range of
each), and ``rp``/``pp``, the number of the event before it in its run's
sequence and in its parent's children (0 for none). An append reads where
the sequences end and inserts at end + 1; a racer that took the number makes
the insert fail on the unique index, and the append reads again. A number is
therefore taken only once the one before it is stored: the sequence is
gapless and becomes visible in order, so a cursor never passes an event that
becomes visible later. The ``rp``/``pp`` links make a missing event of a
replayed run damage that raises, not a silent gap.
"""

from __future__ import annotations

import abc
import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeVar

from pymongo import IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from agentflow.checkpoint.envelope import RunParts
from agentflow.checkpoint.envelope import stored_event as opened_event
from agentflow.checkpoint.events import EventsBase
from agentflow.checkpoint.mongodb.documents import Document, plain
from agentflow.checkpoint.mongodb.records import check_text
from agentflow.durable.errors import DurableConflict, DurableCorrupted
from agentflow.durable.run.events import AcceptedEvent, AppendOnceResult, resolve_append, run_member
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER, canonical_json

__all__ = ["EVENT_INDEXES", "MongoEvents"]

T = TypeVar("T")

SEQUENCE_INDEX: Final = "agentflow_event_sequence"
RUN_EVENTS_INDEX: Final = "agentflow_run_events"
CHILD_EVENTS_INDEX: Final = "agentflow_child_events"
EVENT_INDEXES: Final = [
    IndexModel([("_id.n", 1), ("q", 1)], name=SEQUENCE_INDEX, unique=True),
    IndexModel([("_id.n", 1), ("r", 1), ("q", 1)], name=RUN_EVENTS_INDEX),
    IndexModel(
        [("_id.n", 1), ("p", 1), ("q", 1)],
        name=CHILD_EVENTS_INDEX,
        partialFilterExpression={"p": {"$exists": True}},
    ),
]
#: Appends that lost the race for a number before one gives up.
_ATTEMPTS: Final = 64
#: The longest pause between two attempts, in seconds.
_BACKOFF_S: Final = 0.05
_ROW_INVALID: Final = "checkpoint_row_invalid"
_VALUE: Final = "checkpoint_value_invalid"


@dataclass(frozen=True, slots=True)
class _Stored:
    """An accepted event, its number, and the numbers of the events before it in
    its run (``rp``) and among its parent's children (``pp``)."""

    accepted: AcceptedEvent
    run: str | None
    q: int
    rp: int
    pp: int


def _number(value: object) -> int:
    value = plain(value)
    if type(value) is not int or not 0 <= value <= MAX_WIRE_INTEGER:
        raise ValueError(value)
    return value


def _family(event: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The event's run and its parent run (None when it names none, or its own run)."""
    run, parent = run_member(event, "run_id"), run_member(event, "parent_run_id")
    return run, None if parent == run else parent


def _stored(parts: RunParts, doc: Document) -> _Stored:
    """An event document, every part checked; the digest must match the opened bytes."""
    ident, data, digest = doc.get("_id"), doc.get("b"), doc.get("d")
    event_id = ident.get("e") if isinstance(ident, dict) else None
    where = f"stored event {event_id!r}"
    try:
        if not isinstance(event_id, str) or not isinstance(data, bytes):
            raise ValueError(doc)
        q, rp, pp = _number(doc.get("q")), _number(doc.get("rp")), _number(doc.get("pp", 0))
        if not rp < q > pp:
            raise ValueError(q)
    except ValueError as exc:
        raise DurableCorrupted(_ROW_INVALID, f"{where} is damaged") from exc
    accepted = opened_event(parts, event_id, digest, data, cursor={"sequence": q}, where=where)
    run, parent = _family(accepted.event)
    if doc.get("r", _ROW_INVALID) != run or doc.get("p") != parent:
        raise DurableCorrupted(_ROW_INVALID, f"{where} is filed under another run")
    return _Stored(accepted, run, q, rp, pp)


def _linked(chain: list[_Stored], after: int, link: str, run_id: str) -> None:
    """Refuse a chain (one run's events, or its children) whose links skip an event
    above ``after``: that event is missing."""
    previous: int | None = None
    for item in chain:
        before = getattr(item, link)
        if (before > after) if previous is None else (before != previous):
            raise DurableCorrupted(
                _ROW_INVALID, f"events of run {run_id!r} are missing: no number {before}"
            )
        previous = item.q


class MongoEvents(EventsBase, abc.ABC):
    """The event part of :class:`~agentflow.checkpoint.mongodb.MongoCheckpointer`."""

    _events: AsyncCollection[Document]

    @abc.abstractmethod
    async def _io(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` once the store is set up, the driver's errors as agentflow's."""

    def _event(self, event_id: str) -> Document:
        return {"_id": {"n": self._namespace, "e": event_id}}

    def _last(self, match: Document, label: str) -> Document:
        """A sub-pipeline: the end of one sequence, as ``{w: label, v: number}`` (none if empty)."""
        return {
            "$unionWith": {
                "coll": self._events.name,
                "pipeline": [
                    {"$match": {"_id.n": self._namespace, **match}},
                    {"$sort": {"q": -1}},
                    {"$limit": 1},
                    {"$project": {"_id": 0, "w": {"$literal": label}, "v": "$q"}},
                ],
            }
        }

    async def _ends(self, event_id: str, run: str | None, parent: str | None) -> dict[str, Any]:
        """One command: the event if it was accepted, and the ends of its sequences."""
        pipeline: list[Document] = [
            {"$match": self._event(event_id)},
            {"$set": {"w": {"$literal": "id"}}},
            self._last({}, "q"),
            self._last({"r": run}, "rp"),
        ]
        if parent is not None:
            pipeline.append(self._last({"p": parent}, "pp"))
        ends: dict[str, Any] = {}
        for doc in await (await self._events.aggregate(pipeline)).to_list():
            label = str(doc.get("w"))
            ends[label] = doc if label == "id" else doc.get("v")
        return ends

    async def _insert(self, document: Document) -> bool:
        try:
            await self._events.insert_one(document)
        except DuplicateKeyError:  # the id, or the number another append took first
            return False
        return True

    async def _append_once(
        self, event_id: str, payload_digest: str, computed_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        check_text(event_id, _VALUE, "event_id")
        if computed_digest != payload_digest:  # refused either way; the stored digest says how
            found = await self._io(
                "append_once", partial(self._events.find_one, self._event(event_id))
            )
            stored = None if found is None else _stored(self._parts, found).accepted.payload_digest
            resolve_append(payload_digest, computed_digest, stored)
        run, parent = _family(event)
        data = self._parts.seal_event(event_id, canonical_json(event, what="event payload"))
        for attempt in range(_ATTEMPTS):
            ends = await self._io("append_once", lambda: self._ends(event_id, run, parent))
            if "id" in ends:
                accepted = _stored(self._parts, ends["id"]).accepted
                resolve_append(payload_digest, computed_digest, accepted.payload_digest)
                return AppendOnceResult(False, dict(accepted.cursor))
            try:
                q, rp = _number(ends.get("q", 0)) + 1, _number(ends.get("rp", 0))
                pp = _number(ends.get("pp", 0))
            except ValueError as exc:
                raise DurableCorrupted(_ROW_INVALID, "a stored event number is damaged") from exc
            document: Document = {**self._event(event_id), "q": q, "r": run, "rp": rp}
            if parent is not None:
                document |= {"p": parent, "pp": pp}
            document |= {"d": payload_digest, "b": data}
            if await self._io("append_once", partial(self._insert, document)):
                return AppendOnceResult(True, {"sequence": q})
            await asyncio.sleep(random.uniform(0, min(_BACKOFF_S, 0.001 * 2**attempt)))
        raise DurableConflict(
            f"event {event_id!r} lost the race for a sequence number {_ATTEMPTS} times"
        )

    async def _replay(
        self, run_id: str, after: int, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        check_text(run_id, _VALUE, "run_id")

        def chain(member: str) -> list[Document]:
            matched = {"_id.n": self._namespace, member: run_id, "q": {"$gt": after}}
            return [{"$match": matched}, {"$sort": {"q": 1}}, {"$limit": count}]

        pipeline = chain("r")
        if include_children:
            pipeline.append({"$unionWith": {"coll": self._events.name, "pipeline": chain("p")}})

        async def read() -> list[Document]:
            found = await self._events.aggregate(pipeline, hint=RUN_EVENTS_INDEX)
            return await found.to_list()

        read_events = [_stored(self._parts, doc) for doc in await self._io("replay", read)]
        own = [item for item in read_events if item.run == run_id]
        children = [item for item in read_events if item.run != run_id]
        _linked(own, after, "rp", run_id)
        _linked(children, after, "pp", run_id)
        merged = sorted(read_events, key=lambda item: item.q)[:count]
        return [item.accepted for item in merged]

    async def _delete_events(self, run_id: str) -> int:
        matched = {"_id.n": self._namespace, "r": run_id}
        deleted = await self._io("delete", lambda: self._events.delete_many(matched))
        return deleted.deleted_count

    async def _rewrite_event(self, event_id: str, stored: bytes) -> bool:
        rewrite = partial(self._events.update_one, self._event(event_id), {"$set": {"b": stored}})
        done = await self._io("reseal_event", rewrite)
        return done.matched_count == 1
