"""The runtime on every backend (through the ``runtime_backend`` fixture).

Few and small on purpose: server backends are slower, and the behaviour in
depth is covered in memory. These prove the runtime needs nothing beyond the
protocols: steps, interrupts, racing claims, timers, workers and forks.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentflow.runtime import StepClaimed, Worker
from tests.runtime.conftest import RuntimeBackend
from tests.runtime.graphs import approval_graph, counter_graph, counter_input, timer_graph


async def test_interrupt_racing_resumes_and_fork(runtime_backend: RuntimeBackend) -> None:
    async with runtime_backend.open() as one, runtime_backend.open() as two:
        first = approval_graph().compile(one)
        second = approval_graph().compile(two)
        paused = await first.run({"log": []}, thread="run")
        assert paused.status == "interrupted"
        outcomes = await asyncio.gather(
            first.resume("run", "yes", step=paused.step),
            second.resume("run", "no", step=paused.step),
            return_exceptions=True,
        )
        claimed = [o for o in outcomes if isinstance(o, StepClaimed)]
        assert len(claimed) == 1, outcomes
        winner = first if claimed[0] is outcomes[1] else second
        assert claimed[0].holder in (winner.owner, "nobody")
        steps = [cp async for cp in one.history("run")]
        assert [cp.step for cp in steps] == [0, 1, 2, 3, 4] and steps[-1].done
        forked = await second.fork("run", paused.step, new_thread="what-if")
        other = "no" if steps[-1].state["answer"] == "yes" else "yes"
        result = await second.resume("what-if", other)
        assert result.state["answer"] == other
        assert (await first.get_state("run")).state == steps[-1].state
        assert forked.parent == f"run:{paused.step}"


async def test_loop_and_due_timer_worker(runtime_backend: RuntimeBackend, tmp_path: Path) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    async with runtime_backend.open() as store:
        done = await counter_graph().compile(store).run(counter_input(3), thread="loop")
        assert done.state["i"] == 3 and done.step == 6
        timers = timer_graph().compile(store)
        for name in ("a", "b"):
            await timers.run({"seconds": 1, "logfile": str(tmp_path / "log")}, thread=name)
        worker = Worker([timer_graph().compile(store, clock=lambda: later)])
        outcome = await worker.run_once()
        assert sorted(r.thread for r in outcome.resumed) == ["a", "b"]
        assert all(r.status == "done" for r in outcome.resumed)
        assert (await worker.run_once()).resumed == []
