"""Running a compiled graph: runs, resumes, streams, forks.

Each step is stored as one checkpoint (see :mod:`agentflow.runtime.steps`).
A suspended step is itself stored as a checkpoint (same state, same frontier,
``interrupted=True``). Resuming it first *claims* it by a conditional rewrite
of that step, so of two racing resumes exactly one runs the node.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer, with_defaults
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
from agentflow.runtime.errors import (
    GraphInvalid,
    NotDue,
    NothingToResume,
    StepLimitExceeded,
    StepNotFound,
    ThreadExists,
    ThreadNotFound,
    UnknownGraph,
)
from agentflow.runtime.events import RunEvent, Sink, no_events, stream_of
from agentflow.runtime.fork import fork_checkpoint
from agentflow.runtime.graph import START
from agentflow.runtime.result import RunResult
from agentflow.runtime.settle import Waiter, settle
from agentflow.runtime.steps import StepRunner

if TYPE_CHECKING:
    from agentflow.runtime.graph import Graph

__all__ = ["CompiledGraph", "read_checkpoint"]


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
        #: A backend with only the core six methods gets the rest from defaults.
        self.checkpointer = with_defaults(checkpointer)
        self.step_limit = step_limit
        self.claim_ttl = claim_ttl
        self.clock = clock or _utc_now
        #: Written into claims so an operator can see who holds a suspend.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._steps = StepRunner(graph, self.checkpointer, self.clock)

    # -- public API ----------------------------------------------------------

    async def run(self, input: Mapping[str, Any], *, thread: str) -> RunResult:
        """Start ``thread`` from ``input`` and run until it ends or suspends.

        Stores ``input`` (folded by the reducers) as step 0, then one
        checkpoint per step. Raises :class:`ThreadExists` for a thread that
        already has checkpoints (use ``resume`` or ``fork``), and
        :class:`NodeFailed` when a node raises, leaving the last good step.
        """
        return await self._run(input, thread, no_events)

    async def resume(self, thread: str, value: Any = None, *, step: int | None = None) -> RunResult:
        """Continue ``thread`` and run until it ends or suspends again.

        On a human interrupt, the interrupting node runs again from its first
        line and its ``ctx.interrupt`` call returns ``value``. On a timer
        wait, ``value`` must be None and the wake time must have come
        (:class:`NotDue` otherwise). On a run whose process died between
        steps, the stored frontier runs again. ``step`` names the suspend
        being answered (default: the latest checkpoint); if another resume
        holds that suspend, or already answered it, :class:`StepClaimed` (a
        :class:`~agentflow.errors.CheckpointConflict`) says who, and until when.
        """
        return await self._resume(thread, value, step, no_events)

    def stream(self, input: Mapping[str, Any], *, thread: str) -> AsyncIterator[RunEvent]:
        """``run``, yielding a :class:`RunEvent` as each node starts and
        finishes and each step is stored; the last event is ``done``,
        ``interrupted`` or ``waiting`` and carries the final checkpoint.
        Breaking out of the loop stops the run after its last stored step."""
        return stream_of(lambda sink: self._run(input, thread, sink))

    def resume_stream(
        self, thread: str, value: Any = None, *, step: int | None = None
    ) -> AsyncIterator[RunEvent]:
        """``resume``, yielding events as :meth:`stream` does."""
        return stream_of(lambda sink: self._resume(thread, value, step, sink))

    async def run_until_settled(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        thread: str,
        max_wait: timedelta | None = None,
        wait: Waiter | None = None,
    ) -> RunResult:
        """Run (with ``input``) or continue ``thread``, waiting out its timers.

        Returns once the run is done, waits for a human (answer with
        ``resume``), waits on a timer due later than ``max_wait`` from now
        (None: wait for any), or is being run by another process (status
        ``running``). ``wait(result)`` replaces the default wait (an
        ``asyncio.sleep`` until ``result.wake_at``), e.g. to show a countdown.
        """
        if input is not None:
            result = await self.run(input, thread=thread)
        else:
            latest = await self.get_state(thread)
            runnable = latest.next and not latest.interrupted
            result = await self.resume(thread) if runnable else RunResult(latest)
        return await settle(self, result, max_wait=max_wait, wait=wait)

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
        reroute: bool = True,
    ) -> Checkpoint:
        """Start ``new_thread`` from ``thread``'s checkpoint at ``step``.

        The fork keeps the source's step number, and its ``parent`` is
        ``"thread:step"``; ``update`` is folded into its state by the
        reducers. With an update the routers that chose the step's frontier
        run again on the updated state (``reroute=False`` keeps the stored
        frontier): if the route is unchanged, the fork keeps the source's
        frontier and suspend (minus any claim); if it changed, the fork runs
        the new frontier on resume. The source is never touched. Continue the
        fork with :meth:`resume`; with the same inputs it replays the same
        states as the source did.
        """
        source = await self.get_state(thread, step)
        validate_thread(new_thread)
        if await self.checkpointer.get(new_thread) is not None:
            raise ThreadExists(f"thread {new_thread!r} already exists; fork to a new thread")
        forked = await fork_checkpoint(
            self._steps, source, new_thread=new_thread, update=update, reroute=reroute
        )
        await self._steps.store(forked, [("fork", update or {})], no_events)
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

    # -- runs ----------------------------------------------------------------

    async def _run(self, input: Mapping[str, Any], thread: str, sink: Sink) -> RunResult:
        validate_thread(thread)
        if await self.checkpointer.get(thread) is not None:
            raise ThreadExists(f"thread {thread!r} already exists; resume or fork it instead")
        state = self._steps.merge({}, [("input", input)], thread, 0)
        first = Checkpoint(
            thread=thread,
            step=0,
            state=state,
            next=await self._steps.successors([START], state, thread, 0),
            ts=utc_now_iso(),
            extra={RUNTIME_KEY: {"graph": self.name}},
            revision=1,
        )
        await self._steps.store(first, [("input", input)], sink)
        return await self._drive(first, sink)

    async def _resume(self, thread: str, value: Any, step: int | None, sink: Sink) -> RunResult:
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
            return await self._drive(cp, sink)
        claimed = await self._claim(cp, value, explicit_step=step is not None)
        section = runtime_of(cp)
        answers: dict[str, list[Any]] = {
            node: list(given) for node, given in section.get("answers", {}).items()
        }
        if cp.interrupt_node is not None:
            answers.setdefault(cp.interrupt_node, []).append(value)
        advanced = False
        try:
            first = await self._steps.step(claimed, answers, section.get("writes", {}), sink)
            advanced = True
        finally:
            if not advanced:
                await release_claim(self.checkpointer, claimed)
        return await self._drive(first, sink)

    async def _drive(self, cp: Checkpoint, sink: Sink) -> RunResult:
        taken = 0
        while cp.next and not cp.interrupted:
            if taken >= self.step_limit:
                raise StepLimitExceeded(
                    f"thread {cp.thread!r} ran {taken} steps in one call (step_limit); "
                    f"stopped at step {cp.step}, resume to continue"
                )
            cp = await self._steps.step(cp, {}, {}, sink)
            taken += 1
        return RunResult(cp)
