"""The worker in one process: due scanning, exactly-once claims, unknown graphs."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.errors import InvalidArgument
from agentflow.runtime import (
    START,
    Graph,
    NodeContext,
    NodeFailed,
    StepLimitExceeded,
    Worker,
    WorkerPass,
)
from tests.runtime.clock import Clock
from tests.runtime.graphs import approval_graph, counter_graph, counter_input, timer_graph
from tests.runtime.holders import epoch_ms, hold


async def test_workers_wake_each_due_run_exactly_once(tmp_path: Path) -> None:
    clock = Clock()
    store = MemoryCheckpointer()
    logfile = tmp_path / "log"
    compiled = timer_graph().compile(store, clock=clock)
    for i in range(20):
        await compiled.run(
            {"seconds": 10 if i < 15 else 100, "logfile": str(logfile)}, thread=f"t{i:02}"
        )
    await approval_graph().compile(store).run({"log": []}, thread="human")
    workers = [Worker([timer_graph().compile(store, clock=clock)]) for _ in range(3)]
    assert await workers[0].due() == []
    clock.now += timedelta(seconds=10)
    passes = await asyncio.gather(*(w.run_once() for w in workers))
    resumed = sorted(r.thread for p in passes for r in p.resumed)
    assert resumed == [f"t{i:02}" for i in range(15)]
    lines = logfile.read_text().split()
    assert sorted(lines[0::2]) == resumed
    assert (await workers[0].run_once()).resumed == []


async def test_runs_of_unknown_graphs_are_left_alone() -> None:
    clock = Clock()
    store = MemoryCheckpointer()
    await timer_graph().compile(store, clock=clock).run({"seconds": 0}, thread="x")
    other = Graph("other").add_node("n", _noop).add_edge("__start__", "n")
    outcome = await Worker([other.compile(store, clock=clock)]).run_once()
    assert outcome.unknown == ["x"] and outcome.resumed == []
    latest = await store.get("x")
    assert latest is not None and latest.interrupted


async def test_run_loop_stops_on_event(tmp_path: Path) -> None:
    store = MemoryCheckpointer()
    compiled = timer_graph().compile(store)
    await compiled.run({"seconds": 0, "logfile": str(tmp_path / "l")}, thread="loop")
    stop = asyncio.Event()
    seen: list[int] = []

    def on_pass(outcome: WorkerPass) -> None:
        seen.append(len(outcome.resumed))
        stop.set()

    await asyncio.wait_for(Worker([compiled]).run(interval=0.01, stop=stop, on_pass=on_pass), 5)
    assert seen == [1]


def test_worker_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgument):
        Worker([])
    graphs = [
        timer_graph().compile(MemoryCheckpointer()),
        timer_graph().compile(MemoryCheckpointer()),
    ]
    with pytest.raises(InvalidArgument):
        Worker(graphs)


async def _noop(state: object, ctx: object) -> None:
    return None


async def test_a_failing_woken_node_is_reported_and_stays_due() -> None:
    attempts: list[int] = []

    async def flaky_wait(state: Mapping[str, Any], ctx: NodeContext) -> None:
        ctx.wait(timedelta(0))
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("mail server down")

    clock = Clock()
    store = MemoryCheckpointer()
    graph = (
        Graph("flaky").add_node("n", flaky_wait).add_edge(START, "n").compile(store, clock=clock)
    )
    await graph.run({}, thread="f")
    worker = Worker([graph])
    first = await worker.run_once()
    assert [t for t, _ in first.failed] == ["f"] and first.resumed == []
    assert isinstance(first.failed[0][1], NodeFailed)
    assert [i.thread for i in await worker.due()] == ["f"]
    second = await worker.run_once()
    assert [r.status for r in second.resumed] == ["done"]


async def test_a_crashed_workers_lease_is_taken_over_once_it_lapses(tmp_path: Path) -> None:
    clock = Clock()
    store = MemoryCheckpointer(clock=epoch_ms(clock))
    compiled = timer_graph().compile(store, clock=clock)
    await compiled.run({"seconds": 0, "logfile": str(tmp_path / "log")}, thread="c")
    await hold(store, "c", "dead-worker", lease_ms=30_000)
    worker = Worker([compiled])
    assert [thread for thread, _ in (await worker.run_once()).taken] == ["c"]
    clock.now += timedelta(seconds=31)
    assert [r.status for r in (await worker.run_once()).resumed] == ["done"]
    assert (tmp_path / "log").read_text().count("c ") == 1


async def test_a_recovering_worker_takes_over_the_runs_a_dead_process_left(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = MemoryCheckpointer(clock=epoch_ms(clock))
    timers = timer_graph().compile(store, clock=clock)
    approvals = approval_graph().compile(store, clock=clock)
    await timers.run({"seconds": 3600, "logfile": str(tmp_path / "log")}, thread="mid-step")
    await approvals.run({"log": []}, thread="asks")
    counter = counter_graph().compile(store, clock=clock, step_limit=1)
    with pytest.raises(StepLimitExceeded):
        await counter.run(counter_input(2), thread="loop")
    for thread in ("mid-step", "asks", "loop"):  # their processes died holding them
        await hold(store, thread, "dead-host:1:x", lease_ms=30_000)
    worker = Worker([timers, approvals, counter_graph().compile(store, clock=clock)])
    assert await worker.stranded() == []
    clock.now += timedelta(seconds=31)
    assert sorted(await worker.stranded()) == ["asks", "loop", "mid-step"]
    assert (await worker.run_once()).resumed == []  # without recover: only due timers
    outcome = await worker.run_once(recover=True)
    assert sorted((r.thread, r.status) for r in outcome.resumed) == [
        ("asks", "interrupted"),
        ("loop", "done"),
        ("mid-step", "waiting"),
    ]
    assert await worker.stranded() == []
    record = await store.load("asks")
    assert record is not None and record.claim_token is None  # committed, unanswered
    assert (await approvals.resume("asks", "yes")).status == "done"
