"""``--graph`` targets that give no usable graph, each in its own way."""

from __future__ import annotations

from agentflow.runtime import START, Graph

NOT_A_GRAPH = {"name": "a dict"}


def raises() -> Graph:
    raise RuntimeError("the factory is broken")


async def async_factory() -> Graph:
    return Graph("never")


def returns_coroutine() -> object:
    return async_factory()


def returns_invalid() -> Graph:
    return Graph("no-start")  # no edge from START


def needs_arguments(name: str, *, size: int) -> Graph:
    return Graph(name)


def duplicate_of_demo() -> Graph:
    async def node(state: object, ctx: object) -> None:
        return None

    return Graph("refund-approval").add_node("n", node).add_edge(START, "n")


async def _leaky(state: object, ctx: object) -> None:
    raise KeyError("bad key SUPERSECRET-7f3a9")


def leaky() -> Graph:
    """A node whose exception text holds a secret."""
    return Graph("leaky").add_node("leak", _leaky).add_edge(START, "leak")
