"""Graph definition, steps, reducers and node failures (in memory: fast)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.errors import AgentflowError, CheckpointConflict
from agentflow.runtime import (
    END,
    START,
    ConflictingUpdate,
    Graph,
    GraphInvalid,
    InvalidRoute,
    InvalidUpdate,
    NodeContext,
    NodeFailed,
    StepClaimed,
    StepLimitExceeded,
    ThreadExists,
    add,
    append,
    merge,
)
from tests.runtime.graphs import counter_graph, counter_input


async def _noop(state: Mapping[str, Any], ctx: NodeContext) -> None:
    return None


def _writer(key: str, value: Any) -> Any:
    async def node(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {key: value}

    return node


def test_definition_errors_are_caught_before_running() -> None:
    with pytest.raises(GraphInvalid):
        Graph("")
    graph = Graph("g").add_node("a", _noop)
    with pytest.raises(GraphInvalid, match="twice"):
        graph.add_node("a", _noop)
    with pytest.raises(GraphInvalid):
        graph.add_node(END, _noop)
    with pytest.raises(GraphInvalid):
        graph.add_edge("a", START)
    with pytest.raises(GraphInvalid, match="no edge from START"):
        graph.compile(MemoryCheckpointer())
    graph.add_edge(START, "a").add_edge("a", "missing")
    with pytest.raises(GraphInvalid, match="missing"):
        graph.compile(MemoryCheckpointer())
    other = Graph("h").add_node("a", _noop).add_edge(START, "a")
    other.add_conditional_edges("a", lambda s: "b", ["b"])
    with pytest.raises(GraphInvalid, match="b"):
        other.compile(MemoryCheckpointer())
    assert issubclass(GraphInvalid, AgentflowError) and GraphInvalid.code == "graph_invalid"


async def test_one_checkpoint_per_step_with_parents_and_frontiers() -> None:
    store = MemoryCheckpointer()
    result = await counter_graph().compile(store).run(counter_input(2), thread="c")
    assert result.status == "done"
    assert result.state["i"] == 2 and result.state["log"] == ["L1", "R1", "L2", "R2"]
    steps = [cp async for cp in store.history("c")]
    assert [cp.step for cp in steps] == [0, 1, 2, 3, 4]
    assert [cp.next for cp in steps] == [
        ("tick",),
        ("left", "right"),
        ("tick",),
        ("left", "right"),
        (),
    ]
    assert steps[0].parent is None
    assert [cp.parent for cp in steps[1:]] == ["c:0", "c:1", "c:2", "c:3"]
    assert all(cp.revision == 1 for cp in steps)
    assert result.step == 4 and result.checkpoint == steps[-1]


async def test_frontier_nodes_run_concurrently() -> None:
    started: list[str] = []
    both = asyncio.Event()

    def node(name: str) -> Any:
        async def run(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
            started.append(name)
            if len(started) == 2:
                both.set()
            await asyncio.wait_for(both.wait(), timeout=2)
            return {name: True}

        return run

    graph = Graph("par").add_node("a", node("a")).add_node("b", node("b"))
    graph.add_edge(START, "a").add_edge(START, "b")
    result = await graph.compile(MemoryCheckpointer()).run({}, thread="p")
    assert dict(result.state) == {"a": True, "b": True} and result.step == 1


async def test_reducers_fold_in_frontier_order() -> None:
    async def slow(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return {"log": "slow", "n": 2, "meta": {"a": 1}}

    async def fast(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"log": ["fast"], "n": 3, "meta": {"b": 2}}

    graph = Graph("r", reducers={"log": append, "n": add, "meta": merge})
    graph.add_node("slow", slow).add_node("fast", fast)
    graph.add_edge(START, "slow").add_edge(START, "fast")
    result = await graph.compile(MemoryCheckpointer()).run({"n": 1}, thread="r")
    assert result.state["log"] == ["slow", "fast"]
    assert result.state["n"] == 6
    assert result.state["meta"] == {"a": 1, "b": 2}


async def test_two_writers_of_a_key_without_reducer_is_an_error() -> None:
    store = MemoryCheckpointer()
    graph = Graph("w").add_node("a", _writer("x", 1)).add_node("b", _writer("x", 2))
    graph.add_edge(START, "a").add_edge(START, "b")
    with pytest.raises(ConflictingUpdate, match="'a' and 'b' both wrote 'x'"):
        await graph.compile(store).run({}, thread="w")
    latest = await store.get("w")
    assert latest is not None and latest.step == 0


async def test_node_exception_keeps_last_good_checkpoint_and_names_node() -> None:
    store = MemoryCheckpointer()
    calls = {"n": 0}

    async def flaky(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("tool timed out")
        return {"ok": True}

    graph = Graph("f").add_node("first", _writer("a", 1)).add_node("flaky", flaky)
    graph.add_edge(START, "first").add_edge("first", "flaky")
    compiled = graph.compile(store)
    with pytest.raises(NodeFailed, match=r"'flaky'.*RuntimeError") as info:
        await compiled.run({}, thread="f")
    assert info.value.node == "flaky" and info.value.step == 1
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "tool timed out" not in str(info.value)
    latest = await store.get("f")
    assert latest is not None and latest.step == 1 and latest.next == ("flaky",)
    result = await compiled.resume("f")
    assert result.status == "done" and result.state == {"a": 1, "ok": True}


async def test_failing_sibling_is_reported_and_others_cancelled() -> None:
    cancelled = asyncio.Event()

    async def hang(state: Mapping[str, Any], ctx: NodeContext) -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cancelled.set()

    async def boom(state: Mapping[str, Any], ctx: NodeContext) -> None:
        raise ValueError("bad")

    graph = Graph("s").add_node("hang", hang).add_node("boom", boom)
    graph.add_edge(START, "hang").add_edge(START, "boom")
    with pytest.raises(NodeFailed) as info:
        await graph.compile(MemoryCheckpointer()).run({}, thread="s")
    assert info.value.node == "boom" and cancelled.is_set()


async def test_bad_update_and_bad_route_are_typed_errors() -> None:
    async def bad(state: Mapping[str, Any], ctx: NodeContext) -> Any:
        return 42

    graph = Graph("u").add_node("bad", bad).add_edge(START, "bad")
    with pytest.raises(InvalidUpdate, match=r"'bad'.*int"):
        await graph.compile(MemoryCheckpointer()).run({}, thread="u")
    routed = Graph("v").add_node("a", _noop).add_edge(START, "a")
    routed.add_conditional_edges("a", lambda s: "nowhere")
    with pytest.raises(InvalidRoute, match="nowhere"):
        await routed.compile(MemoryCheckpointer()).run({}, thread="v")


async def test_async_router_and_fan_out_list() -> None:
    async def route(state: Mapping[str, Any]) -> list[str]:
        return ["b", "c"]

    graph = Graph("fan").add_node("a", _noop)
    graph.add_node("b", _writer("b", 1)).add_node("c", _writer("c", 1))
    graph.add_edge(START, "a").add_conditional_edges("a", route, ["b", "c"])
    result = await graph.compile(MemoryCheckpointer()).run({}, thread="fan")
    assert dict(result.state) == {"b": 1, "c": 1} and result.step == 2


async def test_state_is_read_only_for_nodes() -> None:
    async def mutate(state: Mapping[str, Any], ctx: NodeContext) -> None:
        state["x"] = 1  # type: ignore[index]

    graph = Graph("ro").add_node("m", mutate).add_edge(START, "m")
    with pytest.raises(NodeFailed, match="TypeError"):
        await graph.compile(MemoryCheckpointer()).run({}, thread="ro")


async def test_step_limit_stops_at_a_stored_step_and_resume_continues() -> None:
    store = MemoryCheckpointer()
    compiled = counter_graph().compile(store, step_limit=3)
    with pytest.raises(StepLimitExceeded):
        await compiled.run(counter_input(4), thread="l")
    latest = await store.get("l")
    assert latest is not None and latest.step == 3
    with pytest.raises(StepLimitExceeded):
        await compiled.resume("l")
    result = await compiled.resume("l")
    assert result.status == "done" and result.state["i"] == 4 and result.step == 8


async def test_run_refuses_an_existing_thread() -> None:
    compiled = counter_graph().compile(MemoryCheckpointer())
    await compiled.run(counter_input(1), thread="t")
    with pytest.raises(ThreadExists):
        await compiled.run(counter_input(1), thread="t")


async def test_two_runners_of_one_thread_keep_history_linear() -> None:
    store = MemoryCheckpointer()
    compiled = counter_graph().compile(store, step_limit=1)
    with pytest.raises(StepLimitExceeded):
        await compiled.run(counter_input(3, delay=0.01), thread="lin")
    runner = counter_graph().compile(store)
    outcomes = await asyncio.gather(
        runner.resume("lin"), runner.resume("lin"), return_exceptions=True
    )
    claimed = [o for o in outcomes if isinstance(o, StepClaimed)]
    assert len(claimed) == 1 and claimed[0].holder == runner.owner, outcomes
    assert isinstance(claimed[0], CheckpointConflict)
    steps = [cp async for cp in store.history("lin")]
    assert [cp.step for cp in steps] == list(range(7))
    assert all(cp.revision == 1 for cp in steps) and steps[-1].state["i"] == 3
