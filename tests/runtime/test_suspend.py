"""Human interrupts, timer waits, claims and racing resumes (in memory)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.errors import CheckpointConflict, InvalidArgument
from agentflow.runtime import (
    START,
    Graph,
    GraphInvalid,
    NodeContext,
    NodeFailed,
    NotDue,
    NothingToResume,
    StepClaimed,
    UnknownGraph,
    append,
)
from tests.runtime.clock import Clock
from tests.runtime.graphs import approval_graph, timer_graph
from tests.runtime.holders import epoch_ms, hold


async def test_interrupt_suspends_then_resume_returns_the_value() -> None:
    store = MemoryCheckpointer()
    compiled = approval_graph().compile(store)
    result = await compiled.run({"log": []}, thread="a")
    assert result.status == "interrupted" and result.interrupt_node == "ask"
    assert result.pending == {"question": "ok?", "choices": ["yes", "no"]}
    suspended = await store.get("a")
    assert suspended is not None and suspended.interrupted and suspended.next == ("ask",)
    assert suspended.state == {"log": ["prepare"], "prepared": True}
    done = await compiled.resume("a", "yes")
    assert done.status == "done"
    assert done.state["log"] == ["prepare", "answer yes", "finish"]


async def test_code_before_the_interrupt_runs_again_on_resume() -> None:
    before: list[int] = []

    async def node(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        before.append(ctx.step)
        first = ctx.interrupt("first?")
        second = ctx.interrupt("second?")
        return {"answers": [first, second]}

    graph = Graph("two").add_node("n", node).add_edge(START, "n")
    compiled = graph.compile(MemoryCheckpointer())
    r = await compiled.run({}, thread="t")
    assert r.pending == "first?"
    r = await compiled.resume("t", 1)
    assert r.pending == "second?" and r.status == "interrupted"
    r = await compiled.resume("t", 2)
    assert r.state == {"answers": [1, 2]}
    assert len(before) == 3


async def test_finished_siblings_are_not_run_again_after_an_interrupt() -> None:
    calls: list[str] = []

    async def side(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        calls.append("side")
        return {"log": ["side"]}

    async def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        calls.append("ask")
        return {"log": [ctx.interrupt("?")]}

    graph = Graph("sib", reducers={"log": append}).add_node("side", side).add_node("ask", ask)
    graph.add_edge(START, "side").add_edge(START, "ask")
    compiled = graph.compile(MemoryCheckpointer())
    await compiled.run({}, thread="s")
    result = await compiled.resume("s", "answer")
    assert calls == ["side", "ask", "ask"]
    assert result.state["log"] == ["side", "answer"]


async def test_timer_wait_refuses_early_resume_and_wakes_once_due() -> None:
    clock = Clock()
    store = MemoryCheckpointer()
    compiled = timer_graph().compile(store, clock=clock)
    result = await compiled.run({"seconds": 30, "logfile": "/dev/null"}, thread="w")
    assert result.status == "waiting"
    assert result.wake_at == (clock.now + timedelta(seconds=30)).isoformat()
    before = await store.get("w")
    with pytest.raises(NotDue) as info:
        await compiled.resume("w")
    assert info.value.code == "not_due" and 29 < info.value.seconds_left <= 30
    assert await store.get("w") == before
    with pytest.raises(InvalidArgument):
        await compiled.resume("w", "value")
    clock.now += timedelta(seconds=30)
    done = await compiled.resume("w")
    assert done.status == "done" and done.state["woke"] is True


async def test_wait_until_an_instant() -> None:
    clock = Clock()
    at = datetime(2030, 1, 2, 3, 4, 5)

    async def node(state: Mapping[str, Any], ctx: NodeContext) -> None:
        ctx.wait(at)

    graph = Graph("at").add_node("n", node).add_edge(START, "n")
    result = await graph.compile(MemoryCheckpointer(), clock=clock).run({}, thread="t")
    assert result.wake_at == "2030-01-02T03:04:05+00:00"


async def test_racing_resumes_one_proceeds_other_gets_both_revisions() -> None:
    store = MemoryCheckpointer()
    compiled = approval_graph().compile(store)
    await compiled.run({"log": []}, thread="r")
    suspended = await store.get("r")
    assert suspended is not None
    outcomes = await asyncio.gather(
        compiled.resume("r", "yes", step=suspended.step),
        compiled.resume("r", "no", step=suspended.step),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, CheckpointConflict)]
    assert len(winners) == 1 and len(losers) == 1
    assert isinstance(losers[0], StepClaimed) and losers[0].step == 2
    steps = [cp async for cp in store.history("r")]
    assert [cp.step for cp in steps] == [0, 1, 2, 3, 4]
    assert steps[-1].state["answer"] == winners[0].state["answer"]


async def test_a_lapsed_lease_of_a_crashed_resumer_is_taken_over() -> None:
    clock = Clock()
    store = MemoryCheckpointer(clock=epoch_ms(clock))
    compiled = approval_graph().compile(store, clock=clock)
    await compiled.run({"log": []}, thread="c")
    suspended = await store.get("c")
    assert suspended is not None
    await hold(store, "c", "dead-resumer", lease_ms=60_000)  # the resumer then dies
    with pytest.raises(CheckpointConflict):
        await compiled.resume("c", "yes")
    clock.now += timedelta(seconds=61)
    result = await compiled.resume("c", "yes")
    assert result.status == "done"
    with pytest.raises(CheckpointConflict):
        await compiled.resume("c", "no", step=suspended.step)


async def test_failed_resume_gives_the_suspend_back() -> None:
    async def picky(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        answer = ctx.interrupt("number?")
        if not isinstance(answer, int):
            raise TypeError("not a number")
        return {"n": answer}

    store = MemoryCheckpointer()
    compiled = Graph("p").add_node("p", picky).add_edge(START, "p").compile(store)
    await compiled.run({}, thread="p")
    with pytest.raises(NodeFailed):
        await compiled.resume("p", "x")
    latest = await store.get("p")
    assert latest is not None and latest.interrupted
    assert (await compiled.resume("p", 5)).state == {"n": 5}


async def test_nothing_to_resume_on_a_finished_run() -> None:
    compiled = approval_graph().compile(MemoryCheckpointer())
    await compiled.run({"log": []}, thread="f")
    await compiled.resume("f", "yes")
    with pytest.raises(NothingToResume):
        await compiled.resume("f")
    with pytest.raises(NothingToResume):
        await compiled.resume("f", step=1)


async def test_resume_refuses_a_thread_of_another_graph() -> None:
    store = MemoryCheckpointer()
    compiled = approval_graph().compile(store)
    await compiled.run({"log": []}, thread="a")
    before = await store.load("a")
    assert before is not None
    with pytest.raises(UnknownGraph, match="written by graph 'approval', not 'timer'"):
        await timer_graph().compile(store).resume("a", "yes")
    renamed = Graph("approval").add_node("other", _noop).add_edge(START, "other")
    with pytest.raises(GraphInvalid, match=r"\['ask'\]"):
        await renamed.compile(store).resume("a", "yes")
    record = await store.load("a")  # refused before any claim: nothing written
    assert record is not None and record.claim_token is None
    assert record.revision == before.revision


async def _noop(state: Mapping[str, Any], ctx: NodeContext) -> None:
    return None


async def test_a_broad_except_in_a_node_does_not_swallow_the_suspend() -> None:
    async def careless(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            answer = ctx.interrupt("?")
        except Exception:
            answer = "swallowed"
        return {"answer": answer}

    compiled = Graph("c").add_node("n", careless).add_edge(START, "n").compile(MemoryCheckpointer())
    assert (await compiled.run({}, thread="c")).status == "interrupted"
    assert (await compiled.resume("c", "real")).state == {"answer": "real"}
