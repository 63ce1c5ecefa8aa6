"""The lease a process holds on a run while it runs steps, kept alive by a heartbeat.

Every path that runs nodes (``run``, every ``resume``, the worker) first
claims the thread's durable record: a compare-and-set on its claim token
and revision, decided by the store, so of racing claimers exactly one wins
and the others get :class:`~agentflow.runtime.StepClaimed` naming the
holder and until when. While the holder runs steps a heartbeat renews the
lease every third of its length; a holder whose lease was lost (another
process took the run over after it lapsed) is fenced: every later write of
its claim is refused with :class:`~agentflow.durable.LeaseLost`, so it
starts no further external call and stores no further step.

The claim token is ``OWNER#RANDOM``: the owner part (``host:pid:token`` of
the compiled graph, or its worker identity) is what errors and ``agentflow
show`` name as the holder.

A settled call's receipt is not written on its own: it waits in the lease
(:meth:`Lease.note`) and rides the next write, the next call's ``started``
entry or the step's commit (:meth:`Lease.commit_step`, one transaction with
the step's checkpoint on the SQL stores). A call that may not go out twice
therefore costs one write before it is sent, and nothing after.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import cast

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.durable import (
    ClaimActive,
    ClaimMode,
    DurableCheckpoint,
    DurableConflict,
    DurableStore,
    LeaseLost,
    OperationJournalEntry,
)
from agentflow.errors import AgentflowError, StoreUnavailable
from agentflow.runtime import telemetry
from agentflow.runtime.errors import StepClaimed
from agentflow.runtime.held import HeldRecord
from agentflow.runtime.lifecycle import deliver, resumed

__all__ = [
    "RELEASE_MS",
    "Lease",
    "StoreUse",
    "claim_token",
    "holder_of",
    "instant_us",
    "iso_ms",
    "lease_ms_of",
    "minted_here",
    "step_claimed",
]

#: A released lease is renewed for this long: it lapses at once, journal kept.
RELEASE_MS = 1
#: Released tokens a process remembers (to wait their millisecond out).
_REMEMBERED = 1024


#: Starts the random part of every claim token this process mints, so a process
#: restarted under a worker identity tells its previous incarnation's claims
#: (to take back) from its own.
_INCARNATION = secrets.token_hex(4)


def claim_token(owner: str) -> str:
    """A fresh claim token naming ``owner``: ``OWNER#`` then this process's
    incarnation and a random part."""
    return f"{owner}#{_INCARNATION}{secrets.token_hex(8)}"


def minted_here(token: str) -> bool:
    """Whether this process minted ``token`` (see :func:`claim_token`)."""
    return token.rpartition("#")[2].startswith(_INCARNATION)


def holder_of(token: str | None) -> str:
    """Who holds a claim token (its owner part), for messages."""
    return "nobody" if token is None else token.rpartition("#")[0] or token


def iso_ms(epoch_ms: int | None) -> str:
    """An epoch-milliseconds instant as ISO-8601 UTC ("" for None)."""
    if epoch_ms is None:
        return ""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat()


def instant_us(moment: datetime) -> int:
    """``moment`` as epoch microseconds, comparable with stored ISO times."""
    return parse_instant(moment.isoformat())


def lease_ms_of(seconds: float) -> int:
    """A lease length in whole milliseconds (at least 1)."""
    return max(1, round(seconds * 1000))


async def step_claimed(
    store: DurableStore, thread: str, step: int, expected: int, cause: AgentflowError
) -> StepClaimed:
    """The :class:`StepClaimed` for a claim or write refused because another holds the run."""
    record = await store.load(thread)
    actual = record.revision if record is not None else expected
    token = record.claim_token if record is not None else None
    until = iso_ms(record.lease_expires_at_ms) if record is not None else ""
    claimed = StepClaimed(thread, step, expected, actual, holder=holder_of(token), until=until)
    claimed.__cause__ = cause
    return claimed


@dataclass(frozen=True, slots=True)
class StoreUse:
    """What a durable store can do for a lease, decided once per compiled graph (an
    ``isinstance`` check of the :class:`Store` protocol costs far more than a write plan)."""

    #: It writes several journal entries as one write (every agentflow store).
    batches: bool = False
    #: It holds the steps too, so a step and its receipts commit as one write.
    together: bool = False

    @classmethod
    def of(cls, store: DurableStore, checkpointer: Checkpointer | None = None) -> StoreUse:
        if not isinstance(store, Store):
            return cls()
        together = checkpointer is not None and (
            store is checkpointer
            or (
                isinstance(checkpointer, Store)
                and store.database == checkpointer.database
                and store.namespace == checkpointer.namespace
            )
        )
        return cls(batches=True, together=together)


class Lease(HeldRecord):
    """One claim on one run: the record as stored, as this holder sees it, and a heartbeat.

    ``record`` is the holder's view: the stored record with the settled calls
    not yet written (:meth:`note`) in its journal, at the stored revision, so
    a write planned from it (commit, suspend, finalize) carries them; writes
    go through :meth:`adopt`. ``lost`` is set once a renewal was refused; then
    :meth:`check` raises :class:`LeaseLost`.
    """

    def __init__(
        self,
        store: DurableStore,
        record: DurableCheckpoint,
        lease_ms: int,
        *,
        recovery: bool,
        released: set[str] | None = None,
        use: StoreUse = StoreUse(),
    ) -> None:
        assert record.claim_token is not None
        super().__init__(record)
        self.store = store
        self.use = use
        self.token = record.claim_token
        self.lease_ms = lease_ms
        #: True when this claim took the run over (a lapsed lease, an ambiguity).
        self.recovery = recovery
        self.lost: LeaseLost | None = None
        #: Until when (``time.monotonic()``) the lease is known to be live: the
        #: send time of the last claim or renewal the store granted, plus its length.
        self.live_until = time.monotonic() + lease_ms / 1000
        self._released = released
        self._heartbeat: asyncio.Task[None] | None = None
        #: Set before the heartbeat is cancelled: a driver that turns the
        #: cancellation of a renewal in flight into an error of its own
        #: (redis-py may) must not keep the heartbeat beating.
        self._stopping = False
        self._ended = False

    @classmethod
    async def take(
        cls,
        store: DurableStore,
        record: DurableCheckpoint,
        *,
        owner: str,
        lease_ms: int,
        step: int,
        released: set[str] | None = None,
        use: StoreUse = StoreUse(),
    ) -> Lease:
        """Claim the cycle after ``record``'s committed one, or raise :class:`StepClaimed`.

        The mode is read off the snapshot: a record with a (lapsed) lease, an
        ambiguous entry or awaiting reconciliation needs a recovery claim.
        The store decides; a lease still live (a racing claimer won) is a
        :class:`StepClaimed` naming the holder. A record that moved on since
        the snapshot (:class:`~agentflow.durable.CycleConflict`,
        :class:`~agentflow.durable.RecoveryRequired`) raises as the store
        said: read it again and decide again.
        """
        recovery = (
            record.lease_expires_at_ms is not None
            or record.has_ambiguous_operation()
            or record.status.value == "reconciliation_required"
        )
        sent = time.monotonic()
        try:
            with telemetry.current().store_write("claim"):
                claimed = await store.claim(
                    record.checkpoint_key,
                    cycle_index=record.cycle_index + 1,
                    claim_token=claim_token(owner),
                    lease_ms=lease_ms,
                    mode=ClaimMode.RECOVERY if recovery else ClaimMode.CONTINUE,
                )
        except ClaimActive as active:
            raise await step_claimed(
                store, record.checkpoint_key, step, record.revision, active
            ) from active
        return cls._beating(
            store, claimed, lease_ms, sent, recovery=recovery, released=released, use=use
        )

    @classmethod
    async def start(
        cls,
        store: Store,
        first: Checkpoint,
        record: DurableCheckpoint,
        *,
        owner: str,
        lease_ms: int,
        released: set[str] | None = None,
        use: StoreUse,
    ) -> Lease:
        """Store a new run's first step ``first`` with its record ``record``, claimed:
        one :meth:`~agentflow.checkpoint.store.Store.start_run`. A store that starts
        a run in several writes may see another process claim the new record in
        between: that is a :class:`StepClaimed` naming it, as in :meth:`take`."""
        sent = time.monotonic()
        try:
            with telemetry.current().store_write("start_run"):
                claimed = await store.start_run(
                    first, record, claim_token=claim_token(owner), lease_ms=lease_ms
                )
        except ClaimActive as active:
            raise await step_claimed(store, first.thread, first.step, 0, active) from active
        return cls._beating(
            store, claimed, lease_ms, sent, recovery=False, released=released, use=use
        )

    @classmethod
    def held(
        cls,
        store: DurableStore,
        claimed: DurableCheckpoint,
        *,
        lease_ms: int,
        sent: float,
        recovery: bool,
        released: set[str] | None = None,
        use: StoreUse = StoreUse(),
    ) -> Lease:
        """The lease of a claim made elsewhere, sent at ``sent`` (``time.monotonic()``):
        a batch claim of due runs (:meth:`~agentflow.checkpoint.store.Store.claim_due`)."""
        return cls._beating(
            store, claimed, lease_ms, sent, recovery=recovery, released=released, use=use
        )

    @classmethod
    def _beating(
        cls,
        store: DurableStore,
        claimed: DurableCheckpoint,
        lease_ms: int,
        sent: float,
        *,
        recovery: bool,
        released: set[str] | None,
        use: StoreUse,
    ) -> Lease:
        """The lease of a claim sent at ``sent`` (monotonic), its heartbeat started."""
        lease = cls(store, claimed, lease_ms, recovery=recovery, released=released, use=use)
        if recovery:  # rides the recovery's write (or the first one after the claim)
            lease.emit(resumed(claimed))
        lease.live_until = sent + lease_ms / 1000
        lease._heartbeat = asyncio.create_task(lease._beat())
        return lease

    async def record_operation(self, entry: OperationJournalEntry) -> DurableCheckpoint:
        """Journal ``entry`` under this claim, with everything noted before it, as one write."""
        self.check()
        return await self._write([*self._pending, entry])

    async def flush(self) -> None:
        """Store what was noted or emitted, if anything (before the lease is given up)."""
        if self._pending or (self._events and self.use.batches):
            await self._write(list(self._pending))

    async def _write(self, entries: list[OperationJournalEntry]) -> DurableCheckpoint:
        noted, events = len(self._pending), list(self._events)
        with telemetry.current().store_write("record_operations"):
            if self.use.batches:
                written = await cast(Store, self.store).record_operations(
                    self._stored, entries, claim_token=self.token, events=events
                )
            else:  # a third-party store writes one entry at a time; events wait for a whole write
                events = []
                written = self._stored
                for entry in entries:
                    written = await self.store.record_operation(
                        written, entry, claim_token=self.token
                    )
        return self._taken(written, noted, len(events))

    async def commit_step(self, cp: Checkpoint, checkpointer: Checkpointer) -> DurableCheckpoint:
        """Store the step ``cp`` with the receipts noted and the events emitted,
        together where the store can; then deliver the events still pending.

        On an agentflow store that holds ``checkpointer``'s steps too
        (:attr:`use`) it is one :meth:`~agentflow.checkpoint.store.Store.commit_step`
        (which delivers the events itself on SQLite and PostgreSQL); otherwise
        the receipts are written first, then the step.
        """
        self.check()
        if self.use.together:
            noted, events = len(self._pending), list(self._events)
            with telemetry.current().store_write("commit_step"):
                written = await cast(Store, self.store).commit_step(
                    cp, self._stored, self._pending[:noted], claim_token=self.token, events=events
                )
            self._taken(written, noted, len(events))
        else:
            await self.flush()
            with telemetry.current().store_write("put"):
                await checkpointer.put(cp, if_revision=0)
        await self.deliver()
        return self.record

    async def deliver(self) -> None:
        """Deliver the stored record's pending events into the event log (at least
        once: a conflict or an unavailable store leaves them pending for the next
        write or holder, and the log accepts each id once)."""
        if all(entry.state != "pending" for entry in self._stored.event_outbox):
            return
        claim = None if self._ended else self.token
        with contextlib.suppress(DurableConflict, StoreUnavailable):
            written = await deliver(
                self.store, self._stored, claim_token=claim, batches=self.use.batches
            )
            self._taken(written, len(self._pending), 0)  # noted and emitted: still to write

    async def progress(self, snapshot: DurableCheckpoint) -> DurableCheckpoint:
        """Replace the record's content under this claim (with the events emitted);
        the claim stays."""
        with telemetry.current().store_write("progress"):
            written = await self.store.progress(
                self.with_events(snapshot, ending=False), claim_token=self.token
            )
        self.adopt(written)
        await self.deliver()
        return self._stored

    async def commit(self, snapshot: DurableCheckpoint) -> DurableCheckpoint:
        """Commit the claimed cycle and release the claim."""
        cycle = snapshot.claimed_cycle
        assert cycle is not None
        committed = replace(self.with_events(snapshot, ending=True), cycle_index=cycle)
        return await self._last("commit", self.store.commit(committed, claim_token=self.token))

    async def suspend(self, snapshot: DurableCheckpoint) -> DurableCheckpoint:
        """Release the claim of a run left ambiguous: it awaits reconciliation."""
        suspended = self.with_events(snapshot, ending=False)
        return await self._last("suspend", self.store.suspend(suspended, claim_token=self.token))

    async def finalize(self, snapshot: DurableCheckpoint) -> DurableCheckpoint:
        """Write the terminal result under this claim and release it."""
        terminal = self.with_events(snapshot, ending=True)
        write = self.store.finalize_claimed(terminal, claim_token=self.token)
        return await self._last("finalize", write)

    async def _last(self, operation: str, write: Awaitable[DurableCheckpoint]) -> DurableCheckpoint:
        """The write that ends the claim; if it fails, :meth:`release` still may.
        The events it stored are delivered after it, on the unclaimed record."""
        await self._stop_heartbeat()
        with telemetry.current().store_write(operation):
            written = await write
        self._ended = True
        self.adopt(written)
        await self.deliver()
        return self._stored

    def check(self) -> None:
        """Raise :class:`LeaseLost` if a renewal was refused: start nothing more."""
        if self.lost is not None:
            raise LeaseLost(f"the lease on {self.record.checkpoint_key!r} was lost: {self.lost}")

    async def ensure_live(self) -> None:
        """Raise :class:`LeaseLost` unless the lease is surely live for a third of its length.

        Called before a call goes out. A holder that stalled (a GC pause, a
        starved process) past its heartbeat may hold a lease that lapsed
        although no one took it over yet; a write of its own would still be
        accepted, but a call sent now could land after another process took
        the run over and found it ambiguous. So a lease not known to be live
        (by this process's monotonic clock: the last grant's send time plus
        the lease length) is renewed first, and a refused renewal fences.
        """
        self.check()
        if time.monotonic() < self.live_until - self.lease_ms / 3000:
            return
        try:
            await self._renew(self.lease_ms)
        except LeaseLost as lost:
            self._lose(lost)
            raise

    async def _renew(self, lease_ms: int) -> None:
        sent = time.monotonic()
        key = self.record.checkpoint_key
        await self.store.renew_claim(key, claim_token=self.token, lease_ms=lease_ms)
        self.live_until = sent + lease_ms / 1000
        telemetry.current().lease_renewed(key)

    def _lose(self, lost: LeaseLost) -> None:
        """Fence this holder: a renewal was refused (noted once, by whoever saw it first)."""
        if self.lost is None:
            self.lost = lost
            telemetry.current().lease_lost(self.record.checkpoint_key, str(lost))

    async def _beat(self) -> None:
        interval = self.lease_ms / 3000
        while not self._stopping:
            await asyncio.sleep(interval)
            try:
                await self._renew(self.lease_ms)
            except LeaseLost as lost:
                self._lose(lost)
                return
            except StoreUnavailable:
                continue  # try again next beat; the lease may still be live

    async def _stop_heartbeat(self) -> None:
        beat, self._heartbeat = self._heartbeat, None
        self._stopping = True
        if beat is not None and not beat.done():
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def release(self) -> None:
        """Give the run up without committing (a node failed, the call was cancelled).

        The journal stays as it is, so the next resume (a recovery claim)
        replays the receipts already recorded instead of calling again; the
        lease is renewed for 1 ms, so that resume may come at once (a
        process waits out a lease it released itself: ``released``).
        """
        if self._ended:
            return
        self._ended = True
        await self._stop_heartbeat()
        if self.lost is not None:
            return
        with contextlib.suppress(LeaseLost, StoreUnavailable):
            await self.flush()  # receipts of calls made go on record, to be replayed
        if self._released is not None:
            if len(self._released) >= _REMEMBERED:
                self._released.clear()  # only the last millisecond's matter
            self._released.add(self.token)
        with contextlib.suppress(LeaseLost, StoreUnavailable):
            await self.store.renew_claim(
                self.record.checkpoint_key, claim_token=self.token, lease_ms=RELEASE_MS
            )
