"""An accepted-once event store in MongoDB, beside the durable store's runs.

An event is one document ``_id: {n, e}`` (namespace, event id), so the
``_id`` index accepts an id once across connections and processes. It is
numbered in its run's sequence (``r``, ``rs``: the unique index
``(_id.n, r, rs)``) and, when it names another run as its parent, in that
parent's children sequence (``p``, ``ps``: ``(_id.n, p, ps)``). An append
reads where the sequences end and inserts at end + 1; a racer that took a
number makes the insert fail on the unique index, and the append reads
again. A number is therefore taken only once the one before it is stored:
every sequence is gapless and becomes visible in order, so a cursor never
passes an event that becomes visible later, and a gap found on a read is
damage.

A run's replay with its children merges two sequences, so each event also
records how far the other one had come when it was appended: ``rc``, the
run's children sequence, and ``po``, the parent's own sequence. A child
numbered at most ``rc`` was stored before the run's event, so it is replayed
before it; the merged order is acceptance order wherever acceptance had one.
A cursor is ``{"run": R, "sequence": s, "children": c}``: after event ``s``
of run R and child ``c`` of R. An append returns the event's place in its own
run; a replayed event carries its place in the replay (so a child's names the
parent), and a replay of another run refuses it. Every event read back is
checked against its digest.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Final

from pymongo.errors import DuplicateKeyError

from agentflow.checkpoint.mongodb.documents import Document, plain
from agentflow.durable.canonical import MAX_WIRE_INTEGER, canonical_json
from agentflow.durable.errors import DurableConflict, DurableCorrupted
from agentflow.durable.events import (
    AcceptedEvent,
    AppendOnceResult,
    check_append,
    resolve_append,
    run_member,
    stored_event,
)
from agentflow.durable.paged import ReplayedEvents
from agentflow.durable.parts import RunParts
from agentflow.durable.stores.mongodb_client import MongoStoreBase, check_text
from agentflow.durable.stores.mongodb_documents import RUN_EVENTS_INDEX
from agentflow.durable.validators import CapabilityRef
from agentflow.errors import InvalidCursor

__all__ = ["MongoRunEventStore"]

#: Appends that lost the race for a number before one gives up.
_ATTEMPTS: Final = 64
#: The longest pause between two attempts, in seconds.
_BACKOFF_S: Final = 0.05
_ROW_INVALID: Final = "checkpoint_row_invalid"
_VALUE: Final = "checkpoint_value_invalid"
_CURSOR_KEYS: Final = frozenset({"run", "sequence", "children"})


@dataclass(frozen=True, slots=True)
class _Stored:
    """An accepted event and its places: in its run (``rs``) and its parent's children (``ps``).

    ``child`` says which sequence a replay read it from.
    """

    accepted: AcceptedEvent
    rs: int
    rc: int
    ps: int
    po: int
    child: bool


def _number(value: object) -> int:
    value = plain(value)
    if type(value) is not int or not 0 <= value <= MAX_WIRE_INTEGER:
        raise ValueError(value)
    return value


def _cursor(run: str | None, sequence: int, children: int) -> dict[str, Any]:
    return {"run": run, "sequence": sequence, "children": children}


def _positions(run_id: str, after: Mapping[str, Any] | None) -> tuple[int, int]:
    """Where a replay of ``run_id`` resumes: (its own sequence, its children's)."""
    if after is None:
        return 0, 0
    if not isinstance(after, Mapping) or set(after) != _CURSOR_KEYS:
        raise InvalidCursor("a MongoDB event cursor is {'run': R, 'sequence': n, 'children': m}")
    if after["run"] != run_id:
        raise InvalidCursor(f"this cursor resumes run {after['run']!r}, not {run_id!r}")
    try:
        return _number(after["sequence"]), _number(after["children"])
    except ValueError as exc:
        raise InvalidCursor("an event cursor's numbers are integers from 0 to 2**53-1") from exc


def _stored(parts: RunParts, doc: Document, *, child: bool = False) -> _Stored:
    """An event document, every part checked; the digest must match the opened bytes."""
    ident, data, digest = doc.get("_id"), doc.get("b"), doc.get("d")
    event_id = ident.get("e") if isinstance(ident, dict) else None
    where = f"stored event {event_id!r}"
    try:
        if not isinstance(event_id, str) or not isinstance(data, bytes):
            raise ValueError(doc)
        rs, rc = _number(doc.get("rs")), _number(doc.get("rc"))
        ps, po = (_number(doc.get("ps")), _number(doc.get("po"))) if "p" in doc else (0, 0)
    except ValueError as exc:
        raise DurableCorrupted(_ROW_INVALID, f"{where} is damaged") from exc
    accepted = stored_event(parts, event_id, digest, data, cursor={}, where=where)
    run, parent = _family(accepted.event)
    if doc.get("r", _ROW_INVALID) != run or doc.get("p") != parent:
        raise DurableCorrupted(_ROW_INVALID, f"{where} is filed under another run")
    return _Stored(replace(accepted, cursor=_cursor(run, rs, rc)), rs, rc, ps, po, child)


def _family(event: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The event's run and its parent run (None when it names none, or its own run)."""
    run, parent = run_member(event, "run_id"), run_member(event, "parent_run_id")
    return run, None if parent == run else parent


def _gapless(stored: list[_Stored], start: int, place: str, run_id: str) -> None:
    """Refuse a page whose numbers skip one: sequences are gapless, so an event is missing."""
    for expected, item in enumerate(stored, start + 1):
        if getattr(item, place) != expected:
            raise DurableCorrupted(
                _ROW_INVALID, f"events of run {run_id!r} are missing: no number {expected}"
            )


def _merge(own: list[_Stored], children: list[_Stored], count: int) -> list[_Stored]:
    """Up to ``count`` events of both sequences: a child the run's event had seen comes first."""
    picked: list[_Stored] = []
    i = j = 0
    while len(picked) < count and (i < len(own) or j < len(children)):
        if i < len(own) and (j == len(children) or own[i].rc < children[j].ps):
            picked.append(own[i])
            i += 1
        else:
            picked.append(children[j])
            j += 1
    return picked


class MongoRunEventStore(ReplayedEvents, MongoStoreBase):
    """A :class:`~agentflow.durable.DurableEventStore` in MongoDB.

    Takes the arguments of :class:`~agentflow.durable.stores.mongodb.MongoDurableStore`.
    """

    @property
    def store_ref(self) -> CapabilityRef:
        return CapabilityRef("events.mongodb", "1")

    def _id(self, event_id: str) -> Document:
        return {"n": self._namespace, "e": event_id}

    def _last(self, field: str, value: str | None, label: str) -> Document:
        """A sub-pipeline: the end of one sequence, as ``{w: label, v: number}`` (none if empty)."""
        run, place = ("r", "rs") if field == "own" else ("p", "ps")
        return {
            "$unionWith": {
                "coll": self._events.name,
                "pipeline": [
                    {"$match": {"_id.n": self._namespace, run: value}},
                    {"$sort": {place: -1}},
                    {"$limit": 1},
                    {"$project": {"_id": 0, "w": {"$literal": label}, "v": f"${place}"}},
                ],
            }
        }

    async def _ends(self, event_id: str, run: str | None, parent: str | None) -> dict[str, Any]:
        """One command: the event if it was accepted, and the ends of its sequences."""
        pipeline: list[Document] = [
            {"$match": {"_id": self._id(event_id)}},
            {"$set": {"w": {"$literal": "id"}}},
            self._last("own", run, "own"),
        ]
        if run is not None:
            pipeline.append(self._last("children", run, "rc"))
        if parent is not None:
            pipeline += [self._last("children", parent, "ps"), self._last("own", parent, "po")]
        ends: dict[str, Any] = {}
        for doc in await (await self._events.aggregate(pipeline)).to_list():
            label = str(doc.get("w"))
            ends[label] = doc if label == "id" else doc.get("v")
        return ends

    async def _insert(self, document: Document) -> bool:
        try:
            await self._events.insert_one(document)
        except DuplicateKeyError:  # the id, or a number another append took first
            return False
        return True

    async def append_once(
        self, event_id: str, payload_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        computed = check_append(event_id, payload_digest, event)
        check_text(event_id, _VALUE, "event_id")
        if computed != payload_digest:  # refused either way; the stored digest decides which
            found = await self._call(
                "append_once", lambda: self._events.find_one({"_id": self._id(event_id)})
            )
            stored = None if found is None else _stored(self._parts, found).accepted.payload_digest
            resolve_append(payload_digest, computed, stored)
            raise DurableConflict(f"event {event_id!r} was neither accepted nor refused")
        run, parent = _family(event)
        data = self._parts.seal_event(event_id, canonical_json(event, what="event payload"))
        for attempt in range(_ATTEMPTS):
            ends = await self._call("append_once", lambda: self._ends(event_id, run, parent))
            if "id" in ends:
                accepted = _stored(self._parts, ends["id"]).accepted
                resolve_append(payload_digest, computed, accepted.payload_digest)
                return AppendOnceResult(False, dict(accepted.cursor))
            try:
                rs, rc = _number(ends.get("own", 0)) + 1, _number(ends.get("rc", 0))
                places = [_number(ends.get("ps", 0)) + 1, _number(ends.get("po", 0))]
            except ValueError as exc:
                raise DurableCorrupted(_ROW_INVALID, "a stored event number is damaged") from exc
            document: Document = {"_id": self._id(event_id), "r": run, "rs": rs, "rc": rc}
            if parent is not None:
                document |= {"p": parent, "ps": places[0], "po": places[1]}
            document |= {"d": payload_digest, "b": data}
            if await self._call("append_once", partial(self._insert, document)):
                return AppendOnceResult(True, _cursor(run, rs, rc))
            await asyncio.sleep(random.uniform(0, min(_BACKOFF_S, 0.001 * 2**attempt)))
        raise DurableConflict(
            f"event {event_id!r} lost the race for a sequence number {_ATTEMPTS} times"
        )

    async def _replay(
        self, run_id: str, after: Mapping[str, Any] | None, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        check_text(run_id, _VALUE, "run_id")
        own_after, children_after = _positions(run_id, after)
        own: list[Document] = [
            {"$match": {"_id.n": self._namespace, "r": run_id, "rs": {"$gt": own_after}}},
            {"$sort": {"rs": 1}},
            {"$limit": count},
            {"$set": {"w": {"$literal": "own"}}},
        ]
        if include_children:
            children = [
                {"$match": {"_id.n": self._namespace, "p": run_id, "ps": {"$gt": children_after}}},
                {"$sort": {"ps": 1}},
                {"$limit": count},
                {"$set": {"w": {"$literal": "child"}}},
            ]
            # the children are read after the run's own events, so every child a
            # read event had seen is read too
            own.append({"$unionWith": {"coll": self._events.name, "pipeline": children}})

        async def read() -> list[Document]:
            return await (await self._events.aggregate(own, hint=RUN_EVENTS_INDEX)).to_list()

        found = await self._call("replay", read)
        read_events = [_stored(self._parts, doc, child=doc.get("w") == "child") for doc in found]
        mine = [item for item in read_events if not item.child]
        theirs = [item for item in read_events if item.child]
        _gapless(mine, own_after, "rs", run_id)
        _gapless(theirs, children_after, "ps", run_id)
        events: list[AcceptedEvent] = []
        sequence, seen = own_after, children_after
        for item in _merge(mine, theirs, count):  # cursors: this replay, resumed after each
            if item.child:
                seen = max(seen, item.ps)
            else:
                sequence, seen = item.rs, max(seen, item.rc)
            events.append(replace(item.accepted, cursor=_cursor(run_id, sequence, seen)))
        return events
