"""Which stored types AgentflowSaver rebuilds, learned without configuration, and the rest.

A type is rebuilt when the application vouches for it (the defaults,
``allowed=``, a graph's schemas, the saver's own writes); any other reads back
as its stored data, logged and counted, and never runs; a write never fails
because some reader would not know its type.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import ormsgpack
import pytest
from langchain_core.agents import AgentAction, AgentFinish
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.types import Command

from agentflow.checkpoint.testing import BackendHarness
from agentflow.errors import CheckpointCorrupted
from agentflow.integrations.langgraph import AgentflowSaver, StrictSerializer
from tests.integrations import langgraph_typed_graphs as typed

NAMESPACE = "tenant-types"
CALLS: list[object] = []


class Trap:
    """A class a hostile record names: building it would leave a trace in CALLS."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        CALLS.append((args, kwargs))


def record_call(*args: object) -> None:
    CALLS.append(args)


@dataclasses.dataclass
class Point:
    x: int
    y: int


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _checkpoint(values: dict[str, Any]) -> Checkpoint:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = dict.fromkeys(values, 1)
    return cp


def _serde(saver: AgentflowSaver) -> StrictSerializer:
    assert isinstance(saver.serde, StrictSerializer)
    return saver.serde


def _ext(code: int, payload: Any) -> bytes:
    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(payload)))


async def test_a_type_the_reader_does_not_know_reads_back_as_its_fields(
    harness: BackendHarness, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        writer = AgentflowSaver(checkpointer)
        stored = await writer.aput(_config("p"), _checkpoint({"p": Point(1, 2)}), {}, {})
        mine = await writer.aget_tuple(stored)
        assert mine is not None and mine.checkpoint["channel_values"]["p"] == Point(1, 2)
        reader = AgentflowSaver(checkpointer)  # never wrote a Point, knows no graph
        with caplog.at_level(logging.WARNING, "agentflow.integrations.langgraph"):
            first = await reader.aget_tuple(stored)
            second = await reader.aget_tuple(stored)
        assert first is not None and second is not None
        assert first.checkpoint["channel_values"]["p"] == {"x": 1, "y": 2}
        key = (__name__, "Point")
        assert _serde(reader).known.degraded == {key: 2}
        warnings = [r for r in caplog.records if "Point" in r.getMessage()]
        assert len(warnings) == 1 and "allowed=" in warnings[0].getMessage()  # once per type
        assert AgentflowSaver(checkpointer, allowed=[Point]).serde.loads_typed(
            writer.serde.dumps_typed(Point(3, 4))
        ) == Point(3, 4)


@pytest.mark.parametrize(
    ("blob", "data"),
    [
        (_ext(0, [__name__, "Trap", "arg"]), "arg"),
        (_ext(1, [__name__, "record_call", ["a", "b"]]), ["a", "b"]),
        (_ext(2, [__name__, "Trap", {"k": 1}]), {"k": 1}),
        (_ext(5, [__name__, "Trap", {"k": 1}, "model_validate_json"]), {"k": 1}),
        (_ext(1, ["os", "system", ["echo pwned"]]), ["echo pwned"]),
        (_ext(3, ["os", "popen", "id", "read"]), "id"),
        (_ext(3, [__name__, "Trap", "x", "mro"]), "x"),
    ],
)
def test_hostile_types_never_run_and_read_back_as_data(blob: bytes, data: Any) -> None:
    assert StrictSerializer().loads_typed(("msgpack", blob)) == data
    assert CALLS == []


@pytest.mark.parametrize(
    ("kind", "blob", "message"),
    [
        ("msgpack", _ext(42, ["x"]), "malformed"),
        ("msgpack", _ext(0, ["only-two", "parts"]), "malformed"),
        ("msgpack", _ext(0, [1, 2, 3]), "malformed"),
        ("pickle", b"cos\nsystem\n(S'echo pwned'\ntR.", "refused"),
        ("json", b'{"lc": 2, "type": "constructor", "id": ["os", "system"]}', "constructor"),
        ("msgpack", b"\xc1", "does not decode"),
    ],
)
def test_damaged_or_foreign_records_raise(kind: str, blob: bytes, message: str) -> None:
    with pytest.raises(CheckpointCorrupted, match=message):
        StrictSerializer().loads_typed((kind, blob))


async def test_a_tampered_record_never_runs_its_type(harness: BackendHarness) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        saver = AgentflowSaver(checkpointer)
        stored = await saver.aput(_config("t"), _checkpoint({"p": Point(1, 2)}), {}, {})
        record = await checkpointer.get("t")
        assert record is not None
        fields = record.extra["langgraph"]
        evil = base64.b64encode(_ext(1, [__name__, "record_call", ["pwned"]])).decode()
        fields["values_packed"]["p"] = ["msgpack", evil]
        await checkpointer.put(dataclasses.replace(record, extra={"langgraph": fields}))
        got = await saver.aget_tuple(stored)
        assert got is not None and got.checkpoint["channel_values"]["p"] == ["pwned"]
        assert CALLS == []
        if harness.corrupt is not None:
            await harness.corrupt(NAMESPACE, "t", record.step)
            with pytest.raises(CheckpointCorrupted):
                await saver.aget_tuple(stored)


async def test_a_new_process_rebuilds_the_schema_types_and_degrades_the_rest(
    harness: BackendHarness,
) -> None:
    """Without strict mode and without allowed=: the graph's schema teaches the saver."""
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        graph = typed.review_graph(AgentflowSaver(checkpointer))
        config = {"configurable": {"thread_id": "review-1"}}
        paused = await graph.ainvoke(typed.Review(topic="auth"), config)
        assert paused["__interrupt__"][0].value == {"question": "ship?"}
        # The answer is validated into a Decision, which no schema names; the
        # write stores it (a reader that would not know it never fails the step).
        done = await graph.ainvoke(Command(resume={"approved": True}), config)
        assert done["answer"] == typed.Decision(approved=True)
        if harness.multiprocess:
            recipe = pickle.loads(pickle.dumps(harness.recipe))
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                future = pool.submit(typed.read_review_in_child, recipe, NAMESPACE, "review-1")
                read = await asyncio.wrap_future(future)
        else:  # one process only (memory): a new saver stands in for it
            read = await typed.read_review(AgentflowSaver(checkpointer), "review-1")
    assert read == {
        "finding": "Finding",
        "score": "Score",
        "priority": "Priority",
        "answer": {"approved": True},
        "degraded": [(typed.__name__, "Decision")],
    }


async def test_a_class_defined_in_a_function_is_rebuilt_from_the_graph_that_names_it(
    harness: BackendHarness,
) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        graph, _ = typed.basket_graph(AgentflowSaver(checkpointer))
        config = {"configurable": {"thread_id": "basket"}}
        await graph.ainvoke({"items": []}, config)
        # A new graph from the same code has new classes: the saver rebuilds its Item.
        fresh_saver = AgentflowSaver(checkpointer)
        fresh_graph, item_class = typed.basket_graph(fresh_saver)
        state = await fresh_graph.aget_state(config)
        assert [type(i) for i in state.values["items"]] == [item_class]
        assert _serde(fresh_saver).known.degraded == {}
        # Without the graph, nothing can name the local class: its fields come back.
        bare = await AgentflowSaver(checkpointer).aget_tuple(_config("basket"))
        assert bare is not None and bare.checkpoint["channel_values"]["items"] == [{"name": "n0"}]
        # ...and the graph's pydantic schema validates them back into its model.
        result = await fresh_graph.ainvoke(None, config)
        assert [i.name for i in result["items"]] == ["n0"]


async def test_langchain_agent_types_are_known_by_default(harness: BackendHarness) -> None:
    values = {
        "action": AgentAction(tool="search", tool_input={"q": "otters"}, log="thinking"),
        "finish": AgentFinish(return_values={"output": "done"}, log="finished"),
    }
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        stored = await AgentflowSaver(checkpointer).aput(
            _config("agent"), _checkpoint(values), {}, {}
        )
        reader = AgentflowSaver(checkpointer)
        got = await reader.aget_tuple(stored)
    assert got is not None and got.checkpoint["channel_values"] == values
    assert _serde(reader).known.degraded == {}


async def test_with_allowlist_teaches_the_same_saver(harness: BackendHarness) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        stored = await AgentflowSaver(checkpointer).aput(
            _config("w"), _checkpoint({"p": Point(5, 6)}), {}, {}
        )
        reader = AgentflowSaver(checkpointer)
        assert reader.with_allowlist([(__name__, "Point")]) is reader
        assert (__name__, "Point") in _serde(reader).allowed
        got = await reader.aget_tuple(stored)
    assert got is not None and got.checkpoint["channel_values"]["p"] == Point(5, 6)
