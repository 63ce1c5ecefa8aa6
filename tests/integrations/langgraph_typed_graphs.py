"""A LangGraph graph whose state holds application types, importable by a child process.

``Review`` (a pydantic state) names ``Finding`` (pydantic), ``Score`` (a
dataclass) and ``Priority`` (an enum) in its fields, so compiling a graph
over it teaches a saver those types. ``Decision`` is only the
``response_schema`` of an interrupt whose answer lands in the ``Any`` field
``answer``: no schema names it, so a saver that never wrote one reads it back
as its stored fields. :func:`basket_graph` defines its state classes inside
the function, as a graph factory may.
"""

# No `from __future__ import annotations`: the classes basket_graph defines
# must name each other by object, as string annotations of a function's
# locals do not resolve.

import asyncio
import dataclasses
import enum
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from pydantic import BaseModel

from agentflow.checkpoint.testing.harness import open_from_recipe
from agentflow.integrations.langgraph import AgentflowSaver, StrictSerializer

Recipe = tuple[str, dict[str, Any]]


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


@dataclasses.dataclass
class Score:
    value: int
    reason: str


class Finding(BaseModel):
    title: str
    severity: int


class Decision(BaseModel):
    approved: bool


class Review(BaseModel):
    topic: str
    findings: list[Finding] = []
    score: Score | None = None
    priority: Priority = Priority.LOW
    answer: Any = None


def _collect(state: Review) -> dict[str, Any]:
    return {
        "findings": [Finding(title=f"{state.topic} leaks", severity=3)],
        "score": Score(7, "two reviewers"),
        "priority": Priority.HIGH,
    }


def _ask(state: Review) -> dict[str, Any]:
    return {"answer": interrupt({"question": "ship?"}, response_schema=Decision)}


def review_graph(saver: AgentflowSaver) -> Any:
    """collect -> ask (a human answers with a Decision)."""
    builder = StateGraph(Review)
    builder.add_node("collect", _collect)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "collect")
    builder.add_edge("collect", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


async def read_review(saver: AgentflowSaver, thread_id: str) -> dict[str, Any]:
    """The stored review as a fresh graph reads it: each value's type, and what degraded."""
    state = await review_graph(saver).aget_state({"configurable": {"thread_id": thread_id}})
    values = state.values
    assert isinstance(saver.serde, StrictSerializer)
    return {
        "finding": type(values["findings"][0]).__name__,
        "score": type(values["score"]).__name__,
        "priority": type(values["priority"]).__name__,
        "answer": values["answer"],
        "degraded": sorted(saver.serde.known.degraded),
    }


def read_review_in_child(recipe: Recipe, namespace: str, thread_id: str) -> dict[str, Any]:
    """:func:`read_review` with a new saver, in this (child) process."""

    async def run() -> dict[str, Any]:
        async with open_from_recipe(recipe, namespace=namespace) as checkpointer:
            return await read_review(AgentflowSaver(checkpointer), thread_id)

    return asyncio.run(run())


def basket_graph(saver: AgentflowSaver) -> tuple[Any, type[BaseModel]]:
    """A graph whose state classes are new on every call; returns it and its Item class."""

    class Item(BaseModel):
        name: str

    class Basket(BaseModel):
        items: list[Item] = []

    def add(state: Basket) -> dict[str, Any]:
        return {"items": [*state.items, Item(name=f"n{len(state.items)}")]}

    builder = StateGraph(Basket)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    return builder.compile(checkpointer=saver), Item
