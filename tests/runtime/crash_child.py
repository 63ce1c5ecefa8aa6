"""Child process for the crash tests: ``python -m tests.runtime.crash_child DB THREAD MODE``.

Prints ``ready`` once the store is open, so the parent's random kill delay
is measured from there rather than from interpreter start-up.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from tests.runtime.graphs import counter_graph, counter_input

ROUNDS = 8
DELAY = 0.004
#: Short, so a killed holder's run is taken over quickly.
LEASE = timedelta(seconds=0.3)


async def main(db: str, thread: str, mode: str) -> None:
    async with SqliteCheckpointer(db) as store:
        await store.list_threads(limit=1)
        await store.load(thread)
        print("ready", flush=True)
        compiled = counter_graph().compile(store, claim_ttl=LEASE)
        if mode == "run":
            await compiled.run(counter_input(ROUNDS, DELAY), thread=thread)
        else:
            await compiled.resume(thread)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
