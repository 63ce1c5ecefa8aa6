"""The event part of every store: the accepted-once log, replayed by run.

``append_once`` and ``replay`` check their arguments, sign cursors and cut
pages here; a backend implements :meth:`EventsBase._append_once` (one
insert-if-absent that answers with the ``{"sequence": n}`` of the first
acceptance) and :meth:`EventsBase._replay` (one range read). The cursors a
caller sees are the store's authenticated ones
(:mod:`agentflow.checkpoint.cursor`), ``{"cursor": "<token>"}``, so a cursor
of another store or namespace, or an edited one, raises
:class:`~agentflow.errors.InvalidCursor`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final

from agentflow.checkpoint.cursor import CursorSigner
from agentflow.checkpoint.envelope import StoredParts
from agentflow.checkpoint.validation import check_limit
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.run.events import (
    AcceptedEvent,
    AppendOnceResult,
    EventPage,
    check_append,
    run_member,
)
from agentflow.durable.wire.canonical import canonical_json
from agentflow.durable.wire.digests import run_event_identity
from agentflow.durable.wire.validators import CapabilityRef, require_non_empty
from agentflow.errors import InvalidCursor

__all__ = ["EventsBase", "stored_event_row"]

_EVENTS: Final = "events"


def stored_event_row(event_id: str, rows: Sequence[Any]) -> tuple[str, int] | None:
    """The digest and sequence of an SQL event row ``(digest, sequence)``, None for no
    row: what :func:`~agentflow.durable.run.events.repeated_append` compares with."""
    if not rows:
        return None
    digest, sequence = rows[0]
    if not isinstance(digest, str) or type(sequence) is not int:
        raise DurableCorrupted("checkpoint_row_invalid", f"stored event {event_id!r} is damaged")
    return digest, sequence


class EventsBase(StoredParts, abc.ABC):
    """``append_once`` and ``replay`` of a store's event log, over two hooks.

    Payloads are stored through ``_parts`` (sealed when the store has a key
    ring). An event read back must name the replayed run as its run (or, with
    ``include_children``, as its parent): the payload is checked or sealed, the
    index that found it is not, so an event filed under another run raises.
    """

    kind: ClassVar[str]

    @abc.abstractmethod
    def _check_open(self) -> None: ...

    @abc.abstractmethod
    async def _cursors(self, operation: str) -> CursorSigner: ...

    @abc.abstractmethod
    async def _append_once(
        self, event_id: str, payload_digest: str, computed_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        """Accept ``event`` (whose checked digest is ``computed_digest``) unless
        ``event_id`` was accepted before, deciding with
        :func:`~agentflow.durable.run.events.resolve_append` against the stored
        digest; the cursor is the raw ``{"sequence": n}`` of the acceptance."""

    @abc.abstractmethod
    async def _replay(
        self, run_id: str, after: int, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        """Up to ``count`` events of ``run_id`` (and of its children when
        ``include_children``) with a sequence above ``after``, in acceptance
        order, each with its raw ``{"sequence": n}`` cursor."""

    @abc.abstractmethod
    async def _rewrite_event(self, event_id: str, stored: bytes) -> bool:
        """Replace the stored payload of the accepted event ``event_id`` with
        ``stored`` (the same event, sealed anew); False when no such event.
        Digest, sequence and indexes stay as they are."""

    @property
    def store_ref(self) -> CapabilityRef:
        """The reference an :class:`~agentflow.durable.EventCursor` of this store names."""
        return CapabilityRef(f"events.{self.kind}", "1")

    async def _sign(self, operation: str, raw: Mapping[str, Any]) -> dict[str, Any]:
        return (await self._event_signer(operation))(raw["sequence"])

    async def _event_signer(self, operation: str) -> Callable[[int], dict[str, Any]]:
        """What turns an event's sequence into this store's cursor of it, without I/O
        (for a transaction that appends events and records their cursors)."""
        signer = await self._cursors(operation)
        return lambda sequence: {"cursor": signer.encode(_EVENTS, {"sequence": sequence})}

    async def _sequence_after(self, after: Mapping[str, Any] | None) -> int:
        if after is None:
            return 0
        token = after.get("cursor") if isinstance(after, Mapping) else None
        if not isinstance(after, Mapping) or set(after) != {"cursor"}:
            raise InvalidCursor("an event cursor is what this store returned: {'cursor': ...}")
        body = (await self._cursors("replay")).decode(_EVENTS, token)
        sequence = body.get("sequence")
        if type(sequence) is not int or sequence < 0:
            raise InvalidCursor("cursor body is malformed")
        return sequence

    async def reseal_event(self, event: AcceptedEvent) -> bool:
        self._check_open()
        data = canonical_json(event.event, what="event payload")
        return await self._rewrite_event(
            event.event_id, self._parts.seal_event(event.event_id, data)
        )

    async def append_once(
        self, event_id: str, payload_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        self._check_open()
        computed = check_append(event_id, payload_digest, event)
        result = await self._append_once(event_id, payload_digest, computed, event)
        return AppendOnceResult(result.inserted, await self._sign("append_once", result.cursor))

    async def append(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The original's ``RunEventStore::append``: accept ``event`` under its own
        ``event_id`` and digest (a repeat is accepted once, silently) and return
        its cursor, the first one for a repeat."""
        event_id, digest = run_event_identity(event)
        return (await self.append_once(event_id, digest, event)).cursor

    async def replay(
        self,
        run_id: str,
        *,
        after: Mapping[str, Any] | None = None,
        limit: int = 100,
        include_children: bool = False,
    ) -> EventPage:
        self._check_open()
        require_non_empty(run_id, "run_id")
        check_limit(limit)
        start = await self._sequence_after(after)
        events = await self._replay(run_id, start, limit + 1, include_children)
        more = len(events) > limit
        del events[limit:]
        page: list[AcceptedEvent] = []
        for event in events:
            if run_member(event.event, "run_id") != run_id and not (
                include_children and run_member(event.event, "parent_run_id") == run_id
            ):
                raise DurableCorrupted(
                    "checkpoint_row_invalid",
                    f"stored event {event.event_id!r} is filed under run {run_id!r}, not its own",
                )
            signed = await self._sign("replay", event.cursor)
            page.append(AcceptedEvent(event.event_id, event.payload_digest, event.event, signed))
        return EventPage(page, dict(page[-1].cursor) if more else None)
