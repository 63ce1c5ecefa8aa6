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
from agentflow.durable import DurableConflict
from agentflow.errors import (
    AgentflowError,
    CheckpointConflict,
    InvalidArgument,
    StoreUnavailable,
)
from agentflow.runtime.engine import CompiledGraph
from agentflow.runtime.errors import NotDue, NothingToResume
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
        if any(g.checkpointer is not self.checkpointer for g in graphs):
            raise InvalidArgument("every graph of a worker must use the same checkpointer")
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

    async def run_once(self) -> WorkerPass:
        """Scan once and resume every due run this worker can take."""
        outcome = WorkerPass()
        async with asyncio.TaskGroup() as group:
            for info in await self.due():
                group.create_task(self._wake(info, outcome))
        return outcome

    async def run(
        self,
        *,
        interval: float = 1.0,
        stop: asyncio.Event | None = None,
        on_pass: Callable[[WorkerPass], None] | None = None,
    ) -> None:
        """Scan every ``interval`` seconds until ``stop`` is set.

        A store that is briefly unreachable does not end the loop; the next
        scan tries again.
        """
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                outcome = await self.run_once()
            except StoreUnavailable:
                outcome = None
            if outcome is not None and on_pass is not None:
                on_pass(outcome)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)

    async def _wake(self, info: ThreadInfo, outcome: WorkerPass) -> None:
        async with self._slots:
            try:
                cp = await self.checkpointer.get(info.thread, info.latest_step)
            except AgentflowError as exc:
                outcome.failed.append((info.thread, exc))
                return
            graph = self._graphs.get(str(runtime_of(cp).get("graph"))) if cp else None
            if cp is None or graph is None:
                if cp is not None:
                    outcome.unknown.append(info.thread)
                return
            try:
                outcome.resumed.append(await graph.resume(info.thread, step=info.latest_step))
            except (CheckpointConflict, DurableConflict, NothingToResume, NotDue) as exc:
                outcome.taken.append((info.thread, exc))
            except AgentflowError as exc:  # one bad run must not stop the others
                outcome.failed.append((info.thread, exc))
