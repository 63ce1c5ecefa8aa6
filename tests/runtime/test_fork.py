"""Time travel: get_state, history, fork and replay (in memory)."""

from __future__ import annotations

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.runtime import StepNotFound, ThreadExists, ThreadNotFound
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
