"""The ``DurableStore`` and ``DurableEventStore`` protocols: the contract of every backend.

A store holds the durable records of runs, one per checkpoint key, inside
the namespace (tenant) it was constructed with; two stores with different
namespaces on one database never see each other's records. Every method
checks its arguments before any I/O and raises :class:`DurableError` with a
stable code for bad input, writing nothing.

Writes are compare-and-set, as in the original's transitions: every write
except a lease renewal bumps the revision by one; a write of a claim holder
requires the stored claim token (and claimed cycle) and the revision of the
caller's snapshot; an unclaimed write requires the record to be unclaimed.
The rules live in :mod:`agentflow.checkpoint.plans`; a backend applies
each planned :class:`~agentflow.checkpoint.plans.Write` as one
conditional write and, when it does not apply, raises
:func:`~agentflow.checkpoint.plans.refusal` of the head it then reads:

* :class:`CheckpointNotFound` - no record under the key;
* :class:`LeaseLost` - the caller's claim was replaced or released (fencing);
* :class:`RevisionConflict` - same claim, but the record moved on;
* :class:`ClaimActive` - an unclaimed write met a claim, or a claim met a live lease;
* :class:`TerminalImmutable` - the record is terminal;
* :class:`CycleConflict`, :class:`RecoveryRequired` - a claim of the wrong cycle
  or in the wrong mode.

All of them subclass :class:`DurableConflict`, so nothing was written and a
re-read shows why. Records read back are validated; a stored record that
fails raises :class:`DurableCorrupted`. A lost connection raises
:class:`~agentflow.errors.StoreUnavailable` with the driver error as
``__cause__``; whether the write landed is then unknown to the caller, and
because each write is one conditional statement it either landed whole or
not at all, so re-reading and deciding again is safe.

Leases are measured on the store's clock (the server's where it has one),
so workers on machines with skewed clocks still agree on who holds a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.run.events import AcceptedEvent, AppendOnceResult, EventCursor, EventPage
from agentflow.durable.run.journal import OperationJournalEntry
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.wire.validators import CapabilityRef

__all__ = ["AcceptedEvent", "DurableEventStore", "DurableStore", "RunPage", "RunSummary"]


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One line of a store listing, read from the head alone."""

    key: str
    status: CheckpointStatus
    revision: int
    cycle_index: int
    resume_attempt: int
    claimed: bool
    lease_expires_at_ms: int | None
    terminal: bool
    terminal_acknowledged: bool
    ambiguous: bool


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of :meth:`DurableStore.list_runs`; pass ``next_cursor`` back for the next."""

    runs: list[RunSummary]
    next_cursor: str | None


@runtime_checkable
class DurableStore(Protocol):
    """Durable records of runs, written by compare-and-set. See the module docstring."""

    @property
    def namespace(self) -> str | None:
        """The tenant this store reads and writes (None for the default one)."""
        ...

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        """Insert a validated record if its key is absent.

        Raises :class:`CheckpointAlreadyExists` when a record exists under the
        key (whatever its state); the stored record is unchanged.
        """
        ...

    async def load(self, key: str) -> DurableCheckpoint | None:
        """The record under ``key`` with its current revision and lease, or None."""
        ...

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        """Claim ``cycle_index`` (the committed cycle + 1) for ``lease_ms`` milliseconds.

        Succeeds, atomically, when the record is not terminal, its status is
        running or reconciliation_required, no lease is live (expiry > now on
        the store's clock) and, when there is a lapsed lease, an ambiguous
        journal entry or reconciliation_required, ``mode`` is recovery. Then
        the revision and (for recovery only) ``resume_attempt`` grow by one,
        status becomes running, and the returned record carries the claim
        and its expiry. Of two racing claims exactly one succeeds.

        Raises ``checkpoint_claim_invalid`` for a blank token or a
        non-positive cycle or lease, else :class:`CheckpointNotFound`,
        :class:`TerminalImmutable`, :class:`CycleConflict`,
        :class:`ClaimActive` or :class:`RecoveryRequired`, in that order of
        precedence (see :func:`~agentflow.checkpoint.claims.claim_refusal`).
        """
        ...

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        """Extend the caller's live lease to now + ``lease_ms``; return the new expiry (ms).

        Touches only the lease: no revision, no payload. Raises
        :class:`LeaseLost` when the claim is another's or gone, or the lease
        already lapsed (a lapsed lease may have been taken over, so it is not
        revived), and :class:`CheckpointNotFound`.
        """
        ...

    async def progress(
        self, checkpoint: DurableCheckpoint, *, claim_token: str
    ) -> DurableCheckpoint:
        """Replace the claimed record's content with ``checkpoint`` (the caller's snapshot).

        Guarded on ``claim_token``, the snapshot's claimed cycle and revision,
        and the record's identity (key, task, run, trace, definition digest
        and resume attempt never change). The claim and the stored lease are
        kept. Returns the stored record (revision + 1).
        """
        ...

    async def record_operation(
        self, checkpoint: DurableCheckpoint, entry: OperationJournalEntry, *, claim_token: str
    ) -> DurableCheckpoint:
        """Write one journal entry under the claim, as one small write.

        ``entry`` is new (``planned``, or already ``started`` or ``failed``:
        one atomic write of planned plus that move) or a legal move of the
        snapshot's entry with the same ``(kind, operation_id)``. Nothing but
        the entry and the head is written. Returns the stored record
        (revision + 1). Raises ``operation_transition_invalid`` or
        ``checkpoint_journal_integrity_mismatch`` for an illegal move, before
        any I/O, and the guard errors of :meth:`progress`.
        """
        ...

    async def suspend(
        self, checkpoint: DurableCheckpoint, *, claim_token: str
    ) -> DurableCheckpoint:
        """Release the claim of a run that holds an ambiguous entry.

        The stored record becomes ``reconciliation_required``, unclaimed, with
        its journals kept and its cycle unchanged. Raises
        ``checkpoint_status_invalid`` when the snapshot has no ambiguous entry.
        """
        ...

    async def commit(self, checkpoint: DurableCheckpoint, *, claim_token: str) -> DurableCheckpoint:
        """Commit the claimed cycle: ``cycle_index`` becomes the claimed cycle
        (:class:`CycleConflict` otherwise), both journals clear, the claim is released."""
        ...

    async def finalize_claimed(
        self, checkpoint: DurableCheckpoint, *, claim_token: str
    ) -> DurableCheckpoint:
        """Write the terminal result under the claim and release it.

        The snapshot needs ``terminal_result`` (``checkpoint_terminal_result_required``)
        and a terminal status (``checkpoint_status_invalid``). Journals clear,
        except for an operator's abort, which keeps the ambiguity on record.
        """
        ...

    async def finalize(self, checkpoint: DurableCheckpoint) -> DurableCheckpoint:
        """As :meth:`finalize_claimed`, for an unclaimed, non-terminal record.

        Guarded on the snapshot's revision and on the record being unclaimed
        (:class:`ClaimActive`) and not terminal (:class:`TerminalImmutable`).
        """
        ...

    async def record_event_delivery(
        self,
        checkpoint: DurableCheckpoint,
        *,
        claim_token: str | None,
        event_id: str,
        payload_digest: str,
        cursor: EventCursor,
    ) -> DurableCheckpoint:
        """Mark the snapshot's pending outbox entry ``event_id`` delivered at ``cursor``.

        ``claim_token`` is the record's current claim (None for an unclaimed
        or terminal record); claim, lease and terminal state are kept. Raises
        ``checkpoint_event_outbox_invalid`` (no such pending entry),
        ``event_identity_conflict`` (another digest) or
        ``checkpoint_event_cursor_invalid`` (``cursor.last_event_id`` is not
        ``event_id``) before any I/O.
        """
        ...

    async def acknowledge_terminal(self, checkpoint: DurableCheckpoint) -> DurableCheckpoint:
        """Mark a terminal record acknowledged by its host; the record is kept."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove the record under ``key`` (explicit retention); True if one existed."""
        ...

    async def list_runs(
        self,
        *,
        status: CheckpointStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        """Up to ``limit`` summaries, ordered by key (UTF-8 byte order), after ``cursor``.

        ``status`` keeps only records with that status (for example
        ``reconciliation_required``: the runs waiting for an operator). A
        page costs O(limit), never a scan of all records, and reads no body.
        A cursor is bound to this store kind, namespace and status filter; any
        other cursor raises :class:`~agentflow.errors.InvalidCursor`.
        """
        ...

    async def close(self) -> None:
        """Release connections; safe to call twice."""
        ...

    async def __aenter__(self) -> Self:
        """``async with`` a store closes it on leaving."""
        ...

    async def __aexit__(self, *exc_info: object) -> None: ...


@runtime_checkable
class DurableEventStore(Protocol):
    """An accepted-once event log: each event id is accepted once, forever.

    Bound to a namespace like :class:`DurableStore`. An event's run is its
    ``run_id`` member (a string; events without one are accepted but belong
    to no run's replay).
    """

    @property
    def store_ref(self) -> CapabilityRef:
        """The stable reference an :class:`EventCursor` of this store names."""
        ...

    async def append_once(
        self, event_id: str, payload_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        """Accept ``event`` under ``event_id`` unless that id was accepted before.

        The first call returns ``inserted=True`` and the new cursor; a repeat
        with the same digest returns ``inserted=False`` and the first cursor.
        Argument errors follow :func:`~agentflow.durable.run.events.check_append`;
        then an id accepted with another digest raises
        ``event_identity_conflict`` and a digest that is not the event's own
        ``event_payload_digest_mismatch`` (see
        :func:`~agentflow.durable.run.events.resolve_append`). Concurrent appends
        of one id accept it exactly once.
        """
        ...

    async def replay(
        self,
        run_id: str,
        *,
        after: Mapping[str, Any] | None = None,
        limit: int = 100,
        include_children: bool = False,
    ) -> EventPage:
        """The run's events in acceptance order, after the cursor ``after``.

        With ``include_children`` also the events whose ``parent_run_id`` is
        ``run_id``. A page costs O(limit + its events), not a scan of the
        store. ``after`` is a cursor this store returned (from ``append_once``
        or a page); any other raises :class:`~agentflow.errors.InvalidCursor`.
        """
        ...

    async def close(self) -> None:
        """Release connections; safe to call twice."""
        ...

    async def __aenter__(self) -> Self:
        """``async with`` a store closes it on leaving."""
        ...

    async def __aexit__(self, *exc_info: object) -> None: ...
