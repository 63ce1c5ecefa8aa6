"""Child of the fleet-limit test: ``python -m tests.runtime.fleet_child URL NS LEDGER LIMIT``.

Prints ``ready``, waits for a line on stdin, then passes a
:class:`~agentflow.runtime.Worker` (concurrency 4) over :func:`counted_graph`
compiled with ``max_concurrent=LIMIT`` until a pass finds nothing due, and
prints how many runs it resumed. Each woken run appends ``in``, holds, and
appends ``out`` to the ledger (one ``O_APPEND`` write each), so the parent
reads from the ledger how many runs were inside their node at once.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentflow.runtime import START, Graph, NodeContext, Worker
from tests.runtime.graphs import append_line
from tests.runtime.shared_stores import opened

#: Seconds a woken run holds inside its node.
HOLD = 0.1


async def _work(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    ctx.wait(timedelta(0))
    append_line(state["ledger"], f"in {ctx.thread}")
    await asyncio.sleep(HOLD)
    append_line(state["ledger"], f"out {ctx.thread}")
    return {"done": True}


def counted_graph() -> Graph:
    """work: waits on a timer due at once, then holds :data:`HOLD` seconds."""
    return Graph("counted").add_node("work", _work).add_edge(START, "work")


async def main(url: str, namespace: str, limit: str) -> None:
    resumed = 0
    async with opened(url, namespace) as store:
        graph = counted_graph().compile(store, max_concurrent=int(limit))
        worker = Worker([graph], concurrency=4)
        await worker.due()
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        idle = 0
        while idle < 3:  # three passes with nothing due or held: the others are done too
            outcome = await worker.run_once()
            resumed += len(outcome.resumed)
            idle = 0 if outcome.resumed or outcome.taken or await worker.due() else idle + 1
            await asyncio.sleep(0.05)
    print(json.dumps({"resumed": resumed}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
