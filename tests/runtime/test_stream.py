"""Streaming runs event by event, and the synchronous entry point."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.runtime import START, Graph, NodeContext, NodeFailed, RunEvent, SyncGraph
from tests.runtime.conftest import RuntimeBackend
from tests.runtime.graphs import approval_graph, counter_graph, counter_input, timer_graph


def _kinds(events: list[RunEvent]) -> list[tuple[str, int, str | None]]:
    return [(e.kind, e.step, e.node) for e in events]


async def test_stream_yields_each_node_and_step_then_where_the_run_stopped() -> None:
    compiled = counter_graph().compile(MemoryCheckpointer())
    events = [e async for e in compiled.stream(counter_input(1), thread="s")]
    assert _kinds(events) == [
        ("step_stored", 0, None),
        ("node_started", 1, "tick"),
        ("node_finished", 1, "tick"),
        ("step_stored", 1, None),
        ("node_started", 2, "left"),
        ("node_started", 2, "right"),
        ("node_finished", 2, "left"),
        ("node_finished", 2, "right"),
        ("step_stored", 2, None),
        ("done", 2, None),
    ]
    assert events[2].update == {"i": 1, "chain": events[2].update["chain"]}  # type: ignore[index]
    final = events[-1].result
    assert final is not None and final.state["i"] == 1
    assert final.checkpoint == await compiled.get_state("s")


async def test_resume_stream_ends_interrupted_then_done() -> None:
    compiled = approval_graph().compile(MemoryCheckpointer())
    first = [e async for e in compiled.stream({"log": []}, thread="a")]
    assert first[-1].kind == "interrupted" and first[-1].node == "ask"
    assert first[-1].checkpoint is not None and first[-1].checkpoint.interrupt_payload
    rest = [e async for e in compiled.resume_stream("a", "yes")]
    assert [e.kind for e in rest] == [
        "node_started",
        "node_finished",
        "step_stored",
        "node_started",
        "node_finished",
        "step_stored",
        "done",
    ]


async def test_a_timer_wait_ends_the_stream_waiting(tmp_path: Any) -> None:
    compiled = timer_graph().compile(MemoryCheckpointer())
    events = [e async for e in compiled.stream({"seconds": 60, "logfile": "-"}, thread="w")]
    assert events[-1].kind == "waiting" and events[-1].result is not None
    assert events[-1].result.wake_at is not None


async def test_events_arrive_while_the_run_is_still_going() -> None:
    release = asyncio.Event()

    async def slow(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await release.wait()
        return {"done": True}

    compiled = (
        Graph("slow").add_node("slow", slow).add_edge(START, "slow").compile(MemoryCheckpointer())
    )
    seen = []
    async for event in compiled.stream({}, thread="t"):
        seen.append(event.kind)
        if event.kind == "node_started":
            release.set()  # the node could not have finished before this event
    assert seen == ["step_stored", "node_started", "node_finished", "step_stored", "done"]


async def test_a_failing_node_raises_after_the_events_before_it() -> None:
    async def boom(state: Mapping[str, Any], ctx: NodeContext) -> None:
        raise ValueError("no")

    compiled = (
        Graph("b").add_node("boom", boom).add_edge(START, "boom").compile(MemoryCheckpointer())
    )
    seen: list[str] = []
    with pytest.raises(NodeFailed):
        async for event in compiled.stream({}, thread="b"):
            seen.append(event.kind)
    assert seen == ["step_stored", "node_started"]


async def test_leaving_the_loop_early_stops_the_run_at_its_last_stored_step() -> None:
    cancelled = asyncio.Event()

    async def forever(state: Mapping[str, Any], ctx: NodeContext) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cancelled.set()

    store = MemoryCheckpointer()
    compiled = Graph("f").add_node("forever", forever).add_edge(START, "forever").compile(store)
    async for event in compiled.stream({}, thread="f"):
        if event.kind == "node_started":
            break
    await asyncio.wait_for(cancelled.wait(), timeout=5)
    latest = await store.get("f")
    assert latest is not None and latest.step == 0 and latest.next == ("forever",)


def test_sync_graph_runs_streams_and_resumes_on_every_backend(
    runtime_backend: RuntimeBackend,
) -> None:
    with SyncGraph(approval_graph(), runtime_backend.open()) as runs:
        kinds = [e.kind for e in runs.stream({"log": []}, thread="sync")]
        assert kinds[-1] == "interrupted"
        result = runs.resume("sync", "yes")
        assert result.status == "done" and result.state["answer"] == "yes"
        assert [cp.step for cp in runs.history("sync")] == [0, 1, 2, 3, 4]
        forked = runs.fork("sync", 2, new_thread="sync-no")
        assert forked.interrupted
        assert runs.run({"log": []}, thread="other").status == "interrupted"
        assert runs.get_state("other").step == 2


def test_sync_graph_waits_out_a_timer() -> None:
    with SyncGraph(timer_graph(), MemoryCheckpointer()) as runs:
        result = runs.run_until_settled({"seconds": 0.05, "logfile": "/dev/null"}, thread="t")
        assert result.status == "done" and result.state == {
            "seconds": 0.05,
            "logfile": "/dev/null",
            "woke": True,
            "recorded": True,
        }
        waiting = runs.run_until_settled(
            {"seconds": 60, "logfile": "/dev/null"}, thread="u", max_wait=timedelta(seconds=1)
        )
        assert waiting.status == "waiting"


def test_sync_graph_refuses_to_run_inside_an_event_loop() -> None:
    async def inside() -> None:
        with SyncGraph(approval_graph(), MemoryCheckpointer()) as runs:
            runs.run({"log": []}, thread="x")

    with pytest.raises(RuntimeError, match="event loop"):
        asyncio.run(inside())
