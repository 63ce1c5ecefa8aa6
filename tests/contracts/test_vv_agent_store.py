"""The contract's store cases (checkpoint_store_v2.json) replayed on the memory store.

Each case names an initial record (only the fields it cares about), one
operation (or two racing ones) and what must hold after. The record is
seeded as given (``create`` stores a record as it is), the operation runs on
a store whose lease clock reads the case's ``now_ms``, and the original's
absolute ``lease_expires_at_ms`` becomes the duration ``lease_ms`` this
package's API takes. Read from a scratch copy (see ``vv_agent_contract``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.durable import (
    OPERATOR_ABORT_CODE,
    Admission,
    CheckpointStatus,
    ClaimMode,
    DurableCheckpoint,
    DurableError,
    EventCursor,
    EventOutboxEntry,
    OperationError,
    OperationJournalEntry,
    OperationState,
    ResumeObservation,
    ResumePolicy,
    admission,
    model_operation_id,
)
from agentflow.durable.run.record import evolve
from agentflow.durable.testing.harness import make_tool_entry
from tests.contracts.vv_agent_contract import load_contract

CONTRACT = load_contract()
STORE_CASES = CONTRACT["checkpoint_store_v2.json"]["store_cases"]
BASE = next(
    case["payload"]
    for case in CONTRACT["checkpoint_codec_v2.json"]["valid_cases"]
    if case["name"] == "minimal_running"
)
KEY = BASE["checkpoint_key"]
#: The lease of a seeded claim whose case gives none: far in the future.
FAR = 10**12
_HEAD = ("revision", "resume_attempt", "cycle_index", "claim_token", "claimed_cycle")


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _entry(kind: str, cycle: int, state: str) -> OperationJournalEntry:
    entry = (
        make_tool_entry(KEY, cycle)
        if kind == "tool"
        else OperationJournalEntry.model(model_operation_id(cycle, "slot"), cycle, "a" * 64)
    )
    target = OperationState(state)
    if target is OperationState.PLANNED:
        return entry
    started = entry.start()
    if target is OperationState.AMBIGUOUS:
        return started.mark_ambiguous()
    if target is OperationState.FAILED:
        return started.fail(OperationError("model_request_failed", "refused", False))
    if target is OperationState.SUCCEEDED:
        return started.succeed({"ok": True})
    return started


def _terminal(status: str, abort_of: OperationJournalEntry | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"status": status, "final_answer": "done"}
    if abort_of is not None:
        observation = ResumeObservation(
            abort_of.operation_id, abort_of.kind, abort_of.cycle_index, risk="unknown"
        )
        result.update(error_code=OPERATOR_ABORT_CODE, resume_observation=observation.to_dict())
    return result


def seed(initial: dict[str, Any]) -> DurableCheckpoint:
    """The record ``initial`` describes, on the contract's minimal running record."""
    fields = {name: initial[name] for name in (*_HEAD, "terminal_acknowledged") if name in initial}
    if "cycle_index" not in fields and initial.get("claimed_cycle"):
        fields["cycle_index"] = initial["claimed_cycle"] - 1  # the cycle before the claimed one
    record = evolve(DurableCheckpoint.from_dict(BASE), **fields)
    record.status = CheckpointStatus(initial.get("status", "running"))
    if record.claim_token is not None:
        record.claimed_cycle = record.claimed_cycle or record.cycle_index + 1
        record.lease_expires_at_ms = initial.get("lease_expires_at_ms") or FAR
    active = record.active_cycle()
    tool_state = initial.get("tool_journal_state") or initial.get("journal_state")
    if tool_state:
        record.tool_journal = [_entry("tool", active, tool_state)]
    if initial.get("model_journal_state"):
        record.model_call_journal = [_entry("model", active, initial["model_journal_state"])]
    for kind in ("model", "tool"):
        if initial.get(f"{kind}_journal_count"):
            settled = [_entry(kind, active, "succeeded")]
            if kind == "model":
                record.model_call_journal = settled
            else:
                record.tool_journal = settled
    if initial.get("terminal_result_present"):
        record.terminal_result = _terminal(record.status.value)
    if "event_id" in initial:
        event = {"type": "checkpoint_created"}
        record.event_outbox = [
            EventOutboxEntry(initial["event_id"], initial["payload_digest"], event)
        ]
    record.validate()
    return record


async def _claim(store: MemoryCheckpointer, clock: Clock, operation: dict[str, Any]) -> Any:
    clock.now = operation["now_ms"]
    return await store.claim(
        KEY,
        cycle_index=operation["cycle_index"],
        claim_token=operation["claim_token"],
        lease_ms=operation["lease_expires_at_ms"] - operation["now_ms"],
        mode=ClaimMode(operation["claim_mode"]),
    )


async def apply(
    store: MemoryCheckpointer,
    clock: Clock,
    operation: dict[str, Any],
    loaded: DurableCheckpoint | None,
) -> Any:
    """Run one operation of a case; writes that take a snapshot take ``loaded``
    (read before the operations, so racing writers hold the same one)."""
    kind = operation["kind"]
    if kind == "create_v2":
        return await store.create(seed({}))
    if kind == "claim_v2":
        return await _claim(store, clock, operation)
    if kind == "renew_v2":
        clock.now = operation["now_ms"]
        lease_ms = operation["lease_expires_at_ms"] - operation["now_ms"]
        return await store.renew_claim(KEY, claim_token=operation["claim_token"], lease_ms=lease_ms)
    if kind == "delete_v2":
        return await store.delete(KEY)
    assert loaded is not None
    if kind == "load_v2":
        return admission(
            ResumePolicy.RESUME_IF_PRESENT,
            loaded,
            run_definition=loaded.run_definition,
            run_definition_digest=loaded.run_definition_digest,
            now_ms=clock.now,
        )
    snapshot = evolve(loaded, revision=operation.get("expected_revision", loaded.revision))
    if "journal_state" in operation:  # the progress journals a call
        snapshot.tool_journal = [_entry("tool", loaded.active_cycle(), operation["journal_state"])]
    token: Any = operation.get("claim_token")  # None for an unclaimed delivery
    writes: dict[str, Callable[[], Awaitable[Any]]] = {
        "progress_v2": lambda: store.progress(snapshot, claim_token=token),
        "suspend_v2": lambda: store.suspend(snapshot, claim_token=token),
        "commit_cycle_v2": lambda: store.commit(
            evolve(snapshot, cycle_index=operation["cycle_index"]), claim_token=token
        ),
        "finalize_v2": lambda: store.finalize(_finalized(snapshot, operation)),
        "finalize_claimed_v2": lambda: store.finalize_claimed(
            _finalized(snapshot, operation), claim_token=token
        ),
        "record_event_delivery_v2": lambda: store.record_event_delivery(
            snapshot,
            claim_token=token,
            event_id=operation["event_id"],
            payload_digest=operation["payload_digest"],
            cursor=EventCursor.from_dict(operation["cursor"]),
        ),
        "acknowledge_terminal_v2": lambda: store.acknowledge_terminal(snapshot),
    }
    return await writes[kind]()


def _finalized(snapshot: DurableCheckpoint, operation: dict[str, Any]) -> DurableCheckpoint:
    aborted = operation.get("terminal_error_code") == OPERATOR_ABORT_CODE
    abort_of = snapshot.tool_journal[0] if aborted else None
    status = CheckpointStatus(operation["status"])
    return evolve(snapshot, status=status, terminal_result=_terminal(status.value, abort_of))


def observed(record: DurableCheckpoint | None) -> dict[str, Any]:
    """What a case's expectations can name, read from the stored record."""
    if record is None:
        return {"row_present": False}
    outbox = record.event_outbox[0].state if record.event_outbox else None
    result = record.terminal_result or {}
    return {
        "row_present": True,
        **{name: getattr(record, name) for name in (*_HEAD, "lease_expires_at_ms")},
        "status": record.status.value,
        "terminal_acknowledged": record.terminal_acknowledged,
        "terminal_result_present": record.terminal_result is not None,
        "resume_observation_present": result.get("resume_observation") is not None,
        "journal_state": record.tool_journal[0].state.value if record.tool_journal else None,
        "tool_journal_state": record.tool_journal[0].state.value if record.tool_journal else None,
        "model_journal_count": len(record.model_call_journal),
        "tool_journal_count": len(record.tool_journal),
        "outbox_state": outbox,
        "event_cursor_last_event_id": record.event_cursor and record.event_cursor.last_event_id,
    }


_OUTCOMES = ("created", "claimed", "updated", "renewed")
_REPLAY = ("terminal_replayed", "claim_count", "model_calls", "tool_calls")


@pytest.mark.parametrize("case", STORE_CASES, ids=[case["name"] for case in STORE_CASES])
async def test_store_case(case: dict[str, Any]) -> None:
    clock = Clock()
    expected = dict(case["expected"])
    async with MemoryCheckpointer(clock=clock) as store:
        if case["initial"] is not None:
            await store.create(seed(case["initial"]))
        loaded = await store.load(KEY)
        seen: dict[str, Any] = {}
        if "operations" in case:  # two racing writers: exactly one wins
            outcomes = await asyncio.gather(
                *(apply(store, clock, operation, loaded) for operation in case["operations"]),
                return_exceptions=True,
            )
            refused = [o for o in outcomes if isinstance(o, DurableError)]
            assert not any(isinstance(o, BaseException) for o in outcomes if o not in refused)
            seen["success_count"] = len(outcomes) - len(refused)
            seen["conflict_count"] = seen["rejected_count"] = len(refused)
        else:
            try:
                done = await apply(store, clock, case["operation"], loaded)
            except DurableError as error:
                seen["error"] = error.code
            else:
                seen.update(dict.fromkeys(_OUTCOMES, True))
                if isinstance(done, Admission):
                    seen.update(dict.fromkeys(_REPLAY, 0))
                    seen["terminal_replayed"] = done is Admission.REPLAY_TERMINAL
            if "error" in seen:
                seen.update(dict.fromkeys(_OUTCOMES, False))
        seen = {**observed(await store.load(KEY)), **seen}
    assert {name: seen.get(name) for name in expected} == expected
