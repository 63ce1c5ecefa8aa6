"""Separate processes recovering the same dead runs on one mongod: for each run exactly one
claims it and makes its effect, and an event id is accepted once.

Each spawned worker opens its own stores (its own client) and behaves as a worker
resuming a run would: recovery claim, journal the call as started, make the effect
(an insert into a ledger collection), journal the receipt, commit, then append the
run's completion event. Workers meet at a barrier before each run, so they race for it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from dataclasses import replace
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agentflow.durable import event_payload_digest
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import DurableError
from agentflow.durable.stores.mongodb import MongoDurableStore
from agentflow.durable.stores.mongodb_events import MongoRunEventStore
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse, take
from tests.durable.backends.mongodb import Doc, Scratch
from tests.durable.backends.mongodb import scratch as scratch_body

scratch = pytest.fixture(scratch_body)
WORKERS = 4
RUNS = 6
#: How long a worker waits for its peers before the test fails.
_PEERS_S = 120.0


async def _resume_all(uri: str, database: str, worker: int, barrier: Any) -> list[str]:
    outcomes: list[str] = []
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri)
    ledger = client[database]["ledger"]
    async with (
        MongoDurableStore(client=client, database=database) as store,
        MongoRunEventStore(client=client, database=database) as events,
    ):
        await store.load("warm-up")  # connected, layout read: the race is the claim
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
                await ledger.insert_one({"run": key, "by": token})  # the side effect
                receipt = entry.succeed({"charged": True})
                record = await store.record_operation(record, receipt, claim_token=token)
                await store.commit(replace(record, cycle_index=1), claim_token=token)
                outcomes.append("ran")
            event = {"type": "run_resumed", "run_id": key}
            appended = await events.append_once(f"done-{key}", event_payload_digest(event), event)
            outcomes.append("inserted" if appended.inserted else "duplicate")
    await client.close()
    return outcomes


def resume_all(uri: str, database: str, worker: int, barrier: Any, results: Any) -> None:
    """Child entry point: put this worker's outcomes on ``results``."""
    results.put((worker, asyncio.run(_resume_all(uri, database, worker, barrier))))


async def test_racing_processes_resume_each_run_exactly_once(scratch: Scratch) -> None:
    async with scratch.store() as store:
        for n in range(RUNS):  # each run's holder died: only a recovery claim takes it
            await store.create(make_record(f"run-{n}"))
            await take(store, "dead-holder", key=f"run-{n}", lease_ms=LAPSED_MS)
        await lapse()
        ctx = multiprocessing.get_context("spawn")
        barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
        workers = [
            ctx.Process(
                target=resume_all, args=(scratch.uri, scratch.database, w, barrier, results)
            )
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
    ledger = await scratch.client[scratch.database]["ledger"].find({}, {"_id": 0}).to_list()
    for n, record in enumerate(stored):
        claims = sorted(per_worker[w][2 * n] for w in range(WORKERS))
        appends = sorted(per_worker[w][2 * n + 1] for w in range(WORKERS))
        # a loser names its refusal from the head it reads after its claim failed; by
        # then the winner may have committed the cycle too
        lost = {"checkpoint_claim_active", "checkpoint_cycle_conflict"}
        assert claims[-1] == "ran" and set(claims[:-1]) <= lost, (n, claims)
        assert appends == ["duplicate"] * (WORKERS - 1) + ["inserted"], n
        winner = next(w for w in range(WORKERS) if per_worker[w][2 * n] == "ran")
        assert record is not None and (record.cycle_index, record.resume_attempt) == (1, 2)
        assert record.claim_token is None and record.tool_journal == []
        assert ledger.count({"run": f"run-{n}", "by": f"worker-{winner}"}) == 1
    assert len(ledger) == RUNS
