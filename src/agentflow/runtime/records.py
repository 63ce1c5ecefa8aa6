"""Each thread's durable record: created with the thread, checked and claimed on every resume.

The record (a :class:`~agentflow.durable.DurableCheckpoint` under the thread
id as its key) holds what the checkpoints do not: who holds the run (the
claim and its lease), the journal of the calls of the cycle in flight, and
the outbox. A *cycle* is one claim: every ``run``/``resume`` call claims the
next cycle, runs steps under it and commits it when the run stops (done,
suspended, out of steps), so a call costs one claim and one commit however
many steps it runs. Threads written before the record existed (or forked)
get theirs on their first resume.

A compiled graph keeps the records in its store: every agentflow store
(:class:`~agentflow.checkpoint.store.Store`) holds them beside the
checkpoints, on the same connection. Only a third-party checkpointer needs
one given (``compile(checkpointer, durable=...)``), and a durable store of
another namespace or database than the checkpointer's is refused, because
a lease kept apart from the steps it guards would let two processes run one
step.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import replace
from typing import cast

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.store import Store
from agentflow.durable import (
    MAX_WIRE_INTEGER,
    Admission,
    CheckpointAlreadyExists,
    CheckpointStatus,
    CycleConflict,
    DurableCheckpoint,
    DurableConflict,
    DurableStore,
    OperationJournalEntry,
    RecoveryRequired,
    ResumePolicy,
    admission,
)
from agentflow.errors import InvalidArgument, StoreUnavailable
from agentflow.runtime.durability import RunDefinition
from agentflow.runtime.errors import StepClaimed
from agentflow.runtime.leases import RELEASE_MS, Lease, StoreUse
from agentflow.runtime.lifecycle import created, deliver

__all__ = ["CARRIED", "SCOPE", "Records", "carried_of", "carrying", "durable_of", "finished"]

#: ``shared_state`` member holding the settled calls of a suspended step.
CARRIED = "carried"
#: ``shared_state`` member naming the namespace the run was created in: its calls'
#: ``idem_`` keys name it, and keep naming it in a copy to another namespace (the
#: same run must keep its keys, or a provider that deduplicates would act twice).
SCOPE = "idempotency_scope"
#: Claims tried against a record that keeps moving on before giving up.
_CLAIM_TRIES = 3


def durable_of(checkpointer: Checkpointer, durable: DurableStore | None) -> DurableStore:
    """Where a graph compiled on ``checkpointer`` keeps its records, checked before any I/O."""
    if durable is None:
        if isinstance(checkpointer, Store):
            return checkpointer
        raise InvalidArgument(
            f"a {type(checkpointer).__name__} keeps no durable records: compile on an agentflow "
            "store (agentflow.open_store(URL)), or give this checkpointer a durable store of "
            "its own database with durable="
        )
    if not isinstance(durable, DurableStore):
        raise InvalidArgument(f"durable must be a DurableStore, got {type(durable).__name__}")
    namespace = getattr(checkpointer, "namespace", None) or None
    if namespace != (durable.namespace or None):
        raise InvalidArgument(
            f"the durable store's namespace {durable.namespace or None!r} is not the "
            f"checkpointer's {namespace!r}: a thread's record lives beside its checkpoints"
        )
    theirs, ours = getattr(durable, "database", None), getattr(checkpointer, "database", None)
    if isinstance(theirs, str) and isinstance(ours, str) and theirs != ours:
        raise InvalidArgument(
            f"the durable store is on {theirs}, the checkpointer on {ours}: a thread's record "
            "lives beside its checkpoints, in one database"
        )
    return durable


def carried_of(record: DurableCheckpoint, suspend: Checkpoint) -> dict[str, OperationJournalEntry]:
    """The settled calls the suspend ``suspend`` carries (empty unless it is that step's)."""
    carried = record.shared_state.get(CARRIED)
    if not isinstance(carried, dict) or carried.get("step") != suspend.step:
        return {}
    entries = carried.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {key: OperationJournalEntry.from_dict(value) for key, value in entries.items()}


def carrying(
    record: DurableCheckpoint, step: int | None, carried: dict[str, OperationJournalEntry]
) -> DurableCheckpoint:
    """``record`` whose ``shared_state`` carries ``carried`` past the suspend at ``step``."""
    shared = {k: v for k, v in record.shared_state.items() if k != CARRIED}
    if step is not None and carried:
        entries = {key: entry.to_dict() for key, entry in sorted(carried.items())}
        shared[CARRIED] = {"step": step, "entries": entries}
    return replace(record, shared_state=shared)


class Records:
    """The durable records of one graph's threads in one durable store."""

    def __init__(
        self,
        store: DurableStore,
        definition: RunDefinition,
        *,
        owner: str,
        lease_ms: int,
        use: StoreUse,
    ) -> None:
        self.store = store
        #: What the store can do for a lease (decided once, at compile).
        self.use = use
        self.definition = definition
        self.owner = owner
        self.lease_ms = lease_ms
        #: Claim tokens this process released (renewed for 1 ms): waited out, not refused.
        self.released: set[str] = set()

    def _new(self, thread: str) -> DurableCheckpoint:
        """A new record of ``thread``, its ``checkpoint_created`` event queued."""
        record = DurableCheckpoint.new(
            self.definition.stored,
            thread,
            task_id=thread,
            root_run_id=thread,
            trace_id=uuid.uuid4().hex,
            shared_state={SCOPE: self.store.namespace or ""},
        )
        return replace(record, event_outbox=[created(record)])

    async def start(self, first: Checkpoint) -> Lease:
        """Store a new run's first step with its new record, claimed (the store is an
        agentflow :class:`Store` holding the steps: :attr:`use` says ``together``)."""
        return await Lease.start(
            cast(Store, self.store),
            first,
            self._new(first.thread),
            owner=self.owner,
            lease_ms=self.lease_ms,
            released=self.released,
            use=self.use,
        )

    async def ensure(self, thread: str) -> DurableCheckpoint:
        """``thread``'s record, created (unclaimed, at cycle 0) if it has none yet."""
        record = await self.store.load(thread)
        if record is not None:
            return record
        with contextlib.suppress(CheckpointAlreadyExists):  # a racer created it: use theirs
            await self.store.create(self._new(thread))
        record = await self.store.load(thread)
        assert record is not None
        return record

    async def deliver_ended(self, record: DurableCheckpoint) -> None:
        """Deliver the events an ended run's last holder left pending (it died between
        its last write and their delivery), as the original does when it finds a
        terminal record; a racing delivery or an unavailable store leaves them."""
        with contextlib.suppress(DurableConflict, StoreUnavailable):
            await deliver(self.store, record, claim_token=None, batches=self.use.batches)

    def admit(self, record: DurableCheckpoint) -> Admission:
        """Refuse a record another definition wrote (before any claim or call).

        ``create`` never comes back (the record exists); ``replay_terminal``
        means the run ended (finished, or aborted by an operator). Whether a
        lease is live is left to the claim, decided on the store's clock
        (``now_ms`` past every lease turns the advisory check off).
        """
        return admission(
            ResumePolicy.RESUME_IF_PRESENT,
            record,
            run_definition=self.definition.stored,
            run_definition_digest=self.definition.digest,
            now_ms=MAX_WIRE_INTEGER,
        )

    async def claim(self, record: DurableCheckpoint, step: int) -> Lease:
        """Claim the next cycle of ``record`` (:class:`StepClaimed` while another holds it).

        A record that moved on since it was read (another process claimed and
        committed or released it meanwhile) is read again and claimed anew;
        the caller then re-reads the thread under the claim.
        """
        for _ in range(_CLAIM_TRIES - 1):
            try:
                return await self._take(record, step)
            except (CycleConflict, RecoveryRequired):
                record = await self.ensure(record.checkpoint_key)
            except StepClaimed:
                record = await self.ensure(record.checkpoint_key)
                if record.claim_token not in self.released:
                    raise
                await asyncio.sleep(2 * RELEASE_MS / 1000)  # past the store's next tick
        return await self._take(record, step)

    async def _take(self, record: DurableCheckpoint, step: int) -> Lease:
        return await Lease.take(
            self.store,
            record,
            owner=self.owner,
            lease_ms=self.lease_ms,
            step=step,
            released=self.released,
            use=self.use,
        )


def finished(record: DurableCheckpoint, cp: Checkpoint) -> DurableCheckpoint:
    """The terminal record of a run whose checkpoint ``cp`` is done."""
    done = carrying(record, None, {})
    return replace(
        done,
        cycle_index=record.claimed_cycle or record.cycle_index,
        status=CheckpointStatus.COMPLETED,
        terminal_result={"status": "completed", "step": cp.step},
    )
