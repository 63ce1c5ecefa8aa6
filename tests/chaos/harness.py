"""The chaos driver and its verdict.

:func:`chaos` keeps :attr:`Settings.workers` worker processes
(``tests.chaos.child``) running ``order`` runs on one backend, and SIGKILLs a
busy one at random moments (:attr:`Settings.kills` times), starting a new
one each time. Meanwhile it feeds new runs and plays the operator: each run
suspended as ``reconciliation_required`` is settled through
``CompiledGraph.reconcile``, from what the ledger shows (``replay_success``
with the landed effect, else ``retry``). Once the kills are done it waits for
every run to finish and judges (:func:`verdict`) from the ledger, the
decisions, the kill sites and the runs' final states.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from agentflow.checkpoint.store import Store
from agentflow.durable import (
    CheckpointStatus,
    OperationKind,
    OperationState,
    ReconciliationDecision,
    stable_event_id,
)
from agentflow.errors import AgentflowError
from agentflow.runtime import CompiledGraph, NothingToReconcile, StepClaimed, UnknownOperation
from agentflow.runtime.lifecycle import deliver
from tests.chaos.workflow import NON_IDEMPOTENT, TRACE_ENV, Ledger, order_graph, order_input
from tests.runtime.shared_stores import SharedStore, opened, shared_store

__all__ = ["Figures", "Settings", "chaos", "verdict"]

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a run may take to finish once the kills are over.
DRAIN = 120.0
_POLL = 0.05


@dataclass(frozen=True)
class Settings:
    backend: str
    kills: int
    workers: int = 3
    #: Runs in flight at once (new ones are started as others finish).
    active: int = 12
    #: The graphs' claim_ttl, in seconds.
    lease: float = 1.5
    #: Seconds between two kills, drawn uniformly.
    gap: tuple[float, float] = (0.05, 0.4)
    seed: int = 0


@dataclass
class Figures:
    """What one chaos session did, and what the verdict found wrong (``violations``)."""

    backend: str
    kills: int = 0
    runs: int = 0
    done: int = 0
    sites: Counter[str] = field(default_factory=Counter)
    effects: int = 0
    duplicates: int = 0
    surfaced: int = 0
    retried: int = 0
    replayed: int = 0
    #: Operator decisions refused because a worker held the run at that moment.
    raced: int = 0
    idempotent_calls: int = 0
    idempotent_landed: int = 0
    model_calls: int = 0
    lost: int = 0
    #: Lifecycle events in the runs' event logs, once every run is done.
    events: int = 0
    #: Of those, left pending in a record's outbox by a kill after its last write
    #: (delivered by the next reader, as the runtime does for an ended run).
    events_pending: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)


def _site(line: str) -> tuple[str, tuple[str, str, int] | None]:
    """Where a process whose last trace line is ``line`` died, and the
    non-idempotent call it died inside of (``(thread, operation, attempt)``)."""
    words = line.split()
    if not words or words[0] in ("idle", "failed", "unavailable"):
        return "idle", None
    if words[0] == "node":
        where = {"enter": "before a call", "called": "after a call", "exit": "between steps"}
        return where[words[3]], None
    _, name, thread, operation, attempt, stage = words
    kind = "non-idempotent" if name in NON_IDEMPOTENT else name
    inside = (thread, operation, int(attempt)) if name in NON_IDEMPOTENT else None
    if stage == "sent":
        return f"inside {kind} call, before its effect", inside
    if stage == "landed":
        return f"inside {kind} call, after its effect", inside
    return f"inside {kind} call, returning its receipt", None  # journaled or not: either is fine


class Child:
    """One worker process, its trace and its log."""

    def __init__(self, store: SharedStore, settings: Settings, workdir: Path, n: int) -> None:
        self.trace = workdir / f"trace-{n}"
        self.log = workdir / f"log-{n}"
        env = {**os.environ, "PYTHONPATH": str(ROOT), TRACE_ENV: str(self.trace)}
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.child", *store.args, str(settings.lease)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )

    def last(self) -> str:
        try:
            lines = self.trace.read_text().splitlines()
        except FileNotFoundError:
            return ""
        return lines[-1] if lines else ""

    def busy(self) -> bool:
        return _site(self.last())[0] != "idle"

    def kill(self) -> str:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        return self.last()

    def exited(self) -> int | None:
        """The exit status, if the process ended on its own."""
        return self.process.poll()

    def stop(self) -> int:
        """Close stdin (the child's cue to leave) and wait for it."""
        stdin: IO[bytes] | None = self.process.stdin
        assert stdin is not None
        stdin.close()
        return self.process.wait(timeout=60)

    def failures(self) -> list[str]:
        try:
            lines = self.trace.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [line for line in lines if line.startswith("failed")]

    def stderr(self) -> str:
        return self.log.read_text()[-2000:]


class Session:
    """The parent's side: the runs it started, the operator, the children."""

    def __init__(
        self,
        settings: Settings,
        store: SharedStore,
        workdir: Path,
        *,
        runs: Store,
        graph: CompiledGraph,
        ledger: Ledger,
    ) -> None:
        self.settings = settings
        self.store = store
        self.workdir = workdir
        self.graph = graph
        #: The parent's own store: checkpoints and records of every run.
        self.runs = runs
        self.ledger = ledger
        self.rng = random.Random(settings.seed)
        self.figures = Figures(settings.backend)
        self.threads: list[str] = []
        self.finished: set[str] = set()
        #: Non-idempotent calls a kill landed inside of: each must be surfaced.
        self.died_inside: list[tuple[str, str, int]] = []
        self._spawned = 0
        #: Workers killed so far (their traces are read by the verdict).
        self.retired: list[Child] = []
        self.children = [self._spawn() for _ in range(settings.workers)]

    def _spawn(self) -> Child:
        self._spawned += 1
        return Child(self.store, self.settings, self.workdir, self._spawned)

    async def feed(self) -> None:
        """Start runs until :attr:`Settings.active` are in flight."""
        for thread in set(self.threads) - self.finished:
            latest = await self.runs.get(thread)
            if latest is not None and latest.done:
                self.finished.add(thread)
        while len(self.threads) - len(self.finished) < self.settings.active:
            thread = f"order-{len(self.threads):05d}"
            self.threads.append(thread)
            await self.graph.run(order_input(self.ledger.path), thread=thread)

    async def operate(self) -> None:
        """Settle every call a suspended run waits on, from what the ledger shows."""
        page = await self.runs.list_runs(status=CheckpointStatus.RECONCILIATION_REQUIRED, limit=500)
        for run in page.runs:
            record = await self.runs.load(run.key)
            assert record is not None
            for entry in record.journal(OperationKind.TOOL):
                if entry.state is not OperationState.AMBIGUOUS:
                    continue
                landed = self.ledger.landed(entry.idempotency_key or "")
                if landed is None:
                    decision = ReconciliationDecision.retry()
                else:
                    decision = ReconciliationDecision.replay_result({"effect": landed})
                try:
                    await self.graph.reconcile(
                        run.key, entry.operation_id, decision, attempt=entry.attempt
                    )
                except (NothingToReconcile, StepClaimed, UnknownOperation):
                    # a worker that read the run before it was suspended claimed it
                    # meanwhile (it finds the same call ambiguous and suspends again)
                    self.figures.raced += 1
                    continue
                except AgentflowError as exc:
                    now = await self.runs.load(run.key)
                    assert now is not None
                    self.figures.violations.append(
                        f"operator refused on {run.key}: {exc}; "
                        f"listed {run}, loaded {record}, now {now}"
                    )
                    continue
                self.ledger.decided(run.key, entry.operation_id, entry.attempt, decision.kind.value)

    def check_children(self) -> None:
        for i, child in enumerate(self.children):
            status = child.exited()
            if status is not None:
                self.figures.violations.append(
                    f"a worker exited on its own ({status}): {child.stderr()}"
                )
                self.children[i] = self._spawn()

    def kill_one(self) -> bool:
        busy = [i for i, child in enumerate(self.children) if child.busy()]
        if not busy:
            return False
        i = self.rng.choice(busy)
        where, inside = _site(self.children[i].kill())
        self.figures.sites[where] += 1
        self.figures.kills += 1
        if inside is not None:
            self.died_inside.append(inside)
        self.retired.append(self.children[i])
        self.children[i] = self._spawn()
        return True

    async def drive(self) -> None:
        next_kill = time.monotonic() + self.rng.uniform(*self.settings.gap)
        while self.figures.kills < self.settings.kills:
            await self.feed()
            await self.operate()
            self.check_children()
            if time.monotonic() >= next_kill and self.kill_one():
                next_kill = time.monotonic() + self.rng.uniform(*self.settings.gap)
            await asyncio.sleep(_POLL)
        deadline = time.monotonic() + DRAIN + self.settings.lease
        while len(self.finished) < len(self.threads) and time.monotonic() < deadline:
            await self.operate()
            self.check_children()
            for thread in set(self.threads) - self.finished:
                latest = await self.runs.get(thread)
                if latest is not None and latest.done:
                    self.finished.add(thread)
            await asyncio.sleep(_POLL)
        for child in self.children:
            status = child.stop()
            if status != 0:
                self.figures.violations.append(f"a worker ended with {status}: {child.stderr()}")
        for child in [*self.retired, *self.children]:
            self.figures.violations.extend(f"a worker could not run: {f}" for f in child.failures())


async def chaos(settings: Settings, workdir: Path) -> Figures:
    """One chaos session on ``settings.backend``, judged (see :func:`verdict`)."""
    started = time.monotonic()
    async with shared_store(settings.backend, workdir) as store:
        ledger = Ledger(workdir / "ledger.db")
        try:
            async with opened(*store.args) as runs:
                lease = timedelta(seconds=settings.lease)
                graph = order_graph().compile(runs, claim_ttl=lease)
                session = Session(settings, store, workdir, runs=runs, graph=graph, ledger=ledger)
                try:
                    await session.drive()
                finally:
                    for child in session.children:
                        if child.exited() is None:
                            child.kill()
                await verdict(session)
        finally:
            ledger.close()
    session.figures.seconds = time.monotonic() - started
    return session.figures


def _grouped(rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], list[tuple[Any, ...]]]:
    grouped: dict[tuple[Any, ...], list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        grouped[row[:2]].append(row[2:])
    return grouped


def _problems(session: Session, finals: dict[str, dict[str, Any]]) -> Iterator[str]:
    """Every way the ledger, the decisions and the final states break the promises."""
    ledger, figures = session.ledger, session.figures
    effects = _grouped(ledger.rows("SELECT thread, tool, id, attempt FROM effects"))
    calls = _grouped(
        ledger.rows(
            "SELECT thread, name, operation, attempt FROM calls WHERE kind = 'tool' ORDER BY id"
        )
    )
    decisions = {
        (thread, operation, attempt): decision
        for thread, operation, attempt, decision in ledger.rows(
            "SELECT thread, operation, attempt, decision FROM decisions"
        )
    }
    reservations = _grouped(ledger.rows("SELECT thread, 'reserve', idem FROM reservations"))
    for thread in session.threads:
        final = finals.get(thread)
        if final is None:
            figures.lost += 1
            yield f"{thread} was lost (not done)"
            continue
        for tool in NON_IDEMPOTENT:
            landed = effects.get((thread, tool), [])
            figures.effects += len(landed)
            figures.duplicates += max(0, len(landed) - 1)
            if len(landed) != 1:
                yield f"{thread}: {tool} landed {len(landed)} times"
            elif final.get(tool) != {"effect": landed[0][0]}:
                yield f"{thread}: {tool} receipt {final.get(tool)} is not the effect {landed[0]}"
            invoked = calls.get((thread, tool), [])
            if len(set(invoked)) != len(invoked):  # a kill may come before the ledger heard
                yield f"{thread}: {tool} was invoked twice in one attempt: {invoked}"
            for operation, attempt in invoked:
                if attempt > 1 and decisions.get((thread, operation, attempt - 1)) != "retry":
                    yield f"{thread}: {tool} attempt {attempt} was made without a retry decision"
        landed_reservations = reservations.get((thread, "reserve"), [])
        figures.idempotent_landed += len(landed_reservations)
        figures.idempotent_calls += len(calls.get((thread, "reserve"), []))
        if len(landed_reservations) != 1:
            yield f"{thread}: the idempotent call landed {len(landed_reservations)} times"
        elif final.get("reserve") != {"reserved": landed_reservations[0][0]}:
            yield f"{thread}: reserve receipt {final.get('reserve')} is not the reservation"
    for thread, operation, attempt in session.died_inside:
        if (thread, operation, attempt) not in decisions:
            yield f"{thread}: {operation} attempt {attempt} died in flight and was never surfaced"
    figures.surfaced = len(decisions)
    figures.retried = sum(1 for d in decisions.values() if d == "retry")
    figures.replayed = sum(1 for d in decisions.values() if d == "replay_success")
    (figures.model_calls,) = ledger.rows("SELECT COUNT(*) FROM calls WHERE kind = 'model'")[0]


async def verdict(session: Session) -> None:
    """Judge the session into its figures: ``violations`` lists every broken promise."""
    figures = session.figures
    figures.runs = len(session.threads)
    finals: dict[str, dict[str, Any]] = {}
    for thread in session.threads:
        latest = await session.runs.get(thread)
        record = await session.runs.load(thread)
        completed = record is not None and record.status is CheckpointStatus.COMPLETED
        if latest is not None and latest.done and completed:
            finals[thread] = dict(latest.state)
    figures.done = len(finals)
    figures.violations.extend(_problems(session, finals))
    figures.violations.extend(await _event_problems(session))


#: The lifecycle events every operator decision of the session implies, by its
#: (operation, attempt): the ambiguity, the wait for a decision, its resolution.
_DECIDED = ("operation_ambiguous", "reconciliation_required", "reconciliation_resolved")


async def _event_problems(session: Session) -> list[str]:
    """Every run's event log holds its creation and, for each decision the operator
    made, the events of the ambiguity it settled, each id once: nothing a kill
    interrupted is lost (pending events are delivered as the next reader would)."""
    figures, problems = session.figures, []
    decided: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for thread, operation, attempt in session.ledger.rows(
        "SELECT thread, operation, attempt FROM decisions"
    ):
        decided[thread].append((operation, attempt))
    for thread in session.threads:
        record = await session.runs.load(thread)
        if record is None:
            continue  # lost: reported as such
        pending = [entry for entry in record.event_outbox if entry.state == "pending"]
        figures.events_pending += len(pending)
        if pending:
            await deliver(session.runs, record, claim_token=None, batches=True)
        page = await session.runs.replay(thread, limit=10_000)
        ids = [event.event_id for event in page.events]
        figures.events += len(ids)
        if len(set(ids)) != len(ids):
            problems.append(f"{thread}: an event was accepted twice")
        expected = {stable_event_id(thread, "checkpoint_created", ["0"])}
        for operation, attempt in decided[thread]:
            coordinates = [operation, str(attempt)]
            expected |= {stable_event_id(thread, kind, coordinates) for kind in _DECIDED}
        missing = expected - set(ids)
        if missing:
            problems.append(f"{thread}: {len(missing)} lifecycle event(s) never delivered")
    return problems
