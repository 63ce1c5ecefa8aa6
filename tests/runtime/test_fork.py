"""Time travel: get_state, history, fork and replay (in memory)."""

from __future__ import annotations

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.cli.demo import build_demo_graph, demo_input
from agentflow.runtime import (
    CannotReroute,
    CompiledGraph,
    StepNotFound,
    ThreadExists,
    ThreadNotFound,
)
from tests.runtime.graphs import approval_graph, counter_graph, counter_input


async def test_get_state_by_step_and_clear_errors() -> None:
    compiled = counter_graph().compile(MemoryCheckpointer())
    await compiled.run(counter_input(2), thread="g")
    assert (await compiled.get_state("g")).step == 4
    assert (await compiled.get_state("g", 1)).state["i"] == 1
    with pytest.raises(StepNotFound):
        await compiled.get_state("g", 99)
    with pytest.raises(ThreadNotFound):
        await compiled.get_state("nope")
    with pytest.raises(ThreadNotFound):
        await compiled.get_state("nope", 0)


async def test_fork_replays_the_same_states_and_leaves_source_untouched() -> None:
    store = MemoryCheckpointer()
    compiled = counter_graph().compile(store)
    await compiled.run(counter_input(3), thread="src")
    source = [cp async for cp in store.history("src")]
    forked = await compiled.fork("src", 2, new_thread="copy")
    assert forked.parent == "src:2" and forked.step == 2 and forked.next == source[2].next
    result = await compiled.resume("copy")
    copy = [cp async for cp in store.history("copy")]
    assert [cp.step for cp in copy] == [2, 3, 4, 5, 6]
    assert [cp.state for cp in copy] == [cp.state for cp in source[2:]]
    assert result.state == source[-1].state
    assert [cp async for cp in store.history("src")] == source


async def test_fork_with_update_and_other_answer() -> None:
    store = MemoryCheckpointer()
    compiled = approval_graph().compile(store)
    await compiled.run({"log": []}, thread="yes")
    await compiled.resume("yes", "yes")
    forked = await compiled.fork("yes", 2, new_thread="no", update={"log": ["what if"]})
    assert forked.interrupted and forked.interrupt_node == "ask"
    assert forked.state["log"] == ["prepare", "what if"]
    result = await compiled.resume("no", "no")
    assert result.state["answer"] == "no"
    assert (await compiled.get_state("yes")).state["answer"] == "yes"
    with pytest.raises(ThreadExists):
        await compiled.fork("yes", 1, new_thread="no")
    with pytest.raises(StepNotFound):
        await compiled.fork("yes", 42, new_thread="other")


async def _approved_demo(store: MemoryCheckpointer) -> CompiledGraph:
    demo = build_demo_graph().compile(store)
    await demo.run(demo_input("A-1", 0), thread="src")
    await demo.resume("src", "approve")
    await demo.resume("src")
    return demo


async def test_fork_with_an_update_takes_the_route_the_update_leads_to() -> None:
    store = MemoryCheckpointer()
    demo = await _approved_demo(store)
    source = await demo.get_state("src", 3)
    assert source.next == ("hold",)
    forked = await demo.fork("src", 3, new_thread="no", update={"decision": "reject"})
    assert forked.next == ("notify",) and not forked.interrupted
    result = await demo.resume("no")
    assert result.status == "done" and "refund" not in result.state
    assert "could not approve" in result.state["notification"]


async def test_fork_keep_route_and_an_update_that_leaves_the_route() -> None:
    store = MemoryCheckpointer()
    demo = await _approved_demo(store)
    kept = await demo.fork(
        "src", 3, new_thread="kept", update={"decision": "reject"}, reroute=False
    )
    assert kept.next == ("hold",)
    same = await demo.fork("src", 3, new_thread="same", update={"note": "x"})
    assert same.next == ("hold",)
    asked = await demo.fork("src", 2, new_thread="asked", update={"note": "x"})
    assert asked.interrupted and asked.interrupt_node == "request_approval"


async def test_a_fork_of_a_fork_reroutes_through_its_parent() -> None:
    store = MemoryCheckpointer()
    demo = await _approved_demo(store)
    await demo.fork("src", 3, new_thread="f1")
    again = await demo.fork("f1", 3, new_thread="f2", update={"decision": "reject"})
    assert again.next == ("notify",) and again.parent == "f1:3"


async def test_a_pruned_route_cannot_be_chosen_again_unless_kept() -> None:
    store = MemoryCheckpointer()
    demo = await _approved_demo(store)
    await store.prune("src", before_step=3)
    with pytest.raises(CannotReroute, match="reroute=False"):
        await demo.fork("src", 3, new_thread="no", update={"decision": "reject"})
    assert await store.get("no") is None
    kept = await demo.fork("src", 3, new_thread="no", update={"decision": "x"}, reroute=False)
    assert kept.next == ("hold",)
