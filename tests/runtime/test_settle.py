"""run_until_settled: timers are waited out and resumed, no NotDue loop needed."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.runtime import RunResult
from tests.runtime.clock import Clock
from tests.runtime.graphs import approval_graph, timer_graph


async def test_a_timer_is_waited_out_and_the_run_finishes(tmp_path: Path) -> None:
    compiled = timer_graph().compile(MemoryCheckpointer())
    log = tmp_path / "log"
    result = await compiled.run_until_settled({"seconds": 0.05, "logfile": str(log)}, thread="t")
    assert result.status == "done" and result.state["recorded"] is True
    assert log.read_text().startswith("t ")


async def test_a_fake_clock_is_advanced_by_the_waiter(tmp_path: Path) -> None:
    clock = Clock()
    compiled = timer_graph().compile(MemoryCheckpointer(), clock=clock)
    waits: list[str | None] = []

    async def advance(waiting: RunResult) -> None:
        waits.append(waiting.wake_at)
        clock.now += timedelta(hours=2)

    start = {"seconds": 3600, "logfile": str(tmp_path / "log")}
    result = await compiled.run_until_settled(start, thread="t", wait=advance)
    assert result.status == "done" and len(waits) == 1


async def test_it_stops_at_a_human_and_at_a_timer_beyond_max_wait(tmp_path: Path) -> None:
    store = MemoryCheckpointer()
    human = await approval_graph().compile(store).run_until_settled({"log": []}, thread="h")
    assert human.status == "interrupted" and human.interrupt_node == "ask"
    timers = timer_graph().compile(store)
    start = {"seconds": 600, "logfile": str(tmp_path / "log")}
    far = await timers.run_until_settled(start, thread="far", max_wait=timedelta(seconds=5))
    assert far.status == "waiting"
    again = await timers.run_until_settled(thread="far", max_wait=timedelta(seconds=5))
    assert again.checkpoint == far.checkpoint


async def test_it_continues_an_existing_thread_and_follows_a_faster_worker(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = MemoryCheckpointer()
    mine = timer_graph().compile(store, clock=clock)
    worker = timer_graph().compile(store, clock=clock)
    await mine.run({"seconds": 60, "logfile": str(tmp_path / "log")}, thread="t")

    async def a_worker_gets_there_first(waiting: RunResult) -> None:
        clock.now += timedelta(minutes=2)
        await worker.resume("t", step=waiting.step)

    result = await mine.run_until_settled(thread="t", wait=a_worker_gets_there_first)
    assert result.status == "done"
    assert (tmp_path / "log").read_text().count("t ") == 1
