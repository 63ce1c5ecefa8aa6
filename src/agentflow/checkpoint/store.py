"""The :class:`Store` protocol: one object per database that holds a thread whole.

A thread is three parts kept side by side, in one namespace, on one
connection: its checkpoints (the :class:`~agentflow.checkpoint.base.Checkpointer`
methods), its durable record (lease, journal of external calls, outbox: the
:class:`~agentflow.durable.store.DurableStore` methods, keyed by the thread id)
and its accepted-once events (the :class:`~agentflow.durable.store.DurableEventStore`
methods, whose run is the thread id). Every agentflow backend is a ``Store``;
:func:`~agentflow.checkpoint.stores.open_store` returns one, and
``graph.compile(store)`` needs nothing else.

What makes the parts one thing is the operations that cross them, specified
here and checked on every backend by the conformance suite:

* :meth:`Store.start_run` stores a new thread's first step, creates its record
  and claims it together (one transaction on SQLite and PostgreSQL);
* :meth:`Store.commit_step` stores a step's checkpoint and its calls' receipts
  under the run's claim together: one transaction on SQLite and PostgreSQL,
  one script on Redis; elsewhere the record first, then the checkpoint (so a
  crash between leaves the receipts, never a step without them);
* events leave a record through its outbox: queued ``pending`` by the write
  that causes them (``events=`` of :meth:`Store.record_operations` and
  :meth:`Store.commit_step`, or the outbox of the record a whole-record write
  stores), appended to the event log with ``append_once`` and recorded
  delivered (:meth:`Store.record_event_deliveries`). On SQLite and PostgreSQL
  (their ``delivers_in_step`` is True) a ``commit_step`` or ``start_run`` does
  both in its own transaction for every event pending after it, so the record
  it returns has them delivered; elsewhere they stay pending for the caller
  to deliver, at least once (the log accepts each id once);
* :meth:`Store.delete_thread` removes checkpoints, record and events, and is
  refused while another holder's lease is live unless ``force``;
* a ``prune`` that removes a thread's last checkpoint removes its record and
  events too, so the id can be run again;
* a thread's status (:class:`~agentflow.checkpoint.base.ThreadInfo`) comes from
  its record when the record says more than the checkpoint can
  (``reconciliation_required``, ``failed``), in listings and filters alike;
* :meth:`Store.claim_due` claims a batch of due runs (a timer due in the
  checkpoints, a record nobody holds) that racing claimers skip, and
  :meth:`Store.list_held` finds the records one holder's claims name (see
  :mod:`agentflow.checkpoint.fleet`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.fleet import DueRun
from agentflow.durable.run.events import AcceptedEvent, EventDelivery, EventOutboxEntry
from agentflow.durable.run.journal import OperationJournalEntry
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import DurableEventStore, DurableStore, RunPage

__all__ = ["Store"]


@runtime_checkable
class Store(Checkpointer, DurableStore, DurableEventStore, Protocol):
    """A thread's checkpoints, record and events in one database. See the module docstring.

    ``namespace`` is the tenant of all three parts (None for the default one).
    ``database`` names the database without credentials (a file path, a
    server and database, a key prefix): two stores with equal ``database``
    and ``namespace`` see the same threads.
    """

    @property
    def database(self) -> str:
        """Where this store's data lives, without credentials."""
        ...

    async def record_operations(
        self,
        checkpoint: DurableCheckpoint,
        entries: Sequence[OperationJournalEntry],
        *,
        claim_token: str,
        events: Sequence[EventOutboxEntry] = (),
    ) -> DurableCheckpoint:
        """Write several journal entries under the claim as one write.

        Each entry is new or a legal move of the entry with its ``(kind,
        operation_id)`` in ``checkpoint`` or earlier in ``entries`` (a receipt
        and the next call's ``started`` entry ride one write). ``events``
        (pending outbox entries) are queued in the same write; an id the outbox
        holds already is queued once. Guarded and refused as
        :meth:`~agentflow.durable.store.DurableStore.record_operation`. O(entries
        + events), whatever the journal's length.
        """
        ...

    async def record_event_deliveries(
        self,
        checkpoint: DurableCheckpoint,
        deliveries: Sequence[EventDelivery],
        *,
        claim_token: str | None,
    ) -> DurableCheckpoint:
        """Mark several pending outbox entries delivered as one write: each as
        :meth:`~agentflow.durable.store.DurableStore.record_event_delivery` would,
        in order, all or none (a refusal of one writes nothing)."""
        ...

    async def start_run(
        self,
        cp: Checkpoint,
        checkpoint: DurableCheckpoint,
        *,
        claim_token: str,
        lease_ms: int,
    ) -> DurableCheckpoint:
        """Store a new thread's first step ``cp``, create its record ``checkpoint`` and
        claim the record's next cycle for ``lease_ms``, together; return the claimed record
        (its pending outbox delivered, on SQLite and PostgreSQL).

        Raises :class:`~agentflow.errors.CheckpointConflict` when the step exists and
        :class:`~agentflow.durable.CheckpointAlreadyExists` when a record does, writing
        nothing. One transaction on SQLite and PostgreSQL; elsewhere, after reading
        both, the record is created already claimed and then the step is stored, so
        no other process can claim the new record first, and only two starters
        racing for one new thread can leave one's record without its step.
        """
        ...

    async def commit_step(
        self,
        cp: Checkpoint,
        checkpoint: DurableCheckpoint,
        entries: Sequence[OperationJournalEntry],
        *,
        claim_token: str,
        events: Sequence[EventOutboxEntry] = (),
    ) -> DurableCheckpoint:
        """Store ``cp`` as a new step and journal ``entries`` under the claim, together.

        ``cp`` is written as ``put(cp, if_revision=0)`` and ``entries`` and
        ``events`` as :meth:`record_operations` of the snapshot ``checkpoint``;
        the record's revision grows by one even when ``entries`` is empty. On
        SQLite and PostgreSQL every event pending after the write is appended to
        the event log and recorded delivered in the same transaction. When the claim's
        guard does not hold (:class:`~agentflow.durable.LeaseLost`,
        :class:`~agentflow.durable.RevisionConflict`, ...) or the step exists
        (:class:`~agentflow.errors.CheckpointConflict`), nothing is written on
        SQLite, PostgreSQL, Redis and memory; on MongoDB and the file backend
        the record is written first, so a refused step may leave the receipts
        recorded (docs/durable.md says what each backend guarantees). Returns
        the stored record.
        """
        ...

    async def delete_thread(self, thread: str, *, force: bool = False) -> None:
        """Remove the thread's checkpoints, its record and its events.

        Refused with :class:`~agentflow.durable.ClaimActive`, deleting
        nothing, while a holder's lease on the record is live, unless
        ``force``. A missing thread is a no-op.
        """
        ...

    async def delete(self, key: str, *, force: bool = False) -> bool:
        """:meth:`delete_thread` of ``key``; True when anything was stored under it."""
        ...

    async def restore(
        self, stored: DurableCheckpoint, record: DurableCheckpoint
    ) -> DurableCheckpoint:
        """Replace the record stored as ``stored`` (the caller's snapshot) with ``record``, whole.

        Status, claim and lease, both journals, outbox and terminal result are
        written as ``record`` has them, with its revision, which must be above
        the stored one (``checkpoint_revision_invalid`` before any I/O). Guarded
        on the stored head as ``stored`` has it (revision, claim token and
        cycle, terminal, identity, resume attempt, acknowledgement): a write in
        between wins (:class:`~agentflow.durable.RevisionConflict`, ...). What
        ``agentflow copy`` brings an older copy up to date with, and what
        ``rekey`` re-seals a record with (the same record at revision + 1).
        """
        ...

    async def reseal_event(self, event: AcceptedEvent) -> bool:
        """Store the accepted ``event`` (as this store replayed it) again in its
        current stored form (sealed with the current key); digest, sequence and
        indexes stay. False when no event has its id. For ``rekey``."""
        ...

    async def claim_due(
        self,
        now: str | datetime,
        *,
        claim_tokens: Sequence[str],
        lease_ms: int,
        definitions: Sequence[str] | None = None,
        max_concurrent: int | None = None,
        exclude: Sequence[str] = (),
    ) -> list[DueRun]:
        """Claim up to ``len(claim_tokens)`` runs whose timer is due at ``now`` and whose
        record nobody holds, in wake order, the i-th with ``claim_tokens[i]``, for
        ``lease_ms``: one operation that racing claimers skip (they never wait for
        nor lose to it). ``definitions`` keeps runs of those run definition
        digests; ``max_concurrent`` (with ``definitions``) claims only while fewer
        of their runs hold a live lease, counted when the claim is decided;
        ``exclude`` names threads not to claim. See
        :meth:`~agentflow.checkpoint.fleet.FleetBase.claim_due`.
        """
        ...

    async def list_held(
        self, holder: str, *, limit: int = 100, cursor: str | None = None
    ) -> RunPage:
        """The records whose claim token starts with ``holder#`` (live or lapsed), in
        token order, from an index; cursors as ``list_runs``."""
        ...
