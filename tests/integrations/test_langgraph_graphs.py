"""Real LangGraph graphs through AgentflowSaver, on every backend."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from langgraph.types import Command

from agentflow.checkpoint.testing import BackendHarness
from agentflow.integrations.langgraph import AgentflowSaver
from tests.integrations import langgraph_graphs as graphs

NAMESPACE = "tenant-a"


def _config(thread_id: str, **extra: Any) -> Any:
    return {"configurable": {"thread_id": thread_id, **extra}}


async def test_interrupt_then_resume_in_another_process(harness: BackendHarness) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        graph = graphs.approval_graph(AgentflowSaver(checkpointer))
        config = _config("approval-1")
        paused = await graph.ainvoke({"topic": "otters"}, config)
        assert paused["__interrupt__"][0].value == {"question": "publish?", "draft": "about otters"}
        snapshot = await graph.aget_state(config)
        assert snapshot.next == ("approve",)
        assert (await checkpointer.list_threads())[0].status == "interrupted"

        if harness.multiprocess:
            recipe = pickle.loads(pickle.dumps(harness.recipe))
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                future = pool.submit(graphs.resume_in_child, recipe, NAMESPACE, "approval-1", "yes")
                done = await asyncio.wrap_future(future)
        else:  # one process only (memory): a new saver and a new graph stand in for it
            done = await graphs.approval_graph(AgentflowSaver(checkpointer)).ainvoke(
                Command(resume="yes"), config
            )
        assert done["log"] == ["draft", "approve", "publish:yes"]
        final = await graph.aget_state(config)
        assert final.next == () and final.values["verdict"] == "yes"


async def test_parallel_branches_keep_pending_writes(harness: BackendHarness) -> None:
    flaky = graphs.Flaky()
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        saver = AgentflowSaver(checkpointer)
        graph = flaky.graph(saver)
        config = _config("fan-1")
        with pytest.raises(RuntimeError, match="c fails once"):
            await graph.ainvoke({"results": []}, config)
        stored = await saver.aget_tuple(config)
        assert stored is not None
        written = sorted(w[2] for w in stored.pending_writes or [] if w[1] == "results")
        assert written == [["a"], ["b"]]
        result = await graph.ainvoke(None, config)
        assert sorted(result["results"]) == ["a", "b", "c", "join"]
        assert flaky.runs == {"a": 1, "b": 1, "c": 2, "join": 1}


async def test_time_travel_replays_from_an_earlier_checkpoint(harness: BackendHarness) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        graph = graphs.counter_graph(AgentflowSaver(checkpointer))
        config = _config("counter-1")
        assert (await graph.ainvoke({"n": 0}, config))["n"] == 4
        history = [s async for s in graph.aget_state_history(config)]
        assert [s.values.get("n") for s in history] == [4, 3, 2, 1, 0, None]
        after_two = next(s for s in history if s.values.get("n") == 2)
        assert after_two.next == ("n2",)
        replayed = await graph.ainvoke(None, after_two.config)
        assert replayed["n"] == 4 and replayed["path"] == ["n0", "n1", "n2", "n3"]
        newest = [
            (s.metadata["source"], s.values.get("n"))
            async for s in graph.aget_state_history(config)
        ]
        # As LangGraph's own savers store it: a fork of the checkpoint, then the re-run steps.
        assert newest[:3] == [("loop", 4), ("loop", 3), ("fork", 2)]
        assert len(newest) == len(history) + 3


async def test_fork_from_an_earlier_checkpoint(harness: BackendHarness) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        graph = graphs.counter_graph(AgentflowSaver(checkpointer))
        config = _config("counter-fork")
        await graph.ainvoke({"n": 0}, config)
        history = [s async for s in graph.aget_state_history(config)]
        after_one = next(s for s in history if s.values.get("n") == 1)
        forked = await graph.aupdate_state(after_one.config, {"n": 100})
        fork_state = await graph.aget_state(forked)
        assert fork_state.values["n"] == 100
        assert (
            fork_state.parent_config["configurable"]["checkpoint_id"]
            == (after_one.config["configurable"]["checkpoint_id"])
        )
        result = await graph.ainvoke(None, forked)
        assert result["n"] == 103 and result["path"] == ["n0", "n1", "n2", "n3"]
        original = await graph.aget_state(history[0].config)
        assert original.values["n"] == 4  # the first branch is untouched


async def test_subgraph_namespaces_resume_and_delete(harness: BackendHarness) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        saver = AgentflowSaver(checkpointer)
        graph = graphs.nested_graph(saver)
        config = _config("nested-1")
        await graph.ainvoke({"topic": "owls"}, config)
        state = await graph.aget_state(config, subgraphs=True)
        assert state.tasks[0].state.next == ("approve",)
        done = await graph.ainvoke(Command(resume="no"), config)
        assert done["log"][-1] == "publish:no"
        listed = {t.thread for t in await checkpointer.list_threads()}
        assert "nested-1" in listed and len(listed) >= 3  # root, a child namespace, its list
        await saver.adelete_thread("nested-1")
        assert await checkpointer.list_threads() == []
