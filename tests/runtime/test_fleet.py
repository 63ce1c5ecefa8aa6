"""A worker fleet in one process: batches, worker identities and ``max_concurrent``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.durable import ClaimMode
from agentflow.errors import InvalidArgument
from agentflow.runtime import START, Graph, GraphInvalid, NodeContext, StepClaimed, Worker
from tests.runtime.clock import Clock
from tests.runtime.graphs import timer_graph
from tests.runtime.holders import epoch_ms, hold


async def _dead_incarnation(store: MemoryCheckpointer, thread: str, holder: str) -> None:
    """A claim of ``holder`` that another process minted (not this one): a dead one."""
    record = await store.load(thread)
    assert record is not None
    await store.claim(
        thread,
        cycle_index=record.cycle_index + 1,
        claim_token=f"{holder}#00000000deadbeef",
        lease_ms=30_000,
        mode=ClaimMode.CONTINUE,
    )


async def test_a_worker_takes_back_at_once_what_its_identity_held(tmp_path: Path) -> None:
    clock = Clock()  # timers on a fake clock, leases on the store's real one
    store = MemoryCheckpointer()
    logfile = tmp_path / "log"
    graph = timer_graph()
    await graph.compile(store, clock=clock).run({"seconds": 0, "logfile": str(logfile)}, thread="t")
    await _dead_incarnation(store, "t", "w-1")
    other = await Worker([graph.compile(store, clock=clock)], worker_id="w-2").run_once()
    [(thread, why)] = other.taken  # another identity must wait for the lease
    assert thread == "t" and isinstance(why, StepClaimed) and why.holder == "w-1"
    restarted = Worker([graph.compile(store, clock=clock)], worker_id="w-1")
    outcome = await restarted.run_once()  # no time passed: the lease is live, and is taken back
    assert [(r.thread, r.status) for r in outcome.resumed] == [("t", "done")]
    assert logfile.read_text().split()[0] == "t"
    record = await store.load("t")
    assert record is not None and record.claim_token is None
    assert (await restarted.run_once()).resumed == []  # only the first pass takes back


async def test_a_claim_this_process_made_under_the_identity_is_not_taken_back() -> None:
    clock = Clock()
    store = MemoryCheckpointer(clock=epoch_ms(clock))
    graph = timer_graph()
    await graph.compile(store, clock=clock).run({"seconds": 0, "logfile": "/dev/null"}, thread="t")
    await hold(store, "t", "w-1", lease_ms=30_000)  # minted here: a live holder in this process
    outcome = await Worker([graph.compile(store, clock=clock)], worker_id="w-1").run_once()
    assert outcome.resumed == [] and [thread for thread, _ in outcome.taken] == ["t"]


async def test_worker_identities_are_checked_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryCheckpointer()
    graph = timer_graph()
    for bad in ("", " ", "a#b"):
        with pytest.raises(InvalidArgument):
            Worker([graph.compile(store)], worker_id=bad)
        with pytest.raises(InvalidArgument):
            graph.compile(store, worker_id=bad)
    with pytest.raises(InvalidArgument):  # two identities cannot be one worker's
        Worker([graph.compile(store, worker_id="a"), graph.compile(store, worker_id="b")])
    with pytest.raises(InvalidArgument):
        Worker([graph.compile(store, worker_id="a")], worker_id="b")
    worker = Worker([graph.compile(store, worker_id="a")])
    assert worker.worker_id == worker.owner == "a"
    assert Worker([graph.compile(store)]).worker_id is None
    monkeypatch.setenv("AGENTFLOW_WORKER_ID", "from-env")
    worker = Worker([graph.compile(store)])
    assert worker.worker_id == "from-env" and worker.graphs[0].owner == "from-env"
    assert graph.compile(store).worker_id is None  # only workers read the variable
    for bad_limit in (0, -1, True, 1.5):
        with pytest.raises(GraphInvalid):
            graph.compile(store, max_concurrent=bad_limit)  # type: ignore[arg-type]


def _limited_graph(inside: list[int], peak: list[int]) -> Graph:
    async def work(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        ctx.wait(timedelta(0))
        inside[0] += 1
        peak[0] = max(peak[0], inside[0])
        await asyncio.sleep(0.01)
        inside[0] -= 1
        return {"done": True}

    return Graph("limited").add_node("work", work).add_edge(START, "work")


async def test_max_concurrent_holds_across_workers_of_one_store() -> None:
    inside, peak = [0], [0]
    store = MemoryCheckpointer()
    graph = _limited_graph(inside, peak)
    starter = graph.compile(store)
    for index in range(12):
        await starter.run({}, thread=f"t{index:02}")
    workers = [Worker([graph.compile(store, max_concurrent=3)], concurrency=4) for _ in range(3)]
    deadline = asyncio.get_running_loop().time() + 30

    async def drain(worker: Worker) -> int:
        resumed = 0
        while asyncio.get_running_loop().time() < deadline:
            outcome = await worker.run_once()
            resumed += len(outcome.resumed)
            if not outcome.resumed and not outcome.taken and not await worker.due():
                return resumed
            await asyncio.sleep(0.005)
        return resumed

    assert sum(await asyncio.gather(*(drain(w) for w in workers))) == 12
    assert 2 <= peak[0] <= 3, peak
