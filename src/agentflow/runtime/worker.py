"""The timer worker: resumes every run whose ``wake_at`` has come, a fleet of them
splitting the work.

Any number of workers, in any number of processes, may serve one store. On an
agentflow store a worker claims due runs in batches
(:meth:`~agentflow.checkpoint.store.Store.claim_due`: one statement, script
or transaction per batch, that other workers skip), as many as it has free
slots, so workers divide the due runs between them instead of each listing
them all and losing claims to the others; adding a worker adds throughput. A
graph compiled with ``max_concurrent=`` is claimed only while fewer of its
runs hold a live lease, counted in the store. The claimed runs are resumed
under the claim already held (:meth:`CompiledGraph.resume_due`). After its
claims a pass reads one page of what is still due: runs another process
holds are reported (no claim is tried), the rest (a thread without a record
yet, an unknown graph, a run awaiting a decision) go through
:meth:`CompiledGraph.resume` as they always did.

A worker with an identity (``worker_id=`` or ``$AGENTFLOW_WORKER_ID``) first
takes back the runs its previous incarnation held
(:meth:`~agentflow.checkpoint.store.Store.list_held`), without waiting for
their leases to lapse; one identity must be one live process. The winner's
lease is renewed while its steps run, however long they take; a worker that
dies holding one leaves a lease that lapses after ``claim_ttl``, and a
``recover`` pass (or its identity's next start) takes the run over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from agentflow.checkpoint.base import ThreadInfo
from agentflow.checkpoint.fleet import DueRun, due_claim_mode
from agentflow.checkpoint.rows import head_of
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.durable import MAX_WIRE_INTEGER, CheckpointStatus, DurableCheckpoint, DurableConflict
from agentflow.durable.errors import DurableError
from agentflow.errors import (
    AgentflowError,
    CheckpointConflict,
    InvalidArgument,
    StoreUnavailable,
)
from agentflow.runtime.engine import CompiledGraph
from agentflow.runtime.errors import NotDue, NothingToResume, StepClaimed, UnknownGraph
from agentflow.runtime.identity import worker_identity
from agentflow.runtime.leases import (
    Lease,
    StoreUse,
    claim_token,
    holder_of,
    instant_us,
    iso_ms,
    lease_ms_of,
    minted_here,
)
from agentflow.runtime.result import RunResult
from agentflow.runtime.section import runtime_of

__all__ = ["Worker", "WorkerPass"]

#: Due threads (and stranded or held runs) read per page.
_PAGE = 500
#: Due threads a pass on an agentflow store reads after its claims.
_LEFTOVERS = 100
#: What a resume raises when another process holds the run or moved it on.
_TAKEN = (CheckpointConflict, DurableConflict, NothingToResume, NotDue)


@dataclass
class WorkerPass:
    """What one pass over the store did."""

    resumed: list[RunResult] = field(default_factory=list)
    #: ``(thread, why)`` for due runs another worker (or resume) holds or took
    #: first: ``why`` is the error that said so (a :class:`StepClaimed` names
    #: the holder and how long its claim lasts).
    taken: list[tuple[str, AgentflowError]] = field(default_factory=list)
    #: ``(thread, error)`` for runs that could not be resumed (a node failed, the
    #: store failed, the checkpoint is corrupted); a run whose first resumed
    #: step failed keeps its suspend and stays due.
    failed: list[tuple[str, AgentflowError]] = field(default_factory=list)
    #: Due runs of graphs this worker does not know; left for another worker.
    unknown: list[str] = field(default_factory=list)
    #: Runs this pass claimed in batches (claims that never lose to another worker).
    claimed: int = 0
    #: Single runs this pass tried to claim (each through :meth:`CompiledGraph.resume`)
    #: and, of those, how many another process held or took first.
    attempts: int = 0
    lost: int = 0


def _held(thread: str, step: int, record: DurableCheckpoint) -> StepClaimed | None:
    """Who holds ``thread``'s run (its latest step ``step``), if its record is claimed."""
    token, lease = record.claim_token, record.lease_expires_at_ms
    if token is None or lease is None:
        return None
    return StepClaimed(
        thread, step, record.revision, record.revision, holder=holder_of(token), until=iso_ms(lease)
    )


@dataclass
class _Pass:
    """One :meth:`Worker.run_once`: its tasks, the instant timers are due at, what it did."""

    group: asyncio.TaskGroup
    now: datetime
    outcome: WorkerPass = field(default_factory=WorkerPass)
    #: Threads the pass took care of (claimed, woken, reported).
    handled: set[str] = field(default_factory=set)
    #: Threads the pass's claims leave alone: tried already and maybe due again,
    #: or being resumed another way.
    excluded: set[str] = field(default_factory=set)
    #: Whether the look at what else is due has started.
    looked: bool = False
    failure: list[StoreUnavailable] = field(default_factory=list)

    def handle(self, thread: str) -> bool:
        """Take ``thread`` in hand for a way other than a batch claim (False: taken already)."""
        if thread in self.handled:
            return False
        self.handled.add(thread)
        self.excluded.add(thread)
        return True


@dataclass(frozen=True)
class _Group:
    """Graphs claimed by one :meth:`~agentflow.checkpoint.store.Store.claim_due`."""

    definitions: tuple[str, ...]
    lease_ms: int
    max_concurrent: int | None


def _groups(graphs: Sequence[CompiledGraph]) -> list[_Group]:
    """One group per limited graph, and one per lease length for the others."""
    unlimited: dict[int, list[str]] = {}
    groups: list[_Group] = []
    for graph in graphs:
        lease_ms = lease_ms_of(graph.claim_ttl.total_seconds())
        digest = graph.definition.digest
        if graph.max_concurrent is None:
            unlimited.setdefault(lease_ms, []).append(digest)
        else:
            groups.append(_Group((digest,), lease_ms, graph.max_concurrent))
    return [_Group(tuple(d), ms, None) for ms, d in unlimited.items()] + groups


def _identity_of(graphs: Sequence[CompiledGraph], worker_id: str | None) -> str | None:
    """The worker's identity: given (or the environment's), else the graphs' own."""
    chosen = worker_identity(worker_id)
    theirs = {g.worker_id for g in graphs if g.worker_id is not None}
    if chosen is None and len(theirs) > 1:
        raise InvalidArgument(f"the graphs were compiled under different worker ids {theirs}")
    if chosen is not None and theirs - {chosen}:
        raise InvalidArgument(f"the graphs were compiled under worker ids {theirs}, not {chosen!r}")
    return chosen if chosen is not None else next(iter(theirs), None)


class Worker:
    """Resumes the due timer waits of ``graphs`` (all on one store).

    ``concurrency`` bounds how many runs this worker drives at once (its
    batches claim no more). ``worker_id`` (else ``$AGENTFLOW_WORKER_ID``)
    names a stable identity the graphs run under (see
    :mod:`agentflow.runtime.identity`).
    """

    def __init__(
        self,
        graphs: Sequence[CompiledGraph],
        *,
        concurrency: int = 4,
        worker_id: str | None = None,
    ) -> None:
        if not graphs:
            raise InvalidArgument("a worker needs at least one compiled graph")
        identity = _identity_of(graphs, worker_id)
        if identity is not None:
            graphs = [g if g.worker_id == identity else g.under(identity) for g in graphs]
        self.worker_id = identity
        self.checkpointer = graphs[0].checkpointer
        self.durable = graphs[0].durable
        if any(g.checkpointer is not self.checkpointer for g in graphs):
            raise InvalidArgument("every graph of a worker must use the same checkpointer")
        if any(g.durable is not self.durable for g in graphs):
            raise InvalidArgument("every graph of a worker must use the same durable store")
        if concurrency < 1:
            raise InvalidArgument(f"concurrency must be at least 1, got {concurrency}")
        self.graphs = list(graphs)
        self._graphs = {g.name: g for g in graphs}
        self._by_definition = {g.definition.digest: g for g in graphs}
        self._clock = graphs[0].clock
        self._slots = asyncio.Semaphore(concurrency)
        #: Free slots a batch waits for while runs of this worker are under way (half
        #: of them: a claim per run finished would cost a statement per run).
        self._batch = max(1, concurrency // 2)
        self.concurrency = concurrency
        #: Named in this worker's batch claims: its identity, or its first graph's owner.
        self.owner = identity or graphs[0].owner
        #: The store that claims batches and lists holders: an agentflow store
        #: holding the steps too (else every due run goes through ``resume``).
        together = StoreUse.of(self.durable, self.checkpointer).together
        self._store = self.durable if together and isinstance(self.durable, Store) else None
        self._groups = _groups(graphs)
        self._turn = 0
        self._running = 0
        self._finished = asyncio.Event()
        #: False until the first pass has taken back what the identity held.
        self._took_back = identity is None or self._store is None

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
        """One pass: take back what this identity held (on the first pass), claim
        and resume due runs until none is left that this worker may claim, and
        look at what else is due once the claims come back short.

        With ``recover`` it also takes over every stranded run (see
        :meth:`stranded` and :meth:`CompiledGraph.recover`): so no run is lost
        when its process dies mid-step. A store that fails mid-pass stops the
        pass once the runs it started have ended, and raises.
        """
        async with asyncio.TaskGroup() as group:
            p = _Pass(group, self._clock())
            try:
                if not self._took_back:
                    await self._take_back(p)
                    self._took_back = True
                if self._store is not None:
                    await self._drain(p, self._store)
                else:
                    await self._leftovers(p)
                if recover:
                    for thread in await self.stranded():
                        if p.handle(thread):
                            group.create_task(self._wake(thread, None, p.outcome))
            except StoreUnavailable as exc:  # the runs started end first
                p.failure.append(exc)
        if p.failure:
            raise p.failure[0]
        return p.outcome

    async def run(
        self,
        *,
        interval: float = 1.0,
        stop: asyncio.Event | None = None,
        on_pass: Callable[[WorkerPass], None] | None = None,
        recover: bool = False,
    ) -> None:
        """A pass every ``interval`` seconds until ``stop`` is set.

        A store that is briefly unreachable does not end the loop; the next
        pass tries again.
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

    # -- batches of due runs ---------------------------------------------------------

    async def _drain(self, p: _Pass, store: Store) -> None:
        """Keep every slot busy with claimed due runs, claiming ahead in batches of at
        least half the slots (a claim per finished run would cost a statement per
        run), until a claim comes back short with none of them left; the first
        short claim starts the look at what else is due."""
        queue: deque[tuple[DueRun, float]] = deque()
        try:
            await self._keep_busy(p, store, queue)
        finally:  # a store that failed mid-pass: the claims not started are given back
            for due, sent in queue:
                with contextlib.suppress(AgentflowError):
                    await self._give_back(due, sent)

    async def _keep_busy(self, p: _Pass, store: Store, queue: deque[tuple[DueRun, float]]) -> None:
        target = self.concurrency + self._batch
        short = False
        while True:
            while queue and not self._slots.locked():  # a slot for each, until it ends
                await self._slots.acquire()
                self._running += 1
                p.group.create_task(self._drive(*queue.popleft(), p))
            held = self._running + len(queue)
            if not short and held <= self.concurrency:
                batch = await self._claim(store, p.now, target - held, p.excluded)
                p.outcome.claimed += len(batch)
                p.handled.update(due.thread for due, _ in batch)
                queue.extend(batch)
                short = len(batch) < target - held
                continue
            if short and not p.looked:
                p.looked = True
                p.group.create_task(self._look(p))
            if short and held == 0:
                return
            self._finished.clear()
            await self._finished.wait()  # one of ours ended: room to start or claim more
            short = False

    async def _claim(
        self, store: Store, now: datetime, wanted: int, tried: set[str]
    ) -> list[tuple[DueRun, float]]:
        """Up to ``wanted`` due runs of this worker's graphs but those ``tried`` this
        pass, claimed group by group (starting with another group each time, so no
        limited graph waits behind the others), each with the time its claim was sent."""
        claimed: list[tuple[DueRun, float]] = []
        groups = self._groups[self._turn :] + self._groups[: self._turn]
        self._turn = (self._turn + 1) % len(self._groups)
        for chosen in groups:
            left = wanted - len(claimed)
            if left == 0:
                break
            sent = time.monotonic()
            batch = await store.claim_due(
                now,
                claim_tokens=[claim_token(self.owner) for _ in range(left)],
                lease_ms=chosen.lease_ms,
                definitions=chosen.definitions,
                max_concurrent=chosen.max_concurrent,
                exclude=sorted(tried),
            )
            claimed.extend((due, sent) for due in batch)
        return claimed

    async def _drive(self, due: DueRun, sent: float, p: _Pass) -> None:
        """Resume a claimed due run with its graph (a slot is held for it); unless it
        moved on to a wait not due in this pass, no claim of the pass takes it again."""
        outcome = p.outcome
        p.excluded.add(due.thread)
        try:
            graph = self._by_definition.get(due.record.run_definition_digest)
            if graph is None:  # a record older than the store's definitions: not ours
                await self._give_back(due, sent)
                outcome.unknown.append(due.thread)
                return
            result = await graph.resume_due(due, sent=sent)
            outcome.resumed.append(result)
            if result.wake_at is None or parse_instant(result.wake_at) > instant_us(p.now):
                p.excluded.discard(due.thread)
        except UnknownGraph:
            outcome.unknown.append(due.thread)
        except _TAKEN as exc:
            outcome.taken.append((due.thread, exc))
        except AgentflowError as exc:  # one bad run must not stop the others
            outcome.failed.append((due.thread, exc))
        finally:
            self._slots.release()
            self._running -= 1
            self._finished.set()

    async def _give_back(self, due: DueRun, sent: float) -> None:
        lease_ms = self._groups[0].lease_ms
        lease = Lease.held(self.durable, due.record, lease_ms=lease_ms, sent=sent, recovery=False)
        await lease.release()

    # -- what is left, and what a previous incarnation held ----------------------------

    async def _look(self, p: _Pass) -> None:
        try:
            await self._leftovers(p)
        except StoreUnavailable as exc:
            p.failure.append(exc)

    async def _leftovers(self, p: _Pass) -> None:
        """The due runs no batch took: report those another process holds, and resume
        the others as :meth:`CompiledGraph.resume` does (one page on a store that
        claims batches; all of them on one that does not)."""
        bounded = self._store is not None
        cursor: str | None = None
        while True:
            page = await self.checkpointer.list_due(
                p.now, limit=_LEFTOVERS if bounded else _PAGE, cursor=cursor
            )
            for info in page.threads:
                if not p.handle(info.thread):
                    continue
                try:
                    record = await self.durable.load(info.thread)
                except DurableError:
                    record = None  # no record can live under this id; let resume say why
                if record is None or not bounded:
                    wake = True
                elif record.claim_token is not None and not minted_here(record.claim_token):
                    # held by another process (whose lease was live when the batch was
                    # decided: it would have taken a lapsed one)
                    held = _held(info.thread, info.latest_step, record)
                    if held is not None:
                        p.outcome.taken.append((info.thread, held))
                    wake = held is None
                elif record.claim_token is not None:  # this process's: resume waits out a
                    wake = True  # lease it released, and names a live holder
                else:
                    wake = not self._batched(record)
                if wake:
                    p.group.create_task(self._wake(info.thread, info.latest_step, p.outcome))
            cursor = page.next_cursor
            if cursor is None or bounded:
                return

    def _batched(self, record: DurableCheckpoint) -> bool:
        """Whether ``record``'s due run, which nobody holds, is left to batch claims:
        its graph has a limit (only a batch counts it), or a batch may claim it (one is
        claiming it now, or a later pass will: a single claim would lose to it)."""
        graph = self._by_definition.get(record.run_definition_digest)
        if graph is None:
            return False
        claimable = due_claim_mode(head_of(record), MAX_WIRE_INTEGER) is not None
        return graph.max_concurrent is not None or claimable

    async def _take_back(self, p: _Pass) -> None:
        """Take back every run this identity's previous incarnation held."""
        assert self._store is not None and self.worker_id is not None
        cursor: str | None = None
        while True:
            page = await self._store.list_held(self.worker_id, limit=_PAGE, cursor=cursor)
            for run in page.runs:
                if p.handle(run.key):
                    p.group.create_task(self._reclaim(run.key, p.outcome))
            cursor = page.next_cursor
            if cursor is None:
                return

    async def _reclaim(self, thread: str, outcome: WorkerPass) -> None:
        async with self._slots:
            try:
                record = await self.durable.load(thread)
                token = None if record is None else record.claim_token
                if record is None or token is None:
                    return  # given up meanwhile
                if minted_here(token):  # a live holder in this process: not a dead one's
                    latest = await self.checkpointer.get(thread)
                    held = _held(thread, -1 if latest is None else latest.step, record)
                    outcome.taken.extend([] if held is None else [(thread, held)])
                    return
                graph = self._by_definition.get(record.run_definition_digest)
                if graph is None:
                    outcome.unknown.append(thread)
                    return
                outcome.resumed.append(await graph.take_back(thread, token))
            except _TAKEN as exc:
                outcome.taken.append((thread, exc))
            except AgentflowError as exc:
                outcome.failed.append((thread, exc))

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
            outcome.attempts += 1
            try:
                if step is None:
                    outcome.resumed.append(await graph.recover(thread))
                else:
                    outcome.resumed.append(await graph.resume(thread, step=step))
            except _TAKEN as exc:
                outcome.lost += 1
                outcome.taken.append((thread, exc))
            except AgentflowError as exc:  # one bad run must not stop the others
                outcome.failed.append((thread, exc))
