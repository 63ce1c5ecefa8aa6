"""Which graphs the command line can run: the demo plus ``--graph MODULE:ATTR``.

A thread records its graph by *name* only. The command line maps names to
graphs registered explicitly, and never imports a module named by stored
data: whoever can write the store must not be able to choose code to run.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.cli.demo import DEMO_GRAPH, build_demo_graph, summarize
from agentflow.errors import InvalidArgument
from agentflow.runtime import CompiledGraph, Graph, ThreadNotFound, UnknownGraph
from agentflow.runtime.claims import runtime_of

__all__ = ["GraphRegistry", "graph_specs_from_env"]


def graph_specs_from_env() -> list[str]:
    """``AGENTFLOW_GRAPHS``: comma-separated ``MODULE:ATTR`` specs."""
    raw = os.environ.get("AGENTFLOW_GRAPHS", "")
    return [spec.strip() for spec in raw.split(",") if spec.strip()]


def _load(spec: str) -> Graph:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidArgument(f"--graph takes MODULE:ATTR, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: graphs beside the project
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"cannot load graph {spec!r}: {exc}") from exc
    graph = target() if callable(target) and not isinstance(target, Graph) else target
    if not isinstance(graph, Graph):
        raise InvalidArgument(f"{spec!r} is a {type(graph).__name__}, not an agentflow Graph")
    return graph


class GraphRegistry:
    """Graphs by name, compiled on demand against one checkpointer."""

    def __init__(self, checkpointer: Checkpointer, specs: Iterable[str]) -> None:
        self.checkpointer = checkpointer
        self.specs = list(specs)
        graphs = [build_demo_graph(), *(_load(spec) for spec in self.specs)]
        self._graphs = {graph.name: graph for graph in graphs}
        self._compiled: dict[str, CompiledGraph] = {}
        self._summaries = {DEMO_GRAPH: summarize}

    def summary(self, cp: Checkpoint) -> str | None:
        """A one-line outcome of a finished run, for graphs that define one."""
        summarize_state = self._summaries.get(str(runtime_of(cp).get("graph")))
        return summarize_state(cp.state) if summarize_state else None

    def compiled(self, name: str) -> CompiledGraph:
        """The graph called ``name``, compiled; :class:`UnknownGraph` if absent."""
        if name not in self._compiled:
            graph = self._graphs.get(name)
            if graph is None:
                raise UnknownGraph(
                    f"this thread was written by graph {name!r}, which is not registered; "
                    "pass --graph MODULE:ATTR (or set AGENTFLOW_GRAPHS)"
                )
            self._compiled[name] = graph.compile(self.checkpointer)
        return self._compiled[name]

    async def for_thread(self, thread: str) -> CompiledGraph:
        """The compiled graph that wrote ``thread``'s latest checkpoint."""
        cp = await self.checkpointer.get(thread)
        if cp is None:
            raise ThreadNotFound(f"thread {thread!r} not found")
        return self.compiled(str(runtime_of(cp).get("graph")))

    def all_compiled(self) -> list[CompiledGraph]:
        """Every registered graph, compiled (for the worker)."""
        return [self.compiled(name) for name in self._graphs]
