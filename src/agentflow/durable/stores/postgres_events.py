"""An accepted-once event store in PostgreSQL, beside the durable store's tables.

Events are rows unique by (namespace, event id), so an append is one
``INSERT ... ON CONFLICT DO NOTHING`` that accepts an id exactly once across
connections and processes; the same statement answers a repeat with the
first acceptance's sequence. Sequence numbers are drawn from an identity
column after the appender took the transaction locks of the event's run and
parent run, so the events of one replay range commit in sequence order and a
cursor never passes an event that becomes visible later (without the locks,
two appenders could commit 11 before 10, and a replay reading 11 would skip
10 for good). Replay reads one run's index (and its children's) from a
sequence on: a page costs O(page). Cursors are ``{"sequence": n}``. Every
event read back is checked against its digest, by the same checks of a
stored event row as the SQLite event store's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from agentflow.durable.canonical import canonical_json
from agentflow.durable.events import (
    AcceptedEvent,
    AppendOnceResult,
    check_append,
    repeated_append,
    run_member,
    sequence_of,
)
from agentflow.durable.paged import ReplayedEvents
from agentflow.durable.stores.postgres_base import PostgresDurableBase
from agentflow.durable.stores.sqlite_events import _accepted, _stored
from agentflow.durable.validators import CapabilityRef

__all__ = ["PostgresRunEventStore"]


def run_lock(namespace: str, run_id: str) -> int:
    """The transaction lock key of one run's events (a collision only serialises more)."""
    scope = canonical_json(["agentflow-events", namespace, run_id])
    digest = hashlib.blake2b(scope, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresRunEventStore(ReplayedEvents, PostgresDurableBase):
    """A :class:`~agentflow.durable.DurableEventStore` in PostgreSQL.

    Takes the arguments of :class:`~agentflow.durable.stores.postgres.PostgresDurableStore`.
    """

    @property
    def store_ref(self) -> CapabilityRef:
        return CapabilityRef("events.postgres", "1")

    async def append_once(
        self, event_id: str, payload_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        computed = check_append(event_id, payload_digest, event)
        ids = {"namespace": self._namespace, "event_id": event_id}
        rows: list[Any] = []
        if computed == payload_digest:
            run, parent = run_member(event, "run_id"), run_member(event, "parent_run_id")
            locks = sorted({run_lock(self._namespace, r) for r in (run, parent) if r})
            first_lock, second_lock = (*locks, None, None)[:2]
            params = {
                **ids,
                "payload_digest": payload_digest,
                "run_id": run,
                "parent_run_id": parent,
                "event": self._parts.seal_event(
                    event_id, canonical_json(event, what="event payload")
                ),
                "first_lock": first_lock,
                "second_lock": second_lock,
            }
            rows = await self._fixed("append_once", "fetch", "append", params)
            if rows and rows[0][0] is None:
                return AppendOnceResult(True, {"sequence": rows[0][1]})
        if not rows:  # refused either way, or accepted by a racer our snapshot missed
            rows = await self._fixed("append_once", "fetch", "event_by_id", ids)
        return repeated_append(event_id, payload_digest, computed, _stored(event_id, rows))

    async def _replay(
        self, run_id: str, after: Mapping[str, Any] | None, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        params = {
            "namespace": self._namespace,
            "run_id": run_id,
            "after": sequence_of(after),
            "limit": count,
        }
        name = "replay_family" if include_children else "replay"
        rows = await self._fixed("replay", "fetch", name, params)
        return [_accepted(self._parts, row) for row in rows]
