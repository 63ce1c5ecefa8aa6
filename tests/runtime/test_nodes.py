"""Nodes fail early and clearly: plain def nodes, arity, non-JSON output, secrets."""

from __future__ import annotations

import math
import pickle
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.errors import CheckpointNotSerializable
from agentflow.runtime import (
    START,
    Graph,
    GraphInvalid,
    NodeContext,
    NodeFailed,
    UpdateNotSerializable,
)


def _one(name: str, fn: Any) -> Graph:
    return Graph(name).add_node("n", fn).add_edge(START, "n")


async def test_a_plain_def_node_runs_in_a_worker_thread_and_may_interrupt() -> None:
    loop_thread = threading.get_ident()
    ran_in: list[int] = []

    def blocking(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        ran_in.append(threading.get_ident())
        answer = ctx.interrupt("ok?")
        return {"answer": answer}

    compiled = _one("sync", blocking).compile(MemoryCheckpointer())
    assert (await compiled.run({}, thread="s")).status == "interrupted"
    result = await compiled.resume("s", "yes")
    assert result.state == {"answer": "yes"}
    assert ran_in and loop_thread not in ran_in


async def test_callable_objects_run_by_how_they_are_called() -> None:
    class AsyncNode:
        async def __call__(self, state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
            return {"kind": "async", "thread": threading.get_ident()}

    class SyncNode:
        def __call__(self, state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
            return {"kind": "sync", "thread": threading.get_ident()}

    here = threading.get_ident()
    a = await _one("a", AsyncNode()).compile(MemoryCheckpointer()).run({}, thread="a")
    b = await _one("b", SyncNode()).compile(MemoryCheckpointer()).run({}, thread="b")
    assert a.state["thread"] == here and b.state["thread"] != here


@pytest.mark.parametrize(
    "fn",
    [lambda state: None, lambda: None, lambda state, ctx, extra: None],
    ids=["one", "none", "three"],
)
def test_a_node_that_cannot_take_state_and_ctx_is_refused_at_add_node(fn: Any) -> None:
    with pytest.raises(GraphInvalid, match=r"node 'n' must take two arguments \(state, ctx\)"):
        Graph("g").add_node("n", fn)


def test_a_non_callable_node_is_refused() -> None:
    with pytest.raises(GraphInvalid, match="must be a function, got dict"):
        Graph("g").add_node("n", {})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "why"),
    [({1, 2}, "set"), (math.nan, "NaN or infinity"), ({1: "a"}, "str")],
    ids=["set", "nan", "int-key"],
)
async def test_a_non_json_update_names_the_node_and_the_key(value: Any, why: str) -> None:
    async def first(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"fine": 1}

    async def bad(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"ok": True, "tags": value}

    graph = Graph("j").add_node("first", first).add_node("bad", bad)
    graph.add_edge(START, "first").add_edge(START, "bad")
    store = MemoryCheckpointer()
    with pytest.raises(UpdateNotSerializable) as info:
        await graph.compile(store).run({}, thread="j")
    assert (info.value.node, info.value.key) == ("bad", "tags")
    assert "node 'bad' of thread 'j' wrote 'tags', which is not JSON" in str(info.value)
    assert why in str(info.value)
    assert isinstance(info.value, CheckpointNotSerializable)
    assert isinstance(info.value.__cause__, CheckpointNotSerializable)
    latest = await store.get("j")
    assert latest is not None and latest.step == 0


async def test_non_json_input_fork_updates_and_suspended_writes_are_named() -> None:
    store = MemoryCheckpointer()

    async def side(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"when": state["bad"] if "bad" in state else object()}

    async def ask(state: Mapping[str, Any], ctx: NodeContext) -> None:
        ctx.interrupt("?")

    graph = Graph("w").add_node("side", side).add_node("ask", ask)
    graph.add_edge(START, "side").add_edge(START, "ask")
    compiled = graph.compile(store)
    with pytest.raises(UpdateNotSerializable) as given:
        await compiled.run({"bad": {1, 2}}, thread="i")
    assert given.value.node == "input" and given.value.key == "bad"
    with pytest.raises(UpdateNotSerializable) as written:
        await compiled.run({}, thread="w")
    assert (written.value.node, written.value.key) == ("side", "when")

    ok = _one("ok", lambda state, ctx: None).compile(store)
    await ok.run({}, thread="src")
    with pytest.raises(UpdateNotSerializable) as forked:
        await ok.fork("src", 0, new_thread="f", update={"x": {1}})
    assert forked.value.node == "fork" and await store.get("f") is None


async def test_node_failed_keeps_the_exceptions_text_out_of_its_message() -> None:
    async def leaky(state: Mapping[str, Any], ctx: NodeContext) -> None:
        raise KeyError("bad key SUPERSECRET-7f3a9")

    with pytest.raises(NodeFailed) as info:
        await _one("l", leaky).compile(MemoryCheckpointer()).run({}, thread="l")
    failed = info.value
    assert "SUPERSECRET" not in str(failed) and "SUPERSECRET" not in repr(failed)
    assert "KeyError" in str(failed) and failed.cause_type == "KeyError"
    assert "SUPERSECRET" in str(failed.__cause__)
    again = pickle.loads(pickle.dumps(failed))
    assert (again.node, again.thread, again.step, str(again)) == ("n", "l", 0, str(failed))
