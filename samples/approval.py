"""Human approval: an expense waits for a manager, durably.

    python samples/approval.py            # stops at the approval, prints how to continue
    python samples/approval.py approve    # answers it in the same process

The run is stored in SQLite, so the answer may come from another process much
later: ``agentflow --store sqlite:///.runs/samples.db --graph
samples.approval:build_graph resume THREAD --value '"approve"'``.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import Mapping
from typing import Any

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.runtime import END, START, Graph, NodeContext, append

STORE = ".runs/samples.db"


async def submit(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"log": [f"{state['employee']} submitted ${state['amount']:.2f}"]}


async def manager_review(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    # Everything above this call runs again on resume: keep it free of side effects.
    decision = ctx.interrupt(
        {
            "question": f"Approve ${state['amount']:.2f} for {state['employee']}?",
            "choices": ["approve", "reject"],
        }
    )
    return {"decision": decision, "log": [f"manager chose {decision}"]}


async def pay(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"paid": True, "log": [f"paid ${state['amount']:.2f}"]}


def build_graph() -> Graph:
    graph = Graph("expense-approval", reducers={"log": append})
    graph.add_node("submit", submit).add_node("manager_review", manager_review)
    graph.add_node("pay", pay)
    graph.add_edge(START, "submit").add_edge("submit", "manager_review")
    graph.add_conditional_edges(
        "manager_review", lambda s: "pay" if s["decision"] == "approve" else END, ["pay", END]
    )
    graph.add_edge("pay", END)
    return graph


async def main(decision: str | None, store_path: str = STORE) -> dict[str, Any]:
    async with SqliteCheckpointer(store_path) as store:
        expenses = build_graph().compile(store)
        thread = f"expense-{secrets.token_hex(3)}"
        result = await expenses.run({"employee": "Lin", "amount": 42.5, "log": []}, thread=thread)
        print(f"{thread}: {result.status} at {result.interrupt_node}: {result.pending}")
        if decision is None:
            print(
                f"continue with: agentflow --store sqlite:///{store_path} "
                f"--graph samples.approval:build_graph resume {thread} --value '\"approve\"'"
            )
            return dict(result.state)
        result = await expenses.resume(thread, decision)
        print(f"{thread}: {result.status}; log: {result.state['log']}")
        return dict(result.state)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
