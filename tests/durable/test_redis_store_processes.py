"""Separate processes recovering the same dead runs on one Redis: for each run
exactly one claims it and makes its effect, and an event id is accepted once.

Each spawned worker opens its own stores (its own connections) and behaves as
a worker resuming a run would: recovery claim, journal the call as started,
make the effect (a push onto a ledger list), journal the receipt, commit,
then append the run's completion event. Workers meet at a barrier before each
run, so they race for it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis

from agentflow.durable import event_payload_digest
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import DurableError
from agentflow.durable.stores.redis import RedisDurableStore
from agentflow.durable.stores.redis_events import RedisRunEventStore
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse, take
from tests.backends.redis import REDIS_URL, drop_prefix

WORKERS = 4
RUNS = 6
#: How long a worker waits for its peers before the test fails.
_PEERS_S = 120.0


async def _resume_all(prefix: str, worker: int, barrier: Any) -> list[str]:
    ledger = f"{prefix}:ledger"
    outcomes: list[str] = []
    async with (
        RedisDurableStore(REDIS_URL, prefix=prefix) as store,
        RedisRunEventStore(REDIS_URL, prefix=prefix) as events,
    ):
        client = aioredis.Redis.from_url(REDIS_URL)
        await store.load("warm-up")  # connected, layout checked: the race is the claim
        await events.replay("warm-up")
        for n in range(RUNS):
            key = f"run-{n}"
            await asyncio.to_thread(barrier.wait, _PEERS_S)
            token = f"worker-{worker}"
            try:
                record = await store.claim(
                    key, cycle_index=1, claim_token=token, lease_ms=LIVE_MS, mode=ClaimMode.RECOVERY
                )
            except DurableError as exc:
                outcomes.append(exc.code)
            else:
                entry = make_tool_entry(key, 1).start()
                record = await store.record_operation(record, entry, claim_token=token)
                await client.rpush(ledger, f"{key} by {token}")  # the side effect
                receipt = entry.succeed({"charged": True})
                record = await store.record_operation(record, receipt, claim_token=token)
                await store.commit(replace(record, cycle_index=1), claim_token=token)
                outcomes.append("ran")
            event = {"type": "run_resumed", "run_id": key}
            appended = await events.append_once(f"done-{key}", event_payload_digest(event), event)
            outcomes.append("inserted" if appended.inserted else "duplicate")
        await client.aclose()
    return outcomes


def resume_all(prefix: str, worker: int, barrier: Any, results: Any) -> None:
    """Child entry point: put this worker's outcomes on ``results``."""
    results.put((worker, asyncio.run(_resume_all(prefix, worker, barrier))))


async def test_racing_processes_resume_each_run_exactly_once() -> None:
    prefix = f"aftest-{uuid.uuid4().hex}"
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        async with RedisDurableStore(REDIS_URL, prefix=prefix) as store:
            for n in range(RUNS):  # each run's holder died: only a recovery claim takes it
                await store.create(make_record(f"run-{n}"))
                await take(store, "dead-holder", key=f"run-{n}", lease_ms=LAPSED_MS)
            await lapse()
            ctx = multiprocessing.get_context("spawn")
            barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
            workers = [
                ctx.Process(target=resume_all, args=(prefix, w, barrier, results))
                for w in range(WORKERS)
            ]
            for process in workers:
                process.start()
            per_worker = dict(
                await asyncio.gather(
                    *(asyncio.to_thread(results.get, True, _PEERS_S * 2) for _ in workers)
                )
            )
            for process in workers:
                await asyncio.to_thread(process.join, 30)
                assert process.exitcode == 0
            stored = [await store.load(f"run-{n}") for n in range(RUNS)]
        ledger = await admin.lrange(f"{prefix}:ledger", 0, -1)
    finally:
        await drop_prefix(admin, prefix)
        await admin.aclose()
    for n, record in enumerate(stored):
        claims = sorted(per_worker[w][2 * n] for w in range(WORKERS))
        appends = sorted(per_worker[w][2 * n + 1] for w in range(WORKERS))
        assert claims == ["checkpoint_claim_active"] * (WORKERS - 1) + ["ran"], n
        assert appends == ["duplicate"] * (WORKERS - 1) + ["inserted"], n
        winner = next(w for w in range(WORKERS) if per_worker[w][2 * n] == "ran")
        assert record is not None and (record.cycle_index, record.resume_attempt) == (1, 2)
        assert record.claim_token is None and record.tool_journal == []
        assert ledger.count(f"run-{n} by worker-{winner}".encode()) == 1
    assert len(ledger) == RUNS
