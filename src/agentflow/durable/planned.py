"""The writes every durable store makes the same way: plan, then apply as one.

Eight operations of :class:`~agentflow.durable.store.DurableStore` are a plan
from :mod:`agentflow.durable.transitions` (pure: what the stored head must
equal, and what to write) followed by one conditional write. A backend
implements only :meth:`PlannedWrites._apply`, its single conditional
statement, script or command, and inherits the eight.
"""

from __future__ import annotations

import abc

from agentflow.durable.events import EventCursor
from agentflow.durable.journal import OperationJournalEntry
from agentflow.durable.parts import StoredParts
from agentflow.durable.record import DurableCheckpoint
from agentflow.durable.transitions import (
    Write,
    plan_acknowledge,
    plan_commit,
    plan_event_delivery,
    plan_finalize,
    plan_finalize_claimed,
    plan_progress,
    plan_record_operation,
    plan_suspend,
)

__all__ = ["PlannedWrites"]


class PlannedWrites(StoredParts, abc.ABC):
    """The planned-write operations of a durable store, over one hook.

    Each write's body and journal bytes are put in their stored form
    (:class:`~agentflow.durable.parts.RunParts`: checked, or sealed with the
    key ring a subclass keeps in ``_sealing``) before ``_apply`` sees them.
    """

    @abc.abstractmethod
    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply ``write`` as one conditional write and return ``write.record``
        with the stored lease; when the guard does not hold, read the head and
        raise :func:`~agentflow.durable.transitions.refusal` of it. ``operation``
        is the public method's name, for error messages."""

    async def _apply_planned(self, operation: str, write: Write) -> DurableCheckpoint:
        return await self._apply(operation, self._parts.write(write))

    async def progress(
        self, checkpoint: DurableCheckpoint, *, claim_token: str
    ) -> DurableCheckpoint:
        return await self._apply_planned("progress", plan_progress(checkpoint, claim_token))

    async def record_operation(
        self, checkpoint: DurableCheckpoint, entry: OperationJournalEntry, *, claim_token: str
    ) -> DurableCheckpoint:
        write = plan_record_operation(checkpoint, entry, claim_token)
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

    async def acknowledge_terminal(self, checkpoint: DurableCheckpoint) -> DurableCheckpoint:
        return await self._apply_planned("acknowledge_terminal", plan_acknowledge(checkpoint))
