"""A run keeps its calls' idempotency keys when it is copied to another namespace.

The ``idem_`` key names the namespace the run was created in (kept in its
record), not the store it is read from: the same run, copied by ``agentflow
copy --to-namespace``, must retry a call under the key the provider already
saw, or a provider that deduplicates on it would act twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore
from agentflow.cli.copy import StoreCopy
from agentflow.durable import ReconciliationDecision
from agentflow.runtime import END, START, Graph, NodeContext, ToolCall


def _flaky_charge(keys: list[str]) -> Graph:
    async def charge(call: ToolCall) -> dict[str, Any]:
        keys.append(call.idempotency_key)
        if len(keys) == 1:
            raise ConnectionError("the reply was lost")  # it may have acted: ambiguous
        return {"charged": True}

    async def pay(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"receipt": await ctx.tool("charge", {"cents": 12}, charge)}

    return Graph("pay").add_node("pay", pay).add_edge(START, "pay").add_edge("pay", END)


async def test_a_copy_to_another_namespace_retries_under_the_first_key() -> None:
    keys: list[str] = []
    data = MemoryStore()
    source = MemoryCheckpointer(store=data, namespace="tenant-a")
    copy = MemoryCheckpointer(store=data, namespace="tenant-b")
    first = await _flaky_charge(keys).compile(source).run({}, thread="order-1")
    assert first.status == "reconciliation_required"
    await StoreCopy(source, copy).run()
    moved = _flaky_charge(keys).compile(copy)
    operation = first.observations[0].operation_id
    await moved.reconcile("order-1", operation, ReconciliationDecision.retry(), attempt=1)
    done = await moved.resume("order-1")
    assert done.status == "done" and done.state["receipt"] == {"charged": True}
    assert len(keys) == 2 and keys[0] == keys[1]


async def test_two_runs_of_one_thread_id_in_two_namespaces_get_two_keys() -> None:
    keys: list[str] = []
    data = MemoryStore()
    for namespace in ("tenant-a", "tenant-b"):
        store = MemoryCheckpointer(store=data, namespace=namespace)
        await _flaky_charge(keys).compile(store).run({}, thread="order-1")
    assert len(keys) == 2 and keys[0] != keys[1]
