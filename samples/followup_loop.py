"""A timer-driven follow-up loop: nudge a customer until they reply, or escalate.

    python samples/followup_loop.py

Between checks the run is not in memory anywhere: it is a ``waiting``
checkpoint with a ``wake_at``. A worker (here in-process; in production
``agentflow worker --graph samples.followup_loop:build_graph``, as many as you
like) resumes it when due. Kill this script mid-way and run the worker: the
loop carries on where it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.runtime import END, START, Graph, NodeContext, Worker, append

STORE = ".runs/samples.db"
#: The simulated customer answers on this check.
REPLIES_ON = 3


async def check_inbox(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    attempt = state["attempts"] + 1
    replied = attempt >= REPLIES_ON
    return {"attempts": attempt, "replied": replied, "log": [f"check {attempt}: {replied}"]}


async def wait_a_while(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    ctx.wait(timedelta(seconds=state["interval_s"]), {"next_check": state["attempts"] + 1})
    return {"log": ["nudged the customer"]}


async def close(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"outcome": "resolved", "log": ["ticket closed"]}


async def escalate(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"outcome": "escalated", "log": ["handed to a human"]}


def _next(state: Mapping[str, Any]) -> str:
    if state["replied"]:
        return "close"
    return "escalate" if state["attempts"] >= state["max_attempts"] else "wait_a_while"


def build_graph() -> Graph:
    graph = Graph("followup-loop", reducers={"log": append})
    for name, node in [
        ("check_inbox", check_inbox),
        ("wait_a_while", wait_a_while),
        ("close", close),
        ("escalate", escalate),
    ]:
        graph.add_node(name, node)
    graph.add_edge(START, "check_inbox")
    graph.add_conditional_edges("check_inbox", _next, ["close", "escalate", "wait_a_while"])
    graph.add_edge("wait_a_while", "check_inbox")
    graph.add_edge("close", END).add_edge("escalate", END)
    return graph


async def main(store_path: str = STORE, interval_s: float = 0.5) -> dict[str, Any]:
    async with SqliteCheckpointer(store_path) as store:
        loop = build_graph().compile(store)
        thread = f"ticket-{id(loop):x}"
        start = {"attempts": 0, "max_attempts": 5, "interval_s": interval_s, "log": []}
        result = await loop.run(start, thread=thread)
        print(f"{thread}: {result.status} until {result.wake_at}")
        stop = asyncio.Event()

        def report(outcome: Any) -> None:
            for woke in outcome.resumed:
                print(f"worker woke {woke.thread}: {woke.status} (step {woke.step})")
                if woke.status == "done":
                    stop.set()

        await Worker([loop]).run(interval=interval_s / 5, stop=stop, on_pass=report)
        final = await loop.get_state(thread)
        print(f"{thread}: {final.state['outcome']}; log: {final.state['log']}")
        return dict(final.state)


if __name__ == "__main__":
    asyncio.run(main())
