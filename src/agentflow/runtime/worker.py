"""The timer worker: resumes every run whose ``wake_at`` has come.

Any number of workers, in any number of processes, may scan one store. They
do not coordinate: each due run is resumed through
:meth:`CompiledGraph.resume`, whose claim (a lease on the thread's durable
record, decided by the store) lets exactly one of them through; the others
get :class:`~agentflow.runtime.StepClaimed` and move on. The winner's lease
is renewed while its steps run, however long they take; a worker that dies
holding one leaves a lease that lapses after ``claim_ttl``, and the next scan
takes the run over.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentflow.checkpoint.base import ThreadInfo
from agentflow.durable import CheckpointStatus, DurableConflict
from agentflow.errors import (
    AgentflowError,
    CheckpointConflict,
    InvalidArgument,
    StoreUnavailable,
)
from agentflow.runtime.engine import CompiledGraph
from agentflow.runtime.errors import NotDue, NothingToResume
from agentflow.runtime.leases import instant_us
from agentflow.runtime.result import RunResult
from agentflow.runtime.section import runtime_of

__all__ = ["Worker", "WorkerPass"]

#: Due threads read per page.
_PAGE = 500


@dataclass
class WorkerPass:
    """What one scan of the store did."""

    resumed: list[RunResult] = field(default_factory=list)
    #: ``(thread, why)`` for due runs another worker (or resume) took first or
    #: holds: ``why`` is the error that said so (a :class:`StepClaimed` names
    #: the holder and how long its claim lasts).
    taken: list[tuple[str, AgentflowError]] = field(default_factory=list)
    #: ``(thread, error)`` for runs that could not be resumed (a node failed, the
    #: store failed, the checkpoint is corrupted); a run whose first resumed
    #: step failed keeps its suspend and stays due.
    failed: list[tuple[str, AgentflowError]] = field(default_factory=list)
    #: Due runs of graphs this worker does not know; left for another worker.
    unknown: list[str] = field(default_factory=list)


class Worker:
    """Resumes the due timer waits of ``graphs`` (all on one checkpointer).

    ``concurrency`` bounds how many resumed runs this worker drives at once.
    """

    def __init__(self, graphs: Sequence[CompiledGraph], *, concurrency: int = 4) -> None:
        if not graphs:
            raise InvalidArgument("a worker needs at least one compiled graph")
        self.checkpointer = graphs[0].checkpointer
        self.durable = graphs[0].durable
        if any(g.checkpointer is not self.checkpointer for g in graphs):
            raise InvalidArgument("every graph of a worker must use the same checkpointer")
        if any(g.durable is not self.durable for g in graphs):
            raise InvalidArgument("every graph of a worker must use the same durable store")
        if concurrency < 1:
            raise InvalidArgument(f"concurrency must be at least 1, got {concurrency}")
        self._graphs = {g.name: g for g in graphs}
        self._clock = graphs[0].clock
        self._slots = asyncio.Semaphore(concurrency)

    async def due(self) -> list[ThreadInfo]:
        """Every timer-suspended thread whose wake time has come, in wake order.

        The store's ``list_due`` reads only the due runs (O(due)), however many
        threads wait for later timers or for a human.
        """
        now = self._clock()
        found: list[ThreadInfo] = []
        cursor: str | None = None
        while True:
            page = await self.checkpointer.list_due(now, limit=_PAGE, cursor=cursor)
            found.extend(page.threads)
            cursor = page.next_cursor
            if cursor is None:
                return found

    async def stranded(self) -> list[str]:
        """Threads whose holder's lease has lapsed: runs a dead process left.

        Read from the durable store's running records (O(running runs)); the
        lease is compared with the graphs' clock here, and decided by the
        store's clock when a run is taken over.
        """
        now = instant_us(self._clock()) // 1000
        found: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.durable.list_runs(
                status=CheckpointStatus.RUNNING, limit=_PAGE, cursor=cursor
            )
            found.extend(
                run.key
                for run in page.runs
                if run.claimed and (run.lease_expires_at_ms or 0) <= now
            )
            cursor = page.next_cursor
            if cursor is None:
                return found

    async def run_once(self, *, recover: bool = False) -> WorkerPass:
        """Scan once and resume every due run this worker can take.

        With ``recover`` it also takes over every stranded run (see
        :meth:`stranded` and :meth:`CompiledGraph.recover`): so no run is lost
        when its process dies mid-step.
        """
        outcome = WorkerPass()
        async with asyncio.TaskGroup() as group:
            due = await self.due()
            for info in due:
                group.create_task(self._wake(info.thread, info.latest_step, outcome))
            if recover:
                woken = {info.thread for info in due}
                for thread in await self.stranded():
                    if thread not in woken:
                        group.create_task(self._wake(thread, None, outcome))
        return outcome

    async def run(
        self,
        *,
        interval: float = 1.0,
        stop: asyncio.Event | None = None,
        on_pass: Callable[[WorkerPass], None] | None = None,
        recover: bool = False,
    ) -> None:
        """Scan every ``interval`` seconds until ``stop`` is set.

        A store that is briefly unreachable does not end the loop; the next
        scan tries again.
        """
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                outcome = await self.run_once(recover=recover)
            except StoreUnavailable:
                outcome = None
            if outcome is not None and on_pass is not None:
                on_pass(outcome)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)

    async def _wake(self, thread: str, step: int | None, outcome: WorkerPass) -> None:
        """Resume the due suspend at ``step``, or (``step`` None) recover ``thread``."""
        async with self._slots:
            try:
                cp = await self.checkpointer.get(thread, step)
            except AgentflowError as exc:
                outcome.failed.append((thread, exc))
                return
            graph = self._graphs.get(str(runtime_of(cp).get("graph"))) if cp else None
            if cp is None or graph is None:
                if cp is not None:
                    outcome.unknown.append(thread)
                return
            try:
                if step is None:
                    outcome.resumed.append(await graph.recover(thread))
                else:
                    outcome.resumed.append(await graph.resume(thread, step=step))
            except (CheckpointConflict, DurableConflict, NothingToResume, NotDue) as exc:
                outcome.taken.append((thread, exc))
            except AgentflowError as exc:  # one bad run must not stop the others
                outcome.failed.append((thread, exc))
