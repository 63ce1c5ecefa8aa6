"""One claimed cycle: steps run under a lease until the run stops, then the commit.

A ``run``/``resume`` call holds one lease from its first step to its last
and ends it with one write: ``finalize`` when the run is done, ``commit``
when it suspends or reaches ``step_limit`` (a suspend carries its nodes'
settled calls in the record, so they are replayed when the nodes run
again), ``suspend`` when a call was ambiguous (nothing of that step is
stored; the run awaits reconciliation). A node that fails or a cancelled
call releases the lease with the journal kept, so the next resume replays
what was recorded. A long cycle commits and claims again every
:data:`ROLL_AFTER` journaled calls, so the journal stays small.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentflow.checkpoint.base import Checkpoint
from agentflow.durable import (
    ExtensionStateEntry,
    LeaseLost,
    OperationJournalEntry,
    OperationKind,
    OperationState,
    ReconciliationDecision,
    extension_identity,
    restore_extensions,
)
from agentflow.runtime import lifecycle, telemetry
from agentflow.runtime.calls import CallJournal, carried_key, operation_step
from agentflow.runtime.durability import Durability, RunDefinition
from agentflow.runtime.errors import StepLimitExceeded
from agentflow.runtime.events import Sink
from agentflow.runtime.leases import Lease, step_claimed
from agentflow.runtime.records import Records, carried_of, carrying, finished
from agentflow.runtime.recovery import Reconciliation, observation_of
from agentflow.runtime.result import RunResult
from agentflow.runtime.section import EXTENSIONS_KEY
from agentflow.runtime.steps import StepAbandoned, StepEnv, StepRunner

__all__ = ["ROLL_AFTER", "Cycles", "suspended_calls"]

#: Journaled calls after which a long cycle is committed and claimed again.
ROLL_AFTER = 64
_SETTLED = frozenset({OperationState.SUCCEEDED, OperationState.FAILED})


def _entries(lease: Lease) -> list[OperationJournalEntry]:
    record = lease.record
    return [*record.model_call_journal, *record.tool_journal]


def _journaled(lease: Lease) -> int:
    """How many calls the cycle has journaled (O(1))."""
    record = lease.record
    return len(record.model_call_journal) + len(record.tool_journal)


def suspended_calls(lease: Lease, suspend: Checkpoint) -> dict[str, OperationJournalEntry]:
    """The settled calls of the suspend ``suspend``, to replay when its nodes run again.

    Committed with the suspend (the record's carried calls), or still in the
    journal when the process died between storing the suspend and committing.
    """
    if not suspend.interrupted:
        return {}
    calls = carried_of(lease.record, suspend)
    for entry in _entries(lease):
        if entry.state in _SETTLED and operation_step(entry.operation_id) == suspend.step:
            calls[carried_key(entry)] = entry
    return calls


def _stored_extensions(cp: Checkpoint) -> dict[str, ExtensionStateEntry]:
    stored = cp.extra.get(EXTENSIONS_KEY)
    if not isinstance(stored, Mapping):
        return {}
    return {name: ExtensionStateEntry.from_dict(entry) for name, entry in stored.items()}


class Cycles:
    """Runs the steps of one graph's threads under their leases."""

    def __init__(
        self,
        steps: StepRunner,
        records: Records,
        durability: Durability,
        definition: RunDefinition,
        step_limit: int,
    ) -> None:
        self.steps = steps
        self.records = records
        self.durability = durability
        self.definition = definition
        self.step_limit = step_limit

    def env(self, lease: Lease | None, cp: Checkpoint, *, restore: bool = True) -> StepEnv:
        """The steps' environment: the journal, the run's extensions restored from ``cp``."""
        extensions = self.durability.new_extensions()
        stored = _stored_extensions(cp) if restore else {}
        if restore:
            restore_extensions(
                extensions,
                stored,
                required_namespaces=self.durability.config.required_extension_namespaces,
            )
        journal = None
        if lease is not None:
            journal = CallJournal(lease, first_step=cp.step + 1, carried=suspended_calls(lease, cp))
        return StepEnv(
            journal=journal,
            durability=self.durability,
            extensions={extension_identity(e).namespace: e for e in extensions},
            stored=stored,
            credentials=self.definition.credentials,
        )

    async def run(
        self,
        lease: Lease,
        cp: Checkpoint,
        answers: dict[str, list[Any]],
        writes: Mapping[str, Any],
        sink: Sink,
        *,
        answered_by: str | None = None,
    ) -> RunResult:
        """Run ``cp``'s frontier until the run stops; end the lease with one write.

        With ``answered_by`` ``cp`` is a suspend being answered: its frontier
        runs once although it is suspended.
        """
        try:
            env = self.env(lease, cp)
            env.answered_by = answered_by
            return await self._steps(lease, env, cp, sink, answers=answers, writes=writes)
        except StepAbandoned as abandoned:
            return await self._abandon(lease, cp, abandoned)
        except LeaseLost as lost:
            step = cp.step
            raise await step_claimed(
                lease.store, cp.thread, step, lease.record.revision, lost
            ) from lost
        finally:
            await lease.release()  # a no-op once committed, suspended or finalized

    async def _steps(
        self,
        lease: Lease,
        env: StepEnv,
        cp: Checkpoint,
        sink: Sink,
        *,
        answers: dict[str, list[Any]],
        writes: Mapping[str, Any],
    ) -> RunResult:
        taken = 0
        while cp.next and (not cp.interrupted or env.answered_by is not None):
            if taken >= self.step_limit:
                await lease.commit(carrying(lease.record, None, {}))
                raise StepLimitExceeded(
                    f"thread {cp.thread!r} ran {taken} steps in one call (step_limit); "
                    f"stopped at step {cp.step}, resume to continue"
                )
            with telemetry.current().step(cp.thread, cp.step + 1):
                cp = await self.steps.step(cp, answers, writes, sink, env)
            answers, writes, env.answered_by = {}, {}, None
            taken += 1
            if cp.next and not cp.interrupted and _journaled(lease) >= ROLL_AFTER:
                lease = await self._roll(lease, env, cp)
        if cp.done:
            await lease.finalize(finished(lease.record, cp))
        else:
            assert env.journal is not None
            carried = env.journal.carry(cp.step) if cp.interrupted else {}
            await lease.commit(carrying(lease.record, cp.step, carried))
        return RunResult(cp)

    async def _roll(self, lease: Lease, env: StepEnv, cp: Checkpoint) -> Lease:
        """Commit a long cycle between two steps and claim the next one."""
        committed = await lease.commit(carrying(lease.record, None, {}))
        fresh = await self.records.claim(committed, cp.step)
        env.journal = CallJournal(fresh, first_step=cp.step + 1, carried={})
        return fresh

    async def _abandon(self, lease: Lease, cp: Checkpoint, abandoned: StepAbandoned) -> RunResult:
        """Suspend the run whose step made an ambiguous call: it awaits a decision.

        A call left ``started`` (its node swallowed a cancellation mid-call) may
        have acted as well: it is ambiguous too. Each ambiguous call's
        ``operation_ambiguous`` and ``reconciliation_required`` ride the suspend.
        """
        for kind in OperationKind:
            for entry in lease.record.journal(kind):
                if entry.state is OperationState.STARTED:
                    lease.note(entry.mark_ambiguous())
        record = lease.record
        ambiguous = {signal.operation_id for signal in abandoned.ambiguous}
        decided = []
        for kind in OperationKind:
            for entry in record.journal(kind):
                if entry.state is not OperationState.AMBIGUOUS:
                    continue
                observation = observation_of(entry)
                lease.emit(lifecycle.ambiguous(record, entry))
                lease.emit(lifecycle.required(record, entry, observation))
                if entry.operation_id in ambiguous:
                    decided.append(
                        Reconciliation(observation, ReconciliationDecision.defer(), "policy")
                    )
        await lease.suspend(record)
        return RunResult(cp, tuple(decided))
