"""The memory store's event log: payloads in their stored form, one sequence per namespace."""

from __future__ import annotations

import abc
import bisect
import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agentflow.checkpoint.envelope import stored_event
from agentflow.checkpoint.events import EventsBase
from agentflow.durable.run.events import (
    AcceptedEvent,
    AppendOnceResult,
    resolve_append,
    run_member,
)
from agentflow.durable.wire.canonical import canonical_json, parse_json

__all__ = ["MemoryEvents", "StoredEvents"]


@dataclass(frozen=True, slots=True)
class _StoredEvent:
    """An accepted event as a database backend keeps it: digest, stored payload, sequence."""

    payload_digest: str
    stored: bytes
    sequence: int
    run_id: str | None
    parent_run_id: str | None


@dataclass
class StoredEvents:
    """One namespace's accepted events, by id and by (parent) run."""

    by_id: dict[str, _StoredEvent] = field(default_factory=dict)
    by_run: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    by_parent: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    sequence: int = 0


def _from(items: list[tuple[int, str]], start: int) -> Iterator[tuple[int, str]]:
    index = bisect.bisect_right(items, start, key=lambda item: item[0])
    return (items[position] for position in range(index, len(items)))


def _dedupe(items: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    last = -1
    for item in items:
        if item[0] != last:
            last = item[0]
            yield item


class MemoryEvents(EventsBase, abc.ABC):
    """The event part of :class:`~agentflow.checkpoint.memory.MemoryCheckpointer`."""

    _events: StoredEvents

    async def _append_once(
        self, event_id: str, payload_digest: str, computed_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        existing = self._events.by_id.get(event_id)
        stored = None if existing is None else existing.payload_digest
        if resolve_append(payload_digest, computed_digest, stored) == "duplicate":
            assert existing is not None
            return AppendOnceResult(False, {"sequence": existing.sequence})
        data = canonical_json(event, what="event payload")
        copy = parse_json(data)
        run, parent = run_member(copy, "run_id"), run_member(copy, "parent_run_id")
        self._events.sequence += 1
        sequence = self._events.sequence
        sealed = self._parts.seal_event(event_id, data)
        self._events.by_id[event_id] = _StoredEvent(payload_digest, sealed, sequence, run, parent)
        for index, member in ((self._events.by_run, run), (self._events.by_parent, parent)):
            if member is not None:
                index.setdefault(member, []).append((sequence, event_id))
        return AppendOnceResult(True, {"sequence": sequence})

    async def _replay(
        self, run_id: str, after: int, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        lists = [self._events.by_run.get(run_id, [])]
        if include_children:
            lists.append(self._events.by_parent.get(run_id, []))
        picked: list[AcceptedEvent] = []
        for sequence, event_id in _dedupe(heapq.merge(*(_from(items, after) for items in lists))):
            if len(picked) == count:
                break
            found = self._events.by_id[event_id]
            picked.append(
                stored_event(
                    self._parts,
                    event_id,
                    found.payload_digest,
                    found.stored,
                    cursor={"sequence": sequence},
                    where=f"stored event {event_id!r}",
                )
            )
        return picked

    async def _delete_events(self, run_id: str) -> int:
        doomed = self._events.by_run.pop(run_id, [])
        for _, event_id in doomed:
            found = self._events.by_id.pop(event_id)
            if found.parent_run_id is not None:
                siblings = self._events.by_parent.get(found.parent_run_id, [])
                siblings[:] = [item for item in siblings if item[1] != event_id]
        return len(doomed)

    async def _rewrite_event(self, event_id: str, stored: bytes) -> bool:
        found = self._events.by_id.get(event_id)
        if found is None:
            return False
        self._events.by_id[event_id] = replace(found, stored=stored)
        return True
