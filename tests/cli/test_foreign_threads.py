"""Threads LangGraph wrote through ``AgentflowSaver``: the command line shows what
each record is, invents no pruning, and sends resume and fork back to LangGraph."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from agentflow.checkpoint import open_store
from agentflow.integrations.langgraph import AgentflowSaver

Run = tuple[int, str]


class State(TypedDict):
    n: int
    answer: str


def _count(state: State) -> dict[str, Any]:
    return {"n": state["n"] + 1}


def _ask(state: State) -> dict[str, Any]:
    return {"answer": interrupt({"question": "ok?"})}


async def _langgraph_thread(db: Path) -> None:
    store = open_store(f"sqlite:///{db}")
    try:
        graph = StateGraph(State)
        graph.add_node("count", _count)
        graph.add_node("ask", _ask)
        graph.add_edge(START, "count")
        graph.add_edge("count", "ask")
        graph.add_edge("ask", END)
        app = graph.compile(checkpointer=AgentflowSaver(store))
        await app.ainvoke({"n": 1, "answer": ""}, {"configurable": {"thread_id": "lg"}})
    finally:
        await store.close()


def test_a_langgraph_thread_is_shown_as_what_it_is(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    asyncio.run(_langgraph_thread(tmp_path / ".runs" / "checkpoints.db"))
    status, out = here("history", "lg")
    assert status == 0 and "pruned" not in out and "None asks" not in out
    assert "LangGraph checkpoint" in out and "LangGraph pending writes" in out
    rows = json.loads(here("history", "lg", "--json")[1])
    assert len(rows) == 6 and not any("pruned" in row["event"] for row in rows)
    assert rows[-1]["event"].startswith("LangGraph pending writes of ")
    assert rows[-1]["event"].endswith(" (an interrupt waits)")
    status, out = here("show", "lg")
    assert status == 0 and "pending  -: null" not in out
    assert "record   LangGraph pending writes of" in out
    assert "owner    LangGraph (through AgentflowSaver), which continues it" in out
    assert "state of its checkpoint, step" in out and '"n": 2' in out
    shown = json.loads(here("show", "lg", "--json")[1])
    assert shown["framework"] == "LangGraph" and shown["kind"] == "writes"
    for command in (["resume", "lg"], ["fork", "lg", str(rows[0]["step"])]):
        status, out = here(*command)
        assert status == 1 and "graph 'None'" not in out, out
        assert "thread 'lg' was written by LangGraph (through AgentflowSaver)" in out
        assert f"agentflow {command[0]} runs agentflow graphs only" in out
