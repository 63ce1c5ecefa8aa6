"""AgentflowSaver's own guarantees: safe decoding, exact values, tenancy, typed errors."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from agentflow.checkpoint.base import Checkpoint as Record
from agentflow.checkpoint.testing import BackendHarness
from agentflow.errors import (
    CheckpointConflict,
    CheckpointNotSerializable,
    InvalidArgument,
    StoreUnavailable,
)
from agentflow.integrations.langgraph import AgentflowSaver, copy_checkpoints
from agentflow.integrations.langgraph.records import checkpoint_step
from agentflow.integrations.langgraph.values import is_exact_json
from tests.integrations.agent_framework_stores import Recording


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


def _config(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _checkpoint(values: dict[str, Any]) -> Checkpoint:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {key: 1 for key in values}
    return cp


async def _put(saver: AgentflowSaver, thread_id: str, values: dict[str, Any]) -> Any:
    cp = _checkpoint(values)
    return await saver.aput(_config(thread_id), cp, {"source": "input", "step": -1}, {})


async def test_values_come_back_with_their_types(harness: BackendHarness) -> None:
    values = {
        "text": "hé",
        "nested": {"a": [1, 2.5, None, True]},
        "pair": (1, 2),
        "when": __import__("datetime").datetime(2026, 1, 2, 3, 4, 5),
        "id": uuid.UUID(int=7),
        "tags": {"x", "y"},
        "colour": Colour.RED,
        "point": Point(1, 2),
        "raw": b"\x00\xff",
    }
    async with harness.open() as checkpointer:
        saver = AgentflowSaver(checkpointer, allowed=[Colour, Point])
        stored = await _put(saver, "types", values)
        got = await saver.aget_tuple(stored)
        stock = InMemorySaver()
        expected = await stock.aget_tuple(
            await stock.aput(_config("types"), _checkpoint(values), {}, dict.fromkeys(values, 1))
        )
        assert got is not None and expected is not None
        # What LangGraph's own saver gives back, value for value and type for type.
        for key, value in expected.checkpoint["channel_values"].items():
            assert got.checkpoint["channel_values"][key] == value
            assert type(got.checkpoint["channel_values"][key]) is type(value)
        assert got.checkpoint["channel_values"]["when"] == values["when"]
        # Exact JSON is stored as JSON, where agentflow's own tools show it.
        record = await checkpointer.get("types")
        assert record is not None and record.state == {
            "text": "hé",
            "nested": {"a": [1, 2.5, None, True]},
        }
        with pytest.raises(CheckpointNotSerializable, match="64-bit"):
            await _put(saver, "huge", {"n": 2**70})


@pytest.mark.parametrize(
    ("value", "exact"),
    [
        ({"text": "\u0100\u0150\u0190", "n": 196, "f": 1e-300, "deep": [[{"x": -59}]]}, True),
        ({"plain": ["ascii", 1, True, None, {}]}, True),
        ({"deep": [[{"x": b"\x00"}]]}, False),
        ([bytearray(b"raw")], False),
        ({"view": memoryview(b"raw")}, False),
        ([1.5, float("nan")], False),
        ({"k": [(1, 2)]}, False),
        ({1: "int key"}, False),
        (2**64, False),
        ([2**64 - 1, -(2**63)], True),
    ],
)
def test_only_values_json_gives_back_exactly_are_stored_as_json(value: Any, exact: bool) -> None:
    assert is_exact_json(value) is exact


async def test_tenants_never_see_each_other(harness: BackendHarness) -> None:
    async with harness.open(namespace="a") as first, harness.open(namespace="b") as second:
        a, b = AgentflowSaver(first), AgentflowSaver(second)
        await _put(a, "shared-id", {"owner": "a"})
        assert await b.aget_tuple(_config("shared-id")) is None
        assert [t async for t in b.alist(None)] == []
        await _put(b, "shared-id", {"owner": "b"})
        got = await a.aget_tuple(_config("shared-id"))
        assert got is not None and got.checkpoint["channel_values"] == {"owner": "a"}


async def test_bad_input_is_a_typed_error(harness: BackendHarness) -> None:
    async with harness.open() as checkpointer:
        saver = AgentflowSaver(checkpointer)
        cp = _checkpoint({})
        cp["id"] = "not-a-uuid"
        with pytest.raises(InvalidArgument, match="UUID"):
            await saver.aput(_config("t"), cp, {}, {})
        with pytest.raises(InvalidArgument, match="thread_id"):
            await saver.aput(_config("a\x1fb"), _checkpoint({}), {}, {})
        with pytest.raises(InvalidArgument, match="checkpoint_id"):
            await saver.aput_writes(_config("t"), [("ch", 1)], "task")
        with pytest.raises(InvalidArgument, match="strategy"):
            await saver.aprune(["t"], strategy="everything")
        assert await checkpointer.list_threads() == []


async def test_two_ids_on_one_step_are_refused(harness: BackendHarness) -> None:
    async with harness.open() as checkpointer:
        saver = AgentflowSaver(checkpointer)
        first = _checkpoint({"v": 1})
        await saver.aput(_config("t"), first, {}, {})
        other = _checkpoint({"v": 2})
        number = uuid.UUID(first["id"]).int ^ 1  # same time bits, another node
        other["id"] = str(uuid.UUID(int=number))
        assert checkpoint_step(other["id"]) == checkpoint_step(first["id"])
        with pytest.raises(CheckpointConflict):
            await saver.aput(_config("t"), other, {}, {})
        again = await saver.aput(_config("t"), {**first, "channel_values": {"v": 3}}, {}, {})
        got = await saver.aget_tuple(again)
        assert got is not None and got.checkpoint["channel_values"] == {"v": 3}


async def test_concurrent_writes_to_one_checkpoint_are_all_kept(harness: BackendHarness) -> None:
    async with harness.open() as first, harness.open() as second:
        savers = [AgentflowSaver(first), AgentflowSaver(second)]
        stored = await _put(savers[0], "parallel", {})
        await asyncio.gather(
            *(savers[i % 2].aput_writes(stored, [("ch", i)], f"task-{i}") for i in range(12))
        )
        got = await savers[1].aget_tuple(stored)
        assert got is not None
        assert sorted(w[2] for w in got.pending_writes or []) == list(range(12))


class _Held(Recording):
    """Holds checkpoint puts while ``gate`` is clear; records the kind of every put, in order."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.kinds: list[str] = []
        self.gate = asyncio.Event()
        self.holding = asyncio.Event()

    async def put(self, cp: Record, *, if_revision: int | None = None) -> str:
        kind = cp.extra["langgraph"]["kind"]
        self.kinds.append(kind)
        if kind == "checkpoint" and not self.gate.is_set():
            self.holding.set()
            await self.gate.wait()
        return await super().put(cp, if_revision=if_revision)

    async def __aenter__(self) -> _Held:
        return self


async def _writes_while_held(held: _Held, saver: AgentflowSaver) -> tuple[Any, list[Any]]:
    """A checkpoint put held in the store, two tasks' writes made meanwhile; then released."""
    first = _checkpoint({"n": 1})
    putting = asyncio.create_task(saver.aput(_config("t"), first, {"step": 0}, {}))
    await held.holding.wait()
    stored = _config("t", first["id"])
    writing = [
        asyncio.create_task(saver.aput_writes(stored, [("ch", task)], task)) for task in "ab"
    ]
    for _ in range(10):
        await asyncio.sleep(0)
    assert held.kinds == ["checkpoint"]  # the writes wait for the checkpoint
    assert not any(task.done() for task in writing)
    held.gate.set()
    await putting
    return stored, writing


@pytest.mark.parametrize("followed", [True, False], ids=["next-checkpoint", "none-follows"])
async def test_writes_made_while_a_checkpoint_is_stored_wait_for_the_next_one(
    harness: BackendHarness, followed: bool
) -> None:
    async with harness.open() as checkpointer:
        held = _Held(checkpointer)
        saver = AgentflowSaver(held)
        stored, writing = await _writes_while_held(held, saver)
        if followed:
            await saver.aput(stored, _checkpoint({"n": 2}), {"step": 1}, {})
        await asyncio.wait_for(asyncio.gather(*writing), timeout=10)
        # Both tasks' writes in one put: just before the next checkpoint's, or alone.
        assert held.kinds == ["checkpoint", "writes", *(["checkpoint"] if followed else [])]
        got = await saver.aget_tuple(stored)
        assert got is not None and got.pending_writes == [("a", "ch", "a"), ("b", "ch", "b")]


async def test_a_failed_write_that_waited_for_a_checkpoint_fails_its_callers(
    harness: BackendHarness,
) -> None:
    async with harness.open() as checkpointer:
        held = _Held(checkpointer)
        held.lose_next_put(lambda cp: cp.extra["langgraph"]["kind"] == "writes", "before")
        saver = AgentflowSaver(held)
        stored, writing = await _writes_while_held(held, saver)
        outcomes = await asyncio.gather(*writing, return_exceptions=True)
        assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes)
        got = await saver.aget_tuple(stored)
        assert got is not None and got.pending_writes == []


async def test_copy_checkpoints_from_a_stock_saver(harness: BackendHarness) -> None:
    from tests.integrations import langgraph_graphs as graphs

    source = InMemorySaver()
    graph = graphs.approval_graph(source)  # type: ignore[arg-type]
    config = {"configurable": {"thread_id": "moved"}}
    await graph.ainvoke({"topic": "bees"}, config)
    async with harness.open() as checkpointer:
        target = AgentflowSaver(checkpointer)
        copied = await copy_checkpoints(source, target)
        assert copied == len([t async for t in source.alist(None)])
        assert await copy_checkpoints(source, target, thread_ids=["moved"]) == copied
        moved = graphs.approval_graph(target)
        from langgraph.types import Command

        done = await moved.ainvoke(Command(resume="ok"), config)
        assert done["log"] == ["draft", "approve", "publish:ok"]


def test_sync_methods_run_on_the_saver_loop() -> None:
    from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore

    saver = AgentflowSaver(MemoryCheckpointer(store=MemoryStore()))
    stored = saver.put(_config("sync"), _checkpoint({"k": "v"}), {"step": 0}, {})
    saver.put_writes(stored, [("ch", 1)], "task")
    got = saver.get_tuple(stored)
    assert got is not None and got.pending_writes == [("task", "ch", 1)]
    assert [t.config for t in saver.list(_config("sync"))] == [got.config]
    saver.delete_thread("sync")
    assert saver.get_tuple(_config("sync")) is None


async def test_sync_methods_on_the_running_loop_raise() -> None:
    from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore

    saver = AgentflowSaver(MemoryCheckpointer(store=MemoryStore()))
    with pytest.raises(RuntimeError, match="a\\* method"):
        saver.get_tuple(_config("t"))
