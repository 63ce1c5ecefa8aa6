"""The event log of a PostgreSQL store: rows unique by (namespace, event id).

An append is one ``INSERT ... ON CONFLICT DO NOTHING`` that accepts an id
exactly once across connections and processes; the same statement answers a
repeat with the first acceptance's sequence. Sequence numbers are drawn from an
identity column after the appender took the transaction locks of the event's
run and parent run, so the events of one replay range commit in sequence order
and a cursor never passes an event that becomes visible later (without the
locks, two appenders could commit 11 before 10, and a replay reading 11 would
skip 10 for good). Replay reads one run's index (and its children's) from a
sequence on: a page costs O(page).
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Mapping
from typing import Any

from agentflow.checkpoint.envelope import stored_event
from agentflow.checkpoint.events import EventsBase, stored_event_row
from agentflow.checkpoint.postgres.runs_sql import PostgresPart
from agentflow.durable.run.events import (
    AcceptedEvent,
    AppendOnceResult,
    repeated_append,
    run_member,
)
from agentflow.durable.wire.canonical import canonical_json

__all__ = ["PostgresEvents", "run_lock"]


def run_lock(namespace: str, run_id: str) -> int:
    """The transaction lock key of one run's events (a collision only serialises more)."""
    scope = canonical_json(["agentflow-events", namespace, run_id])
    digest = hashlib.blake2b(scope, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresEvents(PostgresPart, EventsBase, abc.ABC):
    """The event part of :class:`~agentflow.checkpoint.postgres.PostgresCheckpointer`."""

    async def _append_once(
        self, event_id: str, payload_digest: str, computed_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        ids = {"namespace": self._namespace, "event_id": event_id}
        rows: list[Any] = []
        if computed_digest == payload_digest:
            run, parent = run_member(event, "run_id"), run_member(event, "parent_run_id")
            locks = sorted({run_lock(self._namespace, r) for r in (run, parent) if r})
            first_lock, second_lock = (*locks, None, None)[:2]
            data = canonical_json(event, what="event payload")
            params = {
                **ids,
                "payload_digest": payload_digest,
                "run_id": run,
                "parent_run_id": parent,
                "event": self._parts.seal_event(event_id, data),
                "first_lock": first_lock,
                "second_lock": second_lock,
            }
            rows = await self._fetch("append_once", "fetch", "append", params)
            if rows and rows[0][0] is None:
                return AppendOnceResult(True, {"sequence": rows[0][1]})
        if not rows:  # refused either way, or accepted by a racer our snapshot missed
            rows = await self._fetch("append_once", "fetch", "event_by_id", ids)
        stored = stored_event_row(event_id, rows)
        return repeated_append(event_id, payload_digest, computed_digest, stored)

    async def _replay(
        self, run_id: str, after: int, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        params = {"namespace": self._namespace, "run_id": run_id, "after": after, "limit": count}
        name = "replay_family" if include_children else "replay"
        rows = await self._fetch("replay", "fetch", name, params)
        return [
            stored_event(
                self._parts,
                event_id,
                digest,
                stored,
                cursor={"sequence": sequence},
                where=f"stored event {event_id!r}",
            )
            for sequence, event_id, digest, stored in rows
        ]

    async def _delete_events(self, run_id: str) -> int:
        params = {"namespace": self._namespace, "run_id": run_id}
        deleted: int = await self._fetch("delete", "fetchval", "delete_events", params)
        return deleted

    async def _rewrite_event(self, event_id: str, stored: bytes) -> bool:
        params = {"namespace": self._namespace, "event_id": event_id, "event": stored}
        return bool(await self._fetch("rekey", "fetchval", "rewrite_event", params))
