"""Ambiguous calls are settled by a policy, a provider or an operator, never guessed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.durable import (
    OPERATOR_ABORT_CODE,
    CapabilityRef,
    CheckpointStatus,
    DurableError,
    OperationState,
    ReconciliationDecision,
    ReconciliationError,
    ResumeObservation,
    stable_event_id,
)
from agentflow.runtime import (
    START,
    CallFailed,
    CompiledGraph,
    Durability,
    Graph,
    ModelCall,
    NodeContext,
    NothingToReconcile,
    NothingToResume,
    ToolCall,
    UnknownOperation,
)
from tests.runtime.conftest import RuntimeBackend


class Flaky:
    """An external system whose first ``failures`` calls drop the connection after sending."""

    def __init__(self, failures: int = 1) -> None:
        self.failures = failures
        self.calls: list[ToolCall | ModelCall] = []

    def __call__(self, call: ToolCall | ModelCall) -> dict[str, Any]:
        self.calls.append(call)
        if self.failures:
            self.failures -= 1
            raise ConnectionResetError("the reply was lost")
        return {"ok": len(self.calls)}


def _charging(
    system: Flaky, durability: Durability | None = None, *, idempotent: bool = False
) -> Graph:
    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            receipt = await ctx.tool("charge", {"cents": 5}, system, idempotent=idempotent)
        except CallFailed as failed:
            return {"failed": failed.failure}
        return {"receipt": receipt}

    graph = Graph("charging", durability=durability or Durability())
    return graph.add_node("charge", charge).add_edge(START, "charge")


async def _ambiguous(graph: Graph) -> tuple[CompiledGraph, MemoryCheckpointer]:
    store = MemoryCheckpointer()
    compiled = graph.compile(store)
    assert (await compiled.run({}, thread="t")).status == "reconciliation_required"
    return compiled, store


async def test_retry_idempotent_only_retries_a_declared_idempotent_tool_with_its_key() -> None:
    system = Flaky()
    policy = Durability(ambiguous_tool_policy="retry_idempotent_only")
    compiled, _ = await _ambiguous(_charging(system, policy, idempotent=True))
    result = await compiled.resume("t")
    assert result.status == "done" and result.state["receipt"] == {"ok": 2}
    first, second = system.calls
    assert isinstance(first, ToolCall) and isinstance(second, ToolCall)
    assert first.idempotency_key == second.idempotency_key
    assert (first.attempt, second.attempt) == (1, 2)
    [decided] = result.reconciliations
    assert (decided.by, decided.decision.kind.value) == ("policy", "retry")


async def test_retry_idempotent_only_never_retries_a_tool_not_declared_idempotent() -> None:
    system = Flaky()
    policy = Durability(ambiguous_tool_policy="retry_idempotent_only")
    compiled, _ = await _ambiguous(_charging(system, policy))
    result = await compiled.resume("t")
    assert result.status == "reconciliation_required" and len(system.calls) == 1


async def test_retry_with_duplicate_risk_retries_a_model_call_and_records_the_risk() -> None:
    system = Flaky()

    async def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"reply": await ctx.model({"model": "m-1"}, system)}

    graph = Graph(
        "asking", durability=Durability(ambiguous_model_policy="retry_with_duplicate_risk")
    )
    compiled, store = await _ambiguous(graph.add_node("ask", ask).add_edge(START, "ask"))
    result = await compiled.resume("t")
    assert result.status == "done" and len(system.calls) == 2
    record = await store.load("t")
    assert record is not None and record.event_outbox == []  # delivered, and dropped at the end
    page = await store.replay("t")
    risks = [e for e in page.events if e.event["type"] == "model_retry_duplicate_risk"]
    assert len(risks) == 1 and risks[0].event["risk"] == "duplicate_model_request_and_cost"
    operation = risks[0].event["operation_id"]  # its id names the attempt the retry makes
    assert risks[0].event_id == stable_event_id("t", "model_retry_duplicate_risk", [operation, "2"])


class Ledger:
    """A provider that looks the call up in an external ledger."""

    def __init__(self, decision: ReconciliationDecision) -> None:
        self.decision = decision
        self.asked: list[ResumeObservation] = []

    async def reconcile(self, observation: ResumeObservation) -> ReconciliationDecision:
        self.asked.append(observation)
        return self.decision


def _asking(provider: Ledger) -> Durability:
    """Settings whose ambiguous calls ``provider`` settles (under a stable reference)."""
    ref = CapabilityRef("tests.ledger", "1")
    return Durability(reconciliation=provider, capability_refs={"reconciliation_provider": ref})


async def test_a_provider_replays_the_receipt_the_outside_world_reports() -> None:
    system, ledger = Flaky(), Ledger(ReconciliationDecision.replay_result({"ok": "from ledger"}))
    compiled, _ = await _ambiguous(_charging(system, _asking(ledger)))
    result = await compiled.resume("t")
    assert result.state["receipt"] == {"ok": "from ledger"} and len(system.calls) == 1
    assert [o.risk for o in ledger.asked] == ["unknown_tool_side_effect"]
    assert result.reconciliations[0].by == "provider"


async def test_a_provider_records_a_failure_the_node_then_sees() -> None:
    error = ReconciliationError("not_charged", "the ledger has no such charge")
    compiled, _ = await _ambiguous(
        _charging(Flaky(), _asking(Ledger(ReconciliationDecision.record_failure(error))))
    )
    assert (await compiled.resume("t")).state["failed"] == "not_charged"


async def test_a_provider_that_aborts_ends_the_run_keeping_the_ambiguity() -> None:
    error = ReconciliationError("unknown", "cannot tell")
    ledger = Ledger(ReconciliationDecision.abort(error))
    compiled, store = await _ambiguous(_charging(Flaky(), _asking(ledger)))
    result = await compiled.resume("t")
    assert result.status == "failed" and result.terminal is not None
    assert result.terminal["error_code"] == OPERATOR_ABORT_CODE
    record = await store.load("t")
    assert record is not None and record.status.value == "failed"
    assert record.tool_journal[0].state is OperationState.AMBIGUOUS
    with pytest.raises(NothingToResume, match="was ended"):
        await compiled.resume("t")


async def test_a_provider_that_defers_leaves_the_run_waiting() -> None:
    ledger = Ledger(ReconciliationDecision.defer())
    compiled, _ = await _ambiguous(_charging(Flaky(), _asking(ledger)))
    result = await compiled.resume("t")
    assert result.status == "reconciliation_required" and len(ledger.asked) == 1


async def _operation(compiled: CompiledGraph) -> str:
    record = await compiled.durable.load("t")
    assert record is not None
    return record.tool_journal[0].operation_id


async def test_an_operator_replays_a_success_and_the_run_goes_on_without_calling() -> None:
    system = Flaky()
    compiled, _ = await _ambiguous(_charging(system))
    operation = await _operation(compiled)
    decided = await compiled.reconcile(
        "t",
        operation,
        ReconciliationDecision.replay_result({"ok": "seen in the ledger"}),
        attempt=1,
    )
    assert decided.status.value == "running"
    result = await compiled.resume("t")
    assert result.state["receipt"] == {"ok": "seen in the ledger"} and len(system.calls) == 1


async def test_an_operator_retries_under_the_same_key() -> None:
    system = Flaky()
    compiled, _ = await _ambiguous(_charging(system))
    await compiled.reconcile(
        "t", await _operation(compiled), ReconciliationDecision.retry(), attempt=1
    )
    result = await compiled.resume("t")
    assert result.state["receipt"] == {"ok": 2}
    assert system.calls[0].idempotency_key == system.calls[1].idempotency_key  # type: ignore[union-attr]


async def test_an_operator_records_a_failure_or_aborts() -> None:
    compiled, _ = await _ambiguous(_charging(Flaky()))
    failure = ReconciliationError("not_charged", "checked the ledger")
    await compiled.reconcile(
        "t", await _operation(compiled), ReconciliationDecision.record_failure(failure), attempt=1
    )
    assert (await compiled.resume("t")).state["failed"] == "not_charged"
    compiled, store = await _ambiguous(_charging(Flaky()))
    aborted = await compiled.reconcile(
        "t", await _operation(compiled), ReconciliationDecision.abort(failure), attempt=1
    )
    assert aborted.terminal_result is not None
    assert aborted.terminal_result["error_code"] == OPERATOR_ABORT_CODE
    assert [info.status for info in await store.list_threads()] == ["failed"]  # not "running"
    assert (
        await compiled.run({}, thread="t", resume_policy="resume_if_present")
    ).status == "failed"


async def test_operator_decisions_are_checked_before_anything_is_written() -> None:
    compiled, store = await _ambiguous(_charging(Flaky()))
    before = await store.load("t")
    assert before is not None
    with pytest.raises(UnknownOperation, match="waiting: op_tool_cycle_1_step_1_"):
        await compiled.reconcile("t", "op_nope", ReconciliationDecision.retry(), attempt=1)
    with pytest.raises(DurableError, match="needs a result"):
        await compiled.reconcile(
            "t",
            await _operation(compiled),
            ReconciliationDecision.replay_response({"x": 1}),
            attempt=1,
        )
    deferred = await compiled.reconcile(
        "t", await _operation(compiled), ReconciliationDecision.defer(), attempt=1
    )
    after = await store.load("t")
    assert after is not None and after.revision == before.revision == deferred.revision
    done = _charging(Flaky(failures=0)).compile(MemoryCheckpointer())
    await done.run({}, thread="t")
    with pytest.raises(NothingToReconcile):
        await done.reconcile("t", "op", ReconciliationDecision.retry(), attempt=1)


async def test_two_ambiguous_calls_wait_until_both_are_settled() -> None:
    async def two(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"a": await ctx.tool("a", {}, Flaky())}

    async def other(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"b": await ctx.tool("b", {}, Flaky())}

    graph = Graph("two").add_node("one", two).add_node("other", other)
    compiled, store = await _ambiguous(graph.add_edge(START, "one").add_edge(START, "other"))
    record = await store.load("t")
    assert record is not None and len(record.tool_journal) == 2
    first, second = (entry.operation_id for entry in record.tool_journal)
    still = await compiled.reconcile(
        "t", first, ReconciliationDecision.replay_result({"ok": 1}), attempt=1
    )
    assert still.status.value == "reconciliation_required"
    ready = await compiled.reconcile(
        "t", second, ReconciliationDecision.replay_result({"ok": 2}), attempt=1
    )
    assert ready.status.value == "running"
    assert (await compiled.resume("t")).state == {"a": {"ok": 1}, "b": {"ok": 2}}


async def test_reconciliation_on_every_durable_backend(durable_backend: RuntimeBackend) -> None:
    system = Flaky()
    async with durable_backend.open() as store:
        compiled = _charging(system).compile(store)
        assert (await compiled.run({}, thread="t")).status == "reconciliation_required"
        listed = await store.list_runs(status=CheckpointStatus.RECONCILIATION_REQUIRED)
        assert [run.key for run in listed.runs] == ["t"]
        waiting = await store.list_threads_page(status="reconciliation_required")
        assert [info.thread for info in waiting.threads] == ["t"]
        assert [info.status for info in await store.list_threads()] == ["reconciliation_required"]
        record = await store.load("t")
        assert record is not None
        operation = record.tool_journal[0].operation_id
        await compiled.reconcile("t", operation, ReconciliationDecision.retry(), attempt=1)
        result = await compiled.resume("t")
    assert result.status == "done" and len(system.calls) == 2
