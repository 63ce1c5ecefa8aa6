"""Running a compiled graph: runs, resumes, streams, forks.

Each step is stored as one checkpoint (see :mod:`agentflow.runtime.steps`).
A suspended step is itself stored as a checkpoint (same state, same frontier,
``interrupted=True``). Every path that runs nodes first claims the thread's
durable record with a lease (see :mod:`agentflow.runtime.records` and
:mod:`agentflow.runtime.leases`), so of two racing resumes exactly one runs,
and a run another process is running (or died running) is not run twice.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer, with_defaults
from agentflow.checkpoint.fleet import DueRun
from agentflow.checkpoint.timestamps import parse_instant, utc_now_iso
from agentflow.checkpoint.validation import validate_thread
from agentflow.durable import (
    Admission,
    CheckpointAlreadyExists,
    CheckpointStatus,
    DurableStore,
    ReconciliationDecision,
    ResumePolicy,
    TerminalImmutable,
    new_checkpoint_key,
)
from agentflow.durable.enums import parse_enum
from agentflow.durable.errors import DurableError
from agentflow.errors import CheckpointConflict, InvalidArgument
from agentflow.runtime import telemetry
from agentflow.runtime.cycles import Cycles
from agentflow.runtime.errors import (
    GraphInvalid,
    NotDue,
    NothingToResume,
    StepClaimed,
    StepNotFound,
    ThreadExists,
    ThreadNotFound,
    UnknownGraph,
)
from agentflow.runtime.events import RunEvent, Sink, no_events, stream_of
from agentflow.runtime.fork import fork_checkpoint
from agentflow.runtime.identity import owner_of
from agentflow.runtime.leases import Lease, StoreUse, instant_us, lease_ms_of
from agentflow.runtime.records import Records, durable_of
from agentflow.runtime.recovery import (
    record_decision,
    recover,
    would_defer_all,
)
from agentflow.runtime.result import RunResult
from agentflow.runtime.section import EXTENSIONS_KEY, RUNTIME_KEY, runtime_of
from agentflow.runtime.settle import Waiter, settle
from agentflow.runtime.spec import START, GraphSpec
from agentflow.runtime.steps import StepRunner
from agentflow.runtime.takeover import (
    deferred,
    ended,
    expire_held,
    refuse_answered,
    settle_cycle,
    where,
)

if TYPE_CHECKING:
    from agentflow.durable import DurableCheckpoint

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
    """A :class:`~agentflow.runtime.graph.Graph` bound to a checkpointer and a durable store.

    Safe to share between tasks and to compile once per process; all run
    state lives in the stores, so any process may continue any thread.
    """

    def __init__(
        self,
        graph: GraphSpec,
        checkpointer: Checkpointer,
        *,
        durable: DurableStore | None,
        step_limit: int,
        claim_ttl: timedelta,
        clock: Callable[[], datetime] | None,
        worker_id: str | None = None,
        max_concurrent: int | None = None,
    ) -> None:
        self.graph = graph
        self.name = graph.name
        #: The thread's leases and journals live here (see docs/runtime.md).
        self.durable = durable_of(checkpointer, durable)
        #: A backend with only the core six methods gets the rest from defaults.
        self.checkpointer = with_defaults(checkpointer)
        self.step_limit = step_limit
        self.claim_ttl = claim_ttl
        self.clock = clock or _utc_now
        #: The stable identity this process runs under (see :mod:`agentflow.runtime.identity`).
        self.worker_id = worker_id
        #: The most runs of this graph a worker fleet holds at once (None: no limit).
        self.max_concurrent = max_concurrent
        #: Named in claims so an operator can see who holds a run: the identity, or
        #: a name made up for this process.
        self.owner = owner_of(worker_id)
        self.durability = graph.durability
        self.definition = graph.durability.definition(graph.name)
        self._steps = StepRunner(graph, self.checkpointer, self.clock)
        self._records = Records(
            self.durable,
            self.definition,
            owner=self.owner,
            lease_ms=lease_ms_of(claim_ttl.total_seconds()),
            use=StoreUse.of(self.durable, self.checkpointer),
        )
        self._cycles = Cycles(
            self._steps, self._records, self.durability, self.definition, step_limit
        )

    def under(self, worker_id: str) -> CompiledGraph:
        """This graph compiled again, on the same stores and settings, under the worker
        identity ``worker_id`` (what a :class:`~agentflow.runtime.Worker` given an
        identity runs its graphs as)."""
        return CompiledGraph(
            self.graph,
            self.checkpointer,
            durable=self.durable,
            step_limit=self.step_limit,
            claim_ttl=self.claim_ttl,
            clock=self.clock,
            worker_id=worker_id,
            max_concurrent=self.max_concurrent,
        )

    # -- public API ----------------------------------------------------------

    async def run(
        self,
        input: Mapping[str, Any],
        *,
        thread: str | None = None,
        resume_policy: ResumePolicy | str = ResumePolicy.NEW,
    ) -> RunResult:
        """Start ``thread`` from ``input`` and run until it ends or suspends.

        Stores ``input`` (folded by the reducers) as step 0, then one
        checkpoint per step. ``resume_policy`` says what an existing thread
        means: ``new`` (the default) raises :class:`ThreadExists` (use
        ``resume`` or ``fork``), and makes up a thread id when none is given;
        ``resume_if_present`` continues an existing thread as
        :meth:`run_until_settled` does (without waiting), else starts it;
        ``require_existing`` continues it, else raises :class:`ThreadNotFound`.
        The last two need ``thread``. Raises :class:`NodeFailed` when a node
        raises, leaving the last good step.
        """
        policy = parse_enum(ResumePolicy, resume_policy, "checkpoint_policy_invalid", "policy")
        if thread is None:
            if policy is not ResumePolicy.NEW:
                raise DurableError(
                    "checkpoint_key_required",
                    "resume_if_present and require_existing need an explicit thread",
                )
            thread = new_checkpoint_key()
        return await self._recorded(thread, self._started(input, thread, policy))

    async def _started(
        self, input: Mapping[str, Any], thread: str, policy: ResumePolicy
    ) -> RunResult:
        if policy is not ResumePolicy.NEW:
            latest = await self.checkpointer.get(thread)
            if latest is not None:
                return await self._continue(latest)
            if policy is ResumePolicy.REQUIRE_EXISTING:
                raise ThreadNotFound(f"thread {thread!r} not found")
        return await self._run(input, thread, no_events)

    async def _recorded(self, thread: str, call: Awaitable[RunResult]) -> RunResult:
        """Await one call of the graph on ``thread`` as its telemetry span."""
        with telemetry.recording(self.name, thread) as span:
            result = await call
            span["outcome"] = result.status
            return result

    async def resume(self, thread: str, value: Any = None, *, step: int | None = None) -> RunResult:
        """Continue ``thread`` and run until it ends or suspends again.

        On a human interrupt, the interrupting node runs again from its first
        line and its ``ctx.interrupt`` call returns ``value``. On a timer
        wait, ``value`` must be None and the wake time must have come
        (:class:`NotDue` otherwise). On a run whose process died between or
        during steps, the stored frontier runs again once the dead holder's
        lease has lapsed, replaying the calls its journal recorded. ``step``
        names the suspend being answered (default: the latest checkpoint); if
        another process holds the run, or already answered that suspend,
        :class:`StepClaimed` (a :class:`~agentflow.errors.CheckpointConflict`)
        says who, and until when. A run awaiting reconciliation returns with
        status ``reconciliation_required`` until its ambiguous calls are settled.
        """
        return await self._recorded(thread, self._resume(thread, value, step, no_events))

    def stream(self, input: Mapping[str, Any], *, thread: str) -> AsyncIterator[RunEvent]:
        """``run``, yielding a :class:`RunEvent` as each node starts and
        finishes and each step is stored; the last event is ``done``,
        ``interrupted`` or ``waiting`` and carries the final checkpoint.
        Breaking out of the loop stops the run after its last stored step."""
        return stream_of(lambda sink: self._recorded(thread, self._run(input, thread, sink)))

    def resume_stream(
        self, thread: str, value: Any = None, *, step: int | None = None
    ) -> AsyncIterator[RunEvent]:
        """``resume``, yielding events as :meth:`stream` does."""
        return stream_of(
            lambda sink: self._recorded(thread, self._resume(thread, value, step, sink))
        )

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
        (None: wait for any), is being run by another process (status
        ``running``) or awaits reconciliation. ``wait(result)`` replaces the
        default wait (an ``asyncio.sleep`` until ``result.wake_at``), e.g. to
        show a countdown.
        """
        if input is not None:
            result = await self.run(input, thread=thread)
        else:
            result = await self._continue(await self.get_state(thread))
        return await settle(self, result, max_wait=max_wait, wait=wait)

    async def reconcile(
        self,
        thread: str,
        operation_id: str,
        decision: ReconciliationDecision,
        *,
        attempt: int,
    ) -> DurableCheckpoint:
        """Record an operator's decision on attempt ``attempt`` of an ambiguous call
        of ``thread`` (the ``attempt`` of its observation).

        A decision about another attempt than the ambiguous one is refused with
        :class:`DecisionStale`, writing nothing. See
        :func:`agentflow.runtime.recovery.record_decision`; continue the run with
        :meth:`resume` once nothing is ambiguous any more.
        """
        latest = await self.get_state(thread)
        return await record_decision(
            self.durable,
            thread,
            operation_id,
            decision,
            attempt=attempt,
            owner=self.owner,
            step=latest.step,
            lease_ms=self._records.lease_ms,
            released=self._records.released,
        )

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
        frontier and suspend; if it changed, the fork runs the new frontier
        on resume. The source is never touched. Continue the fork with
        :meth:`resume`; with the same inputs it replays the same states as
        the source did. A fork is a new run: its calls are made anew.
        """
        source = await self.get_state(thread, step)
        validate_thread(new_thread)
        if (
            await self.checkpointer.get(new_thread) is not None
            or await self.durable.load(new_thread) is not None
        ):
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

    # -- runs ----------------------------------------------------------------

    async def _run(self, input: Mapping[str, Any], thread: str, sink: Sink) -> RunResult:
        validate_thread(thread)
        if (
            await self.checkpointer.get(thread) is not None
            or await self.durable.load(thread) is not None
        ):
            raise ThreadExists(f"thread {thread!r} already exists; resume or fork it instead")
        state = self._steps.merge({}, [("input", input)], thread, 0)
        extra: dict[str, Any] = {RUNTIME_KEY: {"graph": self.name}}
        extensions = self._cycles.env(None, Checkpoint(thread, 0, {}), restore=False)
        if extensions.extension_state():
            extra[EXTENSIONS_KEY] = extensions.extension_state()
        first = Checkpoint(
            thread=thread,
            step=0,
            state=state,
            next=await self._steps.successors([START], state, thread, 0),
            ts=utc_now_iso(),
            extra=extra,
            revision=1,
        )
        if not self._records.use.together:  # a third party's checkpointer: step, then record
            await self._steps.store(first, [("input", input)], sink)
            record = await self._records.ensure(thread)
            lease = await self._records.claim(record, first.step)
            return await self._cycles.run(lease, first, {}, {}, sink)
        started: list[Lease] = []

        async def start(cp: Checkpoint) -> None:
            started.append(await self._records.start(cp))

        try:
            await self._steps.store(first, [("input", input)], sink, start)
        except StepClaimed:  # stored, but another process claimed it first: it runs it
            raise
        except (CheckpointConflict, CheckpointAlreadyExists) as raced:
            raise ThreadExists(f"thread {thread!r} was just started by another caller") from raced
        return await self._cycles.run(started[0], first, {}, {}, sink)

    async def _continue(self, latest: Checkpoint) -> RunResult:
        """Resume ``latest`` if that needs no answer and no waiting, else say where it is."""
        due = latest.wake_at is not None and parse_instant(latest.wake_at) <= instant_us(
            self.clock()
        )
        if latest.done or (latest.interrupted and not due):
            return await where(self.durable, latest)
        record = await self.durable.load(latest.thread)
        if record is not None and record.terminal_result is not None:
            return await where(self.durable, latest)  # ended by an operator: say so, run nothing
        return await self._resume(latest.thread, None, None, no_events)

    async def _resume(self, thread: str, value: Any, step: int | None, sink: Sink) -> RunResult:
        cp = await self.get_state(thread, step)
        self._check_runnable(cp)
        if step is not None and cp.interrupted:
            await refuse_answered(self.checkpointer, cp)
        if not cp.interrupted:
            if step is not None or cp.done:
                if cp.done:
                    await settle_cycle(self._records, self.durability, cp)
                raise NothingToResume(
                    f"thread {thread!r} step {cp.step} is not suspended"
                    + (" (the run finished)" if cp.done else "")
                )
            if value is not None:
                raise InvalidArgument(f"thread {thread!r} is not waiting for a value")
        elif cp.wake_at is not None:
            if value is not None:
                raise InvalidArgument(f"thread {cp.thread!r} waits on a timer; it takes no value")
            left_us = parse_instant(cp.wake_at) - instant_us(self.clock())
            if left_us > 0:
                raise NotDue(cp.thread, cp.step, cp.wake_at, left_us / 1e6)
        record = await self._records.ensure(thread)
        if self._records.admit(record) is Admission.REPLAY_TERMINAL:
            await self._records.deliver_ended(record)
            raise await ended(self.checkpointer, cp, record.status.value)
        if record.status is CheckpointStatus.RECONCILIATION_REQUIRED and would_defer_all(
            record, self.durability
        ):
            return RunResult(cp, deferred(record))
        try:
            lease = await self._records.claim(record, cp.step)
        except TerminalImmutable as finished_meanwhile:  # between the read and the claim
            raise await ended(self.checkpointer, cp, "finished") from finished_meanwhile
        return await self._claimed(lease, cp, value, sink)

    async def _claimed(
        self, lease: Lease, cp: Checkpoint, value: Any, sink: Sink, *, latest: bool = False
    ) -> RunResult:
        """Continue ``cp`` under ``lease``, the claim of its next cycle just taken
        (``latest``: ``cp`` was read as the thread's latest step after the claim)."""
        thread = cp.thread
        try:
            decided = await recover(lease, self.durability) if lease.recovery else []
            latest_cp = cp if latest else await self.get_state(thread)
        except BaseException:
            await lease.release()
            raise
        if lease.record.terminal_result is not None:
            return RunResult(latest_cp, tuple(decided), terminal=lease.record.terminal_result)
        if lease.record.status is CheckpointStatus.RECONCILIATION_REQUIRED:
            return RunResult(latest_cp, tuple(decided))
        if latest_cp.step != cp.step:  # it moved on before this claim: continue from there
            await lease.release()
            if cp.interrupted:
                await refuse_answered(self.checkpointer, cp)
            return await self._resume(thread, None, None, sink)
        section = runtime_of(cp)
        if not cp.interrupted:
            result = await self._cycles.run(lease, cp, {}, {}, sink)
        else:
            answers: dict[str, list[Any]] = {
                node: list(given) for node, given in section.get("answers", {}).items()
            }
            if cp.interrupt_node is not None:
                answers.setdefault(cp.interrupt_node, []).append(value)
            result = await self._cycles.run(
                lease, cp, answers, section.get("writes", {}), sink, answered_by=self.owner
            )
        return RunResult(result.checkpoint, (*decided, *result.reconciliations), result.terminal)

    async def resume_due(self, due: DueRun, *, sent: float | None = None) -> RunResult:
        """Resume the due timer of a run a batch claim took for this graph
        (:meth:`~agentflow.checkpoint.store.Store.claim_due`, sent at ``sent``,
        ``time.monotonic()``): the worker's path. The claim is held already, so
        nobody else runs the step; a run that moved on before the claim (its due
        step is no longer its latest), or that this graph may not continue, is
        given back at once and raises as :meth:`resume` would.
        """
        records = self._records
        lease = Lease.held(
            records.store,
            due.record,
            lease_ms=records.lease_ms,
            sent=time.monotonic() if sent is None else sent,
            recovery=due.recovery,
            released=records.released,
            use=records.use,
        )
        try:
            cp = await self.get_state(due.thread)
            self._check_runnable(cp)
            if self._records.admit(due.record) is Admission.REPLAY_TERMINAL:
                raise NothingToResume(f"thread {due.thread!r} has ended")
            if cp.step != due.step:  # it moved on before the claim
                raise NothingToResume(f"thread {due.thread!r} moved on to step {cp.step}")
            if cp.wake_at is None or not cp.interrupted:
                raise NothingToResume(f"thread {due.thread!r} step {cp.step} waits on no timer")
        except BaseException:
            await lease.release()
            raise
        return await self._recorded(
            due.thread, self._claimed(lease, cp, None, no_events, latest=True)
        )

    async def take_back(self, thread: str, claim_token: str) -> RunResult:
        """Take back ``thread``, held under ``claim_token`` by this graph's worker identity's
        previous incarnation (dead: one identity is one live process), without waiting
        for its lease: the lease is ended with that token, then the run continues as
        :meth:`recover` has it (a due timer it was woken from is resumed)."""
        await expire_held(self._records, thread, claim_token)
        latest = await self.get_state(thread)
        wake = latest.wake_at if latest.interrupted else None
        if wake is not None and parse_instant(wake) <= instant_us(self.clock()):
            return await self.resume(thread)
        return await self.recover(thread)

    async def recover(self, thread: str) -> RunResult:
        """Take over ``thread`` if the process that held it died; run nothing else.

        A run whose holder died during a step (its lease lapsed) is resumed:
        its frontier runs again, replaying the calls it journaled. A run whose
        holder died after storing a suspend or its last step has that cycle
        committed (or finalized), and waits as it did, its interrupt
        unanswered. A run nobody holds, or whose holder's lease is live, is
        left as it is. The worker's ``recover`` pass calls this.
        """
        latest = await self.get_state(thread)
        self._check_runnable(latest)
        if latest.done or latest.interrupted:
            return await settle_cycle(self._records, self.durability, latest)
        record = await self.durable.load(thread)
        if record is not None and record.terminal_result is not None:
            return await where(self.durable, latest)
        return await self.resume(thread)
