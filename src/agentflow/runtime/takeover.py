"""What a call finds when the run is not its to run: who answered, how it ended,
and the cycle a dead holder left behind.

A holder that dies after storing a suspend (or its last step) but before its
commit leaves the run claimed with a lease that lapses: :func:`settle`
claims it, settles the journal it inherits, and commits (carrying the
suspend's calls) or finalizes, answering nothing and running no node.

A holder that dies under a worker identity need not be waited for: the
process restarted under that identity ends the dead one's lease with its
claim token (:func:`expire_held`) and takes the run over at once.
"""

from __future__ import annotations

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.durable import DurableCheckpoint, DurableStore, ReconciliationDecision
from agentflow.durable.errors import DurableError, LeaseLost
from agentflow.runtime.cycles import suspended_calls
from agentflow.runtime.durability import Durability
from agentflow.runtime.errors import NothingToResume, StepClaimed
from agentflow.runtime.leases import RELEASE_MS
from agentflow.runtime.records import Records, carrying, finished
from agentflow.runtime.recovery import Reconciliation, observation_of, recover
from agentflow.runtime.result import RunResult
from agentflow.runtime.section import runtime_of

__all__ = ["deferred", "ended", "expire_held", "refuse_answered", "settle_cycle", "where"]


def deferred(record: DurableCheckpoint) -> tuple[Reconciliation, ...]:
    """The record's ambiguous calls, each waiting for a decision."""
    return tuple(
        Reconciliation(observation_of(entry), ReconciliationDecision.defer(), "policy")
        for entry in (*record.model_call_journal, *record.tool_journal)
        if entry.state.value == "ambiguous"
    )


async def where(durable: DurableStore, latest: Checkpoint) -> RunResult:
    """A result for a run a call leaves as it is (with its pending decisions)."""
    record = await durable.load(latest.thread)
    if record is None:
        return RunResult(latest)
    if record.terminal_result is not None and not latest.done:
        return RunResult(latest, deferred(record), terminal=record.terminal_result)
    return RunResult(latest, deferred(record))


async def refuse_answered(checkpointer: Checkpointer, cp: Checkpoint) -> None:
    """Raise :class:`StepClaimed` when the run has moved past the suspend ``cp``."""
    latest = await checkpointer.get(cp.thread)
    if latest is None or latest.step == cp.step:
        return
    answered = await checkpointer.get(cp.thread, cp.step + 1)
    by = runtime_of(answered).get("by") if answered is not None else None
    raise StepClaimed(
        cp.thread,
        cp.step,
        cp.revision,
        cp.revision,
        holder=str(by or "another process"),
        until="",
        moved_on=latest.step,
    )


async def ended(checkpointer: Checkpointer, cp: Checkpoint, how: str) -> NothingToResume:
    """Why a run that ended cannot be resumed (a :class:`StepClaimed` if someone
    else answered the suspend ``cp`` meanwhile)."""
    if cp.interrupted:
        await refuse_answered(checkpointer, cp)
    return NothingToResume(f"thread {cp.thread!r} was ended ({how}) and cannot be resumed")


async def settle_cycle(records: Records, durability: Durability, cp: Checkpoint) -> RunResult:
    """End the cycle a dead holder left after storing ``cp`` (a suspend or the end)."""
    record = await records.store.load(cp.thread)
    if record is not None and record.terminal_result is not None:
        await records.deliver_ended(record)
    if record is None or record.claim_token is None or record.terminal_result is not None:
        return await where(records.store, cp)
    try:
        lease = await records.claim(record, cp.step)
    except (StepClaimed, DurableError):
        return await where(records.store, cp)  # another process holds it, or it moved on
    try:
        decided = await recover(lease, durability) if lease.recovery else []
        if lease.record.claim_token is None:  # suspended for a decision, or aborted
            return RunResult(cp, tuple(decided), lease.record.terminal_result)
        if cp.done:
            await lease.finalize(finished(lease.record, cp))
        else:
            await lease.commit(carrying(lease.record, cp.step, suspended_calls(lease, cp)))
    finally:
        await lease.release()
    return RunResult(cp, tuple(decided))


async def expire_held(records: Records, thread: str, claim_token: str) -> None:
    """End the lease ``claim_token`` holds on ``thread`` now, as its holder's release
    would (renewed for a millisecond, journal kept), so a recovery claim may follow
    at once; a lease that lapsed or was taken over already is left as it is."""
    try:
        await records.store.renew_claim(thread, claim_token=claim_token, lease_ms=RELEASE_MS)
    except LeaseLost:
        return
    records.released.add(claim_token)
