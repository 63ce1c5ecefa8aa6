"""Child process for the lease tests: ``python -m tests.runtime.lease_child MODE URL NS ...``.

The store is opened from its URL and namespace (:func:`tests.runtime.shared_stores.opened`),
so one child serves every backend.

* ``run URL NAMESPACE THREAD LEDGER``: start a run of ``dies_between_steps_graph``
  (it kills itself at the charge step, before it calls anything);
* ``resume URL NAMESPACE THREAD``: print ``ready``, wait for a line on stdin, resume
  the thread; exit 0 if it ran, 3 if another process held it, 4 if it had ended;
* ``worker URL NAMESPACE SECONDS [LEASE]``: print ``ready``, wait for a line on stdin,
  scan for due ``slow_charge_graph`` runs (under leases of LEASE seconds, default
  :data:`LEASE`) until the next line on stdin (at most SECONDS) and print how many
  runs this worker resumed and was refused.

Leases are :data:`LEASE` long, so a dead holder's run is taken over quickly.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta

from agentflow.runtime import NothingToResume, StepClaimed, Worker
from tests.runtime.graphs import dies_between_steps_graph, slow_charge_graph
from tests.runtime.shared_stores import opened

LEASE = timedelta(seconds=0.3)
CLAIMED, ENDED = 3, 4


async def main(mode: str, url: str, namespace: str, *rest: str) -> int:
    async with opened(url, namespace) as store:
        if mode == "worker":
            lease = timedelta(seconds=float(rest[1])) if len(rest) > 1 else LEASE
            graph = slow_charge_graph().compile(store, claim_ttl=lease)
            worker, resumed, refused = Worker([graph]), 0, 0
            await worker.due()
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
            stop = asyncio.create_task(asyncio.to_thread(sys.stdin.readline))
            deadline = time.monotonic() + float(rest[0])
            while not stop.done() and time.monotonic() < deadline:
                outcome = await worker.run_once()
                resumed, refused = resumed + len(outcome.resumed), refused + len(outcome.taken)
                await asyncio.sleep(0.02)
            print(json.dumps({"resumed": resumed, "refused": refused}), flush=True)
            return 0
        compiled = dies_between_steps_graph().compile(store, claim_ttl=LEASE)
        if mode == "run":
            await compiled.run({"ledger": rest[1]}, thread=rest[0])
            return 0
        await store.load(rest[0])
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        try:
            await compiled.resume(rest[0])
        except StepClaimed:
            return CLAIMED
        except NothingToResume:
            return ENDED
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:])))
