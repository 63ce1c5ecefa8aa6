"""Separate processes racing claims and appends on one SQLite file: exactly one wins.

Each spawned worker opens its own stores on the file, so the processes share
only the file and SQLite's write lock; they meet at a barrier before every
race. The parent does the asserting.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from threading import Barrier

from agentflow.durable import event_payload_digest
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import DurableError
from agentflow.durable.stores.sqlite import SqliteDurableStore
from agentflow.durable.stores.sqlite_events import SqliteRunEventStore
from agentflow.durable.testing import make_record
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse, take

WORKERS = 4
ROUNDS = 6
#: How long a worker waits for its peers (a hung peer fails the test).
_BARRIER_TIMEOUT = 120.0
_shared: dict[str, Barrier] = {}


def _init(barrier: Barrier) -> None:
    _shared["barrier"] = barrier


async def _meet() -> None:
    await asyncio.to_thread(_shared["barrier"].wait, _BARRIER_TIMEOUT)


async def _race(path: str, worker: int, keys: list[str]) -> list[str]:
    outcomes: list[str] = []
    async with SqliteDurableStore(path) as store, SqliteRunEventStore(path) as events:
        await store.load(keys[0])  # threads started and schema checked before any race
        for key in keys:
            await _meet()
            try:
                await store.claim(
                    key,
                    cycle_index=1,
                    claim_token=f"worker-{worker}",
                    lease_ms=LIVE_MS,
                    mode=ClaimMode.RECOVERY,
                )
                outcomes.append("claimed")
            except DurableError as exc:
                outcomes.append(exc.code)
        for event_id, n in (("same", 0), ("different", worker)):
            event = {"type": "step", "run_id": "run-a", "n": n}
            await _meet()
            try:
                result = await events.append_once(event_id, event_payload_digest(event), event)
                kind = "inserted" if result.inserted else "duplicate"
                outcomes.append(f"{kind} {result.cursor['sequence']}")
            except DurableError as exc:
                outcomes.append(exc.code)
    return outcomes


def race(path: str, worker: int, keys: list[str]) -> list[str]:
    """Child entry point: one worker's outcome of every race, in order."""
    return asyncio.run(_race(path, worker, keys))


async def test_racing_processes_claim_and_append_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    keys = [f"run-{n}" for n in range(ROUNDS)]
    async with SqliteDurableStore(path) as store:
        for key in keys:  # each run's holder died: only a recovery claim takes it
            await store.create(make_record(key))
            await take(store, "dead-holder", key=key, lease_ms=LAPSED_MS)
        await lapse()
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            WORKERS, mp_context=ctx, initializer=_init, initargs=(ctx.Barrier(WORKERS),)
        ) as pool:
            loop = asyncio.get_running_loop()
            per_worker = await asyncio.gather(
                *(loop.run_in_executor(pool, race, str(path), w, keys) for w in range(WORKERS))
            )
        stored = [await store.load(key) for key in keys]
    for round_, key in enumerate(keys):
        outcomes = [worker[round_] for worker in per_worker]
        assert sorted(outcomes) == ["checkpoint_claim_active"] * (WORKERS - 1) + ["claimed"]
        record = stored[round_]
        assert record is not None and (record.revision, record.resume_attempt) == (2, 2)
        assert record.claim_token == f"worker-{outcomes.index('claimed')}", key
    same = sorted(worker[ROUNDS] for worker in per_worker)
    sequence = same[-1].split()[1]
    assert same == [f"duplicate {sequence}"] * (WORKERS - 1) + [f"inserted {sequence}"]
    different = sorted(worker[ROUNDS + 1].split()[0] for worker in per_worker)
    assert different == ["event_identity_conflict"] * (WORKERS - 1) + ["inserted"]
