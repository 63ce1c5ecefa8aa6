"""The base of every agentflow store: checkpoints, records and events, and what crosses them.

:class:`StoreBase` joins the three parts' bases
(:class:`~agentflow.checkpoint.backend.CheckpointerBase`,
:class:`~agentflow.checkpoint.runs.RunsBase`,
:class:`~agentflow.checkpoint.events.EventsBase`) and writes the operations
of :class:`~agentflow.checkpoint.store.Store` that touch more than one of
them, in terms of the parts' hooks. Those defaults run the parts one after
the other, the record first; a backend whose database can do better (one
transaction, one script) overrides :meth:`StoreBase._commit_step` and
:meth:`StoreBase._delete_thread`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import ClassVar, Final, NoReturn

from agentflow.checkpoint.backend import CheckpointerBase, EncodedCheckpoint
from agentflow.checkpoint.base import Checkpoint, ThreadStatus
from agentflow.checkpoint.claims import check_claim_request
from agentflow.checkpoint.events import EventsBase
from agentflow.checkpoint.fleet import FleetBase
from agentflow.checkpoint.outbox import Delivery, event_rows, pending_of
from agentflow.checkpoint.plans import Write, next_revision, plan_record_operations
from agentflow.checkpoint.runs import RunsBase
from agentflow.checkpoint.timestamps import parse_instant, wall_clock_ms
from agentflow.checkpoint.validation import check_checkpoint, check_prune_bounds, validate_thread
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import CheckpointAlreadyExists, DurableCorrupted, DurableError
from agentflow.durable.run.events import EventOutboxEntry
from agentflow.durable.run.journal import OperationJournalEntry
from agentflow.durable.run.record import DurableCheckpoint, evolve
from agentflow.durable.wire.validators import validate_checkpoint_key
from agentflow.errors import (
    AgentflowError,
    CheckpointConflict,
    CheckpointCorrupted,
    InvalidArgument,
)

__all__ = ["RUN_STATUSES", "StoreBase", "run_thread_status"]

#: The thread statuses a record decides (the checkpoint cannot tell them).
RUN_STATUSES: Final[dict[CheckpointStatus, ThreadStatus]] = {
    CheckpointStatus.RECONCILIATION_REQUIRED: "reconciliation_required",
    CheckpointStatus.FAILED: "failed",
    CheckpointStatus.MAX_CYCLES: "failed",
}


def run_thread_status(status: CheckpointStatus) -> ThreadStatus | None:
    """The thread status a record in ``status`` imposes on its thread, or None when
    the latest checkpoint says it (running, waiting, done, ...)."""
    return RUN_STATUSES.get(status)


def _is_key(thread: str) -> bool:
    """Whether ``thread`` can be a record's key (a thread id that cannot has no record)."""
    try:
        validate_checkpoint_key(thread)
    except DurableError:
        return False
    return True


class StoreBase(CheckpointerBase, RunsBase, EventsBase, FleetBase, abc.ABC):
    """Every public method of :class:`~agentflow.checkpoint.store.Store`, over I/O hooks.

    Besides the hooks of the three parts a backend implements
    :meth:`_delete_run` and :meth:`_delete_events` (the parts' shares of
    deleting a thread) and :attr:`database`.
    """

    #: Whether :meth:`_commit_step` and :meth:`_start_run` deliver the record's
    #: pending events in their own transaction (the SQL backends override both).
    delivers_in_step: ClassVar[bool] = False

    @property
    @abc.abstractmethod
    def database(self) -> str:
        """Where this store's data lives, without credentials (see the Store protocol)."""

    def _reraise_part(self, exc: Exception, operation: str) -> NoReturn:
        """Raise what ``exc``, met by a record or event ``operation``, is in agentflow's
        terms: the driver's errors mapped as for checkpoints, but damage there is the
        durable layer's :class:`~agentflow.durable.DurableCorrupted`."""
        if isinstance(exc, AgentflowError):
            raise exc
        error = self._driver_error(exc, operation)
        if error is None:
            raise exc
        if isinstance(error, CheckpointCorrupted):
            error = DurableCorrupted("checkpoint_row_invalid", str(error))
        raise error from exc

    async def _delivery(self, operation: str, record: DurableCheckpoint) -> Delivery | None:
        """What a transaction needs to deliver ``record``'s pending events itself
        (None when none is pending): for the backends that ``delivers_in_step``."""
        pending = pending_of(record)
        if not pending:
            return None
        rows = event_rows(self._parts, pending)
        return Delivery(rows, await self._event_signer(operation), self.store_ref, self._parts)

    @abc.abstractmethod
    async def _delete_run(self, key: str, *, force: bool) -> bool:
        """Delete the record under ``key``; True if one existed. Unless ``force``,
        raise :class:`~agentflow.durable.ClaimActive` (deleting nothing) when a
        lease on it is live on the store's clock, decided with the delete."""

    @abc.abstractmethod
    async def _delete_events(self, run_id: str) -> int:
        """Delete every event whose run is ``run_id``; return how many."""

    async def _commit_step(
        self, thread: str, step: int, encode: Callable[[], EncodedCheckpoint], write: Write
    ) -> tuple[int | None, DurableCheckpoint]:
        """Apply ``write`` and store ``encode()`` at a new (thread, step); return the
        stored revision that conflicted (None when written) and the stored record.

        The default writes the record first, then the checkpoint: a crash or a
        conflict between the two leaves the receipts recorded, never a step
        stored without them.
        """
        record = await self._apply("commit_step", write)
        return await self._write_step(thread, step, encode, 0), record

    async def _start_run(
        self,
        thread: str,
        encode: Callable[[], EncodedCheckpoint],
        checkpoint: DurableCheckpoint,
        claim_token: str,
        lease_ms: int,
    ) -> tuple[int | None, DurableCheckpoint | None]:
        """Store ``encode()`` at (thread, 0), create the record ``checkpoint`` and claim
        its next cycle; return the stored revision that conflicted (None when written)
        and the claimed record (None when the step or a record was already there).

        The default reads first (a stored step or record refuses, writing nothing),
        then creates the record already claimed (its lease from this machine's clock,
        renewed on the store's by the holder's heartbeat), so no other process can
        claim it between its creation and its claim, then stores the step: only two
        starters racing for one new thread can leave one's record without its step.
        """
        stored = await self._read_step(thread, 0)
        if stored is not None:
            return (stored.revision, None)
        if await self.load(thread) is not None:
            return None, None
        claimed = evolve(
            checkpoint,
            revision=next_revision(checkpoint.revision),
            claim_token=claim_token,
            claimed_cycle=checkpoint.cycle_index + 1,
            lease_expires_at_ms=wall_clock_ms() + lease_ms,
        )
        try:
            await self.create(claimed)
        except CheckpointAlreadyExists:
            return None, None
        return await self._write_step(thread, 0, encode, 0), claimed

    async def _delete_thread(self, thread: str, force: bool) -> bool:
        """Delete the record (refusing a live lease), then the events and checkpoints;
        True when anything was stored."""
        found = False
        if _is_key(thread):
            found = await self._delete_run(thread, force=force)
            found = await self._delete_events(thread) > 0 or found
        return await self._delete_steps(thread, None, None) > 0 or found

    # -- the operations that cross the parts ----------------------------------

    async def start_run(
        self,
        cp: Checkpoint,
        checkpoint: DurableCheckpoint,
        *,
        claim_token: str,
        lease_ms: int,
    ) -> DurableCheckpoint:
        self._check_open()
        check_checkpoint(cp)
        if cp.step != 0 or cp.thread != checkpoint.checkpoint_key:
            raise InvalidArgument("a run starts at step 0 of its own record's thread")
        check_claim_request(checkpoint.cycle_index + 1, claim_token, lease_ms)
        checkpoint.validate()
        if self._binds_store and not self._store_id:
            await self._bind_store("start_run")
        try:
            found, claimed = await self._start_run(
                cp.thread, lambda: self._encode(cp), checkpoint, claim_token, lease_ms
            )
        except Exception as exc:
            self._reraise(exc, "start_run")
        if found is not None:
            raise CheckpointConflict(cp.thread, 0, 0, found)
        if claimed is None:
            raise CheckpointAlreadyExists(f"a record exists under {cp.thread!r}")
        return claimed

    async def commit_step(
        self,
        cp: Checkpoint,
        checkpoint: DurableCheckpoint,
        entries: Sequence[OperationJournalEntry],
        *,
        claim_token: str,
        events: Sequence[EventOutboxEntry] = (),
    ) -> DurableCheckpoint:
        self._check_open()
        check_checkpoint(cp)
        if cp.thread != checkpoint.checkpoint_key:
            raise DurableError(
                "checkpoint_key_invalid", "a step is committed under its own thread's record"
            )
        planned = plan_record_operations(checkpoint, entries, claim_token, events)
        write = self._parts.write(planned)
        if self._binds_store and not self._store_id:
            await self._bind_store("commit_step")
        try:
            found, record = await self._commit_step(
                cp.thread, cp.step, lambda: self._encode(cp), write
            )
        except Exception as exc:
            self._reraise(exc, "commit_step")
        if found is not None:
            raise CheckpointConflict(cp.thread, cp.step, 0, found)
        return record

    async def delete_thread(self, thread: str, *, force: bool = False) -> None:
        self._check_open()
        validate_thread(thread)
        try:
            await self._delete_thread(thread, bool(force))
        except Exception as exc:
            self._reraise(exc, "delete_thread")

    async def delete(self, key: str, *, force: bool = False) -> bool:
        self._check_open()
        validate_checkpoint_key(key)
        try:
            return await self._delete_thread(key, bool(force))
        except Exception as exc:
            self._reraise(exc, "delete")

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        """As :meth:`Checkpointer.prune`; a prune that would remove the latest step
        removes the thread whole (:meth:`delete_thread`, refused on a live lease)."""
        self._check_open()
        validate_thread(thread)
        cutoff_us = check_prune_bounds(before_step, older_than)
        if self._binds_store and not self._store_id:
            await self._bind_store("prune")
        try:
            row = await self._read_step(thread, None)
            if row is None:
                return 0
            latest = row if isinstance(row, Checkpoint) else self._decode_row(thread, row)
            whole = (before_step is None or latest.step < before_step) and (
                cutoff_us is None or parse_instant(latest.ts) < cutoff_us
            )
            if whole and _is_key(thread):
                await self._delete_run(thread, force=False)
                await self._delete_events(thread)
            return await self._delete_steps(thread, before_step, cutoff_us)
        except Exception as exc:
            self._reraise(exc, "prune")
