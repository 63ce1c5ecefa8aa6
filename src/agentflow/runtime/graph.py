"""Defining a graph: nodes, plain and conditional edges, reducers.

A :class:`Graph` is a plain description; :meth:`Graph.compile` checks it and
binds it to a :class:`~agentflow.checkpoint.Checkpointer`. The description is
kept apart from execution so the command line can compile one graph against
whichever store ``--store`` names.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from agentflow.runtime.durability import Durability
from agentflow.runtime.errors import GraphInvalid
from agentflow.runtime.reducers import Reducer
from agentflow.runtime.spec import END, START, AsyncNodeFn, Branch, NodeFn, Router, Update

if TYPE_CHECKING:
    from datetime import datetime

    from agentflow.checkpoint.base import Checkpointer
    from agentflow.durable import DurableStore
    from agentflow.runtime.context import NodeContext
    from agentflow.runtime.engine import CompiledGraph

__all__ = ["END", "START", "AsyncNodeFn", "Graph", "NodeFn", "Router"]


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with async __call__
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _check_arity(name: str, fn: Callable[..., Any]) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: let them run
        return
    try:
        signature.bind(None, None)
    except TypeError:
        raise GraphInvalid(
            f"node {name!r} must take two arguments (state, ctx); {fn!r} takes {signature}"
        ) from None


def _in_thread(fn: NodeFn) -> AsyncNodeFn:
    """Run a plain ``def`` node in a worker thread."""

    async def node(state: Mapping[str, Any], ctx: NodeContext) -> Update:
        update = await asyncio.to_thread(fn, state, ctx)
        if inspect.isawaitable(update):  # a plain function that returned a coroutine
            update = await update
        return update

    return node


@dataclass
class Graph:
    """A graph of async nodes over a JSON state.

    ``name`` is stored with every checkpoint, so a worker or the command line
    can find which graph a thread needs; choose one that stays stable across
    deployments. ``reducers`` maps state keys to a
    :data:`~agentflow.runtime.reducers.Reducer`. ``durability`` holds what
    its runs' durable records pin: the policies for ambiguous calls, a
    reconciliation provider, extensions and credential slots.
    """

    name: str
    reducers: Mapping[str, Reducer] = field(default_factory=dict)
    durability: Durability = field(default_factory=Durability)
    nodes: dict[str, AsyncNodeFn] = field(default_factory=dict, init=False)
    edges: dict[str, list[str]] = field(default_factory=dict, init=False)
    branches: dict[str, list[Branch]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise GraphInvalid(f"graph name must be a non-empty string, got {self.name!r}")

    def add_node(self, name: str, fn: NodeFn) -> Graph:
        """Add a node ``fn(state, ctx) -> update | None``.

        An ``async def`` node runs on the event loop. A plain ``def`` node runs
        in a worker thread (``asyncio.to_thread``), so blocking calls in it do
        not stall other runs; it may call ``ctx.interrupt``/``ctx.wait`` as an
        async node does. A callable that does not take ``(state, ctx)`` is
        refused here rather than failing at run time.
        """
        if not isinstance(name, str) or not name or name in (START, END):
            raise GraphInvalid(f"invalid node name {name!r}")
        if name in self.nodes:
            raise GraphInvalid(f"node {name!r} is defined twice")
        if not callable(fn):
            raise GraphInvalid(f"node {name!r} must be a function, got {type(fn).__name__}")
        _check_arity(name, fn)
        self.nodes[name] = cast(AsyncNodeFn, fn) if _is_async(fn) else _in_thread(fn)
        return self

    def add_edge(self, source: str, target: str) -> Graph:
        """After ``source`` runs, run ``target``. Several edges fan out."""
        if source == END or target == START:
            raise GraphInvalid(f"edge {source!r} -> {target!r} runs backwards through START/END")
        self.edges.setdefault(source, []).append(target)
        return self

    def add_conditional_edges(
        self, source: str, router: Router, targets: Sequence[str] | None = None
    ) -> Graph:
        """After ``source`` runs, ``router(new_state)`` names what runs next.

        Give ``targets`` so compile can check every name the router may return.
        """
        if source == END:
            raise GraphInvalid("END has no outgoing edges")
        allowed = frozenset(targets) if targets is not None else None
        self.branches.setdefault(source, []).append(Branch(router, allowed))
        return self

    def validate(self) -> None:
        """Refuse edges naming unknown nodes and a graph with no way in."""
        known = set(self.nodes)
        for source in {*self.edges, *self.branches}:
            if source != START and source not in known:
                raise GraphInvalid(f"edge from unknown node {source!r}")
        for source, targets in self.edges.items():
            for target in targets:
                if target != END and target not in known:
                    raise GraphInvalid(f"edge {source!r} -> unknown node {target!r}")
        for source, branches in self.branches.items():
            for branch in branches:
                unknown = (branch.targets or frozenset()) - known - {END}
                if unknown:
                    raise GraphInvalid(f"conditional edge of {source!r} names {sorted(unknown)}")
        if START not in self.edges and START not in self.branches:
            raise GraphInvalid(f"graph {self.name!r} has no edge from START")

    def compile(
        self,
        checkpointer: Checkpointer,
        *,
        durable: DurableStore | None = None,
        step_limit: int = 10_000,
        claim_ttl: timedelta = timedelta(seconds=30),
        clock: Callable[[], datetime] | None = None,
        worker_id: str | None = None,
        max_concurrent: int | None = None,
    ) -> CompiledGraph:
        """Check the graph and bind it to ``checkpointer``, an agentflow store.

        The store (``agentflow.open_store(url)``, or any backend's class)
        keeps each thread's checkpoints, lease, call journal and events
        together, so ``compile(store)`` is all a durable graph needs.
        ``durable`` is only for a third-party checkpointer that keeps no
        records: a durable store of the checkpointer's own namespace and
        database (another is refused with ``InvalidArgument``, before any
        I/O). ``step_limit`` bounds the steps of
        one ``run``/``resume`` call (a runaway loop stops at a stored step).
        ``claim_ttl`` is the lease a running call holds on its thread,
        renewed every third of it while steps run; a crashed holder's run is
        taken over once it lapses. ``clock`` (aware UTC datetimes) decides
        timers; tests pass a fake one (leases run on the durable store's clock).
        ``worker_id`` names this process's claims with a stable identity, so a
        process restarted under it takes back at once the runs it held (one
        identity is one live process: see docs/runtime.md). ``max_concurrent``
        caps the runs of this graph a worker fleet holds at once, counted in the
        store (runs started or resumed by a direct call are not held back).
        """
        from agentflow.runtime.engine import CompiledGraph

        self.validate()
        if step_limit < 1:
            raise GraphInvalid(f"step_limit must be at least 1, got {step_limit}")
        if claim_ttl <= timedelta(0):
            raise GraphInvalid(f"claim_ttl must be positive, got {claim_ttl}")
        if max_concurrent is not None and (
            isinstance(max_concurrent, bool)
            or not isinstance(max_concurrent, int)
            or max_concurrent < 1
        ):
            raise GraphInvalid(f"max_concurrent must be a positive int, got {max_concurrent!r}")
        return CompiledGraph(
            self,
            checkpointer,
            durable=durable,
            step_limit=step_limit,
            claim_ttl=claim_ttl,
            clock=clock,
            worker_id=worker_id,
            max_concurrent=max_concurrent,
        )
