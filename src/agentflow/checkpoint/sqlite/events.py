"""The accepted-once event log of the SQLite store.

An append is one ``INSERT ... ON CONFLICT DO NOTHING`` on (namespace, event
id), so an id is accepted exactly once across threads and processes; its
sequence is the row's ``AUTOINCREMENT`` key, which only grows. Replay reads
one run's index (and its children's) from a sequence on: a page costs
O(page). Every event read back is checked against its digest (and opened,
when sealed), so damaged bytes raise instead of replaying.
"""

from __future__ import annotations

import abc
import sqlite3
from collections.abc import Mapping
from typing import Any

from agentflow.checkpoint.envelope import stored_event
from agentflow.checkpoint.events import EventsBase, stored_event_row
from agentflow.checkpoint.sqlite.connection import SqliteConnection
from agentflow.checkpoint.sqlite.sql import (
    DELETE_EVENTS,
    EVENT_BY_ID,
    INSERT_EVENT,
    REPLAY,
    REPLAY_FAMILY,
    REWRITE_EVENT,
)
from agentflow.durable.run.events import (
    AcceptedEvent,
    AppendOnceResult,
    repeated_append,
    run_member,
)
from agentflow.durable.wire.canonical import canonical_json

__all__ = ["SqliteEvents"]


class SqliteEvents(SqliteConnection, EventsBase, abc.ABC):
    """The event part of :class:`~agentflow.checkpoint.sqlite.SqliteCheckpointer`."""

    async def _append_once(
        self, event_id: str, payload_digest: str, computed_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        ids = {"namespace": self._namespace, "event_id": event_id}
        inserted: list[Any] = []
        if computed_digest == payload_digest:
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

            inserted, found = await self._write("append_once", apply)
        else:  # refused either way; the stored digest decides which error
            found = await self._read(
                "append_once", lambda conn: conn.execute(EVENT_BY_ID, ids).fetchall()
            )
        if inserted:
            return AppendOnceResult(True, {"sequence": inserted[0][0]})
        stored = stored_event_row(event_id, found)
        return repeated_append(event_id, payload_digest, computed_digest, stored)

    async def _replay(
        self, run_id: str, after: int, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        params = {"namespace": self._namespace, "run_id": run_id, "after": after, "limit": count}
        statement = REPLAY_FAMILY if include_children else REPLAY
        parts = self._parts

        def read(conn: sqlite3.Connection) -> list[AcceptedEvent]:
            return [
                stored_event(
                    parts,
                    event_id,
                    digest,
                    stored,
                    cursor={"sequence": sequence},
                    where=f"stored event {event_id!r}",
                )
                for sequence, event_id, digest, stored in conn.execute(statement, params)
            ]

        events: list[AcceptedEvent] = await self._read("replay", read)
        return events

    async def _delete_events(self, run_id: str) -> int:
        run = {"namespace": self._namespace, "key": run_id}
        deleted: int = await self._write(
            "delete", lambda conn: conn.execute(DELETE_EVENTS, run).rowcount
        )
        return deleted

    async def _rewrite_event(self, event_id: str, stored: bytes) -> bool:
        params = {"namespace": self._namespace, "event_id": event_id, "event": stored}
        changed: int = await self._write(
            "rekey", lambda conn: conn.execute(REWRITE_EVENT, params).rowcount
        )
        return changed > 0
