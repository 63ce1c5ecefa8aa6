"""No run ends with a call that may have acted and was never settled.

A node that swallows the ambiguous signal (a bare ``except:``) still has its
step abandoned and its run suspended as ``reconciliation_required``; a store
refuses to finalize a record whose journal holds such a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentflow.runtime import END, START, Graph, NodeContext, ToolCall
from tests.runtime.conftest import RuntimeBackend


def _swallowing(charges: list[int]) -> Graph:
    def charge(call: ToolCall) -> dict[str, Any]:
        charges.append(call.attempt)
        raise ConnectionError("the reply was lost")  # it may have charged

    async def pay(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            await ctx.tool("charge", {"cents": 500}, charge)
        except:  # noqa: E722 - the fallback this test is about
            return {"paid": "fallback"}
        return {"paid": "charged"}

    return Graph("swallow").add_node("pay", pay).add_edge(START, "pay").add_edge("pay", END)


async def test_a_swallowed_ambiguous_call_still_suspends_the_run(
    runtime_backend: RuntimeBackend,
) -> None:
    charges: list[int] = []
    async with runtime_backend.open() as store:
        compiled = _swallowing(charges).compile(store)
        result = await compiled.run({}, thread="t")
        assert result.status == "reconciliation_required"
        assert [o.operation_id for o in result.observations]
        latest = await store.get("t")
        record = await store.load("t")
        assert latest is not None and latest.step == 0  # the fallback's step was not stored
        assert record is not None and record.terminal_result is None
        assert [e.state.value for e in record.tool_journal] == ["ambiguous"]
        page = await store.list_threads_page(status="reconciliation_required")
        assert [info.thread for info in page.threads] == ["t"]
        assert charges == [1]
