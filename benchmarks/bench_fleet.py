"""A worker fleet: 1, 2 and 4 worker processes finishing the same due timer runs.

Each round fills a fresh store with runs whose timer is due at once, then
spawns the workers, waits until each has connected, and lets them go
together; the round's time runs from the go to the last worker's exit. Each
run, once woken, makes one journaled call that appends a line ``RUN PID`` to
a ledger file (no lock, no deduplication), so a run woken twice shows as two
lines; after the round the ledger and the stored runs are read back:
duplicates and lost runs must both be 0, or the benchmark fails.

Contestants, interleaved round by round: the fleet (``Worker.run_once``, due
runs claimed in batches that other workers skip) and the scan the worker did
before (every worker lists every due run and resumes each, so the others'
claims lose). ``claim attempts`` counts the runs claimed in batches plus the
single claims tried; ``lost`` the single claims another worker won.

A second table runs a graph compiled with ``max_concurrent`` on 4 workers
whose woken runs each hold for a while: the peak of runs inside their node
at once (counted in PostgreSQL by the nodes themselves) and of live leases
(sampled from the records table) must stay within the limit.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from queue import Empty
from typing import Any

import asyncpg

from agentflow.checkpoint.store import Store
from agentflow.checkpoint.stores import open_store
from agentflow.runtime import CompiledGraph, ToolCall, Worker
from benchmarks.common import Table
from benchmarks.durable_backends import DSN, postgres_admin, postgres_schema
from benchmarks.durable_ledger import ledger_graph

#: Runs resumed at once by one worker.
CONCURRENCY = 4
LIMIT = 5
#: Seconds a woken run of the limit round holds inside its node.
HOLD = 0.05
#: Runs the parent creates at once.
_CREATING = 16
#: Seconds a worker with nothing left to do waits before it looks again.
_IDLE = 0.05


@dataclass(frozen=True)
class Place:
    """Where a round's store is: its URL, and the ledger file."""

    url: str
    ledger: str
    #: The schema holding the store (PostgreSQL), for the live counter and the sampler.
    schema: str | None = None


@dataclass(frozen=True)
class Job:
    """What a worker process is to do: where, how it claims, under which limit."""

    place: Place
    mode: str
    limit: int | None


@dataclass
class Report:
    """What one worker process did."""

    pid: int
    resumed: int = 0
    claimed: int = 0
    attempts: int = 0
    lost: int = 0
    passes: int = 0
    failed: list[str] = field(default_factory=list)
    peak: int = 0
    #: CPU seconds the process spent from the go to its exit.
    cpu: float = 0.0


def _append(ledger: str, line: str) -> None:
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _open(place: Place) -> Store:
    if place.schema is None:
        return open_store(place.url)
    from agentflow.checkpoint.postgres import PostgresCheckpointer

    return PostgresCheckpointer(DSN, schema=place.schema)


async def _scan(graph: CompiledGraph, store: Store, report: Report) -> tuple[int, int]:
    """One pass of the worker as it was: list every due run, resume each (4 at once)."""
    slots = asyncio.Semaphore(CONCURRENCY)
    resumed = taken = 0

    async def wake(thread: str, step: int) -> None:
        nonlocal resumed, taken
        async with slots:
            report.attempts += 1
            try:
                await graph.resume(thread, step=step)
                resumed += 1
            except Exception:  # another worker's claim won, or it moved on
                report.lost += 1
                taken += 1

    due = []
    cursor: str | None = None
    while True:
        page = await store.list_due(graph.clock(), limit=500, cursor=cursor)
        due.extend(page.threads)
        cursor = page.next_cursor
        if cursor is None:
            break
    await asyncio.gather(*(wake(info.thread, info.latest_step) for info in due))
    return resumed, taken


async def _work(job: Job, ready: Any, start: Event) -> Report:
    place, limit = job.place, job.limit
    report = Report(os.getpid())
    pool = await asyncpg.create_pool(DSN, min_size=1, max_size=4) if limit else None

    async def charge(call: ToolCall) -> dict[str, bool]:
        if pool is not None:  # the limit round: count the runs inside their node
            live = await pool.fetchval(f'UPDATE "{place.schema}".live SET n = n + 1 RETURNING n')
            report.peak = max(report.peak, live)
            await asyncio.sleep(HOLD)
            await pool.execute(f'UPDATE "{place.schema}".live SET n = n - 1')
        _append(place.ledger, f"{call.arguments['run']} {report.pid}\n")
        return {"charged": True}

    try:
        async with _open(place) as store:
            graph = ledger_graph(charge).compile(store, max_concurrent=limit)
            worker = Worker([graph], concurrency=CONCURRENCY)
            await store.list_threads_page(limit=1)  # connected before the clock starts
            ready.put(report.pid)
            start.wait()
            began = time.process_time()
            while True:
                report.cpu = time.process_time() - began
                report.passes += 1
                if job.mode == "scan":
                    resumed, taken = await _scan(graph, store, report)
                else:
                    outcome = await worker.run_once()
                    resumed, taken = len(outcome.resumed), len(outcome.taken)
                    report.claimed += outcome.claimed
                    report.attempts += outcome.attempts
                    report.lost += outcome.lost
                    report.failed.extend(f"{t}: {e}" for t, e in outcome.failed)
                report.resumed += resumed
                if not resumed and not taken:
                    return report  # nothing due, nothing held by another worker
                if not resumed:
                    await asyncio.sleep(_IDLE)
    finally:
        if pool is not None:
            await pool.close()


def worker_main(job: Job, ready: Any, start: Event, out: Any) -> None:
    """A spawned worker process: say it is ready, then work until nothing is due."""
    out.put(asyncio.run(_work(job, ready, start)))


def _thread(index: int) -> str:
    return f"run-{index:05}"


async def _create(place: Place, runs: int) -> None:
    async def never(call: ToolCall) -> None:
        raise AssertionError("a run makes no call before its timer is due")

    async with _open(place) as store:
        graph = ledger_graph(never).compile(store)
        slots = asyncio.Semaphore(_CREATING)

        async def create(index: int) -> None:
            async with slots:
                await graph.run({"calls": 1}, thread=_thread(index))

        await asyncio.gather(*(create(i) for i in range(runs)))


@dataclass
class Round:
    """One round's measure and audit."""

    wall: float
    reports: list[Report]
    duplicates: int
    lost_runs: int
    peak_leases: int = 0

    @property
    def attempts(self) -> int:
        return sum(r.claimed + r.attempts for r in self.reports)

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.reports)

    @property
    def cpu(self) -> float:
        return sum(r.cpu for r in self.reports)


def _ledger_counts(ledger: str) -> dict[str, int]:
    """How many lines of the ledger each run wrote."""
    counts: dict[str, int] = {}
    if os.path.exists(ledger):
        with open(ledger) as lines:
            for line in lines:
                run = line.split()[0]
                counts[run] = counts.get(run, 0) + 1
    return counts


async def _audit(place: Place, runs: int) -> tuple[int, int]:
    counts = await asyncio.to_thread(_ledger_counts, place.ledger)
    duplicates = sum(n - 1 for n in counts.values())
    lost = 0
    async with _open(place) as store:
        for index in range(runs):
            latest = await store.get(_thread(index))
            if latest is None or not latest.done or counts.get(_thread(index)) is None:
                lost += 1
    return duplicates, lost


async def _sample_leases(place: Place, stop: asyncio.Event) -> int:
    """The most records holding a live lease at once, sampled until ``stop``."""
    conn = await asyncpg.connect(DSN)
    peak = 0
    try:
        while not stop.is_set():
            live = await conn.fetchval(
                f'SELECT count(*) FROM "{place.schema}".checkpoints_durable_runs'
                " WHERE claim_token IS NOT NULL AND lease_expires_at_ms >"
                " floor(extract(epoch FROM clock_timestamp()) * 1000)"
            )
            peak = max(peak, live)
            await asyncio.sleep(0.002)
    finally:
        await conn.close()
    return peak


async def _round(place: Place, runs: int, workers: int, mode: str, limit: int | None) -> Round:
    await _create(place, runs)
    job = Job(place, mode, limit)
    context = multiprocessing.get_context("spawn")
    ready, start, out = context.Queue(), context.Event(), context.Queue()
    processes = [
        context.Process(target=worker_main, args=(job, ready, start, out)) for _ in range(workers)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        await _receive(ready, processes)
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_leases(place, stop)) if limit else None
    began = time.perf_counter()
    start.set()
    reports: list[Report] = [await _receive(out, processes) for _ in processes]
    wall = time.perf_counter() - began
    stop.set()
    peak = await sampler if sampler is not None else 0
    for process in processes:
        process.join()
    duplicates, lost = await _audit(place, runs)
    result = Round(wall, reports, duplicates, lost, peak)
    failed = [line for report in reports for line in report.failed]
    if duplicates or lost or failed:
        raise AssertionError(
            f"{mode} x{workers}: {duplicates} duplicates, {lost} lost, {failed[:3]}"
        )
    return result


async def _receive(queue: Any, processes: list[Any]) -> Any:
    """The next message from a worker; raises if a worker died without sending it."""
    while True:
        try:
            return await asyncio.to_thread(queue.get, timeout=1.0)
        except Empty:
            dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a worker process exited with {dead[0]}") from None


@asynccontextmanager
async def _place(store: str, scratch: Path, name: str) -> AsyncIterator[Place]:
    ledger = str(scratch / f"{name}.ledger")
    if store == "SQLite":
        yield Place(f"sqlite:///{scratch / name}.db", ledger)
        return
    async with postgres_schema() as schema:
        await postgres_admin(f'CREATE TABLE "{schema}".live (n int NOT NULL)')
        await postgres_admin(f'INSERT INTO "{schema}".live VALUES (0)')
        yield Place(DSN, ledger, schema)


#: (store, mode, workers) of the throughput table, in the order each round runs them.
_CONTESTANTS = [
    ("PostgreSQL", "fleet", 1),
    ("PostgreSQL", "scan", 1),
    ("PostgreSQL", "fleet", 2),
    ("PostgreSQL", "fleet", 4),
    ("PostgreSQL", "scan", 4),
    ("SQLite", "fleet", 1),
    ("SQLite", "fleet", 4),
]


async def run(quick: bool) -> list[Table]:
    runs, rounds = (300, 1) if quick else (1_500, 3)
    results: dict[tuple[str, str, int], list[Round]] = {c: [] for c in _CONTESTANTS}
    with tempfile.TemporaryDirectory(prefix="agentflow-bench-fleet-") as folder:
        scratch = Path(folder)
        for round_index in range(rounds):
            order = _CONTESTANTS if round_index % 2 == 0 else list(reversed(_CONTESTANTS))
            for contestant in order:
                store, mode, workers = contestant
                name = f"r{round_index}-{store}-{mode}-{workers}"
                async with _place(store, scratch, name) as place:
                    results[contestant].append(await _round(place, runs, workers, mode, None))
        limited: list[Round] = []
        for round_index in range(rounds):
            async with _place("PostgreSQL", scratch, f"limit{round_index}") as place:
                limited.append(await _round(place, runs // 5, 4, "fleet", LIMIT))
    peaks = [max(r.peak for r in x.reports) for x in limited] + [x.peak_leases for x in limited]
    if max(peaks) > LIMIT:
        raise AssertionError(f"max_concurrent={LIMIT} was exceeded: peaks {peaks}")
    return [_throughput(runs, rounds, results), _limit_table(runs // 5, limited)]


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _throughput(runs: int, rounds: int, results: dict[tuple[str, str, int], list[Round]]) -> Table:
    table = Table(
        f"Worker fleet: {runs:,} due timer runs, 1 journaled call each, worker processes "
        f"started together (median of {rounds})",
        [
            "store",
            "workers",
            "claiming",
            "wall time",
            "runs/s",
            "time vs 1 worker",
            "worker CPU per run",
            "claim attempts",
            "lost",
            "duplicates",
            "lost runs",
        ],
    )
    for (store, mode, workers), rounds_of in results.items():
        single = results.get((store, mode, 1)) or results[(store, "fleet", 1)]
        wall = _median([r.wall for r in rounds_of])
        attempts = _median([r.attempts for r in rounds_of])
        lost = _median([r.lost for r in rounds_of])
        share = f"{lost / attempts:.1%}" if attempts else "-"
        table.rows.append(
            [
                store,
                str(workers),
                "batches (claim_due)" if mode == "fleet" else "scan + resume (before)",
                f"{wall:.2f} s",
                f"{runs / wall:,.0f}",
                f"{wall / _median([r.wall for r in single]):.2f}x",
                f"{_median([r.cpu for r in rounds_of]) / runs * 1000:.2f} ms",
                f"{attempts:,.0f}",
                f"{lost:,.0f} ({share})",
                str(max(r.duplicates for r in rounds_of)),
                str(max(r.lost_runs for r in rounds_of)),
            ]
        )
    table.notes += [
        f"each worker process drives {CONCURRENCY} runs at once; PostgreSQL "
        "synchronous_commit=on, SQLite WAL synchronous=FULL (one host)",
        "claim attempts: runs claimed in batches plus single claims tried; lost: single "
        "claims another worker won (batches skip held runs and never lose)",
        "duplicates and lost runs come from a ledger file each woken run appends to, read "
        "back after the round; either above 0 fails the benchmark",
    ]
    return table


def _limit_table(runs: int, limited: list[Round]) -> Table:
    wall = _median([r.wall for r in limited])
    inside = max(max(report.peak for report in x.reports) for x in limited)
    return Table(
        f"max_concurrent={LIMIT} across 4 worker processes: {runs:,} due runs, each "
        f"holding {HOLD * 1000:.0f} ms in its node",
        ["measure", "value"],
        [
            ["wall time (median)", f"{wall:.2f} s"],
            ["runs/s", f"{runs / wall:,.0f}"],
            ["peak runs inside their node at once", str(inside)],
            ["peak live leases (sampled every 2 ms)", str(max(r.peak_leases for r in limited))],
            ["duplicates", str(max(r.duplicates for r in limited))],
            ["lost runs", str(max(r.lost_runs for r in limited))],
        ],
        [
            f"the limit ({LIMIT}) is counted in PostgreSQL when a batch is claimed, under an "
            "advisory lock per graph; a peak above it fails the benchmark",
        ],
    )
