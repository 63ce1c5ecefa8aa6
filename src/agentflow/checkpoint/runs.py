"""The durable-record part of every store: planned writes and the run listing.

Every write of a record but a claim and a renewal is a plan from
:mod:`agentflow.checkpoint.plans` (pure: what the stored head must equal,
and what to write) followed by one conditional write, so a backend
implements :meth:`RunsBase._apply` (its single conditional statement, script
or command) and inherits the writes. ``list_runs`` checks its arguments and
cuts pages here, over one range read (:meth:`RunsBase._list`), with the
store's authenticated cursors (:mod:`agentflow.checkpoint.cursor`).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar

from agentflow.checkpoint.cursor import CursorSigner
from agentflow.checkpoint.envelope import StoredParts
from agentflow.checkpoint.outbox import plan_event_deliveries, plan_event_delivery
from agentflow.checkpoint.plans import (
    Write,
    plan_acknowledge,
    plan_commit,
    plan_finalize,
    plan_finalize_claimed,
    plan_progress,
    plan_record_operations,
    plan_restore,
    plan_suspend,
)
from agentflow.checkpoint.validation import check_limit
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.run.events import EventCursor, EventDelivery, EventOutboxEntry
from agentflow.durable.run.journal import OperationJournalEntry
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunPage, RunSummary
from agentflow.errors import InvalidCursor

__all__ = ["RunsBase"]

_RUNS = "runs"


class RunsBase(StoredParts, abc.ABC):
    """The record writes and ``list_runs`` of a store, over ``_apply`` and ``_list``.

    Each write's body and journal bytes are put in their stored form
    (:class:`~agentflow.checkpoint.envelope.RunParts`: checked, or sealed with the
    store's key ring) before ``_apply`` sees them.
    """

    kind: ClassVar[str]

    @abc.abstractmethod
    def _check_open(self) -> None: ...

    @abc.abstractmethod
    async def _cursors(self, operation: str) -> CursorSigner: ...

    @abc.abstractmethod
    async def create(self, checkpoint: DurableCheckpoint) -> None:
        """As :meth:`~agentflow.durable.store.DurableStore.create`: one insert-if-absent."""

    @abc.abstractmethod
    async def load(self, key: str) -> DurableCheckpoint | None:
        """As :meth:`~agentflow.durable.store.DurableStore.load`."""

    @abc.abstractmethod
    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        """As :meth:`~agentflow.durable.store.DurableStore.claim`: one conditional write
        decided on the store's clock (:func:`~agentflow.checkpoint.claims.claim_refusal`)."""

    @abc.abstractmethod
    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        """As :meth:`~agentflow.durable.store.DurableStore.renew_claim`."""

    @abc.abstractmethod
    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply ``write`` as one conditional write and return ``write.record``
        with the stored lease; when the guard does not hold, read the head and
        raise :func:`~agentflow.checkpoint.plans.refusal` of it. ``operation``
        is the public method's name, for error messages."""

    @abc.abstractmethod
    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        """Up to ``limit`` summaries with a key after ``after`` (None: from the first),
        in key order, and the key the next page resumes after (None when no key follows)."""

    async def _apply_planned(self, operation: str, write: Write) -> DurableCheckpoint:
        self._check_open()
        return await self._apply(operation, self._parts.write(write))

    async def progress(
        self, checkpoint: DurableCheckpoint, *, claim_token: str
    ) -> DurableCheckpoint:
        return await self._apply_planned("progress", plan_progress(checkpoint, claim_token))

    async def record_operation(
        self, checkpoint: DurableCheckpoint, entry: OperationJournalEntry, *, claim_token: str
    ) -> DurableCheckpoint:
        return await self.record_operations(checkpoint, (entry,), claim_token=claim_token)

    async def record_operations(
        self,
        checkpoint: DurableCheckpoint,
        entries: Sequence[OperationJournalEntry],
        *,
        claim_token: str,
        events: Sequence[EventOutboxEntry] = (),
    ) -> DurableCheckpoint:
        write = plan_record_operations(checkpoint, entries, claim_token, events)
        return await self._apply_planned("record_operation", write)

    async def suspend(
        self, checkpoint: DurableCheckpoint, *, claim_token: str
    ) -> DurableCheckpoint:
        return await self._apply_planned("suspend", plan_suspend(checkpoint, claim_token))

    async def commit(self, checkpoint: DurableCheckpoint, *, claim_token: str) -> DurableCheckpoint:
        return await self._apply_planned("commit", plan_commit(checkpoint, claim_token))

    async def finalize_claimed(
        self, checkpoint: DurableCheckpoint, *, claim_token: str
    ) -> DurableCheckpoint:
        write = plan_finalize_claimed(checkpoint, claim_token)
        return await self._apply_planned("finalize_claimed", write)

    async def finalize(self, checkpoint: DurableCheckpoint) -> DurableCheckpoint:
        return await self._apply_planned("finalize", plan_finalize(checkpoint))

    async def record_event_delivery(
        self,
        checkpoint: DurableCheckpoint,
        *,
        claim_token: str | None,
        event_id: str,
        payload_digest: str,
        cursor: EventCursor,
    ) -> DurableCheckpoint:
        write = plan_event_delivery(checkpoint, claim_token, event_id, payload_digest, cursor)
        return await self._apply_planned("record_event_delivery", write)

    async def record_event_deliveries(
        self,
        checkpoint: DurableCheckpoint,
        deliveries: Sequence[EventDelivery],
        *,
        claim_token: str | None,
    ) -> DurableCheckpoint:
        write = plan_event_deliveries(checkpoint, claim_token, deliveries)
        return await self._apply_planned("record_event_delivery", write)

    async def acknowledge_terminal(self, checkpoint: DurableCheckpoint) -> DurableCheckpoint:
        return await self._apply_planned("acknowledge_terminal", plan_acknowledge(checkpoint))

    async def restore(
        self, stored: DurableCheckpoint, record: DurableCheckpoint
    ) -> DurableCheckpoint:
        return await self._apply_planned("restore", plan_restore(stored, record))

    async def list_runs(
        self,
        *,
        status: CheckpointStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        self._check_open()
        check_limit(limit)
        status = None if status is None else CheckpointStatus(status)
        listing = f"{_RUNS}:{'' if status is None else status.value}"
        after: str | None = None
        if cursor is not None:
            after = (await self._cursors("list_runs")).decode(listing, cursor).get("after")
            if not isinstance(after, str):
                raise InvalidCursor("cursor body is malformed")
        runs, last = await self._list(status, after, limit)
        if last is None:
            return RunPage(runs, None)
        return RunPage(runs, (await self._cursors("list_runs")).encode(listing, {"after": last}))
