"""A LangGraph graph on MongoDB costs about one command per step: each step's pending
writes ride in the command of the next checkpoint, and nothing is lost by it."""

from __future__ import annotations

import pytest
from pymongo import AsyncMongoClient

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.integrations.langgraph import AgentflowSaver
from tests.backends.mongodb import Commands, Doc, MongoStore
from tests.backends.mongodb import scratch as scratch_body
from tests.integrations.langgraph_graphs import counter_graph

scratch = pytest.fixture(scratch_body)
NODES = 6
RUNS = 5


async def test_a_step_costs_one_command_and_keeps_its_writes(scratch: MongoStore) -> None:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    try:
        async with MongoCheckpointer(client=client, database=scratch.database) as store:
            saver = AgentflowSaver(store)
            graph = counter_graph(saver, nodes=NODES)
            await graph.ainvoke({"n": 0}, {"configurable": {"thread_id": "warm"}})
            commands.sent.clear()
            for run in range(RUNS):
                config = {"configurable": {"thread_id": f"t{run}"}}
                final = await graph.ainvoke({"n": 0}, config)
                assert final["n"] == NODES
            updates = commands.names().count("update")
            history = [
                s async for s in graph.aget_state_history({"configurable": {"thread_id": "t0"}})
            ]
    finally:
        await client.close()
    checkpoints = NODES + 2  # the input, one per node, and the first one of the loop
    assert len(history) == checkpoints
    # alone, the writes would be another command each (NODES + 1 of them per run)
    assert updates <= RUNS * (checkpoints + 1), updates
    # every step's writes are stored: each snapshot but the last knows its next task's result
    for snapshot in history[1:]:
        assert snapshot.tasks and all(task.result is not None for task in snapshot.tasks), snapshot
