"""The runtime stores each step as what it changed, on every backend, and every
step reads back as the same run stored whole would have it (interrupts, forks
and a node that changes a list of its input in place included)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from agentflow.checkpoint import Checkpoint, MemoryCheckpointer
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing import BackendHarness
from agentflow.runtime import END, START, Graph, NodeContext, append

TURNS = 40


async def _turn(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    n = state["turn"] + 1
    if n % 15 == 0:
        ctx.interrupt({"question": f"go on after {n}?"})
    return {"turn": n, "messages": [{"turn": n, "text": f"message {n} " * 30}]}


async def _note(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"notes": [len(state["messages"])], "last": state["messages"][-1]["turn"]}


def _again(state: Mapping[str, Any]) -> str:
    return "turn" if state["turn"] < TURNS else END


def _graph() -> Graph:
    graph = Graph("delta-runtime", reducers={"messages": append, "notes": append})
    graph.add_node("turn", _turn).add_node("note", _note)
    graph.add_edge(START, "turn").add_edge("turn", "note")
    graph.add_conditional_edges("note", _again, ["turn", END])
    return graph


async def _run(store: Store, thread: str) -> list[Checkpoint]:
    compiled = _graph().compile(store)
    result = await compiled.run({"turn": 0, "messages": [], "notes": []}, thread=thread)
    while result.status == "interrupted":
        result = await compiled.resume(thread, "yes")
    assert result.status == "done"
    return [c async for c in store.history(thread)]


async def test_every_step_reads_back_as_stored_whole(harness: BackendHarness) -> None:
    whole = MemoryCheckpointer()
    whole.deltas = False
    expected = await _run(whole, "conv")
    async with harness.open() as store:
        got = await _run(store, "conv")
        by_get = [await store.get("conv", c.step) for c in expected]
        newest = [c async for c in store.history("conv", newest_first=True)]
        sizes = (
            [len(await harness.read_payload(None, "conv", c.step)) for c in expected[-10:]]
            if harness.read_payload is not None
            else []
        )
    shape = [(c.step, dict(c.state), c.next, c.interrupted) for c in expected]
    assert [(c.step, dict(c.state), c.next, c.interrupted) for c in got] == shape
    assert [(c.step, dict(c.state)) for c in by_get if c] == [(s, st) for s, st, _, _ in shape]
    assert [c.step for c in newest] == [c.step for c in expected][::-1]
    assert [dict(c.state) for c in newest] == [dict(c.state) for c in expected][::-1]
    full = len(orjson.dumps(expected[-1].state))
    assert sizes and max(sizes) * 4 < full, f"the last steps stored {sizes} of a {full}-byte state"


async def _mutating(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    state["messages"].append({"in": "place"})  # a node that changes its input
    return {"turn": state["turn"] + 1, "messages": [{"n": state["turn"]}]}


async def test_a_list_changed_in_place_by_a_node_is_stored_whole() -> None:
    graph = Graph("in-place", reducers={"messages": append})
    graph.add_node("m", _mutating).add_edge(START, "m")
    graph.add_conditional_edges("m", lambda s: "m" if s["turn"] < 5 else END, ["m", END])
    async with MemoryCheckpointer() as store:
        result = await graph.compile(store).run({"turn": 0, "messages": []}, thread="t")
        assert result.status == "done"
        states = [dict(c.state) async for c in store.history("t")]
    assert [len(s["messages"]) for s in states] == [0, 2, 4, 6, 8, 10]
    assert states[-1]["messages"][-2:] == [{"in": "place"}, {"n": 4}]


async def test_a_fork_of_a_step_stored_as_changes_starts_from_its_whole_state(
    harness: BackendHarness,
) -> None:
    async with harness.open() as store:
        original = await _run(store, "base")
        compiled = _graph().compile(store)
        source = original[21]
        forked = await compiled.fork("base", source.step, new_thread="forked")
        assert forked.state == source.state
        result = await compiled.run_until_settled(thread="forked")
        while result.status == "interrupted":
            result = await compiled.resume("forked", "yes")
        rest = [c async for c in store.history("forked")]
    assert rest[0].state == source.state and rest[-1].state["turn"] == TURNS
