"""One step of a run: call the frontier's nodes, fold their updates, route, store.

A step runs every node of the frontier concurrently against the same state,
folds their updates by reducer in frontier order, routes, and stores the
result as the next step with ``put(..., if_revision=0)``. That conditional
write is what keeps a thread's history linear: of two processes advancing one
thread, only the first write of a step lands and the other gets
:class:`~agentflow.errors.CheckpointConflict`. One write per step is also the
whole storage cost of the runtime.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.timestamps import utc_now_iso
from agentflow.errors import CheckpointNotSerializable
from agentflow.runtime.claims import RUNTIME_KEY
from agentflow.runtime.context import NodeContext, Suspend
from agentflow.runtime.errors import (
    ConflictingUpdate,
    InvalidRoute,
    InvalidUpdate,
    NodeFailed,
    UpdateNotSerializable,
)
from agentflow.runtime.events import RunEvent, Sink
from agentflow.runtime.graph import END

if TYPE_CHECKING:
    from agentflow.runtime.graph import Graph

__all__ = ["StepRunner", "Updates"]

#: Node updates of one step, in frontier order.
Updates = list[tuple[str, Mapping[str, Any]]]
#: Why the codec refuses a value it raised about without a driver cause.
_NON_FINITE = "it holds NaN or infinity, which JSON cannot represent"


def _json_problem(thread: str, key: str, value: Any) -> str | None:
    """Why the store's codec refuses ``value`` under ``key``, or None."""
    probe = Checkpoint(thread=thread, step=0, state={key: value})
    try:
        JsonCodec().encode(probe, RecordKey("", thread, 0))
    except CheckpointNotSerializable as exc:
        return str(exc.__cause__) if exc.__cause__ is not None else _NON_FINITE
    return None


def _culprit(
    thread: str, updates: Updates, state: Mapping[str, Any], refused: CheckpointNotSerializable
) -> UpdateNotSerializable | CheckpointNotSerializable:
    """Name the node and key behind a store's refusal to encode a step."""
    for node, update in updates:
        for key, value in update.items():
            why = _json_problem(thread, key, value)
            if why is not None:
                return UpdateNotSerializable(node, thread, key, why)
    for key, value in state.items():  # a reducer made JSON into something else
        why = _json_problem(thread, key, value)
        if why is not None:
            return UpdateNotSerializable(f"reducer of {key!r}", thread, key, why)
    return refused


class StepRunner:
    """Steps of one graph against one store."""

    def __init__(
        self, graph: Graph, checkpointer: Checkpointer, clock: Callable[[], datetime]
    ) -> None:
        self.graph = graph
        self.checkpointer = checkpointer
        self.clock = clock

    async def store(self, cp: Checkpoint, updates: Updates, sink: Sink) -> None:
        """Write the new step ``cp``; a refusal to encode names the node and key."""
        try:
            await self.checkpointer.put(cp, if_revision=0)
        except CheckpointNotSerializable as refused:
            raise _culprit(cp.thread, updates, cp.state, refused) from refused
        sink(RunEvent("step_stored", cp.thread, cp.step, checkpoint=cp))

    async def step(
        self, cp: Checkpoint, answers: dict[str, list[Any]], writes: Mapping[str, Any], sink: Sink
    ) -> Checkpoint:
        """Run ``cp``'s frontier once and store the result as the next step."""
        view = MappingProxyType(cp.state)
        pending = [node for node in cp.next if node not in writes]
        outcomes = await self._call_all(cp, pending, view, answers, sink)
        done = {**writes, **{n: u for n, u in outcomes.items() if not isinstance(u, Suspend)}}
        suspended = [n for n in pending if isinstance(outcomes[n], Suspend)]
        parent = f"{cp.thread}:{cp.step}"
        name = self.graph.name
        if suspended:
            node = suspended[0]
            signal = outcomes[node]
            assert isinstance(signal, Suspend)
            carried = {n: answers[n] for n in suspended if answers.get(n)}
            new = Checkpoint(
                thread=cp.thread,
                step=cp.step + 1,
                state=cp.state,
                next=cp.next,
                parent=parent,
                ts=utc_now_iso(),
                interrupted=True,
                interrupt_node=node,
                interrupt_payload=signal.payload,
                wake_at=signal.wake_at,
                extra={RUNTIME_KEY: {"graph": name, "writes": done, "answers": carried}},
                revision=1,
            )
            await self.store(new, list(done.items()), sink)
            return new
        updates: Updates = [(n, done[n]) for n in cp.next]
        state = self.merge(cp.state, updates, cp.thread, cp.step)
        new = Checkpoint(
            thread=cp.thread,
            step=cp.step + 1,
            state=state,
            next=await self.successors(cp.next, state, cp.thread, cp.step),
            parent=parent,
            ts=utc_now_iso(),
            extra={RUNTIME_KEY: {"graph": name}},
            revision=1,
        )
        await self.store(new, updates, sink)
        return new

    async def _call_all(
        self,
        cp: Checkpoint,
        nodes: Sequence[str],
        view: Mapping[str, Any],
        answers: dict[str, list[Any]],
        sink: Sink,
    ) -> dict[str, Mapping[str, Any] | Suspend]:
        for node in nodes:
            sink(RunEvent("node_started", cp.thread, cp.step + 1, node))
        if len(nodes) == 1:
            return {nodes[0]: await self._call(cp, nodes[0], view, answers, sink)}
        tasks = {}
        try:
            async with asyncio.TaskGroup() as group:
                for node in nodes:
                    tasks[node] = group.create_task(self._call(cp, node, view, answers, sink))
        except ExceptionGroup as failed:
            errors = [e for e in failed.exceptions if isinstance(e, NodeFailed | InvalidUpdate)]
            if not errors:
                raise
            raise min(errors, key=lambda e: nodes.index(e.node)) from None
        return {node: task.result() for node, task in tasks.items()}

    async def _call(
        self,
        cp: Checkpoint,
        node: str,
        view: Mapping[str, Any],
        answers: dict[str, list[Any]],
        sink: Sink,
    ) -> Mapping[str, Any] | Suspend:
        ctx = NodeContext(cp.thread, cp.step + 1, node, answers.get(node, []), self.clock)
        try:
            update = await self.graph.nodes[node](view, ctx)
        except Suspend as signal:
            return signal
        except Exception as exc:
            raise NodeFailed(node, cp.thread, cp.step, exc) from exc
        if update is None:
            update = {}
        if not isinstance(update, Mapping) or not all(isinstance(k, str) for k in update):
            raise InvalidUpdate(node, cp.thread, update)
        sink(RunEvent("node_finished", cp.thread, cp.step + 1, node, update=update))
        return update

    def merge(
        self, state: Mapping[str, Any], updates: Updates, thread: str, step: int
    ) -> dict[str, Any]:
        """Fold ``updates`` into a copy of ``state``; the input is never mutated."""
        merged = dict(state)
        reducers = self.graph.reducers
        writer: dict[str, str] = {}
        for node, update in updates:
            for key, value in update.items():
                reducer = reducers.get(key)
                if reducer is None:
                    if key in writer:
                        raise ConflictingUpdate(
                            f"nodes {writer[key]!r} and {node!r} both wrote {key!r} in one step "
                            f"of thread {thread!r}; give {key!r} a reducer"
                        )
                    writer[key] = node
                    merged[key] = value
                    continue
                try:
                    merged[key] = reducer(merged.get(key), value)
                except Exception as exc:
                    raise NodeFailed(node, thread, step, exc) from exc
        return merged

    async def successors(
        self, sources: Sequence[str], state: Mapping[str, Any], thread: str, step: int
    ) -> tuple[str, ...]:
        """The next frontier: targets of ``sources``' edges, deduplicated in order."""
        frontier: dict[str, None] = {}
        nodes = self.graph.nodes
        for source in sources:
            for target in self.graph.edges.get(source, ()):
                if target != END:
                    frontier[target] = None
            for branch in self.graph.branches.get(source, ()):
                try:
                    picked = branch.router(MappingProxyType(state))
                    if inspect.isawaitable(picked):
                        picked = await picked
                except Exception as exc:
                    raise NodeFailed(f"{source} (router)", thread, step, exc) from exc
                for target in [picked] if isinstance(picked, str) else list(picked):
                    if target == END:
                        continue
                    if target not in nodes or not (
                        branch.targets is None or target in branch.targets
                    ):
                        raise InvalidRoute(
                            f"router of {source!r} in thread {thread!r} chose {target!r}, "
                            "which is not a node or not among its declared targets"
                        )
                    frontier[target] = None
        return tuple(frontier)
