"""A chaos worker: ``python -m tests.chaos.child URL NAMESPACE LEASE_SECONDS``.

Scans the store for due and stranded ``chaos-order`` runs
(``Worker.run_once(recover=True)``) and runs them, until it is killed or
its stdin closes. Every pass starts with an ``idle`` trace line; a run the
worker could not run is traced as ``failed THREAD CODE``.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from agentflow.errors import StoreUnavailable
from agentflow.runtime import Worker
from tests.chaos.workflow import mark, order_graph
from tests.runtime.shared_stores import opened

#: Seconds between two scans of the store.
INTERVAL = 0.03


async def _stdin_closed() -> None:
    await asyncio.to_thread(sys.stdin.read)


async def main(url: str, namespace: str, lease_seconds: str) -> int:
    async with opened(url, namespace) as store:
        lease = timedelta(seconds=float(lease_seconds))
        graph = order_graph().compile(store, claim_ttl=lease)
        worker = Worker([graph])
        closed = asyncio.create_task(_stdin_closed())
        mark("idle")
        print("ready", flush=True)
        while not closed.done():
            mark("idle")
            try:
                outcome = await worker.run_once(recover=True)
            except StoreUnavailable as exc:  # as Worker.run: the next pass tries again
                mark("unavailable", exc.code)
            else:
                for thread, error in outcome.failed:
                    mark("failed", thread, error.code, " ".join(str(error).split())[:300])
            await asyncio.wait([closed], timeout=INTERVAL)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:])))
