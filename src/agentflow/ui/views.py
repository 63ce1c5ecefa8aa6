"""What the console's pages show, read through the store API the command line uses.

Nothing here opens a connection or reads a table of its own: the listing is
:meth:`~agentflow.checkpoint.base.Checkpointer.list_threads_page`, a thread
is its history, its durable record (:func:`~agentflow.cli.records.record_of`,
the journal rows of ``agentflow journal``, the lease of ``agentflow show``)
and its events (:meth:`~agentflow.durable.store.DurableEventStore.replay`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentflow.checkpoint.base import Checkpoint, ThreadInfo, ThreadStatus
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.store_base import run_thread_status
from agentflow.cli.commands import history_of
from agentflow.cli.records import lease_of, operations_of, record_of
from agentflow.durable import DurableCheckpoint, DurableError
from agentflow.durable.run.events import AcceptedEvent
from agentflow.runtime import status_of
from agentflow.runtime.recovery import pending_observations

__all__ = ["EVENTS_SHOWN", "SCAN_BUDGET", "Listing", "ThreadView", "list_threads", "load_thread"]

#: The most thread summaries one prefix search reads before it offers to search on.
SCAN_BUDGET = 5_000
#: Events shown on a thread page (the newest beyond these are one link away: the CLI).
EVENTS_SHOWN = 100
#: What ``replay`` raises, before any I/O, for a thread id no run id can be.
_NO_RUN_ID = frozenset({"checkpoint_key_invalid", "checkpoint_value_invalid"})


@dataclass(frozen=True)
class Listing:
    """One page of the threads list, and how to read the next one.

    ``scanned`` is set for a prefix search: the number of summaries read to
    find ``threads`` (the listing is ordered by id but has no prefix filter,
    so a search pages from ``cursor`` and stops once it is past the prefix,
    has a page of matches, or has read :data:`SCAN_BUDGET` summaries).
    """

    threads: list[ThreadInfo]
    next_cursor: str | None
    scanned: int | None = None


async def list_threads(
    store: Store,
    *,
    limit: int,
    cursor: str | None = None,
    status: ThreadStatus | None = None,
    prefix: str = "",
) -> Listing:
    """A keyset page of threads, by status; with ``prefix``, a bounded search."""
    if not prefix:
        page = await store.list_threads_page(limit=limit, cursor=cursor, status=status)
        return Listing(page.threads, page.next_cursor)
    found: list[ThreadInfo] = []
    scanned = 0
    while True:
        page = await store.list_threads_page(limit=limit, cursor=cursor, status=status)
        scanned += len(page.threads)
        found += [info for info in page.threads if info.thread.startswith(prefix)]
        cursor = page.next_cursor
        last = page.threads[-1].thread if page.threads else prefix
        past = last > prefix and not last.startswith(prefix)
        if cursor is None or past:
            return Listing(found, None, scanned)
        if len(found) >= limit or scanned >= SCAN_BUDGET:
            return Listing(found, cursor, scanned)


@dataclass(frozen=True)
class ThreadView:
    """Everything the thread page shows."""

    steps: list[Checkpoint]
    record: DurableCheckpoint | None
    #: The journal rows of ``agentflow journal --json``, each with ``time``: when
    #: the step that recorded it was written (None for a call still in flight).
    operations: list[dict[str, Any]]
    events: list[AcceptedEvent]
    more_events: bool

    @property
    def latest(self) -> Checkpoint:
        return self.steps[-1]

    @property
    def thread(self) -> str:
        return self.latest.thread

    @property
    def status(self) -> ThreadStatus:
        """The thread's status: what its record imposes, else its latest checkpoint's."""
        imposed = run_thread_status(self.record.status) if self.record is not None else None
        return imposed or status_of(self.latest)

    @property
    def lease(self) -> dict[str, Any] | None:
        """Who holds the run and until when (``show``'s view), None when unclaimed."""
        return lease_of(self.record)

    @property
    def pending(self) -> list[dict[str, Any]]:
        """The ambiguous calls waiting for an operator's decision."""
        if self.record is None:
            return []
        return [o.to_dict() for o in pending_observations(self.record)]

    def step(self, number: int) -> Checkpoint | None:
        return next((cp for cp in self.steps if cp.step == number), None)


async def load_thread(store: Store, thread: str) -> ThreadView:
    """``thread`` whole; :class:`~agentflow.runtime.ThreadNotFound` when it has no step."""
    steps = await history_of(store, thread)
    record = await record_of(store, thread)
    written = {cp.step: cp.ts for cp in steps}
    operations = [
        row | {"time": None if row["in_flight"] else written.get(row["step"])}
        for row in operations_of(steps, record)
    ]
    try:
        page = await store.replay(thread, limit=EVENTS_SHOWN)
    except DurableError as exc:  # an id no run can have (blank): no events either
        if exc.code not in _NO_RUN_ID:
            raise
        events, more = [], False
    else:
        events, more = page.events, page.next_after is not None
    return ThreadView(steps, record, operations, events, more)
