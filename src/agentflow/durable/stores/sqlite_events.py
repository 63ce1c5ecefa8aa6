"""An accepted-once event store in the SQLite file of the checkpointer.

Events are rows keyed by a sequence (the table's rowid, growing with each
accepted event and never reused: events are never deleted) and unique by
(namespace, event id), so an append is one ``INSERT ... ON CONFLICT DO
NOTHING`` that accepts an id exactly once across threads and processes.
Replay reads one run's index (and its children's) from a sequence on: a
page costs O(page). Cursors are ``{"sequence": n}``. Every event read back
is checked against its digest, so damaged bytes raise instead of replaying.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Mapping
from typing import Any

from agentflow.durable.canonical import canonical_json, parse_json
from agentflow.durable.errors import DurableConflict, DurableCorrupted, DurableError
from agentflow.durable.events import (
    AcceptedEvent,
    AppendOnceResult,
    EventPage,
    check_append,
    resolve_append,
)
from agentflow.durable.memory import _sequence_of
from agentflow.durable.paging import check_limit
from agentflow.durable.stores.sqlite_file import SqliteFileStore
from agentflow.durable.stores.sqlite_sql import EVENT_BY_ID, INSERT_EVENT, REPLAY, REPLAY_FAMILY
from agentflow.durable.validators import CapabilityRef, require_non_empty

__all__ = ["SqliteRunEventStore"]


def _run_member(event: Mapping[str, Any], member: str) -> str | None:
    value = event.get(member)
    return value if isinstance(value, str) and value else None


def _stored(event_id: str, rows: list[Any]) -> tuple[str | None, int | None]:
    if not rows:
        return None, None
    digest, sequence = rows[0]
    if not isinstance(digest, str) or type(sequence) is not int:
        raise DurableCorrupted("checkpoint_row_invalid", f"stored event {event_id!r} is damaged")
    return digest, sequence


def _accepted(row: Any) -> AcceptedEvent:
    sequence, event_id, digest, data = row
    if not isinstance(data, bytes) or hashlib.sha256(data).hexdigest() != digest:
        raise DurableCorrupted(
            "event_payload_digest_mismatch", f"stored event {event_id!r} fails its digest"
        )
    try:
        event = parse_json(data)
    except DurableError as exc:
        raise DurableCorrupted(exc.code, f"stored event {event_id!r}: {exc.message}") from exc
    if not isinstance(event, dict):
        raise DurableCorrupted(
            "event_payload_invalid", f"stored event {event_id!r} is not an object"
        )
    return AcceptedEvent(event_id, digest, event, {"sequence": sequence})


class SqliteRunEventStore(SqliteFileStore):
    """A :class:`~agentflow.durable.DurableEventStore` in a SQLite file.

    Takes the arguments of :class:`~agentflow.durable.stores.sqlite.SqliteDurableStore`;
    opened on the same file, both share its writer and reader threads.
    """

    @property
    def store_ref(self) -> CapabilityRef:
        return CapabilityRef("events.sqlite", "1")

    async def append_once(
        self, event_id: str, payload_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        computed = check_append(event_id, payload_digest, event)
        ids = {"namespace": self._namespace, "event_id": event_id}
        inserted: list[Any] = []
        if computed == payload_digest:
            params = {
                **ids,
                "payload_digest": payload_digest,
                "run_id": _run_member(event, "run_id"),
                "parent_run_id": _run_member(event, "parent_run_id"),
                "event": canonical_json(event, what="event payload"),
            }

            def apply(conn: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
                added = conn.execute(INSERT_EVENT, params).fetchall()
                return added, [] if added else conn.execute(EVENT_BY_ID, ids).fetchall()

            inserted, found = await self._file.write("append_once", apply)
        else:  # refused either way; the stored digest decides which error
            found = await self._file.read(
                "append_once", lambda conn: conn.execute(EVENT_BY_ID, ids).fetchall()
            )
        if inserted:
            return AppendOnceResult(True, {"sequence": inserted[0][0]})
        stored, sequence = _stored(event_id, found)
        if resolve_append(payload_digest, computed, stored) == "insert" or sequence is None:
            raise DurableConflict(f"event {event_id!r} was neither accepted nor found")
        return AppendOnceResult(False, {"sequence": sequence})

    async def replay(
        self,
        run_id: str,
        *,
        after: Mapping[str, Any] | None = None,
        limit: int = 100,
        include_children: bool = False,
    ) -> EventPage:
        require_non_empty(run_id, "run_id")
        check_limit(limit)
        params = {
            "namespace": self._namespace,
            "run_id": run_id,
            "after": _sequence_of(after),
            "limit": limit + 1,
        }
        statement = REPLAY_FAMILY if include_children else REPLAY

        def read(conn: sqlite3.Connection) -> list[AcceptedEvent]:
            return [_accepted(row) for row in conn.execute(statement, params)]

        events: list[AcceptedEvent] = await self._file.read("replay", read)
        more = len(events) > limit
        events = events[:limit]
        return EventPage(events, dict(events[-1].cursor) if more else None)
