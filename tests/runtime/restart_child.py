"""Child process of the restart tests: ``python -m tests.runtime.restart_child URL NS MODE``.

A :class:`~agentflow.runtime.Worker` over :func:`restart_graph` on the store at
``URL`` in namespace ``NS``, under the identity in ``$AGENTFLOW_WORKER_ID``
(the worker reads it itself). ``MODE`` ``drain`` passes until a pass finds
nothing to do; ``once`` makes one pass. Either prints the passes' totals as
JSON. The graph's first woken run never ends (the process is killed in it),
so only a process that takes the run back finishes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentflow.runtime import START, Graph, NodeContext, ToolCall, Worker
from tests.runtime.graphs import append_line
from tests.runtime.shared_stores import opened

#: Long, so a run finished soon after a restart was taken back, not taken over.
LEASE = timedelta(seconds=120)


def _charge(call: ToolCall) -> dict[str, bool]:
    append_line(call.arguments["ledger"], f"charge {call.idempotency_key}")
    return {"charged": True}


async def _work(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    ctx.wait(timedelta(0))
    ledger = state["ledger"]
    append_line(ledger, f"begin {os.getpid()}")
    try:  # the first run of this step hangs (until its process is killed)
        os.close(os.open(f"{ledger}.hung", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass
    else:
        await asyncio.sleep(3600)
    await ctx.tool("charge", {"ledger": ledger}, _charge, idempotent=True)
    return {"charged": True}


def restart_graph() -> Graph:
    """work: waits on a timer due at once, then hangs the first time, then charges once."""
    return Graph("restart").add_node("work", _work).add_edge(START, "work")


async def main(url: str, namespace: str, mode: str) -> None:
    totals = {"resumed": 0, "taken": 0, "failed": 0}
    async with opened(url, namespace) as store:
        worker = Worker([restart_graph().compile(store, claim_ttl=LEASE)])
        while True:
            outcome = await worker.run_once()
            totals["resumed"] += len(outcome.resumed)
            totals["taken"] += len(outcome.taken)
            totals["failed"] += len(outcome.failed)
            if mode == "once" or not (outcome.resumed or outcome.taken):
                break
            await asyncio.sleep(0.05)
    print(json.dumps({**totals, "worker_id": worker.worker_id}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
