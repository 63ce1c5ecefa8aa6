"""Journaled calls (``ctx.tool``, ``ctx.model``): started before they go out, replayed after."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.durable import (
    DurableCheckpoint,
    DurableError,
    OperationState,
    run_idempotency_key,
)
from agentflow.runtime import (
    START,
    CallAmbiguous,
    CallFailed,
    Graph,
    ModelCall,
    NodeContext,
    NodeFailed,
    ToolCall,
)
from tests.runtime.conftest import RuntimeBackend


class Tool:
    """A fake external tool that counts its calls and can be told to fail."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.raise_next: BaseException | None = None
        self.seen: list[OperationState] = []
        self.store: MemoryCheckpointer | None = None

    async def __call__(self, call: ToolCall) -> dict[str, Any]:
        if self.store is not None:  # what the journal held while the call was out
            record = await self.store.load(str(call.arguments["thread"]))
            assert record is not None
            self.seen.append(record.tool_journal[-1].state)
        self.calls.append(call)
        error, self.raise_next = self.raise_next, None
        if error is not None:
            raise error
        return {"charged": call.arguments["cents"], "key": call.idempotency_key}


def _one_node(name: str, node: Any) -> Graph:
    return Graph(name).add_node("n", node).add_edge(START, "n")


async def test_a_call_is_journaled_started_before_it_goes_out_and_succeeded_after() -> None:
    tool, store = Tool(), MemoryCheckpointer()
    tool.store = store

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"r": await ctx.tool("charge", {"cents": 5, "thread": ctx.thread}, tool)}

    compiled = _one_node("c", charge).compile(store)
    result = await compiled.run({}, thread="t")
    assert tool.seen == [OperationState.STARTED]
    call = tool.calls[0]
    record = await store.load("t")
    assert record is not None
    assert call.idempotency_key == run_idempotency_key(None, record.trace_id, 1, "n/tool-1@1")
    assert result.state["r"] == {"charged": 5, "key": call.idempotency_key}
    ops = result.checkpoint.extra["runtime"]["operations"]
    assert [(o["name"], o["state"], o["attempt"], o["replayed"]) for o in ops] == [
        ("charge", "succeeded", 1, False)
    ]


async def test_a_node_that_fails_after_its_call_replays_the_receipt_when_resumed() -> None:
    tool, failures = Tool(), [RuntimeError("after the charge")]

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipt = await ctx.tool("charge", {"cents": 5, "thread": ctx.thread}, tool)
        if failures:
            raise failures.pop()
        return {"r": receipt}

    compiled = _one_node("f", charge).compile(MemoryCheckpointer())
    with pytest.raises(NodeFailed):
        await compiled.run({}, thread="t")
    result = await compiled.resume("t")
    assert len(tool.calls) == 1 and result.state["r"]["charged"] == 5
    ops = result.checkpoint.extra["runtime"]["operations"]
    assert [o["replayed"] for o in ops] == [True]


async def test_calls_before_an_interrupt_are_not_made_again_on_resume() -> None:
    tool = Tool()

    async def charge_then_ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        first = await ctx.tool("charge", {"cents": 1, "thread": ctx.thread}, tool)
        answer = ctx.interrupt("ok?")
        second = await ctx.tool("charge", {"cents": 2, "thread": ctx.thread}, tool)
        again = ctx.interrupt("sure?")
        return {"first": first, "second": second, "answers": [answer, again]}

    compiled = _one_node("i", charge_then_ask).compile(MemoryCheckpointer())
    await compiled.run({}, thread="t")
    await compiled.resume("t", "yes")
    result = await compiled.resume("t", "very")
    assert [c.arguments["cents"] for c in tool.calls] == [1, 2]
    assert result.state["answers"] == ["yes", "very"]
    assert result.state["first"]["key"] == tool.calls[0].idempotency_key


class _DiesAtCommit(MemoryCheckpointer):
    """A store whose holder dies between storing a suspend and committing it (once)."""

    died = False

    async def commit(self, checkpoint: DurableCheckpoint, *, claim_token: str) -> DurableCheckpoint:
        if not self.died:
            self.died = True
            raise ConnectionError("the process died here")
        return await super().commit(checkpoint, claim_token=claim_token)


async def test_a_suspends_calls_are_replayed_even_when_its_commit_never_happened() -> None:
    tool, store = Tool(), _DiesAtCommit()

    async def charge_then_ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipt = await ctx.tool("charge", {"cents": 3, "thread": ctx.thread}, tool)
        return {"r": receipt, "answer": ctx.interrupt("ok?")}

    compiled = _one_node("d", charge_then_ask).compile(store)
    with pytest.raises(ConnectionError):
        await compiled.run({}, thread="t")
    result = await compiled.resume("t", "yes")
    assert result.status == "done" and len(tool.calls) == 1
    assert result.state["r"]["charged"] == 3


async def test_a_call_that_failed_for_certain_is_reraised_and_never_made_again() -> None:
    tool = Tool()
    tool.raise_next = CallFailed("card_declined", "the card was declined")
    outcomes: list[str] = []

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            await ctx.tool("charge", {"cents": 5, "thread": ctx.thread}, tool)
        except CallFailed as failed:
            outcomes.append(failed.failure)
            ctx.interrupt("card declined: retry with another card?")
        return {}

    compiled = _one_node("d", charge).compile(MemoryCheckpointer())
    assert (await compiled.run({}, thread="t")).status == "interrupted"
    assert (await compiled.resume("t", "no")).status == "done"
    assert len(tool.calls) == 1 and outcomes == ["card_declined", "card_declined"]


async def test_an_ambiguous_call_suspends_the_run_and_stores_nothing_of_its_step() -> None:
    tool = Tool()
    tool.raise_next = ConnectionResetError("reset after sending")
    swallowed: list[str] = []

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            await ctx.tool("charge", {"cents": 5, "thread": ctx.thread}, tool)
        except Exception:  # a broad except cannot swallow the ambiguity
            swallowed.append("yes")
        return {"charged": True}

    store = MemoryCheckpointer()
    compiled = _one_node("a", charge).compile(store)
    result = await compiled.run({}, thread="t")
    assert result.status == "reconciliation_required" and not swallowed
    [observation] = result.observations
    assert observation.risk == "unknown_tool_side_effect"
    assert observation.idempotency_support is not None
    assert observation.idempotency_support.value == "unsupported"
    latest = await store.get("t")
    assert latest is not None and latest.step == 0
    record = await store.load("t")
    assert record is not None and record.status.value == "reconciliation_required"
    again = await compiled.resume("t")  # the policies defer it: nothing is written
    assert again.status == "reconciliation_required" and len(tool.calls) == 1
    after = await store.load("t")
    assert after is not None and after.revision == record.revision


async def test_an_ambiguous_signal_is_raised_to_code_that_catches_base_exceptions() -> None:
    seen: list[str] = []

    async def broken(call: ToolCall) -> None:
        raise TimeoutError("no reply")

    async def careful(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            await ctx.tool("t", {}, broken)
        except CallAmbiguous as ambiguous:
            seen.append(str(ambiguous))
            raise
        return {}

    result = await _one_node("s", careful).compile(MemoryCheckpointer()).run({}, thread="t")
    assert result.status == "reconciliation_required"
    assert seen and "may have acted" in seen[0] and isinstance(seen[0], str)


async def test_a_cancelled_call_in_flight_is_ambiguous_on_the_next_resume() -> None:
    started = asyncio.Event()

    async def hangs(call: ToolCall) -> None:
        started.set()
        await asyncio.sleep(60)

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"r": await ctx.tool("charge", {}, hangs)}

    compiled = _one_node("c", charge).compile(MemoryCheckpointer())
    running = asyncio.create_task(compiled.run({}, thread="t"))
    await started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.sleep(0.01)  # the released lease lapses
    result = await compiled.resume("t")
    assert result.status == "reconciliation_required"
    assert [o.operation_id.startswith("op_tool_cycle_1_step_1_") for o in result.observations] == [
        True
    ]


async def test_a_rerun_that_makes_another_call_is_refused_not_replayed() -> None:
    cents = [5, 6]

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipt = await ctx.tool("charge", {"cents": cents.pop(0)}, lambda call: {"ok": True})
        if cents:
            raise RuntimeError("fail once")
        return {"r": receipt}

    compiled = _one_node("r", charge).compile(MemoryCheckpointer())
    with pytest.raises(NodeFailed):
        await compiled.run({}, thread="t")
    with pytest.raises(NodeFailed) as info:
        await compiled.resume("t")
    cause = info.value.__cause__
    assert isinstance(cause, DurableError) and cause.code == "checkpoint_journal_integrity_mismatch"


async def test_model_calls_are_journaled_and_keyed_by_their_position() -> None:
    calls: list[ModelCall] = []

    def reply(call: ModelCall) -> dict[str, Any]:
        calls.append(call)
        return {"text": f"reply {len(calls)}"}

    async def chat(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        first = await ctx.model({"model": "m-1", "messages": [{"role": "user"}]}, reply)
        second = await ctx.model({"model": "m-1", "messages": []}, reply, key="summary")
        return {"answers": [first, second], "asked": ctx.interrupt("more?")}

    compiled = _one_node("m", chat).compile(MemoryCheckpointer())
    await compiled.run({}, thread="t")
    result = await compiled.resume("t", "no")
    assert len(calls) == 2 and calls[0].request["settings"] == {}
    assert result.state["answers"] == [{"text": "reply 1"}, {"text": "reply 2"}]
    with pytest.raises(NodeFailed) as info:
        bad = _one_node("b", lambda s, c: c.model({"prompt": "x"}, reply))
        await bad.compile(MemoryCheckpointer()).run({}, thread="b")
    assert isinstance(info.value.__cause__, DurableError)
    assert info.value.__cause__.code == "operation_request_invalid"


async def test_journaled_calls_on_every_backend(runtime_backend: RuntimeBackend) -> None:
    tool = Tool()

    async def charge_then_ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipt = await ctx.tool("charge", {"cents": 9, "thread": ctx.thread}, tool)
        return {"r": receipt, "answer": ctx.interrupt("ok?")}

    async with runtime_backend.open() as store:
        compiled = _one_node("b", charge_then_ask).compile(store)
        await compiled.run({}, thread="t")
        result = await compiled.resume("t", "yes")
        record = await store.load("t")
    assert result.state["r"]["charged"] == 9 and len(tool.calls) == 1
    assert record is not None and record.status.value == "completed"
    assert record.tool_journal == [] and record.terminal_result == {
        "status": "completed",
        "step": 2,
    }


async def test_a_long_run_commits_its_journal_as_it_goes_and_replays_across_the_roll() -> None:
    from agentflow.runtime import END
    from agentflow.runtime.cycles import ROLL_AFTER

    calls: list[str] = []

    async def tick(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        def count(call: ToolCall) -> dict[str, Any]:
            calls.append(call.operation_id)
            return {"counted": call.arguments["i"]}

        await ctx.tool("count", {"i": state["i"]}, count)
        return {"i": state["i"] + 1}

    graph = Graph("long").add_node("tick", tick).add_edge(START, "tick")
    graph.add_conditional_edges("tick", lambda s: "tick" if s["i"] < s["n"] else END, ["tick", END])
    store = MemoryCheckpointer()
    result = await graph.compile(store).run({"i": 0, "n": ROLL_AFTER + 10}, thread="t")
    record = await store.load("t")
    assert result.state["i"] == ROLL_AFTER + 10 and len(set(calls)) == ROLL_AFTER + 10
    assert record is not None and record.cycle_index == 2  # one roll, then the finalize
    assert record.tool_journal == []


async def test_a_call_that_returns_none_succeeds_and_replays_none() -> None:
    """A JSON ``null`` is a receipt (the original's rule): recorded, then replayed as None."""
    made: list[int] = []

    def notify_once(call: ToolCall) -> None:
        made.append(call.attempt)

    async def notify(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        sent = await ctx.tool("notify", {}, notify_once)
        answer = ctx.interrupt({"question": "ok?"})
        return {"sent": sent, "answer": answer}

    store = MemoryCheckpointer()
    compiled = _one_node("none", notify).compile(store)
    paused = await compiled.run({}, thread="t")
    assert paused.status == "interrupted"
    done = await compiled.resume("t", "yes")  # the node runs again: the call is replayed
    assert done.status == "done" and done.state == {"sent": None, "answer": "yes"}
    assert made == [1]


async def test_a_definitive_failure_is_recorded_failed_not_ambiguous() -> None:
    """An error the original calls definitive (a context-length refusal) failed for certain."""

    class ContextTooLong(Exception):
        def __str__(self) -> str:
            return "context_length_exceeded: the prompt is too long"

    def refuse(call: ModelCall) -> Any:
        raise ContextTooLong()

    async def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            await ctx.model({"model": "m-1", "messages": []}, refuse)
        except CallFailed as failed:
            return {"failed": failed.failure}
        return {"failed": None}

    result = await _one_node("m", ask).compile(MemoryCheckpointer()).run({}, thread="t")
    assert result.status == "done" and result.state["failed"] == "model_request_failed"
