"""What the engine needs of a graph: its markers, node and router shapes, and its parts.

:class:`~agentflow.runtime.graph.Graph` builds and checks a description; the
engine and the step runner read it through :class:`GraphSpec` only, so they
do not depend on how a graph is built (and the builder's ``compile`` may
depend on them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentflow.runtime.context import NodeContext
    from agentflow.runtime.durability import Durability
    from agentflow.runtime.reducers import Reducer

__all__ = ["END", "START", "AsyncNodeFn", "Branch", "GraphSpec", "NodeFn", "Router", "Update"]

#: The virtual node a run begins at; only an edge source.
START = "__start__"
#: The virtual node that ends a branch; only an edge target.
END = "__end__"

#: What a node returns: an update of the state, or None.
Update = Mapping[str, Any] | None
#: A node as the engine calls it.
AsyncNodeFn = Callable[[Mapping[str, Any], "NodeContext"], Awaitable[Update]]
#: A node as ``add_node`` takes it: ``async def`` (run on the event loop) or
#: plain ``def`` (run in a worker thread).
NodeFn = Callable[[Mapping[str, Any], "NodeContext"], Awaitable[Update] | Update]
#: Returns the next node (or END), several, or an awaitable of either.
Router = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Branch:
    """A conditional edge: ``router(state)`` picks targets after its node's step."""

    router: Router
    #: Names the router may return; None accepts any node. Checked at compile.
    targets: frozenset[str] | None


class GraphSpec(Protocol):
    """A checked graph as the engine runs it (a :class:`~agentflow.runtime.graph.Graph`)."""

    @property
    def name(self) -> str: ...

    @property
    def reducers(self) -> Mapping[str, Reducer]: ...

    @property
    def durability(self) -> Durability: ...

    @property
    def nodes(self) -> Mapping[str, AsyncNodeFn]: ...

    @property
    def edges(self) -> Mapping[str, list[str]]: ...

    @property
    def branches(self) -> Mapping[str, list[Branch]]: ...
