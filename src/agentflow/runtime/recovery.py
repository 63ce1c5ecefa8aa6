"""Recovery claims: what happens to calls a previous holder left unsettled.

A recovery claim (a lapsed lease, a run awaiting reconciliation) reads the
journal it inherits. A ``started`` call may have gone out, so it becomes
``ambiguous``; every ambiguous call is then decided, by the graph's
:class:`~agentflow.durable.ReconciliationProvider` if it has one, else by
its policies (``policy_decision``): a model call is retried under
``retry_with_duplicate_risk`` (the risk is recorded as a
``model_retry_duplicate_risk`` event in the record's outbox), a tool call
under ``retry_idempotent_only`` when it was declared idempotent; everything
else is deferred. The whole outcome is one write: the run goes on
(``progress``), ends (an ``abort``: ``finalize``), or is suspended as
``reconciliation_required`` with the deferred calls' observations, until an
operator decides (:func:`record_decision`, ``agentflow reconcile``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from agentflow.durable import (
    MODEL_RISK,
    OPERATOR_ABORT_CODE,
    TOOL_RISK,
    CheckpointStatus,
    DurableCheckpoint,
    DurableStore,
    OperationError,
    OperationJournalEntry,
    OperationKind,
    OperationState,
    ReconciliationDecision,
    ReconciliationDecisionKind,
    ResumeObservation,
    policy_decision,
)
from agentflow.durable.errors import DurableError
from agentflow.runtime import lifecycle, telemetry
from agentflow.runtime.durability import Durability
from agentflow.runtime.errors import (
    DecisionStale,
    NothingToReconcile,
    ThreadNotFound,
    UnknownOperation,
)
from agentflow.runtime.leases import Lease, StoreUse

__all__ = [
    "Reconciliation",
    "observation_of",
    "pending_observations",
    "record_decision",
    "recover",
    "would_defer_all",
]

DecidedBy = Literal["provider", "policy", "operator"]
_D = ReconciliationDecisionKind


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """One ambiguous call and how it was settled (``defer``: it still waits)."""

    observation: ResumeObservation
    decision: ReconciliationDecision
    by: DecidedBy

    @property
    def pending(self) -> bool:
        return self.decision.kind is _D.DEFER


def observation_of(entry: OperationJournalEntry) -> ResumeObservation:
    """What a resumed run reports about one ambiguous call."""
    model = entry.kind is OperationKind.MODEL
    return ResumeObservation(
        operation_id=entry.operation_id,
        operation_kind=entry.kind,
        cycle_index=entry.cycle_index,
        risk=MODEL_RISK if model else TOOL_RISK,
        idempotency_support=entry.idempotency_support,
        attempt=entry.attempt,
    )


def _ambiguous(record: DurableCheckpoint) -> list[OperationJournalEntry]:
    return [
        entry
        for entry in (*record.model_call_journal, *record.tool_journal)
        if entry.state is OperationState.AMBIGUOUS
    ]


def pending_observations(record: DurableCheckpoint) -> list[ResumeObservation]:
    """An observation for every call of ``record`` that is ambiguous."""
    return [observation_of(entry) for entry in _ambiguous(record)]


def would_defer_all(record: DurableCheckpoint, durability: Durability) -> bool:
    """True when a recovery would settle none of ``record``'s ambiguous calls.

    Then a resume changes nothing, so it does not claim (no write, no resume counted).
    """
    if durability.reconciliation is not None:
        return False
    return all(
        policy_decision(
            entry.kind, entry.idempotency_support, durability.model_policy, durability.tool_policy
        ).kind
        is _D.DEFER
        for entry in _ambiguous(record)
    )


def _settled(
    entry: OperationJournalEntry, decision: ReconciliationDecision
) -> OperationJournalEntry:
    """The entry after ``decision`` (not for defer or abort)."""
    decision.validate()
    if decision.kind is _D.RETRY:
        return entry.retry()
    if decision.kind is _D.REPLAY_SUCCESS:
        receipt = decision.response if entry.kind is OperationKind.MODEL else decision.result
        if receipt is None:
            wanted = "response" if entry.kind is OperationKind.MODEL else "result"
            raise DurableError(
                "checkpoint_reconciliation_decision_invalid",
                f"replay_success of a {entry.kind.value} call needs a {wanted}",
            )
        return entry.succeed(receipt)
    assert decision.kind is _D.RECORD_FAILURE and decision.error is not None
    error = decision.error
    return entry.fail(OperationError(error.code, error.message, error.retryable))


def _replace_entry(record: DurableCheckpoint, entry: OperationJournalEntry) -> DurableCheckpoint:
    journal = [
        entry if e.operation_id == entry.operation_id else e for e in record.journal(entry.kind)
    ]
    field = "model_call_journal" if entry.kind is OperationKind.MODEL else "tool_journal"
    return replace(record, **{field: journal})  # type: ignore[arg-type]


def _aborted(record: DurableCheckpoint, reconciliation: Reconciliation) -> DurableCheckpoint:
    error = reconciliation.decision.error
    assert error is not None
    result = {
        "status": CheckpointStatus.FAILED.value,
        "error_code": OPERATOR_ABORT_CODE,
        "message": error.message,
        "error": error.to_dict(),
        "resume_observation": reconciliation.observation.to_dict(),
    }
    return replace(record, status=CheckpointStatus.FAILED, terminal_result=result)


async def _write(
    lease: Lease, record: DurableCheckpoint, decided: Sequence[Reconciliation]
) -> DurableCheckpoint:
    """Apply ``decided`` to ``record`` and store the outcome as one write under ``lease``,
    with the lifecycle events of each decision (the original's, in its order: the
    ambiguity, then what was decided)."""
    aborted: Reconciliation | None = None
    for reconciliation in decided:
        decision = reconciliation.decision
        entry = next(
            e
            for e in _ambiguous(record)
            if e.operation_id == reconciliation.observation.operation_id
        )
        lease.emit(lifecycle.ambiguous(record, entry))
        telemetry.current().reconciled(
            record.checkpoint_key, entry.operation_id, decision.kind.value, reconciliation.by
        )
        if decision.kind is _D.DEFER:
            lease.emit(lifecycle.required(record, entry, reconciliation.observation))
        elif decision.kind is _D.ABORT:
            decision.validate()
            aborted = aborted or reconciliation
        else:
            settled = _settled(entry, decision)
            model = entry.kind is OperationKind.MODEL
            if decision.kind is _D.RETRY and model and reconciliation.by == "policy":
                lease.emit(lifecycle.duplicate_risk(record, entry))
            record = _replace_entry(record, settled)
            lease.emit(lifecycle.resolved(record, entry, decision.kind))
    if aborted is not None:
        return await lease.finalize(_aborted(record, aborted))
    if record.has_ambiguous_operation():
        return await lease.suspend(record)
    return await lease.progress(record)


async def recover(lease: Lease, durability: Durability) -> list[Reconciliation]:
    """Settle what a recovery claim inherited; one write when anything changed.

    Returns how each ambiguous call was decided. After it the lease's record
    is either still claimed (run the step), suspended (``reconciliation_required``:
    some call was deferred) or terminal (an ``abort``).
    """
    record = lease.record
    started = [
        entry
        for entry in (*record.model_call_journal, *record.tool_journal)
        if entry.state is OperationState.STARTED
    ]
    for entry in started:
        record = _replace_entry(record, entry.mark_ambiguous())
    decided: list[Reconciliation] = []
    provider = durability.reconciliation
    for entry in _ambiguous(record):
        observation = observation_of(entry)
        if provider is not None:
            decision = await provider.reconcile(observation)
            decision.validate()
            decided.append(Reconciliation(observation, decision, "provider"))
        else:
            decision = policy_decision(
                entry.kind,
                entry.idempotency_support,
                durability.model_policy,
                durability.tool_policy,
            )
            decided.append(Reconciliation(observation, decision, "policy"))
    await _write(lease, record, decided)  # always: the claim's checkpoint_resumed rides it
    return decided


async def record_decision(
    store: DurableStore,
    thread: str,
    operation_id: str,
    decision: ReconciliationDecision,
    *,
    attempt: int,
    owner: str,
    step: int,
    lease_ms: int = 30_000,
    released: set[str] | None = None,
) -> DurableCheckpoint:
    """Record an operator's ``decision`` on attempt ``attempt`` of one ambiguous call
    of a suspended run.

    The run must be ``reconciliation_required`` (:class:`NothingToReconcile`),
    ``operation_id`` one of its ambiguous calls (:class:`UnknownOperation`), and
    ``attempt`` the attempt that is ambiguous now (:class:`DecisionStale`, writing
    nothing: a decision about attempt 1 never settles attempt 2). The check is
    made again on the record as claimed, so of two racing decisions about one
    attempt exactly one is applied.
    ``defer`` writes nothing. Otherwise the decision is written under a
    recovery claim of the run: ``abort`` ends it as failed
    (``operator_abort_with_unknown_outcome``, the ambiguity kept on record);
    ``retry``, ``replay_success`` and ``record_failure`` settle the call, and
    the run stays suspended while other calls are still ambiguous, or is
    released for the next ``resume`` (which makes a retried call again and
    replays a recorded receipt or failure to the node). Returns the record as
    stored; ``step`` (the thread's latest) is only for the messages;
    ``released`` collects the token of a claim given back (see :class:`Lease`).
    """
    decision.validate()
    record = await store.load(thread)
    if record is None:
        raise ThreadNotFound(f"thread {thread!r} has no durable record")
    if record.status is not CheckpointStatus.RECONCILIATION_REQUIRED:
        raise NothingToReconcile(
            f"thread {thread!r} is {record.status.value}, not waiting for a reconciliation"
        )
    waiting = {entry.operation_id for entry in _ambiguous(record)}
    if operation_id not in waiting:
        raise UnknownOperation(
            f"operation {operation_id!r} is not ambiguous in thread {thread!r}; "
            f"waiting: {', '.join(sorted(waiting)) or 'none'}"
        )
    entry = _current(record, thread, operation_id, attempt)
    if decision.kind is _D.DEFER:
        return record
    if decision.kind is not _D.ABORT:
        _settled(entry, decision)  # refuse a decision that does not fit the call
    with telemetry.recording(None, thread, "agentflow.reconcile"):
        lease = await Lease.take(
            store,
            record,
            owner=owner,
            lease_ms=lease_ms,
            step=step,
            released=released,
            use=StoreUse.of(store),
        )
        try:
            entry = _current(lease.record, thread, operation_id, attempt)  # as claimed
            chosen = Reconciliation(observation_of(entry), decision, "operator")
            written = await _write(lease, lease.record, [chosen])
        finally:
            await lease.release()
        return written


def _current(
    record: DurableCheckpoint, thread: str, operation_id: str, attempt: int
) -> OperationJournalEntry:
    """The ambiguous entry ``operation_id`` of ``record``, when ``attempt`` is its attempt."""
    entry = next((e for e in _ambiguous(record) if e.operation_id == operation_id), None)
    if entry is None:
        raise DecisionStale(
            f"operation {operation_id!r} of thread {thread!r} is no longer ambiguous: "
            "another decision settled it"
        )
    if isinstance(attempt, bool) or not isinstance(attempt, int) or entry.attempt != attempt:
        raise DecisionStale(
            f"operation {operation_id!r} of thread {thread!r} is ambiguous at attempt "
            f"{entry.attempt}, not {attempt!r}: the decision was made about another attempt"
        )
    return entry
