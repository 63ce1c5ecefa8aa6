"""Running a compiled graph: one checkpoint per step, suspends, resume, fork.

A step runs every node of the frontier concurrently against the same state,
folds their updates by reducer in frontier order, routes, and stores the
result as the next step with ``put(..., if_revision=0)``. That conditional
write is what keeps a thread's history linear: of two processes advancing one
thread, only the first write of a step lands and the other gets
:class:`~agentflow.errors.CheckpointConflict`. One write per step is also the
whole storage cost of the runtime.

A suspended step is itself stored as a checkpoint (same state, same frontier,
``interrupted=True``). Resuming it first *claims* it by a conditional rewrite
of that step, so of two racing resumes exactly one runs the node.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.timestamps import parse_instant, utc_now_iso
from agentflow.checkpoint.validation import validate_thread
from agentflow.errors import InvalidArgument
from agentflow.runtime.claims import (
    RUNTIME_KEY,
    instant_us,
    refuse_if_claimed,
    release_claim,
    runtime_of,
    take_claim,
)
from agentflow.runtime.context import NodeContext, Suspend
from agentflow.runtime.errors import (
    ConflictingUpdate,
    GraphInvalid,
    InvalidRoute,
    InvalidUpdate,
    NodeFailed,
    NotDue,
    NothingToResume,
    StepLimitExceeded,
    StepNotFound,
    ThreadExists,
    ThreadNotFound,
    UnknownGraph,
)
from agentflow.runtime.graph import END, START
from agentflow.runtime.result import RunResult

if TYPE_CHECKING:
    from agentflow.runtime.graph import Graph

__all__ = ["CompiledGraph", "read_checkpoint"]

#: Node updates of one step, in frontier order.
_Updates = list[tuple[str, Mapping[str, Any]]]


def _utc_now() -> datetime:
    return datetime.now(UTC)


async def read_checkpoint(
    checkpointer: Checkpointer, thread: str, step: int | None = None
) -> Checkpoint:
    """The checkpoint at ``step`` (latest when None), or ThreadNotFound / StepNotFound."""
    cp = await checkpointer.get(thread, step)
    if cp is not None:
        return cp
    if step is None or await checkpointer.get(thread) is None:
        raise ThreadNotFound(f"thread {thread!r} not found")
    raise StepNotFound(f"thread {thread!r} has no step {step}")


class CompiledGraph:
    """A :class:`~agentflow.runtime.graph.Graph` bound to a checkpointer.

    Safe to share between tasks and to compile once per process; all run
    state lives in the store, so any process may continue any thread.
    """

    def __init__(
        self,
        graph: Graph,
        checkpointer: Checkpointer,
        *,
        step_limit: int,
        claim_ttl: timedelta,
        clock: Callable[[], datetime] | None,
    ) -> None:
        self.graph = graph
        self.name = graph.name
        self.checkpointer = checkpointer
        self.step_limit = step_limit
        self.claim_ttl = claim_ttl
        self.clock = clock or _utc_now
        #: Written into claims so an operator can see who holds a suspend.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"

    # -- public API ----------------------------------------------------------

    async def run(self, input: Mapping[str, Any], *, thread: str) -> RunResult:
        """Start ``thread`` from ``input`` and run until it ends or suspends.

        Stores ``input`` (folded by the reducers) as step 0, then one
        checkpoint per step. Raises :class:`ThreadExists` for a thread that
        already has checkpoints (use ``resume`` or ``fork``), and
        :class:`NodeFailed` when a node raises, leaving the last good step.
        """
        validate_thread(thread)
        if await self.checkpointer.get(thread) is not None:
            raise ThreadExists(f"thread {thread!r} already exists; resume or fork it instead")
        state = self._merge({}, [("input", input)], thread, 0)
        first = Checkpoint(
            thread=thread,
            step=0,
            state=state,
            next=await self._successors([START], state, thread, 0),
            ts=utc_now_iso(),
            extra={RUNTIME_KEY: {"graph": self.name}},
            revision=1,
        )
        await self.checkpointer.put(first, if_revision=0)
        return await self._drive(first)

    async def resume(self, thread: str, value: Any = None, *, step: int | None = None) -> RunResult:
        """Continue ``thread`` and run until it ends or suspends again.

        On a human interrupt, the interrupting node runs again from its first
        line and its ``ctx.interrupt`` call returns ``value``. On a timer
        wait, ``value`` must be None and the wake time must have come
        (:class:`NotDue` otherwise). On a run whose process died between
        steps, the stored frontier runs again. ``step`` names the suspend
        being answered (default: the latest checkpoint); if that suspend was
        already taken by another resume, :class:`CheckpointConflict` is raised
        with the revision read and the one stored.
        """
        cp = await self.get_state(thread, step)
        self._check_runnable(cp)
        if not cp.interrupted:
            if step is not None or cp.done:
                raise NothingToResume(
                    f"thread {thread!r} step {cp.step} is not suspended"
                    + (" (the run finished)" if cp.done else "")
                )
            if value is not None:
                raise InvalidArgument(f"thread {thread!r} is not waiting for a value")
            return await self._drive(cp)
        claimed = await self._claim(cp, value, explicit_step=step is not None)
        section = runtime_of(cp)
        answers: dict[str, list[Any]] = {
            node: list(given) for node, given in section.get("answers", {}).items()
        }
        if cp.interrupt_node is not None:
            answers.setdefault(cp.interrupt_node, []).append(value)
        advanced = False
        try:
            first = await self._step(claimed, answers, section.get("writes", {}))
            advanced = True
        finally:
            if not advanced:
                await release_claim(self.checkpointer, claimed)
        return await self._drive(first)

    async def get_state(self, thread: str, step: int | None = None) -> Checkpoint:
        """The checkpoint at ``step`` (latest when None).

        Raises :class:`ThreadNotFound` or :class:`StepNotFound` instead of
        returning None, so a caller never mistakes "absent" for "empty".
        """
        return await read_checkpoint(self.checkpointer, thread, step)

    def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Every checkpoint of ``thread``, oldest first (streamed)."""
        return self.checkpointer.history(thread)

    async def fork(
        self,
        thread: str,
        step: int,
        *,
        new_thread: str,
        update: Mapping[str, Any] | None = None,
    ) -> Checkpoint:
        """Start ``new_thread`` from ``thread``'s checkpoint at ``step``.

        The fork keeps the source's step number, frontier and suspend (minus
        any claim), folds ``update`` into its state by the reducers, and its
        ``parent`` is ``"thread:step"``. The source is not touched. Continue
        the fork with :meth:`resume`; with the same inputs it replays the
        same states as the source did.
        """
        source = await self.get_state(thread, step)
        validate_thread(new_thread)
        if await self.checkpointer.get(new_thread) is not None:
            raise ThreadExists(f"thread {new_thread!r} already exists; fork to a new thread")
        state = dict(source.state)
        if update:
            state = self._merge(state, [("fork", update)], new_thread, step)
        section = {k: v for k, v in runtime_of(source).items() if k != "claim"}
        section["graph"] = self.name
        forked = Checkpoint(
            thread=new_thread,
            step=source.step,
            state=state,
            next=source.next,
            parent=f"{source.thread}:{source.step}",
            ts=utc_now_iso(),
            interrupted=source.interrupted,
            interrupt_node=source.interrupt_node,
            interrupt_payload=source.interrupt_payload,
            wake_at=source.wake_at,
            extra={**source.extra, RUNTIME_KEY: section},
            revision=1,
        )
        await self.checkpointer.put(forked, if_revision=0)
        return forked

    def _check_runnable(self, cp: Checkpoint) -> None:
        """Refuse to continue a thread another graph wrote, or whose stored
        frontier names nodes this graph no longer has."""
        written_by = runtime_of(cp).get("graph", self.name)
        if written_by != self.name:
            raise UnknownGraph(
                f"thread {cp.thread!r} was written by graph {written_by!r}, not {self.name!r}"
            )
        missing = [node for node in cp.next if node not in self.graph.nodes]
        if missing:
            raise GraphInvalid(
                f"thread {cp.thread!r} is to run {missing} next, which graph "
                f"{self.name!r} does not define"
            )

    # -- claims --------------------------------------------------------------

    async def _claim(self, cp: Checkpoint, value: Any, *, explicit_step: bool) -> Checkpoint:
        """Take the suspend ``cp`` for this resume, or raise why not."""
        now = self.clock()
        await refuse_if_claimed(self.checkpointer, cp, now, superseded_check=explicit_step)
        if cp.wake_at is not None:
            if value is not None:
                raise InvalidArgument(f"thread {cp.thread!r} waits on a timer; it takes no value")
            left_us = parse_instant(cp.wake_at) - instant_us(now)
            if left_us > 0:
                raise NotDue(cp.thread, cp.step, cp.wake_at, left_us / 1e6)
        return await take_claim(self.checkpointer, cp, self.owner, now + self.claim_ttl)

    # -- steps ---------------------------------------------------------------

    async def _drive(self, cp: Checkpoint) -> RunResult:
        taken = 0
        while cp.next and not cp.interrupted:
            if taken >= self.step_limit:
                raise StepLimitExceeded(
                    f"thread {cp.thread!r} ran {taken} steps in one call (step_limit); "
                    f"stopped at step {cp.step}, resume to continue"
                )
            cp = await self._step(cp, {}, {})
            taken += 1
        return RunResult(cp)

    async def _step(
        self, cp: Checkpoint, answers: dict[str, list[Any]], writes: Mapping[str, Any]
    ) -> Checkpoint:
        """Run ``cp``'s frontier once and store the result as the next step."""
        view = MappingProxyType(cp.state)
        pending = [node for node in cp.next if node not in writes]
        outcomes = await self._call_all(cp, pending, view, answers)
        done = {**writes, **{n: u for n, u in outcomes.items() if not isinstance(u, Suspend)}}
        suspended = [n for n in pending if isinstance(outcomes[n], Suspend)]
        parent = f"{cp.thread}:{cp.step}"
        if suspended:
            node = suspended[0]
            signal = outcomes[node]
            assert isinstance(signal, Suspend)
            carried = {n: answers[n] for n in suspended if answers.get(n)}
            section = {"graph": self.name, "writes": done, "answers": carried}
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
                extra={RUNTIME_KEY: section},
                revision=1,
            )
        else:
            updates: _Updates = [(n, done[n]) for n in cp.next]
            state = self._merge(cp.state, updates, cp.thread, cp.step)
            new = Checkpoint(
                thread=cp.thread,
                step=cp.step + 1,
                state=state,
                next=await self._successors(cp.next, state, cp.thread, cp.step),
                parent=parent,
                ts=utc_now_iso(),
                extra={RUNTIME_KEY: {"graph": self.name}},
                revision=1,
            )
        await self.checkpointer.put(new, if_revision=0)
        return new

    async def _call_all(
        self,
        cp: Checkpoint,
        nodes: Sequence[str],
        view: Mapping[str, Any],
        answers: dict[str, list[Any]],
    ) -> dict[str, Mapping[str, Any] | Suspend]:
        if len(nodes) == 1:
            return {nodes[0]: await self._call(cp, nodes[0], view, answers)}
        tasks = {}
        try:
            async with asyncio.TaskGroup() as group:
                for node in nodes:
                    tasks[node] = group.create_task(self._call(cp, node, view, answers))
        except ExceptionGroup as failed:
            errors = [e for e in failed.exceptions if isinstance(e, NodeFailed | InvalidUpdate)]
            if not errors:
                raise
            raise min(errors, key=lambda e: nodes.index(e.node)) from None
        return {node: task.result() for node, task in tasks.items()}

    async def _call(
        self, cp: Checkpoint, node: str, view: Mapping[str, Any], answers: dict[str, list[Any]]
    ) -> Mapping[str, Any] | Suspend:
        ctx = NodeContext(cp.thread, cp.step + 1, node, answers.get(node, []), self.clock)
        try:
            update = await self.graph.nodes[node](view, ctx)
        except Suspend as signal:
            return signal
        except Exception as exc:
            raise NodeFailed(node, cp.thread, cp.step, exc) from exc
        if update is None:
            return {}
        if not isinstance(update, Mapping) or not all(isinstance(k, str) for k in update):
            raise InvalidUpdate(node, cp.thread, update)
        return update

    def _merge(
        self, state: Mapping[str, Any], updates: _Updates, thread: str, step: int
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

    async def _successors(
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
