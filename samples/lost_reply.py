"""A payment whose reply is lost: the run stops as ``reconciliation_required``.

The charge goes out (one line in the ledger file, as a payment provider
would record it) and the connection drops before the reply. Nothing inside
the run can tell whether the customer was charged, so the runtime does not
guess: it suspends the run until an operator (or a provider) decides. Run::

    python samples/lost_reply.py --thread pay-1
    agentflow journal pay-1
    agentflow reconcile pay-1 OPERATION --decision replay_success --receipt '{...}'
    agentflow --graph samples.lost_reply:build_graph resume pay-1

The ledger file (``.runs/ledger.txt`` by default) shows the customer was
charged exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Mapping
from typing import Any

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.runtime import END, START, Graph, NodeContext, RunResult, ToolCall, append

STORE = ".runs/checkpoints.db"
LEDGER = ".runs/ledger.txt"


def charge_card(call: ToolCall) -> dict[str, Any]:
    """The simulated provider: records the charge, then the reply is lost."""
    line = f"{call.idempotency_key} {call.arguments['cents']}\n"
    with open(call.arguments["ledger"], "a") as ledger:
        ledger.write(line)
    raise ConnectionResetError("the connection dropped after the charge was sent")


async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    arguments = {"cents": state["cents"], "ledger": state["ledger"]}
    receipt = await ctx.tool("charge", arguments, charge_card)
    return {"receipt": receipt, "log": [f"charged {state['cents']} cents"]}


async def ship(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"log": [f"shipped, paid by {state['receipt']['charge_id']}"]}


def build_graph() -> Graph:
    graph = Graph("lost-reply", reducers={"log": append})
    graph.add_node("charge", charge).add_node("ship", ship)
    graph.add_edge(START, "charge").add_edge("charge", "ship").add_edge("ship", END)
    return graph


async def main(thread: str, store_path: str = STORE, ledger: str = LEDGER) -> RunResult:
    os.makedirs(os.path.dirname(store_path) or ".", mode=0o700, exist_ok=True)
    async with SqliteCheckpointer(store_path) as store:
        payments = build_graph().compile(store)
        result = await payments.run({"cents": 4250, "ledger": ledger, "log": []}, thread=thread)
        print(f"{thread}: {result.status}")
        for observation in result.observations:
            print(f"  {observation.operation_id}: {observation.risk}")
        print(f"see it with: agentflow journal {thread}")
        return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thread", default="pay-1")
    asyncio.run(main(parser.parse_args().thread))
