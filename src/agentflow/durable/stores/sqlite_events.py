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

import sqlite3
from collections.abc import Mapping
from typing import Any

from agentflow.durable.canonical import canonical_json
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.events import (
    AcceptedEvent,
    AppendOnceResult,
    check_append,
    repeated_append,
    run_member,
    sequence_of,
    stored_event,
)
from agentflow.durable.paged import ReplayedEvents
from agentflow.durable.parts import RunParts
from agentflow.durable.stores.sqlite_file import SqliteFileStore
from agentflow.durable.stores.sqlite_sql import EVENT_BY_ID, INSERT_EVENT, REPLAY, REPLAY_FAMILY
from agentflow.durable.validators import CapabilityRef

__all__ = ["SqliteRunEventStore"]


def _stored(event_id: str, rows: list[Any]) -> tuple[str, int] | None:
    """The digest and sequence of an event row ``(digest, sequence)``, None for no row."""
    if not rows:
        return None
    digest, sequence = rows[0]
    if not isinstance(digest, str) or type(sequence) is not int:
        raise DurableCorrupted("checkpoint_row_invalid", f"stored event {event_id!r} is damaged")
    return digest, sequence


def _accepted(parts: RunParts, row: Any) -> AcceptedEvent:
    """An event row ``(sequence, event_id, digest, stored payload)`` opened and
    checked; the SQL stores' one."""
    sequence, event_id, digest, stored = row
    where = f"stored event {event_id!r}"
    return stored_event(parts, event_id, digest, stored, cursor={"sequence": sequence}, where=where)


class SqliteRunEventStore(ReplayedEvents, SqliteFileStore):
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
                "run_id": run_member(event, "run_id"),
                "parent_run_id": run_member(event, "parent_run_id"),
                "event": self._parts.seal_event(
                    event_id, canonical_json(event, what="event payload")
                ),
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
        return repeated_append(event_id, payload_digest, computed, _stored(event_id, found))

    async def _replay(
        self, run_id: str, after: Mapping[str, Any] | None, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        params = {
            "namespace": self._namespace,
            "run_id": run_id,
            "after": sequence_of(after),
            "limit": count,
        }
        statement = REPLAY_FAMILY if include_children else REPLAY

        def read(conn: sqlite3.Connection) -> list[AcceptedEvent]:
            return [_accepted(self._parts, row) for row in conn.execute(statement, params)]

        events: list[AcceptedEvent] = await self._file.read("replay", read)
        return events
