"""The reads every durable store pages the same way: listing runs and replaying events.

:meth:`~agentflow.durable.store.DurableStore.list_runs` and
:meth:`~agentflow.durable.store.DurableEventStore.replay` check their
arguments, resume from a cursor and cut a page the same way on every
backend; only reading the rows differs. A backend implements
:meth:`ListedRuns._list` or :meth:`ReplayedEvents._replay`, one range read
of ``count`` rows, and inherits the public method.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar

from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.events import AcceptedEvent, EventPage, run_member
from agentflow.durable.paging import check_limit, decode_run_cursor, encode_run_cursor
from agentflow.durable.parts import StoredParts
from agentflow.durable.rows import RunSummary
from agentflow.durable.store import RunPage
from agentflow.durable.validators import require_non_empty

__all__ = ["ListedRuns", "ReplayedEvents"]


class ListedRuns(abc.ABC):
    """``list_runs`` of a durable store over one range read.

    ``kind`` and ``_namespace`` bind the cursors to this store kind and tenant.
    """

    kind: ClassVar[str]
    _namespace: str

    @abc.abstractmethod
    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        """Up to ``limit`` summaries with a key after ``after`` (None: from the first),
        in key order, and the key the next page resumes after (None when no key follows)."""

    async def list_runs(
        self,
        *,
        status: CheckpointStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        check_limit(limit)
        status = None if status is None else CheckpointStatus(status)
        after = (
            None
            if cursor is None
            else decode_run_cursor(self.kind, self._namespace, status, cursor)
        )
        runs, last = await self._list(status, after, limit)
        next_cursor = (
            None if last is None else encode_run_cursor(self.kind, self._namespace, status, last)
        )
        return RunPage(runs, next_cursor)


class ReplayedEvents(StoredParts, abc.ABC):
    """``replay`` of an event store over one range read.

    Payloads are stored through ``_parts`` (sealed when the store has a key
    ring). An event read back must name the replayed run as its run (or, with
    ``include_children``, as its parent): the payload is checked or sealed, the
    index that found it is not, so an event filed under another run raises.
    """

    @abc.abstractmethod
    async def _replay(
        self, run_id: str, after: Mapping[str, Any] | None, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        """Up to ``count`` events of ``run_id`` (and of its children when
        ``include_children``) after the cursor ``after``, in acceptance order,
        each with the cursor that resumes after it. Raises
        :class:`~agentflow.errors.InvalidCursor` for a cursor not of this store."""

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
        events = await self._replay(run_id, after, limit + 1, include_children)
        more = len(events) > limit
        events = events[:limit]
        for event in events:
            if run_member(event.event, "run_id") != run_id and not (
                include_children and run_member(event.event, "parent_run_id") == run_id
            ):
                raise DurableCorrupted(
                    "checkpoint_row_invalid",
                    f"stored event {event.event_id!r} is filed under run {run_id!r}, not its own",
                )
        return EventPage(events, dict(events[-1].cursor) if more else None)
