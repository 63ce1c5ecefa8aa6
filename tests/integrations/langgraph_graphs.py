"""LangGraph graphs the adapter tests run, importable by a child process too."""

from __future__ import annotations

import itertools
import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from agentflow.checkpoint.testing.harness import open_from_recipe
from agentflow.integrations.langgraph import AgentflowSaver

Recipe = tuple[str, dict[str, Any]]


class Approval(TypedDict, total=False):
    topic: str
    draft: str
    verdict: str
    log: Annotated[list[str], operator.add]


def _draft(state: Approval) -> Approval:
    return {"draft": f"about {state['topic']}", "log": ["draft"]}


def _approve(state: Approval) -> Approval:
    verdict = interrupt({"question": "publish?", "draft": state["draft"]})
    return {"verdict": verdict, "log": ["approve"]}


def _publish(state: Approval) -> Approval:
    return {"log": [f"publish:{state['verdict']}"]}


def approval_graph(saver: AgentflowSaver) -> Any:
    """draft -> approve (asks a human) -> publish."""
    builder = StateGraph(Approval)
    builder.add_node("draft", _draft)
    builder.add_node("approve", _approve)
    builder.add_node("publish", _publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "approve")
    builder.add_edge("approve", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


def resume_in_child(recipe: Recipe, namespace: str, thread_id: str, answer: str) -> dict[str, Any]:
    """Resume an interrupted approval thread in this (child) process."""
    import asyncio

    from langgraph.types import Command

    async def run() -> dict[str, Any]:
        async with open_from_recipe(recipe, namespace=namespace) as checkpointer:
            graph = approval_graph(AgentflowSaver(checkpointer))
            config = {"configurable": {"thread_id": thread_id}}
            result: dict[str, Any] = await graph.ainvoke(Command(resume=answer), config)
            return result

    return asyncio.run(run())


class Fan(TypedDict, total=False):
    results: Annotated[list[str], operator.add]


class Flaky:
    """Parallel branches a, b, c -> join; c fails on its first run. Counts runs."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    def _node(self, name: str) -> Any:
        def run(state: Fan) -> Fan:
            self.runs[name] = self.runs.get(name, 0) + 1
            if name == "c" and self.runs[name] == 1:
                raise RuntimeError("c fails once")
            return {"results": [name]}

        return run

    def graph(self, saver: AgentflowSaver) -> Any:
        builder = StateGraph(Fan)
        for name in ("a", "b", "c", "join"):
            builder.add_node(name, self._node(name))
        for name in ("a", "b", "c"):
            builder.add_edge(START, name)
            builder.add_edge(name, "join")
        builder.add_edge("join", END)
        return builder.compile(checkpointer=saver)


class Counter(TypedDict, total=False):
    n: int
    path: Annotated[list[str], operator.add]


def counter_graph(saver: AgentflowSaver, nodes: int = 4) -> Any:
    """A chain of ``nodes`` nodes, each adding one to ``n``."""
    builder = StateGraph(Counter)
    names = [f"n{i}" for i in range(nodes)]
    for name in names:
        builder.add_node(name, lambda s, name=name: {"n": s.get("n", 0) + 1, "path": [name]})
    builder.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder.compile(checkpointer=saver)


def nested_graph(saver: AgentflowSaver) -> Any:
    """A parent whose one node is the approval graph as a subgraph (its own namespace)."""
    inner = StateGraph(Approval)
    inner.add_node("draft", _draft)
    inner.add_node("approve", _approve)
    inner.add_edge(START, "draft")
    inner.add_edge("draft", "approve")
    inner.add_edge("approve", END)
    builder = StateGraph(Approval)
    builder.add_node("review", inner.compile())
    builder.add_node("publish", _publish)
    builder.add_edge(START, "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)
