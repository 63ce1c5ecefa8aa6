"""One step of a run: call the frontier's nodes, fold their updates, route, store.

A step runs every node of the frontier concurrently against the same state,
folds their updates by reducer in frontier order, routes, and stores the
result as the next step with ``put(..., if_revision=0)``. That conditional
write is what keeps a thread's history linear: of two processes advancing one
thread, only the first write of a step lands and the other gets
:class:`~agentflow.errors.CheckpointConflict`. One write per step is also the
whole storage cost of a step (its journaled calls aside).

Under a lease (:class:`StepEnv`) nodes get journaled ``ctx.tool``/``ctx.model``
calls, each stored step records the calls it made (``operations``) and the
run's extension state, and a step with an ambiguous call is abandoned
(:class:`StepAbandoned`): nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer, StateChanges
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.timestamps import utc_now_iso
from agentflow.durable import (
    CheckpointExtension,
    ExtensionStateEntry,
    LeaseLost,
    OperationState,
    snapshot_extensions,
)
from agentflow.errors import CheckpointNotSerializable
from agentflow.runtime.calls import CallJournal, NodeCalls
from agentflow.runtime.context import NodeContext, Suspend
from agentflow.runtime.errors import (
    CallAmbiguous,
    ConflictingUpdate,
    InvalidRoute,
    InvalidUpdate,
    NodeFailed,
    UpdateNotSerializable,
)
from agentflow.runtime.events import RunEvent, Sink
from agentflow.runtime.reducers import append
from agentflow.runtime.section import EXTENSIONS_KEY, RUNTIME_KEY
from agentflow.runtime.spec import END, GraphSpec

if TYPE_CHECKING:
    from agentflow.runtime.durability import Durability
    from agentflow.runtime.leases import Lease

__all__ = ["StepAbandoned", "StepEnv", "StepRunner", "Updates"]

#: Node updates of one step, in frontier order.
Updates = list[tuple[str, Mapping[str, Any]]]
#: Journal states of a call that may have acted and has no outcome on record.
_UNSETTLED = frozenset({OperationState.STARTED, OperationState.AMBIGUOUS})
#: Why the codec refuses a value it raised about without a driver cause.
_NON_FINITE = "it holds NaN or infinity, which JSON cannot represent"


def _list_lengths(state: Mapping[str, Any]) -> dict[str, int]:
    """The length of every list the state holds: a node that appends to one in place
    changes it, which a step stored as its changes would not hold."""
    return {key: len(value) for key, value in state.items() if type(value) is list}


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


def _swallowed(env: StepEnv, raised: list[CallAmbiguous]) -> list[CallAmbiguous]:
    """The calls of this step that may have acted but whose signal a node swallowed
    (a bare ``except:``, a cancellation caught): started or ambiguous in the journal
    once every node returned. The step is abandoned for them all the same, so a run
    never ends with a call nobody settled."""
    lease = env.lease
    if lease is None:
        return []
    seen = {signal.operation_id for signal in raised}
    return [
        CallAmbiguous(entry.operation_id, entry.tool_name or entry.kind.value)
        for entry in (*lease.record.model_call_journal, *lease.record.tool_journal)
        if entry.state in _UNSETTLED and entry.operation_id not in seen
    ]


class StepAbandoned(Exception):
    """A step made an ambiguous call; nothing of it was stored."""

    def __init__(self, ambiguous: list[CallAmbiguous]) -> None:
        super().__init__(*(signal.operation_id for signal in ambiguous))
        self.ambiguous = ambiguous


@dataclass
class StepEnv:
    """What the steps of one lease share: the journal, the run's extensions, secrets."""

    journal: CallJournal | None = None
    durability: Durability | None = None
    extensions: dict[str, CheckpointExtension] = field(default_factory=dict)
    #: Extension entries restored from the run, kept for namespaces not live here.
    stored: dict[str, ExtensionStateEntry] = field(default_factory=dict)
    credentials: Mapping[str, Any] = field(default_factory=dict)
    #: Who answers the suspend this lease resumes (written on its first step).
    answered_by: str | None = None

    @property
    def lease(self) -> Lease | None:
        """The lease the steps run under (None outside one)."""
        return None if self.journal is None else self.journal.lease

    def node_calls(self, step: int, node: str) -> NodeCalls | None:
        return None if self.journal is None else NodeCalls(self.journal, step, node)

    def check(self) -> None:
        """Raise :class:`LeaseLost` when the lease was lost: store no further step."""
        if self.journal is not None:
            self.journal.lease.check()

    def extension_state(self) -> dict[str, Any]:
        """The run's extension state now, as the checkpoint keeps it."""
        if self.durability is None or not (self.extensions or self.stored):
            return {}
        config = self.durability.config
        entries = snapshot_extensions(
            self.extensions.values(),
            self.stored,
            required_namespaces=config.required_extension_namespaces,
            max_total=config.max_extension_state_bytes,
        )
        return {namespace: entry.to_dict() for namespace, entry in entries.items()}

    def runtime(self, step: int, section: dict[str, Any]) -> dict[str, Any]:
        """``section`` with this step's journaled calls and who answered a suspend."""
        calls = None if self.journal is None else self.journal.by_step.get(step)
        if calls:
            section["operations"] = calls
        if self.answered_by is not None:
            section["by"] = self.answered_by
        return section


_NO_ENV = StepEnv()


class StepRunner:
    """Steps of one graph against one store."""

    def __init__(
        self, graph: GraphSpec, checkpointer: Checkpointer, clock: Callable[[], datetime]
    ) -> None:
        self.graph = graph
        self.checkpointer = checkpointer
        self.clock = clock

    async def store(
        self,
        cp: Checkpoint,
        updates: Updates,
        sink: Sink,
        write: Callable[[Checkpoint], Awaitable[object]] | None = None,
    ) -> None:
        """Write the new step ``cp`` (with ``write``: under a lease, with what it
        carries; else a plain conditional put); a refusal to encode names the node and key."""
        try:
            if write is None:
                await self.checkpointer.put(cp, if_revision=0)
            else:
                await write(cp)
        except CheckpointNotSerializable as refused:
            raise _culprit(cp.thread, updates, cp.state, refused) from refused
        sink(RunEvent("step_stored", cp.thread, cp.step, checkpoint=cp))

    def _commit(self, env: StepEnv) -> Callable[[Checkpoint], Awaitable[object]] | None:
        """How a step is stored under ``env``'s lease: with the receipts it noted."""
        lease = env.lease
        if lease is None:
            return None
        return lambda cp: lease.commit_step(cp, self.checkpointer)

    def _extra(self, env: StepEnv, step: int, section: dict[str, Any]) -> dict[str, Any]:
        extra: dict[str, Any] = {RUNTIME_KEY: env.runtime(step, section)}
        extensions = env.extension_state()
        if extensions:
            extra[EXTENSIONS_KEY] = extensions
        return extra

    async def step(
        self,
        cp: Checkpoint,
        answers: dict[str, list[Any]],
        writes: Mapping[str, Any],
        sink: Sink,
        env: StepEnv = _NO_ENV,
    ) -> Checkpoint:
        """Run ``cp``'s frontier once and store the result as the next step.

        Raises :class:`StepAbandoned` (storing nothing) when a node's call was
        ambiguous, and :class:`LeaseLost` when the lease was lost meanwhile.
        """
        view = MappingProxyType(cp.state)
        lengths = _list_lengths(cp.state)
        pending = [node for node in cp.next if node not in writes]
        outcomes = await self._call_all(cp, pending, view, answers, sink, env=env)
        ambiguous = [u for u in outcomes.values() if isinstance(u, CallAmbiguous)]
        ambiguous += _swallowed(env, ambiguous)
        if ambiguous:
            raise StepAbandoned(ambiguous)
        env.check()
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
                extra=self._extra(
                    env, cp.step + 1, {"graph": name, "writes": done, "answers": carried}
                ),
                revision=1,
                changes=self.changes(cp, [], cp.state, lengths),
            )
            await self.store(new, list(done.items()), sink, self._commit(env))
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
            extra=self._extra(env, cp.step + 1, {"graph": name}),
            revision=1,
            changes=self.changes(cp, updates, state, lengths),
        )
        await self.store(new, updates, sink, self._commit(env))
        return new

    def changes(
        self, cp: Checkpoint, updates: Updates, state: Mapping[str, Any], lengths: dict[str, int]
    ) -> StateChanges | None:
        """What ``updates`` changed in ``cp``'s state to make ``state``, so the store
        keeps only that: the keys written, and for an :func:`~.reducers.append`
        key the items appended. None (store it whole) when a node changed a list
        of the state it was given in place: the stored base does not hold that.
        """
        if _list_lengths(cp.state) != lengths:
            return None
        written: list[str] = []
        appended: dict[str, int] = {}
        reducers = self.graph.reducers
        for key in dict.fromkeys(key for _, update in updates for key in update):
            base = cp.state.get(key)
            if reducers.get(key) is append and (base is None or type(base) is list):
                appended[key] = len(state[key]) - (0 if base is None else len(base))
            else:
                written.append(key)
        return StateChanges(state, base=cp.step, written=written, appended=appended)

    async def _call_all(
        self,
        cp: Checkpoint,
        nodes: Sequence[str],
        view: Mapping[str, Any],
        answers: dict[str, list[Any]],
        sink: Sink,
        *,
        env: StepEnv,
    ) -> dict[str, Mapping[str, Any] | Suspend | CallAmbiguous]:
        for node in nodes:
            sink(RunEvent("node_started", cp.thread, cp.step + 1, node))
        if len(nodes) == 1:
            return {nodes[0]: await self._call(cp, nodes[0], view, answers, sink, env=env)}
        tasks = {}
        try:
            async with asyncio.TaskGroup() as group:
                for node in nodes:
                    call = self._call(cp, node, view, answers, sink, env=env)
                    tasks[node] = group.create_task(call)
        except ExceptionGroup as failed:
            lost = [e for e in failed.exceptions if isinstance(e, LeaseLost)]
            if lost:
                raise lost[0] from None
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
        *,
        env: StepEnv,
    ) -> Mapping[str, Any] | Suspend | CallAmbiguous:
        step = cp.step + 1
        ctx = NodeContext(
            cp.thread,
            step,
            node,
            answers.get(node, []),
            self.clock,
            calls=env.node_calls(step, node),
            extensions=env.extensions,
            credentials=env.credentials,
        )
        try:
            update = await self.graph.nodes[node](view, ctx)
        except (Suspend, CallAmbiguous) as signal:
            return signal
        except LeaseLost:
            raise
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
