"""Which graphs the command line can run: the demo plus ``--graph MODULE:ATTR``.

A thread records its graph by *name* only. The command line maps names to
graphs registered explicitly, and never imports a module named by stored
data: whoever can write the store must not be able to choose code to run.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.store import Store
from agentflow.cli.demo import DEMO_GRAPH, build_demo_graph, summarize
from agentflow.cli.errors import InvalidGraphSpec
from agentflow.cli.foreign import foreign_record
from agentflow.runtime import CompiledGraph, Graph, GraphInvalid, ThreadNotFound, UnknownGraph
from agentflow.runtime.section import runtime_of

__all__ = ["GRAPH_PLACEHOLDER", "GraphRegistry", "graph_specs_from_env"]

#: Stands in a printed command for the ``--graph`` the user must name (the store
#: keeps a graph's name, not where its code is).
GRAPH_PLACEHOLDER = "MODULE:ATTR"


def graph_specs_from_env() -> list[str]:
    """``AGENTFLOW_GRAPHS``: comma-separated ``MODULE:ATTR`` specs."""
    raw = os.environ.get("AGENTFLOW_GRAPHS", "")
    return [spec.strip() for spec in raw.split(",") if spec.strip()]


def _what(spec: str) -> str:
    return f"--graph {spec}"


def _call_factory(spec: str, factory: Callable[..., Any]) -> Any:
    """Call a graph factory with no arguments, or say why it cannot be."""
    if inspect.iscoroutinefunction(factory):
        raise InvalidGraphSpec(
            f"{_what(spec)} is an async function; give a Graph or a plain function returning one"
        )
    try:
        signature = inspect.signature(factory)
    except ValueError:  # no signature (some builtins): let the call decide
        signature = None
    if signature is not None:
        needed = [
            p.name
            for p in signature.parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if needed:
            raise InvalidGraphSpec(
                f"{_what(spec)} needs arguments ({', '.join(needed)}); give a Graph or a "
                "function that takes none"
            )
    try:
        made = factory()
    except Exception as exc:
        raise InvalidGraphSpec(
            f"{_what(spec)}: calling it raised {type(exc).__name__}: {exc}"
        ) from exc
    if inspect.isawaitable(made):
        close = getattr(made, "close", None)
        if close is not None:
            close()  # never awaited on purpose: no "coroutine was never awaited"
        raise InvalidGraphSpec(
            f"{_what(spec)} returned an awaitable; give a Graph or a plain function returning one"
        )
    return made


def _load(spec: str) -> Graph:
    """The graph ``MODULE:ATTR`` names: a Graph, or a function of no arguments
    returning one. Anything else is an :class:`InvalidGraphSpec` saying what."""
    if spec == GRAPH_PLACEHOLDER:  # a printed command pasted as it is
        raise InvalidGraphSpec(
            f"--graph {GRAPH_PLACEHOLDER} stands for where your graph is defined: put its "
            "module (importable from here) and the Graph or the function that builds it, "
            "e.g. --graph myapp.graphs:build_graph"
        )
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidGraphSpec(f"--graph takes MODULE:ATTR, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: graphs beside the project
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidGraphSpec(f"{_what(spec)}: cannot import {module_name}: {exc}") from exc
    except (Exception, SystemExit) as exc:
        raise InvalidGraphSpec(
            f"{_what(spec)}: importing {module_name} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not hasattr(module, attr):
        raise InvalidGraphSpec(f"{_what(spec)}: module {module_name} has no {attr!r}")
    target: Any = getattr(module, attr)
    graph = (
        _call_factory(spec, target)
        if callable(target) and not isinstance(target, Graph)
        else target
    )
    if not isinstance(graph, Graph):
        raise InvalidGraphSpec(
            f"{_what(spec)} gives a {type(graph).__name__}, not an agentflow Graph"
        )
    try:
        graph.validate()
    except GraphInvalid as exc:
        raise InvalidGraphSpec(f"{_what(spec)}: {exc}") from exc
    return graph


class GraphRegistry:
    """Graphs by name, compiled on demand against one store."""

    def __init__(self, checkpointer: Store, specs: Iterable[str]) -> None:
        self.checkpointer = checkpointer
        self.specs = list(dict.fromkeys(specs))  # the same spec twice is one graph
        self._graphs = {DEMO_GRAPH: build_demo_graph()}
        origin = {DEMO_GRAPH: "the built-in demo"}
        for spec in self.specs:
            graph = _load(spec)
            if graph.name in self._graphs:
                raise InvalidGraphSpec(
                    f"{_what(spec)} defines graph {graph.name!r}, as {origin[graph.name]} "
                    "does; graph names must be unique"
                )
            self._graphs[graph.name] = graph
            origin[graph.name] = _what(spec)
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

    def has(self, name: str) -> bool:
        """Whether a graph called ``name`` is registered (the demo, or a ``--graph``)."""
        return name in self._graphs

    async def for_thread(self, thread: str, command: str = "resume") -> CompiledGraph:
        """The compiled graph that wrote ``thread``'s latest checkpoint; a thread
        another framework wrote through its adapter is :class:`ForeignThread`."""
        cp = await self.checkpointer.get(thread)
        if cp is None:
            raise ThreadNotFound(f"thread {thread!r} not found")
        record = foreign_record(cp)
        if record is not None:
            raise record.refusal(thread, command)
        name = runtime_of(cp).get("graph")
        if not isinstance(name, str):
            raise UnknownGraph(
                f"thread {thread!r} step {cp.step} names no graph: it was not written by an "
                "agentflow graph run, so there is nothing for agentflow to continue"
            )
        return self.compiled(name)

    def all_compiled(self) -> list[CompiledGraph]:
        """Every registered graph, compiled (for the worker)."""
        return [self.compiled(name) for name in self._graphs]
