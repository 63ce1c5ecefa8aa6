"""A decision names the attempt it settles: a stale one is refused, a racing one applied once.

Two operators both see attempt 1 of a charge ambiguous and both decide
``retry``. The first decision is applied and the run makes attempt 2, which
is ambiguous again; the second decision, made about attempt 1, must not
settle attempt 2 (three charges from two decisions about one attempt).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from agentflow.durable import ReconciliationDecision
from agentflow.runtime import (
    END,
    START,
    CompiledGraph,
    DecisionStale,
    Graph,
    NodeContext,
    NothingToReconcile,
    StepClaimed,
    ToolCall,
)
from tests.runtime.conftest import RuntimeBackend


def _lossy(charges: list[int]) -> Graph:
    def charge(call: ToolCall) -> dict[str, Any]:
        charges.append(call.attempt)
        raise ConnectionError("the reply was lost")  # it may have charged

    async def pay(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"receipt": await ctx.tool("charge", {"cents": 500}, charge)}

    return Graph("lossy").add_node("pay", pay).add_edge(START, "pay").add_edge("pay", END)


async def _ambiguous(compiled: CompiledGraph) -> tuple[str, int]:
    result = await compiled.run({}, thread="t")
    [waiting] = result.observations
    assert result.status == "reconciliation_required" and waiting.attempt is not None
    return waiting.operation_id, waiting.attempt


async def test_a_decision_about_an_earlier_attempt_is_refused(
    runtime_backend: RuntimeBackend,
) -> None:
    charges: list[int] = []
    async with runtime_backend.open() as store:
        compiled = _lossy(charges).compile(store)
        operation, attempt = await _ambiguous(compiled)
        assert attempt == 1
        retry = ReconciliationDecision.retry()
        await compiled.reconcile("t", operation, retry, attempt=1)  # the first operator
        again = await compiled.resume("t")  # attempt 2 goes out, and is ambiguous again
        assert again.status == "reconciliation_required" and again.observations[0].attempt == 2
        before = await store.load("t")
        with pytest.raises(DecisionStale) as stale:  # the second operator, about attempt 1
            await compiled.reconcile("t", operation, retry, attempt=1)
        assert stale.value.code == "reconciliation_decision_stale"
        after = await store.load("t")
        assert before is not None and after is not None and after.revision == before.revision
        assert charges == [1, 2]  # no third charge
        await compiled.reconcile("t", operation, retry, attempt=2)  # about the current one


async def test_of_two_racing_decisions_about_one_attempt_exactly_one_is_applied(
    runtime_backend: RuntimeBackend,
) -> None:
    charges: list[int] = []
    async with runtime_backend.open() as store:
        first = _lossy(charges).compile(store)
        second = _lossy(charges).compile(store)
        operation, attempt = await _ambiguous(first)
        retry = ReconciliationDecision.retry()
        outcomes = await asyncio.gather(
            first.reconcile("t", operation, retry, attempt=attempt),
            second.reconcile("t", operation, retry, attempt=attempt),
            return_exceptions=True,
        )
        applied = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(applied) == 1 and len(refused) == 1
        assert isinstance(refused[0], NothingToReconcile | StepClaimed)  # stale, or taken
        record = await store.load("t")
        assert record is not None and record.tool_journal[0].attempt == 2  # retried once


async def test_a_decision_about_an_attempt_that_never_was_is_refused() -> None:
    from agentflow.checkpoint.memory import MemoryCheckpointer

    compiled = _lossy([]).compile(MemoryCheckpointer())
    operation, _ = await _ambiguous(compiled)
    for wrong in (2, 0):
        with pytest.raises(DecisionStale):
            await compiled.reconcile("t", operation, ReconciliationDecision.defer(), attempt=wrong)
