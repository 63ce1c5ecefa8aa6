"""Leases: renewed while a step runs, lost by a stalled holder, never two effects.

Each backend runs these with several independent stores on one database (as
several processes would have); ``test_lease_processes`` does the same with
real processes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.checkpoint.store import Store
from agentflow.errors import StoreUnavailable
from agentflow.runtime import START, Graph, NodeContext, StepClaimed, Worker
from tests.runtime.conftest import RuntimeBackend
from tests.runtime.graphs import ledger_entry, ledger_lines, slow_charge_graph

LEASE = timedelta(seconds=0.3)


async def test_a_step_slower_than_its_lease_with_three_workers_has_one_effect(
    durable_backend: RuntimeBackend, tmp_path: Path
) -> None:
    ledger, runs = tmp_path / "ledger", 3
    async with (
        durable_backend.open() as s1,
        durable_backend.open() as s2,
        durable_backend.open() as s3,
    ):
        graphs = [slow_charge_graph().compile(store, claim_ttl=LEASE) for store in (s1, s2, s3)]
        for i in range(runs):
            state = {"slow": 4 * LEASE.total_seconds(), "ledger": str(ledger)}
            await graphs[0].run(state, thread=f"run-{i}")
        workers = [Worker([graph]) for graph in graphs]
        claimed: list[int] = []

        async def all_done() -> bool:
            latest = [await s1.get(f"run-{i}") for i in range(runs)]
            return all(cp is not None and cp.done for cp in latest)

        async def scan(worker: Worker) -> None:
            deadline = time.monotonic() + 60  # a bound for a loaded machine, not a measure
            while True:  # the first passes of all three race for the same due runs
                outcome = await worker.run_once()
                claimed.append(outcome.claimed + outcome.attempts - outcome.lost)
                if await all_done() or time.monotonic() > deadline:
                    return
                await asyncio.sleep(0.02)

        await asyncio.gather(*(scan(worker) for worker in workers))
        done = [await s1.get(f"run-{i}") for i in range(runs)]
    lines = ledger_lines(ledger)
    assert sorted(line.split()[0] for line in lines) == [f"run-{i}" for i in range(runs)]
    assert all(cp is not None and cp.done for cp in done)
    assert sum(claimed) == runs, "of the racing workers' claims, one per run won"


async def test_the_heartbeat_renews_the_lease_while_a_step_runs(
    durable_backend: RuntimeBackend,
) -> None:
    seen: list[int] = []

    async with durable_backend.open() as store, durable_backend.open() as watcher:

        async def slow(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
            for _ in range(4):
                await asyncio.sleep(LEASE.total_seconds() / 2)
                record = await watcher.load(ctx.thread)
                assert record is not None and record.lease_expires_at_ms is not None
                seen.append(record.lease_expires_at_ms)
            return {"slow": True}

        graph = Graph("slow").add_node("slow", slow).add_edge(START, "slow")
        result = await graph.compile(store, claim_ttl=LEASE).run({}, thread="t")
    assert result.status == "done"
    assert seen == sorted(seen) and seen[-1] > seen[0], seen


def _in_another_process(backend: RuntimeBackend, work: Any) -> threading.Thread:
    """Run ``work(store)`` on a store of its own, on an event loop of its own."""

    async def main() -> None:
        async with backend.open() as store:
            await work(store)

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()
    return thread


def _stalls_once_then_charges(name: str, ledger: Path) -> Graph:
    """One node that first stalls past its lease (a GC pause: no heartbeat), then charges."""
    stalls = [True]

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        if stalls.pop() if stalls else False:
            time.sleep(4 * LEASE.total_seconds())  # noqa: ASYNC251
        arguments = {"ledger": str(ledger), "thread": ctx.thread, "cents": 1}
        return {"receipt": await ctx.tool("charge", arguments, ledger_entry)}

    return Graph(name).add_node("charge", charge).add_edge(START, "charge")


async def test_a_stalled_holder_is_fenced_and_its_call_never_goes_out(
    durable_backend: RuntimeBackend, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    graph = _stalls_once_then_charges("fenced", ledger)
    outcomes: list[object] = []

    async def take_over(store: Store) -> None:
        compiled = graph.compile(store, claim_ttl=LEASE)
        deadline = time.monotonic() + 20 * LEASE.total_seconds()
        while time.monotonic() < deadline:
            record = await store.load("t")
            started = record is not None and record.claim_token is not None
            # (a store that starts a run in two writes holds the claimed record a moment
            # before its first step: the run is not there to resume until both are)
            if not started or await store.get("t") is None:  # the holder has not started
                await asyncio.sleep(LEASE.total_seconds() / 10)
                continue
            try:
                outcomes.append(await compiled.resume("t"))
                return
            except StepClaimed:  # still held
                await asyncio.sleep(LEASE.total_seconds() / 3)
        raise AssertionError("the stalled holder's lease never lapsed")

    async with durable_backend.open() as store:
        compiled = graph.compile(store, claim_ttl=LEASE)
        taker = _in_another_process(durable_backend, take_over)
        try:
            with pytest.raises(StepClaimed) as fenced:
                await compiled.run({}, thread="t")
        finally:
            await asyncio.to_thread(taker.join)  # never left running past the test
        latest = await store.get("t")
    assert len(ledger_lines(ledger)) == 1
    assert fenced.value.holder != compiled.owner
    assert latest is not None and latest.done and len(outcomes) == 1


async def test_a_holder_that_stalled_past_its_lease_sends_no_call_even_if_nobody_took_over(
    durable_backend: RuntimeBackend, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    graph = _stalls_once_then_charges("stalled", ledger)
    async with durable_backend.open() as store:
        compiled = graph.compile(store, claim_ttl=LEASE)
        with pytest.raises(StepClaimed):  # its lease lapsed: the renewal before the call fails
            await compiled.run({}, thread="t")
        record = await store.load("t")
        assert record is not None and record.tool_journal == []  # nothing was started
        assert ledger_lines(ledger) == []
        result = await compiled.resume("t")  # a recovery claim: the call is made once
    assert result.status == "done"
    assert len(ledger_lines(ledger)) == 1


class _CancelSwallowingStore(MemoryCheckpointer):
    """A driver that turns the cancellation of a renewal in flight into its own error."""

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        try:
            await asyncio.sleep(0.05)  # the renewal's round trip, long enough to be cancelled in
        except asyncio.CancelledError as cancelled:
            raise StoreUnavailable("the connection was closed mid-command") from cancelled
        return await super().renew_claim(key, claim_token=claim_token, lease_ms=lease_ms)


async def test_a_run_ends_when_its_driver_swallows_the_heartbeats_cancellation() -> None:
    async def slow(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await asyncio.sleep(0.28)  # ends while a renewal (every 0.1 s, 0.05 s long) is in flight
        return {"slow": True}

    graph = Graph("slow").add_node("slow", slow).add_edge(START, "slow")
    compiled = graph.compile(_CancelSwallowingStore(), claim_ttl=LEASE)
    for run in range(5):
        task = asyncio.create_task(compiled.run({}, thread=f"t{run}"))
        done, _ = await asyncio.wait({task}, timeout=10)  # not wait_for: it would wait too
        assert task in done, "the run never ended: its heartbeat kept beating"
        assert task.result().status == "done"
